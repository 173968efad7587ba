"""Sorting 32-bit keys (uint32, int32, float32): a bitonic sorting network (chunks of
2048 sorted in shared memory, then merges: global compare-exchange steps while the
distance is at least a chunk, shared-memory steps below) and a stable LSD radix sort
(four 8-bit digit passes: block histograms, a scan of them, stable block scatters).

Both work on unsigned keys whose order is the order of the values: int32 flips the sign
bit, float32 flips negatives entirely and positives' sign bit, every NaN maps to the
largest key (NaNs sort last, as NumPy). Descending order flips every key bit."""

from __future__ import annotations

import numpy as np

import cupric
from cupric.device import (FULL_MASK, atomic, bits, blockIdx, grid, gridsize, local,
                           shared, syncthreads, syncwarp, threadIdx, warp)
from cupric.kernels._block_scan import block_inclusive_sum
from cupric.kernels._common import SORTABLE, Call, MadeOnce, vector_prefix
from cupric.types import i32, i64, u32

__all__ = ["bitonic_sort", "radix_sort", "tile_sort_kernel", "CHUNK", "RADIX_BITS",
           "TILE_SORT_KEYS"]

#: Keys a block sorts in shared memory (two per thread).
CHUNK = 2048
HALF = CHUNK // 2
#: Radix sort: digit width, digits, threads per block and keys per thread per block.
RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
RADIX_BLOCK = 256
RADIX_WARPS = RADIX_BLOCK // 32
RADIX_ITEMS = 8
RADIX_TILE = RADIX_BLOCK * RADIX_ITEMS
#: Threads per block of the elementwise key transforms and global merge steps.
BLOCK = 256

_MODES = {np.dtype("u4"): 0, np.dtype("i4"): 1, np.dtype("f4"): 2}
_ALL_BITS = 0xFFFFFFFF


# -- key transforms (on the bit patterns, as uint32) ----------------------------------------

def _key_functions(mode):
    """(to_key, from_key): device functions between the bit patterns of `mode`'s dtype
    and order keys (made once per mode)."""
    return _KEY_FUNCTIONS[mode]


def _make_key_functions(mode):
    @cupric.device_function
    def to_key(v: u32):
        if mode == 1:
            return v ^ u32(0x80000000)
        if mode == 2:
            if (v & u32(0x7FFFFFFF)) > u32(0x7F800000):
                return u32(_ALL_BITS)
            if (v & u32(0x80000000)) != u32(0):
                return ~v
            return v | u32(0x80000000)
        return v

    @cupric.device_function
    def from_key(k: u32):
        if mode == 1:
            return k ^ u32(0x80000000)
        if mode == 2:
            if k == u32(_ALL_BITS):
                return u32(0x7FC00000)
            if (k & u32(0x80000000)) != u32(0):
                return k & u32(0x7FFFFFFF)
            return ~k
        return k

    return to_key, from_key


_KEY_FUNCTIONS = MadeOnce(_make_key_functions)


def _make_key_kernels(mode):
    to_key, from_key = _key_functions(mode)

    @cupric.kernel
    def to_keys_kernel(src, keys, flip):
        """keys[i] = order key of src[i] (xor `flip`); past len(src): the largest key."""
        n = len(src)
        total = len(keys)
        i = grid(1)
        step = gridsize(1)
        while i < total:
            keys[i] = to_key(src[i]) ^ flip if i < n else u32(_ALL_BITS)
            i += step

    @cupric.kernel
    def from_keys_kernel(keys, out, flip):
        """out[i] = the bit pattern of key keys[i] (xor `flip`), for i < len(out)."""
        n = len(out)
        i = grid(1)
        step = gridsize(1)
        while i < n:
            out[i] = from_key(keys[i] ^ flip)
            i += step

    return to_keys_kernel, from_keys_kernel


_KEY_KERNELS = MadeOnce(_make_key_kernels)


def key_kernels(dtype):
    """(to_keys_kernel, from_keys_kernel) for uint32, int32 or float32 data."""
    mode = _MODES[np.dtype(dtype)]
    return _KEY_KERNELS[mode]


# -- bitonic network --------------------------------------------------------------------------

@cupric.kernel
def bitonic_sort_shared_kernel(keys):
    """Sort each CHUNK of keys in shared memory, alternately ascending and descending
    (chunk c ascending when c is even), as the first stages of the full network."""
    s = shared.array(CHUNK, u32)
    t = threadIdx.x
    base = i64(blockIdx.x) * CHUNK
    s[t] = keys[base + t]
    s[t + HALF] = keys[base + t + HALF]
    syncthreads()
    # 32-bit stage counters (an i64 local would cost two instructions per operation).
    k: i32 = 2
    while k <= CHUNK:
        j = k >> 1
        while j > 0:
            lo = 2 * t - (t & (j - 1))
            a = s[lo]
            b = s[lo + j]
            # Direction of this pair's run in the whole network: by its global index.
            up = ((base + lo) & k) == 0
            if (a > b) == up:
                s[lo] = b
                s[lo + j] = a
            syncthreads()
            j >>= 1
        k <<= 1
    keys[base + t] = s[t]
    keys[base + t + HALF] = s[t + HALF]


@cupric.kernel
def bitonic_merge_global_kernel(keys, k, j):
    """One compare-exchange step at distance `j` (>= CHUNK) of merge stage `k`."""
    half = len(keys) >> 1
    t = grid(1)
    if t < half:
        lo = 2 * t - (t & (j - 1))
        a = keys[lo]
        b = keys[lo + j]
        up = (lo & k) == 0
        if (a > b) == up:
            keys[lo] = b
            keys[lo + j] = a


@cupric.kernel
def bitonic_merge_shared_kernel(keys, k):
    """The steps of merge stage `k` at distances CHUNK/2 .. 1, in shared memory."""
    s = shared.array(CHUNK, u32)
    t = threadIdx.x
    base = i64(blockIdx.x) * CHUNK
    s[t] = keys[base + t]
    s[t + HALF] = keys[base + t + HALF]
    syncthreads()
    up = (base & k) == 0
    j: i32 = HALF
    while j > 0:
        lo = 2 * t - (t & (j - 1))
        a = s[lo]
        b = s[lo + j]
        if (a > b) == up:
            s[lo] = b
            s[lo + j] = a
        syncthreads()
        j >>= 1
    keys[base + t] = s[t]
    keys[base + t + HALF] = s[t + HALF]


# -- radix sort ---------------------------------------------------------------------------------

@cupric.kernel
def radix_histogram_kernel(keys, counts, shift, tiles):
    """Digit counts of each tile: counts[d * tiles + tile] (digit-major, so that an
    exclusive scan of `counts` gives every (digit, tile) its first output position)."""
    hist = shared.array(RADIX, u32)
    t = threadIdx.x
    hist[t] = u32(0)
    syncthreads()
    n = len(keys)
    base = i64(blockIdx.x) * RADIX_TILE
    for r in range(RADIX_ITEMS):
        g = base + r * RADIX_BLOCK + t
        if g < n:
            # Default scope: atom.shared on a shared array (see histogram.py).
            atomic.add(hist, (keys[g] >> shift) & u32(RADIX - 1), u32(1))
    syncthreads()
    counts[i64(t) * tiles + blockIdx.x] = hist[t]


@cupric.device_function
def _rank(key, shift, warp_counts, w, below):
    """The rank of `key` among the keys of its digit that warp `w` ranked before it
    (earlier rounds: the warp's digit counters; this round: lanes below with the same
    digit, from `match_any`); the warp's counter of the digit then counts this round's
    keys of it."""
    d = (key >> shift) & u32(RADIX - 1)
    peers = warp.match_any(FULL_MASK, d)
    ahead = peers & below
    rank = warp_counts[w, d] + u32(bits.popc(ahead))
    syncwarp()
    if ahead == u32(0):
        warp_counts[w, d] += u32(bits.popc(peers))
    syncwarp()
    return rank


@cupric.device_function
def _digit_starts(warp_counts, slots, t, lane, w):
    """Thread t owns digit t: turns warp_counts[q, t] (digit t's keys in warp q's run)
    into where warp q's keys of it start among the tile's keys of it, and returns where
    the tile's keys of digit t start in the tile (an exclusive scan over digits)."""
    s = u32(0)
    for q in range(RADIX_WARPS):
        c = warp_counts[q, t]
        warp_counts[q, t] = s
        s += c
    total = s
    v = block_inclusive_sum(total, slots, lane, w, RADIX_WARPS, u32(0))
    start = v - total
    if w > 0:
        start += slots[w - 1]
    return start


@cupric.device_function
def _regroup(keys, ranks, items, shift, warp_counts, slots, starts, staged, t, lane, w):
    """Once every key of the tile is ranked (`_rank`): the digits' starts, then the
    thread's `items` keys each to its place in `staged`, grouped by digit, stably."""
    starts[t] = _digit_starts(warp_counts, slots, t, lane, w)
    syncthreads()
    for r in range(items):
        key = keys[r]
        dk = (key >> shift) & u32(RADIX - 1)
        staged[starts[dk] + warp_counts[w, dk] + ranks[r]] = key
    syncthreads()


@cupric.kernel
def radix_scatter_kernel(src, dst, offsets, shift, tiles):
    """Move each key of a tile to its place for this digit, stably. Warp w ranks its own
    run of RADIX_ITEMS x 32 consecutive keys round by round (ranks within a round from
    `match_any`, across rounds from the warp's own digit counters, so no block barrier
    per round); one scan across warps and digits then places the runs. The tile is
    regrouped by digit in shared memory first, so that the global writes of a digit's
    run are consecutive."""
    warp_counts = shared.array((RADIX_WARPS, RADIX), u32)
    starts = shared.array(RADIX, u32)
    slots = shared.array(RADIX_WARPS, u32)
    staged = shared.array(RADIX_TILE, u32)
    keys = local.array(RADIX_ITEMS, u32)
    ranks = local.array(RADIX_ITEMS, u32)
    t = threadIdx.x
    lane = t & 31
    w = t >> 5
    n = len(src)
    base = i64(blockIdx.x) * RADIX_TILE
    below = (u32(1) << u32(lane)) - u32(1)
    for q in range(RADIX_WARPS):
        warp_counts[q, t] = u32(0)
    syncthreads()
    first = base + w * (RADIX_ITEMS * 32)
    for r in range(RADIX_ITEMS):
        g = first + r * 32 + lane
        # Past the end: the largest key. Those come last in the tile, so they rank
        # after every real key and only occupy the tail of the staged tile.
        key = src[g] if g < n else u32(_ALL_BITS)
        keys[r] = key
        ranks[r] = _rank(key, shift, warp_counts, w, below)
    syncthreads()
    _regroup(keys, ranks, RADIX_ITEMS, shift, warp_counts, slots, starts, staged, t, lane, w)
    valid = n - base
    for r in range(RADIX_ITEMS):
        j = r * RADIX_BLOCK + t
        if j < valid:
            key = staged[j]
            dd = (key >> shift) & u32(RADIX - 1)
            dst[offsets[i64(dd) * tiles + blockIdx.x] + (j - starts[dd])] = key


def _make_tile_sort(mode, items):
    """A one-block radix sort of up to RADIX_BLOCK * `items` keys of `mode`'s dtype:
    the keys stay in registers and shared memory through the four digit passes (each
    pass is the scatter kernel's regrouping of one tile, which for a single tile is the
    sorted order by that digit), so a small sort is one launch."""
    to_key, from_key = _key_functions(mode)
    tile = RADIX_BLOCK * items

    @cupric.kernel
    def radix_tile_sort_kernel(src, out, flip):
        warp_counts = shared.array((RADIX_WARPS, RADIX), u32)
        starts = shared.array(RADIX, u32)
        slots = shared.array(RADIX_WARPS, u32)
        staged = shared.array(tile, u32)
        keys = local.array(items, u32)
        ranks = local.array(items, u32)
        t = threadIdx.x
        lane = t & 31
        w = t >> 5
        n = len(src)
        below = (u32(1) << u32(lane)) - u32(1)
        first = w * (items * 32)
        for r in range(items):
            g = first + r * 32 + lane
            # Past the end: the largest key, ranked after every real key (stable).
            keys[r] = to_key(src[g]) ^ flip if g < n else u32(_ALL_BITS)
        for p in range(32 // RADIX_BITS):
            shift = u32(p * RADIX_BITS)
            for q in range(RADIX_WARPS):
                warp_counts[q, t] = u32(0)
            syncthreads()
            for r in range(items):
                ranks[r] = _rank(keys[r], shift, warp_counts, w, below)
            syncthreads()
            _regroup(keys, ranks, items, shift, warp_counts, slots, starts, staged, t, lane,
                     w)
            for r in range(items):
                keys[r] = staged[first + r * 32 + lane]
        for r in range(items):
            g = first + r * 32 + lane
            if g < n:
                out[g] = from_key(keys[r] ^ flip)

    return radix_tile_sort_kernel


#: Keys per thread of the one-block sorts, smallest first (tiles of 2048, 4096 and 8192
#: keys; the largest keeps its 32 KiB tile and counters under 48 KiB of shared memory).
TILE_SORT_ITEMS = (8, 16, 32)
#: The most keys `radix_sort` sorts in one launch of one block.
TILE_SORT_KEYS = RADIX_BLOCK * TILE_SORT_ITEMS[-1]
_TILE_SORTS = MadeOnce(lambda key: _make_tile_sort(*key))


def tile_sort_kernel(dtype, items: int):
    """The one-block radix sort kernel for `dtype` (uint32, int32 or float32) and
    `items` keys per thread (made once)."""
    return _TILE_SORTS[_MODES[np.dtype(dtype)], int(items)]


# -- host functions -----------------------------------------------------------------------------

def _prepare(op, x, out, stream):
    call = Call(op, stream)
    src = call.array(x, "x", dtypes=SORTABLE)
    dst, result = call.output(out, "out", src.shape, src.dtype)
    # The kernels move bit patterns: every supported dtype is 32 bits wide.
    bits_in = call.flat(src, "x", _U32)
    bits_out = call.flat(dst, "out", _U32)
    return call, bits_in, bits_out, result, src.dtype


_U32 = np.dtype(np.uint32)
#: Radix sorts of up to this many keys keep their scratch (two key arrays, the digit
#: counts and offsets: about 8.5 bytes per key, 144 MiB at the limit) in the device's
#: workspace, reused from call to call (four allocations and frees per call cost more
#: host time than the sort's 14 launches); `cupric.kernels.release_workspaces` hands it
#: back. Larger ones allocate it per call, where the allocation costs little beside the
#: sort and the memory goes back to the pool afterwards.
RADIX_WORKSPACE_KEYS = 1 << 24


def bitonic_sort(x, out=None, *, descending=False, stream=None):
    """Sort the flattened array with a bitonic sorting network.

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        uint32, int32 or float32; C-contiguous, any shape (sorted as one flat sequence).
    out : device array, optional
        Same shape and dtype; may be `x` (sort in place).
    descending : bool
        Largest first (NaNs then come first).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array of x's shape and dtype, holding the keys in order.

    Cost
    ----
    The length is padded to a power of two (at least 2048) in scratch memory; for
    2^p keys, p - 11 merge stages of up to p - 11 global passes each plus one
    shared-memory pass: O(n log^2 n) work, about (p - 11)(p - 10)/2 + p - 9 launches
    (measured beside the same network in CUDA C: BENCHMARKS.md; `radix_sort` does less
    work). Not stable (keys only).

    Examples
    --------
    >>> keys = to_device(np.array([3, 1, 2], np.int32))          # doctest: +SKIP
    >>> bitonic_sort(keys, descending=True).to_numpy()          # doctest: +SKIP
    array([3, 2, 1], dtype=int32)
    """
    call, src, dst, result, dtype = _prepare("bitonic_sort", x, out, stream)
    n = int(src.size)
    if n == 0:
        return result
    to_keys, from_keys = key_kernels(dtype)
    flip = np.uint32(_ALL_BITS if descending else 0)
    padded = CHUNK
    while padded < n:
        padded <<= 1
    keys = call.scratch((padded,), np.uint32)
    call.launch(to_keys, call.blocks(padded, BLOCK), BLOCK, src, keys, flip)
    chunks = padded // CHUNK
    call.launch(bitonic_sort_shared_kernel, chunks, HALF, keys)
    k = 2 * CHUNK
    pairs_blocks = (padded // 2 + BLOCK - 1) // BLOCK
    while k <= padded:
        j = k >> 1
        while j >= CHUNK:
            call.launch(bitonic_merge_global_kernel, pairs_blocks, BLOCK, keys, np.int64(k),
                        np.int64(j))
            j >>= 1
        call.launch(bitonic_merge_shared_kernel, chunks, HALF, keys, np.int64(k))
        k <<= 1
    call.launch(from_keys, call.blocks(n, BLOCK), BLOCK, keys, dst, flip)
    call.finish()
    return result


def radix_sort(x, out=None, *, descending=False, stream=None):
    """Sort the flattened array with a stable least-significant-digit radix sort.

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        uint32, int32 or float32; C-contiguous, any shape.
    out : device array, optional
        Same shape and dtype; may be `x`.
    descending : bool
        Largest first (NaNs first).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array of x's shape and dtype, holding the keys in order (equal keys
    keep their order: the sort is stable).

    Cost
    ----
    Up to `TILE_SORT_KEYS` keys: one launch of one block, which keeps the keys in
    registers and shared memory through the four digit passes (no scratch). More keys:
    scratch of 2 key arrays and 2 x 256 counters per 2048-key tile; 4 passes of 3
    launches (histogram, scan, scatter) plus 2 key transforms: about 12 reads and 5
    writes of the keys, O(n) work (cupy.sort's one-sweep radix sort moves the keys fewer
    times; both measured in BENCHMARKS.md). The scratch lives in the device's workspace
    up to `RADIX_WORKSPACE_KEYS` keys (reused from call to call, no allocation;
    `cupric.kernels.release_workspaces` frees it), and the 12 launches of the digit
    passes replay as one CUDA graph made at the first sort of that many keys
    (`PASS_GRAPHS`): host cost of three launches. Beyond the limit the scratch is
    allocated per call and the 14 launches are queued one by one.

    Examples
    --------
    >>> radix_sort(keys, keys)               # in place              # doctest: +SKIP
    """
    call, src, dst, result, dtype = _prepare("radix_sort", x, out, stream)
    n = src.size
    if n == 0:
        return result
    flip = _FLIPS[bool(descending)]
    if n <= TILE_SORT_KEYS:  # one block, one launch
        for items in TILE_SORT_ITEMS:
            if n <= RADIX_BLOCK * items:
                break
        call.launch(tile_sort_kernel(dtype, items), 1, RADIX_BLOCK, src, dst, flip)
        return result
    to_keys, from_keys = key_kernels(dtype)
    tiles = -(-n // RADIX_TILE)
    if call.simulator or n > RADIX_WORKSPACE_KEYS:
        keys = call.scratch((n,), np.uint32)
        spare = call.scratch((n,), np.uint32)
        counts = call.scratch((RADIX * tiles,), np.uint32)
        offsets = call.scratch((RADIX * tiles,), np.uint32)
        _radix_passes(call, None, src, dst, keys, spare, counts, offsets, to_keys,
                      from_keys, flip, n, tiles)
        call.finish()
        return result
    with call.workspace() as ws:
        order = call.order
        keys = ws.array("radix.keys", _U32, n, order)
        spare = ws.array("radix.spare", _U32, n, order)
        counts = ws.array("radix.counts", _U32, RADIX * tiles, order)
        offsets = ws.array("radix.offsets", _U32, RADIX * tiles, order)
        if keys.size != n:
            keys, spare = vector_prefix(keys, n), vector_prefix(spare, n)
        if counts.size != RADIX * tiles:
            counts = vector_prefix(counts, RADIX * tiles)
            offsets = vector_prefix(offsets, RADIX * tiles)
        if PASS_GRAPHS[0]:
            # The four digit passes depend only on the workspace and the key count:
            # one replay of a graph made once for them, between the two key transforms.
            blocks = call.blocks(n, BLOCK)
            call.launch(to_keys, blocks, BLOCK, src, keys, flip)
            _pass_graph(call, ws, keys, spare, counts, offsets, n, tiles).launch(
                call.stream)
            call.launch(from_keys, blocks, BLOCK, keys, dst, flip)
        else:
            _radix_passes(call, ws, src, dst, keys, spare, counts, offsets, to_keys,
                          from_keys, flip, n, tiles)
    return result


#: Radix sorts past `TILE_SORT_KEYS` whose scratch is in the workspace replay their
#: four digit passes (12 launches and a clear of the scan's look-back flags) as one
#: CUDA graph, made once per device and key count for the workspace arrays of the
#: moment: a sort then costs three launches of host time instead of 14. Set
#: ``PASS_GRAPHS[0] = False`` to queue every launch instead.
PASS_GRAPHS = [True]
#: (device ordinal, key count) -> `_PassGraph`; at most `PASS_GRAPHS_KEPT` of them.
_PASS_GRAPHS: dict = {}
PASS_GRAPHS_KEPT = 8


class _PassGraph:
    """The executable graph of one key count's digit passes and the workspace arrays it
    was made with (valid while each is still the workspace's array of that name).

    Owns the graph and its executable; `close` frees them."""

    __slots__ = ("exec", "graph", "arrays")

    def __init__(self, graph, exec_, arrays) -> None:
        self.graph = graph
        self.exec = exec_
        self.arrays = arrays  # ((name, array), ...) as the workspace held them

    def valid(self, ws) -> bool:
        held = ws.arrays
        for name, arr in self.arrays:
            if held.get(name) is not arr:
                return False
        return True

    def launch(self, stream) -> None:
        self.exec.launch(stream)

    def close(self) -> None:
        self.exec.close()
        self.graph.close()


_GRAPH_ARRAYS = ("radix.keys", "radix.spare", "radix.counts", "radix.offsets",
                 "radix.graph_flags")


def _pass_graph(call, ws, keys, spare, counts, offsets, n, tiles) -> _PassGraph:
    """The `_PassGraph` of `n` keys on the call's device for the workspace's current
    arrays, made (and the oldest one freed past `PASS_GRAPHS_KEPT`) when there is none.
    Hold `ws`."""
    from cupric.kernels.scan import TILE as SCAN_TILE
    from cupric.kernels.scan import scan_arrays, scan_node
    key = (ws.ordinal, n)
    known = _PASS_GRAPHS.get(key)
    if known is not None and known.valid(ws):
        return known
    order = call.order
    flags = ws.array("radix.graph_flags", np.int32, -(-RADIX * tiles // SCAN_TILE), order)
    from cupric.runtime.graph import Graph
    graph = Graph.create()
    try:
        ntiles = np.int64(tiles)
        last = (graph.add_memset(flags, 0, width=4),)
        for epoch, shift in enumerate(_SHIFTS, 1):
            # Each pass's scan tags its flags with its own epoch: those of the passes
            # before are below it (stale), and the clear at the start of every replay
            # makes the epochs restart at 1.
            hist = graph.add_kernel(radix_histogram_kernel, tiles, RADIX_BLOCK, keys,
                                    counts, shift, ntiles, depends_on=last)
            kern, scan_tiles, block, args = scan_node(call, ws, counts, offsets, True,
                                                      flags, epoch)
            scan = graph.add_kernel(kern, scan_tiles, block, *args, depends_on=(hist,))
            last = (graph.add_kernel(radix_scatter_kernel, tiles, RADIX_BLOCK, keys, spare,
                                     offsets, shift, ntiles, depends_on=(scan,)),)
            keys, spare = spare, keys
        names = _GRAPH_ARRAYS + scan_arrays(np.uint32)
        made = _PassGraph(graph, graph.instantiate(),
                          tuple((name, ws.arrays.get(name)) for name in names))
    except BaseException:
        graph.close()
        raise
    old = _PASS_GRAPHS.pop(key, None)
    if old is not None:
        old.close()
    while len(_PASS_GRAPHS) >= PASS_GRAPHS_KEPT:
        _PASS_GRAPHS.pop(next(iter(_PASS_GRAPHS))).close()
    _PASS_GRAPHS[key] = made
    return made


def forget_pass_graphs(ordinal=None) -> None:
    """Free the digit-pass graphs of device `ordinal` (every device: None). Called when
    the workspace is released and when the device's context is reset (whose retired
    releases then do nothing)."""
    for key in [k for k in _PASS_GRAPHS if ordinal is None or k[0] == ordinal]:
        _PASS_GRAPHS.pop(key).close()


def _radix_passes(call, ws, src, dst, keys, spare, counts, offsets, to_keys, from_keys,
                  flip, n, tiles) -> None:
    """Queue the radix sort's launches: keys to bit patterns, four digit passes
    (histogram, exclusive scan of the counts, scatter), back to the dtype. `ws` is the
    workspace when the caller holds it (the scans use it)."""
    from cupric.kernels.scan import scan_into
    blocks = call.blocks(n, BLOCK)
    call.launch(to_keys, blocks, BLOCK, src, keys, flip)
    ntiles = np.int64(tiles)
    for shift in _SHIFTS:
        call.launch(radix_histogram_kernel, tiles, RADIX_BLOCK, keys, counts, shift, ntiles)
        scan_into(call, counts, offsets, True, ws)
        call.launch(radix_scatter_kernel, tiles, RADIX_BLOCK, keys, spare, offsets, shift,
                    ntiles)
        keys, spare = spare, keys
    call.launch(from_keys, blocks, BLOCK, keys, dst, flip)


_SHIFTS = tuple(np.uint32(s) for s in range(0, 32, RADIX_BITS))
_FLIPS = {False: np.uint32(0), True: np.uint32(_ALL_BITS)}
