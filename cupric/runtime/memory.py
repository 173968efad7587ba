"""Device memory: linear allocations in GPU global memory, seen as typed N-d arrays.

An allocation comes from `cuMemAlloc` (usable at once by every stream) or, when a stream is
given, in stream order (`cuMemAllocAsync`: a block freed on that stream and kept by the
allocation cache, else the device's current pool), and is freed in stream order. A
`DeviceBuffer` is a typed view (dtype, shape, byte strides) of one allocation; slicing
gives more views of the same allocation, never copies.

This module makes buffers (`empty`, `zeros`, `to_device`...), borrows other libraries'
memory and orders streams after one another; the parts live beside it, one concept each:
`layout` (shape and stride arithmetic), `allocation` (ownership, allocation, frees and the
allocation cache), `buffer` (`DeviceBuffer`). Every name of those that callers used from
here is still importable from here.
"""

from __future__ import annotations

import threading

import numpy as np

from . import allocation as _allocation
from ._driver import check, driver
from ._fastalloc import Entry as _FastEntry
from ._lifetime import _live, _pending
from .allocation import (  # noqa: F401  (re-exported: the runtime's names for these)
    ASYNC, BORROWED, EMPTY, LEGACY_STREAM, PER_THREAD_STREAM, SYNC, CacheStats, _Allocation,
    _allocate, _allocate_bindings, _allocate_cached, _context_for_free, _device_of_context,
    _forget_frees, _forget_stream, _free_async, _free_cached, _free_sync, _GONE_STREAM,
    _LABEL, _load_fast, _new_allocation, _ready, _release_borrow, _UNSET, cache_stats,
    pointer_device, release_cached, stream_handle)
from .buffer import (  # noqa: F401
    DeviceBox, DeviceBuffer, _device_array_or_none, _dlpack_on_device, _host_array,
    _host_ptr, _in_own_context)
from .errors import NoDriverError
from .layout import (  # noqa: F401
    c_strides, cai_dict, extent, index_layout, is_c_contiguous, is_f_contiguous,
    normalize_dtype, normalize_shape, reshape_layout, view_layout)

__all__ = [
    "DeviceBuffer", "DeviceBox", "empty", "zeros", "empty_like", "zeros_like", "to_device",
    "device_box", "memory_info", "release_cached", "cache_stats", "CacheStats",
]


# --------------------------------------------------------------------------------------
# The device's memory, and one stream ordered after another


def memory_info() -> tuple[int, int]:
    """Free and total memory of the current device, in bytes (`cuMemGetInfo`)."""
    _device_of_context()
    free, total = check(driver().cuMemGetInfo())
    return int(free), int(total)


_tls = threading.local()


def _sync_event(ordinal: int):
    """A per-thread, per-device event without timing, to order one stream after another
    (one per context: a reset of the device makes the next call create a new one)."""
    from .context import generation
    events = getattr(_tls, "events", None)
    if events is None:
        events = _tls.events = {}
    key = (ordinal, generation(ordinal))
    event = events.get(key)
    if event is None:
        for old in [k for k in events if k[0] == ordinal]:
            del events[old]  # made in a context that was reset: gone with it
        d = driver()
        event = check(d.cuEventCreate(int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)))
        events[key] = event
    return event


def order_after(consumer: int, producer: int) -> None:
    """Make work queued later on stream `consumer` wait for the work now on `producer`.

    Both are raw stream handles (ints) of the current device. Nothing is done when they
    are the same stream or both the legacy default stream. Used by the array-interchange
    protocols.

    Cost
    ----
    One `cuEventRecord` and one `cuStreamWaitEvent`; the host does not wait.
    """
    if consumer == producer:
        return
    if consumer in (0, LEGACY_STREAM) and producer in (0, LEGACY_STREAM):
        return
    event = _sync_event(_device_of_context())
    d = driver()
    check(d.cuEventRecord(event, producer))
    check(d.cuStreamWaitEvent(consumer, event, 0))


# --------------------------------------------------------------------------------------
# Memory of other libraries


def borrow(ptr: int, shape, strides, dtype, *, readonly=False, owner=None, release=None,
           device: int = -1, stream=None, cls=None) -> "DeviceBuffer":
    """A `DeviceBuffer` over memory that cupric does not own.

    `owner` is kept alive as long as any view of the buffer; `release`, when given, is a
    callable run once when the buffer is closed or (through the deferred queue) dies, for
    protocols whose borrow must be handed back (DLPack's deleter). The memory itself is
    never freed by cupric.
    """
    dtype = normalize_dtype(dtype)
    shape = normalize_shape(shape)
    if strides is None:
        strides = c_strides(shape, dtype.itemsize)
    low, high = extent(shape, strides, dtype.itemsize)
    if release is None:
        alloc = _new_allocation(ptr, high - low, BORROWED, device, None, owner=owner)
    else:
        alloc = _new_allocation(ptr, high - low, BORROWED, device, _release_borrow, release,
                                owner=owner)
    return DeviceBuffer._make(alloc, ptr, shape, tuple(strides), dtype, readonly, stream,
                              cls=cls)


def borrow_validated(ptr: int, shape: tuple, strides: tuple, dtype: np.dtype,
                     readonly: bool, owner, stream) -> "DeviceBuffer":
    """`borrow` for a layout already validated (shape and strides tuples of ints, a
    normalized dtype): the fast path of the array protocols."""
    alloc = _Allocation.__new__(_Allocation)
    alloc.ptr = ptr
    alloc.nbytes = -1  # unknown: borrows are never freed, so only labels would show it
    alloc.kind = BORROWED
    alloc.device = -1
    alloc.owner = owner
    alloc._init_resource(ptr, None)
    return DeviceBuffer._make(alloc, ptr, shape, strides, dtype, readonly, stream)


# --------------------------------------------------------------------------------------
# Factories


# (shape, dtype) as given -> the normalized C-contiguous layout (shape, strides, dtype,
# itemsize, size, nbytes, ndim, the shape and dtype as given): repeated allocations of one shape
# skip the normalization. Only exact ints and tuples of exact ints are keys;
# unhashable shapes and dtype specs (lists, dicts) are normalized every time. Bounded:
# cleared when full.
_layouts: dict = {}
_LAYOUTS_MAX = 512


def _sim():
    # Device memory is simulated in host memory where no driver loads, so that kernels
    # (which then run on the simulator) get arrays they can read: runtime.simulated.
    from cupric.runtime import simulated
    return simulated


def _exact_shape(shape) -> bool:
    if type(shape) is int:
        return True
    if type(shape) is not tuple:
        return False
    for n in shape:
        if type(n) is not int:
            return False
    return True


def _layout(shape, dtype) -> tuple:
    try:
        layout = _layouts[shape, dtype]
    except KeyError:
        cacheable = True
    except TypeError:  # an unhashable shape or dtype spec
        cacheable = False
    else:
        # Equal keys are not always the same request: (2.0, 3) equals (2, 3) but is
        # refused, and a dtype with metadata equals (and hashes as) its plain twin.
        if ((layout[7] is shape or _exact_shape(shape))
                and (layout[2] is dtype or not isinstance(dtype, np.dtype)
                     or dtype.metadata is None)):
            return layout
        cacheable = False
    dt = normalize_dtype(dtype)
    norm = normalize_shape(shape)
    size = 1
    for n in norm:
        size *= n
    layout = (norm, c_strides(norm, dt.itemsize), dt, dt.itemsize, size, size * dt.itemsize,
              len(norm), shape, dtype)
    if cacheable and dt.metadata is None and _exact_shape(shape):
        if len(_layouts) >= _LAYOUTS_MAX:
            _layouts.clear()
        _layouts[shape, dtype] = layout
    return layout


def _new_buffer(shape, dtype, stream=None, pool=None, cls=None) -> DeviceBuffer:
    try:
        layout = _layouts[shape, dtype]
    except (KeyError, TypeError):
        layout = _layout(shape, dtype)
    else:
        if layout[7] is not shape or layout[8] is not dtype:  # the very same objects:
            layout = _layout(shape, dtype)                    # else _layout's checks
    fast = _allocation._fast
    if (cls is None and stream is not None and pool is None and fast.__class__ is _FastEntry
            and layout[5] and not _pending):
        # The stream-ordered path in one C call (the block and this very object): every
        # output of every library call comes here. An error code (nothing was allocated)
        # is handled by `allocation._allocate_cached`.
        self = fast.buffer(layout, stream,
                           stream if stream.__class__ is int else stream_handle(stream))
        if self.__class__ is DeviceBuffer:
            return self
        alloc = _allocate_cached(fast, layout[5], stream, self)
    else:
        alloc = _allocate(layout[5], stream, pool)
    self = object.__new__(DeviceBuffer if cls is None else cls)
    self._alloc = alloc
    self.ptr = alloc.ptr
    (self.shape, self.strides, self.dtype, self.itemsize, self.size, self.nbytes,
     self.ndim, _shape, _dtype) = layout
    self.readonly = False
    self._stream = stream
    self._base = None
    return self


def _configure_extension(module) -> None:
    """Hand the allocation extension what its ``block`` and ``buffer`` build, and the table
    where it records their releases."""
    module.configure(_Allocation, _live, _free_cached, _free_async, ASYNC, _LABEL,
                     DeviceBuffer)


def empty(shape, dtype=np.float64, stream=None) -> DeviceBuffer:
    """A new uninitialized C-contiguous buffer on the current device.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : numpy dtype-like, default float64
    stream : Stream, optional
        Allocate in stream order from the device's current memory pool
        (`cuMemAllocAsync`): the memory may be used by work queued on `stream` (or ordered
        after it) and is freed on that stream by ``close()``. Without a stream the memory
        comes from `cuMemAlloc` and may be used by any stream at once.

    Raises
    ------
    CudaOutOfMemoryError
        Saying how much was asked for and how much is free.

    Examples
    --------
    >>> buf = cupric.runtime.empty((1024, 3), "f4")          # doctest: +SKIP

    Where no CUDA driver loads, this and the other allocating functions (`zeros`,
    `empty_like`, `zeros_like`, `to_device`, `device_box`) return host-memory
    `cupric.runtime.simulated.SimulatedBuffer` arrays instead, which kernels (then run
    on the simulator) read and write, so a program runs unchanged there.
    """
    try:
        return _new_buffer(shape, dtype, stream)
    except NoDriverError:
        return _sim().empty(normalize_shape(shape), normalize_dtype(dtype))


def zeros(shape, dtype=np.float64, stream=None) -> DeviceBuffer:
    """A new buffer with every byte zero (see `empty` for the parameters)."""
    try:
        buf = _new_buffer(shape, dtype, stream)
    except NoDriverError:
        return _sim().zeros(normalize_shape(shape), normalize_dtype(dtype))
    buf.zero(stream)
    return buf


def empty_like(array, dtype=None, stream=None) -> DeviceBuffer:
    """A new uninitialized C-contiguous buffer with the shape (and dtype) of `array`,
    which may be a host or device array.

    Raises
    ------
    TypeError
        `array` is not an array (it has no shape, or no dtype and none is given).
    """
    shape = getattr(array, "shape", None)
    if dtype is None:
        dtype = getattr(array, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"expected an array with a shape and a dtype (NumPy, DeviceBuffer, "
                        f"CuPy, PyTorch...), got {type(array).__name__}")
    try:
        return _new_buffer(shape, dtype, stream)
    except NoDriverError:
        return _sim().empty(normalize_shape(shape), normalize_dtype(dtype))


def zeros_like(array, dtype=None, stream=None) -> DeviceBuffer:
    """As `empty_like`, filled with zero bytes."""
    buf = empty_like(array, dtype, stream)
    buf.zero(stream=stream)
    return buf


def to_device(array, stream=None) -> DeviceBuffer:
    """A new device buffer holding a copy of an array.

    A host array (NumPy, `PinnedBuffer`) is copied host-to-device; a non-contiguous one is
    made contiguous on the host first. A device array (a `DeviceBuffer`, or any CAI/DLPack
    array) is copied device-to-device and must be C-contiguous. With a stream, the
    allocation and the copy are stream-ordered and the call returns before the copy ends
    (see `DeviceBuffer.copy_from` for the Safety of pinned sources).
    """
    device_array = _device_array_or_none(array)
    if device_array is not None:
        buf = _new_buffer(device_array.shape, device_array.dtype, stream)
        buf.copy_from(device_array, stream)
        return buf
    host = _host_array(array, "to_device's argument")
    if not host.flags.c_contiguous:
        host = np.ascontiguousarray(host)
    try:
        buf = _new_buffer(host.shape, host.dtype, stream)
    except NoDriverError:
        return _sim().to_device(host)
    buf.copy_from(host, stream)
    return buf


def device_box(value, dtype=None, stream=None) -> DeviceBox:
    """A `DeviceBox` holding `value` (dtype inferred by NumPy when not given)."""
    host = np.asarray(value, dtype=dtype)
    if host.ndim != 0:
        raise ValueError(f"a DeviceBox holds one value, got an array of shape {host.shape}")
    try:
        box = _new_buffer((), host.dtype, stream, cls=DeviceBox)
    except NoDriverError:
        return _sim().to_device(host)
    box.copy_from(host, stream)
    return box
