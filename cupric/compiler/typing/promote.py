"""Numeric promotion: the type of `a op b` and the type a variable settles on when it is
assigned values of several types. NumPy's rules for concrete types, NEP 50 "weak"
literals, and one refusal: mixing u64 with a signed integer (NumPy would go to f64)."""

from __future__ import annotations

import numpy as np

from cupric.compiler.typing.ktypes import WEAK_FLOAT, WEAK_INT, TupleType, WeakType
from cupric.types import ArrayType, ScalarType, Type, bool_, f64, scalar_from_dtype

__all__ = ["PromotionError", "promote", "unify"]


class PromotionError(TypeError):
    """Two types have no common type; the message says why (shown to the user)."""


def promote(a: Type, b: Type) -> Type:
    """The type arithmetic on `a` and `b` computes in.

    Raises
    ------
    PromotionError
        For non-numeric operands or u64 mixed with a signed integer.
    """
    if isinstance(a, WeakType) and isinstance(b, WeakType):
        return WEAK_FLOAT if WEAK_FLOAT in (a, b) else WEAK_INT
    if isinstance(a, WeakType):
        a, b = b, a
    if not isinstance(a, ScalarType):
        raise PromotionError(f"{a!r} is not a number")
    if isinstance(b, WeakType):
        if a.kind == "b":
            return b.default
        if a.kind == "f":
            return a
        return a if b is WEAK_INT else f64
    if not isinstance(b, ScalarType):
        raise PromotionError(f"{b!r} is not a number")
    if a == b:
        return a
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    if a.name == "bf16" or b.name == "bf16":
        return _promote_bf16(a, b)
    if {a.kind, b.kind} == {"i", "u"} and 64 in (a.bits if a.kind == "u" else 0,
                                                  b.bits if b.kind == "u" else 0):
        raise PromotionError(f"{a!r} and {b!r} have no common integer type; cast one side "
                             "explicitly (e.g. i64(x) or u64(x))")
    return scalar_from_dtype(np.promote_types(a.dtype, b.dtype))


def _promote_bf16(a: ScalarType, b: ScalarType) -> ScalarType:
    """bf16 with another type (NumPy has no rule): as f16 would promote, except that
    bf16 and f16 meet in f32 (neither holds the other), as in PyTorch."""
    from cupric.types import bf16, f16, f32
    other = b if a.name == "bf16" else a
    if other == f16:
        return f32
    wide = scalar_from_dtype(np.promote_types(np.float16, other.dtype))
    return bf16 if wide == f16 else wide


def unify(a: Type | None, b: Type) -> Type:
    """The type of a variable assigned values of types `a` (so far) and `b`.

    Numbers promote (a variable first set to 0 and later to x[i] of f32 is f32); bools
    stay bools; arrays and tuples must agree exactly (tuples element-wise).

    Raises
    ------
    PromotionError
        When the two cannot share one variable.
    """
    if a is None or a == b:
        return b
    if isinstance(a, TupleType) and isinstance(b, TupleType):
        if len(a.elements) != len(b.elements):
            raise PromotionError(f"a tuple of {len(a.elements)} elements and one of "
                                 f"{len(b.elements)}")
        return TupleType(unify(x, y) for x, y in zip(a.elements, b.elements))
    if isinstance(a, ArrayType) or isinstance(b, ArrayType):
        if isinstance(a, ArrayType) and isinstance(b, ArrayType) and \
                (a.dtype, a.ndim) == (b.dtype, b.ndim):
            layout = a.layout if a.layout == b.layout else "A"
            # Read-only (ld.global.nc) only if every array the variable holds is.
            return ArrayType(a.dtype, a.ndim, layout, a.readonly and b.readonly)
        raise PromotionError(f"{a!r} and {b!r}")
    a_bool = a == bool_
    b_bool = b == bool_
    if a_bool != b_bool:
        raise PromotionError(f"{a!r} and {b!r} (booleans do not mix with numbers in one "
                             "variable; convert with bool(...) or i32(...))")
    return promote(a, b)


