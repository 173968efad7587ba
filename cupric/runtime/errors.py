"""The errors of the CUDA Driver API, as one hierarchy of typed exceptions.

Every driver call returns a `CUresult`; `cupric.runtime._driver.check` turns a failing one
into the `CudaError` subclass a table picks for its code. Some errors are *sticky*: after a
kernel faults, the context is unusable and every later call fails with the same code. The
first sighting raises the fault itself (e.g. `IllegalAddressError`); later ones raise
`ContextLostError`, which names the error that poisoned the context.

This module imports nothing from cuda.bindings at import time.
"""

from __future__ import annotations

import threading

__all__ = [
    "CudaError", "NoDriverError", "NoDeviceError", "InvalidValueError", "InvalidHandleError",
    "InvalidContextError", "CudaOutOfMemoryError", "NotReadyError", "NotFoundError",
    "NotSupportedError", "ModuleLoadError", "LaunchError", "KernelFaultError",
    "DeviceAssertionError",
    "IllegalAddressError", "ContextLostError", "StreamCaptureError", "ClosedError",
    "DeviceMismatchError", "error_from_code",
    "STICKY_CODES", "reset_context_poison",
]


class CudaError(RuntimeError):
    """A CUDA Driver API call failed.

    Attributes
    ----------
    code : int or None
        The `CUresult` value (None where no driver call produced the error).
    name : str
        The enum name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
    description : str
        The driver's own description (`cuGetErrorString`), or a short one of ours when the
        driver cannot be asked.
    """

    def __init__(self, code: int | None, message: str | None = None, *,
                 name: str | None = None, description: str | None = None) -> None:
        self.code = None if code is None else int(code)
        self.name = name if name is not None else _code_name(self.code)
        self.description = description if description is not None else _describe(self.code)
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.name}: {self.description}" if self.code is not None else self.description
        return f"{self.message} ({head})" if self.message else head

    def __reduce__(self):
        # Exceptions with keyword-only constructor arguments do not pickle by default;
        # multiprocessing and pytest-xdist pass errors between processes.
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls, state):
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    RuntimeError.__init__(obj, obj._render())
    return obj


class NoDriverError(CudaError):
    """No CUDA driver (libcuda) could be loaded, or cuda-python is missing.

    Raised by the first runtime call on a machine without an NVIDIA driver; importing
    `cupric.runtime` never raises it. `cupric.runtime.driver_available()` asks without
    raising.
    """

    def __init__(self, message: str) -> None:
        super().__init__(None, message, name="NO_DRIVER",
                         description="no CUDA driver is available")

    def _render(self) -> str:
        return self.message


class NoDeviceError(CudaError):
    """The driver sees no CUDA device, or the ordinal asked for does not exist."""


class InvalidValueError(CudaError, ValueError):
    """An argument of a driver call was out of range (`CUDA_ERROR_INVALID_VALUE`).

    Also a `ValueError`, so code that catches bad-argument errors generically catches it.
    """


class InvalidHandleError(CudaError, ValueError):
    """A handle (stream, event, module, function...) is not valid, e.g. already destroyed."""


class InvalidContextError(CudaError):
    """No usable context is current, or the context was destroyed."""


class CudaOutOfMemoryError(CudaError, MemoryError):
    """The device has not enough free memory for the request.

    Attributes
    ----------
    requested : int or None
        Bytes the failing call asked for, when known.
    free, total : int or None
        Free and total device memory in bytes at the time of the failure, when known.
    """

    def __init__(self, code: int | None = 2, message: str | None = None, *,
                 requested: int | None = None, free: int | None = None,
                 total: int | None = None, name: str | None = None,
                 description: str | None = None) -> None:
        self.requested = requested
        self.free = free
        self.total = total
        parts = [message] if message else []
        if requested is not None:
            parts.append(f"tried to allocate {_bytes(requested)}")
        if free is not None:
            extra = f" of {_bytes(total)}" if total is not None else ""
            parts.append(f"{_bytes(free)}{extra} free on the device")
        super().__init__(code, "; ".join(parts) or None, name=name, description=description)


class NotReadyError(CudaError):
    """Work queued on a stream or event has not completed yet (`CUDA_ERROR_NOT_READY`).

    `Stream.query()` and `Event.query()` return False instead of raising it.
    """


class NotFoundError(CudaError, KeyError):
    """A named symbol (kernel, global) is not in the module."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self._render()


class NotSupportedError(CudaError):
    """The device, driver or configuration does not support the operation."""


class ModuleLoadError(CudaError):
    """The driver refused a PTX/cubin/fatbin image; `log` holds the JIT error log."""

    def __init__(self, code: int | None, message: str | None = None, *, log: str = "",
                 name: str | None = None, description: str | None = None) -> None:
        self.log = log
        super().__init__(code, message, name=name, description=description)

    def _render(self) -> str:
        text = super()._render()
        if self.code == 222:  # CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            text += ("\n  hint: the PTX was written by a newer toolkit than this driver "
                     "supports; compile to cubin with a matching ptxas/nvJitLink, or "
                     "update the driver")
        if self.log:
            text += "\n" + self.log.rstrip()
        return text


class LaunchError(CudaError):
    """A kernel launch was refused: configuration invalid or over a resource limit.

    Raised before launching by cupric's own validation (block too large, too much shared
    memory, grid over the device limits) and for the driver's launch errors
    (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`, `..._COOPERATIVE_LAUNCH_TOO_LARGE`,
    `..._INVALID_CLUSTER_SIZE`).
    """

    def _render(self) -> str:
        if self.code is None:
            return self.message or self.description
        return super()._render()


class KernelFaultError(CudaError):
    """A kernel faulted on the device (illegal instruction, misaligned address, trap...).

    These errors are sticky: the context can no longer be used, and every later call in
    it raises `ContextLostError`. The process must restart (or the primary context be reset
    with `Context.reset()`, which invalidates every object made in it).
    """


class IllegalAddressError(KernelFaultError):
    """A kernel accessed memory outside any allocation (`CUDA_ERROR_ILLEGAL_ADDRESS`).

    Reported asynchronously: the next synchronizing call after the faulting kernel raises
    it. Sticky, like every `KernelFaultError`.
    """


class DeviceAssertionError(KernelFaultError):
    """A kernel's `assert` (or a bounds check of a `bounds_check=True` kernel) failed on
    the device (`CUDA_ERROR_ASSERT`).

    The failing thread printed the message, with the Python file and line, on the
    process's standard output before the launch ended; the driver does not pass it on.
    Sticky, like every `KernelFaultError`.
    """


class ContextLostError(CudaError):
    """A call failed because an earlier error made the context unusable.

    Attributes
    ----------
    original : CudaError
        The error that poisoned the context (first seen), e.g. an `IllegalAddressError`.
    """

    def __init__(self, code: int | None, original: CudaError) -> None:
        self.original = original
        super().__init__(code, f"the CUDA context is lost: an earlier error made it unusable "
                               f"({original.name}: {original.description}); CUDA documents "
                               f"that after such a device fault the process must be "
                               f"restarted to use the GPU again")

    def _render(self) -> str:
        return self.message


class ClosedError(ValueError):
    """The object was closed (its handle released) and cannot be used any more."""


class DeviceMismatchError(ValueError):
    """An array lives on another device than the one the operation runs on (and that
    device cannot reach it). Raised before anything is queued. Also a `ValueError`, as the
    cuBLAS and cuDNN wrappers' device checks are.

    Attributes
    ----------
    argument : str or None
        The argument, as the message names it.
    device : int
        Ordinal of the device the array's memory lives on.
    expected : int
        Ordinal of the device the operation runs on.
    """

    def __init__(self, message: str, *, argument: str | None = None, device: int = -1,
                 expected: int = -1) -> None:
        super().__init__(message)
        self.argument = argument
        self.device = device
        self.expected = expected

    def __reduce__(self):
        return (_rebuild_mismatch, (str(self), self.argument, self.device, self.expected))


def _rebuild_mismatch(message, argument, device, expected):
    return DeviceMismatchError(message, argument=argument, device=device, expected=expected)


class StreamCaptureError(CudaError):
    """An operation is illegal during stream capture, or the capture was invalidated."""


# CUresult code -> exception class. Codes not listed raise plain CudaError.
_CLASS_BY_CODE: dict[int, type[CudaError]] = {
    1: InvalidValueError,          # CUDA_ERROR_INVALID_VALUE
    2: CudaOutOfMemoryError,       # CUDA_ERROR_OUT_OF_MEMORY
    3: InvalidContextError,        # CUDA_ERROR_NOT_INITIALIZED
    4: InvalidContextError,        # CUDA_ERROR_DEINITIALIZED
    34: NoDriverError,             # CUDA_ERROR_STUB_LIBRARY (placeholder; special-cased)
    36: NotSupportedError,         # CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER
    100: NoDeviceError,            # CUDA_ERROR_NO_DEVICE
    101: NoDeviceError,            # CUDA_ERROR_INVALID_DEVICE
    200: ModuleLoadError,          # CUDA_ERROR_INVALID_IMAGE
    201: InvalidContextError,      # CUDA_ERROR_INVALID_CONTEXT
    202: InvalidContextError,      # CUDA_ERROR_CONTEXT_ALREADY_CURRENT
    209: ModuleLoadError,          # CUDA_ERROR_NO_BINARY_FOR_GPU
    214: KernelFaultError,         # CUDA_ERROR_ECC_UNCORRECTABLE
    215: NotSupportedError,        # CUDA_ERROR_UNSUPPORTED_LIMIT
    216: InvalidContextError,      # CUDA_ERROR_CONTEXT_ALREADY_IN_USE
    217: NotSupportedError,        # CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    218: ModuleLoadError,          # CUDA_ERROR_INVALID_PTX
    221: ModuleLoadError,          # CUDA_ERROR_JIT_COMPILER_NOT_FOUND
    222: ModuleLoadError,          # CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    223: ModuleLoadError,          # CUDA_ERROR_JIT_COMPILATION_DISABLED
    300: ModuleLoadError,          # CUDA_ERROR_INVALID_SOURCE
    301: ModuleLoadError,          # CUDA_ERROR_FILE_NOT_FOUND
    400: InvalidHandleError,       # CUDA_ERROR_INVALID_HANDLE
    500: NotFoundError,            # CUDA_ERROR_NOT_FOUND
    600: NotReadyError,            # CUDA_ERROR_NOT_READY
    700: IllegalAddressError,      # CUDA_ERROR_ILLEGAL_ADDRESS
    701: LaunchError,              # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    702: KernelFaultError,         # CUDA_ERROR_LAUNCH_TIMEOUT
    703: LaunchError,              # CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING
    709: InvalidContextError,      # CUDA_ERROR_CONTEXT_IS_DESTROYED
    710: DeviceAssertionError,     # CUDA_ERROR_ASSERT
    714: KernelFaultError,         # CUDA_ERROR_HARDWARE_STACK_ERROR
    715: KernelFaultError,         # CUDA_ERROR_ILLEGAL_INSTRUCTION
    716: KernelFaultError,         # CUDA_ERROR_MISALIGNED_ADDRESS
    717: KernelFaultError,         # CUDA_ERROR_INVALID_ADDRESS_SPACE
    718: KernelFaultError,         # CUDA_ERROR_INVALID_PC
    719: KernelFaultError,         # CUDA_ERROR_LAUNCH_FAILED
    720: LaunchError,              # CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
    801: NotSupportedError,        # CUDA_ERROR_NOT_SUPPORTED
    804: NotSupportedError,        # CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
    811: NotSupportedError,        # CUDA_ERROR_CDP_NOT_SUPPORTED
    900: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    901: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    902: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_MERGE
    903: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
    904: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_UNJOINED
    905: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_ISOLATION
    906: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    907: StreamCaptureError,       # CUDA_ERROR_CAPTURED_EVENT
    908: StreamCaptureError,       # CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
    912: LaunchError,              # CUDA_ERROR_INVALID_CLUSTER_SIZE
}

# Errors after which the context is corrupted and every later call fails with the same
# code (the CUDA Programming Guide calls them sticky).
STICKY_CODES = frozenset({214, 700, 702, 710, 714, 715, 716, 717, 718, 719})

# Descriptions used when cuGetErrorString cannot be called (no driver, or the driver
# itself is what failed); the driver's own text is preferred whenever it answers.
_FALLBACK_DESCRIPTIONS = {
    1: "invalid argument",
    2: "out of memory",
    3: "initialization error",
    4: "driver shutting down",
    34: "CUDA driver is a stub library",
    100: "no CUDA-capable device is detected",
    101: "invalid device ordinal",
    200: "device kernel image is invalid",
    201: "invalid device context",
    209: "no kernel image is available for execution on the device",
    218: "a PTX JIT compilation failed",
    222: "the provided PTX was compiled with an unsupported toolchain",
    400: "invalid resource handle",
    500: "named symbol not found",
    600: "device not ready",
    700: "an illegal memory access was encountered",
    701: "too many resources requested for launch",
    710: "device-side assert triggered",
    715: "an illegal instruction was encountered",
    716: "misaligned address",
    719: "unspecified launch failure",
    720: "too many blocks in cooperative launch",
    801: "operation not supported",
    912: "invalid cluster size",
    999: "unknown error",
}


def _code_name(code: int | None) -> str:
    if code is None:
        return "CUPRIC_ERROR"
    try:
        from cuda.bindings import driver
        return driver.CUresult(code).name
    except Exception:  # unknown code, or cuda-python absent: a name is still owed
        return f"CUresult({code})"


def _describe(code: int | None) -> str:
    if code is None:
        return ""
    try:
        from cuda.bindings import driver
        err, text = driver.cuGetErrorString(driver.CUresult(code))
        if int(err) == 0 and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # no driver library: fall back to our own table below
        pass
    return _FALLBACK_DESCRIPTIONS.get(code, "no description available")


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"


# The first sticky error seen per context handle (an int; 0 where unknown). Guarded by a
# lock because several threads may observe the same fault at once.
_poison: dict[int, CudaError] = {}
_poison_lock = threading.Lock()


def reset_context_poison(context_handle: int | None = None) -> None:
    """Forget the sticky error recorded for a context (all contexts with None).

    Called after the primary context has been reset, which makes it usable again.
    """
    with _poison_lock:
        if context_handle is None:
            _poison.clear()
        else:
            _poison.pop(int(context_handle), None)


def _current_context_key() -> int:
    try:
        from cuda.bindings import driver
        err, ctx = driver.cuCtxGetCurrent()
        return int(ctx) if int(err) == 0 else 0
    except Exception:  # error path of an error path: an unknown context still works as a key
        return 0


#: Hooks ``explain(code, error)`` run when a kernel fault first poisons a context: one
#: that knows more (the compiler's device-side error record: kernel, file:line, index)
#: adds it to the error's message and attributes. They read host memory only.
FAULT_EXPLAINERS: list = []


def _explain_fault(code: int, error) -> None:
    for explain in FAULT_EXPLAINERS:
        try:
            explain(code, error)
        except Exception as exc:  # the fault itself must still be raised
            error.add_note(f"(reading the device-side error record failed: {exc})")


def error_from_code(code, message: str | None = None, *,
                    requested: int | None = None) -> CudaError:
    """The exception for a failing `CUresult` (an int or the enum), ready to raise.

    A sticky code seen for the first time in the current context gives its own error class
    and is recorded; a sticky code seen again gives `ContextLostError` naming the first.
    `requested` (bytes) goes into the message of an out-of-memory error.
    """
    code = int(code)
    if code in STICKY_CODES:
        key = _current_context_key()
        with _poison_lock:
            first = _poison.get(key)
            lost = first is None
            if lost:
                first = _CLASS_BY_CODE.get(code, KernelFaultError)(code, message)
                _explain_fault(code, first)
                _poison[key] = first
        if lost:
            # Nothing is released through the lost context any more (see Context.reset).
            from .context import _on_context_lost
            _on_context_lost(key)
            return first
        return ContextLostError(code, first)
    if code == 34:  # the stub libcuda of a toolkit, without a real driver behind it
        return NoDriverError("the loaded libcuda.so is the toolkit's stub library, not an "
                             "NVIDIA driver; install the NVIDIA display driver")
    if code == 2:
        return _out_of_memory(message, requested)
    cls = _CLASS_BY_CODE.get(code, CudaError)
    return cls(code, message)


def _out_of_memory(message: str | None, requested: int | None = None) -> CudaOutOfMemoryError:
    free = total = None
    try:
        from cuda.bindings import driver
        err, free, total = driver.cuMemGetInfo()
        if int(err) != 0:
            free = total = None
    except Exception:  # no context current: the message just omits the free memory
        free = total = None
    return CudaOutOfMemoryError(2, message, requested=requested, free=free, total=total)
