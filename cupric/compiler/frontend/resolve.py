"""Resolving the free names of kernel code: a name that is not a local is looked up in
the function's closure, then its module's globals, then builtins, and classified as a
constant (inlined), a compile-time object (module, intrinsic, device function, cast), or
something kernels cannot use (reported at the use)."""

from __future__ import annotations

import builtins
import numbers

import numpy as np

__all__ = ["MISSING", "lookup", "is_constant_value"]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


def lookup(py_func, name: str):
    """The object `name` denotes inside `py_func` (closure first), or `MISSING`."""
    code = py_func.__code__
    if py_func.__closure__ and name in code.co_freevars:
        cell = py_func.__closure__[code.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:  # an empty cell: the closure variable is not bound yet
            return MISSING
    glb = py_func.__globals__
    if name in glb:
        return glb[name]
    return getattr(builtins, name, MISSING)


def is_constant_value(value) -> bool:
    """True for values that kernels inline: bool, int, float, NumPy scalars, and tuples
    of them."""
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, (numbers.Integral, numbers.Real)) and not isinstance(value, complex):
        return isinstance(value, (int, float, np.integer, np.floating))
    if isinstance(value, tuple):
        return all(is_constant_value(v) for v in value)
    return False


