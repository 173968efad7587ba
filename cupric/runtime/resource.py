"""Owned and borrowed handles: the public base classes the library wrappers build on.

Every CUDA object cupric wraps (a stream, a module, a cuBLAS or cuDNN handle, an NCCL
communicator, an OptiX context...) must be released exactly once: by `close()`, or after
its Python object dies (deferred to a safe moment: a finalizer never calls the driver).
`Resource` is that contract (see `cupric.runtime._lifetime`, which implements it, for the
details: deferred releases, context-reset epochs, the exit hook).

A CUDA library handle (``cublasHandle_t``, ``cudnnHandle_t``) is in addition bound to one
device and one stream, costs a driver round trip to make, and is shared by every caller
that asks for the same (device, stream) pair. `StreamBoundHandle` is that common body:
creation in the device's primary context, the sharing table, borrowing a handle made
elsewhere (`from_handle`), the per-call readiness check, and forgetting the handles of a
device whose context was reset or of a stream being destroyed.
"""

from __future__ import annotations

import threading

from ._lifetime import (Resource, TrackedResource, before_release, drain, forget, live_count,
                        pending_count, retire_epoch)
from .errors import ClosedError
from .shared_handles import SharedHandles, stream_device, stream_parts

__all__ = ["Resource", "TrackedResource", "StreamBoundHandle", "SharedHandles", "drain",
           "pending_count", "live_count", "retire_epoch", "forget", "before_release",
           "stream_device", "stream_parts", "on_stream_destroyed"]


def on_stream_destroyed(callback) -> None:
    """Run ``callback(raw_stream)`` just before cupric destroys a stream it made (while
    the handle is still valid): tables that remember raw stream handles (shared library
    handles, per-stream workspaces) drop them, since a new stream may get the address.
    Skipped for streams of a context that was reset (their handles are already gone).
    """
    from .stream import _destroy_stream
    before_release(_destroy_stream, callback)


class StreamBoundHandle(Resource):
    """Base of a library handle bound to one device and one stream (no public
    constructor: `get`, the subclass's `create`, or `from_handle`).

    A subclass sets `library` (the name in messages), `_shared = SharedHandles()` (its
    own sharing table), `_binding`, `_c_type` and `_c_create` (how `_make_raw` creates
    the library handle), `_owned_type` (what the handle owns besides its raw handle,
    built as ``_owned_type(device, stream_ptr)`` and handed to the release, never
    `self`) and `_lock_type`; it implements `_destroy` (a plain function ``(raw,
    owned)``) and, where needed, `_init_state` (its own slots), `_call_arg` (what
    `ready` returns) and `_setup` (binding the stream and options; run in a ``try`` that
    closes the handle on failure).

    Attributes
    ----------
    stream : int
        The raw stream handle calls are queued on (0: legacy default stream).
    multi_device : bool
        True where the machine had several GPUs when the handle was made: `ready` then
        makes the handle's device current, and per-call shortcuts that skip `ready` must
        not be taken.
    owned
        What the handle owns besides its raw handle (an ``_owned_type`` instance: its
        workspace and the library's own state).

    These three are plain slots (read them, never write them): the wrappers read them
    on every call, where a property would cost a Python call.

    Thread safety
    -------------
    `get` may be called from any thread: two threads asking for a new pair get the same
    handle. `close` races as `Resource.close` does (one release).
    """

    __slots__ = ("_ptr", "_arg", "_device", "_stream_ptr", "_stream_obj", "_owned",
                 "_lock", "_key", "_ctx", "_multi")

    library = "library"
    _binding: str  # the cffi binding module, e.g. "cupric.cublas.lib"
    _c_type: str  # the C handle type, e.g. "cublasHandle_t"
    _c_create: str  # the C function that makes one, e.g. "cublasCreate"
    _shared: SharedHandles
    _owned_type: type
    _lock_type = staticmethod(threading.Lock)

    def __init__(self, *args, **kwargs):
        module = type(self).__module__.rsplit(".", 1)[0]
        raise TypeError(f"Handle has no public constructor; use {module}.Handle.get(device, "
                        f"stream), {module}.Handle.create(device, stream) or "
                        f"{module}.Handle.from_handle(raw)")

    # -- what a subclass provides ------------------------------------------------------

    @classmethod
    def _make_raw(cls) -> int:
        """Create the library handle in the current context (``<create>(&handle)``
        through the cffi binding named by `_binding`, `_c_type`, `_c_create`)."""
        import importlib
        lib = importlib.import_module(cls._binding)
        out = lib.ffi.new(f"{cls._c_type} *")
        lib.check(getattr(lib.lib, cls._c_create)(out))
        return int(lib.ffi.cast("uintptr_t", out[0]))

    @staticmethod
    def _destroy(raw: int, owned) -> None:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _init_state(self) -> None:
        """Set the subclass's own slots (called before the handle is usable)."""

    def _call_arg(self):
        """What `ready` returns: the handle as the library's calls take it."""
        return self._ptr

    def _setup(self, device) -> None:
        """Bind the stream, allocate, apply options (`device`: the runtime `Device`)."""

    # -- construction ------------------------------------------------------------------

    @classmethod
    def _blank(cls, raw: int, device: int, stream, multi: bool):
        self = cls.__new__(cls)
        self._ptr = int(raw)
        self._device = device
        self._stream_ptr, self._stream_obj = stream_parts(stream)
        self._owned = cls._owned_type(device, self._stream_ptr)
        self._lock = cls._lock_type()
        self._multi = multi
        self._ctx = 0
        self._key = None
        self._arg = None  # made by the first `ready` (a borrowed handle loads nothing)
        self._init_state()
        return self

    @classmethod
    def _open(cls, device, stream, **setup):
        """A new owned handle on `device` (None: the stream's, else the current one)
        bound to `stream`; ``_setup(dev, **setup)`` finishes it."""
        from .device import Device, device_count
        if device is None:
            device = stream_device(stream)
        dev = Device(device) if device is not None else Device.current()
        ctx = dev.make_current()
        raw = cls._make_raw()
        self = cls._blank(raw, dev.ordinal, stream, device_count() > 1)
        self._ctx = int(ctx.ptr)
        self._init_resource(raw, cls._destroy, self._owned)
        try:
            self._setup(dev, **setup)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def get(cls, device=None, stream=None):
        """The shared handle of (device, stream), created with default options once.

        Reused by every caller that asks for the same pair; `close()` on it removes it
        from the sharing table. Take a private handle (`create`) for other options.
        """
        return cls._shared.get(device, stream, lambda ordinal: cls.create(ordinal, stream))

    @classmethod
    def _borrow(cls, raw, device: int, stream):
        """A handle that uses `raw` (made elsewhere) and never destroys it."""
        self = cls._blank(int(raw), int(device), stream, False)
        self._init_resource(int(raw), None)
        return self

    # -- state ---------------------------------------------------------------------------

    def _label(self) -> str:
        return f"{self.library} handle (device {self._device})"

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"0x{self._ptr:x}"
        return (f"<{type(self).__module__.rsplit('.', 1)[0]}.{type(self).__name__} {state} "
                f"device={self._device} stream=0x{self._stream_ptr:x}>")

    @property
    def device(self) -> int:
        """Ordinal of the handle's device."""
        return self._device

    @property
    def stream_object(self):
        """The stream object the handle was made with (None for raw handles)."""
        return self._stream_obj

    @property
    def workspace_bytes(self) -> int:
        """Bytes of workspace the handle owns now."""
        ws = self._owned.workspace
        return 0 if ws is None else ws.nbytes

    def ready(self):
        """The handle as the library's calls take it, checked usable for a call now.

        Raises `ClosedError` for a closed handle or a closed stream; with several GPUs,
        makes the handle's device current in the calling thread when it is not.

        Cost
        ----
        A few attribute tests on a machine with one GPU (called once per library call).
        """
        if self._closed:
            raise ClosedError(f"this {self.library} Handle is closed")
        stream = self._stream_obj
        if stream is not None and getattr(stream, "_closed", False):
            raise ClosedError(f"the stream this {self.library} Handle is bound to was "
                              f"closed")
        if self._multi:
            self._make_current()
        arg = self._arg
        if arg is None:
            arg = self._arg = self._call_arg()
        return arg

    def _make_current(self) -> None:
        from ._driver import check, driver
        if int(check(driver().cuCtxGetCurrent())) != self._ctx:
            from .device import Device
            Device(self._device).make_current()

    def synchronize(self) -> None:
        """Wait for the work queued on the handle's stream."""
        from ._driver import check, driver
        self.ready()
        check(driver().cuStreamSynchronize(self._stream_ptr))

    def close(self) -> None:
        """Release the library handle and what it owns (a borrowed handle only marks
        itself closed), and drop it from the sharing table. A second call does nothing.

        Raises
        ------
        Exception
            The library's error if its destroy call fails (the handle is closed anyway).
        """
        if self._closed:
            return
        self._shared.discard(self)
        super().close()


# The public names of three slots (see the class docstring): the member descriptors
# themselves, so reading them costs what reading the private names does.
StreamBoundHandle.stream = StreamBoundHandle.__dict__["_stream_ptr"]
StreamBoundHandle.multi_device = StreamBoundHandle.__dict__["_multi"]
StreamBoundHandle.owned = StreamBoundHandle.__dict__["_owned"]
