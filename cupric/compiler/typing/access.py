"""Typing of attribute reads and subscripts: `x.attr` of compile-time objects (modules,
math constants, the dim3 components of intrinsics), vector fields, array metadata
(.shape, .strides, .size, .ndim) and struct fields; array elements and tuple items; tuple
displays.
"""

from __future__ import annotations

import ast
import math

from cupric.compiler.frontend.resolve import MISSING
from cupric.compiler.lowering.mathlib import MATH_CONSTANTS
from cupric.compiler.typing.common import UNKNOWN, _describe
from cupric.compiler.typing.ktypes import (NONE, WEAK_INT, ObjectType, StructType, TupleType,
                                           VectorType, materialize)
from cupric.device.registry import Dim3
from cupric.types import ArrayType, ScalarType, Type, i64


class AccessTyping:
    """The `Typer`'s attributes and subscripts (a mixin: `self` is the Typer)."""

    def _e_Attribute(self, node: ast.Attribute) -> Type:
        base = self.expr(node.value)
        attr = node.attr
        if base is UNKNOWN:
            return UNKNOWN
        if isinstance(base, ObjectType):
            obj = base.obj
            if obj is math and attr in MATH_CONSTANTS:
                return self._const(node, MATH_CONSTANTS[attr])
            if isinstance(obj, Dim3) and attr in ("x", "y", "z"):
                return self._intrinsic_call(node, obj.component(attr), [], [], {})
            value = getattr(obj, attr, MISSING)
            if value is MISSING:
                raise self.error(node, f"{_describe(base)} has no attribute '{attr}'")
            return self._object(node, value, attr)
        if isinstance(base, VectorType):  # v.x, v.y, v.z, v.w
            from cupric.compiler.lowering.vector import field_index
            k = field_index(base, attr)
            if k is None:
                raise self.error(node, f"{base!r} has no field '{attr}'")
            return base.elements[k]
        if isinstance(base, ArrayType):
            if attr == "shape":
                return TupleType([i64] * base.ndim)
            if attr == "strides":
                return TupleType([i64] * base.ndim)
            if attr == "size":
                return i64
            if attr == "ndim":
                return self._const(node, base.ndim)
            raise self.error(node, f"arrays in kernels have .shape, .strides, .size and "
                             f".ndim; not .{attr}")
        if isinstance(base, StructType):
            if attr not in base.fields:
                raise self.error(node, f"{base!r} has no field '{attr}'",
                                 hint=f"fields: {', '.join(base.names)}")
            return base.fields[attr][0]
        raise self.error(node, f"{_describe(base)} has no attribute '{attr}'")

    def _refuse_module_array_write(self, node) -> None:
        """Module-level arrays are read-only data of the compiled module (constant memory):
        a write into one is refused here, where the simulator and the GPU agree."""
        from cupric.compiler.lowering.const import _ArrayRef
        target = self.fn.targets.get(node)
        if target is not None and target[0] == "custom" and isinstance(target[1], _ArrayRef):
            name = node.id if isinstance(node, ast.Name) else ast.unparse(node)
            raise self.error(node, f"'{name}' is a module-level array: read-only data of the "
                             "compiled kernel (constant memory), which kernels cannot write",
                             hint="pass the array as a kernel argument to write it")

    def _index_types(self, node: ast.Subscript, at: ArrayType) -> None:
        index = node.slice
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        if len(items) != at.ndim:
            raise self.error(node, f"a {at.ndim}-D array needs {at.ndim} indices, got "
                             f"{len(items)}", hint="kernels index single elements: a[i, j]")
        for item in items:
            if isinstance(item, ast.Slice):
                raise self.error(item, "slicing is not supported in kernels; index element "
                                 "by element")
            it = self.expr(item)
            if it is UNKNOWN:
                continue
            if not (it is WEAK_INT or (isinstance(it, ScalarType) and it.is_integer)):
                raise self.error(item, f"array indices must be integers, not {_describe(it)}")

    def _e_Subscript(self, node: ast.Subscript) -> Type:
        base = self.expr(node.value)
        if base is UNKNOWN:
            return UNKNOWN
        if isinstance(base, ArrayType):
            self._index_types(node, base)
            return base.dtype
        if isinstance(base, TupleType):
            it = self.expr(node.slice)
            value = self.fn.consts.get(node.slice)
            if it is not WEAK_INT or not isinstance(value, int):
                raise self.error(node.slice, "tuples are indexed by integer constants only")
            n = len(base.elements)
            if not -n <= value < n:
                raise self.error(node.slice, f"tuple index {value} out of range (length {n})")
            return base.elements[value]
        if isinstance(base, ObjectType) and getattr(base.obj, "_cupric_kernel", False):
            raise self.error(node, f"kernel {base.obj.__name__} cannot be launched from kernel "
                             "code (cupric kernels do not launch kernels)",
                             hint="make it a @cupric.device_function and call it, or launch "
                             "it from the host after this kernel")
        raise self.error(node, f"{_describe(base)} cannot be indexed")

    def _e_Tuple(self, node: ast.Tuple) -> Type:
        elts = [self.expr(e) for e in node.elts]
        if UNKNOWN in elts:
            return UNKNOWN
        for e, t in zip(node.elts, elts):
            if isinstance(t, ObjectType) or t == NONE:
                raise self.error(e, f"{_describe(t)} cannot be put in a tuple")
        if all(e in self.fn.consts for e in node.elts):  # (16, 16): a constant shape
            self.fn.consts[node] = tuple(self.fn.consts[e] for e in node.elts)
        return TupleType(materialize(t) for t in elts)
