"""Half precision as kernel types: conversions with rounding modes, the bfloat16 fma and
the packed f16x2 / bf16x2 operations, bit for bit on the simulator against NumPy and
ml_dtypes (and directed roundings against neighbours found with nextafter), their PTX
(native half instructions), and on the GPU the same bits as the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.device import half, threadIdx
from cupric.simulator import launch
from cupric.types import f16, f32

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is the bfloat16 reference")
BF16 = ml_dtypes.bfloat16
MODES = ("rn", "rz", "rd", "ru")


def samples(rng, n=3000):
    """f32 values over the interesting ranges: ordinary, tiny (f16 subnormals), huge
    (past f16's range), bf16 subnormals, ties, and the infinities."""
    x = np.concatenate([
        rng.standard_normal(n) * 10.0,
        rng.standard_normal(n // 4) * 1e-5,
        rng.standard_normal(n // 4) * 1e5,
        rng.standard_normal(n // 8) * 1e-39,
        (rng.integers(-2**12, 2**12, n // 8) + 0.5) * 2.0 ** -7,  # f16 / bf16 ties
        [0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, -65520.0, 3.4e38, -3.4e38],
    ])
    return x.astype(np.float32)


def directed(x: np.ndarray, nearest: np.ndarray, mode: str) -> np.ndarray:
    """The directed rounding of x, from its nearest value and that value's neighbours."""
    wide = x.astype(np.float64)
    near = nearest.astype(np.float64)
    with np.errstate(over="ignore"):
        up = np.nextafter(nearest, nearest.dtype.type(np.inf))
        down = np.nextafter(nearest, nearest.dtype.type(-np.inf))
    above = np.where(near >= wide, nearest, up)      # the least value >= x
    below = np.where(near <= wide, nearest, down)    # the greatest value <= x
    if mode == "ru":
        return above
    if mode == "rd":
        return below
    return np.where(wide >= 0, below, above)         # rz


def convert_rn(x, out16, outb):
    for j in range(threadIdx.x, x.size, 64):
        out16[j] = half.to_f16(x[j])
        outb[j] = half.to_bf16(x[j], rounding="rn")


def convert_rz(x, out16, outb):
    for j in range(threadIdx.x, x.size, 64):
        out16[j] = half.to_f16(x[j], rounding="rz")
        outb[j] = half.to_bf16(x[j], rounding="rz")


def convert_rd(x, out16, outb):
    for j in range(threadIdx.x, x.size, 64):
        out16[j] = half.to_f16(x[j], rounding="rd")
        outb[j] = half.to_bf16(x[j], rounding="rd")


def convert_ru(x, out16, outb):
    for j in range(threadIdx.x, x.size, 64):
        out16[j] = half.to_f16(x[j], rounding="ru")
        outb[j] = half.to_bf16(x[j], rounding="ru")


CONVERT = {"rn": convert_rn, "rz": convert_rz, "rd": convert_rd, "ru": convert_ru}


def convert_kernel(mode):
    return CONVERT[mode]


def run_convert(mode, x):
    out16 = np.full(x.size, np.nan, np.float16)
    outb = np.full(x.size, np.nan, np.float32)
    launch(convert_kernel(mode), (1,), (64,), (x, out16, outb))
    return out16, outb


@pytest.mark.parametrize("mode", MODES)
def test_conversions_bit_exact(mode, rng):
    x = samples(rng)
    out16, outb = run_convert(mode, x)
    with np.errstate(over="ignore"):
        near16 = x.astype(np.float16)
    nearb = x.astype(BF16)
    if mode == "rn":
        want16, wantb = near16, nearb.astype(np.float32)
    else:
        want16 = directed(x, near16, mode)
        wantb = directed(x, nearb, mode).astype(np.float32)
        # finite values past the largest finite round to it in the modes toward zero
        big = np.float16(65504.0)
        want16 = np.where(np.isinf(want16) & np.isfinite(x) &
                          ((mode == "rz") | ((mode == "rd") & (x > 0)) |
                           ((mode == "ru") & (x < 0))), np.copysign(big, x), want16)
    assert np.array_equal(out16.view(np.uint16), want16.astype(np.float16).view(np.uint16))
    assert np.array_equal(outb.view(np.uint32), wantb.view(np.uint32))


def packed_kernel(a, b, c, out, scalar):
    i = threadIdx.x
    for j in range(i, a.size, 64):
        out[0, j] = half.fma2_bf16(a[j], b[j], c[j])
        out[1, j] = half.add2_bf16(a[j], b[j])
        out[2, j] = half.mul2_bf16(a[j], b[j])
        out[3, j] = half.fma2_f16(a[j], b[j], c[j])
        out[4, j] = half.add2_f16(a[j], b[j])
        out[5, j] = half.mul2_f16(a[j], b[j])
        lo, hi = half.unpack2_bf16(a[j])
        scalar[0, j] = half.bf16_fma(lo, hi, f32(0.5))
        x16, y16 = half.unpack2_f16(b[j])
        scalar[1, j] = f32(x16 * y16 + x16)


def pairs(rng, n, kind):
    """u32 words of two halves each, values in a range where every product and sum is
    exact in float64 (so rounding that once is the reference)."""
    v = (rng.standard_normal((2, n)) * 4).astype(np.float32)
    bits = v.astype(BF16).view(np.uint16) if kind == "bf16" else \
        v.astype(np.float16).view(np.uint16)
    return bits[0].astype(np.uint32) | (bits[1].astype(np.uint32) << 16)


def halves(words, kind):
    lo, hi = (words & 0xFFFF).astype(np.uint16), (words >> 16).astype(np.uint16)
    t = BF16 if kind == "bf16" else np.float16
    return lo.view(t).astype(np.float64), hi.view(t).astype(np.float64)


def pack(lo, hi, kind):
    t = BF16 if kind == "bf16" else np.float16
    return lo.astype(t).view(np.uint16).astype(np.uint32) | \
        (hi.astype(t).view(np.uint16).astype(np.uint32) << 16)


def test_packed_and_fma_bit_exact(rng):
    n = 500
    out = np.zeros((6, n), np.uint32)
    scalar = np.full((2, n), np.nan, np.float32)
    words = {kind: [pairs(rng, n, kind) for _ in range(3)] for kind in ("bf16", "f16")}
    # one set of words feeds both kinds' operations: use bf16 words for rows 0-2 and
    # f16 words for rows 3-5 by running twice
    for kind, rows in (("bf16", (0, 1, 2)), ("f16", (3, 4, 5))):
        a, b, c = words[kind]
        launch(packed_kernel, (1,), (64,), (a, b, c, out, scalar))
        (alo, ahi), (blo, bhi), (clo, chi) = (halves(w, kind) for w in (a, b, c))
        want = [pack(alo * blo + clo, ahi * bhi + chi, kind),
                pack(alo + blo, ahi + bhi, kind), pack(alo * blo, ahi * bhi, kind)]
        for row, w in zip(rows, want):
            assert np.array_equal(out[row], w), (kind, row)
        if kind == "bf16":
            assert np.array_equal(scalar[0], (alo * ahi + 0.5).astype(BF16).astype(np.float32))
        else:
            x16 = blo.astype(np.float16)
            y16 = bhi.astype(np.float16)
            assert np.array_equal(scalar[1], (x16 * y16 + x16).astype(np.float32))


# -- PTX --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nvvm():
    pytest.importorskip("cuda.bindings.nvvm", reason="libNVVM bindings are not installed")


def test_ptx_uses_native_half_instructions(nvvm):
    sig = ("Array[u32, 1, 'C'], Array[u32, 1, 'C'], Array[u32, 1, 'C'], Array[u32, 2, 'C'], "
           "Array[f32, 2, 'C']")
    ptx = cupric.kernel(packed_kernel).inspect_ptx(sig)
    for instruction in ("fma.rn.bf16x2", "fma.rn.f16x2", "fma.rn.bf16 ", "mul.f16", "add.f16"):
        assert instruction in ptx, instruction
    ptx = cupric.kernel(convert_kernel("rz")).inspect_ptx(
        "Array[f32, 1, 'C'], Array[f16, 1, 'C'], Array[f32, 1, 'C']")
    assert "cvt.rz.f16.f32" in ptx
    ptx = cupric.kernel(convert_kernel("ru")).inspect_ptx(
        "Array[f32, 1, 'C'], Array[f16, 1, 'C'], Array[f32, 1, 'C']")
    assert "cvt.rp.f16.f32" in ptx


def test_rounding_mode_errors():
    from cupric.compiler.errors import CompileError

    def bad(x, out):
        out[0] = half.to_f16(x[0], rounding="up")

    with pytest.raises(CompileError, match="rounding must be one of"):
        cupric.kernel(bad).inspect_ir("Array[f32, 1, 'C'], Array[f16, 1, 'C']")


# -- GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_gpu_conversions_match_simulator(mode, rng):
    from cupric.runtime.memory import to_device
    x = samples(rng)
    want16, wantb = run_convert(mode, x)
    out16 = to_device(np.full(x.size, np.nan, np.float16))
    outb = to_device(np.full(x.size, np.nan, np.float32))
    cupric.kernel(convert_kernel(mode))[1, 64](to_device(x), out16, outb)
    assert np.array_equal(out16.to_numpy().view(np.uint16), want16.view(np.uint16))
    assert np.array_equal(outb.to_numpy().view(np.uint32), wantb.view(np.uint32))


@pytest.mark.gpu
def test_gpu_packed_match_simulator(rng):
    from cupric.runtime.memory import to_device
    n = 4096
    for kind in ("bf16", "f16"):
        a, b, c = (pairs(rng, n, kind) for _ in range(3))
        want = np.zeros((6, n), np.uint32)
        want_s = np.full((2, n), np.nan, np.float32)
        launch(packed_kernel, (1,), (64,), (a, b, c, want, want_s))
        out = to_device(np.zeros((6, n), np.uint32))
        out_s = to_device(np.full((2, n), np.nan, np.float32))
        # fma=False: x16 * y16 + x16 stays two roundings, as the simulator computes it
        cupric.kernel(packed_kernel, fma=False)[1, 64](to_device(a), to_device(b),
                                                       to_device(c), out, out_s)
        rows = (0, 1, 2) if kind == "bf16" else (3, 4, 5)
        got = out.to_numpy()
        for row in rows:
            assert np.array_equal(got[row], want[row]), (kind, row)
        srow = 0 if kind == "bf16" else 1
        assert np.array_equal(out_s.to_numpy()[srow], want_s[srow])
