"""Turns a kernel into a generator function whose collectives are `yield`s, so that the
simulator can run every thread of a block as a generator in one OS thread: a switch at a
barrier then costs a generator resume (under a microsecond) instead of an OS-thread
hand-off (tens of microseconds).

The rewrite works on the function's source and keeps its file and line numbers, so
tracebacks, assert messages and shared-memory declaration sites read as the original:

- a call of a collective intrinsic (`syncthreads()`, `warp.shfl_down(m, v, 1)`) becomes
  `(yield (COLLECTIVE, name, args, kwargs, (file, line)))`, and the scheduler sends the
  result back;
- a call of an intrinsic where a spinning thread should let others run (atomics,
  fences, nanosleep) runs in place and then yields its result (`PAUSE`);
- a call of a device function that reaches either becomes `yield from` its rewrite.

When the rewrite cannot be sure to have seen every such call (no source, a collective
used as a value, inside a lambda or comprehension, a recursive device function), it
gives up and the simulator uses one OS thread per simulated thread instead.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import threading
import types
import weakref

from ..device.registry import Intrinsic, Namespace
from ..device.kinds import CONVERGENT
from ._scan import _foreign, _python_function, reaches

__all__ = ["COLLECTIVE", "PAUSE", "transform"]

COLLECTIVE = "collective"
PAUSE = "pause"

# Intrinsics after which a thread lets the others run: always (the usual spin-wait
# points), or now and then (atomics, which also appear in hot non-spinning code).
_PAUSE_ALWAYS = frozenset({"nanosleep", "threadfence", "threadfence_block",
                           "threadfence_system", "atomic.load", "mbarrier.try_wait"})


def _pauses(name: str) -> bool | None:
    if name in _PAUSE_ALWAYS:
        return True
    if name.startswith("atomic."):
        return False
    return None


class _Unsupported(Exception):
    """The rewrite cannot guarantee to catch every collective of this function."""


class _Result:
    __slots__ = ("func", "yields")

    def __init__(self, func, yields: bool) -> None:
        self.func = func  # the generator function, or None when nothing yields
        self.yields = yields


_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_IN_PROGRESS = object()   # only ever seen by the thread holding _LOCK
_LOCK = threading.RLock()


def transform(func: types.FunctionType):
    """The generator-function rewrite of kernel `func`, or None when not possible.

    Thread safety
    -------------
    Rewrites happen under one lock: a function being rewritten by one thread is waited
    for by another, never mistaken for a recursive call (which would send the launch to
    the slower OS-thread engine).
    """
    try:
        with _LOCK:
            result = _transform(func)
    except _Unsupported:
        return None
    return result.func if result.yields else None


def _transform(func: types.FunctionType) -> _Result:
    cached = _CACHE.get(func)
    if cached is _IN_PROGRESS:
        raise _Unsupported("recursive device function")
    if cached is not None:
        if isinstance(cached, _Unsupported):
            raise cached
        return cached
    _CACHE[func] = _IN_PROGRESS
    try:
        result = _rewrite(func)
    except _Unsupported as exc:
        _CACHE[func] = exc
        raise
    except BaseException:
        del _CACHE[func]
        raise
    _CACHE[func] = result
    return result


def _resolver(func: types.FunctionType):
    """Resolve a Name/Attribute expression of `func` to the object it denotes, or None."""
    code = func.__code__
    local = set(code.co_varnames) | set(code.co_cellvars)
    cells = dict(zip(code.co_freevars, func.__closure__ or ()))
    builtins = func.__globals__.get("__builtins__", {})
    if isinstance(builtins, types.ModuleType):
        builtins = vars(builtins)
    missing = object()

    def resolve(node):
        if isinstance(node, ast.Name):
            if node.id in local:
                return None
            if node.id in cells:
                try:
                    return cells[node.id].cell_contents
                except ValueError:
                    return None
            value = func.__globals__.get(node.id, missing)
            if value is missing:
                value = builtins.get(node.id, None)
            return value
        if isinstance(node, ast.Attribute):
            base = resolve(node.value)
            if isinstance(base, (types.ModuleType, Namespace)):
                return vars(base).get(node.attr)
            return None
        return None

    return resolve


def _rewrite(func: types.FunctionType) -> _Result:
    if func.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE
                                 | inspect.CO_ASYNC_GENERATOR):
        raise _Unsupported("already a generator")
    twin = getattr(func, "__cupric_ast__", None)
    if twin is not None:  # a typed twin (`_twin`): its tree, with the original's lines
        fdef = copy.deepcopy(twin)
    else:
        try:
            lines, start = inspect.getsourcelines(func)
        except (OSError, TypeError) as exc:
            raise _Unsupported(f"no source: {exc}") from None
        try:
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except SyntaxError as exc:
            raise _Unsupported(f"source does not parse alone: {exc}") from None
        if not tree.body or not isinstance(tree.body[0], ast.FunctionDef) \
                or tree.body[0].name != func.__name__:
            raise _Unsupported("not a def statement")
        ast.increment_lineno(tree, start - 1)
        fdef = tree.body[0]
    rewriter = _Rewriter(func, _resolver(func))
    fdef.body = [rewriter.visit(stmt) for stmt in fdef.body]
    if not rewriter.yields:
        return _Result(None, False)
    return _Result(_build(func, fdef, rewriter.refs), True)


class _Rewriter(ast.NodeTransformer):
    def __init__(self, func, resolve) -> None:
        self.func = func
        self.resolve = resolve
        self.refs: list = []
        self.yields = False
        self.filename = func.__code__.co_filename
        self._call_funcs: set[int] = set()

    # Nested scopes cannot hold a yield for the kernel: refuse them if they need one.
    def _nested(self, node):
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Name, ast.Attribute)) and self._yield_kind(inner):
                raise _Unsupported("a collective inside a nested function or comprehension")
        return node

    visit_Lambda = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _nested
    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _nested

    def _yield_kind(self, node):
        """What a reference denotes: ("collective", name), ("pause", name, always),
        ("device", result) or None."""
        obj = self.resolve(node)
        if obj is None or getattr(obj, "_cupric_pure", False):
            return None
        if isinstance(obj, Intrinsic):
            if obj.name in CONVERGENT:
                return ("collective", obj.name)
            always = _pauses(obj.name)
            if always is not None:
                return ("pause", obj.name, always)
            return None
        target = _python_function(obj)
        if target is None or _foreign(target):
            return None
        if target is self.func or _CACHE.get(target) is _IN_PROGRESS:
            # Recursion: the inner call runs the original function, which is fine while
            # it reaches no collective (its atomics then just do not pause).
            if reaches(target) - {"pause"}:
                raise _Unsupported("a recursive device function reaches a collective")
            return None
        try:
            result = _transform(target)
        except _Unsupported:
            if reaches(target) - {"pause"}:
                raise
            # e.g. a lambda helper: it reaches no collective, so it can run as it is (its
            # atomics just do not let other threads run, which only spin loops need).
            return None
        return ("device", result) if result.yields else None

    def visit_Call(self, node: ast.Call):
        self._call_funcs.add(id(node.func))
        self.generic_visit(node)
        kind = self._yield_kind(node.func)
        if kind is None:
            return node
        self.yields = True
        if kind[0] == "collective":
            kwargs = ast.Dict(keys=[ast.Constant(k.arg) if k.arg is not None else None
                                    for k in node.keywords],
                              values=[k.value for k in node.keywords])
            site = ast.Constant((self.filename, node.lineno))
            request = ast.Tuple([ast.Constant(COLLECTIVE), ast.Constant(kind[1]),
                                 ast.Tuple(list(node.args), ast.Load()), kwargs, site],
                                ast.Load())
            return ast.copy_location(ast.Yield(request), node)
        if kind[0] == "pause":
            request = ast.Tuple([ast.Constant(PAUSE), node, ast.Constant(kind[2])], ast.Load())
            return ast.copy_location(ast.Yield(request), node)
        self.refs.append(kind[1].func)
        callee = ast.Subscript(ast.Name("__cupric_refs", ast.Load()),
                               ast.Constant(len(self.refs) - 1), ast.Load())
        call = ast.Call(callee, node.args, node.keywords)
        return ast.copy_location(ast.YieldFrom(ast.copy_location(call, node)), node)

    def _reference(self, node):
        # A collective or yielding device function named other than as a call's target
        # (aliased, passed on, stored) could be called where no yield catches it.
        if id(node) not in self._call_funcs and self._yield_kind(node):
            raise _Unsupported("a collective used as a value")
        return node

    def visit_Name(self, node: ast.Name):
        return self._reference(node)

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        return self._reference(node)


def _build(func: types.FunctionType, fdef: ast.FunctionDef, refs: list):
    # Defaults and annotations were evaluated when the original was defined; evaluating
    # them again could fail (names of the enclosing scope), so blank them and copy the
    # original's values after.
    fdef.decorator_list = []
    fdef.returns = None
    args = fdef.args
    for a in args.posonlyargs + args.args + args.kwonlyargs:
        a.annotation = None
    if args.vararg:
        args.vararg.annotation = None
    if args.kwarg:
        args.kwarg.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    try:
        gen = build_function(fdef, func, ["__cupric_refs"], [refs])
    except ValueError:
        raise _Unsupported("a closure variable is not bound yet") from None
    gen.__defaults__ = func.__defaults__
    gen.__kwdefaults__ = func.__kwdefaults__
    return gen


def function_def(name: str, params, body) -> ast.FunctionDef:
    """A plain `def name(params): body` node."""
    return ast.FunctionDef(
        name=name,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in params], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=body, decorator_list=[], returns=None, type_comment=None,
        **({"type_params": []} if "type_params" in ast.FunctionDef._fields else {}))


def build_function(fdef: ast.FunctionDef, func: types.FunctionType, names, values):
    """Compile `fdef` in `func`'s file and globals, inside an outer function whose
    parameters bind `names` to `values` and `func`'s free variables to its closure's
    contents (so the new function sees them as closure cells too).

    Raises
    ------
    ValueError
        A closure variable of `func` is not bound yet.
    """
    free = list(func.__code__.co_freevars)
    outer = function_def("__cupric_outer", list(names) + free,
                         [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))])
    module = ast.Module([outer], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, func.__code__.co_filename, "exec")
    namespace: dict = {}
    # Executed with the original's globals, so the rewrite reads the same module state;
    # the outer function lands in `namespace`, not in the user's module.
    exec(code, func.__globals__, namespace)
    closure = [cell.cell_contents for cell in func.__closure__ or ()]
    return namespace["__cupric_outer"](*values, *closure)
