"""bfloat16 / float16 matrix products on Hopper's warpgroup tensor cores, written in
cupric: C = A @ B with f32 accumulation through `wgmma` (sm_90a), tiles brought in by the
TMA copy engine, and an mbarrier pipeline between a producer and two consumers.

Each block of 384 threads computes a bm x bn tile of C (default 128 x 256). Warpgroup 0 is
the producer: it gives registers back (setmaxnreg) and one of its threads issues the TMA
copies of the next bk-deep slices of A and B into `stages` shared-memory buffers, each
completing on its "full" mbarrier. Warpgroups 1 and 2 are the consumers: each waits for a
full buffer, multiplies its 64 rows of the A slice by the B slice with 4 wgmma of
m64n{bn}k16 read straight from shared memory through descriptors (128-byte swizzle, the
layout the copies write), keeps one group of wgmma in flight, and releases the previous
buffer through its "empty" mbarrier. The copies zero-fill whatever lies past the edges of
A and B, so m, n and k need not be multiples of the tile; the epilogue stores only the
elements inside C. B is row-major k x n (N-major, read with wgmma's transpose) or, with
``b_layout="nk"``, an n x k matrix (the product is then A @ B.T).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

import cupric
from cupric.device import (blockIdx, mbarrier, mma, shared, syncthreads, threadIdx, tma,
                           unroll, vstore, wgmma)
from cupric.kernels._common import Call, MadeOnce
from cupric.kernels.gemm_tc import allow_dynamic_shared, bf16_dtypes
from cupric.types import i32, u16, u64

__all__ = ["Config", "DEFAULT", "matmul", "kernel", "KINDS"]

#: NumPy dtypes of the operands: bfloat16 travels as its bit patterns (uint16).
KINDS = {"bf16": np.dtype(np.uint16), "f16": np.dtype(np.float16)}

_THREADS = 384
_BK = 64  # 64 two-byte elements: one 128-byte swizzle row per slice row


@dataclass(frozen=True)
class Config:
    """A tiling: a block computes a 128 x bn tile of C from 64-deep slices held in
    `stages` shared-memory buffers; `group` m-tiles of blocks run next to each other (the
    launch order), so that they share B's slices in L2; `max_registers` caps the kernel
    at entry (the producer then gives registers to the consumers)."""

    bn: int = 256
    stages: int = 4
    group: int = 8
    max_registers: int = 168

    @property
    def bm(self) -> int:
        return 128

    @property
    def bk(self) -> int:
        return _BK

    @property
    def threads(self) -> int:
        return _THREADS

    @property
    def stage_bytes(self) -> int:
        return 2 * _BK * (self.bm + self.bn)

    @property
    def shared_bytes(self) -> int:
        # + 1024: the buffers start on a 1024-byte boundary (the swizzle atom).
        return self.stages * self.stage_bytes + 1024

    def check(self) -> "Config":
        """Self, or ValueError for a tiling the kernel cannot run."""
        if self.bn not in (64, 128, 192, 256) or not 2 <= self.stages <= 8 or \
                self.group < 1 or self.shared_bytes > 227 * 1024 or \
                self.max_registers * self.threads > 65536:
            raise ValueError(f"gemm_wgmma: unsupported tiling {self}")
        return self


DEFAULT = Config()


def _make_kernel(kind: str, n_major: bool, cfg: Config):
    bm_, bn_, bk_, stages, group = cfg.bm, cfg.bn, _BK, cfg.stages, cfg.group
    a_stage, b_stage = bm_ * bk_, bn_ * bk_          # elements per buffer
    b_base = stages * a_stage
    stage_bytes = cfg.stage_bytes
    op = getattr(wgmma, f"m64n{bn_}k16_{kind}")
    trans_b = 1 if n_major else 0
    # N-major B: 64-wide column blocks of a slice (one copy each) lie 64 * 64 elements
    # apart, the 8-row groups of k 1024 bytes; K-major B: rows of 128 bytes, 8-row groups
    # 1024 bytes apart.
    b_leading = 2 * 64 * bk_ if n_major else 16
    b_step = 16 * 64 if n_major else 16              # elements per 16-deep step of k
    b_boxes = bn_ // 64 if n_major else 1
    pairs = bn_ // 8
    pack = mma.pack_bf16x2 if kind == "bf16" else mma.pack_f16x2

    @cupric.device_function
    def _round(x):
        """f32 -> the 16-bit result type's bits, nearest even."""
        return u16(pack(x, 0.0) & 0xFFFF)

    # Consumer warpgroups take the registers the producer gives back. ptxas honours
    # setmaxnreg; nvJitLink (the default linker) ignores it today (its note C7504), and the
    # kernel fits the 168-register cap without it.
    low = 40
    high = min(256, ((65536 - 128 * low) // 256) // 8 * 8)

    @cupric.kernel(arch="sm_90a", max_registers=cfg.max_registers)
    def gemm_wgmma(map_a, map_b, out, m: i32, n: i32, k: i32):
        smem = shared.dynamic(u16)
        bars = shared.array(2 * stages, u64)   # full[0..stages), empty[stages..2 stages)
        # The buffers start on the next 1024-byte boundary (the 128-byte swizzle's atom).
        pad = ((1024 - (tma.shared_address(smem, 0) & 1023)) & 1023) >> 1
        tid = threadIdx.x
        wg = tid >> 7
        grid_m = (m + bm_ - 1) // bm_
        grid_n = (n + bn_ - 1) // bn_
        per_group = group * grid_n
        pid = blockIdx.x
        first_m = (pid // per_group) * group
        size_m = min(grid_m - first_m, group)
        row0 = (first_m + (pid % per_group) % size_m) * bm_
        col0 = ((pid % per_group) // size_m) * bn_
        ktiles = (k + bk_ - 1) // bk_
        if tid == 0:
            for s in range(stages):
                mbarrier.init(bars, s, 1)
                mbarrier.init(bars, stages + s, 8)   # one arrival per consumer warp
            mbarrier.fence_init()
        syncthreads()
        if wg == 0:
            wgmma.lower_registers(low)
            if tid == 0:
                tma.acquire(map_a)
                tma.acquire(map_b)
                for kt in range(ktiles):
                    s = kt % stages
                    if kt >= stages:
                        mbarrier.wait(bars, stages + s, ((kt // stages) - 1) & 1)
                    mbarrier.arrive_expect_tx(bars, s, stage_bytes)
                    tma.load_2d(smem, pad + s * a_stage, map_a, kt * bk_, row0, bars, s)
                    for j in range(b_boxes):
                        if n_major:
                            tma.load_2d(smem, pad + b_base + s * b_stage + j * 64 * bk_,
                                        map_b, col0 + 64 * j, kt * bk_, bars, s)
                        else:
                            tma.load_2d(smem, pad + b_base + s * b_stage, map_b, kt * bk_,
                                        col0, bars, s)
        else:
            wgmma.raise_registers(high)
            c = wg - 1
            acc = wgmma.accumulator(bn_)
            # A loop with its test at the end (k > 0): no path around it, so no copies
            # of the accumulator meet the wgmma still in flight at its exit.
            kt = 0
            while True:
                s = kt % stages
                mbarrier.wait(bars, s, (kt // stages) & 1)
                wgmma.fence()
                a0 = pad + s * a_stage + c * 64 * bk_
                b0 = pad + b_base + s * b_stage
                for kk in unroll(4):
                    da = wgmma.descriptor(smem, a0 + kk * 16, swizzle=128, leading=16,
                                          stride=1024)
                    db = wgmma.descriptor(smem, b0 + kk * b_step, swizzle=128,
                                          leading=b_leading, stride=1024)
                    acc = op(acc, da, db, 1, trans_b=trans_b)
                wgmma.commit()
                # One group stays in flight; the one before it is done with its buffer.
                wgmma.wait(1)
                if kt > 0 and (tid & 31) == 0:
                    mbarrier.arrive(bars, stages + (kt - 1) % stages)
                kt += 1
                if kt >= ktiles:
                    break
            acc = wgmma.wait(0, acc)
            lane = tid & 31
            row = row0 + c * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2)
            col = col0 + 2 * (lane & 3)
            half_n = n >> 1
            even = (n & 1) == 0
            for j in unroll(pairs):
                for h in unroll(2):
                    r = row + 8 * h
                    cc = col + 8 * j
                    if r < m:
                        lo = acc[4 * j + 2 * h]
                        hi = acc[4 * j + 2 * h + 1]
                        if even:
                            # cc is even, so with n even the pair shares one 4-byte word:
                            # one rounding of both and one store.
                            if cc < n:
                                w = pack(lo, hi)
                                vstore(out, 2 * (r * half_n + (cc >> 1)),
                                       (u16(w & 0xFFFF), u16(w >> 16)))
                        else:
                            if cc < n:
                                out[r * n + cc] = _round(lo)
                            if cc + 1 < n:
                                out[r * n + cc + 1] = _round(hi)

    return gemm_wgmma


_KERNELS = MadeOnce(lambda key: _make_kernel(key[0], key[1] == "kn", key[2].check()))
_LOCK = threading.Lock()  # guards _MAPS


def kernel(kind: str = "bf16", b_layout: str = "kn", config: Config = DEFAULT):
    """The wgmma GEMM kernel for operands of `kind` with B laid out as `b_layout` ("kn":
    k x n row-major; "nk": n x k row-major), made once. It takes the tensor maps of A
    (box 64 x 128) and B (box 64 x 64 for "kn", 64 x bn for "nk"), the flat bf16 output
    (u16) and m, n, k; launch it with 384 threads, `config.shared_bytes` of dynamic shared
    memory and ceil(m / 128) * ceil(n / bn) blocks (`matmul` does)."""
    if kind not in KINDS:
        raise ValueError(f"gemm_wgmma: kind must be 'bf16' or 'f16', got {kind!r}")
    if b_layout not in ("kn", "nk"):
        raise ValueError(f"gemm_wgmma: b_layout must be 'kn' or 'nk', got {b_layout!r}")
    return _KERNELS[kind, b_layout, config]


def _signature() -> str:
    return "Array[u64, 1, 'C'], Array[u64, 1, 'C'], Array[u16, 1, 'C'], i32, i32, i32"


# Uploaded tensor maps by what they encode (address, shape, row pitch, kind, box, device
# and context generation): the encoding is a pure function of these, so a hit is exact.
# The oldest entries are closed past _MAP_CACHE entries.
_MAPS: dict = {}
_MAP_CACHE = 64


def _device_map(arr, box, kind: str, stream):
    from cupric.runtime import current_device
    from cupric.runtime.context import generation
    from cupric.runtime.tensor_map import tensor_map

    ordinal = current_device().ordinal
    key = (int(arr.ptr), tuple(int(s) for s in arr.shape), int(arr.strides[0]), kind, box,
           ordinal, generation(ordinal))
    with _LOCK:
        found = _MAPS.get(key)
        if found is not None:
            return found
    made = tensor_map(arr, box, kind=kind, stream=stream)
    made.source = None  # the cache must not keep callers' arrays alive; each call names its own
    with _LOCK:
        _MAPS[key] = made
        while len(_MAPS) > _MAP_CACHE:
            old = _MAPS.pop(next(iter(_MAPS)))
            old.close(stream)
    return made


def _maps(call: Call, a, b, kind: str, b_layout: str, config: Config):
    box_a = (_BK, config.bm)
    box_b = (64, _BK) if b_layout == "kn" else (_BK, config.bn)
    if call.simulator:
        from cupric.simulator.tma import tensor_map as sim_map
        bits = np.dtype(np.uint16)
        return sim_map(a.view(bits), box_a), sim_map(b.view(bits), box_b)
    return (_device_map(a, box_a, kind, call.stream), _device_map(b, box_b, kind, call.stream))


def matmul(a, b, out=None, *, kind: str = "bf16", b_layout: str = "kn",
           config: Config = DEFAULT, stream=None):
    """``out = a @ b`` (``a @ b.T`` with ``b_layout="nk"``) on Hopper's warpgroup tensor
    cores, accumulated in float32, rounded to bfloat16.

    Parameters
    ----------
    a : device array (NumPy array on the simulator), shape (m, k), C-contiguous
    b : device array, shape (k, n) (``b_layout="kn"``) or (n, k) (``"nk"``), C-contiguous
        bfloat16 (PyTorch's, or ml_dtypes' in NumPy) or its bits as uint16 / int16 for
        ``kind="bf16"``, float16 for ``kind="f16"``. Rows must be a multiple of 16 bytes apart (k, and n for "kn", a
        multiple of 8), as the TMA copies need; m, n and k need not fit the tile.
    out : device array, optional
        Shape (m, n): bfloat16 (float16 for ``kind="f16"``) or its bits as uint16 / int16,
        rounded to nearest even from the f32 sums. Default: new, of a's dtype.
    kind : {"bf16", "f16"}
    b_layout : {"kn", "nk"}
    config : Config
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array of a's dtype.

    Raises
    ------
    TypeError
        Operand dtypes that do not match `kind`, an out of another dtype.
    ValueError
        Inner dimensions that differ, rows not a multiple of 16 bytes, non-contiguous or
        misaligned arrays, sizes past 2^31 elements.

    Cost
    ----
    Two tensor-map encodings and uploads on the first call with given operands (cached
    per address, shape and context afterwards), one launch of ceil(m/128) * ceil(n/bn) blocks of
    384 threads; 2mnk flops on the tensor cores (sm_90 only; the simulator runs the same
    kernel, slowly). Figures beside cuBLAS: BENCHMARKS.md.
    """
    call = Call("gemm_wgmma", stream)
    want = KINDS.get(kind)
    if want is None:
        raise ValueError(f"gemm_wgmma: kind must be 'bf16' or 'f16', got {kind!r}")
    if b_layout not in ("kn", "nk"):
        raise ValueError(f"gemm_wgmma: b_layout must be 'kn' or 'nk', got {b_layout!r}")
    dtypes = bf16_dtypes() if kind == "bf16" else (want,)
    am = call.array(a, "a", dtypes=dtypes, ndim=2)
    bm = call.array(b, "b", dtypes=dtypes, ndim=2)
    m, k = int(am.shape[0]), int(am.shape[1])
    kb, n = (int(bm.shape[0]), int(bm.shape[1])) if b_layout == "kn" else \
        (int(bm.shape[1]), int(bm.shape[0]))
    if kb != k:
        raise ValueError(f"gemm_wgmma: a is {m}x{k} but b ({b_layout}) is "
                         f"{bm.shape[0]}x{bm.shape[1]}: the inner dimensions differ")
    if k % 8 or (b_layout == "kn" and n % 8):
        raise ValueError(f"gemm_wgmma: k ({k}){' and n (' + str(n) + ')' if b_layout == 'kn' else ''} "
                         f"must be multiples of 8 (TMA rows of a multiple of 16 bytes); pad "
                         f"the operands with zeros")
    if max(m * k, k * n, m * n) >= 2 ** 31:
        raise ValueError(f"gemm_wgmma: {m}x{k} @ {k}x{n} has more than 2^31 - 1 elements in "
                         f"one operand")
    bits = np.dtype(np.uint16)
    if out is None:  # the operands' own type: bfloat16 (or its bits), float16
        dst, result = call.output(None, "out", (m, n), am.dtype)
    else:
        dst = call.array(out, "out", writable=True, ndim=2,
                         dtypes=dtypes if kind == "bf16" else (want, bits, np.dtype(np.int16)))
        if tuple(int(s) for s in dst.shape) != (m, n):
            raise ValueError(f"gemm_wgmma: out has shape {tuple(dst.shape)}; expected "
                             f"{(m, n)}")
        result = out
    if m == 0 or n == 0:
        return result
    if k == 0:
        raise ValueError("gemm_wgmma: k is 0 (the product would be all zeros)")
    flat_out = call.flat(dst, "out", bits)
    kern = kernel(kind, b_layout, config)
    map_a, map_b = _maps(call, am, bm, kind, b_layout, config)
    if not call.simulator:
        allow_dynamic_shared(kern, _signature(), config.shared_bytes)
    grid = ((m + config.bm - 1) // config.bm) * ((n + config.bn - 1) // config.bn)
    call.launch(kern, grid, config.threads, map_a.array, map_b.array, flat_out,
                np.int32(m), np.int32(n), np.int32(k), shared_bytes=config.shared_bytes)
    return result
