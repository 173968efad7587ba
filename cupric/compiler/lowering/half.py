"""Lowering of `cupric.device.half`: IEEE half (f16) bit patterns (moves and
cvt.rn.f16.f32), bfloat16 rounding and bit patterns (round to nearest even on the f32
bits in integer arithmetic, so every architecture gives the same bits as the
simulator), and the fused `half.fma` (`llvm.fma.f16`, PTX fma.rn.f16).
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import WeakType
from cupric.types import ScalarType, f16, f32, u16

__all__ = ["bf16_bits_value", "bf16_from_bits_value"]


def bf16_bits_value(cg, x: Value) -> Value:
    """i16 bfloat16 bits of the f32 value `x`, rounded to nearest even; NaN stays a
    (quiet) NaN."""
    b = cg.b
    bits = b.cast("bitcast", x, ll.i32)
    lsb = b.binop("and", b.binop("lshr", bits, const_int(ll.i32, 16)), const_int(ll.i32, 1))
    rounded = b.binop("lshr", b.binop("add", bits, b.binop("add", const_int(ll.i32, 0x7FFF),
                                                           lsb)), const_int(ll.i32, 16))
    quiet = b.binop("or", b.binop("lshr", bits, const_int(ll.i32, 16)),
                    const_int(ll.i32, 0x40))
    is_nan = b.fcmp("uno", x, x)
    return b.cast("trunc", b.select(is_nan, quiet, rounded), ll.i16)


def bf16_from_bits_value(cg, bits16: Value) -> Value:
    """The f32 of a bfloat16 bit pattern (i16)."""
    b = cg.b
    wide = b.binop("shl", b.cast("zext", bits16, ll.i32), const_int(ll.i32, 16))
    return b.cast("bitcast", wide, ll.float)


def _number(call, what: str, count: int = 1) -> None:
    if len(call.arg_types) != count or call.keywords:
        raise TypeError(f"{what} takes {count} argument{'s' if count > 1 else ''}")
    for t in call.arg_types:
        if not isinstance(t, (ScalarType, WeakType)) or getattr(t, "kind", "") == "b":
            raise TypeError(f"{what}: arguments must be numbers, got {t!r}")


def _integer(call, what: str) -> None:
    if len(call.arg_types) != 1 or call.keywords:
        raise TypeError(f"{what} takes one argument")
    t = call.arg_types[0]
    if not ((isinstance(t, WeakType) and t.kind == "int")
            or (isinstance(t, ScalarType) and t.is_integer)):
        raise TypeError(f"{what}: the bit pattern must be an integer (u16), got {t!r}")


def _as(cg, kv, t, node) -> Value:
    if isinstance(kv.type, WeakType):
        kv = cg.convert(kv, kv.type.default, node)
    return cg.convert(kv, t, node).value


def _rule(name, check, result, lower):
    def infer(call):
        check(call, f"half.{name}")
        return result
    register(f"half.{name}", infer, lower)


_rule("bf16", _number, f32, lambda cg, call, args: KValue(f32, [bf16_from_bits_value(
    cg, bf16_bits_value(cg, _as(cg, args[0], f32, call.node)))]))
_rule("bf16_bits", _number, u16, lambda cg, call, args: KValue(u16, [bf16_bits_value(
    cg, _as(cg, args[0], f32, call.node))]))
_rule("bf16_from_bits", _integer, f32, lambda cg, call, args: KValue(f32, [
    bf16_from_bits_value(cg, _as(cg, args[0], u16, call.node))]))
_rule("f16_bits", _number, u16, lambda cg, call, args: KValue(u16, [cg.b.cast(
    "bitcast", _as(cg, args[0], f16, call.node), ll.i16)]))
_rule("f16_from_bits", _integer, f16, lambda cg, call, args: KValue(f16, [cg.b.cast(
    "bitcast", _as(cg, args[0], u16, call.node), ll.half)]))


def _fma_lower(cg, call, args):
    vals = [_as(cg, a, f16, call.node) for a in args]
    return KValue(f16, [cg.mcg.call_external(cg.b, "llvm.fma.f16", ll.half, vals)])


_rule("fma", lambda call, what: _number(call, what, 3), f16, _fma_lower)
