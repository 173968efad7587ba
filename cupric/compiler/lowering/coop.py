"""Lowering of `cupric.device.coop`: the grid-wide barrier `grid_sync` and the
grid-stride loop `for i in grid_stride(n)`.

`grid_sync` is a barrier in global memory: one 32-bit counter per module. Thread 0 of
every block adds 1, except block 0 which adds 0x80000000 - (blocks - 1), so the top bit
flips exactly when the last block arrives and the low bits return to their old value
(the counter is ready for the next barrier and the next launch with no reset). Each
block's thread 0 then spins with acquire loads until it sees the flip; block barriers
before and after spread the result over the block. All blocks must be resident at once,
which only a cooperative launch (or a grid no larger than the device holds) guarantees.
"""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.module import GlobalVariable, symbol
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.lowering.indices import read_sreg
from cupric.compiler.lowering.memory import module_state
from cupric.compiler.lowering.registry import register, register_iterable
from cupric.compiler.lowering.sync import convergent_call
from cupric.compiler.typing.ktypes import NONE, ObjectType, WeakType
from cupric.types import ScalarType, i64

__all__ = ["type_grid_stride"]


def _barrier_counter(cg) -> Value:
    def make():
        name = cg.mcg.module.unique_symbol("cupric_grid_barrier")
        cg.mcg.module.add_global(GlobalVariable(name, ll.i32, ll.GLOBAL, "0", "internal", 4))
        return name
    name = module_state(cg, "grid_barrier", make)
    return Value(ll.PointerType(ll.i32, ll.GLOBAL), symbol(name))


def _grid_sync_infer(call):
    if call.arg_types or call.keywords:
        raise TypeError("grid_sync() takes no arguments")
    return NONE


def _grid_sync_lower(cg, call, args):
    b = cg.b
    barrier = "llvm.nvvm.barrier0"
    convergent_call(cg, barrier, ll.void, [])
    zero = const_int(ll.i32, 0)
    leader = zero
    for axis in "xyz":
        leader = b.binop("or", leader, read_sreg(cg, f"tid.{axis}"))
    arrive = cg.fn.append_block("gridsync.arrive")
    wait = cg.fn.append_block("gridsync.wait")
    done = cg.fn.append_block("gridsync.done")
    b.cbranch(b.icmp("eq", leader, zero), arrive, done)
    b.position_at_end(arrive)
    blocks = read_sreg(cg, "nctaid.x")
    for axis in "yz":
        blocks = b.binop("mul", blocks, read_sreg(cg, f"nctaid.{axis}"))
    first = zero
    for axis in "xyz":
        first = b.binop("or", first, read_sreg(cg, f"ctaid.{axis}"))
    add = b.select(b.icmp("eq", first, zero),
                   b.binop("sub", const_int(ll.i32, 0x80000000),
                           b.binop("sub", blocks, const_int(ll.i32, 1))),
                   const_int(ll.i32, 1))
    counter = b.cast("addrspacecast", _barrier_counter(cg), ll.PointerType(ll.i32))
    old = b.inline_asm(ll.FunctionType(ll.i32, [counter.type, ll.i32]),
                       "atom.add.release.gpu.u32 $0, [$1], $2;", "=r,l,r,~{memory}",
                       [counter, add])
    b.br(wait)
    b.position_at_end(wait)
    now = b.inline_asm(ll.FunctionType(ll.i32, [counter.type]),
                       "ld.acquire.gpu.u32 $0, [$1];", "=r,l,~{memory}", [counter])
    flipped = b.binop("and", b.binop("xor", old, now), const_int(ll.i32, 0x80000000))
    b.cbranch(b.icmp("ne", flipped, zero), done, wait)
    b.position_at_end(done)
    convergent_call(cg, barrier, ll.void, [])
    return KValue(NONE, [])


register("grid_sync", _grid_sync_infer, _grid_sync_lower)


register_iterable("grid_stride", "for i in grid_stride(n): ...")


def type_grid_stride(typer, s: ast.For) -> bool:
    """Type `for i in grid_stride(n):` (the typer's hook); False when the loop iterates
    over something else."""
    from cupric.device.coop import grid_stride
    it = s.iter
    ft = typer.expr(it.func)
    if not (isinstance(ft, ObjectType) and ft.obj is grid_stride):
        return False
    at = typer.expr(it.args[0])
    from cupric.compiler.typing.infer import UNKNOWN
    if at is not UNKNOWN and not ((isinstance(at, WeakType) and at.kind == "int") or (
            isinstance(at, ScalarType) and at.is_integer and at.kind in "iu"
            and not (at.kind == "u" and at.bits == 64))):
        raise typer.error(it.args[0], f"grid_stride(n): n must be an integer (not u64), got "
                          f"{at!r}")
    typer.fn.types[it] = i64
    typer.fn.targets[it] = ("grid_stride", _stride_start_step)
    typer._assign(s.target, i64, None)
    typer.loop_depth += 1
    typer._block(s.body)
    typer.loop_depth -= 1
    return True


def _stride_start_step(cg, t):
    """(grid(1), gridsize(1)) as i64 values: the first index and the step."""
    b = cg.b

    def wide(reg):
        return b.cast("zext", read_sreg(cg, reg), ll.i64)
    start = b.binop("add", b.binop("mul", wide("ctaid.x"), wide("ntid.x")), wide("tid.x"))
    step = b.binop("mul", wide("ntid.x"), wide("nctaid.x"))
    return start, step
