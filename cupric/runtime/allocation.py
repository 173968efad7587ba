"""Device allocations: who owns each block of GPU memory, and how it is made and freed.

`cuMemAlloc` memory is usable at once by every stream and freed by `cuMemFree`;
stream-ordered memory (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`) is freed in the
order of a stream (`cuMemFreeAsync`). Blocks of stream-ordered memory freed that way are
kept by the allocation cache for the next allocation of their size class on the same
stream (`release_cached` gives them back). An `_Allocation` owns one block; every
`DeviceBuffer` view of it holds it.
"""

from __future__ import annotations

import atexit
import dataclasses

from . import _lifetime
from ._driver import check, driver
from ._lifetime import _live
from .errors import NoDriverError, error_from_code
from .stream import as_stream_handle as _as_stream_handle

__all__ = ["SYNC", "ASYNC", "BORROWED", "EMPTY", "LEGACY_STREAM", "PER_THREAD_STREAM",
           "stream_handle", "pointer_device", "CacheStats", "cache_stats", "release_cached"]

# How an allocation was made decides how it is freed.
SYNC = "sync"          # cuMemAlloc / cuMemAllocManaged: freed by cuMemFree
ASYNC = "async"        # cuMemAllocAsync / cuMemAllocFromPoolAsync: freed by cuMemFreeAsync
BORROWED = "borrowed"  # memory of another library (CAI, DLPack): never freed by cupric
EMPTY = "empty"        # a zero-byte buffer: nothing was allocated

# CUDA's special stream handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
LEGACY_STREAM = 1
PER_THREAD_STREAM = 2


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


def current_device_ordinal() -> int:
    """Make sure a context is current in this thread (device 0's primary context when
    none is, as the Runtime API does) and return the ordinal of its device.

    Public for the other packages (`cupric.runtime.native.current_device_ordinal`: the
    kernel launch asks it on machines with several GPUs); the runtime's own modules call
    it as `_device_of_context`, the name tests replace.

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


#: The runtime's own name of `current_device_ordinal`.
_device_of_context = current_device_ordinal


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


# --------------------------------------------------------------------------------------
# Allocations


class _Allocation(_lifetime.TrackedResource):
    """The owner of one allocation (or of a borrow): a slotted holder of the raw pointer.

    Every view of the allocation holds it; when the last view dies, its release is queued
    (`_lifetime.TrackedResource`: a table entry rather than a `weakref.finalize`, which
    would cost more than the allocation itself), or a block of the allocation cache goes
    straight back into it. `owner` keeps alive whatever a borrow depends on.
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


def _allocate_cached(fast, nbytes: int, stream, answer=None) -> _Allocation:
    """A stream-ordered allocation through the cache of freed blocks: one C call
    (`_fastalloc`'s ``block``) takes a block freed on the same stream, or a new one of its
    size class, and returns its `_Allocation`, its release already in the live table.
    `answer` is that call's error code when the caller already made it."""
    h = stream if stream.__class__ is int else stream_handle(stream)
    alloc = fast.block(nbytes, stream, h) if answer is None else answer
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
