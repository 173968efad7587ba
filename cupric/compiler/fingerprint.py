"""A cheap fingerprint of everything a kernel's code depends on, computed without parsing
or typing it: the bytecode of the kernel and of the device functions it reaches, and the
values of the module constants and closure variables they name. With the argument types
and options it keys the on-disk kernel cache, so a new process reaches a cached kernel in
well under the cost of compiling it."""

from __future__ import annotations

import functools
import hashlib
import sys
import types as pytypes
from pathlib import Path

from cupric.compiler.frontend.resolve import MISSING, is_constant_value, lookup

__all__ = ["FRONTEND_VERSION", "fingerprint"]

#: Bumped whenever the frontend's output for the same input changes.
FRONTEND_VERSION = 1


def _feed_code(h, code: pytypes.CodeType, lines: bool) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    h.update(repr(code.co_freevars).encode())
    h.update(f"{code.co_filename}:{code.co_firstlineno}".encode())
    if lines:
        h.update(repr(list(code.co_lines())).encode())
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            _feed_code(h, const, lines)
        else:
            h.update(repr(const).encode())


def _feed_function(h, py_func, lines: bool, seen: set) -> None:
    if py_func in seen:
        return
    seen.add(py_func)
    code = py_func.__code__
    _feed_code(h, code, lines)
    h.update(repr(getattr(py_func, "__annotations__", {})).encode())
    for name in code.co_names + code.co_freevars:
        value = lookup(py_func, name)
        if value is MISSING:
            continue
        if is_constant_value(value):
            h.update(f"{name}={value!r};".encode())
        elif getattr(value, "_cupric_device_function", False):
            h.update(f"{name}=device;".encode())
            _feed_function(h, value.py_func, lines, seen)
        elif isinstance(value, pytypes.ModuleType):
            h.update(f"{name}=module {value.__name__};".encode())
        elif type(value).__module__ == "numpy" or hasattr(value, "__array_interface__"):
            # Module-level arrays are compiled into the kernel as constant data.
            data = getattr(value, "tobytes", None)
            h.update(f"{name}=array {getattr(value, 'dtype', '')} "
                     f"{getattr(value, 'shape', '')} {type(value).__name__};".encode())
            if data is not None:
                h.update(data())
        else:
            h.update(f"{name}={type(value).__module__}.{type(value).__qualname__}:"
                     f"{getattr(value, 'name', getattr(value, '__name__', ''))};".encode())


@functools.cache
def compiler_stamp() -> str:
    """Identifies this build of the frontend: the version constant plus the size and
    modification time of its source files, so an edited compiler never reuses code that
    an older one cached (one `stat` per module, once per process)."""
    root = Path(__file__).resolve().parent
    parts = [str(FRONTEND_VERSION)]
    for sub in ("", "frontend", "typing", "ir", "codegen", "lowering"):
        for path in sorted((root / sub).glob("*.py")):
            st = path.stat()
            parts.append(f"{sub}/{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()


def fingerprint(py_func, *, lines: bool = False) -> str:
    """Hex digest of the code `py_func` compiles from (see the module docstring).

    Parameters
    ----------
    lines : bool
        Include the line table (line info and debug builds map PTX to lines).
    """
    h = hashlib.blake2b(digest_size=20)
    h.update(f"cupric-frontend-{compiler_stamp()}-py{sys.version_info[:2]}".encode())
    _feed_function(h, py_func, lines, set())
    return h.hexdigest()
