"""Events: markers recorded into a stream, for ordering between streams and for timing.

An event completes when the stream work queued before its record has finished. Other
streams can wait on it on the GPU (`Stream.wait_event`), the host can wait on it
(`synchronize`), and two timing events measure the GPU time between them.
"""

from __future__ import annotations

from ._driver import check, driver
from ._lifetime import DeviceResource

__all__ = ["Event"]


def _destroy_event(handle) -> None:
    check(driver().cuEventDestroy(handle))


class Event(DeviceResource):
    """A CUDA event (no public constructor: use `Device.create_event()` or
    `Stream.record()`).

    Thread safety
    -------------
    Recording the same event from two threads at once races (the later record wins);
    querying and waiting from any thread is safe.

    Examples
    --------
    >>> start = stream.record(); run(); end = stream.record()   # doctest: +SKIP
    >>> end.synchronize(); start.elapsed_time(end)             # milliseconds
    0.0123
    """

    __slots__ = ("_timing",)

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Event has no public constructor; use Device(n).create_event() "
                        "or stream.record()")

    @classmethod
    def _create(cls, device, *, timing: bool, blocking_sync: bool,
                interprocess: bool) -> Event:
        d = driver()
        if interprocess and timing:
            raise ValueError("an interprocess event must be created with timing=False")
        flags = 0
        if not timing:
            flags |= int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if blocking_sync:
            flags |= int(d.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
        if interprocess:
            flags |= int(d.CUevent_flags.CU_EVENT_INTERPROCESS)
        device.make_current()
        handle = check(d.cuEventCreate(flags))
        self = cls.__new__(cls)
        self._device = device
        self._ptr = int(handle)
        self._timing = timing
        self._init_resource(handle, _destroy_event)
        return self

    @classmethod
    def from_handle(cls, handle, device=None, *, timing: bool = False) -> Event:
        """Borrow an existing `CUevent` (int or cuda.bindings object); never destroyed here."""
        from .device import Device
        dev = Device(device) if device is not None else Device.current()
        self = cls.__new__(cls)
        self._device = dev
        self._ptr = int(handle)
        self._timing = timing
        self._init_resource(driver().CUevent(self._ptr), None)
        return self

    def _label(self) -> str:
        return f"event 0x{self._ptr:x}"

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        timing = "timing" if self._timing else "no timing"
        return f"<cupric.runtime.Event 0x{self._ptr:x}, {timing}{state}>"

    @property
    def timing(self) -> bool:
        """Whether the event records timestamps."""
        return self._timing

    def record(self, stream=None) -> Event:
        """Record the event on `stream` (the legacy default stream if None); returns self."""
        from .stream import as_stream_handle
        handle = self.handle
        d = driver()
        ptr = as_stream_handle(stream)
        if ptr in (0, 2):
            self._device.make_current()
        check(d.cuEventRecord(handle, d.CUstream(ptr)))
        return self

    def query(self) -> bool:
        """True if the work before the last record has finished (or never recorded)."""
        (err,) = driver().cuEventQuery(self.handle)
        if err == 600:  # CUDA_ERROR_NOT_READY
            return False
        check((err,))
        return True

    def synchronize(self) -> None:
        """Block until the work before the last record has finished.

        Raises
        ------
        CudaError
            An asynchronous error of that work.
        """
        check(driver().cuEventSynchronize(self.handle))

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of GPU time from this event to `end` (both recorded, with timing).

        Raises
        ------
        ValueError
            If either event was created without timing.
        NotReadyError
            If one of them has not completed yet.
        """
        if not (self._timing and end._timing):
            raise ValueError("elapsed_time needs two events created with timing=True")
        return check(driver().cuEventElapsedTime(self.handle, end.handle))
