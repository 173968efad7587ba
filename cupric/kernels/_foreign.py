"""The ready kernels' view of PyTorch tensors and CuPy arrays: dtype, shape and size
read once per call from the arrays' own attributes, the array itself handed to the
kernel's compiled launcher (which reads its pointer in C), or a launch-only DeviceBuffer
view where a kernel needs another dtype or rank of the same memory."""

from __future__ import annotations

import numpy as np

from cupric.runtime.memory import DeviceBuffer as _DeviceBuffer
from cupric.runtime.memory import borrow_validated
from cupric.runtime.memory import c_strides as _c_strides
from cupric.runtime.memory import is_c_contiguous as _is_c_contiguous

__all__ = ["Foreign", "read_torch", "read_cupy"]


class Foreign:
    """A PyTorch tensor or CuPy array as a ready kernel's host code sees it: NumPy dtype,
    shape and size read once from the array's own attributes, the array itself handed
    to the kernel's launch.

    Made by `Call.array` for non-empty C-contiguous CUDA arrays of the adapters' kinds
    on a one-GPU machine (a 1-D PyTorch tensor's stride is left to the launcher taking
    it, or checked by `Call._settle` before a view of it; anything else takes the
    intake layer's borrow, with its checks and errors). A launch gets the array itself
    where it is 1-D in its own dtype (the kernel's compiled launcher reads PyTorch
    tensors and CuPy arrays directly, with no DeviceBuffer made), else a DeviceBuffer
    view over the same memory made for that launch only. Any other DeviceBuffer
    attribute (``view``, ``reshape``, ...) is answered by a borrow that keeps the array
    alive (`buffer`).

    Safety
    ------
    The launch views carry no owner: the call's caller holds the array for the call,
    and nothing of them outlives the launch.
    """

    __slots__ = ("obj", "kind", "shape", "dtype", "size", "direct", "call")

    readonly = False  # PyTorch and CuPy never export read-only memory
    is_c_contiguous = True

    def __init__(self, obj, kind, shape, dtype, size, direct, call) -> None:
        self.obj = obj
        self.kind = kind
        self.shape = shape
        self.dtype = dtype
        self.size = size
        self.direct = direct  # `obj` itself is this 1-D array (same dtype, rank 1)
        self.call = call  # the Call to settle with before a view is used, or None

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def ptr(self) -> int:
        obj = self.obj
        return obj.data_ptr() if self.kind == "torch" else obj.data.ptr

    @property
    def strides(self) -> tuple:
        return tuple(_c_strides(self.shape, self.dtype.itemsize))

    def flat(self, dtype=None) -> "Foreign":
        """The 1-D view of all items, read as `dtype` (same item size) when given."""
        if dtype is None or dtype == self.dtype:
            if len(self.shape) == 1:
                return self
            dtype = self.dtype
        elif dtype.itemsize != self.dtype.itemsize:
            raise ValueError(f"cannot view {self.dtype} items as {dtype}")
        return Foreign(self.obj, self.kind, (self.size,), dtype, self.size, False,
                       self.call)

    def launchable(self):
        """What a launch takes: the array itself, or a view over its memory for this
        launch (see Safety)."""
        return self.obj if self.direct else self.launch_view()

    def launch_view(self):
        """A DeviceBuffer over the memory for one launch or memset of the call (see
        Safety): no owner, never closed."""
        call = self.call
        if call is not None:
            other = call._settle(self)
            if other is not None:
                return other
        shape = self.shape
        return _DeviceBuffer.view_of(_TRANSIENT, self.ptr, shape,
                                   tuple(_c_strides(shape, self.dtype.itemsize)),
                                   self.dtype, False, None)

    def view(self, dtype):
        """The same items read as `dtype` (as `DeviceBuffer.view`)."""
        dtype = np.dtype(dtype)
        if dtype.itemsize == self.dtype.itemsize:
            return Foreign(self.obj, self.kind, self.shape, dtype, self.size, False,
                           self.call)
        return self.buffer().view(dtype)

    def buffer(self):
        """A DeviceBuffer borrowing the memory, keeping the array alive."""
        call = self.call
        if call is not None:
            other = call._settle(self)
            if other is not None:
                return other
        return borrow_validated(self.ptr, self.shape, self.strides, self.dtype, False,
                                self.obj, None)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.buffer(), name)

    def __repr__(self) -> str:
        return f"<Foreign {self.kind} shape={self.shape} dtype={self.dtype}>"


#: Whether `Call.array` reads PyTorch and CuPy arrays as `Foreign` (else through the
#: intake layer's borrow, as other kinds), and per kind whether a launch takes a 1-D
#: array itself (the compiled launcher reads it again, CuPy's current stream included)
#: rather than a launch view made from the call's own reading. Benchmarks switch them
#: to measure each path in one process.
_FOREIGN = [True]
_DIRECT = {"torch": True, "cupy": True}


def read_torch(t, adapter, call):
    """A non-empty CUDA tensor (strided, no autograd, a dtype NumPy names) as a `Foreign`,
    else None (the intake layer then reads it, or raises). A 1-D one's stride is left
    to the launcher taking it (one method call fewer; a strided one takes the general
    launch path) or to `Call._settle` before a view of it; others must be contiguous."""
    dtype = adapter.dtypes.get(t.dtype)
    if dtype is None or dtype.kind == "V" or not t.is_cuda or t.requires_grad or \
            t.layout is not adapter.strided:
        return None
    shape = tuple(t.shape)
    if len(shape) == 1:
        size = shape[0]
        if not size:
            return None
        return Foreign(t, "torch", shape, dtype, size, _DIRECT["torch"], call)
    if not t.is_contiguous():
        return None
    size = 1
    for n in shape:
        size *= n
    if not size:
        return None
    return Foreign(t, "torch", shape, dtype, size, False, None)


def read_cupy(a, adapter, call):
    """A non-empty C-contiguous CuPy array as a `Foreign`, else None."""
    dtype = adapter.dtypes[a.dtype]
    if dtype is False:
        return None
    size = a.size
    if not size:
        return None
    shape = a.shape
    try:
        contiguous = a._c_contiguous  # CuPy's own flag, a plain field
    except AttributeError:  # an array class without it: from the strides
        contiguous = _is_c_contiguous(shape, a.strides, dtype.itemsize)
    if not contiguous:
        return None
    if call._cupy is None and adapter.current_stream is not None:
        # CuPy's interface names its current stream as every array's producer: the
        # launcher taking the array orders the launch after it; before a view of the
        # array is used, the call does (`Call._settle`).
        call._cupy = adapter
    return Foreign(a, "cupy", shape, dtype, size, len(shape) == 1 and _DIRECT["cupy"],
                   call)


def _transient_allocation():
    """The allocation record of `Foreign.launch_view`'s views: borrowed, never closed,
    owning nothing (one record serves them all; each view lives for one launch)."""
    return borrow_validated(0, (0,), (1,), np.dtype(np.uint8), False, None, None).allocation


_TRANSIENT = _transient_allocation()
