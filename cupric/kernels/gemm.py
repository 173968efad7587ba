"""Matrix products C = alpha * A @ B + beta * C in float32 (SGEMM) and float64 (DGEMM),
on CUDA cores (no tensor cores). Two kernels: a plain shared-memory tiled one (16x16
tiles, one result per thread), and the default register-blocked one: 128x128 tiles of C
per block of 256 threads, each thread accumulating an 8x8 sub-tile in registers from
8-deep slices of A and B staged in double-buffered shared memory."""

from __future__ import annotations


import numpy as np

import cupric
from cupric.device import blockIdx, local, shared, syncthreads, threadIdx
from cupric.kernels._common import Call, MadeOnce
from cupric.types import f32, f64, i32

__all__ = ["gemm", "sgemm", "dgemm", "blocked_kernel", "tiled_kernel", "BM", "BN", "BK",
           "TILE"]

#: Register-blocked kernel: block tile (BM x BN), k-slice depth BK, 256 threads in a
#: 16 x 16 arrangement, each with a TM x TN sub-tile (two 4-row and two 4-column halves
#: 64 apart, so that a warp's shared-memory reads are broadcasts or distinct banks).
BM = 128
BN = 128
BK = 8
TM = 8
TN = 8
THREADS = 256
#: Shared rows of the A slice are padded so the transposing stores hit distinct banks.
PAD = 4
#: Tiled kernel: square tiles of TILE x TILE threads.
TILE = 16


@cupric.device_function
def _flat_get(arr, row, col, ld):
    return arr[row * ld + col]


@cupric.device_function
def _flat_set(arr, row, col, ld, value):
    arr[row * ld + col] = value


@cupric.device_function
def _strided_get(arr, row, col, ld):
    return arr[row, col]


@cupric.device_function
def _strided_set(arr, row, col, ld, value):
    arr[row, col] = value


def _make_blocked(elem, flat):
    """The register-blocked kernel. `flat`: operands are 1-D views of row-major
    matrices, addressed with 32-bit offsets row * ld + col (the host checks they fit);
    otherwise 2-D arrays of any strides, addressed by the compiler in 64 bits. 32-bit
    addressing saves the registers that keep the kernel at two blocks per SM."""
    get = _flat_get if flat else _strided_get
    put = _flat_set if flat else _strided_set

    @cupric.kernel
    def blocked_kernel(a, b, out, m: i32, n: i32, kk: i32, lda: i32, ldb: i32, ldc: i32,
                       alpha, beta):
        a_s = shared.array((2, BK, BM + PAD), elem)
        b_s = shared.array((2, BK, BN), elem)
        acc = local.array((TM, TN), elem)
        a_frag = local.array(TM, elem)
        b_frag = local.array(TN, elem)
        a_next = local.array(4, elem)
        b_next = local.array(4, elem)
        t = threadIdx.x
        tx4 = (t & 15) * 4
        ty4 = (t >> 4) * 4
        bm = blockIdx.y * BM
        bn = blockIdx.x * BN
        zero = elem(0)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = zero
        tiles = (kk + BK - 1) // BK
        # Thread t stages A elements (rows q*32 + t//8, column t%8) and B elements
        # (rows q*2 + t//128, column t%128) of each slice, q = 0..3.
        arow = bm + (t >> 3)
        acol = t & 7
        brow = t >> 7
        bcol = bn + (t & 127)
        for q in range(4):
            ar = arow + q * 32
            a_next[q] = get(a, ar, acol, lda) if ar < m and acol < kk else zero
            br = brow + q * 2
            b_next[q] = get(b, br, bcol, ldb) if br < kk and bcol < n else zero
        for q in range(4):
            a_s[0, acol, q * 32 + (t >> 3)] = a_next[q]
            b_s[0, brow + q * 2, t & 127] = b_next[q]
        syncthreads()
        for kt in range(tiles):
            cur = kt & 1
            more = kt + 1 < tiles
            if more:
                # Issue the next slice's global loads now; they land while we compute.
                k0 = (kt + 1) * BK
                for q in range(4):
                    ar = arow + q * 32
                    ac = k0 + acol
                    a_next[q] = get(a, ar, ac, lda) if ar < m and ac < kk else zero
                    br = k0 + brow + q * 2
                    b_next[q] = get(b, br, bcol, ldb) if br < kk and bcol < n else zero
            for k in range(BK):
                for i in range(4):
                    a_frag[i] = a_s[cur, k, ty4 + i]
                    a_frag[i + 4] = a_s[cur, k, ty4 + i + 64]
                    b_frag[i] = b_s[cur, k, tx4 + i]
                    b_frag[i + 4] = b_s[cur, k, tx4 + i + 64]
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_frag[i] * b_frag[j]
            if more:
                nxt = 1 - cur
                for q in range(4):
                    a_s[nxt, acol, q * 32 + (t >> 3)] = a_next[q]
                    b_s[nxt, brow + q * 2, t & 127] = b_next[q]
            syncthreads()
        # One store path (C is read only when beta is nonzero): a second copy of the
        # epilogue would cost registers.
        scaled = beta != zero
        for i in range(TM):
            row = bm + ty4 + i + (60 if i >= 4 else 0)
            for j in range(TN):
                col = bn + tx4 + j + (60 if j >= 4 else 0)
                if row < m and col < n:
                    v = alpha * acc[i, j]
                    if scaled:
                        v += beta * get(out, row, col, ldc)
                    put(out, row, col, ldc, v)

    return blocked_kernel


def _make_tiled(elem):
    @cupric.kernel
    def tiled_kernel(a, b, out, alpha, beta):
        a_s = shared.array((TILE, TILE), elem)
        b_s = shared.array((TILE, TILE), elem)
        m = a.shape[0]
        kk = a.shape[1]
        n = b.shape[1]
        tx = threadIdx.x
        ty = threadIdx.y
        row = blockIdx.y * TILE + ty
        col = blockIdx.x * TILE + tx
        zero = elem(0)
        s = zero
        for k0 in range(0, kk, TILE):
            a_s[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < kk else zero
            b_s[ty, tx] = b[k0 + ty, col] if k0 + ty < kk and col < n else zero
            syncthreads()
            for k in range(TILE):
                s += a_s[ty, k] * b_s[k, tx]
            syncthreads()
        if row < m and col < n:
            if beta != zero:
                out[row, col] = alpha * s + beta * out[row, col]
            else:
                out[row, col] = alpha * s

    return tiled_kernel


_TYPES = {np.dtype("f4"): f32, np.dtype("f8"): f64}


def _make(key):
    kind, dtype, flat = key
    elem = _TYPES[dtype]
    return _make_blocked(elem, flat) if kind == "blocked" else _make_tiled(elem)


_KERNELS = MadeOnce(_make)


def _kernel(kind: str, dtype, flat: bool = False):
    return _KERNELS[kind, np.dtype(dtype), flat]


def blocked_kernel(dtype, flat: bool = True):
    """The register-blocked GEMM kernel for float32 or float64 (made once): `flat` for
    row-major operands as 1-D views with 32-bit offsets, else 2-D operands of any
    strides."""
    return _kernel("blocked", dtype, flat)


def tiled_kernel(dtype):
    """The 16x16 shared-memory tiled GEMM kernel for float32 or float64 (made once)."""
    return _kernel("tiled", dtype)


def _row_major(call, arr):
    """The 1-D view of a C-contiguous matrix, or None."""
    contiguous = arr.flags.c_contiguous if call.simulator else arr.is_c_contiguous
    return call.flat(arr, "matrix") if contiguous else None


def gemm(a, b, out=None, *, alpha=1.0, beta=0.0, algorithm="blocked", stream=None):
    """Matrix product ``out = alpha * a @ b + beta * out``.

    Parameters
    ----------
    a : device array (NumPy array on the simulator), shape (m, k)
    b : device array, shape (k, n)
        float32 or float64, both the same; any strides (transposed views work; row-major
        operands read fastest).
    out : device array, optional
        Shape (m, n), same dtype; required when `beta` is nonzero (it is read then). When
        `beta` is zero, `out` is only written (NaNs in it do not propagate).
    alpha, beta : float
    algorithm : {"blocked", "tiled"}
        The register-blocked kernel (fast) or the plain 16x16 tiled one (a reference).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new C-contiguous array.

    Raises
    ------
    TypeError
        Other dtypes, mixed dtypes, host arrays on a GPU machine.
    ValueError
        Inner dimensions that differ, an `out` of the wrong shape, beta without out.

    Cost
    ----
    One launch; 2*m*n*k flops on CUDA cores (no tensor cores, no TF32), behind cuBLAS
    (row-major operands are fastest; other strides take a 2-D indexed kernel with more
    registers), and far behind its DGEMM, which runs on the FP64 tensor cores. Figures
    beside cuBLAS: BENCHMARKS.md.

    Examples
    --------
    >>> c = gemm(a, b)                       # a: (m, k), b: (k, n)   # doctest: +SKIP
    >>> gemm(a, b, c, alpha=2.0, beta=1.0)   # c = 2 a @ b + c        # doctest: +SKIP
    """
    if algorithm not in ("blocked", "tiled"):
        raise ValueError(f"gemm: algorithm must be 'blocked' or 'tiled', got {algorithm!r}")
    call = Call("gemm", stream)
    floats = tuple(_TYPES)
    am = call.array(a, "a", dtypes=floats, ndim=2)
    bm = call.array(b, "b", dtypes=floats, ndim=2)
    if np.dtype(am.dtype) != np.dtype(bm.dtype):
        raise TypeError(f"gemm: a is {am.dtype} but b is {bm.dtype}; convert one first")
    m, k = int(am.shape[0]), int(am.shape[1])
    if int(bm.shape[0]) != k:
        raise ValueError(f"gemm: a is {m}x{k} but b is {bm.shape[0]}x{bm.shape[1]}: the "
                         f"inner dimensions differ")
    n = int(bm.shape[1])
    if beta != 0 and out is None:
        raise ValueError("gemm: beta is nonzero but there is no out to scale and add")
    dtype = np.dtype(am.dtype)
    dst, result = call.output(out, "out", (m, n), dtype)
    if m == 0 or n == 0:
        return result
    scalars = (dtype.type(alpha), dtype.type(beta))
    if algorithm == "tiled":
        grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
        call.launch(tiled_kernel(dtype), grid, (TILE, TILE), am, bm, dst, *scalars)
        return result
    grid = ((n + BN - 1) // BN, (m + BM - 1) // BM)
    dims = (np.int32(m), np.int32(n), np.int32(k))
    flat = [_row_major(call, x) for x in (am, bm, dst)]
    if all(x is not None for x in flat) and max(m * k, k * n, m * n) < 2 ** 31:
        call.launch(blocked_kernel(dtype, True), grid, THREADS, *flat, *dims,
                    np.int32(k), np.int32(n), np.int32(n), *scalars)
    else:
        if max(m, n, k) >= 2 ** 31:
            raise ValueError(f"gemm: dimensions {m}x{k} @ {k}x{n} exceed 2^31 - 1")
        zero = np.int32(0)
        call.launch(blocked_kernel(dtype, False), grid, THREADS, am, bm, dst, *dims,
                    zero, zero, zero, *scalars)
    return result


def sgemm(a, b, out=None, *, alpha=1.0, beta=0.0, stream=None):
    """`gemm` for float32 operands (TypeError for others). See `gemm`."""
    _require("sgemm", a, b, np.float32, stream)
    return gemm(a, b, out, alpha=alpha, beta=beta, stream=stream)


def dgemm(a, b, out=None, *, alpha=1.0, beta=0.0, stream=None):
    """`gemm` for float64 operands (TypeError for others). See `gemm`."""
    _require("dgemm", a, b, np.float64, stream)
    return gemm(a, b, out, alpha=alpha, beta=beta, stream=stream)


def _require(op, a, b, dtype, stream) -> None:
    call = Call(op, stream)
    call.array(a, "a", dtypes=(np.dtype(dtype),))
    call.array(b, "b", dtypes=(np.dtype(dtype),))
