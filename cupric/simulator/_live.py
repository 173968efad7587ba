"""Simulated threads that are live at the same time (one OS thread each): the block
barrier (syncthreads and its counting forms), warp collectives in lock-step, and the grid
barrier of a cooperative launch.

Exactly one simulated thread of a live set runs at any moment: it holds the baton, and
passes it on when it blocks (at a barrier or collective that is not complete), yields
(nanosleep, atomics in spin loops) or exits. Each thread waits for the baton on its own
lock, so a hand-off wakes exactly one OS thread: no herd of threads fighting for the GIL
at every barrier, and no locking of the bookkeeping, which only the baton holder touches.
When a thread blocks and no thread can run, that is a deadlock, reported at once; a
thread that exits while others wait for it at a barrier is reported too.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .. import types as _t
from .errors import BarrierError, DeadlockError

__all__ = ["LiveSet", "BlockSync", "Aborted", "BLOCKED", "warp_compute", "barrier_result",
           "WARP_OPS"]

WARP = 32
FULL = 0xFFFFFFFF


class _Blocked:
    def __repr__(self) -> str:
        return "BLOCKED"


#: What a collective returns in the generator engine when the calling thread must wait:
#: its result comes later, when the scheduler resumes it.
BLOCKED = _Blocked()


class Aborted(BaseException):
    """Unwinds a simulated thread after another thread of its live set failed.

    A BaseException so that kernel code's own `except Exception` cannot swallow it."""


def _site(site) -> str:
    return f"{site[0]}:{site[1]}" if site else "?"


class _Barrier:
    """The threads that have arrived at a barrier whose instance is not complete yet."""

    __slots__ = ("n", "arrivals")

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrivals: dict = {}  # key -> (op, site, value, state)


class _WarpSync:
    __slots__ = ("existing", "exited", "pending", "arrived", "members", "converging")

    def __init__(self, existing: int) -> None:
        self.existing = existing  # lanes that exist in this (maybe partial) warp
        self.exited = 0
        self.pending: dict = {}  # lane -> (op, mask, args, site, state)
        self.arrived = 0  # the lanes of `pending`, as a mask
        self.members: list = []  # the ThreadState of each existing lane
        self.converging: dict = {}  # lane -> (site, state), waiting in warp.activemask


class BlockSync:
    """The barrier and warp rendezvous state of one block in a live set."""

    __slots__ = ("barrier", "warps", "exited", "exited_tid")

    def __init__(self, nthreads: int) -> None:
        self.barrier = _Barrier(nthreads)
        self.warps = []
        for w in range((nthreads + WARP - 1) // WARP):
            lanes = min(WARP, nthreads - w * WARP)
            self.warps.append(_WarpSync((1 << lanes) - 1))
        self.exited = 0
        self.exited_tid = None


def barrier_result(op: str, values) -> int | None:
    """What syncthreads(_count/_and/_or) returns given every thread's predicate."""
    if op == "syncthreads":
        return None
    if op == "syncthreads_count":
        return np.int32(sum(1 for v in values if v))
    if op == "syncthreads_and":
        return np.int32(all(values))
    return np.int32(any(values))


_LANES: dict = {}


def _lanes(mask: int) -> tuple:
    """The lanes set in `mask`, in order (cached: collectives ask for every arrival)."""
    lanes = _LANES.get(mask)
    if lanes is None:
        lanes = _LANES[mask] = tuple(lane for lane in range(WARP) if mask >> lane & 1)
    return lanes


#: Warp collectives defined outside this module (tensor cores: _impl_mma): op ->
#: compute(group, args) -> {lane: result}, called as the built-in ones below.
WARP_OPS: dict = {}


def warp_compute(op: str, group: int, args: dict) -> dict:
    """Results per lane of a warp collective; `args[lane]` are that lane's arguments."""
    custom = WARP_OPS.get(op)
    if custom is not None:
        return custom(group, args)
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
        return dict.fromkeys(lanes, np.uint32(r))
    if op == "warp.match_any":
        return {lane: np.uint32(sum(1 << other for other in lanes
                                    if args[other][0] == args[lane][0]))
                for lane in lanes}
    if op == "warp.match_all":
        same = all(v == values[0] for v in values)
        return dict.fromkeys(lanes, (np.uint32(group if same else 0), same))
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
        out = {}
        for lane in lanes:
            value = args[lane][0]
            # redux.sync wraps at the operand width: cast to each lane's integer type.
            out[lane] = (_t.scalar_from_dtype(value.dtype)(acc)
                         if isinstance(value, np.integer) else acc)
        return out
    raise ValueError(f"unknown warp collective {op!r}")


class LiveSet:
    """Simulated threads that run at once: one block, or every block of a cooperative grid.

    Only the thread holding the baton calls these methods (and `start`, by the launcher,
    before any holds it), or, in the generator engine, the one scheduler; so they need no
    lock. `progress` counts hand-offs and exits, for the OS-thread engine's watchdog.
    """

    def __init__(self, states: list, generators: bool = False) -> None:
        # generators: the threads are generators resumed by one scheduler (see
        # _engine), not OS threads passing a baton; waiting means returning BLOCKED.
        self.generators = generators
        self.states = states
        self.runnable = deque(states)
        self.live = len(states)
        self.waiting: dict = {}  # blocked state -> what it waits at, for reports
        self.error: BaseException | None = None
        self.aborted = False
        self.exited_total = 0
        self.exited_states: set = set()
        self.grid = _Barrier(len(states))
        self.progress = 0
        self.nblocks = 0

    def block_sync(self, nthreads: int) -> BlockSync:
        """The sync state of the next block; its threads are the next `nthreads` states."""
        sync = BlockSync(nthreads)
        first = nthreads * self.nblocks
        self.nblocks += 1
        for w, ws in enumerate(sync.warps):
            start = first + w * WARP
            ws.members = self.states[start:start + WARP][:min(WARP, nthreads - w * WARP)]
        return sync

    def start(self) -> None:
        """Hand the baton to the first thread."""
        self.runnable.popleft().wake.release()

    # -- scheduling -----------------------------------------------------------------

    def _block(self, me, what: tuple):
        """Give the baton away until a collective releases `me`; returns its result."""
        self.waiting[me] = what
        ws = me.sync.warps[me.lin >> 5]
        if ws.converging:
            self._converge(ws, me)
            if me not in self.waiting:  # released at once by the convergence just resolved
                result, me.result = me.result, None
                return result
        if not self.runnable:
            raise self._deadlock()
        if self.generators:
            return BLOCKED
        self._switch(me)
        result, me.result = me.result, None
        return result

    def _converge(self, ws: _WarpSync, me=None) -> None:
        """Resolve warp.activemask calls once no lane of the warp can run any more.

        A lane waiting in activemask waits until every other live lane of its warp has
        stopped (at activemask, a barrier or a collective) or exited; the lanes stopped
        at the same activemask are the ones executing together, and that is the mask.
        """
        if not ws.converging:
            return
        for lane, member in enumerate(ws.members):
            if not ws.exited >> lane & 1 and member not in self.waiting:
                return
        by_site: dict = {}
        for lane, (site, _) in ws.converging.items():
            by_site[site] = by_site.get(site, 0) | 1 << lane
        for lane, (site, member) in ws.converging.items():
            if member is me:  # the running thread: it goes on without a hand-off
                me.result = np.uint32(by_site[site])
                del self.waiting[me]
            else:
                self._release([member], [np.uint32(by_site[site])])
        ws.converging.clear()

    def activemask(self, state, site) -> int:
        self._check()
        ws = state.sync.warps[state.lin >> 5]
        ws.converging[state.lin & 31] = (site, state)
        return self._block(state, ("warp.activemask", site))

    def _switch(self, me) -> None:
        self.progress += 1
        self.runnable.popleft().wake.release()
        me.wake.acquire()
        if self.aborted:
            raise Aborted()

    def pause(self, me) -> None:
        """Let the other runnable threads run before `me` goes on (spin loops)."""
        if self.aborted:
            raise Aborted()
        if self.generators:
            return  # the rewritten kernel yields right after, and the scheduler pauses it
        if self.runnable:
            self.runnable.append(me)
            self._switch(me)

    def _release(self, states, results) -> None:
        for s, r in zip(states, results):
            s.result = r
            del self.waiting[s]
            self.runnable.append(s)

    def _deadlock(self) -> DeadlockError:
        lines: dict = {}
        for s, (op, site) in self.waiting.items():
            lines.setdefault(f"{op} at {_site(site)}", []).append((s.bid, s.tid))
        report = "; ".join(f"{len(who)} thread(s) at {what} (e.g. block {who[0][0]}, "
                           f"thread {who[0][1]})" for what, who in lines.items())
        return DeadlockError(f"deadlock: every live thread waits and none can proceed: "
                             f"{report}")

    def _check(self) -> None:
        if self.aborted:
            raise Aborted()

    # -- failure --------------------------------------------------------------------

    def fail(self, me, error: BaseException) -> None:
        """Record the first failure; wake every parked thread so that it unwinds."""
        if self.error is None:
            self.error = error
        if self.aborted:
            return
        self.aborted = True
        if self.generators:
            return
        for s in self.states:
            if s is not me and s not in self.exited_states:
                s.wake.release()

    # -- block barrier ---------------------------------------------------------------

    def barrier(self, state, op: str, value, site):
        if self.aborted:
            raise Aborted()
        sync = state.sync
        bar = sync.barrier
        if sync.exited:
            raise BarrierError(
                f"{op} is not reached by every thread of the block: thread "
                f"{sync.exited_tid} has already exited", filename=site[0], line=site[1])
        bar.arrivals[state.lin] = (op, site, value, state)
        if len(bar.arrivals) < bar.n:
            return self._block(state, (op, site))
        arrivals = bar.arrivals
        bar.arrivals = {}
        kinds = {(a[0], a[1]) for a in arrivals.values()}
        if len(kinds) > 1:
            desc = ", ".join(f"{k[0]} at {_site(k[1])}" for k in sorted(kinds))
            raise BarrierError(f"divergent block barrier: the threads of the block wait at "
                               f"different barriers ({desc})", filename=site[0], line=site[1])
        result = barrier_result(op, [a[2] for a in arrivals.values()])
        others = [a[3] for a in arrivals.values() if a[3] is not state]
        self._release(others, [result] * len(others))
        return result

    # -- grid barrier ----------------------------------------------------------------

    def grid_barrier(self, state, site) -> None:
        self._check()
        bar = self.grid
        if self.exited_total:
            raise BarrierError("grid_sync is not reached by every thread of the grid: "
                               "some thread has already exited", filename=site[0], line=site[1])
        bar.arrivals[state] = ("grid_sync", site, None, state)
        if len(bar.arrivals) < bar.n:
            return self._block(state, ("grid_sync", site))
        others = [a[3] for a in bar.arrivals.values() if a[3] is not state]
        bar.arrivals = {}
        self._release(others, [None] * len(others))
        return None

    # -- warp collectives ------------------------------------------------------------

    def warp_op(self, state, op: str, mask: int, args: tuple, site):
        self._check()
        ws = state.sync.warps[state.lin >> 5]
        lane = state.lin & 31
        group = mask & ws.existing
        if group & ws.exited:
            gone = _lanes(group & ws.exited)[0]
            raise BarrierError(f"{op}: lane {gone}, named in mask {mask:#010x}, has already "
                               f"exited", filename=site[0], line=site[1])
        ws.pending[lane] = (op, mask, args, site, state)
        ws.arrived |= 1 << lane
        if ws.arrived & group != group:
            return self._block(state, (op, site))
        members = _lanes(group)
        ws.arrived &= ~group
        entries = {other: ws.pending.pop(other) for other in members}
        kinds = {(e[0], e[1]) for e in entries.values()}
        if len(kinds) > 1:
            desc = ", ".join(f"{k[0]} with mask {k[1]:#010x}" for k in sorted(kinds))
            raise BarrierError(f"lanes of a warp named in one mask execute different warp "
                               f"operations ({desc})", filename=site[0], line=site[1])
        results = warp_compute(op, group, {k: e[2] for k, e in entries.items()})
        others = [other for other in members if other != lane]
        self._release([entries[o][4] for o in others], [results[o] for o in others])
        return results[lane]

    # -- thread exit -----------------------------------------------------------------

    def exit(self, state) -> None:
        """The baton holder returned from the kernel: check its waiters, pass the baton."""
        if self.aborted:
            return
        self.live -= 1
        self.exited_total += 1
        self.exited_states.add(state)
        self.progress += 1
        sync = state.sync
        sync.exited += 1
        sync.exited_tid = state.tid
        bar = sync.barrier
        if bar.arrivals:
            op, site = next(iter(bar.arrivals.values()))[:2]
            raise BarrierError(
                f"thread {state.tid} exited while {len(bar.arrivals)} thread(s) of its block "
                f"wait at {op} at {_site(site)}: a barrier must be reached by every thread "
                f"of the block", filename=site[0], line=site[1])
        if self.grid.arrivals:
            site = next(iter(self.grid.arrivals.values()))[1]
            raise BarrierError(f"thread {state.tid} exited while other threads wait at "
                               f"grid_sync", filename=site[0], line=site[1])
        ws = sync.warps[state.lin >> 5]
        lane = state.lin & 31
        ws.exited |= 1 << lane
        for other, (op, mask, _, site, _) in ws.pending.items():
            if mask >> lane & 1:
                raise BarrierError(f"lane {lane} exited while lane {other} waits for it at "
                                   f"{op} (mask {mask:#010x})", filename=site[0], line=site[1])
        self._converge(ws)
        if self.runnable:
            if not self.generators:
                self.runnable.popleft().wake.release()
        elif self.live:
            raise self._deadlock()
