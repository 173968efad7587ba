"""Kernel launches: packing arguments and calling `cuLaunchKernel` with the least host time.

`cuLaunchKernel` takes a grid and block shape, dynamic shared memory, a stream, and an
array of pointers (`void**`), one per kernel parameter, to the parameter values. A
`PreparedLaunch` fixes the parameter layout once per signature; each launch only writes
the values and calls the driver, so the host cost stays close to the driver's own.

How the driver is called: by default through a small CPython extension (`_fastlaunch`)
that packs and launches in one C call, compiled once into the user's cache; where no
compiler is available, through cuda.bindings' `cuLaunchKernel` with the values packed by
one `struct.pack_into` into a buffer made once. The parameter layout and packing live in
`cupric.runtime.packing`, configurations and their limits in
`cupric.runtime.launch_config`; other ways of reaching the driver, kept for comparison,
are in benchmarks/launch_overhead.py.
"""

from __future__ import annotations

import struct
import threading
import weakref

import numpy as np

from cupric import _config
from ._driver import driver
from .errors import ClosedError, LaunchError, error_from_code
from .launch_config import (SM90_LIMITS, _UNCHECKED, DeviceLimits, LaunchConfig,  # noqa: F401
                            LaunchConfigError, check_config, dim3, validate_launch)
from .packing import (_DTYPE_TO_TYPE, _TYPE_BY_CLASS, PARAM_TYPES,  # noqa: F401
                      KernelArgumentError, _describe_bad_value, _device_pointer,
                      infer_param, param_layout)
from .stream import Stream as _Stream
from .stream import as_stream_handle

__all__ = ["PreparedLaunch", "LaunchConfig", "KernelArgumentError", "PARAM_TYPES",
           "param_layout", "infer_param", "validate_launch", "dim3", "make_prepared",
           "LaunchConfigError", "DeviceLimits", "SM90_LIMITS", "check_config",
           "build_launcher", "launch_backends"]


# -- the native call ----------------------------------------------------------------------

_CDEF = """
int cuLaunchKernel(uintptr_t f, unsigned int gridDimX, unsigned int gridDimY,
                   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                   unsigned int blockDimZ, unsigned int sharedMemBytes, uintptr_t hStream,
                   void **kernelParams, void **extra);
int cuLaunchCooperativeKernel(uintptr_t f, unsigned int gridDimX, unsigned int gridDimY,
                   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                   unsigned int blockDimZ, unsigned int sharedMemBytes, uintptr_t hStream,
                   void **kernelParams);
typedef struct {
    int result;
    void *errorNode;
    void *errorFromNode;
} cupric_CUgraphExecUpdateResultInfo;
int cuGraphExecUpdate_v2(uintptr_t hGraphExec, uintptr_t hGraph,
                         cupric_CUgraphExecUpdateResultInfo *resultInfo);
"""
# Handles (CUfunction, CUstream) are declared as uintptr_t so that Python ints pass
# without a cdata conversion; on every 64-bit ABI CUDA supports, a pointer and a 64-bit
# integer travel in the same register.

_native = None
_native_lock = threading.Lock()


class _Native:
    __slots__ = ("ffi", "lib", "launch", "launch_cooperative", "null", "path")


def _libcuda_path() -> str:
    """The libcuda that cuda.bindings loaded: on Linux its soname, which dlopen answers with
    the library already in the process (asked with RTLD_NOLOAD, so nothing new is loaded;
    this spares importing cuda.pathfinder in a fresh process), else pathfinder's path."""
    import os
    if hasattr(os, "RTLD_NOLOAD"):
        import ctypes
        try:
            ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
            return "libcuda.so.1"
        except OSError:  # not loaded under that name: ask pathfinder where it is
            pass
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        loaded = load_nvidia_dynamic_lib("cuda")
        if loaded.abs_path:
            return loaded.abs_path
    except Exception:  # older cuda.pathfinder: the soname finds the library already loaded
        pass
    return "libcuda.so.1"


def native() -> _Native:
    """cffi (ABI mode) bindings of the launch entry points of libcuda, loaded once."""
    global _native
    if _native is not None:
        return _native
    with _native_lock:
        if _native is None:
            driver()  # cuInit first; also raises NoDriverError without a driver
            import cffi
            ffi = cffi.FFI()
            ffi.cdef(_CDEF)
            n = _Native()
            n.path = _libcuda_path()
            n.ffi = ffi
            n.lib = ffi.dlopen(n.path)
            n.launch = n.lib.cuLaunchKernel
            n.launch_cooperative = n.lib.cuLaunchCooperativeKernel
            n.null = ffi.NULL
            _native = n
    return _native


def build_launcher() -> bool:
    """Build the compiled launch extension into the cache now (one-time, about a second).

    Returns
    -------
    bool
        True if it is available afterwards; if not, `launch_backends()` says why.
    """
    from . import _fastlaunch
    return _fastlaunch.load(build=True) is not None


def launch_backends() -> dict:
    """Which ways of calling cuLaunchKernel are available, and the default.

    ``"c"`` (compiled extension packing and launching in one call, fastest; built on
    first use unless ``CUPRIC_BUILD_LAUNCHER=0``), ``"bindings"`` (cuda.bindings, where
    no C compiler is found), ``"cffi"`` (ABI mode: cooperative launches, and the Python
    path behind the compiled one). `CUPRIC_LAUNCH_BACKEND` overrides the default.
    """
    from . import _fastlaunch
    return {"default": _default_backend(),
            "c": _fastlaunch.load(build=False) is not None, "c_error": _fastlaunch.build_error(),
            "bindings": True, "cffi": True}


def _default_backend() -> str:
    chosen = _config.LAUNCH_BACKEND.get()
    if chosen:
        return chosen
    from . import _fastlaunch
    if _fastlaunch.load(build=_config.BUILD_LAUNCHER.get()) is not None:
        return "c"
    return "bindings"


# -- the prepared launch -------------------------------------------------------------------

# What struct.pack_into raises for a value of the wrong type or range (a NumPy array
# raises TypeError from its __index__, a huge int OverflowError on some versions).
_PACK_ERRORS = (struct.error, TypeError, ValueError, OverflowError)

_BACKENDS = ("c", "bindings", "cffi")


def make_prepared(function, param_types, *, cooperative: bool = False,
                  backend: str | None = None) -> PreparedLaunch:
    """The `PreparedLaunch` for a backend (the default one when None)."""
    backend = backend or ("cffi" if cooperative else _default_backend())
    if backend == "bindings":
        return _BindingsPreparedLaunch(function, param_types, cooperative=cooperative,
                                       backend=backend)
    if backend == "c" and not cooperative:
        return _CompiledPreparedLaunch(function, param_types, backend=backend)
    return PreparedLaunch(function, param_types, cooperative=cooperative, backend=backend)


class PreparedLaunch:
    """A kernel with a fixed parameter signature, ready for repeated launches.

    Made by `Function.prepare(param_types)`. The argument buffer and the `void**` array
    are allocated once; `launch` writes the values and calls `cuLaunchKernel`.

    Parameters of `launch`
    ----------------------
    grid, block : int or tuple of 1-3 ints
    stream : Stream, int handle, stream-like, or None (the legacy default stream)
    shared_bytes : int
        Dynamic shared memory in bytes.
    *values
        One per parameter type: ints for integer and ``"ptr"`` types, floats (or ints)
        for float types, `bytes` of the exact size (or a NumPy structured scalar) for
        ``("bytes", size, align)``.

    Raises
    ------
    KernelArgumentError
        Wrong number of values, or a value of the wrong type (naming its position; a host
        NumPy array where a pointer is expected is called out as such).
    LaunchError
        The driver refused the configuration: the message says which limit (block size,
        shared memory, grid) was exceeded, computed after the refusal so that valid
        launches pay nothing for it. Nothing was launched.
    CudaError
        Any other driver error (e.g. `ContextLostError` after an earlier fault).

    Thread safety
    -------------
    Safe: the shared buffer is guarded by a lock; a thread that finds it held packs into
    a buffer of its own instead of waiting.

    Cost
    ----
    With the compiled extension (backend ``"c"``, the default where it builds), a
    fraction of a microsecond above the driver's own cost of `cuLaunchKernel`. On the
    Python backends, one `struct.pack_into` and one native call; Python ints and floats
    pack fastest there, NumPy scalars cost more each.
    """

    __slots__ = ("function", "param_types", "cooperative", "_func", "_format",
                 "_offsets", "_size", "_struct", "_pack", "_buf", "_view", "_argv", "_call",
                 "_null", "_bytes_params", "_lock_acquire", "_lock_release", "_backend",
                 "_ffi", "_stream_handles", "__weakref__")

    #: The backends this class takes (subclasses add others).
    _BACKENDS = _BACKENDS

    def __init__(self, function, param_types, *, cooperative: bool = False,
                 backend: str | None = None) -> None:
        backend = backend or "cffi"
        if backend not in self._BACKENDS:
            raise ValueError(f"launch backend must be one of {', '.join(self._BACKENDS)}, got "
                             f"{backend!r}")
        if cooperative and backend != "cffi":
            raise ValueError("cooperative launches use the cffi backend")
        types, fmt, offsets, size = param_layout(param_types)
        self.function = function  # keeps the function, hence its module, alive
        self.param_types = types
        self.cooperative = bool(cooperative)
        self._format = fmt
        self._offsets = offsets
        self._size = size
        self._struct = struct.Struct(fmt)
        self._bytes_params = tuple(i for i, t in enumerate(types) if isinstance(t, tuple))
        n = native()
        self._ffi = n.ffi
        self._backend = backend
        # The function and stream as the backend's call takes them: ints for the cffi
        # path, the cuda.bindings objects for cuda.bindings (which would otherwise build
        # a CUfunction/CUstream object from the int on every call).
        self._func = function.ptr
        self._stream_handles = False
        self._bind_call(n)
        self._buf, self._view, self._argv = self._new_buffers()
        self._pack = self._struct.pack_into
        lock = threading.Lock()
        self._lock_acquire = lock.acquire
        self._lock_release = lock.release

    #: Whether the call takes the `void**` as an integer address (cuda.bindings) rather
    #: than as cffi data of `native().ffi`.
    _ARGV_BY_ADDRESS = False

    def _bind_call(self, n) -> None:
        """Set `_call` (with cuLaunchKernel's arguments) and `_null` (its `extra`) for this
        backend: here the cffi ABI entry points, cooperative or not."""
        if self.cooperative:
            coop = n.launch_cooperative
            # Same call shape as cuLaunchKernel, so `launch` has a single call site.
            self._call = (lambda f, gx, gy, gz, bx, by, bz, shm, s, argv, _extra:
                          coop(f, gx, gy, gz, bx, by, bz, shm, s, argv))
        else:
            # For "c", this is the Python fallback behind the compiled launch function.
            self._call = n.launch
        self._null = n.null

    def _new_buffers(self):
        ffi = self._ffi
        buf = ffi.new("char[]", self._size)
        argv = ffi.new("void*[]", max(len(self._offsets), 1))
        for i, offset in enumerate(self._offsets):
            argv[i] = buf + offset
        view = ffi.buffer(buf)
        if self._ARGV_BY_ADDRESS:
            # `buf` and the cdata array stay referenced through the returned tuple.
            return (buf, argv), view, int(ffi.cast("uintptr_t", argv))
        return buf, view, argv

    #: See `_CompiledPreparedLaunch.c_layout`; None: launches go through `launch`.
    c_layout = None

    @property
    def backend(self) -> str:
        """How this launch reaches cuLaunchKernel: "c", "bindings" or "cffi"."""
        return self._backend

    def __repr__(self) -> str:
        types = ", ".join(t if isinstance(t, str) else f"bytes[{t[1]}]" for t in self.param_types)
        return f"<PreparedLaunch {self.function.name}({types}) via {self._backend}>"

    def _stream_arg(self, stream):
        """The stream as the backend's call takes it (slow path of `launch`)."""
        if stream.__class__ is _Stream:
            if stream._closed:
                raise ClosedError("cannot launch on a closed stream")
            return stream._handle if self._stream_handles else stream._ptr
        ptr = as_stream_handle(stream)
        return driver().CUstream(ptr) if self._stream_handles else ptr

    def launch(self, grid, block, stream, shared_bytes, *values) -> None:
        """Launch the kernel with `values` (see the class docstring)."""
        if grid.__class__ is int and 0 < grid <= 0xFFFFFFFF:
            gx = grid
            gy = gz = 1
        else:
            gx, gy, gz = dim3(grid, "grid")
        if block.__class__ is int and 0 < block <= 0xFFFFFFFF:
            bx = block
            by = bz = 1
        else:
            bx, by, bz = dim3(block, "block")
        if shared_bytes.__class__ is not int or not 0 <= shared_bytes <= 0xFFFFFFFF:
            shared_bytes = check_config(self.function.name, (gx, gy, gz), (bx, by, bz),
                                        shared_bytes, _UNCHECKED)[2]
        if stream.__class__ is _Stream and not stream._closed:
            s = stream._ptr
        elif stream is None:
            s = 0
        elif stream.__class__ is int:
            s = stream
        else:
            s = self._stream_arg(stream)
        if self._bytes_params:
            values = self._struct_values(values)
        if self._lock_acquire(False):
            try:
                try:
                    self._pack(self._view, 0, *values)
                except _PACK_ERRORS:
                    raise self._argument_error(values) from None
                err = self._call(self._func, gx, gy, gz, bx, by, bz, shared_bytes, s,
                                 self._argv, self._null)
            finally:
                self._lock_release()
        else:
            err = self._launch_private(gx, gy, gz, bx, by, bz, shared_bytes, s, values)
        if err:
            self._failed(err, (gx, gy, gz), (bx, by, bz), shared_bytes, s, values)

    __call__ = launch

    def _launch_private(self, gx, gy, gz, bx, by, bz, shared_bytes, s, values):
        # Another thread holds the shared buffer (its launch released the GIL inside the
        # driver call): pack into buffers of our own rather than wait.
        buf, view, argv = self._new_buffers()
        try:
            self._pack(view, 0, *values)
        except _PACK_ERRORS:
            raise self._argument_error(values) from None
        return self._result(self._call(self._func, gx, gy, gz, bx, by, bz, shared_bytes, s,
                                       argv, self._null))

    @staticmethod
    def _result(r) -> int:
        return r

    def _struct_values(self, values):
        values = list(values)
        if len(values) != len(self.param_types):
            raise self._argument_error(tuple(values))
        for i in self._bytes_params:
            v = values[i]
            size = self.param_types[i][1]
            if isinstance(v, np.generic) or isinstance(v, np.ndarray):
                v = v.tobytes()
            elif isinstance(v, (bytearray, memoryview)):
                v = bytes(v)
            if not isinstance(v, bytes):
                raise KernelArgumentError(
                    f"argument {i} of {self.function.name!r}: a struct passed by value takes "
                    f"bytes or a NumPy structured scalar, got {type(v).__name__}", i)
            if len(v) != size:
                raise KernelArgumentError(
                    f"argument {i} of {self.function.name!r}: the struct is {size} bytes, "
                    f"got {len(v)}", i)
            values[i] = v
        return values

    def _argument_error(self, values) -> KernelArgumentError:
        name = self.function.name
        n = len(self.param_types)
        if len(values) != n:
            return KernelArgumentError(f"kernel {name!r} takes {n} arguments, got "
                                       f"{len(values)}")
        for i, (t, v) in enumerate(zip(self.param_types, values)):
            if isinstance(t, tuple):
                continue
            try:
                struct.pack("<" + PARAM_TYPES[t][0], v)
            except _PACK_ERRORS as exc:
                return KernelArgumentError(_describe_bad_value(name, i, t, v, exc), i)
        return KernelArgumentError(f"kernel {name!r}: cannot pack arguments {values!r}")

    def _failed(self, err, grid, block, shared_bytes, stream, values):
        code = int(err if not isinstance(err, tuple) else err[0])
        if code == 201:  # CUDA_ERROR_INVALID_CONTEXT: no context current in this thread yet
            self.function.device.make_current()
            code = int(self._launch_private(*grid, *block, shared_bytes, stream, values))
            if not code:
                return
        if code in (1, 701, 720, 912):  # a configuration the driver refused
            validate_launch(self.function, grid, block, shared_bytes)
            if code == 720:
                raise error_from_code(code, f"kernel {self.function.name!r}: a cooperative "
                                            f"grid must fit on the device at once; see "
                                            f"function.max_active_blocks_per_sm()")
        raise error_from_code(code, f"launching kernel {self.function.name!r}")

    # -- cluster launches (sm_90+) go through cuLaunchKernelEx ---------------------------

    def launch_ex(self, grid, block, stream, shared_bytes, *values,
                  cluster=None, cooperative: bool = False) -> None:
        """Launch through `cuLaunchKernelEx`, with a cluster shape and/or cooperative.

        Cost
        ----
        Several microseconds more than `launch` (the config struct is built per call).
        """
        d = driver()
        gx, gy, gz = dim3(grid, "grid")
        bx, by, bz = dim3(block, "block")
        if self._bytes_params:
            values = self._struct_values(values)
        buf, view, argv = self._new_buffers()
        try:
            self._pack(view, 0, *values)
        except _PACK_ERRORS:
            raise self._argument_error(values) from None
        argv_address = int(self._ffi.cast("uintptr_t", buf[1] if isinstance(buf, tuple)
                                          else argv))
        config = d.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = gx, gy, gz
        config.blockDimX, config.blockDimY, config.blockDimZ = bx, by, bz
        config.sharedMemBytes = shared_bytes
        config.hStream = d.CUstream(_stream_ptr(stream) if stream is not None else 0)
        attrs = []
        if cluster is not None:
            cx, cy, cz = dim3(cluster, "cluster")
            for axis, g, c in zip("xyz", (gx, gy, gz), (cx, cy, cz)):
                if g % c:
                    raise LaunchError(None, f"grid.{axis} = {g} is not a multiple of "
                                            f"cluster.{axis} = {c}")
            attr = d.CUlaunchAttribute()
            attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cx, cy, cz
            attrs.append(attr)
        if cooperative:
            attr = d.CUlaunchAttribute()
            attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attr.value.cooperative = 1
            attrs.append(attr)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        self.function.device.make_current()
        (err,) = d.cuLaunchKernelEx(config, self.function.handle, argv_address, 0)
        del buf, view, argv  # kept alive until here: the driver copies them during the call
        if err:
            code = int(err)
            if code in (1, 701, 720, 912):
                validate_launch(self.function, (gx, gy, gz), (bx, by, bz), shared_bytes)
            raise error_from_code(code, f"launching kernel {self.function.name!r}")


class _BindingsPreparedLaunch(PreparedLaunch):
    """`PreparedLaunch` through cuda.bindings' cuLaunchKernel, which returns ``(err,)``."""

    __slots__ = ()
    _ARGV_BY_ADDRESS = True

    def _bind_call(self, n) -> None:
        self._call = driver().cuLaunchKernel
        self._func = self.function.handle
        self._stream_handles = True
        self._null = 0

    def launch(self, grid, block, stream, shared_bytes, *values) -> None:
        if grid.__class__ is int and 0 < grid <= 0xFFFFFFFF:
            gx = grid
            gy = gz = 1
        else:
            gx, gy, gz = dim3(grid, "grid")
        if block.__class__ is int and 0 < block <= 0xFFFFFFFF:
            bx = block
            by = bz = 1
        else:
            bx, by, bz = dim3(block, "block")
        if shared_bytes.__class__ is not int or not 0 <= shared_bytes <= 0xFFFFFFFF:
            shared_bytes = check_config(self.function.name, (gx, gy, gz), (bx, by, bz),
                                        shared_bytes, _UNCHECKED)[2]
        if stream.__class__ is _Stream and not stream._closed:
            s = stream._handle
        elif stream is None:
            s = 0
        elif stream.__class__ is int:
            s = stream
        else:
            s = self._stream_arg(stream)
        if self._bytes_params:
            values = self._struct_values(values)
        if self._lock_acquire(False):
            try:
                try:
                    self._pack(self._view, 0, *values)
                except _PACK_ERRORS:
                    raise self._argument_error(values) from None
                (err,) = self._call(self._func, gx, gy, gz, bx, by, bz, shared_bytes, s,
                                    self._argv, 0)
            finally:
                self._lock_release()
        else:
            err = self._launch_private(gx, gy, gz, bx, by, bz, shared_bytes, s, values)
        if err:
            self._failed(err, (gx, gy, gz), (bx, by, bz), shared_bytes, s, values)

    __call__ = launch

    @staticmethod
    def _result(r) -> int:
        return int(r[0])


class _CompiledPreparedLaunch(PreparedLaunch):
    """`PreparedLaunch` whose `launch` is the compiled extension's function.

    The extension packs and launches in one C call; whatever it does not handle itself
    (unusual argument types, any error) it hands to `_slow_launch` / `launch_failed`, the
    Python implementation, which raises the same typed errors as the other backends.
    """

    __slots__ = ("launch", "c_layout")

    def __init__(self, function, param_types, *, backend: str = "c") -> None:
        from . import _fastlaunch
        super().__init__(function, param_types, backend="c")
        module = _fastlaunch.load(build=True)
        if module is None:
            raise RuntimeError(f"the compiled launch extension is not available: "
                               f"{_fastlaunch.build_error()}")
        codes = "".join("s" if isinstance(t, tuple) else PARAM_TYPES[t][0]
                        for t in self.param_types)
        sizes = tuple(t[1] if isinstance(t, tuple) else PARAM_TYPES[t][1]
                      for t in self.param_types)
        address = int(self._ffi.cast("uintptr_t", native().launch))
        # The extension holds a weak reference to self: a strong one would make a cycle
        # through a capsule, which the garbage collector cannot see.
        self.launch = module.make(address, self.function.ptr, codes, tuple(self._offsets),
                                  sizes, _Stream, weakref.ref(self))
        #: What a compiled kernel launcher (`cupric.compiler._fastcall`) needs to pack and
        #: launch by itself: (cuLaunchKernel's address, the CUfunction, the format codes,
        #: offsets and sizes of the parameters); its errors come back to `launch_failed`.
        self.c_layout = (address, self.function.ptr, codes, tuple(self._offsets), sizes)

    def __call__(self, *args) -> None:
        return self.launch(*args)

    def _slow_launch(self, *args) -> None:
        return PreparedLaunch.launch(self, *args)

    def launch_failed(self, err, grid, block, stream, shared_bytes, *values) -> None:
        """Raise the typed error of a launch that cuLaunchKernel answered with `err` (made
        current and tried again where no context was current): the extension's, and that of
        the compiled kernel launchers packing through `c_layout`."""
        gx, gy, gz = dim3(grid, "grid")
        bx, by, bz = dim3(block, "block")
        s = stream if stream is None or stream.__class__ is int else self._stream_arg(stream)
        if self._bytes_params:
            values = self._struct_values(values)
        self._failed(err, (gx, gy, gz), (bx, by, bz), shared_bytes, s or 0, values)

    _c_failed = launch_failed  # the name the extension calls


def _stream_ptr(stream) -> int:
    return as_stream_handle(stream)  # refuses a closed Stream with ClosedError
