"""Half-precision matrix products on the tensor cores, written in cupric:
C = A @ B with A (m x k) and B (k x n) in bfloat16 or float16, accumulated in float32,
through warp-level `mma.sync` (sm_80+).

By default (`Config`) each block of 128 threads computes a 128 x 128 tile of C; each of
its 4 warps a 64 x 64 piece, as 4 x 8 `mma.m16n8k16` per 16-deep step. A and B reach
shared memory through `cp.async` in a multi-stage pipeline (the copies of the next
slices fly while one is multiplied), 32-deep slices in dynamic shared memory, and leave
it through `ldmatrix` (`.trans` for B, which is row-major k x n) into two register sets:
a warp reads the next step's fragments while it multiplies the current ones. Shared rows are
XOR-swizzled in 16-byte chunks so that the 8 rows an `ldmatrix` reads, and the rows
`cp.async` writes, fall in distinct banks. Tiles past the edges of A and B are
zero-filled by the copies (src_size 0), so m is free; k and n must be multiples of 8
(16-byte rows of 8 elements).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

import cupric
from cupric.device import blockIdx, cp_async, local, mma, shared, syncthreads, threadIdx
from cupric.kernels._common import Call
from cupric.types import f32, i32, u16, u32

__all__ = ["matmul", "kernel", "allow_dynamic_shared", "require_aligned", "bf16_dtypes",
           "Config", "DEFAULT", "KINDS", "BM", "BN", "BK", "STAGES", "THREADS"]


@dataclass(frozen=True)
class Config:
    """A tiling of the kernel: a block computes a bm x bn tile of C from bk-deep slices
    held in `stages` shared-memory buffers, with warps_m x warps_n warps, each a
    (bm / warps_m) x (bn / warps_n) tile of 16 x 8 mma tiles; `group` m-tiles of blocks
    run next to each other (the launch order), so that they share B's slices in L2."""

    bm: int = 128
    bn: int = 128
    bk: int = 32
    stages: int = 4
    warps_m: int = 2
    warps_n: int = 2
    group: int = 8

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        return 2 * self.stages * (self.bm * self.bk + self.bk * self.bn)

    def check(self) -> "Config":
        """Self, or ValueError for a tiling the kernel cannot run."""
        wm, wn = self.bm // self.warps_m, self.bn // self.warps_n
        ok = (self.bk in (32, 64) and wm % 16 == 0 and wn % 16 == 0 and self.stages >= 2
              and (self.bm * self.bk // 8) % self.threads == 0
              and (self.bk * self.bn // 8) % self.threads == 0 and self.bn % 64 == 0
              and self.group >= 1 and self.shared_bytes <= 227 * 1024)
        if not ok:
            raise ValueError(f"gemm_tc: unsupported tiling {self}")
        return self


#: The default tiling (BENCHMARKS.md has its figures beside cuBLAS).
DEFAULT = Config()
BM, BN, BK, STAGES, THREADS = (DEFAULT.bm, DEFAULT.bn, DEFAULT.bk, DEFAULT.stages,
                               DEFAULT.threads)

#: NumPy dtypes of the operands: bfloat16 travels as its bit patterns (uint16).
KINDS = {"bf16": np.dtype(np.uint16), "f16": np.dtype(np.float16)}


def bf16_dtypes() -> tuple:
    """The dtypes a bfloat16 operand may have: its bits (uint16, int16) or bfloat16 itself
    (ml_dtypes', which PyTorch's bfloat16 tensors read as) where ml_dtypes is installed."""
    try:
        from cupric.types import bf16
        return (np.dtype(np.uint16), np.dtype(np.int16), bf16.dtype)
    except ImportError:
        return (np.dtype(np.uint16), np.dtype(np.int16))


def _make_kernel(kind: str, out_bf16: bool, cfg: Config):
    op = mma.m16n8k16_bf16 if kind == "bf16" else mma.m16n8k16_f16
    bm_, bn_, bk_, stages = cfg.bm, cfg.bn, cfg.bk, cfg.stages
    threads, group, warps_n = cfg.threads, cfg.group, cfg.warps_n
    wm_, wn_ = cfg.bm // cfg.warps_m, cfg.bn // cfg.warps_n
    mi_n, ni_n = wm_ // 16, wn_ // 8
    a_cpr, b_cpr = bk_ // 8, bn_ // 8          # 16-byte chunks per row of a slice
    a_per = bm_ * bk_ // 8 // threads            # chunks each thread copies per slice
    b_per = bk_ * bn_ // 8 // threads
    a_stage, b_stage = bm_ * bk_, bk_ * bn_      # elements per stage
    wide_a = a_cpr >= 8
    steps = bk_ // 16

    @cupric.device_function
    def a_offset(row, chunk):
        """Chunk `chunk` of row `row` of an A slice (in elements): XOR-swizzled so that 8
        consecutive rows cover all 32 banks (64-byte rows: by (row / 2) % 4; 128-byte
        rows: by row % 8)."""
        if wide_a:
            return row * bk_ + ((chunk ^ (row & 7)) << 3)
        return row * bk_ + ((chunk ^ ((row >> 1) & 3)) << 3)

    @cupric.device_function
    def b_offset(row, chunk):
        """Chunk `chunk` of row `row` of a B slice: its low 3 bits XOR row % 8."""
        return row * bn_ + ((chunk ^ (row & 7)) << 3)

    @cupric.device_function
    def load_slice(sa, sb, a, b, st, kt, k, n, a_col, a_src, a_dst, b_src, b_dst, b_row):
        """Start the copies of slice kt into stage st, from each thread's offsets fixed
        before the loop; chunks past the edges of A or B (a source index of -1, or a
        column or row past k) read nothing and zero their 16 bytes."""
        k0 = kt * bk_
        for q in range(a_per):
            src = a_src[q]
            ok = src >= 0 and k0 + a_col < k
            cp_async.copy(sa, st * a_stage + a_dst[q], a, (src + k0) if ok else 0, 16,
                          16 if ok else 0)
        for q in range(b_per):
            src = b_src[q]
            ok = src >= 0 and k0 + b_row[q] < k
            cp_async.copy(sb, st * b_stage + b_dst[q], b, (src + k0 * n) if ok else 0, 16,
                          16 if ok else 0)

    @cupric.device_function
    def fragments(sa, sb, fa, fb, buf, st, kk, a_off, b_off):
        """The warp's A and B fragments of 16-deep step kk of the slice in stage st into
        register set buf (ldmatrix; .trans for B)."""
        a_base = st * a_stage + a_off[kk]
        for mi in range(mi_n):
            x0, x1, x2, x3 = mma.ldmatrix(sa, a_base + mi * 16 * bk_)
            fa[buf, mi, 0] = x0
            fa[buf, mi, 1] = x1
            fa[buf, mi, 2] = x2
            fa[buf, mi, 3] = x3
        b_base = st * b_stage + kk * 16 * bn_
        for nj in range(ni_n // 2):
            y0, y1, y2, y3 = mma.ldmatrix(sb, b_base + b_off[nj], trans=True)
            fb[buf, 2 * nj, 0] = y0
            fb[buf, 2 * nj, 1] = y1
            fb[buf, 2 * nj + 1, 0] = y2
            fb[buf, 2 * nj + 1, 1] = y3

    @cupric.device_function
    def multiply(fa, fb, acc, buf):
        """acc += the products of register set buf's fragments."""
        for mi in range(mi_n):
            for ni in range(ni_n):
                d0, d1, d2, d3 = op(
                    (fa[buf, mi, 0], fa[buf, mi, 1], fa[buf, mi, 2], fa[buf, mi, 3]),
                    (fb[buf, ni, 0], fb[buf, ni, 1]),
                    (acc[mi, ni, 0], acc[mi, ni, 1], acc[mi, ni, 2], acc[mi, ni, 3]))
                acc[mi, ni, 0] = d0
                acc[mi, ni, 1] = d1
                acc[mi, ni, 2] = d2
                acc[mi, ni, 3] = d3

    @cupric.kernel
    def gemm_tc(a, b, out, m: i32, n: i32, k: i32):
        sa = shared.dynamic(u16, 0, stages * a_stage)
        sb = shared.dynamic(u16, 2 * stages * a_stage, stages * b_stage)
        acc = local.array((mi_n, ni_n, 4), f32)
        fa = local.array((2, mi_n, 4), u32)
        fb = local.array((2, ni_n, 2), u32)
        tid = threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        wm = (warp // warps_n) * wm_
        wn = (warp % warps_n) * wn_
        # Grouped launch order: `group` m-tiles side by side share B's slices in L2.
        tiles_m = (m + bm_ - 1) // bm_
        tiles_n = (n + bn_ - 1) // bn_
        pid = blockIdx.x
        first = (pid // (group * tiles_n)) * group
        rows_here = min(tiles_m - first, group)
        bm = (first + pid % rows_here) * bm_
        bn = ((pid % (group * tiles_n)) // rows_here) * bn_
        for mi in range(mi_n):
            for ni in range(ni_n):
                for r in range(4):
                    acc[mi, ni, r] = f32(0.0)
        # Each thread's ldmatrix offsets within a stage, fixed for the whole loop: the
        # swizzle of a row depends on row % 8 (or (row / 2) % 4) only, so the rows 16
        # further down (the next m-tile; the next 16-deep step of B) are the same
        # offset plus a constant.
        a_off = local.array(bk_ // 16, i32)
        b_off = local.array(ni_n // 2, i32)
        for kk in range(bk_ // 16):
            a_off[kk] = a_offset(wm + (lane & 15), kk * 2 + (lane >> 4))
        for nj in range(ni_n // 2):
            b_off[nj] = b_offset((lane & 7) + ((lane >> 3) & 1) * 8,
                                 (wn + nj * 16) // 8 + (lane >> 4))
        # Each thread's copies: where they read and write, fixed for the whole loop.
        a_src = local.array(a_per, i32)
        a_dst = local.array(a_per, i32)
        b_src = local.array(b_per, i32)
        b_dst = local.array(b_per, i32)
        b_row = local.array(b_per, i32)
        a_col = (tid % a_cpr) * 8
        for q in range(a_per):
            row = (tid + q * threads) // a_cpr
            a_src[q] = (bm + row) * k + a_col if bm + row < m else -1
            a_dst[q] = a_offset(row, tid % a_cpr)
        for q in range(b_per):
            row = (tid + q * threads) // b_cpr
            col = bn + (tid % b_cpr) * 8
            b_src[q] = row * n + col if col < n else -1
            b_dst[q] = b_offset(row, tid % b_cpr)
            b_row[q] = row
        tiles = (k + bk_ - 1) // bk_
        # Each warp reads the fragments of the next 16-deep step into the other register
        # set before it multiplies the current one, across slices too: slice kt's last
        # step waits for slice kt + 1 and reads its first fragments. Every stage is
        # filled first; slice kt + stages goes into slice kt's stage once every warp has
        # passed the barrier at kt's last step (its last read of that stage came a step
        # earlier).
        for pre in range(stages):
            if pre < tiles:
                load_slice(sa, sb, a, b, pre, pre, k, n, a_col, a_src, a_dst, b_src, b_dst,
                           b_row)
            cp_async.commit()
        cp_async.wait(stages - 1)
        syncthreads()
        fragments(sa, sb, fa, fb, 0, 0, 0, a_off, b_off)
        for kt in range(tiles):
            st = kt % stages
            for kk in range(steps):
                if kk == steps - 1:
                    # slice kt + 1 has landed (at most stages - 2 newer groups still fly)
                    cp_async.wait(stages - 2)
                    syncthreads()
                    nxt = kt + stages
                    if nxt < tiles:
                        load_slice(sa, sb, a, b, st, nxt, k, n, a_col, a_src, a_dst, b_src,
                                   b_dst, b_row)
                    cp_async.commit()
                    # past the last slice this reads a stale stage, never used
                    fragments(sa, sb, fa, fb, (kk + 1) & 1, (kt + 1) % stages, 0, a_off,
                              b_off)
                else:
                    fragments(sa, sb, fa, fb, (kk + 1) & 1, st, kk + 1, a_off, b_off)
                multiply(fa, fb, acc, kk & 1)
        cp_async.wait(0)

        g = lane >> 2
        t = lane & 3
        for mi in range(mi_n):
            for ni in range(ni_n):
                col = bn + wn + ni * 8 + 2 * t
                for h in range(2):
                    row = bm + wm + mi * 16 + g + 8 * h
                    if row < m and col < n:
                        if out_bf16:
                            out[(row * n + col) >> 1] = mma.pack_bf16x2(
                                acc[mi, ni, 2 * h], acc[mi, ni, 2 * h + 1])
                        else:
                            out[row * n + col] = acc[mi, ni, 2 * h]
                            out[row * n + col + 1] = acc[mi, ni, 2 * h + 1]

    return gemm_tc


_KERNELS: dict = {}
_LOCK = threading.Lock()


def kernel(kind: str = "bf16", out: str = "f32", config: Config = DEFAULT):
    """The tensor-core GEMM kernel for operands of `kind` ("bf16" or "f16") writing `out`
    ("f32", or "bf16": pairs of results rounded and packed into u32 words) with the
    tiling `config`, made once. Launch it with `config.threads` threads per block,
    `config.shared_bytes` of dynamic shared memory and a 1-D grid of
    ceil(m / bm) * ceil(n / bn) blocks (`matmul` does)."""
    if kind not in KINDS:
        raise ValueError(f"gemm_tc: kind must be 'bf16' or 'f16', got {kind!r}")
    if out not in ("f32", "bf16"):
        raise ValueError(f"gemm_tc: out must be 'f32' or 'bf16', got {out!r}")
    key = (kind, out, config)
    kern = _KERNELS.get(key)
    if kern is None:
        with _LOCK:
            kern = _KERNELS.get(key)
            if kern is None:
                kern = _KERNELS[key] = _make_kernel(kind, out == "bf16", config.check())
    return kern


_RAISED: set = set()


def allow_dynamic_shared(kern, signature: str, nbytes: int) -> None:
    """Raise `kern`'s dynamic shared memory limit to `nbytes` where that is past the
    default 48 KiB (once per kernel, device and context generation), for the
    specialization `signature` (the one the launch path compiles for these arrays:
    noalias, aligned)."""
    from cupric.runtime import current_device
    from cupric.runtime.context import generation

    ordinal = current_device().ordinal
    # A context reset (generation) loads the kernel again: the limit is raised again.
    key = (id(kern), signature, ordinal, generation(ordinal))
    if key in _RAISED or nbytes <= 48 * 1024:
        return
    spec = kern.specialize(signature)
    spec.prepared().function.set_attribute("max_dynamic_shared_size_bytes", nbytes)
    _RAISED.add(key)


def require_aligned(call, arrays: dict) -> None:
    """ValueError unless every device array starts on a 16-byte boundary, as the kernels'
    16-byte `cp.async` copies and paired stores need (fresh allocations always do)."""
    if call.simulator:
        return
    for name, arr in arrays.items():
        if arr.ptr % 16:
            raise ValueError(f"{call.op}: {name} starts at {arr.ptr:#x}, not on a 16-byte "
                             f"boundary (the kernel copies 16-byte rows); pass a copy")


def _signature(out_kind: str) -> str:
    word = "u32" if out_kind == "bf16" else "f32"
    return f"Array[u16, 1, 'C'], Array[u16, 1, 'C'], Array[{word}, 1, 'C'], i32, i32, i32"


def matmul(a, b, out=None, *, kind: str = "bf16", config: Config = DEFAULT, stream=None):
    """``out = a @ b`` on the tensor cores, accumulated in float32.

    Parameters
    ----------
    a : device array (NumPy array on the simulator), shape (m, k), C-contiguous
    b : device array, shape (k, n), C-contiguous
        bfloat16 (PyTorch's, or ml_dtypes' in NumPy) or its bit patterns as uint16 /
        int16 for ``kind="bf16"``, float16 for ``kind="f16"``. k and n must be multiples
        of 8; m is free.
    out : device array, optional
        Shape (m, n): float32, or bfloat16 / uint16 / int16 (rounded to nearest even; n
        even). Default: a new float32 array.
    kind : {"bf16", "f16"}
    config : Config
        The tiling (the default suits large products).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new float32 array.

    Raises
    ------
    TypeError
        Operand dtypes that do not match `kind`, an out of another dtype.
    ValueError
        Inner dimensions that differ, k or n not a multiple of 8, non-contiguous arrays or
        ones not starting on a 16-byte boundary, sizes past 2^31 elements.

    Cost
    ----
    One launch of ceil(m/bm) * ceil(n/bn) blocks; 2mnk flops on the tensor cores (sm_80+;
    the simulator runs the same kernel, slowly). Figures beside cuBLAS: BENCHMARKS.md.
    """
    call = Call("gemm_tc", stream)
    want = KINDS.get(kind)
    if want is None:
        raise ValueError(f"gemm_tc: kind must be 'bf16' or 'f16', got {kind!r}")
    dtypes = bf16_dtypes() if kind == "bf16" else (want,)
    am = call.array(a, "a", dtypes=dtypes, ndim=2)
    bm = call.array(b, "b", dtypes=dtypes, ndim=2)
    m, k = int(am.shape[0]), int(am.shape[1])
    if int(bm.shape[0]) != k:
        raise ValueError(f"gemm_tc: a is {m}x{k} but b is {bm.shape[0]}x{bm.shape[1]}: the "
                         f"inner dimensions differ")
    n = int(bm.shape[1])
    if k % 8 or n % 8:
        raise ValueError(f"gemm_tc: k ({k}) and n ({n}) must be multiples of 8 (rows of "
                         f"16 bytes for cp.async); pad the operands with zeros")
    if max(m * k, k * n, m * n) >= 2 ** 31:
        raise ValueError(f"gemm_tc: {m}x{k} @ {k}x{n} has more than 2^31 - 1 elements in "
                         f"one operand")
    if out is None:
        dst, result = call.output(None, "out", (m, n), np.float32)
        out_kind = "f32"
    else:
        dst = call.array(out, "out", writable=True, ndim=2)
        if tuple(int(s) for s in dst.shape) != (m, n):
            raise ValueError(f"gemm_tc: out has shape {tuple(dst.shape)}; expected {(m, n)}")
        if dst.dtype == np.float32:
            out_kind = "f32"
        elif dst.dtype in bf16_dtypes():
            out_kind = "bf16"
        else:
            raise TypeError(f"gemm_tc: out has dtype {dst.dtype}; expected float32 or "
                            f"uint16/int16 (bfloat16 bits)")
        result = out
    if m == 0 or n == 0:
        return result
    bits = np.dtype(np.uint16)
    flat_a = call.flat(am, "a", bits)
    flat_b = call.flat(bm, "b", bits)
    flat_out = call.flat(dst, "out")
    if out_kind == "bf16":  # pairs of results leave as one u32 word (n is even)
        flat_out = flat_out.view(np.uint32)
    require_aligned(call, {"a": flat_a, "b": flat_b, "out": flat_out})
    kern = kernel(kind, out_kind, config)
    if not call.simulator:
        allow_dynamic_shared(kern, _signature(out_kind), config.shared_bytes)
    grid = ((m + config.bm - 1) // config.bm) * ((n + config.bn - 1) // config.bn)
    call.launch(kern, grid, config.threads, flat_a, flat_b, flat_out, np.int32(m),
                np.int32(n), np.int32(k), shared_bytes=config.shared_bytes)
    return result
