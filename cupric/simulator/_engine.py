"""The generator engine: runs the threads of a block (or of a cooperative grid) live at
once in one OS thread, each as a generator made from the kernel by `_transform`, resumed
by a round-robin scheduler over the same `LiveSet` bookkeeping the OS-thread engine uses.
"""

from __future__ import annotations

import numpy as np

from ..device import registry
from ._impl import COLLECTIVES
from ._live import BLOCKED, LiveSet
from ._state import BlockState, LaunchState, ThreadState
from ._transform import PAUSE

__all__ = ["run_generators"]

# A thread lets the others run after this many atomics in a row (spin loops on a CAS).
_ATOMICS_PER_PAUSE = 16


def run_generators(gen_func, args, launch: LaunchState, block_ids, thread_ids, located,
                   returned) -> None:
    """Run every block (or the whole grid, in grid mode) with `gen_func` generators."""
    nb = launch.nthreads
    tids = thread_ids
    previous = registry.current()
    try:
        with np.errstate(all="ignore"):
            if launch.mode == "grid":
                bids = list(block_ids)
                states = [ThreadState(launch) for _ in range(nb * len(bids))]
                _run_job(gen_func, args, launch, states, bids, tids, located, returned)
            else:
                states = [ThreadState(launch) for _ in range(nb)]
                for bid in block_ids:
                    _run_job(gen_func, args, launch, states, [bid], tids, located, returned)
    finally:
        registry.install(previous)


def _run_job(gen_func, args, launch, states, bids, tids, located, returned) -> None:
    nb = launch.nthreads
    live = LiveSet(states, generators=True)
    blocks = [BlockState(bid, launch.shared_bytes, live.block_sync(nb)) for bid in bids]
    gens = {}
    for i, st in enumerate(states):
        st.live = live
        st.enter_block(blocks[i // nb])
        st.lin = i % nb
        st.tid = tids[st.lin]
        st.result = None
        st.atomics = 0
    runnable = live.runnable
    install = registry.install
    st = None
    try:
        while runnable:
            st = runnable.popleft()
            install(st)
            gen = gens.get(st)
            if gen is None:
                gen = gens[st] = gen_func(*args)
            value, st.result = st.result, None
            while True:
                try:
                    request = gen.send(value)
                except StopIteration as stop:
                    if stop.value is not None:
                        raise returned() from None
                    del gens[st]
                    live.exit(st)
                    break
                if request[0] is PAUSE:
                    value = request[1]
                    if request[2] or _count_atomic(st):
                        if runnable:
                            st.result = value
                            runnable.append(st)
                            break
                    continue
                _, name, call_args, call_kwargs, site = request
                if name == "syncthreads" and not call_args and not call_kwargs:
                    # The commonest collective, straight to the barrier (saves two calls).
                    value = live.barrier(st, "syncthreads", None, site)
                else:
                    value = COLLECTIVES[name](st, site, *call_args, **call_kwargs)
                if value is BLOCKED:
                    break
    except Exception as exc:
        if st is None:
            raise
        # The other threads' generators are dropped where they stand (the GC closes them).
        located_exc = located(exc, st)
        if located_exc is exc:
            raise
        raise located_exc from exc


def _count_atomic(st: ThreadState) -> bool:
    st.atomics += 1
    return st.atomics % _ATOMICS_PER_PAUSE == 0
