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


def _fma_infer(call):
    from cupric.types import bf16
    _number(call, "half.fma", 3)
    return bf16 if bf16 in call.arg_types else f16


def _fma_lower(cg, call, args):
    t = call.result_type
    vals = [_as(cg, a, t, call.node) for a in args]
    if t == f16:
        return KValue(f16, [cg.mcg.call_external(cg.b, "llvm.fma.f16", ll.half, vals)])
    return KValue(t, [bf16_fma_value(cg, *vals)])


register("half.fma", _fma_infer, _fma_lower)


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
    kv = args[0]
    src = kv.type.default if isinstance(kv.type, WeakType) else kv.type
    if src.kind == "f" and src.bits > 32 or src.kind in "iu" and src.bits > 16:
        # f64 and wide integers: rounded to odd in f32 first, so that one rounding results
        x = _f32_to_odd(cg, _as(cg, kv, src, call.node), src)
    else:
        x = _as(cg, kv, f32, call.node)
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


# -- bf16 as a scalar type -------------------------------------------------------------------
#
# A bf16 value lives in a register as the f32 of the same value (its low 16 bits zero) and
# in memory as its 16 bits: widening, comparisons, negation, min/max and the f32 math
# library then need nothing of their own, and only the operations that make a new value
# round. +, -, * and fma are the native instructions where the target has them (sm_90:
# add/sub/mul.rn.bf16; sm_80: fma.rn.bf16, which with 1.0 or -0.0 is exactly the add or
# the multiply); elsewhere, and for division, the f32 result rounded to nearest even,
# which is the same number (f32 carries more than twice bfloat16's 8 bits, so the double
# rounding is harmless). `__nvvm_reflect` keeps only the branch of the target.

def bf16_bits16(cg, x: Value) -> Value:
    """The i16 bits of a bf16 value held as f32 (its top half, exactly)."""
    b = cg.b
    return b.cast("trunc", b.binop("lshr", b.cast("bitcast", x, ll.i32),
                                   const_int(ll.i32, 16)), ll.i16)


def by_arch(cg, lltype, choices) -> Value:
    """The value of the first `(min_arch, build)` in `choices` whose `min_arch` (e.g. 900)
    the target reaches (the last one's should be 0): branches on `__CUDA_ARCH` that
    libNVVM folds, so only the chosen instructions reach ptxas."""
    from cupric.compiler.lowering.warp import cuda_arch
    b = cg.b
    if len(choices) == 1:
        return choices[0][1]()
    slot = cg.entry_builder.alloca(lltype, hint="arch.value")
    done = cg.fn.append_block("arch.done")
    arch = cuda_arch(cg)
    for k, (least, build) in enumerate(choices):
        last = k == len(choices) - 1
        here = cg.fn.append_block("arch.case")
        nxt = done if last else cg.fn.append_block("arch.next")
        if last:
            b.br(here)
        else:
            b.cbranch(b.icmp("sge", arch, const_int(ll.i32, least)), here, nxt)
        b.position_at_end(here)
        b.store(build(), slot)
        b.br(done)
        if not last:
            b.position_at_end(nxt)
    b.position_at_end(done)
    return b.load(slot)


def _asm16(cg, text: str, vals) -> Value:
    n = len(vals)
    return cg.b.inline_asm(ll.FunctionType(ll.i16, [ll.i16] * n), text,
                           ",".join(["=h"] + ["h"] * n), vals, side_effects=False)


def _f32_to_odd(cg, v: Value, src: ScalarType) -> Value:
    """f32 `v` of src type f64 or a 32/64-bit integer, rounded toward zero with the last
    bit set where that was inexact (rounding to odd): rounding it once more to bfloat16,
    in any mode, gives the correctly rounded result of the original value."""
    b = cg.b
    suffix = {"f": "f64", "i": f"s{src.bits}", "u": f"u{src.bits}"}[src.kind]
    t = b.inline_asm(ll.FunctionType(ll.float, [v.type]), f"cvt.rz.f32.{suffix} $0, $1;",
                     "=f," + ("d" if src.kind == "f" else "r" if src.bits == 32 else "l"),
                     [v], side_effects=False)
    if src.kind == "f":
        inexact = b.fcmp("une", b.cast("fpext", t, ll.double), v)
    else:
        back = b.cast("fptosi" if src.kind == "i" else "fptoui", t, v.type)
        inexact = b.icmp("ne", back, v)
    bits = b.binop("or", b.cast("bitcast", t, ll.i32), b.cast("zext", inexact, ll.i32))
    return b.cast("bitcast", bits, ll.float)


def bf16_round(cg, v: Value, src: ScalarType, mode: str = "rn") -> Value:
    """The bf16 value (held as f32) of `v` of type `src` rounded once by `mode`."""
    from cupric.types import is_bf16
    b = cg.b
    if is_bf16(src):
        return v
    if src.kind == "b":
        return b.cast("uitofp", v, ll.float)
    if src.kind == "f" and src.bits <= 32:
        x = v if src.bits == 32 else b.cast("fpext", v, ll.float)
        exact = False
    elif src.kind in "iu" and src.bits <= 16:
        return b.cast("sitofp" if src.kind == "i" else "uitofp", v, ll.float)  # exact
    else:
        x = _f32_to_odd(cg, v, src)
        exact = True  # the sticky bit already stands for what was dropped
    if mode == "rn":
        if exact:
            return bf16_from_bits_value(cg, bf16_bits_value(cg, x))
        return bf16_from_bits_value(cg, by_arch(cg, ll.i16, [
            (800, lambda: _asm16_f32(cg, x)),
            (0, lambda: bf16_bits_value(cg, x))]))
    return bf16_from_bits_value(cg, bf16_directed_bits(cg, x, mode))


def _asm16_f32(cg, x: Value) -> Value:
    return cg.b.inline_asm(ll.FunctionType(ll.i16, [ll.float]), "cvt.rn.bf16.f32 $0, $1;",
                           "=h,f", [x], side_effects=False)


def bf16_convert(cg, kv: KValue, to, node) -> KValue:
    """C conversion to or from bf16 (`FunctionCodegen.convert` hands these over)."""
    from cupric.types import bf16, f32, is_bf16
    src = kv.type.default if isinstance(kv.type, WeakType) else kv.type
    b = cg.b
    if is_bf16(to):
        if isinstance(kv.type, WeakType) and node in cg.typed.consts:
            return cg.constant(cg.typed.consts[node], bf16, node)
        return KValue(bf16, [bf16_round(cg, kv.value, src)])
    # from bf16: the f32 of the same value converts exactly as f32 does
    return cg.convert(KValue(f32, [kv.value]), to, node)


def _bf16_native(cg, op: str, a: Value, c: Value) -> Value:
    """a op c ("add", "sub", "mul") of two bf16 values, rounded once, as f32."""
    x, y = bf16_bits16(cg, a), bf16_bits16(cg, c)
    one, neg_one, neg_zero = (const_int(ll.i16, v) for v in (0x3F80, -0x4080, -0x8000))
    fma80 = {"add": (x, one, y), "sub": (y, neg_one, x), "mul": (x, y, neg_zero)}[op]
    b = cg.b
    f32op = {"add": "fadd", "sub": "fsub", "mul": "fmul"}[op]
    bits = by_arch(cg, ll.i16, [
        (900, lambda: _asm16(cg, f"{op}.rn.bf16 $0, $1, $2;", [x, y])),
        (800, lambda: _asm16(cg, "fma.rn.bf16 $0, $1, $2, $3;", list(fma80))),
        (0, lambda: bf16_bits_value(cg, b.binop(f32op, a, c)))])
    return bf16_from_bits_value(cg, bits)


def bf16_fma_value(cg, a: Value, c: Value, d: Value) -> Value:
    """a * c + d of three bf16 values with one rounding (fma.rn.bf16 on sm_80+; before,
    the exact f64 sum rounded to odd in f32, then to nearest even)."""
    b = cg.b
    bits = by_arch(cg, ll.i16, [
        (800, lambda: _asm16(cg, "fma.rn.bf16 $0, $1, $2, $3;",
                             [bf16_bits16(cg, a), bf16_bits16(cg, c), bf16_bits16(cg, d)])),
        (0, lambda: bf16_bits_value(cg, _f32_to_odd(cg, b.binop(
            "fadd", b.binop("fmul", b.cast("fpext", a, ll.double),
                            b.cast("fpext", c, ll.double)),
            b.cast("fpext", d, ll.double)), _f64())))])
    return bf16_from_bits_value(cg, bits)


def _f64():
    from cupric.types import f64
    return f64


def bf16_arith(cg, node, op, left: KValue, right: KValue, rt, lnode, rnode) -> KValue:
    """`left op right` in bf16: native +, -, *; the rest in f32, rounded once."""
    import ast

    from cupric.types import f32
    kind = type(op)
    name = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}.get(kind)
    if name is not None:
        a = cg._weak_to(left, rt, lnode).value
        c = cg._weak_to(right, rt, rnode).value
        return KValue(rt, [_bf16_native(cg, name, a, c)])
    if kind is ast.Pow and not (isinstance(right.type, WeakType)
                                or getattr(right.type, "kind", "f") == "f"):
        wide = cg.arith(node, op, cg._weak_to(left, rt, lnode), right, f32, lnode, rnode)
    else:
        wide = cg.arith(node, op, cg._weak_to(left, rt, lnode),
                        cg._weak_to(right, rt, rnode), f32, lnode, rnode)
    return KValue(rt, [bf16_round(cg, wide.value, f32)])


def bf16_store_value(cg, v: Value) -> Value:
    """The i16 a bf16 register value is stored as."""
    return bf16_bits16(cg, v)


def bf16_load_value(cg, bits16: Value) -> Value:
    """The register value of stored bf16 bits."""
    return bf16_from_bits_value(cg, bits16)


def bf16_atomic_add(cg, ptr: Value, val: Value, scope: str, order: str) -> Value:
    """`atomic.add` on a bf16 element (an i16 pointer): atom.add.noftz.bf16 on sm_90;
    before, a CAS loop on the 32-bit word that holds the element, adding in f32 and
    rounding to nearest even (the same number). The old value, as f32."""
    from cupric.compiler.lowering.atomic import _cas_loop, _generic, _qualifiers
    from cupric.types import u32
    b = cg.b

    def native():
        gptr = _generic(cg, ptr)
        text = f"atom{_qualifiers(scope, order)}.add.noftz.bf16 $0, [$1], $2;"
        return b.inline_asm(ll.FunctionType(ll.i16, [gptr.type, ll.i16]), text,
                            "=h,l,h,~{memory}", [gptr, bf16_bits16(cg, val)])

    def cas():
        space = ptr.type.addrspace
        address = b.cast("ptrtoint", ptr, ll.i64)
        word = b.cast("inttoptr", b.binop("and", address, const_int(ll.i64, -4)),
                      ll.PointerType(ll.i32, space))
        shift = b.cast("trunc", b.binop("shl", b.binop("and", address, const_int(
            ll.i64, 2)), const_int(ll.i64, 3)), ll.i32)
        keep = b.binop("xor", b.binop("shl", const_int(ll.i32, 0xFFFF), shift),
                       const_int(ll.i32, -1))

        def update(w):
            old = bf16_from_bits_value(cg, b.cast("trunc", b.binop("lshr", w, shift), ll.i16))
            new = b.cast("zext", bf16_bits_value(cg, b.binop("fadd", old, val)), ll.i32)
            return b.binop("or", b.binop("and", w, keep), b.binop("shl", new, shift))
        prev = _cas_loop(cg, u32, word, update, scope, order)
        return b.cast("trunc", b.binop("lshr", prev, shift), ll.i16)

    return bf16_from_bits_value(cg, by_arch(cg, ll.i16, [(900, native), (0, cas)]))
