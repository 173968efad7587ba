"""Python's operators as NVVM IR: arithmetic in the type the typer promoted to (floor
division and modulo with Python's signs, exact float `//`, integer powers by squaring),
comparisons (chained ones evaluate each operand once), unary operators and the
short-circuit `and` / `or`."""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_float, const_int
from cupric.compiler.typing.ktypes import VectorType, WeakType, materialize
from cupric.types import ScalarType, Type, bool_, i32, is_bf16

__all__ = ["OperatorCodegen"]

_ICMP_SIGNED = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "slt", ast.LtE: "sle", ast.Gt: "sgt",
                ast.GtE: "sge"}
_ICMP_UNSIGNED = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "ult", ast.LtE: "ule",
                  ast.Gt: "ugt", ast.GtE: "uge"}
# Ordered predicates except != (Python: nan != nan is True).
_FCMP = {ast.Eq: "oeq", ast.NotEq: "une", ast.Lt: "olt", ast.LtE: "ole", ast.Gt: "ogt",
         ast.GtE: "oge"}


class OperatorCodegen:
    """Operators of `FunctionCodegen` (cupric.compiler.codegen.function)."""

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
                n = self.convert(right, i32, rnode).value
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
