"""cupric.runtime: a Pythonic host runtime over the CUDA Driver API.

Devices and their primary contexts, streams, events, graphs, modules and kernel launches,
the JIT linker, device/pinned/managed memory and array interop (CUDA Array Interface,
DLPack). Built on cuda-python's `cuda.bindings.driver`.

Importing this package neither imports cuda.bindings nor touches the GPU: names load on
first use, and the driver is initialized by the first call that needs it.

Examples
--------
>>> from cupric import runtime as rt                        # doctest: +SKIP
>>> dev = rt.Device(0)
>>> stream = dev.create_stream()
>>> module = rt.Module.from_data(ptx)
>>> module.get_function("saxpy").launch(grid, 256, rt.f32(2.0), x, y, n, stream=stream)
"""

from __future__ import annotations

from .._lazy import attach

# name -> (module, attribute). Resolved on first access and cached in the package globals.
_LAZY = {
    # errors (cheap, but kept lazy for uniformity)
    **{name: ("cupric.runtime.errors", name) for name in (
        "CudaError", "NoDriverError", "NoDeviceError", "InvalidValueError",
        "InvalidHandleError", "InvalidContextError", "CudaOutOfMemoryError", "NotReadyError",
        "NotFoundError", "NotSupportedError", "ModuleLoadError", "LaunchError",
        "KernelFaultError", "DeviceAssertionError", "IllegalAddressError",
        "ContextLostError", "StreamCaptureError", "ClosedError", "DeviceMismatchError")},
    "driver_available": ("cupric.runtime._driver", "driver_available"),
    "driver_version": ("cupric.runtime._driver", "driver_version"),
    "Device": ("cupric.runtime.device", "Device"),
    "devices": ("cupric.runtime.device", "devices"),
    "device_count": ("cupric.runtime.device", "device_count"),
    "Context": ("cupric.runtime.context", "Context"),
    "ContextFlags": ("cupric.runtime.context", "ContextFlags"),
    "current_device": ("cupric.runtime.context", "current_device"),
    "synchronize": ("cupric.runtime.context", "synchronize"),
    "Stream": ("cupric.runtime.stream", "Stream"),
    "HostCallbackError": ("cupric.runtime.stream", "HostCallbackError"),
    "Event": ("cupric.runtime.event", "Event"),
    "Graph": ("cupric.runtime.graph", "Graph"),
    "GraphExec": ("cupric.runtime.graph", "GraphExec"),
    "GraphUpdateError": ("cupric.runtime.graph", "GraphUpdateError"),
    "Module": ("cupric.runtime.module", "Module"),
    "Function": ("cupric.runtime.module", "Function"),
    "JitOptions": ("cupric.runtime.module", "JitOptions"),
    "PreparedLaunch": ("cupric.runtime.launch", "PreparedLaunch"),
    "LaunchConfig": ("cupric.runtime.launch", "LaunchConfig"),
    "KernelArgumentError": ("cupric.runtime.launch", "KernelArgumentError"),
    "Linker": ("cupric.runtime.linker", "Linker"),
    "LinkerOptions": ("cupric.runtime.linker", "LinkerOptions"),
    "LinkerError": ("cupric.runtime.linker", "LinkerError"),
    "link": ("cupric.runtime.linker", "link"),
    # owned by the memory side of the runtime
    "DeviceBuffer": ("cupric.runtime.memory", "DeviceBuffer"),
    "DeviceBox": ("cupric.runtime.memory", "DeviceBox"),
    "PinnedBuffer": ("cupric.runtime.host", "PinnedBuffer"),
    "ManagedBuffer": ("cupric.runtime.managed", "ManagedBuffer"),
    "MemoryPool": ("cupric.runtime.pool", "MemoryPool"),
    "as_device_array": ("cupric.runtime.interop", "as_device_array"),
    **{name: ("cupric.runtime.memory", name) for name in (
        "empty", "zeros", "empty_like", "zeros_like", "to_device", "device_box",
        "memory_info", "release_cached", "cache_stats")},
    **{name: ("cupric.runtime.host", name) for name in (
        "pinned_empty", "pinned_zeros", "pinned_array", "PinnedOptions")},
    **{name: ("cupric.runtime.managed", name) for name in (
        "managed_empty", "managed_zeros", "managed_array")},
    **{name: ("cupric.runtime.pool", name) for name in (
        "default_pool", "current_pool", "create_pool", "PoolOptions", "PoolStats",
        "enable_peer_access", "disable_peer_access", "can_access_peer", "copy_peer")},
    "is_device_array": ("cupric.runtime.interop", "is_device_array"),
    "from_dlpack": ("cupric.runtime.dlpack", "from_dlpack"),
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = attach(__name__, globals(), _LAZY)
