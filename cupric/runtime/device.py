"""CUDA devices: enumeration, attributes, and the factories of device-bound objects.

A `CUdevice` is an ordinal naming one GPU. It has no state of its own; work runs in a
context, here always the device's *primary context*, the one the CUDA Runtime API
(cuBLAS, PyTorch, CuPy) uses too, so that all of them share memory and streams.
"""

from __future__ import annotations

import threading

from ._driver import check, driver

__all__ = ["Device", "devices", "device_count", "ATTRIBUTES"]

# Python name -> CUdevice_attribute suffix, for the attributes given a property below.
# `Device.attribute()` accepts any attribute of the enum, these or others.
ATTRIBUTES = {
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_block_dim_x": "MAX_BLOCK_DIM_X",
    "max_block_dim_y": "MAX_BLOCK_DIM_Y",
    "max_block_dim_z": "MAX_BLOCK_DIM_Z",
    "max_grid_dim_x": "MAX_GRID_DIM_X",
    "max_grid_dim_y": "MAX_GRID_DIM_Y",
    "max_grid_dim_z": "MAX_GRID_DIM_Z",
    "max_shared_memory_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_memory_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_shared_memory_per_multiprocessor": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "reserved_shared_memory_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK",
    "total_constant_memory": "TOTAL_CONSTANT_MEMORY",
    "warp_size": "WARP_SIZE",
    "max_registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "max_registers_per_multiprocessor": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "clock_rate": "CLOCK_RATE",
    "memory_clock_rate": "MEMORY_CLOCK_RATE",
    "global_memory_bus_width": "GLOBAL_MEMORY_BUS_WIDTH",
    "l2_cache_size": "L2_CACHE_SIZE",
    "multiprocessor_count": "MULTIPROCESSOR_COUNT",
    "max_threads_per_multiprocessor": "MAX_THREADS_PER_MULTIPROCESSOR",
    "max_blocks_per_multiprocessor": "MAX_BLOCKS_PER_MULTIPROCESSOR",
    "compute_capability_major": "COMPUTE_CAPABILITY_MAJOR",
    "compute_capability_minor": "COMPUTE_CAPABILITY_MINOR",
    "integrated": "INTEGRATED",
    "can_map_host_memory": "CAN_MAP_HOST_MEMORY",
    "compute_mode": "COMPUTE_MODE",
    "concurrent_kernels": "CONCURRENT_KERNELS",
    "ecc_enabled": "ECC_ENABLED",
    "pci_bus_id": "PCI_BUS_ID",
    "pci_device_id": "PCI_DEVICE_ID",
    "pci_domain_id": "PCI_DOMAIN_ID",
    "async_engine_count": "ASYNC_ENGINE_COUNT",
    "unified_addressing": "UNIFIED_ADDRESSING",
    "managed_memory": "MANAGED_MEMORY",
    "concurrent_managed_access": "CONCURRENT_MANAGED_ACCESS",
    "pageable_memory_access": "PAGEABLE_MEMORY_ACCESS",
    "stream_priorities_supported": "STREAM_PRIORITIES_SUPPORTED",
    "cooperative_launch": "COOPERATIVE_LAUNCH",
    "memory_pools_supported": "MEMORY_POOLS_SUPPORTED",
    "cluster_launch": "CLUSTER_LAUNCH",
    "kernel_exec_timeout": "KERNEL_EXEC_TIMEOUT",
    "host_native_atomic_supported": "HOST_NATIVE_ATOMIC_SUPPORTED",
    "virtual_memory_management_supported": "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
    "gpu_direct_rdma_supported": "GPU_DIRECT_RDMA_SUPPORTED",
    "max_persisting_l2_cache_size": "MAX_PERSISTING_L2_CACHE_SIZE",
    "max_access_policy_window_size": "MAX_ACCESS_POLICY_WINDOW_SIZE",
}

# Attributes that can change while the process runs; every other one is cached.
_VOLATILE = frozenset({"COMPUTE_MODE", "ECC_ENABLED", "CLOCK_RATE", "MEMORY_CLOCK_RATE"})


def _attribute_enum(name):
    """The CUdevice_attribute member for a Python name, enum suffix, full name or member."""
    d = driver()
    if isinstance(name, d.CUdevice_attribute):
        return name
    if not isinstance(name, str):
        raise TypeError(f"a device attribute is named by a str, got {type(name).__name__}")
    key = name.upper()
    if not key.startswith("CU_DEVICE_ATTRIBUTE_"):
        key = "CU_DEVICE_ATTRIBUTE_" + key
    try:
        return getattr(d.CUdevice_attribute, key)
    except AttributeError:
        raise ValueError(f"unknown device attribute {name!r} (not in CUdevice_attribute of "
                         f"this cuda-python)") from None


class _Attribute:
    """A read-only property backed by one CUdevice_attribute."""

    __slots__ = ("suffix", "doc")

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.doc = f"`CU_DEVICE_ATTRIBUTE_{suffix}` of this device (int)."

    def __get__(self, device, owner=None):
        if device is None:
            return self
        return device.attribute(self.suffix)


def device_count() -> int:
    """How many CUDA devices the driver sees.

    Raises
    ------
    NoDriverError
        Without a CUDA driver.
    """
    return check(driver().cuDeviceGetCount())


class Device:
    """One CUDA device, named by its ordinal.

    ``Device(0)`` always returns the same object for ordinal 0. Attributes are read once
    and cached; `attribute(name)` reads any `CUdevice_attribute` by name
    (``"max_threads_per_block"``, ``"CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"``...).

    Device-bound objects are made here: `create_stream()`, `create_event()`,
    `primary_context()`.

    Parameters
    ----------
    ordinal : int
        0 <= ordinal < `Device.count()`.

    Raises
    ------
    NoDeviceError
        If there is no device with that ordinal.
    NoDriverError
        Without a CUDA driver.

    Thread safety
    -------------
    Safe: a `Device` holds only immutable facts and caches filled under a lock.

    Examples
    --------
    >>> dev = Device(0)                                          # doctest: +SKIP
    >>> dev.name, dev.compute_capability, dev.multiprocessor_count
    ('NVIDIA H200', (9, 0), 132)
    """

    __slots__ = ("_ordinal", "_cu_device", "_cache", "_context", "__weakref__")

    _instances: dict[int, Device] = {}
    # Reentrant: a deferred release drained inside a locked section may look a device up.
    _instances_lock = threading.RLock()

    def __new__(cls, ordinal: int = 0) -> Device:
        if isinstance(ordinal, Device):
            return ordinal
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            try:
                ordinal = ordinal.__index__()
            except AttributeError:
                raise TypeError(f"a device ordinal is an int, got {type(ordinal).__name__}") \
                    from None
        device = cls._instances.get(ordinal)
        if device is not None:
            return device
        with cls._instances_lock:
            device = cls._instances.get(ordinal)
            if device is not None:
                return device
            count = device_count()
            if not 0 <= ordinal < count:
                from .errors import NoDeviceError
                raise NoDeviceError(101, f"no CUDA device {ordinal}; this machine has "
                                         f"{count} (ordinals 0..{count - 1})")
            device = object.__new__(cls)
            device._ordinal = ordinal
            device._cu_device = check(driver().cuDeviceGet(ordinal))
            device._cache = {}
            device._context = None
            cls._instances[ordinal] = device
            return device

    @staticmethod
    def count() -> int:
        """How many CUDA devices the driver sees."""
        return device_count()

    @classmethod
    def current(cls) -> Device:
        """The device of the calling thread's current context (device 0 if none)."""
        from .context import current_device
        return current_device()

    # -- identity -----------------------------------------------------------------------

    @property
    def ordinal(self) -> int:
        """The device ordinal (0-based)."""
        return self._ordinal

    @property
    def handle(self):
        """The raw `CUdevice`."""
        return self._cu_device

    def __int__(self) -> int:
        return self._ordinal

    __index__ = __int__

    def __repr__(self) -> str:
        try:
            return f"<cupric.runtime.Device {self._ordinal}: {self.name}>"
        except Exception:  # repr must not fail, even with a lost context
            return f"<cupric.runtime.Device {self._ordinal}>"

    def __reduce__(self):
        return (Device, (self._ordinal,))

    @property
    def name(self) -> str:
        """The product name, e.g. ``"NVIDIA H200"``."""
        name = self._cache.get("name")
        if name is None:
            raw = check(driver().cuDeviceGetName(256, self._cu_device))
            name = raw.split(b"\0", 1)[0].decode()
            self._cache["name"] = name
        return name

    @property
    def uuid(self) -> str:
        """The device UUID as ``"GPU-xxxxxxxx-xxxx-..."`` (as nvidia-smi shows it)."""
        uuid = self._cache.get("uuid")
        if uuid is None:
            raw = check(driver().cuDeviceGetUuid(self._cu_device))
            b = raw.bytes
            if not isinstance(b, bytes):  # some cuda-python versions give a list of chars
                b = bytes((x if isinstance(x, int) else ord(x)) & 0xFF for x in b)
            h = b[:16].hex()
            uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
            self._cache["uuid"] = uuid
        return uuid

    @property
    def pci_bus_id_string(self) -> str:
        """The PCI address, e.g. ``"0000:3B:00.0"``."""
        raw = check(driver().cuDeviceGetPCIBusId(32, self._cu_device))
        return raw.split(b"\0", 1)[0].decode()

    @property
    def total_memory(self) -> int:
        """Device memory in bytes."""
        total = self._cache.get("total_memory")
        if total is None:
            total = check(driver().cuDeviceTotalMem(self._cu_device))
            self._cache["total_memory"] = total
        return total

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor), e.g. (9, 0) for Hopper."""
        return (self.attribute("COMPUTE_CAPABILITY_MAJOR"),
                self.attribute("COMPUTE_CAPABILITY_MINOR"))

    @property
    def arch(self) -> str:
        """The architecture name compilers take, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    # -- attributes ---------------------------------------------------------------------

    def attribute(self, name) -> int:
        """One `CUdevice_attribute`, by name.

        Parameters
        ----------
        name : str or CUdevice_attribute
            A lowercase name (``"max_threads_per_block"``), the enum suffix
            (``"MAX_THREADS_PER_BLOCK"``), the full enum name, or the enum member.

        Raises
        ------
        ValueError
            If no attribute has that name.

        Cost
        ----
        A dict lookup after the first read (attributes that can change, such as the
        compute mode or clocks, are read every time).
        """
        key = name if isinstance(name, str) else getattr(name, "name", name)
        value = self._cache.get(key)
        if value is not None:
            return value
        member = _attribute_enum(name)
        value = check(driver().cuDeviceGetAttribute(member, self._cu_device))
        if member.name[len("CU_DEVICE_ATTRIBUTE_"):] not in _VOLATILE:
            self._cache[key] = value
        return value

    def attributes(self) -> dict[str, int]:
        """Every attribute with a named property, as a dict (for logs and bug reports)."""
        return {py: self.attribute(suffix) for py, suffix in ATTRIBUTES.items()}

    @property
    def max_block_dims(self) -> tuple[int, int, int]:
        """The largest block, per dimension."""
        return (self.attribute("MAX_BLOCK_DIM_X"), self.attribute("MAX_BLOCK_DIM_Y"),
                self.attribute("MAX_BLOCK_DIM_Z"))

    @property
    def max_grid_dims(self) -> tuple[int, int, int]:
        """The largest grid, per dimension."""
        return (self.attribute("MAX_GRID_DIM_X"), self.attribute("MAX_GRID_DIM_Y"),
                self.attribute("MAX_GRID_DIM_Z"))

    # -- contexts and device-bound objects ---------------------------------------------

    def primary_context(self, flags=None):
        """The device's primary context (retained once, shared with the Runtime API).

        Parameters
        ----------
        flags : ContextFlags, optional
            Scheduling policy etc., applied with `cuDevicePrimaryCtxSetFlags` (they take
            effect for a context that is not yet active, and are otherwise checked by the
            driver).

        Returns
        -------
        Context
        """
        from .context import Context
        ctx = self._context
        if ctx is None:
            with Device._instances_lock:
                ctx = self._context
                if ctx is None:
                    if flags is not None:
                        Context._set_primary_flags(self, flags)
                    ctx = Context._retain_primary(self)
                    self._context = ctx
                    return ctx
        if flags is not None:
            ctx.set_flags(flags)
        return ctx

    def make_current(self):
        """Make this device's primary context current in the calling thread.

        Returns
        -------
        Context
        """
        ctx = self.primary_context()
        ctx.make_current()
        return ctx

    set_current = make_current

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) device memory in bytes, as the driver sees it now."""
        self.make_current()
        return check(driver().cuMemGetInfo())

    def synchronize(self) -> None:
        """Wait for all work on this device's primary context to finish.

        Raises
        ------
        CudaError
            An asynchronous error of earlier work (e.g. `IllegalAddressError`).
        """
        self.primary_context().synchronize()

    def create_stream(self, *, non_blocking: bool = False, priority: int | None = None):
        """A new stream on this device.

        Parameters
        ----------
        non_blocking : bool
            If True, the stream does not synchronize with the legacy default stream
            (`CU_STREAM_NON_BLOCKING`).
        priority : int, optional
            Lower numbers are higher priority; see `stream_priority_range`. The default is
            the device's default priority (0).

        Returns
        -------
        Stream
        """
        from .stream import Stream
        return Stream._create(self, non_blocking=non_blocking, priority=priority)

    def default_stream(self):
        """The legacy default (NULL) stream of this device's primary context (borrowed)."""
        from .stream import Stream
        return Stream._special(self, 0)

    def per_thread_stream(self):
        """The per-thread default stream (`CU_STREAM_PER_THREAD`) of this device (borrowed)."""
        from .stream import Stream
        return Stream._special(self, 2)

    @property
    def stream_priority_range(self) -> tuple[int, int]:
        """(least, greatest) stream priority; numerically, greatest <= least."""
        self.make_current()
        return check(driver().cuCtxGetStreamPriorityRange())

    def create_event(self, *, timing: bool = True, blocking_sync: bool = False,
                     interprocess: bool = False):
        """A new event on this device.

        Parameters
        ----------
        timing : bool
            Record timestamps (needed for `Event.elapsed_time`). Events without timing
            are cheaper to record and wait on.
        blocking_sync : bool
            `Event.synchronize()` blocks the thread instead of spinning.
        interprocess : bool
            Usable from other processes (requires ``timing=False``).

        Returns
        -------
        Event
        """
        from .event import Event
        return Event._create(self, timing=timing, blocking_sync=blocking_sync,
                             interprocess=interprocess)

    def can_access_peer(self, peer: Device) -> bool:
        """Whether kernels on this device can access `peer`'s memory."""
        peer = Device(peer)
        return bool(check(driver().cuDeviceCanAccessPeer(self._cu_device, peer._cu_device)))


for _py_name, _suffix in ATTRIBUTES.items():
    if not hasattr(Device, _py_name):
        setattr(Device, _py_name, _Attribute(_suffix))
del _py_name, _suffix


def devices() -> list[Device]:
    """Every CUDA device the driver sees, in ordinal order."""
    return [Device(i) for i in range(device_count())]
