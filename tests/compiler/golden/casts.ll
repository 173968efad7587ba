; ModuleID = 'casts'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @casts(double addrspace(1)* noalias align 16 %x, i64 %x.shape0, i64 %x.stride0, i64 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.shape1, i64 %out.stride0, i64 %out.stride1) nounwind {
entry:
  %slot = alloca double addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store double addrspace(1)* %x, double addrspace(1)** %slot
  store i64 %x.shape0, i64* %slot.1
  store i64 %x.stride0, i64* %slot.2
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
  %slot.9 = alloca double
  store double 0x0000000000000000, double* %slot.9
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
  %v.6 = load double addrspace(1)*, double addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load double addrspace(1)*, double addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.8
  %p = getelementptr inbounds double, double addrspace(1)* %v.9, i64 %v.12
  %v.13 = load double, double addrspace(1)* %p, align 8, !invariant.load !0
  store double %v.13, double* %slot.9
  %v.14 = load double, double* %slot.9
  %v.15 = fptosi double %v.14 to i32
  %v.16 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.17 = load i64, i64* %slot.4
  %v.18 = load i64, i64* %slot.5
  %v.19 = load i64, i64* %slot.6
  %v.20 = load i64, i64* %slot.7
  %v.21 = load i64, i64* %slot.8
  %v.22 = mul i64 %v.21, %v.18
  %v.23 = add i64 %v.22, 0
  %p.1 = getelementptr inbounds i64, i64 addrspace(1)* %v.16, i64 %v.23
  %v.24 = sext i32 %v.15 to i64
  store i64 %v.24, i64 addrspace(1)* %p.1, align 8
  %v.25 = load double, double* %slot.9
  %v.26 = fptosi double %v.25 to i32
  %v.27 = trunc i32 %v.26 to i8
  %v.28 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.29 = load i64, i64* %slot.4
  %v.30 = load i64, i64* %slot.5
  %v.31 = load i64, i64* %slot.6
  %v.32 = load i64, i64* %slot.7
  %v.33 = load i64, i64* %slot.8
  %v.34 = mul i64 %v.33, %v.30
  %v.35 = add i64 %v.34, 1
  %p.2 = getelementptr inbounds i64, i64 addrspace(1)* %v.28, i64 %v.35
  %v.36 = sext i8 %v.27 to i64
  store i64 %v.36, i64 addrspace(1)* %p.2, align 8
  %v.37 = load double, double* %slot.9
  %v.38 = fptosi double %v.37 to i64
  %v.39 = and i64 %v.38, 65535
  %v.40 = trunc i64 %v.39 to i32
  %v.41 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.42 = load i64, i64* %slot.4
  %v.43 = load i64, i64* %slot.5
  %v.44 = load i64, i64* %slot.6
  %v.45 = load i64, i64* %slot.7
  %v.46 = load i64, i64* %slot.8
  %v.47 = mul i64 %v.46, %v.43
  %v.48 = add i64 %v.47, 2
  %p.3 = getelementptr inbounds i64, i64 addrspace(1)* %v.41, i64 %v.48
  %v.49 = zext i32 %v.40 to i64
  store i64 %v.49, i64 addrspace(1)* %p.3, align 8
  %v.50 = load double, double* %slot.9
  %v.51 = fptrunc double %v.50 to float
  %v.52 = fmul float %v.51, 0x4000000000000000
  %v.53 = fptosi float %v.52 to i64
  %v.54 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.55 = load i64, i64* %slot.4
  %v.56 = load i64, i64* %slot.5
  %v.57 = load i64, i64* %slot.6
  %v.58 = load i64, i64* %slot.7
  %v.59 = load i64, i64* %slot.8
  %v.60 = mul i64 %v.59, %v.56
  %v.61 = add i64 %v.60, 3
  %p.4 = getelementptr inbounds i64, i64 addrspace(1)* %v.54, i64 %v.61
  store i64 %v.53, i64 addrspace(1)* %p.4, align 8
  %v.62 = load double, double* %slot.9
  %c.1 = fcmp ogt double %v.62, 0x0000000000000000
  %v.63 = zext i1 %c.1 to i64
  %v.64 = zext i1 true to i64
  %v.65 = add i64 %v.63, %v.64
  %v.66 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.67 = load i64, i64* %slot.4
  %v.68 = load i64, i64* %slot.5
  %v.69 = load i64, i64* %slot.6
  %v.70 = load i64, i64* %slot.7
  %v.71 = load i64, i64* %slot.8
  %v.72 = mul i64 %v.71, %v.68
  %v.73 = add i64 %v.72, 4
  %p.5 = getelementptr inbounds i64, i64 addrspace(1)* %v.66, i64 %v.73
  store i64 %v.65, i64 addrspace(1)* %p.5, align 8
  %v.74 = load double, double* %slot.9
  %v.75 = fptrunc double %v.74 to half
  %v.76 = fptosi half %v.75 to i16
  %v.77 = load i64 addrspace(1)*, i64 addrspace(1)** %slot.3
  %v.78 = load i64, i64* %slot.4
  %v.79 = load i64, i64* %slot.5
  %v.80 = load i64, i64* %slot.6
  %v.81 = load i64, i64* %slot.7
  %v.82 = load i64, i64* %slot.8
  %v.83 = mul i64 %v.82, %v.79
  %v.84 = add i64 %v.83, 5
  %p.6 = getelementptr inbounds i64, i64 addrspace(1)* %v.77, i64 %v.84
  %v.85 = sext i16 %v.76 to i64
  store i64 %v.85, i64 addrspace(1)* %p.6, align 8
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (double addrspace(1)*, i64, i64, i64 addrspace(1)*, i64, i64, i64, i64)* @casts, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
