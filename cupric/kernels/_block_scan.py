"""Prefix sums across a warp (register shuffles, no shared memory) and across a block
(each warp's total through shared memory, scanned by warp 0): the part of the single-pass
scan and of the radix sort's digit placement that is the same in both. Device functions
are inlined into the kernels that call them."""

from __future__ import annotations

import cupric
from cupric.device import FULL_MASK, syncthreads, warp
from cupric.types import i32

__all__ = ["warp_inclusive_sum", "block_inclusive_sum"]


@cupric.device_function
def warp_inclusive_sum(v, lane):
    """The sum of `v` over lanes 0..`lane` of a full warp (log2(32) shuffles)."""
    d: i32 = 1  # 32-bit loop counters: an i64 local costs two ops each
    while d < 32:
        u = warp.shfl_up(FULL_MASK, v, d)
        if lane >= d:
            v += u
        d <<= 1
    return v


@cupric.device_function
def block_inclusive_sum(v, slots, lane, w, warps, zero):
    """The sum of `v` over lanes 0..`lane` of warp `w` (returned), with ``slots[q]`` set
    to the sum over warps 0..q of the block's `warps` warps: thread (w, lane)'s inclusive
    prefix over the block is the result plus ``slots[w - 1]`` (w > 0). Every thread of
    the block must call it (two barriers); `slots` is a shared array of at least `warps`
    items of `v`'s type, `zero` that type's 0."""
    v = warp_inclusive_sum(v, lane)
    if lane == 31:
        slots[w] = v
    syncthreads()
    if w == 0:
        total = slots[lane] if lane < warps else zero
        total = warp_inclusive_sum(total, lane)
        if lane < warps:
            slots[lane] = total
    syncthreads()
    return v
