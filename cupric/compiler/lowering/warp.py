"""Lowering of `cupric.device.warp`: shuffles (`llvm.nvvm.shfl.sync.*`; 64-bit values as
two 32-bit halves, floats bit-cast), votes (`llvm.nvvm.vote.*.sync`), matches
(`llvm.nvvm.match.*.sync`), `activemask` and reductions: `redux.sync` (inline PTX) on
sm_80+ for 32-bit integers, chosen through `__nvvm_reflect("__CUDA_ARCH")` so that one
NVVM IR module serves every architecture, and a butterfly of shuffles otherwise.
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.lowering.memory import string_pointer
from cupric.compiler.lowering.registry import register
from cupric.compiler.lowering.sync import check_mask, convergent_call, mask_value
from cupric.compiler.typing.ktypes import TupleType, WeakType, materialize
from cupric.types import ScalarType, bool_, u32

__all__ = ["shuffle", "cuda_arch"]

_SHFL_MODES = {"shfl_idx": "idx", "shfl_up": "up", "shfl_down": "down", "shfl_xor": "bfly"}


def cuda_arch(cg) -> Value:
    """`__CUDA_ARCH` (e.g. 800) as an i32 that libNVVM folds for the target."""
    name = "__nvvm_reflect"
    ftype = ll.FunctionType(ll.i32, [ll.PointerType(ll.i8)])
    cg.mcg.module.declare(name, ftype, attributes="nounwind readnone")
    return cg.b.call(name, ftype, [string_pointer(cg, "__CUDA_ARCH")])


def _value_type(call, k: int, what: str) -> ScalarType:
    t = materialize(call.arg_types[k])
    if not isinstance(t, ScalarType):
        raise TypeError(f"{what}: value must be a number or bool, got {t!r}")
    return t


def _integer_arg(call, k: int, what: str, name: str) -> None:
    t = call.arg_types[k]
    if not ((isinstance(t, WeakType) and t.kind == "int")
            or (isinstance(t, ScalarType) and t.is_integer)):
        raise TypeError(f"{what}: {name} must be an integer, got {t!r}")


def _to_u32(cg, kv, node) -> Value:
    return cg.convert(kv, u32, node).value


def _shfl_i32(cg, mode: str, mask: Value, v: Value, lane: Value, clamp: Value) -> Value:
    return convergent_call(cg, f"llvm.nvvm.shfl.sync.{mode}.i32", ll.i32,
                           [mask, v, lane, clamp])


def shuffle(cg, mode: str, mask: Value, v: Value, lane: Value, width: Value) -> Value:
    """Shuffle any scalar IR value `v` (<= 64 bits) with PTX mode idx/up/down/bfly."""
    b = cg.b
    # c packs the segment mask (32 - width) << 8 and the clamp lane (0 for up, 31 else).
    seg = b.binop("shl", b.binop("sub", const_int(ll.i32, 32), width), const_int(ll.i32, 8))
    clamp = seg if mode == "up" else b.binop("or", seg, const_int(ll.i32, 0x1F))
    lt = v.type
    bits = lt.bits if hasattr(lt, "bits") else 32
    iv = b.cast("bitcast", v, ll.IntType(bits)) if isinstance(lt, ll.FloatType) else v
    if bits == 64:
        lo = b.cast("trunc", iv, ll.i32)
        hi = b.cast("trunc", b.binop("lshr", iv, const_int(ll.i64, 32)), ll.i32)
        lo = _shfl_i32(cg, mode, mask, lo, lane, clamp)
        hi = _shfl_i32(cg, mode, mask, hi, lane, clamp)
        r = b.binop("or", b.cast("zext", lo, ll.i64),
                    b.binop("shl", b.cast("zext", hi, ll.i64), const_int(ll.i64, 32)))
    elif bits == 32:
        r = _shfl_i32(cg, mode, mask, iv, lane, clamp)
    else:  # bool, 8- and 16-bit values travel in the low bits of a 32-bit register
        r = b.cast("trunc", _shfl_i32(cg, mode, mask, b.cast("zext", iv, ll.i32), lane, clamp),
                   iv.type)
    return b.cast("bitcast", r, lt) if isinstance(lt, ll.FloatType) else r


def _shfl(name: str, mode: str) -> None:
    what = f"warp.{name}"

    def infer(call):
        n = len(call.arg_types)
        if not 3 <= n <= 4 or set(call.keywords) - {"width"}:
            raise TypeError(f"{what}(mask, value, {'src_lane' if mode == 'idx' else 'delta'}"
                            f", width=32) takes three or four arguments")
        check_mask(call, 0, what)
        t = _value_type(call, 1, what)
        if t.bits > 64:
            raise TypeError(f"{what}: values of up to 64 bits")
        _integer_arg(call, 2, what, "the lane argument")
        width = call.consts[3] if n == 4 else call.keywords.get("width", 32)
        if n == 4 and width is None:
            _integer_arg(call, 3, what, "width")
        elif width not in (1, 2, 4, 8, 16, 32):
            raise TypeError(f"{what}: width must be a power of two up to 32, got {width!r}")
        return t

    def lower(cg, call, args):
        t = call.result_type
        mask = mask_value(cg, call, args)
        v = cg.convert(args[1], t, call.node).value
        lane = _to_u32(cg, args[2], call.node)
        if len(args) == 4:
            width = _to_u32(cg, args[3], call.node)
        else:
            width = const_int(ll.i32, call.keywords.get("width", 32))
        return KValue(t, [shuffle(cg, mode, mask, v, lane, width)])

    register(what, infer, lower)


for _name, _mode in _SHFL_MODES.items():
    _shfl(_name, _mode)


def _activemask_infer(call):
    if call.arg_types or call.keywords:
        raise TypeError("warp.activemask() takes no arguments")
    return u32


def _activemask_lower(cg, call, args):
    r = cg.b.inline_asm(ll.FunctionType(ll.i32, []), "activemask.b32 $0;", "=r", [])
    return KValue(u32, [r])


register("warp.activemask", _activemask_infer, _activemask_lower)


def _vote(kind: str) -> None:
    what = f"warp.{kind}"

    def infer(call):
        if len(call.arg_types) != 2 or call.keywords:
            raise TypeError(f"{what}(mask, pred) takes two arguments")
        check_mask(call, 0, what)
        if not isinstance(call.arg_types[1], (ScalarType, WeakType)):
            raise TypeError(f"{what}: pred must be a bool or a number")
        return u32 if kind == "ballot" else bool_

    def lower(cg, call, args):
        mask = mask_value(cg, call, args)
        pred = args[1]
        if isinstance(pred.type, WeakType):
            pred = cg.convert(pred, pred.type.default, call.node)
        p = cg.truth(pred)
        if kind == "ballot":
            return KValue(u32, [convergent_call(cg, "llvm.nvvm.vote.ballot.sync", ll.i32,
                                                [mask, p])])
        return KValue(bool_, [convergent_call(cg, f"llvm.nvvm.vote.{kind}.sync", ll.i1,
                                              [mask, p])])

    register(what, infer, lower)


for _kind in ("any", "all", "ballot"):
    _vote(_kind)


def _match_infer(kind: str):
    what = f"warp.match_{kind}"

    def infer(call):
        if len(call.arg_types) != 2 or call.keywords:
            raise TypeError(f"{what}(mask, value) takes two arguments")
        check_mask(call, 0, what)
        t = _value_type(call, 1, what)
        if t.bits not in (32, 64) or t.kind == "b":
            raise TypeError(f"{what}: value must be a 32- or 64-bit number, got {t!r}")
        return u32 if kind == "any" else TupleType([u32, bool_])
    return infer


def _match_lower(kind: str):
    def lower(cg, call, args):
        b = cg.b
        mask = mask_value(cg, call, args)
        t = materialize(args[1].type)
        v = cg.convert(args[1], t, call.node).value
        bits = t.bits
        if isinstance(v.type, ll.FloatType):
            v = b.cast("bitcast", v, ll.IntType(bits))
        suffix = f"i{bits}"
        if kind == "any":
            r = convergent_call(cg, f"llvm.nvvm.match.any.sync.{suffix}", ll.i32, [mask, v])
            return KValue(u32, [r])
        pair = convergent_call(cg, f"llvm.nvvm.match.all.sync.{suffix}p",
                               ll.StructType([ll.i32, ll.i1]), [mask, v])
        return KValue(call.result_type, [b.extractvalue(pair, 0), b.extractvalue(pair, 1)])
    return lower


for _kind in ("any", "all"):
    register(f"warp.match_{_kind}", _match_infer(_kind), _match_lower(_kind))


# -- reductions ----------------------------------------------------------------------------

def _combine(cg, op: str, t: ScalarType, a: Value, c: Value) -> Value:
    b = cg.b
    if op == "add":
        return b.binop("fadd" if t.kind == "f" else "add", a, c)
    if op in ("and", "or", "xor"):
        return b.binop(op, a, c)
    if t.kind == "f":
        pred = "olt" if op == "min" else "ogt"
        return b.select(b.fcmp(pred, c, a), c, a)
    pred = {("min", "i"): "slt", ("max", "i"): "sgt", ("min", "u"): "ult",
            ("max", "u"): "ugt"}[(op, t.kind)]
    return b.select(b.icmp(pred, c, a), c, a)


def _shuffle_tree(cg, op: str, t: ScalarType, mask: Value, v: Value) -> Value:
    """Reduce `v` over the lanes of `mask` with shuffles: a butterfly (5 steps) for a
    full warp; for a partial mask, a loop that reads each member lane in turn (a
    butterfly would combine with lanes outside the mask)."""
    b = cg.b
    slot = cg.entry_builder.alloca(v.type, hint="reduce")
    full = cg.fn.append_block("reduce.full")
    part = cg.fn.append_block("reduce.part")
    done = cg.fn.append_block("reduce.done")
    b.cbranch(b.icmp("eq", mask, const_int(ll.i32, -1)), full, part)
    b.position_at_end(full)
    acc = v
    width = const_int(ll.i32, 32)
    for step in (16, 8, 4, 2, 1):
        other = shuffle(cg, "bfly", mask, acc, const_int(ll.i32, step), width)
        acc = _combine(cg, op, t, acc, other)
    b.store(acc, slot)
    b.br(done)
    # Partial mask: acc = v of the lowest member, then combine every later member.
    b.position_at_end(part)
    first = cg.mcg.call_external(b, "llvm.cttz.i32", ll.i32, [mask, const_int(ll.i1, 0)])
    b.store(shuffle(cg, "idx", mask, v, first, width), slot)
    counter = cg.entry_builder.alloca(ll.i32, hint="lane")
    b.store(b.binop("add", first, const_int(ll.i32, 1)), counter)
    head = cg.fn.append_block("reduce.head")
    body = cg.fn.append_block("reduce.body")
    b.br(head)
    b.position_at_end(head)
    j = b.load(counter)
    b.cbranch(b.icmp("ult", j, const_int(ll.i32, 32)), body, done)
    b.position_at_end(body)
    other = shuffle(cg, "idx", mask, v, j, width)
    member = b.icmp("ne", b.binop("and", b.binop("lshr", mask, j), const_int(ll.i32, 1)),
                    const_int(ll.i32, 0))
    cur = b.load(slot)
    b.store(b.select(member, _combine(cg, op, t, cur, other), cur), slot)
    b.store(b.binop("add", j, const_int(ll.i32, 1)), counter)
    b.br(head)
    b.position_at_end(done)
    return b.load(slot)


def _redux_infer(op: str):
    what = f"warp.reduce_{op}"

    def infer(call):
        if len(call.arg_types) != 2 or call.keywords:
            raise TypeError(f"{what}(mask, value) takes two arguments")
        check_mask(call, 0, what)
        t = _value_type(call, 1, what)
        bitwise = op in ("and", "or", "xor")
        if t.kind == "b" or (bitwise and t.kind == "f"):
            want = "an integer" if bitwise else "a number"
            raise TypeError(f"{what}: value must be {want}, got {t!r}")
        return t
    return infer


def _redux_lower(op: str):
    def lower(cg, call, args):
        t = call.result_type
        b = cg.b
        mask = mask_value(cg, call, args)
        v = cg.convert(args[1], t, call.node).value
        if not (t.kind in "iu" and t.bits == 32):
            return KValue(t, [_shuffle_tree(cg, op, t, mask, v)])
        # 32-bit integers: redux.sync where the target has it (sm_80+), else shuffles;
        # __nvvm_reflect folds the test, so only one branch reaches ptxas.
        slot = cg.entry_builder.alloca(ll.i32, hint="redux")
        fast = cg.fn.append_block("redux.sm80")
        slow = cg.fn.append_block("redux.shfl")
        done = cg.fn.append_block("redux.done")
        b.cbranch(b.icmp("sge", cuda_arch(cg), const_int(ll.i32, 800)), fast, slow)
        b.position_at_end(fast)
        ptx_type = {"add": "u32", "and": "b32", "or": "b32", "xor": "b32"}.get(
            op, "s32" if t.kind == "i" else "u32")
        r = b.inline_asm(ll.FunctionType(ll.i32, [ll.i32, ll.i32]),
                         f"redux.sync.{op}.{ptx_type} $0, $1, $2;", "=r,r,r", [v, mask])
        b.store(r, slot)
        b.br(done)
        b.position_at_end(slow)
        b.store(_shuffle_tree(cg, op, t, mask, v), slot)
        b.br(done)
        b.position_at_end(done)
        return KValue(t, [b.load(slot)])
    return lower


for _op in ("add", "min", "max", "and", "or", "xor"):
    register(f"warp.reduce_{_op}", _redux_infer(_op), _redux_lower(_op))
