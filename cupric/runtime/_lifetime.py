"""Ownership of driver handles: one pattern for every object that must release something.

A CUDA handle (stream, event, module, device allocation...) must be released exactly once,
either explicitly (`close()`, which raises if the driver refuses) or when its Python object
dies. A garbage-collection pass may run in any thread at any allocation, even in the middle
of another driver call, so the finalizer never calls the driver: it queues the release,
and the queue is drained by the next runtime call (`drain()`, run by `_driver.check`) and at
interpreter exit.

Usage (every handle-owning class of cupric.runtime, including memory)::

    class Stream(Resource):
        __slots__ = ("_device",)            # optional; Resource itself is slotted

        @classmethod
        def _create(cls, handle, device):
            self = cls.__new__(cls)          # context-bound: no public constructor
            self._device = device
            # release(handle, *args) runs at close() or (deferred) after the object dies.
            # args must not reference `self`, or the object would never die.
            self._init_resource(handle, _destroy_stream)
            return self

        def synchronize(self):
            check(driver().cuStreamSynchronize(self.handle))   # `handle` raises if closed

    def _destroy_stream(handle):
        check(driver().cuStreamDestroy(handle))

A borrowed object (`from_handle()`) is made with ``self._init_resource(handle, None)``: it
never releases what it borrows, and `close()` only marks it closed.

A context reset (or a fault that loses the context) destroys every handle made in it;
releasing one afterwards could release a new object that got the same address. So the
release of a context-bound resource is tied to the *epoch* it was made in, and
`retire_epoch()` (called by `Context.reset` and when a context is lost) turns every
release of the ended epoch into nothing. The epoch is process-wide: on a machine with
several GPUs, objects of the other devices made before a reset are then not destroyed (a
leak of handles, never a wrong release). Objects that hold nothing of a context (the
context's own retain) pass ``bound=False``. Device allocations, which are far more
numerous, are instead dropped per device from the tables by `forget`.

`TrackedResource` is the same contract at a lower cost, for objects made by the thousand
(device allocations): instead of a `weakref.finalize` per object (costly to make and
detach beside an allocation), its release is an entry of one process-wide table keyed by the object's id,
which `close()` or the object's `__del__` pops (a dict pop is atomic: exactly one of
them gets it), and which the exit hook empties, releasing what is still alive. `__del__`
queues the release as a finalizer does; it never calls the driver itself.
"""

from __future__ import annotations

import atexit
import collections
import threading
import warnings
import weakref

from .errors import ClosedError

__all__ = ["Resource", "TrackedResource", "drain", "pending_count", "live_count",
           "retire_epoch", "forget", "before_release"]

# (release, handle, args, label) tuples waiting for a safe moment. deque.append and
# popleft are atomic, so finalizers in any thread may push without a lock.
_pending: collections.deque = collections.deque()
# Held while draining: a release that itself calls check() must not re-enter drain().
_drain_lock = threading.Lock()


# Set by our atexit hook, which runs before weakref.finalize's own (see the bottom of this
# module): from then on, finalizers run from that exit hook, not from a GC pass, and no
# later runtime call would drain the queue, so they release at once.
_exiting = False


# id(object) -> (release, handle, args, label) of every live `TrackedResource` that owns
# its handle. Insertion-ordered, so the exit hook releases the newest first, as
# weakref.finalize's hook does.
_live: dict = {}


def _text(label) -> str:
    # A label is a str, or a tuple (format, *values) formatted only when a message needs
    # it: building the string for every allocation would cost more than the rest.
    if isinstance(label, tuple):
        return label[0] % label[1:]
    return str(label)


def _finalize(release, handle, args, label) -> None:
    if _exiting or getattr(weakref.finalize, "_shutdown", False):
        _release_quietly_at_exit(release, handle, args, label)
    else:
        _pending.append((release, handle, args, label))


def _release_quietly_at_exit(release, handle, args, label) -> None:
    from .errors import STICKY_CODES, ContextLostError, CudaError
    try:
        release(handle, *args)
    except CudaError as exc:
        # At exit the driver may already be shutting down (CUDA_ERROR_DEINITIALIZED), the
        # context be gone or lost; the process is ending and the OS reclaims everything.
        # Anything else is still reported.
        expected = (exc.code in (4, 201, 709) or exc.code in STICKY_CODES
                    or isinstance(exc, ContextLostError))
        if not expected:
            warnings.warn(f"cupric: releasing {_text(label)} at exit failed: {exc}",
                          RuntimeWarning, stacklevel=1)
    except Exception as exc:  # a library's own release (cuBLAS, cuDNN, ...): reported
        warnings.warn(f"cupric: releasing {_text(label)} at exit failed: {exc}",
                      RuntimeWarning, stacklevel=1)


def _drain_at_exit() -> None:
    # Releases queued by finalizers that no later runtime call drained, then those of the
    # tracked objects still alive, newest first. The process is ending, so the quiet
    # variant applies (see _release_quietly_at_exit).
    global _exiting
    _exiting = True
    while True:
        try:
            release, handle, args, label = _pending.popleft()
        except IndexError:
            break
        _release_quietly_at_exit(release, handle, args, label)
    while True:
        try:
            _key, (release, handle, args, label) = _live.popitem()
        except KeyError:
            return
        _release_quietly_at_exit(release, handle, args, label)


# atexit runs hooks last-registered first. weakref.finalize registers its exit hook when
# the first finalize object of the process is made; making one here first guarantees that
# our hook is registered after it, hence runs before it.
weakref.finalize(_drain_at_exit, lambda: None).atexit = False
atexit.register(_drain_at_exit)


class _Epoch:
    """Whether handles made since the last context reset may still be released."""

    __slots__ = ("alive",)

    def __init__(self) -> None:
        self.alive = True


_epoch = _Epoch()


def retire_epoch() -> None:
    """End the current epoch: every release of a context-bound resource made so far
    does nothing from now on (see the module docstring)."""
    global _epoch
    old, _epoch = _epoch, _Epoch()
    old.alive = False


# release function -> callbacks run with the handle just before it is released (while
# it is still valid): caches that remember raw handles of that kind forget them.
_before_release: dict = {}


def before_release(release, callback) -> None:
    """Run ``callback(handle)`` before each release through `release` of a context-bound
    resource (e.g. `stream._destroy_stream`: tables holding raw stream handles must not
    use one once the driver may give its address to a new stream)."""
    _before_release.setdefault(release, []).append(callback)


def _bound_release(handle, epoch, release, *args) -> None:
    # The release of a context-bound resource: skipped once its context was reset.
    if epoch.alive:
        hooks = _before_release.get(release)
        if hooks is not None:
            for hook in hooks:
                hook(handle)
        release(handle, *args)


def forget(predicate, *, live: bool = True) -> list:
    """Drop the releases, queued or (with `live`) of live `TrackedResource` objects, for
    which ``predicate(release, handle, args)`` is true; returns the dropped entries. Used
    when a context is reset or lost: its memory is gone, and the addresses may be handed
    out again.

    Thread safety
    -------------
    Safe against concurrent allocations and frees: a table entry is taken by exactly one
    of `forget`, `close()` and the object's death.
    """
    dropped = []
    for key, entry in list(_live.items()) if live else ():  # one atomic copy (GIL)
        if predicate(entry[0], entry[1], entry[2]) and _live.pop(key, None) is not None:
            dropped.append(entry)
    for _ in range(len(_pending)):
        try:
            entry = _pending.popleft()
        except IndexError:
            break
        if predicate(entry[0], entry[1], entry[2]):
            dropped.append(entry)
        else:
            _pending.append(entry)
    return dropped


def pending_count() -> int:
    """How many releases are queued (for tests and diagnostics)."""
    return len(_pending)


def live_count() -> int:
    """How many `TrackedResource` objects own a handle not yet released (diagnostics)."""
    return len(_live)


# Stream captures cupric has begun and not ended. While one is open, releases wait: a free
# or module unload inside a global-mode capture is an unsupported call that invalidates
# the capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), so they run after it ends.
_captures = [0]
_captures_lock = threading.Lock()


def capture_began() -> None:
    """Hold deferred releases back until the matching `capture_ended` (graph capture)."""
    with _captures_lock:
        _captures[0] += 1


def capture_ended() -> None:
    """The capture that `capture_began` announced is over; queued releases may run."""
    with _captures_lock:
        _captures[0] -= 1


def drain() -> None:
    """Run the releases queued by finalizers.

    Called by `_driver.check` after each successful driver call when the queue is not
    empty, by allocation paths, and at exit. A release that fails cannot raise into an
    unrelated caller; it is reported as a `RuntimeWarning` naming the object.

    Thread safety
    -------------
    Safe from any thread; one thread drains at a time, and a drain started from within a
    release (re-entry through `check`) returns at once, as does one during a stream
    capture begun through cupric (`capture_began`).
    """
    if _captures[0] or not _drain_lock.acquire(blocking=False):
        return
    try:
        # Only the lock holder pops (and the exit hook, at exit): the truth test ends the
        # loop without the cost of a raised IndexError.
        while _pending:
            try:
                release, handle, args, label = _pending.popleft()
            except IndexError:
                return
            try:
                release(handle, *args)
            except Exception as exc:  # reported, not swallowed: see the docstring
                warnings.warn(f"cupric: deferred release of {_text(label)} failed: {exc}",
                              RuntimeWarning, stacklevel=2)
    finally:
        _drain_lock.release()


class Resource:
    """Base of objects that own (or borrow) a driver handle.

    Subclasses call `_init_resource(handle, release, *args)` once (``bound=False`` for a
    release that stays valid across context resets), read the handle through
    `handle` (which raises `ClosedError` once closed) and may override `_label()`.

    Attributes
    ----------
    closed : bool
        True once `close()` ran (or, for owned handles, the handle was released). A plain
        slot (the one the class itself tests): read it, never write it.

    Thread safety
    -------------
    `close()` may race with itself or with the finalizer: exactly one of them releases.
    Using an object while another thread closes it is the caller's error (as with files).
    """

    __slots__ = ("_handle", "_finalizer", "_closed", "__weakref__")

    def _init_resource(self, handle, release, *args, bound: bool = True) -> None:
        self._handle = handle
        self._closed = False
        if release is None:  # borrowed: never destroyed by us
            self._finalizer = None
        else:
            if bound:  # released only while its context lives (see retire_epoch)
                release, args = _bound_release, (_epoch, release, *args)
            # The finalizer holds the raw handle and the release function, never `self`.
            self._finalizer = weakref.finalize(self, _finalize, release, handle, args,
                                               self._label())

    def _label(self) -> str:
        return type(self).__name__

    @property
    def handle(self):
        """The raw driver handle (a cuda.bindings object).

        Raises
        ------
        ClosedError
            If the object was closed.
        """
        if self._closed:
            raise ClosedError(f"this {type(self).__name__} is closed")
        return self._handle

    @property
    def owns_handle(self) -> bool:
        """False for objects made by `from_handle()`, which borrow and never destroy."""
        return self._finalizer is not None

    def close(self) -> None:
        """Release the handle now. A second call does nothing.

        Raises
        ------
        CudaError
            If the driver fails to release the handle (the object is closed anyway: the
            handle must not be released twice).
        """
        if self._closed:
            return
        self._closed = True
        fin = self._finalizer
        if fin is None:
            return
        info = fin.detach()  # atomic: only one of close()/finalizer gets the arguments
        if info is None:
            return
        _obj, _func, (release, handle, args, _label), _kwargs = info
        release(handle, *args)

    def __enter__(self):
        if self._closed:
            raise ClosedError(f"cannot enter a closed {type(self).__name__}")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


class DeviceResource(Resource):
    """A `Resource` of one device whose raw handle is also kept as an int: the base of
    contexts, streams and events (a subclass sets ``_device`` and ``_ptr`` before
    `_init_resource`).

    Attributes
    ----------
    ptr : int
        The raw handle (``CUcontext``, ``CUstream``, ``CUevent``) as an int; 0 and 2 are
        the legacy and the per-thread default streams. A plain slot: read it, never write
        it.
    """

    __slots__ = ("_device", "_ptr")

    @property
    def device(self):
        """The `Device` it belongs to."""
        return self._device


# `closed` and `ptr` are the very slots `_closed` and `_ptr` under public names: other
# packages test them on per-call paths (launches, library calls), where a property would
# cost a Python call; a read through them is a slot read.
Resource.closed = Resource.__dict__["_closed"]
DeviceResource.ptr = DeviceResource.__dict__["_ptr"]


class TrackedResource(Resource):
    """A `Resource` whose release is an entry of the process-wide table, not a
    `weakref.finalize` (see the module docstring): same API and guarantees, cheaper to
    make and to release.

    Subclasses call `_track(handle, release, args, label)` (`args` a tuple, `label` a str
    or a ``(format, *values)`` tuple) or `_init_resource` as for `Resource`.

    Thread safety
    -------------
    As `Resource`: `close()` racing with itself or with the object's death releases once.
    """

    __slots__ = ()

    def _init_resource(self, handle, release, *args, bound: bool = True) -> None:
        if release is not None and bound:
            release, args = _bound_release, (_epoch, release, *args)
        self._track(handle, release, args, None if release is None else self._label())

    def _track(self, handle, release, args: tuple, label) -> None:
        self._handle = handle
        self._closed = False
        if release is None:  # borrowed: never destroyed by us
            self._finalizer = None
        else:
            self._finalizer = True  # owns its handle (`owns_handle`)
            _live[id(self)] = (release, handle, args, label)

    def _untrack(self):
        """The release entry, removed from the table; None if it was already taken."""
        return _live.pop(id(self), None)

    def close(self) -> None:
        """Release the handle now. A second call does nothing.

        Raises
        ------
        CudaError
            If the driver fails to release the handle (the object is closed anyway: the
            handle must not be released twice).
        """
        if self._closed:
            return
        self._closed = True
        entry = _live.pop(id(self), None)
        if entry is None:
            return
        release, handle, args, _label = entry
        release(handle, *args)

    # The table's pop is bound as a default: module globals may be gone when the last
    # objects die at interpreter shutdown (by then the exit hook has emptied the table,
    # so the globals below are only read while they exist). The exit hook sets
    # `_exiting` before weakref.finalize's own hook runs, so `_finalize`'s second test
    # is not needed here.
    def __del__(self, _pop=_live.pop) -> None:
        entry = _pop(id(self), None)
        if entry is not None:
            if _exiting:
                _release_quietly_at_exit(*entry)
            else:
                _pending.append(entry)
