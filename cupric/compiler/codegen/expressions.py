"""Expressions of kernel code as NVVM IR: the dispatch by node kind, constants (emitted in
the type their consumer computes in, checked to fit), names, attributes, tuples,
subscripts, conditional expressions, and the C conversions between scalar types."""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue, scalar_lltype, struct_field_index
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_float, const_int
from cupric.compiler.typing.ktypes import (NONE, ObjectType, StructType, TupleType, VectorType,
                                           WeakType, materialize)
from cupric.types import ArrayType, ScalarType, Type, i64, is_bf16

__all__ = ["ExpressionCodegen"]


class ExpressionCodegen:
    """Expressions and conversions of `FunctionCodegen` (cupric.compiler.codegen.function)."""

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


def _d(t) -> str:
    return repr(t)


