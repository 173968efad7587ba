"""Lowering of `cupric.device.math`: every function maps to libdevice (`__nv_rsqrtf` for
f32, `__nv_rsqrt` for f64), which libNVVM links lazily. Arguments follow the device
library's rule: f32 or f16 arguments compute in f32, everything else in f64 (integers
convert), with Python numbers weak (`math.pow(x32, 2.0)` is f32). Functions that return
several values (`sincos`, `modf`, `frexp`) pass libdevice pointers to locals and return
a tuple.
"""

from __future__ import annotations

import math

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_float, const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import TupleType, WeakType
from cupric.compiler.typing.promote import PromotionError, promote
from cupric.types import ScalarType, bool_, f32, f64, i32

__all__ = ["LIBDEVICE"]

#: name -> (libdevice base name, number of float arguments).
LIBDEVICE = {
    "sin": ("sin", 1), "cos": ("cos", 1), "tan": ("tan", 1), "asin": ("asin", 1),
    "acos": ("acos", 1), "atan": ("atan", 1), "atan2": ("atan2", 2), "sinh": ("sinh", 1),
    "cosh": ("cosh", 1), "tanh": ("tanh", 1), "asinh": ("asinh", 1), "acosh": ("acosh", 1),
    "atanh": ("atanh", 1), "sinpi": ("sinpi", 1), "cospi": ("cospi", 1),
    "exp": ("exp", 1), "exp2": ("exp2", 1), "exp10": ("exp10", 1), "expm1": ("expm1", 1),
    "log": ("log", 1), "log2": ("log2", 1), "log10": ("log10", 1), "log1p": ("log1p", 1),
    "pow": ("pow", 2), "logb": ("logb", 1), "sqrt": ("sqrt", 1), "rsqrt": ("rsqrt", 1),
    "cbrt": ("cbrt", 1), "rcbrt": ("rcbrt", 1), "hypot": ("hypot", 2), "erf": ("erf", 1),
    "erfc": ("erfc", 1), "erfinv": ("erfinv", 1), "erfcinv": ("erfcinv", 1),
    "erfcx": ("erfcx", 1), "normcdf": ("normcdf", 1), "normcdfinv": ("normcdfinv", 1),
    "lgamma": ("lgamma", 1), "tgamma": ("tgamma", 1), "gamma": ("tgamma", 1),
    "floor": ("floor", 1), "ceil": ("ceil", 1), "trunc": ("trunc", 1), "rint": ("rint", 1),
    "round": ("round", 1), "fabs": ("fabs", 1), "fmod": ("fmod", 2),
    "remainder": ("remainder", 2), "copysign": ("copysign", 2),
    "nextafter": ("nextafter", 2), "fmin": ("fmin", 2), "fmax": ("fmax", 2),
    "fdim": ("fdim", 2), "fma": ("fma", 3), "rhypot": ("rhypot", 2),
    "norm3d": ("norm3d", 3), "rnorm3d": ("rnorm3d", 3), "norm4d": ("norm4d", 4),
    "rnorm4d": ("rnorm4d", 4), "j0": ("j0", 1), "j1": ("j1", 1), "y0": ("y0", 1),
    "y1": ("y1", 1), "cyl_bessel_i0": ("cyl_bessel_i0", 1),
    "cyl_bessel_i1": ("cyl_bessel_i1", 1),
}
_CLASSIFY = {"isnan": ("__nv_isnanf", "__nv_isnand"), "isinf": ("__nv_isinff", "__nv_isinfd"),
             "isfinite": ("__nv_finitef", "__nv_isfinited"),
             "signbit": ("__nv_signbitf", "__nv_signbitd")}


def _float_type(call, what: str, count: int, arg_types=None) -> ScalarType:
    """The precision a call computes in (f32 or f64), from its arguments (or from
    `arg_types`, the float ones, when the call has others too)."""
    if arg_types is None:
        arg_types = call.arg_types
        if len(arg_types) != count or call.keywords:
            raise TypeError(f"{what} takes {count} argument{'s' if count > 1 else ''}, got "
                            f"{len(arg_types)}")
    t = None
    for k, a in enumerate(arg_types):
        if not isinstance(a, (ScalarType, WeakType)) or (isinstance(a, ScalarType)
                                                          and a.kind == "b"):
            raise TypeError(f"{what}: argument {k + 1} must be a number, got {a!r}")
        try:
            t = a if t is None else promote(t, a)
        except PromotionError as exc:
            raise TypeError(f"{what}: {exc}") from None
    if isinstance(t, ScalarType) and t.kind == "f" and t.bits <= 32:
        return f32
    return f64


def _args(cg, call, args, ft):
    return [cg.convert(a if not isinstance(a.type, WeakType) else cg.convert(
        a, a.type.default, call.node), ft, call.node).value for a in args]


def _name(base: str, ft) -> str:
    return f"__nv_{base}f" if ft == f32 else f"__nv_{base}"


def _simple(name: str, base: str, count: int) -> None:
    what = f"math.{name}"

    def infer(call):
        return _float_type(call, what, count)

    def lower(cg, call, args):
        ft = call.result_type
        vals = _args(cg, call, args, ft)
        lt = vals[0].type
        return KValue(ft, [cg.mcg.call_external(cg.b, _name(base, ft), lt, vals)])

    register(what, infer, lower)


for _n, (_base, _count) in LIBDEVICE.items():
    _simple(_n, _base, _count)


def _classify(name: str) -> None:
    what = f"math.{name}"

    def infer(call):
        _float_type(call, what, 1)
        return bool_

    def lower(cg, call, args):
        ft = _float_type(call, what, 1)
        v = _args(cg, call, args, ft)[0]
        fname = _CLASSIFY[name][0 if ft == f32 else 1]
        r = cg.mcg.call_external(cg.b, fname, ll.i32, [v])
        return KValue(bool_, [cg.b.icmp("ne", r, const_int(ll.i32, 0))])

    register(what, infer, lower)


for _n in _CLASSIFY:
    _classify(_n)


def _ilogb_infer(call):
    _float_type(call, "math.ilogb", 1)
    return i32


def _ilogb_lower(cg, call, args):
    ft = _float_type(call, "math.ilogb", 1)
    v = _args(cg, call, args, ft)[0]
    return KValue(i32, [cg.mcg.call_external(cg.b, _name("ilogb", ft), ll.i32, [v])])


register("math.ilogb", _ilogb_infer, _ilogb_lower)


def _scale(name: str, factor: float) -> None:
    what = f"math.{name}"

    def lower(cg, call, args):
        ft = call.result_type
        v = _args(cg, call, args, ft)[0]
        return KValue(ft, [cg.b.binop("fmul", v, const_float(v.type, factor))])

    register(what, lambda call: _float_type(call, what, 1), lower)


_scale("degrees", 180.0 / math.pi)
_scale("radians", math.pi / 180.0)


def _saturate_lower(cg, call, args):
    ft = call.result_type
    v = _args(cg, call, args, ft)[0]
    if ft == f32:
        return KValue(ft, [cg.mcg.call_external(cg.b, "__nv_saturatef", ll.float, [v])])
    b = cg.b
    # NaN fails both ordered comparisons and gives 0, as __nv_saturatef does.
    zero, one = const_float(v.type, 0.0), const_float(v.type, 1.0)
    low = b.select(b.fcmp("ogt", v, zero), v, zero)
    return KValue(ft, [b.select(b.fcmp("olt", low, one), low, one)])


register("math.saturate", lambda call: _float_type(call, "math.saturate", 1), _saturate_lower)


def _ldexp(name: str, base: str) -> None:
    what = f"math.{name}"

    def infer(call):
        if len(call.arg_types) != 2 or call.keywords:
            raise TypeError(f"{what}(x, e) takes two arguments")
        e = call.arg_types[1]
        if not ((isinstance(e, WeakType) and e.kind == "int")
                or (isinstance(e, ScalarType) and e.is_integer)):
            raise TypeError(f"{what}: the exponent must be an integer, got {e!r}")
        return _float_type(call, what, 1, call.arg_types[:1])

    def lower(cg, call, args):
        ft = call.result_type
        x = _args(cg, call, args[:1], ft)[0]
        e = cg.convert(args[1], i32, call.node).value
        return KValue(ft, [cg.mcg.call_external(cg.b, _name(base, ft), x.type, [x, e])])

    register(what, infer, lower)


_ldexp("ldexp", "ldexp")
_ldexp("scalbn", "scalbn")


def _bessel_n(name: str) -> None:
    """jn(n, x) / yn(n, x): an integer order first (libdevice `__nv_jnf(int, float)`)."""
    what = f"math.{name}"

    def infer(call):
        if len(call.arg_types) != 2 or call.keywords:
            raise TypeError(f"{what}(n, x) takes two arguments")
        n = call.arg_types[0]
        if not ((isinstance(n, WeakType) and n.kind == "int")
                or (isinstance(n, ScalarType) and n.is_integer)):
            raise TypeError(f"{what}: the order n must be an integer, got {n!r}")
        return _float_type(call, what, 1, call.arg_types[1:])

    def lower(cg, call, args):
        ft = call.result_type
        n = cg.convert(args[0], i32, call.node).value
        x = _args(cg, call, args[1:], ft)[0]
        return KValue(ft, [cg.mcg.call_external(cg.b, _name(name, ft), x.type, [n, x])])

    register(what, infer, lower)


_bessel_n("jn")
_bessel_n("yn")


def _pair(name: str, base: str, second) -> None:
    """Functions returning two values through pointers (sincos, sincospi, modf, frexp);
    `second` is the type of the second result (None: same float type)."""
    what = f"math.{name}"

    def infer(call):
        ft = _float_type(call, what, 1)
        return TupleType([ft, second or ft])

    def lower(cg, call, args):
        ft = call.result_type.elements[0]
        v = _args(cg, call, args, ft)[0]
        b = cg.b
        eb = cg.entry_builder
        if name in ("sincos", "sincospi"):
            first = eb.alloca(v.type, hint="sin")
            other = eb.alloca(v.type, hint="cos")
            cg.mcg.call_external(b, _name(base, ft), ll.void, [v, first, other])
            return KValue(call.result_type, [b.load(first), b.load(other)])
        slot = eb.alloca(ll.i32 if second is not None else v.type, hint=name)
        r = cg.mcg.call_external(b, _name(base, ft), v.type, [v, slot])
        return KValue(call.result_type, [r, b.load(slot)])

    register(what, infer, lower)


_pair("sincos", "sincos", None)
_pair("sincospi", "sincospi", None)
_pair("modf", "modf", None)
_pair("frexp", "frexp", i32)
