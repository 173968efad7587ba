"""Tensor cores at warpgroup level (sm_90a): `wgmma.mma_async`, the asynchronous matrix
multiply-accumulate that four consecutive warps (a warpgroup, 128 threads) issue
together, reading B (and A) from shared memory through 64-bit matrix descriptors.

D (64 x N, f32) = A (64 x 16) @ B (16 x N) + D. The accumulator is a tuple of N / 2 f32
per thread, laid out as `accumulator_coords` says (docs/device-library.md draws it). The
operation is asynchronous: `fence()` before the first wgmma that touches registers or
shared memory written earlier, `commit()` to close a group of wgmmas, `wait(n, acc)` to
wait until at most n groups are in flight; only the accumulator `wait` hands back may be
read. Shared-memory operands are described by `descriptor(...)`: a start address, two
byte offsets between 8 x 16-byte core matrices and a swizzle mode (0, 32, 64 or 128 bytes).
"""

from __future__ import annotations

from ._intrinsic import Intrinsic, Namespace

__all__ = ["wgmma", "N_SIZES", "TYPES", "SWIZZLE_MODES", "accumulator_coords",
           "descriptor_bits", "operand_offset"]

#: The N of the m64nNk16 shapes cupric exposes (the PTX ISA allows every multiple of 8
#: up to 256; these cover the tile widths kernels use).
N_SIZES = (8, 16, 32, 64, 96, 128, 192, 256)

#: Operand element types (A and B) of the m64nNk16 shapes; the accumulator is f32.
TYPES = ("bf16", "f16")

#: Swizzle width in bytes -> the descriptor's 2-bit mode (bits 62-63).
SWIZZLE_MODES = {0: 0, 128: 1, 64: 2, 32: 3}


def accumulator_coords(n: int, thread: int) -> list[tuple[int, int]]:
    """The (row, col) of each of the N / 2 accumulator values thread `thread` (0..127 in
    its warpgroup) holds of the 64 x N matrix D, in tuple order (PTX ISA, "Matrix
    Fragments for wgmma.m64nNk16"): warp w = thread // 32 owns rows 16w..16w+15; within
    it, value i sits on row 16w + lane // 4 + 8 ((i // 2) % 2), column
    8 (i // 4) + 2 (lane % 4) + i % 2."""
    w, lane = thread >> 5, thread & 31
    g, t = lane >> 2, lane & 3
    return [(16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1))
            for i in range(n // 2)]


def descriptor_bits(address: int, leading: int, stride: int, swizzle: int) -> int:
    """The 64-bit matrix descriptor for a shared-memory operand at byte `address` (the
    shared window's), with leading and stride byte offsets and a swizzle width in bytes:
    bits 0-13 address / 16, 16-29 leading / 16, 32-45 stride / 16, 62-63 the mode."""
    return ((((address & 0x3FFFF) >> 4)) | (((leading >> 4) & 0x3FFF) << 16)
            | (((stride >> 4) & 0x3FFF) << 32) | (SWIZZLE_MODES[swizzle] << 62))


def operand_offset(row: int, k: int, *, k_major: bool, swizzle: int, leading: int,
                   stride: int, itemsize: int = 2) -> int:
    """Byte offset, before swizzling, of element (row, k) of a wgmma operand (row: the M
    or N index, k: 0..15) from the descriptor's start: the canonical layouts of the PTX
    ISA, in 16-byte units T = 16 / itemsize elements.

    K-major, no swizzle: 8 x 16-byte core matrices; rows 16 bytes apart, groups of 8 rows
    `stride` apart, the two 8-element halves of k `leading` apart. K-major, swizzled:
    rows `swizzle` bytes apart, k contiguous, groups of 8 rows `stride` apart.
    MN-major (the transposed operand), no swizzle: T rows contiguous, each k 16 bytes on,
    groups of T rows `stride` apart, 8-deep halves of k `leading` apart. MN-major,
    swizzled: swizzle / itemsize rows contiguous, each k `swizzle` bytes on, blocks of
    rows `leading` apart, 8-deep halves of k `stride` apart.
    """
    per = 16 // itemsize
    if k_major:
        if swizzle == 0:
            return ((row & 7) * 16 + (row >> 3) * stride + (k % per) * itemsize
                    + (k // per) * leading)
        return (row & 7) * swizzle + (row >> 3) * stride + k * itemsize
    if swizzle == 0:
        return ((row % per) * itemsize + (row // per) * stride + (k & 7) * 16
                + (k >> 3) * leading)
    span = swizzle // itemsize
    return ((row % span) * itemsize + (row // span) * leading + (k & 7) * swizzle
            + (k >> 3) * stride)


def _mma_doc(n: int, kind: str) -> str:
    return (f"wgmma.m64n{n}k16_{kind}(acc, a, b_desc, scale_d=1, trans_a=0, trans_b=0) "
            f"-> acc: D (64x{n}, f32) = A (64x16, {kind}) @ B (16x{n}, {kind}) + scale_d * "
            f"acc, B in shared memory through a matrix descriptor (u64), A through one too "
            f"or in registers (a tuple of 4 u32: warp w holds rows 16w..16w+15 as the A "
            f"fragment of mma.m16n8k16), acc a tuple of {n // 2} f32 per thread "
            f"(wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind}; sm_90a). "
            f"scale_d=0 ignores acc (a run-time value). trans_a / trans_b (constants): 1 "
            f"reads A M-major / B N-major instead of K-major (trans_a with A in shared "
            f"memory only). The four warps of a warpgroup issue it together; the result is "
            f"ready only after wgmma.wait.")


_MMAS = {f"m64n{n}k16_{kind}": Intrinsic(f"wgmma.m64n{n}k16_{kind}", _mma_doc(n, kind))
         for n in N_SIZES for kind in TYPES}

wgmma = Namespace(
    "wgmma",
    **_MMAS,
    descriptor=Intrinsic(
        "wgmma.descriptor",
        "wgmma.descriptor(smem, index, swizzle=128, leading=16, stride=1024) -> u64: the "
        "matrix descriptor of an operand starting at shared smem[index] (16-byte aligned; "
        "with a swizzle, the swizzle atom of 8 rows x swizzle bytes 8 x swizzle aligned): "
        "leading and stride byte offsets (multiples of 16, below 2^18) as "
        "`operand_offset` reads them, swizzle 0, 32, 64 or 128 bytes (a constant). Adding "
        "b bytes to the start address is adding b // 16 to the descriptor."),
    accumulator=Intrinsic(
        "wgmma.accumulator",
        "wgmma.accumulator(n) -> tuple of n // 2 f32 zeros: a fresh accumulator for the "
        "m64n{n}k16 shapes (n a constant)."),
    fence=Intrinsic(
        "wgmma.fence",
        "wgmma.fence(): orders this warpgroup's earlier register and shared-memory accesses "
        "before the wgmma operations after it (wgmma.fence.sync.aligned); needed before the "
        "first wgmma and whenever the accumulator was touched in between."),
    commit=Intrinsic(
        "wgmma.commit",
        "wgmma.commit(): closes the group of this warpgroup's wgmma operations issued since "
        "the last commit (wgmma.commit_group.sync.aligned)."),
    wait=Intrinsic(
        "wgmma.wait",
        "wgmma.wait(n, acc=None) -> acc: waits until at most n (a constant 0..7) committed "
        "groups are in flight (wgmma.wait_group.sync.aligned n) and returns `acc`, "
        "which from then on may be read: pass the accumulator through it, so that no read "
        "of it moves above the wait."),
    raise_registers=Intrinsic(
        "wgmma.raise_registers",
        "wgmma.raise_registers(n): this warpgroup asks for n registers per thread (n a "
        "constant multiple of 8 in 24..256; setmaxnreg.inc.sync.aligned.u32; sm_90a). "
        "Takes effect only in a kernel compiled with max_registers."),
    lower_registers=Intrinsic(
        "wgmma.lower_registers",
        "wgmma.lower_registers(n): this warpgroup gives registers back, down to n per "
        "thread (setmaxnreg.dec.sync.aligned.u32; sm_90a), for other warpgroups to take."),
)
