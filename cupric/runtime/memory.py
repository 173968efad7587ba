"""Device memory: linear allocations in GPU global memory, seen as typed N-d arrays.

An allocation comes from `cuMemAlloc` (usable at once by every stream) or, when a stream is
given, from the device's stream-ordered pool (`cuMemAllocAsync`), and is freed in stream
order. A `DeviceBuffer` is a typed view (dtype, shape, byte strides) of one allocation;
slicing gives more views of the same allocation, never copies.

Copies between host and device go through `cuMemcpyHtoD`/`DtoH`/`DtoD` (or their `Async`
forms on a stream), and fills through `cuMemsetD8/16/32`.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import operator
import threading

import numpy as np

from . import _lifetime
from ._driver import check, driver
from ._lifetime import _live
from .errors import ClosedError, NoDriverError, error_from_code
from .stream import Stream as _Stream
from .stream import as_stream_handle as _as_stream_handle

__all__ = [
    "DeviceBuffer", "DeviceBox", "empty", "zeros", "empty_like", "zeros_like", "to_device",
    "device_box", "memory_info", "release_cached", "cache_stats", "CacheStats",
]

# How an allocation was made decides how it is freed.
SYNC = "sync"          # cuMemAlloc / cuMemAllocManaged: freed by cuMemFree
ASYNC = "async"        # cuMemAllocAsync / cuMemAllocFromPoolAsync: freed by cuMemFreeAsync
BORROWED = "borrowed"  # memory of another library (CAI, DLPack): never freed by cupric
EMPTY = "empty"        # a zero-byte buffer: nothing was allocated

# CUDA's special stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
LEGACY_STREAM = 1
PER_THREAD_STREAM = 2

_NO_CONSTRUCTOR = ("DeviceBuffer has no public constructor: use cupric.runtime.empty(), "
                   "zeros(), to_device(), empty_like() or MemoryPool.empty()")


# --------------------------------------------------------------------------------------
# Streams and contexts


# The one resolver of stream arguments (None, int, cupric Stream, PyTorch/CuPy streams,
# __cuda_stream__), under the name the runtime has always used for it.
stream_handle = _as_stream_handle


# The compiled allocation path (`_fastalloc.Entry`): _UNSET until the first allocation
# resolves it, None where it cannot be built (or is turned off); then every call below
# goes through cuda.bindings. While the extension is built in the background it stays
# _UNSET (each call asks again, on the Python path meanwhile). Tests that substitute a
# fake driver set it to None.
_UNSET = object()
_fast = _UNSET


def _load_fast():
    global _fast
    from . import _fastalloc
    try:
        entry = _fastalloc.native()
    except Exception as exc:  # no driver: the cuda.bindings path raises the typed error
        exc.with_traceback(None)  # the error is kept by _driver: keep no frames with it
        entry = None
    if entry is None and _fastalloc.pending():
        return None
    _fast = entry
    return entry


def _device_of_context() -> int:
    """Make sure a context is current in this thread (device 0's primary context when
    none is, as the Runtime API does) and return the ordinal of its device.

    Cost
    ----
    One C call (two driver queries) with the compiled path; else see
    `context.current_device`.
    """
    fast = _fast
    if fast is _UNSET:
        fast = _load_fast()
    if fast is not None:
        device = fast.device()
        if device >= 0:
            return device
    from .context import current_device
    return current_device().ordinal


def _in_own_context(method):
    """Run a copy or fill with the buffer's own device current.

    Memory from another device's stream-ordered pool is reachable only from that device
    (peer access covers `cuMemAlloc` memory, not pools), so a copy issued from whichever
    context happens to be current can fail with CUDA_ERROR_INVALID_VALUE.
    """
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        device = self.device
        if device < 0 or device == _device_of_context():
            return method(self, *args, **kwargs)
        from .device import Device
        with Device(device).primary_context():
            return method(self, *args, **kwargs)
    return wrapper


def _ready():
    """The driver module, with a context current in this thread."""
    _device_of_context()
    return driver()


_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


def pointer_device(ptr: int) -> int:
    """The ordinal of the device a device pointer was allocated on (any context).

    cuda-bindings 13.3 reads `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` back from the wrong
    field and always answers 0 (NVIDIA/cuda-python issue 2928, seen here on two H200s).
    With more than one device, the attribute is therefore read from libcuda itself
    through ctypes; with one device, the answer is 0 either way.

    Raises
    ------
    CudaError
        If `ptr` is not memory the driver knows.
    """
    d = _ready()
    attribute = d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    answer = int(check(d.cuPointerGetAttribute(attribute, ptr)))
    if answer != 0 or check(d.cuDeviceGetCount()) < 2:
        return answer
    import ctypes
    import sys
    if not sys.platform.startswith("linux"):
        return answer  # the fixed bindings of other platforms' wheels are trusted
    function = ctypes.CDLL("libcuda.so.1").cuPointerGetAttribute  # already loaded
    function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong]
    function.restype = ctypes.c_int
    value = ctypes.c_int(-1)
    check((function(ctypes.byref(value), _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),))
    return value.value


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
# Layout arithmetic (pure; no driver)


def normalize_shape(shape) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints (an int gives a 1-d shape)."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    else:
        try:
            shape = tuple(operator.index(n) for n in shape)
        except TypeError:
            raise TypeError(f"a shape is an int or a sequence of ints, got {shape!r}") from None
    for n in shape:
        if n < 0:
            raise ValueError(f"negative dimension in shape {shape}")
    return shape


def normalize_dtype(dtype) -> np.dtype:
    """A NumPy dtype that device memory can hold (fixed size, no Python objects)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {dtype!r} ({exc})") from None
    if dt.hasobject or dt.itemsize == 0:
        raise TypeError(f"dtype {dt} cannot live in device memory: it must have a fixed "
                        f"size and no Python objects")
    return dt


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous (row-major) array."""
    strides = [0] * len(shape)
    step = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        strides[axis] = step
        step *= max(shape[axis], 1)
    return tuple(strides)


def is_c_contiguous(shape, strides, itemsize) -> bool:
    """True when the layout is row-major with no gaps (axes of length 1 ignored)."""
    if 0 in shape:
        return True
    expected = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        n = shape[axis]
        if n != 1 and strides[axis] != expected:
            return False
        expected *= n
    return True


def is_f_contiguous(shape, strides, itemsize) -> bool:
    """True when the layout is column-major with no gaps (axes of length 1 ignored)."""
    if 0 in shape:
        return True
    expected = itemsize
    for axis in range(len(shape)):
        n = shape[axis]
        if n != 1 and strides[axis] != expected:
            return False
        expected *= n
    return True


def extent(shape, strides, itemsize) -> tuple[int, int]:
    """The byte range [low, high) relative to the data pointer that a layout touches.

    An empty array touches nothing: (0, 0).
    """
    low = high = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return 0, 0
        if s >= 0:
            high += (n - 1) * s
        else:
            low += (n - 1) * s
    return low, high + itemsize


def index_layout(shape, strides, key):
    """Apply a basic index to a layout.

    Supports ints (negative from the end), slices with any step, ``...`` and None (a new
    axis of length 1), as NumPy basic indexing.

    Returns
    -------
    (offset, shape, strides)
        The byte offset of the view's first element and its shape and byte strides.

    Raises
    ------
    IndexError
        For an out-of-range int, too many indices, or an advanced index (arrays, lists,
        booleans), which device buffers do not support.
    """
    if not isinstance(key, tuple):
        key = (key,)
    ndim = len(shape)
    ellipses = 0
    used = 0
    for k in key:
        if k is Ellipsis:
            ellipses += 1
        elif k is not None:
            used += 1
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > ndim:
        raise IndexError(f"too many indices: the array is {ndim}-dimensional, but {used} "
                         f"were indexed")
    offset = 0
    new_shape: list[int] = []
    new_strides: list[int] = []
    axis = 0
    for k in key:
        if k is None:
            new_shape.append(1)
            new_strides.append(0)
            continue
        if k is Ellipsis:
            for _ in range(ndim - used):
                new_shape.append(shape[axis])
                new_strides.append(strides[axis])
                axis += 1
            continue
        n = shape[axis]
        stride = strides[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            if length > 0:
                offset += start * stride
            new_shape.append(length)
            new_strides.append(stride * step)
        else:
            if isinstance(k, (bool, np.bool_)):
                raise IndexError("boolean indices are advanced indexing, which device "
                                 "buffers do not support")
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError(
                    f"only integers, slices, '...' and None are valid indices of a device "
                    f"buffer (advanced indexing is not supported), got {type(k).__name__}"
                ) from None
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"index {operator.index(k)} is out of bounds for axis "
                                 f"{axis} with size {n}")
            offset += i * stride
        axis += 1
    while axis < ndim:  # trailing axes not named by the key
        new_shape.append(shape[axis])
        new_strides.append(strides[axis])
        axis += 1
    return offset, tuple(new_shape), tuple(new_strides)


def reshape_layout(shape, strides, itemsize, new_shape):
    """The shape and strides of a C-order reshape (one -1 allowed) of a contiguous layout.

    Raises
    ------
    ValueError
        If the sizes differ, or the layout is not C-contiguous.
    """
    if isinstance(new_shape, (int, np.integer)):
        new_shape = (int(new_shape),)
    new_shape = [operator.index(n) for n in new_shape]
    size = 1
    for n in shape:
        size *= n
    unknown = [i for i, n in enumerate(new_shape) if n == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension (-1)")
    known = 1
    for n in new_shape:
        if n != -1:
            if n < 0:
                raise ValueError(f"negative dimension in shape {tuple(new_shape)}")
            known *= n
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape "
                             f"{tuple(new_shape)}")
        new_shape[unknown[0]] = size // known
    new_shape = tuple(new_shape)
    new_size = 1
    for n in new_shape:
        new_size *= n
    if new_size != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {new_shape}")
    if not is_c_contiguous(shape, strides, itemsize):
        raise ValueError("reshape needs a C-contiguous buffer; this view is strided "
                         "(copy it first with .copy())")
    return new_shape, c_strides(new_shape, itemsize)


def view_layout(shape, strides, old_itemsize, new_itemsize):
    """Shape and strides after reinterpreting the items with another item size.

    As NumPy's ``ndarray.view(dtype)``: the last axis must be contiguous and its byte
    length divisible by the new item size.
    """
    if old_itemsize == new_itemsize:
        return tuple(shape), tuple(strides)
    if len(shape) == 0:
        raise ValueError(f"cannot view a 0-d buffer of {old_itemsize}-byte items with "
                         f"{new_itemsize}-byte items")
    if shape[-1] != 1 and strides[-1] != old_itemsize:
        raise ValueError("to change the item size, the last axis must be contiguous")
    nbytes = shape[-1] * old_itemsize
    if nbytes % new_itemsize:
        raise ValueError(f"the last axis is {nbytes} bytes long, which is not a multiple "
                         f"of the new item size {new_itemsize}")
    new_shape = tuple(shape[:-1]) + (nbytes // new_itemsize,)
    new_strides = tuple(strides[:-1]) + (new_itemsize,)
    return new_shape, new_strides


def cai_dict(ptr, shape, strides, dtype, readonly, stream) -> dict:
    """The `__cuda_array_interface__` (version 3) of a layout.

    `strides` is left out (None) for C-contiguous layouts, as the protocol recommends;
    `stream` is an int handle or None (no synchronization needed).
    """
    contiguous = is_c_contiguous(shape, strides, dtype.itemsize)
    interface = {
        "shape": tuple(shape),
        "typestr": dtype.str,
        "data": (ptr, bool(readonly)),
        "version": 3,
        "strides": None if contiguous else tuple(strides),
        "stream": stream,
    }
    if dtype.fields is not None:
        interface["descr"] = dtype.descr
    return interface


# --------------------------------------------------------------------------------------
# Allocations


class _Allocation(_lifetime.TrackedResource):
    """The owner of one allocation (or of a borrow): a slotted holder of the raw pointer.

    Every view of the allocation holds it; when the last view dies, its release is queued
    (`_lifetime.TrackedResource`: a table entry rather than a `weakref.finalize`, which
    would cost more than the allocation itself). `owner` keeps alive whatever a borrow
    depends on.
    """

    __slots__ = ("ptr", "nbytes", "kind", "device", "owner")

    def _label(self) -> str:
        return f"device allocation ({self.kind}, {self.nbytes} bytes)"

    def close(self, stream=None) -> None:
        """Free now (in the order of `stream` for stream-ordered allocations)."""
        if self._closed:
            return
        self._closed = True
        self.owner = None
        entry = _live.pop(id(self), None)  # only one of close() and __del__ gets it
        if entry is None:
            return
        release, handle, args, _label = entry
        if stream is not None and self.kind == ASYNC:
            if release is _free_cached and not getattr(stream, "closed", False):
                args = (stream, stream_handle(stream)) + args[2:]  # cached on `stream`
            else:
                release, args = _free_async, (stream, self.device)
        release(handle, *args)

    # As TrackedResource.__del__ (see there why the table's pop is a default), except
    # that a block of the allocation cache goes back into it at once: that is no driver
    # call, so it is safe inside a garbage collection, and spares the deferred queue.
    def __del__(self, _pop=_live.pop) -> None:
        entry = _pop(id(self), None)
        if entry is None:
            return
        if entry[0] is _free_cached:  # _put, inlined: this is the free of every output
            stream, h, nbytes, ctx, device = entry[2]
            fast = _fast
            if (fast is not None and fast is not _UNSET and not _lifetime._exiting
                    and (stream.__class__ is int or not getattr(stream, "closed", False))
                    and fast.put(entry[1], nbytes, h, ctx, device)):
                return
        if _lifetime._exiting:
            _lifetime._release_quietly_at_exit(*entry)
        else:
            _lifetime._pending.append(entry)


_LABEL = "device allocation (%s, %d bytes)"


def _context_for_free(ptr, device: int = -1, stream: int | None = None):
    """The context to push for a free, or None when the current one will do.

    A deferred free runs in whichever thread drains the queue next, which may have no
    context current (CUDA_ERROR_INVALID_CONTEXT), or another device's: then cuMemFree, and
    cuMemFreeAsync on a stream the current context names (0, 1, 2), would free in the
    wrong place. The owning device's primary context is used then.
    """
    current = int(check(driver().cuCtxGetCurrent()))
    if current and (device < 0 or (stream is not None and stream > 2)
                    or _device_of_context() == device):
        return None
    from .device import Device
    if device < 0:
        if current:
            return None
        device = pointer_device(ptr)
    return Device(device).primary_context()


def _free_sync(ptr, device: int = -1) -> None:
    # cuMemFree waits for the device to finish work that may use the memory.
    fast = _fast
    if fast is not None and fast is not _UNSET:
        err = fast.free(ptr, None, device)
        if err == 0:
            return
        if err > 0:
            raise error_from_code(err)
    context = _context_for_free(ptr, device)
    if context is None:
        check(driver().cuMemFree(ptr))
    else:
        with context:
            check(driver().cuMemFree(ptr))


def _free_async(ptr, stream, device: int = -1) -> None:
    if type(stream) is int:
        fast = _fast
        if fast is not None and fast is not _UNSET:
            err = fast.free(ptr, stream, device)
            if err == 0:
                return
            if err > 0:
                raise error_from_code(err)
    elif stream is not None and getattr(stream, "closed", False):
        # The stream the memory was ordered on is gone: wait for the device, then free
        # on the legacy default stream.
        context = _context_for_free(ptr, device, LEGACY_STREAM)
        if context is None:
            check(driver().cuCtxSynchronize())
        else:
            with context:
                check(driver().cuCtxSynchronize())
        stream = LEGACY_STREAM
    h = stream_handle(stream)
    fast = _fast
    if fast is not None and fast is not _UNSET:
        err = fast.free(ptr, h, device)
        if err == 0:
            return
        if err > 0:
            raise error_from_code(err)
    context = _context_for_free(ptr, device, h)
    if context is None:
        check(driver().cuMemFreeAsync(ptr, h))
    else:
        with context:
            check(driver().cuMemFreeAsync(ptr, h))


def _put(ptr, args) -> bool:
    # A cached block back into the cache, keyed by the stream it is freed on; False when
    # the cache is off or full, at exit, or the stream is gone (then it is freed as any).
    stream, h, nbytes, ctx, device = args
    fast = _fast
    return (fast is not None and fast is not _UNSET and not _lifetime._exiting
            and (stream.__class__ is int or not getattr(stream, "closed", False))
            and fast.put(ptr, nbytes, h, ctx, device))


def _free_cached(ptr, stream, h, nbytes, ctx, device) -> None:
    """The release of a block of the allocation cache: back into the cache for the next
    allocation of its size class on `stream` (handle `h`), or else freed in stream order."""
    if not _put(ptr, (stream, h, nbytes, ctx, device)):
        _free_async(ptr, stream, device)


def _release_borrow(handle, release) -> None:
    release()


def _forget_frees(ordinal: int) -> None:
    """Drop the frees, queued or to come, of memory of device `ordinal`, whose context
    was reset or lost: that memory is gone with it, and a new allocation may get the same
    address. The buffers stay (closing one does nothing); using one is undefined."""
    def of_device(release, handle, args) -> bool:
        return (release is _free_sync or release is _free_async
                or release is _free_cached) and (not args or args[-1] in (ordinal, -1))
    _lifetime.forget(of_device)
    fast = _fast
    if fast is not None and fast is not _UNSET:
        fast.forget(ordinal)  # cached blocks of the device: gone with its context


class _GoneStream:
    """Stands for the stream of an allocation whose stream was destroyed before the
    allocation was freed: `_free_async` then waits for the device and frees on the
    legacy default stream, as for a closed `Stream` object."""

    closed = True


_GONE_STREAM = _GoneStream()


def _forget_stream(handle) -> None:
    """Before stream `handle` is destroyed: frees still to be ordered on it (allocations
    made on the raw handle by library wrappers) must not name it once the driver may give
    its address to a new stream."""
    h = int(handle)

    def on_it(release, ptr, args) -> bool:
        return ((release is _free_async or release is _free_cached)
                and type(args[0]) is int and args[0] == h)

    for key, entry in list(_live.items()):  # one atomic copy under the GIL
        if on_it(entry[0], entry[1], entry[2]):
            # Taken and put back: a close() racing with this finds no entry and frees
            # nothing, and the exit hook frees it then (never twice).
            if _live.pop(key, None) is not None:
                _live[key] = (entry[0], entry[1], (_GONE_STREAM,) + entry[2][1:], entry[3])
    for release, ptr, args, label in _lifetime.forget(on_it, live=False):
        _lifetime._pending.append((release, ptr, (_GONE_STREAM,) + args[1:], label))
    fast = _fast
    if fast is not None and fast is not _UNSET:
        # Blocks cached for the stream: freed on it while it still exists.
        for ptr, stream, device, _size in fast.take(-1, h):
            _free_async(ptr, stream, device)


def _register_reset_hook() -> None:
    from . import context
    from .stream import _destroy_stream
    context._retire_callbacks.append(_forget_frees)
    _lifetime.before_release(_destroy_stream, _forget_stream)


_register_reset_hook()


def _new_allocation(ptr: int, nbytes: int, kind: str, device: int, release, *args,
                    owner=None) -> _Allocation:
    alloc = _Allocation.__new__(_Allocation)
    alloc.ptr = ptr
    alloc.nbytes = nbytes
    alloc.kind = kind
    alloc.device = device
    alloc.owner = owner
    alloc._track(ptr, release, args, (_LABEL, kind, nbytes))
    return alloc


def _allocate(nbytes: int, stream=None, pool=None) -> _Allocation:
    """Allocate `nbytes` of device memory on the current device.

    `stream` None allocates with `cuMemAlloc`, else in stream order; `pool` is a
    `MemoryPool` (allocated from on `stream`, the legacy default stream when None).
    """
    pool_ptr = 0
    if pool is not None:
        pool.handle  # noqa: B018  (raises ClosedError for a closed pool)
        pool_ptr = pool._ptr
        if stream is None:
            stream = 0
    fast = _fast
    if fast is _UNSET:
        fast = _load_fast()
    if fast is not None and nbytes:
        if _lifetime._pending:  # frees queued by dead buffers go first (as check() does)
            _lifetime.drain()
        if stream is not None and pool is None:
            return _allocate_cached(fast, nbytes, stream)
        h = stream if stream is None or type(stream) is int else stream_handle(stream)
        err, ptr, device = fast.alloc(nbytes, h, pool_ptr)
        if err == _NO_CONTEXT:  # make device 0's primary context current, as below
            _device_of_context()
            err, ptr, device = fast.alloc(nbytes, h, pool_ptr)
        if err == 0:
            # _new_allocation, inlined: this is the hot path of every allocation.
            alloc = object.__new__(_Allocation)
            alloc.ptr = alloc._handle = ptr
            alloc.nbytes = nbytes
            alloc.device = device
            alloc.owner = None
            alloc._closed = False
            alloc._finalizer = True  # owns the memory (TrackedResource._track)
            if h is None:
                alloc.kind = SYNC
                _live[id(alloc)] = (_free_sync, ptr, (device,), (_LABEL, SYNC, nbytes))
            else:
                alloc.kind = ASYNC
                _live[id(alloc)] = (_free_async, ptr, (stream, device),
                                    (_LABEL, ASYNC, nbytes))
            return alloc
        if err > 0:
            raise error_from_code(err, requested=nbytes)
    return _allocate_bindings(nbytes, stream, pool)


_NO_CONTEXT = -1  # _fastalloc.NO_CONTEXT (not imported: that module loads on first use)
_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY


def _allocate_cached(fast, nbytes: int, stream) -> _Allocation:
    """A stream-ordered allocation through the cache of freed blocks: one C call
    (`_fastalloc`'s ``block``) takes a block freed on the same stream, or a new one of its
    size class, and returns its `_Allocation`, its release already in the live table."""
    h = stream if stream.__class__ is int else stream_handle(stream)
    alloc = fast.block(nbytes, stream, h)
    if alloc.__class__ is _Allocation:
        return alloc
    if alloc == _NO_CONTEXT:  # make device 0's primary context current, as the Runtime API
        _device_of_context()
        alloc = fast.block(nbytes, stream, h)
    elif alloc == _OUT_OF_MEMORY and not _lifetime._captures[0] and fast.cache(None, None)[3]:
        # Blocks cached for other streams (or sizes) hold memory the pool could use:
        # hand them back to it, wait for the device so the pool may reuse them, retry.
        release_cached()
        alloc = fast.block(nbytes, stream, h)
    if alloc.__class__ is _Allocation:
        return alloc
    if alloc > 0:
        raise error_from_code(alloc, requested=nbytes)
    return _allocate_bindings(nbytes, stream, None)


def _configure_extension(module) -> None:
    """Hand the allocation extension what its ``block`` builds and where it records it."""
    module.configure(_Allocation, _live, _free_cached, _free_async, ASYNC, _LABEL)


def _allocate_bindings(nbytes: int, stream, pool) -> _Allocation:
    # The path through cuda.bindings: without the compiled one, and for what it leaves.
    device = _device_of_context()
    if nbytes == 0:
        return _new_allocation(0, 0, EMPTY, device, None)
    d = driver()
    if pool is not None:
        h = stream_handle(stream)
        ptr = check(d.cuMemAllocFromPoolAsync(nbytes, pool.handle, h), requested=nbytes)
        return _new_allocation(int(ptr), nbytes, ASYNC, device, _free_async, stream, device)
    if stream is None:
        ptr = check(d.cuMemAlloc(nbytes), requested=nbytes)
        return _new_allocation(int(ptr), nbytes, SYNC, device, _free_sync, device)
    ptr = check(d.cuMemAllocAsync(nbytes, stream_handle(stream)), requested=nbytes)
    return _new_allocation(int(ptr), nbytes, ASYNC, device, _free_async, stream, device)


# --------------------------------------------------------------------------------------
# The allocation cache


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """The allocation cache's state (`cache_stats`).

    Attributes
    ----------
    enabled : bool
        False with ``CUPRIC_ALLOC_CACHE=0`` (or where the compiled path is absent).
    limit : int
        The most bytes it keeps (0: no limit).
    cached_bytes, cached_blocks : int
        Freed blocks held for reuse now (in bytes of their size classes, and blocks).
    hits, misses : int
        Stream-ordered allocations served from it, and those that asked the driver, since
        the process started.
    """

    enabled: bool
    limit: int
    cached_bytes: int
    cached_blocks: int
    hits: int
    misses: int


def cache_stats() -> CacheStats:
    """How much freed device memory the allocation cache holds, and how often it served.

    Stream-ordered allocations (``empty(..., stream=s)``, the outputs cupric's libraries
    allocate) keep their blocks when freed, for the next allocation of the same size class
    on the same stream; see `release_cached`.
    """
    fast = _fast
    if fast is _UNSET:
        try:
            fast = _load_fast()
        except NoDriverError:
            fast = None
    if fast is None:
        return CacheStats(False, 0, 0, 0, 0, 0)
    enabled, limit, nbytes, blocks, hits, misses = fast.cache(None, None)
    return CacheStats(bool(enabled), limit, nbytes, blocks, hits, misses)


def release_cached(synchronize: bool = True) -> int:
    """Give every block the allocation cache holds back to the driver; returns their bytes.

    A stream-ordered allocation freed by ``close()`` or by the garbage collector does not
    go back to the driver: its block is kept, in size classes of at most 1/8 slack, for the
    next allocation of that class on the stream it was freed on, which then costs no
    driver call (about what PyTorch's caching allocator costs). A block is never handed
    out on another stream, nor while that stream is being captured into a graph (the
    capture gets its own graph allocation). The cache keeps what it is given up to
    ``CUPRIC_ALLOC_CACHE`` bytes (no limit by default; 0 turns it off); an allocation the
    device cannot satisfy releases it and tries again; a destroyed cupric `Stream` frees
    its blocks first; a context reset drops its device's blocks.

    Parameters
    ----------
    synchronize : bool, default True
        Then wait for each device that got blocks back, so that its pool returns memory
        above its release threshold to the device (`memory_info` then shows it free).
        With False the blocks are freed in stream order (`cuMemFreeAsync` on the stream
        each was cached for) and the call does not wait.

    Raises
    ------
    RuntimeError
        During a stream capture begun through cupric (the frees would join the graph).
    CudaError
        If the driver refuses a free (the other blocks are freed first).

    Examples
    --------
    >>> cupric.runtime.memory.release_cached()                  # doctest: +SKIP
    >>> cupric.runtime.memory.memory_info()   # the freed blocks count as free again
    """
    if _lifetime._captures[0]:
        raise RuntimeError("release_cached() during a stream capture: the frees would be "
                           "captured into the graph; call it after the capture ends")
    fast = _fast
    if fast is None or fast is _UNSET:
        return 0
    _lifetime.drain()  # dead buffers' blocks join the cache first
    released, devices, failure = 0, set(), None
    for ptr, stream, device, size in fast.take(-1, None):
        try:
            _free_async(ptr, stream, device)
        except Exception as exc:  # the rest are still freed; the first error is raised
            failure = failure or exc
        released += size
        devices.add(device)
    if synchronize:
        from .device import Device
        for device in sorted(devices):
            Device(device).synchronize()
    if failure is not None:
        raise failure
    return released


def _release_cache_at_exit() -> None:
    # Runs before _lifetime's exit hook (registered after it): the cache closes, so the
    # frees of buffers still alive go straight to the driver, and its blocks are freed.
    fast = _fast
    if fast is None or fast is _UNSET:
        return
    fast.cache(False, None)
    for ptr, stream, device, size in fast.take(-1, None):
        _lifetime._release_quietly_at_exit(_free_async, ptr, (stream, device),
                                           (_LABEL, ASYNC, size))


atexit.register(_release_cache_at_exit)


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
# Host arrays


def _host_array(obj, what: str) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    inner = getattr(obj, "array", None)  # PinnedBuffer and friends
    if isinstance(inner, np.ndarray):
        return inner
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return np.asarray(obj)
    raise TypeError(f"{what} must be a NumPy array (or a device array), got "
                    f"{type(obj).__name__}")


def _host_ptr(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _device_array_or_none(obj):
    """`obj` as a DeviceBuffer when it is device memory (ours or a protocol's), else None."""
    if isinstance(obj, DeviceBuffer):
        return obj
    if hasattr(obj, "__cuda_array_interface__") or (
            hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray)
            and _dlpack_on_device(obj)):
        from .interop import as_device_array
        return as_device_array(obj)
    return None


def _dlpack_on_device(obj) -> bool:
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    from .dlpack import DEVICE_CUDA, DEVICE_CUDA_MANAGED
    return device()[0] in (DEVICE_CUDA, DEVICE_CUDA_MANAGED)


# --------------------------------------------------------------------------------------
# DeviceBuffer


class DeviceBuffer:
    """A typed N-d view of device memory.

    Made by `empty`, `zeros`, `to_device`, `empty_like`, `MemoryPool.empty`, slicing and
    `view`, or by borrowing another library's array (`as_device_array`, `from_dlpack`).

    Attributes
    ----------
    ptr : int
        Device address of the first element (plain attribute: launches read it directly).
    shape : tuple of int
    strides : tuple of int
        In bytes, as NumPy.
    dtype : numpy.dtype
    itemsize, size, nbytes, ndim : int
        ``nbytes = size * itemsize``, the bytes the view's elements occupy.
    readonly : bool
        True for borrows the producer marked read-only; writes through cupric refuse.

    Safety
    ------
    Views share their allocation. After ``close()`` every view refuses use with
    `ClosedError`, but a raw ``ptr`` already handed to a kernel or another library dangles:
    close only once all queued work that uses the memory is ordered before the free (pass
    that work's stream to ``close``).

    Thread safety
    -------------
    A buffer may be used from several threads; ordering the device work on it is the
    caller's job (streams, events), as in CUDA.
    """

    __slots__ = ("ptr", "shape", "strides", "dtype", "itemsize", "size", "nbytes", "ndim",
                 "readonly", "_alloc", "_stream", "_base", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError(_NO_CONSTRUCTOR)

    @classmethod
    def _make(klass, alloc, ptr, shape, strides, dtype, readonly, stream, base=None,
              cls=None):
        self = object.__new__(cls if cls is not None else klass)
        self._alloc = alloc
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        size = 1
        for n in shape:
            size *= n
        self.size = size
        self.nbytes = size * dtype.itemsize
        self.ndim = len(shape)
        self.readonly = readonly
        self._stream = stream
        self._base = base
        return self

    @classmethod
    def from_numpy(cls, array, stream=None) -> "DeviceBuffer":
        """A new device buffer holding a copy of a host array (same as `to_device`)."""
        return to_device(array, stream)

    def _derive(self, ptr, shape, strides, dtype) -> "DeviceBuffer":
        """A view of the same allocation (a plain DeviceBuffer whatever this one is)."""
        base = self._base if self._base is not None else self
        return DeviceBuffer._make(self._alloc, ptr, shape, strides, dtype, self.readonly,
                                  self._stream, base=base)

    # -- state ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the buffer (or the buffer it views) was closed."""
        return self._alloc._closed

    @property
    def base(self):
        """The buffer this one views, or None for a buffer that owns its allocation."""
        return self._base

    @property
    def owns_memory(self) -> bool:
        """False for borrows of another library's memory, which cupric never frees."""
        return self._alloc.kind not in (BORROWED,)

    @property
    def device(self) -> int:
        """Ordinal of the device the memory lives on (asked of the driver, once, for
        borrowed memory)."""
        alloc = self._alloc
        if alloc.device < 0 and self.ptr:
            self._check_open()
            alloc.device = pointer_device(self.ptr)
        return alloc.device

    @property
    def stream(self):
        """The stream that work producing this buffer's contents was last queued on.

        Advertised to consumers through ``__cuda_array_interface__['stream']`` and
        honoured by ``__dlpack__``, so that they order their reads after it. cupric's own
        stream-ordered copies and fills set it; set it yourself after launching a kernel
        that writes the buffer on a stream other libraries do not know about.
        """
        return self._stream

    @stream.setter
    def stream(self, value) -> None:
        if value is not None:
            stream_handle(value)  # validates
        self._stream = value

    def _check_open(self) -> None:
        if self._alloc._closed:
            raise ClosedError("this DeviceBuffer is closed (or views a closed buffer); "
                              "its memory was freed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ValueError("this DeviceBuffer is read-only (its producer exported it "
                             "read-only)")

    @property
    def is_c_contiguous(self) -> bool:
        return is_c_contiguous(self.shape, self.strides, self.itemsize)

    @property
    def is_f_contiguous(self) -> bool:
        return is_f_contiguous(self.shape, self.strides, self.itemsize)

    def close(self, stream=None) -> None:
        """Free the memory now, ordered on `stream` where the allocation allows it.

        Stream-ordered allocations (``stream=`` at allocation, pools) are freed with
        `cuMemFreeAsync` on `stream`, or on their allocation stream when `stream` is None.
        Synchronous allocations are freed with `cuMemFree`, which first waits for the
        device. Closing a borrow frees nothing; it drops the reference to the producer
        (and hands a DLPack tensor back through its deleter). Closing a view closes the
        whole allocation. A second call does nothing.

        Raises
        ------
        CudaError
            If the driver refuses the free (the buffer is closed anyway).
        """
        alloc = self._alloc
        if alloc._closed:
            return
        alloc.close(stream)
        self.ptr = 0

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._alloc._closed else f"ptr=0x{self.ptr:x}"
        return (f"<DeviceBuffer shape={self.shape} dtype={self.dtype} {state}"
                f"{' readonly' if self.readonly else ''}>")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceBuffer")
        return self.shape[0]

    def __bool__(self):
        raise TypeError("the truth value of a DeviceBuffer is ambiguous; copy it to the "
                        "host with to_numpy() first")

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DeviceBuffer lives in device memory and is not converted "
                        "implicitly; copy it to the host with .to_numpy()")

    # -- views ---------------------------------------------------------------------

    def __getitem__(self, key) -> "DeviceBuffer":
        self._check_open()
        offset, shape, strides = index_layout(self.shape, self.strides, key)
        return self._derive(self.ptr + offset, shape, strides, self.dtype)

    def __setitem__(self, key, value) -> None:
        target = self[key]
        if isinstance(value, (int, float, complex, bool, np.generic)):
            target.fill(value)
        else:
            target.copy_from(value)

    def view(self, dtype=None) -> "DeviceBuffer":
        """Reinterpret the same bytes as another dtype (no copy), like ``ndarray.view``.

        Raises
        ------
        ValueError
            If the item size changes and the last axis is not contiguous or its byte
            length is not a multiple of the new item size.
        """
        self._check_open()
        dt = self.dtype if dtype is None else normalize_dtype(dtype)
        shape, strides = view_layout(self.shape, self.strides, self.itemsize, dt.itemsize)
        return self._derive(self.ptr, shape, strides, dt)

    def reshape(self, *shape) -> "DeviceBuffer":
        """A view with another shape (C order; one -1 allowed). Needs a contiguous buffer."""
        self._check_open()
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        new_shape, new_strides = reshape_layout(self.shape, self.strides, self.itemsize,
                                                shape)
        return self._derive(self.ptr, new_shape, new_strides, self.dtype)

    def ravel(self) -> "DeviceBuffer":
        """A 1-d view of a C-contiguous buffer."""
        return self.reshape(-1)

    def transpose(self, *axes) -> "DeviceBuffer":
        """A view with the axes permuted (reversed by default). No copy."""
        self._check_open()
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        elif len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        axes = tuple(operator.index(a) + (self.ndim if operator.index(a) < 0 else 0)
                     for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} are not a permutation of {self.ndim} axes")
        return self._derive(self.ptr, tuple(self.shape[a] for a in axes),
                            tuple(self.strides[a] for a in axes), self.dtype)

    @property
    def T(self) -> "DeviceBuffer":
        return self.transpose()

    # -- copies --------------------------------------------------------------------

    def _check_match(self, other_dtype, other_shape, what: str) -> None:
        if other_dtype != self.dtype:
            raise TypeError(f"dtype mismatch: this buffer holds {self.dtype}, {what} holds "
                            f"{other_dtype}; convert one of them first (astype)")
        if tuple(other_shape) != self.shape:
            raise ValueError(f"shape mismatch: this buffer is {self.shape}, {what} is "
                             f"{tuple(other_shape)}")

    def _contiguous_or_raise(self, what: str) -> None:
        if not is_c_contiguous(self.shape, self.strides, self.itemsize):
            raise ValueError(f"{what} needs a C-contiguous buffer; this view has strides "
                             f"{self.strides} for shape {self.shape}")

    @_in_own_context
    def copy_from(self, src, stream=None) -> None:
        """Copy `src` (a host array or device array) into this buffer.

        Parameters
        ----------
        src : numpy.ndarray, PinnedBuffer, DeviceBuffer, or any CAI/DLPack device array
            Same dtype and shape as this buffer, C-contiguous (as this buffer).
        stream : Stream, optional
            Queue the copy on this stream (`cuMemcpy*Async`) and return at once; without
            one, the copy is synchronous with respect to the host for host sources.

        Raises
        ------
        TypeError
            Different dtypes, or `src` is not an array.
        ValueError
            Different shapes, a non-contiguous side, or a read-only destination.
        ClosedError
            If this buffer was closed.

        Safety
        ------
        With a stream, a pinned host source must stay alive and unchanged until the copy
        completes (pageable memory is staged by the driver before the call returns).

        Cost
        ----
        One driver call; no host-side staging by cupric.
        """
        self._check_writable()
        dev = _device_array_or_none(src)
        if dev is not None:
            dev._check_open()
            self._check_match(dev.dtype, dev.shape, "the source")
            self._contiguous_or_raise("copy_from")
            if not is_c_contiguous(dev.shape, dev.strides, dev.itemsize):
                raise ValueError("copy_from needs a C-contiguous source; the source view is "
                                 "strided")
            if self.nbytes == 0:
                return
            d = _ready()
            if stream is None:
                check(d.cuMemcpyDtoD(self.ptr, dev.ptr, self.nbytes))
                self._stream = LEGACY_STREAM
            else:
                check(d.cuMemcpyDtoDAsync(self.ptr, dev.ptr, self.nbytes,
                                          stream_handle(stream)))
                self._stream = stream
            return
        host = _host_array(src, "the source")
        self._check_match(host.dtype, host.shape, "the source array")
        self._contiguous_or_raise("copy_from")
        if not host.flags.c_contiguous:
            raise ValueError("copy_from needs a C-contiguous host array; make one with "
                             "numpy.ascontiguousarray(src)")
        if self.nbytes == 0:
            return
        d = _ready()
        if stream is None:
            # Returns once the source is staged; the DMA may still run on the legacy stream.
            check(d.cuMemcpyHtoD(self.ptr, _host_ptr(host), self.nbytes))
            self._stream = LEGACY_STREAM
        else:
            check(d.cuMemcpyHtoDAsync(self.ptr, _host_ptr(host), self.nbytes,
                                      stream_handle(stream)))
            self._stream = stream

    @_in_own_context
    def copy_to(self, dst, stream=None) -> None:
        """Copy this buffer into `dst` (a host array or device array).

        Parameters and errors as `copy_from`, with the roles swapped; a host destination
        must be writable. With a stream the copy is queued and the call returns at once:
        synchronize the stream before reading a pinned destination.
        """
        self._check_open()
        self._contiguous_or_raise("copy_to")
        dev = _device_array_or_none(dst)
        if dev is not None:
            dev._check_writable()
            self._check_match(dev.dtype, dev.shape, "the destination")
            if not is_c_contiguous(dev.shape, dev.strides, dev.itemsize):
                raise ValueError("copy_to needs a C-contiguous destination; the destination "
                                 "view is strided")
            if self.nbytes == 0:
                return
            d = _ready()
            if stream is None:
                check(d.cuMemcpyDtoD(dev.ptr, self.ptr, self.nbytes))
                dev._stream = LEGACY_STREAM
            else:
                check(d.cuMemcpyDtoDAsync(dev.ptr, self.ptr, self.nbytes,
                                          stream_handle(stream)))
                dev._stream = stream
            return
        host = _host_array(dst, "the destination")
        self._check_match(host.dtype, host.shape, "the destination array")
        if not host.flags.c_contiguous:
            raise ValueError("copy_to needs a C-contiguous host array")
        if not host.flags.writeable:
            raise ValueError("copy_to: the destination array is read-only")
        if self.nbytes == 0:
            return
        d = _ready()
        if stream is None:
            check(d.cuMemcpyDtoH(_host_ptr(host), self.ptr, self.nbytes))
        else:
            check(d.cuMemcpyDtoHAsync(_host_ptr(host), self.ptr, self.nbytes,
                                      stream_handle(stream)))

    @_in_own_context
    def to_numpy(self, stream=None) -> np.ndarray:
        """A new host array with this buffer's contents (waits for the copy).

        Strided views are supported: the bytes the view spans are copied and the elements
        gathered on the host.

        Parameters
        ----------
        stream : Stream, optional
            Order the copy after the work on this stream (then wait for it).

        Cost
        ----
        One device-to-host copy of ``nbytes`` into pageable memory (of the view's whole
        span for a strided view), plus a stream synchronization when a stream is given.
        """
        self._check_open()
        if is_c_contiguous(self.shape, self.strides, self.itemsize):
            out = np.empty(self.shape, self.dtype)
            self._download(out, self.ptr, self.nbytes, stream)
            return out
        if is_f_contiguous(self.shape, self.strides, self.itemsize):
            out = np.empty(self.shape, self.dtype, order="F")
            self._download(out, self.ptr, self.nbytes, stream)
            return out
        low, high = extent(self.shape, self.strides, self.itemsize)
        raw = np.empty(high - low, np.uint8)
        self._download(raw, self.ptr + low, high - low, stream)
        # The first element sits at byte -low of `raw`; gather bytewise, then retype.
        gathered = np.lib.stride_tricks.as_strided(
            raw[-low:], shape=self.shape + (self.itemsize,), strides=self.strides + (1,))
        return np.ascontiguousarray(gathered).view(self.dtype).reshape(self.shape)

    def _download(self, out: np.ndarray, ptr: int, nbytes: int, stream) -> None:
        if nbytes == 0:
            return
        d = _ready()
        if stream is None:
            check(d.cuMemcpyDtoH(_host_ptr(out), ptr, nbytes))
        else:
            h = stream_handle(stream)
            check(d.cuMemcpyDtoHAsync(_host_ptr(out), ptr, nbytes, h))
            check(d.cuStreamSynchronize(h))

    def copy(self, stream=None) -> "DeviceBuffer":
        """A new C-contiguous buffer with the same contents (device-to-device)."""
        self._check_open()
        self._contiguous_or_raise("copy")
        out = empty(self.shape, self.dtype, stream=stream)
        out.copy_from(self, stream=stream)
        return out

    # -- fills ---------------------------------------------------------------------

    @_in_own_context
    def memset(self, value: int, width: int = 8, stream=None) -> None:
        """Set every `width`-bit word of the buffer's bytes to `value`.

        Parameters
        ----------
        value : int
            The word, as an unsigned integer of `width` bits.
        width : {8, 16, 32}
            `cuMemsetD8`, `cuMemsetD16` or `cuMemsetD32`. The buffer's byte length must be
            a multiple of the word size (and its address aligned to it).
        stream : Stream, optional
            Queue the fill on this stream.

        Raises
        ------
        ValueError
            For another width, a value that does not fit, a length or address that is not
            a multiple of the word size, a strided view, or a read-only buffer.
        """
        self._check_writable()
        self._contiguous_or_raise("memset")
        if width not in (8, 16, 32):
            raise ValueError(f"memset width must be 8, 16 or 32 bits, got {width}")
        value = operator.index(value)
        if not 0 <= value < (1 << width):
            raise ValueError(f"memset value {value} does not fit in {width} bits unsigned")
        word = width // 8
        if self.nbytes % word or self.ptr % word:
            raise ValueError(f"memset with {width}-bit words needs a length and address "
                             f"that are multiples of {word} bytes (length {self.nbytes}, "
                             f"address 0x{self.ptr:x})")
        count = self.nbytes // word
        if count == 0:
            return
        d = _ready()
        if stream is None:
            fn = (d.cuMemsetD8, d.cuMemsetD16, d.cuMemsetD32)[word // 2]
            check(fn(self.ptr, value, count))
            self._stream = LEGACY_STREAM
        else:
            fn = (d.cuMemsetD8Async, d.cuMemsetD16Async, d.cuMemsetD32Async)[word // 2]
            check(fn(self.ptr, value, count, stream_handle(stream)))
            self._stream = stream

    def zero(self, stream=None) -> None:
        """Set every byte to zero (`cuMemsetD8`)."""
        self.memset(0, 8, stream)

    @_in_own_context
    def fill(self, value, stream=None) -> None:
        """Set every element to `value` (converted to the buffer's dtype), on the device.

        Items of 1, 2 or 4 bytes use one `cuMemsetD8/16/32`; 8-byte items use two strided
        32-bit fills (`cuMemsetD2D32`), one per half; other sizes are refused.

        Raises
        ------
        ValueError
            For a strided view, a read-only buffer, or an item size with no fill.
        """
        self._check_writable()
        self._contiguous_or_raise("fill")
        raw = np.asarray(value, dtype=self.dtype).tobytes()
        size = self.itemsize
        if size in (1, 2, 4):
            word = int.from_bytes(raw, "little")
            self.memset(word, size * 8, stream)
            return
        if size != 8:
            raise ValueError(f"fill supports items of 1, 2, 4 or 8 bytes, not {size}")
        low = int.from_bytes(raw[:4], "little")
        high = int.from_bytes(raw[4:], "little")
        if low == high:
            self.memset(low, 32, stream)
            return
        if self.size == 0:
            return
        d = _ready()
        if stream is None:
            check(d.cuMemsetD2D32(self.ptr, 8, low, 1, self.size))
            check(d.cuMemsetD2D32(self.ptr + 4, 8, high, 1, self.size))
            self._stream = LEGACY_STREAM
        else:
            h = stream_handle(stream)
            check(d.cuMemsetD2D32Async(self.ptr, 8, low, 1, self.size, h))
            check(d.cuMemsetD2D32Async(self.ptr + 4, 8, high, 1, self.size, h))
            self._stream = stream

    # -- conversions -----------------------------------------------------------------

    def astype(self, dtype, stream=None) -> "DeviceBuffer":
        """A new buffer with the elements cast to `dtype` (NumPy's casting rules).

        The cast runs on the host: the buffer is copied down, cast by NumPy and copied up,
        which gives NumPy's exact semantics for every pair of dtypes.

        Cost
        ----
        Two transfers over PCIe/NVLink and a host cast: slow for large buffers. A device
        kernel (`cupric.kernels`) is the fast way for large arrays.
        """
        self._check_open()
        dt = normalize_dtype(dtype)
        host = self.to_numpy(stream)
        return to_device(np.ascontiguousarray(host.astype(dt)), stream=stream)

    # -- interchange ---------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA Array Interface v3: pointer, shape, typestr, strides and the stream
        consumers must order after (see `stream`)."""
        self._check_open()
        s = self._stream
        return cai_dict(self.ptr, self.shape, self.strides, self.dtype, self.readonly,
                        None if s is None else (stream_handle(s) or LEGACY_STREAM))

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (see `cupric.runtime.dlpack.to_dlpack`)."""
        from .dlpack import to_dlpack
        return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                         copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        from .dlpack import dlpack_device
        return dlpack_device(self)


class DeviceBox(DeviceBuffer):
    """One value in device memory (a 0-d buffer), read with `get` and written with `set`.

    Made by `device_box(value, dtype)`. Kernels receive it as a 0-d array.
    """

    __slots__ = ()

    def get(self, stream=None):
        """The value, copied to the host (waits for the copy)."""
        return self.to_numpy(stream)[()]

    def set(self, value, stream=None) -> None:
        """Write `value` (converted to the box's dtype)."""
        self.copy_from(np.asarray(value, dtype=self.dtype), stream=stream)

    def __repr__(self) -> str:
        return f"<DeviceBox dtype={self.dtype} {'closed' if self.closed else hex(self.ptr)}>"


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
