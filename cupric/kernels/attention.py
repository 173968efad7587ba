"""Scaled dot-product attention forward, FlashAttention-2 style, on the tensor cores:
O = softmax(Q K^T * scale [+ causal mask]) V for bfloat16 Q, K, V of shape
(batch, heads, seq, head_dim), in one pass without materializing the seq x seq scores.

A block of 4 warps owns 64 query rows (16 per warp; 8 warps and 128 rows on request) of
one (batch, head). It walks the
key/value tiles of 64 rows, staged in shared memory by `cp.async` (double-buffered: the
next tile's copies fly during this tile's math): S = Q K^T by `mma.m16n8k16` (K's rows
through `ldmatrix`), an online softmax in registers (running row maximum and sum, the
output rescaled when the maximum grows; row reductions over the 4 lanes that share a row
by shuffles), and O += P V, where P's accumulator fragments are repacked to bfloat16 as
the next mma's A operand directly (the C layout of m16n8 is the A layout of m16n8k16),
V through `ldmatrix.trans`. Causal attention skips the tiles above the diagonal.
"""

from __future__ import annotations

import math

import numpy as np

import cupric
from cupric.device import FULL_MASK, blockIdx, cp_async, gridDim, local, mma, shared
from cupric.device import math as dmath
from cupric.device import syncthreads, threadIdx, warp
from cupric.kernels._common import Call, MadeOnce
from cupric.kernels.gemm_tc import allow_dynamic_shared, bf16_dtypes, require_aligned
from cupric.types import f32, i32, u16, u32

__all__ = ["attention", "kernel", "shared_bytes", "threads", "BLOCK_M", "BLOCK_MS",
           "BLOCK_N", "HEAD_DIMS"]

BLOCK_M = 64  # default query rows per block (16 per warp)
Q_REGS = False  # Q's fragments held in registers across key tiles (see `kernel`)
BLOCK_MS = (64, 128)
BLOCK_N = 64
HEAD_DIMS = (64, 128)
_LOG2E = 1.4426950408889634
_NEG = -1.0e30  # the running maximum's start: finite, so exp2(m_old - m_new) is never NaN


def shared_bytes(head_dim: int, block_m: int = BLOCK_M) -> int:
    """Q tile + two K tiles + two V tiles, bfloat16."""
    return 2 * head_dim * (block_m + 4 * BLOCK_N)


def threads(block_m: int = BLOCK_M) -> int:
    return 2 * block_m  # a warp per 16 rows


@cupric.device_function
def _mma_pair(acc, j, a, b0, b1, b2, b3):
    """Two m16n8k16 mmas sharing the A fragments `a`: accumulator rows j and j + 1 of
    `acc` (one n8 tile each, four floats) += A times the B fragments (b0, b1) and
    (b2, b3)."""
    x0, x1, x2, x3 = mma.m16n8k16_bf16(a, (b0, b1),
                                       (acc[j, 0], acc[j, 1], acc[j, 2], acc[j, 3]))
    acc[j, 0] = x0
    acc[j, 1] = x1
    acc[j, 2] = x2
    acc[j, 3] = x3
    y0, y1, y2, y3 = mma.m16n8k16_bf16(
        a, (b2, b3), (acc[j + 1, 0], acc[j + 1, 1], acc[j + 1, 2], acc[j + 1, 3]))
    acc[j + 1, 0] = y0
    acc[j + 1, 1] = y1
    acc[j + 1, 2] = y2
    acc[j + 1, 3] = y3


def _make_kernel(head_dim: int, causal: bool, block_m: int, fused: bool,
                 q_regs: bool):
    d_ = head_dim
    THREADS = threads(block_m)
    BLOCK_M = block_m
    cpr = d_ // 8                                  # 16-byte chunks per row
    q_per = BLOCK_M * cpr // THREADS               # chunks each thread copies per tile
    kv_per = BLOCK_N * cpr // THREADS
    tile = BLOCK_N * d_                            # elements of one K or V tile
    n_s = BLOCK_N // 8                             # n8 tiles of S per warp
    n_o = d_ // 8                                  # n8 tiles of O per warp

    @cupric.device_function
    def offset(row, chunk):
        """Chunk `chunk` of row `row` of a tile: rows of d_ elements, the chunk's low 3
        bits XOR row % 8, so the 8 rows an ldmatrix reads fall in distinct banks."""
        return row * d_ + ((chunk ^ (row & 7)) << 3)

    @cupric.device_function
    def load_rows(dst, base, src, src_row0, rows_left, tid, per):
        """Start the copies of `per` chunks per thread: rows src_row0.. of src into dst
        at `base`; rows at or past rows_left are zero-filled."""
        for q in range(per):
            c = tid + q * THREADS
            row = c // cpr
            ch = c % cpr
            ok = row < rows_left
            cp_async.copy(dst, base + offset(row, ch), src,
                          ((src_row0 + row) * d_ + ch * 8) if ok else 0, 16, 16 if ok else 0)

    @cupric.kernel
    def flash_fwd(q, k, v, out, seq: i32, scale_log2: f32):
        sq = shared.dynamic(u16, 0, BLOCK_M * d_)
        sk = shared.dynamic(u16, 2 * BLOCK_M * d_, 2 * tile)
        sv = shared.dynamic(u16, 2 * (BLOCK_M * d_ + 2 * tile), 2 * tile)
        s = local.array((n_s, 4), f32)
        o = local.array((n_o, 4), f32)
        qf = local.array((d_ // 16, 4), u32)
        tid = threadIdx.x
        lane = tid & 31
        r0 = (tid >> 5) * 16                      # this warp's first row in the block
        g = lane >> 2
        t = lane & 3
        # Causal blocks differ in work (row tile i sees i + 1 key tiles): the longest
        # start first, so the short ones fill the last wave.
        qt = (gridDim.x - 1 - blockIdx.x) if causal else blockIdx.x
        q0 = qt * BLOCK_M
        head = blockIdx.y * seq                   # first row of this (batch, head)
        for j in range(n_o):
            for r in range(4):
                o[j, r] = f32(0.0)
        m0 = f32(_NEG)                            # row g: running max and sum
        m1 = f32(_NEG)                            # row g + 8
        l0 = f32(0.0)
        l1 = f32(0.0)
        tiles = (seq + BLOCK_N - 1) // BLOCK_N
        if causal:
            tiles = min(tiles, (q0 + BLOCK_M + BLOCK_N - 1) // BLOCK_N)
        load_rows(sq, 0, q, head + q0, seq - q0, tid, q_per)
        load_rows(sk, 0, k, head, seq, tid, kv_per)
        load_rows(sv, 0, v, head, seq, tid, kv_per)
        cp_async.commit()
        for jt in range(tiles):
            cur = (jt & 1) * tile
            if jt + 1 < tiles:  # the next tile's copies fly during this tile's math
                nxt = ((jt + 1) & 1) * tile
                k0 = (jt + 1) * BLOCK_N
                load_rows(sk, nxt, k, head + k0, seq - k0, tid, kv_per)
                load_rows(sv, nxt, v, head + k0, seq - k0, tid, kv_per)
            cp_async.commit()
            cp_async.wait(1)
            syncthreads()
            # S = Q K^T for this warp's 16 rows and the tile's 64 keys
            for j in range(n_s):
                for r in range(4):
                    s[j, r] = f32(0.0)
            if q_regs and jt == 0:  # Q's fragments stay in registers from here on
                for kd in range(d_ // 16):
                    a0, a1, a2, a3 = mma.ldmatrix(
                        sq, offset(r0 + (lane & 15), kd * 2 + (lane >> 4)))
                    qf[kd, 0] = a0
                    qf[kd, 1] = a1
                    qf[kd, 2] = a2
                    qf[kd, 3] = a3
            for kd in range(d_ // 16):
                if q_regs:
                    a0 = qf[kd, 0]
                    a1 = qf[kd, 1]
                    a2 = qf[kd, 2]
                    a3 = qf[kd, 3]
                else:
                    a0, a1, a2, a3 = mma.ldmatrix(
                        sq, offset(r0 + (lane & 15), kd * 2 + (lane >> 4)))
                for nj in range(n_s // 2):
                    key = nj * 16 + ((lane >> 4) << 3) + (lane & 7)
                    b0, b1, b2, b3 = mma.ldmatrix(
                        sk, cur + offset(key, kd * 2 + ((lane >> 3) & 1)))
                    _mma_pair(s, 2 * nj, (a0, a1, a2, a3), b0, b1, b2, b3)
            # mask keys past the end and, causal, past the row; unfused: scale too (in
            # log2 units)
            k0 = jt * BLOCK_N
            row0 = q0 + r0 + g
            edge = k0 + BLOCK_N > seq or (causal and k0 + BLOCK_N > q0 + r0)
            mx0 = f32(_NEG)
            mx1 = f32(_NEG)
            for j in range(n_s):
                for r in range(4):
                    x = s[j, r] if fused else s[j, r] * scale_log2
                    if edge:
                        key = k0 + j * 8 + 2 * t + (r & 1)
                        row = row0 + 8 * (r >> 1)
                        if key >= seq or (causal and key > row):
                            x = -math.inf
                    s[j, r] = x
                mx0 = dmath.fmax(mx0, dmath.fmax(s[j, 0], s[j, 1]))
                mx1 = dmath.fmax(mx1, dmath.fmax(s[j, 2], s[j, 3]))
            # the row maximum over the 4 lanes that hold the row
            mx0 = dmath.fmax(mx0, warp.shfl_xor(FULL_MASK, mx0, 1))
            mx0 = dmath.fmax(mx0, warp.shfl_xor(FULL_MASK, mx0, 2))
            mx1 = dmath.fmax(mx1, warp.shfl_xor(FULL_MASK, mx1, 1))
            mx1 = dmath.fmax(mx1, warp.shfl_xor(FULL_MASK, mx1, 2))
            if fused:  # a positive scale keeps the maximum where it is
                mx0 = mx0 * scale_log2
                mx1 = mx1 * scale_log2
            new0 = dmath.fmax(m0, mx0)
            new1 = dmath.fmax(m1, mx1)
            c0 = math.exp2(m0 - new0)
            c1 = math.exp2(m1 - new1)
            m0 = new0
            m1 = new1
            sum0 = f32(0.0)
            sum1 = f32(0.0)
            for j in range(n_s):
                if fused:  # one fma and one ex2 per score
                    p0 = math.exp2(s[j, 0] * scale_log2 - m0)
                    p1 = math.exp2(s[j, 1] * scale_log2 - m0)
                    p2 = math.exp2(s[j, 2] * scale_log2 - m1)
                    p3 = math.exp2(s[j, 3] * scale_log2 - m1)
                else:
                    p0 = math.exp2(s[j, 0] - m0)
                    p1 = math.exp2(s[j, 1] - m0)
                    p2 = math.exp2(s[j, 2] - m1)
                    p3 = math.exp2(s[j, 3] - m1)
                s[j, 0] = p0
                s[j, 1] = p1
                s[j, 2] = p2
                s[j, 3] = p3
                sum0 += p0 + p1
                sum1 += p2 + p3
            l0 = l0 * c0 + sum0                   # this lane's part of the row sums
            l1 = l1 * c1 + sum1
            for j in range(n_o):
                o[j, 0] = o[j, 0] * c0
                o[j, 1] = o[j, 1] * c0
                o[j, 2] = o[j, 2] * c1
                o[j, 3] = o[j, 3] * c1
            # O += P V: P's accumulator fragments are the A fragments of the next mma
            for kk in range(BLOCK_N // 16):
                pa0 = mma.pack_bf16x2(s[2 * kk, 0], s[2 * kk, 1])
                pa1 = mma.pack_bf16x2(s[2 * kk, 2], s[2 * kk, 3])
                pa2 = mma.pack_bf16x2(s[2 * kk + 1, 0], s[2 * kk + 1, 1])
                pa3 = mma.pack_bf16x2(s[2 * kk + 1, 2], s[2 * kk + 1, 3])
                krow = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8
                for dn in range(n_o // 2):
                    v0, v1, v2, v3 = mma.ldmatrix(
                        sv, cur + offset(krow, dn * 2 + (lane >> 4)), trans=True)
                    _mma_pair(o, 2 * dn, (pa0, pa1, pa2, pa3), v0, v1, v2, v3)
            syncthreads()  # every warp is done with this stage before it is refilled
        cp_async.wait(0)
        l0 += warp.shfl_xor(FULL_MASK, l0, 1)
        l0 += warp.shfl_xor(FULL_MASK, l0, 2)
        l1 += warp.shfl_xor(FULL_MASK, l1, 1)
        l1 += warp.shfl_xor(FULL_MASK, l1, 2)
        inv0 = f32(1.0) / l0
        inv1 = f32(1.0) / l1
        row = q0 + r0 + g
        for j in range(n_o):
            col = j * 8 + 2 * t
            if row < seq:
                out[((head + row) * d_ + col) >> 1] = mma.pack_bf16x2(o[j, 0] * inv0,
                                                                     o[j, 1] * inv0)
            if row + 8 < seq:
                out[((head + row + 8) * d_ + col) >> 1] = mma.pack_bf16x2(o[j, 2] * inv1,
                                                                         o[j, 3] * inv1)

    return flash_fwd


_KERNELS = MadeOnce(lambda key: _make_kernel(*key))


def kernel(head_dim: int = 128, causal: bool = False, block_m: int = BLOCK_M, *,
           fused: bool = True, q_regs: bool | None = None):
    """The attention kernel for `head_dim` (64 or 128), causal or not, `block_m` (64 or
    128) query rows per block, made once. `fused` computes the softmax's exponents as
    one fma of the raw score (right for a positive scale only: `attention` asks for the
    unfused kernel otherwise); `q_regs` keeps Q's fragments in registers instead of
    reading them from shared memory for every key tile. Launch with grid
    (ceil(seq / block_m), batch * heads), `threads(block_m)` threads and
    `shared_bytes(head_dim, block_m)` of dynamic shared memory (`attention` does)."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"attention: head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    if block_m not in BLOCK_MS:
        raise ValueError(f"attention: block_m must be one of {BLOCK_MS}, got {block_m}")
    q_regs = Q_REGS if q_regs is None else q_regs
    return _KERNELS[head_dim, bool(causal), block_m, bool(fused), bool(q_regs)]


SIGNATURE = "Array[u16, 1, 'C'], Array[u16, 1, 'C'], Array[u16, 1, 'C'], Array[u32, 1, 'C'], " \
            "i32, f32"


def attention(q, k, v, out=None, *, causal: bool = False, scale: float | None = None,
              block_m: int = BLOCK_M, stream=None):
    """softmax(q @ k^T * scale) @ v per (batch, head), bfloat16, FlashAttention-2 style.

    Parameters
    ----------
    q, k, v : device arrays (NumPy arrays on the simulator)
        Shape (batch, heads, seq, head_dim), C-contiguous, bfloat16 (PyTorch's, or
        ml_dtypes' in NumPy) or its bit patterns (uint16 or int16 views); head_dim 64 or
        128; any seq.
    out : device array, optional
        The same shape, bfloat16 or a 16-bit integer dtype (bfloat16 bits). Default: a
        new array of q's dtype.
    causal : bool
        Query row i attends to keys 0..i only.
    scale : float, optional
        Default 1 / sqrt(head_dim).
    block_m : {64, 128}
        Query rows per block (a warp per 16).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array of q's shape and dtype: each query row's softmax-weighted sum of
    the rows of v.

    Raises
    ------
    TypeError, ValueError
        Other dtypes, shapes that differ or are not 4-D, a head_dim other than 64 or 128,
        non-contiguous arrays or ones not starting on a 16-byte boundary, more than 2^31
        elements.

    Cost
    ----
    One launch of ceil(seq / block_m) x (batch * heads) blocks; 4 * seq^2 * head_dim flops
    per (batch, head) (about half of it when causal) on the tensor cores, sm_80+.
    """
    call = Call("attention", stream)
    dtypes = bf16_dtypes()
    arrays = [call.array(x, name, dtypes=dtypes, ndim=4) for x, name in
              ((q, "q"), (k, "k"), (v, "v"))]
    shape = tuple(int(s) for s in arrays[0].shape)
    for x, name in zip(arrays[1:], ("k", "v")):
        if tuple(int(s) for s in x.shape) != shape:
            raise ValueError(f"attention: {name} has shape {tuple(x.shape)}, q has {shape}")
    batch, heads, seq, head_dim = shape
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"attention: head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    if batch * heads * seq * head_dim >= 2 ** 31:
        raise ValueError("attention: more than 2^31 - 1 elements")
    if out is None:
        dst, result = call.output(None, "out", shape, arrays[0].dtype)
    else:
        dst = call.array(out, "out", dtypes=dtypes, ndim=4, writable=True)
        if tuple(int(s) for s in dst.shape) != shape:
            raise ValueError(f"attention: out has shape {tuple(dst.shape)}; expected {shape}")
        result = out
    if batch * heads * seq == 0:
        return result
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    bits = np.dtype(np.uint16)
    flat = [call.flat(x, name, bits) for x, name in zip(arrays, ("q", "k", "v"))]
    flat_out = call.flat(dst, "out").view(np.uint32)
    require_aligned(call, {"q": flat[0], "k": flat[1], "v": flat[2], "out": flat_out})
    kern = kernel(head_dim, causal, block_m, fused=scale > 0)
    nbytes = shared_bytes(head_dim, block_m)
    if not call.simulator:
        allow_dynamic_shared(kern, SIGNATURE, nbytes)
    grid = ((seq + block_m - 1) // block_m, batch * heads)
    call.launch(kern, grid, threads(block_m), *flat, flat_out, np.int32(seq),
                np.float32(scale * _LOG2E), shared_bytes=nbytes)
    return result
