"""Grid geometry in the simulator: every thread of 1-, 2- and 3-D launches runs once and
sees its own coordinates."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import blockDim, blockIdx, grid, grid_stride, gridDim, gridsize, threadIdx


def record_1d(out, info):
    i = grid(1)
    if i < out.size:
        out[i] = i
        info[i, 0] = gridsize(1)
        info[i, 1] = blockDim.x
        info[i, 2] = gridDim.x


@pytest.mark.parametrize("grid_, block", [(1, 1), (3, 32), (5, 7), ((4,), (64,))])
def test_1d_every_thread_once(grid_, block):
    g = grid_[0] if isinstance(grid_, tuple) else grid_
    b = block[0] if isinstance(block, tuple) else block
    n = g * b - 3 if g * b > 3 else g * b
    out = np.full(n, -1, np.int64)
    info = np.full((n, 3), -1, np.int64)
    sim.launch(record_1d, grid_, block, (out, info))
    np.testing.assert_array_equal(out, np.arange(n))
    np.testing.assert_array_equal(info, np.tile([g * b, b, g], (n, 1)))


def record_3d(out):
    x, y, z = grid(3)
    out[z, y, x, 0] = threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z
    out[z, y, x, 1] = blockIdx.x + 100 * blockIdx.y + 10000 * blockIdx.z
    sx, sy, sz = gridsize(3)
    out[z, y, x, 2] = sx * sy * sz


def test_3d_coordinates():
    g, b = (2, 3, 2), (4, 2, 3)
    shape = (g[2] * b[2], g[1] * b[1], g[0] * b[0])
    out = np.full(shape + (3,), -1, np.int64)
    sim.launch(record_3d, g, b, (out,))
    z, y, x = np.indices(shape)
    np.testing.assert_array_equal(out[..., 0], x % b[0] + 100 * (y % b[1]) + 10000 * (z % b[2]))
    np.testing.assert_array_equal(out[..., 1], x // b[0] + 100 * (y // b[1])
                                  + 10000 * (z // b[2]))
    assert (out[..., 2] == np.prod(shape)).all()


def transpose_2d(a, out):
    x, y = grid(2)
    if y < a.shape[0] and x < a.shape[1]:
        out[x, y] = a[y, x]


def test_2d_transpose(rng):
    a = rng.standard_normal((37, 53)).astype(np.float32)
    out = np.full((53, 37), np.nan, np.float32)
    sim.launch(transpose_2d, (4, 3), (16, 16), (a, out))
    np.testing.assert_array_equal(out, a.T)


def stride_fill(out, value):
    for i in grid_stride(out.size):
        out[i] = value + i


def test_grid_stride_covers_more_than_the_grid(rng):
    n = int(rng.integers(500, 2000))
    out = np.full(n, -1, np.int64)
    sim.launch(stride_fill, 3, 32, (out, 7))
    np.testing.assert_array_equal(out, 7 + np.arange(n))


def test_launch_configuration_is_validated():
    out = np.zeros(1)
    with pytest.raises(ValueError, match="at most 1024"):
        sim.launch(stride_fill, 1, (32, 33), (out, 0))
    with pytest.raises(ValueError, match="block.z"):
        sim.launch(stride_fill, 1, (1, 1, 65), (out, 0))
    with pytest.raises(ValueError, match="grid.x"):
        sim.launch(stride_fill, 0, 1, (out, 0))
    with pytest.raises(TypeError, match="stride_fill"):
        sim.launch(stride_fill, 1, 1, (out,))


def index_types(out):
    out[0] = type(threadIdx.x) is np.int32 and type(blockDim.y) is np.int32
    out[1] = type(grid(1)) is np.int64 and type(gridsize(2)[1]) is np.int64
    out[2] = all(type(i) is np.int64 for i in grid_stride(3))


def test_indices_are_typed_like_compiled_code():
    out = np.zeros(3, np.int8)
    sim.launch(index_types, 1, 1, (out,))
    assert out.all()
