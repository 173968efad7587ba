; ModuleID = 'grid_stride_scale'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @grid_stride_scale(double addrspace(1)* noalias align 16 %x, i64 %x.shape0, i64 %x.stride0, double %factor) nounwind {
entry:
  %slot = alloca double addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store double addrspace(1)* %x, double addrspace(1)** %slot
  store i64 %x.shape0, i64* %slot.1
  store i64 %x.stride0, i64* %slot.2
  %slot.3 = alloca double
  store double %factor, double* %slot.3
  %slot.4 = alloca i64
  store i64 0, i64* %slot.4
  %slot.5 = alloca i64
  store i64 0, i64* %slot.5
  %slot.6 = alloca i64
  store i64 0, i64* %slot.6
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
  store i64 %v.4, i64* %slot.4
  %r.3 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %v.5 = zext i32 %r.3 to i64
  %r.4 = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %v.6 = zext i32 %r.4 to i64
  %v.7 = mul i64 %v.5, %v.6
  store i64 %v.7, i64* %slot.5
  %v.8 = load i64, i64* %slot.4
  %v.9 = load double addrspace(1)*, double addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.5
  store i64 %v.8, i64* %range
  br label %for.cond

for.cond:
  %v.13 = load i64, i64* %range
  %c = icmp slt i64 %v.13, %v.10
  %c.1 = icmp sgt i64 %v.13, %v.10
  %c.2 = icmp sgt i64 %v.12, 0
  %v.14 = select i1 %c.2, i1 %c, i1 %c.1
  br i1 %v.14, label %for.body, label %for.end

for.body:
  store i64 %v.13, i64* %slot.6
  %v.15 = load double addrspace(1)*, double addrspace(1)** %slot
  %v.16 = load i64, i64* %slot.1
  %v.17 = load i64, i64* %slot.2
  %v.18 = load i64, i64* %slot.6
  %v.19 = mul i64 %v.18, %v.17
  %p = getelementptr inbounds double, double addrspace(1)* %v.15, i64 %v.19
  %v.20 = load double, double addrspace(1)* %p, align 8
  %v.21 = load double, double* %slot.3
  %v.22 = fmul double %v.20, %v.21
  %v.23 = fadd double %v.22, 0x3FD0000000000000
  %v.24 = load double addrspace(1)*, double addrspace(1)** %slot
  %v.25 = load i64, i64* %slot.1
  %v.26 = load i64, i64* %slot.2
  %v.27 = load i64, i64* %slot.6
  %v.28 = mul i64 %v.27, %v.26
  %p.1 = getelementptr inbounds double, double addrspace(1)* %v.24, i64 %v.28
  store double %v.23, double addrspace(1)* %p.1, align 8
  br label %for.incr

for.incr:
  %v.29 = load i64, i64* %range
  %v.30 = add i64 %v.29, %v.12
  store i64 %v.30, i64* %range
  br label %for.cond

for.end:
  ret void
}

!nvvm.annotations = !{!0}
!nvvmir.version = !{!1}

!0 = !{void (double addrspace(1)*, i64, i64, double)* @grid_stride_scale, !"kernel", i32 1}
!1 = !{i32 2, i32 0}
