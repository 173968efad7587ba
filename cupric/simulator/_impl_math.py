"""Simulator implementations of `cupric.device.math`, `bits`, `half` and `vector`.

Math is computed in f64 with NumPy (IEEE results for NaN, infinities and poles, no
exceptions) and rounded to the result type: f32 when the arguments are f32 or f16
(Python numbers are weak, as in NumPy), f64 otherwise. Rounding an f64 result to f32 is
at least as accurate as libdevice's f32 functions, which makes it the reference.
"""

from __future__ import annotations

import math as _m

import numpy as np

from .. import types as _t
from ._state import implements

_F32 = np.float32
_F64 = np.float64
_SQRT2 = _m.sqrt(2.0)


def _rtype(args):
    rt = None
    for x in args:
        t = type(x)
        if t is _F32 or t is np.float16:
            rt = _F32
        elif t is float or t is int or t is bool:
            continue  # weak Python scalars take the other operands' type
        else:
            return _F64
    return rt or _F64


def _unary(fn):
    def impl(s, x):
        return _rtype((x,))(fn(_F64(x)))
    return impl


def _binary(fn):
    def impl(s, x, y):
        return _rtype((x, y))(fn(_F64(x), _F64(y)))
    return impl


# -- f64 kernels of the functions NumPy lacks -----------------------------------------


def _erf(x):
    return _m.erf(x)


def _erfc(x):
    return _m.erfc(x)


def _lgamma(x):
    if _m.isinf(x):
        return _m.inf
    try:
        return _m.lgamma(x)
    except ValueError:  # a pole: 0 or a negative integer, where lgamma is +inf
        return _m.inf


def _tgamma(x):
    if _m.isnan(x) or x == _m.inf:
        return x
    if x == -_m.inf:
        return _m.nan
    try:
        return _m.gamma(x)
    except ValueError:  # gamma(+-0) = +-inf; negative integers have no value
        return _m.copysign(_m.inf, x) if x == 0 else _m.nan
    except OverflowError:
        return _m.inf


def _erfinv(y):
    if _m.isnan(y) or y < -1 or y > 1:
        return _m.nan
    if y in (-1.0, 1.0):
        return _m.copysign(_m.inf, y)
    if y == 0:
        return y
    # Start from the closed-form approximation of the inverse logistic-like shape, then
    # polish with Newton steps on erf(x) - y (quadratic convergence, a few steps).
    a = 0.147
    ln = _m.log1p(-y * y)
    t = 2.0 / (_m.pi * a) + ln / 2.0
    x = _m.copysign(_m.sqrt(_m.sqrt(t * t - ln / a) - t), y)
    for _ in range(4):
        err = _m.erf(x) - y
        x -= err / (2.0 / _m.sqrt(_m.pi) * _m.exp(-x * x))
    return x


def _erfcinv(y):
    if _m.isnan(y) or y < 0 or y > 2:
        return _m.nan
    if y == 0:
        return _m.inf
    if y == 2:
        return -_m.inf
    if y >= 0.0625:
        return _erfinv(1.0 - y)
    # Small y: Newton on erfc directly keeps the relative accuracy that 1 - y would lose.
    x = _m.sqrt(-_m.log(y))
    for _ in range(60):
        step = (_m.erfc(x) - y) / (-2.0 / _m.sqrt(_m.pi) * _m.exp(-x * x))
        x -= step
        if abs(step) <= 1e-16 * x:
            break
    return x


def _erfcx(x):
    if _m.isnan(x):
        return x
    if x < 25.0:
        return _m.exp(x * x) * _m.erfc(x) if x > -26.7 else _m.inf
    # Asymptotic series: erfc(x) underflows long before exp(x*x) stops overflowing.
    inv = 1.0 / (x * x)
    return (1.0 - 0.5 * inv + 0.75 * inv * inv - 1.875 * inv ** 3) / (x * _m.sqrt(_m.pi))


def _normcdfinv(p):
    return -_SQRT2 * _erfcinv(2.0 * p)


def _sinpi(x):
    if not _m.isfinite(x):
        return _m.nan
    r = _m.fmod(x, 2.0)
    if r == _m.floor(r):
        return _m.copysign(0.0, x)
    if abs(r) in (0.5, 1.5):
        return _m.copysign(1.0, x) * (1.0 if abs(r) == 0.5 else -1.0)
    return _m.sin(_m.pi * r)


def _cospi(x):
    if not _m.isfinite(x):
        return _m.nan
    r = _m.fmod(abs(x), 2.0)
    if r in (0.5, 1.5):
        return 0.0
    if r == 0.0:
        return 1.0
    if r == 1.0:
        return -1.0
    return _m.cos(_m.pi * r)


def _round(x):
    # C round(): half-way cases away from zero (NumPy's round is half-to-even).
    if not _m.isfinite(x):
        return x
    t = _m.trunc(x)
    if abs(x - t) >= 0.5:
        t += _m.copysign(1.0, x)
    return _m.copysign(t, x)


def _logb(x):
    if _m.isnan(x):
        return x
    if _m.isinf(x):
        return _m.inf
    if x == 0:
        return -_m.inf
    return float(_m.frexp(x)[1] - 1)


def _remainder(x, y):
    if _m.isnan(x) or _m.isnan(y) or _m.isinf(x) or y == 0:
        return _m.nan
    return _m.remainder(x, y)


def _fdim(x, y):
    if _m.isnan(x) or _m.isnan(y):
        return _m.nan
    return x - y if x > y else 0.0


def _saturate(x):
    if _m.isnan(x):
        return 0.0
    return 0.0 if x < 0 else 1.0 if x > 1 else x


_UNARY = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "sinpi": _sinpi, "cospi": _cospi, "degrees": np.degrees, "radians": np.radians,
    "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(10.0, x),
    "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "logb": _logb, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt, "rcbrt": lambda x: 1.0 / np.cbrt(x), "erf": _erf, "erfc": _erfc,
    "erfinv": _erfinv, "erfcinv": _erfcinv, "erfcx": _erfcx,
    "normcdf": lambda x: 0.5 * _m.erfc(-x / _SQRT2), "normcdfinv": _normcdfinv,
    "lgamma": _lgamma, "tgamma": _tgamma, "gamma": _tgamma,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "round": _round,
    "fabs": np.fabs, "saturate": _saturate,
}
_BINARY = {
    "atan2": np.arctan2, "pow": np.power, "hypot": np.hypot, "fmod": np.fmod,
    "remainder": _remainder, "copysign": np.copysign, "fmin": np.fmin, "fmax": np.fmax,
    "fdim": _fdim,
}

for _name, _fn in _UNARY.items():
    implements(f"math.{_name}")(_unary(_fn))
for _name, _fn in _BINARY.items():
    implements(f"math.{_name}")(_binary(_fn))
del _name, _fn


def _norm(values) -> float:
    # Scale by the largest magnitude first, so that squares neither overflow nor underflow.
    m = max(abs(v) for v in values)
    if _m.isinf(m):
        return _m.inf
    if _m.isnan(m) or m == 0:
        return m
    return m * _m.sqrt(sum((v / m) ** 2 for v in values))


def _norm_impl(reciprocal: bool):
    def impl(s, *xs):
        rt = _rtype(xs)
        n = _norm([float(x) for x in xs])
        if reciprocal:
            return rt(_m.inf if n == 0 else 1.0 / n)
        return rt(n)
    return impl


implements("math.rhypot", "math.rnorm3d", "math.rnorm4d")(_norm_impl(True))
implements("math.norm3d", "math.norm4d")(_norm_impl(False))


@implements("math.sincos")
def _sincos(s, x):
    rt = _rtype((x,))
    return rt(np.sin(_F64(x))), rt(np.cos(_F64(x)))


@implements("math.sincospi")
def _sincospi(s, x):
    rt = _rtype((x,))
    return rt(_sinpi(float(x))), rt(_cospi(float(x)))


@implements("math.ilogb")
def _ilogb(s, x):
    x = float(x)
    if _m.isnan(x) or x == 0:
        return np.int32(-2**31)  # FP_ILOGB0 and FP_ILOGBNAN are INT_MIN on CUDA
    if _m.isinf(x):
        return np.int32(2**31 - 1)
    return np.int32(_m.frexp(x)[1] - 1)


@implements("math.modf")
def _modf(s, x):
    rt = _rtype((x,))
    frac, whole = np.modf(_F64(x))
    return rt(frac), rt(whole)


@implements("math.frexp")
def _frexp(s, x):
    rt = _rtype((x,))
    m, e = np.frexp(_F64(x))
    return rt(m), np.int32(e)


@implements("math.ldexp", "math.scalbn")
def _ldexp(s, x, e):
    rt = _rtype((x,))
    # Clamp the exponent: huge ones saturate to inf or 0 just the same, without
    # overflowing the C int NumPy passes down.
    return rt(np.ldexp(_F64(x), max(-4000, min(4000, int(e)))))


@implements("math.nextafter")
def _nextafter(s, x, y):
    rt = _rtype((x, y))
    return np.nextafter(rt(x), rt(y))


@implements("math.fma")
def _fma(s, x, y, z):
    rt = _rtype((x, y, z))
    fx, fy, fz = float(x), float(y), float(z)
    if not (_m.isfinite(fx) and _m.isfinite(fy) and _m.isfinite(fz)):
        return rt(_F64(fx) * _F64(fy) + _F64(fz))
    if rt is _F32:
        # The product of two f32 values is exact in f64; one more rounding to f64 and
        # then to f32 differs from a single rounding only in rare double-rounding ties.
        return _F32(fx * fy + fz)
    from fractions import Fraction  # only here: importing it costs ~10 ms

    exact = Fraction(fx) * Fraction(fy) + Fraction(fz)
    if exact == 0:
        return _F64(fx * fy + fz)  # keeps IEEE's sign of an exact zero
    try:
        return _F64(float(exact))
    except OverflowError:
        return _F64(_m.copysign(_m.inf, exact))


@implements("math.isnan")
def _isnan(s, x):
    return bool(_m.isnan(float(x)))


@implements("math.isinf")
def _isinf(s, x):
    return bool(_m.isinf(float(x)))


@implements("math.isfinite")
def _isfinite(s, x):
    return bool(_m.isfinite(float(x)))


@implements("math.signbit")
def _signbit(s, x):
    return bool(np.signbit(x))


# -- Bessel functions ------------------------------------------------------------------
# Reference-quality f64: Miller's backward recurrence for J (stable for every order),
# the Neumann series for Y0 and Y1 then Y's stable forward recurrence, the Hankel
# expansion for large x, and I0/I1's positive power series.

_EULER = 0.5772156649015329


def _miller(x: float, nmax: int) -> list:
    """J_0..J_nmax of x > 0 by Miller's backward recurrence, normalized by
    J0 + 2*sum(J_2k) = 1."""
    start = int(max(nmax, x) + 30 + 10 * x ** (1 / 3))
    start += start & 1
    vals = [0.0] * (start + 2)
    nxt, cur = 0.0, 1e-300
    norm = 0.0
    for k in range(start, 0, -1):
        vals[k] = cur
        if k % 2 == 0:
            norm += 2 * cur
        prev = 2 * k / x * cur - nxt
        nxt, cur = cur, prev
        if abs(cur) > 1e250:  # rescale everything computed so far
            for i in range(k, start + 1):
                vals[i] *= 1e-250
            norm *= 1e-250
            nxt *= 1e-250
            cur *= 1e-250
    vals[0] = cur
    norm += cur
    return [v / norm for v in vals[:nmax + 1]]


def _hankel(n: int, x: float) -> tuple:
    """(J_n, Y_n) of large x from the first terms of the Hankel expansions."""
    mu = 4.0 * n * n
    e = 8.0 * x
    p = (1.0 - (mu - 1) * (mu - 9) / (2 * e * e)
         + (mu - 1) * (mu - 9) * (mu - 25) * (mu - 49) / (24 * e ** 4))
    q = (mu - 1) / e - (mu - 1) * (mu - 9) * (mu - 25) / (6 * e ** 3)
    # cos and sin of x - phase from those of x itself: forming x - phase first would
    # round away the phase's low bits at large x.
    phase = ((n / 2 + 0.25) % 2.0) * _m.pi
    cx, sx, cp, sp = _m.cos(x), _m.sin(x), _m.cos(phase), _m.sin(phase)
    cos_chi = cx * cp + sx * sp
    sin_chi = sx * cp - cx * sp
    amp = _m.sqrt(2 / (_m.pi * x))
    return amp * (p * cos_chi - q * sin_chi), amp * (p * sin_chi + q * cos_chi)


def _jn(n: int, x: float) -> float:
    """J_n(x): Hankel's expansion far out, Miller's recurrence elsewhere."""
    if _m.isnan(x):
        return x
    sign = 1.0
    if n < 0:  # J_-n = (-1)^n J_n
        n = -n
        sign = -1.0 if n % 2 else 1.0
    if x < 0:  # J_n(-x) = (-1)^n J_n(x)
        x = -x
        sign *= -1.0 if n % 2 else 1.0
    if _m.isinf(x):
        return 0.0
    if x == 0:
        return sign * (1.0 if n == 0 else 0.0)
    if x > 1e5 and x > 10 * n * n:
        return sign * _hankel(n, x)[0]
    return sign * _miller(x, n)[n]


def _yn(n: int, x: float) -> float:
    """Y_n(x): Hankel's expansion far out, Neumann series and recurrence elsewhere."""
    if _m.isnan(x) or x < 0:
        return _m.nan
    sign = 1.0
    if n < 0:  # Y_-n = (-1)^n Y_n
        n = -n
        sign = -1.0 if n % 2 else 1.0
    if x == 0:
        return -_m.inf
    if _m.isinf(x):
        return 0.0
    if x > 1e5 and x > 10 * n * n:
        return sign * _hankel(n, x)[1]
    # Neumann series (A&S 9.1.88) for Y0, its derivative for Y1, over J_k from Miller.
    kmax = int(max(x, 1) + 30 + 10 * x ** (1 / 3)) + 2
    j = _miller(x, kmax)
    lg = _m.log(x / 2) + _EULER
    s0 = 0.0
    s1 = 0.0
    for k in range(1, kmax // 2):
        sgn = -1.0 if k % 2 else 1.0
        s0 += sgn * j[2 * k] / k
        s1 += sgn * (j[2 * k - 1] - j[2 * k + 1]) / k
    y0 = 2 / _m.pi * lg * j[0] - 4 / _m.pi * s0
    if n == 0:
        return sign * y0
    y1 = -2 / (_m.pi * x) * j[0] + 2 / _m.pi * lg * j[1] + 2 / _m.pi * s1
    ym, y = y0, y1
    for k in range(1, n):
        ym, y = y, 2 * k / x * y - ym  # forward recurrence: stable for Y
        if _m.isinf(y):
            break
    return sign * y


def _in(n: int, x: float) -> float:
    """I_n(x) by its power series: positive terms, so no cancellation."""
    if _m.isnan(x):
        return x
    ax = abs(x)
    if _m.isinf(ax):
        return _m.inf
    term = (ax / 2) ** n / _m.factorial(n)
    total = term
    q = ax * ax / 4
    k = 1
    while term > total * 1e-17 or k < 2:
        term *= q / (k * (k + n))
        total += term
        k += 1
        if _m.isinf(total):
            return _m.inf
    return -total if (x < 0 and n % 2) else total


def _bessel(fn, order):
    def impl(s, x):
        return _rtype((x,))(fn(order, float(x)))
    return impl


def _bessel_n(fn):
    def impl(s, n, x):
        return _rtype((x,))(fn(int(n), float(x)))
    return impl


implements("math.j0")(_bessel(_jn, 0))
implements("math.j1")(_bessel(_jn, 1))
implements("math.y0")(_bessel(_yn, 0))
implements("math.y1")(_bessel(_yn, 1))
implements("math.cyl_bessel_i0")(_bessel(_in, 0))
implements("math.cyl_bessel_i1")(_bessel(_in, 1))
implements("math.jn")(_bessel_n(_jn))
implements("math.yn")(_bessel_n(_yn))


# -- bits ------------------------------------------------------------------------------


def _width_of(x) -> tuple[int, bool]:
    """(bits, signed) of an integer argument; a Python int counts as i64."""
    if isinstance(x, np.integer):
        return x.dtype.itemsize * 8, x.dtype.kind == "i"
    if isinstance(x, (int, np.bool_)):
        return 64, True
    raise TypeError(f"bit operations take integers, got {type(x).__name__}")


def _same_type(x, value):
    if isinstance(x, np.integer):
        return _t.scalar_from_dtype(x.dtype)(value)
    return _t.i64(value)


@implements("bits.popc")
def _popc(s, x):
    width, _ = _width_of(x)
    return np.int32(bin(int(x) & ((1 << width) - 1)).count("1"))


@implements("bits.clz")
def _clz(s, x):
    width, _ = _width_of(x)
    return np.int32(width - (int(x) & ((1 << width) - 1)).bit_length())


@implements("bits.ffs")
def _ffs(s, x):
    width, _ = _width_of(x)
    v = int(x) & ((1 << width) - 1)
    return np.int32((v & -v).bit_length())


@implements("bits.brev")
def _brev(s, x):
    width, _ = _width_of(x)
    v = int(x) & ((1 << width) - 1)
    return _same_type(x, int(format(v, f"0{width}b")[::-1], 2))


@implements("bits.mulhi")
def _mulhi(s, a, b):
    width, signed = _width_of(a)
    mask = (1 << width) - 1
    if signed:
        prod = int(_same_type(a, a)) * int(_same_type(a, b))
    else:
        prod = (int(a) & mask) * (int(b) & mask)
    return _same_type(a, prod >> width)


@implements("bits.bitcast")
def _bitcast(s, x, type_):
    target = type_ if isinstance(type_, _t.ScalarType) else _t.scalar_from_dtype(type_)
    if isinstance(x, np.generic):
        source = x.dtype
    elif isinstance(x, bool):
        source = np.dtype(np.bool_)
    elif isinstance(x, int):
        source = np.dtype(np.int64)
    elif isinstance(x, float):
        source = np.dtype(np.float64)
    else:
        raise TypeError(f"bits.bitcast takes a scalar, got {type(x).__name__}")
    if source.itemsize != target.itemsize or target.kind == "b":
        raise TypeError(f"bits.bitcast cannot reinterpret {source} as {target.name}: the "
                        f"widths differ")
    value = _t.scalar_from_dtype(source)(x) if not isinstance(x, np.generic) else x
    return np.array(value, dtype=source).view(target.dtype)[()]


@implements("bits.byte_perm")
def _byte_perm(s, x, y, sel):
    value = (int(y) & 0xFFFFFFFF) << 32 | (int(x) & 0xFFFFFFFF)
    out = 0
    for i in range(4):
        pick = (int(sel) >> (4 * i)) & 7
        out |= ((value >> (8 * pick)) & 0xFF) << (8 * i)
    return np.uint32(out)


@implements("bits.funnelshift_l")
def _funnelshift_l(s, lo, hi, shift):
    value = (int(hi) & 0xFFFFFFFF) << 32 | (int(lo) & 0xFFFFFFFF)
    return np.uint32(((value << (int(shift) & 31)) >> 32) & 0xFFFFFFFF)


@implements("bits.funnelshift_r")
def _funnelshift_r(s, lo, hi, shift):
    value = (int(hi) & 0xFFFFFFFF) << 32 | (int(lo) & 0xFFFFFFFF)
    return np.uint32((value >> (int(shift) & 31)) & 0xFFFFFFFF)


# -- half precision --------------------------------------------------------------------


def bf16_bits(x) -> np.uint16:
    """The bfloat16 bit pattern nearest to x (ties to even; NaN stays a quiet NaN)."""
    bits = int(np.array(x, dtype=np.float32).view(np.uint32))
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
        return np.uint16((bits >> 16) | 0x40)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return np.uint16((bits >> 16) & 0xFFFF)


def bf16_value(bits) -> np.float32:
    """The f32 value of a bfloat16 bit pattern."""
    return np.array(int(bits) << 16, dtype=np.uint32).view(np.float32)[()]


@implements("half.bf16")
def _bf16(s, x):
    return bf16_value(bf16_bits(x))


@implements("half.bf16_bits")
def _bf16_bits(s, x):
    return bf16_bits(x)


@implements("half.bf16_from_bits")
def _bf16_from_bits(s, bits):
    return bf16_value(int(bits) & 0xFFFF)


@implements("half.f16_bits")
def _f16_bits(s, x):
    return np.array(x, dtype=np.float16).view(np.uint16)[()]


@implements("half.f16_from_bits")
def _f16_from_bits(s, bits):
    return np.array(int(bits) & 0xFFFF, dtype=np.uint16).view(np.float16)[()]


@implements("half.fma")
def _half_fma(s, a, b, c):
    if any(type(v).__name__ == "bfloat16" for v in (a, b, c)):
        from ._impl_half import bf16_fma
        return bf16_fma(a, b, c)
    # f16 operands have 11-bit significands: the product is exact in f64 and the sum
    # of the narrow exponent range rounds once to f64 before the final f16 rounding.
    return np.float16(float(a) * float(b) + float(c))


# -- vectors ---------------------------------------------------------------------------


def _check_vectors(op: str, *vs):
    for v in vs:
        if not isinstance(v, tuple):
            raise TypeError(f"vector.{op} takes vectors, got {type(v).__name__}")
    if len({len(v) for v in vs}) > 1:
        raise TypeError(f"vector.{op} takes vectors of one size")


@implements("vector.dot")
def _dot(s, a, b):
    _check_vectors("dot", a, b)
    acc = a[0] * b[0]
    for x, y in zip(a[1:], b[1:]):
        acc = acc + x * y
    return acc


@implements("vector.length")
def _length(s, v):
    _check_vectors("length", v)
    d = _dot(s, v, v)
    return type(d)(np.sqrt(d))


@implements("vector.normalize")
def _normalize(s, v):
    return v / _length(s, v)


@implements("vector.cross")
def _cross(s, a, b):
    _check_vectors("cross", a, b)
    if len(a) != 3:
        raise TypeError("vector.cross takes 3-vectors")
    return type(a)(a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                   a[0] * b[1] - a[1] * b[0])


@implements("vector.min")
def _vmin(s, a, b):
    _check_vectors("min", a, b)
    return type(a)(*[y if y < x else x for x, y in zip(a, b)])


@implements("vector.max")
def _vmax(s, a, b):
    _check_vectors("max", a, b)
    return type(a)(*[y if y > x else x for x, y in zip(a, b)])
