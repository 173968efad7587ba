"""Prefix sums in a single pass (decoupled look-back): each block takes the next tile in
launch order from an atomic counter, scans it in shared memory, publishes its total, and
warp 0 walks back over its predecessors' published totals (32 at a time) until it meets
one that already knows its inclusive prefix. Inclusive and exclusive, one launch."""

from __future__ import annotations

import numpy as np

import cupric
from cupric.device import FULL_MASK, atomic, gridDim, shared, syncthreads, threadIdx, warp
from cupric.kernels._block_scan import block_inclusive_sum
from cupric.kernels._common import NUMERIC_BOOL, Call, MadeOnce
from cupric.types import f32, f64, i32, i64, u32, u64

__all__ = ["inclusive_scan", "exclusive_scan", "scan_kernel", "BLOCK", "ITEMS", "TILE"]

BLOCK = 256
WARPS = BLOCK // 32
#: Items per thread: odd, so that each thread's run of consecutive items in shared
#: memory starts in a different bank (conflict-free serial scans for 32-bit values).
ITEMS = 15
TILE = BLOCK * ITEMS

# Look-back status of a tile in launch `epoch` (>= 1): 2 * epoch once its own total is
# published, 2 * epoch + 1 once its inclusive prefix is; anything smaller is left over
# from an earlier launch, so the flags never need clearing between launches.


def _make_scan(acc):
    """The single-pass scan kernel accumulating in cupric type `acc`."""

    @cupric.kernel
    def scan_kernel(x, out, exclusive, epoch, counter, flags, aggregates, prefixes):
        tile = shared.array(TILE, acc)
        slots = shared.array(WARPS, acc)
        carry = shared.array(1, acc)
        tile_slot = shared.array(1, i32)
        t = threadIdx.x
        lane = t & 31
        w = t >> 5
        n = len(x)
        zero = acc(0)
        # Tiles are numbered in the order blocks start, so every tile's predecessors are
        # running or done: the look-back below cannot wait on a block not yet scheduled.
        aggregate_ready = 2 * epoch
        prefix_ready = aggregate_ready + 1
        if t == 0:
            ticket = atomic.add(counter, 0, 1)
            tile_slot[0] = i32(ticket)
            if ticket == gridDim.x - 1:
                # Every ticket of this launch is taken: reset for the next launch.
                counter[0] = u32(0)
        syncthreads()
        tile_id = tile_slot[0]
        base = i64(tile_id) * TILE
        for k in range(ITEMS):
            j = k * BLOCK + t
            g = base + j
            tile[j] = acc(x[g]) if g < n else zero
        syncthreads()
        first = t * ITEMS
        s = zero
        for k in range(ITEMS):
            s += tile[first + k]
        # Thread totals: inclusive scan within each warp, then over the warps' totals.
        v = block_inclusive_sum(s, slots, lane, w, WARPS, zero)
        block_total = slots[WARPS - 1]
        before = warp.shfl_up(FULL_MASK, v, 1)
        if lane == 0:
            before = zero
        if w > 0:
            before += slots[w - 1]
        if w == 0:
            prefix = zero
            if tile_id == 0:
                if lane == 0:
                    prefixes[0] = block_total
                    atomic.store(flags, 0, prefix_ready, order="release")
            else:
                if lane == 0:
                    aggregates[tile_id] = block_total
                    atomic.store(flags, tile_id, aggregate_ready, order="release")
                # Lane l looks at tile (tile_id - 1 - l); tiles before 0 count as a
                # known prefix of zero.
                look = tile_id - 1 - lane
                searching = True
                while searching:
                    f = prefix_ready
                    if look >= 0:
                        f = atomic.load(flags, look, order="acquire")
                    while warp.any(FULL_MASK, f < aggregate_ready):
                        if f < aggregate_ready:
                            f = atomic.load(flags, look, order="acquire")
                    found = warp.ballot(FULL_MASK, f == prefix_ready)
                    # A lane contributes when no nearer lane (a lower one) found a
                    # prefix: its tile lies between this one and that prefix.
                    nearer = found & ((u32(1) << u32(lane)) - u32(1))
                    val = zero
                    if look >= 0 and nearer == 0:
                        val = prefixes[look] if f == prefix_ready else aggregates[look]
                    d: i32 = 16  # 32-bit loop counter: an i64 local costs two ops
                    while d > 0:
                        val += warp.shfl_xor(FULL_MASK, val, d)
                        d >>= 1
                    prefix += val
                    if found != 0:
                        searching = False
                    look -= 32
                if lane == 0:
                    prefixes[tile_id] = prefix + block_total
                    atomic.store(flags, tile_id, prefix_ready, order="release")
            if lane == 0:
                carry[0] = prefix
        syncthreads()
        run = carry[0] + before
        for k in range(ITEMS):
            item = tile[first + k]
            if exclusive:
                tile[first + k] = run
                run += item
            else:
                run += item
                tile[first + k] = run
        syncthreads()
        for k in range(ITEMS):
            j = k * BLOCK + t
            g = base + j
            if g < n:
                out[g] = tile[j]

    return scan_kernel


_CUPRIC_TYPES = {np.dtype("f4"): f32, np.dtype("f8"): f64, np.dtype("i4"): i32,
                 np.dtype("i8"): i64, np.dtype("u4"): u32, np.dtype("u8"): u64}
_KERNELS = MadeOnce(lambda acc_dtype: _make_scan(_CUPRIC_TYPES[acc_dtype]))


def scan_kernel(acc_dtype):
    """The scan kernel accumulating in `acc_dtype` (i32, i64, u32, u64, f32, f64)."""
    return _KERNELS[np.dtype(acc_dtype)]


def scan_into(call: Call, x, out, exclusive: bool, ws=None) -> None:
    """Queue a scan of 1-D `x` into 1-D `out` (accumulating in `out`'s dtype) on `call`'s
    stream; used by the host functions and by the radix sort. `ws` is the device's
    workspace when the caller already holds it (`Call.workspace()`), else it is taken
    here."""
    n = x.size
    if n == 0:
        return
    tiles = -(-n // TILE)
    dtype = out.dtype
    plan = _PLANS.get(dtype)
    if plan is None:
        plan = _PLANS[dtype] = (scan_kernel(dtype), f"scan.aggregates.{dtype}",
                                f"scan.prefixes.{dtype}")
    kern, aggregates_name, prefixes_name = plan
    if call.simulator:
        call.launch(kern, tiles, BLOCK, x, out, bool(exclusive), np.int32(1),
                    call.scratch((1,), np.uint32, zero=True),
                    call.scratch((tiles,), np.int32, zero=True),
                    call.scratch((tiles,), dtype), call.scratch((tiles,), dtype))
        return
    if ws is None:
        with call.workspace() as held:
            _scan_launch(call, held, kern, tiles, x, out, exclusive, aggregates_name,
                         prefixes_name)
    else:
        _scan_launch(call, ws, kern, tiles, x, out, exclusive, aggregates_name,
                     prefixes_name)


#: accumulator dtype -> (kernel, workspace names of the tile aggregates and prefixes).
_PLANS: dict = {}
_U32 = np.dtype(np.uint32)
_I32 = np.dtype(np.int32)


def _scan_launch(call, ws, kern, tiles, x, out, exclusive, aggregates_name,
                 prefixes_name) -> None:
    order = call.order
    # The tile counter is reset by the block taking the last ticket; the flags are
    # tagged with the launch's epoch. New arrays start zeroed (below every epoch).
    counter = ws.array("scan.counter", _U32, 1, order, zero=True)
    flags = ws.array("scan.flags", _I32, tiles, order, zero=True)
    aggregates = ws.array(aggregates_name, out.dtype, tiles, order)
    prefixes = ws.array(prefixes_name, out.dtype, tiles, order)
    epoch = np.int32(ws.next_epoch(order))
    call.launch(kern, tiles, BLOCK, x, out, bool(exclusive), epoch, counter, flags,
                aggregates, prefixes)


def scan_arrays(dtype) -> tuple:
    """The workspace names of the tile counter, aggregates and prefixes of a scan
    accumulating in `dtype`."""
    return ("scan.counter", f"scan.aggregates.{np.dtype(dtype)}",
            f"scan.prefixes.{np.dtype(dtype)}")


def scan_node(call, ws, x, out, exclusive, flags, epoch) -> tuple:
    """(kernel, tiles, block, args) of a scan of 1-D `x` into 1-D `out` for a node of
    a CUDA graph: the workspace's counter, aggregates and prefixes, and the graph's own
    look-back `flags` (int32, at least `tiles` of them) tagged with `epoch` (the graph
    clears them, so its epochs restart on every replay without meeting the
    workspace's). Hold `ws`."""
    n = x.size
    tiles = -(-n // TILE)
    dtype = out.dtype
    order = call.order
    counter_name, aggregates_name, prefixes_name = scan_arrays(dtype)
    counter = ws.array(counter_name, _U32, 1, order, zero=True)
    aggregates = ws.array(aggregates_name, dtype, tiles, order)
    prefixes = ws.array(prefixes_name, dtype, tiles, order)
    return (scan_kernel(dtype), tiles, BLOCK,
            (x, out, bool(exclusive), np.int32(epoch), counter, flags, aggregates,
             prefixes))


def _default_dtype(dtype: np.dtype) -> np.dtype:
    """NumPy's cumsum dtype: small integers and bools widen to 64 bits."""
    if dtype.kind in "bi":
        return np.dtype("i8")
    if dtype.kind == "u":
        return np.dtype("u8")
    return dtype


def _scan(op, x, exclusive, out, dtype, stream):
    call = Call(op, stream)
    xs = call.array(x, "x", dtypes=NUMERIC_BOOL)
    given = None  # `out` as an array, read once on the GPU
    if dtype is None:
        if out is None:
            dtype = _default_dtype(np.dtype(xs.dtype))
        else:
            given = call.array(out, "out")
            dtype = given.dtype
            if call.simulator:
                given = None  # a NumPy array: `output` checks it as given
    dtype = np.dtype(dtype)
    if dtype not in _CUPRIC_TYPES:
        raise TypeError(f"{op}: cannot accumulate in {dtype}; use int32, int64, uint32, "
                        f"uint64, float32 or float64")
    dst, result = call.output(out, "out", xs.shape, dtype, given)
    scan_into(call, call.flat(xs, "x"), call.flat(dst, "out"), exclusive)
    return result


def inclusive_scan(x, out=None, *, dtype=None, stream=None):
    """Running sums ``out[i] = x[0] + ... + x[i]`` over the flattened array (cumsum).

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        C-contiguous, any shape; bool, integer or float dtype.
    out : device array, optional
        Same shape; its dtype is the accumulator's. May be `x` when the dtypes match.
    dtype : dtype-like, optional
        Accumulate and return in this dtype (int32, int64, uint32, uint64, float32,
        float64). Default: as NumPy's cumsum (64-bit for integers and bools, else the
        input's).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array of x's shape in the accumulator's dtype, holding the running
    sums.

    Cost
    ----
    One launch over tiles of 3840 items; the look-back state (12-20 bytes per tile) lives
    in a per-device workspace reused from call to call (no allocation, no memset).
    Reads and writes each item once (beside cupy.cumsum and the same algorithm in CUDA
    C: BENCHMARKS.md). Float
    sums are associated by tiles and warps, so results differ from a sequential sum by
    rounding.

    Examples
    --------
    >>> inclusive_scan(to_device(np.arange(5, dtype=np.int32))).to_numpy()  # doctest: +SKIP
    array([ 0,  1,  3,  6, 10])
    """
    return _scan("inclusive_scan", x, False, out, dtype, stream)


def exclusive_scan(x, out=None, *, dtype=None, stream=None):
    """Running sums excluding the current item: ``out[0] = 0``,
    ``out[i] = x[0] + ... + x[i-1]``. Parameters, results and cost as `inclusive_scan`."""
    return _scan("exclusive_scan", x, True, out, dtype, stream)
