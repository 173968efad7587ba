; ModuleID = 'int_arith'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @int_arith(i32 addrspace(1)* noalias align 16 %a, i64 %a.shape0, i64 %a.stride0, i32 addrspace(1)* noalias align 16 %b, i64 %b.shape0, i64 %b.stride0, i32 addrspace(1)* noalias align 16 %out, i64 %out.shape0, i64 %out.shape1, i64 %out.stride0, i64 %out.stride1) nounwind {
entry:
  %slot = alloca i32 addrspace(1)*
  %slot.1 = alloca i64
  %slot.2 = alloca i64
  store i32 addrspace(1)* %a, i32 addrspace(1)** %slot
  store i64 %a.shape0, i64* %slot.1
  store i64 %a.stride0, i64* %slot.2
  %slot.3 = alloca i32 addrspace(1)*
  %slot.4 = alloca i64
  %slot.5 = alloca i64
  store i32 addrspace(1)* %b, i32 addrspace(1)** %slot.3
  store i64 %b.shape0, i64* %slot.4
  store i64 %b.stride0, i64* %slot.5
  %slot.6 = alloca i32 addrspace(1)*
  %slot.7 = alloca i64
  %slot.8 = alloca i64
  %slot.9 = alloca i64
  %slot.10 = alloca i64
  store i32 addrspace(1)* %out, i32 addrspace(1)** %slot.6
  store i64 %out.shape0, i64* %slot.7
  store i64 %out.shape1, i64* %slot.8
  store i64 %out.stride0, i64* %slot.9
  store i64 %out.stride1, i64* %slot.10
  %slot.11 = alloca i64
  store i64 0, i64* %slot.11
  %slot.12 = alloca i32
  store i32 0, i32* %slot.12
  %slot.13 = alloca i32
  store i32 0, i32* %slot.13
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
  store i64 %v.4, i64* %slot.11
  %v.5 = load i64, i64* %slot.11
  %v.6 = load i32 addrspace(1)*, i32 addrspace(1)** %slot
  %v.7 = load i64, i64* %slot.1
  %v.8 = load i64, i64* %slot.2
  %c = icmp slt i64 %v.5, %v.7
  br i1 %c, label %if.then, label %if.end

if.then:
  %v.9 = load i32 addrspace(1)*, i32 addrspace(1)** %slot
  %v.10 = load i64, i64* %slot.1
  %v.11 = load i64, i64* %slot.2
  %v.12 = load i64, i64* %slot.11
  %p = getelementptr inbounds i32, i32 addrspace(1)* %v.9, i64 %v.12
  %v.13 = load i32, i32 addrspace(1)* %p, align 4, !invariant.load !0
  store i32 %v.13, i32* %slot.12
  %v.14 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.3
  %v.15 = load i64, i64* %slot.4
  %v.16 = load i64, i64* %slot.5
  %v.17 = load i64, i64* %slot.11
  %p.1 = getelementptr inbounds i32, i32 addrspace(1)* %v.14, i64 %v.17
  %v.18 = load i32, i32 addrspace(1)* %p.1, align 4, !invariant.load !0
  store i32 %v.18, i32* %slot.13
  %v.19 = load i32, i32* %slot.12
  %v.20 = load i32, i32* %slot.13
  %v.21 = sdiv i32 %v.19, %v.20
  %v.22 = srem i32 %v.19, %v.20
  %c.1 = icmp ne i32 %v.22, 0
  %v.23 = xor i32 %v.22, %v.20
  %c.2 = icmp slt i32 %v.23, 0
  %v.24 = and i1 %c.1, %c.2
  %v.25 = zext i1 %v.24 to i32
  %v.26 = sub i32 %v.21, %v.25
  %v.27 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.28 = load i64, i64* %slot.7
  %v.29 = load i64, i64* %slot.8
  %v.30 = load i64, i64* %slot.9
  %v.31 = load i64, i64* %slot.10
  %v.32 = load i64, i64* %slot.11
  %v.33 = mul i64 %v.32, %v.29
  %v.34 = add i64 %v.33, 0
  %p.2 = getelementptr inbounds i32, i32 addrspace(1)* %v.27, i64 %v.34
  store i32 %v.26, i32 addrspace(1)* %p.2, align 4
  %v.35 = load i32, i32* %slot.12
  %v.36 = load i32, i32* %slot.13
  %v.37 = srem i32 %v.35, %v.36
  %c.3 = icmp ne i32 %v.37, 0
  %v.38 = xor i32 %v.37, %v.36
  %c.4 = icmp slt i32 %v.38, 0
  %v.39 = and i1 %c.3, %c.4
  %v.40 = add i32 %v.37, %v.36
  %v.41 = select i1 %v.39, i32 %v.40, i32 %v.37
  %v.42 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.43 = load i64, i64* %slot.7
  %v.44 = load i64, i64* %slot.8
  %v.45 = load i64, i64* %slot.9
  %v.46 = load i64, i64* %slot.10
  %v.47 = load i64, i64* %slot.11
  %v.48 = mul i64 %v.47, %v.44
  %v.49 = add i64 %v.48, 1
  %p.3 = getelementptr inbounds i32, i32 addrspace(1)* %v.42, i64 %v.49
  store i32 %v.41, i32 addrspace(1)* %p.3, align 4
  %v.50 = load i32, i32* %slot.12
  %v.51 = mul i32 %v.50, 3
  %v.52 = load i32, i32* %slot.13
  %v.53 = sub i32 %v.51, %v.52
  %v.54 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.55 = load i64, i64* %slot.7
  %v.56 = load i64, i64* %slot.8
  %v.57 = load i64, i64* %slot.9
  %v.58 = load i64, i64* %slot.10
  %v.59 = load i64, i64* %slot.11
  %v.60 = mul i64 %v.59, %v.56
  %v.61 = add i64 %v.60, 2
  %p.4 = getelementptr inbounds i32, i32 addrspace(1)* %v.54, i64 %v.61
  store i32 %v.53, i32 addrspace(1)* %p.4, align 4
  %v.62 = load i32, i32* %slot.12
  %v.63 = and i32 %v.62, 255
  %v.64 = load i32, i32* %slot.13
  %v.65 = xor i32 %v.64, 7
  %v.66 = or i32 %v.63, %v.65
  %v.67 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.68 = load i64, i64* %slot.7
  %v.69 = load i64, i64* %slot.8
  %v.70 = load i64, i64* %slot.9
  %v.71 = load i64, i64* %slot.10
  %v.72 = load i64, i64* %slot.11
  %v.73 = mul i64 %v.72, %v.69
  %v.74 = add i64 %v.73, 3
  %p.5 = getelementptr inbounds i32, i32 addrspace(1)* %v.67, i64 %v.74
  store i32 %v.66, i32 addrspace(1)* %p.5, align 4
  %v.75 = load i32, i32* %slot.12
  %v.76 = ashr i32 %v.75, 2
  %v.77 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.78 = load i64, i64* %slot.7
  %v.79 = load i64, i64* %slot.8
  %v.80 = load i64, i64* %slot.9
  %v.81 = load i64, i64* %slot.10
  %v.82 = load i64, i64* %slot.11
  %v.83 = mul i64 %v.82, %v.79
  %v.84 = add i64 %v.83, 4
  %p.6 = getelementptr inbounds i32, i32 addrspace(1)* %v.77, i64 %v.84
  store i32 %v.76, i32 addrspace(1)* %p.6, align 4
  %v.85 = load i32, i32* %slot.12
  %v.86 = sub i32 0, %v.85
  %v.87 = load i32, i32* %slot.13
  %c.5 = icmp slt i32 %v.87, 0
  %v.88 = sub i32 0, %v.87
  %v.89 = select i1 %c.5, i32 %v.88, i32 %v.87
  %v.90 = add i32 %v.86, %v.89
  %v.91 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.92 = load i64, i64* %slot.7
  %v.93 = load i64, i64* %slot.8
  %v.94 = load i64, i64* %slot.9
  %v.95 = load i64, i64* %slot.10
  %v.96 = load i64, i64* %slot.11
  %v.97 = mul i64 %v.96, %v.93
  %v.98 = add i64 %v.97, 5
  %p.7 = getelementptr inbounds i32, i32 addrspace(1)* %v.91, i64 %v.98
  store i32 %v.90, i32 addrspace(1)* %p.7, align 4
  %v.99 = load i32, i32* %slot.12
  %v.100 = load i32, i32* %slot.13
  %c.6 = icmp slt i32 %v.100, %v.99
  %v.101 = select i1 %c.6, i32 %v.100, i32 %v.99
  %c.7 = icmp slt i32 5, %v.101
  %v.102 = select i1 %c.7, i32 5, i32 %v.101
  %v.103 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.104 = load i64, i64* %slot.7
  %v.105 = load i64, i64* %slot.8
  %v.106 = load i64, i64* %slot.9
  %v.107 = load i64, i64* %slot.10
  %v.108 = load i64, i64* %slot.11
  %v.109 = mul i64 %v.108, %v.105
  %v.110 = add i64 %v.109, 6
  %p.8 = getelementptr inbounds i32, i32 addrspace(1)* %v.103, i64 %v.110
  store i32 %v.102, i32 addrspace(1)* %p.8, align 4
  %v.111 = load i32, i32* %slot.12
  %v.112 = load i32, i32* %slot.13
  %c.8 = icmp sgt i32 %v.112, %v.111
  %v.113 = select i1 %c.8, i32 %v.112, i32 %v.111
  %v.114 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.115 = load i64, i64* %slot.7
  %v.116 = load i64, i64* %slot.8
  %v.117 = load i64, i64* %slot.9
  %v.118 = load i64, i64* %slot.10
  %v.119 = load i64, i64* %slot.11
  %v.120 = mul i64 %v.119, %v.116
  %v.121 = add i64 %v.120, 7
  %p.9 = getelementptr inbounds i32, i32 addrspace(1)* %v.114, i64 %v.121
  store i32 %v.113, i32 addrspace(1)* %p.9, align 4
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (i32 addrspace(1)*, i64, i64, i32 addrspace(1)*, i64, i64, i32 addrspace(1)*, i64, i64, i64, i64)* @int_arith, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
