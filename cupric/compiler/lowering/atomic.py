"""Lowering of `cupric.device.atomic`: read-modify-write operations on global and shared
arrays. The common case (device scope, relaxed order, what CUDA's atomicAdd means) uses
LLVM's `atomicrmw`/`cmpxchg` and libNVVM's `llvm.nvvm.atomic.load.*` intrinsics, which
the optimizer understands; other scopes and orders use inline PTX
`atom.<sem>.<scope>.<op>.<type>` on a generic address (LLVM 7's NVVM dialect has no
syncscopes). Operations PTX lacks (float min/max, 64-bit inc/dec) are CAS loops.
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue, scalar_lltype
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_float, const_int, undef
from cupric.compiler.lowering.memory import array_index
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import TupleType, WeakType
from cupric.device.atomic import ORDERS, SCOPES
from cupric.types import ArrayType, ScalarType, f16, f32, u16, u32

__all__ = ["atomic_rmw", "atomic_cas"]

_PTX_SCOPE = {"block": "cta", "device": "gpu", "system": "sys"}
_INT_OPS = ("add", "sub", "min", "max", "exch", "and_", "or_", "xor", "inc", "dec")
_FLOAT_OPS = ("add", "sub", "min", "max", "exch")
_RMW = {"add": "add", "sub": "sub", "exch": "xchg", "and_": "and", "or_": "or", "xor": "xor"}


# -- typing --------------------------------------------------------------------------------

def _array_and_index(call, what: str) -> ArrayType:
    if len(call.arg_types) < 2:
        raise TypeError(f"{what} needs an array and an index")
    at = call.arg_types[0]
    if not isinstance(at, ArrayType):
        raise TypeError(f"{what}: the first argument must be an array, got {at!r}")
    if getattr(at, "space", ll.GLOBAL) == ll.CONSTANT:
        raise TypeError(f"{what}: constant-memory arrays are read-only")
    it = call.arg_types[1]
    items = it.elements if isinstance(it, TupleType) else (it,)
    for t in items:
        if not ((isinstance(t, WeakType) and t.kind == "int")
                or (isinstance(t, ScalarType) and t.is_integer)):
            raise TypeError(f"{what}: the index must be an int or a tuple of ints, got {it!r}")
    if len(items) != at.ndim:
        raise TypeError(f"{what}: a {at.ndim}-D array needs {at.ndim} indices, got "
                        f"{len(items)}")
    return at


def _keywords(call, what: str, orders=ORDERS) -> tuple[str, str]:
    extra = set(call.keywords) - {"scope", "order"}
    if extra:
        raise TypeError(f"{what}: unknown keyword {sorted(extra)[0]}= (scope=, order=)")
    return (call.keyword("scope", "device", SCOPES), call.keyword("order", "relaxed", orders))


def _operand(call, k: int, what: str) -> None:
    t = call.arg_types[k]
    if not isinstance(t, (ScalarType, WeakType)):
        raise TypeError(f"{what}: operand {k - 1} must be a number, got {t!r}")


def _rmw_infer(op: str):
    what = f"atomic.{op}"

    def infer(call):
        at = _array_and_index(call, what)
        _keywords(call, what)
        if len(call.arg_types) != 3:
            raise TypeError(f"{what}(arr, idx, val) takes three arguments")
        _operand(call, 2, what)
        dt = at.dtype
        if dt.is_integer and dt.bits in (32, 64):
            return dt
        if dt.kind == "f" and op in _FLOAT_OPS and dt.bits in (32, 64):
            return dt
        if (dt == f16 or dt.name == "bf16") and op == "add":
            return dt
        kinds = "i32, i64, u32, u64" + (", f32, f64" if op in _FLOAT_OPS else "") + (
            ", f16, bf16" if op == "add" else "")
        raise TypeError(f"{what} works on arrays of {kinds}, not {dt!r}")
    return infer


def _cas_infer(call):
    at = _array_and_index(call, "atomic.cas")
    _keywords(call, "atomic.cas")
    if len(call.arg_types) != 4:
        raise TypeError("atomic.cas(arr, idx, expected, desired) takes four arguments")
    _operand(call, 2, "atomic.cas")
    _operand(call, 3, "atomic.cas")
    if at.dtype.bits not in (32, 64) or at.dtype.kind not in "iuf":
        raise TypeError(f"atomic.cas works on arrays of 32- or 64-bit numbers, not "
                        f"{at.dtype!r}")
    return at.dtype


def _load_infer(call):
    at = _array_and_index(call, "atomic.load")
    _keywords(call, "atomic.load", ("relaxed", "acquire"))
    if len(call.arg_types) != 2:
        raise TypeError("atomic.load(arr, idx) takes two arguments")
    if at.dtype.bits not in (32, 64) or at.dtype.kind not in "iuf":
        raise TypeError(f"atomic.load works on 32- or 64-bit numbers, not {at.dtype!r}")
    return at.dtype


def _store_infer(call):
    at = _array_and_index(call, "atomic.store")
    _keywords(call, "atomic.store", ("relaxed", "release"))
    if len(call.arg_types) != 3:
        raise TypeError("atomic.store(arr, idx, val) takes three arguments")
    _operand(call, 2, "atomic.store")
    if at.dtype.bits not in (32, 64) or at.dtype.kind not in "iuf":
        raise TypeError(f"atomic.store works on 32- or 64-bit numbers, not {at.dtype!r}")
    from cupric.compiler.typing.ktypes import NONE
    return NONE


def _packed_infer(kind: str):
    what = f"atomic.add_{kind}x2"

    def infer(call):
        at = _array_and_index(call, what)
        _keywords(call, what)
        if len(call.arg_types) != 4:
            raise TypeError(f"{what}(arr, idx, lo, hi) takes four arguments")
        _operand(call, 2, what)
        _operand(call, 3, what)
        want = f16 if kind == "f16" else u16
        if at.dtype != want and not (kind == "bf16" and at.dtype.name == "bf16"):
            raise TypeError(f"{what} works on arrays of {want!r}"
                            f"{' or bf16' if kind == 'bf16' else ''}, not {at.dtype!r}")
        out = f16 if kind == "f16" else f32
        return TupleType([out, out])
    return infer


# -- lowering helpers ----------------------------------------------------------------------

def _int_type(bits: int) -> ll.IntType:
    return ll.IntType(bits)


def _generic(cg, ptr: Value) -> Value:
    if ptr.type.addrspace == ll.GENERIC:
        return ptr
    return cg.b.cast("addrspacecast", ptr, ll.PointerType(ptr.type.pointee))


def _as_int_pointer(cg, ptr: Value) -> Value:
    bits = ptr.type.pointee.bits
    return cg.b.cast("bitcast", ptr, ll.PointerType(_int_type(bits), ptr.type.addrspace))


def _bits(cg, v: Value) -> Value:
    if isinstance(v.type, ll.FloatType):
        return cg.b.cast("bitcast", v, _int_type(v.type.bits))
    return v


def _from_bits(cg, v: Value, want: ll.LLType) -> Value:
    return v if v.type == want else cg.b.cast("bitcast", v, want)


_CONSTRAINT = {16: "h", 32: "r", 64: "l"}
_FCONSTRAINT = {32: "f", 64: "d"}


def _ptx_type(t: ScalarType, op: str) -> str:
    """The PTX type suffix of `op` on `t`: bit types for moves and logic, unsigned for
    integer add/inc/dec (two's complement), signedness only where it matters (min/max)."""
    if op in ("exch", "cas", "and", "or", "xor"):
        return f"b{t.bits}"
    if t.kind == "f":
        return f"f{t.bits}"
    if op in ("add", "inc", "dec"):
        return f"u{t.bits}"
    return f"{'s' if t.kind == 'i' else 'u'}{t.bits}"


def _qualifiers(scope: str, order: str) -> str:
    """`.sem.scope` of atom; absent ones are PTX's defaults (.relaxed, .gpu)."""
    sem = "" if order == "relaxed" else f".{order}"
    return sem + ("" if scope == "device" else f".{_PTX_SCOPE[scope]}")


def _ptx_atom(cg, t: ScalarType, op: str, ptr: Value, operands, scope: str,
              order: str) -> Value:
    """Inline `atom.<sem>.<scope>.<op>.<type>` on the generic address of `ptr`."""
    lt = scalar_lltype(t)
    c = _FCONSTRAINT[t.bits] if t.kind == "f" and t.bits > 16 and op not in ("exch", "cas") \
        else _CONSTRAINT[t.bits]
    vals = operands
    if c in ("r", "l", "h"):
        vals = [_bits(cg, v) for v in operands]
        rt = _int_type(t.bits)
    else:
        rt = lt
    gptr = _generic(cg, ptr)
    text = (f"atom{_qualifiers(scope, order)}.{op}{'.noftz' if t == f16 else ''}."
            f"{_ptx_type(t, op)} $0, [$1]" + "".join(f", ${k + 2}" for k in range(len(vals)))
            + ";")
    constraints = ",".join([f"={c}", "l"] + [c] * len(vals)) + ",~{memory}"
    r = cg.b.inline_asm(ll.FunctionType(rt, [gptr.type] + [v.type for v in vals]), text,
                        constraints, [gptr] + vals)
    return _from_bits(cg, r, lt)


def _mangle(ptr: Value) -> str:
    pointee = ptr.type.pointee
    return f"p{ptr.type.addrspace}{pointee}"


def atomic_cas(cg, t: ScalarType, ptr: Value, expected: Value, desired: Value,
               scope: str = "device", order: str = "relaxed") -> Value:
    """The old value of an atomic compare-and-swap (floats compare bit patterns)."""
    lt = scalar_lltype(t)
    if scope != "device" or order != "relaxed":
        return _ptx_atom(cg, t, "cas", ptr, [expected, desired], scope, order)
    iptr = _as_int_pointer(cg, ptr) if t.kind == "f" else ptr
    pair = cg.b.cmpxchg(iptr, _bits(cg, expected), _bits(cg, desired))
    return _from_bits(cg, cg.b.extractvalue(pair, 0), lt)


def _cas_loop(cg, t: ScalarType, ptr: Value, update, scope: str, order: str) -> Value:
    """old = *ptr; repeat: new = update(old); until CAS(ptr, old, new) succeeds."""
    b = cg.b
    # The value last seen lives in a local slot (promoted to a phi by the optimizer).
    slot = cg.entry_builder.alloca(scalar_lltype(t), hint="atomic.old")
    b.store(b.load(ptr, align=t.itemsize), slot)
    loop = cg.fn.append_block("atomic.loop")
    done = cg.fn.append_block("atomic.done")
    b.br(loop)
    b.position_at_end(loop)
    old = b.load(slot)
    prev = atomic_cas(cg, t, ptr, old, update(old), scope, order)
    b.store(prev, slot)
    b.cbranch(b.icmp("eq", _bits(cg, prev), _bits(cg, old)), done, loop)
    b.position_at_end(done)
    return b.load(slot)


def atomic_rmw(cg, t: ScalarType, op: str, ptr: Value, val: Value, scope="device",
               order="relaxed") -> Value:
    """Emit one atomic `op` (a name of `cupric.device.atomic`) on `*ptr`; the old value."""
    b = cg.b
    default = scope == "device" and order == "relaxed"
    signed = t.kind == "i"
    if t.kind == "f":
        if op in ("min", "max"):
            pred = "olt" if op == "min" else "ogt"

            def pick(old):
                return b.select(b.fcmp(pred, val, old), val, old)
            return _cas_loop(cg, t, ptr, pick, scope, order)
        if op == "sub":
            val = b.binop("fsub", const_float(val.type, -0.0), val)
            op = "add"
        if op == "exch":
            if default:
                r = b.atomicrmw("xchg", _as_int_pointer(cg, ptr), _bits(cg, val))
                return _from_bits(cg, r, val.type)
            return _ptx_atom(cg, t, "exch", ptr, [val], scope, order)
        # add
        if default and t.bits in (32, 64):
            name = f"llvm.nvvm.atomic.load.add.f{t.bits}.{_mangle(ptr)}"
            return cg.mcg.call_external(b, name, val.type, [ptr, val])
        return _ptx_atom(cg, t, "add", ptr, [val], scope, order)
    # integers
    if op in ("inc", "dec"):
        if t.bits == 32:
            if default:
                name = f"llvm.nvvm.atomic.load.{op}.32.{_mangle(ptr)}"
                return cg.mcg.call_external(b, name, val.type, [ptr, val])
            return _ptx_atom(cg, t, op, ptr, [val], scope, order)
        one = const_int(val.type, 1)
        zero = const_int(val.type, 0)

        def step(old):
            if op == "inc":
                wrap = b.icmp("uge", old, val)
                return b.select(wrap, zero, b.binop("add", old, one))
            wrap = b.binop("or", b.icmp("eq", old, zero), b.icmp("ugt", old, val))
            return b.select(wrap, val, b.binop("sub", old, one))
        return _cas_loop(cg, t, ptr, step, scope, order)
    if default:
        if op in ("min", "max"):
            kind = op if signed else f"u{op}"
        else:
            kind = _RMW[op]
        return b.atomicrmw(kind, ptr, val)
    if op == "sub":
        val = b.binop("sub", const_int(val.type, 0), val)
        op = "add"
    ptx_op = {"and_": "and", "or_": "or", "exch": "exch"}.get(op, op)
    return _ptx_atom(cg, t, ptx_op, ptr, [val], scope, order)


def _element(cg, call, args):
    array = args[0]
    name = call.node.args[0].id if hasattr(call.node.args[0], "id") else None
    ptr = array_index(cg, array, args[1], call.node, name)
    return array.type.dtype, ptr


_RED_OPS = {"add": "add", "sub": "add", "min": "min", "max": "max", "and_": "and",
            "or_": "or", "xor": "xor", "inc": "inc", "dec": "dec"}


def _red(cg, t: ScalarType, op: str, ptr: Value, val: Value, scope: str, order: str) -> bool:
    """Emit PTX `red` (a reduction that returns nothing) for an atomic whose old value
    is unused, where PTX has one; False when the caller must emit the full atomic."""
    if op not in _RED_OPS or order not in ("relaxed", "release"):
        return False
    if t.kind == "f" and op not in ("add", "sub"):
        return False  # float min/max: CAS loops
    if op in ("inc", "dec") and t.bits != 32:
        return False
    b = cg.b
    if op == "sub":
        val = (b.binop("fsub", const_float(val.type, -0.0), val) if t.kind == "f"
               else b.binop("sub", const_int(val.type, 0), val))
    space = {ll.GLOBAL: ".global", ll.SHARED: ".shared"}.get(ptr.type.addrspace, "")
    addr = ptr if space else _generic(cg, ptr)
    ptx_type = _ptx_type(t, _RED_OPS[op])
    if t == f16:
        ptx_type = "noftz.f16"
    c = _FCONSTRAINT[t.bits] if t.kind == "f" and t.bits > 16 else _CONSTRAINT[t.bits]
    v = val if c in ("f", "d") else _bits(cg, val)
    # Shared-window addresses are 32-bit offsets in a 64-bit register: "l" fits both.
    text = f"red{_qualifiers(scope, order)}{space}.{_RED_OPS[op]}.{ptx_type} [$0], $1;"
    b.inline_asm(ll.FunctionType(ll.void, [addr.type, v.type]), text, f"l,{c},~{{memory}}",
                 [addr, v])
    return True


def _rmw_lower(op: str):
    def lower(cg, call, args):
        t, ptr = _element(cg, call, args)
        scope, order = _keywords(call, f"atomic.{op}")
        val = cg.convert(args[2], t, call.node).value
        if t.name == "bf16":  # atom.add.noftz.bf16 (sm_90), else a CAS loop
            from cupric.compiler.lowering.half import bf16_atomic_add
            return KValue(t, [bf16_atomic_add(cg, ptr, val, scope, order)])
        if cg.discarded is call.node and _red(cg, t, op, ptr, val, scope, order):
            return KValue(t, [undef(scalar_lltype(t))])
        if t == f16:
            # atom.add.noftz.f16 (sm_70+): always inline PTX, there is no LLVM 7 form.
            r = _ptx_atom(cg, t, "add", ptr, [val], scope, order)
            return KValue(t, [r])
        return KValue(t, [atomic_rmw(cg, t, op, ptr, val, scope, order)])
    return lower


def _cas_lower(cg, call, args):
    t, ptr = _element(cg, call, args)
    scope, order = _keywords(call, "atomic.cas")
    expected = cg.convert(args[2], t, call.node).value
    desired = cg.convert(args[3], t, call.node).value
    return KValue(t, [atomic_cas(cg, t, ptr, expected, desired, scope, order)])


def _load_lower(cg, call, args):
    t, ptr = _element(cg, call, args)
    scope, order = _keywords(call, "atomic.load", ("relaxed", "acquire"))
    it = _int_type(t.bits)
    gptr = _generic(cg, ptr)
    text = f"ld.{order}.{_PTX_SCOPE[scope]}.b{t.bits} $0, [$1];"
    r = cg.b.inline_asm(ll.FunctionType(it, [gptr.type]), text,
                        f"={_CONSTRAINT[t.bits]},l,~{{memory}}", [gptr])
    return KValue(t, [_from_bits(cg, r, scalar_lltype(t))])


def _store_lower(cg, call, args):
    from cupric.compiler.typing.ktypes import NONE
    t, ptr = _element(cg, call, args)
    scope, order = _keywords(call, "atomic.store", ("relaxed", "release"))
    val = _bits(cg, cg.convert(args[2], t, call.node).value)
    gptr = _generic(cg, ptr)
    text = f"st.{order}.{_PTX_SCOPE[scope]}.b{t.bits} [$0], $1;"
    cg.b.inline_asm(ll.FunctionType(ll.void, [gptr.type, val.type]), text,
                    f"l,{_CONSTRAINT[t.bits]},~{{memory}}", [gptr, val])
    return KValue(NONE, [])


def _bf16x2_sum(cg, word: Value, addends) -> Value:
    """The 32-bit word of two bf16 values plus two f32 addends, each rounded to bf16."""
    from cupric.compiler.lowering.half import bf16_bits_value, bf16_from_bits_value
    b = cg.b
    out = None
    for k, addend in enumerate(addends):
        bits = b.cast("trunc", b.binop("lshr", word, const_int(ll.i32, 16 * k)), ll.i16)
        total = b.binop("fadd", bf16_from_bits_value(cg, bits), addend)
        part = b.cast("zext", bf16_bits_value(cg, total), ll.i32)
        part = b.binop("shl", part, const_int(ll.i32, 16 * k)) if k else part
        out = part if out is None else b.binop("or", out, part)
    return out


def _packed_lower(kind: str):
    def lower(cg, call, args):
        t, ptr = _element(cg, call, args)
        scope, order = _keywords(call, f"atomic.add_{kind}x2")
        b = cg.b
        halves = []
        for k in (2, 3):
            if kind == "f16":
                v = cg.convert(args[k], f16, call.node).value
                halves.append(b.cast("zext", b.cast("bitcast", v, ll.i16), ll.i32))
            else:
                from cupric.compiler.lowering.half import bf16_bits_value
                halves.append(b.cast("zext", bf16_bits_value(cg, cg.convert(
                    args[k], f32, call.node).value), ll.i32))
        packed = b.binop("or", halves[0], b.binop("shl", halves[1], const_int(ll.i32, 16)))
        word = b.cast("bitcast", ptr, ll.PointerType(ll.i32, ptr.type.addrspace))
        gptr = _generic(cg, word)
        text = f"atom{_qualifiers(scope, order)}.add.noftz.{kind}x2 $0, [$1], $2;"
        if kind == "f16":
            old = b.inline_asm(ll.FunctionType(ll.i32, [gptr.type, ll.i32]), text,
                               "=r,l,r,~{memory}", [gptr, packed])
        else:
            # atom.add.bf16x2 exists from sm_90; older targets add in f32 and round
            # inside a CAS loop. __nvvm_reflect keeps only the branch of the target.
            from cupric.compiler.lowering.warp import cuda_arch
            slot = cg.entry_builder.alloca(ll.i32, hint="bf16x2.old")
            fast = cg.fn.append_block("bf16x2.sm90")
            slow = cg.fn.append_block("bf16x2.cas")
            done = cg.fn.append_block("bf16x2.done")
            b.cbranch(b.icmp("sge", cuda_arch(cg), const_int(ll.i32, 900)), fast, slow)
            b.position_at_end(fast)
            b.store(b.inline_asm(ll.FunctionType(ll.i32, [gptr.type, ll.i32]), text,
                                 "=r,l,r,~{memory}", [gptr, packed]), slot)
            b.br(done)
            b.position_at_end(slow)
            addends = [cg.convert(args[k], f32, call.node).value for k in (2, 3)]
            b.store(_cas_loop(cg, u32, word, lambda w: _bf16x2_sum(cg, w, addends), scope,
                              order), slot)
            b.br(done)
            b.position_at_end(done)
            old = b.load(slot)
        lo = b.cast("trunc", old, ll.i16)
        hi = b.cast("trunc", b.binop("lshr", old, const_int(ll.i32, 16)), ll.i16)
        if kind == "f16":
            vals = [b.cast("bitcast", lo, ll.half), b.cast("bitcast", hi, ll.half)]
        else:
            from cupric.compiler.lowering.half import bf16_from_bits_value
            vals = [bf16_from_bits_value(cg, lo), bf16_from_bits_value(cg, hi)]
        return KValue(call.result_type, vals)
    return lower


for _op in _INT_OPS:
    register(f"atomic.{_op}", _rmw_infer(_op), _rmw_lower(_op), writes=(0,))
register("atomic.cas", _cas_infer, _cas_lower, writes=(0,))
register("atomic.load", _load_infer, _load_lower)
register("atomic.store", _store_infer, _store_lower, writes=(0,))
register("atomic.add_f16x2", _packed_infer("f16"), _packed_lower("f16"), writes=(0,))
register("atomic.add_bf16x2", _packed_infer("bf16"), _packed_lower("bf16"), writes=(0,))
