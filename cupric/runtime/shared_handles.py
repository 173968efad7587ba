"""One library handle per (device, stream): the sharing table the library wrappers
(cuBLAS, cuDNN, ...) use for their `Handle.get(device, stream)`.

A CUDA library handle is bound to a device and a stream and costs a driver round trip and
often a workspace to make; callers that ask for the same pair share one.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable

__all__ = ["stream_parts", "stream_device", "SharedHandles"]


from .stream import stream_parts  # noqa: E402  (the one resolver, re-exported)


def stream_device(stream):
    """The device a stream object names (cupric `Stream`: a `Device`; PyTorch: a
    `torch.device` with an index), else None, meaning the current device."""
    device = getattr(stream, "device", None)
    if device is None or isinstance(device, int):
        return device
    from .device import Device
    if isinstance(device, Device):
        return device
    index = getattr(device, "index", None)  # torch.device
    return index if isinstance(index, int) else None


class SharedHandles:
    """The table of shared handles of one library, keyed by (device ordinal, stream).

    Handles put here need a writable `_key` attribute and a `_closed` flag; their
    `close()` calls `discard(self)`.

    Thread safety
    -------------
    `get` and `discard` may be called from any thread; two threads asking for a new pair
    at once get the same handle.
    """

    def __init__(self) -> None:
        self._handles: dict[tuple[int, int], object] = {}
        # Reentrant: `create` runs driver calls whose `check` drains deferred releases,
        # and a stream's release calls `_forget` on this table from the same thread.
        self._lock = threading.RLock()
        _tables.add(self)

    def _forget(self, which) -> None:
        """Close and forget the handles whose key satisfies `which`."""
        with self._lock:
            gone = [key for key in self._handles if which(key)]
            handles = [self._handles.pop(key) for key in gone]
        for handle in handles:  # outside the lock: close() calls discard()
            handle.close()

    def _forget_device(self, ordinal: int) -> None:
        """Close and forget the handles of device `ordinal` (its context was reset: their
        releases were turned off, so closing only marks them closed)."""
        self._forget(lambda key: key[0] == ordinal)

    def get(self, device, stream, create: Callable[[int], object]):
        """The shared handle of (`device`, `stream`), made by `create(ordinal)` if none
        is open. `device` None means the stream's device, else the current one."""
        from .device import Device
        if device is None:
            device = stream_device(stream)
        ordinal = Device(device).ordinal if device is not None else Device.current().ordinal
        key = (ordinal, stream_parts(stream)[0])
        handle = self._handles.get(key)
        if handle is not None and not handle._closed:
            return handle
        with self._lock:
            handle = self._handles.get(key)
            if handle is None or handle._closed:
                handle = create(ordinal)
                handle._key = key
                self._handles[key] = handle
        return handle

    def discard(self, handle) -> None:
        """Forget `handle` if it is the shared one of its pair (called by its `close`)."""
        key = handle._key
        if key is None:
            return
        with self._lock:
            if self._handles.get(key) is handle:
                del self._handles[key]


_tables: weakref.WeakSet = weakref.WeakSet()


def _forget_device(ordinal: int) -> None:
    for table in list(_tables):
        table._forget_device(ordinal)


def _forget_stream(handle) -> None:
    # Before a stream is destroyed: its handles go with it (a new stream may get the
    # same address, and must not find a handle bound to the old one).
    h = int(handle)
    for table in list(_tables):
        table._forget(lambda key: key[1] == h)


def _register_reset_hook() -> None:
    from . import _lifetime
    from .context import on_reset
    from .stream import _destroy_stream
    on_reset(_forget_device)
    _lifetime.before_release(_destroy_stream, _forget_stream)


_register_reset_hook()
