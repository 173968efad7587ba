"""The typed twin of a kernel: the kernel's Python function rewritten, from the compiler's
typed IR, so that it computes with the documented semantics of compiled code instead of
Python's (fixed-width integers that wrap, NaN and infinities from math functions, C casts,
bool arithmetic in i64, negative integer powers giving 0, the compiled floor division).

Every expression of the kernel has a type in the typed IR (`TypedFunction.types`); the
twin keeps each value a NumPy scalar of exactly that type, converts where compiled code
converts (the operands of an operation to its promoted type, an assigned value to the
local's type, an argument to a device function's parameter type) and calls
`cupric.compiler.typing.semantics` where NumPy's operator would differ from compiled code.
Line numbers and the file stay the original's, so tracebacks, asserts and index errors
name the user's lines; the generator rewrite (`_transform`) applies to the twin as well.
"""

from __future__ import annotations

import ast
import copy
import threading

import numpy as np

from cupric.compiler.typing import semantics as sem
from cupric.compiler.typing.ktypes import TupleType, VectorType, WeakType, materialize
from cupric.compiler.typing.promote import promote
from cupric.types import ArrayType, ScalarType, bool_, i64

from ._impl_math import _BINARY, _UNARY
from ._transform import build_function, function_def

__all__ = ["twin_of"]

_LOCK = threading.RLock()
# Twins live on the typed function (``typed._cupric_twins[c_division]``), not in a table
# keyed by it: they go with the kernel, so kernels made on the fly are not kept for ever.
_TWINS = "_cupric_twins"

_NATIVE = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
           ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.LShift: "<<", ast.RShift: ">>", ast.Pow: "**"}


def _pure(fn):
    fn._cupric_pure = True  # the generator rewrite never needs to look inside
    return fn


def twin_of(typed, c_division: bool = False):
    """The twin function of a typed kernel or device function (cached per specialization).
    """
    with _LOCK:
        twins = typed.__dict__.setdefault(_TWINS, {})
        func = twins.get(c_division)
        if func is None:
            func = twins[c_division] = _Builder(typed, c_division).build()
        return func


def _scalar(t):
    t = materialize(t) if isinstance(t, WeakType) else t
    return t if isinstance(t, ScalarType) else None


def _zero(t):
    if isinstance(t, ScalarType):
        return t.dtype.type(0) if t.kind != "b" else np.bool_(False)
    if isinstance(t, TupleType):
        return tuple(_zero(e) for e in t.elements)
    return None


@_pure
def _truth(v):
    return v != 0


@_pure
def _range(dtype_type, *bounds):
    return map(dtype_type, range(*[int(b) for b in bounds]))


@_pure
def _shape(shape):
    return tuple(np.int64(n) for n in shape)


@_pure
def _struct(value):
    return value


def _math_impl(mf, ft: ScalarType):
    """`math.<name>` on f32 or f64 (f16 computes in f32): the simulator's device-math
    kernels (f64 NumPy, IEEE results, never an exception), rounded to the type."""
    compute = np.float32 if ft.bits <= 32 else np.float64
    out = ft.dtype.type
    name = mf.name
    if mf.returns == "bool":
        ufunc = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}[name]
        return _pure(lambda x: np.bool_(ufunc(compute(x))))
    if mf.returns == "int":
        fn = _UNARY[name]
        return _pure(lambda x: sem.convert(fn(np.float64(compute(x))), i64))
    if mf.arity == 2:
        fn2 = _BINARY[name]
        return _pure(lambda x, y: out(compute(fn2(np.float64(compute(x)),
                                                  np.float64(compute(y))))))
    fn1 = _UNARY[name]
    return _pure(lambda x: out(compute(fn1(np.float64(compute(x))))))


class _Builder:
    def __init__(self, typed, c_division: bool) -> None:
        self.typed = typed
        self.types = typed.types
        self.consts = typed.consts
        self.targets = typed.targets
        self.c_division = c_division
        self.refs: dict[str, object] = {}
        self._ids: dict[int, str] = {}
        self.temps = 0

    # -- references to Python objects (closure cells of the twin) ------------------------

    def ref(self, obj, node=None) -> ast.Name:
        key = id(obj)
        name = self._ids.get(key)
        if name is None or self.refs[name] is not obj:
            name = f"__cupric_r{len(self.refs)}"
            self.refs[name] = obj
            self._ids[key] = name
        return self._at(ast.Name(name, ast.Load()), node)

    def call(self, fn, args, node=None) -> ast.Call:
        return self._at(ast.Call(self.ref(fn, node), list(args), []), node)

    @staticmethod
    def _at(new, node):
        if node is not None and hasattr(node, "lineno"):
            ast.copy_location(new, node)
        return new

    def temp(self) -> str:
        self.temps += 1
        return f"__cupric_t{self.temps}"

    # -- types ---------------------------------------------------------------------------

    def type_of(self, node):
        return self.types.get(node)

    def convert(self, expr, src, to, node=None):
        """`expr` (a value of type `src`, None when unknown) as type `to`."""
        if to is None or not isinstance(to, (ScalarType, TupleType)):
            return expr
        if isinstance(to, TupleType):
            if isinstance(src, TupleType) and src == to:
                return expr
            fn = _pure(lambda v, ts=to.elements: tuple(
                sem.convert(x, t) if isinstance(t, ScalarType) else x for x, t in zip(v, ts)))
            return self.call(fn, [expr], node)
        src = _scalar(src) if src is not None else None
        if src is not None and src == to:
            return expr
        fn = sem.converter(src, to) if src is not None else None
        if fn is None:
            # Unknown source (an intrinsic's result, a struct field): usually already of
            # the type; one class test then.
            exact = to.dtype.type if to.kind != "b" else np.bool_
            fn = _pure(lambda v, to=to, t=exact: v if v.__class__ is t else sem.convert(v, to))
        elif not hasattr(fn, "_cupric_pure") and not isinstance(fn, type):
            _pure(fn)
        return self.call(fn, [expr], node)

    # -- expressions ---------------------------------------------------------------------

    def expr(self, node, want=None):
        """The twin of expression `node`, converted to `want` when given."""
        if node in self.consts:
            return self.constant(self.consts[node], want or self.type_of(node), node)
        method = getattr(self, "_e_" + type(node).__name__, None)
        if method is None:
            return self._at(copy.deepcopy(node), node)
        out = method(node)
        if want is not None:
            out = self.convert(out, self.runtime_type(node), want, node)
        return out

    def runtime_type(self, node):
        """The type of the value the twin computes for `node`."""
        t = self.type_of(node)
        if isinstance(t, WeakType):
            return materialize(t)
        return t

    def constant(self, value, t, node):
        if isinstance(t, WeakType):
            t = materialize(t)
        if isinstance(t, TupleType) and isinstance(value, tuple):
            elts = [self.constant(v, e, node) for v, e in zip(value, t.elements)]
            return self._at(ast.Tuple(elts, ast.Load()), node)
        if isinstance(t, ScalarType):
            if t.kind in "iu" and isinstance(value, float):
                value = int(value)  # i32(2.7): truncated, as compiled constants are
            return self.ref(sem.convert(value, t), node)
        return self._at(ast.Constant(value), node)

    def raw(self, node):
        """An intrinsic's argument: constants as the Python values written, others as
        computed."""
        if node in self.consts:
            value = self.consts[node]
            return self._at(ast.Constant(value) if not isinstance(value, tuple)
                            else ast.Constant(value), node)
        return self.expr(node)

    def _e_Name(self, node):
        return self._at(ast.Name(node.id, ast.Load()), node)

    def _e_Attribute(self, node):
        base_t = self.type_of(node.value)
        out = self._at(ast.Attribute(self.expr(node.value), node.attr, ast.Load()), node)
        if isinstance(base_t, ArrayType):
            if node.attr in ("shape", "strides"):
                return self.call(_shape, [out], node)
            if node.attr == "size":
                return self.call(np.int64, [out], node)
            return out
        t = self.type_of(node)
        if isinstance(t, ScalarType) and not isinstance(base_t, VectorType):
            # Dim3 components, struct fields: whatever the simulator gives, as the type.
            return self.convert(out, None, t, node)
        return out

    def _e_Subscript(self, node):
        base = self.expr(node.value)
        base_t = self.type_of(node.value)
        if isinstance(base_t, TupleType):
            index = self.raw(node.slice)
        else:
            index = self.index(node.slice)
        return self._at(ast.Subscript(base, index, ast.Load()), node)

    def index(self, node):
        if isinstance(node, ast.Tuple):
            return self._at(ast.Tuple([self.expr(e) for e in node.elts], ast.Load()), node)
        return self.expr(node)

    def _e_Tuple(self, node):
        return self._at(ast.Tuple([self.expr(e, _scalar(self.type_of(e)))
                                   for e in node.elts], ast.Load()), node)

    def _e_BinOp(self, node):
        return self.binop(node, node.op, node.left, node.right, self.type_of(node))

    def binop(self, node, op, lnode, rnode, rt, left=None, lt=None):
        """`left op right` in result type `rt`; `left` (with its type `lt`) replaces the
        left operand's expression (augmented assignment)."""
        if left is None:
            lt = self.runtime_type(lnode)
        kind = type(op)
        if isinstance(rt, VectorType) or isinstance(lt, VectorType):
            left = left if left is not None else self.expr(lnode)
            right = self.expr(rnode)
            return self._at(ast.BinOp(left, type(op)(), right), node)
        ct = materialize(rt) if isinstance(rt, WeakType) else rt
        if kind is ast.Div and ct.kind != "f":
            ct = materialize(promote(lt, self.type_of(rnode)))
        if kind is ast.Pow:
            return self.power(node, lnode, rnode, ct, left, lt)
        operand = ct
        if kind is ast.Div and ct.kind != "f":
            operand = None
        a = self._operand(lnode, operand, left, lt)
        b = self.expr(rnode, operand)
        if kind in (ast.FloorDiv, ast.Mod):
            fn = sem.floor_div if kind is ast.FloorDiv else sem.mod
            if ct.kind in "iu":
                c_div = self.c_division
                fn = _pure(lambda x, y, f=fn, c=c_div: f(x, y, c))
            return self.call(fn, [a, b], node)
        if kind in (ast.LShift, ast.RShift):
            return self._at(ast.BinOp(a, kind(), b), node)
        return self._at(ast.BinOp(a, kind(), b), node)

    def _operand(self, lnode, want, left, lt):
        if left is None:
            return self.expr(lnode, want)
        return self.convert(left, lt, want, lnode)

    def power(self, node, lnode, rnode, ct, left, lt):
        exponent = self.consts.get(rnode)
        if isinstance(exponent, int) and not isinstance(exponent, bool) and \
                0 <= exponent <= 4:
            base = self._operand(lnode, ct, left, lt)
            if exponent == 0:
                return self.constant(1, ct, node)
            if exponent == 1:
                return base
            name = self.temp()
            product = ast.Name(name, ast.Load())
            for _ in range(exponent - 1):
                product = ast.BinOp(product, ast.Mult(), ast.Name(name, ast.Load()))
            fn = ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(name)], vararg=None,
                                          kwonlyargs=[], kw_defaults=[], kwarg=None,
                                          defaults=[]), product)
            return self._at(ast.Call(self._at(fn, node), [base], []), node)
        a = self._operand(lnode, ct, left, lt)
        b = self.expr(rnode, ct)
        fn = _pure(lambda x, y, t=ct: sem.power(x, y, t))
        return self.call(fn, [a, b], node)

    def _e_UnaryOp(self, node):
        kind = type(node.op)
        if kind is ast.Not:
            return self._at(ast.UnaryOp(ast.Not(), self.truth(node.operand)), node)
        t = self.type_of(node)
        if isinstance(t, VectorType):
            return self._at(ast.UnaryOp(kind(), self.expr(node.operand)), node)
        ct = materialize(t)
        return self._at(ast.UnaryOp(kind(), self.expr(node.operand, ct)), node)

    def truth(self, node):
        t = self.runtime_type(node)
        value = self.expr(node)
        if t == bool_:
            return value
        return self.call(_truth, [value], node)

    def _e_BoolOp(self, node):
        return self._at(ast.BoolOp(type(node.op)(), [self.truth(v) for v in node.values]),
                        node)

    def _e_Compare(self, node):
        operands = [node.left] + list(node.comparators)
        if len(node.ops) == 1:
            return self._at(self.compare_pair(node.ops[0], node.left, node.comparators[0]),
                            node)
        # Chained: each operand evaluated once, into a temporary, stopping at the first
        # false comparison.
        names = [self.temp() for _ in operands]
        parts = []
        for k, op in enumerate(node.ops):
            a, b = operands[k], operands[k + 1]
            t = self.pair_type(a, b)
            if k == 0:
                left = ast.NamedExpr(ast.Name(names[0], ast.Store()), self.expr(a))
            else:
                left = ast.Name(names[k], ast.Load())
            right = ast.NamedExpr(ast.Name(names[k + 1], ast.Store()), self.expr(b))
            parts.append(ast.Compare(self.convert(left, self.runtime_type(a), t, a), [op],
                                     [self.convert(right, self.runtime_type(b), t, b)]))
        return self._at(ast.BoolOp(ast.And(), parts), node)

    def pair_type(self, a, b):
        at, bt = self.type_of(a), self.type_of(b)
        if isinstance(at, WeakType) and isinstance(bt, WeakType) and a in self.consts \
                and b in self.consts:
            return None
        return materialize(promote(at, bt))

    def compare_pair(self, op, a, b):
        t = self.pair_type(a, b)
        if t is None:
            return ast.Compare(self.raw(a), [op], [self.raw(b)])
        return ast.Compare(self.expr(a, t), [op], [self.expr(b, t)])

    def _e_IfExp(self, node):
        t = self.runtime_type(node)
        return self._at(ast.IfExp(self.truth(node.test), self.expr(node.body, _scalar(t) or t),
                                  self.expr(node.orelse, _scalar(t) or t)), node)

    def _e_Call(self, node):
        target = self.targets.get(node)
        t = self.type_of(node)
        if target is None:
            return self._at(ast.Call(self.expr(node.func), [self.expr(a) for a in node.args],
                                     [copy.deepcopy(k) for k in node.keywords]), node)
        kind = target[0]
        if kind == "cast":
            arg = node.args[0]
            if arg in self.consts:
                value = self.consts[arg]
                src = materialize(self.type_of(arg))
                if isinstance(value, float) and src.kind == "f":
                    value = np.float64(value)
                elif not isinstance(value, int):
                    value = sem.convert(value, src)
                return self.constant(sem.convert(value, target[1]), target[1], node)
            return self.convert(self.expr(arg), self.runtime_type(arg), target[1], node)
        if kind == "math":
            mf, ft = target[1], target[2]
            args = [self.expr(a, ft) for a in node.args]
            return self.call(_math_impl(mf, ft), args, node)
        if kind == "builtin":
            name = target[1]
            if name == "len":
                shape = ast.Attribute(self.expr(node.args[0]), "shape", ast.Load())
                first = ast.Subscript(shape, ast.Constant(0), ast.Load())
                return self.call(np.int64, [self._at(first, node)], node)
            ct = materialize(target[2])
            args = [self.expr(a, ct) for a in node.args]
            if name == "abs":
                return self.call(sem.absolute, args, node)
            is_min = name == "min"
            fn = _pure(lambda *v, m=is_min: sem.minmax(v, m))
            return self.call(fn, args, node)
        if kind == "device":
            callee = target[1]
            func = twin_of(callee, self.c_division)
            args = [self.expr(a, _scalar(pt) or None) for a, pt in
                    zip(node.args, callee.arg_types)]
            return self._at(ast.Call(self.ref(func, node), args, []), node)
        if kind == "intrinsic":
            out = self._at(ast.Call(self.expr(node.func), [self.raw(a) for a in node.args],
                                    [copy.deepcopy(k) for k in node.keywords]), node)
            if isinstance(t, ScalarType):
                return self.convert(out, None, t, node)
            return out
        # print and the other calls that lower themselves run as written.
        return self._at(copy.deepcopy(node), node)

    # -- statements ----------------------------------------------------------------------

    def block(self, stmts) -> list:
        out = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out or [ast.Pass()]

    def stmt(self, s) -> list:
        method = getattr(self, "_s_" + type(s).__name__, None)
        if method is None:
            return [copy.deepcopy(s)]
        made = method(s)
        for m in made:
            ast.copy_location(m, s)
        return made

    def store(self, target, value_expr, value_t) -> list:
        """Statements storing `value_expr` (of type `value_t`) into `target`."""
        if isinstance(target, ast.Name):
            want = self.typed.var_types.get(target.id)
            value = self.convert(value_expr, value_t, want, target)
            return [self._at(ast.Assign([ast.Name(target.id, ast.Store())], value), target)]
        if isinstance(target, (ast.Tuple, ast.List)):
            name = self.temp()
            out = [self._at(ast.Assign([ast.Name(name, ast.Store())], value_expr), target)]
            elements = value_t.elements if isinstance(value_t, TupleType) else \
                [None] * len(target.elts)
            for k, (elt, et) in enumerate(zip(target.elts, elements)):
                item = ast.Subscript(ast.Name(name, ast.Load()), ast.Constant(k), ast.Load())
                out += self.store(elt, self._at(item, elt), et)
            return out
        if isinstance(target, ast.Subscript):
            base_t = self.type_of(target.value)
            dtype = base_t.dtype if isinstance(base_t, ArrayType) else None
            value = self.convert(value_expr, value_t, dtype if isinstance(dtype, ScalarType)
                                 else None, target)
            new = ast.Subscript(self.expr(target.value), self.index(target.slice), ast.Store())
            return [self._at(ast.Assign([self._at(new, target)], value), target)]
        if isinstance(target, ast.Attribute):
            new = ast.Attribute(self.expr(target.value), target.attr, ast.Store())
            return [self._at(ast.Assign([self._at(new, target)], value_expr), target)]
        return [ast.Assign([copy.deepcopy(target)], value_expr)]

    def _s_Assign(self, s):
        value_t = self.runtime_type(s.value)
        if len(s.targets) == 1:
            return self.store(s.targets[0], self.expr(s.value), value_t)
        name = self.temp()
        out = [ast.Assign([ast.Name(name, ast.Store())], self.expr(s.value))]
        for target in s.targets:
            out += self.store(target, ast.Name(name, ast.Load()), value_t)
        return out

    def _s_AnnAssign(self, s):
        if s.value is None:
            return []
        return self.store(s.target, self.expr(s.value), self.runtime_type(s.value))

    def _s_AugAssign(self, s):
        target = s.target
        rt = self.type_of(s)
        if isinstance(target, ast.Name):
            current = ast.Name(target.id, ast.Load())
            ct = self.typed.var_types.get(target.id)
            value = self.binop(s, s.op, target, s.value, rt, left=current, lt=ct)
            return self.store(target, value, _scalar(rt) or rt)
        if isinstance(target, ast.Subscript):
            # The array and the index are evaluated once.
            arr, idx = self.temp(), self.temp()
            out = [ast.Assign([ast.Name(arr, ast.Store())], self.expr(target.value)),
                   ast.Assign([ast.Name(idx, ast.Store())], self.index(target.slice))]
            element_t = self.type_of(target)
            current = ast.Subscript(ast.Name(arr, ast.Load()), ast.Name(idx, ast.Load()),
                                    ast.Load())
            value = self.binop(s, s.op, target, s.value, rt, left=current, lt=element_t)
            base_t = self.type_of(target.value)
            dtype = base_t.dtype if isinstance(base_t, ArrayType) else None
            value = self.convert(value, _scalar(rt) or rt,
                                 dtype if isinstance(dtype, ScalarType) else None, s)
            store = ast.Subscript(ast.Name(arr, ast.Load()), ast.Name(idx, ast.Load()),
                                  ast.Store())
            out.append(ast.Assign([store], value))
            return out
        return [copy.deepcopy(s)]

    def _s_Expr(self, s):
        if isinstance(s.value, ast.Constant):
            return []
        return [ast.Expr(self.expr(s.value))]

    def _s_If(self, s):
        return [ast.If(self.truth(s.test), self.block(s.body),
                       self.block(s.orelse) if s.orelse else [])]

    def _s_While(self, s):
        return [ast.While(self.truth(s.test), self.block(s.body), [])]

    def _s_For(self, s):
        it = s.iter
        var_t = self.typed.var_types.get(s.target.id)
        dtype_type = var_t.dtype.type if isinstance(var_t, ScalarType) else np.int64
        target = self.targets.get(it)
        if target is not None and target[0] == "grid_stride":
            iterable = ast.Call(self.ref(map), [self.ref(dtype_type),
                                                ast.Call(self.expr(it.func),
                                                         [self.expr(it.args[0])], [])], [])
        else:
            bound_t = self.type_of(it)
            bound_t = materialize(bound_t) if bound_t is not None else i64
            args = [self.expr(a, bound_t) for a in it.args]
            iterable = self.call(_range, [self.ref(dtype_type)] + args, it)
        return [ast.For(ast.Name(s.target.id, ast.Store()), self._at(iterable, it),
                        self.block(s.body), [])]

    def _s_Return(self, s):
        if s.value is None or self.typed.is_kernel:
            return [ast.Return(None)]
        rt = self.typed.return_type
        return [ast.Return(self.expr(s.value, _scalar(rt) or (rt if isinstance(
            rt, TupleType) else None)))]

    def _s_Assert(self, s):
        return [ast.Assert(self.truth(s.test), copy.deepcopy(s.msg))]

    # -- the function --------------------------------------------------------------------

    def build(self):
        typed = self.typed
        tree = typed.source.tree
        py_func = typed.py_func
        params = set(typed.arg_names)
        body = []
        for name, t in typed.var_types.items():
            if name not in params:
                # Compiled code zero-fills every local: a path that skips an assignment
                # reads 0, not an unbound name.
                zero = _zero(t)
                body.append(ast.Assign([ast.Name(name, ast.Store())],
                                       self.ref(zero) if zero is not None
                                       else ast.Constant(None)))
        for stmt in body:
            ast.copy_location(stmt, tree)
        body += self.block(tree.body)
        fdef = function_def(tree.name, typed.arg_names, body)
        ast.copy_location(fdef, tree)
        func = build_function(fdef, py_func, list(self.refs), list(self.refs.values()))
        func.__cupric_ast__ = fdef
        func.__cupric_original__ = py_func
        func.__qualname__ = py_func.__qualname__
        func.__module__ = py_func.__module__
        return func
