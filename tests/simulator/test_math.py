"""cupric.device.math, bits and half precision in the simulator, against NumPy and the
standard library, with the result types libdevice gives."""

import math as pymath

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import bits, grid, half
from cupric.device import math as dm
from cupric.types import f32, f64, i32, i64, u32

UNARY = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "exp": np.exp, "exp2": np.exp2,
    "exp10": lambda x: 10.0 ** x, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "cbrt": np.cbrt, "rcbrt": lambda x: 1 / np.cbrt(x), "tanh": np.tanh, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "atan": np.arctan, "floor": np.floor,
    "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "fabs": np.fabs,
    "erf": np.vectorize(pymath.erf), "erfc": np.vectorize(pymath.erfc),
    "lgamma": np.vectorize(pymath.lgamma), "tgamma": np.vectorize(pymath.gamma),
    "sinpi": lambda x: np.sin(np.pi * x), "cospi": lambda x: np.cos(np.pi * x),
    "normcdf": np.vectorize(lambda v: 0.5 * pymath.erfc(-v / pymath.sqrt(2))),
    "saturate": lambda x: np.clip(x, 0, 1), "degrees": np.degrees, "radians": np.radians,
    "round": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
}


def apply_unary(fn, x, out):
    i = grid(1)
    if i < x.size:
        out[i] = fn(x[i])


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_functions_against_numpy(rng, name, dtype):
    x = (rng.random(64) * 4 + 0.1).astype(dtype)  # in every function's domain
    out = np.full(64, np.nan, dtype)
    sim.launch(apply_unary, 2, 32, (getattr(dm, name), x, out))
    expect = UNARY[name](x.astype(np.float64)).astype(dtype)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, expect, rtol=tol, atol=tol)


def result_types(x32, x64, out):
    out[0] = type(dm.sin(x32[0])) is np.float32
    out[1] = type(dm.sin(x64[0])) is np.float64
    out[2] = type(dm.sin(1.0)) is np.float64
    out[3] = type(dm.pow(x32[0], 2.0)) is np.float32
    out[4] = type(dm.pow(x32[0], x64[0])) is np.float64
    out[5] = type(dm.sqrt(np.float16(4))) is np.float32


def test_result_types_follow_the_arguments():
    out = np.zeros(6, np.int8)
    sim.launch(result_types, 1, 1, (np.ones(1, np.float32), np.ones(1), out))
    assert out.all()


def extras(x, out):
    i = grid(1)
    v = x[i]
    s, c = dm.sincos(v)
    out[i, 0] = s * s + c * c
    m, e = dm.frexp(v)
    out[i, 1] = dm.ldexp(m, e) - v
    out[i, 2] = dm.erf(dm.erfinv(v / 8.0)) - v / 8.0
    out[i, 3] = dm.erfc(dm.erfcinv(v / 8.0 + 1.0)) - (v / 8.0 + 1.0)
    out[i, 4] = dm.fma(v, v, -v * v)
    out[i, 5] = dm.copysign(3.0, -v)
    out[i, 6] = dm.normcdf(dm.normcdfinv(dm.saturate(v / 8.0 + 0.5))) - dm.saturate(v / 8.0 + 0.5)
    f, w = dm.modf(v)
    out[i, 7] = f + w - v
    out[i, 8] = dm.hypot(v, 1.0) - pymath.hypot(v, 1.0)
    out[i, 9] = dm.fdim(v, 0.0) - max(v, 0.0)


def test_extras_identities(rng):
    x = rng.uniform(-7.9, 7.9, 64)
    out = np.full((64, 10), np.nan)
    sim.launch(extras, 2, 32, (x, out))
    np.testing.assert_allclose(out[:, 0], 1.0, atol=1e-15)
    np.testing.assert_allclose(out[:, [1, 2, 3, 6, 7, 8, 9]], 0.0, atol=1e-14)
    # fma(v, v, -rounded(v*v)) is the rounding error of v*v: exact, tiny, not always zero
    assert (np.abs(out[:, 4]) <= np.abs(x * x) * 2.0**-52).all()
    np.testing.assert_array_equal(out[:, 5], -3.0 * np.sign(x))


def special_values(out):
    out[0] = dm.sqrt(-1.0)
    out[1] = dm.log(0.0)
    out[2] = dm.lgamma(0.0)
    out[3] = dm.tgamma(-2.0)
    out[4] = dm.tgamma(200.0)
    out[5] = dm.erfinv(1.0)
    out[6] = dm.erfcx(30.0) * 30.0 * pymath.sqrt(pymath.pi)
    out[7] = dm.ilogb(0.0)
    out[8] = dm.rsqrt(0.0)
    out[9] = dm.sinpi(3.0)
    out[10] = dm.cospi(0.5)
    out[11] = dm.saturate(dm.nan)
    out[12] = dm.nextafter(np.float32(1), np.float32(2)) - np.float32(1)
    out[13] = dm.isnan(dm.nan) + 2 * dm.isinf(dm.inf) + 4 * dm.isfinite(1.0) + 8 * dm.signbit(-0.0)
    out[14] = dm.remainder(5.0, 3.0)
    out[15] = dm.logb(0.75)


def test_special_values_follow_ieee_not_python_exceptions():
    out = np.zeros(16)
    sim.launch(special_values, 1, 1, (out,))
    assert np.isnan(out[0]) and out[1] == -np.inf and out[2] == np.inf and np.isnan(out[3])
    assert out[4] == np.inf and out[5] == np.inf
    assert abs(out[6] - 1.0) < 1e-3
    assert out[7] == -2**31 and out[8] == np.inf and out[9] == 0 and out[10] == 0
    assert out[11] == 0 and out[12] == np.float32(2.0**-23) and out[13] == 15
    assert out[14] == -1.0 and out[15] == -1.0


def bit_ops(x, out):
    i = grid(1)
    v = x[i]
    out[i, 0] = bits.popc(v)
    out[i, 1] = bits.clz(v)
    out[i, 2] = bits.ffs(v)
    out[i, 3] = bits.brev(v)
    out[i, 4] = bits.mulhi(v, v)
    out[i, 5] = bits.byte_perm(v, 0x76543210, 0x0123)
    out[i, 6] = bits.funnelshift_l(v, 0xFFFFFFFF, 4)
    out[i, 7] = bits.funnelshift_r(v, 0x1, 4)


def test_bit_operations_on_u32(rng):
    x = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    x[0] = 0
    out = np.zeros((32, 8), np.uint64)
    sim.launch(bit_ops, 1, 32, (x, out))
    for i, v in enumerate(int(v) for v in x):
        assert out[i, 0] == bin(v).count("1")
        assert out[i, 1] == 32 - v.bit_length()
        assert out[i, 2] == (v & -v).bit_length()
        assert out[i, 3] == int(f"{v:032b}"[::-1], 2)
        assert out[i, 4] == (v * v) >> 32
        assert out[i, 5] == int.from_bytes(v.to_bytes(4, "little")[::-1], "little")
        assert out[i, 6] == ((0xFFFFFFFF << 32 | v) << 4 >> 32) & 0xFFFFFFFF
        assert out[i, 7] == ((1 << 32 | v) >> 4) & 0xFFFFFFFF


def halves(x, out16, outbf):
    i = grid(1)
    v = x[i]
    out16[i] = half.f16_bits(v)
    outbf[i, 0] = half.bf16_bits(v)
    outbf[i, 1] = half.bf16_bits(half.bf16(v))
    outbf[i, 2] = half.bf16_bits(half.bf16_from_bits(half.bf16_bits(v)))


def test_half_conversions(rng):
    x = (rng.standard_normal(64) * 100).astype(np.float32)
    x[:4] = [np.inf, -np.inf, np.nan, 1.00390625]  # the last is a bf16 tie: rounds to even
    out16 = np.zeros(64, np.uint16)
    outbf = np.zeros((64, 3), np.uint16)
    sim.launch(halves, 2, 32, (x, out16, outbf))
    np.testing.assert_array_equal(out16, x.astype(np.float16).view(np.uint16))
    bits32 = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits32 + 0x7FFF + ((bits32 >> 16) & 1)) >> 16).astype(np.uint16)
    finite = np.isfinite(x)
    np.testing.assert_array_equal(outbf[finite, 0], rounded[finite])
    assert outbf[0, 0] == 0x7F80 and outbf[1, 0] == 0xFF80 and outbf[2, 0] & 0x7FC0 == 0x7FC0
    assert outbf[3, 0] == 0x3F80
    assert (outbf[:, 1] == outbf[:, 0]).all() and (outbf[:, 2] == outbf[:, 0]).all()


def f16_arithmetic(a, b, out):
    i = grid(1)
    out[i, 0] = a[i] * b[i] + a[i]
    out[i, 1] = half.fma(a[i], b[i], a[i])


def test_f16_arithmetic_stays_f16(rng):
    a = rng.standard_normal(32).astype(np.float16)
    b = rng.standard_normal(32).astype(np.float16)
    out = np.zeros((32, 2), np.float16)
    sim.launch(f16_arithmetic, 1, 32, (a, b, out))
    np.testing.assert_array_equal(out[:, 0], a * b + a)
    exact = a.astype(np.float64) * b.astype(np.float64) + a.astype(np.float64)
    np.testing.assert_array_equal(out[:, 1], exact.astype(np.float16))


def norms(x, out):
    i = grid(1)
    a, b, c, d = x[i, 0], x[i, 1], x[i, 2], x[i, 3]
    out[i, 0] = dm.rhypot(a, b)
    out[i, 1] = dm.norm3d(a, b, c)
    out[i, 2] = dm.rnorm3d(a, b, c)
    out[i, 3] = dm.norm4d(a, b, c, d)
    out[i, 4] = dm.rnorm4d(a, b, c, d)


def test_norms(rng):
    x = rng.standard_normal((32, 4)) * 10.0 ** rng.integers(-200, 200, (32, 1))
    out = np.zeros((32, 5))
    sim.launch(norms, 1, 32, (x, out))
    n2, n3, n4 = (np.sqrt(((x[:, :k] / np.abs(x).max(1, keepdims=True)) ** 2).sum(1))
                  * np.abs(x).max(1) for k in (2, 3, 4))
    np.testing.assert_allclose(out, np.stack([1 / n2, n3, 1 / n3, n4, 1 / n4], 1), rtol=1e-14)


def bitcasts(f, out):
    i = grid(1)
    u = bits.bitcast(f[i], u32)
    out[i, 0] = u
    out[i, 1] = bits.bitcast(bits.bitcast(u, i32), f32) == f[i]
    out[i, 2] = bits.bitcast(bits.bitcast(1.5, i64), f64) == 1.5


def test_bitcast(rng):
    f = rng.standard_normal(32).astype(np.float32)
    out = np.zeros((32, 3), np.int64)
    sim.launch(bitcasts, 1, 32, (f, out))
    np.testing.assert_array_equal(out[:, 0], f.view(np.uint32))
    assert out[:, 1:].all()


def bad_bitcast(f):
    bits.bitcast(f[0], i64)


def test_bitcast_refuses_other_widths():
    with pytest.raises(TypeError, match="widths differ"):
        sim.launch(bad_bitcast, 1, 1, (np.zeros(1, np.float32),))


def bessels(x, out):
    i = grid(1)
    v = x[i]
    out[i, 0] = dm.j0(v)
    out[i, 1] = dm.j1(v)
    out[i, 2] = dm.jn(5, v)
    out[i, 3] = dm.y0(v)
    out[i, 4] = dm.y1(v)
    out[i, 5] = dm.yn(3, v)
    out[i, 6] = dm.cyl_bessel_i0(v / 10.0)
    out[i, 7] = dm.cyl_bessel_i1(v / 10.0)


def test_bessel_functions_against_scipy(rng):
    special = pytest.importorskip("scipy.special")
    x = np.concatenate([rng.uniform(0.01, 60, 60), [1e-3, 2e5 + 0.25, 7.5e6]])
    out = np.full((x.size, 8), np.nan)
    sim.launch(bessels, 1, x.size, (x, out))
    # jv/yv (AMOS) rather than j0/y0 (Cephes), which lose digits at large x.
    expect = np.stack([special.jv(0, x), special.jv(1, x), special.jv(5, x), special.yv(0, x),
                       special.yv(1, x), special.yv(3, x), special.iv(0, x / 10),
                       special.iv(1, x / 10)], 1)
    overflow = np.isinf(expect)  # I0 and I1 of large x
    assert (out[overflow] == np.inf).all()
    # Oscillating functions: absolute error against their envelope sqrt(2 / (pi x)).
    scale = np.maximum(np.abs(expect), np.sqrt(2 / (np.pi * np.maximum(x, 1)))[:, None])
    err = np.abs(out[~overflow] - expect[~overflow]) / scale[~overflow]
    assert (err <= 1e-13).all()


def bessel_edges(out):
    out[0] = dm.y0(0.0)
    out[1] = dm.y1(-1.0)
    out[2] = dm.jn(-3, 2.0) + dm.jn(3, 2.0)
    out[3] = dm.j0(0.0)
    out[4] = dm.cyl_bessel_i1(-2.0) + dm.cyl_bessel_i1(2.0)
    out[5] = dm.j1(dm.inf)


def test_bessel_edge_values():
    out = np.zeros(6)
    sim.launch(bessel_edges, 1, 1, (out,))
    assert out[0] == -np.inf and np.isnan(out[1])
    assert out[2] == 0 and out[3] == 1 and out[4] == 0 and out[5] == 0
