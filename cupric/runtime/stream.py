"""Streams: ordered queues of GPU work (kernels, copies, host callbacks, event records).

Work on one stream runs in order; work on different streams may overlap. The legacy
default stream (handle 0) synchronizes with every blocking stream of its context; the
per-thread default stream and non-blocking streams do not.
"""

from __future__ import annotations

import ctypes
import itertools
import threading

from ._driver import check, driver
from ._lifetime import DeviceResource

__all__ = ["Stream", "HostCallbackError", "as_stream_handle", "stream_parts"]

_LEGACY = 0          # the NULL stream: CU_STREAM_LEGACY semantics under the driver API
_PER_THREAD = 2      # CU_STREAM_PER_THREAD


class HostCallbackError(RuntimeError):
    """A Python callable queued with `Stream.launch_host_func` raised.

    Raised by the next `synchronize()` or `query()` of the stream, chained to the
    callable's exception (``__cause__``); `errors` lists every exception collected.
    """

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"a host callback on this stream raised "
                         f"{type(first).__name__}: {first}{more}")


class _CallbackErrors:
    """Exceptions of host callbacks, shared by a stream and its pending callbacks.

    Kept apart from the Stream so that a pending callback never keeps its stream alive.
    """

    __slots__ = ("errors", "lock")

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()

    def raise_pending(self) -> None:
        if not self.errors:
            return
        with self.lock:
            errors, self.errors = self.errors, []
        if errors:
            raise HostCallbackError(errors) from errors[0]


# token -> (callable, args, _CallbackErrors). Holds each callable until the driver runs it.
_callbacks: dict[int, tuple] = {}
_callbacks_lock = threading.Lock()
_tokens = itertools.count(1)


def _host_trampoline(user_data) -> None:
    # Runs on a driver thread (ctypes takes the GIL). It must not call into CUDA, and it
    # must not raise: ctypes would print the exception and drop it.
    token = int(user_data or 0)
    with _callbacks_lock:
        entry = _callbacks.pop(token, None)
    if entry is None:
        return
    fn, args, sink = entry
    try:
        fn(*args)
    except BaseException as exc:  # handed to the stream's next synchronize(), not dropped
        with sink.lock:
            sink.errors.append(exc)


_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_host_fn_c = _HOST_FN_TYPE(_host_trampoline)  # module-level: lives as long as the process
_host_fn_handle = None


def _host_fn():
    global _host_fn_handle
    if _host_fn_handle is None:
        address = ctypes.cast(_host_fn_c, ctypes.c_void_p).value
        _host_fn_handle = driver().CUhostFn(address)
    return _host_fn_handle


def _destroy_stream(handle) -> None:
    check(driver().cuStreamDestroy(handle))


def as_stream_handle(stream) -> int:
    """The `CUstream` of a stream argument, as an int: the one resolver of stream
    arguments in cupric (`cupric.runtime.intake.stream_handle` is this function).

    Accepts None (the default policy: the legacy default stream, 0), an int handle, a
    cupric `Stream`, an object with `__cuda_stream__` (cuda.core, CuPy >= 13), PyTorch's
    ``cuda_stream`` or CuPy's ``ptr`` attribute, or a cuda.bindings `CUstream`.

    Raises
    ------
    ClosedError
        For a closed cupric `Stream` (its handle may already name another stream).
    TypeError
        For anything else (bools and negative ints included).
    """
    if stream is None:
        return 0
    cls = stream.__class__
    if cls is int:
        if stream < 0:
            raise TypeError(f"a stream handle cannot be negative, got {stream}")
        return stream
    if cls is Stream or isinstance(stream, Stream):
        if stream._closed:
            from .errors import ClosedError
            raise ClosedError("this Stream is closed; its handle may name another stream "
                              "now")
        return stream._ptr
    if isinstance(stream, (bool, float, str, bytes)):
        raise TypeError(f"a {cls.__name__} is not a stream (pass None for the default "
                        f"stream, an int handle or a stream object)")
    if isinstance(stream, int):
        return as_stream_handle(int(stream))
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        _version, handle = proto()
        return int(handle)
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int) and not isinstance(handle, bool):
            return handle
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"not a stream: {cls.__name__} (pass a cupric Stream, an "
                        f"int handle, or an object with __cuda_stream__)") from None


def stream_parts(stream) -> tuple[int, object | None]:
    """``(raw handle, the object to keep alive or None)`` of a stream argument (see
    `as_stream_handle`): library handles bound to a stream hold the second."""
    if stream is None or stream.__class__ is int:
        return as_stream_handle(stream), None
    return as_stream_handle(stream), stream


class Stream(DeviceResource):
    """A CUDA stream (no public constructor: use `Device.create_stream()`).

    Also `Stream.from_handle(h)` to borrow a stream made elsewhere (PyTorch, CuPy), and
    `Device.default_stream()` / `Device.per_thread_stream()` for the special streams.

    Thread safety
    -------------
    Queuing work on one stream from several threads is safe (the driver serializes it),
    but the order between threads is whatever the threads make it.

    Examples
    --------
    >>> s = Device(0).create_stream(non_blocking=True)         # doctest: +SKIP
    >>> s.launch_host_func(print, "done")
    >>> s.synchronize()
    """

    __slots__ = ("_callback_errors",)

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Stream has no public constructor; use Device(n).create_stream(), "
                        "Device(n).default_stream() or Stream.from_handle(handle)")

    @classmethod
    def _create(cls, device, *, non_blocking: bool, priority: int | None) -> Stream:
        d = driver()
        device.make_current()
        flags = int(d.CUstream_flags.CU_STREAM_NON_BLOCKING) if non_blocking else 0
        if priority is None:
            handle = check(d.cuStreamCreate(flags))
        else:
            if not isinstance(priority, int):
                raise TypeError(f"priority must be an int, got {type(priority).__name__}")
            handle = check(d.cuStreamCreateWithPriority(flags, priority))
        return cls._wrap(device, handle, owned=True)

    @classmethod
    def _wrap(cls, device, handle, *, owned: bool) -> Stream:
        self = cls.__new__(cls)
        self._device = device
        self._ptr = int(handle)
        self._callback_errors = _CallbackErrors()
        self._init_resource(handle, _destroy_stream if owned else None)
        return self

    @classmethod
    def _special(cls, device, value: int) -> Stream:
        return cls._wrap(device, driver().CUstream(value), owned=False)

    @classmethod
    def from_handle(cls, handle, device=None) -> Stream:
        """Borrow an existing stream; cupric never destroys it.

        Parameters
        ----------
        handle : int, CUstream, or stream-like
            E.g. ``torch.cuda.current_stream().cuda_stream`` or a CuPy stream.
        device : Device or int, optional
            Its device; defaults to the current device.

        Safety
        ------
        The owner must keep the stream alive while cupric uses it.
        """
        from .device import Device
        ptr = as_stream_handle(handle)
        dev = Device(device) if device is not None else Device.current()
        return cls._wrap(dev, driver().CUstream(ptr), owned=False)

    def _label(self) -> str:
        return f"stream 0x{self._ptr:x}"

    def __repr__(self) -> str:
        kind = {0: "legacy default", 2: "per-thread default"}.get(self._ptr, f"0x{self._ptr:x}")
        state = ", closed" if self._closed else ""
        return f"<cupric.runtime.Stream {kind}, device {self._device.ordinal}{state}>"

    def __int__(self) -> int:
        return self._ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (version 0, handle), read by cuda.core and others."""
        return (0, self._ptr)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other._ptr == self._ptr

    def __hash__(self) -> int:
        return hash(("Stream", self._ptr))

    # -- synchronization ----------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait until all work queued on the stream has finished.

        Raises
        ------
        CudaError
            An asynchronous error of earlier work (e.g. `IllegalAddressError`).
        HostCallbackError
            A host callback of this stream raised.
        """
        handle = self.handle
        if self._ptr in (_LEGACY, _PER_THREAD):
            self._device.make_current()
        check(driver().cuStreamSynchronize(handle))
        self._callback_errors.raise_pending()

    def query(self) -> bool:
        """True if all queued work has finished, False if some is still running.

        Raises
        ------
        CudaError
            An asynchronous error of earlier work.
        HostCallbackError
            A host callback of this stream raised.
        """
        handle = self.handle
        if self._ptr in (_LEGACY, _PER_THREAD):
            self._device.make_current()
        (err,) = driver().cuStreamQuery(handle)
        if err == 600:  # CUDA_ERROR_NOT_READY
            return False
        check((err,))
        self._callback_errors.raise_pending()
        return True

    def wait_event(self, event) -> None:
        """Make later work on this stream wait until `event` has completed (GPU-side)."""
        check(driver().cuStreamWaitEvent(self.handle, event.handle, 0))

    def wait(self, other: Stream) -> None:
        """Make later work on this stream wait for the work queued so far on `other`."""
        event = self._device.create_event(timing=False)
        try:
            event.record(other)
            self.wait_event(event)
        finally:
            event.close()  # safe: the driver keeps the recorded state the wait needs

    def record(self, event=None, *, timing: bool = True):
        """Record an event on this stream (a new one if `event` is None) and return it."""
        if event is None:
            event = self._device.create_event(timing=timing)
        event.record(self)
        return event

    # -- properties ---------------------------------------------------------------------

    @property
    def priority(self) -> int:
        """The stream's priority (lower is higher priority)."""
        return check(driver().cuStreamGetPriority(self.handle))

    @property
    def non_blocking(self) -> bool:
        """Whether the stream is non-blocking with respect to the legacy default stream."""
        d = driver()
        flags = check(d.cuStreamGetFlags(self.handle))
        return bool(int(flags) & int(d.CUstream_flags.CU_STREAM_NON_BLOCKING))

    @property
    def is_capturing(self) -> bool:
        """Whether a stream capture (CUDA graph recording) is active on this stream."""
        d = driver()
        status = check(d.cuStreamIsCapturing(self.handle))
        return status == d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE

    # -- host callbacks -----------------------------------------------------------------

    def launch_host_func(self, fn, *args) -> None:
        """Queue a Python callable to run on a driver thread after earlier stream work.

        Parameters
        ----------
        fn : callable
            Called as ``fn(*args)``; kept alive until it has run.

        Safety
        ------
        The callable must not call CUDA (no cupric runtime calls, no PyTorch/CuPy GPU
        work): the driver forbids it and may deadlock. Later work on the stream waits
        until it returns.

        Raises
        ------
        HostCallbackError
            Not here: an exception of `fn` is raised by this stream's next `synchronize()`
            or `query()`.

        Cost
        ----
        One `cuLaunchHostFunc`; the callable runs with the GIL held.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        handle = self.handle
        token = next(_tokens)
        with _callbacks_lock:
            _callbacks[token] = (fn, args, self._callback_errors)
        try:
            check(driver().cuLaunchHostFunc(handle, _host_fn(), token))
        except BaseException:
            with _callbacks_lock:
                _callbacks.pop(token, None)
            raise

    add_callback = launch_host_func

    def capture(self, mode: str = "global"):
        """Record the work queued on this stream into a CUDA graph.

        Use as ``with stream.capture() as cap: ...``; afterwards ``cap.graph`` is the
        captured `Graph`. See `cupric.runtime.graph`.

        Parameters
        ----------
        mode : {"global", "thread_local", "relaxed"}
            Which unsafe API calls from other threads are prohibited during capture.
        """
        from .graph import StreamCapture
        return StreamCapture(self, mode)

