"""NCCL communicators: one rank's membership in a group of GPUs that run collectives.

A communicator (``ncclComm_t``) binds one rank of a clique to one device. Every rank
calls the same collectives in the same order; each call is queued on a CUDA stream and
returns at once, and the GPUs then exchange data among themselves. A non-blocking
communicator (``ncclConfig_t.blocking = 0``) never blocks the host: calls return
``ncclInProgress`` and cupric polls ``ncclCommGetAsyncError`` until the work is queued,
within a timeout, after which it aborts the communicator rather than hang on a dead peer.
"""

from __future__ import annotations

from cupric.runtime import intake
from cupric.runtime.resource import Resource

# The names below were all defined here before the package was split by concept; they
# stay importable from this module.
from .collectives import (Collectives, DtypeMismatchError, OverlapError, RankError,
                          ShapeMismatchError)
from .options import _SPLIT_NOCOLOR, CommOptions, UniqueId
from .waiting import (_abort_in_background, _abort_raw, _stream_done, group, join_aborts,
                      poll_until)

__all__ = ["Communicator", "CommOptions", "UniqueId", "group", "poll_until", "join_aborts",
           "ShapeMismatchError", "DtypeMismatchError", "OverlapError", "RankError"]


def _release(raw: int, device: int) -> None:
    # What close() (after ncclCommFinalize) and the finalizer run: ncclCommDestroy waits
    # for the work queued on the communicator, so buffers it still uses stay valid.
    from cupric.runtime.device import Device

    from . import lib
    Device(device).make_current()
    comm = lib.ffi.cast("ncclComm_t", raw)
    status = lib.lib.ncclCommDestroy(comm)
    if status:
        raise lib.error_of(status, prefix="ncclCommDestroy")


class Communicator(Collectives, Resource):
    """One rank of an NCCL clique, bound to one device (no public constructor).

    Make one with `Communicator.init` (every rank, from one `UniqueId`), `split` (from an
    existing one), or `Communicator.all_local` (all local GPUs, one process). Collectives
    take any device array (DeviceBuffer, PyTorch, CuPy, anything with
    ``__cuda_array_interface__`` or ``__dlpack__``) and any stream (cupric `Stream`,
    PyTorch, CuPy, a raw handle; None: the legacy default stream), and return the output
    array. Arrays must be contiguous and live on the communicator's device; all checks
    run before anything is queued.

    Release with `close()` (``ncclCommFinalize`` + ``ncclCommDestroy``), `abort()`
    (``ncclCommAbort``: for a failed clique), the ``with`` statement, or garbage
    collection (``ncclCommDestroy``).

    Thread safety
    -------------
    NCCL allows one thread at a time per communicator; cupric does not lock. Several
    communicators may be driven from one thread only inside `group()`.

    Examples
    --------
    >>> from cupric import nccl                                       # doctest: +SKIP
    >>> uid = nccl.UniqueId.new() if rank == 0 else None   # then share it
    >>> with nccl.Communicator.init(uid, rank, world_size) as comm:
    ...     comm.all_reduce(grads, op="avg", stream=stream)
    """

    __slots__ = ("_comm", "_rank", "_size", "_device", "_options", "_multi", "_aborter")

    def __init__(self, *args, **kwargs):
        raise TypeError("Communicator has no public constructor; use "
                        "nccl.Communicator.init(unique_id, rank, world_size), "
                        "comm.split(color, key), nccl.Communicator.all_local() or "
                        "nccl.Communicator.from_handle(raw)")

    # -- construction ------------------------------------------------------------------

    @classmethod
    def _blank(cls, raw: int, rank: int, size: int, device: int,
               options: CommOptions, owned: bool = True,
               multi: bool | None = None) -> "Communicator":
        self = cls.__new__(cls)
        self._rank, self._size, self._device = rank, size, device
        self._options = options
        self._comm = self._aborter = None
        if multi is None:
            from cupric.runtime.device import device_count
            multi = device_count() > 1
        # On one GPU nothing can live elsewhere: the per-array device check is skipped.
        self._multi = multi
        self._init_resource(raw, _release if owned else None, device)
        return self

    def _c_comm(self):
        if self._closed:
            from cupric.runtime.errors import ClosedError
            raise ClosedError("this Communicator is closed (or was aborted)")
        comm = self._comm
        if comm is None:
            from . import lib
            comm = self._comm = lib.ffi.cast("ncclComm_t", self._handle)
        return comm

    @staticmethod
    def _check_options(options) -> CommOptions:
        if options is None:
            return CommOptions()
        if not isinstance(options, CommOptions):
            raise TypeError(f"options must be a CommOptions, got {type(options).__name__}")
        return options

    @classmethod
    def init(cls, unique_id, rank: int, world_size: int, device=None,
             options: CommOptions | None = None) -> "Communicator":
        """Join the clique named by `unique_id` as `rank` of `world_size`
        (``ncclCommInitRankConfig``); every rank calls this at about the same time.

        Parameters
        ----------
        unique_id : UniqueId or bytes
            Made by one rank with `UniqueId.new` and shared with all.
        rank, world_size : int
        device : Device or int, optional
            This rank's GPU; defaults to the current device.
        options : CommOptions, optional

        Raises
        ------
        ValueError
            For a rank outside ``0 .. world_size - 1``.
        NcclError
            When NCCL fails (`NcclTimeoutError` when a non-blocking setup outlives the
            options' timeout: a rank that never joined).

        Cost
        ----
        Bootstrap over TCP and topology discovery: tens of milliseconds to seconds.
        """
        from cupric.runtime.device import Device

        from . import lib
        options = cls._check_options(options)
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId(unique_id)
        for name, value in (("rank", rank), ("world_size", world_size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise RankError(f"rank {rank} is outside 0 .. {world_size - 1}")
        dev = Device(device) if device is not None else Device.current()
        dev.make_current()
        keep: list = []
        cfg = options.config(lib, keep)
        out = lib.ffi.new("ncclComm_t *")
        status = lib.lib.ncclCommInitRankConfig(out, world_size, unique_id._c_value(lib),
                                                rank, cfg)
        return cls._adopt(out[0], status, rank, world_size, dev.ordinal, options,
                          "communicator setup (ncclCommInitRankConfig)")

    @classmethod
    def _adopt(cls, comm, status, rank, size, device, options, what):
        # A communicator just made: own it first (so a failed setup still frees it),
        # then wait for a non-blocking setup to finish.
        from . import lib
        raw = int(lib.ffi.cast("uintptr_t", comm))
        if status not in (0, lib.IN_PROGRESS) or not raw:
            error = lib.error_of(status or lib.IN_PROGRESS, comm if raw else None,
                                 prefix=what)
            if raw:
                lib.lib.ncclCommAbort(comm)   # frees what setup made; the error says why
            raise error
        self = cls._blank(raw, rank, size, device, options)
        if status == lib.IN_PROGRESS or not options.blocking:
            self._wait_queued(what)
        return self

    @classmethod
    def all_local(cls, devices=None) -> list["Communicator"]:
        """One communicator per local GPU, all in this process (``ncclCommInitAll``):
        rank i drives ``devices[i]``. Drive them together inside `group()`.

        Parameters
        ----------
        devices : sequence of Device or int, optional
            Defaults to every visible GPU.
        """
        from cupric.runtime.device import Device, device_count

        from . import lib
        if devices is None:
            devices = range(device_count())
        ordinals = [Device(d).ordinal for d in devices]
        if not ordinals:
            raise ValueError("all_local needs at least one device")
        if len(set(ordinals)) != len(ordinals):
            raise ValueError(f"devices repeat: {ordinals}")
        n = len(ordinals)
        out = lib.ffi.new("ncclComm_t[]", n)
        lib.check(lib.lib.ncclCommInitAll(out, n, lib.ffi.new("int[]", ordinals)))
        options = CommOptions()
        return [cls._blank(int(lib.ffi.cast("uintptr_t", out[i])), i, n, ordinals[i],
                           options) for i in range(n)]

    @classmethod
    def from_handle(cls, raw: int) -> "Communicator":
        """Borrow an ``ncclComm_t`` made elsewhere (its address as an int); cupric never
        destroys or aborts it. Rank, size and device are asked of NCCL.

        Safety
        ------
        The owner must keep it alive while cupric uses it.
        """
        from . import lib
        if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
            raise TypeError(f"raw must be the communicator's address as a positive int, "
                            f"got {raw!r}")
        comm = lib.ffi.cast("ncclComm_t", raw)
        values = _ask(lib, comm, "ncclCommUserRank", "ncclCommCount", "ncclCommCuDevice")
        return cls._blank(raw, *values, CommOptions(), owned=False)

    def split(self, color: int | None, key: int | None = None,
              options: CommOptions | None = None) -> "Communicator | None":
        """Split this clique (``ncclCommSplit``): every rank calls it; ranks of one
        `color` form a new communicator, ordered by `key` (default: this rank).

        Returns None on ranks that pass ``color=None`` (``NCCL_SPLIT_NOCOLOR``).
        """
        from . import lib
        if color is not None and (isinstance(color, bool) or not isinstance(color, int)
                                  or color < 0):
            raise ValueError(f"color must be a non-negative int or None, got {color!r}")
        key = self._rank if key is None else key
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"key must be an int, got {type(key).__name__}")
        options = self._options if options is None else self._check_options(options)
        keep: list = []
        cfg = options.config(lib, keep)
        out = lib.ffi.new("ncclComm_t *")
        comm = self._c_comm()
        status = lib.lib.ncclCommSplit(comm, _SPLIT_NOCOLOR if color is None else color,
                                       key, out, cfg)
        if status not in (0, lib.IN_PROGRESS):
            raise lib.error_of(status, comm, prefix="ncclCommSplit")
        raw = int(lib.ffi.cast("uintptr_t", out[0]))
        if status == lib.IN_PROGRESS or not self._options.blocking:
            self._wait_queued("ncclCommSplit")
        if not raw:
            return None
        child = lib.ffi.cast("ncclComm_t", raw)
        if status == lib.IN_PROGRESS or not options.blocking:
            self._poll_comm(child, "the split communicator's setup", options)
        rank, size = _ask(lib, child, "ncclCommUserRank", "ncclCommCount")
        return self._blank(raw, rank, size, self._device, options)

    # -- facts -------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This rank, 0 .. world_size - 1."""
        return self._rank

    @property
    def world_size(self) -> int:
        """How many ranks the clique has."""
        return self._size

    size = world_size

    @property
    def device(self):
        """The `Device` this rank drives."""
        from cupric.runtime.device import Device
        return Device(self._device)

    @property
    def options(self) -> CommOptions:
        """The `CommOptions` it was made with (blocking, timeout, ...)."""
        return self._options

    @property
    def ptr(self) -> int:
        """The ``ncclComm_t`` address (for other libraries)."""
        return self.handle

    def _label(self) -> str:
        return f"nccl.Communicator(rank {self._rank} of {self._size})"

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("blocking" if self._options.blocking
                                               else "non-blocking")
        return (f"<nccl.Communicator rank {self._rank} of {self._size} on device "
                f"{self._device}, {state}>")

    # -- waiting, errors, release ------------------------------------------------------

    def async_error(self) -> int:
        """``ncclCommGetAsyncError``: ncclSuccess (0), ncclInProgress (7) for a
        non-blocking call still being queued, or the failure that ended the clique."""
        from . import lib
        out = lib.ffi.new("ncclResult_t *")
        comm = self._c_comm()
        lib.check(lib.lib.ncclCommGetAsyncError(comm, out), comm)
        return int(out[0])

    def _poll_comm(self, comm, what: str, options: CommOptions) -> None:
        from . import lib
        box = lib.ffi.new("ncclResult_t *")

        def status():
            lib.check(lib.lib.ncclCommGetAsyncError(comm, box), comm)
            return int(box[0])

        raw = int(lib.ffi.cast("uintptr_t", comm))
        poll_until(lambda: status() != lib.IN_PROGRESS, status,
                   lambda: _abort_in_background(raw, self._device, what),
                   timeout=options.timeout, what=what, interval=options.poll_interval)

    def _wait_queued(self, what: str) -> None:
        """Wait for a non-blocking call to finish queueing (async error no longer
        ncclInProgress), aborting after the timeout."""
        from . import lib
        opts = self._options
        poll_until(lambda: self.async_error() != lib.IN_PROGRESS, self.async_error,
                   self._abort_nowait, timeout=opts.timeout, what=what,
                   interval=opts.poll_interval)

    def wait(self, stream=None, timeout: float | None = ...) -> None:
        """Wait until the work queued on `stream` has finished, watching this
        communicator: an asynchronous NCCL error, or `timeout` seconds passing (default:
        the options' timeout), aborts the communicator and raises instead of hanging.

        Raises
        ------
        NcclError
            The asynchronous error (`NcclRemoteError`: a peer died).
        NcclTimeoutError
            When the work did not finish in time.
        CudaError
            An error of other work on the stream.
        """
        handle = intake.stream_handle(stream)
        timeout = self._options.timeout if timeout is ... else timeout
        poll_until(lambda: _stream_done(handle), self.async_error, self._abort_nowait,
                   timeout=timeout, what=f"work on stream 0x{handle:x}",
                   interval=self._options.poll_interval)

    def _abort_nowait(self) -> None:
        self.abort(wait=False)

    def abort(self, *, wait: bool = True) -> None:
        """Abort (``ncclCommAbort``): stop the clique's pending work on this rank and free
        the communicator without waiting for peers. For a failed or stuck clique; after
        it, buffers the pending collectives wrote hold no defined values. A second call,
        or one on a closed communicator, does nothing (with `wait`, it waits for an
        abort still running).

        Parameters
        ----------
        wait : bool
            True returns once ``ncclCommAbort`` has returned, raising its error. False
            returns at once and aborts on a background thread (a failure is reported as
            a `RuntimeWarning`): the timeout paths use it, since ``ncclCommAbort``
            frees the communicator's device memory, and a free waits until the device
            has finished its work, including work on streams that have nothing to do
            with NCCL (`join_aborts` waits for such aborts).

        Raises
        ------
        NcclError
            With `wait`, when ``ncclCommAbort`` fails.
        """
        if self._closed:
            if wait and self._aborter is not None:
                self._aborter.join()
            return
        self._closed = True
        fin = self._finalizer
        if fin is None:  # borrowed: not ours to abort
            return
        if fin.detach() is None:
            return
        if wait:
            _abort_raw(self._handle, self._device)
        else:
            self._aborter = _abort_in_background(self._handle, self._device, self._label())

    def close(self) -> None:
        """Finish the clique's queued work (``ncclCommFinalize``, within the timeout for a
        non-blocking communicator) and free the communicator (``ncclCommDestroy``). A
        second call does nothing.

        Raises
        ------
        NcclError
            When finalizing fails; the communicator is aborted then.
        """
        if self._closed or self._finalizer is None:
            super().close()
            return
        from cupric.runtime.device import Device

        from . import lib
        Device(self._device).make_current()
        comm = self._c_comm()
        status = lib.lib.ncclCommFinalize(comm)
        try:
            if status == lib.IN_PROGRESS:
                self._wait_queued("ncclCommFinalize")
            elif status:
                raise lib.error_of(status, comm, prefix="ncclCommFinalize")
        except BaseException:
            self.abort(wait=False)
            raise
        super().close()


def _ask(lib, comm, *functions) -> list[int]:
    """The int each ``ncclComm*(comm, int *)`` query of `functions` answers."""
    values = []
    for name in functions:
        box = lib.ffi.new("int *")
        lib.check(getattr(lib.lib, name)(comm, box), comm)
        values.append(box[0])
    return values
