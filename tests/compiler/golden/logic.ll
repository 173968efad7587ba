; ModuleID = 'logic'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @logic(float addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.stride0, float addrspace(1)* noalias align 16 %b, i64 %b.shape0, i64 %b.stride0, i8 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca float addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store float addrspace(1)* %a, float addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.stride0, i64* %slot.2
  %slot.3 = alloca float addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  store float addrspace(1)* %b, float addrspace(1)** %slot.3
  store i64 %b.shape0, i64* %slot.4
  store i64 %b.stride0, i64* %slot.5
  %slot.6 = alloca i8 addrspace(1)*
  %slot.7 = alloca i64
  %slot.8 = alloca i64
  store i8 addrspace(1)* %out, i8 addrspace(1)** %slot.6
  store i64 %out.shape0, i64* %slot.7
  store i64 %out.stride0, i64* %slot.8
  %slot.9 = alloca i64
  store i64 0, i64* %slot.9
  %slot.10 = alloca float
  store float 0x0000000000000000, float* %slot.10
  %slot.11 = alloca float
  store float 0x0000000000000000, float* %slot.11
  %slot.12 = alloca i1
  %boolop = alloca i1
  %boolop.1 = alloca i1
  %cmp = alloca i1
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
  %v.6 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load float addrspace(1)*, float addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.9
  %p = getelementptr inbounds float, float addrspace(1)* %v.9, i64 %v.12
  %v.13 = load float, float addrspace(1)* %p, align 4, !invariant.load !0
  store float %v.13, float* %slot.10
  %v.14 = load float addrspace(1)*, float addrspace(1)** %slot.3
  %v.15 = load i64, i64* %slot.4
  %v.16 = load i64, i64* %slot.5
  %v.17 = load i64, i64* %slot.9
  %p.1 = getelementptr inbounds float, float addrspace(1)* %v.14, i64 %v.17
  %v.18 = load float, float addrspace(1)* %p.1, align 4, !invariant.load !0
  store float %v.18, float* %slot.11
  %v.19 = load float, float* %slot.10
  %c.1 = fcmp une float %v.19, 0x0000000000000000
  br i1 %c.1, label %ifexp.then, label %ifexp.else

if.end:
  ret void

ifexp.then:
  %v.20 = load float, float* %slot.10
  %v.21 = load float, float* %slot.11
  %c.2 = fcmp olt float %v.20, %v.21
  store i1 %c.2, i1* %cmp
  br i1 %c.2, label %cmp.next, label %cmp.end

ifexp.else:
  %v.29 = load float, float* %slot.11
  %c.6 = fcmp oge float %v.29, 0x0000000000000000
  store i1 %c.6, i1* %slot.12
  br label %ifexp.end

ifexp.end:
  %v.30 = load i1, i1* %slot.12
  %v.31 = load i8 addrspace(1)*, i8 addrspace(1)** %slot.6
  %v.32 = load i64, i64* %slot.7
  %v.33 = load i64, i64* %slot.8
  %v.34 = load i64, i64* %slot.9
  %p.2 = getelementptr inbounds i8, i8 addrspace(1)* %v.31, i64 %v.34
  %v.35 = zext i1 %v.30 to i8
  store i8 %v.35, i8 addrspace(1)* %p.2, align 1
  br label %if.end

bool.end:
  %v.28 = load i1, i1* %boolop
  store i1 %v.28, i1* %slot.12
  br label %ifexp.end

bool.end.1:
  %v.25 = load i1, i1* %boolop.1
  store i1 %v.25, i1* %boolop
  br i1 %v.25, label %bool.next.1, label %bool.end

cmp.end:
  %v.22 = load i1, i1* %cmp
  store i1 %v.22, i1* %boolop.1
  br i1 %v.22, label %bool.end.1, label %bool.next

cmp.next:
  %c.3 = fcmp olt float %v.21, 0x3FF0000000000000
  store i1 %c.3, i1* %cmp
  br label %cmp.end

bool.next:
  %v.23 = load float, float* %slot.10
  %v.24 = load float, float* %slot.11
  %c.4 = fcmp oeq float %v.23, %v.24
  store i1 %c.4, i1* %boolop.1
  br label %bool.end.1

bool.next.1:
  %v.26 = load float, float* %slot.10
  %c.5 = fcmp ogt float %v.26, 0x3FE0000000000000
  %v.27 = xor i1 %c.5, true
  store i1 %v.27, i1* %boolop
  br label %bool.end
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (float addrspace(1)*, i64, i64, float addrspace(1)*, i64, i64, i8 addrspace(1)*, i64, i64)* @logic, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
