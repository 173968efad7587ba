"""Whole kernels of the kind the examples run on the simulator in CI: a shared-memory
bitonic sort and a tiled matrix multiply, under both engines of the threaded mode."""

import time

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import blockDim, blockIdx, shared, syncthreads, threadIdx
from cupric.types import f32

pytestmark = pytest.mark.usefixtures("engine")


def bitonic_sort(keys):
    n = 512
    tile = shared.array(512, f32)
    t = threadIdx.x
    base = blockIdx.x * n
    tile[t] = keys[base + t]
    tile[t + 256] = keys[base + t + 256]
    syncthreads()
    size = 2
    while size <= n:
        stride = size // 2
        while stride > 0:
            # each thread compares one pair: i and its partner i + stride
            i = 2 * t - (t & (stride - 1))
            j = i + stride
            ascending = (i & size) == 0
            a, b = tile[i], tile[j]
            if (a > b) == ascending:
                tile[i], tile[j] = b, a
            syncthreads()
            stride //= 2
        size *= 2
    keys[base + t] = tile[t]
    keys[base + t + 256] = tile[t + 256]


def test_bitonic_sort(rng):
    keys = rng.standard_normal(2 * 512).astype(np.float32)
    expect = np.sort(keys.reshape(2, 512), axis=1).ravel()
    start = time.perf_counter()
    sim.launch(bitonic_sort, 2, 256, (keys,))
    print(f"bitonic sort, 2 x 512 keys, 45 barriers: {time.perf_counter() - start:.2f} s")
    np.testing.assert_array_equal(keys, expect)


TILE = 8


def matmul(a, b, c):
    sa = shared.array((TILE, TILE), f32)
    sb = shared.array((TILE, TILE), f32)
    tx, ty = threadIdx.x, threadIdx.y
    row = blockIdx.y * blockDim.y + ty
    col = blockIdx.x * blockDim.x + tx
    acc = f32(0)
    for k0 in range(0, a.shape[1], TILE):
        sa[ty, tx] = a[row, k0 + tx] if row < a.shape[0] and k0 + tx < a.shape[1] else f32(0)
        sb[ty, tx] = b[k0 + ty, col] if k0 + ty < b.shape[0] and col < b.shape[1] else f32(0)
        syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        syncthreads()
    if row < c.shape[0] and col < c.shape[1]:
        c[row, col] = acc


def test_tiled_matmul(rng):
    a = rng.standard_normal((19, 27)).astype(np.float32)
    b = rng.standard_normal((27, 13)).astype(np.float32)
    c = np.full((19, 13), np.nan, np.float32)
    sim.launch(matmul, (2, 3), (TILE, TILE), (a, b, c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
