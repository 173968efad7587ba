"""Kernel signatures: turning parameter annotations (cupric types, NumPy dtypes, struct
classes, tuples, TypeVars) into parameter specs, binding launch arguments to concrete
types (monomorphization), and parsing signature strings such as
`"f32, Array[f32, 1, 'C'], Array[f32, 1, 'C']"` for `inspect_ir` and the command line."""

from __future__ import annotations

import inspect
import typing

import numpy as np

from cupric.compiler.typing.ktypes import StructType, TupleType, struct_type
from cupric.types import (SCALARS, Array, ArrayType, ScalarType, Type, bool_, f64, i64,
                          scalar_from_dtype, typeof)

__all__ = ["Generic", "BindError", "param_specs", "bind", "type_of_value",
           "parse_signature", "format_signature"]


class BindError(TypeError):
    """An argument does not fit its parameter; `index` is the parameter's position (None
    for a wrong argument count)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class Generic:
    """An unannotated or TypeVar parameter: takes the type of its argument. Parameters
    sharing one TypeVar must get arguments of one type."""

    __slots__ = ("name",)

    def __init__(self, name: str | None) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name or "generic"


def resolve_annotation(ann, globalns=None):
    """A parameter spec (a cupric Type or `Generic`) from one annotation."""
    if ann is inspect.Parameter.empty or ann is None:
        return Generic(None)
    if isinstance(ann, str):
        try:
            ann = eval(ann, dict(globalns or {}))  # noqa: S307 - the user's own annotation
        except Exception as exc:
            raise TypeError(f"cannot evaluate the annotation {ann!r}: {exc}") from None
    if isinstance(ann, typing.TypeVar):
        return Generic(ann.__name__)
    if isinstance(ann, (ScalarType, ArrayType, StructType, TupleType)):
        return ann
    if ann is bool:
        return bool_
    if ann is int:
        return i64
    if ann is float:
        return f64
    if isinstance(ann, type) and issubclass(ann, np.generic):
        return scalar_from_dtype(ann)
    if isinstance(ann, np.dtype):
        return struct_type(ann) if ann.names else scalar_from_dtype(ann)
    origin = typing.get_origin(ann)
    if origin is tuple:
        return TupleType(resolve_annotation(a, globalns) for a in typing.get_args(ann))
    if isinstance(ann, type) and getattr(ann, "__annotations__", None):
        return struct_type(ann)
    raise TypeError(f"{ann!r} is not a kernel parameter type; use a cupric scalar (f32, "
                    "i64, ...), Array[dtype, ndim, layout], a structured dtype or struct "
                    "class, tuple[...], or a TypeVar")


def param_specs(py_func) -> list:
    """The spec of each parameter of `py_func`, from its annotations."""
    sig = inspect.signature(py_func)
    # String annotations (`from __future__ import annotations`) are evaluated in the
    # function's globals and closure, with the cupric.types names as a fallback for
    # kernels defined inside functions that imported them locally.
    import cupric.types as ct
    namespace = {name: getattr(ct, name) for name in ct.__all__}
    namespace["tuple"] = tuple
    namespace.update(py_func.__globals__)
    code = py_func.__code__
    for name, cell in zip(code.co_freevars, py_func.__closure__ or ()):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:
            pass
    specs = []
    for p in sig.parameters.values():
        try:
            specs.append(resolve_annotation(p.annotation, namespace))
        except TypeError as exc:
            raise TypeError(f"parameter '{p.name}' of {py_func.__name__}: {exc}") from None
    return specs


def type_of_value(value) -> Type:
    """The cupric type of a launch argument (tuples and NumPy records included)."""
    if isinstance(value, tuple):
        return TupleType(type_of_value(v) for v in value)
    if isinstance(value, np.void) and value.dtype.names:
        return StructType(value.dtype)
    if all(hasattr(value, a) for a in ("ptr", "shape", "strides", "dtype")):
        # A DeviceBuffer (or a view of one): its attributes, no interface dict needed.
        from cupric.types import _layout_of
        dtype = scalar_from_dtype(value.dtype)
        shape = tuple(value.shape)
        return ArrayType(dtype, len(shape), _layout_of(tuple(value.strides), shape,
                                                       dtype.itemsize))
    return typeof(value)


def _fits(spec, actual: Type, where: str) -> Type:
    if isinstance(spec, ScalarType):
        if not isinstance(actual, ScalarType):
            raise TypeError(f"{where} expects {spec!r}, got {_name(actual)}")
        if actual.is_float and not spec.is_float:
            raise TypeError(f"{where} expects {spec!r}, got a float ({actual!r}); cast it "
                            "explicitly")
        return spec
    if isinstance(spec, ArrayType):
        if not isinstance(actual, ArrayType):
            raise TypeError(f"{where} expects {spec!r}, got {_name(actual)}")
        if actual.dtype != spec.dtype or actual.ndim != spec.ndim:
            raise TypeError(f"{where} expects {spec!r}, got an array of {actual.dtype!r} "
                            f"with {actual.ndim} dimension(s)")
        if spec.layout != "A" and actual.layout != spec.layout:
            raise TypeError(f"{where} expects a {spec.layout}-contiguous array, got layout "
                            f"{actual.layout!r}")
        return actual
    if isinstance(spec, StructType):
        if not isinstance(actual, StructType) or actual.dtype != spec.dtype:
            raise TypeError(f"{where} expects the struct {spec!r}, got {_name(actual)}")
        return spec
    if isinstance(spec, TupleType):
        if not isinstance(actual, TupleType) or len(actual.elements) != len(spec.elements):
            raise TypeError(f"{where} expects {spec!r}, got {_name(actual)}")
        return TupleType(_fits(s, a, f"{where}[{k}]")
                         for k, (s, a) in enumerate(zip(spec.elements, actual.elements)))
    raise TypeError(f"{where}: unsupported parameter spec {spec!r}")


def bind(name: str, arg_names, specs, actual_types) -> tuple:
    """Concrete parameter types for arguments of `actual_types`.

    Raises
    ------
    TypeError
        Wrong argument count, or an argument that does not fit its annotation.
    """
    if len(actual_types) != len(specs):
        raise BindError(f"{name}() takes {len(specs)} argument{'s' if len(specs) != 1 else ''}"
                        f" ({', '.join(arg_names)}), got {len(actual_types)}")
    typevars: dict[str, Type] = {}
    out = []
    for index, (pname, spec, actual) in enumerate(zip(arg_names, specs, actual_types)):
        where = f"argument '{pname}' of {name}()"
        if isinstance(spec, Generic):
            if spec.name is not None:
                bound = typevars.setdefault(spec.name, actual)
                if bound != actual:
                    raise BindError(f"{where}: TypeVar {spec.name} is already {bound!r} "
                                    f"here, got {actual!r}", index)
            out.append(actual)
        else:
            try:
                out.append(_fits(spec, actual, where))
            except TypeError as exc:
                raise BindError(str(exc), index) from None
    return tuple(out)


def _name(t: Type) -> str:
    if isinstance(t, ArrayType):
        return f"an array {t!r}"
    if isinstance(t, TupleType):
        return f"a tuple {t!r}"
    return repr(t)


_SIG_NAMES = dict(SCALARS)
_SIG_NAMES.update({"bool_": bool_, "Array": Array, "Tuple": lambda *e: TupleType(e),
                   "tuple": lambda *e: TupleType(e)})


def parse_signature(text: str) -> tuple[Type, ...]:
    """Concrete parameter types from a string: `"f32, Array[f32, 1, 'C'], i64"`.

    Raises
    ------
    ValueError
        If the text is not a comma-separated list of cupric types.
    """
    try:
        value = eval(f"({text},)", {"__builtins__": {}}, _SIG_NAMES)  # noqa: S307
    except Exception as exc:
        raise ValueError(f"cannot parse signature {text!r}: {exc}; write e.g. "
                         "\"f32, Array[f32, 1, 'C'], i64\"") from None
    for t in value:
        if not isinstance(t, Type):
            raise ValueError(f"{t!r} in signature {text!r} is not a cupric type")
    return tuple(value)


def format_signature(types) -> str:
    return ", ".join(repr(t) for t in types)
