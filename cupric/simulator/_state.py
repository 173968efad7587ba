"""Per-launch, per-block and per-thread execution state of the simulator, and the lazy
dispatch table through which `cupric.device` intrinsics reach their implementations.
"""

from __future__ import annotations

import threading
import time
from types import MethodType

import numpy as np

from .errors import SimulatorError

__all__ = ["IMPLS", "implements", "LaunchState", "BlockState", "ThreadState"]

# intrinsic name -> function(state, *args, **kwargs); filled by _impl and _impl_math.
IMPLS: dict[str, object] = {}


def implements(*names: str):
    """Register the decorated function as the simulator implementation of `names`."""
    def register(func):
        for name in names:
            if name in IMPLS:
                raise ValueError(f"two simulator implementations of {name!r}")
            IMPLS[name] = func
        return func
    return register


class LaunchState:
    """What every thread of a launch shares: its shape, the atomics lock, the clock."""

    __slots__ = ("grid", "block", "nthreads", "shared_bytes", "atomic_lock", "t0", "mode")

    def __init__(self, grid: tuple, block: tuple, shared_bytes: int, mode: str) -> None:
        self.grid = grid
        self.block = block
        self.nthreads = block[0] * block[1] * block[2]
        self.shared_bytes = shared_bytes
        # One lock serializes every atomic of the launch: simple, and the GIL would
        # serialize them anyway.
        self.atomic_lock = threading.Lock()
        self.t0 = time.perf_counter_ns()
        self.mode = mode


# Uninitialized memory on a GPU holds whatever was there; the simulator fills shared and
# local memory with 0xFF bytes (NaN for floats, -1 or the maximum for integers) so that a
# kernel reading memory it never wrote gets a visibly wrong value instead of a lucky zero.
POISON = 0xFF


class BlockState:
    """One block: its index, shared memory (static arrays by declaration site, dynamic
    bytes) and, when its threads run at once, its barrier state."""

    __slots__ = ("bid", "shared", "static_bytes", "dynamic", "lock", "sync")

    def __init__(self, bid: tuple, shared_bytes: int, sync=None) -> None:
        self.bid = bid
        self.shared: dict = {}
        self.static_bytes = 0
        self.dynamic = np.full(shared_bytes, POISON, dtype=np.uint8)
        self.lock = threading.Lock()
        self.sync = sync


class _Dispatch(dict):
    """name -> implementation bound to one thread's state, made on first use."""

    __slots__ = ("_state",)

    def __init__(self, state: "ThreadState") -> None:
        super().__init__()
        self._state = state

    def __missing__(self, name: str):
        try:
            impl = IMPLS[name]
        except KeyError:
            raise SimulatorError(f"the simulator has no implementation of "
                                 f"cupric.device.{name}") from None
        bound = MethodType(impl, self._state)
        self[name] = bound
        return bound


class ThreadState:
    """One simulated GPU thread: its coordinates and the state it shares.

    In serial mode one ThreadState is reused for every thread of the launch, its
    coordinates updated in place; in threaded modes each OS thread has its own.
    `live` is the LiveSet of threads running at once, or None when running serially.
    """

    __slots__ = ("dispatch", "launch", "block", "sync", "live", "bid", "tid", "lin", "wake",
                 "result", "atomics")

    def __init__(self, launch: LaunchState, live=None) -> None:
        self.dispatch = _Dispatch(self)
        self.launch = launch
        self.live = live
        self.block = None
        self.sync = None
        self.bid = (0, 0, 0)
        self.tid = (0, 0, 0)
        self.lin = 0
        # Threaded modes: the lock this thread blocks on until it is handed the baton
        # (see _live), the value a collective that released it left for it, and a count
        # of atomics since it last let other threads run.
        self.wake = None
        self.result = None
        self.atomics = 0

    def enter_block(self, block: BlockState) -> None:
        self.block = block
        self.bid = block.bid
        self.sync = block.sync
