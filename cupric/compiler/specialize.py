"""Specialization: one typed function per (Python function, concrete argument types),
like Rust's monomorphization. The context caches device-function specializations and
catches recursion, which the kernel language does not support."""

from __future__ import annotations

import threading

from cupric.compiler.frontend.source import get_source
from cupric.compiler.signature import Generic, param_specs
from cupric.compiler.typing.infer import Typer, TypedFunction
from cupric.compiler.typing.ktypes import StructType, TupleType
from cupric.types import ArrayType, ScalarType

__all__ = ["Context", "type_kernel", "CONTEXT"]


class Context:
    """Typed specializations of device functions, shared by every kernel of a process.

    Thread safety
    -------------
    One lock serializes typing (it is quick; libNVVM compiles run outside it).
    """

    def __init__(self) -> None:
        self._cache: dict[tuple, TypedFunction] = {}
        self._active: list[tuple] = []
        self.lock = threading.RLock()

    def type_device(self, devfn, arg_types, caller_src, node) -> TypedFunction:
        py_func = devfn.py_func
        src = get_source(py_func)
        specs = param_specs(py_func)
        if len(specs) != len(arg_types):
            raise caller_src.error(node, f"{src.name}() takes {len(specs)} arguments, got "
                                   f"{len(arg_types)}")
        concrete = []
        for k, (spec, actual) in enumerate(zip(specs, arg_types)):
            concrete.append(_param_type(spec, actual, caller_src, node, src.name, k))
        key = (py_func, tuple(concrete))
        with self.lock:
            known = self._cache.get(key)
            if known is not None:
                return known
            if any(k[0] is py_func for k in self._active):
                raise caller_src.error(node, f"{src.name}() calls itself; recursion is not "
                                       "supported in kernels", hint="rewrite it as a loop")
            self._active.append(key)
            try:
                typed = Typer(self, src, concrete, is_kernel=False).run()
            finally:
                self._active.pop()
            self._cache[key] = typed
            return typed


def _param_type(spec, actual, caller_src, node, fname, k):
    """The parameter type of a device function for an argument of type `actual`:
    annotated scalars convert (as a C call would), others must match."""
    if isinstance(spec, Generic):
        return actual
    if isinstance(spec, ScalarType):
        if isinstance(actual, ScalarType):
            return spec
    elif isinstance(spec, ArrayType):
        if isinstance(actual, ArrayType) and (actual.dtype, actual.ndim) == (spec.dtype,
                                                                            spec.ndim):
            return actual
    elif isinstance(spec, (StructType, TupleType)):
        if spec == actual or isinstance(spec, TupleType) and isinstance(actual, TupleType):
            return actual
    raise caller_src.error(node.args[k] if k < len(node.args) else node,
                           f"argument {k + 1} of {fname}() must be {spec!r}, got {actual!r}")


CONTEXT = Context()


def type_kernel(py_func, arg_types) -> TypedFunction:
    """The typed IR of kernel `py_func` for concrete `arg_types`."""
    src = get_source(py_func)
    with CONTEXT.lock:
        return Typer(CONTEXT, src, list(arg_types), is_kernel=True).run()
