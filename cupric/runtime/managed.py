"""Unified (managed) memory: one address valid on the host and on every device.

`cuMemAllocManaged` memory migrates page by page to whichever processor touches it. Hints
(`cuMemAdvise`: read-mostly, preferred location, accessed-by) and explicit prefetches
(`cuMemPrefetchAsync`) move it ahead of use. A `ManagedBuffer` is a `DeviceBuffer` (kernels
take it as is) with a NumPy view of the same memory for the host.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ._driver import check, driver
from .errors import CudaOutOfMemoryError
from .memory import (SYNC, DeviceBuffer, _device_of_context, _free_sync, _new_allocation,
                     c_strides, normalize_dtype, normalize_shape, stream_handle)

__all__ = ["ManagedBuffer", "managed_empty", "managed_zeros", "managed_array", "ADVICE"]

# Advice name -> CUmem_advise member name.
ADVICE = {
    "read_mostly": "CU_MEM_ADVISE_SET_READ_MOSTLY",
    "unset_read_mostly": "CU_MEM_ADVISE_UNSET_READ_MOSTLY",
    "preferred_location": "CU_MEM_ADVISE_SET_PREFERRED_LOCATION",
    "unset_preferred_location": "CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION",
    "accessed_by": "CU_MEM_ADVISE_SET_ACCESSED_BY",
    "unset_accessed_by": "CU_MEM_ADVISE_UNSET_ACCESSED_BY",
}

_HOST_NAMES = ("cpu", "host")
_CU_DEVICE_CPU = -1  # the CUdevice that means "the host" in the pre-13 signatures


def _bindings_major() -> int:
    from cuda.bindings import __version__
    return int(__version__.split(".")[0])


def _location(d, where):
    """A `CUmemLocation` for a device ordinal or "cpu"."""
    loc = d.CUmemLocation()
    if isinstance(where, str):
        if where.lower() not in _HOST_NAMES:
            raise ValueError(f"a location is a device ordinal or 'cpu', got {where!r}")
        loc.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
        loc.id = 0
    else:
        loc.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = int(where)
    return loc


def _legacy_device(where) -> int:
    if isinstance(where, str):
        if where.lower() not in _HOST_NAMES:
            raise ValueError(f"a location is a device ordinal or 'cpu', got {where!r}")
        return _CU_DEVICE_CPU
    return int(where)


class ManagedBuffer(DeviceBuffer):
    """Unified memory: a `DeviceBuffer` whose memory the host can also read and write.

    Made by `managed_empty`, `managed_zeros` or `managed_array`. `host` is a NumPy array
    over the same memory.

    Safety
    ------
    The host may touch `host` only while no kernel that uses the memory is running:
    synchronize the stream (or the device) first. On GPUs without concurrent managed
    access, touching it during a kernel is a segmentation fault; with it, a data race.

    Cost
    ----
    First touches migrate pages (on-demand faults); `prefetch` moves them ahead of use.
    """

    __slots__ = ()
    _dl_device_type = 13  # kDLCUDAManaged

    @property
    def host(self) -> np.ndarray:
        """A NumPy array over the buffer's memory (keeps the allocation alive)."""
        self._check_open()
        alloc = self._alloc
        raw = (ctypes.c_char * max(self.nbytes, 1)).from_address(self.ptr)
        raw._cupric_owner = alloc
        return np.ndarray(self.shape, self.dtype, buffer=raw, strides=self.strides)

    def advise(self, advice: str, location=None) -> None:
        """Give the driver a hint about how the memory will be used (`cuMemAdvise`).

        Parameters
        ----------
        advice : str
            One of `ADVICE`: ``"read_mostly"`` (read-only copies on each processor),
            ``"preferred_location"`` (where the pages should live), ``"accessed_by"``
            (keep mapped for that processor), and their ``"unset_..."`` forms.
        location : int or "cpu", optional
            The device ordinal or the host; the buffer's device by default.

        Raises
        ------
        ValueError
            For an unknown advice or location.
        """
        self._check_open()
        try:
            member = ADVICE[advice]
        except KeyError:
            raise ValueError(f"unknown advice {advice!r}; one of {', '.join(ADVICE)}") \
                from None
        where = self.device if location is None else location
        d = driver()
        _device_of_context()
        value = getattr(d.CUmem_advise, member)
        if _bindings_major() >= 13:
            check(d.cuMemAdvise(self.ptr, self.nbytes, value, _location(d, where)))
        elif hasattr(d, "cuMemAdvise_v2"):
            check(d.cuMemAdvise_v2(self.ptr, self.nbytes, value, _location(d, where)))
        else:
            check(d.cuMemAdvise(self.ptr, self.nbytes, value,
                                d.CUdevice(_legacy_device(where))))

    def prefetch(self, location=None, stream=None) -> None:
        """Migrate the memory to a device or to the host ahead of use
        (`cuMemPrefetchAsync`, ordered on `stream`).

        Parameters
        ----------
        location : int or "cpu", optional
            The device ordinal or the host; the buffer's device by default.
        stream : Stream, optional
            The legacy default stream when None.

        Notes
        -----
        CUDA 13 changed the call to take a `CUmemLocation` and flags; cupric uses that
        form with cuda-bindings 13 and the older ones (``_v2`` or the device form) before.
        """
        self._check_open()
        where = self.device if location is None else location
        d = driver()
        _device_of_context()
        h = stream_handle(stream)
        if _bindings_major() >= 13:
            check(d.cuMemPrefetchAsync(self.ptr, self.nbytes, _location(d, where), 0, h))
        elif hasattr(d, "cuMemPrefetchAsync_v2"):
            check(d.cuMemPrefetchAsync_v2(self.ptr, self.nbytes, _location(d, where), 0, h))
        else:
            check(d.cuMemPrefetchAsync(self.ptr, self.nbytes,
                                       d.CUdevice(_legacy_device(where)), h))
        if stream is not None:
            self._stream = stream

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"ptr=0x{self.ptr:x}"
        return f"<ManagedBuffer shape={self.shape} dtype={self.dtype} {state}>"


def managed_empty(shape, dtype=np.float64, *, attach: str = "global") -> ManagedBuffer:
    """New uninitialized managed memory (`cuMemAllocManaged`).

    Parameters
    ----------
    attach : {"global", "host"}
        ``"global"``: accessible from any stream on any device; ``"host"``: from the host,
        and from a device only once attached to a stream.

    Raises
    ------
    CudaOutOfMemoryError
        When the request exceeds the device's free memory: cupric refuses before asking
        the driver, because oversubscribing managed memory can stall the GPU for a long
        time. The message says how much was asked for and how much is free.
    """
    dt = normalize_dtype(dtype)
    shape = normalize_shape(shape)
    nbytes = dt.itemsize
    for n in shape:
        nbytes *= n
    if attach not in ("global", "host"):
        raise ValueError(f"attach must be 'global' or 'host', got {attach!r}")
    device = _device_of_context()
    d = driver()
    free, total = check(d.cuMemGetInfo())
    if nbytes > int(free):
        raise CudaOutOfMemoryError(2, "managed allocation refused: it would oversubscribe "
                                      "device memory", requested=nbytes, free=int(free),
                                   total=int(total))
    flag = (d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL if attach == "global"
            else d.CUmemAttach_flags.CU_MEM_ATTACH_HOST)
    size = max(nbytes, 1)  # cuMemAllocManaged refuses 0 bytes
    ptr = int(check(d.cuMemAllocManaged(size, int(flag)), requested=nbytes))
    alloc = _new_allocation(ptr, size, SYNC, device, _free_sync)
    return ManagedBuffer._make(alloc, ptr, shape, c_strides(shape, dt.itemsize), dt, False,
                               None, cls=ManagedBuffer)


def managed_zeros(shape, dtype=np.float64, *, attach: str = "global") -> ManagedBuffer:
    """As `managed_empty`, zero-filled on the device."""
    buf = managed_empty(shape, dtype, attach=attach)
    buf.zero()
    # The fill is asynchronous; the host may read `host` as soon as this returns.
    check(driver().cuStreamSynchronize(0))
    return buf


def managed_array(array, *, attach: str = "global") -> ManagedBuffer:
    """New managed memory holding a copy of `array` (written by the host)."""
    source = np.asarray(array)
    buf = managed_empty(source.shape, source.dtype, attach=attach)
    buf.host[...] = source
    return buf
