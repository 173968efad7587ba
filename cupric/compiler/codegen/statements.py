"""Statements of a kernel or device function as NVVM IR: assignments (to locals, array
elements, struct fields), structured control flow as basic blocks (if, while, range
loops with Python's stepping rules, break and continue) and returns."""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue, scalar_lltype
from cupric.compiler.errors import each_statement
from cupric.compiler.ir.values import const_int, undef
from cupric.compiler.typing.ktypes import NONE, materialize

__all__ = ["StatementCodegen"]


class _Loop:
    __slots__ = ("continue_block", "break_block")

    def __init__(self, continue_block, break_block) -> None:
        self.continue_block = continue_block
        self.break_block = break_block


class StatementCodegen:
    """The statement half of `FunctionCodegen` (cupric.compiler.codegen.function), which
    supplies the state (`b`, `fn`, `typed`, `slots`, `loops`, ...) and the expressions."""

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
