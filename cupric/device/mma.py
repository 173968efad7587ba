"""Tensor cores at warp level: `mma.sync` matrix multiply-accumulate, `ldmatrix` and
`stmatrix` (8x8 tiles of 16-bit elements between shared memory and fragments), and
`cp.async` copies from global to shared memory with commit/wait groups.

An `mma` is a collective of the whole warp: each of the 32 lanes holds a fragment (a few
registers) of A, B and C, laid out as `FRAGMENTS` says, and receives its fragment of
D = A @ B + C. Fragments of 16-bit and 8-bit operands are u32 words packing 2 or 4
elements (lowest bits first), the form `ldmatrix` loads; tf32 operands are f32 values
(the tensor core reads their top 19 bits; `mma.to_tf32` rounds one). docs/device-library.md
draws the layouts.
"""

from __future__ import annotations

from ._intrinsic import Intrinsic, Namespace

__all__ = ["mma", "cp_async", "FRAGMENTS", "SHAPES", "fragment_coords"]


# -- fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k*") -----------------------
# For every operand: (registers per lane, elements per register, element bits) and the
# function (lane, i) -> (row, col) of the lane's i-th element (registers in order, each
# from its low bits up). groupID = lane >> 2, threadID_in_group = lane % 4.

def _acc(lane: int, i: int) -> tuple[int, int]:
    # C and D of every m16n8 shape: c0 c1 on row g, c2 c3 on row g + 8.
    g, t = lane >> 2, lane & 3
    return g + 8 * (i >> 1), 2 * t + (i & 1)


def _a_k16(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)


def _b_k16(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return 2 * t + (i & 1) + 8 * (i >> 1), g


def _a_tf32(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * (i & 1), t + 4 * (i >> 1)


def _b_tf32(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return t + 4 * i, g


def _a_k32(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3)


def _b_k32(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane & 3
    return 4 * t + (i & 3) + 16 * (i >> 2), g


#: shape name -> (m, n, k, A and B element type, C and D element type).
SHAPES = {
    "m16n8k16_f16": (16, 8, 16, "f16", "f32"),
    "m16n8k16_bf16": (16, 8, 16, "bf16", "f32"),
    "m16n8k8_tf32": (16, 8, 8, "tf32", "f32"),
    "m16n8k32_s8": (16, 8, 32, "s8", "s32"),
    "m16n8k32_u8": (16, 8, 32, "u8", "s32"),
}

#: shape name -> {"a" | "b" | "c": (registers, elements per register, bits, coords)}.
FRAGMENTS = {
    "m16n8k16_f16": {"a": (4, 2, 16, _a_k16), "b": (2, 2, 16, _b_k16), "c": (4, 1, 32, _acc)},
    "m16n8k16_bf16": {"a": (4, 2, 16, _a_k16), "b": (2, 2, 16, _b_k16),
                      "c": (4, 1, 32, _acc)},
    "m16n8k8_tf32": {"a": (4, 1, 32, _a_tf32), "b": (2, 1, 32, _b_tf32), "c": (4, 1, 32, _acc)},
    "m16n8k32_s8": {"a": (4, 4, 8, _a_k32), "b": (2, 4, 8, _b_k32), "c": (4, 1, 32, _acc)},
    "m16n8k32_u8": {"a": (4, 4, 8, _a_k32), "b": (2, 4, 8, _b_k32), "c": (4, 1, 32, _acc)},
}


def fragment_coords(shape: str, operand: str, lane: int) -> list[tuple[int, int]]:
    """The (row, col) of each element lane `lane` holds of `operand` ("a", "b" or "c"),
    in register order (low bits first within a register)."""
    regs, per, _, coords = FRAGMENTS[shape][operand]
    return [coords(lane, i) for i in range(regs * per)]


def _mma_doc(shape: str) -> str:
    m, n, k, ab, cd = SHAPES[shape]
    regs_a, per_a = FRAGMENTS[shape]["a"][:2]
    regs_b = FRAGMENTS[shape]["b"][0]
    operand = "f32 values" if ab == "tf32" else f"u32 words of {per_a} x {ab}"
    acc = "f32" if cd == "f32" else "i32"
    return (f"mma.{shape}(a, b, c) -> d: D ({m}x{n}, {cd}) = A ({m}x{k}, {ab}, row-major) "
            f"@ B ({k}x{n}, {ab}, column-major) + C over the whole warp "
            f"(mma.sync.aligned.m{m}n{n}k{k}.row.col.{cd}.{ab}.{ab}.{cd}; sm_80+). a: "
            f"{regs_a} {operand}; b: {regs_b} of the same; c and d: 4 {acc}. Every lane of "
            f"the warp must call it together.")


mma = Namespace(
    "mma",
    **{shape: Intrinsic(f"mma.{shape}", _mma_doc(shape)) for shape in SHAPES},
    ldmatrix=Intrinsic(
        "mma.ldmatrix",
        "mma.ldmatrix(smem, index, count=4, trans=False) -> tuple of `count` u32: loads "
        "`count` 8x8 matrices of 16-bit elements from shared memory (ldmatrix.sync.aligned"
        ".m8n8.x{count}[.trans].shared.b16; sm_75+). Lane 8j + r names row r of matrix j "
        "with smem[index] (the row's 8 elements are contiguous, 16-byte aligned); register "
        "j of lane l gets row l // 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix j (with "
        "trans: the transposed matrix). A whole-warp collective."),
    stmatrix=Intrinsic(
        "mma.stmatrix",
        "mma.stmatrix(smem, index, regs, trans=False): the inverse of ldmatrix: stores "
        "len(regs) (1, 2 or 4) 8x8 matrices of 16-bit elements to the rows lanes name "
        "(stmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16; sm_90+)."),
    to_tf32=Intrinsic(
        "mma.to_tf32",
        "mma.to_tf32(x) -> f32: x rounded to tf32 (10 mantissa bits; nearest, ties away "
        "from zero: cvt.rna.tf32.f32), the low 13 bits zero."),
    pack_bf16x2=Intrinsic(
        "mma.pack_bf16x2",
        "mma.pack_bf16x2(lo, hi) -> u32: two f32 rounded to bfloat16 (nearest even) and "
        "packed, lo in the low half (cvt.rn.bf16x2.f32)."),
    pack_f16x2=Intrinsic(
        "mma.pack_f16x2",
        "mma.pack_f16x2(lo, hi) -> u32: two f32 rounded to IEEE half (nearest even) and "
        "packed, lo in the low half (cvt.rn.f16x2.f32)."),
)

cp_async = Namespace(
    "cp_async",
    copy=Intrinsic(
        "cp_async.copy",
        "cp_async.copy(dst, dst_index, src, src_index, size=16, src_size=size): starts an "
        "asynchronous copy of `size` bytes (4, 8 or 16, a multiple of the element size) "
        "from global src[src_index] to shared dst[dst_index], both aligned to `size`; only "
        "the first `src_size` bytes are read and the rest of the destination is zeroed "
        "(src_size=0 zero-fills: the tail of a tile past a matrix's edge). cp.async.cg "
        "(16 bytes, L2 only) or cp.async.ca (sm_80+). The data is there only after "
        "cp_async.wait of the group that holds the copy."),
    commit=Intrinsic(
        "cp_async.commit",
        "cp_async.commit(): closes the group of this thread's copies started since the "
        "last commit (cp.async.commit_group)."),
    wait=Intrinsic(
        "cp_async.wait",
        "cp_async.wait(n): waits until at most n (a constant) of this thread's committed "
        "groups are still in flight (cp.async.wait_group n); wait(0) waits for all. Other "
        "threads' copies need a barrier after their wait."),
)
