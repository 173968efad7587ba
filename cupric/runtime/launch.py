"""Kernel launches: packing arguments and calling `cuLaunchKernel` with the least host time.

`cuLaunchKernel` takes a grid and block shape, dynamic shared memory, a stream, and an
array of pointers (`void**`), one per kernel parameter, to the parameter values. A
`PreparedLaunch` fixes the parameter layout once per signature; each launch only writes
the values and calls the driver, so the host cost stays close to the driver's own.

How the driver is called (measured by benchmarks/launch_overhead.py; BENCHMARKS.md): by
default through a small CPython extension (`_fastlaunch`) that packs and launches in one
C call, compiled once into the user's cache; where no compiler is available, through
cuda.bindings' `cuLaunchKernel` with the values packed by one `struct.pack_into` into a
buffer made once. A cffi ABI-mode call (libffi) and ctypes are slower and kept for
comparison.
"""

from __future__ import annotations

import os
import struct
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from cupric import _config
from ._driver import driver
from .errors import ClosedError, LaunchError, error_from_code
from .stream import Stream as _Stream
from .stream import as_stream_handle

__all__ = ["PreparedLaunch", "LaunchConfig", "KernelArgumentError", "PARAM_TYPES",
           "param_layout", "infer_param", "validate_launch", "dim3", "make_prepared",
           "LaunchConfigError", "DeviceLimits", "SM90_LIMITS", "check_config",
           "build_launcher", "launch_backends"]


class KernelArgumentError(TypeError):
    """A kernel argument has the wrong type or count for the kernel's parameters.

    Raised before anything is launched. `index` is the 0-based position of the offending
    argument (None for a count mismatch).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(message)


# Parameter type name -> (struct code, size, alignment). Little-endian standard sizes:
# padding is inserted explicitly by `param_layout`, following the C ABI of the kernel.
PARAM_TYPES = {
    "bool": ("?", 1, 1),
    "i8": ("b", 1, 1), "i16": ("h", 2, 2), "i32": ("i", 4, 4), "i64": ("q", 8, 8),
    "u8": ("B", 1, 1), "u16": ("H", 2, 2), "u32": ("I", 4, 4), "u64": ("Q", 8, 8),
    "f16": ("e", 2, 2), "f32": ("f", 4, 4), "f64": ("d", 8, 8),
    "ptr": ("Q", 8, 8),
}


def _normalize_type(t, index: int):
    if isinstance(t, str):
        if t not in PARAM_TYPES:
            raise KernelArgumentError(
                f"parameter {index}: unknown type {t!r}; one of {', '.join(PARAM_TYPES)} or "
                f"('bytes', size, align)", index)
        return t
    if isinstance(t, tuple) and len(t) == 3 and t[0] == "bytes":
        _, size, align = t
        if not (isinstance(size, int) and size > 0):
            raise KernelArgumentError(f"parameter {index}: struct size must be a positive "
                                      f"int, got {size!r}", index)
        if not (isinstance(align, int) and align > 0 and align & (align - 1) == 0):
            raise KernelArgumentError(f"parameter {index}: struct alignment must be a power "
                                      f"of two, got {align!r}", index)
        return ("bytes", size, align)
    raise KernelArgumentError(f"parameter {index}: a type is a name such as 'f32' or "
                              f"('bytes', size, align), got {t!r}", index)


def param_layout(param_types) -> tuple[tuple, str, list[int], int]:
    """Where each parameter goes in the argument buffer.

    Returns
    -------
    (types, format, offsets, size)
        The normalized types, a `struct` format that packs all values at their aligned
        offsets, each parameter's offset, and the buffer size (at least 8 bytes).
    """
    types = tuple(_normalize_type(t, i) for i, t in enumerate(param_types))
    fmt = ["<"]
    offsets = []
    offset = 0
    for t in types:
        if isinstance(t, tuple):
            code, size, align = f"{t[1]}s", t[1], t[2]
        else:
            code, size, align = PARAM_TYPES[t]
        pad = -offset % align
        if pad:
            fmt.append(f"{pad}x")
            offset += pad
        offsets.append(offset)
        fmt.append(code)
        offset += size
    return types, "".join(fmt), offsets, max(offset, 8)


class LaunchConfigError(LaunchError, ValueError):
    """A launch configuration that no launch can have, or one over the device's limits
    (grid, block, threads per block, shared memory): refused before anything runs, on a
    GPU and on the simulator alike. Also a `ValueError`."""


@dataclass(frozen=True)
class DeviceLimits:
    """The launch limits of a device, as `cuDeviceGetAttribute` reports them.

    `SM90_LIMITS` holds an sm_90 device's (H100, H200): the simulator checks launches
    against it, so that a configuration it accepts also launches on such a GPU.
    """

    max_threads_per_block: int = 1024
    max_block_dims: tuple = (1024, 1024, 64)
    max_grid_dims: tuple = (2**31 - 1, 65535, 65535)
    #: Static plus dynamic shared memory of a block without opting in.
    max_shared_memory_per_block: int = 48 * 1024
    #: ... after raising a function's `max_dynamic_shared_size_bytes`.
    max_shared_memory_per_block_optin: int = 227 * 1024


SM90_LIMITS = DeviceLimits()
# Only the shape of a configuration (the driver checks the device's limits itself).
_UNCHECKED = DeviceLimits(2**32, (2**32,) * 3, (2**32,) * 3, 2**32, 2**32)


def dim3(value, what: str) -> tuple[int, int, int]:
    """An int or a 1-3 tuple of ints as (x, y, z), each in 1..2^32-1 (what the driver's
    unsigned parameters hold; the device limits are checked separately)."""
    if isinstance(value, (int, np.integer)):
        dims = (value, 1, 1)
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise LaunchConfigError(None, f"{what} must be an int or a tuple of 1 to 3 ints, "
                                          f"got {type(value).__name__}") from None
        if not 1 <= len(items) <= 3:
            raise LaunchConfigError(None, f"{what} must have 1 to 3 dimensions, got "
                                          f"{len(items)}")
        dims = tuple(items) + (1,) * (3 - len(items))
    for axis, d in zip("xyz", dims):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise LaunchConfigError(None, f"{what} dimensions must be ints, got {value!r}")
        if d < 1:
            raise LaunchConfigError(None, f"{what}.{axis} = {d}: {what} dimensions must be "
                                          f">= 1, got {value!r}")
        if d > 0xFFFFFFFF:
            raise LaunchConfigError(None, f"{what}.{axis} = {d} is outside 1..{0xFFFFFFFF}")
    return int(dims[0]), int(dims[1]), int(dims[2])


def check_config(name: str, grid, block, shared_bytes, limits: DeviceLimits = SM90_LIMITS,
                 max_threads: int | None = None, max_dynamic_shared: int | None = None):
    """A launch configuration checked against `limits`: ((gx, gy, gz), (bx, by, bz),
    shared_bytes). The one check of a configuration's shape, used by `validate_launch`
    (a real device's limits) and by the simulator (`SM90_LIMITS`).

    Parameters
    ----------
    max_threads : int, optional
        The kernel's own limit on threads per block (registers may lower it).
    max_dynamic_shared : int, optional
        The dynamic shared memory the kernel may use (its
        `max_dynamic_shared_size_bytes`); default: the opt-in maximum of `limits`.

    Raises
    ------
    LaunchConfigError
        Naming the kernel, the dimension and the limit.
    """
    gx, gy, gz = dim3(grid, "grid")
    bx, by, bz = dim3(block, "block")
    if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, (int, np.integer)) \
            or shared_bytes < 0:
        raise LaunchConfigError(None, f"kernel {name!r}: shared_bytes must be a "
                                      f"non-negative int, got {shared_bytes!r}")
    threads = bx * by * bz
    limit = limits.max_threads_per_block if max_threads is None else max_threads
    if threads > limit:
        raise LaunchConfigError(None, f"kernel {name!r}: a block of {bx}x{by}x{bz} = "
                                      f"{threads} threads exceeds the maximum of {limit} "
                                      f"(a block holds at most {limit} threads)")
    for axis, n, top in zip("xyz", (bx, by, bz), limits.max_block_dims):
        if n > top:
            raise LaunchConfigError(None, f"kernel {name!r}: block.{axis} = {n} exceeds the "
                                          f"device limit of {top}")
    for axis, n, top in zip("xyz", (gx, gy, gz), limits.max_grid_dims):
        if n > top:
            raise LaunchConfigError(None, f"kernel {name!r}: grid.{axis} = {n} exceeds the "
                                          f"device limit of {top}")
    allowed = limits.max_shared_memory_per_block_optin if max_dynamic_shared is None \
        else max_dynamic_shared
    if shared_bytes > allowed:
        raise LaunchConfigError(None, f"kernel {name!r}: {shared_bytes} bytes of dynamic "
                                      f"shared memory requested, {allowed} allowed")
    return (gx, gy, gz), (bx, by, bz), int(shared_bytes)


def validate_launch(function, grid, block, shared_bytes: int) -> None:
    """Check a launch configuration against the kernel's and the device's limits.

    Raises
    ------
    LaunchConfigError
        Naming the limit exceeded and how to change it where it can be changed.
    """
    name = function.name
    device = function.device
    bx, by, bz = dim3(block, "block")
    threads = bx * by * bz
    max_threads = function.max_threads_per_block
    if threads > max_threads:
        regs = function.num_regs
        why = (f" (its {regs} registers per thread limit it below the device's "
               f"{device.max_threads_per_block})" if max_threads < device.max_threads_per_block
               else "")
        raise LaunchConfigError(None, f"kernel {name!r}: a block of {bx}x{by}x{bz} = "
                                      f"{threads} threads exceeds its maximum of "
                                      f"{max_threads}{why}")
    shared_bytes = check_config(name, grid, block, shared_bytes, device,
                                max_threads=max_threads, max_dynamic_shared=2**62)[2]
    allowed = function.max_dynamic_shared_size_bytes
    if shared_bytes > allowed:
        optin = device.max_shared_memory_per_block_optin - function.shared_size_bytes
        if shared_bytes <= optin:
            hint = (f"; raise the limit with `function.max_dynamic_shared_size_bytes = "
                    f"{shared_bytes}` (this device allows up to {optin} for this kernel)")
        else:
            hint = (f"; this device allows at most {optin} for this kernel even after "
                    f"raising function.max_dynamic_shared_size_bytes")
        raise LaunchConfigError(None, f"kernel {name!r}: {shared_bytes} bytes of dynamic "
                                      f"shared memory requested, {allowed} allowed{hint}")


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


def _ctypes_launch():
    """cuLaunchKernel through ctypes, for the benchmark's comparison of call paths."""
    import ctypes
    lib = ctypes.CDLL(_libcuda_path())
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = ([ctypes.c_void_p] + [ctypes.c_uint] * 7
                   + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
    return fn


# The compiled launcher: a two-line C trampoline built with cffi's API mode into the
# user's cache. Calling a compiled cffi function costs a fraction of a libffi (ABI mode)
# call, which matters at this scale. Building needs a C compiler and the Python headers;
# where they are missing, launches go through cuda.bindings instead.
_LAUNCHER_CDEF = """
void cupric_set_launch(uintptr_t address);
int cupric_launch(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                  uintptr_t stream, void **params, void **extra);
"""
_LAUNCHER_SOURCE = """
#include <stdint.h>
typedef int (*cupric_launch_fn)(uintptr_t, unsigned int, unsigned int, unsigned int,
                                unsigned int, unsigned int, unsigned int, unsigned int,
                                uintptr_t, void **, void **);
static cupric_launch_fn cupric_real_launch;
static void cupric_set_launch(uintptr_t address) {
    cupric_real_launch = (cupric_launch_fn)address;
}
static int cupric_launch(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                         unsigned int bx, unsigned int by, unsigned int bz,
                         unsigned int shared, uintptr_t stream, void **params,
                         void **extra) {
    return cupric_real_launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
"""
_launcher = None          # the loaded extension module, once built or found
_launcher_error = None    # why it could not be had (str), reported by launch_backends()
_launcher_lock = threading.Lock()


def _launcher_name() -> str:
    import hashlib
    import sys
    digest = hashlib.sha256((_LAUNCHER_CDEF + _LAUNCHER_SOURCE).encode()).hexdigest()[:12]
    tag = sys.implementation.cache_tag.replace("-", "_")
    return f"_cupric_launch_{tag}_{digest}"


def _cache_dir() -> str:
    base = _config.CACHE_DIR.get() or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cupric")
    return os.path.join(base, "launch")


def _load_launcher(build: bool):
    """The compiled launcher module: from the cache, or built there when `build`."""
    global _launcher, _launcher_error
    if _launcher is not None:
        return _launcher
    with _launcher_lock:
        if _launcher is not None:
            return _launcher
        if _launcher_error is not None:
            return None  # a failed build is not retried in this process
        return _find_or_build_launcher(build)


def _find_or_build_launcher(build: bool):
    global _launcher, _launcher_error
    import glob
    import importlib.machinery
    import importlib.util
    name = _launcher_name()
    directory = _cache_dir()
    found = glob.glob(os.path.join(directory, name + ".*so")) + \
        glob.glob(os.path.join(directory, name + ".*pyd"))
    if not found:
        if not build:
            return None
        try:
            found = [_build_launcher(name, directory)]
        except Exception as exc:  # no compiler / headers: recorded, and bindings used
            _launcher_error = f"{type(exc).__name__}: {exc}"[:300]
            return None
    loader = importlib.machinery.ExtensionFileLoader(name, found[0])
    spec = importlib.util.spec_from_file_location(name, found[0], loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    n = native()
    module.lib.cupric_set_launch(int(n.ffi.cast("uintptr_t", n.launch)))
    _launcher = module
    return module


def _build_launcher(name: str, directory: str) -> str:
    import shutil
    import tempfile
    import cffi
    builder = cffi.FFI()
    builder.cdef(_LAUNCHER_CDEF)
    builder.set_source(name, _LAUNCHER_SOURCE)
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        built = builder.compile(tmpdir=tmp, verbose=False)
        target = os.path.join(directory, os.path.basename(built))
        # Atomic: another process building at the same time leaves one complete file.
        shutil.move(built, target + ".partial")
        os.replace(target + ".partial", target)
    return target


def build_launcher() -> bool:
    """Build the compiled launcher into the cache now (one-time, about a second).

    Returns
    -------
    bool
        True if it is available afterwards; if not, `launch_backends()` says why.
    """
    return _load_launcher(build=True) is not None


def launch_backends() -> dict:
    """Which ways of calling cuLaunchKernel are available, and the default.

    ``"c"`` (compiled extension packing and launching in one call, fastest), ``"api"``
    (compiled cffi trampoline), ``"bindings"`` (cuda.bindings), ``"cffi"`` (ABI mode),
    ``"ctypes"``. `CUPRIC_LAUNCH_BACKEND` overrides the default; `CUPRIC_BUILD_LAUNCHER=0`
    stops cupric from compiling the first two on first use.
    """
    from . import _fastlaunch
    default = _default_backend()
    return {"default": default,
            "c": _fastlaunch.load(build=False) is not None, "c_error": _fastlaunch.build_error(),
            "api": _load_launcher(build=False) is not None, "api_error": _launcher_error,
            "bindings": True, "cffi": True, "ctypes": True}


def _default_backend() -> str:
    chosen = _config.LAUNCH_BACKEND.get()
    if chosen:
        return chosen
    from . import _fastlaunch
    build = _config.BUILD_LAUNCHER.get()
    if _fastlaunch.load(build=build) is not None:
        return "c"
    return "api" if _load_launcher(build=build) is not None else "bindings"


# -- the prepared launch -------------------------------------------------------------------

# What struct.pack_into raises for a value of the wrong type or range (a NumPy array
# raises TypeError from its __index__, a huge int OverflowError on some versions).
_PACK_ERRORS = (struct.error, TypeError, ValueError, OverflowError)

_BACKENDS = ("c", "api", "bindings", "cffi", "ctypes")


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

    def __init__(self, function, param_types, *, cooperative: bool = False,
                 backend: str | None = None) -> None:
        backend = backend or "cffi"
        if backend not in _BACKENDS:
            raise ValueError(f"launch backend must be one of {_BACKENDS}, got {backend!r}")
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
        # and ctypes paths, the cuda.bindings objects for cuda.bindings (which would
        # otherwise build a CUfunction/CUstream object from the int on every call).
        self._func = function.ptr
        self._stream_handles = False
        if cooperative:
            if backend != "cffi":
                raise ValueError("cooperative launches use the cffi backend")
            coop = n.launch_cooperative
            # Same call shape as cuLaunchKernel, so `launch` has a single call site.
            self._call = (lambda f, gx, gy, gz, bx, by, bz, shm, s, argv, _extra:
                          coop(f, gx, gy, gz, bx, by, bz, shm, s, argv))
            self._null = n.null
        elif backend in ("cffi", "c"):
            # For "c", this is the Python fallback behind the compiled launch function.
            self._call = n.launch
            self._null = n.null
        elif backend == "api":
            launcher = _load_launcher(build=True)
            if launcher is None:
                raise RuntimeError(f"the compiled launcher is not available: {_launcher_error}")
            self._call = launcher.lib.cupric_launch
            self._null = launcher.ffi.NULL
        elif backend == "ctypes":
            self._call = _ctypes_launch()
            self._null = None
        else:  # bindings
            self._call = driver().cuLaunchKernel
            self._func = function.handle
            self._stream_handles = True
            self._null = 0
        self._buf, self._view, self._argv = self._new_buffers()
        self._pack = self._struct.pack_into
        lock = threading.Lock()
        self._lock_acquire = lock.acquire
        self._lock_release = lock.release

    def _new_buffers(self):
        ffi = self._ffi
        buf = ffi.new("char[]", self._size)
        argv = ffi.new("void*[]", max(len(self._offsets), 1))
        for i, offset in enumerate(self._offsets):
            argv[i] = buf + offset
        view = ffi.buffer(buf)
        if self._backend in ("ctypes", "bindings") and not self.cooperative:
            # These take the void** as an address; `buf` and the cdata array stay
            # referenced through the returned tuple.
            return (buf, argv), view, int(ffi.cast("uintptr_t", argv))
        if self._backend == "api":
            # cdata of another FFI instance: pass the array by address.
            return (buf, argv), view, _launcher.ffi.cast("void **",
                                                         int(ffi.cast("uintptr_t", argv)))
        return buf, view, argv

    @property
    def backend(self) -> str:
        """How this launch reaches cuLaunchKernel: "api", "bindings", "cffi" or "ctypes"."""
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
    (unusual argument types, any error) it hands to `_slow_launch` / `_c_failed`, the
    Python implementation, which raises the same typed errors as the other backends.
    """

    __slots__ = ("launch",)

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

    def __call__(self, *args) -> None:
        return self.launch(*args)

    def _slow_launch(self, *args) -> None:
        return PreparedLaunch.launch(self, *args)

    def _c_failed(self, err, grid, block, stream, shared_bytes, *values) -> None:
        gx, gy, gz = dim3(grid, "grid")
        bx, by, bz = dim3(block, "block")
        s = stream if stream is None or stream.__class__ is int else self._stream_arg(stream)
        if self._bytes_params:
            values = self._struct_values(values)
        self._failed(err, (gx, gy, gz), (bx, by, bz), shared_bytes, s or 0, values)


def _stream_ptr(stream) -> int:
    return as_stream_handle(stream)  # refuses a closed Stream with ClosedError


def _describe_bad_value(kernel: str, index: int, t: str, value, exc) -> str:
    where = f"argument {index} of kernel {kernel!r}"
    if isinstance(value, np.ndarray):
        if t == "ptr":
            return (f"{where} is a host NumPy array, but the kernel needs a device pointer; "
                    f"copy it to the device first (cupric.runtime.to_device(array)) and "
                    f"pass that")
        return f"{where} is a NumPy array, but the parameter is a scalar {t}"
    if t == "ptr":
        return (f"{where} must be a device address (an int) for a 'ptr' parameter, got "
                f"{type(value).__name__}")
    return f"{where} must fit a {t} parameter, got {value!r} ({exc})"


# -- argument inference for Function.launch ------------------------------------------------

_DTYPE_TO_TYPE = {
    np.dtype(np.bool_): "bool",
    np.dtype(np.int8): "i8", np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16",
    np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64", np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
}


# Exact scalar classes -> parameter type: one dict lookup for the common arguments.
_TYPE_BY_CLASS = {int: "i64", float: "f64", bool: "bool",
                  **{dt.type: t for dt, t in _DTYPE_TO_TYPE.items()}}


def _device_pointer(value, index: int):
    """The device address of an array-like kernel argument, or None if it is not one."""
    ptr = getattr(value, "ptr", None)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        # A view of a freed allocation keeps its old address: refuse it here, before the
        # kernel reads freed memory.
        if getattr(value, "closed", False):
            raise KernelArgumentError(f"argument {index} is a closed buffer (its memory "
                                      f"was freed)", index)
        return ptr
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        try:
            from .interop import as_device_array
        except ImportError as exc:
            raise KernelArgumentError(f"argument {index}: DLPack objects need "
                                      f"cupric.runtime.interop ({exc})", index) from exc
        return int(as_device_array(value).ptr)
    return None


def infer_param(value, index: int):
    """(param type, packed value) for one `Function.launch` argument.

    NumPy scalars keep their dtype; Python bool/int/float map to bool/i64/f64 (as
    `cupric.types.typeof`); device arrays and buffers pass their address as ``"ptr"``;
    NumPy structured scalars pass by value.

    Raises
    ------
    KernelArgumentError
        For host arrays and values of no kernel type.
    """
    cls = value.__class__
    t = _TYPE_BY_CLASS.get(cls)
    if t is not None:
        # Python and NumPy scalars: every backend packs NumPy scalars as they are.
        return t, value
    if isinstance(value, np.generic):
        dt = value.dtype
        t = _DTYPE_TO_TYPE.get(dt)
        if t is not None:
            return t, value.item()
        if dt.kind == "V":
            return ("bytes", dt.itemsize, dt.alignment), value.tobytes()
        raise KernelArgumentError(f"argument {index}: NumPy {dt} has no kernel parameter type",
                                  index)
    if isinstance(value, np.ndarray):
        raise KernelArgumentError(
            f"argument {index} is a host NumPy array (shape {value.shape}, {value.dtype}); "
            f"kernels need device memory: copy it to the device first "
            f"(cupric.runtime.to_device(array)) and pass that", index)
    ptr = _device_pointer(value, index)
    if ptr is not None:
        return "ptr", ptr
    if cls.__module__.startswith("cuda.bindings") and cls.__name__ == "CUdeviceptr":
        return "ptr", int(value)
    raise KernelArgumentError(
        f"argument {index}: cannot pass a {cls.__name__} to a kernel; use a NumPy scalar "
        f"(np.float32(x)...), a device array/buffer, or a NumPy structured scalar", index)


class LaunchConfig:
    """A reusable launch shape: ``LaunchConfig(grid, block, shared_bytes=0, stream=None)``.

    `Function.launch(config, *args)` accepts one in place of grid and block.
    """

    __slots__ = ("grid", "block", "shared_bytes", "stream", "cluster", "cooperative")

    def __init__(self, grid, block, shared_bytes: int = 0, stream=None, *, cluster=None,
                 cooperative: bool = False) -> None:
        self.grid = dim3(grid, "grid")
        self.block = dim3(block, "block")
        if not isinstance(shared_bytes, int) or shared_bytes < 0:
            raise LaunchError(None, f"shared_bytes must be a non-negative int, got "
                                    f"{shared_bytes!r}")
        self.shared_bytes = shared_bytes
        self.stream = stream
        self.cluster = dim3(cluster, "cluster") if cluster is not None else None
        self.cooperative = bool(cooperative)

    def __repr__(self) -> str:
        return (f"LaunchConfig(grid={self.grid}, block={self.block}, "
                f"shared_bytes={self.shared_bytes})")

