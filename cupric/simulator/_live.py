"""Rendezvous of simulated threads that run at the same time (one OS thread each): the
block barrier (syncthreads and its counting forms), warp collectives in lock-step, and
the grid barrier of a cooperative launch.

One lock guards a whole live set (one block, or the whole grid for a cooperative launch),
so the bookkeeping that detects misuse is simple: a count of live threads and of blocked
ones. When every live thread waits and no wait can complete, that is a deadlock, reported
at once. A thread that exits while others wait for it at a barrier is reported too.
"""

from __future__ import annotations

import os
import threading
import time

from .errors import BarrierError, DeadlockError

__all__ = ["LiveSet", "BlockSync", "Aborted", "warp_compute", "barrier_result"]

WARP = 32
FULL = 0xFFFFFFFF


class Aborted(BaseException):
    """Unwinds a simulated thread after another thread of its live set failed.

    A BaseException so that kernel code's own `except Exception` cannot swallow it."""


def _timeout() -> float:
    return float(os.environ.get("CUPRIC_SIMULATOR_TIMEOUT", "60"))


def _site(site) -> str:
    return f"{site[0]}:{site[1]}" if site else "?"


class _Barrier:
    """Arrivals at one barrier instance, generation by generation."""

    __slots__ = ("n", "arrivals", "gen", "result", "cond")

    def __init__(self, n: int, lock) -> None:
        self.n = n
        self.arrivals: dict = {}  # key -> (op, site, value, state)
        self.gen = 0
        self.result = None
        self.cond = threading.Condition(lock)


class _WarpSync:
    __slots__ = ("existing", "exited", "pending", "results", "cond")

    def __init__(self, existing: int, lock) -> None:
        self.existing = existing  # lanes that exist in this (maybe partial) warp
        self.exited = 0
        self.pending: dict = {}  # lane -> (op, mask, args, site, state)
        self.results: dict = {}  # lane -> value, for released lanes not yet awake
        self.cond = threading.Condition(lock)


class BlockSync:
    """The barrier and warp rendezvous state of one block in a live set."""

    __slots__ = ("barrier", "warps", "exited", "exited_tid")

    def __init__(self, nthreads: int, lock) -> None:
        self.barrier = _Barrier(nthreads, lock)
        self.warps = []
        for w in range((nthreads + WARP - 1) // WARP):
            lanes = min(WARP, nthreads - w * WARP)
            self.warps.append(_WarpSync((1 << lanes) - 1, lock))
        self.exited = 0
        self.exited_tid = None


def barrier_result(op: str, values) -> int | None:
    """What syncthreads(_count/_and/_or) returns given every thread's predicate."""
    if op == "syncthreads":
        return None
    if op == "syncthreads_count":
        return sum(1 for v in values if v)
    if op == "syncthreads_and":
        return int(all(values))
    return int(any(values))


def _lanes(mask: int):
    return [lane for lane in range(WARP) if mask >> lane & 1]


def warp_compute(op: str, group: int, args: dict) -> dict:
    """Results per lane of a warp collective; `args[lane]` are that lane's arguments."""
    lanes = _lanes(group)
    if op == "syncwarp":
        return dict.fromkeys(lanes)
    if op.startswith("warp.shfl_"):
        kind = op[10:]
        out = {}
        for lane in lanes:
            value, arg, width = args[lane]
            base = lane - lane % width
            if kind == "idx":
                src = base + arg % width
            elif kind == "up":
                src = lane - arg
                src = src if src >= base else lane
            elif kind == "down":
                src = lane + arg
                src = src if src < base + width else lane
            else:  # xor
                src = lane ^ arg
                src = src if src < base + width else lane
            # Reading a lane that does not take part is undefined on a GPU; the simulator
            # gives the caller its own value, as for an out-of-segment read.
            out[lane] = args[src][0] if group >> src & 1 else value
        return out
    values = [args[lane][0] for lane in lanes]
    if op == "warp.any":
        r = any(values)
        return dict.fromkeys(lanes, bool(r))
    if op == "warp.all":
        r = all(values)
        return dict.fromkeys(lanes, bool(r))
    if op == "warp.ballot":
        r = 0
        for lane, v in zip(lanes, values):
            if v:
                r |= 1 << lane
        return dict.fromkeys(lanes, r)
    if op == "warp.match_any":
        return {lane: sum(1 << other for other in lanes if args[other][0] == args[lane][0])
                for lane in lanes}
    if op == "warp.match_all":
        same = all(v == values[0] for v in values)
        return dict.fromkeys(lanes, (group if same else 0, same))
    if op.startswith("warp.reduce_"):
        kind = op[12:]
        acc = values[0]
        for v in values[1:]:
            if kind == "add":
                acc = acc + v
            elif kind == "min":
                acc = v if v < acc else acc
            elif kind == "max":
                acc = v if v > acc else acc
            elif kind == "and":
                acc = acc & v
            elif kind == "or":
                acc = acc | v
            else:
                acc = acc ^ v
        return dict.fromkeys(lanes, acc)
    raise ValueError(f"unknown warp collective {op!r}")


class LiveSet:
    """Simulated threads that run at once: one block, or every block of a cooperative grid.

    Every method that waits runs under `lock`; `blocked` counts threads waiting and is
    decremented by whoever releases them, so that "every live thread is blocked" is
    exact at any moment the lock is held.
    """

    def __init__(self, nthreads: int) -> None:
        self.lock = threading.Lock()
        self.live = nthreads
        self.blocked = 0
        self.waiting: dict = {}  # state -> description of its wait, for deadlock reports
        self.error: BaseException | None = None
        self.aborted = False
        self.exited_total = 0
        self.grid = _Barrier(nthreads, self.lock)
        self.syncs: list[BlockSync] = []
        self.timeout = _timeout()

    def block_sync(self, nthreads: int) -> BlockSync:
        sync = BlockSync(nthreads, self.lock)
        self.syncs.append(sync)
        return sync

    # -- failure --------------------------------------------------------------------

    def fail(self, error: BaseException) -> None:
        """Record the first failure and wake every waiting thread so that it unwinds."""
        with self.lock:
            if self.error is None:
                self.error = error
            self.aborted = True
            self._wake_all()

    def _wake_all(self) -> None:
        self.grid.cond.notify_all()
        for sync in self.syncs:
            sync.barrier.cond.notify_all()
            for w in sync.warps:
                w.cond.notify_all()

    def _wait(self, cond, done, state, what: str) -> None:
        """Block until done(); deadlock and timeout raise, an abort unwinds (lock held)."""
        self.blocked += 1
        self.waiting[state] = what
        if self.blocked >= self.live:
            raise self._deadlock()
        deadline = time.monotonic() + self.timeout
        while not done():
            if self.aborted:
                raise Aborted()
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlockError(
                    f"{what} waited more than {self.timeout:g} s (CUPRIC_SIMULATOR_TIMEOUT); "
                    f"a thread is probably spinning on a value no other thread will write",
                    filename=None, line=None)
            cond.wait(left)

    def _release(self, states) -> None:
        for s in states:
            self.blocked -= 1
            self.waiting.pop(s, None)

    def _deadlock(self) -> DeadlockError:
        lines = {}
        for s, what in self.waiting.items():
            lines.setdefault(what, []).append((s.bid, s.tid))
        report = "; ".join(f"{len(who)} thread(s) at {what} (e.g. block {who[0][0]}, "
                           f"thread {who[0][1]})" for what, who in lines.items())
        return DeadlockError(f"deadlock: every live thread waits and none can proceed: "
                             f"{report}")

    def _check(self) -> None:
        if self.aborted:
            raise Aborted()

    # -- block barrier ---------------------------------------------------------------

    def barrier(self, state, op: str, value, site):
        with self.lock:
            self._check()
            sync = state.sync
            bar = sync.barrier
            if sync.exited:
                raise BarrierError(
                    f"{op} is not reached by every thread of the block: thread "
                    f"{sync.exited_tid} has already exited", filename=site[0], line=site[1])
            bar.arrivals[state.lin] = (op, site, value, state)
            if len(bar.arrivals) == bar.n:
                arrivals = bar.arrivals
                kinds = {(a[0], a[1]) for a in arrivals.values()}
                if len(kinds) > 1:
                    desc = ", ".join(f"{k[0]} at {_site(k[1])}" for k in sorted(kinds))
                    raise BarrierError(f"divergent block barrier: the threads of the block "
                                       f"wait at different barriers ({desc})",
                                       filename=site[0], line=site[1])
                bar.result = barrier_result(op, [a[2] for a in arrivals.values()])
                bar.arrivals = {}
                bar.gen += 1
                self._release([a[3] for a in arrivals.values() if a[3] is not state])
                bar.cond.notify_all()
                return bar.result
            gen = bar.gen
            self._wait(bar.cond, lambda: bar.gen != gen, state, f"{op} at {_site(site)}")
            return bar.result

    # -- grid barrier ----------------------------------------------------------------

    def grid_barrier(self, state, site) -> None:
        with self.lock:
            self._check()
            bar = self.grid
            if self.exited_total:
                raise BarrierError("grid_sync is not reached by every thread of the grid: "
                                   "some thread has already exited",
                                   filename=site[0], line=site[1])
            bar.arrivals[state] = ("grid_sync", site, None, state)
            if len(bar.arrivals) == bar.n:
                released = [a[3] for a in bar.arrivals.values() if a[3] is not state]
                bar.arrivals = {}
                bar.gen += 1
                self._release(released)
                bar.cond.notify_all()
                return None
            gen = bar.gen
            self._wait(bar.cond, lambda: bar.gen != gen, state, f"grid_sync at {_site(site)}")
            return None

    # -- warp collectives ------------------------------------------------------------

    def warp_op(self, state, op: str, mask: int, args: tuple, site):
        with self.lock:
            self._check()
            ws = state.sync.warps[state.lin >> 5]
            lane = state.lin & 31
            group = mask & ws.existing
            if group & ws.exited:
                gone = _lanes(group & ws.exited)[0]
                raise BarrierError(f"{op}: lane {gone}, named in mask {mask:#010x}, has "
                                   f"already exited", filename=site[0], line=site[1])
            ws.pending[lane] = (op, mask, args, site, state)
            if all(other in ws.pending for other in _lanes(group)):
                entries = {other: ws.pending[other] for other in _lanes(group)}
                kinds = {(e[0], e[1]) for e in entries.values()}
                if len(kinds) > 1:
                    desc = ", ".join(f"{k[0]} with mask {k[1]:#010x}" for k in sorted(kinds))
                    raise BarrierError(f"lanes of a warp named in one mask execute different "
                                       f"warp operations ({desc})",
                                       filename=site[0], line=site[1])
                results = warp_compute(op, group, {k: e[2] for k, e in entries.items()})
                released = []
                for other, entry in entries.items():
                    del ws.pending[other]
                    if other != lane:
                        ws.results[other] = results[other]
                        released.append(entry[4])
                self._release(released)
                ws.cond.notify_all()
                return results[lane]
            self._wait(ws.cond, lambda: lane in ws.results, state, f"{op} at {_site(site)}")
            return ws.results.pop(lane)

    # -- thread exit -----------------------------------------------------------------

    def exit(self, state) -> None:
        """A simulated thread returned from the kernel."""
        with self.lock:
            if self.aborted:
                return
            self.live -= 1
            self.exited_total += 1
            sync = state.sync
            sync.exited += 1
            sync.exited_tid = state.tid
            bar = sync.barrier
            if bar.arrivals:
                op, site = next(iter(bar.arrivals.values()))[:2]
                raise BarrierError(
                    f"thread {state.tid} exited while {len(bar.arrivals)} thread(s) of its "
                    f"block wait at {op} at {_site(site)}: a barrier must be reached by "
                    f"every thread of the block", filename=site[0], line=site[1])
            if self.grid.arrivals:
                site = next(iter(self.grid.arrivals.values()))[1]
                raise BarrierError(f"thread {state.tid} exited while other threads wait at "
                                   f"grid_sync", filename=site[0], line=site[1])
            ws = sync.warps[state.lin >> 5]
            lane = state.lin & 31
            ws.exited |= 1 << lane
            for other, (op, mask, _, site, _) in ws.pending.items():
                if mask >> lane & 1:
                    raise BarrierError(
                        f"lane {lane} exited while lane {other} waits for it at {op} "
                        f"(mask {mask:#010x})", filename=site[0], line=site[1])
            if self.live and self.blocked >= self.live:
                raise self._deadlock()
