"""Elementwise kernels: vecadd, saxpy, memcpy, fill and `map` of a user device function.
Each is a grid-stride loop over groups of four neighbouring elements (one 128-bit access
per array for 32-bit types when the arrays are 16-byte aligned), generic over the dtype.
vecadd, saxpy, memcpy and fill on items of 4 bytes or more launch a grid that covers the
array once (`covering_blocks`, see `quad_geometry`), so each thread makes one trip, as a
plain CUDA C kernel does (measured faster than a grid of 8 blocks per SM); their
loops serve grids smaller than the array (launches of the kernels by hand, the
simulator, arrays past 2^31-1 blocks). Smaller items and the one-element kernels
(float16 arithmetic, `map`) keep a grid of at most 8 blocks per SM: how they fare on a
covering grid is not measured yet.

The kernels take 1-D arrays; the host functions flatten C-contiguous arrays of any shape.
"""

from __future__ import annotations

import threading

import numpy as np

import cupric
from cupric.device import grid, gridsize
from cupric.kernels._common import NUMERIC, NUMERIC_BOOL, Call, same_dtype, same_shape

__all__ = ["vecadd", "saxpy", "memcpy", "fill", "map", "vecadd_kernel", "saxpy_kernel",
           "copy_kernel", "fill_kernel", "vecadd_scalar_kernel", "saxpy_scalar_kernel",
           "BLOCK", "STREAM_BLOCK", "quad_geometry"]

#: Threads per block of the kernels here (but vecadd's and saxpy's, below).
BLOCK = 256
#: Threads per block of vecadd and saxpy (two arrays read, one written, four elements a
#: thread): 768-thread blocks hold an SM at 1536 threads (two blocks) where 256-thread
#: ones fill it (2048); the lighter load measured slightly faster on large float32
#: arrays -- the occupancy CUDA C's compile of the same kernel gets from its 40
#: registers. memcpy and fill keep 256 (a copy measured slower with 768).
STREAM_BLOCK = 768
#: Elements each thread handles per trip of its grid-stride loop.
UNROLL = 4
_F16 = np.dtype(np.float16)


@cupric.kernel
def vecadd_kernel(a, b, out):
    """out[i] = a[i] + b[i] over 1-D arrays of one dtype."""
    n = len(out)
    quads = n >> 2
    i = grid(1)
    step = gridsize(1)
    # Four neighbouring elements per thread and trip: with 16-byte aligned arrays (the
    # launch checks) the compiler merges them into one 128-bit load or store.
    # Two groups a grid apart per trip (the compiler does not unroll grid-stride loops
    # by itself): four 128-bit loads in flight per thread before the stores.
    while i + step < quads:
        j = i * 4
        h = (i + step) * 4
        a0 = a[j]
        a1 = a[j + 1]
        a2 = a[j + 2]
        a3 = a[j + 3]
        c0 = a[h]
        c1 = a[h + 1]
        c2 = a[h + 2]
        c3 = a[h + 3]
        b0 = b[j]
        b1 = b[j + 1]
        b2 = b[j + 2]
        b3 = b[j + 3]
        d0 = b[h]
        d1 = b[h + 1]
        d2 = b[h + 2]
        d3 = b[h + 3]
        out[j] = a0 + b0
        out[j + 1] = a1 + b1
        out[j + 2] = a2 + b2
        out[j + 3] = a3 + b3
        out[h] = c0 + d0
        out[h + 1] = c1 + d1
        out[h + 2] = c2 + d2
        out[h + 3] = c3 + d3
        i += 2 * step
    if i < quads:
        j = i * 4
        a0 = a[j]
        a1 = a[j + 1]
        a2 = a[j + 2]
        a3 = a[j + 3]
        b0 = b[j]
        b1 = b[j + 1]
        b2 = b[j + 2]
        b3 = b[j + 3]
        out[j] = a0 + b0
        out[j + 1] = a1 + b1
        out[j + 2] = a2 + b2
        out[j + 3] = a3 + b3
    k = quads * 4 + grid(1)
    if k < n:
        out[k] = a[k] + b[k]


@cupric.kernel
def saxpy_kernel(a, x, y, out):
    """out[i] = a * x[i] + y[i] over 1-D arrays of one dtype (`a` of that dtype)."""
    n = len(out)
    quads = n >> 2
    i = grid(1)
    step = gridsize(1)
    while i + step < quads:
        j = i * 4
        h = (i + step) * 4
        x0 = x[j]
        x1 = x[j + 1]
        x2 = x[j + 2]
        x3 = x[j + 3]
        u0 = x[h]
        u1 = x[h + 1]
        u2 = x[h + 2]
        u3 = x[h + 3]
        y0 = y[j]
        y1 = y[j + 1]
        y2 = y[j + 2]
        y3 = y[j + 3]
        w0 = y[h]
        w1 = y[h + 1]
        w2 = y[h + 2]
        w3 = y[h + 3]
        out[j] = a * x0 + y0
        out[j + 1] = a * x1 + y1
        out[j + 2] = a * x2 + y2
        out[j + 3] = a * x3 + y3
        out[h] = a * u0 + w0
        out[h + 1] = a * u1 + w1
        out[h + 2] = a * u2 + w2
        out[h + 3] = a * u3 + w3
        i += 2 * step
    if i < quads:
        j = i * 4
        x0 = x[j]
        x1 = x[j + 1]
        x2 = x[j + 2]
        x3 = x[j + 3]
        y0 = y[j]
        y1 = y[j + 1]
        y2 = y[j + 2]
        y3 = y[j + 3]
        out[j] = a * x0 + y0
        out[j + 1] = a * x1 + y1
        out[j + 2] = a * x2 + y2
        out[j + 3] = a * x3 + y3
    k = quads * 4 + grid(1)
    if k < n:
        out[k] = a * x[k] + y[k]


@cupric.kernel
def copy_kernel(src, out):
    """out[i] = src[i] over 1-D arrays of one dtype."""
    n = len(out)
    quads = n >> 2
    i = grid(1)
    step = gridsize(1)
    while i + step < quads:
        j = i * 4
        h = (i + step) * 4
        v0 = src[j]
        v1 = src[j + 1]
        v2 = src[j + 2]
        v3 = src[j + 3]
        w0 = src[h]
        w1 = src[h + 1]
        w2 = src[h + 2]
        w3 = src[h + 3]
        out[j] = v0
        out[j + 1] = v1
        out[j + 2] = v2
        out[j + 3] = v3
        out[h] = w0
        out[h + 1] = w1
        out[h + 2] = w2
        out[h + 3] = w3
        i += 2 * step
    if i < quads:
        j = i * 4
        v0 = src[j]
        v1 = src[j + 1]
        v2 = src[j + 2]
        v3 = src[j + 3]
        out[j] = v0
        out[j + 1] = v1
        out[j + 2] = v2
        out[j + 3] = v3
    k = quads * 4 + grid(1)
    if k < n:
        out[k] = src[k]


# float16 arrays take one element per trip: libNVVM 13.0 (CUDA 13.0 drivers) fails on
# four neighbouring float16 accesses from 16-byte aligned pointers ("Do not know how to
# split the result of this operator!"), which the kernels above would give it.

@cupric.kernel
def vecadd_scalar_kernel(a, b, out):
    """out[i] = a[i] + b[i], one element per thread and trip (float16 arrays)."""
    n = len(out)
    i = grid(1)
    step = gridsize(1)
    while i < n:
        out[i] = a[i] + b[i]
        i += step


@cupric.kernel
def saxpy_scalar_kernel(a, x, y, out):
    """out[i] = a * x[i] + y[i], one element per thread and trip (float16 arrays)."""
    n = len(out)
    i = grid(1)
    step = gridsize(1)
    while i < n:
        out[i] = a * x[i] + y[i]
        i += step


@cupric.kernel
def fill_kernel(out, value):
    """out[i] = value over a 1-D array (`value` of its dtype)."""
    n = len(out)
    quads = n >> 2
    i = grid(1)
    step = gridsize(1)
    while i < quads:
        j = i * 4
        out[j] = value
        out[j + 1] = value
        out[j + 2] = value
        out[j + 3] = value
        i += step
    k = quads * 4 + grid(1)
    if k < n:
        out[k] = value


def quad_geometry(call: Call, out, block: int) -> tuple:
    """(blocks, threads per block) of a four-elements-a-thread kernel writing `out`.

    Items of 4 bytes or more: a grid covering the array once with `block` threads per
    block (measured faster than the bounded grid with float32; BENCHMARKS.md). Smaller
    items move few bytes per thread, where a covering grid is not measured to pay (the
    rgba2gray kernel, 20 bytes a thread, was slower on one): a grid of at most
    WAVES_PER_SM blocks of BLOCK threads per SM, as before."""
    if out.dtype.itemsize >= 4:
        return call.covering_blocks(out.size, block, UNROLL), block
    return call.blocks(out.size, BLOCK, UNROLL), BLOCK


def _common_layout(op: str, first: str, a, second: str, b) -> tuple:
    """(shape, dtype) shared by two arrays (`same_shape`'s and `same_dtype`'s errors
    otherwise), with the common case checked without building their arguments."""
    shape, dtype = a.shape, a.dtype
    if b.shape != shape:
        shape = same_shape(op, {first: a, second: b})
    if b.dtype is not dtype:
        dtype = same_dtype(op, {first: a, second: b})
    return shape, dtype


def _scalar(op: str, value, dtype: np.dtype, name: str):
    """`value` as a NumPy scalar of `dtype`, refusing floats for integer arrays and
    values out of an integer dtype's range (they would wrap silently)."""
    if dtype.kind in "iu":
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise TypeError(f"{op}: {name}={value!r} is not an integer, but the arrays "
                            f"hold {dtype}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"{op}: {name}={value!r} does not fit in {dtype}")
        return dtype.type(int(value))
    return dtype.type(value)


def vecadd(a, b, out=None, stream=None):
    """Elementwise sum of two arrays of the same dtype and shape.

    Parameters
    ----------
    a, b : device arrays (NumPy arrays on the simulator)
        C-contiguous, any shape, one numeric dtype.
    out : device array, optional
        Receives the result (same dtype and shape); a new array otherwise.
    stream : Stream or stream-like, optional
        Where the kernel runs (the legacy default stream otherwise).

    Returns
    -------
    out, or a new DeviceBuffer (NumPy array on the simulator).

    Raises
    ------
    TypeError
        Host arrays on a GPU machine, mixed or unsupported dtypes.
    ValueError
        Shapes that differ, non-contiguous arrays.

    Cost
    ----
    One launch; reads 2 and writes 1 array: bandwidth-bound (beside a device-to-device
    copy and the same kernel in CUDA C on the same grid: BENCHMARKS.md). Host cost: the
    launch plus the checks (benchmarks/host_cost.py);
    CuPy, PyTorch and numba-cuda arrays are read through their own attributes.
    Integer sums wrap.

    Examples
    --------
    >>> from cupric.runtime import to_device
    >>> a = to_device(np.arange(5, dtype=np.float32))           # doctest: +SKIP
    >>> vecadd(a, a).to_numpy()                                 # doctest: +SKIP
    array([0., 2., 4., 6., 8.], dtype=float32)
    """
    call = Call("vecadd", stream)
    a = call.array(a, "a", dtypes=NUMERIC)
    b = call.array(b, "b", dtypes=NUMERIC)
    shape, dtype = _common_layout("vecadd", "a", a, "b", b)
    dst, result = call.output(out, "out", shape, dtype)
    fa, fb, fo = call.flat(a, "a"), call.flat(b, "b"), call.flat(dst, "out")
    if dtype.char == "e":  # float16
        call.launch(vecadd_scalar_kernel, call.blocks(fo.size, BLOCK), BLOCK, fa, fb, fo)
    else:
        blocks, threads = quad_geometry(call, fo, STREAM_BLOCK)
        call.launch(vecadd_kernel, blocks, threads, fa, fb, fo)
    return result


def saxpy(a, x, y, out=None, stream=None):
    """`a * x + y` for a scalar `a` and arrays `x`, `y` of one dtype and shape.

    Parameters
    ----------
    a : number
        Converted to the arrays' dtype (an integer dtype refuses non-integral values).
    x, y : device arrays (NumPy arrays on the simulator)
        C-contiguous, any shape. `out` may be `y` (in-place update).
    out : device array, optional
        Receives the result; a new array otherwise.
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array.

    Raises
    ------
    TypeError, ValueError
        As `vecadd`.

    Cost
    ----
    One launch, 3 arrays moved: bandwidth-bound. Floats use a fused multiply-add, so
    results may differ from NumPy's two roundings in the last bit.

    Examples
    --------
    >>> saxpy(2.0, x, y, out=y)          # y = 2x + y in place       # doctest: +SKIP
    """
    call = Call("saxpy", stream)
    x = call.array(x, "x", dtypes=NUMERIC)
    y = call.array(y, "y", dtypes=NUMERIC)
    shape, dtype = _common_layout("saxpy", "x", x, "y", y)
    alpha = _scalar("saxpy", a, dtype, "a")
    dst, result = call.output(out, "out", shape, dtype)
    fx, fy, fo = call.flat(x, "x"), call.flat(y, "y"), call.flat(dst, "out")
    if dtype.char == "e":  # float16
        call.launch(saxpy_scalar_kernel, call.blocks(fo.size, BLOCK), BLOCK, alpha, fx, fy,
                    fo)
    else:
        blocks, threads = quad_geometry(call, fo, STREAM_BLOCK)
        call.launch(saxpy_kernel, blocks, threads, alpha, fx, fy, fo)
    return result


def memcpy(src, out=None, stream=None):
    """Copy an array with a kernel (the bandwidth reference of the benchmarks).

    Parameters
    ----------
    src : device array (NumPy array on the simulator)
        C-contiguous, any numeric dtype and shape.
    out : device array, optional
        Same dtype and shape; a new array otherwise.
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array.

    Cost
    ----
    One launch; 2 arrays moved. `DeviceBuffer.copy_from` (the copy engine) is the
    alternative that needs no SM time.
    """
    call = Call("memcpy", stream)
    src = call.array(src, "src", dtypes=NUMERIC_BOOL)
    dst, result = call.output(out, "out", src.shape, src.dtype)
    fs, fo = call.flat(src, "src"), call.flat(dst, "out")
    if src.dtype.char == "e":  # float16: a bit copy (see vecadd_scalar_kernel)
        fs, fo = fs.view(np.uint16), fo.view(np.uint16)
    call.launch(copy_kernel, *quad_geometry(call, fo, BLOCK), fs, fo)
    return result


def fill(out, value, stream=None):
    """Set every element of `out` to `value`.

    Parameters
    ----------
    out : device array (NumPy array on the simulator)
        C-contiguous, numeric dtype, any shape; written in place.
    value : number
        Converted to `out`'s dtype (integer dtypes refuse fractions and values that do
        not fit).
    stream : Stream or stream-like, optional

    Returns
    -------
    out

    Cost
    ----
    One launch, write-only traffic.
    """
    call = Call("fill", stream)
    dst = call.array(out, "out", dtypes=NUMERIC_BOOL, writable=True)
    scalar = np.bool_(value) if dst.dtype == np.dtype(bool) else \
        _scalar("fill", value, np.dtype(dst.dtype), "value")
    fo = call.flat(dst, "out")
    if dst.dtype.char == "e":  # float16: fill with the bit pattern (see vecadd_scalar_kernel)
        fo, scalar = fo.view(np.uint16), scalar.view(np.uint16)
    call.launch(fill_kernel, *quad_geometry(call, fo, BLOCK), fo, scalar)
    return out


# -- map ------------------------------------------------------------------------------------

_MAP_KERNELS: dict = {}
_MAP_LOCK = threading.Lock()


def _map1(fn):
    @cupric.kernel
    def map1_kernel(x, out):
        n = len(out)
        i = grid(1)
        step = gridsize(1)
        while i < n:
            out[i] = fn(x[i])
            i += step
    return map1_kernel


def _map2(fn):
    @cupric.kernel
    def map2_kernel(x, y, out):
        n = len(out)
        i = grid(1)
        step = gridsize(1)
        while i < n:
            out[i] = fn(x[i], y[i])
            i += step
    return map2_kernel


def _map3(fn):
    @cupric.kernel
    def map3_kernel(x, y, z, out):
        n = len(out)
        i = grid(1)
        step = gridsize(1)
        while i < n:
            out[i] = fn(x[i], y[i], z[i])
            i += step
    return map3_kernel


_MAP_FACTORIES = {1: _map1, 2: _map2, 3: _map3}


def map_kernel(fn, nargs: int):
    """The kernel applying device function `fn` to `nargs` arrays (made once per pair)."""
    key = (fn, nargs)
    kern = _MAP_KERNELS.get(key)
    if kern is None:
        with _MAP_LOCK:
            kern = _MAP_KERNELS.get(key)
            if kern is None:
                kern = _MAP_KERNELS[key] = _MAP_FACTORIES[nargs](fn)
    return kern


def map(fn, *arrays, out=None, dtype=None, stream=None):
    """Apply a `@cupric.device_function` elementwise: ``out[i] = fn(a[i], b[i], ...)``.

    Parameters
    ----------
    fn : cupric.DeviceFunction
        Takes one scalar per array and returns a scalar; compiled into the kernel (and
        specialized for the arrays' dtypes).
    *arrays : 1 to 3 device arrays (NumPy arrays on the simulator)
        C-contiguous, one shape; dtypes may differ.
    out : device array, optional
        Receives the results, converted to its dtype on store.
    dtype : dtype-like, optional
        The dtype of a new `out` (default: NumPy's promotion of the inputs' dtypes).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array.

    Raises
    ------
    TypeError
        `fn` is not a device function, or a wrong number of arrays.
    cupric.compiler.CompileError
        `fn`'s body is outside the kernel language (at its first use with new dtypes).

    Cost
    ----
    One launch; the first call with new dtypes compiles the kernel (or hits the disk
    cache). `fn` is inlined, so the loop is as fast as a hand-written kernel.

    Examples
    --------
    >>> @cupric.device_function
    ... def hypot2(x, y):
    ...     return x * x + y * y
    >>> r2 = cupric.kernels.elementwise.map(hypot2, xs, ys)     # doctest: +SKIP
    """
    if not getattr(fn, "_cupric_device_function", False):
        raise TypeError("map: fn must be a @cupric.device_function, got "
                        f"{type(fn).__name__}")
    if not 1 <= len(arrays) <= 3:
        raise TypeError(f"map takes 1 to 3 arrays, got {len(arrays)}")
    call = Call("map", stream)
    names = ["x", "y", "z"][:len(arrays)]
    arrs = [call.array(a, n, dtypes=NUMERIC_BOOL)
            for a, n in zip(arrays, names)]
    shape = same_shape("map", dict(zip(names, arrs)))
    if dtype is None:
        dtype = np.result_type(*[np.dtype(a.dtype) for a in arrs]) if out is None \
            else call.array(out, "out").dtype
    dst, result = call.output(out, "out", shape, dtype)
    flats = [call.flat(a, n) for a, n in zip(arrs, names)]
    fo = call.flat(dst, "out")
    call.launch(map_kernel(fn, len(arrs)), call.blocks(fo.size, BLOCK), BLOCK, *flats, fo)
    return result
