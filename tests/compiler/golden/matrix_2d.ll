; ModuleID = 'matrix_2d'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.y() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.y() nounwind

define void @matrix_2d(float addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.shape1, i64 %a.stride0, i64 %a.stride1, float addrspace(1)* noalias align 16 %b, i64 %b.shape0, i64 %b.shape1, i64 %b.stride0, i64 %b.stride1, float addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.shape1, i64 %out.stride0, i64 %out.stride1) nounwind {
entry:
  %slot = alloca float addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  %slot.3 = alloca i64
  %slot.4 = alloca i64
  store float addrspace(1)* %a, float addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.shape1, i64* %slot.2
  store i64 %a.stride0, i64* %slot.3
  store i64 %a.stride1, i64* %slot.4
  %slot.5 = alloca float addrspace(1)*
  %slot.6 = alloca i64
  %slot.7 = alloca i64
  %slot.8 = alloca i64
  %slot.9 = alloca i64
  store float addrspace(1)* %b, float addrspace(1)** %slot.5
  store i64 %b.shape0, i64* %slot.6
  store i64 %b.shape1, i64* %slot.7
  store i64 %b.stride0, i64* %slot.8
  store i64 %b.stride1, i64* %slot.9
  %slot.10 = alloca float addrspace(1)*
  %slot.11 = alloca i64
  %slot.12 = alloca i64
  %slot.13 = alloca i64
  %slot.14 = alloca i64
  store float addrspace(1)* %out, float addrspace(1)** %slot.10
  store i64 %out.shape0, i64* %slot.11
  store i64 %out.shape1, i64* %slot.12
  store i64 %out.stride0, i64* %slot.13
  store i64 %out.stride1, i64* %slot.14
  %slot.15 = alloca i64
  store i64 0, i64* %slot.15
  %slot.16 = alloca i64
  store i64 0, i64* %slot.16
  %boolop = alloca i1
  %slot.17 = alloca float
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
  %r.3 = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
  %v.5 = zext i32 %r.3 to i64
  %r.4 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.y()
  %v.6 = zext i32 %r.4 to i64
  %r.5 = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  %v.7 = zext i32 %r.5 to i64
  %v.8 = mul i64 %v.5, %v.6
  %v.9 = add i64 %v.8, %v.7
  store i64 %v.4, i64* %slot.15
  store i64 %v.9, i64* %slot.16
  %v.10 = load i64, i64* %slot.15
  %v.11 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.12 = load i64, i64* %slot.1
  %v.13 = load i64, i64* %slot.2
  %v.14 = load i64, i64* %slot.3
  %v.15 = load i64, i64* %slot.4
  %c = icmp slt i64 %v.10, %v.12
  store i1 %c, i1* %boolop
  br i1 %c, label %bool.next, label %bool.end

bool.end:
  %v.22 = load i1, i1* %boolop
  br i1 %v.22, label %if.then, label %if.end

bool.next:
  %v.16 = load i64, i64* %slot.16
  %v.17 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.18 = load i64, i64* %slot.1
  %v.19 = load i64, i64* %slot.2
  %v.20 = load i64, i64* %slot.3
  %v.21 = load i64, i64* %slot.4
  %c.1 = icmp slt i64 %v.16, %v.19
  store i1 %c.1, i1* %boolop
  br label %bool.end

if.then:
  %v.23 = load i64, i64* %slot.15
  %v.24 = load i64, i64* %slot.16
  %c.2 = icmp ne i64 %v.23, %v.24
  br i1 %c.2, label %ifexp.then, label %ifexp.else

if.end:
  ret void

ifexp.then:
  %v.25 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.26 = load i64, i64* %slot.1
  %v.27 = load i64, i64* %slot.2
  %v.28 = load i64, i64* %slot.3
  %v.29 = load i64, i64* %slot.4
  %v.30 = load i64, i64* %slot.15
  %v.31 = load i64, i64* %slot.16
  %v.32 = mul i64 %v.30, %v.27
  %v.33 = add i64 %v.32, %v.31
  %p = getelementptr inbounds float, float addrspace(1)* %v.25, i64 %v.33
  %v.34 = load float, float addrspace(1)* %p, align 4, !invariant.load !0
  %v.35 = load float addrspace(1)*, float addrspace(1)** %slot.5
  %v.36 = load i64, i64* %slot.6
  %v.37 = load i64, i64* %slot.7
  %v.38 = load i64, i64* %slot.8
  %v.39 = load i64, i64* %slot.9
  %v.40 = load i64, i64* %slot.16
  %v.41 = load i64, i64* %slot.15
  %v.42 = mul i64 %v.41, %v.36
  %v.43 = add i64 %v.42, %v.40
  %p.1 = getelementptr inbounds float, float addrspace(1)* %v.35, i64 %v.43
  %v.44 = load float, float addrspace(1)* %p.1, align 4, !invariant.load !0
  %v.45 = fmul float %v.34, %v.44
  store float %v.45, float* %slot.17
  br label %ifexp.end

ifexp.else:
  %v.46 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.47 = load i64, i64* %slot.1
  %v.48 = load i64, i64* %slot.2
  %v.49 = load i64, i64* %slot.3
  %v.50 = load i64, i64* %slot.4
  %v.51 = sitofp i64 %v.48 to float
  store float %v.51, float* %slot.17
  br label %ifexp.end

ifexp.end:
  %v.52 = load float, float* %slot.17
  %v.53 = load float addrspace(1)*, float addrspace(1)** %slot.10
  %v.54 = load i64, i64* %slot.11
  %v.55 = load i64, i64* %slot.12
  %v.56 = load i64, i64* %slot.13
  %v.57 = load i64, i64* %slot.14
  %v.58 = load i64, i64* %slot.15
  %v.59 = load i64, i64* %slot.16
  %v.60 = mul i64 %v.58, %v.56
  %v.61 = mul i64 %v.59, %v.57
  %v.62 = add i64 %v.60, %v.61
  %p.2 = getelementptr inbounds float, float addrspace(1)* %v.53, i64 %v.62
  store float %v.52, float addrspace(1)* %p.2, align 4
  br label %if.end
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (float addrspace(1)*, i64, i64, i64, i64, float addrspace(1)*, i64, i64, i64, i64, float addrspace(1)*, i64, i64, i64, i64)* @matrix_2d, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
