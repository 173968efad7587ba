"""cuDNN handles: the library context every call takes, bound to one device and stream.

A ``cudnnHandle_t`` holds cuDNN's state on one device (made in the device's primary
context, the one PyTorch and CuPy use) and the stream its work is queued on
(``cudnnSetStream``). cupric's handle also owns the workspace that convolution plans
need, allocated in stream order from the device's memory pool and grown on demand, and
the per-shape cache of execution plans (`cupric.cudnn.engine_choice`).
"""

from __future__ import annotations

import threading

import numpy as np

from cupric.runtime.errors import ClosedError
from cupric.runtime.resource import SharedHandles, StreamBoundHandle, stream_parts

__all__ = ["Handle", "default_handle", "resolve", "stream_of", "release_idle_handles"]


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
        if not _keep_idle(owned.device, raw):
            lib.check(lib.lib.cudnnDestroy(lib.ffi.cast("cudnnHandle_t", raw)))
    finally:
        workspace, owned.workspace = owned.workspace, None
        if workspace is not None:
            # Freed in the handle's stream order, after every plan that used it.
            workspace.close(stream=owned.stream)




# Raw cudnnHandle_t objects of closed handles, kept per device for the next `create`
# (at most _KEEP_IDLE each). A cudnnCreate/cudnnDestroy pair costs milliseconds and a
# device synchronization, and leaves device and host memory behind inside cuDNN on every
# pair (the soak's handle cycles grew by about 7 KB of device memory and 20 KB of RSS
# per pair, with nothing left on cupric's side); reusing the raw handle avoids all three.
_KEEP_IDLE = 4
_idle: dict = {}  # device ordinal -> [raw handle, ...]
_idle_lock = threading.Lock()


def _keep_idle(ordinal: int, raw: int) -> bool:
    """Keep `raw` (its Handle closed, its plans released) for reuse; False when full."""
    with _idle_lock:
        kept = _idle.setdefault(ordinal, [])
        if len(kept) >= _KEEP_IDLE:
            return False
        from . import lib
        # Bound to no stream while kept: its old stream may be destroyed meanwhile.
        lib.check(lib.lib.cudnnSetStream(lib.ffi.cast("cudnnHandle_t", raw),
                                         lib.ffi.NULL))
        kept.append(raw)
        return True


def _take_idle(ordinal: int) -> int | None:
    with _idle_lock:
        kept = _idle.get(ordinal)
        return kept.pop() if kept else None


def release_idle_handles() -> int:
    """Destroy (``cudnnDestroy``) the raw cuDNN handles that closed `Handle`s left for
    reuse; returns how many. They are otherwise kept, at most four per device, until
    the process ends or the device's context is reset.

    Cost
    ----
    ``cudnnDestroy`` synchronizes the device, once per handle.
    """
    from cupric.runtime.device import Device

    from . import lib
    with _idle_lock:
        taken = [(ordinal, raw) for ordinal, kept in _idle.items() for raw in kept]
        _idle.clear()
    for ordinal, raw in taken:
        Device(ordinal).make_current()
        lib.check(lib.lib.cudnnDestroy(lib.ffi.cast("cudnnHandle_t", raw)))
    return len(taken)


def _forget_idle(ordinal: int) -> None:
    # The device's context was reset: its handles died with it (no driver call here).
    with _idle_lock:
        _idle.pop(ordinal, None)


def _register_reset_hook() -> None:
    from cupric.runtime.context import on_reset
    on_reset(_forget_idle)


_register_reset_hook()


class Handle(StreamBoundHandle):
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

    __slots__ = ("_replays",)

    library = "cuDNN"
    _shared = SharedHandles()
    _owned_type = _Owned
    _lock_type = staticmethod(threading.RLock)
    _binding, _c_type, _c_create = "cupric.cudnn.lib", "cudnnHandle_t", "cudnnCreate"
    _destroy = staticmethod(_destroy)

    def _init_state(self) -> None:
        # Replay entries of checked calls (`cupric.cudnn._replay`), key -> capsule.
        self._replays = {}

    def _call_arg(self):
        from . import lib
        return lib.ffi.cast("cudnnHandle_t", self._ptr)

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
        ``cudnnCreate``: the first one in a process loads cuDNN's sub-libraries and is
        much slower than later ones.
        """
        return cls._open(device, stream)

    @classmethod
    def _make_raw(cls) -> int:
        # A raw handle a closed Handle left on this device, else a new one.
        from cupric.runtime.device import Device
        raw = _take_idle(Device.current().ordinal)
        return super()._make_raw() if raw is None else raw

    def _setup(self, dev) -> None:
        from . import lib
        ffi = lib.ffi
        lib.check(lib.lib.cudnnSetStream(ffi.cast("cudnnHandle_t", self._ptr),
                                         ffi.cast("cudaStream_t", self._stream_ptr)))

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
        return cls._borrow(raw, device, stream)

    # -- state ---------------------------------------------------------------------------

    @property
    def plans(self) -> dict:
        """The handle's plan cache (key -> `plans.Plan`); see `engine_choice.plan_for`."""
        return self._owned.plans

    @property
    def lock(self):
        """The lock serializing workspace growth and plan-cache updates."""
        return self._lock

    @property
    def ptr(self) -> int:
        """The raw ``cudnnHandle_t`` as an int."""
        if self._closed:
            raise ClosedError("this cuDNN Handle is closed")
        return self._ptr

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
        if handle is None or handle.closed or handle.multi_device:
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
