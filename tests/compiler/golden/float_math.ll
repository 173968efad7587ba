; ModuleID = 'float_math'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare double @__nv_ceil(double) nounwind
declare double @__nv_copysign(double, double) nounwind
declare double @__nv_cos(double) nounwind
declare double @__nv_erf(double) nounwind
declare double @__nv_exp(double) nounwind
declare double @__nv_fabs(double) nounwind
declare double @__nv_floor(double) nounwind
declare double @__nv_fmod(double, double) nounwind
declare i32 @__nv_isnand(double) nounwind
declare double @__nv_log(double) nounwind
declare double @__nv_pow(double, double) nounwind
declare double @__nv_sin(double) nounwind
declare double @__nv_sqrt(double) nounwind
declare double @__nv_tanh(double) nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @float_math(double addrspace(1)* noalias align 16 %x, i64 %x.shape0, i64 %x.stride0, double addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.shape1, i64 %out.stride0, i64 %out.stride1) nounwind {
entry:
  %slot = alloca double addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store double addrspace(1)* %x, double addrspace(1)** %slot
  store i64 %x.shape0, i64* %slot.1
  store i64 %x.stride0, i64* %slot.2
  %slot.3 = alloca double addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  %slot.6 = alloca i64
  %slot.7 = alloca i64
  store double addrspace(1)* %out, double addrspace(1)** %slot.3
  store i64 %out.shape0, i64* %slot.4
  store i64 %out.shape1, i64* %slot.5
  store i64 %out.stride0, i64* %slot.6
  store i64 %out.stride1, i64* %slot.7
  %slot.8 = alloca i64
  store i64 0, i64* %slot.8
  %slot.9 = alloca double
  store double 0x0000000000000000, double* %slot.9
  %slot.10 = alloca double
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
  %r.3 = call double @__nv_fabs(double %v.14)
  %r.4 = call double @__nv_sqrt(double %r.3)
  %v.15 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.16 = load i64, i64* %slot.4
  %v.17 = load i64, i64* %slot.5
  %v.18 = load i64, i64* %slot.6
  %v.19 = load i64, i64* %slot.7
  %v.20 = load i64, i64* %slot.8
  %v.21 = mul i64 %v.20, %v.17
  %v.22 = add i64 %v.21, 0
  %p.1 = getelementptr inbounds double, double addrspace(1)* %v.15, i64 %v.22
  store double %r.4, double addrspace(1)* %p.1, align 8
  %v.23 = load double, double* %slot.9
  %r.5 = call double @__nv_exp(double %v.23)
  %v.24 = load double, double* %slot.9
  %r.6 = call double @__nv_fabs(double %v.24)
  %v.25 = fadd double %r.6, 0x3FF0000000000000
  %r.7 = call double @__nv_log(double %v.25)
  %v.26 = fsub double %r.5, %r.7
  %v.27 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.28 = load i64, i64* %slot.4
  %v.29 = load i64, i64* %slot.5
  %v.30 = load i64, i64* %slot.6
  %v.31 = load i64, i64* %slot.7
  %v.32 = load i64, i64* %slot.8
  %v.33 = mul i64 %v.32, %v.29
  %v.34 = add i64 %v.33, 1
  %p.2 = getelementptr inbounds double, double addrspace(1)* %v.27, i64 %v.34
  store double %v.26, double addrspace(1)* %p.2, align 8
  %v.35 = load double, double* %slot.9
  %r.8 = call double @__nv_sin(double %v.35)
  %v.36 = load double, double* %slot.9
  %r.9 = call double @__nv_cos(double %v.36)
  %v.37 = fmul double %r.8, %r.9
  %v.38 = load double, double* %slot.9
  %r.10 = call double @__nv_tanh(double %v.38)
  %v.39 = fadd double %v.37, %r.10
  %v.40 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.41 = load i64, i64* %slot.4
  %v.42 = load i64, i64* %slot.5
  %v.43 = load i64, i64* %slot.6
  %v.44 = load i64, i64* %slot.7
  %v.45 = load i64, i64* %slot.8
  %v.46 = mul i64 %v.45, %v.42
  %v.47 = add i64 %v.46, 2
  %p.3 = getelementptr inbounds double, double addrspace(1)* %v.40, i64 %v.47
  store double %v.39, double addrspace(1)* %p.3, align 8
  %v.48 = load double, double* %slot.9
  %r.11 = call double @__nv_fabs(double %v.48)
  %r.12 = call double @__nv_pow(double %r.11, double 0x3FF8000000000000)
  %v.49 = load double, double* %slot.9
  %r.13 = call double @__nv_erf(double %v.49)
  %v.50 = fadd double %r.12, %r.13
  %v.51 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.52 = load i64, i64* %slot.4
  %v.53 = load i64, i64* %slot.5
  %v.54 = load i64, i64* %slot.6
  %v.55 = load i64, i64* %slot.7
  %v.56 = load i64, i64* %slot.8
  %v.57 = mul i64 %v.56, %v.53
  %v.58 = add i64 %v.57, 3
  %p.4 = getelementptr inbounds double, double addrspace(1)* %v.51, i64 %v.58
  store double %v.50, double addrspace(1)* %p.4, align 8
  %v.59 = load double, double* %slot.9
  %r.14 = call double @__nv_floor(double %v.59)
  %v.60 = fptosi double %r.14 to i64
  %v.61 = load double, double* %slot.9
  %r.15 = call double @__nv_ceil(double %v.61)
  %v.62 = fptosi double %r.15 to i64
  %v.63 = add i64 %v.60, %v.62
  %v.64 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.65 = load i64, i64* %slot.4
  %v.66 = load i64, i64* %slot.5
  %v.67 = load i64, i64* %slot.6
  %v.68 = load i64, i64* %slot.7
  %v.69 = load i64, i64* %slot.8
  %v.70 = mul i64 %v.69, %v.66
  %v.71 = add i64 %v.70, 4
  %p.5 = getelementptr inbounds double, double addrspace(1)* %v.64, i64 %v.71
  %v.72 = sitofp i64 %v.63 to double
  store double %v.72, double addrspace(1)* %p.5, align 8
  %v.73 = load double, double* %slot.9
  %r.16 = call double @__nv_fmod(double %v.73, double 0x3FE8000000000000)
  %v.74 = fsub double %v.73, %r.16
  %v.75 = fdiv double %v.74, 0x3FE8000000000000
  %c.1 = fcmp olt double %r.16, 0x0000000000000000
  %c.2 = fcmp olt double 0x3FE8000000000000, 0x0000000000000000
  %v.76 = xor i1 %c.1, %c.2
  %c.3 = fcmp une double %r.16, 0x0000000000000000
  %v.77 = and i1 %c.3, %v.76
  %v.78 = fsub double %v.75, 0x3FF0000000000000
  %v.79 = select i1 %v.77, double %v.78, double %v.75
  %r.17 = call double @__nv_floor(double %v.79)
  %v.80 = fsub double %v.79, %r.17
  %c.4 = fcmp ogt double %v.80, 0x3FE0000000000000
  %v.81 = fadd double %r.17, 0x3FF0000000000000
  %v.82 = select i1 %c.4, double %v.81, double %r.17
  %v.83 = fdiv double %v.73, 0x3FE8000000000000
  %r.18 = call double @__nv_copysign(double 0x0000000000000000, double %v.83)
  %c.5 = fcmp une double %v.79, 0x0000000000000000
  %v.84 = select i1 %c.5, double %v.82, double %r.18
  %v.85 = load double, double* %slot.9
  %r.19 = call double @__nv_fmod(double %v.85, double 0x3FE8000000000000)
  %c.6 = fcmp une double %r.19, 0x0000000000000000
  %c.7 = fcmp olt double %r.19, 0x0000000000000000
  %c.8 = fcmp olt double 0x3FE8000000000000, 0x0000000000000000
  %v.86 = xor i1 %c.7, %c.8
  %v.87 = and i1 %c.6, %v.86
  %v.88 = fadd double %r.19, 0x3FE8000000000000
  %v.89 = select i1 %v.87, double %v.88, double %r.19
  %r.20 = call double @__nv_copysign(double 0x0000000000000000, double 0x3FE8000000000000)
  %c.9 = fcmp oeq double %v.89, 0x0000000000000000
  %v.90 = select i1 %c.9, double %r.20, double %v.89
  %v.91 = fadd double %v.84, %v.90
  %v.92 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.93 = load i64, i64* %slot.4
  %v.94 = load i64, i64* %slot.5
  %v.95 = load i64, i64* %slot.6
  %v.96 = load i64, i64* %slot.7
  %v.97 = load i64, i64* %slot.8
  %v.98 = mul i64 %v.97, %v.94
  %v.99 = add i64 %v.98, 5
  %p.6 = getelementptr inbounds double, double addrspace(1)* %v.92, i64 %v.99
  store double %v.91, double addrspace(1)* %p.6, align 8
  %v.100 = load double, double* %slot.9
  %v.101 = fmul double %v.100, %v.100
  %v.102 = load double, double* %slot.9
  %r.21 = call double @__nv_pow(double 0x4000000000000000, double %v.102)
  %v.103 = fadd double %v.101, %r.21
  %v.104 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.105 = load i64, i64* %slot.4
  %v.106 = load i64, i64* %slot.5
  %v.107 = load i64, i64* %slot.6
  %v.108 = load i64, i64* %slot.7
  %v.109 = load i64, i64* %slot.8
  %v.110 = mul i64 %v.109, %v.106
  %v.111 = add i64 %v.110, 6
  %p.7 = getelementptr inbounds double, double addrspace(1)* %v.104, i64 %v.111
  store double %v.103, double addrspace(1)* %p.7, align 8
  %v.112 = load double, double* %slot.9
  %r.22 = call i32 @__nv_isnand(double %v.112)
  %c.10 = icmp ne i32 %r.22, 0
  %v.113 = xor i1 %c.10, true
  br i1 %v.113, label %ifexp.then, label %ifexp.else

if.end:
  ret void

ifexp.then:
  %v.114 = load double, double* %slot.9
  %v.115 = fmul double 0x400921FB54442D18, %v.114
  store double %v.115, double* %slot.10
  br label %ifexp.end

ifexp.else:
  store double 0x0000000000000000, double* %slot.10
  br label %ifexp.end

ifexp.end:
  %v.116 = load double, double* %slot.10
  %v.117 = load double addrspace(1)*, double addrspace(1)** %slot.3
  %v.118 = load i64, i64* %slot.4
  %v.119 = load i64, i64* %slot.5
  %v.120 = load i64, i64* %slot.6
  %v.121 = load i64, i64* %slot.7
  %v.122 = load i64, i64* %slot.8
  %v.123 = mul i64 %v.122, %v.119
  %v.124 = add i64 %v.123, 7
  %p.8 = getelementptr inbounds double, double addrspace(1)* %v.117, i64 %v.124
  store double %v.116, double addrspace(1)* %p.8, align 8
  br label %if.end
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (double addrspace(1)*, i64, i64, double addrspace(1)*, i64, i64, i64, i64)* @float_math, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
