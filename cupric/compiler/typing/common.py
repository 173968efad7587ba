"""What every part of kernel type inference shares: the type of a local not yet assigned
(`UNKNOWN`, resolved by iterating to a fixed point), the lists of what the kernel language
allows (quoted in error hints), and the small questions asked of types (`_describe` names
a type in an error message; `_convertible` is the implicit cast of an assignment).
"""

from __future__ import annotations

import types as pytypes

from cupric.compiler.typing.ktypes import (NONE, WEAK_FLOAT, ObjectType, TupleType, WeakType,
                                           is_scalar)
from cupric.types import ArrayType, ScalarType, Type

ALLOWED_STATEMENTS = ("assignments (=, +=, ..., tuple unpacking, x: f32 = ...), if/elif/else, "
                      "for i in range(...), while, break, continue, return, pass, calls")
ALLOWED_EXPRESSIONS = ("numbers, True/False, arithmetic, comparisons, and/or/not, "
                       "a if c else b, array[i, j], tuples, calls of casts, math, "
                       "len/min/max/abs/int/float/bool, cupric.device intrinsics and "
                       "@cupric.device_function functions")


class _Unknown(Type):
    """The type of a local read before any assignment was seen (resolved by iteration)."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "unknown"


UNKNOWN = _Unknown()


def _is_float(t: Type) -> bool:
    return t is WEAK_FLOAT or (isinstance(t, ScalarType) and t.is_float)


def _has_array(t: Type) -> bool:
    if isinstance(t, ArrayType):
        return True
    return isinstance(t, TupleType) and any(_has_array(e) for e in t.elements)


def _convertible(src: Type, dst: Type) -> bool:
    """Whether a value of `src` may be stored in a variable of `dst` (implicit cast)."""
    if src == dst:
        return True
    if is_scalar(src) and isinstance(dst, ScalarType):
        return True
    if isinstance(src, TupleType) and isinstance(dst, TupleType):
        return len(src.elements) == len(dst.elements) and all(
            _convertible(a, b) for a, b in zip(src.elements, dst.elements))
    if isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        return (src.dtype, src.ndim) == (dst.dtype, dst.ndim) and dst.layout in (src.layout, "A")
    return False


def _describe(t: Type) -> str:
    if isinstance(t, ObjectType):
        obj = t.obj
        if isinstance(obj, pytypes.ModuleType):
            return f"module {obj.__name__}"
        return f"{getattr(obj, '__name__', None) or repr(obj)}"
    if isinstance(t, WeakType):
        return f"an {t.kind} literal" if t.kind == "int" else "a float literal"
    if t == NONE:
        return "None"
    if isinstance(t, ArrayType):
        return f"an array ({t!r})"
    if isinstance(t, TupleType):
        return f"a tuple ({t!r})"
    return repr(t)
