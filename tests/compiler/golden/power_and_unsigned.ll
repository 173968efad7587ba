; ModuleID = 'power_and_unsigned'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @power_and_unsigned(i64 addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.stride0, i32 addrspace(1)* noalias align 16 %e, i64 %e.shape0, i64 %e.stride0, i64 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca i64 addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store i64 addrspace(1)* %a, i64 addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.stride0, i64* %slot.2
  %slot.3 = alloca i32 addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  store i32 addrspace(1)* %e, i32 addrspace(1)** %slot.3
  store i64 %e.shape0, i64* %slot.4
  store i64 %e.stride0, i64* %slot.5
  %slot.6 = alloca i64 addrspace(1)*
  %slot.7 = alloca i64
  %slot.8 = alloca i64
  store i64 addrspace(1)* %out, i64 addrspace(1)** %slot.6
  store i64 %out.shape0, i64* %slot.7
  store i64 %out.stride0, i64* %slot.8
  %slot.9 = alloca i64
  store i64 0, i64* %slot.9
  %pow.acc = alloca i64
  %pow.base = alloca i64
  %pow.exp = alloca i64
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
  store i64 %v.4, i64* %slot.9
  %v.5 = load i64, i64* %slot.9
  %v.6 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.9
  %p = getelementptr inbounds i64, i64 addrspace(1)* %v.9, i64 %v.12
  %v.13 = load i64, i64 addrspace(1)* %p, align 8, !invariant.load !0
  %v.14 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.3
  %v.15 = load i64, i64* %slot.4
  %v.16 = load i64, i64* %slot.5
  %v.17 = load i64, i64* %slot.9
  %p.1 = getelementptr inbounds i32, i32 addrspace(1)* %v.14, i64 %v.17
  %v.18 = load i32, i32 addrspace(1)* %p.1, align 4, !invariant.load !0
  %v.19 = sext i32 %v.18 to i64
  store i64 1, i64* %pow.acc
  store i64 %v.13, i64* %pow.base
  store i64 %v.19, i64* %pow.exp
  br label %pow.cond

if.end:
  ret void

pow.cond:
  %v.20 = load i64, i64* %pow.exp
  %c.1 = icmp ugt i64 %v.20, 0
  br i1 %c.1, label %pow.body, label %pow.end

pow.body:
  %v.21 = load i64, i64* %pow.acc
  %v.22 = load i64, i64* %pow.base
  %v.23 = and i64 %v.20, 1
  %c.2 = icmp ne i64 %v.23, 0
  %v.24 = mul i64 %v.21, %v.22
  %v.25 = select i1 %c.2, i64 %v.24, i64 %v.21
  store i64 %v.25, i64* %pow.acc
  %v.26 = mul i64 %v.22, %v.22
  store i64 %v.26, i64* %pow.base
  %v.27 = lshr i64 %v.20, 1
  store i64 %v.27, i64* %pow.exp
  br label %pow.cond

pow.end:
  %v.28 = load i64, i64* %pow.exp
  %v.29 = load i64, i64* %pow.acc
  %v.30 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.31 = load i64, i64* %slot.1
  %v.32 = load i64, i64* %slot.2
  %v.33 = load i64, i64* %slot.9
  %p.2 = getelementptr inbounds i64, i64 addrspace(1)* %v.30, i64 %v.33
  %v.34 = load i64, i64 addrspace(1)* %p.2, align 8, !invariant.load !0
  %v.35 = udiv i64 %v.34, 3
  %v.36 = add i64 %v.29, %v.35
  %v.37 = load i64 addrspace(1)*, i64 addrspace(1)** %slot
  %v.38 = load i64, i64* %slot.1
  %v.39 = load i64, i64* %slot.2
  %v.40 = load i64, i64* %slot.9
  %p.3 = getelementptr inbounds i64, i64 addrspace(1)* %v.37, i64 %v.40
  %v.41 = load i64, i64 addrspace(1)* %p.3, align 8, !invariant.load !0
  %v.42 = urem i64 %v.41, 5
  %v.43 = add i64 %v.36, %v.42
  %v.44 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.6
  %v.45 = load i64, i64* %slot.7
  %v.46 = load i64, i64* %slot.8
  %v.47 = load i64, i64* %slot.9
  %p.4 = getelementptr inbounds i64, i64 addrspace(1)* %v.44, i64 %v.47
  store i64 %v.43, i64 addrspace(1)* %p.4, align 8
  br label %if.end
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (i64 addrspace(1)*, i64, i64, i32 addrspace(1)*, i64, i64, i64 addrspace(1)*, i64, i64)* @power_and_unsigned, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
