"""LLVM 7 types as NVVM IR spells them: integers, floats, typed pointers with an address
space, structs, arrays, functions. Pure Python, immutable, compared by their text."""

from __future__ import annotations

__all__ = ["LLType", "VoidType", "IntType", "FloatType", "PointerType", "StructType",
           "ArrayType", "FunctionType", "MetadataType", "void", "i1", "i8", "i16", "i32",
           "i64", "half", "float", "double", "metadata", "GLOBAL", "SHARED", "CONSTANT",
           "LOCAL", "GENERIC"]

# NVPTX address spaces (NVVM IR spec, "Address Space").
GENERIC, GLOBAL, SHARED, CONSTANT, LOCAL = 0, 1, 3, 4, 5


class LLType:
    """Base of the IR types; `str(t)` is its IR spelling, equality is by spelling."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<LLType {self._text}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LLType) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)

    def pointer(self, addrspace: int = GENERIC) -> PointerType:
        """A typed pointer to this type in `addrspace`."""
        return PointerType(self, addrspace)


class VoidType(LLType):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("void")


class MetadataType(LLType):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("metadata")


class IntType(LLType):
    """`iN`; signedness lives in the instructions (sdiv/udiv), not in the type."""

    __slots__ = ("bits",)

    def __init__(self, bits: int) -> None:
        super().__init__(f"i{bits}")
        self.bits = bits


class FloatType(LLType):
    """`half`, `float` or `double`."""

    __slots__ = ("bits",)

    _NAMES = {16: "half", 32: "float", 64: "double"}

    def __init__(self, bits: int) -> None:
        super().__init__(self._NAMES[bits])
        self.bits = bits


class PointerType(LLType):
    """A typed pointer (`float addrspace(1)*`): the only pointer kind libNVVM parses
    for every architecture."""

    __slots__ = ("pointee", "addrspace")

    def __init__(self, pointee: LLType, addrspace: int = GENERIC) -> None:
        space = f" addrspace({addrspace})" if addrspace else ""
        super().__init__(f"{pointee}{space}*")
        self.pointee = pointee
        self.addrspace = addrspace


class StructType(LLType):
    """A literal struct `{i32, float}` (never a named type: the text stays self-contained)."""

    __slots__ = ("elements",)

    def __init__(self, elements) -> None:
        elements = tuple(elements)
        super().__init__("{" + ", ".join(str(e) for e in elements) + "}")
        self.elements = elements


class ArrayType(LLType):
    """`[N x T]`, used for padding inside structs and for shared-memory globals."""

    __slots__ = ("count", "element")

    def __init__(self, element: LLType, count: int) -> None:
        super().__init__(f"[{count} x {element}]")
        self.count = count
        self.element = element


class FunctionType(LLType):
    """`ret (args...)`; `pointer()` gives the type that `!nvvm.annotations` names."""

    __slots__ = ("ret", "args")

    def __init__(self, ret: LLType, args) -> None:
        args = tuple(args)
        super().__init__(f"{ret} (" + ", ".join(str(a) for a in args) + ")")
        self.ret = ret
        self.args = args


void = VoidType()
metadata = MetadataType()
i1, i8, i16, i32, i64 = IntType(1), IntType(8), IntType(16), IntType(32), IntType(64)
half, float, double = FloatType(16), FloatType(32), FloatType(64)
