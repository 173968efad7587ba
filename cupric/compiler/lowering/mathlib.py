"""The `math` module in kernels: each function maps to libdevice (`__nv_sinf` for f32,
`__nv_sin` for f64); libNVVM links libdevice lazily, so only the functions a kernel
calls are compiled in. Recognized by identity (`math.sin is MATH[...]`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MathFunc", "MATH", "MATH_CONSTANTS"]


@dataclass(frozen=True)
class MathFunc:
    """One `math` function: its libdevice names for f32 and f64, arity and what it
    returns: "float" (same float type as the arguments), "int" (i64, as Python's floor),
    "bool" (isnan, ...)."""

    name: str
    f32: str
    f64: str
    arity: int = 1
    returns: str = "float"


def _f(name, base=None, arity=1, returns="float", f32=None, f64=None):
    base = base or name
    return MathFunc(name, f32 or f"__nv_{base}f", f64 or f"__nv_{base}", arity, returns)


_TABLE = [
    _f("sqrt"), _f("exp"), _f("expm1"), _f("log"), _f("log2"), _f("log10"), _f("log1p"),
    _f("pow", arity=2), _f("sin"), _f("cos"), _f("tan"), _f("asin"), _f("acos"), _f("atan"),
    _f("atan2", arity=2), _f("sinh"), _f("cosh"), _f("tanh"), _f("asinh"), _f("acosh"),
    _f("atanh"), _f("erf"), _f("erfc"), _f("gamma", "tgamma"), _f("lgamma"),
    _f("fabs"), _f("copysign", arity=2), _f("fmod", arity=2), _f("hypot", arity=2),
    _f("floor", returns="int"), _f("ceil", returns="int"), _f("trunc", returns="int"),
    _f("isnan", returns="bool", f64="__nv_isnand"),
    _f("isinf", returns="bool", f64="__nv_isinfd"),
    _f("isfinite", returns="bool", f32="__nv_finitef", f64="__nv_isfinited"),
]
if hasattr(math, "exp2"):
    _TABLE.append(_f("exp2"))
if hasattr(math, "cbrt"):
    _TABLE.append(_f("cbrt"))

#: Python function object -> MathFunc.
MATH: dict[object, MathFunc] = {getattr(math, m.name): m for m in _TABLE}

#: math constants inlined as float literals.
MATH_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf,
                  "nan": math.nan}
