"""Typing of operators: arithmetic and bitwise binary operators (two literals fold to a
constant with the run-time semantics), unary operators, and/or, comparisons and
conditional expressions; operands promote as `promote` says.
"""

from __future__ import annotations

import ast
import operator

import numpy as np

from cupric.compiler.typing.common import UNKNOWN, _describe, _is_float
from cupric.compiler.typing.ktypes import WEAK_FLOAT, VectorType, WeakType, is_scalar, materialize
from cupric.compiler.typing.promote import PromotionError, promote, unify
from cupric.types import Type, bool_, f64, i64

_BINOP_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                 ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>",
                 ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.MatMult: "@"}
_FOLD = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
         ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
         ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
         ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}


class OperatorTyping:
    """The `Typer`'s operators (a mixin: `self` is the Typer)."""

    def _binop_type(self, node, op, lt: Type, rt: Type, lnode, rnode) -> Type:
        if lt is UNKNOWN or rt is UNKNOWN:
            return UNKNOWN
        if isinstance(lt, VectorType) or isinstance(rt, VectorType):
            from cupric.compiler.lowering.vector import vector_binop_type
            return vector_binop_type(self, node, op, lt, rt, lnode, rnode)
        sym = _BINOP_SYMBOL.get(type(op), "?")
        if type(op) is ast.MatMult:
            raise self.error(node, "the @ operator is not supported in kernels")
        for t, n in ((lt, lnode), (rt, rnode)):
            if not is_scalar(t):
                raise self.error(n, f"unsupported operand for {sym}: {_describe(t)}",
                                 hint="arithmetic works on numbers and bools")
        if isinstance(lt, WeakType) and isinstance(rt, WeakType):
            a, b = self.fn.consts.get(lnode), self.fn.consts.get(rnode)
            if a is not None and b is not None:
                try:
                    value = _fold(type(op), a, b)
                except (ZeroDivisionError, OverflowError, ValueError) as exc:
                    raise self.error(node, f"constant expression fails: {exc}") from None
                return self._const(node, value)
        try:
            t = promote(lt, rt)
        except PromotionError as exc:
            raise self.error(node, f"unsupported operands for {sym}: {exc}") from None
        kind = type(op)
        if kind in (ast.BitAnd, ast.BitOr, ast.BitXor):
            if _is_float(t):
                raise self.error(node, f"{sym} needs integers or bools, not {_describe(t)}")
            return materialize(t)
        if kind in (ast.LShift, ast.RShift):
            if _is_float(t) or t == bool_:
                raise self.error(node, f"{sym} needs integers, not {_describe(t)}")
            return materialize(t)
        if t == bool_:
            t = i64  # True + True == 2, as in Python
        if isinstance(t, WeakType):
            # Literal-typed but not constant (`0 if c else 1`): the result stays weak, as
            # the same expression on Python numbers would be a plain int or float.
            return WEAK_FLOAT if kind is ast.Div else t
        if kind is ast.Div and not _is_float(t):
            return f64
        return materialize(t)

    def _e_BinOp(self, node: ast.BinOp) -> Type:
        lt = self.expr(node.left)
        rt = self.expr(node.right)
        return self._binop_type(node, node.op, lt, rt, node.left, node.right)

    def _e_UnaryOp(self, node: ast.UnaryOp) -> Type:
        t = self.expr(node.operand)
        if t is UNKNOWN:
            return UNKNOWN
        kind = type(node.op)
        if isinstance(t, VectorType) and kind in (ast.USub, ast.UAdd, ast.Invert):
            if kind is ast.Invert and t.elements[0].kind == "f":
                raise self.error(node, f"~ needs an integer vector, not {t!r}")
            return t
        if kind is ast.Not:
            if not is_scalar(t):
                raise self.error(node, f"'not' needs a bool or a number, not {_describe(t)}")
            return bool_
        if not is_scalar(t):
            raise self.error(node, f"unsupported operand for unary operator: {_describe(t)}")
        value = self.fn.consts.get(node.operand)
        if kind is ast.Invert:
            if t == bool_ or _is_float(t):
                raise self.error(node, f"~ needs an integer, not {_describe(t)}",
                                 hint="use 'not' for booleans")
            if isinstance(t, WeakType) and value is not None:
                return self._const(node, ~value)
            return t
        if isinstance(t, WeakType) and value is not None:
            return self._const(node, -value if kind is ast.USub else +value)
        return i64 if t == bool_ else t

    def _e_BoolOp(self, node: ast.BoolOp) -> Type:
        for v in node.values:
            t = self.expr(v)
            if t is not UNKNOWN and not is_scalar(t):
                raise self.error(v, f"and/or need bools or numbers, not {_describe(t)}")
        return bool_

    def _e_Compare(self, node: ast.Compare) -> Type:
        left = self.expr(node.left)
        lnode = node.left
        for op, right in zip(node.ops, node.comparators):
            rt = self.expr(right)
            if type(op) in (ast.Is, ast.IsNot, ast.In, ast.NotIn):
                raise self.error(node, "is / in comparisons are not supported in kernels",
                                 hint="compare numbers with == != < <= > >=")
            if left is not UNKNOWN and rt is not UNKNOWN:
                for t, n in ((left, lnode), (rt, right)):
                    if not is_scalar(t):
                        raise self.error(n, f"cannot compare {_describe(t)}")
                try:
                    if not (isinstance(left, WeakType) and isinstance(rt, WeakType)):
                        promote(left, rt)
                except PromotionError as exc:
                    raise self.error(node, f"cannot compare: {exc}") from None
            left, lnode = rt, right
        return bool_

    def _e_IfExp(self, node: ast.IfExp) -> Type:
        self._condition(node.test)
        a = self.expr(node.body)
        b = self.expr(node.orelse)
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        try:
            t = unify(a, b)
        except PromotionError as exc:
            raise self.error(node, f"the two branches have different types: {exc}") from None
        # Two literals stay weak, as Python's `0 if c else 1` is a plain int.
        return t if isinstance(t, WeakType) else materialize(t)


def _fold(op, a, b):
    """`a op b` of two literals, with the semantics the same expression has at run time
    (docs/kernel-language.md, "Semantics of arithmetic"): integers exactly (the result
    must then fit in 64 bits, where the run-time i64 would wrap), a negative integer power
    is 0, `/` divides the two values as f64, and anything with a float computes in f64
    (NaN and infinities instead of exceptions). Integer division by zero, undefined at
    run time, is refused here."""
    from cupric.compiler.typing import semantics as sem
    if isinstance(a, float) or isinstance(b, float) or op is ast.Div:
        x, y = np.float64(a), np.float64(b)
        with np.errstate(all="ignore"):
            if op is ast.Pow:
                return float(sem.power(x, y, f64))
            if op in (ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor):
                raise ValueError(f"{_BINOP_SYMBOL[op]} needs integers")
            return float(sem.binary(_BINOP_SYMBOL[op], x, y))
    if op is ast.Pow and b < 0:
        return 0  # as i64 ** i64 at run time (square-and-multiply)
    return _FOLD[op](a, b)
