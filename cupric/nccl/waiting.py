"""Waiting on NCCL without hanging: the poll loop that aborts a communicator after a
timeout or an asynchronous error, aborts that do not wait for the device, and groups.

A collective whose peer died never finishes: its stream never drains and a blocking wait
hangs. Polling ``ncclCommGetAsyncError`` and the stream instead, and aborting the
communicator (``ncclCommAbort``) when time runs out, turns that hang into an error.
``ncclGroupStart``/``ncclGroupEnd`` fuse the calls between them into one launch.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings

__all__ = ["poll_until", "join_aborts", "group"]


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
