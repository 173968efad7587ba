"""Types the compiler uses beside `cupric.types`: weak literal types (a bare `1` or `2.0`
takes the type of the other operand, as NumPy's NEP 50), tuples, structs, None, and
compile-time objects (modules, functions, intrinsics) that are never runtime values."""

from __future__ import annotations

import numpy as np

from cupric.types import ArrayType, ScalarType, Type, f64, i64, scalar_from_dtype

__all__ = ["WeakType", "WEAK_INT", "WEAK_FLOAT", "TupleType", "StructType", "NoneType",
           "NONE", "ObjectType", "materialize", "is_numeric", "is_scalar", "struct_type",
           "SpaceArrayType", "VectorType"]


class WeakType(Type):
    """The type of a literal (or module constant) not yet fixed to a width.

    `x * 2` keeps the type of `x`; a weak value stored in a variable or passed to a
    function becomes `default` (i64 for ints, f64 for floats).
    """

    __slots__ = ("kind", "default")

    def __init__(self, kind: str, default: ScalarType) -> None:
        self.kind = kind
        self.default = default

    def _key(self) -> tuple:
        return (self.kind,)

    def __repr__(self) -> str:
        return f"{self.kind} literal"


WEAK_INT = WeakType("int", i64)
WEAK_FLOAT = WeakType("float", f64)


class TupleType(Type):
    """A fixed-length heterogeneous tuple; lives in registers, flattened at calls."""

    __slots__ = ("elements",)

    def __init__(self, elements) -> None:
        self.elements = tuple(elements)

    def _key(self) -> tuple:
        return self.elements

    def __repr__(self) -> str:
        inner = ", ".join(repr(e) for e in self.elements)
        return f"Tuple[{inner}]"


class StructType(Type):
    """A record passed by value, laid out as an aligned NumPy structured dtype.

    Fields are scalars; `fields` maps name -> (ScalarType, byte offset).
    """

    __slots__ = ("dtype", "fields", "names", "name")

    def __init__(self, dtype, name: str | None = None) -> None:
        dtype = np.dtype(dtype)
        if dtype.names is None:
            raise TypeError(f"{dtype} is not a structured dtype")
        if not dtype.isalignedstruct:
            dtype = np.dtype({"names": list(dtype.names),
                              "formats": [dtype.fields[n][0] for n in dtype.names]},
                             align=True)
        self.dtype = dtype
        self.names = tuple(dtype.names)
        self.fields = {}
        for field in self.names:
            fdt, offset = dtype.fields[field][:2]
            if fdt.shape:
                raise TypeError(f"struct field {field!r}: sub-array fields are not supported")
            self.fields[field] = (scalar_from_dtype(fdt), offset)
        self.name = name or "struct"

    def _key(self) -> tuple:
        return (self.dtype.descr.__repr__(), self.dtype.itemsize)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}: {self.fields[n][0]!r}" for n in self.names)
        return f"{self.name}{{{inner}}}"

    @property
    def size(self) -> int:
        return self.dtype.itemsize

    @property
    def align(self) -> int:
        return self.dtype.alignment


def _eval_annotation(text: str, owner):
    """A string annotation of a struct class, evaluated in its module (and with the
    cupric.types names); the text itself when it does not evaluate."""
    import sys

    import cupric.types as ct
    namespace = {name: getattr(ct, name) for name in ct.__all__}
    module = sys.modules.get(owner.__module__)
    if module is not None:
        namespace.update(vars(module))
    try:
        return eval(text, namespace)  # noqa: S307 - the user's own annotation
    except Exception:  # reported by the caller as "must be annotated with ..."
        return text


def struct_type(obj) -> StructType:
    """A `StructType` from a structured dtype or a class with scalar annotations."""
    if isinstance(obj, StructType):
        return obj
    if isinstance(obj, type) and getattr(obj, "__annotations__", None):
        names, formats = [], []
        for field, ann in obj.__annotations__.items():
            if isinstance(ann, str):  # `from __future__ import annotations`
                ann = _eval_annotation(ann, obj)
            if not isinstance(ann, ScalarType):
                raise TypeError(f"struct field {obj.__name__}.{field} must be annotated with a "
                                f"cupric scalar type (f32, i32, ...), got {ann!r}")
            names.append(field)
            formats.append(ann.dtype)
        return StructType(np.dtype({"names": names, "formats": formats}, align=True),
                          obj.__name__)
    return StructType(obj)


class NoneType(Type):
    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "None"


NONE = NoneType()


class ObjectType(Type):
    """A compile-time object: a module, a function, an intrinsic or namespace; it can be
    called or have attributes taken, never be stored or passed."""

    __slots__ = ("obj",)

    def __init__(self, obj) -> None:
        self.obj = obj

    def _key(self) -> tuple:
        return (id(self.obj),)

    def __repr__(self) -> str:
        return f"<{getattr(self.obj, '__name__', type(self.obj).__name__)}>"


def materialize(t: Type) -> Type:
    """The concrete type a value of type `t` takes when stored: weak -> default width."""
    if isinstance(t, WeakType):
        return t.default
    if isinstance(t, TupleType) and not isinstance(t, VectorType):  # vectors are concrete
        return TupleType(materialize(e) for e in t.elements)
    return t


def is_scalar(t: Type) -> bool:
    return isinstance(t, (ScalarType, WeakType))


def is_numeric(t: Type) -> bool:
    """Integers, floats and weak literals (booleans excluded)."""
    return isinstance(t, WeakType) or (isinstance(t, ScalarType) and t.kind in "iuf")


class SpaceArrayType(ArrayType):
    """An array living outside global memory: shared (`addrspace(3)`), constant (4) or a
    thread's local memory (an alloca, generic pointer). Always C-contiguous; flattened
    like a kernel array argument (pointer, shapes, strides), with the pointer in its
    address space so loads and stores become ld.shared / ld.const / ld.local.

    `space` is the NVVM address space number (`cupric.compiler.ir.types.SHARED`, ...).
    """

    __slots__ = ("space",)

    def __init__(self, dtype, ndim: int, space: int, readonly: bool = False):
        if isinstance(dtype, StructType):  # arrays of structs (shared and local memory)
            self.dtype, self.ndim, self.layout, self.readonly = dtype, ndim, "C", readonly
        else:
            super().__init__(dtype, ndim, "C", readonly)
        self.space = space

    def _key(self) -> tuple:
        return (self.dtype, self.ndim, self.layout, self.readonly, self.space)

    def __repr__(self) -> str:
        name = {3: "Shared", 4: "Constant", 0: "Local"}.get(self.space, f"Space{self.space}")
        return f"{name}Array[{self.dtype!r}, {self.ndim}]"

    def with_layout(self, layout: str) -> "SpaceArrayType":
        return self


class VectorType(TupleType):
    """A CUDA vector value (`float3`, `int2`, ...: a `cupric.device.Vector` class): a tuple
    of `size` scalars of one type with fields x, y, z, w and elementwise arithmetic.
    Flattened, unpacked and indexed like any tuple."""

    __slots__ = ("cls",)

    def __init__(self, cls) -> None:
        super().__init__([cls.scalar] * cls.size)
        self.cls = cls

    def _key(self) -> tuple:
        return (self.cls.__name__, self.elements)

    def __repr__(self) -> str:
        return self.cls.__name__
