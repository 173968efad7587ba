"""Finds out, before a launch, whether a kernel can reach a block barrier, a warp
collective or a grid barrier: only then do all threads of a block (or of the grid) need
to be live at once, and the fast one-thread-after-another path is off.

The scan follows the names the kernel's code uses (globals, closure cells, attributes of
modules and namespaces named in the code) into the intrinsics and device functions they
denote, recursively. It over-approximates: a name that might denote a collective counts.
"""

from __future__ import annotations

import sys
import types
import weakref

from ..device.registry import Dim3, Intrinsic, Namespace
from ..device.kinds import BLOCK_COLLECTIVES, GRID_COLLECTIVES, WARP_COLLECTIVES

__all__ = ["needs", "needs_of_values", "reaches", "PAUSING"]

# Intrinsics at which a thread of a live block lets the others run (spin-wait points).
PAUSING = frozenset({"nanosleep", "threadfence", "threadfence_block", "threadfence_system",
                     "atomic.add", "atomic.sub", "atomic.min", "atomic.max", "atomic.exch",
                     "atomic.and_", "atomic.or_", "atomic.xor", "atomic.inc", "atomic.dec",
                     "atomic.cas", "atomic.load", "atomic.store", "atomic.add_f16x2",
                     "atomic.add_bf16x2", "mbarrier.try_wait"})

def _code_names(code: types.CodeType, out: set[str]) -> None:
    out.update(code.co_names)
    out.update(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # nested functions, lambdas, comprehensions
            _code_names(const, out)


def _python_function(obj):
    """The plain function behind a kernel, device function or method, or None."""
    seen = 0
    while not isinstance(obj, types.FunctionType) and seen < 4:
        inner = getattr(obj, "py_func", None) or getattr(obj, "__wrapped__", None) \
            or getattr(obj, "__func__", None)
        if inner is None:
            return None
        obj = inner
        seen += 1
    return obj if isinstance(obj, types.FunctionType) else None


_CACHE: "weakref.WeakKeyDictionary[types.FunctionType, frozenset[str]]" = \
    weakref.WeakKeyDictionary()


def reaches(func) -> frozenset[str]:
    """What `func` may reach: collective kinds ("block", "warp", "grid") and "pause"
    (an intrinsic of `PAUSING`)."""
    try:
        return _CACHE[func]
    except KeyError:
        pass
    found: set[str] = set()
    visited: set[int] = set()
    _visit_function(func, found, visited)
    result = frozenset(found)
    _CACHE[func] = result
    return result


def needs(func) -> frozenset[str]:
    """The collective kinds ("block", "warp", "grid") that `func` may reach."""
    return reaches(func) - {"pause"}


def needs_of_values(values) -> frozenset[str]:
    """The collective kinds reachable through launch arguments (an intrinsic or device
    function passed to a kernel)."""
    found: set[str] = set()
    visited: set[int] = set()
    for value in values:
        _visit_object(value, found, visited)
    return frozenset(found - {"pause"})


def _foreign(func: types.FunctionType) -> bool:
    """Functions of NumPy and the standard library never call cupric intrinsics."""
    top = (func.__module__ or "").partition(".")[0]
    return top == "numpy" or top in sys.stdlib_module_names


def _visit_function(func, found: set[str], visited: set[int]) -> None:
    if id(func) in visited or _foreign(func):
        return
    visited.add(id(func))
    names: set[str] = set()
    _code_names(func.__code__, names)
    roots = []
    for name in names:
        if name in func.__globals__:
            roots.append(func.__globals__[name])
    for cell in func.__closure__ or ():
        try:
            roots.append(cell.cell_contents)
        except ValueError:  # an empty cell: the closure variable is not bound yet
            continue
    # Follow attribute chains named in the code (cupric.device.warp.shfl_down): from each
    # module, namespace or class reached so far, take the attributes the code names.
    frontier = roots
    for _ in range(4):
        nxt = []
        for obj in frontier:
            _visit_object(obj, found, visited)
            scopes = ()
            if isinstance(obj, (types.ModuleType, Namespace)):
                scopes = (vars(obj),)
            elif isinstance(obj, type):
                scopes = tuple(vars(k) for k in obj.__mro__)
            # Only attributes that exist already: looking an attribute up could run code
            # (a lazy module attribute imports a subpackage).
            for scope in scopes:
                for name in names:
                    if name in scope:
                        nxt.append(scope[name])
        frontier = nxt


def _visit_object(obj, found: set[str], visited: set[int]) -> None:
    if isinstance(obj, Intrinsic):
        if obj.name in BLOCK_COLLECTIVES:
            found.add("block")
        elif obj.name in WARP_COLLECTIVES:
            found.add("warp")
        elif obj.name in GRID_COLLECTIVES:
            found.add("grid")
        elif obj.name in PAUSING:
            found.add("pause")
        return
    if isinstance(obj, Dim3):
        return
    func = _python_function(obj)
    if func is not None:
        _visit_function(func, found, visited)
