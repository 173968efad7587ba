"""Typing of names and constants: locals, globals resolved at compile time, literals and
module-level values (inlined as constants, module arrays placed in constant memory). A
literal has a weak type that adapts to the other operand (NEP 50); its value is recorded
in `TypedFunction.consts`.
"""

from __future__ import annotations

import ast

import numpy as np

from cupric.compiler.frontend.resolve import MISSING, is_constant_value, lookup
from cupric.compiler.typing.common import UNKNOWN
from cupric.compiler.typing.ktypes import (NONE, WEAK_FLOAT, WEAK_INT, ObjectType, TupleType,
                                           materialize)
from cupric.types import Type, bool_, scalar_from_dtype


class ValueTyping:
    """The `Typer`'s names and constants (a mixin: `self` is the Typer)."""

    def _const(self, node, value) -> Type:
        """Record `value` as the compile-time value of `node`; return its type."""
        if isinstance(value, (bool, np.bool_)):
            self.fn.consts[node] = bool(value)
            return bool_
        if isinstance(value, np.generic):
            self.fn.consts[node] = value.item()
            return scalar_from_dtype(value.dtype)
        if isinstance(value, int):
            if not -(1 << 63) <= value < (1 << 64):
                raise self.error(node, f"integer {value} does not fit in 64 bits")
            self.fn.consts[node] = value
            return WEAK_INT
        if isinstance(value, float):
            self.fn.consts[node] = value
            return WEAK_FLOAT
        if isinstance(value, tuple):
            self.fn.consts[node] = value
            return TupleType(materialize(self._const_type(v, node)) for v in value)
        raise self.error(node, f"constants of type {type(value).__name__} are not supported "
                         "in kernels")

    def _const_type(self, value, node) -> Type:
        if isinstance(value, (bool, np.bool_)):
            return bool_
        if isinstance(value, np.generic):
            return scalar_from_dtype(value.dtype)
        if isinstance(value, int):
            return WEAK_INT
        if isinstance(value, float):
            return WEAK_FLOAT
        if isinstance(value, tuple):
            return TupleType(materialize(self._const_type(v, node)) for v in value)
        raise self.error(node, f"constants of type {type(value).__name__} are not supported")

    def _e_Constant(self, node) -> Type:
        value = node.value
        if value is None:
            return NONE
        if isinstance(value, (str, bytes)):
            raise self.error(node, "strings are not supported in kernels")
        if isinstance(value, complex):
            raise self.error(node, "complex numbers are not supported in kernels")
        if value is Ellipsis:
            raise self.error(node, "... is not supported in kernels")
        return self._const(node, value)

    def _global(self, name: str):
        return lookup(self.fn.py_func, name)

    def _load_name(self, node: ast.Name) -> Type:
        name = node.id
        if name in self.locals:
            t = self.fn.var_types.get(name)
            if t is None:
                if self.final:
                    raise self.error(node, f"local variable '{name}' is read before it is "
                                     "assigned")
                return UNKNOWN
            return t
        return self._object(node, self._global(name), name)

    def _e_Name(self, node: ast.Name) -> Type:
        return self._load_name(node)

    def _object(self, node, value, name: str) -> Type:
        """The type of a resolved global / attribute value (constants are inlined)."""
        if value is MISSING:
            raise self.error(node, f"name '{name}' is not defined")
        if is_constant_value(value):
            return self._const(node, value)
        if isinstance(value, (str, bytes)):
            raise self.error(node, f"'{name}' is a string; constants of type "
                             f"{type(value).__name__} are not supported in kernels")
        if isinstance(value, np.ndarray):  # module-level data: constant memory
            from cupric.compiler.lowering.const import type_global_array
            return type_global_array(self, node, value, name)
        return ObjectType(value)
