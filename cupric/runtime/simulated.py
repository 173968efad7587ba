"""Device memory stood in by host memory, for machines that run kernels on the simulator.

Where no CUDA driver loads, kernels run on cupric's CPU simulator, which reads NumPy
arrays. So that a program written for the GPU runs there unchanged, the allocating
functions of `cupric.runtime` (`empty`,
`zeros`, `to_device`, `empty_like`, `zeros_like`, `device_box`) then hand out
`SimulatedBuffer` objects: NumPy arrays in host memory with the DeviceBuffer methods a
program calls (`to_numpy`, `copy_from`, `copy_to`, `zero`, `fill`, `copy`, `astype`,
`close`, a context manager).
"""

from __future__ import annotations

import numpy as np

from cupric.runtime.errors import ClosedError

__all__ = ["SimulatedBuffer"]


class SimulatedBuffer(np.ndarray):
    """A NumPy array standing in for a `DeviceBuffer` on the simulator.

    Slicing, `reshape`, `view` and ``.T`` give views that share memory, as a
    DeviceBuffer's do; `close` frees nothing (host memory goes with the last reference)
    but makes this array refuse use through the DeviceBuffer methods.

    Safety
    ------
    There is no device and no stream: every method runs at once on the host, and
    `stream` arguments are accepted and ignored.
    """

    @property
    def closed(self) -> bool:
        """Whether `close` was called on this array (views are not marked)."""
        return bool(getattr(self, "_closed", False))

    @property
    def device(self) -> int:
        """The simulated device, 0."""
        return 0

    @property
    def readonly(self) -> bool:
        return not self.flags.writeable

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError("this simulated device buffer was closed")

    def close(self, stream=None) -> None:
        """Mark the buffer closed (the memory is host memory, freed with the array)."""
        self._closed = True

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def to_numpy(self, stream=None) -> np.ndarray:
        """A host copy (a plain NumPy array)."""
        self._check_open()
        return np.array(self, copy=True).view(np.ndarray)

    def copy_from(self, src, stream=None) -> None:
        """Copy `src` (same shape and dtype) into this array."""
        self._check_open()
        source = np.asarray(src)
        if source.shape != self.shape or source.dtype != self.dtype:
            raise ValueError(f"copy_from: source is {source.dtype}{list(source.shape)}, "
                             f"this buffer {self.dtype}{list(self.shape)}")
        self[...] = source

    def copy_to(self, dst, stream=None) -> None:
        """Copy this array into `dst` (same shape and dtype)."""
        self._check_open()
        if dst.shape != self.shape or dst.dtype != self.dtype:
            raise ValueError(f"copy_to: destination is {dst.dtype}{list(dst.shape)}, "
                             f"this buffer {self.dtype}{list(self.shape)}")
        dst[...] = self

    def copy(self, stream=None, order="C") -> "SimulatedBuffer":
        self._check_open()
        return np.array(self, copy=True, order=order).view(SimulatedBuffer)

    def zero(self, stream=None) -> None:
        self._check_open()
        np.ndarray.fill(self, 0)

    def fill(self, value, stream=None) -> None:
        self._check_open()
        np.ndarray.fill(self, value)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True,
               stream=None):
        self._check_open()
        return np.ndarray.astype(self, dtype, order=order, casting=casting, subok=True,
                                 copy=copy)


def empty(shape, dtype) -> SimulatedBuffer:
    """Uninitialized simulated memory: filled with a poison (NaN, or all bits set for
    integers) so that reading an unwritten element shows, as it would not on the host."""
    array = np.empty(shape, dtype).view(SimulatedBuffer)
    if array.dtype.kind in "fc":
        array[...] = np.nan
    else:
        array.view(np.uint8).fill(0xFF)
    return array


def zeros(shape, dtype) -> SimulatedBuffer:
    return np.zeros(shape, dtype).view(SimulatedBuffer)


def to_device(array) -> SimulatedBuffer:
    if hasattr(array, "to_numpy"):
        array = array.to_numpy()
    return np.array(array, copy=True, order="C").view(SimulatedBuffer)
