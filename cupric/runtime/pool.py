"""Stream-ordered memory pools, and memory access between GPUs (peer access).

A memory pool (`CUmemoryPool`) backs `cuMemAllocAsync`/`cuMemFreeAsync`: allocation and free
are operations queued on a stream, and freed blocks are reused by later allocations without
returning to the driver. Every device has a default pool; more can be created with their
own limits. Memory above the pool's release threshold goes back to the device at each
synchronization; `trim` returns it explicitly.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _lifetime
from ._driver import check, driver
from .allocation import _device_of_context, stream_handle
from .buffer import DeviceBuffer
from .memory import _new_buffer

__all__ = ["MemoryPool", "PoolOptions", "PoolStats", "default_pool", "current_pool",
           "create_pool", "can_access_peer", "enable_peer_access", "disable_peer_access",
           "copy_peer"]

_PEER_ACCESS_ALREADY_ENABLED = 704  # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
_PEER_ACCESS_NOT_ENABLED = 705      # CUDA_ERROR_PEER_ACCESS_NOT_ENABLED

_ACCESS = {
    "none": "CU_MEM_ACCESS_FLAGS_PROT_NONE",
    "read": "CU_MEM_ACCESS_FLAGS_PROT_READ",
    "read_write": "CU_MEM_ACCESS_FLAGS_PROT_READWRITE",
}


@dataclasses.dataclass(frozen=True)
class PoolOptions:
    """Properties of a created pool.

    Parameters
    ----------
    release_threshold : int, optional
        Bytes of freed memory the pool keeps reserved across synchronizations (the driver's
        default, 0, returns everything at each synchronization). ``2**64 - 1`` keeps all.
    max_size : int
        Largest total size of the pool in bytes; 0 means the driver's default (no limit
        beyond the device's memory).
    """

    release_threshold: int | None = None
    max_size: int = 0

    def __post_init__(self) -> None:
        if self.release_threshold is not None and (
                not isinstance(self.release_threshold, int) or self.release_threshold < 0):
            raise ValueError(f"release_threshold must be a non-negative int, got "
                             f"{self.release_threshold!r}")
        if not isinstance(self.max_size, int) or self.max_size < 0:
            raise ValueError(f"max_size must be a non-negative int, got {self.max_size!r}")


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """Memory of a pool, in bytes.

    ``reserved_*`` is what the pool holds from the device; ``used_*`` what allocations
    currently use (``*_high``: the peaks since creation or `MemoryPool.reset_peaks`).
    """

    reserved_current: int
    reserved_high: int
    used_current: int
    used_high: int


def _destroy_pool(handle) -> None:
    check(driver().cuMemPoolDestroy(handle))


def _ordinal(device) -> int:
    if device is None:
        return _device_of_context()
    from .device import Device
    return Device(device).ordinal


class MemoryPool(_lifetime.Resource):
    """A stream-ordered memory pool of one device.

    No public constructor: `default_pool(device)`, `current_pool(device)` (borrowed, never
    destroyed) or `create_pool(device, options)` (owned; ``close()`` destroys it).

    Thread safety
    -------------
    Allocation and free from several threads are safe (the driver serializes them).
    """

    __slots__ = ("_device", "_ptr")

    def __init__(self, *args, **kwargs):
        raise TypeError("MemoryPool has no public constructor; use "
                        "cupric.runtime.pool.default_pool(), current_pool() or "
                        "create_pool()")

    @classmethod
    def _wrap(cls, handle, device: int, owned: bool) -> "MemoryPool":
        self = cls.__new__(cls)
        self._device = device
        self._ptr = int(handle)
        self._init_resource(handle, _destroy_pool if owned else None)
        return self

    def _label(self) -> str:
        return f"memory pool 0x{self._ptr:x} of device {self._device}"

    def __repr__(self) -> str:
        kind = "owned" if self.owns_handle else "borrowed"
        state = ", closed" if self._closed else ""
        return f"<MemoryPool {kind} 0x{self._ptr:x}, device {self._device}{state}>"

    @property
    def device(self) -> int:
        """Ordinal of the pool's device."""
        return self._device

    # -- allocation ---------------------------------------------------------------------

    def empty(self, shape, dtype=np.float64, stream=None) -> DeviceBuffer:
        """A new uninitialized buffer from this pool (`cuMemAllocFromPoolAsync`).

        The allocation is ordered on `stream` (the legacy default stream when None): use
        it there or in work ordered after it. ``close(stream)`` frees it in stream order,
        back into the pool. The buffer keeps the pool alive until it is closed.

        Raises
        ------
        CudaOutOfMemoryError
            Saying how much was asked for and how much the device has free.
        """
        buf = _new_buffer(shape, dtype, stream, pool=self)
        buf._alloc.owner = self
        return buf

    def zeros(self, shape, dtype=np.float64, stream=None) -> DeviceBuffer:
        """As `empty`, zero-filled on `stream`."""
        buf = self.empty(shape, dtype, stream)
        buf.zero(stream)
        return buf

    # -- attributes -----------------------------------------------------------------------

    def _get(self, name: str) -> int:
        d = driver()
        attribute = getattr(d.CUmemPool_attribute, name)
        return int(check(d.cuMemPoolGetAttribute(self.handle, attribute)))

    def _set64(self, name: str, value: int) -> None:
        d = driver()
        check(d.cuMemPoolSetAttribute(self.handle, getattr(d.CUmemPool_attribute, name),
                                      d.cuuint64_t(value)))

    @property
    def release_threshold(self) -> int:
        """Bytes of freed memory kept reserved across synchronizations."""
        return self._get("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD")

    @release_threshold.setter
    def release_threshold(self, value: int) -> None:
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"release_threshold must be a non-negative int, got {value!r}")
        self._set64("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", value)

    def stats(self) -> PoolStats:
        """Reserved and used bytes, current and peak."""
        return PoolStats(
            reserved_current=self._get("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT"),
            reserved_high=self._get("CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH"),
            used_current=self._get("CU_MEMPOOL_ATTR_USED_MEM_CURRENT"),
            used_high=self._get("CU_MEMPOOL_ATTR_USED_MEM_HIGH"),
        )

    @property
    def used(self) -> int:
        """Bytes currently allocated from the pool."""
        return self._get("CU_MEMPOOL_ATTR_USED_MEM_CURRENT")

    @property
    def reserved(self) -> int:
        """Bytes the pool currently holds from the device."""
        return self._get("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT")

    def reset_peaks(self) -> None:
        """Reset the ``*_high`` statistics to the current values."""
        self._set64("CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH", 0)
        self._set64("CU_MEMPOOL_ATTR_USED_MEM_HIGH", 0)

    def trim(self, bytes_to_keep: int = 0) -> None:
        """Return unused reserved memory to the device, keeping at least `bytes_to_keep`
        reserved (`cuMemPoolTrimTo`). Memory of live allocations is never released.

        Cost
        ----
        Frees physical memory: later allocations must map it again.
        """
        if not isinstance(bytes_to_keep, int) or bytes_to_keep < 0:
            raise ValueError(f"bytes_to_keep must be a non-negative int, got "
                             f"{bytes_to_keep!r}")
        check(driver().cuMemPoolTrimTo(self.handle, bytes_to_keep))

    def set_access(self, device, access: str = "read_write") -> None:
        """Let kernels on another `device` access this pool's allocations
        (`cuMemPoolSetAccess`); `access` is ``"read_write"``, ``"read"`` or ``"none"``.

        Raises
        ------
        ValueError
            For an unknown access mode.
        NotSupportedError, InvalidValueError
            When the devices cannot access each other (see `can_access_peer`).
        """
        try:
            member = _ACCESS[access]
        except KeyError:
            raise ValueError(f"access must be one of {', '.join(_ACCESS)}, got {access!r}") \
                from None
        d = driver()
        desc = d.CUmemAccessDesc()
        desc.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        accessor = _ordinal(device)
        desc.location.id = accessor
        desc.flags = getattr(d.CUmemAccess_flags, member)
        check(d.cuMemPoolSetAccess(self.handle, [desc], 1))
        # Remembered for the kernel launch's device check (see `peer_reachable`).
        if access == "read_write":
            _POOL_ACCESS.add((self._ptr, accessor))
        else:
            _POOL_ACCESS.discard((self._ptr, accessor))

    def close(self) -> None:
        """Destroy an owned pool (`cuMemPoolDestroy`); a borrowed pool is only marked
        closed. Memory of live allocations is released once they are all freed."""
        super().close()


def default_pool(device=None) -> MemoryPool:
    """The device's default memory pool (borrowed: never destroyed by cupric)."""
    ordinal = _ordinal(device)
    from .device import Device
    dev = Device(ordinal)
    with dev.primary_context():  # pushed for the call, popped after: current is unchanged
        handle = check(driver().cuDeviceGetDefaultMemPool(dev.handle))
    return MemoryPool._wrap(handle, ordinal, owned=False)


def current_pool(device=None) -> MemoryPool:
    """The pool `cuMemAllocAsync` uses on the device now (borrowed)."""
    ordinal = _ordinal(device)
    from .device import Device
    dev = Device(ordinal)
    with dev.primary_context():
        handle = check(driver().cuDeviceGetMemPool(dev.handle))
    return MemoryPool._wrap(handle, ordinal, owned=False)


def create_pool(device=None, options: PoolOptions | None = None) -> MemoryPool:
    """A new memory pool on a device (`cuMemPoolCreate`), owned: ``close()`` destroys it.

    Parameters
    ----------
    device : Device or int, optional
        The current device by default.
    options : PoolOptions, optional
    """
    options = options or PoolOptions()
    if not isinstance(options, PoolOptions):
        raise TypeError(f"options must be a PoolOptions, got {type(options).__name__}")
    ordinal = _ordinal(device)
    from .device import Device
    d = driver()
    props = d.CUmemPoolProps()
    props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.handleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
    props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = ordinal
    if options.max_size:
        props.maxSize = options.max_size
    with Device(ordinal).primary_context():
        handle = check(d.cuMemPoolCreate(props))
    pool = MemoryPool._wrap(handle, ordinal, owned=True)
    if options.release_threshold is not None:
        pool.release_threshold = options.release_threshold
    return pool


# --------------------------------------------------------------------------------------
# Peer access


#: (device, peer) pairs whose peer access `enable_peer_access` enabled in this process, and
#: (pool handle, device) pairs that `MemoryPool.set_access` granted read-write access.
#: The driver cannot be asked either; the kernel launch's device check reads them.
_PEERS: set = set()
_POOL_ACCESS: set = set()


def peer_reachable(device: int, owner: int, pool: int = 0) -> bool:
    """Whether kernels on `device` may use memory of device `owner`, as far as cupric
    enabled it: peer access enabled by `enable_peer_access(owner, device)`, and for memory
    of a stream-ordered pool (handle `pool`, 0 for other memory) read-write access
    granted to `device` by that pool's `set_access`. Access enabled outside cupric
    (another library's calls) is not seen."""
    if (device, owner) not in _PEERS:
        return False
    return not pool or (pool, device) in _POOL_ACCESS


def can_access_peer(device, peer) -> bool:
    """Whether kernels on `device` can access memory of `peer` (`cuDeviceCanAccessPeer`)."""
    from .device import Device
    return Device(device).can_access_peer(Device(peer))


def enable_peer_access(peer, device=None) -> None:
    """Let kernels of `device` (the current one by default) access `peer`'s memory
    (`cuCtxEnablePeerAccess`). Enabling an already enabled pair does nothing.

    Raises
    ------
    ValueError
        If `peer` is `device` itself.
    NotSupportedError
        If the pair cannot access each other (no NVLink/PCIe peer path).
    """
    from .device import Device
    dev = Device(_ordinal(device))
    other = Device(peer)
    if other.ordinal == dev.ordinal:
        raise ValueError(f"device {dev.ordinal} cannot be its own peer")
    peer_context = other.primary_context().handle
    with dev.primary_context():  # the calling thread's current context is left as it was
        result = driver().cuCtxEnablePeerAccess(peer_context, 0)
    if int(result[0]) != _PEER_ACCESS_ALREADY_ENABLED:  # else: already as requested
        check(result)
    _PEERS.add((dev.ordinal, other.ordinal))


def disable_peer_access(peer, device=None) -> None:
    """Undo `enable_peer_access` (`cuCtxDisablePeerAccess`). Disabling a pair that is not
    enabled does nothing."""
    from .device import Device
    dev = Device(_ordinal(device))
    other = Device(peer)
    peer_context = other.primary_context().handle
    with dev.primary_context():
        result = driver().cuCtxDisablePeerAccess(peer_context)
    if int(result[0]) != _PEER_ACCESS_NOT_ENABLED:  # else: already as requested
        check(result)
    _PEERS.discard((dev.ordinal, other.ordinal))


def copy_peer(dst: DeviceBuffer, src: DeviceBuffer, stream=None) -> None:
    """Copy between buffers of different devices (`cuMemcpyPeerAsync`), ordered on
    `stream` (the legacy default stream when None).

    Works without peer access enabled (the driver stages through the host then); with it,
    the copy goes directly over NVLink/PCIe. Both buffers must have the same dtype and
    shape and be C-contiguous.

    Raises
    ------
    TypeError, ValueError
        As `DeviceBuffer.copy_from`.
    """
    if not isinstance(dst, DeviceBuffer) or not isinstance(src, DeviceBuffer):
        raise TypeError("copy_peer copies between DeviceBuffers (use as_device_array for "
                        "other libraries' arrays)")
    dst._check_writable()
    src._check_open()
    dst._check_match(src.dtype, src.shape, "the source")
    dst._contiguous_or_raise("copy_peer")
    src._contiguous_or_raise("copy_peer")
    if dst.nbytes == 0:
        return
    from .device import Device
    dst_context = Device(dst.device).primary_context().handle
    src_context = Device(src.device).primary_context().handle
    _device_of_context()
    check(driver().cuMemcpyPeerAsync(dst.ptr, dst_context, src.ptr, src_context, dst.nbytes,
                                     stream_handle(stream)))
    dst._stream = stream if stream is not None else 1
