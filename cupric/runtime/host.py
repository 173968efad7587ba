"""Pinned (page-locked) host memory, seen as NumPy arrays.

The GPU's copy engines read and write page-locked memory directly (DMA), so copies from
and to it run at full bus speed and can overlap with kernels (`cuMemcpy*Async`); pageable
memory is staged through a driver buffer instead. Memory comes from `cuMemHostAlloc`, or an
existing NumPy array is page-locked in place with `cuMemHostRegister`.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from . import _lifetime
from ._driver import check, driver
from .errors import ClosedError
from .memory import _device_of_context, borrow, normalize_dtype, normalize_shape

__all__ = ["PinnedBuffer", "PinnedOptions", "pinned_empty", "pinned_zeros", "pinned_array",
           "register"]

# Flag bits of cuMemHostAlloc (CU_MEMHOSTALLOC_*) and cuMemHostRegister
# (CU_MEMHOSTREGISTER_*), part of the driver's stable ABI.
_ALLOC_PORTABLE = 0x01
_ALLOC_DEVICEMAP = 0x02
_ALLOC_WRITECOMBINED = 0x04
_REGISTER_PORTABLE = 0x01
_REGISTER_DEVICEMAP = 0x02
_REGISTER_READ_ONLY = 0x08


@dataclasses.dataclass(frozen=True)
class PinnedOptions:
    """How pinned memory is allocated or registered.

    Parameters
    ----------
    portable : bool
        Pinned for every CUDA context, not only the current one (``*_PORTABLE``).
    device_map : bool
        Map the memory into the device address space, so kernels can read it directly
        (``*_DEVICEMAP``; with unified addressing the device address is the host address).
    write_combined : bool
        Write-combined memory (allocation only): faster host-to-device transfers, very slow
        host reads. Only for buffers the host writes and never reads.
    read_only : bool
        Registration only: the device only reads the memory (``CU_MEMHOSTREGISTER_READ_ONLY``).
    """

    portable: bool = True
    device_map: bool = True
    write_combined: bool = False
    read_only: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if not isinstance(getattr(self, field.name), bool):
                raise TypeError(f"PinnedOptions.{field.name} must be a bool")

    def alloc_flags(self) -> int:
        """The `cuMemHostAlloc` flags."""
        if self.read_only:
            raise ValueError("PinnedOptions.read_only applies to register(), not to "
                             "allocation")
        return ((_ALLOC_PORTABLE if self.portable else 0)
                | (_ALLOC_DEVICEMAP if self.device_map else 0)
                | (_ALLOC_WRITECOMBINED if self.write_combined else 0))

    def register_flags(self) -> int:
        """The `cuMemHostRegister` flags."""
        if self.write_combined:
            raise ValueError("PinnedOptions.write_combined applies to allocation, not to "
                             "register()")
        return ((_REGISTER_PORTABLE if self.portable else 0)
                | (_REGISTER_DEVICEMAP if self.device_map else 0)
                | (_REGISTER_READ_ONLY if self.read_only else 0))


class _PinnedMemory(_lifetime.Resource):
    """Slotted holder of a pinned host pointer; freed (or unregistered) exactly once."""

    __slots__ = ("ptr", "nbytes", "registered", "source")

    def _label(self) -> str:
        what = "registered host memory" if self.registered else "pinned host memory"
        return f"{what} ({self.nbytes} bytes)"


def _free_host(ptr) -> None:
    check(driver().cuMemFreeHost(ptr))


def _unregister_host(ptr) -> None:
    check(driver().cuMemHostUnregister(ptr))


def _array_over(memory: _PinnedMemory, shape, dtype, strides=None) -> np.ndarray:
    """A NumPy array over pinned memory whose base chain keeps `memory` alive."""
    raw = (ctypes.c_char * max(memory.nbytes, 1)).from_address(memory.ptr)
    raw._cupric_owner = memory  # ctypes objects accept attributes: the array's base owns
    return np.ndarray(shape, dtype, buffer=raw, strides=strides)


class PinnedBuffer:
    """Page-locked host memory with a NumPy view (`array`).

    Made by `pinned_empty`, `pinned_zeros`, `pinned_array` or `register` (no public
    constructor). Pass ``buf`` or ``buf.array`` to `DeviceBuffer.copy_from`/`copy_to` with
    a stream for asynchronous, full-speed transfers.

    Safety
    ------
    ``close()`` frees (or unregisters) the memory at once. Allocated memory is then gone:
    touching `array` or any view of it afterwards is a use-after-free that can crash the
    process. Without ``close()``, the memory lives as long as the buffer or any NumPy view
    of it. Copies queued on a stream must complete before closing.

    Thread safety
    -------------
    As a NumPy array.
    """

    __slots__ = ("_memory", "array", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("PinnedBuffer has no public constructor; use "
                        "cupric.runtime.host.pinned_empty(), pinned_zeros(), "
                        "pinned_array() or register()")

    @classmethod
    def _make(cls, memory: _PinnedMemory, array: np.ndarray) -> "PinnedBuffer":
        self = object.__new__(cls)
        self._memory = memory
        self.array = array
        return self

    @property
    def ptr(self) -> int:
        """The host address of the memory."""
        self._check_open()
        return self._memory.ptr

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    @property
    def shape(self) -> tuple:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    @property
    def registered(self) -> bool:
        """True when this is a page-locked existing array (`register`)."""
        return self._memory.registered

    @property
    def closed(self) -> bool:
        return self._memory.closed

    def _check_open(self) -> None:
        if self._memory.closed:
            raise ClosedError("this PinnedBuffer is closed; its memory was released")

    def __array__(self, dtype=None, copy=None):
        self._check_open()
        if copy:
            return np.array(self.array, dtype=dtype, copy=True)
        return self.array if dtype is None else self.array.astype(dtype)

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, key):
        self._check_open()
        return self.array[key]

    def __setitem__(self, key, value) -> None:
        self._check_open()
        self.array[key] = value

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr=0x{self._memory.ptr:x}"
        kind = "registered" if self.registered else "pinned"
        return f"<PinnedBuffer {kind} shape={self.shape} dtype={self.dtype} {state}>"

    def device_view(self):
        """A `DeviceBuffer` over the same memory as the device sees it (mapped memory),
        for kernels that read or write host memory directly (zero-copy).

        Needs ``PinnedOptions(device_map=True)`` (the default). The view borrows: it keeps
        this buffer's memory alive and never frees it.
        """
        self._check_open()
        _device_of_context()
        device_ptr = int(check(driver().cuMemHostGetDevicePointer(self._memory.ptr, 0)))
        return borrow(device_ptr, self.array.shape, self.array.strides, self.array.dtype,
                      owner=self._memory, readonly=not self.array.flags.writeable)

    def close(self) -> None:
        """Free (`cuMemFreeHost`) or unregister (`cuMemHostUnregister`) now.

        A second call does nothing. See Safety in the class docstring.
        """
        memory = self._memory
        if memory.closed:
            return
        memory.close()
        memory.source = None

    def __enter__(self) -> "PinnedBuffer":
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def _new_memory(ptr: int, nbytes: int, registered: bool, release, source=None):
    memory = _PinnedMemory.__new__(_PinnedMemory)
    memory.ptr = ptr
    memory.nbytes = nbytes
    memory.registered = registered
    memory.source = source
    memory._init_resource(ptr, release)
    return memory


def pinned_empty(shape, dtype=np.float64, options: PinnedOptions | None = None) -> PinnedBuffer:
    """New uninitialized pinned host memory as a C-contiguous array.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : numpy dtype-like
    options : PinnedOptions, optional
        Portable and device-mapped by default.

    Raises
    ------
    CudaOutOfMemoryError
        When the driver cannot page-lock that much host memory.

    Cost
    ----
    Page-locking is slow (milliseconds for large sizes): allocate once, reuse.
    """
    options = options or PinnedOptions()
    dt = normalize_dtype(dtype)
    shape = normalize_shape(shape)
    nbytes = dt.itemsize
    for n in shape:
        nbytes *= n
    _device_of_context()
    flags = options.alloc_flags()
    ptr = int(check(driver().cuMemHostAlloc(max(nbytes, 1), flags), requested=nbytes))
    memory = _new_memory(ptr, max(nbytes, 1), False, _free_host)
    return PinnedBuffer._make(memory, _array_over(memory, shape, dt))


def pinned_zeros(shape, dtype=np.float64, options: PinnedOptions | None = None) -> PinnedBuffer:
    """As `pinned_empty`, filled with zeros."""
    buf = pinned_empty(shape, dtype, options)
    buf.array.fill(0)
    return buf


def pinned_array(array, options: PinnedOptions | None = None) -> PinnedBuffer:
    """New pinned memory holding a copy of `array`."""
    source = np.asarray(array)
    buf = pinned_empty(source.shape, source.dtype, options)
    buf.array[...] = source
    return buf


def register(array: np.ndarray, options: PinnedOptions | None = None) -> PinnedBuffer:
    """Page-lock an existing C-contiguous NumPy array in place (`cuMemHostRegister`).

    The returned buffer's `array` is `array` itself; `close()` unregisters (the memory
    stays NumPy's). The buffer keeps `array` alive until then.

    Raises
    ------
    TypeError
        If `array` is not a NumPy array.
    ValueError
        If it is empty or not C-contiguous.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"register() takes a NumPy array, got {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError("register() needs a C-contiguous array")
    if array.nbytes == 0:
        raise ValueError("register() needs a non-empty array")
    options = options or PinnedOptions()
    _device_of_context()
    ptr = array.__array_interface__["data"][0]
    check(driver().cuMemHostRegister(ptr, array.nbytes, options.register_flags()),
          requested=array.nbytes)
    memory = _new_memory(ptr, array.nbytes, True, _unregister_host, source=array)
    return PinnedBuffer._make(memory, array)

