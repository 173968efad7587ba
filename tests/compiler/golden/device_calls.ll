; ModuleID = 'device_calls'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @device_calls(i64 addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.stride0, i64 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.shape1, i64 %out.stride0, i64 %out.stride1) nounwind {
entry:
  %slot = alloca i64 addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store i64 addrspace(1)* %a, i64 addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.stride0, i64* %slot.2
  %slot.3 = alloca i64 addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  %slot.6 = alloca i64
  %slot.7 = alloca i64
  store i64 addrspace(1)* %out, i64 addrspace(1)** %slot.3
  store i64 %out.shape0, i64* %slot.4
  store i64 %out.shape1, i64* %slot.5
  store i64 %out.stride0, i64* %slot.6
  store i64 %out.stride1, i64* %slot.7
  %slot.8 = alloca i64
  store i64 0, i64* %slot.8
  %slot.9 = alloca i64
  store i64 0, i64* %slot.9
  %slot.10 = alloca i64
  store i64 0, i64* %slot.10
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
  store i64 %v.4, i64* %slot.8
  %v.5 = load i64, i64* %slot.8
  %v.6 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.8
  %p = getelementptr inbounds i64, i64 addrspace(1)* %v.9, i64 %v.12
  %v.13 = load i64, i64 addrspace(1)* %p, align 8, !invariant.load !0
  %r.3 = call {i64, i64} @div_mod(i64 %v.13, i64 7)
  %v.14 = extractvalue {i64, i64} %r.3, 0
  %v.15 = extractvalue {i64, i64} %r.3, 1
  store i64 %v.14, i64* %slot.9
  store i64 %v.15, i64* %slot.10
  %v.16 = load i64, i64* %slot.9
  %v.17 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.18 = load i64, i64* %slot.4
  %v.19 = load i64, i64* %slot.5
  %v.20 = load i64, i64* %slot.6
  %v.21 = load i64, i64* %slot.7
  %v.22 = load i64, i64* %slot.8
  %v.23 = mul i64 %v.22, %v.19
  %v.24 = add i64 %v.23, 0
  %p.1 = getelementptr inbounds i64, i64 addrspace(1)* %v.17, i64 %v.24
  store i64 %v.16, i64 addrspace(1)* %p.1, align 8
  %v.25 = load i64, i64* %slot.10
  %v.26 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.27 = load i64, i64* %slot.4
  %v.28 = load i64, i64* %slot.5
  %v.29 = load i64, i64* %slot.6
  %v.30 = load i64, i64* %slot.7
  %v.31 = load i64, i64* %slot.8
  %v.32 = mul i64 %v.31, %v.28
  %v.33 = add i64 %v.32, 1
  %p.2 = getelementptr inbounds i64, i64 addrspace(1)* %v.26, i64 %v.33
  store i64 %v.25, i64 addrspace(1)* %p.2, align 8
  %v.34 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.35 = load i64, i64* %slot.1
  %v.36 = load i64, i64* %slot.2
  %v.37 = load i64, i64* %slot.8
  %p.3 = getelementptr inbounds i64, i64 addrspace(1)* %v.34, i64 %v.37
  %v.38 = load i64, i64 addrspace(1)* %p.3, align 8, !invariant.load !0
  %r.4 = call i64 @clamp(i64 %v.38, i64 -10, i64 10)
  %v.39 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.40 = load i64, i64* %slot.4
  %v.41 = load i64, i64* %slot.5
  %v.42 = load i64, i64* %slot.6
  %v.43 = load i64, i64* %slot.7
  %v.44 = load i64, i64* %slot.8
  %v.45 = mul i64 %v.44, %v.41
  %v.46 = add i64 %v.45, 2
  %p.4 = getelementptr inbounds i64, i64 addrspace(1)* %v.39, i64 %v.46
  store i64 %r.4, i64 addrspace(1)* %p.4, align 8
  br label %if.end

if.end:
  ret void
}

define internal {i64, i64} @div_mod(i64 %a, i64 %b) alwaysinline nounwind {
entry:
  %slot = alloca i64
  store i64 %a, i64* %slot
  %slot.1 = alloca i64
  store i64 %b, i64* %slot.1
  br label %body

body:
  %v = load i64, i64* %slot
  %v.1 = load i64, i64* %slot.1
  %v.2 = sdiv i64 %v, %v.1
  %v.3 = srem i64 %v, %v.1
  %c = icmp ne i64 %v.3, 0
  %v.4 = xor i64 %v.3, %v.1
  %c.1 = icmp slt i64 %v.4, 0
  %v.5 = and i1 %c, %c.1
  %v.6 = zext i1 %v.5 to i64
  %v.7 = sub i64 %v.2, %v.6
  %v.8 = load i64, i64* %slot
  %v.9 = load i64, i64* %slot.1
  %v.10 = srem i64 %v.8, %v.9
  %c.2 = icmp ne i64 %v.10, 0
  %v.11 = xor i64 %v.10, %v.9
  %c.3 = icmp slt i64 %v.11, 0
  %v.12 = and i1 %c.2, %c.3
  %v.13 = add i64 %v.10, %v.9
  %v.14 = select i1 %v.12, i64 %v.13, i64 %v.10
  %v.15 = insertvalue {i64, i64} undef, i64 %v.7, 0
  %v.16 = insertvalue {i64, i64} %v.15, i64 %v.14, 1
  ret {i64, i64} %v.16

dead:
  ret {i64, i64} zeroinitializer
}

define internal i64 @clamp(i64 %x, i64 %lo, i64 %hi) alwaysinline nounwind {
entry:
  %slot = alloca i64
  store i64 %x, i64* %slot
  %slot.1 = alloca i64
  store i64 %lo, i64* %slot.1
  %slot.2 = alloca i64
  store i64 %hi, i64* %slot.2
  br label %body

body:
  %v = load i64, i64* %slot
  %v.1 = load i64, i64* %slot.1
  %c = icmp sgt i64 %v.1, %v
  %v.2 = select i1 %c, i64 %v.1, i64 %v
  %v.3 = load i64, i64* %slot.2
  %c.1 = icmp slt i64 %v.3, %v.2
  %v.4 = select i1 %c.1, i64 %v.3, i64 %v.2
  ret i64 %v.4

dead:
  ret i64 0
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (i64 addrspace(1)*, i64, i64, i64 addrspace(1)*, i64, i64, i64, i64)* @device_calls, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
