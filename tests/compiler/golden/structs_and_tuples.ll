; ModuleID = 'structs_and_tuples'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @structs_and_tuples({float, [4 x i8], i64, i8, [7 x i8]} %p, {float, [4 x i8], double} %w, i32 %t, double %t.1, double addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca {float, [4 x i8], i64, i8, [7 x i8]}
  store {float, [4 x i8], i64, i8, [7 x i8]} %p, {float, [4 x i8], i64, i8, [7 x i8]}* %slot
  %slot.1 = alloca {float, [4 x i8], double}
  store {float, [4 x i8], double} %w, {float, [4 x i8], double}* %slot.1
  %slot.2 = alloca i32
  %slot.3 = alloca double
  store i32 %t, i32* %slot.2
  store double %t.1, double* %slot.3
  %slot.4 = alloca double addrspace(1)*
  %slot.5 = alloca i64
  %slot.6 = alloca i64
  store double addrspace(1)* %out, double addrspace(1)** %slot.4
  store i64 %out.shape0, i64* %slot.5
  store i64 %out.stride0, i64* %slot.6
  %slot.7 = alloca i64
  store i64 0, i64* %slot.7
  %slot.8 = alloca i32
  store i32 0, i32* %slot.8
  %slot.9 = alloca double
  store double 0x0000000000000000, double* %slot.9
  %slot.10 = alloca double
  store double 0x0000000000000000, double* %slot.10
  %slot.11 = alloca double
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
  store i64 %v.4, i64* %slot.7
  %v.5 = load i64, i64* %slot.7
  %v.6 = load double addrspace(1)*, double addrspace(1)** %slot.4
  %v.7 = load i64, i64* %slot.5
  %v.8 = load i64, i64* %slot.6
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load i32, i32* %slot.2
  %v.10 = load double, double* %slot.3
  store i32 %v.9, i32* %slot.8
  store double %v.10, double* %slot.9
  %v.11 = load {float, [4 x i8], i64, i8, [7 x i8]}, {float, [4 x i8], i64, i8, [7 x i8]}* %slot
  %v.12 = extractvalue {float, [4 x i8], i64, i8, [7 x i8]} %v.11, 3
  %c.1 = icmp ne i8 %v.12, 0
  br i1 %c.1, label %ifexp.then, label %ifexp.else

if.end:
  ret void

ifexp.then:
  %v.13 = load {float, [4 x i8], i64, i8, [7 x i8]}, {float, [4 x i8], i64, i8, [7 x i8]}* %slot
  %v.14 = extractvalue {float, [4 x i8], i64, i8, [7 x i8]} %v.13, 0
  %v.15 = load {float, [4 x i8], i64, i8, [7 x i8]}, {float, [4 x i8], i64, i8, [7 x i8]}* %slot
  %v.16 = extractvalue {float, [4 x i8], i64, i8, [7 x i8]} %v.15, 2
  %v.17 = fpext float %v.14 to double
  %v.18 = sitofp i64 %v.16 to double
  %v.19 = fmul double %v.17, %v.18
  store double %v.19, double* %slot.11
  br label %ifexp.end

ifexp.else:
  store double 0xBFF0000000000000, double* %slot.11
  br label %ifexp.end

ifexp.end:
  %v.20 = load double, double* %slot.11
  store double %v.20, double* %slot.10
  %v.21 = load double, double* %slot.10
  %v.22 = load {float, [4 x i8], double}, {float, [4 x i8], double}* %slot.1
  %v.23 = extractvalue {float, [4 x i8], double} %v.22, 0
  %v.24 = load i64, i64* %slot.7
  %v.25 = fpext float %v.23 to double
  %v.26 = sitofp i64 %v.24 to double
  %v.27 = fmul double %v.25, %v.26
  %v.28 = fadd double %v.21, %v.27
  %v.29 = load {float, [4 x i8], double}, {float, [4 x i8], double}* %slot.1
  %v.30 = extractvalue {float, [4 x i8], double} %v.29, 2
  %v.31 = fsub double %v.28, %v.30
  %v.32 = load i32, i32* %slot.8
  %v.33 = load double, double* %slot.9
  %v.34 = sitofp i32 %v.32 to double
  %v.35 = fmul double %v.34, %v.33
  %v.36 = fadd double %v.31, %v.35
  %v.37 = load double addrspace(1)*, double addrspace(1)** %slot.4
  %v.38 = load i64, i64* %slot.5
  %v.39 = load i64, i64* %slot.6
  %v.40 = load i64, i64* %slot.7
  %p.1 = getelementptr inbounds double, double addrspace(1)* %v.37, i64 %v.40
  store double %v.36, double addrspace(1)* %p.1, align 8
  br label %if.end
}

!nvvm.annotations = !{!0}
!nvvmir.version = !{!1}

!0 = !{void ({float, [4 x i8], i64, i8, [7 x i8]}, {float, [4 x i8], double}, i32, double, double addrspace(1)*, i64, i64)* @structs_and_tuples, !"kernel", i32 1}
!1 = !{i32 2, i32 0}
