"""Modules: device code (PTX, cubin, fatbin) loaded into a context, and its kernels.

Loading PTX runs the driver's JIT compiler (options and logs: `JitOptions`); cubin and
fatbin load directly. A loaded `CUmodule` yields `CUfunction`s (kernels), which carry
attributes (registers, shared memory) and occupancy queries, and module-scope
`__device__`/`__constant__` globals addressed by name.
"""

from __future__ import annotations

import dataclasses
import os
import threading

import numpy as np

from ._driver import bindings, check, driver
from ._lifetime import Resource
from .errors import CudaError, ModuleLoadError, NotFoundError, error_from_code
from .launch import (_TYPE_BY_CLASS, LaunchConfig, dim3, infer_param, make_prepared,
                     validate_launch)

__all__ = ["Module", "Function", "JitOptions", "JIT_OPTIONS", "detect_image_kind"]

# JitOptions field -> CUjit_option member name. Booleans and ints pass as they are; the
# fields with their own conversion are handled in `JitOptions.to_driver`.
JIT_OPTIONS = {
    "max_registers": "CU_JIT_MAX_REGISTERS",
    "threads_per_block": "CU_JIT_THREADS_PER_BLOCK",
    "optimization_level": "CU_JIT_OPTIMIZATION_LEVEL",
    "target": "CU_JIT_TARGET",
    "fallback": "CU_JIT_FALLBACK_STRATEGY",
    "debug_info": "CU_JIT_GENERATE_DEBUG_INFO",
    "line_info": "CU_JIT_GENERATE_LINE_INFO",
    "verbose_log": "CU_JIT_LOG_VERBOSE",
    "cache_mode": "CU_JIT_CACHE_MODE",
}

_FALLBACKS = {"prefer_ptx": "CU_PREFER_PTX", "prefer_binary": "CU_PREFER_BINARY"}
_CACHE_MODES = {"none": "CU_JIT_CACHE_OPTION_NONE", "cg": "CU_JIT_CACHE_OPTION_CG",
                "ca": "CU_JIT_CACHE_OPTION_CA"}


@dataclasses.dataclass(frozen=True)
class JitOptions:
    """Options of the driver's PTX JIT compiler (`cuModuleLoadDataEx`).

    Parameters
    ----------
    max_registers : int, optional
        Cap on registers per thread.
    threads_per_block : int, optional
        Compile for at least this many threads per block (limits registers accordingly).
    optimization_level : int, optional
        0 to 4 (the driver's default is 4).
    target : str, optional
        Compile for this architecture (``"sm_90"``) instead of the context's.
    fallback : {"prefer_ptx", "prefer_binary"}, optional
        Which image of a fatbin to prefer when both fit.
    debug_info, line_info, verbose_log : bool
        Generate debug info (-G), line info (-lineinfo), a verbose info log.
    cache_mode : {"none", "cg", "ca"}, optional
        Default global load caching.
    log_size : int
        Bytes reserved for each of the info and error logs.
    """

    max_registers: int | None = None
    threads_per_block: int | None = None
    optimization_level: int | None = None
    target: str | None = None
    fallback: str | None = None
    debug_info: bool = False
    line_info: bool = False
    verbose_log: bool = False
    cache_mode: str | None = None
    log_size: int = 16384

    def __post_init__(self) -> None:
        for name in ("max_registers", "threads_per_block"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ValueError(f"JitOptions.{name} must be a positive int, got {v!r}")
        level = self.optimization_level
        if level is not None and (not isinstance(level, int) or not 0 <= level <= 4):
            raise ValueError(f"JitOptions.optimization_level must be 0..4, got {level!r}")
        if self.target is not None:
            t = self.target
            if not (isinstance(t, str) and t.startswith(("sm_", "compute_"))
                    and t.split("_", 1)[1].rstrip("af").isdigit()):
                raise ValueError(f"JitOptions.target must look like 'sm_90', got {t!r}")
        if self.fallback is not None and self.fallback not in _FALLBACKS:
            raise ValueError(f"JitOptions.fallback must be one of {', '.join(_FALLBACKS)}")
        if self.cache_mode is not None and self.cache_mode not in _CACHE_MODES:
            raise ValueError(f"JitOptions.cache_mode must be one of {', '.join(_CACHE_MODES)}")
        for name in ("debug_info", "line_info", "verbose_log"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"JitOptions.{name} must be a bool")
        if not isinstance(self.log_size, int) or self.log_size < 256:
            raise ValueError("JitOptions.log_size must be an int >= 256")

    def to_driver(self):
        """(options, values, info_log, error_log) for `cuModuleLoadDataEx`.

        The two log buffers are bytearrays the driver writes into; keep them until the
        call returns.
        """
        d = bindings()
        opt = d.CUjit_option
        options, values = [], []
        for field, member in JIT_OPTIONS.items():
            value = getattr(self, field)
            if value is None or value is False:
                continue
            if field == "target":
                arch = value.split("_", 1)[1].rstrip("af")
                value = getattr(d.CUjit_target, f"CU_TARGET_COMPUTE_{arch}")
            elif field == "fallback":
                value = getattr(d.CUjit_fallback, _FALLBACKS[value])
            elif field == "cache_mode":
                value = getattr(d.CUjit_cacheMode, _CACHE_MODES[value])
            elif value is True:
                value = 1
            options.append(getattr(opt, member))
            values.append(value)
        info_log = bytearray(self.log_size)
        error_log = bytearray(self.log_size)
        options += [opt.CU_JIT_INFO_LOG_BUFFER, opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                    opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        values += [info_log, self.log_size, error_log, self.log_size]
        return options, values, info_log, error_log


def detect_image_kind(image) -> str:
    """``"ptx"``, ``"cubin"`` or ``"fatbin"``, from the first bytes of an image."""
    if isinstance(image, str):
        return "ptx"
    head = bytes(image[:4])
    if head == b"\x7fELF":
        return "cubin"
    if head == b"\x50\xed\x55\xba":  # fatbin magic 0xBA55ED50, little-endian
        return "fatbin"
    return "ptx"


def _log_text(buf: bytearray) -> str:
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def _unload_module(handle, context_handle) -> None:
    # cuModuleUnload acts on the current context; a deferred unload may run in a thread
    # where another context (or none) is current, so push the module's own.
    d = driver()
    check(d.cuCtxPushCurrent(context_handle))
    try:
        check(d.cuModuleUnload(handle))
    finally:
        check(d.cuCtxPopCurrent())


class Module(Resource):
    """Device code loaded into a device's primary context.

    Made by `Module.from_data(image)` (PTX text, cubin or fatbin bytes) or
    `Module.from_file(path)`. The info log of the JIT is `info_log`; a refused image
    raises `ModuleLoadError` carrying the error log.

    Thread safety
    -------------
    Safe: functions are looked up once under a lock; globals are read and written with
    synchronous copies.
    """

    __slots__ = ("_device", "_functions", "_lock", "info_log", "kind")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Module has no public constructor; use Module.from_data(image) or "
                        "Module.from_file(path)")

    @classmethod
    def from_data(cls, image, options: JitOptions | None = None, *, device=None) -> Module:
        """Load PTX (str or bytes), cubin or fatbin (bytes).

        Parameters
        ----------
        image : str, bytes, bytearray or memoryview
        options : JitOptions, optional
            For PTX; ignored by the driver for cubin.
        device : Device or int, optional
            Defaults to the current device.

        Raises
        ------
        ModuleLoadError
            The driver refused the image; `.log` holds the JIT error log, which the message
            includes.
        """
        from .device import Device
        if options is None:
            options = JitOptions()
        elif not isinstance(options, JitOptions):
            raise TypeError(f"options must be a JitOptions, got {type(options).__name__}")
        kind = detect_image_kind(image)
        if isinstance(image, str):
            data = image.encode()
        elif isinstance(image, (bytes, bytearray, memoryview)):
            data = bytes(image)
        else:
            raise TypeError(f"a module image is str or bytes, got {type(image).__name__}")
        if kind == "ptx" and not data.endswith(b"\0"):
            data += b"\0"  # the driver reads PTX as a NUL-terminated string
        dev = Device(device) if device is not None else Device.current()
        ctx = dev.primary_context()
        ctx.make_current()
        d = driver()
        opts, values, info_log, error_log = options.to_driver()
        result = d.cuModuleLoadDataEx(data, len(opts), opts, values)
        err = result[0]
        if err != 0:
            log = _log_text(error_log)
            code = int(err)
            if code in (200, 209, 218, 221, 222, 223, 300, 301):
                raise ModuleLoadError(code, f"cannot load the {kind} image", log=log)
            raise error_from_code(code, f"cannot load the {kind} image"
                                  + (f"\n{log}" if log else ""))
        handle = result[1]
        self = cls.__new__(cls)
        self._device = dev
        self._functions = {}
        self._lock = threading.Lock()
        self.info_log = _log_text(info_log)
        self.kind = kind
        self._init_resource(handle, _unload_module, ctx.handle)
        return self

    @classmethod
    def from_file(cls, path, options: JitOptions | None = None, *, device=None) -> Module:
        """Load a .ptx, .cubin or .fatbin file (the kind is read from its contents)."""
        with open(os.fspath(path), "rb") as f:
            data = f.read()
        return cls.from_data(data, options, device=device)

    def _label(self) -> str:
        return f"module ({self.kind})"

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return f"<cupric.runtime.Module {self.kind}, device {self._device.ordinal}{state}>"

    @property
    def device(self):
        return self._device

    def get_function(self, name: str) -> Function:
        """The kernel named `name` (its mangled name for C++ kernels).

        Raises
        ------
        NotFoundError
            If the module has no such kernel; the message lists the kernels it has.
        """
        fn = self._functions.get(name)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._functions.get(name)
            if fn is None:
                result = driver().cuModuleGetFunction(self.handle, name.encode())
                if result[0] == 500:  # CUDA_ERROR_NOT_FOUND
                    known = self.function_names()
                    listing = f"; it has: {', '.join(known)}" if known else ""
                    raise NotFoundError(500, f"no kernel named {name!r} in this module{listing}")
                fn = Function._wrap(self, name, check(result))
                self._functions[name] = fn
        return fn

    def __getitem__(self, name: str) -> Function:
        return self.get_function(name)

    def function_names(self) -> list[str]:
        """Names of the kernels in the module (empty where the driver cannot list them)."""
        d = driver()
        if not hasattr(d, "cuModuleEnumerateFunctions"):
            return []
        try:
            count = check(d.cuModuleGetFunctionCount(self.handle))
            funcs = check(d.cuModuleEnumerateFunctions(count, self.handle))
            names = []
            for f in funcs:
                raw = check(d.cuFuncGetName(f))
                names.append(raw.decode() if isinstance(raw, bytes) else str(raw))
            return names
        except CudaError:
            return []  # listing is a courtesy inside an error message; the error stands

    # -- module globals -----------------------------------------------------------------

    def get_global(self, name: str) -> tuple[int, int]:
        """(device address, size in bytes) of a `__device__` or `__constant__` variable.

        Raises
        ------
        NotFoundError
            If the module has no such global.
        """
        result = driver().cuModuleGetGlobal(self.handle, name.encode())
        if result[0] == 500:
            raise NotFoundError(500, f"no global named {name!r} in this module")
        ptr, size = check(result)
        return int(ptr), int(size)

    def read_global(self, name: str, dtype=np.uint8) -> np.ndarray:
        """Copy a global to the host as a 1-D array of `dtype` (synchronous).

        Raises
        ------
        ValueError
            If the global's size is not a multiple of the dtype's item size.
        """
        dtype = np.dtype(dtype)
        ptr, size = self.get_global(name)
        if size % dtype.itemsize:
            raise ValueError(f"global {name!r} is {size} bytes, not a multiple of {dtype} "
                             f"({dtype.itemsize} bytes)")
        out = np.empty(size // dtype.itemsize, dtype=dtype)
        self._device.make_current()
        check(driver().cuMemcpyDtoH(out, ptr, size))
        return out

    def write_global(self, name: str, value, dtype=None) -> None:
        """Copy `value` (scalar or array-like) into a global (synchronous).

        Raises
        ------
        ValueError
            If `value` is larger than the global.
        """
        array = np.ascontiguousarray(value, dtype=dtype)
        ptr, size = self.get_global(name)
        if array.nbytes > size:
            raise ValueError(f"global {name!r} is {size} bytes; the value is {array.nbytes}")
        self._device.make_current()
        check(driver().cuMemcpyHtoD(ptr, array, array.nbytes))


# Function attribute property -> CUfunction_attribute member name.
_FUNC_ATTRIBUTES = {
    "max_threads_per_block": "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
    "shared_size_bytes": "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
    "const_size_bytes": "CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES",
    "local_size_bytes": "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
    "num_regs": "CU_FUNC_ATTRIBUTE_NUM_REGS",
    "ptx_version": "CU_FUNC_ATTRIBUTE_PTX_VERSION",
    "binary_version": "CU_FUNC_ATTRIBUTE_BINARY_VERSION",
    "max_dynamic_shared_size_bytes": "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
    "preferred_shared_memory_carveout": "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT",
    "non_portable_cluster_size_allowed": "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED",
}
_SETTABLE = frozenset({"max_dynamic_shared_size_bytes", "preferred_shared_memory_carveout",
                       "non_portable_cluster_size_allowed"})


# Classes whose instances carry their device address as an int `ptr` attribute
# (DeviceBuffer and the like), learned by Function.launch to skip the general inference.
_PTR_CLASSES: set[type] = set()


class _FuncAttribute:
    __slots__ = ("name", "doc")

    def __init__(self, name: str) -> None:
        self.name = name
        self.doc = f"`{_FUNC_ATTRIBUTES[name]}` of this kernel (int)."

    def __get__(self, fn, owner=None):
        if fn is None:
            return self
        return fn.attribute(self.name)

    def __set__(self, fn, value) -> None:
        if self.name not in _SETTABLE:
            raise AttributeError(f"{self.name} is read-only")
        fn.set_attribute(self.name, value)


class Function:
    """A kernel of a loaded `Module` (get one with `module.get_function(name)`).

    Keeps its module alive. Attributes (`num_regs`, `max_threads_per_block`,
    `shared_size_bytes`, `max_dynamic_shared_size_bytes`, ...) are read once and cached;
    setting a settable one updates the cache.

    Thread safety
    -------------
    Safe. `launch` and `prepare` may be used from any thread.
    """

    __slots__ = ("_module", "_name", "_handle", "_ptr", "_attrs", "_prepared", "_limits",
                 "__weakref__")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Function has no public constructor; use module.get_function(name)")

    @classmethod
    def _wrap(cls, module: Module, name: str, handle) -> Function:
        self = cls.__new__(cls)
        self._module = module
        self._name = name
        self._handle = handle
        self._ptr = int(handle)
        self._attrs = {}
        self._prepared = {}
        self._limits = None
        return self

    def __repr__(self) -> str:
        return f"<cupric.runtime.Function {self._name!r}>"

    @property
    def name(self) -> str:
        return self._name

    @property
    def module(self) -> Module:
        return self._module

    @property
    def device(self):
        return self._module._device

    @property
    def handle(self):
        """The raw `CUfunction` (raises `ClosedError` once the module is closed)."""
        self._module.handle  # noqa: B018 - raises if the module was unloaded
        return self._handle

    @property
    def ptr(self) -> int:
        """The `CUfunction` as an int."""
        return self._ptr

    # -- attributes ---------------------------------------------------------------------

    def attribute(self, name: str) -> int:
        """A `CUfunction_attribute` by property name (see `_FUNC_ATTRIBUTES`)."""
        value = self._attrs.get(name)
        if value is None:
            try:
                member = _FUNC_ATTRIBUTES[name]
            except KeyError:
                raise ValueError(f"unknown function attribute {name!r}; one of "
                                 f"{', '.join(_FUNC_ATTRIBUTES)}") from None
            d = driver()
            value = check(d.cuFuncGetAttribute(getattr(d.CUfunction_attribute, member), self.handle))
            self._attrs[name] = value
        return value

    def set_attribute(self, name: str, value: int) -> None:
        """Set a settable attribute (`max_dynamic_shared_size_bytes`,
        `preferred_shared_memory_carveout`, `non_portable_cluster_size_allowed`)."""
        if name not in _SETTABLE:
            raise ValueError(f"function attribute {name!r} cannot be set; settable: "
                             f"{', '.join(sorted(_SETTABLE))}")
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} takes a non-negative int, got {value!r}")
        d = driver()
        check(d.cuFuncSetAttribute(self.handle, getattr(d.CUfunction_attribute, _FUNC_ATTRIBUTES[name]),
                                   int(value)))
        self._attrs.pop(name, None)
        self._limits = None

    def set_cache_config(self, name: str) -> None:
        """Preferred L1/shared split for this kernel: "none", "shared", "l1", "equal"."""
        from .context import cache_config_enum
        check(driver().cuFuncSetCacheConfig(self.handle, cache_config_enum(name)))

    # -- occupancy ----------------------------------------------------------------------

    def max_active_blocks_per_sm(self, block_size: int, dynamic_shared_bytes: int = 0) -> int:
        """How many blocks of `block_size` threads fit on one multiprocessor at once."""
        self.device.make_current()
        return check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(
            self.handle, int(block_size), int(dynamic_shared_bytes)))

    def suggested_launch_config(self, dynamic_shared_bytes: int = 0,
                                block_size_limit: int = 0) -> tuple[int, int]:
        """(min grid size, block size) that maximize occupancy
        (`cuOccupancyMaxPotentialBlockSize`, with a fixed dynamic shared memory size).

        Returns
        -------
        (grid, block) : (int, int)
            `grid` is the smallest grid that fills the device at full occupancy.
        """
        self.device.make_current()
        grid, block = check(driver().cuOccupancyMaxPotentialBlockSize(
            self.handle, None, int(dynamic_shared_bytes), int(block_size_limit)))
        return int(grid), int(block)

    # -- launching ----------------------------------------------------------------------

    def prepare(self, param_types, *, cooperative: bool = False, backend: str | None = None):
        """A `PreparedLaunch` for this kernel with the given flattened parameter types.

        Parameters
        ----------
        param_types : sequence
            ``"i8" "i16" "i32" "i64" "u8" ... "f16" "f32" "f64" "bool" "ptr"``, or
            ``("bytes", size, align)`` for a struct passed by value.
        cooperative : bool
            Launch with `cuLaunchCooperativeKernel` (grid-wide sync).
        backend : {"c", "bindings", "cffi"}, optional
            How to call cuLaunchKernel; the default is the fastest available (see
            `cupric.runtime.launch.launch_backends`).

        Returns
        -------
        PreparedLaunch
        """
        return make_prepared(self, param_types, cooperative=cooperative, backend=backend)

    def launch(self, grid, block=None, *args, stream=None, shared_bytes: int = 0,
               cooperative: bool = False, cluster=None) -> None:
        """Launch the kernel, inferring parameter types from the arguments.

        Parameters
        ----------
        grid, block : int or tuple of 1-3 ints
            Or a `LaunchConfig` as `grid` (then `block` is the first kernel argument).
        *args
            NumPy scalars (their dtype is the parameter type), Python int/float (i64/f64),
            device arrays (anything with `__cuda_array_interface__`, `__dlpack__` or an int
            ``ptr`` attribute; passed as a pointer), NumPy structured scalars (by value).
        stream : Stream or stream-like, optional
            The legacy default stream if None.
        shared_bytes : int
            Dynamic shared memory.
        cooperative : bool
            Cooperative launch (grid-wide synchronization allowed).
        cluster : int or tuple, optional
            Thread-block cluster shape (sm_90+), through `cuLaunchKernelEx`.

        Raises
        ------
        KernelArgumentError
            A host NumPy array or an unsupported value, naming its position.
        LaunchError
            The configuration exceeds a limit of the kernel or the device (checked before
            launching).

        Cost
        ----
        More than `PreparedLaunch.launch` by the type inference (BENCHMARKS.md has the
        figures); use `prepare()` in hot loops.
        """
        if grid.__class__ is LaunchConfig:
            config = grid
            args = ((block,) if block is not None else ()) + args
            grid, block = config.grid, config.block
            shared_bytes = config.shared_bytes
            stream = config.stream if stream is None else stream
            cooperative = cooperative or config.cooperative
            cluster = cluster if cluster is not None else config.cluster
        elif block is None:
            raise TypeError("launch() needs grid and block")
        values = list(args)
        types = []
        type_of = _TYPE_BY_CLASS.get
        for i, a in enumerate(args):
            cls = a.__class__
            t = type_of(cls)
            if t is None:
                ptr = a.ptr if cls in _PTR_CLASSES else None
                if ptr.__class__ is int:  # a buffer class seen before
                    t = "ptr"
                    values[i] = ptr
                else:  # arrays, buffers, structs: see infer_param
                    t, values[i] = infer_param(a, i)
                    if t == "ptr" and getattr(a, "ptr", None).__class__ is int:
                        _PTR_CLASSES.add(cls)
            types.append(t)
        if not self._within_limits(grid, block, shared_bytes):
            validate_launch(self, grid, block, shared_bytes)  # raises, saying which limit
        key = (tuple(types), cooperative)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self.prepare(types, cooperative=cooperative)
            self._prepared[key] = prepared
        if cluster is not None:
            prepared.launch_ex(grid, block, stream, shared_bytes, *values, cluster=cluster,
                               cooperative=cooperative)
        else:
            prepared.launch(grid, block, stream, shared_bytes, *values)

    __call__ = launch

    def _within_limits(self, grid, block, shared_bytes) -> bool:
        """A quick test of the launch shape against cached limits (details on failure
        come from `validate_launch`)."""
        limits = self._limits
        if limits is None:
            dev = self.device
            limits = (self.max_threads_per_block, dev.max_block_dims, dev.max_grid_dims,
                      self.max_dynamic_shared_size_bytes)
            self._limits = limits
        max_threads, (mbx, mby, mbz), (mgx, mgy, mgz), max_shared = limits
        if grid.__class__ is int:
            gx, gy, gz = grid, 1, 1
        else:
            gx, gy, gz = dim3(grid, "grid")
        if block.__class__ is int:
            bx, by, bz = block, 1, 1
        else:
            bx, by, bz = dim3(block, "block")
        if gx < 1 or bx < 1:
            return False
        return (bx * by * bz <= max_threads and bx <= mbx and by <= mby and bz <= mbz
                and gx <= mgx and gy <= mgy and gz <= mgz
                and shared_bytes.__class__ is int and 0 <= shared_bytes <= max_shared)


for _name in _FUNC_ATTRIBUTES:
    setattr(Function, _name, _FuncAttribute(_name))
del _name
