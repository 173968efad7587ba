"""Constant memory: read-only module-level arrays that kernels read through the 64 KiB
constant bank (PTX `.const`), cached and broadcast to the threads of a warp.

Module-level NumPy arrays that a kernel reads become constant data automatically: the
compiler tracks the total, spills the largest arrays to global memory past
`CONSTANT_MEMORY_BYTES`, and warns near the limit. Wrapping an array with `constant()`
marks it explicitly: then it must fit, or compiling fails. `global_memory()` marks an
array for global memory (read through the non-coherent cache) whatever the policy.

How unmarked arrays are placed is a `ConstantPolicy`: automatic or explicit-only
placement, the warning range, and the packing order that decides which arrays stay in
the bank when not all fit. `set_constant_policy()` sets it for the process;
`constant_policy()` (a decorator) for one kernel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from typing import Callable, Sequence

import numpy as np

__all__ = ["CONSTANT_MEMORY_BYTES", "CONSTANT_WARN_FRACTION", "ConstantArray", "constant",
           "GlobalArray", "global_memory", "ConstantPolicy", "ConstantCandidate",
           "PACKINGS", "set_constant_policy", "get_constant_policy", "constant_policy",
           "policy_of"]

#: Size of the constant bank a module's `.const` data shares.
CONSTANT_MEMORY_BYTES = 64 * 1024
#: Fraction of the bank past which the compiler warns (the default policy's range).
CONSTANT_WARN_FRACTION = 0.9


class ConstantArray(np.ndarray):
    """A read-only NumPy array marked for constant memory (see `constant`)."""

    def __array_finalize__(self, obj) -> None:
        # Views and copies of a constant array are ordinary arrays again; only the marked
        # object itself carries the "must be constant" request.
        pass


class GlobalArray(np.ndarray):
    """A read-only NumPy array marked for global memory (see `global_memory`)."""

    def __array_finalize__(self, obj) -> None:
        pass  # as ConstantArray: only the marked object carries the request


def constant(values, dtype=None) -> ConstantArray:
    """Mark module-level data for constant memory.

    Parameters
    ----------
    values : array_like
        The data; copied into a new, read-only array.
    dtype : dtype, optional
        The element type (default: inferred by NumPy).

    Returns
    -------
    ConstantArray
        A read-only ndarray subclass. Kernels index it like any array; the compiler
        places it in `.const` and refuses to compile if the module's constant data then
        exceeds `CONSTANT_MEMORY_BYTES`. The simulator reads it as a NumPy array.

    Examples
    --------
    >>> WEIGHTS = constant([0.25, 0.5, 0.25], dtype=np.float32)
    """
    arr = _marked(values, dtype, ConstantArray)
    if arr.nbytes > CONSTANT_MEMORY_BYTES:
        raise ValueError(f"constant array of {arr.nbytes} bytes exceeds the "
                         f"{CONSTANT_MEMORY_BYTES}-byte constant bank")
    return arr


def global_memory(values, dtype=None) -> GlobalArray:
    """Mark module-level data for global memory (the counterpart of Rust CUDA's
    ``#[address_space(global)]``): kernels read it through the non-coherent cache and it
    never takes room in the constant bank, whatever the policy.

    Use it for large tables that threads of a warp index at different places (constant
    memory serializes such reads), so that smaller arrays keep the bank.

    Parameters
    ----------
    values : array_like
        The data; copied into a new, read-only array.
    dtype : dtype, optional
        The element type (default: inferred by NumPy).

    Returns
    -------
    GlobalArray
        A read-only ndarray subclass; the simulator reads it as a NumPy array.

    Examples
    --------
    >>> TABLE = global_memory(np.arange(1 << 16, dtype=np.uint32))
    """
    return _marked(values, dtype, GlobalArray)


def _marked(values, dtype, cls):
    """A read-only C-ordered copy of `values` viewed as the marker class `cls`."""
    arr = np.array(values, dtype=dtype, copy=True, order="C").view(cls)
    arr.flags.writeable = False
    return arr


@dataclasses.dataclass(frozen=True)
class ConstantCandidate:
    """One unmarked module-level array competing for the constant bank (what a packing
    function ranks).

    Attributes
    ----------
    name : str
        The Python name the kernel code used.
    module : str
        The module whose code named it (``__module__`` of the kernel or device function).
    nbytes : int
    shape : tuple of int
    dtype : numpy.dtype
    order : int
        Position of its first use in the kernel and its device functions.
    """

    name: str
    module: str
    nbytes: int
    shape: tuple
    dtype: np.dtype
    order: int


#: The named packing orders: which unmarked arrays stay in the bank when not all fit.
PACKINGS = ("small_first", "large_first", "by_module")


@dataclasses.dataclass(frozen=True)
class ConstantPolicy:
    """How the compiler places module-level arrays.

    Parameters
    ----------
    placement : {"auto", "explicit"}
        ``"auto"`` (default): unmarked arrays go to the constant bank while they fit.
        ``"explicit"``: only arrays marked `constant()` go there; every other array is
        read from global memory.
    warn_range : tuple of float, or None
        Warn when the constant data fills a fraction of the bank inside ``[low, high]``
        (default ``(0.9, 1.0)``: past 90 %). None: never warn about the fill level
        (spilling still warns).
    packing : str or callable
        The order in which unmarked arrays are offered to the bank, each placed when it
        still fits and spilled to global memory otherwise. ``"small_first"`` (default:
        as many arrays as possible stay; the largest spill), ``"large_first"`` (the
        largest that fit stay: a big lookup table before many small ones),
        ``"by_module"`` (arrays the kernel's own module names first, then those of other
        modules by module name: a third-party library's tables spill first), or a
        function taking the list of `ConstantCandidate` and returning them ranked, the
        most wanted first (it must return each exactly once).
    spill_warning : bool
        Warn when automatic placement spills arrays to global memory (default True).

    Raises
    ------
    ValueError
        An unknown placement or packing, or a warning range outside [0, 1].
    """

    placement: str = "auto"
    warn_range: tuple | None = (CONSTANT_WARN_FRACTION, 1.0)
    packing: str | Callable[[list], Sequence] = "small_first"
    spill_warning: bool = True

    def __post_init__(self) -> None:
        if self.placement not in ("auto", "explicit"):
            raise ValueError(f"placement must be 'auto' or 'explicit', got "
                             f"{self.placement!r}")
        if self.warn_range is not None:
            try:
                low, high = (float(v) for v in self.warn_range)
            except (TypeError, ValueError):
                raise ValueError(f"warn_range must be (low, high) fractions of the bank or "
                                 f"None, got {self.warn_range!r}") from None
            if not 0.0 <= low <= high:
                raise ValueError(f"warn_range needs 0 <= low <= high, got {self.warn_range}")
            object.__setattr__(self, "warn_range", (low, high))
        if not callable(self.packing) and self.packing not in PACKINGS:
            raise ValueError(f"packing must be one of {', '.join(PACKINGS)} or a function, "
                             f"got {self.packing!r}")

    def cache_key(self) -> str:
        """A stable text that changes whenever the policy could place arrays otherwise
        (a packing function is named by its qualified name and bytecode)."""
        packing = self.packing
        if callable(packing):
            code = getattr(packing, "__code__", None)
            digest = hashlib.sha256(code.co_code + repr(code.co_consts).encode()
                                    ).hexdigest()[:16] if code is not None else "?"
            packing = f"{getattr(packing, '__module__', '?')}." \
                      f"{getattr(packing, '__qualname__', repr(packing))}:{digest}"
        return f"{self.placement}|{self.warn_range}|{packing}|{self.spill_warning}"


_DEFAULT = ConstantPolicy()
_process_policy = [_DEFAULT]
_lock = threading.Lock()

#: Attribute a kernel's Python function carries when `constant_policy` decorated it.
_ATTRIBUTE = "__cupric_constant_policy__"


def set_constant_policy(policy: ConstantPolicy | None = None, **fields) -> ConstantPolicy:
    """Set the process-wide constant-memory policy; returns the previous one.

    Pass a `ConstantPolicy`, or its fields as keywords (``placement="explicit"``), or
    nothing to restore the default. Kernels compiled afterwards use it unless they carry
    their own (`constant_policy`); it is part of the kernel cache key, so code cached
    under another policy is not reused.

    Thread safety
    -------------
    The switch is atomic; a kernel being compiled on another thread at that moment may
    use either policy.
    """
    if policy is None:
        policy = ConstantPolicy(**fields)
    elif fields:
        policy = dataclasses.replace(policy, **fields)
    if not isinstance(policy, ConstantPolicy):
        raise TypeError(f"expected a ConstantPolicy, got {type(policy).__name__}")
    with _lock:
        previous = _process_policy[0]
        _process_policy[0] = policy
    return previous


def get_constant_policy() -> ConstantPolicy:
    """The process-wide constant-memory policy."""
    return _process_policy[0]


def constant_policy(policy: ConstantPolicy | None = None, **fields):
    """Decorator: give one kernel its own constant-memory policy (over the process's).

    Put it under or over ``@cupric.kernel``::

        @cupric.kernel
        @constant_policy(placement="explicit")
        def k(out: Array[f32, 1]): ...
    """
    if policy is None:
        policy = ConstantPolicy(**fields)
    elif fields:
        policy = dataclasses.replace(policy, **fields)

    def apply(obj):
        func = getattr(obj, "py_func", obj)  # a cupric Kernel or the plain function
        setattr(func, _ATTRIBUTE, policy)
        return obj
    return apply


def policy_of(py_func) -> ConstantPolicy:
    """The policy that applies to the kernel whose Python function is `py_func`."""
    return getattr(py_func, _ATTRIBUTE, None) or _process_policy[0]
