"""Constant folding: C constant expressions to plain numbers.

cffi's ABI mode needs literal array bounds and enum values it can compute itself; the
headers write some as expressions (``char pad[8 - sizeof(cudaLaunchAttributeID)]``,
``ncclMaxRedOp = 0x7fffffff >> (32 - 8*sizeof(ncclRedOp_dummy_t))``), and ``#define``
constants are arbitrary token sequences. This module evaluates them over pycparser
expression nodes with C's integer semantics (width, signedness, truncating division);
``sizeof`` asks a callback that knows the types declared so far.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pycparser import c_ast


class FoldError(ValueError):
    """An expression is not a constant the folder can evaluate."""


@dataclass(frozen=True)
class Int:
    """An integer constant with its C type's width (32 or 64) and signedness."""

    value: int
    bits: int = 32
    unsigned: bool = False

    def wrap(self) -> "Int":
        mask = (1 << self.bits) - 1
        v = self.value & mask
        if not self.unsigned and v >> (self.bits - 1):
            v -= 1 << self.bits
        return Int(v, self.bits, self.unsigned)


_INT_SUFFIX = re.compile(r"([uUlL]*)$")
_INTEGER_TYPES = {
    "char": (8, False), "signed char": (8, False), "unsigned char": (8, True),
    "short": (16, False), "short int": (16, False), "unsigned short": (16, True),
    "int": (32, False), "signed": (32, False), "signed int": (32, False),
    "unsigned": (32, True), "unsigned int": (32, True),
    "long": (64, False), "long int": (64, False), "unsigned long": (64, True),
    "unsigned long int": (64, True), "long long": (64, False), "long long int": (64, False),
    "unsigned long long": (64, True), "unsigned long long int": (64, True),
    "int8_t": (8, False), "int16_t": (16, False), "int32_t": (32, False), "int64_t": (64, False),
    "uint8_t": (8, True), "uint16_t": (16, True), "uint32_t": (32, True), "uint64_t": (64, True),
    "size_t": (64, True), "ssize_t": (64, False), "intptr_t": (64, False), "uintptr_t": (64, True),
}


def _parse_int(text: str) -> Int:
    suffix = _INT_SUFFIX.search(text).group(1)
    digits = text[: len(text) - len(suffix)] if suffix else text
    if digits.lower().startswith("0x"):
        value = int(digits, 16)
    elif digits.lower().startswith("0b"):
        value = int(digits, 2)
    elif len(digits) > 1 and digits.startswith("0"):
        value = int(digits, 8)
    else:
        value = int(digits, 10)
    unsigned = "u" in suffix.lower()
    bits = 64 if "l" in suffix.lower() else 32
    decimal = not digits.lower().startswith("0")
    # C picks the first type that holds the value; decimal literals stay signed.
    if bits == 32 and value > (0xFFFFFFFF if (unsigned or not decimal) else 0x7FFFFFFF):
        bits = 64
    if not unsigned and not decimal and value > (1 << (bits - 1)) - 1:
        unsigned = True
    if not unsigned and value > (1 << 63) - 1:
        unsigned = True
    return Int(value, bits, unsigned)


def _unescape_char(body: str) -> int:
    if body.startswith("\\"):
        escapes = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34, "a": 7,
                   "b": 8, "f": 12, "v": 11}
        if body[1] == "x":
            return int(body[2:], 16)
        if body[1].isdigit():
            return int(body[1:], 8)
        return escapes[body[1]]
    return ord(body)


def _promote(v: Int) -> Int:
    """Integer promotion: a type narrower than int (char, short) becomes a signed int."""
    return v if v.bits >= 32 else Int(v.value, 32, False)


def _arith(a: Int, b: Int) -> tuple[int, bool]:
    """Usual arithmetic conversions, LP64: width of the wider, unsigned wins at equal width."""
    a, b = _promote(a), _promote(b)
    bits = max(a.bits, b.bits, 32)
    if a.bits == b.bits:
        unsigned = a.unsigned or b.unsigned
    else:
        wide = a if a.bits > b.bits else b
        unsigned = wide.unsigned
    return bits, unsigned


class Folder:
    """Evaluates constant expressions.

    Parameters
    ----------
    names : Mapping
        Values of identifiers (enum constants, folded macros): `Int`, float or str.
    sizeof : callable
        ``sizeof(c_type_string) -> int`` for the types declared so far.
    resolve : callable, optional
        Called with an identifier missing from `names`; returns its value or raises
        `FoldError` (used to fold macros that refer to other macros, on demand).
    """

    def __init__(
        self,
        names: Mapping[str, object],
        sizeof: Callable[[str], int],
        resolve: Callable[[str], object] | None = None,
    ):
        self.names = names
        self.sizeof = sizeof
        self.resolve = resolve

    def fold(self, node: c_ast.Node) -> object:
        """The value of an expression node: `Int`, float or str."""
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise FoldError(f"not a constant expression: {type(node).__name__}")
        return method(node)

    def fold_int(self, node: c_ast.Node) -> int:
        """The value of an integer constant expression, as a Python int."""
        value = self.fold(node)
        if not isinstance(value, Int):
            raise FoldError(f"not an integer: {value!r}")
        return value.value

    # Node kinds ---------------------------------------------------------------

    def _Constant(self, node):
        if node.type == "string":
            return _unquote_string(node.value)
        if node.type == "char":
            return Int(_unescape_char(node.value[1:-1]))
        if node.type in ("float", "double", "long double"):
            return float(node.value.rstrip("fFlL"))
        text = node.value
        if re.fullmatch(r"[0-9.]+[eE][-+]?[0-9]+[fFlL]?|[0-9]*\.[0-9]*[fFlL]?", text):
            return float(text.rstrip("fFlL"))
        return _parse_int(text)

    def _ID(self, node):
        if node.name in self.names:
            return self.names[node.name]
        if self.resolve is not None:
            return self.resolve(node.name)
        raise FoldError(f"unknown identifier {node.name}")

    def _Typename(self, node):
        raise FoldError("a type is not a value")

    def _UnaryOp(self, node):
        if node.op == "sizeof":
            if isinstance(node.expr, c_ast.Typename):
                from pycparser import c_generator

                return Int(self.sizeof(c_generator.CGenerator().visit(node.expr)), 64, True)
            raise FoldError("sizeof of an expression")
        value = self.fold(node.expr)
        if isinstance(value, float):
            if node.op == "-":
                return -value
            if node.op == "+":
                return value
            raise FoldError(f"operator {node.op} on a float")
        if not isinstance(value, Int):
            raise FoldError(f"operator {node.op} on {value!r}")
        value = _promote(value)
        bits = value.bits
        if node.op == "-":
            return Int(-value.value, bits, value.unsigned).wrap()
        if node.op == "+":
            return Int(value.value, bits, value.unsigned)
        if node.op == "~":
            return Int(~value.value, bits, value.unsigned).wrap()
        if node.op == "!":
            return Int(int(not value.value))
        raise FoldError(f"unary operator {node.op}")

    def _BinaryOp(self, node):
        left = self.fold(node.left)
        if node.op in ("&&", "||"):
            truth = bool(left.value if isinstance(left, Int) else left)
            if (node.op == "&&" and not truth) or (node.op == "||" and truth):
                return Int(int(truth))
            right = self.fold(node.right)
            return Int(int(bool(right.value if isinstance(right, Int) else right)))
        right = self.fold(node.right)
        if isinstance(left, float) or isinstance(right, float):
            a = left.value if isinstance(left, Int) else left
            b = right.value if isinstance(right, Int) else right
            ops = {"+": a + b, "-": a - b, "*": a * b}
            if node.op in ops:
                return float(ops[node.op])
            if node.op == "/":
                return float(a) / float(b)
            compare = _compare(node.op, a, b)
            if compare is not None:
                return Int(int(compare))
            raise FoldError(f"operator {node.op} on floats")
        if not (isinstance(left, Int) and isinstance(right, Int)):
            raise FoldError(f"operator {node.op} on non-integers")
        if node.op in ("<<", ">>"):
            left = _promote(left)
            bits = left.bits
            if node.op == "<<":
                return Int(left.value << right.value, bits, left.unsigned).wrap()
            return Int(left.value >> right.value, bits, left.unsigned).wrap()
        bits, unsigned = _arith(left, right)
        a = Int(left.value, bits, unsigned).wrap().value
        b = Int(right.value, bits, unsigned).wrap().value
        compare = _compare(node.op, a, b)
        if compare is not None:
            return Int(int(compare))
        if node.op == "+":
            result = a + b
        elif node.op == "-":
            result = a - b
        elif node.op == "*":
            result = a * b
        elif node.op in ("/", "%"):
            if b == 0:
                raise FoldError("division by zero")
            quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            result = quotient if node.op == "/" else a - quotient * b
        elif node.op == "&":
            result = a & b
        elif node.op == "|":
            result = a | b
        elif node.op == "^":
            result = a ^ b
        else:
            raise FoldError(f"binary operator {node.op}")
        return Int(result, bits, unsigned).wrap()

    def _TernaryOp(self, node):
        cond = self.fold(node.cond)
        truth = cond.value if isinstance(cond, Int) else cond
        return self.fold(node.iftrue if truth else node.iffalse)

    def _Cast(self, node):
        value = self.fold(node.expr)
        from pycparser import c_generator

        type_text = " ".join(c_generator.CGenerator().visit(node.to_type).split())
        if type_text in ("float", "double", "long double"):
            return float(value.value if isinstance(value, Int) else value)
        if "*" in type_text:
            raise FoldError("pointer cast")
        integer = _INTEGER_TYPES.get(type_text)
        number = value.value if isinstance(value, Int) else int(value)
        if integer is None:
            # A typedef (usually an enum type): keep the value, C int-sized.
            return Int(number, 32, False) if isinstance(value, Int) else Int(number)
        bits, unsigned = integer
        return Int(number, bits, unsigned).wrap()


def _compare(op, a, b):
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b, "==": a == b, "!=": a != b}.get(op)


def _unquote_string(text: str) -> str:
    body = text[1:-1]
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)
