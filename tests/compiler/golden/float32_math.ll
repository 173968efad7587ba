; ModuleID = 'float32_math'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_atan2f(float, float) nounwind
declare float @__nv_expf(float) nounwind
declare float @__nv_fabsf(float) nounwind
declare float @__nv_sqrtf(float) nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @float32_math(float addrspace(1)* noalias align 16 %x, i64 %x.shape0, i64 %x.stride0, float addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca float addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store float addrspace(1)* %x, float addrspace(1)** %slot
  store i64 %x.shape0, i64* %slot.1
  store i64 %x.stride0, i64* %slot.2
  %slot.3 = alloca float addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  store float addrspace(1)* %out, float addrspace(1)** %slot.3
  store i64 %out.shape0, i64* %slot.4
  store i64 %out.stride0, i64* %slot.5
  %slot.6 = alloca i64
  store i64 0, i64* %slot.6
  %slot.7 = alloca float
  store float 0x0000000000000000, float* %slot.7
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
  %v.6 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.6
  %p = getelementptr inbounds float, float addrspace(1)* %v.9, i64 %v.12
  %v.13 = load float, float addrspace(1)* %p, align 4, !invariant.load !0
  store float %v.13, float* %slot.7
  %v.14 = load float, float* %slot.7
  %r.3 = call float @__nv_fabsf(float %v.14)
  %r.4 = call float @__nv_sqrtf(float %r.3)
  %v.15 = load float, float* %slot.7
  %v.16 = fptrunc double 0x3FE0000000000000 to float
  %v.17 = fmul float %v.15, %v.16
  %r.5 = call float @__nv_expf(float %v.17)
  %v.18 = fadd float %r.4, %r.5
  %v.19 = load float, float* %slot.7
  %v.20 = fptrunc double 0x4000000000000000 to float
  %r.6 = call float @__nv_atan2f(float %v.19, float %v.20)
  %v.21 = fadd float %v.18, %r.6
  %v.22 = load float addrspace(1)*, float addrspace(1)** %slot.3
  %v.23 = load i64, i64* %slot.4
  %v.24 = load i64, i64* %slot.5
  %v.25 = load i64, i64* %slot.6
  %p.1 = getelementptr inbounds float, float addrspace(1)* %v.22, i64 %v.25
  store float %v.21, float addrspace(1)* %p.1, align 4
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (float addrspace(1)*, i64, i64, float addrspace(1)*, i64, i64)* @float32_math, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
