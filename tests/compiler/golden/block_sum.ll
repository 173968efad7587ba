; ModuleID = 'block_sum'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare void @llvm.nvvm.barrier0() convergent nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @block_sum(float addrspace(1)* noalias align 16 %x, i64 %x.shape0, i64 %x.stride0, float addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
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
  %slot.6 = alloca i32
  store i32 0, i32* %slot.6
  %slot.7 = alloca float
  store float 0x0000000000000000, float* %slot.7
  %slot.8 = alloca i32
  store i32 0, i32* %slot.8
  br label %body

body:
  %r = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %r.1 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %v = mul i32 %r, %r.1
  %r.2 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %v.1 = add i32 %v, %r.2
  store i32 %v.1, i32* %slot.6
  store float 0x0000000000000000, float* %slot.7
  %v.2 = load i32, i32* %slot.6
  store i32 %v.2, i32* %slot.8
  br label %while.cond

while.cond:
  %v.3 = load i32, i32* %slot.8
  %v.4 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.5 = load i64, i64* %slot.1
  %v.6 = load i64, i64* %slot.2
  %v.7 = sext i32 %v.3 to i64
  %c = icmp slt i64 %v.7, %v.5
  br i1 %c, label %while.body, label %while.end

while.body:
  %v.8 = load float, float* %slot.7
  %v.9 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i32, i32* %slot.8
  %v.13 = sext i32 %v.12 to i64
  %p = getelementptr inbounds float, float addrspace(1)* %v.9, i64 %v.13
  %v.14 = load float, float addrspace(1)* %p, align 4, !invariant.load !0
  %v.15 = fadd float %v.8, %v.14
  store float %v.15, float* %slot.7
  %v.16 = load i32, i32* %slot.8
  %r.3 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %v.17 = mul i32 %r.3, 4
  %v.18 = add i32 %v.16, %v.17
  store i32 %v.18, i32* %slot.8
  br label %while.cond

while.end:
  call void @llvm.nvvm.barrier0()
  %v.19 = load i32, i32* %slot.6
  %v.20 = load float addrspace(1)*, float addrspace(1)** %slot.3
  %v.21 = load i64, i64* %slot.4
  %v.22 = load i64, i64* %slot.5
  %v.23 = sext i32 %v.19 to i64
  %c.1 = icmp slt i64 %v.23, %v.21
  br i1 %c.1, label %if.then, label %if.end

if.then:
  %v.24 = load float, float* %slot.7
  %v.25 = load float addrspace(1)*, float addrspace(1)** %slot.3
  %v.26 = load i64, i64* %slot.4
  %v.27 = load i64, i64* %slot.5
  %v.28 = load i32, i32* %slot.6
  %v.29 = sext i32 %v.28 to i64
  %p.1 = getelementptr inbounds float, float addrspace(1)* %v.25, i64 %v.29
  store float %v.24, float addrspace(1)* %p.1, align 4
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (float addrspace(1)*, i64, i64, float addrspace(1)*, i64, i64)* @block_sum, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
