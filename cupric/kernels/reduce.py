"""One-pass reductions: sum, min, max, argmin, argmax and dot. Each block reduces a
grid-stride share of the input in registers, then across its warps with shuffles; the
block that finishes last (a ticket taken with an atomic after a fence) reduces the
per-block partial results, so one launch gives the final value, deterministically."""

from __future__ import annotations


import numpy as np

import cupric
from cupric.device import (FULL_MASK, atomic, blockDim, blockIdx, grid, gridDim, gridsize,
                           shared, syncthreads, threadfence, threadIdx, unroll, vload, warp)
from cupric.kernels._common import (NUMERIC, NUMERIC_BOOL, Call, MadeOnce, same_dtype,
                                    same_shape)
from cupric.kernels.templates import reduction
from cupric.types import f32, f64, i32, i64, u32, u64

__all__ = ["sum", "min", "max", "argmin", "argmax", "dot", "reduce_kernel",
           "arg_reduce_kernel", "BLOCK"]

BLOCK = 256
#: Warps per block (the cross-warp step gives each warp one shared slot).
WARPS = BLOCK // 32

# -- combine functions (NaN-propagating like NumPy for floats; `v != v` is False for ints)


@cupric.device_function
def _add(a, b):
    return a + b


@cupric.device_function
def _min_nan(a, b):
    # b wins when smaller or NaN; a NaN in `a` is never replaced, so NaN sticks.
    return b if (b < a or b != b) and a == a else a


@cupric.device_function
def _max_nan(a, b):
    return b if (b > a or b != b) and a == a else a


@cupric.device_function
def _product(x, y):
    return x * y


@cupric.device_function
def _argmin_takes(va, ia, vb, ib):
    """Whether (vb, ib) replaces (va, ia) in an argmin: smaller value, or equal value at
    a smaller index; the first NaN (lowest index) wins over everything, as in NumPy."""
    if va != va:
        return vb != vb and ib < ia
    if vb != vb:
        return True
    return vb < va or (vb == va and ib < ia)


@cupric.device_function
def _argmax_takes(va, ia, vb, ib):
    if va != va:
        return vb != vb and ib < ia
    if vb != vb:
        return True
    return vb > va or (vb == va and ib < ia)


# -- kernels --------------------------------------------------------------------------------

def _make_reduce(acc, combine, load, quads):
    """A one-pass reduction kernel accumulating in cupric type `acc` (the reduction
    template); `quads`: four neighbouring elements per trip (else one: float16 inputs,
    see elementwise.py)."""
    return reduction(combine, load, acc=acc, width=4 if quads else 1, block=BLOCK,
                     name="reduce_kernel")


def _make_arg_reduce(acc, takes, quads):
    """A one-pass argmin/argmax kernel: values in cupric type `acc`, indices in i64;
    `quads`: four neighbouring elements per load (else one: float16 inputs)."""

    @cupric.device_function
    def butterfly(v, k):
        # Every lane of the warp ends with the warp's winning (value, index).
        d: i32 = 16  # 32-bit shuffle distances (an i64 local costs two ops)
        while d > 0:
            ov = warp.shfl_xor(FULL_MASK, v, d)
            ok = warp.shfl_xor(FULL_MASK, k, d)
            if takes(v, k, ov, ok):
                v = ov
                k = ok
            d >>= 1
        return v, k

    @cupric.kernel
    def arg_reduce_kernel(x, init, out, partial_values, partial_index, counter):
        slot_v = shared.array(WARPS, acc)
        slot_i = shared.array(WARPS, i64)
        is_last = shared.array(1, i32)
        t = threadIdx.x
        lane = t & 31
        w = t >> 5
        n = len(x)
        i = grid(1)
        step = gridsize(1)
        v = init
        k = n
        if quads:
            # Groups of four neighbours, visited in increasing index order per thread,
            # so a tie keeps the first index without extra work.
            full = n >> 2
            while i < full:
                j = i * 4
                group = vload(x, j, 4)
                for q in unroll(4):
                    if takes(v, k, acc(group[q]), j + q):
                        v = acc(group[q])
                        k = j + q
                i += step
            r = full * 4 + grid(1)
            if r < n:
                a = acc(x[r])
                if takes(v, k, a, r):
                    v = a
                    k = r
        else:
            while i < n:
                a = acc(x[i])
                if takes(v, k, a, i):
                    v = a
                    k = i
                i += step
        v, k = butterfly(v, k)
        if lane == 0:
            slot_v[w] = v
            slot_i[w] = k
        syncthreads()
        if w == 0:
            v = init
            k = n
            if lane < WARPS:
                v = slot_v[lane]
                k = slot_i[lane]
            v, k = butterfly(v, k)
            if lane == 0:
                partial_values[blockIdx.x] = v
                partial_index[blockIdx.x] = k
                threadfence()
                ticket = atomic.add(counter, 0, 1)
                is_last[0] = 1 if ticket == gridDim.x - 1 else 0
        syncthreads()
        if is_last[0] != 0:
            threadfence()
            v = init
            k = n
            j = t
            while j < gridDim.x:
                pv = partial_values[j]
                pk = partial_index[j]
                if takes(v, k, pv, pk):
                    v = pv
                    k = pk
                j += blockDim.x
            v, k = butterfly(v, k)
            syncthreads()
            if lane == 0:
                slot_v[w] = v
                slot_i[w] = k
            syncthreads()
            if w == 0:
                v = init
                k = n
                if lane < WARPS:
                    v = slot_v[lane]
                    k = slot_i[lane]
                v, k = butterfly(v, k)
                if lane == 0:
                    out[0] = k
                    counter[0] = 0

    return arg_reduce_kernel


_CUPRIC_TYPES = {np.dtype("f4"): f32, np.dtype("f8"): f64, np.dtype("i4"): i32,
                 np.dtype("i8"): i64, np.dtype("u4"): u32, np.dtype("u8"): u64}
_COMBINE = {"sum": _add, "dot": _add, "min": _min_nan, "max": _max_nan}
#: The value each element contributes (None: the x element).
_LOAD = {"sum": None, "dot": _product, "min": None, "max": None}
_TAKES = {"argmin": _argmin_takes, "argmax": _argmax_takes}
# Keyed by (kind, accumulator dtype, quads).
_KERNELS = MadeOnce(lambda key: _make_reduce(_CUPRIC_TYPES[key[1]], _COMBINE[key[0]],
                                             _LOAD[key[0]], key[2]))
_ARG_KERNELS = MadeOnce(lambda key: _make_arg_reduce(_CUPRIC_TYPES[key[1]], _TAKES[key[0]],
                                                     key[2]))


def reduce_kernel(kind: str, acc_dtype, quads: bool = True):
    """The reduction kernel for `kind` ("sum", "dot", "min", "max") accumulating in
    `acc_dtype` (f32, f64, i32, i64, u32 or u64), reading four neighbouring elements per
    trip (`quads`) or one: made once, then reused."""
    return _KERNELS[kind, np.dtype(acc_dtype), bool(quads)]


def arg_reduce_kernel(kind: str, acc_dtype, quads: bool = True):
    """The argmin/argmax kernel (`kind`) comparing values in `acc_dtype`, loading four
    neighbouring elements at a time (`quads`) or one."""
    return _ARG_KERNELS[kind, np.dtype(acc_dtype), bool(quads)]


# -- dtypes ---------------------------------------------------------------------------------

def _sum_dtypes(dtype: np.dtype):
    """(accumulator, result) dtypes of a sum, following NumPy: small integers and bools
    sum in 64 bits; float16 accumulates in float32 and rounds once at the end."""
    if dtype.kind == "b" or dtype.kind == "i":
        return np.dtype("i8"), np.dtype("i8")
    if dtype.kind == "u":
        return np.dtype("u8"), np.dtype("u8")
    if dtype == np.dtype("f2"):
        return np.dtype("f4"), dtype
    return dtype, dtype


def _compare_dtype(dtype: np.dtype) -> np.dtype:
    """The register type comparisons use (shuffles move 32- and 64-bit values only)."""
    if dtype.kind == "f":
        return np.dtype("f8") if dtype.itemsize == 8 else np.dtype("f4")
    if dtype.kind == "b":
        return np.dtype("i4")
    if dtype.itemsize == 8:
        return dtype
    return np.dtype("i4") if dtype.kind == "i" else np.dtype("u4")


def _extreme(dtype: np.dtype, largest: bool):
    """The identity of min (largest=True) or max: +-inf for floats, integer limits."""
    if dtype.kind == "f":
        return dtype.type(np.inf if largest else -np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.max if largest else info.min)


# -- host functions -------------------------------------------------------------------------

#: (kind, input dtype, accumulator dtype, result dtype) -> what a reduction's launch
#: needs besides the arrays: (kernel, accumulator dtype, whether the result is cast,
#: workspace names of the cast target and of the partials).
_PLANS: dict = {}


def _plan(kind, x_dtype, acc_dtype, result_dtype):
    key = (kind, x_dtype, acc_dtype, result_dtype)
    plan = _PLANS.get(key)
    if plan is None:
        acc = np.dtype(acc_dtype)
        # float16 inputs read one element per trip (libNVVM 13.0, see elementwise.py).
        kern = reduce_kernel(kind, acc, np.dtype(x_dtype) != np.dtype(np.float16))
        plan = _PLANS[key] = (kern, acc, np.dtype(result_dtype) != acc,
                              f"reduce.result.{acc}", f"reduce.partials.{acc}")
    return plan


def _run_reduce(call, kind, x, y, acc_dtype, result_dtype, init, out):
    x = call.flat(x, "x")
    y = x if y is None else call.flat(y, "y")
    n = x.size
    kern, acc_dtype, converted, result_name, partials_name = _plan(
        kind, x.dtype, acc_dtype, result_dtype)
    dst, result = call.output(out, "out", (), result_dtype)
    blocks = call.blocks(n, BLOCK, 4)
    args = (x, y, acc_dtype.type(init))
    if call.simulator:
        target = call.scratch((1,), acc_dtype) if converted else dst.reshape(1)
        call.launch(kern, blocks, BLOCK, *args, target, call.scratch((blocks,), acc_dtype),
                    call.scratch((1,), np.uint32, zero=True))
        if converted:
            call.launch(_cast_kernel, 1, 1, target, dst.reshape(1))
        return result
    with call.workspace() as ws:
        order = call.order
        target = ws.array(result_name, acc_dtype, 1, order) if converted \
            else call.flat(dst, "out")
        partials = ws.array(partials_name, acc_dtype, blocks, order)
        # The last block of every launch puts the ticket counter back to zero.
        counter = ws.array("reduce.counter", _U32, 1, order, zero=True)
        call.launch(kern, blocks, BLOCK, *args, target, partials, counter)
        if converted:
            call.launch(_cast_kernel, 1, 1, target, call.flat(dst, "out"))
    return result


_U32 = np.dtype(np.uint32)
_PARTIALS = {d: f"reduce.partials.{d}" for d in NUMERIC}


@cupric.kernel
def _cast_kernel(src, dst):
    """dst[0] = src[0], converted to dst's dtype."""
    if grid(1) == 0:
        dst[0] = src[0]


def _prepare(op, x, call_stream):
    call = Call(op, call_stream)
    return call, call.array(x, "x", dtypes=NUMERIC_BOOL)


def sum(x, out=None, stream=None):
    """Sum of all elements of an array.

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        C-contiguous, any shape; bool, integer or float dtype.
    out : device array of shape (), optional
        Receives the sum; its dtype must be the result dtype (below).
    stream : Stream or stream-like, optional

    Returns
    -------
    A 0-d array: int64 for bools and signed integers, uint64 for unsigned ones, the
    input's dtype for floats (float16 accumulates in float32), as NumPy.

    Cost
    ----
    One launch; the per-block partial results and the ticket counter live in a per-device
    workspace reused from call to call (no allocation). Reads the input once:
    bandwidth-bound (measured beside cupy.sum: BENCHMARKS.md). Float sums
    are tree-shaped, so the result can differ from NumPy's pairwise sum in the last
    bits; it is the same on every run.

    Examples
    --------
    >>> total = sum(to_device(np.ones(1000, np.float32)))        # doctest: +SKIP
    >>> float(total.to_numpy())                                 # doctest: +SKIP
    1000.0
    """
    call, xs = _prepare("sum", x, stream)
    acc, res = _SUM_DTYPES.get(xs.dtype) or _sum_dtypes(np.dtype(xs.dtype))
    return _run_reduce(call, "sum", xs, None, acc, res, 0, out)


_SUM_DTYPES = {d: _sum_dtypes(d) for d in NUMERIC_BOOL}


def dot(x, y, out=None, stream=None):
    """Inner product ``sum(x * y)`` of two arrays of one dtype and shape.

    Parameters
    ----------
    x, y : device arrays (NumPy arrays on the simulator)
        C-contiguous, same shape and numeric dtype (not bool).
    out : device array of shape (), optional
    stream : Stream or stream-like, optional

    Returns
    -------
    A 0-d array of the accumulator's dtype: int64/uint64 for integers (products are
    taken in the input's width and may wrap; NumPy's `dot` keeps the input's dtype),
    the input's float dtype (float16 products accumulate in float32).

    Cost
    ----
    One launch, reads both arrays once: bandwidth-bound.
    """
    call = Call("dot", stream)
    xs = call.array(x, "x", dtypes=NUMERIC)
    ys = call.array(y, "y", dtypes=NUMERIC)
    same_shape("dot", {"x": xs, "y": ys})
    dtype = same_dtype("dot", {"x": xs, "y": ys})
    acc, res = _sum_dtypes(dtype)
    if dtype == np.dtype("f2"):
        res = dtype
    return _run_reduce(call, "dot", xs, ys, acc, res, 0, out)


def _minmax(op, largest, x, out, stream):
    call, xs = _prepare(op, x, stream)
    if xs.size == 0:
        raise ValueError(f"{op} of an empty array has no identity")
    dtype = np.dtype(xs.dtype)
    acc = _compare_dtype(dtype)
    init = _extreme(acc, largest) if dtype.kind != "b" else acc.type(1 if largest else 0)
    return _run_reduce(call, op, xs, None, acc, dtype, init, out)


def min(x, out=None, stream=None):
    """Smallest element of an array (NaN if any element is NaN, as NumPy).

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        C-contiguous, non-empty, any shape and numeric or bool dtype.
    out : device array of shape (), optional
        Of `x`'s dtype.
    stream : Stream or stream-like, optional

    Returns
    -------
    A 0-d array of `x`'s dtype.

    Raises
    ------
    ValueError
        For an empty array.

    Cost
    ----
    One launch, reads the input once.
    """
    return _minmax("min", True, x, out, stream)


def max(x, out=None, stream=None):
    """Largest element of an array (NaN if any element is NaN). See `min`."""
    return _minmax("max", False, x, out, stream)


def _arg(op, x, out, stream):
    call = Call(op, stream)
    xs = call.array(x, "x", dtypes=NUMERIC_BOOL)
    if xs.size == 0:
        raise ValueError(f"{op} of an empty array is undefined")
    dtype = np.dtype(xs.dtype)
    acc = _compare_dtype(dtype)
    init = _extreme(acc, op == "argmin")
    flat = call.flat(xs, "x")
    dst, result = call.output(out, "out", (), np.int64)
    blocks = call.blocks(flat.size, BLOCK, 4)
    kern = arg_reduce_kernel(op, acc, dtype != np.dtype(np.float16))
    if call.simulator:
        call.launch(kern, blocks, BLOCK, flat, init, dst.reshape(1),
                    call.scratch((blocks,), acc), call.scratch((blocks,), np.int64),
                    call.scratch((1,), np.uint32, zero=True))
        return result
    with call.workspace() as ws:
        order = call.order
        name = _PARTIALS.get(acc) or f"reduce.partials.{acc}"
        values = ws.array(name, acc, blocks, order)
        index = ws.array("reduce.partial_index", np.int64, blocks, order)
        counter = ws.array("reduce.counter", np.uint32, 1, order, zero=True)
        call.launch(kern, blocks, BLOCK, flat, init, call.flat(dst, "out"), values, index,
                    counter)
    return result


def argmin(x, out=None, stream=None):
    """Flat index of the smallest element (the first one on ties; the first NaN if any).

    Parameters
    ----------
    x : device array (NumPy array on the simulator)
        C-contiguous, non-empty.
    out : device array of shape (), int64, optional
    stream : Stream or stream-like, optional

    Returns
    -------
    A 0-d int64 array.

    Cost
    ----
    One launch, reads the input once (two shuffles per step: value and index).
    """
    return _arg("argmin", x, out, stream)


def argmax(x, out=None, stream=None):
    """Flat index of the largest element (the first on ties; the first NaN). See
    `argmin`."""
    return _arg("argmax", x, out, stream)
