; ModuleID = 'tuples_and_shapes'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @tuples_and_shapes(float addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.shape1, i64 %a.shape2, i64 %a.stride0, i64 %a.stride1, i64 %a.stride2, i64 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca float addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  %slot.3 = alloca i64
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  %slot.6 = alloca i64
  store float addrspace(1)* %a, float addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.shape1, i64* %slot.2
  store i64 %a.shape2, i64* %slot.3
  store i64 %a.stride0, i64* %slot.4
  store i64 %a.stride1, i64* %slot.5
  store i64 %a.stride2, i64* %slot.6
  %slot.7 = alloca i64 addrspace(1)*
  %slot.8 = alloca i64
  %slot.9 = alloca i64
  store i64 addrspace(1)* %out, i64 addrspace(1)** %slot.7
  store i64 %out.shape0, i64* %slot.8
  store i64 %out.stride0, i64* %slot.9
  %slot.10 = alloca i64
  store i64 0, i64* %slot.10
  %slot.11 = alloca i64
  %slot.12 = alloca i64
  %slot.13 = alloca i64
  store i64 0, i64* %slot.11
  store i64 0, i64* %slot.12
  store i64 0, i64* %slot.13
  %slot.14 = alloca i64
  store i64 0, i64* %slot.14
  %slot.15 = alloca i64
  store i64 0, i64* %slot.15
  %slot.16 = alloca i64
  store i64 0, i64* %slot.16
  %slot.17 = alloca i64
  %slot.18 = alloca i64
  store i64 0, i64* %slot.17
  store i64 0, i64* %slot.18
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
  store i64 %v.4, i64* %slot.10
  %v.5 = load i64, i64* %slot.10
  %c = icmp eq i64 %v.5, 0
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.6 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %v.9 = load i64, i64* %slot.3
  %v.10 = load i64, i64* %slot.4
  %v.11 = load i64, i64* %slot.5
  %v.12 = load i64, i64* %slot.6
  store i64 %v.7, i64* %slot.11
  store i64 %v.8, i64* %slot.12
  store i64 %v.9, i64* %slot.13
  %v.13 = load i64, i64* %slot.11
  %v.14 = load i64, i64* %slot.12
  %v.15 = load i64, i64* %slot.13
  store i64 %v.13, i64* %slot.14
  store i64 %v.14, i64* %slot.15
  store i64 %v.15, i64* %slot.16
  %v.16 = load i64, i64* %slot.14
  %v.17 = load i64, i64* %slot.15
  %v.18 = mul i64 %v.17, 2
  store i64 %v.16, i64* %slot.17
  store i64 %v.18, i64* %slot.18
  %v.19 = load i64, i64* %slot.14
  %v.20 = load i64, i64* %slot.15
  %v.21 = mul i64 %v.19, %v.20
  %v.22 = load i64, i64* %slot.16
  %v.23 = mul i64 %v.21, %v.22
  %v.24 = add i64 %v.23, 2
  %v.25 = load i64, i64* %slot.17
  %v.26 = load i64, i64* %slot.18
  %v.27 = add i64 %v.24, %v.26
  %v.28 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.29 = load i64, i64* %slot.1
  %v.30 = load i64, i64* %slot.2
  %v.31 = load i64, i64* %slot.3
  %v.32 = load i64, i64* %slot.4
  %v.33 = load i64, i64* %slot.5
  %v.34 = load i64, i64* %slot.6
  %v.35 = mul i64 %v.29, %v.30
  %v.36 = mul i64 %v.35, %v.31
  %v.37 = add i64 %v.27, %v.36
  %v.38 = add i64 %v.37, 3
  %v.39 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.7
  %v.40 = load i64, i64* %slot.8
  %v.41 = load i64, i64* %slot.9
  %p = getelementptr inbounds i64, i64 addrspace(1)* %v.39, i64 0
  store i64 %v.38, i64 addrspace(1)* %p, align 8
  %v.42 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.43 = load i64, i64* %slot.1
  %v.44 = load i64, i64* %slot.2
  %v.45 = load i64, i64* %slot.3
  %v.46 = load i64, i64* %slot.4
  %v.47 = load i64, i64* %slot.5
  %v.48 = load i64, i64* %slot.6
  %v.49 = mul i64 %v.46, 4
  %v.50 = mul i64 %v.47, 4
  %v.51 = mul i64 %v.48, 4
  %v.52 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.53 = load i64, i64* %slot.1
  %v.54 = load i64, i64* %slot.2
  %v.55 = load i64, i64* %slot.3
  %v.56 = load i64, i64* %slot.4
  %v.57 = load i64, i64* %slot.5
  %v.58 = load i64, i64* %slot.6
  %v.59 = mul i64 %v.56, 4
  %v.60 = mul i64 %v.57, 4
  %v.61 = mul i64 %v.58, 4
  %v.62 = add i64 %v.49, %v.61
  %v.63 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.7
  %v.64 = load i64, i64* %slot.8
  %v.65 = load i64, i64* %slot.9
  %p.1 = getelementptr inbounds i64, i64 addrspace(1)* %v.63, i64 1
  store i64 %v.62, i64 addrspace(1)* %p.1, align 8
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!0}
!nvvmir.version = !{!1}

!0 = !{void (float addrspace(1)*, i64, i64, i64, i64, i64, i64, i64 addrspace(1)*, i64, i64)* @tuples_and_shapes, !"kernel", i32 1}
!1 = !{i32 2, i32 0}
