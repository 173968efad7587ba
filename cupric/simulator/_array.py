"""The view through which simulated kernels see arrays: NumPy indexing plus the GPU's
notion of bounds, where a negative index is out of bounds instead of counting from the
end. Errors name the array, the index and the kernel's Python line.
"""

from __future__ import annotations

import sys

import numpy as np

from ..device.errors import KernelIndexError

__all__ = ["SimArray", "unwrap"]

_INTS = (int, np.integer)


def _has_negative(idx) -> bool:
    if type(idx) is tuple:
        for k in idx:
            if isinstance(k, _INTS) and k < 0:
                return True
        return False
    return isinstance(idx, _INTS) and idx < 0


def _raise(arr: "SimArray", idx, depth: int = 2):
    frame = sys._getframe(depth)
    raise KernelIndexError(arr._name, idx, arr._a.shape, filename=frame.f_code.co_filename,
                           line=frame.f_lineno) from None


class SimArray:
    """A kernel's view of an ndarray: indexing, shape and dtype, checked like a GPU would.

    Integer indices must lie in [0, n); slices follow NumPy. Results that are arrays
    (sub-arrays, slices) are SimArrays of the same name. `np.asarray(view)` gives the
    underlying array.
    """

    __slots__ = ("_a", "_name")

    def __init__(self, array: np.ndarray, name: str) -> None:
        self._a = array
        self._name = name

    def __getitem__(self, idx):
        if _has_negative(idx):
            _raise(self, idx)
        try:
            value = self._a[idx]
        except IndexError:
            _raise(self, idx)
        if type(value) is np.ndarray:
            return SimArray(value, self._name)
        if type(value) is np.void:
            # A struct element: a record view, so that `a[i].x` reads and `a[i].x = v`
            # writes the array, as compiled code does.
            return self._a.view(np.recarray)[idx]
        return value

    def __setitem__(self, idx, value) -> None:
        if _has_negative(idx):
            _raise(self, idx)
        try:
            self._a[idx] = value
        except IndexError:
            _raise(self, idx)

    @property
    def shape(self) -> tuple:
        return self._a.shape

    @property
    def size(self) -> int:
        return self._a.size

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def dtype(self) -> np.dtype:
        return self._a.dtype

    @property
    def itemsize(self) -> int:
        return self._a.itemsize

    @property
    def strides(self) -> tuple:
        return self._a.strides

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self):
        for i in range(len(self._a)):
            yield self[i]

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)

    def __repr__(self) -> str:
        return f"<simulated array {self._name!r} shape={self._a.shape} dtype={self._a.dtype}>"


def unwrap(arr) -> np.ndarray:
    """The ndarray behind a SimArray (or the argument itself when it is one)."""
    return arr._a if type(arr) is SimArray else arr
