"""Hand-written NVVM IR kernels for the backend tests (LLVM 7 typed-pointer dialect).

Each builder returns a whole module: `ir_header()`, the body, the kernel annotations and
`ir_version_metadata`, as the frontend emits them.
"""

from cupric.compiler.nvvm import ir_header, ir_version_metadata, kernel_annotation

F32_GLOBAL = "float addrspace(1)*"

# out[i] = expf(in[i]) for i < n, with a grid-stride-free global index.
_EXP_BODY = """
declare float @__nv_expf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()

define void @{name}(float addrspace(1)* %out, float addrspace(1)* %in, i64 %n) {{
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %bdim = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %bid, %bdim
  %i32 = add i32 %base, %tid
  %i = zext i32 %i32 to i64
  %inside = icmp slt i64 %i, %n
  br i1 %inside, label %body, label %done
body:
  %src = getelementptr float, float addrspace(1)* %in, i64 %i
  %x = load float, float addrspace(1)* %src, align 4
  %y = call float @__nv_expf(float %x)
  %dst = getelementptr float, float addrspace(1)* %out, i64 %i
  store float %y, float addrspace(1)* %dst, align 4
  br label %done
done:
  ret void
}}
"""

# A kernel with static shared memory, a barrier and a division (fast-math visible).
_SHARED_BODY = """
@tile = internal addrspace(3) global [256 x float] undef, align 4
declare void @llvm.nvvm.barrier0()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define void @{name}(float addrspace(1)* %out, float %d) {{
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %i = zext i32 %tid to i64
  %slot = getelementptr [256 x float], [256 x float] addrspace(3)* @tile, i64 0, i64 %i
  %f = uitofp i32 %tid to float
  %q = fdiv float %f, %d
  store float %q, float addrspace(3)* %slot, align 4
  call void @llvm.nvvm.barrier0()
  %rev = sub i64 255, %i
  %other = getelementptr [256 x float], [256 x float] addrspace(3)* @tile, i64 0, i64 %rev
  %v = load float, float addrspace(3)* %other, align 4
  %dst = getelementptr float, float addrspace(1)* %out, i64 %i
  store float %v, float addrspace(1)* %dst, align 4
  ret void
}}
"""


def module(body: str, kernels: list[tuple[str, str]]) -> str:
    """A complete module: header, body, `!nvvm.annotations` for `kernels`, IR version."""
    nodes = [kernel_annotation(name, ftype, i) for i, (name, ftype) in enumerate(kernels)]
    listing = ", ".join(f"!{i}" for i in range(len(kernels)))
    return (ir_header() + body + f"\n!nvvm.annotations = !{{{listing}}}\n" + "\n".join(nodes)
            + "\n" + ir_version_metadata(len(kernels)))


def exp_kernel(name: str = "exp_kernel") -> str:
    return module(_EXP_BODY.format(name=name),
                  [(name, f"void ({F32_GLOBAL}, {F32_GLOBAL}, i64)")])


def shared_kernel(name: str = "reverse_div") -> str:
    return module(_SHARED_BODY.format(name=name), [(name, f"void ({F32_GLOBAL}, float)")])
