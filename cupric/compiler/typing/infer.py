"""Type inference for kernel code: from the AST of a function and the concrete types of
its arguments, the type of every local and every expression, what each call denotes,
and which array arguments are written. The result (`TypedFunction`) is the typed IR that
codegen lowers; any construct outside the kernel language is a CompileError here.

Locals take the common type of everything assigned to them (found by iterating to a fixed
point over the body, so loop-carried variables settle); bare literals adapt to the other
operand (NEP 50). A conflict is reported at the assignment that causes it.

This module holds the driver (`Typer.run`: the passes, the return type, the written
arrays) and the typed IR (`TypedFunction`); the typing of each kind of construct lives in
the modules named in `Typer`'s docstring, shared helpers in `common`.
"""

from __future__ import annotations

import ast

from cupric.compiler.frontend.source import FunctionSource
# The typer's parts, one concept each; every name callers imported from this module is
# still importable from here.
from cupric.compiler.typing.access import AccessTyping
from cupric.compiler.typing.calls import CallTyping
from cupric.compiler.typing.common import (ALLOWED_EXPRESSIONS, ALLOWED_STATEMENTS, UNKNOWN,
                                           _has_array)
from cupric.compiler.typing.ktypes import NONE, TupleType, materialize
from cupric.compiler.typing.operators import OperatorTyping
from cupric.compiler.typing.promote import PromotionError, unify
from cupric.compiler.typing.statements import StatementTyping, _assigned_names
from cupric.compiler.typing.values import ValueTyping
from cupric.types import Type

__all__ = ["TypedFunction", "Typer", "UNKNOWN", "ALLOWED_STATEMENTS", "ALLOWED_EXPRESSIONS"]

_UNSUPPORTED_EXPR = {
    ast.List: "lists are not supported in kernels; use a tuple or an array argument",
    ast.ListComp: "comprehensions are not supported in kernels; write a for loop",
    ast.SetComp: "comprehensions are not supported in kernels; write a for loop",
    ast.DictComp: "comprehensions are not supported in kernels; write a for loop",
    ast.GeneratorExp: "generator expressions are not supported in kernels; write a for loop",
    ast.Dict: "dicts are not supported in kernels",
    ast.Set: "sets are not supported in kernels",
    ast.Lambda: "lambdas are not supported in kernels; use @cupric.device_function",
    ast.JoinedStr: "strings are not supported in kernels",
    ast.Starred: "star-unpacking is not supported in kernels",
    ast.NamedExpr: "assignment expressions (:=) are not supported in kernels",
    ast.Await: "await is not supported in kernels",
    ast.Yield: "generators are not supported in kernels",
    ast.YieldFrom: "generators are not supported in kernels",
    ast.Slice: "slicing is not supported in kernels; index element by element",
}


class TypedFunction:
    """The typed IR of one specialization of a kernel or device function.

    Attributes
    ----------
    source : FunctionSource
    arg_names : list of str
    arg_types : list of Type
        Concrete types of the parameters.
    var_types : dict
        Local name -> concrete type (parameters included).
    types : dict
        AST expression node -> its type.
    consts : dict
        AST node -> Python value, for compile-time constants (inlined).
    targets : dict
        `ast.Call` (or attribute) node -> what it calls: ("builtin", name),
        ("cast", ScalarType), ("math", MathFunc), ("intrinsic", Rule),
        ("device", TypedFunction).
    return_type : Type
    writes : set of int
        Indices of array parameters the function writes (directly or through callees).
    """

    def __init__(self, source: FunctionSource, arg_types, is_kernel: bool) -> None:
        self.source = source
        self.py_func = source.py_func
        self.name = source.name
        self.is_kernel = is_kernel
        self.arg_names = [a.arg for a in source.tree.args.args]
        self.arg_types = list(arg_types)
        self.var_types: dict[str, Type] = {}
        self.types: dict[ast.AST, Type] = {}
        self.consts: dict[ast.AST, object] = {}
        self.targets: dict[ast.AST, tuple] = {}
        self.return_type: Type = NONE
        self.writes: set[int] = set()
        self.symbol: str | None = None  # set by codegen (LLVM name of device functions)


class Typer(StatementTyping, ValueTyping, AccessTyping, OperatorTyping, CallTyping):
    """Infers the types of one function for given argument types.

    This class drives the passes and dispatches each expression to its ``_e_<node>``
    method; the methods live beside it, one concept per module: statements
    (`statements`), names and constants (`values`), attributes and subscripts (`access`),
    operators (`operators`) and calls (`calls`).

    Parameters
    ----------
    ctx : cupric.compiler.specialize.Context
        Types device functions this one calls (cached per argument types).
    source : FunctionSource
    arg_types : list of Type
    is_kernel : bool
    """

    MAX_PASSES = 32

    def __init__(self, ctx, source: FunctionSource, arg_types, is_kernel: bool) -> None:
        self.ctx = ctx
        self.src = source
        self.fn = TypedFunction(source, arg_types, is_kernel)
        self.locals = _assigned_names(source.tree)
        self.declared: dict[str, Type] = {}
        self.loop_depth = 0
        self.final = False
        self.returns: list[tuple[Type, ast.AST]] = []
        self.written: set[str] = set()
        self.aliases: list[tuple[str, str]] = []

    def error(self, node, message: str, hint: str | None = None):
        return self.src.error(node, message, hint)

    # -- driver --------------------------------------------------------------------------

    def run(self) -> TypedFunction:
        tree = self.src.tree
        self._check_signature(tree)
        fn = self.fn
        for name, t in zip(fn.arg_names, fn.arg_types):
            self.locals.add(name)
        vars_ = fn.var_types
        for _ in range(self.MAX_PASSES):
            before = dict(vars_)
            vars_.clear()
            vars_.update(zip(fn.arg_names, fn.arg_types))
            for name, t in before.items():
                vars_.setdefault(name, t)
            self.returns = []
            self._block(tree.body)
            if vars_ == before:
                break
        else:
            raise self.error(tree, "the types of the locals do not settle; add annotations "
                             "(x: f32 = ...) to the loop variables")
        for name, t in list(vars_.items()):
            vars_[name] = materialize(t)
        self.final = True
        self.returns = []
        self.written = set()
        self.aliases = []
        self._block(tree.body)
        fn.return_type = self._return_type()
        self._finish_writes()
        return fn

    def _check_signature(self, tree: ast.FunctionDef) -> None:
        args = tree.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(tree, "kernel and device function parameters must be plain "
                             "positional parameters (no *args, **kwargs, defaults or "
                             "keyword-only parameters)")
        if len(args.args) != len(self.fn.arg_types):
            raise self.error(tree, f"{self.fn.name}() takes {len(args.args)} arguments, got "
                             f"{len(self.fn.arg_types)}")

    def _return_type(self) -> Type:
        result = None
        for t, node in self.returns:
            if result is None:
                result = t
                continue
            if (result == NONE) != (t == NONE):
                raise self.error(node, "this function returns a value on some paths and "
                                 "nothing on others")
            try:
                result = unify(result, t)
            except PromotionError as exc:
                raise self.error(node, f"return type conflict: {exc}") from None
        result = materialize(result) if result is not None else NONE
        if self.fn.is_kernel and result != NONE:
            node = next(n for t, n in self.returns if t != NONE)
            raise self.error(node, "kernels cannot return a value; write results into an "
                             "array argument")
        return result

    def _finish_writes(self) -> None:
        written = set(self.written)
        changed = True
        while changed:
            changed = False
            for a, b in self.aliases:
                if (a in written) != (b in written):
                    written |= {a, b}
                    changed = True
        for i, (name, t) in enumerate(zip(self.fn.arg_names, self.fn.arg_types)):
            if name in written or (isinstance(t, TupleType) and _has_array(t)):
                self.fn.writes.add(i)

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node) -> Type:
        method = getattr(self, "_e_" + type(node).__name__, None)
        if method is None:
            msg = _UNSUPPORTED_EXPR.get(type(node))
            if msg is None:
                msg = f"this expression ({type(node).__name__}) is not supported in kernels"
            raise self.error(node, msg, hint=f"kernels may use {ALLOWED_EXPRESSIONS}")
        t = method(node)
        self.fn.types[node] = t
        return t
