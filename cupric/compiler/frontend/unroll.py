"""Compile-time expansion of `for k in unroll(n):` (cupric.device.unroll), done on the
AST before typing: the loop becomes n copies of its body in which every read of `k` is
the literal 0, 1, ..., n-1. Typing, code generation and the simulator's compiled twin then
see straight-line code, so `values[k]` may index a tuple and `a[j + k]` has a constant
offset the optimizer can merge into vector accesses."""

from __future__ import annotations

import ast
import copy

from cupric.compiler.frontend.resolve import MISSING, lookup

__all__ = ["expand_unroll"]

_BODIES = ("body", "orelse", "finalbody")
_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
          ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b}


def expand_unroll(tree: ast.FunctionDef, src) -> ast.FunctionDef:
    """`tree` with every `for k in unroll(n):` expanded (in place; nested ones too).

    `src` is the `FunctionSource` (for names and errors). Raises CompileError at the
    user's line when `n` is not a compile-time constant, is out of range, or the body
    assigns `k`, breaks or continues."""
    if not _mentions_unroll(tree):
        return tree
    from cupric.device.wide import unroll
    _Expander(src, unroll).block_of(tree)
    return tree


def _mentions_unroll(tree) -> bool:
    # The cheap test that keeps the expansion off kernels without a for loop.
    for node in ast.walk(tree):
        if isinstance(node, ast.For):
            return True
    return False


class _Expander:
    def __init__(self, src, unroll) -> None:
        self.src = src
        self.unroll = unroll

    def block_of(self, node) -> None:
        for field in _BODIES:
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                setattr(node, field, self.block(stmts))

    def block(self, stmts: list) -> list:
        out = []
        for s in stmts:
            if isinstance(s, ast.For) and self._is_unroll(s.iter):
                out.extend(self.expand(s))
            else:
                self.block_of(s)
                out.append(s)
        return out

    def _resolve(self, node):
        if isinstance(node, ast.Name):
            return lookup(self.src.py_func, node.id)
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return MISSING if base is MISSING else getattr(base, node.attr, MISSING)
        return MISSING

    def _is_unroll(self, it) -> bool:
        return isinstance(it, ast.Call) and self._resolve(it.func) is self.unroll

    def _count(self, it: ast.Call) -> int:
        from cupric.device.wide import MAX_UNROLL
        if it.keywords or len(it.args) != 1:
            raise self.src.error(it, "unroll() takes one argument, the trip count",
                                 hint="for k in unroll(4): ...")
        arg = it.args[0]
        n = self._constant(arg)
        if n is None:
            raise self.src.error(
                arg, "unroll(n): n must be a compile-time constant integer",
                hint="a literal or a module or closure constant (unroll(4), "
                     "unroll(WIDTH)); for a count known only at run time use range(n)")
        if not 0 <= n <= MAX_UNROLL:
            raise self.src.error(arg, f"unroll(n): n={n} is outside 0..{MAX_UNROLL}")
        return n

    def _constant(self, node):
        """The int value of a constant expression of literals and constant names, or None."""
        if isinstance(node, ast.Constant):
            value = node.value
        elif isinstance(node, (ast.Name, ast.Attribute)):
            value = self._resolve(node)
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            a, b = self._constant(node.left), self._constant(node.right)
            if a is None or b is None or (isinstance(node.op, ast.FloorDiv) and b == 0):
                return None
            value = _ARITH[type(node.op)](a, b)
        else:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                import numpy as np
                if isinstance(value, np.integer):
                    return int(value)
            except ImportError:  # pragma: no cover - numpy is a dependency
                pass
            return None
        return value

    def expand(self, s: ast.For) -> list:
        n = self._count(s.iter)
        if s.orelse:
            raise self.src.error(s, "for ... else is not supported in kernels")
        if not isinstance(s.target, ast.Name):
            raise self.src.error(s.target, "the loop variable of unroll must be a plain name",
                                 hint="for k in unroll(4): ...")
        name = s.target.id
        for stmt in s.body:
            _check_body(self.src, stmt, name)
        body = self.block(s.body)  # inner unrolls first
        out = []
        for k in range(n):
            for stmt in body:
                out.append(_Substitute(name, k).visit(copy.deepcopy(stmt)))
        if not out:
            out.append(ast.copy_location(ast.Pass(), s))
        return out


def _check_body(src, stmt, name: str) -> None:
    """Refuse what has no meaning once the loop is gone: break/continue of this loop and
    assignments to its variable."""
    for node in _walk_own(stmt):
        if isinstance(node, (ast.Break, ast.Continue)):
            raise src.error(node, f"{type(node).__name__.lower()} inside `for ... in "
                            "unroll(n)`: the loop is expanded at compile time",
                            hint="use range(n) for a loop that can stop early")
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx,
                                                                             ast.Load):
            raise src.error(node, f"the unrolled loop variable '{name}' is a constant "
                            "inside the loop and cannot be assigned")


def _walk_own(stmt):
    """The nodes of `stmt`, not descending into inner loops' bodies for break/continue
    (those belong to the inner loop) but still into them for assignments."""
    stack = [(stmt, False)]
    while stack:
        node, inner = stack.pop()
        if inner and isinstance(node, (ast.Break, ast.Continue)):
            continue
        yield node
        nested = inner or isinstance(node, (ast.For, ast.While))
        for child in ast.iter_child_nodes(node):
            stack.append((child, nested))


class _Substitute(ast.NodeTransformer):
    def __init__(self, name: str, value: int) -> None:
        self.name = name
        self.value = value

    def visit_Name(self, node):
        if node.id == self.name and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Constant(self.value), node)
        return node
