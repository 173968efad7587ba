"""Kernels that use the GPU-side standard library (cupric.device), shared by the CPU lane
(PTX from libNVVM checked for the intended instructions, then the same kernels run on
the simulator) and the GPU lane (the same checks on a device).

Each `Case` holds a kernel, the signature it compiles for, regular expressions that
its PTX must contain, and `check(run, rng)`: builds fresh random inputs and poisoned
outputs, runs the kernel through `run(kern, grid, block, *args, shared=0)` (which
returns the arrays after the launch) and compares with NumPy.
"""

from __future__ import annotations

import math

import numpy as np

import cupric
import cupric.device.math as dmath
from cupric.device import (FULL_MASK, atomic, bits, blockIdx, clock, clock64, constant,
                           float3, globaltimer, grid, grid_stride, grid_sync, half, int2,
                           laneid, local, nanosleep, shared, syncthreads, syncthreads_and,
                           syncthreads_count, syncthreads_or, syncwarp, threadfence,
                           threadfence_block, threadfence_system, threadIdx, vector, warp)
from cupric.types import f16, f32, f64, i32, i64, u32, u64

CASES: list = []


class Case:
    """A kernel, its signature, the PTX it must contain and its NumPy check."""

    def __init__(self, kern, signature: str, ptx: list[str], check, archs=("sm_80", "sm_90"),
                 name: str | None = None) -> None:
        self.kern = kern
        self.signature = signature
        self.ptx = ptx
        self.check = check
        self.archs = archs
        self.name = name or kern.__name__

    def __repr__(self) -> str:
        return self.name


def case(kern, signature, ptx, archs=("sm_80", "sm_90"), name=None):
    def register(check):
        CASES.append(Case(kern, signature, ptx, check, archs, name))
        return check
    return register


def poisoned(shape, dtype):
    """An output array full of a value no kernel writes by accident."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, np.iinfo(dtype).max // 3 + 7, dtype)


F32_1 = "Array[f32, 1, 'C']"
I32_1 = "Array[i32, 1, 'C']"

# -- shared memory, local arrays, barriers -----------------------------------------------


@cupric.kernel
def block_sums(x, out):
    tile = shared.array(256, f32)
    t = threadIdx.x
    i = grid(1)
    tile[t] = x[i] if i < x.size else f32(0)
    syncthreads()
    step = 128
    while step > 0:
        if t < step:
            tile[t] += tile[t + step]
        syncthreads()
        step //= 2
    if t == 0:
        atomic.add(out, 0, tile[0])


@case(block_sums, f"{F32_1}, {F32_1}",
      [r"\.shared \.align 16 \.b8 \w+\[1024\]", r"st\.shared\.f32", r"ld\.shared\.f32",
       r"bar\.sync", r"(atom|red)\.global\.add\.f32"])
def check_block_sums(run, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros(1, np.float32)
    (_, got) = run(block_sums, 4, 256, x, out)
    np.testing.assert_allclose(got[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


@cupric.kernel
def transpose_tile(a, out):
    tile = shared.array((16, 17), f64)  # padded: no bank conflicts on the column read
    x = blockIdx.x * 16 + threadIdx.x
    y = blockIdx.y * 16 + threadIdx.y
    tile[threadIdx.y, threadIdx.x] = a[y, x]
    syncthreads()
    tx = blockIdx.y * 16 + threadIdx.x
    ty = blockIdx.x * 16 + threadIdx.y
    out[ty, tx] = tile[threadIdx.x, threadIdx.y]


@case(transpose_tile, "Array[f64, 2, 'C'], Array[f64, 2, 'C']",
      [r"\.shared \.align 16 \.b8 \w+\[2176\]", r"st\.shared\.f64", r"ld\.shared\.f64"])
def check_transpose(run, rng):
    a = rng.standard_normal((32, 48))
    out = poisoned((48, 32), np.float64)
    (_, got) = run(transpose_tile, (3, 2), (16, 16), a, out)
    np.testing.assert_array_equal(got, a.T)


@cupric.kernel
def dynamic_views(x, out, flags):
    floats = shared.dynamic(f32)
    ints = shared.dynamic(i32, offset=4 * 64)  # after 64 floats
    t = threadIdx.x
    floats[t] = x[t] * 2
    ints[t] = t * 3
    syncthreads()
    out[t] = floats[63 - t] + f32(ints[63 - t])
    if t == 0:
        flags[0] = len(floats)
        flags[1] = len(ints)


@case(dynamic_views, f"{F32_1}, {F32_1}, Array[i64, 1, 'C']",
      [r"\.extern \.shared \.align 16 \.b8 \w+\[\]", r"st\.shared\.f32", r"st\.shared\.u32",
       r"%dynamic_smem_size"])
def check_dynamic(run, rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = poisoned(64, np.float32)
    flags = poisoned(2, np.int64)
    (_, got, fl) = run(dynamic_views, 1, 64, x, out, flags, shared=2 * 64 * 4)
    rev = np.arange(64)[::-1]
    np.testing.assert_allclose(got, x[rev] * 2 + 3 * rev.astype(np.float32), rtol=1e-6)
    assert list(fl) == [128, 64]


@cupric.kernel
def local_reverse(x, out):
    i = grid(1)
    buf = local.array(8, i64)
    for k in range(8):
        buf[k] = x[i, k] * (k + 1)
    for k in range(8):
        out[i, k] = buf[7 - k]


@case(local_reverse, "Array[i64, 2, 'C'], Array[i64, 2, 'C']", [r"ld\.global"])
def check_local(run, rng):
    x = rng.integers(-1000, 1000, (64, 8))
    out = poisoned((64, 8), np.int64)
    (_, got) = run(local_reverse, 2, 32, x, out)
    np.testing.assert_array_equal(got, (x * np.arange(1, 9))[:, ::-1])


@cupric.kernel
def barrier_votes(x, out):
    t = threadIdx.x
    v = x[grid(1)]
    count = syncthreads_count(v > 0)
    every = syncthreads_and(v > -100)
    some = syncthreads_or(v > 50)
    threadfence_block()
    threadfence()
    threadfence_system()
    nanosleep(100)
    syncwarp()
    syncwarp(FULL_MASK)
    out[grid(1)] = count * 100 + every * 10 + some + t * 0


@case(barrier_votes, f"{I32_1}, {I32_1}",
      [r"bar\.red\.popc\.u32", r"bar\.red\.and\.pred", r"bar\.red\.or\.pred",
       r"membar\.cta|fence\.\w*\.?cta", r"membar\.gl|fence\.\w*\.?gpu",
       r"membar\.sys|fence\.\w*\.?sys", r"nanosleep\.u32", r"bar\.warp\.sync"])
def check_barrier_votes(run, rng):
    x = rng.integers(-60, 60, 256).astype(np.int32)
    out = poisoned(256, np.int32)
    (_, got) = run(barrier_votes, 2, 128, x, out)
    for blk in range(2):
        part = x[blk * 128:(blk + 1) * 128]
        want = (part > 0).sum() * 100 + int((part > -100).all()) * 10 + int((part > 50).any())
        assert (got[blk * 128:(blk + 1) * 128] == want).all()


# -- atomics ------------------------------------------------------------------------------


def _int_atomics(dtype):
    @cupric.kernel
    def int_atomics(x, acc, olds):
        i = grid(1)
        v = x[i]
        atomic.add(acc, 0, v)
        atomic.sub(acc, 1, v)
        atomic.min(acc, 2, v)
        atomic.max(acc, 3, v)
        atomic.and_(acc, 4, v)
        atomic.or_(acc, 5, v)
        atomic.xor(acc, 6, v)
        atomic.inc(acc, 7, 5)
        atomic.dec(acc, 8, 7)
        olds[i] = atomic.exch(acc, 9, v)
        atomic.cas(acc, 10, 0, v)
        atomic.add(acc, 11, v, scope="block", order="acq_rel")
        atomic.max(acc, 12, v, scope="system", order="acquire")
        atomic.xor(acc, 13, v, scope="device", order="release")
    return int_atomics


_INT_ATOMICS = {t: _int_atomics(t) for t in ("i32", "i64", "u32", "u64")}
# Atomics whose old value is unused become PTX red (no result); the others atom.
_INT_PTX = {
    "i32": [r"red\.global\.add\.u32", r"red\.global\.min\.s32", r"red\.global\.max\.s32",
            r"red\.global\.and\.b32", r"red\.global\.or\.b32", r"red\.global\.xor\.b32",
            r"red\.global\.inc\.u32", r"red\.global\.dec\.u32", r"atom\.global\.exch\.b32",
            r"atom\.global\.cas\.b32", r"atom\.acq_rel\.cta\.add\.u32",
            r"atom\.acquire\.sys\.max\.s32", r"red\.release\.global\.xor\.b32"],
    "i64": [r"red\.global\.add\.u64", r"red\.global\.min\.s64", r"atom\.global\.cas\.b64",
            r"atom\.acq_rel\.cta\.add\.u64"],
    "u32": [r"red\.global\.min\.u32", r"red\.global\.max\.u32"],
    "u64": [r"red\.global\.min\.u64", r"atom\.global\.exch\.b64"],
}


def _int_atomics_check(tname):
    dtype = np.dtype({"i32": np.int32, "i64": np.int64, "u32": np.uint32,
                      "u64": np.uint64}[tname])

    def check(run, rng):
        n = 300
        lo = 0 if dtype.kind == "u" else -1000
        x = rng.integers(lo, 1000, n).astype(dtype)
        acc = np.zeros(14, dtype)
        start = rng.integers(1, 1000, 14).astype(dtype)
        acc[:] = start
        acc[7] = 0
        acc[8] = 3
        acc[10] = 0
        olds = poisoned(n, dtype)
        (_, got, old) = run(_INT_ATOMICS[tname], 3, 100, x, acc, olds)
        with np.errstate(over="ignore"):
            assert got[0] == start[0] + x.sum(dtype=dtype)
            assert got[1] == start[1] - x.sum(dtype=dtype)
            assert got[11] == start[11] + x.sum(dtype=dtype)
        assert got[2] == min(start[2], x.min())
        assert got[3] == max(start[3], x.max())
        assert got[12] == max(start[12], x.max())
        assert got[4] == np.bitwise_and.reduce(np.append(x, start[4]))
        assert got[5] == np.bitwise_or.reduce(np.append(x, start[5]))
        assert got[6] == np.bitwise_xor.reduce(np.append(x, start[6]))
        assert got[13] == np.bitwise_xor.reduce(np.append(x, start[13]))
        assert got[7] == n % 6                     # inc with limit 5 cycles through 0..5
        dec = 3
        for _ in range(n):
            dec = 7 if dec == 0 or dec > 7 else dec - 1
        assert got[8] == dec
        # exch: the old values and the final one are start[9] and all of x, once each.
        assert sorted(np.append(old, got[9]).tolist()) == sorted(np.append(x, start[9])
                                                                 .tolist())
        assert got[10] in x                         # the first CAS from 0 won
    return check


for _t in _INT_ATOMICS:
    case(_INT_ATOMICS[_t], f"Array[{_t}, 1, 'C'], Array[{_t}, 1, 'C'], Array[{_t}, 1, 'C']",
         _INT_PTX[_t], name=f"int_atomics_{_t}")(_int_atomics_check(_t))


def _float_atomics():
    @cupric.kernel
    def float_atomics(x, acc, olds):
        i = grid(1)
        v = x[i]
        atomic.add(acc, 0, v)
        atomic.sub(acc, 1, v)
        atomic.min(acc, 2, v)
        atomic.max(acc, 3, v)
        olds[i] = atomic.exch(acc, 4, v)
        atomic.add(acc, 5, v, scope="block")
        atomic.cas(acc, 6, 1.5, v)
        atomic.min(acc, 7, v, scope="system", order="acq_rel")
    return float_atomics


_FLOAT_ATOMICS = {t: _float_atomics() for t in ("f32", "f64")}


def _float_atomics_check(tname):
    dtype = np.float32 if tname == "f32" else np.float64

    def check(run, rng):
        n = 256
        x = rng.standard_normal(n).astype(dtype)
        acc = rng.standard_normal(8).astype(dtype)
        acc[6] = 1.5
        start = acc.copy()
        olds = poisoned(n, dtype)
        (_, got, old) = run(_FLOAT_ATOMICS[tname], 2, 128, x, acc, olds)
        tol = 1e-4 if tname == "f32" else 1e-10
        np.testing.assert_allclose(got[0], start[0] + x.astype(np.float64).sum(), atol=tol * 50)
        np.testing.assert_allclose(got[1], start[1] - x.astype(np.float64).sum(), atol=tol * 50)
        np.testing.assert_allclose(got[5], start[5] + x.astype(np.float64).sum(), atol=tol * 50)
        assert got[2] == min(start[2], x.min()) and got[7] == min(start[7], x.min())
        assert got[3] == max(start[3], x.max())
        assert sorted(np.append(old, got[4]).tolist()) == sorted(np.append(x, start[4])
                                                                 .tolist())
        assert got[6] in x
    return check


for _t in _FLOAT_ATOMICS:
    case(_FLOAT_ATOMICS[_t], f"Array[{_t}, 1, 'C'], Array[{_t}, 1, 'C'], Array[{_t}, 1, 'C']",
         [rf"red\.global\.add\.{_t}", rf"atom\.global\.cas\.b{_t[1:]}",
          rf"atom\.global\.exch\.b{_t[1:]}", rf"red\.cta\.global\.add\.{_t}",
          rf"atom\.acq_rel\.sys\.cas\.b{_t[1:]}"],
         name=f"float_atomics_{_t}")(_float_atomics_check(_t))


@cupric.kernel
def shared_histogram(x, hist):
    local_hist = shared.array(16, u32)
    t = threadIdx.x
    if t < 16:
        local_hist[t] = 0
    syncthreads()
    for i in grid_stride(len(x)):
        atomic.add(local_hist, x[i] % 16, 1)
    syncthreads()
    if t < 16:
        atomic.add(hist, t, local_hist[t])


@case(shared_histogram, "Array[u32, 1, 'C'], Array[u32, 1, 'C']",
      [r"atom\.shared\.add\.u32|red\.shared\.add\.u32", r"(atom|red)\.global\.add\.u32"])
def check_histogram(run, rng):
    x = rng.integers(0, 1 << 20, 5000).astype(np.uint32)
    hist = np.zeros(16, np.uint32)
    (_, got) = run(shared_histogram, 4, 64, x, hist)
    np.testing.assert_array_equal(got, np.bincount(x % 16, minlength=16))


@cupric.kernel
def half_atomics(h, b, x, olds):
    i = grid(1)
    atomic.add(h, 0, f16(x[i]))
    lo, hi = atomic.add_f16x2(h, 2, f16(x[i]), f16(2 * x[i]))
    olds[i] = f32(lo) + f32(hi) * 0
    atomic.add_bf16x2(b, 0, x[i], -x[i])


@case(half_atomics, "Array[f16, 1, 'C'], Array[u16, 1, 'C'], Array[f32, 1, 'C'], "
      "Array[f32, 1, 'C']",
      [r"red\.global\.add\.noftz\.f16\b", r"atom\.add\.noftz\.f16x2",
       r"atom\.add\.noftz\.bf16x2"],
      archs=("sm_90",))
def check_half_atomics(run, rng):
    n = 64
    x = rng.integers(-4, 5, n).astype(np.float32) / 4  # exact in f16 and bf16 sums
    h = np.zeros(4, np.float16)
    b = np.zeros(2, np.uint16)
    olds = poisoned(n, np.float32)
    (got_h, got_b, _, _) = run(half_atomics, 2, 32, h, b, x, olds)
    assert got_h[0] == x.sum() and got_h[2] == x.sum() and got_h[3] == 2 * x.sum()
    as_f32 = (got_b.astype(np.uint32) << 16).view(np.float32)
    assert as_f32[0] == x.sum() and as_f32[1] == -x.sum()


@cupric.kernel
def flag_handoff(data, flags, out):
    # Thread 0 publishes a value with release; thread 32 (another warp) waits with acquire.
    t = threadIdx.x
    if t == 0:
        data[0] = 42
        atomic.store(flags, 0, 1, order="release")
    if t == 32:
        while atomic.load(flags, 0, order="acquire") == 0:
            nanosleep(32)
        out[0] = data[0]


@case(flag_handoff, f"{I32_1}, {I32_1}, {I32_1}",
      [r"st\.release\.gpu\.b32", r"ld\.acquire\.gpu\.b32"])
def check_flag_handoff(run, rng):
    data = np.zeros(1, np.int32)
    flags = np.zeros(1, np.int32)
    out = poisoned(1, np.int32)
    (_, _, got) = run(flag_handoff, 1, 64, data, flags, out)
    assert got[0] == 42


# -- warp operations ----------------------------------------------------------------------


def _shuffles():
    @cupric.kernel
    def shuffles(x, out):
        i = grid(1)
        v = x[i]
        out[i, 0] = warp.shfl_idx(FULL_MASK, v, 3)
        out[i, 1] = warp.shfl_up(FULL_MASK, v, 2)
        out[i, 2] = warp.shfl_down(FULL_MASK, v, 5)
        out[i, 3] = warp.shfl_xor(FULL_MASK, v, 1)
        out[i, 4] = warp.shfl_down(FULL_MASK, v, 1, 8)
        out[i, 5] = warp.shfl_idx(FULL_MASK, v, laneid() + 1, width=16)
    return shuffles


_SHUFFLES = {t: _shuffles() for t in ("i32", "f32", "i64", "f64")}


def _shuffle_check(tname):
    dtype = {"i32": np.int32, "f32": np.float32, "i64": np.int64, "f64": np.float64}[tname]

    def check(run, rng):
        n = 64
        if tname[0] == "i":
            x = rng.integers(-(1 << 30), 1 << 30, n).astype(dtype) * (
                (1 << 20) if tname == "i64" else 1)
        else:
            x = rng.standard_normal(n).astype(dtype)
        out = poisoned((n, 6), dtype)
        (_, got) = run(_SHUFFLES[tname], 1, n, x, out)
        lane = np.arange(n) % 32
        base = np.arange(n) - lane
        want = np.empty((n, 6), dtype)
        want[:, 0] = x[base + 3]
        want[:, 1] = np.where(lane >= 2, x[np.arange(n) - 2], x)
        want[:, 2] = np.where(lane + 5 < 32, x[np.minimum(np.arange(n) + 5, n - 1)], x)
        want[:, 3] = x[np.arange(n) ^ 1]
        seg = lane % 8
        want[:, 4] = np.where(seg + 1 < 8, x[np.minimum(np.arange(n) + 1, n - 1)], x)
        seg16 = lane - lane % 16
        want[:, 5] = x[base + seg16 + (lane + 1) % 16]
        np.testing.assert_array_equal(got, want)
    return check


for _t in _SHUFFLES:
    case(_SHUFFLES[_t], f"Array[{_t}, 1, 'C'], Array[{_t}, 2, 'C']",
         [r"shfl\.sync\.idx\.b32", r"shfl\.sync\.up\.b32", r"shfl\.sync\.down\.b32",
          r"shfl\.sync\.bfly\.b32"], name=f"shuffles_{_t}")(_shuffle_check(_t))


@cupric.kernel
def votes(x, out):
    i = grid(1)
    v = x[i]
    out[i, 0] = u32(warp.any(FULL_MASK, v > 90))
    out[i, 1] = u32(warp.all(FULL_MASK, v >= 0))
    out[i, 2] = warp.ballot(FULL_MASK, v > 50)
    out[i, 3] = warp.match_any(FULL_MASK, v % 4)
    m, same = warp.match_all(FULL_MASK, v // 1000)
    out[i, 4] = m
    out[i, 5] = u32(same)
    out[i, 6] = warp.activemask()


@case(votes, "Array[i32, 1, 'C'], Array[u32, 2, 'C']",
      [r"vote\.sync\.any\.pred", r"vote\.sync\.all\.pred", r"vote\.sync\.ballot\.b32",
       r"match\.any\.sync\.b32", r"match\.all\.sync\.b32", r"activemask\.b32"])
def check_votes(run, rng):
    n = 64
    x = rng.integers(0, 100, n).astype(np.int32)
    out = poisoned((n, 7), np.uint32)
    (_, got) = run(votes, 1, n, x, out)
    for w in range(2):
        part = x[w * 32:(w + 1) * 32]
        g = got[w * 32:(w + 1) * 32]
        assert (g[:, 0] == int((part > 90).any())).all()
        assert (g[:, 1] == 1).all()
        ballot = sum(1 << k for k in range(32) if part[k] > 50)
        assert (g[:, 2] == ballot).all()
        for k in range(32):
            assert g[k, 3] == sum(1 << j for j in range(32) if part[j] % 4 == part[k] % 4)
        assert (g[:, 4] == FULL_MASK).all() and (g[:, 5] == 1).all()
        assert (g[:, 6] == FULL_MASK).all()


def _reductions(tname):
    @cupric.kernel
    def reductions(x, out):
        i = grid(1)
        v = x[i]
        out[i, 0] = warp.reduce_add(FULL_MASK, v)
        out[i, 1] = warp.reduce_min(FULL_MASK, v)
        out[i, 2] = warp.reduce_max(FULL_MASK, v)
        if laneid() % 3 == 0:  # a partial mask: lanes 0, 3, 6, ...
            out[i, 3] = warp.reduce_add(0x49249249, v)
            out[i, 4] = warp.reduce_max(0x49249249, v)
        else:
            out[i, 3] = v
            out[i, 4] = v
    return reductions


def _bit_reductions():
    @cupric.kernel
    def bit_reductions(x, out):
        i = grid(1)
        v = x[i]
        out[i, 0] = warp.reduce_and(FULL_MASK, v)
        out[i, 1] = warp.reduce_or(FULL_MASK, v)
        out[i, 2] = warp.reduce_xor(FULL_MASK, v)
    return bit_reductions


_REDUCTIONS = {t: _reductions(t) for t in ("i32", "u32", "f32", "i64")}
BIT_REDUCTIONS = _bit_reductions()


def _reduction_check(tname):
    dtype = {"i32": np.int32, "u32": np.uint32, "f32": np.float32, "i64": np.int64}[tname]

    def check(run, rng):
        n = 64
        if tname == "f32":
            x = rng.integers(-50, 50, n).astype(np.float32)  # exact sums in any order
        else:
            x = rng.integers(0 if tname == "u32" else -1000, 1000, n).astype(dtype)
        out = poisoned((n, 5), dtype)
        (_, got) = run(_REDUCTIONS[tname], 1, n, x, out)
        for w in range(2):
            part = x[w * 32:(w + 1) * 32]
            g = got[w * 32:(w + 1) * 32]
            with np.errstate(over="ignore"):
                assert (g[:, 0] == part.sum(dtype=dtype)).all()
            assert (g[:, 1] == part.min()).all() and (g[:, 2] == part.max()).all()
            members = part[::3]
            for k in range(32):
                if k % 3 == 0:
                    assert g[k, 3] == members.sum(dtype=dtype) and g[k, 4] == members.max()
                else:
                    assert g[k, 3] == part[k] and g[k, 4] == part[k]
    return check


for _t in _REDUCTIONS:
    case(_REDUCTIONS[_t], f"Array[{_t}, 1, 'C'], Array[{_t}, 2, 'C']",
         [r"redux\.sync\.add\.u32", r"redux\.sync\.min\.s32"] if _t == "i32" else
         [r"redux\.sync\.min\.u32"] if _t == "u32" else [r"shfl\.sync\.bfly\.b32"],
         name=f"reductions_{_t}")(_reduction_check(_t))


@case(BIT_REDUCTIONS, "Array[u32, 1, 'C'], Array[u32, 2, 'C']",
      [r"redux\.sync\.and\.b32", r"redux\.sync\.or\.b32", r"redux\.sync\.xor\.b32"])
def check_bit_reductions(run, rng):
    x = rng.integers(0, 1 << 32, 64, dtype=np.uint64).astype(np.uint32)
    out = poisoned((64, 3), np.uint32)
    (_, got) = run(BIT_REDUCTIONS, 1, 64, x, out)
    for w in range(2):
        part = x[w * 32:(w + 1) * 32]
        g = got[w * 32:(w + 1) * 32]
        assert (g[:, 0] == np.bitwise_and.reduce(part)).all()
        assert (g[:, 1] == np.bitwise_or.reduce(part)).all()
        assert (g[:, 2] == np.bitwise_xor.reduce(part)).all()


# -- clocks, grid-wide cooperation, constant memory -----------------------------------------


@cupric.kernel
def clocks(out):
    i = grid(1)
    a = clock64()
    c = clock()
    b = clock64()
    t0 = globaltimer()
    t1 = globaltimer()
    spins = 0
    while t1 == t0 and spins < 100_000:  # the timer ticks in steps of up to a microsecond
        t1 = globaltimer()
        spins += 1
    out[i, 0] = a
    out[i, 1] = i64(c)
    out[i, 2] = b
    out[i, 3] = i64(t0)
    out[i, 4] = i64(t1)


@case(clocks, "Array[i64, 2, 'C']", [r"%clock64", r"%globaltimer", r"%clock\b"])
def check_clocks(run, rng):
    out = poisoned((64, 5), np.int64)
    (got,) = run(clocks, 2, 32, out)
    a, c, b, t0, t1 = (got[:, k] for k in range(5))
    assert (a > 0).all() and (b >= a).all() and (b - a < 10**9).all()
    # %clock is the low 32 bits of %clock64, read between the two 64-bit reads.
    assert (((c & 0xFFFFFFFF) - (a & 0xFFFFFFFF)) % 2**32 <= b - a).all()
    # The global timer counts nanoseconds: it moves forward, and not by a second here.
    assert (t0 > 0).all() and (t1 > t0).all() and (t1 - t0 < 10**9).all()


@cupric.kernel
def grid_barrier(x, partial, out):
    # Phase 1: each block sums its part; grid_sync; phase 2: every thread reads them all.
    tile = shared.array(64, f64)
    t = threadIdx.x
    tile[t] = x[grid(1)]
    syncthreads()
    if t == 0:
        acc = 0.0
        for k in range(64):
            acc += tile[k]
        partial[blockIdx.x] = acc
    grid_sync()
    total = 0.0
    for b in range(len(partial)):
        total += partial[b]
    out[grid(1)] = total


@case(grid_barrier, "Array[f64, 1, 'C'], Array[f64, 1, 'C'], Array[f64, 1, 'C']",
      [r"atom\.add\.release\.gpu\.u32", r"ld\.acquire\.gpu\.u32", r"bar\.sync"])
def check_grid_barrier(run, rng):
    x = rng.standard_normal(4 * 64)
    partial = poisoned(4, np.float64)
    out = poisoned(4 * 64, np.float64)
    (_, _, got) = run(grid_barrier, 4, 64, x, partial, out)
    np.testing.assert_allclose(got, x.sum(), rtol=1e-12)


@cupric.kernel
def strided_scale(x, out):
    for i in grid_stride(len(x)):
        out[i] = x[i] * 3


@case(strided_scale, "Array[f32, 1, 'C'], Array[f32, 1, 'C']", [r"%nctaid\.x"])
def check_grid_stride(run, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = poisoned(1000, np.float32)
    (_, got) = run(strided_scale, 3, 64, x, out)
    np.testing.assert_array_equal(got, x * 3)


STENCIL = constant([0.25, 0.5, 0.25], dtype=np.float32)
LOOKUP = np.arange(100, dtype=np.int32) ** 2
BIG_TABLE = np.linspace(0, 1, 20000)  # 160 kB: spills to global memory


@cupric.kernel
def const_stencil(x, out):
    i = grid(1)
    if 1 <= i < len(x) - 1:
        # Constant indices fold at compile time; i % 3 makes the loads real.
        out[i] = STENCIL[0] * x[i - 1] + STENCIL[1] * x[i] + STENCIL[2] * x[i + 1] + \
            f32(LOOKUP[i % 100]) + STENCIL[i % 3]
    elif i < len(x):
        out[i] = f32(LOOKUP[i % 100])


@case(const_stencil, f"{F32_1}, {F32_1}", [r"\.const \.align 16 \.b8 \w+\[12\]",
                                             r"ld\.const\.f32", r"ld\.const\.u32"])
def check_const(run, rng):
    x = rng.standard_normal(200).astype(np.float32)
    out = poisoned(200, np.float32)
    (_, got) = run(const_stencil, 2, 128, x, out)
    want = (LOOKUP[np.arange(200) % 100]).astype(np.float32)
    want[1:-1] += (0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]).astype(np.float32) + \
        STENCIL[np.arange(1, 199) % 3]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


# -- math, half precision, bits -------------------------------------------------------------


def _math_kernel():
    @cupric.kernel
    def math_funcs(x, out, ints):
        i = grid(1)
        v = x[i]
        s, c = dmath.sincos(v)
        m, e = dmath.frexp(v)
        fr, whole = dmath.modf(v)
        sp, cp = dmath.sincospi(v)
        out[i, 0] = dmath.rsqrt(v)
        out[i, 1] = s
        out[i, 2] = c
        out[i, 3] = m
        out[i, 4] = dmath.ldexp(v, 3)
        out[i, 5] = dmath.erfinv(v - 1)
        out[i, 6] = dmath.saturate(v - 1)
        out[i, 7] = dmath.copysign(v, -1.0)
        out[i, 8] = dmath.fma(v, v, 1.0)
        out[i, 9] = dmath.exp10(v)
        out[i, 10] = dmath.degrees(v)
        out[i, 11] = fr + whole
        out[i, 12] = dmath.normcdf(v)
        out[i, 13] = dmath.pow(v, 2.5)
        out[i, 14] = dmath.cbrt(v) * dmath.rcbrt(v)
        out[i, 15] = dmath.hypot(v, 2.0) + dmath.atan2(v, 2.0)
        out[i, 16] = dmath.log1p(v) + dmath.expm1(v)
        out[i, 17] = dmath.tgamma(v + 1) + dmath.lgamma(v + 1)
        out[i, 18] = dmath.fmin(v, 1.0) + dmath.fmax(v, 1.0) + dmath.fdim(v, 1.0)
        out[i, 19] = dmath.round(v * 10) + dmath.rint(v * 10) + dmath.floor(v * 10)
        out[i, 20] = sp * sp + cp * cp
        out[i, 21] = dmath.erfcx(v) + dmath.erfcinv(v)
        out[i, 22] = dmath.normcdfinv(v / 3)
        out[i, 23] = dmath.remainder(v * 7, 2.0) + dmath.fmod(v * 7, 2.0)
        out[i, 24] = dmath.nextafter(v, 3.0) - v
        out[i, 25] = dmath.logb(v) + dmath.scalbn(v, 2)
        ints[i, 0] = e
        ints[i, 1] = dmath.ilogb(v)
        ints[i, 2] = i32(dmath.isnan(v)) + i32(dmath.isinf(v)) * 2 + i32(dmath.signbit(-v)) * 4
        ints[i, 3] = i32(dmath.isfinite(v))
    return math_funcs


_MATH = {t: _math_kernel() for t in ("f32", "f64")}


def _math_check(tname):
    dtype = np.float32 if tname == "f32" else np.float64

    def check(run, rng):
        n = 64
        x = rng.uniform(0.1, 1.9, n).astype(dtype)
        out = poisoned((n, 26), dtype)
        ints = poisoned((n, 4), np.int32)
        (_, got, gi) = run(_MATH[tname], 2, 32, x, out, ints)
        v = x.astype(np.float64)
        erf = np.vectorize(math.erf)
        ncdf = 0.5 * (1 + erf(v / math.sqrt(2)))
        want = {
            0: 1 / np.sqrt(v), 1: np.sin(v), 2: np.cos(v), 3: np.frexp(v)[0], 4: v * 8,
            6: np.clip(v - 1, 0, 1), 7: -v, 8: v * v + 1, 9: 10 ** v, 10: np.degrees(v),
            11: v, 12: ncdf, 13: v ** 2.5, 14: np.ones(n), 15: np.hypot(v, 2) +
            np.arctan2(v, 2), 16: np.log1p(v) + np.expm1(v),
            17: np.vectorize(math.gamma)(v + 1) + np.vectorize(math.lgamma)(v + 1),
            18: np.fmin(v, 1) + np.fmax(v, 1) + np.maximum(v - 1, 0),
            19: np.floor(v * 10 + 0.5) + np.rint(v * 10) + np.floor(v * 10),
            20: np.ones(n), 23: np.remainder(v * 7, 2) * 0 + np.fmod(v * 7, 2) +
            (v * 7 - 2 * np.round(v * 7 / 2)),
            25: np.floor(np.log2(v)) + v * 4,
        }
        rtol = 2e-5 if tname == "f32" else 1e-12
        for k, w in want.items():
            np.testing.assert_allclose(got[:, k].astype(np.float64), w, rtol=rtol * 10,
                                       atol=rtol * 10, err_msg=f"column {k}")
        # Inverses: erf(erfinv(y)) = y, normcdf(normcdfinv(p)) = p, erfc(erfcinv(y)) = y.
        np.testing.assert_allclose(erf(got[:, 5].astype(np.float64)), v - 1, atol=rtol * 100)
        p = v / 3
        np.testing.assert_allclose(0.5 * (1 + erf(got[:, 22].astype(np.float64) /
                                                  math.sqrt(2))), p, atol=rtol * 100)
        assert (got[:, 24] > 0).all()
        np.testing.assert_array_equal(gi[:, 0], np.frexp(v)[1])
        np.testing.assert_array_equal(gi[:, 1], np.floor(np.log2(v)).astype(int))
        assert (gi[:, 2] == 4).all() and (gi[:, 3] == 1).all()
    return check


for _t in _MATH:
    case(_MATH[_t], f"Array[{_t}, 1, 'C'], Array[{_t}, 2, 'C'], Array[i32, 2, 'C']",
         [r"sqrt|rsqrt", r"sin\.approx|fma\.rn|mul\.rn"] if _t == "f32" else [r"fma\.rn\.f64"],
         name=f"math_{_t}")(_math_check(_t))


def _special_kernel():
    @cupric.kernel
    def special_funcs(x, out):
        i = grid(1)
        v = x[i]
        out[i, 0] = dmath.rhypot(v, 2.0)
        out[i, 1] = dmath.norm3d(v, 2.0, 3.0)
        out[i, 2] = dmath.rnorm3d(v, 2.0, 3.0)
        out[i, 3] = dmath.norm4d(v, 2.0, 3.0, 4.0)
        out[i, 4] = dmath.rnorm4d(v, 2.0, 3.0, 4.0)
        out[i, 5] = dmath.j0(v)
        out[i, 6] = dmath.j1(v)
        out[i, 7] = dmath.jn(2, v)
        out[i, 8] = dmath.y0(v)
        out[i, 9] = dmath.y1(v)
        out[i, 10] = dmath.yn(2, v)
        out[i, 11] = dmath.cyl_bessel_i0(v)
        out[i, 12] = dmath.cyl_bessel_i1(v)
    return special_funcs


_SPECIAL = {t: _special_kernel() for t in ("f32", "f64")}


def _bessel_reference(v, n, modified=False):
    """J_n(x) = 1/pi int_0^pi cos(n t - x sin t) dt, I_n(x) = 1/pi int e^{x cos t} cos(n t)
    (the trapezoid rule is spectrally accurate for these periodic integrands)."""
    t = np.linspace(0, np.pi, 4001)
    if modified:
        f = np.exp(np.outer(v, np.cos(t))) * np.cos(n * t)
    else:
        f = np.cos(n * t - np.outer(v, np.sin(t)))
    return np.trapezoid(f, t, axis=1) / np.pi


def _special_check(tname):
    dtype = np.float32 if tname == "f32" else np.float64

    def check(run, rng):
        n = 64
        x = rng.uniform(0.5, 8.0, n).astype(dtype)
        out = poisoned((n, 13), dtype)
        (_, got) = run(_SPECIAL[tname], 2, 32, x, out)
        g = got.astype(np.float64)
        v = x.astype(np.float64)
        tol = dict(rtol=1e-4, atol=1e-5) if tname == "f32" else dict(rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(g[:, 0], 1 / np.hypot(v, 2), **tol)
        np.testing.assert_allclose(g[:, 1], np.sqrt(v * v + 13), **tol)
        np.testing.assert_allclose(g[:, 2], 1 / np.sqrt(v * v + 13), **tol)
        np.testing.assert_allclose(g[:, 3], np.sqrt(v * v + 29), **tol)
        np.testing.assert_allclose(g[:, 4], 1 / np.sqrt(v * v + 29), **tol)
        j = [_bessel_reference(v, k) for k in range(3)]
        for k in range(3):
            np.testing.assert_allclose(g[:, 5 + k], j[k], rtol=tol["rtol"] * 10,
                                       atol=tol["atol"] * 10 + 1e-12, err_msg=f"J{k}")
        # Y from the Wronskian J1 Y0 - J0 Y1 = 2 / (pi x) and the recurrence for Y2.
        np.testing.assert_allclose(j[1] * g[:, 8] - j[0] * g[:, 9], 2 / (np.pi * v),
                                   rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
        np.testing.assert_allclose(g[:, 10], 2 / v * g[:, 9] - g[:, 8],
                                   rtol=tol["rtol"] * 10, atol=tol["atol"] * 100)
        np.testing.assert_allclose(g[:, 11], np.i0(v), **tol)
        np.testing.assert_allclose(g[:, 12], _bessel_reference(v, 1, modified=True), **tol)
    return check


for _t in _SPECIAL:
    case(_SPECIAL[_t], f"Array[{_t}, 1, 'C'], Array[{_t}, 2, 'C']", [r"\.entry"],
         name=f"special_{_t}")(_special_check(_t))


@cupric.kernel
def half_and_bits(x, u, h16, bf, words, counts):
    i = grid(1)
    v = x[i]
    h = f16(v)
    h16[i] = half.fma(h, h, f16(0.5))
    bf[i, 0] = half.bf16_bits(v)
    bf[i, 1] = half.f16_bits(v)
    bf[i, 2] = half.bf16_bits(half.bf16(v) + half.bf16_from_bits(bf[i, 0]))
    bf[i, 3] = half.f16_bits(half.f16_from_bits(bf[i, 1]) * f16(2))
    a = u[i]
    c = u[(i + 1) % len(u)]
    words[i, 0] = bits.brev(a)
    words[i, 1] = bits.mulhi(a, c)
    words[i, 2] = bits.byte_perm(a, c, 0x5140)
    words[i, 3] = bits.funnelshift_l(a, c, 7)
    words[i, 4] = bits.funnelshift_r(a, c, 7)
    counts[i, 0] = bits.popc(a)
    counts[i, 1] = bits.clz(a)
    counts[i, 2] = bits.ffs(a)
    counts[i, 3] = bits.popc(u64(a) << 20)
    words[i, 5] = bits.bitcast(x[i], u32)
    words[i, 6] = u32(bits.bitcast(bits.bitcast(a, f32), i32))


@case(half_and_bits, "Array[f32, 1, 'C'], Array[u32, 1, 'C'], Array[f16, 1, 'C'], "
      "Array[u16, 2, 'C'], Array[u32, 2, 'C'], Array[i32, 2, 'C']",
      [r"cvt\.rn\.f16\.f32", r"fma\.rn\.f16", r"brev\.b32", r"mul\.hi\.u32", r"prmt\.b32",
       r"shf\.l\.wrap\.b32", r"shf\.r\.wrap\.b32", r"popc\.b32", r"popc\.b64", r"clz\.b32"])
def check_half_and_bits(run, rng):
    n = 64
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    u = rng.integers(1, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    u[5] = 0
    h16 = poisoned(n, np.float16)
    bf = poisoned((n, 4), np.uint16)
    words = poisoned((n, 7), np.uint32)
    counts = poisoned((n, 4), np.int32)
    (_, _, gh, gbf, gw, gc) = run(half_and_bits, 2, 32, x, u, h16, bf, words, counts)
    h = x.astype(np.float16).astype(np.float32)
    h64 = h.astype(np.float64)
    with np.errstate(over="ignore"):  # |h| past 256 overflows to inf, on the GPU too
        np.testing.assert_array_equal(gh, (h64 * h64 + 0.5).astype(np.float16))
    bits32 = x.view(np.uint32).astype(np.uint64)
    rne = ((bits32 + 0x7FFF + ((bits32 >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(gbf[:, 0], rne)
    np.testing.assert_array_equal(gbf[:, 1], x.astype(np.float16).view(np.uint16))
    b16 = (rne.astype(np.uint32) << 16).view(np.float32)
    twice = (b16 * 2).view(np.uint32).astype(np.uint64)
    np.testing.assert_array_equal(gbf[:, 2], ((twice + 0x7FFF + ((twice >> 16) & 1)) >> 16)
                                  .astype(np.uint16))
    np.testing.assert_array_equal(gbf[:, 3], (x.astype(np.float16) * np.float16(2))
                                  .view(np.uint16))
    c = np.roll(u, -1)
    a64, c64 = u.astype(np.uint64), c.astype(np.uint64)
    brev = np.array([int(f"{int(v):032b}"[::-1], 2) for v in u], np.uint32)
    np.testing.assert_array_equal(gw[:, 0], brev)
    np.testing.assert_array_equal(gw[:, 1], ((a64 * c64) >> 32).astype(np.uint32))
    both = a64 | (c64 << 32)
    perm = np.zeros(n, np.uint64)
    for k, sel in enumerate((0x0, 0x4, 0x1, 0x5)):
        perm |= ((both >> (8 * sel)) & 0xFF) << (8 * k)
    np.testing.assert_array_equal(gw[:, 2], perm.astype(np.uint32))
    np.testing.assert_array_equal(gw[:, 3], (((c64 << 32 | a64) << 7) >> 32).astype(np.uint32))
    np.testing.assert_array_equal(gw[:, 4], (((c64 << 32 | a64) >> 7) & 0xFFFFFFFF)
                                  .astype(np.uint32))
    np.testing.assert_array_equal(gw[:, 5], x.view(np.uint32))
    np.testing.assert_array_equal(gw[:, 6], u)
    popc = np.array([bin(int(v)).count("1") for v in u])
    np.testing.assert_array_equal(gc[:, 0], popc)
    np.testing.assert_array_equal(gc[:, 1], [32 - int(v).bit_length() for v in u])
    np.testing.assert_array_equal(gc[:, 2], [(int(v) & -int(v)).bit_length() for v in u])
    np.testing.assert_array_equal(gc[:, 3], popc)


# -- vector types --------------------------------------------------------------------------


@cupric.kernel
def vectors(x, out, ints):
    i = grid(1)
    v = float3(x[i, 0], x[i, 1], x[i, 2])
    w = float3(1.0)
    u = v * 2.0 + w - v / 4
    u += w
    n = vector.normalize(u)
    c = vector.cross(v, w)
    m = vector.max(v, w)
    lo = vector.min(v, w)
    a, b, z = v
    out[i, 0] = u.x
    out[i, 1] = u.y
    out[i, 2] = u.z
    out[i, 3] = vector.dot(v, w)
    out[i, 4] = vector.length(u)
    out[i, 5] = n.x
    out[i, 6] = c.y
    out[i, 7] = m.z + lo.x
    out[i, 8] = (-v).x
    out[i, 9] = a + b + z + v[1]
    p = int2(i, -7)
    q = (p * 3 + 1) // 2 % 5
    ints[i, 0] = q.x
    ints[i, 1] = q.y
    ints[i, 2] = (p << 2 ^ int2(5)).y


@case(vectors, "Array[f32, 2, 'C'], Array[f32, 2, 'C'], Array[i32, 2, 'C']",
      [r"__nv_sqrtf|sqrt\.rn\.f32"])
def check_vectors(run, rng):
    n = 64
    x = rng.standard_normal((n, 3)).astype(np.float32)
    out = poisoned((n, 10), np.float32)
    ints = poisoned((n, 3), np.int32)
    (_, got, gi) = run(vectors, 2, 32, x, out, ints)
    v = x.astype(np.float64)
    u = v * 2 + 1 - v / 4 + 1
    np.testing.assert_allclose(got[:, 0:3], u, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 3], v.sum(1), rtol=1e-5, atol=1e-5)
    norm = np.sqrt((u * u).sum(1))
    np.testing.assert_allclose(got[:, 4], norm, rtol=1e-5)
    np.testing.assert_allclose(got[:, 5], u[:, 0] / norm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 6], v[:, 2] - v[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, 7], np.maximum(v[:, 2], 1) + np.minimum(v[:, 0], 1),
                               rtol=1e-6)
    np.testing.assert_array_equal(got[:, 8], -x[:, 0])
    np.testing.assert_allclose(got[:, 9], v.sum(1) + v[:, 1], rtol=1e-5, atol=1e-5)
    i = np.arange(n)
    np.testing.assert_array_equal(gi[:, 0], (i * 3 + 1) // 2 % 5)
    np.testing.assert_array_equal(gi[:, 1], np.full(n, (-7 * 3 + 1) // 2 % 5))
    np.testing.assert_array_equal(gi[:, 2], np.full(n, (-7 << 2) ^ 5))


# -- print, assert, trap, bounds checks (run in their own process on a GPU) ----------------


@cupric.kernel
def printer(x):
    i = grid(1)
    if i < 2:
        print("thread", i, "value", x[i], True, f"fmt={x[i]:.2f}|{i:3d}", sep=" ", end="!\n")


@cupric.kernel
def asserter(x):
    i = grid(1)
    assert x[i] >= 0, "x must be non-negative"


@cupric.kernel
def trapper(x):
    if x[grid(1)] < 0:
        cupric.device.trap()


@cupric.kernel(bounds_check=True)
def out_of_bounds(x, n):
    i = grid(1)
    x[i + n] = 1.0
