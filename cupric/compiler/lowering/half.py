"""Lowering of `cupric.device.half`: IEEE half (f16) bit patterns (moves and
cvt.<rounding>.f16.f32), bfloat16 rounding and bit patterns (nearest even and the
directed modes on the f32 bits in integer arithmetic, so every architecture gives the
same bits as the simulator), the fused `half.fma` (`llvm.fma.f16`, PTX fma.rn.f16) and
`half.bf16_fma` (fma.rn.bf16), and packed pairs (fma.rn.f16x2 / fma.rn.bf16x2).
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import TupleType, WeakType
from cupric.types import ScalarType, f16, f32, u16, u32

__all__ = ["bf16_bits_value", "bf16_from_bits_value", "bf16_directed_bits", "unpack_pair"]


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


# -- rounding modes, bfloat16 fma, packed pairs --------------------------------------------

def _rounding(call, what: str) -> str:
    from cupric.device.half import ROUNDINGS
    mode = call.keywords.get("rounding", "rn")
    if mode not in ROUNDINGS:
        raise TypeError(f"{what}: rounding must be one of {', '.join(map(repr, ROUNDINGS))}, "
                        f"got {mode!r}")
    return mode


def _convert_infer(result):
    def infer(call):
        what = "half.to_f16" if result == f16 else "half.to_bf16"
        if len(call.arg_types) != 1 or set(call.keywords) - {"rounding"}:
            raise TypeError(f"{what}(x, rounding='rn') takes a number and, as a keyword, "
                            f"a rounding mode")
        t = call.arg_types[0]
        if not isinstance(t, (ScalarType, WeakType)) or getattr(t, "kind", "") == "b":
            raise TypeError(f"{what}: x must be a number, got {t!r}")
        _rounding(call, what)
        return result
    return infer


def _to_f16_lower(cg, call, args):
    from cupric.device.half import ROUNDINGS
    mode = ROUNDINGS[_rounding(call, "half.to_f16")]
    x = _as(cg, args[0], f32, call.node)
    bits = cg.b.inline_asm(ll.FunctionType(ll.i16, [ll.float]), f"cvt.{mode}.f16.f32 $0, $1;",
                           "=h,f", [x], side_effects=False)
    return KValue(f16, [cg.b.cast("bitcast", bits, ll.half)])


def bf16_directed_bits(cg, x: Value, mode: str) -> Value:
    """i16 bfloat16 bits of f32 `x` rounded toward zero ("rz"), down ("rd") or up ("ru"):
    the top half of the f32 bits, its magnitude raised by one where the dropped half is
    nonzero and the mode rounds away from zero for x's sign; NaN stays a quiet NaN."""
    b = cg.b
    bits = b.cast("bitcast", x, ll.i32)
    top = b.binop("lshr", bits, const_int(ll.i32, 16))
    if mode == "rz":
        rounded = top
    else:
        inexact = b.icmp("ne", b.binop("and", bits, const_int(ll.i32, 0xFFFF)),
                         const_int(ll.i32, 0))
        negative = b.icmp("slt", bits, const_int(ll.i32, 0))
        away = b.binop("xor", negative, const_int(ll.i1, 1)) if mode == "ru" else negative
        bump = b.cast("zext", b.binop("and", inexact, away), ll.i32)
        rounded = b.binop("add", top, bump)
    quiet = b.binop("or", top, const_int(ll.i32, 0x40))
    return b.cast("trunc", b.select(b.fcmp("uno", x, x), quiet, rounded), ll.i16)


def _to_bf16_lower(cg, call, args):
    mode = _rounding(call, "half.to_bf16")
    x = _as(cg, args[0], f32, call.node)
    bits = bf16_bits_value(cg, x) if mode == "rn" else bf16_directed_bits(cg, x, mode)
    return KValue(f32, [bf16_from_bits_value(cg, bits)])


register("half.to_f16", _convert_infer(f16), _to_f16_lower)
register("half.to_bf16", _convert_infer(f32), _to_bf16_lower)


def _bf16_fma_lower(cg, call, args):
    vals = [bf16_bits_value(cg, _as(cg, a, f32, call.node)) for a in args]
    r = cg.b.inline_asm(ll.FunctionType(ll.i16, [ll.i16] * 3), "fma.rn.bf16 $0, $1, $2, $3;",
                        "=h,h,h,h", vals, side_effects=False)
    return KValue(f32, [bf16_from_bits_value(cg, r)])


_rule("bf16_fma", lambda call, what: _number(call, what, 3), f32, _bf16_fma_lower)


def _words(call, what: str, count: int) -> None:
    if len(call.arg_types) != count or call.keywords:
        raise TypeError(f"{what} takes {count} packed u32 words")
    for t in call.arg_types:
        if not ((isinstance(t, WeakType) and t.kind == "int")
                or (isinstance(t, ScalarType) and t.is_integer and t.bits == 32)):
            raise TypeError(f"{what}: packed pairs are u32 words, got {t!r}")


def _fma2(cg, kind: str, vals) -> Value:
    return cg.b.inline_asm(ll.FunctionType(ll.i32, [ll.i32] * 3),
                           f"fma.rn.{kind}x2 $0, $1, $2, $3;", "=r,r,r,r", vals,
                           side_effects=False)


# x * 1.0 + y and x * y + (-0.0): one rounding each, exactly the add and the multiply.
_ONE2 = {"f16": 0x3C003C00, "bf16": 0x3F803F80}
_NEG_ZERO2 = 0x80008000


def _packed_rules(kind: str) -> None:
    def word(cg, kv, node):
        return _as(cg, kv, u32, node)

    _rule(f"fma2_{kind}", lambda call, what: _words(call, what, 3), u32,
          lambda cg, call, args: KValue(u32, [_fma2(cg, kind, [word(cg, a, call.node)
                                                               for a in args])]))
    _rule(f"add2_{kind}", lambda call, what: _words(call, what, 2), u32,
          lambda cg, call, args: KValue(u32, [_fma2(cg, kind, [
              word(cg, args[0], call.node), const_int(ll.i32, _ONE2[kind]),
              word(cg, args[1], call.node)])]))
    _rule(f"mul2_{kind}", lambda call, what: _words(call, what, 2), u32,
          lambda cg, call, args: KValue(u32, [_fma2(cg, kind, [
              word(cg, args[0], call.node), word(cg, args[1], call.node),
              const_int(ll.i32, _NEG_ZERO2)])]))


_packed_rules("f16")
_packed_rules("bf16")


def unpack_pair(cg, word: Value, kind: str) -> list:
    """The two values of an i32 holding a packed pair ("f16": f16 values; "bf16": f32
    values), the low half first."""
    b = cg.b
    lo = b.cast("trunc", word, ll.i16)
    hi = b.cast("trunc", b.binop("lshr", word, const_int(ll.i32, 16)), ll.i16)
    if kind == "f16":
        return [b.cast("bitcast", lo, ll.half), b.cast("bitcast", hi, ll.half)]
    return [bf16_from_bits_value(cg, lo), bf16_from_bits_value(cg, hi)]


def _unpack_lower(kind: str):
    def lower(cg, call, args):
        word = _as(cg, args[0], u32, call.node)
        return KValue(call.result_type, unpack_pair(cg, word, kind))
    return lower


def _unpack_infer(result):
    def infer(call):
        _words(call, "half.unpack2", 1)
        return TupleType([result, result])
    return infer


register("half.unpack2_f16", _unpack_infer(f16), _unpack_lower("f16"))
register("half.unpack2_bf16", _unpack_infer(f32), _unpack_lower("bf16"))
