"""The OptiX device context: OptiX's state on one GPU, made on the runtime's primary
context. Every other OptiX object (modules, program groups, pipelines, acceleration
structures, denoisers) belongs to one device context, and the context's factories make
them; it carries the log callback, validation mode and the disk cache of compiled modules.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref

from cupric.runtime.resource import Resource

from .options import ContextOptions

__all__ = ["DeviceContext", "create_context", "DEVICE_PROPERTIES", "destroy_child"]

_logger = logging.getLogger("cupric.optix")

# OptixDeviceProperty, by short name.
DEVICE_PROPERTIES = {
    "max_trace_depth": 0x2001,
    "max_traversable_graph_depth": 0x2002,
    "max_primitives_per_gas": 0x2003,
    "max_instances_per_ias": 0x2004,
    "rtcore_version": 0x2005,
    "max_instance_id": 0x2006,
    "num_bits_instance_visibility_mask": 0x2007,
    "max_sbt_records_per_gas": 0x2008,
    "max_sbt_offset": 0x2009,
}

_LOG_KEEP = 256


class _Log:
    """Where OptiX's log messages go; held by the C callback, never by the context.

    An exception raised by a user callback cannot cross OptiX's C frames: it is kept and
    raised by the context's next call (`raise_pending`).
    """

    def __init__(self, user_callback) -> None:
        self.user_callback = user_callback
        self.messages: collections.deque = collections.deque(maxlen=_LOG_KEEP)
        self.count = 0  # messages ever received: a mark for `since`
        self.lock = threading.Lock()
        self.pending: BaseException | None = None

    def __call__(self, level: int, tag, message, _data) -> None:
        from . import lib
        ffi = lib.ffi
        tag_text = ffi.string(tag).decode(errors="replace") if tag != ffi.NULL else ""
        text = ffi.string(message).decode(errors="replace") if message != ffi.NULL else ""
        with self.lock:
            self.messages.append((int(level), tag_text, text))
            self.count += 1
        if self.user_callback is not None:
            try:
                self.user_callback(int(level), tag_text, text)
            except BaseException as exc:  # kept and re-raised: see the class docstring
                with self.lock:
                    if self.pending is None:
                        self.pending = exc
        elif level <= 2:
            _logger.error("OptiX [%s] %s", tag_text, text.rstrip())

    def raise_pending(self) -> None:
        with self.lock:
            exc, self.pending = self.pending, None
        if exc is not None:
            raise RuntimeError("the OptiX log callback raised an exception") from exc

    def since(self, mark: int) -> list:
        """The messages received after `count` was `mark` (those still kept)."""
        with self.lock:
            new = min(self.count - mark, len(self.messages))
            return list(self.messages)[len(self.messages) - new:] if new > 0 else []


class _Lifetime:
    """Whether a context's OptiX handle still exists; shared by the context's release and
    the releases of every object made from it (which must never reach OptiX with a handle
    that `optixDeviceContextDestroy` already freed along with its context).

    Held by the finalizers, never referencing the context itself, so that it can die.
    `lock` (reentrant: a release may run from a drain inside another release of the same
    thread) makes "is the context alive? then destroy the child" one step.
    """

    __slots__ = ("lock", "destroyed")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.destroyed = False


def _destroy_context(handle, lifetime, _callback, _cu_context) -> None:
    # `_callback` (the cffi callback object) and the CUDA context (`_cu_context`) are
    # arguments only to stay alive until OptiX no longer uses them.
    from . import lib
    with lifetime.lock:
        lib.check(lib.optixDeviceContextDestroy(handle))
        lifetime.destroyed = True


def destroy_child(destroy, handle, context) -> None:
    """Release `handle` of an object made from `context` with OptiX's `destroy` function,
    unless the context is already destroyed (OptiX freed the object with it).

    The release functions of modules, program groups, pipelines and denoisers call this;
    their finalizers hold `context` (the Resource, not its raw handle), so a context is
    never destroyed by garbage collection before the objects made from it.
    """
    from . import lib
    lifetime = context._lifetime
    with lifetime.lock:
        if lifetime.destroyed:
            return
        lib.check(destroy(handle))


class DeviceContext(Resource):
    """An OptiX device context (OptixDeviceContext) on a device's primary context.

    Made by `create_context`. Factories: `compile_module`, `builtin_intersection_module`,
    `create_program_groups` (and `raygen_group`, `miss_group`, `hit_group`,
    `exception_group`, `callables_group`), `create_pipeline`, `build_accel`,
    `create_denoiser`.

    Attributes
    ----------
    device : cupric.runtime.Device
    options : ContextOptions
    log : list of (level, tag, message)
        The last messages OptiX logged (at most 256).

    Thread safety
    -------------
    OptiX allows calls on one context from several threads; the log is locked. Closing
    the context while other threads use it, or before the objects made from it, is the
    caller's error (every object keeps its context alive, so only an explicit `close()`
    can do that).
    """

    __slots__ = ("device", "options", "_log", "_cu_context", "_callback", "_lifetime",
                 "_children", "_children_lock")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("make an OptiX device context with "
                        "cupric.optix.create_context(device, options)")

    @classmethod
    def _create(cls, device, options: ContextOptions) -> "DeviceContext":
        from . import lib
        ffi = lib.ffi
        cu_context = device.primary_context()
        cu_context.make_current()
        log = _Log(options.log_callback)
        callback = ffi.callback("OptixLogCallback", log)
        c_options = ffi.new("OptixDeviceContextOptions *")
        c_options.logCallbackFunction = callback
        c_options.logCallbackData = ffi.NULL
        c_options.logCallbackLevel = options.log_level_value
        c_options.validationMode = options.validation_mode
        out = ffi.new("OptixDeviceContext *")
        lib.check(lib.optixDeviceContextCreate(ffi.cast("CUcontext", cu_context.ptr),
                                               c_options, out))
        self = cls.__new__(cls)
        self.device = device
        self.options = options
        self._log = log
        self._cu_context = cu_context
        self._callback = callback
        self._lifetime = _Lifetime()
        self._children: list = []
        self._children_lock = threading.Lock()
        self._init_resource(out[0], _destroy_context, self._lifetime, callback, cu_context)
        try:
            self._log.raise_pending()
            self._configure_cache(options)
        except BaseException:
            self.close()
            raise
        return self

    def _adopt(self, child) -> None:
        """Record `child` (a Module, ProgramGroup, Pipeline or Denoiser that now owns its
        handle) so that `close` can close it first; then raise an error of the log
        callback from its creation, closing the child (its handle is valid and owned, so
        nothing leaks)."""
        ref = weakref.ref(child)
        with self._children_lock:
            # Dead entries are dropped as the list grows, not by weakref callbacks: a
            # callback would run inside garbage collection, possibly while this very
            # lock is held by the same thread.
            if len(self._children) >= 64 and len(self._children) % 64 == 0:
                self._children = [r for r in self._children if r() is not None]
            self._children.append(ref)
        try:
            self._log.raise_pending()
        except BaseException:
            child.close()
            raise

    def _create_call(self, function, *args) -> None:
        """Call an OptiX function that makes an object; raise on failure. On success a
        log-callback error stays pending for `_adopt`, once the new handle is owned."""
        from . import lib
        result = function(*args)
        if result != 0:
            self._log.raise_pending()
            lib.check(result)

    def close(self) -> None:
        """Destroy the context, after closing every object made from it that is still
        open (newest first: pipelines before their program groups before their modules).
        A second call does nothing.

        Objects made from it stay usable as Python objects but are closed: using them
        raises `ClosedError`. Releases that garbage collection queued for its objects run
        first; one that runs later finds the context destroyed and does nothing
        (optixDeviceContextDestroy freed them).

        Raises
        ------
        OptixError
            OptiX failed to destroy an object or the context; every object and the
            context are closed anyway, and the first failure is raised.
        """
        from cupric.runtime.resource import drain, pending_count
        if self.closed:
            return
        # Run queued releases first. A release drops the last reference to what its
        # object kept alive (a pipeline's groups, a group's modules), whose own release is
        # queued only once that drain returns: one pass per level of that chain (three
        # deep for OptiX objects). A pass does nothing while another thread drains; what
        # that thread releases later finds the context destroyed (see destroy_child).
        for _level in range(4):
            if not pending_count():
                break
            drain()
        with self._children_lock:
            children = [r() for r in reversed(self._children)]
            self._children = []
        first: BaseException | None = None
        for child in children:
            if child is None or child.closed:
                continue
            try:
                child.close()
            except Exception as exc:  # raised below, after the context is destroyed
                if first is None:
                    first = exc
        try:
            super().close()
        except Exception as exc:
            if first is None:
                raise
            raise exc from first
        if first is not None:
            raise first

    def _configure_cache(self, options: ContextOptions) -> None:
        from . import lib
        if options.cache_location is not None:
            self._call(lib.optixDeviceContextSetCacheLocation, self.handle,
                       options.cache_location.encode())
        if options.cache_sizes is not None:
            self._call(lib.optixDeviceContextSetCacheDatabaseSizes, self.handle,
                       *options.cache_sizes)
        if options.cache_enabled is not None:
            self._call(lib.optixDeviceContextSetCacheEnabled, self.handle,
                       int(options.cache_enabled))

    def _label(self) -> str:
        return "OptiX DeviceContext"

    def _call(self, function, *args) -> None:
        """Call an OptiX function and check its result, then surface a callback error."""
        from . import lib
        result = function(*args)
        self._log.raise_pending()
        lib.check(result)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"device {self.device.ordinal}"
        return f"<cupric.optix.DeviceContext {state}>"

    # -- information ---------------------------------------------------------------------

    @property
    def log(self) -> list:
        with self._log.lock:
            return list(self._log.messages)

    def get_property(self, name: str) -> int:
        """A device limit (`DEVICE_PROPERTIES` names, e.g. "max_trace_depth")."""
        from . import lib
        if name not in DEVICE_PROPERTIES:
            raise ValueError(f"unknown OptiX device property {name!r}; known: "
                             f"{', '.join(DEVICE_PROPERTIES)}")
        value = lib.ffi.new("unsigned int *")
        self._call(lib.optixDeviceContextGetProperty, self.handle, DEVICE_PROPERTIES[name],
                   value, lib.ffi.sizeof("unsigned int"))
        return int(value[0])

    @property
    def rtcore_version(self) -> int:
        """The RT core version OptiX uses on this device
        (OPTIX_DEVICE_PROPERTY_RTCORE_VERSION: 10 for version 1.0, ...), 0 where the GPU
        has no RT cores (compute GPUs such as the H100 and H200): OptiX then traverses
        acceleration structures and intersects built-in primitives in software, on the
        SMs, like any CUDA kernel."""
        return self.get_property("rtcore_version")

    @property
    def cache_enabled(self) -> bool:
        from . import lib
        value = lib.ffi.new("int *")
        self._call(lib.optixDeviceContextGetCacheEnabled, self.handle, value)
        return bool(value[0])

    @property
    def cache_location(self) -> str:
        from . import lib
        buffer = lib.ffi.new("char[]", 4096)
        self._call(lib.optixDeviceContextGetCacheLocation, self.handle, buffer, 4096)
        return lib.ffi.string(buffer).decode()

    def set_log_level(self, level: str) -> None:
        """Change the most verbose log level delivered (see `ContextOptions`)."""
        from . import lib
        replaced = ContextOptions(log_level=level)
        # The callback installed at creation stays; only its level changes.
        self._call(lib.optixDeviceContextSetLogCallback, self.handle, self._callback,
                   lib.ffi.NULL, replaced.log_level_value)

    # -- factories (implemented in the modules of each object kind) ----------------------

    def compile_module(self, programs, module_options=None, pipeline_options=None, *,
                       params=None, arch=None, lineinfo: bool = False):
        """Compile cupric OptiX programs (or PTX text) into an OptiX module.

        See `cupric.optix.module.Module` for the parameters.
        """
        from .module import Module
        return Module._compile(self, programs, module_options, pipeline_options,
                               params=params, arch=arch, lineinfo=lineinfo)

    def builtin_intersection_module(self, primitive: str, module_options=None,
                                    pipeline_options=None, *, build_options=None):
        """OptiX's built-in intersection module for spheres or curves."""
        from .module import Module
        return Module._builtin(self, primitive, module_options, pipeline_options,
                               build_options)

    def raygen_group(self, module, program):
        from .pipeline import ProgramGroup
        return ProgramGroup._create(self, "raygen", raygen=(module, program))

    def miss_group(self, module=None, program=None):
        """A miss group; without a module, rays that miss do nothing."""
        from .pipeline import ProgramGroup
        return ProgramGroup._create(self, "miss", miss=(module, program))

    def exception_group(self, module, program):
        from .pipeline import ProgramGroup
        return ProgramGroup._create(self, "exception", exception=(module, program))

    def hit_group(self, module=None, *, closest_hit=None, any_hit=None, intersection=None,
                  intersection_module=None):
        """A hit group of up to three programs; `intersection_module` defaults to
        `module` (pass a built-in module for spheres and curves)."""
        from .pipeline import ProgramGroup
        return ProgramGroup._create(
            self, "hitgroup", closest_hit=(module, closest_hit), any_hit=(module, any_hit),
            intersection=(intersection_module or module, intersection))

    def callables_group(self, module, *, direct=None, continuation=None):
        from .pipeline import ProgramGroup
        return ProgramGroup._create(self, "callables", direct=(module, direct),
                                    continuation=(module, continuation))

    def create_pipeline(self, groups, pipeline_options=None, link_options=None):
        """Link program groups into a pipeline and set its stack sizes."""
        from .pipeline import Pipeline
        return Pipeline._create(self, groups, pipeline_options, link_options)

    def build_accel(self, inputs, options=None, *, stream=None):
        """Build an acceleration structure (`cupric.optix.accel.AccelStructure`)."""
        from .accel import AccelStructure
        return AccelStructure._build(self, inputs, options, stream)

    def create_denoiser(self, options=None):
        """Create the AI denoiser (`cupric.optix.denoiser.Denoiser`)."""
        from .denoiser import Denoiser
        return Denoiser._create(self, options)


def create_context(device=None, options: ContextOptions | None = None) -> DeviceContext:
    """Create an OptiX device context on `device`'s primary context.

    Parameters
    ----------
    device : cupric.runtime.Device or int, optional
        Default: the current device.
    options : ContextOptions, optional

    Returns
    -------
    DeviceContext

    Raises
    ------
    LibraryNotFoundError
        The driver has no OptiX runtime for cupric's ABI (an ImportError).
    OptixError
        OptiX refused to create the context.

    Examples
    --------
    >>> ctx = cupric.optix.create_context(options=ContextOptions(validation=True))  # doctest: +SKIP
    """
    if options is None:
        options = ContextOptions()
    elif not isinstance(options, ContextOptions):
        raise TypeError(f"options must be a ContextOptions, got {type(options).__name__}")
    from cupric.runtime.device import Device
    if device is None:
        from cupric.runtime.context import current_device
        device = current_device()
    elif isinstance(device, int) and not isinstance(device, bool):
        device = Device(device)
    elif not isinstance(device, Device):
        raise TypeError(f"device must be a cupric.runtime.Device or an ordinal, got "
                        f"{device!r}")
    return DeviceContext._create(device, options)
