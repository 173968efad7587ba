; ModuleID = 'wrap_u8'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @wrap_u8(i8 addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.stride0, i8 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.stride0) nounwind {
entry:
  %slot = alloca i8 addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store i8 addrspace(1)* %a, i8 addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.stride0, i64* %slot.2
  %slot.3 = alloca i8 addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  store i8 addrspace(1)* %out, i8 addrspace(1)** %slot.3
  store i64 %out.shape0, i64* %slot.4
  store i64 %out.stride0, i64* %slot.5
  %slot.6 = alloca i64
  store i64 0, i64* %slot.6
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
  %v.6 = load i8 addrspace(1)*, i8 addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load i8 addrspace(1)*, i8 addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.6
  %p = getelementptr inbounds i8, i8 addrspace(1)* %v.9, i64 %v.12
  %v.13 = load i8, i8 addrspace(1)* %p, align 1, !invariant.load !0
  %v.14 = mul i8 %v.13, 3
  %v.15 = add i8 %v.14, -56
  %v.16 = load i8 addrspace(1)*, i8 addrspace(1)** %slot.3
  %v.17 = load i64, i64* %slot.4
  %v.18 = load i64, i64* %slot.5
  %v.19 = load i64, i64* %slot.6
  %p.1 = getelementptr inbounds i8, i8 addrspace(1)* %v.16, i64 %v.19
  store i8 %v.15, i8 addrspace(1)* %p.1, align 1
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (i8 addrspace(1)*, i64, i64, i8 addrspace(1)*, i64, i64)* @wrap_u8, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
