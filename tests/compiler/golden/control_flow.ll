; ModuleID = 'control_flow'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @control_flow(i32 addrspace(1)* noalias align 16 %n, i64 %n.shape0, i64 %n.stride0, i64 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca i32 addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store i32 addrspace(1)* %n, i32 addrspace(1)** %slot
  store i64 %n.shape0, i64* %slot.1
  store i64 %n.stride0, i64* %slot.2
  %slot.3 = alloca i64 addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  store i64 addrspace(1)* %out, i64 addrspace(1)** %slot.3
  store i64 %out.shape0, i64* %slot.4
  store i64 %out.stride0, i64* %slot.5
  %slot.6 = alloca i64
  store i64 0, i64* %slot.6
  %slot.7 = alloca i64
  store i64 0, i64* %slot.7
  %slot.8 = alloca i64
  store i64 0, i64* %slot.8
  %slot.9 = alloca i64
  store i64 0, i64* %slot.9
  %range = alloca i64
  br label %body

body:
  %r = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %v = zext i32 %r to i64
  %r.1 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %v.1 = zext i32 %r.1 to i64
  %r.2 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v.2 = zext i32 %r.2 to i64
  %v.3 = mul i64 %v, %v.1
  %v.4 = add i64 %v.3, %v.2
  store i64 %v.4, i64* %slot.6
  %v.5 = load i64, i64* %slot.6
  %v.6 = load i32 addrspace(1)*, i32 addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp sge i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  ret void

if.end:
  store i64 0, i64* %slot.7
  store i64 0, i64* %slot.8
  br label %while.cond

dead:
  br label %if.end

while.cond:
  br i1 true, label %while.body, label %while.end

while.body:
  %v.9 = load i64, i64* %slot.8
  %v.10 = add i64 %v.9, 1
  store i64 %v.10, i64* %slot.8
  %v.11 = load i64, i64* %slot.8
  %v.12 = load i32 addrspace(1)*, i32 addrspace(1)** %slot
  %v.13 = load i64, i64* %slot.1
  %v.14 = load i64, i64* %slot.2
  %v.15 = load i64, i64* %slot.6
  %p = getelementptr inbounds i32, i32 addrspace(1)* %v.12, i64 %v.15
  %v.16 = load i32, i32 addrspace(1)* %p, align 4, !invariant.load !0
  %v.17 = sext i32 %v.16 to i64
  %c.1 = icmp sgt i64 %v.11, %v.17
  br i1 %c.1, label %if.then.1, label %if.end.1

while.end:
  store i64 10, i64* %range
  br label %for.cond

if.then.1:
  br label %while.end

if.end.1:
  %v.18 = load i64, i64* %slot.8
  %v.19 = srem i64 %v.18, 3
  %c.2 = icmp ne i64 %v.19, 0
  %v.20 = xor i64 %v.19, 3
  %c.3 = icmp slt i64 %v.20, 0
  %v.21 = and i1 %c.2, %c.3
  %v.22 = add i64 %v.19, 3
  %v.23 = select i1 %v.21, i64 %v.22, i64 %v.19
  %c.4 = icmp eq i64 %v.23, 0
  br i1 %c.4, label %if.then.2, label %if.end.2

dead.1:
  br label %if.end.1

if.then.2:
  br label %while.cond

if.end.2:
  %v.24 = load i64, i64* %slot.7
  %v.25 = load i64, i64* %slot.8
  %v.26 = add i64 %v.24, %v.25
  store i64 %v.26, i64* %slot.7
  br label %while.cond

dead.2:
  br label %if.end.2

for.cond:
  %v.27 = load i64, i64* %range
  %c.5 = icmp sgt i64 %v.27, 0
  br i1 %c.5, label %for.body, label %for.end

for.body:
  store i64 %v.27, i64* %slot.9
  %v.28 = load i64, i64* %slot.7
  %v.29 = load i64, i64* %slot.9
  %v.30 = add i64 %v.28, %v.29
  store i64 %v.30, i64* %slot.7
  br label %for.incr

for.incr:
  %v.31 = load i64, i64* %range
  %v.32 = add i64 %v.31, -3
  store i64 %v.32, i64* %range
  br label %for.cond

for.end:
  %v.33 = load i64, i64* %slot.7
  %c.6 = icmp sgt i64 %v.33, 100
  br i1 %c.6, label %if.then.3, label %if.else

if.then.3:
  %v.34 = load i64, i64* %slot.7
  %v.35 = sub i64 %v.34, 100
  store i64 %v.35, i64* %slot.7
  br label %if.end.3

if.end.3:
  %v.41 = load i64, i64* %slot.7
  %v.42 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.43 = load i64, i64* %slot.4
  %v.44 = load i64, i64* %slot.5
  %v.45 = load i64, i64* %slot.6
  %p.1 = getelementptr inbounds i64, i64 addrspace(1)* %v.42, i64 %v.45
  store i64 %v.41, i64 addrspace(1)* %p.1, align 8
  ret void

if.else:
  %v.36 = load i64, i64* %slot.7
  %c.7 = icmp sgt i64 %v.36, 50
  br i1 %c.7, label %if.then.4, label %if.else.1

if.then.4:
  %v.37 = load i64, i64* %slot.7
  %v.38 = sub i64 %v.37, 50
  store i64 %v.38, i64* %slot.7
  br label %if.end.4

if.end.4:
  br label %if.end.3

if.else.1:
  %v.39 = load i64, i64* %slot.7
  %v.40 = add i64 %v.39, 1
  store i64 %v.40, i64* %slot.7
  br label %if.end.4
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (i32 addrspace(1)*, i64, i64, i64 addrspace(1)*, i64, i64)* @control_flow, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
