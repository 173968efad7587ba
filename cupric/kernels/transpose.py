"""Matrix transpose through shared-memory tiles: a block reads a square tile (32x32 by
default, or 64x64) with coalesced row loads, and writes it out transposed, again along
rows, reading the tile by columns from shared memory (padded by one column so those
reads hit 32 banks)."""

from __future__ import annotations

import numpy as np

import cupric
from cupric.device import blockIdx, shared, syncthreads, threadIdx
from cupric.kernels._common import (NUMERIC, Call, MadeOnce, Plans, direct_views, launch_now,
                                    order_cupy)
from cupric.types import f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64

__all__ = ["transpose", "transpose_kernel", "TILE_DIM", "BLOCK_ROWS"]

TILE_DIM = 32
#: Rows of threads per block: each thread moves TILE_DIM / BLOCK_ROWS elements.
BLOCK_ROWS = 8


def _make_transpose(elem, tile_dim, flat):
    """The transpose kernel for tiles of `tile_dim` x `tile_dim` (a multiple of 32),
    moved by 32 x BLOCK_ROWS threads, over 2-D arrays of any strides or (`flat`) over
    C-contiguous ones given as 1-D arrays (which the compiled launcher takes directly)."""

    if flat:
        @cupric.device_function
        def get(arr, r, c, width):
            return arr[i64(r) * width + c]

        @cupric.device_function
        def put(arr, r, c, width, value):
            arr[i64(r) * width + c] = value
    else:
        @cupric.device_function
        def get(arr, r, c, width):
            return arr[r, c]

        @cupric.device_function
        def put(arr, r, c, width, value):
            arr[r, c] = value

    @cupric.kernel
    def transpose_kernel(a, out, rows, cols):
        tile = shared.array((tile_dim, tile_dim + 1), elem)
        tx = threadIdx.x
        ty = threadIdx.y
        col0 = blockIdx.x * tile_dim + tx
        row0 = blockIdx.y * tile_dim + ty
        # Interior tiles (all but the last row and column of blocks) need no bounds test
        # per element: the test and its branch cost as much as the copy's own arithmetic.
        full = (blockIdx.x + 1) * tile_dim <= cols and (blockIdx.y + 1) * tile_dim <= rows
        if full:
            for c in range(0, tile_dim, 32):
                for k in range(0, tile_dim, BLOCK_ROWS):
                    tile[ty + k, tx + c] = get(a, row0 + k, col0 + c, cols)
        else:
            for c in range(0, tile_dim, 32):
                col = col0 + c
                for k in range(0, tile_dim, BLOCK_ROWS):
                    if col < cols and row0 + k < rows:
                        tile[ty + k, tx + c] = get(a, row0 + k, col, cols)
        syncthreads()
        # out has shape (cols, rows): block (x, y) fills its tile (y, x).
        out_col0 = blockIdx.y * tile_dim + tx
        out_row0 = blockIdx.x * tile_dim + ty
        if full:
            for c in range(0, tile_dim, 32):
                for k in range(0, tile_dim, BLOCK_ROWS):
                    put(out, out_row0 + k, out_col0 + c, rows, tile[tx + c, ty + k])
        else:
            for c in range(0, tile_dim, 32):
                out_col = out_col0 + c
                for k in range(0, tile_dim, BLOCK_ROWS):
                    if out_col < rows and out_row0 + k < cols:
                        put(out, out_row0 + k, out_col, rows, tile[tx + c, ty + k])

    return transpose_kernel


_TYPES = {np.dtype(k): v for k, v in (("i1", i8), ("i2", i16), ("i4", i32), ("i8", i64),
                                      ("u1", u8), ("u2", u16), ("u4", u32), ("u8", u64),
                                      ("f2", f16), ("f4", f32), ("f8", f64))}
_KERNELS = MadeOnce(lambda key: _make_transpose(_TYPES[key[0]], key[1], key[2]))
#: Plans of the C-contiguous arrays `transpose` flattens itself (`_common.direct_views`).
_PLANS = Plans(NUMERIC)


def transpose_kernel(dtype, tile_dim: int = TILE_DIM, flat: bool = False):
    """The tiled transpose kernel for elements of `dtype` and square tiles of
    `tile_dim` (32 or 64) (made once): ``kernel(a, out, rows, cols)`` over 2-D arrays of
    any strides, or with `flat` over C-contiguous ones passed as 1-D arrays."""
    return _KERNELS[np.dtype(dtype), int(tile_dim), bool(flat)]


def transpose(a, out=None, stream=None, *, tile_dim=TILE_DIM):
    """The transpose of a 2-D array, materialized: ``out[j, i] = a[i, j]``.

    Parameters
    ----------
    a : device array (NumPy array on the simulator), 2-D
        Any numeric dtype and any strides (views such as slices work; row-major input
        reads fastest).
    out : device array, optional
        Shape (a.shape[1], a.shape[0]), same dtype.
    stream : Stream or stream-like, optional
    tile_dim : {32, 64}
        Side of the square tile a block of 32 x 8 threads moves (4 or 16 elements per
        thread). 64 measured slower (40 registers and 16.6 KB of shared memory per
        block: fewer resident blocks; BENCHMARKS.md).

    Returns
    -------
    out, or a new C-contiguous array.

    Cost
    ----
    One launch of 32x8-thread blocks, one per tile; reads and writes each element
    once, both coalesced: bandwidth-bound (BENCHMARKS.md compares it with a
    device-to-device copy and the same kernel in CUDA C; interior tiles skip the
    per-element bounds test). With `out` given and C-contiguous arrays of one kind and
    dtype, the host checks are a cached plan's (`_common.direct_views`) and the launch
    takes two 1-D views of the arrays.

    Examples
    --------
    >>> transpose(to_device(np.ones((3, 5), np.float32))).shape     # doctest: +SKIP
    (5, 3)
    """
    if out is not None and tile_dim in (32, 64):
        plan = direct_views(_PLANS, (a, out), stream, out)
        if plan is not None:  # C-contiguous arrays of one class and dtype, checked
            dtype, (fa, fo), cupy = plan
            shape = a.shape
            if len(shape) == 2 and out.shape == (shape[1], shape[0]):
                rows, cols = int(shape[0]), int(shape[1])
                if cupy is not None:
                    order_cupy(cupy, stream)
                kern = _KERNELS.get((dtype, tile_dim, True))
                launch_now(kern if kern is not None else
                           transpose_kernel(dtype, tile_dim, True),
                           ((cols + tile_dim - 1) // tile_dim,
                            (rows + tile_dim - 1) // tile_dim), (32, BLOCK_ROWS), stream,
                           0, (fa, fo, np.int64(rows), np.int64(cols)))
                return out
    call = Call("transpose", stream)
    src = call.array(a, "a", dtypes=NUMERIC, ndim=2)
    rows, cols = int(src.shape[0]), int(src.shape[1])
    dst, result = call.output(out, "out", (cols, rows), src.dtype)
    if tile_dim not in (32, 64):
        raise ValueError(f"transpose: tile_dim must be 32 or 64, got {tile_dim}")
    if rows and cols:
        grid = ((cols + tile_dim - 1) // tile_dim, (rows + tile_dim - 1) // tile_dim)
        dims = (np.int64(rows), np.int64(cols))
        if call.simulator:
            contiguous = src.flags.c_contiguous and dst.flags.c_contiguous
        else:
            contiguous = src.is_c_contiguous and dst.is_c_contiguous
        if contiguous:
            # 1-D views: the launch takes the compiled launcher's path.
            call.launch(transpose_kernel(src.dtype, tile_dim, True), grid,
                        (32, BLOCK_ROWS), call.flat(src, "a"), call.flat(dst, "out"), *dims)
        else:
            call.launch(transpose_kernel(src.dtype, tile_dim), grid, (32, BLOCK_ROWS), src,
                        dst, *dims)
    return result
