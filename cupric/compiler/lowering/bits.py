"""Lowering of `cupric.device.bits`: population count, leading zeros, find-first-set and
bit reversal through LLVM's bit intrinsics (PTX popc, clz, brev), high halves of
products (`llvm.nvvm.mulhi.*`, PTX mul.hi), and the byte permute and funnel shifts as
inline PTX (prmt.b32, shf.l/r.wrap.b32).
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue, scalar_lltype
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import ObjectType, WeakType, materialize
from cupric.types import ScalarType, i32, scalar_from_dtype, u32

__all__ = []


def _int_args(call, what: str, count: int):
    if len(call.arg_types) != count or call.keywords:
        raise TypeError(f"{what} takes {count} argument{'s' if count > 1 else ''}")
    out = []
    for t in call.arg_types:
        t = materialize(t)
        if not (isinstance(t, ScalarType) and t.is_integer and t.bits in (32, 64)):
            raise TypeError(f"{what}: arguments must be 32- or 64-bit integers, got {t!r}")
        out.append(t)
    return out


def _value(cg, kv, t, node):
    return cg.convert(kv if not isinstance(kv.type, WeakType) else cg.convert(
        kv, kv.type.default, node), t, node).value


def _count(name: str) -> None:
    what = f"bits.{name}"

    def infer(call):
        _int_args(call, what, 1)
        return i32

    def lower(cg, call, args):
        (t,) = _int_args(call, what, 1)
        v = _value(cg, args[0], t, call.node)
        lt = v.type
        b = cg.b
        if name == "popc":
            r = cg.mcg.call_external(b, f"llvm.ctpop.{lt}", lt, [v])
        elif name == "clz":
            r = cg.mcg.call_external(b, f"llvm.ctlz.{lt}", lt, [v, const_int(ll.i1, 0)])
        else:  # ffs: 1 + trailing zeros, 0 for 0 (cttz(0) is the width, defined here)
            tz = cg.mcg.call_external(b, f"llvm.cttz.{lt}", lt, [v, const_int(ll.i1, 0)])
            r = b.select(b.icmp("eq", v, const_int(lt, 0)), const_int(lt, 0),
                         b.binop("add", tz, const_int(lt, 1)))
        if lt.bits == 64:
            r = b.cast("trunc", r, ll.i32)
        return KValue(i32, [r])

    register(what, infer, lower)


for _name in ("popc", "clz", "ffs"):
    _count(_name)


def _brev_infer(call):
    return _int_args(call, "bits.brev", 1)[0]


def _brev_lower(cg, call, args):
    t = call.result_type
    v = _value(cg, args[0], t, call.node)
    return KValue(t, [cg.mcg.call_external(cg.b, f"llvm.bitreverse.{v.type}", v.type, [v])])


register("bits.brev", _brev_infer, _brev_lower)


def _mulhi_infer(call):
    a, c = _int_args(call, "bits.mulhi", 2)
    if (a.bits, a.kind) != (c.bits, c.kind):
        raise TypeError(f"bits.mulhi: both arguments must have the same type, got {a!r} and "
                        f"{c!r}")
    return a


def _mulhi_lower(cg, call, args):
    t = call.result_type
    a, c = (_value(cg, x, t, call.node) for x in args)
    name = {(32, "i"): "i", (32, "u"): "ui", (64, "i"): "ll", (64, "u"): "ull"}[
        (t.bits, t.kind)]
    return KValue(t, [cg.mcg.call_external(cg.b, f"llvm.nvvm.mulhi.{name}", a.type, [a, c])])


register("bits.mulhi", _mulhi_infer, _mulhi_lower)


def _u32_asm(name: str, text: str) -> None:
    what = f"bits.{name}"

    def infer(call):
        if len(call.arg_types) != 3 or call.keywords:
            raise TypeError(f"{what} takes three integers")
        for t in call.arg_types:
            t = materialize(t)
            if not (isinstance(t, ScalarType) and t.is_integer):
                raise TypeError(f"{what}: arguments must be integers, got {t!r}")
        return u32

    def lower(cg, call, args):
        vals = [_value(cg, a, u32, call.node) for a in args]
        r = cg.b.inline_asm(ll.FunctionType(ll.i32, [ll.i32] * 3), text, "=r,r,r,r", vals,
                            side_effects=False)
        return KValue(u32, [r])

    register(what, infer, lower)


_u32_asm("byte_perm", "prmt.b32 $0, $1, $2, $3;")
_u32_asm("funnelshift_l", "shf.l.wrap.b32 $0, $1, $2, $3;")
_u32_asm("funnelshift_r", "shf.r.wrap.b32 $0, $1, $2, $3;")


def _bitcast_infer(call):
    if len(call.arg_types) != 2 or call.keywords:
        raise TypeError("bits.bitcast(x, type) takes a value and a scalar type")
    src = materialize(call.arg_types[0])
    target = call.arg_types[1]
    target = target.obj if isinstance(target, ObjectType) else None
    if not isinstance(target, ScalarType):
        try:
            target = scalar_from_dtype(target)
        except TypeError:
            raise TypeError("bits.bitcast: the second argument must be a cupric scalar type "
                            "(f32, i32, u64, ...)") from None
    if not isinstance(src, ScalarType) or src.kind == "b" or target.kind == "b":
        raise TypeError(f"bits.bitcast works on numbers, got {src!r} to {target!r}")
    if src.bits != target.bits:
        raise TypeError(f"bits.bitcast: {src!r} and {target!r} differ in width")
    return target


def _bitcast_lower(cg, call, args):
    t = call.result_type
    src = materialize(args[0].type)
    v = cg.convert(args[0], src, call.node).value
    lt = scalar_lltype(t)
    return KValue(t, [v if v.type == lt else cg.b.cast("bitcast", v, lt)])


register("bits.bitcast", _bitcast_infer, _bitcast_lower)
