"""cuDNN handles: the library context every call takes, bound to one device and stream.

A ``cudnnHandle_t`` holds cuDNN's state on one device (made in the device's primary
context, the one PyTorch and CuPy use) and the stream its work is queued on
(``cudnnSetStream``). cupric's handle also owns the workspace that convolution plans
need, allocated in stream order from the device's memory pool and grown on demand, and
the per-shape cache of execution plans (`cupric.cudnn.graph`).
"""

from __future__ import annotations

import threading

import numpy as np

from cupric.runtime._lifetime import Resource
from cupric.runtime.errors import ClosedError
from cupric.runtime.shared_handles import SharedHandles, stream_device, stream_parts

__all__ = ["Handle", "default_handle", "resolve", "stream_of"]


class _Owned:
    """What a handle owns besides its cudnnHandle_t, for the finalizer (never `self`)."""

    __slots__ = ("workspace", "plans", "device", "stream")

    def __init__(self, device: int, stream: int):
        self.workspace = None
        self.plans = {}
        self.device = device
        self.stream = stream


def _release_plans(owned: _Owned) -> None:
    plans, owned.plans = owned.plans, {}
    for plan in plans.values():
        if plan is not None:
            plan.close()


def _destroy(raw: int, owned: _Owned) -> None:
    from cupric.runtime.device import Device

    from . import lib
    Device(owned.device).make_current()
    try:
        # Plans reference the handle: they go first.
        _release_plans(owned)
        lib.check(lib.lib.cudnnDestroy(lib.ffi.cast("cudnnHandle_t", raw)))
    finally:
        workspace, owned.workspace = owned.workspace, None
        if workspace is not None:
            # Freed in the handle's stream order, after every plan that used it.
            workspace.close(stream=owned.stream)




class Handle(Resource):
    """A cuDNN handle bound to one device and one stream (no public constructor).

    `Handle.get(device, stream)` returns the shared handle of a (device, stream) pair;
    `Handle.create` a private one. The handle owns a workspace (grown on demand from the
    device's stream-ordered memory pool) and the execution plans built for it;
    `close()` or garbage collection releases all of them.

    Thread safety
    -------------
    cuDNN allows one handle to be used from several threads as long as the calls are
    ordered on its stream; cupric serializes workspace growth and the plan cache with a
    lock. Work queued from several threads runs in stream order, which is why sharing
    the workspace is safe.

    Examples
    --------
    >>> from cupric import cudnn, runtime as rt                       # doctest: +SKIP
    >>> stream = rt.Device(0).create_stream()
    >>> with cudnn.Handle.create(stream=stream) as h:
    ...     y = cudnn.conv2d(x, w, padding=1, handle=h)
    """

    __slots__ = ("_ptr", "_device", "_stream_ptr", "_stream_obj", "_owned", "_lock",
                 "_key", "_ctx", "_multi", "_replays")

    _shared = SharedHandles()

    def __init__(self, *args, **kwargs):
        raise TypeError("Handle has no public constructor; use cudnn.Handle.get(device, "
                        "stream) or cudnn.Handle.create(device, stream)")

    @classmethod
    def create(cls, device=None, stream=None) -> "Handle":
        """A new handle owned by the caller.

        Parameters
        ----------
        device : Device or int, optional
            Defaults to the stream's device, else the calling thread's current device.
        stream : Stream, int handle, or stream-like (PyTorch, CuPy), optional
            Calls are queued there; None is the legacy default stream (PyTorch's
            default stream too).

        Raises
        ------
        CudnnError
            If cuDNN cannot create the handle (no usable GPU, driver too old).
        LibraryNotFoundError
            If cuDNN is not installed (``pip install nvidia-cudnn-cu13``).

        Cost
        ----
        ``cudnnCreate``: tens of milliseconds the first time in a process (it loads
        cuDNN's sub-libraries), about a millisecond later.
        """
        from cupric.runtime.device import Device, device_count

        from . import lib
        if device is None:
            device = stream_device(stream)
        dev = Device(device) if device is not None else Device.current()
        ctx = dev.make_current()
        ffi = lib.ffi
        out = ffi.new("cudnnHandle_t *")
        lib.check(lib.lib.cudnnCreate(out))
        raw = int(ffi.cast("uintptr_t", out[0]))
        stream_ptr, stream_obj = stream_parts(stream)
        self = cls.__new__(cls)
        self._ptr = raw
        self._device = dev.ordinal
        self._stream_ptr = stream_ptr
        self._stream_obj = stream_obj
        self._owned = _Owned(dev.ordinal, stream_ptr)
        self._lock = threading.RLock()
        self._key = None
        self._ctx = int(ctx.ptr)
        self._multi = device_count() > 1
        # Replay entries of checked calls (`cupric.cudnn._replay`), key -> capsule.
        self._replays = {}
        self._init_resource(raw, _destroy, self._owned)
        try:
            lib.check(lib.lib.cudnnSetStream(ffi.cast("cudnnHandle_t", raw),
                                             ffi.cast("cudaStream_t", stream_ptr)))
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def get(cls, device=None, stream=None) -> "Handle":
        """The shared handle of (device, stream), created once.

        Reused by every caller asking for the same pair, together with its workspace and
        plan cache; `close()` on it removes it from the sharing table.
        """
        return cls._shared.get(device, stream, lambda ordinal: cls.create(ordinal, stream))

    @classmethod
    def from_handle(cls, raw, *, device: int = 0, stream=None) -> "Handle":
        """Borrow a ``cudnnHandle_t`` made elsewhere; cupric never destroys it.

        Parameters
        ----------
        raw : int
            The handle's address.
        device : int
            Ordinal of the device it was created on.
        stream : stream-like, optional
            The stream it is bound to (cupric does not change it).

        Safety
        ------
        The owner must keep the handle alive while cupric uses it, and must not change
        its stream behind cupric's back.
        """
        stream_ptr, stream_obj = stream_parts(stream)
        self = cls.__new__(cls)
        self._ptr = int(raw)
        self._device = int(device)
        self._stream_ptr = stream_ptr
        self._stream_obj = stream_obj
        self._owned = _Owned(int(device), stream_ptr)
        self._lock = threading.RLock()
        self._key = None
        self._ctx = 0
        self._multi = False
        self._replays = {}
        self._init_resource(int(raw), None)
        return self

    # -- state ---------------------------------------------------------------------------

    def _label(self) -> str:
        return f"cuDNN handle (device {self._device})"

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"0x{self._ptr:x}"
        return (f"<cupric.cudnn.Handle {state} device={self._device} "
                f"stream=0x{self._stream_ptr:x}>")

    @property
    def device(self) -> int:
        """Ordinal of the handle's device."""
        return self._device

    @property
    def stream(self) -> int:
        """The raw stream handle calls are queued on (0: legacy default stream)."""
        return self._stream_ptr

    @property
    def stream_object(self):
        """The stream object the handle was made with (None for raw handles)."""
        return self._stream_obj

    @property
    def workspace_bytes(self) -> int:
        """Bytes of workspace the handle currently owns."""
        ws = self._owned.workspace
        return 0 if ws is None else ws.nbytes

    @property
    def plans(self) -> dict:
        """The handle's plan cache (key -> `graph.Plan`); see `graph.PlanCache`."""
        return self._owned.plans

    @property
    def lock(self):
        """The lock serializing workspace growth and plan-cache updates."""
        return self._lock

    def ready(self):
        """The raw ``cudnnHandle_t`` (cffi), checked usable for a call now.

        Raises `ClosedError` for a closed handle or a closed stream; with several GPUs,
        makes the handle's device current in the calling thread when it is not.
        """
        if self._closed:
            raise ClosedError("this cuDNN Handle is closed")
        stream = self._stream_obj
        if stream is not None and getattr(stream, "_closed", False):
            raise ClosedError("the stream this cuDNN Handle is bound to was closed")
        if self._multi:
            self._make_current()
        from . import lib
        return lib.ffi.cast("cudnnHandle_t", self._ptr)

    @property
    def ptr(self) -> int:
        """The raw ``cudnnHandle_t`` as an int."""
        if self._closed:
            raise ClosedError("this cuDNN Handle is closed")
        return self._ptr

    def _make_current(self) -> None:
        from cupric.runtime._driver import check, driver
        if int(check(driver().cuCtxGetCurrent())) != self._ctx:
            from cupric.runtime.device import Device
            Device(self._device).make_current()

    def check_device(self, buf, name: str, op: str) -> None:
        """Raise ValueError if `buf` lives on another device than the handle's (asked of
        the driver only when the machine has several GPUs)."""
        if self._multi and buf.ptr and buf.device != self._device:
            raise ValueError(f"{op}: {name} lives on device {buf.device} but the cuDNN "
                             f"handle is bound to device {self._device}")

    def workspace(self, nbytes: int) -> int:
        """Address of at least `nbytes` of workspace (0 when `nbytes` is 0).

        The workspace grows to the largest request seen: a larger one frees the old
        block in stream order and allocates a new one on the handle's stream from the
        device's memory pool, so work already queued keeps its memory.

        Safety
        ------
        The address is valid for work queued on the handle's stream until the next
        larger request; never hand it to work on another stream.

        Cost
        ----
        A dictionary-free attribute read when the workspace is large enough; otherwise
        one ``cuMemFreeAsync`` and one ``cuMemAllocAsync``.
        """
        if nbytes <= 0:
            return 0
        owned = self._owned
        ws = owned.workspace
        if ws is not None and ws.nbytes >= nbytes:
            return ws.ptr
        with self._lock:
            ws = owned.workspace
            if ws is not None and ws.nbytes >= nbytes:
                return ws.ptr
            from cupric.runtime.memory import empty
            self.ready()
            if _capturing(self._stream_ptr):
                # Growing would free the old block inside the graph and allocate one
                # whose lifetime the graph owns: refuse, before anything is queued.
                raise RuntimeError(
                    f"the cuDNN workspace must grow to {nbytes} bytes while the handle's "
                    f"stream is being captured into a graph; run the call once before "
                    f"capturing, or call reserve_workspace({nbytes})")
            # Round up so that a slowly growing sequence of requests does not reallocate
            # each time.
            size = max(nbytes, 1 << 20)
            size = (size + (1 << 20) - 1) & ~((1 << 20) - 1)
            new = empty(size, np.uint8, stream=self._stream_ptr)
            owned.workspace = new
            if ws is not None:
                ws.close(stream=self._stream_ptr)
            return new.ptr

    def reserve_workspace(self, nbytes: int) -> int:
        """Grow the workspace to at least `nbytes` now (before a graph capture, whose
        calls may not grow it); returns its address.

        Raises
        ------
        ValueError
            For a negative size.
        """
        if nbytes < 0:
            raise ValueError(f"reserve_workspace: nbytes must be >= 0, got {nbytes}")
        return self.workspace(max(int(nbytes), 1))

    def synchronize(self) -> None:
        """Wait for the work queued on the handle's stream."""
        from cupric.runtime._driver import check, driver
        self.ready()
        check(driver().cuStreamSynchronize(self._stream_ptr))

    def clear_plans(self) -> None:
        """Drop every cached execution plan and replay entry (rebuilt on next use)."""
        with self._lock:
            self._replays.clear()
            _release_plans(self._owned)

    def close(self) -> None:
        """Destroy the plans and the cuDNN handle, and free the workspace in stream order.

        A borrowed handle (`from_handle`) releases its plans and workspace only.

        Raises
        ------
        CudnnError
            If ``cudnnDestroy`` fails (the handle is closed anyway).
        """
        if self._closed:
            return
        Handle._shared.discard(self)
        self._replays.clear()
        borrowed = not self.owns_handle
        super().close()
        if borrowed:
            owned = self._owned
            _release_plans(owned)
            workspace, owned.workspace = owned.workspace, None
            if workspace is not None:
                workspace.close(stream=owned.stream)


def _capturing(stream: int) -> bool:
    """Whether stream `stream` is being captured (the default streams never are)."""
    if stream <= 2:
        return False
    from cupric.runtime.array_adapters import stream_capturing
    return stream_capturing(stream)


_tls = threading.local()


def default_handle(stream=None) -> Handle:
    """The shared handle of the calling thread's current device and `stream` (the legacy
    default stream when None, which PyTorch's default stream also is).

    Cost
    ----
    On a machine with one GPU, an attribute read after the first call; with several,
    the current device is asked each time (the thread may have switched devices).
    """
    if stream is None:
        handle = getattr(_tls, "handle", None)
        if handle is None or handle._closed or handle._multi:
            handle = Handle.get()
            _tls.handle = handle
        return handle
    return Handle.get(stream=stream)


def resolve(handle, stream=None) -> Handle:
    """`handle`, or the shared handle of `stream` when None.

    Raises
    ------
    TypeError
        For something that is not a cupric.cudnn.Handle.
    ValueError
        When both a handle and a different stream are given.
    """
    if handle is None:
        return default_handle(stream)
    if not isinstance(handle, Handle):
        raise TypeError(f"handle must be a cupric.cudnn.Handle, got {type(handle).__name__}")
    if stream is not None:
        ptr = stream_parts(stream)[0]
        if ptr != handle.stream:
            raise ValueError(f"stream 0x{ptr:x} differs from the handle's stream "
                             f"0x{handle.stream:x}; pass one of them")
    return handle


def stream_of(handle, stream) -> int:
    """The raw stream an operation will run on, known without creating a handle (so that
    arguments are validated before anything touches the GPU)."""
    if handle is not None and isinstance(handle, Handle):
        return handle.stream
    return stream_parts(stream)[0]
