"""Barriers, memory fences and sleeping: the block-wide `bar.sync` family, the warp-wide
`bar.warp.sync`, `membar`/`fence` at block, device and system scope, and `nanosleep`.

`syncthreads` itself lives in `indices` (it is part of the original contract); it is
re-exported from `cupric.device` with the rest.
"""

from ._intrinsic import Intrinsic

__all__ = ["FULL_MASK", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp",
           "threadfence_block", "threadfence", "threadfence_system", "nanosleep"]

#: Every lane of a warp: the usual `mask` argument of warp-synchronous operations.
FULL_MASK = 0xFFFFFFFF

syncthreads_count = Intrinsic(
    "syncthreads_count",
    "syncthreads_count(pred) -> int: a block-wide barrier (like syncthreads) that returns, "
    "to every thread, how many threads of the block passed a true `pred` (bar.red.popc).")
syncthreads_and = Intrinsic(
    "syncthreads_and",
    "syncthreads_and(pred) -> int: a block-wide barrier that returns 1 to every thread if "
    "`pred` was true for all threads of the block, else 0 (bar.red.and).")
syncthreads_or = Intrinsic(
    "syncthreads_or",
    "syncthreads_or(pred) -> int: a block-wide barrier that returns 1 to every thread if "
    "`pred` was true for any thread of the block, else 0 (bar.red.or).")
syncwarp = Intrinsic(
    "syncwarp",
    "syncwarp(mask=FULL_MASK): wait until every lane named in `mask` has reached a "
    "syncwarp with the same mask, and order their memory accesses (bar.warp.sync). The "
    "calling lane must be in `mask`.")
threadfence_block = Intrinsic(
    "threadfence_block",
    "threadfence_block(): order this thread's memory accesses as seen by the threads of "
    "its block (fence.cta; membar.cta).")
threadfence = Intrinsic(
    "threadfence",
    "threadfence(): order this thread's memory accesses as seen by every thread of the "
    "device (fence.gpu; membar.gl).")
threadfence_system = Intrinsic(
    "threadfence_system",
    "threadfence_system(): order this thread's memory accesses as seen by every thread "
    "of the device, by the host and by peer devices (fence.sys; membar.sys).")
nanosleep = Intrinsic(
    "nanosleep",
    "nanosleep(ns): suspend the thread for about `ns` nanoseconds (0..1e6; the hardware "
    "may wake it earlier or later), e.g. for back-off in spin loops (sm_70+).")
