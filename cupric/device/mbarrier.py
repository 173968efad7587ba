"""Memory barriers in shared memory (`mbarrier`, sm_80+; transaction counts sm_90): a
64-bit object that counts arrivals of threads and bytes of asynchronous copies (TMA)
still to land, and completes a phase when both reach zero.

A barrier lives in a shared-memory array of u64 (`bar[index]`). `init` sets the number of
arrivals a phase expects; each phase completes once that many `arrive`s happened and
every byte announced with `arrive_expect_tx` has been written by the copies that name the
barrier. Phases alternate parity 0, 1, 0, ...: `wait(bar, i, parity)` returns once the
phase of that parity has completed. Threads waiting on the phase they are part of is the
producer / consumer pipeline of Hopper GEMMs.
"""

from __future__ import annotations

from ._intrinsic import Intrinsic, Namespace

__all__ = ["mbarrier"]

mbarrier = Namespace(
    "mbarrier",
    init=Intrinsic(
        "mbarrier.init",
        "mbarrier.init(bar, index, count): make bar[index] (a shared u64) a barrier whose "
        "phases expect `count` arrivals (mbarrier.init.shared::cta.b64). One thread inits; "
        "follow with mbarrier.fence_init() and a block barrier before others use it."),
    fence_init=Intrinsic(
        "mbarrier.fence_init",
        "mbarrier.fence_init(): makes this thread's earlier mbarrier.init visible to the "
        "asynchronous copy engine and the cluster (fence.mbarrier_init.release.cluster)."),
    arrive=Intrinsic(
        "mbarrier.arrive",
        "mbarrier.arrive(bar, index): counts one arrival on bar[index] "
        "(mbarrier.arrive.shared::cta.b64)."),
    arrive_expect_tx=Intrinsic(
        "mbarrier.arrive_expect_tx",
        "mbarrier.arrive_expect_tx(bar, index, nbytes): announces `nbytes` more bytes that "
        "asynchronous copies will deliver in this phase, then counts one arrival "
        "(mbarrier.arrive.expect_tx.shared::cta.b64; sm_90)."),
    arrive_cluster=Intrinsic(
        "mbarrier.arrive_cluster",
        "mbarrier.arrive_cluster(bar, index, rank): counts one arrival on bar[index] of the "
        "block of rank `rank` in this thread's cluster (mapa + mbarrier.arrive."
        "release.cluster.shared::cluster.b64; sm_90)."),
    try_wait=Intrinsic(
        "mbarrier.try_wait",
        "mbarrier.try_wait(bar, index, parity) -> bool: whether the phase of parity "
        "`parity` (0 or 1) of bar[index] has completed, after waiting a while in hardware "
        "(mbarrier.try_wait.parity.shared::cta.b64; sm_90)."),
    wait=Intrinsic(
        "mbarrier.wait",
        "mbarrier.wait(bar, index, parity): returns once the phase of parity `parity` of "
        "bar[index] has completed (a try_wait loop). The memory the phase's copies wrote "
        "is then visible to the thread."),
)
