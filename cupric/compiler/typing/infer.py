"""Type inference for kernel code: from the AST of a function and the concrete types of
its arguments, the type of every local and every expression, what each call denotes,
and which array arguments are written. The result (`TypedFunction`) is the typed IR that
codegen lowers; any construct outside the kernel language is a CompileError here.

Locals take the common type of everything assigned to them (found by iterating to a fixed
point over the body, so loop-carried variables settle); bare literals adapt to the other
operand (NEP 50). A conflict is reported at the assignment that causes it.
"""

from __future__ import annotations

import ast
import math
import operator
import types as pytypes

import numpy as np

from cupric.compiler.errors import each_statement
from cupric.compiler.frontend.resolve import MISSING, is_constant_value, lookup
from cupric.compiler.frontend.source import FunctionSource
from cupric.compiler.lowering.mathlib import MATH, MATH_CONSTANTS
from cupric.compiler.lowering.registry import Call, rule_for
from cupric.compiler.typing.ktypes import (NONE, WEAK_FLOAT, WEAK_INT, ObjectType, StructType,
                                           TupleType, VectorType, WeakType, is_numeric,
                                           is_scalar, materialize)
from cupric.compiler.typing.promote import PromotionError, promote, unify
from cupric.device.registry import Dim3, Intrinsic, Namespace
from cupric.device.vector import Vector
from cupric.types import ArrayType, ScalarType, Type, bool_, f64, i64, scalar_from_dtype

__all__ = ["TypedFunction", "Typer", "UNKNOWN", "ALLOWED_STATEMENTS", "ALLOWED_EXPRESSIONS"]

ALLOWED_STATEMENTS = ("assignments (=, +=, ..., tuple unpacking, x: f32 = ...), if/elif/else, "
                      "for i in range(...), while, break, continue, return, pass, calls")
ALLOWED_EXPRESSIONS = ("numbers, True/False, arithmetic, comparisons, and/or/not, "
                       "a if c else b, array[i, j], tuples, calls of casts, math, "
                       "len/min/max/abs/int/float/bool, cupric.device intrinsics and "
                       "@cupric.device_function functions")


class _Unknown(Type):
    """The type of a local read before any assignment was seen (resolved by iteration)."""

    __slots__ = ()

    def _key(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return "unknown"


UNKNOWN = _Unknown()

_BUILTIN_NAMES = ("range", "len", "min", "max", "abs", "int", "float", "bool")
_BINOP_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                 ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>",
                 ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.MatMult: "@"}
_FOLD = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
         ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
         ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
         ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}

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


class Typer:
    """Infers the types of one function for given argument types.

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

    # -- statements ----------------------------------------------------------------------

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

    def _const(self, node, value) -> Type:
        """Record `value` as the compile-time value of `node`; return its type."""
        if isinstance(value, (bool, np.bool_)):
            self.fn.consts[node] = bool(value)
            return bool_
        if isinstance(value, np.generic):
            self.fn.consts[node] = value.item()
            return scalar_from_dtype(value.dtype)
        if isinstance(value, int):
            if not -(1 << 63) <= value < (1 << 64):
                raise self.error(node, f"integer {value} does not fit in 64 bits")
            self.fn.consts[node] = value
            return WEAK_INT
        if isinstance(value, float):
            self.fn.consts[node] = value
            return WEAK_FLOAT
        if isinstance(value, tuple):
            self.fn.consts[node] = value
            return TupleType(materialize(self._const_type(v, node)) for v in value)
        raise self.error(node, f"constants of type {type(value).__name__} are not supported "
                         "in kernels")

    def _const_type(self, value, node) -> Type:
        if isinstance(value, (bool, np.bool_)):
            return bool_
        if isinstance(value, np.generic):
            return scalar_from_dtype(value.dtype)
        if isinstance(value, int):
            return WEAK_INT
        if isinstance(value, float):
            return WEAK_FLOAT
        if isinstance(value, tuple):
            return TupleType(materialize(self._const_type(v, node)) for v in value)
        raise self.error(node, f"constants of type {type(value).__name__} are not supported")

    def _e_Constant(self, node) -> Type:
        value = node.value
        if value is None:
            return NONE
        if isinstance(value, (str, bytes)):
            raise self.error(node, "strings are not supported in kernels")
        if isinstance(value, complex):
            raise self.error(node, "complex numbers are not supported in kernels")
        if value is Ellipsis:
            raise self.error(node, "... is not supported in kernels")
        return self._const(node, value)

    def _global(self, name: str):
        return lookup(self.fn.py_func, name)

    def _load_name(self, node: ast.Name) -> Type:
        name = node.id
        if name in self.locals:
            t = self.fn.var_types.get(name)
            if t is None:
                if self.final:
                    raise self.error(node, f"local variable '{name}' is read before it is "
                                     "assigned")
                return UNKNOWN
            return t
        return self._object(node, self._global(name), name)

    def _e_Name(self, node: ast.Name) -> Type:
        return self._load_name(node)

    def _object(self, node, value, name: str) -> Type:
        """The type of a resolved global / attribute value (constants are inlined)."""
        if value is MISSING:
            raise self.error(node, f"name '{name}' is not defined")
        if is_constant_value(value):
            return self._const(node, value)
        if isinstance(value, (str, bytes)):
            raise self.error(node, f"'{name}' is a string; constants of type "
                             f"{type(value).__name__} are not supported in kernels")
        if isinstance(value, np.ndarray):  # module-level data: constant memory
            from cupric.compiler.lowering.const import type_global_array
            return type_global_array(self, node, value, name)
        return ObjectType(value)

    def _e_Attribute(self, node: ast.Attribute) -> Type:
        base = self.expr(node.value)
        attr = node.attr
        if base is UNKNOWN:
            return UNKNOWN
        if isinstance(base, ObjectType):
            obj = base.obj
            if obj is math and attr in MATH_CONSTANTS:
                return self._const(node, MATH_CONSTANTS[attr])
            if isinstance(obj, Dim3) and attr in ("x", "y", "z"):
                return self._intrinsic_call(node, obj.component(attr), [], [], {})
            value = getattr(obj, attr, MISSING)
            if value is MISSING:
                raise self.error(node, f"{_describe(base)} has no attribute '{attr}'")
            return self._object(node, value, attr)
        if isinstance(base, VectorType):  # v.x, v.y, v.z, v.w
            from cupric.compiler.lowering.vector import field_index
            k = field_index(base, attr)
            if k is None:
                raise self.error(node, f"{base!r} has no field '{attr}'")
            return base.elements[k]
        if isinstance(base, ArrayType):
            if attr == "shape":
                return TupleType([i64] * base.ndim)
            if attr == "strides":
                return TupleType([i64] * base.ndim)
            if attr == "size":
                return i64
            if attr == "ndim":
                return self._const(node, base.ndim)
            raise self.error(node, f"arrays in kernels have .shape, .strides, .size and "
                             f".ndim; not .{attr}")
        if isinstance(base, StructType):
            if attr not in base.fields:
                raise self.error(node, f"{base!r} has no field '{attr}'",
                                 hint=f"fields: {', '.join(base.names)}")
            return base.fields[attr][0]
        raise self.error(node, f"{_describe(base)} has no attribute '{attr}'")

    def _refuse_module_array_write(self, node) -> None:
        """Module-level arrays are read-only data of the compiled module (constant memory):
        a write into one is refused here, where the simulator and the GPU agree."""
        from cupric.compiler.lowering.const import _ArrayRef
        target = self.fn.targets.get(node)
        if target is not None and target[0] == "custom" and isinstance(target[1], _ArrayRef):
            name = node.id if isinstance(node, ast.Name) else ast.unparse(node)
            raise self.error(node, f"'{name}' is a module-level array: read-only data of the "
                             "compiled kernel (constant memory), which kernels cannot write",
                             hint="pass the array as a kernel argument to write it")

    def _index_types(self, node: ast.Subscript, at: ArrayType) -> None:
        index = node.slice
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        if len(items) != at.ndim:
            raise self.error(node, f"a {at.ndim}-D array needs {at.ndim} indices, got "
                             f"{len(items)}", hint="kernels index single elements: a[i, j]")
        for item in items:
            if isinstance(item, ast.Slice):
                raise self.error(item, "slicing is not supported in kernels; index element "
                                 "by element")
            it = self.expr(item)
            if it is UNKNOWN:
                continue
            if not (it is WEAK_INT or (isinstance(it, ScalarType) and it.is_integer)):
                raise self.error(item, f"array indices must be integers, not {_describe(it)}")

    def _e_Subscript(self, node: ast.Subscript) -> Type:
        base = self.expr(node.value)
        if base is UNKNOWN:
            return UNKNOWN
        if isinstance(base, ArrayType):
            self._index_types(node, base)
            return base.dtype
        if isinstance(base, TupleType):
            it = self.expr(node.slice)
            value = self.fn.consts.get(node.slice)
            if it is not WEAK_INT or not isinstance(value, int):
                raise self.error(node.slice, "tuples are indexed by integer constants only")
            n = len(base.elements)
            if not -n <= value < n:
                raise self.error(node.slice, f"tuple index {value} out of range (length {n})")
            return base.elements[value]
        if isinstance(base, ObjectType) and getattr(base.obj, "_cupric_kernel", False):
            raise self.error(node, f"kernel {base.obj.__name__} cannot be launched from kernel "
                             "code (cupric kernels do not launch kernels)",
                             hint=f"make it a @cupric.device_function and call it, or launch "
                             "it from the host after this kernel")
        raise self.error(node, f"{_describe(base)} cannot be indexed")

    def _e_Tuple(self, node: ast.Tuple) -> Type:
        elts = [self.expr(e) for e in node.elts]
        if UNKNOWN in elts:
            return UNKNOWN
        for e, t in zip(node.elts, elts):
            if isinstance(t, ObjectType) or t == NONE:
                raise self.error(e, f"{_describe(t)} cannot be put in a tuple")
        if all(e in self.fn.consts for e in node.elts):  # (16, 16): a constant shape
            self.fn.consts[node] = tuple(self.fn.consts[e] for e in node.elts)
        return TupleType(materialize(t) for t in elts)

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

    # -- calls ---------------------------------------------------------------------------

    def _e_Call(self, node: ast.Call) -> Type:
        ft = self.expr(node.func)
        if ft is UNKNOWN:
            return UNKNOWN
        if not isinstance(ft, ObjectType):
            raise self.error(node.func, f"{_describe(ft)} is not callable")
        obj = ft.obj
        if obj is print:
            from cupric.compiler.lowering.io import type_print
            return type_print(self, node)
        if node.keywords and not isinstance(obj, Intrinsic):
            raise self.error(node.keywords[0], "keyword arguments are not supported in "
                             "kernel calls; pass arguments by position")
        arg_types = [self.expr(a) for a in node.args]
        consts = [self.fn.consts.get(a) for a in node.args]
        if UNKNOWN in arg_types:
            return UNKNOWN
        for a, t in zip(node.args, arg_types):
            # Intrinsics may take compile-time objects (the dtype of shared.array).
            if (isinstance(t, ObjectType) and not isinstance(obj, Intrinsic)) or t == NONE:
                raise self.error(a, f"{_describe(t)} cannot be passed as an argument")
        if isinstance(obj, ScalarType):
            return self._cast(node, obj, arg_types)
        if isinstance(obj, type) and issubclass(obj, np.generic):
            try:
                return self._cast(node, scalar_from_dtype(obj), arg_types)
            except TypeError:
                pass
        if isinstance(obj, type) and issubclass(obj, Vector):  # float3(x, y, z)
            from cupric.compiler.lowering.vector import type_vector
            return type_vector(self, node, obj, arg_types)
        if obj in MATH:
            return self._math(node, MATH[obj], arg_types)
        if isinstance(obj, Intrinsic):
            keywords = {}
            for kw in node.keywords:
                if kw.arg is None:
                    raise self.error(kw, "**keywords are not supported in kernels")
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    keywords[kw.arg] = kw.value.value  # scope="block", order="acquire"
                    continue
                kt = self.expr(kw.value)
                if isinstance(kt, ObjectType):  # dtype=f32
                    keywords[kw.arg] = kt.obj
                    continue
                if kw.value not in self.fn.consts:
                    raise self.error(kw.value, f"the keyword argument {kw.arg}= must be a "
                                     "compile-time constant")
                keywords[kw.arg] = self.fn.consts[kw.value]
            return self._intrinsic_call(node, obj, arg_types, consts, keywords)
        if getattr(obj, "_cupric_device_function", False):
            return self._device_call(node, obj, arg_types)
        if getattr(obj, "_cupric_kernel", False):
            raise self.error(node, f"kernel {obj.__name__} cannot be called from kernel code",
                             hint="make it a @cupric.device_function to call it here")
        builtin = next((n for n in _BUILTIN_NAMES if obj is _builtin(n)), None)
        if builtin is not None:
            return self._builtin(node, builtin, arg_types, consts)
        if isinstance(obj, (Dim3, Namespace)):
            raise self.error(node, f"{obj!r} is not callable; use its attributes")
        name = getattr(obj, "__name__", repr(obj))
        if isinstance(obj, (pytypes.FunctionType,)):
            raise self.error(node.func, f"{name}() is a plain Python function and cannot be "
                             "called from kernel code",
                             hint=f"decorate {name} with @cupric.device_function")
        raise self.error(node.func, f"{name} cannot be called from kernel code",
                         hint="kernels call casts, math functions, len/min/max/abs, "
                         "cupric.device intrinsics and device functions")

    def _cast(self, node, target: ScalarType, arg_types) -> Type:
        if len(arg_types) != 1:
            raise self.error(node, f"{target!r}() takes exactly one argument")
        if not is_scalar(arg_types[0]):
            raise self.error(node.args[0], f"cannot cast {_describe(arg_types[0])} to "
                             f"{target!r}")
        self.fn.targets[node] = ("cast", target)
        return target

    def _math(self, node, mf, arg_types) -> Type:
        if len(arg_types) != mf.arity:
            raise self.error(node, f"math.{mf.name}() takes {mf.arity} argument"
                             f"{'s' if mf.arity > 1 else ''}, got {len(arg_types)}")
        for a, t in zip(node.args, arg_types):
            if not is_scalar(t):
                raise self.error(a, f"math.{mf.name}() needs numbers, not {_describe(t)}")
        t = arg_types[0]
        for other in arg_types[1:]:
            t = promote(t, other)
        ft = t if _is_float(t) and isinstance(t, ScalarType) else f64
        self.fn.targets[node] = ("math", mf, ft)
        if mf.returns == "int":
            return i64
        if mf.returns == "bool":
            return bool_
        return ft

    def _intrinsic_call(self, node, intrinsic: Intrinsic, arg_types, consts,
                        keywords) -> Type:
        rule = rule_for(intrinsic.name)
        if rule is None:
            raise self.error(node, f"cupric.device.{intrinsic.name} has no compiler lowering "
                             "(it runs only in the simulator for now)")
        call = Call(arg_types, consts, keywords, node)
        try:
            t = rule.infer(call)
        except TypeError as exc:
            message = str(exc)
            if not message.startswith(intrinsic.name):
                message = f"{intrinsic.name}: {message}"
            if "compile-time constant" in message and isinstance(node, ast.Call):
                # Name the argument that is not constant (shared.array(n, f32)).
                names = [ast.unparse(a) for a in node.args
                         if a not in self.fn.consts and not isinstance(self.fn.types.get(a),
                                                                        ObjectType)]
                if names:
                    message += f"; {', '.join(repr(n) for n in names)} is not a " \
                               "compile-time constant"
            raise self.error(node, message) from None
        call.result_type = t
        self.fn.targets[node] = ("intrinsic", rule, call)
        if isinstance(node, ast.Call):
            for i in rule.writes:
                if i < len(node.args):
                    self._refuse_module_array_write(node.args[i])
                if i < len(node.args) and isinstance(node.args[i], ast.Name):
                    self.written.add(node.args[i].id)
        return t

    def _device_call(self, node, devfn, arg_types) -> Type:
        concrete = [materialize(t) for t in arg_types]
        callee = self.ctx.type_device(devfn, concrete, self.src, node)
        self.fn.targets[node] = ("device", callee)
        for i in callee.writes:
            if i < len(node.args) and isinstance(node.args[i], ast.Name):
                self.written.add(node.args[i].id)
        return callee.return_type

    def _builtin(self, node, name: str, arg_types, consts) -> Type:
        n = len(arg_types)
        if name == "range":
            raise self.error(node, "range() is only allowed as the iterable of a for loop")
        if name == "len":
            if n != 1:
                raise self.error(node, "len() takes exactly one argument")
            t = arg_types[0]
            if isinstance(t, ArrayType):
                if t.ndim == 0:
                    raise self.error(node, "len() of a 0-d array")
                self.fn.targets[node] = ("builtin", "len")
                return i64
            if isinstance(t, TupleType):
                return self._const(node, len(t.elements))
            raise self.error(node.args[0], f"len() of {_describe(t)}; len works on arrays "
                             "and tuples")
        if name in ("min", "max"):
            if n < 2:
                raise self.error(node, f"{name}() in kernels takes two or more numbers")
            for a, t in zip(node.args, arg_types):
                if not is_scalar(t):
                    raise self.error(a, f"{name}() needs numbers, not {_describe(t)}")
            if all(isinstance(t, WeakType) for t in arg_types) and None not in consts:
                value = (min if name == "min" else max)(consts)
                if any(isinstance(c, float) for c in consts):
                    value = float(value)  # promoted, as min/max of typed values are
                return self._const(node, value)
            t = arg_types[0]
            for other in arg_types[1:]:
                try:
                    t = promote(t, other)
                except PromotionError as exc:
                    raise self.error(node, f"{name}(): {exc}") from None
            # All-literal operands (not constant, e.g. `0 if c else 1`) stay weak.
            self.fn.targets[node] = ("builtin", name, t)
            return t
        if name == "abs":
            if n != 1 or not is_scalar(arg_types[0]):
                raise self.error(node, "abs() takes one number")
            t = arg_types[0]
            if isinstance(t, WeakType) and consts[0] is not None:
                return self._const(node, abs(consts[0]))
            t = i64 if t == bool_ else t  # a weak operand stays weak, as Python's abs(0)
            self.fn.targets[node] = ("builtin", "abs", t)
            return t
        # int(), float(), bool()
        target = {"int": i64, "float": f64, "bool": bool_}[name]
        if n == 0:
            return self._const(node, {"int": 0, "float": 0.0, "bool": False}[name])
        return self._cast(node, target, arg_types)


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


def _builtin(name: str):
    import builtins
    return getattr(builtins, name)


def _is_float(t: Type) -> bool:
    return t is WEAK_FLOAT or (isinstance(t, ScalarType) and t.is_float)


def _has_array(t: Type) -> bool:
    if isinstance(t, ArrayType):
        return True
    return isinstance(t, TupleType) and any(_has_array(e) for e in t.elements)


def _convertible(src: Type, dst: Type) -> bool:
    """Whether a value of `src` may be stored in a variable of `dst` (implicit cast)."""
    if src == dst:
        return True
    if is_scalar(src) and isinstance(dst, ScalarType):
        return True
    if isinstance(src, TupleType) and isinstance(dst, TupleType):
        return len(src.elements) == len(dst.elements) and all(
            _convertible(a, b) for a, b in zip(src.elements, dst.elements))
    if isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        return (src.dtype, src.ndim) == (dst.dtype, dst.ndim) and dst.layout in (src.layout, "A")
    return False


def _describe(t: Type) -> str:
    if isinstance(t, ObjectType):
        obj = t.obj
        if isinstance(obj, pytypes.ModuleType):
            return f"module {obj.__name__}"
        return f"{getattr(obj, '__name__', None) or repr(obj)}"
    if isinstance(t, WeakType):
        return f"an {t.kind} literal" if t.kind == "int" else "a float literal"
    if t == NONE:
        return "None"
    if isinstance(t, ArrayType):
        return f"an array ({t!r})"
    if isinstance(t, TupleType):
        return f"a tuple ({t!r})"
    return repr(t)


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


