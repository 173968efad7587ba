"""cuBLAS handles: the library context every call takes, bound to one device and stream.

A ``cublasHandle_t`` holds cuBLAS's state on one device (made in the device's primary
context, the one PyTorch and CuPy use), the stream its calls are queued on, a workspace,
and modes: math mode (TF32 tensor cores or pedantic), atomics, and where scalars live
(host or device pointers). This module also keeps the table of C functions, cast once
to integer-argument signatures so that a call passes plain Python ints.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from cupric.runtime.resource import SharedHandles, StreamBoundHandle

from . import _validate as V

__all__ = ["Handle", "HandleOptions", "default_handle", "resolve", "MATH_MODES"]

# cublasMath_t values (fixed by the C API; a CPU test compares them with the headers).
MATH_MODES = {"default": 0, "tensor_op": 1, "pedantic": 2, "tf32": 3}
_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
_POINTER_MODES = {"host": 0, "device": 1}
_MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class HandleOptions:
    """How a new handle is set up (validated at construction).

    Parameters
    ----------
    math_mode : {"default", "tf32", "pedantic", "tensor_op"}
        ``"tf32"`` lets float32 routines use TF32 tensor cores (10-bit mantissa inputs,
        float32 accumulation); ``"pedantic"`` forbids every reduced-precision shortcut;
        ``"default"`` lets cuBLAS pick exact-precision kernels.
    disallow_reduced_precision_reduction : bool
        For float16/bfloat16 GEMMs with float32 compute: never reduce partial sums in
        reduced precision (split-K).
    atomics : bool
        Allow routines with faster variants that use atomics (results may differ in the
        last bits from run to run).
    pointer_mode : {"host", "device"}
        Where scalars (alpha, beta) and scalar results (dot, nrm2...) live. In device mode
        they are device arrays and calls never wait for the GPU.
    workspace_bytes : int, optional
        Size of the workspace the handle allocates and owns; None picks 32 MiB on
        compute capability 9.0 and newer, 4 MiB before (what cuBLAS itself uses).
    """

    math_mode: str = "default"
    disallow_reduced_precision_reduction: bool = False
    atomics: bool = False
    pointer_mode: str = "host"
    workspace_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.math_mode not in MATH_MODES:
            raise ValueError(f"math_mode must be one of {', '.join(MATH_MODES)}, got "
                             f"{self.math_mode!r}")
        if self.pointer_mode not in _POINTER_MODES:
            raise ValueError(f"pointer_mode must be 'host' or 'device', got "
                             f"{self.pointer_mode!r}")
        if self.workspace_bytes is not None and (
                not isinstance(self.workspace_bytes, int) or self.workspace_bytes < 0):
            raise ValueError(f"workspace_bytes must be a non-negative int or None, got "
                             f"{self.workspace_bytes!r}")

    def math_flags(self) -> int:
        """The cublasMath_t value these options select."""
        flags = MATH_MODES[self.math_mode]
        if self.disallow_reduced_precision_reduction:
            flags |= _DISALLOW_REDUCED_PRECISION_REDUCTION
        return flags


# --------------------------------------------------------------------------------------
# The function table


_FAST: dict[str, object] = {}


def _integer_signature(ffi, fn) -> str:
    args = []
    for arg in ffi.typeof(fn).args:
        if arg.kind == "pointer":
            args.append("uintptr_t")
        elif arg.kind == "enum":
            args.append("int")
        elif arg.kind == "primitive":
            args.append(arg.cname)
        else:  # structs by value: none in the cuBLAS API
            raise TypeError(f"unexpected argument type {arg.cname}")
    return f"int(*)({', '.join(args)})"


def fast_function(name: str, module=None):
    """The C function `name`, cast so that every pointer argument is a ``uintptr_t``.

    Pointers then pass as plain Python ints (device addresses from DeviceBuffer.ptr),
    with no ``ffi.cast`` per call; on x86-64 and aarch64 a pointer and a ``uintptr_t``
    travel in the same register, so the call is the same machine call.

    Cost
    ----
    The first lookup of a name parses its signature (tens of microseconds); later ones
    are a dictionary hit.
    """
    fn = _FAST.get(name)
    if fn is not None:
        return fn
    if module is None:
        from . import lib as module
    ffi = module.ffi
    raw = getattr(module.lib, name)
    fn = ffi.cast(_integer_signature(ffi, raw), raw)
    _FAST[name] = fn
    return fn


# --------------------------------------------------------------------------------------
# Host scalars


# Host scalar types by letter: the BLAS precisions, plus "H" (half, the scale type of
# 16F compute) and "I" (int32, the scale type of 32I compute) used by gemm_ex.
_SCALAR_CTYPE = {"S": "float[1]", "D": "double[1]", "C": "float[2]", "Z": "double[2]",
                 "H": "uint16_t[1]", "I": "int32_t[1]"}
SCALAR_DTYPES = {**V.SCALAR_DTYPE, "H": np.dtype(np.float16), "I": np.dtype(np.int32)}
_scalar_cache: dict[tuple, tuple] = {}
_SCALAR_CACHE_LIMIT = 1024


def _number(value, prefix: str, name: str):
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, complex, np.number)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if prefix in ("C", "Z"):
        return complex(value)
    if isinstance(value, (complex, np.complexfloating)):
        if value.imag != 0:
            raise TypeError(f"{name} = {value!r} is complex but this call's scalars are "
                            f"real")
        value = value.real
    if prefix == "I":
        if float(value) != int(value) or not -2**31 <= int(value) < 2**31:
            raise TypeError(f"{name} = {value!r}: this call's scalars are int32")
        return int(value)
    return float(value)


def _initializer(number, prefix: str):
    if prefix in ("C", "Z"):
        return [number.real, number.imag]
    if prefix == "H":
        return [int(np.array(number, np.float16).view(np.uint16))]
    return [number]


def host_scalar(prefix: str, value, name: str) -> tuple[object, int]:
    """(keep-alive object, address) of `value` in host memory as the precision's type.

    Values seen before come from a cache of immutable buffers, so the common 1 and 0
    cost one dictionary lookup.

    Raises
    ------
    TypeError
        If `value` is not a number, or is complex where the routine's scalar is real.
    """
    key = (prefix, type(value), value)  # the type: True must not hit the entry of 1
    try:
        hit = _scalar_cache.get(key)
    except TypeError:  # unhashable: not a number
        hit = None
    if hit is not None:
        return hit
    from . import lib
    number = _number(value, prefix, name)
    ffi = lib.ffi
    buf = ffi.new(_SCALAR_CTYPE[prefix], _initializer(number, prefix))
    entry = (buf, int(ffi.cast("uintptr_t", buf)))
    if len(_scalar_cache) < _SCALAR_CACHE_LIMIT and number == number:  # NaN never hits
        _scalar_cache[key] = entry
    return entry


# --------------------------------------------------------------------------------------
# Handles


class _Owned:
    """What a handle owns besides its cublasHandle_t, for the finalizer (never `self`)."""

    __slots__ = ("workspace", "lt", "device")

    def __init__(self, device: int, stream: int = 0):
        # `stream` is part of the owned-state contract of StreamBoundHandle; cuBLAS's
        # workspace is freed after cublasDestroy waited, so it needs no stream.
        self.workspace = None
        self.lt = 0
        self.device = device


def _destroy(raw: int, owned: _Owned) -> None:
    from cupric.runtime.device import Device

    from . import lib
    Device(owned.device).make_current()
    try:
        lib.check(fast_function("cublasDestroy")(raw))
        if owned.lt:
            from . import lt
            lt.check(fast_function("cublasLtDestroy", lt)(owned.lt))
            owned.lt = 0
    finally:
        workspace, owned.workspace = owned.workspace, None
        if workspace is not None:
            # cublasDestroy waited for the handle's work, so the plain free is safe.
            workspace.close()


class Handle(StreamBoundHandle):
    """A cuBLAS handle bound to one device and one stream (no public constructor).

    Get the shared handle of a (device, stream) pair with `Handle.get`, a private one
    with its own options with `Handle.create`, or borrow one made elsewhere (PyTorch's
    ``torch.cuda.current_blas_handle()``) with `Handle.from_handle`.

    The handle owns its workspace (device memory allocated through cupric.runtime) and,
    once cuBLASLt is used, a cuBLASLt handle; `close()` or garbage collection frees all.

    Thread safety
    -------------
    cuBLAS allows calls from several threads on one handle. Changing a mode
    (`math_mode`, `atomics`, `pointer_mode`) affects calls already being prepared in
    other threads; the setters are serialized by a lock but the caller must order them
    with respect to calls. Work from several threads on one handle runs in stream order,
    which is why sharing the workspace is safe.

    Examples
    --------
    >>> from cupric import cublas, runtime as rt                    # doctest: +SKIP
    >>> stream = rt.Device(0).create_stream()
    >>> with cublas.Handle.create(stream=stream,
    ...                           options=cublas.HandleOptions(math_mode="tf32")) as h:
    ...     cublas.gemm("N", "N", 1.0, a, b, 0.0, c, handle=h)
    """

    __slots__ = ("_device_scalars", "_math", "_atomics", "_lt_plans", "_fast_plans")

    library = "cuBLAS"
    _shared = SharedHandles()
    _owned_type = _Owned
    _binding, _c_type, _c_create = "cupric.cublas.lib", "cublasHandle_t", "cublasCreate"
    _destroy = staticmethod(_destroy)

    # -- construction ------------------------------------------------------------------

    def _init_state(self) -> None:
        self._device_scalars = False
        self._math = 0
        self._atomics = False
        self._lt_plans = {}
        # Compiled GEMM plans (cupric.cublas._fastgemm): key -> capsule. Cleared whenever
        # what they assume changes (math mode, pointer mode) and on close.
        self._fast_plans = {}

    @classmethod
    def create(cls, device=None, stream=None, options: HandleOptions | None = None) -> "Handle":
        """A new handle owned by the caller.

        Parameters
        ----------
        device : Device or int, optional
            Defaults to the stream's device, else the calling thread's current device.
        stream : Stream, int handle, or stream-like (PyTorch, CuPy), optional
            Calls are queued there; None is the legacy default stream.
        options : HandleOptions, optional

        Raises
        ------
        CublasError
            If cuBLAS cannot create the handle (``CUBLAS_STATUS_NOT_INITIALIZED``: no
            usable device or out of memory).
        CudaOutOfMemoryError
            If the workspace cannot be allocated.

        Cost
        ----
        ``cublasCreate`` (a driver round trip; loading cuBLAS the first time in a
        process) plus one allocation of the workspace.
        """
        options = HandleOptions() if options is None else options
        if not isinstance(options, HandleOptions):
            raise TypeError(f"options must be a HandleOptions, got {type(options).__name__}")
        return cls._open(device, stream, options=options)

    def _setup(self, dev, options: HandleOptions) -> None:
        from cupric.runtime.memory import empty

        from . import lib
        raw = self._ptr
        # cublasSetStream resets the workspace to cuBLAS's own pool: stream first.
        lib.check(fast_function("cublasSetStream")(raw, self._stream_ptr))
        size = options.workspace_bytes
        if size is None:
            size = 32 * _MIB if dev.compute_capability >= (9, 0) else 4 * _MIB
        if size:
            workspace = empty(size, np.uint8)
            self._owned.workspace = workspace
            lib.check(fast_function("cublasSetWorkspace")(raw, workspace.ptr, size))
        self._apply(options)

    @classmethod
    def from_handle(cls, raw, *, device: int = 0, stream=None,
                    pointer_mode: str = "host") -> "Handle":
        """Borrow a ``cublasHandle_t`` made elsewhere; cupric never destroys it.

        Parameters
        ----------
        raw : int
            The handle's address, e.g. ``torch.cuda.current_blas_handle()``.
        device : int
            Ordinal of the device it was created on.
        stream : optional
            The stream the owner bound it to (recorded, not set).
        pointer_mode : {"host", "device"}
            The pointer mode the owner left it in (recorded, not queried).

        Safety
        ------
        The owner must keep the handle alive, and must not change its stream or pointer
        mode behind cupric's back, while cupric uses it.
        """
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise TypeError(f"raw must be the handle's address as an int, got "
                            f"{type(raw).__name__}")
        if pointer_mode not in _POINTER_MODES:
            raise ValueError(f"pointer_mode must be 'host' or 'device', got {pointer_mode!r}")
        self = cls._borrow(raw, device, stream)
        self._device_scalars = pointer_mode == "device"
        return self

    def _apply(self, options: HandleOptions) -> None:
        if options.math_mode != "default" or options.disallow_reduced_precision_reduction:
            self._set_math(options.math_flags())
        if options.atomics:
            self.atomics = True
        if options.pointer_mode != "host":
            self.pointer_mode = options.pointer_mode

    # -- state ---------------------------------------------------------------------------

    @property
    def ptr(self) -> int:
        """The raw ``cublasHandle_t`` as an int."""
        return self.ready()

    def close(self) -> None:
        """Destroy the cuBLAS (and cuBLASLt) handle and free the workspace.

        Raises
        ------
        CublasError
            If ``cublasDestroy`` fails (the handle is closed anyway).
        """
        if self._closed:
            return
        self._fast_plans.clear()
        self._lt_plans.clear()
        super().close()

    # -- modes ---------------------------------------------------------------------------

    def _set_math(self, flags: int) -> None:
        from . import lib
        with self._lock:
            lib.check(fast_function("cublasSetMathMode")(self.ready(), flags))
            self._math = flags
            self._fast_plans.clear()

    @property
    def math_mode(self) -> str:
        """"default", "tf32", "pedantic" or "tensor_op" (set to change it)."""
        base = self._math & ~_DISALLOW_REDUCED_PRECISION_REDUCTION
        return {v: k for k, v in MATH_MODES.items()}.get(base, str(base))

    @math_mode.setter
    def math_mode(self, mode: str) -> None:
        if mode not in MATH_MODES:
            raise ValueError(f"math_mode must be one of {', '.join(MATH_MODES)}, got {mode!r}")
        self._set_math(MATH_MODES[mode] | (self._math & _DISALLOW_REDUCED_PRECISION_REDUCTION))

    @property
    def atomics(self) -> bool:
        """Whether routines may use atomics (faster, not bitwise reproducible)."""
        return self._atomics

    @atomics.setter
    def atomics(self, allowed: bool) -> None:
        from . import lib
        with self._lock:
            lib.check(fast_function("cublasSetAtomicsMode")(self.ready(), 1 if allowed else 0))
            self._atomics = bool(allowed)

    @property
    def pointer_mode(self) -> str:
        """"host" or "device": where scalars and scalar results live."""
        return "device" if self._device_scalars else "host"

    @pointer_mode.setter
    def pointer_mode(self, mode: str) -> None:
        from . import lib
        if mode not in _POINTER_MODES:
            raise ValueError(f"pointer_mode must be 'host' or 'device', got {mode!r}")
        with self._lock:
            lib.check(fast_function("cublasSetPointerMode")(self.ready(), _POINTER_MODES[mode]))
            self._device_scalars = mode == "device"
            self._fast_plans.clear()

    # -- helpers for the routines ------------------------------------------------------

    def scalar(self, prefix: str, value, name: str):
        """(keep-alive, address) of a scalar argument in the handle's pointer mode.

        Host mode takes a Python/NumPy number; device mode a device array of one element
        of the precision's dtype.
        """
        if not self._device_scalars:
            return host_scalar(prefix, value, name)
        buf = V.device_array(value, name, self._stream_ptr)
        want = SCALAR_DTYPES[prefix]
        if buf.size != 1 or buf.dtype != want:
            raise TypeError(f"{name}: in device pointer mode a scalar is a device array of "
                            f"one {want}, got shape {buf.shape} dtype {buf.dtype}")
        self.check_device(buf, name)
        return buf, buf.ptr

    def check_device(self, buf, name: str) -> None:
        """Raise `DeviceMismatchError` (a ValueError) if `buf` (a DeviceBuffer or an
        intake `ArrayInfo`) lives on a device the handle's cannot reach.

        On a machine with one GPU nothing can differ and nothing is asked of the driver.
        """
        if self._multi and buf.ptr and buf.device != self._device:
            # `buf.device` is what the array says (-1 where it names none: the driver is
            # asked); memory every device or this one reaches is accepted.
            from cupric.runtime.intake import device_problem
            own = buf.device
            found = device_problem(buf.ptr, own if own >= 0 else None, self._device)
            if found is not None:
                from cupric.runtime.errors import DeviceMismatchError
                raise DeviceMismatchError(
                    f"{name} lives on device {found} but the cuBLAS handle is bound to "
                    f"device {self._device}", argument=name, device=found,
                    expected=self._device)

    def lt_handle(self) -> int:
        """The handle's cuBLASLt handle (created on first use, destroyed with it)."""
        owned = self._owned
        if owned.lt:
            return owned.lt
        from . import lt
        with self._lock:
            if not owned.lt:
                self.ready()
                out = lt.ffi.new("cublasLtHandle_t *")
                lt.check(lt.lib.cublasLtCreate(out))
                owned.lt = int(lt.ffi.cast("uintptr_t", out[0]))
        return owned.lt

    def lt_workspace(self) -> tuple[int, int]:
        """(address, bytes) of the workspace, shared with cuBLASLt calls on this stream."""
        ws = self._owned.workspace
        return (0, 0) if ws is None else (ws.ptr, ws.nbytes)


_tls = threading.local()


def default_handle() -> Handle:
    """The calling thread's default handle: `Handle.get` of the device current in this
    thread when first asked, on the legacy default stream."""
    handle = getattr(_tls, "handle", None)
    if handle is None or handle.closed:
        handle = Handle.get()
        _tls.handle = handle
    return handle


def resolve(handle) -> Handle:
    """`handle`, or the thread's default handle when None."""
    if handle is None:
        handle = getattr(_tls, "handle", None)
        if handle is None or handle.closed:
            return default_handle()
        return handle
    if not isinstance(handle, Handle):
        raise TypeError(f"handle must be a cupric.cublas.Handle, got {type(handle).__name__}")
    return handle


def invoke(name: str, *args) -> None:
    """Call the cuBLAS function `name` with integer arguments; raise on a failing status.

    Cost
    ----
    One dictionary lookup and the cffi call (BENCHMARKS.md has the GEMM host cost).
    """
    fn = _FAST.get(name)
    if fn is None:
        fn = fast_function(name)
    status = fn(*args)
    if status:
        from . import lib
        lib.check(status)
