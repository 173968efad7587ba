"""Lowering one typed function (a kernel or a device function specialization) to an NVVM
IR function: locals live in allocas that libNVVM's optimizer promotes to registers;
structured control flow becomes basic blocks; Python semantics (floor division, short
circuits, range loops) are spelled out here."""

from __future__ import annotations

import ast

from cupric.compiler.errors import each_statement
from cupric.compiler.codegen.values import (KValue, abi_lltypes, element_pointer_type,
                                            flat_lltypes, scalar_lltype, struct_field_index)
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.builder import Builder
from cupric.compiler.ir.values import Value, const_float, const_int, undef, zero
from cupric.compiler.typing.ktypes import (NONE, ObjectType, StructType, TupleType, VectorType,
                                           WeakType, materialize)
from cupric.types import ArrayType, ScalarType, Type, bool_, f32, i64, is_bf16

__all__ = ["FunctionCodegen"]

_ICMP_SIGNED = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "slt", ast.LtE: "sle", ast.Gt: "sgt",
                ast.GtE: "sge"}
_ICMP_UNSIGNED = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "ult", ast.LtE: "ule",
                  ast.Gt: "ugt", ast.GtE: "uge"}
# Ordered predicates except != (Python: nan != nan is True).
_FCMP = {ast.Eq: "oeq", ast.NotEq: "une", ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt",
         ast.GtE: "oge"}


class _Loop:
    __slots__ = ("continue_block", "break_block")

    def __init__(self, continue_block, break_block) -> None:
        self.continue_block = continue_block
        self.break_block = break_block


class FunctionCodegen:
    """Emits one `TypedFunction` into the module of `mcg` (a `ModuleCodegen`).

    Parameters
    ----------
    mcg : ModuleCodegen
    typed : TypedFunction
    symbol : str
        LLVM name of the function.
    noalias : bool
        Kernel only: the launch found that no array argument overlaps another one that
        is written, so array pointers are `noalias` and read-only arrays load through
        the non-coherent cache.
    aligned : bool
        Kernel only: the launch found every array's data pointer 16-byte aligned, so the
        pointers carry `align 16` (neighbouring loads and stores become 128-bit ones).
    """

    def __init__(self, mcg, typed, symbol: str, noalias: bool = False,
                 aligned: bool = False) -> None:
        self.mcg = mcg
        self.typed = typed
        self.src = typed.source
        self.symbol = symbol
        self.noalias = noalias
        self.aligned = aligned
        self.loops: list[_Loop] = []
        self.slots: dict[str, list[Value]] = {}
        self.discarded = None  # the call of the current expression statement

    def error(self, node, message, hint=None):
        return self.src.error(node, message, hint)

    # -- function frame ------------------------------------------------------------------

    def signature(self) -> ll.FunctionType:
        typed = self.typed
        if typed.is_kernel:
            params = [p for t in typed.arg_types for p in abi_lltypes(t)]
            return ll.FunctionType(ll.void, params)
        params = [p for t in typed.arg_types for p in flat_lltypes(t)]
        return ll.FunctionType(self.return_lltype(), params)

    def return_lltype(self) -> ll.LLType:
        flat = flat_lltypes(self.typed.return_type)
        if not flat:
            return ll.void
        if len(flat) == 1:
            return flat[0]
        return ll.StructType(flat)

    def emit(self):
        typed = self.typed
        mcg = self.mcg
        ftype = self.signature()
        names = []
        for name, t in zip(typed.arg_names, typed.arg_types):
            n = len(abi_lltypes(t) if typed.is_kernel else flat_lltypes(t))
            if isinstance(t, ArrayType):
                names += [name] + [f"{name}.shape{k}" for k in range(t.ndim)] + \
                         [f"{name}.stride{k}" for k in range(t.ndim)]
            else:
                names += [name] * n
        if typed.is_kernel:
            fn = mcg.module.add_function(self.symbol, ftype, names)
            mcg.module.mark_kernel(fn)
        else:
            fn = mcg.module.add_function(self.symbol, ftype, names, linkage="internal",
                                         attributes="alwaysinline nounwind")
        self.fn = fn
        index = 0
        for t in typed.arg_types:
            width = len(abi_lltypes(t) if typed.is_kernel else flat_lltypes(t))
            if isinstance(t, ArrayType) and typed.is_kernel and self.noalias:
                fn.arg_attrs[index].append("noalias")
            if isinstance(t, ArrayType) and typed.is_kernel and self.aligned:
                # libNVVM 13.0 fails ("Do not know how to split the result of this
                # operator") on vectorized 2-byte elements under align 8 or 16; align 4
                # still pairs f16/i16 accesses and works on every libNVVM seen.
                fn.arg_attrs[index].append("align 4" if t.dtype.itemsize == 2 else "align 16")
            index += width
        fn.subprogram = mcg.subprogram(self)
        self.entry = fn.append_block("entry")
        self.entry_builder = Builder(fn, self.entry)
        body = fn.append_block("body")
        self.b = Builder(fn, body)
        # Parameters become ordinary locals (they may be reassigned).
        args = list(fn.args)
        eb = self.entry_builder
        for name, t in zip(typed.arg_names, typed.arg_types):
            width = len(abi_lltypes(t) if typed.is_kernel else flat_lltypes(t))
            vals, args = args[:width], args[width:]
            if typed.is_kernel:
                vals = self._from_abi(eb, t, vals)
            self.slots[name] = self._alloca_for(typed.var_types[name])
            value = KValue(t, vals)
            if typed.var_types[name] != t:  # a parameter later assigned a wider type
                body_builder, self.b = self.b, eb
                value = self.convert(value, typed.var_types[name])
                self.b = body_builder
            self._store_slots(eb, self.slots[name], value)
        for name, t in typed.var_types.items():
            if name not in self.slots:
                self.slots[name] = self._alloca_for(t)
                # Zero-filled so a path that skips the assignment reads 0, never poison.
                for slot in self.slots[name]:
                    eb.store(zero(slot.type.pointee), slot)
        self.block(self.src.tree.body)
        if not self.b.terminated:
            self.b.debug_location = None
            self._return_default()
        eb.br(body)
        return fn

    def _from_abi(self, b: Builder, t: Type, vals: list[Value]) -> list[Value]:
        if isinstance(t, ScalarType) and t.kind == "b":
            return [b.icmp("ne", vals[0], const_int(ll.i8, 0))]
        if is_bf16(t):
            from cupric.compiler.lowering.half import bf16_from_bits_value
            return [bf16_from_bits_value(self, vals[0])]
        if isinstance(t, TupleType):
            out = []
            for e in t.elements:
                width = len(abi_lltypes(e))
                out += self._from_abi(b, e, vals[:width])
                vals = vals[width:]
            return out
        return vals

    def _alloca_for(self, t: Type) -> list[Value]:
        return [self.entry_builder.alloca(lt, hint="slot") for lt in flat_lltypes(t)]

    def _store_slots(self, b: Builder, slots: list[Value], kv: KValue) -> None:
        for slot, v in zip(slots, kv.vals):
            b.store(v, slot)

    def _return_default(self) -> None:
        rt = self.return_lltype()
        if rt == ll.void:
            self.b.ret()
        else:
            self.b.ret(zero(rt))

    def _dead_block(self) -> None:
        """Continue after a terminator in a fresh, unreachable block (code after a
        return/break is legal Python and simply never runs)."""
        self.b.position_at_end(self.fn.append_block("dead"))

    def set_location(self, node) -> None:
        self.b.debug_location = self.mcg.location(self, node)

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts) -> None:
        each_statement(self.src, stmts, self._located_stmt, "compiling")

    def _located_stmt(self, s) -> None:
        self.set_location(s)
        self.stmt(s)

    def stmt(self, s) -> None:
        kind = type(s)
        if kind is ast.Assign:
            value = self.expr(s.value)
            for target in s.targets:
                self.store_target(target, value)
        elif kind is ast.AnnAssign:
            if s.value is not None:
                self.store_target(s.target, self.expr(s.value))
        elif kind is ast.AugAssign:
            self.augassign(s)
        elif kind is ast.If:
            self.if_stmt(s)
        elif kind is ast.While:
            self.while_stmt(s)
        elif kind is ast.For:
            self.for_stmt(s)
        elif kind is ast.Break:
            self.b.br(self.loops[-1].break_block)
            self._dead_block()
        elif kind is ast.Continue:
            self.b.br(self.loops[-1].continue_block)
            self._dead_block()
        elif kind is ast.Return:
            self.return_stmt(s)
        elif kind is ast.Expr:
            if not isinstance(s.value, ast.Constant):
                # Lowering rules may emit cheaper forms when the value is unused (atomics
                # become PTX red instead of atom).
                self.discarded = s.value
                self.expr(s.value)
                self.discarded = None
        elif kind is ast.Pass:
            pass
        elif kind is ast.Assert:  # lowered by cupric.compiler.lowering.io
            self.typed.targets[s][1](self, s)
        else:  # the typer refuses everything else first
            raise self.error(s, f"internal error: no codegen for {kind.__name__}")

    def store_target(self, target, value: KValue) -> None:
        kind = type(target)
        if kind is ast.Name:
            want = self.typed.var_types[target.id]
            self._store_slots(self.b, self.slots[target.id], self.convert(value, want, target))
        elif kind in (ast.Tuple, ast.List):
            for i, elt in enumerate(target.elts):
                self.store_target(elt, value.element(i))
        elif kind is ast.Subscript:
            array = self.expr(target.value)
            ptr = self.element_pointer(array, target)
            self.store_element(array.type, ptr, value, target)
        elif kind is ast.Attribute:  # arr[i].field = v on an array of structs
            from cupric.compiler.lowering.memory import store_struct_field
            store_struct_field(self, target, value)
        else:
            raise self.error(target, "internal error: unsupported assignment target")

    def store_element(self, at: ArrayType, ptr: Value, value: KValue, node) -> None:
        v = self.convert(value, at.dtype, node).value
        if isinstance(at.dtype, StructType):  # shared/local arrays of structs
            self.b.store(v, ptr, align=at.dtype.align)
            return
        if at.dtype.kind == "b":
            v = self.b.cast("zext", v, ll.i8)
        elif is_bf16(at.dtype):  # held as f32, stored as its 16 bits
            from cupric.compiler.lowering.half import bf16_store_value
            v = bf16_store_value(self, v)
        self.b.store(v, ptr, align=at.dtype.itemsize)

    def load_element(self, at: ArrayType, ptr: Value) -> KValue:
        invariant = self.mcg.invariant_node() if at.readonly else None
        if isinstance(at.dtype, StructType):
            return KValue(at.dtype, [self.b.load(ptr, align=at.dtype.align,
                                                 invariant=invariant)])
        v = self.b.load(ptr, align=at.dtype.itemsize, invariant=invariant)
        if at.dtype.kind == "b":
            v = self.b.icmp("ne", v, const_int(ll.i8, 0))
        elif is_bf16(at.dtype):
            from cupric.compiler.lowering.half import bf16_load_value
            v = bf16_load_value(self, v)
        return KValue(at.dtype, [v])

    def augassign(self, s: ast.AugAssign) -> None:
        rt = self.typed.types[s]
        target = s.target
        if isinstance(target, ast.Name):
            current = self.load_local(target.id)
            result = self.arith(s, s.op, current, self.expr(s.value), rt, target, s.value)
            self.store_target(target, result)
            return
        array = self.expr(target.value)
        ptr = self.element_pointer(array, target)  # indices evaluated once, as Python
        current = self.load_element(array.type, ptr)
        result = self.arith(s, s.op, current, self.expr(s.value), rt, target, s.value)
        self.store_element(array.type, ptr, result, target)

    def if_stmt(self, s: ast.If) -> None:
        cond = self.truth(self.expr(s.test))
        then = self.fn.append_block("if.then")
        merge = self.fn.append_block("if.end")
        other = self.fn.append_block("if.else") if s.orelse else merge
        self.b.cbranch(cond, then, other)
        self.b.position_at_end(then)
        self.block(s.body)
        if not self.b.terminated:
            self.b.br(merge)
        if s.orelse:
            self.b.position_at_end(other)
            self.block(s.orelse)
            if not self.b.terminated:
                self.b.br(merge)
        self.b.position_at_end(merge)

    def while_stmt(self, s: ast.While) -> None:
        head = self.fn.append_block("while.cond")
        body = self.fn.append_block("while.body")
        end = self.fn.append_block("while.end")
        self.b.br(head)
        self.b.position_at_end(head)
        self.set_location(s)
        self.b.cbranch(self.truth(self.expr(s.test)), body, end)
        self.b.position_at_end(body)
        self.loops.append(_Loop(head, end))
        self.block(s.body)
        self.loops.pop()
        if not self.b.terminated:
            self.b.br(head)
        self.b.position_at_end(end)

    def for_stmt(self, s: ast.For) -> None:
        call = s.iter
        t = materialize(self.typed.types[call])
        args = [self.convert(self.expr(a), t, a).value for a in call.args]
        zero_ = const_int(scalar_lltype(t), 0)
        one = const_int(scalar_lltype(t), 1)
        if len(args) == 1:
            start, stop, step = zero_, args[0], one
        elif len(args) == 2:
            start, stop, step = args[0], args[1], one
        else:
            start, stop, step = args
        stride = self.typed.targets.get(call)
        if stride is not None:  # for i in grid_stride(n): start grid(1), step gridsize(1)
            start, step = stride[1](self, t)
        lt_pred = "slt" if t.is_signed else "ult"
        gt_pred = "sgt" if t.is_signed else "ugt"
        counter = self.entry_builder.alloca(scalar_lltype(t), hint="range")
        self.b.store(start, counter)
        head = self.fn.append_block("for.cond")
        body = self.fn.append_block("for.body")
        incr = self.fn.append_block("for.incr")
        end = self.fn.append_block("for.end")
        self.b.br(head)
        self.b.position_at_end(head)
        i = self.b.load(counter)
        step_value = self.typed.consts.get(call.args[2]) if len(call.args) == 3 else 1
        if isinstance(step_value, int) or not t.is_signed:
            pred = gt_pred if isinstance(step_value, int) and step_value < 0 else lt_pred
            cond = self.b.icmp(pred, i, stop)
        else:  # sign of the step known only at run time
            up = self.b.icmp(lt_pred, i, stop)
            down = self.b.icmp(gt_pred, i, stop)
            positive = self.b.icmp("sgt", step, zero_)
            cond = self.b.select(positive, up, down)
        self.b.cbranch(cond, body, end)
        self.b.position_at_end(body)
        self.store_target(s.target, KValue(t, [i]))
        self.loops.append(_Loop(incr, end))
        self.block(s.body)
        self.loops.pop()
        if not self.b.terminated:
            self.b.br(incr)
        self.b.position_at_end(incr)
        self.set_location(s)
        self.b.store(self.b.binop("add", self.b.load(counter), step), counter)
        self.b.br(head)
        self.b.position_at_end(end)

    def return_stmt(self, s: ast.Return) -> None:
        rt = self.typed.return_type
        if s.value is None or rt == NONE:
            if s.value is not None:
                self.expr(s.value)
            self._return_default()
        else:
            value = self.convert(self.expr(s.value), rt, s.value)
            ret = self.return_lltype()
            if len(value.vals) == 1:
                self.b.ret(value.vals[0])
            else:
                agg = undef(ret)
                for k, v in enumerate(value.vals):
                    agg = self.b.insertvalue(agg, v, k)
                self.b.ret(agg)
        self._dead_block()

    # -- locals --------------------------------------------------------------------------

    def load_local(self, name: str) -> KValue:
        t = self.typed.var_types[name]
        return KValue(t, [self.b.load(slot) for slot in self.slots[name]])

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node, want: Type | None = None) -> KValue:
        """Lower `node`; with `want`, converted to that type (constants are emitted
        directly in it, checking that they fit)."""
        consts = self.typed.consts
        if node in consts:
            if want is not None:
                return self.constant(consts[node], want, node)
            t = self.typed.types[node]
            literal = consts[node]
            if isinstance(t, WeakType) and isinstance(literal, int) and literal >= 1 << 63:
                # A literal of u64 range: consumers re-emit it in their own type (where it
                # must fit); this placeholder holds its 64 bits.
                literal -= 1 << 64
            value = self.constant(literal, materialize(t), node)
            # A weak literal keeps its weak type: the consumer re-emits it in the type
            # the operation computes in (checking that it fits there).
            return KValue(t, value.vals) if isinstance(t, WeakType) else value
        method = getattr(self, "_e_" + type(node).__name__)
        value = method(node)
        if want is not None:
            value = self.convert(value, want, node)
        return value

    def constant(self, value, t: Type, node) -> KValue:
        if isinstance(t, TupleType):
            if not isinstance(value, tuple) or len(value) != len(t.elements):
                raise self.error(node, f"cannot use constant {value!r} as {t!r}")
            vals = []
            for v, e in zip(value, t.elements):
                vals += self.constant(v, e, node).vals
            return KValue(t, vals)
        if isinstance(t, WeakType):
            t = t.default
        if not isinstance(t, ScalarType):
            raise self.error(node, f"cannot use constant {value!r} as {_d(t)}")
        lt = scalar_lltype(t)
        if t.kind == "b":
            return KValue(t, [const_int(ll.i1, 1 if value else 0)])
        if t.kind == "f":
            if is_bf16(t):  # rounded once, held as the f32 of the same value
                return KValue(t, [const_float(lt, float(t(value)))])
            return KValue(t, [const_float(lt, float(value))])
        if isinstance(value, float):
            # A float constant used as an integer (e.g. i32(2.7)): truncate like the cast.
            if value != value or value in (float("inf"), float("-inf")):
                raise self.error(node, f"cannot convert {value} to {t!r}")
            value = int(value)
        value = int(value)
        lo, hi = int(t.min_value()), int(t.max_value())
        if not lo <= value <= hi and not isinstance(value, bool):
            raise self.error(node, f"the constant {value} does not fit in {t!r} "
                             f"({lo}..{hi})", hint=_literal_hint(value, t))
        return KValue(t, [const_int(lt, value)])

    def _e_Name(self, node: ast.Name) -> KValue:
        if node.id in self.slots:
            return self.load_local(node.id)
        target = self.typed.targets.get(node)
        if target is not None:  # a module-level array in constant memory
            return self.call_target(node, target, [], [])
        return KValue(self.typed.types[node], [])

    def _e_Attribute(self, node: ast.Attribute) -> KValue:
        target = self.typed.targets.get(node)
        if target is not None:
            return self.call_target(node, target, [], [])
        t = self.typed.types[node]
        if isinstance(t, ObjectType):
            return KValue(t, [])
        base = self.expr(node.value)
        bt = base.type
        if isinstance(bt, ArrayType):
            if node.attr == "shape":
                return KValue(t, [base.shape(k) for k in range(bt.ndim)])
            if node.attr == "strides":
                size = const_int(ll.i64, bt.dtype.itemsize)
                return KValue(t, [self.b.binop("mul", base.stride(k), size)
                                  for k in range(bt.ndim)])
            if node.attr == "size":
                return KValue(i64, [self.array_size(base)])
        if isinstance(bt, VectorType):
            from cupric.compiler.lowering.vector import field_index
            return base.element(field_index(bt, node.attr))
        if isinstance(bt, StructType):
            ft = bt.fields[node.attr][0]
            v = self.b.extractvalue(base.value, struct_field_index(bt, node.attr))
            if ft.kind == "b":
                v = self.b.icmp("ne", v, const_int(ll.i8, 0))
            return KValue(ft, [v])
        raise self.error(node, "internal error: attribute without codegen")

    def array_size(self, array: KValue) -> Value:
        size = const_int(ll.i64, 1)
        for k in range(array.type.ndim):
            size = array.shape(k) if k == 0 else self.b.binop("mul", size, array.shape(k))
        return size

    def element_pointer(self, array: KValue, node: ast.Subscript) -> Value:
        """Address of `array[indices]`: contiguous layouts index with the shapes (unit
        innermost stride known to the optimizer), 'A' with the strides."""
        index = node.slice
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        idx = [self.to_i64(self.expr(item)) for item in items]
        name = node.value.id if isinstance(node.value, ast.Name) else None
        return self.element_address(array, idx, node, name)

    def element_address(self, array: KValue, idx: list[Value], node=None,
                        name: str | None = None) -> Value:
        """Address of the element at i64 indices `idx` (also used by atomics); with
        bounds checking on, each index is checked against the shape first."""
        at = array.type
        if self.mcg.bounds_check:
            from cupric.compiler.lowering.checks import check_bounds
            check_bounds(self, array, idx, node, name)
        b = self.b
        n = at.ndim
        if n == 1 and at.layout in ("C", "F"):
            offset = idx[0]
        elif at.layout == "C":
            offset = idx[0]
            for k in range(1, n):
                offset = b.binop("add", b.binop("mul", offset, array.shape(k)), idx[k])
        elif at.layout == "F":
            offset = idx[n - 1]
            for k in range(n - 2, -1, -1):
                offset = b.binop("add", b.binop("mul", offset, array.shape(k)), idx[k])
        else:
            offset = None
            for k in range(n):
                term = b.binop("mul", idx[k], array.stride(k))
                offset = term if offset is None else b.binop("add", offset, term)
        return b.gep(array.data, [offset], inbounds=True, result_type=element_pointer_type(at))

    def to_i64(self, kv: KValue) -> Value:
        t = kv.type
        v = kv.value
        if isinstance(t, WeakType) or t == i64:
            return v
        if t.bits < 64:
            return self.b.cast("sext" if t.is_signed else "zext", v, ll.i64)
        return v  # u64: same bits

    def _e_Subscript(self, node: ast.Subscript) -> KValue:
        base = self.expr(node.value)
        if isinstance(base.type, TupleType):
            index = self.typed.consts[node.slice]
            if index < 0:
                index += len(base.type.elements)
            return base.element(index)
        return self.load_element(base.type, self.element_pointer(base, node))

    def _e_Tuple(self, node: ast.Tuple) -> KValue:
        t = self.typed.types[node]
        vals = []
        for elt, et in zip(node.elts, t.elements):
            vals += self.expr(elt, et).vals
        return KValue(t, vals)

    def _e_BinOp(self, node: ast.BinOp) -> KValue:
        rt = self.typed.types[node]
        return self.arith(node, node.op, self.expr(node.left), self.expr(node.right), rt,
                          node.left, node.right)

    def _weak_to(self, kv: KValue, t: Type, node) -> KValue:
        if isinstance(kv.type, WeakType) and node in self.typed.consts:
            return self.constant(self.typed.consts[node], t, node)
        return self.convert(kv, t, node)  # a weak non-constant (`0 if c else 1`) converts

    def arith(self, node, op, left: KValue, right: KValue, rt: Type, lnode, rnode) -> KValue:
        """`left op right` computed in type `rt` (the typer's promoted type); a weak
        `rt` computes in its default type and labels the result weak."""
        if isinstance(rt, WeakType):
            result = self.arith(node, op, left, right, rt.default, lnode, rnode)
            return KValue(rt, result.vals)
        kind = type(op)
        if isinstance(rt, VectorType):  # elementwise (cupric.compiler.lowering.vector)
            from cupric.compiler.lowering.vector import vector_arith
            return vector_arith(self, node, op, left, right, rt, lnode, rnode)
        if is_bf16(rt):  # cupric.compiler.lowering.half: native bf16 instructions
            from cupric.compiler.lowering.half import bf16_arith
            return bf16_arith(self, node, op, left, right, rt, lnode, rnode)
        if kind is ast.Pow:
            return self.power(node, left, right, rt, lnode, rnode)
        a = self._weak_to(left, rt, lnode).value
        c = self._weak_to(right, rt, rnode).value
        b = self.b
        if rt.kind == "f":
            narrow = rt.bits == 16  # half arithmetic goes through f32
            if narrow:
                a, c = b.cast("fpext", a, ll.float), b.cast("fpext", c, ll.float)
            flags = self.mcg.fast_math_flags
            if kind is ast.Add:
                r = b.binop("fadd", a, c, flags)
            elif kind is ast.Sub:
                r = b.binop("fsub", a, c, flags)
            elif kind is ast.Mult:
                r = b.binop("fmul", a, c, flags)
            elif kind is ast.Div:
                r = b.binop("fdiv", a, c, flags)
            elif kind is ast.FloorDiv:
                r = self.float_floor_div(a, c)
            elif kind is ast.Mod:
                r = self.float_mod(a, c)
            else:
                raise self.error(node, f"internal error: float op {kind.__name__}")
            if narrow:
                r = b.cast("fptrunc", r, ll.half)
            return KValue(rt, [r])
        signed = rt.kind == "i"
        opcode = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.BitAnd: "and",
                  ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "shl",
                  ast.RShift: "ashr" if signed else "lshr"}.get(kind)
        if opcode is not None:
            return KValue(rt, [b.binop(opcode, a, c)])
        if kind is ast.FloorDiv:
            if not signed:
                return KValue(rt, [b.binop("udiv", a, c)])
            if self.mcg.c_division:
                return KValue(rt, [b.binop("sdiv", a, c)])
            return KValue(rt, [self.floor_div(a, c)])
        if kind is ast.Mod:
            if not signed:
                return KValue(rt, [b.binop("urem", a, c)])
            if self.mcg.c_division:
                return KValue(rt, [b.binop("srem", a, c)])
            return KValue(rt, [self.floor_mod(a, c)])
        raise self.error(node, f"internal error: integer op {kind.__name__}")

    def floor_div(self, a: Value, c: Value) -> Value:
        """Python's a // c: the truncated quotient, minus one when the remainder is
        nonzero and its sign differs from the divisor's."""
        b = self.b
        q = b.binop("sdiv", a, c)
        r = b.binop("srem", a, c)
        zero_ = const_int(a.type, 0)
        adjust = b.binop("and", b.icmp("ne", r, zero_),
                         b.icmp("slt", b.binop("xor", r, c), zero_))
        return b.binop("sub", q, b.cast("zext", adjust, a.type))

    def floor_mod(self, a: Value, c: Value) -> Value:
        """Python's a % c: the remainder takes the sign of the divisor."""
        b = self.b
        r = b.binop("srem", a, c)
        zero_ = const_int(a.type, 0)
        adjust = b.binop("and", b.icmp("ne", r, zero_),
                         b.icmp("slt", b.binop("xor", r, c), zero_))
        return b.select(adjust, b.binop("add", r, c), r)

    def float_floor_div(self, a: Value, c: Value) -> Value:
        """Python's float a // c, exactly: the quotient of a - fmod(a, c) (an exact
        multiple of c), corrected like the remainder and rounded to the nearest integer,
        so 0.3 // 0.1 is 2.0 as in Python (floor(0.3 / 0.1) would give 3.0)."""
        b = self.b
        t = a.type
        zero_ = const_float(t, 0.0)
        mod = self.libdevice("fmod", t, [a, c])
        div = b.binop("fdiv", b.binop("fsub", a, mod), c)
        differ = b.binop("xor", b.fcmp("olt", mod, zero_), b.fcmp("olt", c, zero_))
        adjust = b.binop("and", b.fcmp("une", mod, zero_), differ)
        div = b.select(adjust, b.binop("fsub", div, const_float(t, 1.0)), div)
        floor = self.libdevice("floor", t, [div])
        up = b.fcmp("ogt", b.binop("fsub", div, floor), const_float(t, 0.5))
        rounded = b.select(up, b.binop("fadd", floor, const_float(t, 1.0)), floor)
        # A zero quotient keeps the sign of a / c (Python: -0.0 for -1.0 // 3.0... 0.0).
        signed_zero = self.libdevice("copysign", t, [zero_, b.binop("fdiv", a, c)])
        return b.select(b.fcmp("une", div, zero_), rounded, signed_zero)

    def float_mod(self, a: Value, c: Value) -> Value:
        """Python's float a % c: the remainder takes the divisor's sign, a zero one too."""
        b = self.b
        r = self.libdevice("fmod", a.type, [a, c])
        zero_ = const_float(a.type, 0.0)
        nonzero = b.fcmp("une", r, zero_)
        differ = b.binop("xor", b.fcmp("olt", r, zero_), b.fcmp("olt", c, zero_))
        r = b.select(b.binop("and", nonzero, differ), b.binop("fadd", r, c), r)
        signed_zero = self.libdevice("copysign", a.type, [zero_, c])
        return b.select(b.fcmp("oeq", r, zero_), signed_zero, r)

    def power(self, node, left: KValue, right: KValue, rt: Type, lnode, rnode) -> KValue:
        b = self.b
        exponent = self.typed.consts.get(rnode)
        if isinstance(exponent, int) and not isinstance(exponent, bool) and 0 <= exponent <= 4:
            base = self._weak_to(left, rt, lnode)
            if exponent == 0:
                return self.constant(1, rt, node)
            result = base
            for _ in range(exponent - 1):
                result = self.arith(node, ast.Mult(), result, base, rt, None, None)
            return result
        if rt.kind == "f":
            a = self._weak_to(left, rt, lnode).value
            narrow = rt.bits == 16
            if narrow:
                a = b.cast("fpext", a, ll.float)
            rtype = right.type
            if isinstance(rtype, ScalarType) and rtype.is_integer and rtype.bits <= 32:
                n = self.convert(right, _i32(), rnode).value
                name = "__nv_powif" if a.type == ll.float else "__nv_powi"
                r = self.mcg.call_external(b, name, a.type, [a, n])
            else:
                c = self._weak_to(right, rt, rnode).value
                if narrow:
                    c = b.cast("fpext", c, ll.float)
                r = self.libdevice("pow", a.type, [a, c])
            if narrow:
                r = b.cast("fptrunc", r, ll.half)
            return KValue(rt, [r])
        # Integer ** integer: square-and-multiply; negative exponents give 0 (documented).
        a = self._weak_to(left, rt, lnode).value
        e = self._weak_to(right, rt, rnode).value
        lt = a.type
        acc_slot = self.entry_builder.alloca(lt, hint="pow.acc")
        base_slot = self.entry_builder.alloca(lt, hint="pow.base")
        exp_slot = self.entry_builder.alloca(lt, hint="pow.exp")
        b.store(const_int(lt, 1), acc_slot)
        b.store(a, base_slot)
        b.store(e, exp_slot)
        head = self.fn.append_block("pow.cond")
        body = self.fn.append_block("pow.body")
        end = self.fn.append_block("pow.end")
        b.br(head)
        b.position_at_end(head)
        ev = b.load(exp_slot)
        pred = "sgt" if rt.kind == "i" else "ugt"
        b.cbranch(b.icmp(pred, ev, const_int(lt, 0)), body, end)
        b.position_at_end(body)
        acc = b.load(acc_slot)
        base = b.load(base_slot)
        odd = b.icmp("ne", b.binop("and", ev, const_int(lt, 1)), const_int(lt, 0))
        b.store(b.select(odd, b.binop("mul", acc, base), acc), acc_slot)
        b.store(b.binop("mul", base, base), base_slot)
        b.store(b.binop("lshr", ev, const_int(lt, 1)), exp_slot)
        b.br(head)
        b.position_at_end(end)
        ev = b.load(exp_slot)
        acc = b.load(acc_slot)
        if rt.kind == "i":
            negative = b.icmp("slt", e, const_int(lt, 0))
            acc = b.select(negative, const_int(lt, 0), acc)
        return KValue(rt, [acc])

    def _e_UnaryOp(self, node: ast.UnaryOp) -> KValue:
        kind = type(node.op)
        operand = self.expr(node.operand)
        t = self.typed.types[node]
        b = self.b
        if kind is ast.Not:
            return KValue(bool_, [b.binop("xor", self.truth(operand),
                                          const_int(ll.i1, 1))])
        if isinstance(t, VectorType):
            from cupric.compiler.lowering.vector import vector_unary
            return vector_unary(self, node, operand, t)
        # A weak (literal-typed) operand that is not a constant, e.g. -(0 if c else 1),
        # computes in its default type and stays weak for the consumer.
        ct = materialize(t)
        v = self.convert(operand, ct, node).value
        if kind is ast.UAdd:
            return KValue(t, [v])
        if kind is ast.Invert:
            return KValue(t, [b.binop("xor", v, const_int(v.type, -1))])
        if ct.kind == "f":
            return KValue(t, [b.binop("fsub", const_float(v.type, -0.0), v)])
        return KValue(t, [b.binop("sub", const_int(v.type, 0), v)])

    def _e_BoolOp(self, node: ast.BoolOp) -> KValue:
        """Short-circuit: later operands run only when the earlier ones did not decide."""
        is_and = isinstance(node.op, ast.And)
        b = self.b
        slot = self.entry_builder.alloca(ll.i1, hint="boolop")
        end = self.fn.append_block("bool.end")
        for k, value in enumerate(node.values):
            v = self.truth(self.expr(value))
            b.store(v, slot)
            if k == len(node.values) - 1:
                b.br(end)
                break
            nxt = self.fn.append_block("bool.next")
            if is_and:
                b.cbranch(v, nxt, end)
            else:
                b.cbranch(v, end, nxt)
            b.position_at_end(nxt)
        b.position_at_end(end)
        return KValue(bool_, [b.load(slot)])

    def compare(self, op, left: KValue, right: KValue, lnode, rnode, node) -> Value:
        lt, rt = left.type, right.type
        consts = self.typed.consts
        if isinstance(lt, WeakType) and isinstance(rt, WeakType) and lnode in consts \
                and rnode in consts:
            a, c = consts[lnode], consts[rnode]
            result = {ast.Eq: a == c, ast.NotEq: a != c, ast.Lt: a < c, ast.LtE: a <= c,
                      ast.Gt: a > c, ast.GtE: a >= c}[type(op)]
            return const_int(ll.i1, 1 if result else 0)
        from cupric.compiler.typing.promote import promote

        t = materialize(promote(lt, rt))
        a = self._weak_to(left, t, lnode).value
        c = self._weak_to(right, t, rnode).value
        if t.kind == "f":
            if a.type == ll.half:
                a, c = self.b.cast("fpext", a, ll.float), self.b.cast("fpext", c, ll.float)
            return self.b.fcmp(_FCMP[type(op)], a, c)
        table = _ICMP_SIGNED if t.kind == "i" else _ICMP_UNSIGNED
        return self.b.icmp(table[type(op)], a, c)

    def _e_Compare(self, node: ast.Compare) -> KValue:
        b = self.b
        if len(node.ops) == 1:
            left = self.expr(node.left)
            right = self.expr(node.comparators[0])
            return KValue(bool_, [self.compare(node.ops[0], left, right, node.left,
                                               node.comparators[0], node)])
        # a < b < c: each operand evaluated once, stop at the first false comparison.
        slot = self.entry_builder.alloca(ll.i1, hint="cmp")
        end = self.fn.append_block("cmp.end")
        left, lnode = self.expr(node.left), node.left
        for k, (op, rnode) in enumerate(zip(node.ops, node.comparators)):
            right = self.expr(rnode)
            v = self.compare(op, left, right, lnode, rnode, node)
            b.store(v, slot)
            if k == len(node.ops) - 1:
                b.br(end)
                break
            nxt = self.fn.append_block("cmp.next")
            b.cbranch(v, nxt, end)
            b.position_at_end(nxt)
            left, lnode = right, rnode
        b.position_at_end(end)
        return KValue(bool_, [b.load(slot)])

    def _e_IfExp(self, node: ast.IfExp) -> KValue:
        t = self.typed.types[node]
        b = self.b
        slots = self._alloca_for(t)
        then = self.fn.append_block("ifexp.then")
        other = self.fn.append_block("ifexp.else")
        end = self.fn.append_block("ifexp.end")
        b.cbranch(self.truth(self.expr(node.test)), then, other)
        for block, value in ((then, node.body), (other, node.orelse)):
            b.position_at_end(block)
            self._store_slots(b, slots, self.expr(value, t))
            b.br(end)
        b.position_at_end(end)
        return KValue(t, [b.load(s) for s in slots])

    def _e_Constant(self, node) -> KValue:
        return KValue(NONE, [])  # None; numbers are in typed.consts

    def _e_Call(self, node: ast.Call) -> KValue:
        target = self.typed.targets[node]
        if target[0] == "custom":  # print(...) and the like lower their own arguments
            return target[1](self, node)
        args = [self.expr(a) for a in node.args]
        return self.call_target(node, target, args, node.args)

    def call_target(self, node, target, args: list[KValue], arg_nodes) -> KValue:
        kind = target[0]
        b = self.b
        if kind == "custom":  # a value the lowering tables build (constant arrays, ...)
            return target[1](self, node)
        if kind == "cast":
            value = args[0]
            literal = self.typed.consts.get(arg_nodes[0])
            if isinstance(literal, int) and isinstance(value.type, WeakType):
                # u64(0x9E3779B97F4A7C15), i32(0xFFFFFFFF): the literal itself, converted
                # as the cast converts (integers wrap), not first squeezed into an i64.
                if target[1].kind == "f":
                    return self.constant(literal, target[1], node)
                from cupric.compiler.typing.semantics import convert
                return self.constant(int(convert(literal, target[1])), target[1], node)
            if isinstance(value.type, WeakType):  # a literal, or `1 if c else 2`
                value = self._weak_to(value, value.type.default, arg_nodes[0])
            return self.convert(value, target[1], node)
        if kind == "math":
            return self.math_call(node, target[1], target[2], args, arg_nodes)
        if kind == "intrinsic":
            rule, call = target[1], target[2]
            return rule.lower(self, call, args)
        if kind == "device":
            return self.device_call(node, target[1], args, arg_nodes)
        if kind == "builtin":
            name = target[1]
            if name == "len":
                return KValue(i64, [args[0].shape(0)])
            t = target[2]
            ct = materialize(t)  # weak results compute in their default type
            vals = [self._weak_to(a, ct, n).value for a, n in zip(args, arg_nodes)]
            if name == "abs":
                v = vals[0]
                if ct.kind == "f":
                    return KValue(t, [self.libdevice("fabs", v.type, [v])])
                if ct.kind == "u":
                    return KValue(t, [v])
                neg = b.icmp("slt", v, const_int(v.type, 0))
                return KValue(t, [b.select(neg, b.binop("sub", const_int(v.type, 0), v), v)])
            result = vals[0]
            op = ast.Lt() if name == "min" else ast.Gt()
            for v in vals[1:]:
                better = self.compare(op, KValue(ct, [v]), KValue(ct, [result]), None, None,
                                      node)
                result = b.select(better, v, result)
            return KValue(t, [result])
        raise self.error(node, f"internal error: call target {kind}")

    def math_call(self, node, mf, ft: ScalarType, args, arg_nodes) -> KValue:
        b = self.b
        compute = f32 if ft.bits == 16 else ft
        vals = [self._weak_to(a, ft, n) for a, n in zip(args, arg_nodes)]
        vals = [self.convert(v, compute, node).value for v in vals]
        name = mf.f32 if compute.bits == 32 else mf.f64
        if mf.returns == "bool":
            r = self.mcg.call_external(b, name, ll.i32, vals)
            return KValue(bool_, [b.icmp("ne", r, const_int(ll.i32, 0))])
        r = self.mcg.call_external(b, name, vals[0].type, vals)
        if mf.returns == "int":
            return KValue(i64, [b.cast("fptosi", r, ll.i64)])
        result = KValue(compute, [r])
        return self.convert(result, ft, node)

    def libdevice(self, base: str, lltype: ll.LLType, args: list[Value]) -> Value:
        name = f"__nv_{base}f" if lltype == ll.float else f"__nv_{base}"
        return self.mcg.call_external(self.b, name, lltype, args)

    def device_call(self, node, callee, args: list[KValue], arg_nodes) -> KValue:
        name, ftype = self.mcg.device_function(callee)
        flat = []
        for a, n, t in zip(args, arg_nodes, callee.arg_types):
            flat += self._weak_to(a, t, n).vals
        r = self.b.call(name, ftype, flat)
        rt = callee.return_type
        widths = flat_lltypes(rt)
        if not widths:
            return KValue(NONE, [])
        if len(widths) == 1:
            return KValue(rt, [r])
        return KValue(rt, [self.b.extractvalue(r, k) for k in range(len(widths))])

    # -- conversions ---------------------------------------------------------------------

    def truth(self, kv: KValue) -> Value:
        """The i1 truth value of a scalar (Python's bool(x))."""
        t = kv.type
        if isinstance(t, WeakType):
            t = t.default
        v = kv.value
        if t.kind == "b":
            return v
        if t.kind == "f":
            return self.b.fcmp("une", v, const_float(v.type, 0.0))
        return self.b.icmp("ne", v, const_int(v.type, 0))

    def convert(self, kv: KValue, to: Type, node=None) -> KValue:
        """`kv` as type `to`: C conversions between scalars (integers wrap; floats to
        integers truncate toward zero), element-wise for tuples."""
        src = kv.type
        if src == to:
            return kv
        if isinstance(to, TupleType):
            if not isinstance(src, TupleType) or len(src.elements) != len(to.elements):
                raise self.error(node, f"cannot convert {_d(src)} to {_d(to)}")
            vals = []
            for k, e in enumerate(to.elements):
                vals += self.convert(kv.element(k), e, node).vals
            return KValue(to, vals)
        if isinstance(to, ArrayType) and isinstance(src, ArrayType):
            return KValue(to, kv.vals)
        if not isinstance(to, ScalarType) or not isinstance(src, (ScalarType, WeakType)):
            raise self.error(node, f"cannot convert {_d(src)} to {_d(to)}")
        if is_bf16(to) or is_bf16(src):
            from cupric.compiler.lowering.half import bf16_convert
            return bf16_convert(self, kv, to, node)
        if isinstance(src, WeakType):
            src = src.default
        b = self.b
        v = kv.value
        dst = scalar_lltype(to)
        if to.kind == "b":
            return KValue(to, [self.truth(KValue(src, [v]))])
        if src.kind == "b":
            if to.kind == "f":
                return KValue(to, [b.cast("uitofp", v, dst)])
            return KValue(to, [b.cast("zext", v, dst)])
        if src.kind == "f" and to.kind == "f":
            if to.bits == src.bits:
                return KValue(to, [v])
            return KValue(to, [b.cast("fpext" if to.bits > src.bits else "fptrunc", v, dst)])
        if src.kind == "f":
            return KValue(to, [b.cast("fptosi" if to.kind == "i" else "fptoui", v, dst)])
        if to.kind == "f":
            return KValue(to, [b.cast("sitofp" if src.kind == "i" else "uitofp", v, dst)])
        if to.bits == src.bits:
            return KValue(to, [v])
        if to.bits < src.bits:
            return KValue(to, [b.cast("trunc", v, dst)])
        return KValue(to, [b.cast("sext" if src.kind == "i" else "zext", v, dst)])


def _literal_hint(value: int, t: ScalarType) -> str:
    """What to write instead of a literal that does not fit the type `t` it is used in."""
    from cupric.compiler.typing.semantics import convert
    wrapped = int(convert(value, t))
    hint = (f"{t!r}({value}) takes its low {t.bits} bits ({wrapped}), as a C cast "
            f"would")
    if t.kind == "i" and 0 <= value < 1 << 64:
        unsigned = f"u{max(t.bits, 64 if value >= 1 << t.bits else t.bits)}"
        hint += f"; or compute in {unsigned}: cast the other operand, e.g. {unsigned}(x)"
    return hint


def _i32():
    from cupric.types import i32
    return i32


def _d(t) -> str:
    return repr(t)


