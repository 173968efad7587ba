"""Lowering of the sm_90 device API: `cupric.device.wgmma` (warpgroup MMA, descriptors,
setmaxnreg), `mbarrier`, `tma` (cp.async.bulk.tensor) and `cluster` (special registers,
barrier.cluster, mapa) as inline PTX, the way CUDA C++ headers reach them.

The NVVM IR a kernel lowers to does not know its target; each instruction that needs
sm_90 (or sm_90a: wgmma, setmaxnreg) carries a `/* cupric:sm_90 */` marker in its PTX
text, and `check_target` (called by the backend before libNVVM) refuses an older target
with a CompileError that names it, and builds sm_90 kernels that need sm_90a for sm_90a.
"""

from __future__ import annotations

import dataclasses
import re

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_float, const_int
from cupric.compiler.lowering.mma import shared_address
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import NONE, TupleType, WeakType
from cupric.device.tma import COORDINATE_BYTES, SHARED_ALIGNMENT
from cupric.device.wgmma import N_SIZES, SWIZZLE_MODES, TYPES
from cupric.types import ArrayType, ScalarType, bool_, f32, i32, u32, u64

__all__ = ["check_target", "MARK_SM90", "MARK_SM90A"]

MARK_SM90 = "/* cupric:sm_90 */ "
MARK_SM90A = "/* cupric:sm_90a */ "
_MARK = re.compile(r"cupric:sm_90(a?) \*/ ([A-Za-z_.:]+)")


def check_target(modules, options):
    """`options`, or the same with arch sm_90a when the IR needs it and the arch is sm_90;
    `CompileError` when the IR holds sm_90 instructions and the target is older.

    Parameters
    ----------
    modules : list of str or bytes
        The NVVM IR modules about to be compiled.
    options : CompileOptions
        Resolved options (arch set).
    """
    from cupric.compiler.errors import CompileError
    from cupric.compiler.options import arch_number

    needs_a, what = False, None
    for m in modules:
        text = m.decode("latin-1") if isinstance(m, (bytes, bytearray)) else m
        for found in _MARK.finditer(text):
            what = what or found.group(2)
            if found.group(1):
                needs_a, what = True, found.group(2)
                break
    if what is None:
        return options
    arch = options.arch
    if arch_number(arch) < 90:
        raise CompileError(
            f"{what} needs {'sm_90a' if needs_a else 'sm_90'} (Hopper); the target is "
            f"{arch}. Compile for arch='sm_90a' (an H100 or H200), or keep this kernel off "
            f"older GPUs")
    if needs_a and not arch.endswith("a"):
        if arch_number(arch) != 90:
            raise CompileError(f"{what} exists on sm_90a only (arch-specific); the target "
                               f"is {arch}")
        return dataclasses.replace(options, arch="sm_90a")
    return options


# -- helpers -----------------------------------------------------------------------------

def _is_int(t) -> bool:
    return (isinstance(t, WeakType) and t.kind == "int") or (
        isinstance(t, ScalarType) and t.is_integer) or t == bool_


def _int_arg(call, k: int, what: str, name: str) -> None:
    if k >= len(call.arg_types) or not _is_int(call.arg_types[k]):
        got = call.arg_types[k] if k < len(call.arg_types) else "nothing"
        raise TypeError(f"{what}: {name} must be an integer, got {got!r}")


def _const(call, k: int, what: str, name: str, allowed) -> int:
    value = call.consts[k] if k < len(call.consts) else None
    if value not in allowed:
        raise TypeError(f"{what}: {name} must be a constant in {sorted(allowed)}, got "
                        f"{value!r}")
    return int(value)


def _scalar(cg, kv: KValue, to, node):
    if isinstance(kv.type, WeakType):
        kv = cg.convert(kv, kv.type.default, node)
    return cg.convert(kv, to, node).value


def _shared_array(call, k: int, what: str, itemsize=None) -> ArrayType:
    at = call.arg_types[k] if k < len(call.arg_types) else None
    if not isinstance(at, ArrayType) or getattr(at, "space", ll.GLOBAL) != ll.SHARED:
        raise TypeError(f"{what}: argument {k + 1} must be a shared-memory array (make one "
                        f"with cupric.device.shared.array or shared.dynamic), got {at!r}")
    if itemsize is not None and at.dtype.itemsize != itemsize:
        raise TypeError(f"{what}: the barrier array must hold 8-byte elements (u64), got "
                        f"{at.dtype!r}")
    it = call.arg_types[k + 1] if k + 1 < len(call.arg_types) else None
    items = it.elements if isinstance(it, TupleType) else (it,)
    if len(items) != at.ndim or not all(_is_int(t) for t in items):
        raise TypeError(f"{what}: a {at.ndim}-D shared array needs {at.ndim} integer "
                        f"indices, got {it!r}")
    return at


def _global_array(call, k: int, what: str) -> None:
    at = call.arg_types[k] if k < len(call.arg_types) else None
    if not isinstance(at, ArrayType) or getattr(at, "space", ll.GLOBAL) != ll.GLOBAL \
            or at.dtype.itemsize != 8:
        raise TypeError(f"{what}: the tensor map must be the kernel's array argument of "
                        f"16 x u64 (TensorMap.array), got {at!r}")


def _asm(cg, text: str, results: list, constraints: list, args: list):
    """Inline PTX with side effects and a memory clobber, returning `results`."""
    ret = ll.void if not results else results[0] if len(results) == 1 else \
        ll.StructType(results)
    cons = ",".join(constraints + ["~{memory}"])
    value = cg.b.inline_asm(ll.FunctionType(ret, [a.type for a in args]), text, cons, args,
                            side_effects=True)
    if len(results) <= 1:
        return [value] if results else []
    return [cg.b.extractvalue(value, k) for k in range(len(results))]


def _none(call):
    return KValue(call.result_type, [])


def _no_args(what: str, result=NONE):
    def infer(call):
        if call.arg_types or call.keywords:
            raise TypeError(f"{what}() takes no arguments")
        return result
    return infer


def _fixed(name: str, text: str) -> None:
    """An intrinsic with no arguments that is one PTX statement."""
    register(name, _no_args(name), lambda cg, call, args: (_asm(cg, text, [], [], []),
                                                           _none(call))[1])


def _regs(start: int, count: int) -> str:
    return "{" + ", ".join(f"${start + k}" for k in range(count)) + "}"


# -- wgmma ---------------------------------------------------------------------------------

def _acc_type(n: int) -> TupleType:
    return TupleType([f32] * (n // 2))


def _check_acc(call, k: int, n: int, what: str) -> None:
    t = call.arg_types[k]
    if not isinstance(t, TupleType) or len(t.elements) != n // 2 or not all(
            e == f32 or (isinstance(e, WeakType) and e.kind in ("int", "float"))
            for e in t.elements):
        raise TypeError(f"{what}: acc must be a tuple of {n // 2} f32 (wgmma.accumulator("
                        f"{n})), got {t!r}")


def _acc_values(cg, kv: KValue, n: int, node) -> list:
    return cg.convert(kv, _acc_type(n), node).vals


def _registers_a(call) -> bool:
    """Whether A comes as a register fragment (a tuple of 4 u32) rather than a descriptor;
    a tuple of anything else is a TypeError."""
    t = call.arg_types[1]
    if not isinstance(t, TupleType):
        return False
    if len(t.elements) != 4 or not all(_is_int(e) and (isinstance(e, WeakType) or
                                                       e.bits == 32) for e in t.elements):
        raise TypeError(f"A in registers is a tuple of 4 u32 (pairs of 16-bit values, the "
                        f"mma.m16n8k16 A fragment of the warp's 16 rows), got {t!r}")
    return True


def _mma_rule(n: int, kind: str) -> None:
    what = f"wgmma.m64n{n}k16_{kind}"
    h = n // 2

    def infer(call):
        if len(call.arg_types) not in (3, 4) or set(call.keywords) - {
                "trans_a", "trans_b", "scale_d"}:
            raise TypeError(f"{what}(acc, a_desc, b_desc, scale_d=1, trans_a=0, trans_b=0)")
        if len(call.arg_types) == 4 and "scale_d" in call.keywords:
            raise TypeError(f"{what}: scale_d given twice")
        _check_acc(call, 0, n, what)
        if _registers_a(call):
            if call.keyword("trans_a", 0, (0, 1, False, True)):
                raise TypeError(f"{what}: A in registers cannot be transposed (trans_a)")
        else:
            _int_arg(call, 1, what, "a (a u64 from wgmma.descriptor, or 4 u32 registers)")
        _int_arg(call, 2, what, "b_desc (a u64 from wgmma.descriptor)")
        if len(call.arg_types) == 4:
            _int_arg(call, 3, what, "scale_d")
        call.keyword("trans_a", 0, (0, 1, False, True))
        call.keyword("trans_b", 0, (0, 1, False, True))
        call.keyword("scale_d", 1, (0, 1, False, True))
        return _acc_type(n)

    def lower(cg, call, args):
        acc = _acc_values(cg, args[0], n, call.node)
        db = _scalar(cg, args[2], u64, call.node)
        if len(args) == 4:
            scale = _scalar(cg, args[3], i32, call.node)
        else:
            scale = const_int(ll.i32, int(call.keyword("scale_d", 1)))
        ta = int(call.keyword("trans_a", 0))
        tb = int(call.keyword("trans_b", 0))
        head = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} {_regs(0, h)}"
        if _registers_a(call):
            # A from registers: its fragment (4 x u32) replaces the descriptor, and the
            # instruction has no trans-a.
            regs = cg.convert(args[1], TupleType([u32] * 4), call.node).vals
            text = (f"{MARK_SM90A}{{ .reg .pred p; setp.ne.b32 p, ${h + 5}, 0; {head}, "
                    f"{_regs(h, 4)}, ${h + 4}, p, 1, 1, {tb}; }}")
            cons = ["=f"] * h + ["r"] * 4 + ["l", "r"] + [str(k) for k in range(h)]
            out = _asm(cg, text, [ll.float] * h, cons, regs + [db, scale] + acc)
            return KValue(call.result_type, out)
        da = _scalar(cg, args[1], u64, call.node)
        text = (f"{MARK_SM90A}{{ .reg .pred p; setp.ne.b32 p, ${h + 2}, 0; {head}, "
                f"${h}, ${h + 1}, p, 1, 1, {ta}, {tb}; }}")
        cons = ["=f"] * h + ["l", "l", "r"] + [str(k) for k in range(h)]
        out = _asm(cg, text, [ll.float] * h, cons, [da, db, scale] + acc)
        return KValue(call.result_type, out)

    register(what, infer, lower)


for _n in N_SIZES:
    for _kind in TYPES:
        _mma_rule(_n, _kind)


def _descriptor_infer(call):
    what = "wgmma.descriptor"
    if len(call.arg_types) != 2 or set(call.keywords) - {"swizzle", "leading", "stride"}:
        raise TypeError(f"{what}(smem, index, swizzle=128, leading=16, stride=1024): the "
                        f"layout arguments are keywords")
    _shared_array(call, 0, what)
    call.keyword("swizzle", 128, tuple(SWIZZLE_MODES))
    for name, default in (("leading", 16), ("stride", 1024)):
        v = call.keyword(name, default)
        if not isinstance(v, int) or v % 16 or not 0 <= v < 1 << 18:
            raise TypeError(f"{what}: {name}= must be a constant multiple of 16 below 2^18 "
                            f"(bytes), got {v!r}")
    return u64


def _descriptor_lower(cg, call, args):
    b = cg.b
    addr = shared_address(cg, args[0], args[1], call.node, "wgmma.descriptor")
    swizzle = call.keyword("swizzle", 128)
    fixed = (((call.keyword("leading", 16) >> 4) & 0x3FFF) << 16) | \
        (((call.keyword("stride", 1024) >> 4) & 0x3FFF) << 32) | (SWIZZLE_MODES[swizzle] << 62)
    start = b.binop("lshr", b.binop("and", addr, const_int(ll.i32, 0x3FFFF)),
                    const_int(ll.i32, 4))
    wide = b.cast("zext", start, ll.i64)
    fixed_signed = fixed - (1 << 64) if fixed >= 1 << 63 else fixed
    return KValue(u64, [b.binop("or", wide, const_int(ll.i64, fixed_signed))])


register("wgmma.descriptor", _descriptor_infer, _descriptor_lower)


def _accumulator_infer(call):
    if len(call.arg_types) != 1 or call.keywords or call.consts[0] not in N_SIZES:
        raise TypeError(f"wgmma.accumulator(n) takes a constant n in {N_SIZES}")
    return _acc_type(call.consts[0])


def _accumulator_lower(cg, call, args):
    zero = const_float(ll.float, 0.0)
    return KValue(call.result_type, [zero] * len(call.result_type.elements))


register("wgmma.accumulator", _accumulator_infer, _accumulator_lower)

_fixed("wgmma.fence", MARK_SM90A + "wgmma.fence.sync.aligned;")
_fixed("wgmma.commit", MARK_SM90A + "wgmma.commit_group.sync.aligned;")


def _wait_infer(call):
    what = "wgmma.wait"
    if len(call.arg_types) not in (1, 2) or call.keywords:
        raise TypeError(f"{what}(n, acc=None) takes a constant n and an accumulator")
    _const(call, 0, what, "n", range(8))
    if len(call.arg_types) == 1:
        return NONE
    t = call.arg_types[1]
    if not isinstance(t, TupleType) or not t.elements or not all(
            e == f32 or isinstance(e, WeakType) for e in t.elements):
        raise TypeError(f"{what}: acc must be a tuple of f32, got {t!r}")
    return TupleType([f32] * len(t.elements))


def _wait_lower(cg, call, args):
    n = call.consts[0]
    text = f"{MARK_SM90A}wgmma.wait_group.sync.aligned {n};"
    if len(args) == 1:
        _asm(cg, text, [], [], [])
        return _none(call)
    h = len(call.result_type.elements)
    acc = cg.convert(args[1], call.result_type, call.node).vals
    # The accumulator passes through the wait's own statement, so that no read of it
    # can be scheduled above the wait.
    out = _asm(cg, text, [ll.float] * h, ["=f"] * h + [str(k) for k in range(h)], acc)
    return KValue(call.result_type, out)


register("wgmma.wait", _wait_infer, _wait_lower)


def _registers_rule(name: str, direction: str) -> None:
    def infer(call):
        if len(call.arg_types) != 1 or call.keywords:
            raise TypeError(f"{name}(n) takes one constant")
        _const(call, 0, name, "n", range(24, 257, 8))
        return NONE

    def lower(cg, call, args):
        _asm(cg, f"{MARK_SM90A}setmaxnreg.{direction}.sync.aligned.u32 {call.consts[0]};",
             [], [], [])
        return _none(call)

    register(name, infer, lower)


_registers_rule("wgmma.raise_registers", "inc")
_registers_rule("wgmma.lower_registers", "dec")


# -- mbarrier ------------------------------------------------------------------------------

def _bar_rule(name: str, extra: tuple, text: str, result=NONE, out=None) -> None:
    """An mbarrier operation on bar[index] (the first two arguments) with `extra` integer
    arguments; `text` refers to the address as $A and the extras as $1, $2..."""

    def infer(call):
        count = 2 + len(extra)
        if len(call.arg_types) != count or call.keywords:
            raise TypeError(f"{name}(bar, index{''.join(', ' + e for e in extra)})")
        _shared_array(call, 0, name, itemsize=8)
        for k, e in enumerate(extra):
            _int_arg(call, 2 + k, name, e)
        return result

    def lower(cg, call, args):
        addr = shared_address(cg, args[0], args[1], call.node, name)
        values = [_scalar(cg, a, u32, call.node) for a in args[2:]]
        offset = 1 if out else 0
        body = text.replace("$A", f"${offset}")
        for k in range(len(values)):
            body = body.replace(f"$E{k}", f"${offset + 1 + k}")
        cons = ([f"={out}"] if out else []) + ["r"] * (1 + len(values))
        res = _asm(cg, MARK_SM90 + body, [ll.i32] if out else [], cons, [addr] + values)
        if result == bool_:
            return KValue(bool_, [cg.b.icmp("ne", res[0], const_int(ll.i32, 0))])
        return _none(call)

    register(name, infer, lower)


_bar_rule("mbarrier.init", ("count",), "mbarrier.init.shared::cta.b64 [$A], $E0;")
_bar_rule("mbarrier.arrive", (), "mbarrier.arrive.shared::cta.b64 _, [$A];")
_bar_rule("mbarrier.arrive_expect_tx", ("nbytes",),
          "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$A], $E0;")
_bar_rule("mbarrier.arrive_cluster", ("rank",),
          "{ .reg .b32 remote; mapa.shared::cluster.u32 remote, $A, $E0; "
          "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote]; }")
_bar_rule("mbarrier.try_wait", ("parity",),
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$A], $E0; "
          "selp.u32 $0, 1, 0, p; }", result=bool_, out="r")
_bar_rule("mbarrier.wait", ("parity",),
          "{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, [$A], $E0; "
          "@!p bra WAIT; }")
_fixed("mbarrier.fence_init", MARK_SM90 + "fence.mbarrier_init.release.cluster;")


# -- tma -----------------------------------------------------------------------------------

def _load_infer(call):
    what = "tma.load_2d"
    if len(call.arg_types) != 7 or call.keywords:
        raise TypeError(f"{what}(dst, dst_index, tensor_map, x, y, bar, bar_index)")
    _shared_array(call, 0, what)
    _global_array(call, 2, what)
    _int_arg(call, 3, what, "x")
    _int_arg(call, 4, what, "y")
    _shared_array(call, 5, what, itemsize=8)
    return NONE


def _guard(cg, call, bad, what: str, text: str, detail: str, values: list) -> None:
    """Stop the kernel where `bad` (i1) holds: the error record, a printf of `detail` (a
    format taking `values` and the thread's coordinates) and __assertfail with `text`."""
    from cupric.compiler.device_errors import KIND_ASSERT, emit_record
    from cupric.compiler.lowering.checks import _coordinates
    from cupric.compiler.lowering.io import assert_fail, printf
    b = cg.b
    fail = cg.fn.append_block("tma.check.fail")
    ok = cg.fn.append_block("tma.check.ok")
    b.cbranch(bad, fail, ok)
    b.position_at_end(fail)
    text = f"{what}: {text}; the copy would fault"
    emit_record(cg, KIND_ASSERT, call.node, text)
    line = getattr(call.node, "lineno", cg.src.tree.lineno)
    printf(cg, f"{cg.src.filename}:{line}: {what}: {detail} (block (%u, %u, %u), thread "
           f"(%u, %u, %u))\n", values + _coordinates(cg))
    assert_fail(cg, text, call.node)
    b.unreachable()
    b.position_at_end(ok)


def _check_copy(cg, call, x, y, address, smem: int, what: str, store: bool) -> None:
    """With bounds checking on, the copy engine's rules (`cupric.device.tma`) tested before
    the copy: x times the element size of the shared array argument `smem` a multiple of
    16 bytes, a store's x and y not negative, the shared `address` on 128 bytes. A broken
    rule stops the kernel with a DeviceAssertionError naming the line; the copy itself
    would fail the launch with an illegal instruction that names nothing."""
    if not cg.mcg.bounds_check:
        return
    b = cg.b
    zero = const_int(ll.i32, 0)
    step = COORDINATE_BYTES // call.arg_types[smem].dtype.itemsize
    if step > 1:
        bad = b.icmp("ne", b.binop("and", x, const_int(ll.i32, step - 1)), zero)
        _guard(cg, call, bad, what, f"x is not a multiple of {step} ({COORDINATE_BYTES} "
               f"bytes of the shared array's {COORDINATE_BYTES // step}-byte elements)",
               f"x = %d is not a multiple of {step}", [x])
    if store:
        bad = b.icmp("slt", b.binop("or", x, y), zero)  # either sign bit set
        _guard(cg, call, bad, what, "a store at a negative coordinate",
               "a store at (%d, %d): TMA stores fault at negative coordinates", [x, y])
    bad = b.icmp("ne", b.binop("and", address, const_int(ll.i32, SHARED_ALIGNMENT - 1)),
                 zero)
    _guard(cg, call, bad, what, f"the box's shared address is not a multiple of "
           f"{SHARED_ALIGNMENT} bytes", f"shared address %u is not a multiple of "
           f"{SHARED_ALIGNMENT}", [address])


def _load_lower(cg, call, args):
    dst = shared_address(cg, args[0], args[1], call.node, "tma.load_2d")
    tmap = cg.b.cast("ptrtoint", args[2].data, ll.i64)
    x = _scalar(cg, args[3], i32, call.node)
    y = _scalar(cg, args[4], i32, call.node)
    _check_copy(cg, call, x, y, dst, 0, "tma.load_2d", store=False)
    bar = shared_address(cg, args[5], args[6], call.node, "tma.load_2d")
    _asm(cg, MARK_SM90 + "cp.async.bulk.tensor.2d.shared::cluster.global.tile."
         "mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], [$4];", [],
         ["r", "l", "r", "r", "r"], [dst, tmap, x, y, bar])
    return _none(call)


register("tma.load_2d", _load_infer, _load_lower, writes=(0,))


def _store_infer(call):
    what = "tma.store_2d"
    if len(call.arg_types) != 5 or call.keywords:
        raise TypeError(f"{what}(tensor_map, x, y, src, src_index)")
    _global_array(call, 0, what)
    _int_arg(call, 1, what, "x")
    _int_arg(call, 2, what, "y")
    _shared_array(call, 3, what)
    return NONE


def _store_lower(cg, call, args):
    tmap = cg.b.cast("ptrtoint", args[0].data, ll.i64)
    x = _scalar(cg, args[1], i32, call.node)
    y = _scalar(cg, args[2], i32, call.node)
    src = shared_address(cg, args[3], args[4], call.node, "tma.store_2d")
    _check_copy(cg, call, x, y, src, 3, "tma.store_2d", store=True)
    _asm(cg, MARK_SM90 + "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group "
         "[$0, {$1, $2}], [$3];", [], ["l", "r", "r", "r"], [tmap, x, y, src])
    return _none(call)


register("tma.store_2d", _store_infer, _store_lower)
_fixed("tma.commit", MARK_SM90 + "cp.async.bulk.commit_group;")
_fixed("tma.fence_proxy_async", MARK_SM90 + "fence.proxy.async.shared::cta;")


def _tma_wait_infer(call):
    if len(call.arg_types) != 1 or call.keywords:
        raise TypeError("tma.wait(n) takes one constant")
    _const(call, 0, "tma.wait", "n", range(8))
    return NONE


register("tma.wait", _tma_wait_infer, lambda cg, call, args: (_asm(
    cg, f"{MARK_SM90}cp.async.bulk.wait_group.read {call.consts[0]};", [], [], []),
    _none(call))[1])


def _map_rule(name: str, text: str) -> None:
    """An operation on a tensor map alone; `text` names its address $0."""

    def infer(call):
        if len(call.arg_types) != 1 or call.keywords:
            raise TypeError(f"{name}(tensor_map)")
        _global_array(call, 0, name)
        return NONE

    def lower(cg, call, args):
        tmap = cg.b.cast("ptrtoint", args[0].data, ll.i64)
        _asm(cg, MARK_SM90 + text, [], ["l"], [tmap])
        return _none(call)

    register(name, infer, lower)


_map_rule("tma.prefetch", "prefetch.tensormap [$0];")
# The host's copy wrote the map through the generic proxy; the copy engine reads it
# through the tensormap proxy.
_map_rule("tma.acquire", "fence.proxy.tensormap::generic.acquire.sys [$0], 128;")


def _address_infer(call):
    if len(call.arg_types) != 2 or call.keywords:
        raise TypeError("tma.shared_address(smem, index)")
    _shared_array(call, 0, "tma.shared_address")
    return u32


register("tma.shared_address", _address_infer, lambda cg, call, args: KValue(
    u32, [shared_address(cg, args[0], args[1], call.node, "tma.shared_address")]))


# -- cluster -------------------------------------------------------------------------------

def _sreg(name: str, register_name: str) -> None:
    def lower(cg, call, args):
        return KValue(i32, _asm(cg, f"{MARK_SM90}mov.u32 $0, %{register_name};", [ll.i32],
                                ["=r"], []))
    register(name, _no_args(name, i32), lower)


def _sreg3(name: str, register_name: str) -> None:
    def lower(cg, call, args):
        return KValue(call.result_type, [
            _asm(cg, f"{MARK_SM90}mov.u32 $0, %{register_name}.{axis};", [ll.i32], ["=r"],
                 [])[0] for axis in "xyz"])
    register(name, _no_args(name, TupleType([i32] * 3)), lower)


_sreg3("cluster.ctaid", "cluster_ctaid")
_sreg3("cluster.nctaid", "cluster_nctaid")
_sreg3("cluster.id", "clusterid")
_sreg3("cluster.count", "nclusterid")
_sreg("cluster.rank", "cluster_ctarank")
_sreg("cluster.size", "cluster_nctarank")
_fixed("cluster.sync", MARK_SM90 + "barrier.cluster.arrive.release.aligned; "
       "barrier.cluster.wait.acquire.aligned;")


def _map_infer(call):
    what = "cluster.map_shared"
    if len(call.arg_types) != 3 or call.keywords:
        raise TypeError(f"{what}(smem, index, rank)")
    _shared_array(call, 0, what)
    _int_arg(call, 2, what, "rank")
    return u32


def _map_lower(cg, call, args):
    addr = shared_address(cg, args[0], args[1], call.node, "cluster.map_shared")
    rank = _scalar(cg, args[2], u32, call.node)
    return KValue(u32, _asm(cg, MARK_SM90 + "mapa.shared::cluster.u32 $0, $1, $2;",
                            [ll.i32], ["=r", "r", "r"], [addr, rank]))


register("cluster.map_shared", _map_infer, _map_lower)


def _load_u32_infer(call):
    if len(call.arg_types) != 1 or call.keywords:
        raise TypeError("cluster.load_u32(address)")
    _int_arg(call, 0, "cluster.load_u32", "address")
    return u32


register("cluster.load_u32", _load_u32_infer, lambda cg, call, args: KValue(u32, _asm(
    cg, MARK_SM90 + "ld.shared::cluster.u32 $0, [$1];", [ll.i32], ["=r", "r"],
    [_scalar(cg, args[0], u32, call.node)])))


def _store_u32_infer(call):
    if len(call.arg_types) != 2 or call.keywords:
        raise TypeError("cluster.store_u32(address, value)")
    _int_arg(call, 0, "cluster.store_u32", "address")
    _int_arg(call, 1, "cluster.store_u32", "value")
    return NONE


register("cluster.store_u32", _store_u32_infer, lambda cg, call, args: (_asm(
    cg, MARK_SM90 + "st.shared::cluster.u32 [$0], $1;", [], ["r", "r"],
    [_scalar(cg, a, u32, call.node) for a in args]), _none(call))[1])
