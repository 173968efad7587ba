"""The primary context of a device, made current per thread on first use.

A CUDA context holds a device's memory, modules and streams. cupric uses each device's
*primary context* (retained through `cuDevicePrimaryCtxRetain`), the one the CUDA Runtime
API uses, so cuBLAS, PyTorch and CuPy see the same allocations and streams. A context is
current per OS thread; cupric makes it current lazily, the first time a thread needs it.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings

from . import _lifetime
from ._driver import bindings, check, driver
from ._lifetime import DeviceResource

__all__ = ["Context", "ContextFlags", "current_device", "current_context", "synchronize",
           "on_reset", "generation"]

# ContextFlags.scheduling value -> CUctx_flags member name.
_SCHEDULING = {
    "auto": "CU_CTX_SCHED_AUTO",
    "spin": "CU_CTX_SCHED_SPIN",
    "yield": "CU_CTX_SCHED_YIELD",
    "blocking_sync": "CU_CTX_SCHED_BLOCKING_SYNC",
}
_SCHED_MASK = 0x07

# Limit name -> CUlimit member name.
_LIMITS = {
    "stack_size": "CU_LIMIT_STACK_SIZE",
    "printf_fifo_size": "CU_LIMIT_PRINTF_FIFO_SIZE",
    "malloc_heap_size": "CU_LIMIT_MALLOC_HEAP_SIZE",
    "dev_runtime_sync_depth": "CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH",
    "dev_runtime_pending_launch_count": "CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT",
    "max_l2_fetch_granularity": "CU_LIMIT_MAX_L2_FETCH_GRANULARITY",
    "persisting_l2_cache_size": "CU_LIMIT_PERSISTING_L2_CACHE_SIZE",
}

# Cache preference name -> CUfunc_cache member name (shared with Function.set_cache_config).
CACHE_CONFIGS = {
    "none": "CU_FUNC_CACHE_PREFER_NONE",
    "shared": "CU_FUNC_CACHE_PREFER_SHARED",
    "l1": "CU_FUNC_CACHE_PREFER_L1",
    "equal": "CU_FUNC_CACHE_PREFER_EQUAL",
}


@dataclasses.dataclass(frozen=True)
class ContextFlags:
    """Flags of a primary context.

    Parameters
    ----------
    scheduling : {"auto", "spin", "yield", "blocking_sync"}
        How a thread waits for the GPU in synchronizing calls: spin (lowest latency,
        burns a CPU core), yield, or block on an OS primitive (frees the core).
    map_host : bool
        Allow mapping pinned host memory into the device address space (always on with
        unified addressing; kept for completeness).
    lmem_resize_to_max : bool
        Keep local memory allocated at its high-water mark after a kernel needed more.
    """

    scheduling: str = "auto"
    map_host: bool = False
    lmem_resize_to_max: bool = False

    def __post_init__(self) -> None:
        if self.scheduling not in _SCHEDULING:
            raise ValueError(f"scheduling must be one of {', '.join(_SCHEDULING)}, "
                             f"got {self.scheduling!r}")
        for name in ("map_host", "lmem_resize_to_max"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"ContextFlags.{name} must be a bool")

    def to_flags(self) -> int:
        """The `CUctx_flags` bit mask."""
        d = bindings()
        flags = int(getattr(d.CUctx_flags, _SCHEDULING[self.scheduling]))
        if self.map_host:
            flags |= int(d.CUctx_flags.CU_CTX_MAP_HOST)
        if self.lmem_resize_to_max:
            flags |= int(d.CUctx_flags.CU_CTX_LMEM_RESIZE_TO_MAX)
        return flags

    @classmethod
    def from_flags(cls, flags: int) -> ContextFlags:
        """Decode a `CUctx_flags` bit mask."""
        d = bindings()
        sched = int(flags) & _SCHED_MASK
        scheduling = next((name for name, member in _SCHEDULING.items()
                           if int(getattr(d.CUctx_flags, member)) == sched), "auto")
        return cls(scheduling=scheduling,
                   map_host=bool(int(flags) & int(d.CUctx_flags.CU_CTX_MAP_HOST)),
                   lmem_resize_to_max=bool(int(flags)
                                           & int(d.CUctx_flags.CU_CTX_LMEM_RESIZE_TO_MAX)))


# CUcontext (as an int) -> device ordinal, for the primary contexts cupric holds retained:
# `current_device` answers from it without a second driver query. An entry goes when the
# retain is released or the context reset, before its address could name another context.
_primary_ordinals: dict[int, int] = {}


# -- invalidation of what a reset destroys --------------------------------------------------
# Caches of context-bound objects (loaded modules and launch handles of kernels, library
# handles, per-device workspaces, per-thread events) register a callback here; a reset
# calls each with the device ordinal, after the releases of everything made in the old
# context were turned off (`_lifetime.retire_epoch`, `memory` dropping its frees).

_reset_callbacks: list = []
_generations: dict[int, int] = {}
_invalidate_lock = threading.Lock()


def on_reset(callback):
    """Register ``callback(ordinal)``, run when the primary context of device `ordinal`
    is reset (`Context.reset`): it must forget every object made in the old context,
    without calling the driver on them. Returns `callback` (usable as a decorator).

    Callbacks are held for the life of the process: register module-level functions.
    """
    _reset_callbacks.append(callback)
    return callback


def generation(ordinal: int) -> int:
    """How many times device `ordinal`'s primary context was reset in this process: a
    cache keyed by it never returns an object of an earlier context."""
    return _generations.get(ordinal, 0)


def _retire(ordinal: int) -> None:
    # Nothing made in the context may be released through the driver any more: handles
    # are dead, and memory addresses will be handed out again. Safe from any thread and
    # from inside error handling: no locks of other modules, no driver calls.
    _lifetime.retire_epoch()
    for callback in _retire_callbacks:
        callback(ordinal)


#: Callbacks run when a context is lost (a sticky error) as well as on a reset; only
#: lock-free table updates belong here (memory's frees).
_retire_callbacks: list = []


def _invalidate(ordinal: int) -> None:
    with _invalidate_lock:
        _generations[ordinal] = _generations.get(ordinal, 0) + 1
        _retire(ordinal)
        failures = []
        for callback in list(_reset_callbacks):
            try:
                callback(ordinal)
            except Exception as exc:  # every cache must still be cleared: report after
                failures.append(f"{getattr(callback, '__qualname__', callback)}: {exc}")
    if failures:
        warnings.warn("cupric: clearing caches after the context reset failed in "
                      + "; ".join(failures), RuntimeWarning, stacklevel=3)


def _on_context_lost(context_handle: int) -> None:
    """`errors` calls this when a context first reports a sticky error: the context
    cannot run anything again, so nothing is released through it any more (until a
    reset, which also clears the caches)."""
    ordinal = _primary_ordinals.get(int(context_handle))
    if ordinal is not None:
        _retire(ordinal)


def _release_primary(context_handle, cu_device) -> None:
    # The primary context is released through its device, not its CUcontext handle.
    _primary_ordinals.pop(int(context_handle), None)
    check(driver().cuDevicePrimaryCtxRelease(cu_device))


class Context(DeviceResource):
    """A device's primary context (no public constructor: use `Device.primary_context()`).

    One `Context` per device lives for the whole process; `close()` releases cupric's
    retain (the context stays alive while the Runtime API or others retain it).

    ``with ctx:`` pushes the context on the calling thread's context stack and pops it at
    exit, for code that must run with exactly this context current.

    Thread safety
    -------------
    Safe from any thread: each thread makes the context current on first use
    (`make_current`), and the driver serializes what it must.
    """

    __slots__ = ()

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Context has no public constructor; use "
                        "Device(n).primary_context()")

    @classmethod
    def _retain_primary(cls, device) -> Context:
        handle = check(driver().cuDevicePrimaryCtxRetain(device.handle))
        self = cls.__new__(cls)
        self._device = device
        self._ptr = int(handle)
        # The retain outlives resets (cuDevicePrimaryCtxReset does not release it).
        self._init_resource(handle, _release_primary, device.handle, bound=False)
        _primary_ordinals[self._ptr] = device.ordinal
        return self

    @staticmethod
    def _set_primary_flags(device, flags: ContextFlags) -> None:
        if not isinstance(flags, ContextFlags):
            raise TypeError(f"flags must be a ContextFlags, got {type(flags).__name__}")
        check(driver().cuDevicePrimaryCtxSetFlags(device.handle, flags.to_flags()))

    def _label(self) -> str:
        return f"primary context of device {self._device.ordinal}"

    def __repr__(self) -> str:
        return f"<cupric.runtime.Context primary, device {self._device.ordinal}, 0x{self._ptr:x}>"

    def make_current(self) -> None:
        """Make this context current in the calling thread, if it is not already.

        Cost
        ----
        One `cuCtxGetCurrent` when already current.
        """
        d = driver()
        current = check(d.cuCtxGetCurrent())
        if int(current) != self._ptr:
            check(d.cuCtxSetCurrent(self.handle))

    def __enter__(self) -> Context:
        check(driver().cuCtxPushCurrent(self.handle))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        check(driver().cuCtxPopCurrent())

    def synchronize(self) -> None:
        """Wait until all work queued in this context has finished.

        Raises
        ------
        CudaError
            The asynchronous error of earlier work, e.g. `IllegalAddressError` after a
            kernel accessed memory out of bounds (then `ContextLostError` for every later
            call in this context).
        """
        self.make_current()
        check(driver().cuCtxSynchronize())

    # -- flags --------------------------------------------------------------------------

    @property
    def flags(self) -> ContextFlags:
        """The primary context's flags."""
        flags, _active = check(driver().cuDevicePrimaryCtxGetState(self._device.handle))
        return ContextFlags.from_flags(flags)

    def set_flags(self, flags: ContextFlags) -> None:
        """Change the flags (`cuDevicePrimaryCtxSetFlags`)."""
        self._set_primary_flags(self._device, flags)

    @property
    def is_active(self) -> bool:
        """Whether the primary context is active (retained by anyone)."""
        _flags, active = check(driver().cuDevicePrimaryCtxGetState(self._device.handle))
        return bool(active)

    @property
    def api_version(self) -> int:
        """The API version the context was created with, e.g. 13000."""
        return check(driver().cuCtxGetApiVersion(self.handle))

    # -- limits -------------------------------------------------------------------------

    def get_limit(self, name: str) -> int:
        """A context limit by name: ``"stack_size"``, ``"printf_fifo_size"``,
        ``"malloc_heap_size"``, ... (see `LIMITS`)."""
        self.make_current()
        return check(driver().cuCtxGetLimit(_limit_enum(name)))

    def set_limit(self, name: str, value: int) -> None:
        """Set a context limit by name.

        Raises
        ------
        NotSupportedError
            If the device does not support the limit.
        InvalidValueError
            If the value is out of range.
        """
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"limit {name!r} takes a non-negative int, got {value!r}")
        self.make_current()
        check(driver().cuCtxSetLimit(_limit_enum(name), value))

    stack_size = property(lambda self: self.get_limit("stack_size"),
                          lambda self, v: self.set_limit("stack_size", v),
                          doc="Bytes of stack per GPU thread (`CU_LIMIT_STACK_SIZE`).")
    printf_fifo_size = property(lambda self: self.get_limit("printf_fifo_size"),
                                lambda self, v: self.set_limit("printf_fifo_size", v),
                                doc="Bytes of the device printf buffer.")
    malloc_heap_size = property(lambda self: self.get_limit("malloc_heap_size"),
                                lambda self, v: self.set_limit("malloc_heap_size", v),
                                doc="Bytes of the heap for device-side malloc.")

    @property
    def cache_config(self) -> str:
        """Preferred split of L1/shared memory: ``"none"``, ``"shared"``, ``"l1"``,
        ``"equal"``."""
        self.make_current()
        value = check(driver().cuCtxGetCacheConfig())
        return next(k for k, v in CACHE_CONFIGS.items() if v == value.name)

    @cache_config.setter
    def cache_config(self, name: str) -> None:
        self.make_current()
        check(driver().cuCtxSetCacheConfig(cache_config_enum(name)))

    def reset(self) -> None:
        """Destroy and recreate the primary context (`cuDevicePrimaryCtxReset`), and
        forget every cached object made in it: kernels' loaded modules and launch
        handles, shared cuBLAS and cuDNN handles, workspaces, queued frees (see
        `on_reset`). Cached objects are made again on next use.

        Safety
        ------
        Every allocation, module, stream and event made in the context becomes invalid;
        using one of your own afterwards is undefined behaviour (the driver may or may
        not report it). Their releases are turned off, so closing or dropping them
        afterwards never frees what the new context gave the same address.

        A sticky device fault (`IllegalAddressError`, a trap, a device-side assert: the
        codes of `errors.STICKY_CODES`) is not cured by a reset: CUDA documents that the
        process must be restarted, and the driver refuses the new context with the same
        error. Then this raises `ContextLostError` after forgetting cupric's cached
        objects, so that the process can still shut down cleanly.

        Raises
        ------
        ContextLostError
            The driver kept the sticky error of an earlier device fault.
        """
        from .errors import STICKY_CODES, ContextLostError, error_from_code, reset_context_poison
        d = driver()
        ordinal = self._device.ordinal
        old = self._ptr
        _invalidate(ordinal)
        check(d.cuDevicePrimaryCtxReset(self._device.handle))
        reset_context_poison(old)
        reset_context_poison(0)
        # Make the new context active and current here; the reset kept cupric's retain,
        # so the retain taken to activate it is given back at once.
        result = d.cuDevicePrimaryCtxRetain(self._device.handle)
        if int(result[0]) in STICKY_CODES:
            # The driver keeps a sticky fault for the rest of the process (CUDA's
            # documentation of these errors: terminate and relaunch).
            raise ContextLostError(int(result[0]), error_from_code(int(result[0])))
        handle = check(result)
        check(d.cuDevicePrimaryCtxRelease(self._device.handle))
        _primary_ordinals.pop(old, None)
        self._handle = handle
        self._ptr = int(handle)
        _primary_ordinals[self._ptr] = ordinal
        check(d.cuCtxSetCurrent(handle))


LIMITS = tuple(_LIMITS)


def _limit_enum(name: str):
    try:
        member = _LIMITS[name]
    except KeyError:
        raise ValueError(f"unknown context limit {name!r}; one of {', '.join(_LIMITS)}") \
            from None
    return getattr(bindings().CUlimit, member)


def cache_config_enum(name: str):
    """The `CUfunc_cache` member for ``"none"``, ``"shared"``, ``"l1"`` or ``"equal"``."""
    try:
        member = CACHE_CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown cache config {name!r}; one of {', '.join(CACHE_CONFIGS)}") \
            from None
    return getattr(bindings().CUfunc_cache, member)


def current_context() -> Context:
    """The primary context current in this thread; device 0's is made current if none is.

    A context current in this thread that is not a primary context cupric knows (one made
    by other code with `cuCtxCreate`) is reported by the `Context` of its device.
    """
    return current_device().primary_context()


def current_device():
    """The device of the calling thread's current context.

    If no context is current, device 0's primary context becomes current, as the CUDA
    Runtime API does.

    Cost
    ----
    One `cuCtxGetCurrent` when the current context is a primary context cupric holds
    (the memory module's compiled path skips even that: `memory._device_of_context`).
    """
    from .device import Device
    d = driver()
    ctx = int(check(d.cuCtxGetCurrent()))
    if ctx == 0:
        device = Device(0)
        device.make_current()
        return device
    ordinal = _primary_ordinals.get(ctx)
    if ordinal is None:  # not a primary context cupric holds: ask the driver
        ordinal = int(check(d.cuCtxGetDevice()))
    return Device(ordinal)


def synchronize() -> None:
    """Wait for all work of the calling thread's current context (`cuCtxSynchronize`)."""
    current_context().synchronize()
