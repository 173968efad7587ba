"""Typing of statements: assignments (plain, augmented, annotated, tuple unpacking, into
array elements), if/while/for over range(...), return, assert and the statements the
kernel language refuses. The locals of a function are every name it binds anywhere
(`_assigned_names`), as in Python.
"""

from __future__ import annotations

import ast

import numpy as np

from cupric.compiler.errors import each_statement
from cupric.compiler.typing.common import (ALLOWED_STATEMENTS, UNKNOWN, _convertible,
                                           _describe)
from cupric.compiler.typing.ktypes import (NONE, WEAK_INT, ObjectType, TupleType, WeakType,
                                           is_scalar)
from cupric.compiler.typing.promote import PromotionError, promote, unify
from cupric.types import ArrayType, ScalarType, Type, scalar_from_dtype

_UNSUPPORTED_STMT = {
    ast.With: "with-statements", ast.Try: "try/except", ast.Raise: "raise",
    ast.Global: "global declarations", ast.Nonlocal: "nonlocal",
    ast.Delete: "del", ast.Import: "imports", ast.ImportFrom: "imports",
    ast.FunctionDef: "nested functions", ast.ClassDef: "class definitions",
    ast.AsyncFunctionDef: "async functions", ast.AsyncFor: "async for",
    ast.AsyncWith: "async with", ast.Match: "match statements",
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED_STMT[ast.TryStar] = "try/except*"


class StatementTyping:
    """The `Typer`'s statements (a mixin: `self` is the Typer)."""

    def _block(self, stmts) -> None:
        each_statement(self.src, stmts, self._stmt, "typing")

    def _stmt(self, s: ast.stmt) -> None:
        kind = type(s)
        if kind is ast.Assign:
            vt = self.expr(s.value)
            for target in s.targets:
                self._assign(target, vt, s.value)
        elif kind is ast.AugAssign:
            self._augassign(s)
        elif kind is ast.AnnAssign:
            self._annassign(s)
        elif kind is ast.If:
            self._condition(s.test)
            self._block(s.body)
            self._block(s.orelse)
        elif kind is ast.While:
            if s.orelse:
                raise self.error(s, "while ... else is not supported in kernels")
            self._condition(s.test)
            self.loop_depth += 1
            self._block(s.body)
            self.loop_depth -= 1
        elif kind is ast.For:
            self._for(s)
        elif kind in (ast.Break, ast.Continue):
            if not self.loop_depth:
                word = "break" if kind is ast.Break else "continue"
                raise self.error(s, f"'{word}' outside a loop")
        elif kind is ast.Return:
            t = NONE if s.value is None else self.expr(s.value)
            if isinstance(t, (ObjectType, ArrayType)) and not self.fn.is_kernel:
                raise self.error(s.value, f"device functions cannot return {_describe(t)}")
            self.returns.append((t, s))
        elif kind is ast.Expr:
            if isinstance(s.value, ast.Constant):
                return  # docstrings and stray constants do nothing
            self.expr(s.value)
        elif kind is ast.Pass:
            pass
        elif kind is ast.Assert:
            from cupric.compiler.lowering.io import type_assert
            type_assert(self, s)
        elif kind in _UNSUPPORTED_STMT:
            raise self.error(s, f"{_UNSUPPORTED_STMT[kind]} are not supported in kernels",
                             hint=f"kernels may use {ALLOWED_STATEMENTS}")
        else:
            raise self.error(s, f"this statement ({kind.__name__}) is not supported in "
                             "kernels", hint=f"kernels may use {ALLOWED_STATEMENTS}")

    def _condition(self, node) -> None:
        t = self.expr(node)
        if t is not UNKNOWN and not is_scalar(t):
            raise self.error(node, f"a condition must be a bool or a number, not {_describe(t)}")

    def _for(self, s: ast.For) -> None:
        if s.orelse:
            raise self.error(s, "for ... else is not supported in kernels")
        if not isinstance(s.target, ast.Name):
            raise self.error(s.target, "the loop variable must be a plain name",
                             hint="for i in range(n): ...")
        it = s.iter
        if isinstance(it, ast.Call) and not it.keywords and len(it.args) == 1:
            from cupric.compiler.lowering.coop import type_grid_stride
            if type_grid_stride(self, s):
                return
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and self._global(it.func.id) is range and it.func.id not in self.locals):
            raise self.error(it, "for loops in kernels iterate over range(...) only",
                             hint="for i in range(start, stop, step): ...")
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error(it, "range() takes 1 to 3 positional arguments")
        t = None
        for arg in it.args:
            at = self.expr(arg)
            if at is UNKNOWN:
                continue
            if not (isinstance(at, WeakType) and at is WEAK_INT) and not (
                    isinstance(at, ScalarType) and at.is_integer):
                raise self.error(arg, f"range() arguments must be integers, not {_describe(at)}")
            t = at if t is None else promote(t, at)
        if len(it.args) == 3 and it.args[2] in self.fn.consts and self.fn.consts[it.args[2]] == 0:
            raise self.error(it.args[2], "range() step must not be zero")
        self.fn.types[it] = t if t is not None else UNKNOWN
        if t is not None:
            self._assign(s.target, t, None)
        self.loop_depth += 1
        self._block(s.body)
        self.loop_depth -= 1

    def _annassign(self, s: ast.AnnAssign) -> None:
        if not isinstance(s.target, ast.Name):
            raise self.error(s.target, "annotations are allowed on plain local names only")
        declared = self._annotation(s.annotation)
        name = s.target.id
        old = self.declared.get(name)
        if old is not None and old != declared:
            raise self.error(s, f"'{name}' was declared {old!r} before")
        self.declared[name] = declared
        self.fn.var_types[name] = declared
        if s.value is not None:
            self._assign(s.target, self.expr(s.value), s.value)

    def _annotation(self, node) -> Type:
        t = self.expr(node)
        obj = t.obj if isinstance(t, ObjectType) else None
        if isinstance(obj, ScalarType):
            return obj
        if isinstance(obj, type) and issubclass(obj, np.generic):
            try:
                return scalar_from_dtype(obj)
            except TypeError:
                pass
        raise self.error(node, "a local annotation must be a cupric scalar type (f32, i64, ...)")

    def _augassign(self, s: ast.AugAssign) -> None:
        target = s.target
        if isinstance(target, ast.Name):
            current = self._load_name(target)
        elif isinstance(target, ast.Subscript):
            current = self.expr(target)
        else:
            raise self.error(target, "augmented assignment works on names and array elements")
        vt = self.expr(s.value)
        result = self._binop_type(s, s.op, current, vt, target, s.value)
        self.fn.types[s] = result
        self._assign(target, result, None)

    def _assign(self, target, vt: Type, value_node) -> None:
        kind = type(target)
        if kind is ast.Name:
            name = target.id
            if vt is UNKNOWN:
                return
            if isinstance(vt, (ObjectType,)) or vt == NONE:
                raise self.error(value_node or target,
                                 f"{_describe(vt)} cannot be stored in a variable")
            if name in self.declared:
                want = self.declared[name]
                if not _convertible(vt, want):
                    raise self.error(target, f"'{name}' is declared {want!r}; cannot assign "
                                     f"{_describe(vt)}")
                return
            vars_ = self.fn.var_types
            if self.final:
                want = vars_[name]
                if not _convertible(vt, want):  # cannot happen: want is the join
                    raise self.error(target, f"cannot assign {_describe(vt)} to '{name}' "
                                     f"({want!r})")
                if isinstance(vt, ArrayType) and isinstance(value_node, ast.Name):
                    self.aliases.append((name, value_node.id))
                return
            try:
                vars_[name] = unify(vars_.get(name), vt)
            except PromotionError as exc:
                raise self.error(target, f"type conflict: '{name}' was {vars_[name]!r} and "
                                 f"is assigned {_describe(vt)} here ({exc})",
                                 hint="a local keeps one type; use another name or cast "
                                 "explicitly") from None
        elif kind in (ast.Tuple, ast.List):
            if vt is UNKNOWN:
                return
            if not isinstance(vt, TupleType):
                raise self.error(target, f"cannot unpack {_describe(vt)}")
            if len(vt.elements) != len(target.elts):
                raise self.error(target, f"cannot unpack a tuple of {len(vt.elements)} into "
                                 f"{len(target.elts)} names")
            for elt, et in zip(target.elts, vt.elements):
                self._assign(elt, et, None)
        elif kind is ast.Subscript:
            at = self.expr(target.value)
            if isinstance(at, TupleType):
                raise self.error(target, "tuples are immutable")
            if not isinstance(at, ArrayType):
                if at is UNKNOWN:
                    return
                raise self.error(target, f"cannot assign into {_describe(at)}")
            self._index_types(target, at)
            self._refuse_module_array_write(target.value)
            if vt is not UNKNOWN and not (is_scalar(vt) or vt == at.dtype):
                raise self.error(value_node or target, f"cannot store {_describe(vt)} into an "
                                 f"array of {at.dtype!r}")
            if isinstance(target.value, ast.Name):
                self.written.add(target.value.id)
            self.fn.types[target] = at.dtype
        elif kind is ast.Attribute:
            from cupric.compiler.lowering.memory import type_struct_field_store
            type_struct_field_store(self, target, vt, value_node)
        elif kind is ast.Starred:
            raise self.error(target, "star-unpacking is not supported in kernels")
        else:
            raise self.error(target, "cannot assign to this expression")


def _assigned_names(tree: ast.FunctionDef) -> set[str]:
    """Names bound anywhere in the function body (Python makes them all local)."""
    names: set[str] = set()

    def targets(t):
        if isinstance(t, ast.Name):
            names.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                targets(e)
        elif isinstance(t, ast.Starred):
            targets(t.value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                targets(t)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets(node.target)
        elif isinstance(node, ast.NamedExpr):
            targets(node.target)
    return names
