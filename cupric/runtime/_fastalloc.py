"""The compiled allocation path: allocate and free in one C call each, and a cache of
freed stream-ordered blocks.

A small device allocation spends most of its host time outside the driver: cuda.bindings
costs about a microsecond of Python per call, and allocating needed three calls
(`cuCtxGetCurrent`, `cuCtxGetDevice`, `cuMemAllocAsync`) and freeing two. This small
CPython extension (its C text in `_fastalloc_c`) makes those calls straight into libcuda,
with the addresses it is given (resolved from the loaded libcuda through ctypes). Even
then the driver's stream-ordered allocator costs a few microseconds per allocate and free,
with or without a pool that keeps every freed byte (benchmarks/alloc.py measures both), so
the extension keeps a cache: blocks freed on a stream, kept per (context, stream, size
class) with at most 1/8 of a block unused, handed out again on that stream with no driver
call but `cuStreamIsCapturing` (a stream being captured bypasses the cache, so that the
graph gets its own allocation). `cupric.runtime.allocation` decides what goes into it.

The extension decides nothing else: every driver error comes back as its `CUresult` for
the Python side to raise typed (`cupric.runtime.errors`), and every case it does not
handle (no context current, a legacy/per-thread stream or a synchronous free while another
device's context is current, a handle that is not an int) comes back as `NEED_PYTHON`
for the cuda.bindings path. It is built once per machine and Python version into the
cupric cache with the compiler setuptools finds; without one, or with
``CUPRIC_BUILD_LAUNCHER=0`` (no building) or ``CUPRIC_FAST_ALLOC=0`` (not used), memory
goes through cuda.bindings as before, uncached.

``make(*addresses)`` returns these functions bound to the entry points given (`SYMBOLS`
order) and to one cache (on, with no limit); `native()` holds the ones bound to the loaded
libcuda as an `Entry`, its cache set by ``CUPRIC_ALLOC_CACHE``. None raises for a driver
failure:

* ``device()``: the ordinal of the current context's device, `NO_CONTEXT` when no context
  is current, `NEED_PYTHON` when the driver refuses the query;
* ``alloc(nbytes, stream, pool)``: ``(err, ptr, device)``, uncached. `stream` None
  allocates with `cuMemAlloc`; otherwise `pool` 0 uses `cuMemAllocAsync` on the stream
  handle and a nonzero `pool` `cuMemAllocFromPoolAsync`. `err` is 0, a `CUresult`,
  `NO_CONTEXT` or `NEED_PYTHON`;
* ``free(ptr, stream, device)``: `cuMemFree` (`stream` None) or `cuMemFreeAsync`; returns
  0, a `CUresult` or `NEED_PYTHON`. `device` is the allocation's ordinal: a synchronous
  free, or one on a stream handle that names the current context's stream (0, 1 legacy,
  2 per-thread), is only made from that device's context;
* ``cached_alloc(nbytes, stream)``: ``(err, ptr, device, ctx)``, a block from the cache or
  a new one of the size class; `ctx` nonzero marks a block of the cache (give it back
  with ``put``), 0 one allocated exactly (a capture, the per-thread stream, the cache off,
  or the rounded size refused for memory): free it with ``free``;
* ``block(nbytes, stream, handle)``: the same, returned as the owner object
  (`allocation._Allocation`) with its release already in the live table, or the error
  code; ``buffer(layout, stream, handle)`` the `DeviceBuffer` over it, its slots filled
  from `memory._layout`'s tuple; ``configure`` (module level) hands both the types and
  the table;
* ``put(ptr, nbytes, stream, ctx, device)``: True when the cache kept the block (never a
  driver call: safe in a finalizer), False when it is off or at its limit;
* ``take(device, stream)``: the cached blocks of a device (-1: all) and stream (None:
  all) as ``(ptr, stream, device, size)``, removed for the caller to free;
* ``forget(device)``: drop a device's blocks without freeing (its context is gone);
* ``cache(enabled, limit)``: set what is not None; returns ``(enabled, limit, bytes,
  blocks, hits, misses)``.
"""

from __future__ import annotations

import threading

from cupric import _config
from . import _cext
from ._fastalloc_c import SOURCE

__all__ = ["Entry", "load", "native", "build_error", "SOURCE", "NO_CONTEXT", "NEED_PYTHON", "SYMBOLS"]

NO_CONTEXT = -1    # no context is current in the calling thread
NEED_PYTHON = -2   # a case the C path leaves to cuda.bindings

# The libcuda entry points `make` takes, in its argument order (the ABI versions
# the CUDA headers map the plain names to).
SYMBOLS = ("cuCtxGetCurrent", "cuCtxGetDevice", "cuMemAlloc_v2", "cuMemAllocAsync",
           "cuMemAllocFromPoolAsync", "cuMemFree_v2", "cuMemFreeAsync", "cuStreamIsCapturing")


def _configure(module) -> None:
    # `block` and `buffer` make the memory modules' objects and enter their releases.
    from .memory import _configure_extension
    _configure_extension(module)


#: The extension, loaded through the one cached loader (`cupric.runtime._cext`).
EXTENSION = _cext.Extension("_cupric_fastalloc", "memory", "allocation extension", SOURCE,
                            switch="FAST_ALLOC", configure=_configure)
_native = None          # its functions bound to the loaded libcuda
_lock = threading.Lock()


def build_error() -> str | None:
    """Why the extension could not be built, loaded or configured, or None."""
    return EXTENSION.error


def load(build: bool | None = None, wait: bool = True):
    """The extension module (built into the cache if needed), or None.

    `build` None follows ``CUPRIC_BUILD_LAUNCHER`` (anything but "0" builds). A failure is
    recorded in `build_error` and not retried within the process. With `wait` False a
    build still running in the background gives None (`pending` tells) instead of
    blocking.
    """
    try:
        return EXTENSION.load(build, wait)
    except _cext.Pending:
        return None


def pending() -> bool:
    """Whether a background build of the extension was started and its result not yet
    taken (the Python path runs meanwhile; `native` gives the compiled path once the
    build is done, and records the error if it failed)."""
    return EXTENSION.pending()


class Entry:
    """The extension's functions bound to one set of libcuda entry points, and one cache
    of freed blocks (see the module docstring)."""

    __slots__ = ("device", "alloc", "free", "cached_alloc", "put", "take", "forget", "cache",
                 "block", "buffer")

    def __init__(self, module, addresses) -> None:
        (self.device, self.alloc, self.free, self.cached_alloc, self.put, self.take,
         self.forget, self.cache, self.block, self.buffer) = module.make(*addresses)


def native() -> Entry | None:
    """The extension's functions bound to the loaded libcuda, or None.

    Needs the driver (`cuInit` done through `_driver.driver()`, which raises
    `NoDriverError` without one); None when the extension cannot be built,
    ``CUPRIC_FAST_ALLOC=0``, or while it is being built (`pending`).
    """
    global _native
    if _native is not None:
        return _native
    if not _config.FAST_ALLOC.get():
        return None
    from ._driver import driver
    driver()  # cuInit first: raises NoDriverError when there is no driver
    module = load(wait=False)
    if module is None:
        return None
    with _lock:
        if _native is None:
            try:
                entry = Entry(module, libcuda_addresses())
            except Exception as exc:  # a libcuda without these entry points: recorded
                EXTENSION.error = f"{type(exc).__name__}: {exc}"[:500]
                return None
            limit = _config.ALLOC_CACHE.get()
            entry.cache(limit != 0, limit or 0)  # unset: on with no limit; 0: off
            _native = entry
    return _native


def libcuda_addresses(path: str | None = None) -> tuple[int, ...]:
    """The addresses of `SYMBOLS` in libcuda (the copy cuda.bindings loaded), or in the
    library at `path`."""
    import ctypes
    if path is None:
        from .launch import _libcuda_path
        path = _libcuda_path()
    lib = ctypes.CDLL(path)
    return tuple(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
                 for symbol in SYMBOLS)


