"""Block barriers in the simulator: shared-memory reductions that need them, the counting
forms, and misuse (divergent barriers, early exits, deadlocks) reported instead of hung."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import (FULL_MASK, blockDim, blockIdx, shared, syncthreads,
                           syncthreads_and, syncthreads_count, syncthreads_or, syncwarp,
                           threadIdx, warp)
from cupric.simulator import BarrierError, DeadlockError
from cupric.types import f64, i32

pytestmark = pytest.mark.usefixtures("engine")


def block_sum(x, out):
    tile = shared.array(1024, f64)
    t = threadIdx.x
    i = blockIdx.x * blockDim.x + t
    tile[t] = x[i] if i < x.size else 0.0
    syncthreads()
    step = blockDim.x // 2
    while step > 0:
        if t < step:
            tile[t] += tile[t + step]
        syncthreads()
        step //= 2
    if t == 0:
        out[blockIdx.x] = tile[0]


@pytest.mark.parametrize("block", [64, 256])
def test_shared_memory_block_reduction(rng, block):
    blocks = 3
    x = rng.standard_normal(blocks * block - 5)
    out = np.full(blocks, np.nan)
    sim.launch(block_sum, blocks, block, (x, out))
    expect = np.add.reduceat(np.concatenate([x, np.zeros(5)]), np.arange(0, blocks * block, block))
    np.testing.assert_allclose(out, expect, rtol=1e-12)


def reverse_1024(x, out):
    tile = shared.array(1024, i32)
    t = threadIdx.x
    tile[t] = x[t]
    syncthreads()
    out[t] = tile[1023 - t]


def test_a_block_of_1024_threads_with_syncthreads(rng):
    x = rng.integers(-1000, 1000, 1024).astype(np.int32)
    out = np.full(1024, -7, np.int32)
    sim.launch(reverse_1024, 1, 1024, (x, out))
    np.testing.assert_array_equal(out, x[::-1])


def counting_barriers(pred, out):
    t = threadIdx.x
    p = pred[blockIdx.x, t] != 0
    out[blockIdx.x, t, 0] = syncthreads_count(p)
    out[blockIdx.x, t, 1] = syncthreads_and(p)
    out[blockIdx.x, t, 2] = syncthreads_or(p)


def test_syncthreads_count_and_or(rng):
    pred = (rng.random((4, 48)) < [[0.5], [1.0], [0.0], [0.05]]).astype(np.int8)
    out = np.full((4, 48, 3), -1, np.int64)
    sim.launch(counting_barriers, 4, 48, (pred, out))
    for b in range(4):
        assert (out[b, :, 0] == pred[b].sum()).all()
        assert (out[b, :, 1] == int(pred[b].all())).all()
        assert (out[b, :, 2] == int(pred[b].any())).all()


def exits_early(out):
    if threadIdx.x == 3:
        return
    syncthreads()
    out[threadIdx.x] = 1


def divergent(out):
    if threadIdx.x % 2:
        syncthreads()
    else:
        syncthreads()


def half_the_block_waits(out):
    if threadIdx.x < 16:
        syncthreads()
    out[threadIdx.x] = 1


def warp_op_versus_barrier(out):
    if threadIdx.x < 16:
        out[threadIdx.x] = warp.shfl_down(FULL_MASK, 1.0, 1)
    else:
        syncthreads()


@pytest.mark.parametrize("kernel, error, words", [
    (exits_early, BarrierError, "exited"),
    (half_the_block_waits, BarrierError, "exited while 16 thread"),
    (divergent, BarrierError, "divergent"),
])
def test_a_barrier_not_reached_by_every_thread_is_reported(kernel, error, words):
    with pytest.raises(error, match=words) as info:
        sim.launch(kernel, 2, 64, (np.zeros(64),))
    assert info.value.filename == __file__
    assert info.value.block == (0, 0, 0)


def test_deadlock_is_reported_not_hung():
    with pytest.raises(DeadlockError, match="deadlock.*warp.shfl_down.*syncthreads"):
        sim.launch(warp_op_versus_barrier, 1, 32, (np.zeros(32),))


def warp_sync(x, out):
    t = threadIdx.x
    tile = shared.array(64, f64)
    tile[t] = x[t]
    syncwarp(FULL_MASK)
    out[t] = tile[t ^ 1]


def test_syncwarp_orders_a_warp(rng):
    x = rng.standard_normal(64)
    out = np.full(64, np.nan)
    sim.launch(warp_sync, 1, 64, (x, out))
    np.testing.assert_array_equal(out, x.reshape(-1, 2)[:, ::-1].ravel())


def test_serial_mode_refuses_a_barrier_it_cannot_honour():
    with pytest.raises(sim.SimulatorError, match="mode='threads'"):
        sim.launch(reverse_1024, 1, 1024, (np.zeros(1024, np.int32), np.zeros(1024, np.int32)),
                   mode="serial")
