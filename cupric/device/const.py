"""Constant memory: read-only module-level arrays that kernels read through the 64 KiB
constant bank (PTX `.const`), cached and broadcast to the threads of a warp.

Module-level NumPy arrays that a kernel reads become constant data automatically: the
compiler tracks the total, spills the largest arrays to global memory past
`CONSTANT_MEMORY_BYTES`, and warns near the limit. Wrapping an array with `constant()`
marks it explicitly: then it must fit, or compiling fails.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CONSTANT_MEMORY_BYTES", "CONSTANT_WARN_FRACTION", "ConstantArray", "constant"]

#: Size of the constant bank a module's `.const` data shares.
CONSTANT_MEMORY_BYTES = 64 * 1024
#: Fraction of the bank past which the compiler warns.
CONSTANT_WARN_FRACTION = 0.9


class ConstantArray(np.ndarray):
    """A read-only NumPy array marked for constant memory (see `constant`)."""

    def __array_finalize__(self, obj) -> None:
        # Views and copies of a constant array are ordinary arrays again; only the marked
        # object itself carries the "must be constant" request.
        pass


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
    arr = np.array(values, dtype=dtype, copy=True, order="C").view(ConstantArray)
    arr.flags.writeable = False
    if arr.nbytes > CONSTANT_MEMORY_BYTES:
        raise ValueError(f"constant array of {arr.nbytes} bytes exceeds the "
                         f"{CONSTANT_MEMORY_BYTES}-byte constant bank")
    return arr
