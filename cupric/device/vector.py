"""CUDA's small vector types (float2, float3, float4, int2, ..., double4, half2): values of
2 to 4 scalars of one type, with elementwise arithmetic, passed and returned by value.

Each is a tuple subclass (immutable, like every cupric value): `v = float3(1, 2, 3)`,
`v.x`, `v * 2.0 + w`, `vector.dot(v, w)`. The compiler lowers a vector to an LLVM
`<n x T>` value or a struct of n scalars; the simulator uses these classes as they are.
`VECTOR_TYPES` maps each name to its class; `cls.scalar` and `cls.size` describe it.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import types as _t
from ._intrinsic import Intrinsic, Namespace

__all__ = ["Vector", "VECTOR_TYPES", "vector"]

_FIELDS = ("x", "y", "z", "w")


class Vector(tuple):
    """Base of the vector types; subclasses set `scalar` (a ScalarType) and `size`.

    Construct from `size` scalars, or from one scalar to fill every component. Components
    are cast to the scalar type (integers wrap). Arithmetic with another vector of the
    same size, or with a scalar, is elementwise and returns this vector type.
    """

    __slots__ = ()
    scalar: _t.ScalarType
    size: int
    dtype: np.dtype

    def __new__(cls, *values):
        if len(values) == 1 and cls.size > 1:
            values = values * cls.size
        if len(values) != cls.size:
            raise TypeError(f"{cls.__name__} takes {cls.size} components, got {len(values)}")
        cast = cls.scalar
        return tuple.__new__(cls, [cast(v) for v in values])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(v.item()) for v in self)})"

    def _make(self, values):
        cast = self.scalar
        return tuple.__new__(type(self), [cast(v) for v in values])


def _operands(self, other):
    if isinstance(other, tuple):
        if len(other) != len(self):
            raise TypeError(f"{type(self).__name__} and a {len(other)}-vector do not match")
        return other
    if isinstance(other, (int, float, np.number, np.bool_)):
        return (other,) * len(self)
    return None


def _binary(op):
    def forward(self, other):
        rhs = _operands(self, other)
        if rhs is None:
            return NotImplemented
        return self._make([op(a, b) for a, b in zip(self, rhs)])

    def reflected(self, other):
        lhs = _operands(self, other)
        if lhs is None:
            return NotImplemented
        return self._make([op(a, b) for a, b in zip(lhs, self)])

    return forward, reflected


def _install_ops(cls, names):
    for name in names:
        op = getattr(operator, name)
        fwd, ref = _binary(op)
        setattr(cls, f"__{name}__", fwd)
        setattr(cls, f"__r{name}__", ref)


class FloatVector(Vector):
    """A vector of f16, f32 or f64 components."""

    __slots__ = ()

    def __neg__(self):
        return self._make([-a for a in self])

    def __abs__(self):
        return self._make([abs(a) for a in self])


class IntVector(Vector):
    """A vector of integer components; arithmetic wraps at the component width."""

    __slots__ = ()

    def __neg__(self):
        return self._make([-int(a) for a in self])

    def __invert__(self):
        return self._make([~int(a) for a in self])

    def __abs__(self):
        return self._make([abs(int(a)) for a in self])


_install_ops(FloatVector, ("add", "sub", "mul", "truediv"))
# Integer components go through Python ints so that results wrap (by the cast) instead of
# overflowing NumPy scalars; // and % follow Python's floor semantics, as in all of cupric.
for _name in ("add", "sub", "mul", "floordiv", "mod", "and_", "or_", "xor", "lshift", "rshift"):
    _op = getattr(operator, _name)
    _fwd, _ref = _binary(lambda a, b, _op=_op: _op(int(a), int(b)))
    _dunder = _name.rstrip("_")
    setattr(IntVector, f"__{_dunder}__", _fwd)
    setattr(IntVector, f"__r{_dunder}__", _ref)
del _name, _op, _fwd, _ref, _dunder

VECTOR_TYPES: dict[str, type] = {}


def _declare(name: str, scalar: _t.ScalarType, size: int) -> type:
    base = FloatVector if scalar.is_float else IntVector
    namespace = {"__slots__": (), "scalar": scalar, "size": size,
                 "dtype": np.dtype([(f, scalar.dtype) for f in _FIELDS[:size]]),
                 "__doc__": f"{size} x {scalar.name}, fields {', '.join(_FIELDS[:size])}."}
    for i, field in enumerate(_FIELDS[:size]):
        namespace[field] = property(operator.itemgetter(i), doc=f"Component {i}.")
    cls = type(name, (base,), namespace)
    cls.__module__ = __name__
    VECTOR_TYPES[name] = cls
    return cls


for _prefix, _scalar in (("float", _t.f32), ("double", _t.f64), ("int", _t.i32),
                         ("uint", _t.u32), ("long", _t.i64), ("ulong", _t.u64)):
    for _n in (2, 3, 4):
        globals()[f"{_prefix}{_n}"] = _declare(f"{_prefix}{_n}", _scalar, _n)
half2 = _declare("half2", _t.f16, 2)
del _prefix, _scalar, _n

__all__ += list(VECTOR_TYPES)

vector = Namespace(
    "vector",
    dot=Intrinsic("vector.dot", "vector.dot(a, b) -> scalar: sum of a[i]*b[i]."),
    length=Intrinsic("vector.length", "vector.length(v) -> scalar: sqrt(dot(v, v)), for "
                     "float vectors."),
    normalize=Intrinsic("vector.normalize", "vector.normalize(v) -> vector: v / length(v), "
                        "for float vectors."),
    cross=Intrinsic("vector.cross", "vector.cross(a, b) -> vector: the cross product of two "
                    "3-vectors."),
    min=Intrinsic("vector.min", "vector.min(a, b) -> vector: the elementwise minimum."),
    max=Intrinsic("vector.max", "vector.max(a, b) -> vector: the elementwise maximum."),
)
