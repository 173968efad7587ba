"""Array elements in NVVM IR: the address of `a[i, j]` from the data pointer, shapes and
strides of the kernel ABI (C and F layouts index with the shapes, 'A' with the strides;
bounds checked when asked), and loads and stores of an element (bool as a byte, bf16 as
its 16 bits, read-only arrays through invariant loads)."""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue, element_pointer_type
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.typing.ktypes import StructType, WeakType
from cupric.types import ArrayType, i64, is_bf16

__all__ = ["ArrayCodegen"]


class ArrayCodegen:
    """Array element access of `FunctionCodegen` (cupric.compiler.codegen.function)."""

    def array_size(self, array: KValue) -> Value:
        size = const_int(ll.i64, 1)
        for k in range(array.type.ndim):
            size = array.shape(k) if k == 0 else self.b.binop("mul", size, array.shape(k))
        return size

    def element_pointer(self, array: KValue, node: ast.Subscript) -> Value:
        """Address of `array[indices]`: contiguous layouts index with the shapes (unit
        innermost stride known to the optimizer), 'A' with the strides."""
        index = node.slice
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        idx = [self.to_i64(self.expr(item)) for item in items]
        name = node.value.id if isinstance(node.value, ast.Name) else None
        return self.element_address(array, idx, node, name)

    def element_address(self, array: KValue, idx: list[Value], node=None,
                        name: str | None = None) -> Value:
        """Address of the element at i64 indices `idx` (also used by atomics); with
        bounds checking on, each index is checked against the shape first."""
        at = array.type
        if self.mcg.bounds_check:
            from cupric.compiler.lowering.checks import check_bounds
            check_bounds(self, array, idx, node, name)
        b = self.b
        n = at.ndim
        if n == 1 and at.layout in ("C", "F"):
            offset = idx[0]
        elif at.layout == "C":
            offset = idx[0]
            for k in range(1, n):
                offset = b.binop("add", b.binop("mul", offset, array.shape(k)), idx[k])
        elif at.layout == "F":
            offset = idx[n - 1]
            for k in range(n - 2, -1, -1):
                offset = b.binop("add", b.binop("mul", offset, array.shape(k)), idx[k])
        else:
            offset = None
            for k in range(n):
                term = b.binop("mul", idx[k], array.stride(k))
                offset = term if offset is None else b.binop("add", offset, term)
        return b.gep(array.data, [offset], inbounds=True, result_type=element_pointer_type(at))

    def to_i64(self, kv: KValue) -> Value:
        t = kv.type
        v = kv.value
        if isinstance(t, WeakType) or t == i64:
            return v
        if t.bits < 64:
            return self.b.cast("sext" if t.is_signed else "zext", v, ll.i64)
        return v  # u64: same bits

    def store_element(self, at: ArrayType, ptr: Value, value: KValue, node) -> None:
        v = self.convert(value, at.dtype, node).value
        if isinstance(at.dtype, StructType):  # shared/local arrays of structs
            self.b.store(v, ptr, align=at.dtype.align)
            return
        if at.dtype.kind == "b":
            v = self.b.cast("zext", v, ll.i8)
        elif is_bf16(at.dtype):  # held as f32, stored as its 16 bits
            from cupric.compiler.lowering.half import bf16_store_value
            v = bf16_store_value(self, v)
        self.b.store(v, ptr, align=at.dtype.itemsize)

    def load_element(self, at: ArrayType, ptr: Value) -> KValue:
        invariant = self.mcg.invariant_node() if at.readonly else None
        if isinstance(at.dtype, StructType):
            return KValue(at.dtype, [self.b.load(ptr, align=at.dtype.align,
                                                 invariant=invariant)])
        v = self.b.load(ptr, align=at.dtype.itemsize, invariant=invariant)
        if at.dtype.kind == "b":
            v = self.b.icmp("ne", v, const_int(ll.i8, 0))
        elif is_bf16(at.dtype):
            from cupric.compiler.lowering.half import bf16_load_value
            v = bf16_load_value(self, v)
        return KValue(at.dtype, [v])
