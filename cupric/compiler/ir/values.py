"""Values of the IR builder: constants, function arguments and instruction results, each
carrying its type and the text it is referred to by (`%v3`, `42`, `0x3FF0000000000000`)."""

from __future__ import annotations

import math
import struct

from cupric.compiler.ir.types import FloatType, IntType, LLType, PointerType, StructType

__all__ = ["Value", "Constant", "const_int", "const_float", "const_bool", "undef",
           "null", "zero"]


class Value:
    """An SSA value: `type` and `ref`, its spelling as an operand."""

    __slots__ = ("type", "ref")

    def __init__(self, type: LLType, ref: str) -> None:
        self.type = type
        self.ref = ref

    def typed(self) -> str:
        """`type ref`, the way instructions list their operands."""
        return f"{self.type} {self.ref}"

    def __repr__(self) -> str:
        return f"<Value {self.type} {self.ref}>"


class Constant(Value):
    """A constant operand; `value` keeps the Python value for folding (or None)."""

    __slots__ = ("value",)

    def __init__(self, type: LLType, ref: str, value=None) -> None:
        super().__init__(type, ref)
        self.value = value


def const_int(type: IntType, value: int) -> Constant:
    """An integer constant, wrapped to the type's width (the text is signed decimal)."""
    bits = type.bits
    value = int(value) & ((1 << bits) - 1)
    if bits == 1:
        return Constant(type, "true" if value else "false", value)
    if value >> (bits - 1):
        value -= 1 << bits
    return Constant(type, str(value), value)


def const_bool(value: bool) -> Constant:
    from cupric.compiler.ir.types import i1
    return const_int(i1, 1 if value else 0)


def const_float(type: FloatType, value: float) -> Constant:
    """A float constant in LLVM's exact hexadecimal form.

    `float` constants are written as the double of the rounded single (LLVM requires the
    value to be exactly representable); `half` uses the `0xH` form.
    """
    value = float(value)
    if type.bits == 16:
        bits = struct.unpack("<H", struct.pack("<e", value))[0]
        return Constant(type, f"0xH{bits:04X}", value)
    if type.bits == 32 and math.isfinite(value):
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    elif type.bits == 32:
        pass  # inf and nan survive the double form unchanged
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    if type.bits == 32 and math.isnan(value):
        bits = 0x7FF8000000000000  # the quiet NaN that converts exactly to float
    return Constant(type, f"0x{bits:016X}", value)


def undef(type: LLType) -> Constant:
    return Constant(type, "undef")


def null(type: PointerType) -> Constant:
    return Constant(type, "null")


def zero(type: LLType) -> Constant:
    """The zero of any first-class type."""
    if isinstance(type, IntType):
        return const_int(type, 0)
    if isinstance(type, FloatType):
        return const_float(type, 0.0)
    if isinstance(type, PointerType):
        return null(type)
    if isinstance(type, StructType):
        return Constant(type, "zeroinitializer")
    return Constant(type, "zeroinitializer")
