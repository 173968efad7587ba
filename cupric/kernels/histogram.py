"""Histograms with equal-width bins, counted per block in shared memory with block-scoped
atomics and merged into the global counts with one atomic per nonzero bin and block.
Bin edges and rounding follow `numpy.histogram` exactly (the same float formula, in the
input's float type, corrected against the same edges)."""

from __future__ import annotations

import threading

import numpy as np

import cupric
from cupric.device import atomic, blockDim, grid, gridsize, shared, syncthreads, threadIdx
from cupric.kernels._common import Call, Foreign, MadeOnce
from cupric.types import f32, f64, i64, u32

__all__ = ["histogram", "histogram_kernel", "MAX_SHARED_BINS", "BLOCK"]

BLOCK = 256
#: Bins counted in shared memory (16 KiB of u32 counters); more use global atomics.
MAX_SHARED_BINS = 4096

_INPUTS = tuple(np.dtype(t) for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                      "f4", "f8"))


def _make_kernels(real):
    @cupric.device_function
    def bin_of(v, edges, lo, hi, norm, bins):
        """numpy.histogram's bin of `v`, or -1 outside [lo, hi] (NaN included)."""
        if not (v >= lo and v <= hi):
            return i64(-1)
        b = i64((v - lo) * norm)
        if b == bins:
            b -= 1
        if v < edges[b]:
            b -= 1
        elif b != bins - 1 and v >= edges[b + 1]:
            b += 1
        return b

    @cupric.kernel
    def histogram_kernel(x, edges, lo, hi, norm, counts):
        hist = shared.array(MAX_SHARED_BINS, u32)
        bins = i64(len(counts))
        t = threadIdx.x
        j = i64(t)
        while j < bins:
            hist[j] = u32(0)
            j += blockDim.x
        syncthreads()
        n = len(x)
        i = grid(1)
        step = gridsize(1)
        while i < n:
            b = bin_of(real(x[i]), edges, lo, hi, norm, bins)
            if b >= 0:
                # Default scope: on a shared array that is atom.shared (ATOMS); an
                # explicit scope="block" goes through a generic address (slower).
                atomic.add(hist, b, u32(1))
            i += step
        syncthreads()
        j = i64(t)
        while j < bins:
            c = hist[j]
            if c != u32(0):
                atomic.add(counts, j, i64(c))
            j += blockDim.x

    @cupric.kernel
    def histogram_global_kernel(x, edges, lo, hi, norm, counts):
        bins = i64(len(counts))
        n = len(x)
        i = grid(1)
        step = gridsize(1)
        while i < n:
            b = bin_of(real(x[i]), edges, lo, hi, norm, bins)
            if b >= 0:
                atomic.add(counts, b, i64(1))
            i += step

    return histogram_kernel, histogram_global_kernel


_KERNELS = MadeOnce(lambda real_dtype: _make_kernels(f32 if real_dtype == np.dtype("f4")
                                                     else f64))


def histogram_kernel(real_dtype, shared_bins: bool = True):
    """The histogram kernel computing bins in `real_dtype` (float32 or float64), counting
    in shared memory (`shared_bins`) or straight into global memory."""
    pair = _KERNELS[np.dtype(real_dtype)]
    return pair[0] if shared_bins else pair[1]


def _outer_edges(call, xs, range_):
    """(first, last) edges as numpy.histogram finds them (min/max when no range)."""
    if range_ is None:
        if xs.size == 0:
            return 0.0, 1.0
        from cupric.kernels.reduce import max as reduce_max, min as reduce_min
        lo = reduce_min(xs, stream=call.stream)
        hi = reduce_max(xs, stream=call.stream)
        if call.simulator:
            first, last = lo[()].item(), hi[()].item()
        else:
            first, last = lo.to_numpy(stream=call.stream)[()].item(), \
                hi.to_numpy(stream=call.stream)[()].item()
    else:
        first, last = range_
        if first > last:
            raise ValueError("histogram: max must be larger than min in range parameter")
    if not (np.isfinite(first) and np.isfinite(last)):
        raise ValueError(f"histogram: autodetected range of [{first}, {last}] is not "
                         f"finite")
    if first == last:
        first, last = first - 0.5, last + 0.5
    return first, last


def histogram(x, bins=10, range=None, out=None, stream=None):
    """Counts of the elements of `x` in `bins` equal-width bins over `range`.

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        Integer, float32 or float64 elements, C-contiguous, any shape (flattened).
    bins : int
        Number of bins (positive).
    range : (float, float), optional
        Lower and upper edge; the last bin includes its upper edge; values outside and
        NaNs are not counted. Default: the array's min and max, found on the device
        (two reductions and a device-to-host read, which waits for the stream).
    out : device array, optional
        int64, shape (bins,); overwritten.
    stream : Stream or stream-like, optional

    Returns
    -------
    (counts, edges): counts as `out` or a new int64 array; edges a NumPy array of
    bins + 1 floats, exactly `numpy.histogram`'s.

    Cost
    ----
    One launch, reading the input once; up to 4096 bins are counted in shared memory
    (bins hit by many threads at once serialize their atomics); more bins count with
    global atomics. The edges go to the device once per distinct set of bins (a small
    cache per device).

    Examples
    --------
    >>> counts, edges = histogram(pixels, 256, (0, 256))            # doctest: +SKIP
    """
    bins = int(bins)
    if bins <= 0:
        raise ValueError(f"histogram: bins must be positive, got {bins}")
    call = Call("histogram", stream)
    xs = call.array(x, "x", dtypes=_INPUTS)
    first, last = _outer_edges(call, xs, range)
    real = _F4 if xs.dtype == _F4 else _F8
    plan_key = (bins, first, last, real)
    plan = _PLANS.get(plan_key)
    if plan is None:
        edges = np.linspace(first, last, bins + 1, endpoint=True, dtype=real)
        norm = bins / (float(last) - float(first))
        plan = (edges, (real.type(first), real.type(last), real.type(norm)),
                histogram_kernel(real, bins <= MAX_SHARED_BINS))
        if len(_PLANS) >= 64:
            _PLANS.clear()
        _PLANS[plan_key] = plan
    edges, scalars, kern = plan
    dst, result = call.output(out, "out", (bins,), _I8)
    flat = call.flat(xs, "x")
    if call.simulator:
        dst[...] = 0
        dev_edges = edges
    else:
        (dst.launch_view() if dst.__class__ is Foreign else dst).zero(call.order)
        dev_edges = _device_edges(edges, plan_key)
    if flat.size:
        call.launch(kern, call.blocks(flat.size, BLOCK, 4), BLOCK, flat, dev_edges,
                    *scalars, dst)
    return result, edges.copy()


_F4 = np.dtype("f4")
_F8 = np.dtype("f8")
_I8 = np.dtype("i8")
#: (bins, first edge, last edge, real dtype) -> (edges, the kernel's first/last/norm
#: scalars, kernel): computed once per distinct set of bins.
_PLANS: dict = {}


_EDGES: dict = {}
_EDGES_LOCK = threading.Lock()
#: Device copies of recently used bin edges kept (per device).
EDGES_CACHED = 16


def _device_edges(edges: np.ndarray, plan_key: tuple):
    """A device copy of `edges` on the current device, kept for reuse: the same bins
    are usually histogrammed again, and a host-to-device copy per call costs more than
    the kernel on small inputs. The copy is synchronous, so any stream may read it.
    `plan_key` (bins, first and last edge, dtype) determines the edges."""
    from cupric.kernels._common import device_ordinal
    from cupric.runtime.memory import to_device
    key = (device_ordinal(), plan_key)
    buf = _EDGES.get(key)
    if buf is None:
        buf = to_device(edges)
        with _EDGES_LOCK:
            if len(_EDGES) >= EDGES_CACHED:
                _EDGES.pop(next(iter(_EDGES)))
            buf = _EDGES.setdefault(key, buf)
    return buf
