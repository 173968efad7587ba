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
Each kernel is `cupric.kernels.templates.elementwise` around a one-line device function.
"""

from __future__ import annotations

import numpy as np

import cupric
from cupric.kernels._common import (MAX_GRID_X, NUMERIC, NUMERIC_BOOL, Call, MadeOnce,
                                    Plans, blocks_for, direct, launch_now, same_dtype,
                                    same_shape)
from cupric.kernels._plans import attempt
from cupric.kernels.templates import elementwise

__all__ = ["vecadd", "saxpy", "memcpy", "fill", "map", "vecadd_kernel", "saxpy_kernel",
           "saxpy_update_kernel", "copy_kernel", "fill_kernel", "vecadd_scalar_kernel",
           "saxpy_scalar_kernel",
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


@cupric.device_function
def _add(a, b):
    return a + b


@cupric.device_function
def _axpy(a, x, y):
    return a * x + y


@cupric.device_function
def _same(value):
    return value


# Four neighbouring elements per thread and group: with 16-byte aligned arrays (the launch
# checks) they become one 128-bit load or store. vecadd, saxpy and copy take two groups a
# grid apart per trip, so four 128-bit loads are in flight per thread before the stores.
vecadd_kernel = elementwise(_add, "a, b, out", width=UNROLL, groups=2, name="vecadd_kernel",
                            doc="out[i] = a[i] + b[i] over 1-D arrays of one dtype.")
saxpy_kernel = elementwise(
    _axpy, "a, x, y, out", arrays="x, y", width=UNROLL, groups=2, name="saxpy_kernel",
    doc="out[i] = a * x[i] + y[i] over 1-D arrays of one dtype (`a` of that dtype).")
# saxpy with out=y: y is read and written by one parameter, so the launch sees no two
# arrays overlapping (which would take the general launch path on every call).
saxpy_update_kernel = elementwise(
    _axpy, "a, x, y", arrays="x, y", out="y", width=UNROLL, groups=2,
    name="saxpy_update_kernel", doc="y[i] = a * x[i] + y[i] in place over 1-D arrays.")
copy_kernel = elementwise(_same, "src, out", width=UNROLL, groups=2, name="copy_kernel",
                          doc="out[i] = src[i] over 1-D arrays of one dtype.")
fill_kernel = elementwise(_same, "out, value", arrays=(), out="out", width=UNROLL,
                          name="fill_kernel",
                          doc="out[i] = value over a 1-D array (`value` of its dtype).")

# float16 arrays take one element per trip: libNVVM 13.0 (CUDA 13.0 drivers) fails on
# four neighbouring float16 accesses from 16-byte aligned pointers ("Do not know how to
# split the result of this operator!"), which the kernels above would give it.
vecadd_scalar_kernel = elementwise(
    _add, "a, b, out", width=1, name="vecadd_scalar_kernel",
    doc="out[i] = a[i] + b[i], one element per thread and trip (float16 arrays).")
saxpy_scalar_kernel = elementwise(
    _axpy, "a, x, y, out", arrays="x, y", width=1, name="saxpy_scalar_kernel",
    doc="out[i] = a * x[i] + y[i], one element per thread and trip (float16 arrays).")


#: Items one block of vecadd and saxpy covers (`quad_geometry`'s covering grid).
_QUAD = STREAM_BLOCK * UNROLL
#: Plans of the arrays vecadd and saxpy hand their kernels as they are (`_common.direct`).
_VECADD_PLANS = Plans(NUMERIC)
_SAXPY_PLANS = Plans(NUMERIC)


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


def _quad(dtype: np.dtype, n: int) -> tuple:
    """`quad_geometry(call, out, STREAM_BLOCK)` for `n` > 0 items of `dtype` on the GPU,
    without a `Call` (vecadd's and saxpy's plans)."""
    if dtype.itemsize >= 4:
        return min(-(-n // _QUAD), MAX_GRID_X), STREAM_BLOCK
    return blocks_for(n, BLOCK, UNROLL, simulator=False), BLOCK


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
    if value.__class__ is dtype.type:  # a scalar of that type already: in range
        return value
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
    launch plus the checks (benchmarks/host_cost.py); with `out` given and the arrays of
    one kind and dtype (DeviceBuffers, or on a one-GPU machine PyTorch tensors or CuPy
    arrays), the checks are a cached plan's few attribute reads (`_common.direct`) and
    the arrays go to the kernel's launcher as they are. Other CuPy, PyTorch and
    numba-cuda arrays are read through their own attributes. Integer sums wrap.

    Examples
    --------
    >>> from cupric.runtime import to_device
    >>> a = to_device(np.arange(5, dtype=np.float32))           # doctest: +SKIP
    >>> vecadd(a, a).to_numpy()                                 # doctest: +SKIP
    array([0., 2., 4., 6., 8.], dtype=float32)
    """
    if out is not None:
        arrays = (a, b, out)
        plan = direct(_VECADD_PLANS, arrays, stream, out)
        if plan is not None:  # the arrays as they are (see `direct`)
            dtype, n, checked = plan
            kern = vecadd_kernel
            if dtype.itemsize >= 4:  # `_quad`'s covering grid, inline
                blocks, threads = min(-(-n // _QUAD), MAX_GRID_X), STREAM_BLOCK
            elif dtype.char == "e":  # float16
                kern = vecadd_scalar_kernel
                blocks, threads = blocks_for(n, BLOCK, simulator=False), BLOCK
            else:
                blocks, threads = _quad(dtype, n)
            if checked:
                launch_now(kern, blocks, threads, stream, 0, arrays)
                return out
            if attempt(kern, blocks, threads, stream, 0, arrays, n):
                return out
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
    out, or a new array of x's shape and dtype, holding ``a * x + y``.

    Raises
    ------
    TypeError, ValueError
        As `vecadd`.

    Cost
    ----
    One launch, 3 arrays moved: bandwidth-bound. Floats use a fused multiply-add, so
    results may differ from NumPy's two roundings in the last bit. Host cost as
    `vecadd`'s (with `out` given, a cached plan's checks).

    Examples
    --------
    >>> saxpy(2.0, x, y, out=y)          # y = 2x + y in place       # doctest: +SKIP
    """
    if out is not None:
        update = out is y
        plan = direct(_SAXPY_PLANS, (x, y) if update else (x, y, out), stream, out)
        if plan is not None:  # the arrays as they are (see `direct`)
            dtype, n, checked = plan
            # `_scalar`'s first case inline: a scalar of the arrays' type already
            alpha = a if a.__class__ is dtype.type else _scalar("saxpy", a, dtype, "a")
            kern, args = saxpy_kernel, (alpha, x, y, out)
            if dtype.char == "e":  # float16 (out may be y)
                kern = saxpy_scalar_kernel
                blocks, threads = blocks_for(n, BLOCK, simulator=False), BLOCK
            else:
                if dtype.itemsize >= 4:  # `_quad`'s covering grid, inline
                    blocks, threads = min(-(-n // _QUAD), MAX_GRID_X), STREAM_BLOCK
                else:
                    blocks, threads = _quad(dtype, n)
                if update:
                    kern, args = saxpy_update_kernel, (alpha, x, y)
            if checked:
                launch_now(kern, blocks, threads, stream, 0, args)
                return out
            if attempt(kern, blocks, threads, stream, 0, args, n):
                return out
    call = Call("saxpy", stream)
    update = out is not None and out is y
    x = call.array(x, "x", dtypes=NUMERIC)
    y = call.array(y, "y", dtypes=NUMERIC, writable=update)
    shape, dtype = _common_layout("saxpy", "x", x, "y", y)
    alpha = _scalar("saxpy", a, dtype, "a")
    if update and dtype.char != "e":  # y = a * x + y in place
        fx, fy = call.flat(x, "x"), call.flat(y, "y")
        blocks, threads = quad_geometry(call, fy, STREAM_BLOCK)
        call.launch(saxpy_update_kernel, blocks, threads, alpha, fx, fy)
        return out
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
    out, or a new array of src's shape and dtype, holding a copy of src.

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

#: The parameters of `map`'s kernels: the arrays in order, then the output.
_MAP_PARAMS = ("x", "y", "z")
_MAP_KERNELS = MadeOnce(lambda key: elementwise(key[0], _MAP_PARAMS[:key[1]] + ("out",),
                                                width=1, name=f"map{key[1]}_kernel"))


def map_kernel(fn, nargs: int):
    """The kernel applying device function `fn` to `nargs` arrays (made once per pair)."""
    return _MAP_KERNELS[fn, nargs]


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
    out, or a new array of the inputs' shape (of `dtype`), holding ``fn`` of each
    position's items.

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
    if not isinstance(fn, cupric.compiler.DeviceFunction):
        raise TypeError("map: fn must be a @cupric.device_function, got "
                        f"{type(fn).__name__}")
    if not 1 <= len(arrays) <= 3:
        raise TypeError(f"map takes 1 to 3 arrays, got {len(arrays)}")
    call = Call("map", stream)
    names = list(_MAP_PARAMS[:len(arrays)])
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
