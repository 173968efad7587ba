"""Math functions of kernels: libdevice (`__nv_*`), covering Python's `math` module and
the CUDA extras (rsqrt, sincos, fma, erfinv, saturate, ...).

Types: an f32 argument (or f16, promoted) gives an f32 result through the `f`-suffixed
libdevice function (`__nv_sinf`); an f64 or a Python float gives f64 (`__nv_sin`); an
integer argument is converted to f64 first. Functions returning two values return a tuple.
"""

from __future__ import annotations

import math as _pymath

from ._intrinsic import Intrinsic

# (name, signature, meaning). The libdevice entry point is __nv_<name>[f] unless the
# compiler's lowering table says otherwise; the simulator implements each with NumPy.
_TABLE = [
    # trigonometric and hyperbolic
    ("sin", "x", "sine (radians)"), ("cos", "x", "cosine"), ("tan", "x", "tangent"),
    ("asin", "x", "arc sine"), ("acos", "x", "arc cosine"), ("atan", "x", "arc tangent"),
    ("atan2", "y, x", "arc tangent of y/x in the quadrant of (x, y)"),
    ("sinh", "x", "hyperbolic sine"), ("cosh", "x", "hyperbolic cosine"),
    ("tanh", "x", "hyperbolic tangent"), ("asinh", "x", "inverse hyperbolic sine"),
    ("acosh", "x", "inverse hyperbolic cosine"), ("atanh", "x", "inverse hyperbolic tangent"),
    ("sinpi", "x", "sin(pi*x), exact at integers"), ("cospi", "x", "cos(pi*x)"),
    ("sincos", "x", "the tuple (sin(x), cos(x)) in one call"),
    ("sincospi", "x", "the tuple (sin(pi*x), cos(pi*x))"),
    ("degrees", "x", "radians to degrees"), ("radians", "x", "degrees to radians"),
    # exponentials and logarithms
    ("exp", "x", "e**x"), ("exp2", "x", "2**x"), ("exp10", "x", "10**x"),
    ("expm1", "x", "e**x - 1, accurate near 0"), ("log", "x", "natural logarithm"),
    ("log2", "x", "base-2 logarithm"), ("log10", "x", "base-10 logarithm"),
    ("log1p", "x", "log(1 + x), accurate near 0"), ("pow", "x, y", "x**y"),
    ("logb", "x", "the unbiased exponent of x, as a float"),
    ("ilogb", "x", "the unbiased exponent of x, as an i32"),
    # roots and norms
    ("sqrt", "x", "square root"), ("rsqrt", "x", "1/sqrt(x)"), ("cbrt", "x", "cube root"),
    ("rcbrt", "x", "1/cbrt(x)"), ("hypot", "x, y", "sqrt(x*x + y*y) without overflow"),
    ("rhypot", "x, y", "1/hypot(x, y)"),
    ("norm3d", "x, y, z", "sqrt(x*x + y*y + z*z) without overflow"),
    ("rnorm3d", "x, y, z", "1/norm3d(x, y, z)"),
    ("norm4d", "x, y, z, w", "sqrt(x*x + y*y + z*z + w*w) without overflow"),
    ("rnorm4d", "x, y, z, w", "1/norm4d(x, y, z, w)"),
    # error and gamma functions
    ("erf", "x", "error function"), ("erfc", "x", "1 - erf(x), accurate for large x"),
    ("erfinv", "y", "inverse of erf on (-1, 1)"), ("erfcinv", "y", "inverse of erfc on (0, 2)"),
    ("erfcx", "x", "exp(x*x) * erfc(x), scaled complementary error function"),
    ("normcdf", "x", "standard normal cumulative distribution"),
    ("normcdfinv", "p", "inverse of normcdf on (0, 1)"),
    ("lgamma", "x", "log(abs(gamma(x)))"), ("tgamma", "x", "the gamma function"),
    ("gamma", "x", "the gamma function (Python's name for tgamma)"),
    # Bessel functions of integer order
    ("j0", "x", "Bessel function of the first kind of order 0"),
    ("j1", "x", "Bessel function of the first kind of order 1"),
    ("jn", "n, x", "Bessel function of the first kind of integer order n"),
    ("y0", "x", "Bessel function of the second kind of order 0 (NaN for x < 0)"),
    ("y1", "x", "Bessel function of the second kind of order 1 (NaN for x < 0)"),
    ("yn", "n, x", "Bessel function of the second kind of integer order n"),
    ("cyl_bessel_i0", "x", "modified Bessel function of the first kind of order 0"),
    ("cyl_bessel_i1", "x", "modified Bessel function of the first kind of order 1"),
    # rounding, remainders, manipulation
    ("floor", "x", "largest integer <= x, as a float"), ("ceil", "x", "smallest integer >= x"),
    ("trunc", "x", "x rounded toward zero"), ("rint", "x", "x rounded to nearest, ties to even"),
    ("round", "x", "x rounded to nearest, ties away from zero (C round)"),
    ("fabs", "x", "absolute value"), ("fmod", "x, y", "C remainder, sign of x"),
    ("remainder", "x, y", "IEEE remainder x - n*y, n nearest to x/y"),
    ("modf", "x", "the tuple (fractional part, integral part), both with the sign of x"),
    ("frexp", "x", "the tuple (m, e) with x = m * 2**e, 0.5 <= |m| < 1; e an i32"),
    ("ldexp", "x, e", "x * 2**e for an integer e"), ("scalbn", "x, n", "x * 2**n"),
    ("copysign", "x, y", "abs(x) with the sign of y"),
    ("nextafter", "x, y", "the next float after x toward y"),
    ("fmin", "x, y", "minimum; a NaN operand is ignored"),
    ("fmax", "x, y", "maximum; a NaN operand is ignored"),
    ("fdim", "x, y", "max(x - y, 0)"),
    ("fma", "x, y, z", "x*y + z with one rounding"),
    ("saturate", "x", "x clamped to [0, 1] (NaN gives 0)"),
    # classification
    ("isnan", "x", "whether x is NaN"), ("isinf", "x", "whether x is infinite"),
    ("isfinite", "x", "whether x is neither infinite nor NaN"),
    ("signbit", "x", "whether the sign bit of x is set"),
]

NAMES = tuple(name for name, _, _ in _TABLE)
__all__ = [*NAMES, "pi", "e", "tau", "inf", "nan", "NAMES"]

# Functions whose result is not a float of the arguments' precision.
_NOT_FLOAT = {"ilogb": "an i32", "isnan": "a bool", "isinf": "a bool", "isfinite": "a bool",
              "signbit": "a bool"}

for _name, _sig, _meaning in _TABLE:
    _types = (f"Takes f32 or f64; returns {_NOT_FLOAT[_name]}." if _name in _NOT_FLOAT
              else "f32 arguments give f32, others f64.")
    globals()[_name] = Intrinsic(f"math.{_name}", f"math.{_name}({_sig}): {_meaning}. {_types}")
del _types
del _name, _sig, _meaning

# Constants are plain floats: the compiler folds them like any module-level number.
pi = _pymath.pi
e = _pymath.e
tau = _pymath.tau
inf = _pymath.inf
nan = _pymath.nan
