"""Lowering of `cupric.device.indices`: PTX special registers (%tid, %ctaid, %ntid,
%nctaid, %warpsize, %laneid) through `llvm.nvvm.read.ptx.sreg.*`, the global-index
helpers `grid(n)` / `gridsize(n)` in 64-bit arithmetic (no overflow past 2^31 threads),
and `syncthreads` (`llvm.nvvm.barrier0`, i.e. bar.sync 0)."""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import NONE, TupleType
from cupric.types import i32, i64

_SREG = {"threadIdx": "tid", "blockIdx": "ctaid", "blockDim": "ntid", "gridDim": "nctaid"}


def read_sreg(cg, register_name: str):
    """`i32` value of PTX special register `%register_name` (e.g. "tid.x")."""
    return cg.mcg.call_external(cg.b, f"llvm.nvvm.read.ptx.sreg.{register_name}", ll.i32, [])


def _no_args(result):
    def infer(call):
        if call.arg_types or call.keywords:
            raise TypeError("takes no arguments")
        return result
    return infer


def _sreg_rule(name: str, register_name: str) -> None:
    def lower(cg, call, args):
        return KValue(i32, [read_sreg(cg, register_name)])
    register(name, _no_args(i32), lower)


for _dim, _reg in _SREG.items():
    for _axis in "xyz":
        _sreg_rule(f"{_dim}.{_axis}", f"{_reg}.{_axis}")
_sreg_rule("warpsize", "warpsize")
_sreg_rule("laneid", "laneid")


def _ndim_infer(call):
    consts = call.consts
    if len(call.arg_types) != 1 or call.keywords or consts[0] not in (1, 2, 3):
        raise TypeError("takes one constant argument, 1, 2 or 3 (the number of axes)")
    n = consts[0]
    return i64 if n == 1 else TupleType([i64] * n)


def _wide(cg, reg: str):
    return cg.b.cast("zext", read_sreg(cg, reg), ll.i64)


def _grid_lower(cg, call, args):
    consts, result_type = call.consts, call.result_type
    vals = []
    for axis in "xyz"[:consts[0]]:
        block = _wide(cg, f"ctaid.{axis}")
        size = _wide(cg, f"ntid.{axis}")
        thread = _wide(cg, f"tid.{axis}")
        vals.append(cg.b.binop("add", cg.b.binop("mul", block, size), thread))
    return KValue(result_type, vals)


def _gridsize_lower(cg, call, args):
    consts, result_type = call.consts, call.result_type
    vals = []
    for axis in "xyz"[:consts[0]]:
        vals.append(cg.b.binop("mul", _wide(cg, f"ntid.{axis}"), _wide(cg, f"nctaid.{axis}")))
    return KValue(result_type, vals)


register("grid", _ndim_infer, _grid_lower)
register("gridsize", _ndim_infer, _gridsize_lower)


def _sync_lower(cg, call, args):
    cg.mcg.module.declare("llvm.nvvm.barrier0", ll.FunctionType(ll.void, []),
                          attributes="convergent nounwind")
    cg.b.call("llvm.nvvm.barrier0", ll.FunctionType(ll.void, []), [])
    return KValue(NONE, [])


register("syncthreads", _no_args(NONE), _sync_lower)
