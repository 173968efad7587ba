"""Lowering of `cupric.device.sync`: the block barriers that also reduce a predicate
(`llvm.nvvm.barrier0.popc/and/or`, PTX bar.red), the warp barrier
(`llvm.nvvm.bar.warp.sync`), memory fences (`llvm.nvvm.membar.cta/gl/sys`) and
`nanosleep` (inline PTX; sm_70+).

Barrier and collective calls are declared `convergent` so that the optimizer never
moves them into or out of control flow (which would change which threads meet there).
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import NONE, WeakType
from cupric.types import ScalarType, i32, u32

__all__ = ["convergent_call", "FULL_MASK"]

FULL_MASK = 0xFFFFFFFF


def convergent_call(cg, name: str, ret, args, attributes: str = "convergent nounwind"):
    """Declare `@name` with `attributes` (convergent by default) and call it."""
    ftype = ll.FunctionType(ret, [a.type for a in args])
    cg.mcg.module.declare(name, ftype, attributes=attributes)
    return cg.b.call(name, ftype, list(args))


def _predicate(call, what: str):
    if len(call.arg_types) != 1 or call.keywords:
        raise TypeError(f"{what}(pred) takes one bool or number")
    t = call.arg_types[0]
    if not isinstance(t, (ScalarType, WeakType)):
        raise TypeError(f"{what}(pred): pred must be a bool or a number, got {t!r}")


def predicate_i32(cg, kv) -> object:
    """0 or 1 as an i32 from any scalar (Python truth)."""
    if isinstance(kv.type, WeakType):
        kv = cg.convert(kv, kv.type.default)
    return cg.b.cast("zext", cg.truth(kv), ll.i32)


def _bar_red(op: str):
    name = f"syncthreads_{op}"

    def infer(call):
        _predicate(call, name)
        return i32

    def lower(cg, call, args):
        intrinsic = {"count": "popc", "and": "and", "or": "or"}[op]
        r = convergent_call(cg, f"llvm.nvvm.barrier0.{intrinsic}", ll.i32,
                            [predicate_i32(cg, args[0])])
        return KValue(i32, [r])

    register(name, infer, lower)


for _op in ("count", "and", "or"):
    _bar_red(_op)


def mask_value(cg, call, args, index: int = 0):
    """The u32 warp mask argument `index` (or keyword `mask`, default every lane)."""
    if index < len(args):
        kv = args[index]
        if isinstance(kv.type, WeakType):
            value = call.consts[index]
            return const_int(ll.i32, value & FULL_MASK)
        return cg.convert(kv, u32, call.node).value
    return const_int(ll.i32, call.keywords.get("mask", FULL_MASK) & FULL_MASK)


def check_mask(call, index: int, what: str) -> None:
    if index < len(call.arg_types):
        t = call.arg_types[index]
        if isinstance(t, WeakType):
            value = call.consts[index]
            if t.kind != "int" or value is None or not 0 <= value <= FULL_MASK:
                raise TypeError(f"{what}: mask must be an integer in 0..0xFFFFFFFF")
        elif not (isinstance(t, ScalarType) and t.is_integer):
            raise TypeError(f"{what}: mask must be an integer, got {t!r}")


def _syncwarp_infer(call):
    if len(call.arg_types) > 1 or set(call.keywords) - {"mask"}:
        raise TypeError("syncwarp(mask=FULL_MASK) takes one optional mask")
    check_mask(call, 0, "syncwarp")
    return NONE


def _syncwarp_lower(cg, call, args):
    convergent_call(cg, "llvm.nvvm.bar.warp.sync", ll.void, [mask_value(cg, call, args)])
    return KValue(NONE, [])


register("syncwarp", _syncwarp_infer, _syncwarp_lower)


def _no_args(what):
    def infer(call):
        if call.arg_types or call.keywords:
            raise TypeError(f"{what}() takes no arguments")
        return NONE
    return infer


def _fence(name: str, scope: str) -> None:
    def lower(cg, call, args):
        convergent_call(cg, f"llvm.nvvm.membar.{scope}", ll.void, [], attributes="nounwind")
        return KValue(NONE, [])
    register(name, _no_args(name), lower)


_fence("threadfence_block", "cta")
_fence("threadfence", "gl")
_fence("threadfence_system", "sys")


def _nanosleep_infer(call):
    if len(call.arg_types) != 1 or call.keywords:
        raise TypeError("nanosleep(ns) takes one integer")
    t = call.arg_types[0]
    if not ((isinstance(t, WeakType) and t.kind == "int")
            or (isinstance(t, ScalarType) and t.is_integer)):
        raise TypeError(f"nanosleep(ns): ns must be an integer, got {t!r}")
    return NONE


def _nanosleep_lower(cg, call, args):
    ns = cg.convert(args[0], u32, call.node).value
    cg.b.inline_asm(ll.FunctionType(ll.void, [ll.i32]), "nanosleep.u32 $0;", "r", [ns])
    return KValue(NONE, [])


register("nanosleep", _nanosleep_infer, _nanosleep_lower)
