"""Lowering of `cupric.device.mma` and `cupric.device.cp_async`: tensor-core instructions
as inline PTX (`mma.sync.aligned...`, `ldmatrix`, `stmatrix`, `cp.async`), the way CUDA
C++ headers reach them. Fragments are tuples of registers in and out; shared-memory
operands are 32-bit shared-window addresses, global ones 64-bit global addresses.
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.lowering.memory import array_index
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import NONE, TupleType, WeakType
from cupric.device.mma import FRAGMENTS, SHAPES
from cupric.types import ArrayType, ScalarType, f32, i32, u32

__all__ = ["shared_address", "global_address"]


# -- operands --------------------------------------------------------------------------

def _is_int(t) -> bool:
    return (isinstance(t, WeakType) and t.kind == "int") or (
        isinstance(t, ScalarType) and t.is_integer)


def _tuple_of(call, k: int, what: str, name: str, count: int, ok, want: str) -> None:
    t = call.arg_types[k]
    if not isinstance(t, TupleType) or len(t.elements) != count or \
            not all(ok(e) for e in t.elements):
        raise TypeError(f"{what}: {name} must be a tuple of {count} {want}, got {t!r}")


def _word(t) -> bool:
    return _is_int(t) and (isinstance(t, WeakType) or t.bits == 32)


def _float32(t) -> bool:
    return t == f32 or (isinstance(t, WeakType))


def _words(cg, kv: KValue, node) -> list:
    """The i32 registers of a tuple of 32-bit values (f32 bit-cast)."""
    out = []
    for k, e in enumerate(kv.type.elements):
        item = kv.element(k)
        if e == f32:
            out.append(cg.b.cast("bitcast", item.value, ll.i32))
        else:
            out.append(cg.convert(item, u32 if isinstance(e, WeakType) else e, node).value)
    return out


def shared_address(cg, array: KValue, index: KValue, node, what: str):
    """The 32-bit shared-window address of `array[index]` (a shared array)."""
    ptr = array_index(cg, array, index, node)
    return cg.b.cast("ptrtoint", ptr, ll.i32)


def global_address(cg, array: KValue, index: KValue, node):
    """The 64-bit global address of `array[index]` (a kernel's array argument)."""
    return cg.b.cast("ptrtoint", array_index(cg, array, index, node), ll.i64)


def _array(call, k: int, what: str, space: int, bits=None) -> ArrayType:
    at = call.arg_types[k]
    where = "shared" if space == ll.SHARED else "global"
    if not isinstance(at, ArrayType) or getattr(at, "space", ll.GLOBAL) != space:
        raise TypeError(f"{what}: argument {k + 1} must be a {where}-memory array, got {at!r}"
                        + (" (make one with cupric.device.shared.array)"
                           if space == ll.SHARED else " (a kernel's array argument)"))
    if bits is not None and at.dtype.itemsize * 8 != bits:
        raise TypeError(f"{what}: the array must have 16-bit elements (u16, i16, f16), "
                        f"got {at.dtype!r}")
    _index(call, k + 1, at, what)
    return at


def _index(call, k: int, at: ArrayType, what: str) -> None:
    it = call.arg_types[k]
    items = it.elements if isinstance(it, TupleType) else (it,)
    if len(items) != at.ndim or not all(_is_int(t) for t in items):
        raise TypeError(f"{what}: a {at.ndim}-D array needs {at.ndim} integer indices, got "
                        f"{it!r}")


def _asm(cg, text: str, results: list, constraints: list, args: list, memory=False):
    """Inline PTX returning `results` (LLVM types) as a list of values."""
    if not results:
        ret = ll.void
    elif len(results) == 1:
        ret = results[0]
    else:
        ret = ll.StructType(results)
    cons = ",".join(constraints + (["~{memory}"] if memory else []))
    value = cg.b.inline_asm(ll.FunctionType(ret, [a.type for a in args]), text, cons, args,
                            side_effects=True)
    if len(results) <= 1:
        return [value] if results else []
    return [cg.b.extractvalue(value, k) for k in range(len(results))]


def _operands(start: int, count: int) -> str:
    return "{" + ", ".join(f"${start + k}" for k in range(count)) + "}"


# -- mma.sync --------------------------------------------------------------------------

def _mma_rule(shape: str) -> None:
    m, n, k, ab, cd = SHAPES[shape]
    what = f"mma.{shape}"
    regs_a = FRAGMENTS[shape]["a"][0]
    regs_b = FRAGMENTS[shape]["b"][0]
    acc = f32 if cd == "f32" else i32
    operand_ok = (lambda t: _float32(t) or _word(t)) if ab == "tf32" else _word
    operand_kind = "f32 (or u32 tf32 bit patterns)" if ab == "tf32" else "u32 words"

    def infer(call):
        if len(call.arg_types) != 3 or call.keywords:
            raise TypeError(f"{what}(a, b, c) takes three fragments")
        _tuple_of(call, 0, what, "a", regs_a, operand_ok, operand_kind)
        _tuple_of(call, 1, what, "b", regs_b, operand_ok, operand_kind)
        _tuple_of(call, 2, what, "c", 4, (lambda t: _float32(t) or _is_int(t))
                  if acc == f32 else _is_int, f"{acc!r} values")
        return TupleType([acc] * 4)

    ptx = f"mma.sync.aligned.m{m}n{n}k{k}.row.col.{cd}.{ab}.{ab}.{cd}"
    cc = "f" if acc == f32 else "r"
    cl = ll.float if acc == f32 else ll.i32

    def lower(cg, call, args):
        a = _words(cg, args[0], call.node)
        b = _words(cg, args[1], call.node)
        c = cg.convert(args[2], TupleType([acc] * 4), call.node).vals
        text = (f"{ptx} {_operands(0, 4)}, {_operands(4, regs_a)}, "
                f"{_operands(4 + regs_a, regs_b)}, {_operands(4 + regs_a + regs_b, 4)};")
        cons = [f"={cc}"] * 4 + ["r"] * (regs_a + regs_b) + [cc] * 4
        d = _asm(cg, text, [cl] * 4, cons, a + b + c)
        return KValue(call.result_type, d)

    register(what, infer, lower)


for _shape in SHAPES:
    _mma_rule(_shape)


# -- ldmatrix / stmatrix ---------------------------------------------------------------

def _count(call, what: str) -> int:
    return call.keyword("count", 4, (1, 2, 4))


def _trans(call) -> bool:
    return bool(call.keyword("trans", False, (False, True)))


def _ldmatrix_infer(call):
    what = "mma.ldmatrix"
    if len(call.arg_types) != 2 or set(call.keywords) - {"count", "trans"}:
        raise TypeError(f"{what}(smem, index, count=4, trans=False) takes an array and an "
                        f"index")
    _array(call, 0, what, ll.SHARED, bits=16)
    _trans(call)
    return TupleType([u32] * _count(call, what))


def _ldmatrix_lower(cg, call, args):
    n = _count(call, "mma.ldmatrix")
    addr = shared_address(cg, args[0], args[1], call.node, "mma.ldmatrix")
    trans = ".trans" if _trans(call) else ""
    text = f"ldmatrix.sync.aligned.m8n8.x{n}{trans}.shared.b16 {_operands(0, n)}, [${n}];"
    regs = _asm(cg, text, [ll.i32] * n, ["=r"] * n + ["r"], [addr], memory=True)
    return KValue(call.result_type, regs)


register("mma.ldmatrix", _ldmatrix_infer, _ldmatrix_lower)


def _stmatrix_infer(call):
    what = "mma.stmatrix"
    if len(call.arg_types) != 3 or set(call.keywords) - {"trans"}:
        raise TypeError(f"{what}(smem, index, regs, trans=False) takes an array, an index "
                        f"and a tuple of 1, 2 or 4 u32")
    _array(call, 0, what, ll.SHARED, bits=16)
    t = call.arg_types[2]
    if not isinstance(t, TupleType) or len(t.elements) not in (1, 2, 4) or \
            not all(_word(e) for e in t.elements):
        raise TypeError(f"{what}: regs must be a tuple of 1, 2 or 4 u32, got {t!r}")
    _trans(call)
    return NONE


def _stmatrix_lower(cg, call, args):
    regs = _words(cg, args[2], call.node)
    n = len(regs)
    addr = shared_address(cg, args[0], args[1], call.node, "mma.stmatrix")
    trans = ".trans" if _trans(call) else ""
    text = f"stmatrix.sync.aligned.m8n8.x{n}{trans}.shared.b16 [$0], {_operands(1, n)};"
    _asm(cg, text, [], ["r"] * (n + 1), [addr] + regs, memory=True)
    return KValue(call.result_type, [])


register("mma.stmatrix", _stmatrix_infer, _stmatrix_lower, writes=(0,))


# -- conversions -----------------------------------------------------------------------

def _floats(call, what: str, count: int) -> None:
    if len(call.arg_types) != count or call.keywords:
        raise TypeError(f"{what} takes {count} argument{'s' if count > 1 else ''}")
    for t in call.arg_types:
        if not isinstance(t, (ScalarType, WeakType)) or getattr(t, "kind", "") == "b":
            raise TypeError(f"{what}: arguments must be numbers, got {t!r}")


def _f32(cg, kv, node):
    if isinstance(kv.type, WeakType):
        kv = cg.convert(kv, kv.type.default, node)
    return cg.convert(kv, f32, node).value


def _to_tf32_infer(call):
    _floats(call, "mma.to_tf32", 1)
    return f32


def _to_tf32_lower(cg, call, args):
    (bits,) = _asm(cg, "cvt.rna.tf32.f32 $0, $1;", [ll.i32], ["=r", "f"],
                   [_f32(cg, args[0], call.node)])
    return KValue(f32, [cg.b.cast("bitcast", bits, ll.float)])


register("mma.to_tf32", _to_tf32_infer, _to_tf32_lower)


def _pack_rule(kind: str) -> None:
    what = f"mma.pack_{kind}x2"

    def infer(call):
        _floats(call, what, 2)
        return u32

    def lower(cg, call, args):
        lo, hi = (_f32(cg, a, call.node) for a in args)
        # cvt.rn.{kind}x2.f32 d, a, b puts a in the upper half and b in the lower.
        (r,) = _asm(cg, f"cvt.rn.{kind}x2.f32 $0, $2, $1;", [ll.i32], ["=r", "f", "f"],
                    [lo, hi])
        return KValue(u32, [r])

    register(what, infer, lower)


_pack_rule("bf16")
_pack_rule("f16")


# -- cp.async --------------------------------------------------------------------------

def _copy_infer(call):
    what = "cp_async.copy"
    if len(call.arg_types) not in (4, 5, 6) or set(call.keywords) - {"size"}:
        raise TypeError(f"{what}(dst, dst_index, src, src_index, size=16, src_size=size): "
                        f"src_size, when given, is the sixth positional argument")
    dst = _array(call, 0, what, ll.SHARED)
    src = _array(call, 2, what, ll.GLOBAL)
    if dst.dtype != src.dtype:
        raise TypeError(f"{what}: dst and src must have one element type, got {dst.dtype!r} "
                        f"and {src.dtype!r}")
    size = call.consts[4] if len(call.arg_types) >= 5 else call.keywords.get("size", 16)
    if size not in (4, 8, 16):
        raise TypeError(f"{what}: size must be a constant 4, 8 or 16 (bytes), got {size!r}")
    if size % dst.dtype.itemsize:
        raise TypeError(f"{what}: size {size} is not a multiple of the element size "
                        f"{dst.dtype.itemsize}")
    if len(call.arg_types) == 6 and not _is_int(call.arg_types[5]):
        raise TypeError(f"{what}: src_size must be an integer number of bytes")
    return NONE


def _copy_lower(cg, call, args):
    size = call.consts[4] if len(args) >= 5 else call.keywords.get("size", 16)
    dst = shared_address(cg, args[0], args[1], call.node, "cp_async.copy")
    src = global_address(cg, args[2], args[3], call.node)
    flavour = "cg" if size == 16 else "ca"  # .cg (L2 only) exists for 16 bytes only
    if len(args) == 6:
        kv = args[5]
        if isinstance(kv.type, WeakType):
            kv = cg.convert(kv, kv.type.default, call.node)
        src_size = cg.convert(kv, u32, call.node).value
        _asm(cg, f"cp.async.{flavour}.shared.global [$0], [$1], {size}, $2;", [],
             ["r", "l", "r"], [dst, src, src_size], memory=True)
    else:
        _asm(cg, f"cp.async.{flavour}.shared.global [$0], [$1], {size};", [], ["r", "l"],
             [dst, src], memory=True)
    return KValue(call.result_type, [])


register("cp_async.copy", _copy_infer, _copy_lower, writes=(0,))


def _commit_infer(call):
    if call.arg_types or call.keywords:
        raise TypeError("cp_async.commit() takes no arguments")
    return NONE


register("cp_async.commit", _commit_infer, lambda cg, call, args: KValue(
    call.result_type, _asm(cg, "cp.async.commit_group;", [], [], [], memory=True)))


def _wait_infer(call):
    if len(call.arg_types) != 1 or call.keywords or not isinstance(call.consts[0], int) \
            or not 0 <= call.consts[0] <= 7:
        raise TypeError("cp_async.wait(n) takes one constant n in 0..7")
    return NONE


register("cp_async.wait", _wait_infer, lambda cg, call, args: KValue(
    call.result_type, _asm(cg, f"cp.async.wait_group {call.consts[0]};", [], [], [],
                           memory=True)))
