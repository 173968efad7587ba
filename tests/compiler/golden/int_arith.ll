; ModuleID = 'int_arith'
target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x() nounwind
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x() nounwind

define void @int_arith(i32 addrspace(1)* noalias %a, i64 %a.shape0, i64 %a.stride0, i32 addrspace(1)* noalias %b, i64 %b.shape0, i64 %b.stride0, i32 addrspace(1)* noalias %out, i64 %out.shape0, i64 %out.shape1, i64 %out.stride0, i64 %out.stride1) nounwind {
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
  %v.51 = trunc i64 3 to i32
  %v.52 = mul i32 %v.50, %v.51
  %v.53 = load i32, i32* %slot.13
  %v.54 = sub i32 %v.52, %v.53
  %v.55 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.56 = load i64, i64* %slot.7
  %v.57 = load i64, i64* %slot.8
  %v.58 = load i64, i64* %slot.9
  %v.59 = load i64, i64* %slot.10
  %v.60 = load i64, i64* %slot.11
  %v.61 = mul i64 %v.60, %v.57
  %v.62 = add i64 %v.61, 2
  %p.4 = getelementptr inbounds i32, i32 addrspace(1)* %v.55, i64 %v.62
  store i32 %v.54, i32 addrspace(1)* %p.4, align 4
  %v.63 = load i32, i32* %slot.12
  %v.64 = trunc i64 255 to i32
  %v.65 = and i32 %v.63, %v.64
  %v.66 = load i32, i32* %slot.13
  %v.67 = trunc i64 7 to i32
  %v.68 = xor i32 %v.66, %v.67
  %v.69 = or i32 %v.65, %v.68
  %v.70 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.71 = load i64, i64* %slot.7
  %v.72 = load i64, i64* %slot.8
  %v.73 = load i64, i64* %slot.9
  %v.74 = load i64, i64* %slot.10
  %v.75 = load i64, i64* %slot.11
  %v.76 = mul i64 %v.75, %v.72
  %v.77 = add i64 %v.76, 3
  %p.5 = getelementptr inbounds i32, i32 addrspace(1)* %v.70, i64 %v.77
  store i32 %v.69, i32 addrspace(1)* %p.5, align 4
  %v.78 = load i32, i32* %slot.12
  %v.79 = trunc i64 2 to i32
  %v.80 = ashr i32 %v.78, %v.79
  %v.81 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.82 = load i64, i64* %slot.7
  %v.83 = load i64, i64* %slot.8
  %v.84 = load i64, i64* %slot.9
  %v.85 = load i64, i64* %slot.10
  %v.86 = load i64, i64* %slot.11
  %v.87 = mul i64 %v.86, %v.83
  %v.88 = add i64 %v.87, 4
  %p.6 = getelementptr inbounds i32, i32 addrspace(1)* %v.81, i64 %v.88
  store i32 %v.80, i32 addrspace(1)* %p.6, align 4
  %v.89 = load i32, i32* %slot.12
  %v.90 = sub i32 0, %v.89
  %v.91 = load i32, i32* %slot.13
  %c.5 = icmp slt i32 %v.91, 0
  %v.92 = sub i32 0, %v.91
  %v.93 = select i1 %c.5, i32 %v.92, i32 %v.91
  %v.94 = add i32 %v.90, %v.93
  %v.95 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.96 = load i64, i64* %slot.7
  %v.97 = load i64, i64* %slot.8
  %v.98 = load i64, i64* %slot.9
  %v.99 = load i64, i64* %slot.10
  %v.100 = load i64, i64* %slot.11
  %v.101 = mul i64 %v.100, %v.97
  %v.102 = add i64 %v.101, 5
  %p.7 = getelementptr inbounds i32, i32 addrspace(1)* %v.95, i64 %v.102
  store i32 %v.94, i32 addrspace(1)* %p.7, align 4
  %v.103 = load i32, i32* %slot.12
  %v.104 = load i32, i32* %slot.13
  %v.105 = trunc i64 5 to i32
  %c.6 = icmp slt i32 %v.104, %v.103
  %v.106 = select i1 %c.6, i32 %v.104, i32 %v.103
  %c.7 = icmp slt i32 %v.105, %v.106
  %v.107 = select i1 %c.7, i32 %v.105, i32 %v.106
  %v.108 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.109 = load i64, i64* %slot.7
  %v.110 = load i64, i64* %slot.8
  %v.111 = load i64, i64* %slot.9
  %v.112 = load i64, i64* %slot.10
  %v.113 = load i64, i64* %slot.11
  %v.114 = mul i64 %v.113, %v.110
  %v.115 = add i64 %v.114, 6
  %p.8 = getelementptr inbounds i32, i32 addrspace(1)* %v.108, i64 %v.115
  store i32 %v.107, i32 addrspace(1)* %p.8, align 4
  %v.116 = load i32, i32* %slot.12
  %v.117 = load i32, i32* %slot.13
  %c.8 = icmp sgt i32 %v.117, %v.116
  %v.118 = select i1 %c.8, i32 %v.117, i32 %v.116
  %v.119 = load i32 addrspace(1)*, i32 addrspace(1)** %slot.6
  %v.120 = load i64, i64* %slot.7
  %v.121 = load i64, i64* %slot.8
  %v.122 = load i64, i64* %slot.9
  %v.123 = load i64, i64* %slot.10
  %v.124 = load i64, i64* %slot.11
  %v.125 = mul i64 %v.124, %v.121
  %v.126 = add i64 %v.125, 7
  %p.9 = getelementptr inbounds i32, i32 addrspace(1)* %v.119, i64 %v.126
  store i32 %v.118, i32 addrspace(1)* %p.9, align 4
  br label %if.end

if.end:
  ret void
}

!nvvm.annotations = !{!1}
!nvvmir.version = !{!2}

!0 = !{}
!1 = !{void (i32 addrspace(1)*, i64, i64, i32 addrspace(1)*, i64, i64, i32 addrspace(1)*, i64, i64, i64, i64)* @int_arith, !"kernel", i32 1}
!2 = !{i32 2, i32 0}
