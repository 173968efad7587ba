"""How cupric types live in NVVM IR: the LLVM types of scalars (bool is `i1` in
registers and `i8` in memory and kernel parameters), the flattened form of arrays
(pointer, shapes, strides in elements), tuples and structs, and `KValue`, a typed value
made of the IR values of that flattened form."""

from __future__ import annotations

from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value
from cupric.compiler.typing.ktypes import NONE, StructType, TupleType, WeakType
from cupric.types import ArrayType, ScalarType, Type

__all__ = ["KValue", "scalar_lltype", "memory_lltype", "flat_lltypes", "abi_lltypes",
           "struct_lltype", "flat_width", "element_pointer_type"]


def scalar_lltype(t: ScalarType) -> ll.LLType:
    """The register type of a scalar (`i1` for bool)."""
    if isinstance(t, WeakType):
        t = t.default
    if t.kind == "b":
        return ll.i1
    if t.kind == "f":
        if t.name == "bf16":  # held as the f32 of the same value (lowering/half.py)
            return ll.float
        return {16: ll.half, 32: ll.float, 64: ll.double}[t.bits]
    return ll.IntType(t.bits)


def memory_lltype(t: ScalarType) -> ll.LLType:
    """The in-memory type of a scalar (`i8` for bool, as NumPy stores it), or of a
    struct (the elements of shared and local arrays of structs)."""
    if isinstance(t, StructType):
        return struct_lltype(t)
    if getattr(t, "name", None) == "bf16":  # its 16 bits
        return ll.i16
    return ll.i8 if t.kind == "b" else scalar_lltype(t)


def element_pointer_type(t: ArrayType) -> ll.PointerType:
    # Kernel arguments point into global memory; shared, constant and local arrays
    # (SpaceArrayType) carry their own address space.
    return ll.PointerType(memory_lltype(t.dtype), getattr(t, "space", ll.GLOBAL))


def struct_lltype(t: StructType) -> ll.StructType:
    """A literal LLVM struct with explicit `[n x i8]` padding, so the layout is exactly the
    aligned NumPy dtype's whatever LLVM's own rules would pick."""
    elements = []
    offset = 0
    for name in t.names:
        ft, foff = t.fields[name]
        if foff > offset:
            elements.append(ll.ArrayType(ll.i8, foff - offset))
        elements.append(memory_lltype(ft))
        offset = foff + ft.itemsize
    if t.size > offset:
        elements.append(ll.ArrayType(ll.i8, t.size - offset))
    return ll.StructType(elements)


def struct_field_index(t: StructType, field: str) -> int:
    """The LLVM element index of `field` in `struct_lltype(t)`."""
    index = 0
    offset = 0
    for name in t.names:
        ft, foff = t.fields[name]
        if foff > offset:
            index += 1
        if name == field:
            return index
        index += 1
        offset = foff + ft.itemsize
    raise KeyError(field)


def flat_lltypes(t: Type) -> list[ll.LLType]:
    """The IR values a value of type `t` is made of, in registers."""
    if isinstance(t, (ScalarType, WeakType)):
        return [scalar_lltype(t)]
    if isinstance(t, ArrayType):
        return [element_pointer_type(t)] + [ll.i64] * (2 * t.ndim)
    if isinstance(t, TupleType):
        return [x for e in t.elements for x in flat_lltypes(e)]
    if isinstance(t, StructType):
        return [struct_lltype(t)]
    if t == NONE:
        return []
    raise TypeError(f"{t!r} has no runtime representation")


def abi_lltypes(t: Type) -> list[ll.LLType]:
    """The kernel parameters of type `t` (docs/internals.md, Kernel ABI): as
    `flat_lltypes`, with bool passed as `i8`."""
    if isinstance(t, ScalarType):
        return [memory_lltype(t)]
    if isinstance(t, TupleType):
        return [x for e in t.elements for x in abi_lltypes(e)]
    return flat_lltypes(t)


def flat_width(t: Type) -> int:
    return len(flat_lltypes(t))


class KValue:
    """A value of cupric type `type`, held as the IR values of its flattened form.

    A scalar has one value; an array has its data pointer, then `ndim` shapes and `ndim`
    strides (i64, in elements); a tuple concatenates its elements.
    """

    __slots__ = ("type", "vals")

    def __init__(self, type: Type, vals: list[Value]) -> None:
        self.type = type
        self.vals = list(vals)

    @property
    def value(self) -> Value:
        """The single IR value of a scalar or struct."""
        if len(self.vals) != 1:
            raise TypeError(f"{self.type!r} is not a single value")
        return self.vals[0]

    # arrays
    @property
    def data(self) -> Value:
        return self.vals[0]

    def shape(self, k: int) -> Value:
        return self.vals[1 + k]

    def stride(self, k: int) -> Value:
        return self.vals[1 + self.type.ndim + k]

    # tuples
    def element(self, index: int) -> KValue:
        elements = self.type.elements
        start = sum(flat_width(e) for e in elements[:index])
        width = flat_width(elements[index])
        return KValue(elements[index], self.vals[start:start + width])

    def __repr__(self) -> str:
        return f"KValue({self.type!r}, {self.vals!r})"
