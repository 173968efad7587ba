"""NCCL communicators: one rank's membership in a group of GPUs that run collectives.

A communicator (``ncclComm_t``) binds one rank of a clique to one device. Every rank
calls the same collectives in the same order; each call is queued on a CUDA stream and
returns at once, and the GPUs then exchange data among themselves. A non-blocking
communicator (``ncclConfig_t.blocking = 0``) never blocks the host: calls return
``ncclInProgress`` and cupric polls ``ncclCommGetAsyncError`` until the work is queued,
within a timeout, after which it aborts the communicator rather than hang on a dead peer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import warnings

from cupric.runtime import intake
from cupric.runtime.resource import Resource

from .tables import reduction_op, wire_type

__all__ = ["Communicator", "CommOptions", "UniqueId", "group", "poll_until", "join_aborts",
           "ShapeMismatchError", "DtypeMismatchError", "OverlapError", "RankError"]

_UNDEF_INT = -2**31          # NCCL_CONFIG_UNDEF_INT (INT_MIN): "NCCL picks"
_CONFIG_MAGIC = 0xCAFEBEEF   # ncclConfig_t.magic, NCCL_CONFIG_INITIALIZER's value
_SPLIT_NOCOLOR = -1          # NCCL_SPLIT_NOCOLOR
_UNIQUE_ID_BYTES = 128       # NCCL_UNIQUE_ID_BYTES


class ShapeMismatchError(ValueError):
    """Arrays whose sizes do not fit the collective (e.g. an all-gather output that is
    not world_size times the input)."""


class DtypeMismatchError(TypeError):
    """Send and receive arrays of different element types."""


class OverlapError(ValueError):
    """Send and receive memory that overlap other than the way the collective's in-place
    form lays them out."""


class RankError(ValueError):
    """A root or peer rank outside ``0 .. world_size - 1`` (or the caller's own rank for
    a send/recv)."""


# --------------------------------------------------------------------------------------
# Options and unique ids


@dataclasses.dataclass(frozen=True)
class CommOptions:
    """How a communicator is made (validated at construction; turned into an
    ``ncclConfig_t`` by `config`).

    Parameters
    ----------
    blocking : bool
        False makes a non-blocking communicator: no call blocks the host, and `timeout`
        bounds setup, every wait for queued work, and `close`.
    timeout : float or None
        Seconds that `Communicator.wait`, the setup of a non-blocking communicator and
        the waits of non-blocking calls allow before aborting the communicator and
        raising `NcclTimeoutError`. None waits forever.
    poll_interval : float
        Seconds between two polls of a waiting loop.
    cga_cluster_size, min_ctas, max_ctas : int, optional
        NCCL's cooperative-group cluster size and bounds on the thread blocks (channels)
        a collective uses; None lets NCCL pick.
    net_name : str, optional
        The network plugin to use (``"IB"``, ``"Socket"``); None lets NCCL pick.
    split_share : bool, optional
        Whether communicators split from this one share its resources.
    comm_name : str, optional
        A name NCCL prints in its logs.
    """

    blocking: bool = True
    timeout: float | None = 300.0
    poll_interval: float = 1e-4
    cga_cluster_size: int | None = None
    min_ctas: int | None = None
    max_ctas: int | None = None
    net_name: str | None = None
    split_share: bool | None = None
    comm_name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.blocking, bool):
            raise TypeError(f"blocking must be a bool, got {type(self.blocking).__name__}")
        if self.timeout is not None and not (isinstance(self.timeout, (int, float))
                                             and self.timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, got "
                             f"{self.timeout!r}")
        if not (isinstance(self.poll_interval, (int, float)) and
                0 < self.poll_interval <= 1):
            raise ValueError(f"poll_interval must be in (0, 1] seconds, got "
                             f"{self.poll_interval!r}")
        for name in ("cga_cluster_size", "min_ctas", "max_ctas"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ValueError(f"{name} must be a non-negative int or None, got "
                                 f"{value!r}")
        if self.min_ctas and self.max_ctas and self.min_ctas > self.max_ctas:
            raise ValueError(f"min_ctas {self.min_ctas} > max_ctas {self.max_ctas}")
        for name in ("net_name", "comm_name"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None")

    def config(self, lib, keep: list):
        """An ``ncclConfig_t *`` holding these options (``NCCL_CONFIG_INITIALIZER``
        first, then the fields set here); C strings it points at go into `keep`."""
        ffi = lib.ffi
        cfg = ffi.new("ncclConfig_t *")
        for name, field in ffi.typeof("ncclConfig_t").fields:
            if field.type.kind == "primitive" and field.type.cname == "int":
                setattr(cfg, name, _UNDEF_INT)
        cfg.size = ffi.sizeof("ncclConfig_t")
        # Headers before NCCL 2.23 write the magic as a literal in NCCL_CONFIG_INITIALIZER
        # instead of naming it NCCL_API_MAGIC; the value is the same.
        cfg.magic = getattr(lib, "NCCL_API_MAGIC", _CONFIG_MAGIC)
        cfg.version = lib.NCCL_VERSION_CODE
        cfg.blocking = 1 if self.blocking else 0
        for name, field in (("cga_cluster_size", "cgaClusterSize"),
                            ("min_ctas", "minCTAs"), ("max_ctas", "maxCTAs")):
            value = getattr(self, name)
            if value is not None:
                setattr(cfg, field, value)
        if self.split_share is not None:
            cfg.splitShare = int(self.split_share)
        for name, field in (("net_name", "netName"), ("comm_name", "commName")):
            value = getattr(self, name)
            if value is not None:
                text = ffi.new("char[]", value.encode())
                keep.append(text)
                setattr(cfg, field, text)
        return cfg


class UniqueId:
    """The 128 bytes that name one clique: made by one rank (`new`), sent to every other
    (`to_bytes` / `from_bytes`, or pickling), and passed to `Communicator.init`.

    Safety
    ------
    The bytes hold the address of the maker's bootstrap socket: anyone who has them can
    join the clique. Send them over the launcher's own channel, not a public one.
    """

    __slots__ = ("_bytes",)
    NBYTES = _UNIQUE_ID_BYTES

    def __init__(self, data: bytes) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"a unique id is {_UNIQUE_ID_BYTES} bytes, got "
                            f"{type(data).__name__}")
        data = bytes(data)
        if len(data) != _UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id is {_UNIQUE_ID_BYTES} bytes, got {len(data)}")
        self._bytes = data

    @classmethod
    def new(cls) -> "UniqueId":
        """A new id (``ncclGetUniqueId``): starts this process's bootstrap listener, so
        exactly one rank (rank 0) makes it.

        Raises
        ------
        NcclError
            When NCCL cannot open its bootstrap socket (``NCCL_SOCKET_IFNAME`` names no
            usable interface, say).
        """
        from . import lib
        out = lib.ffi.new("ncclUniqueId *")
        lib.check(lib.lib.ncclGetUniqueId(out))
        return cls(bytes(lib.ffi.buffer(out)))

    from_bytes = classmethod(lambda cls, data: cls(data))

    def to_bytes(self) -> bytes:
        """The 128 bytes, to send to the other ranks."""
        return self._bytes

    __bytes__ = to_bytes

    def _c_value(self, lib):
        out = lib.ffi.new("ncclUniqueId *")
        lib.ffi.memmove(out, self._bytes, _UNIQUE_ID_BYTES)
        return out[0]

    def __eq__(self, other) -> bool:
        return isinstance(other, UniqueId) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __reduce__(self):
        return (UniqueId, (self._bytes,))

    def __repr__(self) -> str:
        import hashlib
        return f"<UniqueId {hashlib.sha256(self._bytes).hexdigest()[:12]}>"


# --------------------------------------------------------------------------------------
# Waiting without hanging


def poll_until(done, async_error, abort, *, timeout: float | None, what: str,
               interval: float = 1e-4, clock=time.monotonic, sleep=time.sleep) -> None:
    """Poll until ``done()`` is true; abort and raise instead of waiting forever.

    Each round first asks ``async_error()`` (an ``ncclResult_t``: ``ncclSuccess`` and
    ``ncclInProgress`` mean "nothing wrong yet"), then ``done()``. A failure status
    calls ``abort()`` and raises its typed `NcclError`; a round past `timeout` seconds
    calls ``abort()`` and raises `NcclTimeoutError`. The pause between rounds doubles
    from `interval` up to 10 ms.

    Raises
    ------
    NcclError
        The subclass of the asynchronous error (`NcclRemoteError`: a peer went away).
    NcclTimeoutError
        When `timeout` passed first; the message says what was waited for.
    """
    from .lib import IN_PROGRESS, NcclTimeoutError, error_of
    deadline = None if timeout is None else clock() + timeout
    pause = interval
    while True:
        status = async_error()
        if status not in (0, IN_PROGRESS):
            _abort_then(abort, error_of(
                status, prefix=f"{what} failed; the communicator was aborted"))
        if done():
            return
        if deadline is not None and clock() >= deadline:
            _abort_then(abort, NcclTimeoutError(
                8, "ncclTimeout", f"{what} did not finish within {timeout:g} s; the "
                                  f"communicator was aborted (a peer died or never "
                                  f"joined?)"))
        sleep(pause)
        pause = min(pause * 2, 0.01)


def _abort_then(abort, error) -> None:
    # The error that made us abort is what the caller must see, also when abort fails.
    try:
        abort()
    except Exception as exc:
        raise error from exc
    raise error


def _stream_done(handle: int) -> bool:
    from cupric.runtime.native import check, driver
    (err,) = driver().cuStreamQuery(handle)
    if err == 600:  # CUDA_ERROR_NOT_READY
        return False
    check((err,))
    return True


# --------------------------------------------------------------------------------------
# Aborting without waiting for the device


def _make_current(device: int) -> None:
    from cupric.runtime.device import Device
    Device(device).make_current()


def _abort_raw(raw: int, device: int) -> None:
    """``ncclCommAbort`` of the communicator at address `raw`, made on `device`."""
    from . import lib
    _make_current(device)
    status = lib.lib.ncclCommAbort(lib.ffi.cast("ncclComm_t", raw))
    if status:
        raise lib.error_of(status, prefix="ncclCommAbort")


_aborting: set = set()          # background aborts still running
_aborting_lock = threading.Lock()
_exit_hook = [False]


def _abort_in_background(raw: int, device: int, label: str) -> threading.Thread:
    """Run `_abort_raw` on a thread of its own and return that thread.

    ncclCommAbort sets the abort flag that NCCL's kernels poll at once, but then frees
    the communicator's device memory, and a free waits for the whole device to finish:
    a stream held by anything else (a host callback, a long kernel) would hold the
    caller's timeout with it."""
    def body():
        try:
            _abort_raw(raw, device)
        except Exception as exc:  # reported, not swallowed: nobody waits for this thread
            warnings.warn(f"cupric: ncclCommAbort of {label} failed: {exc}",
                          RuntimeWarning, stacklevel=1)
        finally:
            with _aborting_lock:
                _aborting.discard(thread)

    thread = threading.Thread(target=body, name="cupric-nccl-abort", daemon=True)
    with _aborting_lock:
        _aborting.add(thread)
        if not _exit_hook[0]:
            import atexit
            atexit.register(join_aborts, 60.0)  # runs before the runtime's exit hook
            _exit_hook[0] = True
    thread.start()
    return thread


def join_aborts(timeout: float | None = None) -> bool:
    """Wait for the aborts that timeouts started in the background (see
    `Communicator.abort`); True when none is left running. Called at exit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _aborting_lock:
            thread = next(iter(_aborting), None)
        if thread is None:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        thread.join(left)


# --------------------------------------------------------------------------------------
# Groups


_tls = threading.local()


def _group_state():
    state = getattr(_tls, "group", None)
    if state is None:
        state = _tls.group = [0, []]   # depth, non-blocking communicators used in it
    return state


@contextlib.contextmanager
def group():
    """Fuse the NCCL calls made inside into one launch (``ncclGroupStart`` /
    ``ncclGroupEnd``): needed for send/recv pairs that must progress together, and for
    one thread driving several communicators (`Communicator.all_local`).

    Groups nest; the outermost exit launches. On leaving a group whose non-blocking
    communicators answer ``ncclInProgress``, each is waited for (within its timeout).

    Safety
    ------
    Argument errors inside raise before anything of that call is queued, but the calls
    queued before it still launch when the group ends: the other ranks must make the
    same calls, or their peers' timeouts end the run.

    Examples
    --------
    >>> with nccl.group():                                          # doctest: +SKIP
    ...     comm.send(x, peer=1)
    ...     comm.recv(y, peer=1)
    """
    from . import lib
    state = _group_state()
    lib.check(lib.lib.ncclGroupStart())
    state[0] += 1
    try:
        yield
    finally:
        state[0] -= 1
        status = lib.lib.ncclGroupEnd()
        comms, waiting = state[1], []
        if state[0] == 0:
            waiting, state[1] = comms, []
        if status == lib.IN_PROGRESS:
            for comm in waiting:
                comm._wait_queued("the group's calls")
        elif status:
            raise lib.error_of(status, prefix="ncclGroupEnd")


# --------------------------------------------------------------------------------------
# Communicators


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


class Communicator(Resource):
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

    # -- argument intake ---------------------------------------------------------------

    def _array(self, obj, name: str, stream, writable: bool):
        # On one GPU no array can live elsewhere: its device is not even asked.
        info = intake.array_info(obj, stream, name=name, writable=writable,
                                 device=self._device if self._multi else None,
                                 order=False, with_device=self._multi)
        if not info.is_c_contiguous:
            raise intake.StrideError(f"{name} must be contiguous for NCCL (shape "
                                     f"{info.shape}, strides {info.strides}); pass a "
                                     f"contiguous copy")
        return info

    def _begin(self, stream, arrays):
        """Order `stream` after each array's producer and register with an open group;
        returns the raw stream handle and the NCCL communicator."""
        handle = intake.stream_handle(stream)
        producers = {info.producer for info in arrays if info.producer is not None}
        if producers:
            intake.order_after(handle, tuple(producers))
        state = _group_state()
        if state[0] and not self._options.blocking and self not in state[1]:
            state[1].append(self)
        return handle, self._c_comm()

    def _finish(self, status: int, comm, what: str) -> None:
        if status == 0:
            return
        from . import lib
        if status == lib.IN_PROGRESS and not _group_state()[0]:
            self._wait_queued(what)
            return
        if status == lib.IN_PROGRESS:
            return
        raise lib.error_of(status, comm, prefix=what)

    def _equal_pair(self, send, out, stream, what: str, writes_send: bool):
        """The intake of a collective whose output has its input's size: `out` None is
        in place (the same `ArrayInfo` twice); otherwise same type, same size, and either
        the very same memory or none shared."""
        s = self._array(send, "send", stream, writable=writes_send)
        if out is None:
            return s, s
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, what)
        if r.size != s.size:
            raise ShapeMismatchError(f"{what}: out has {r.size} elements, send {s.size}")
        self._disjoint(s, r, r.ptr, what)
        return s, r

    @staticmethod
    def _same_type(a, b, what: str) -> None:
        if a.dtype != b.dtype or a.torch_dtype != b.torch_dtype:
            raise DtypeMismatchError(f"{what}: send is {a.torch_dtype or a.dtype} but "
                                     f"recv is {b.torch_dtype or b.dtype}")

    @staticmethod
    def _disjoint(send, recv, in_place_ptr: int | None, what: str) -> None:
        """Raise `OverlapError` unless the two spans are disjoint, or `send` starts at
        `in_place_ptr` (the collective's in-place layout)."""
        if in_place_ptr is not None and send.ptr == in_place_ptr:
            return
        a0, a1 = send.ptr, send.ptr + send.nbytes
        b0, b1 = recv.ptr, recv.ptr + recv.nbytes
        if a0 < b1 and b0 < a1 and send.nbytes and recv.nbytes:
            raise OverlapError(f"{what}: send and recv overlap but not in the in-place "
                               f"layout; use separate buffers or the in-place form")

    def _check_rank(self, value, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not 0 <= value < self._size:
            raise RankError(f"{name} {value} is outside 0 .. {self._size - 1}")
        return value

    def _wire(self, info, count: int, op: int | None):
        dtype, n = wire_type(info.dtype, info.torch_dtype, count, op)
        if dtype >= 10:
            from . import lib
            if lib.NCCL_VERSION_CODE < 22400:
                from .tables import UnsupportedDtypeError
                raise UnsupportedDtypeError("float8 collectives need NCCL 2.24 or newer")
        return dtype, n

    def _output(self, out, shape, like, name: str):
        """`out`, or a new DeviceBuffer of `shape` on this device."""
        if out is not None:
            return out
        from cupric.runtime.device import Device
        from cupric.runtime.memory import empty
        if like.torch_dtype is not None and like.dtype.kind == "V":
            raise TypeError(f"{name}: pass out= for {like.torch_dtype} arrays (cupric "
                            f"allocates NumPy types only)")
        Device(self._device).make_current()
        return empty(shape, like.dtype)

    # -- collectives -------------------------------------------------------------------

    def all_reduce(self, send, out=None, *, op: str = "sum", stream=None):
        """Reduce `send` over every rank with `op` into `out` on every rank
        (``ncclAllReduce``); `out` None reduces in place. Returns the output array.

        Parameters
        ----------
        send : device array
        out : device array, optional
            Same size and element type as `send`; may be `send` itself.
        op : {"sum", "prod", "max", "min", "avg"}
        stream : stream-like, optional

        Raises
        ------
        ShapeMismatchError, DtypeMismatchError, OverlapError, UnsupportedDtypeError
            Before anything is queued; the intake errors (`HostMemoryError`,
            `ReadOnlyError`, `DeviceMismatchError`, `StrideError`, `ClosedError`) too.
        NcclError
        """
        code = reduction_op(op)
        s, r = self._equal_pair(send, out, stream, "all_reduce", out is None)
        dtype, count = self._wire(s, s.size, code)
        handle, comm = self._begin(stream, (s, r))
        from . import lib
        status = lib.lib.ncclAllReduce(_p(lib, s.ptr), _p(lib, r.ptr), count, dtype, code,
                                       comm, _p(lib, handle))
        self._finish(status, comm, "ncclAllReduce")
        return send if out is None else out

    def reduce(self, send, out=None, *, root: int = 0, op: str = "sum", stream=None):
        """Reduce `send` over every rank into `out` on rank `root` (``ncclReduce``);
        `out` None reduces in place (into `send` on the root). Other ranks' `out` is
        not written. Returns the output array (`send` where `out` is None)."""
        code = reduction_op(op)
        root = self._check_rank(root, "root")
        s, r = self._equal_pair(send, out, stream, "reduce",
                                out is None and root == self._rank)
        dtype, count = self._wire(s, s.size, code)
        handle, comm = self._begin(stream, (s, r))
        from . import lib
        status = lib.lib.ncclReduce(_p(lib, s.ptr), _p(lib, r.ptr), count, dtype, code,
                                    root, comm, _p(lib, handle))
        self._finish(status, comm, "ncclReduce")
        return send if out is None else out

    def broadcast(self, send, out=None, *, root: int = 0, stream=None):
        """Copy rank `root`'s `send` into `out` on every rank (``ncclBroadcast``); `out`
        None broadcasts in place (into `send`). Returns the output array."""
        root = self._check_rank(root, "root")
        s, r = self._equal_pair(send, out, stream, "broadcast", out is None)
        dtype, count = self._wire(s, s.size, None)
        handle, comm = self._begin(stream, (s, r))
        from . import lib
        status = lib.lib.ncclBroadcast(_p(lib, s.ptr), _p(lib, r.ptr), count, dtype, root,
                                       comm, _p(lib, handle))
        self._finish(status, comm, "ncclBroadcast")
        return send if out is None else out

    def all_gather(self, send, out=None, *, stream=None):
        """Concatenate every rank's `send` in rank order into `out` on every rank
        (``ncclAllGather``). `out` has world_size times `send`'s elements; None makes a
        DeviceBuffer of shape ``(world_size * send.shape[0], *send.shape[1:])``. In
        place: pass as `send` the view of `out` at this rank's slot. Returns `out`."""
        s = self._array(send, "send", stream, writable=False)
        n = self._size
        out = self._output(out, (n * s.shape[0], *s.shape[1:]) if s.ndim else (n,), s,
                           "all_gather")
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, "all_gather")
        if r.size != n * s.size:
            raise ShapeMismatchError(f"all_gather: out must have world_size * "
                                     f"send.size = {n * s.size} elements, got {r.size}")
        self._disjoint(s, r, r.ptr + self._rank * s.nbytes, "all_gather")
        dtype, count = self._wire(s, s.size, None)
        handle, comm = self._begin(stream, (s, r))
        from . import lib
        status = lib.lib.ncclAllGather(_p(lib, s.ptr), _p(lib, r.ptr), count, dtype, comm,
                                       _p(lib, handle))
        self._finish(status, comm, "ncclAllGather")
        return out

    def reduce_scatter(self, send, out=None, *, op: str = "sum", stream=None):
        """Reduce `send` over every rank and leave block ``rank`` of the result in `out`
        (``ncclReduceScatter``). `send` has world_size times `out`'s elements; `out`
        None makes a DeviceBuffer of shape ``(send.shape[0] // world_size,
        *send.shape[1:])``. In place: pass as `out` the view of `send` at this rank's
        block. Returns `out`."""
        code = reduction_op(op)
        s = self._array(send, "send", stream, writable=False)
        n = self._size
        if out is None:
            if not s.ndim or s.shape[0] % n:
                raise ShapeMismatchError(f"reduce_scatter: send's first dimension must "
                                         f"divide by world_size {n} to size out; pass out=")
        out = self._output(out, (s.shape[0] // n, *s.shape[1:]) if s.ndim else (), s,
                           "reduce_scatter")
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, "reduce_scatter")
        if s.size != n * r.size:
            raise ShapeMismatchError(f"reduce_scatter: send must have world_size * "
                                     f"out.size = {n * r.size} elements, got {s.size}")
        if r.ptr != s.ptr + self._rank * r.nbytes:
            self._disjoint(r, s, None, "reduce_scatter")
        dtype, count = self._wire(r, r.size, code)
        handle, comm = self._begin(stream, (s, r))
        from . import lib
        status = lib.lib.ncclReduceScatter(_p(lib, s.ptr), _p(lib, r.ptr), count, dtype,
                                           code, comm, _p(lib, handle))
        self._finish(status, comm, "ncclReduceScatter")
        return out

    def all_to_all(self, send, out=None, *, stream=None):
        """Send block j of `send` to rank j and receive rank i's block into block i of
        `out` (grouped ``ncclSend``/``ncclRecv``, one pair per peer). Both have the same
        size, a multiple of world_size; `out` None makes a DeviceBuffer like `send`. Not
        in place. Returns `out`."""
        s = self._array(send, "send", stream, writable=False)
        n = self._size
        out = self._output(out, s.shape, s, "all_to_all")
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, "all_to_all")
        if r.size != s.size or s.size % n:
            raise ShapeMismatchError(f"all_to_all: send and out must have the same size, "
                                     f"a multiple of world_size {n}; got {s.size} and "
                                     f"{r.size}")
        self._disjoint(s, r, None, "all_to_all")
        dtype, count = self._wire(s, s.size // n, None)
        block = s.nbytes // n
        from . import lib
        with group():
            handle, comm = self._begin(stream, (s, r))
            stream_p = _p(lib, handle)
            for peer in range(n):
                self._finish(lib.lib.ncclSend(_p(lib, s.ptr + peer * block), count, dtype,
                                              peer, comm, stream_p), comm, "ncclSend")
                self._finish(lib.lib.ncclRecv(_p(lib, r.ptr + peer * block), count, dtype,
                                              peer, comm, stream_p), comm, "ncclRecv")
        return out

    def send(self, array, peer: int, *, stream=None) -> None:
        """Send `array` to rank `peer` (``ncclSend``); that rank calls `recv` with the
        same size and type. Pair sends and receives that must progress together inside
        `group()`."""
        peer = self._check_rank(peer, "peer")
        s = self._array(array, "array", stream, writable=False)
        dtype, count = self._wire(s, s.size, None)
        handle, comm = self._begin(stream, (s,))
        from . import lib
        status = lib.lib.ncclSend(_p(lib, s.ptr), count, dtype, peer, comm, _p(lib, handle))
        self._finish(status, comm, "ncclSend")

    def recv(self, array, peer: int, *, stream=None):
        """Receive from rank `peer` into `array` (``ncclRecv``); returns `array`."""
        peer = self._check_rank(peer, "peer")
        r = self._array(array, "array", stream, writable=True)
        dtype, count = self._wire(r, r.size, None)
        handle, comm = self._begin(stream, (r,))
        from . import lib
        status = lib.lib.ncclRecv(_p(lib, r.ptr), count, dtype, peer, comm, _p(lib, handle))
        self._finish(status, comm, "ncclRecv")
        return array


def _ask(lib, comm, *functions) -> list[int]:
    """The int each ``ncclComm*(comm, int *)`` query of `functions` answers."""
    values = []
    for name in functions:
        box = lib.ffi.new("int *")
        lib.check(getattr(lib.lib, name)(comm, box), comm)
        values.append(box[0])
    return values


def _p(lib, address: int):
    # NCCL takes device addresses and streams as pointers.
    return lib.ffi.cast("void *", address)


def bus_bandwidth_factor(collective: str, world_size: int) -> float:
    """NCCL's bus-bandwidth factor (nccl-tests' definition): bus bandwidth = algorithm
    bandwidth (bytes / time) times this. all_reduce 2(n-1)/n; all_gather and
    reduce_scatter (n-1)/n (of the larger buffer's bytes); broadcast, reduce 1;
    all_to_all (n-1)/n.

    Raises
    ------
    ValueError
        For an unknown collective or a world size below 1.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    n = world_size
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
               "reduce_scatter": (n - 1) / n, "all_to_all": (n - 1) / n,
               "broadcast": 1.0, "reduce": 1.0}
    try:
        return factors[collective]
    except KeyError:
        raise ValueError(f"unknown collective {collective!r}; one of "
                         f"{', '.join(factors)}") from None

