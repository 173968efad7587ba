"""Warp operations in the simulator: shuffles, votes, match and reductions over lock-step
warps, including partial warps and masks naming part of a warp."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import FULL_MASK, laneid, threadIdx, warp, warpsize
from cupric.simulator import BarrierError

pytestmark = pytest.mark.usefixtures("engine")


def shuffles(x, out, arg, width):
    t = threadIdx.x
    v = x[t]
    out[0, t] = warp.shfl_idx(FULL_MASK, v, arg, width)
    out[1, t] = warp.shfl_up(FULL_MASK, v, arg, width)
    out[2, t] = warp.shfl_down(FULL_MASK, v, arg, width)
    out[3, t] = warp.shfl_xor(FULL_MASK, v, arg, width)


def shuffle_model(x, arg, width):
    out = np.empty((4, x.size), x.dtype)
    for t in range(x.size):
        lane, base = t % 32, t - t % 32
        seg = base + lane - lane % width
        out[0, t] = x[seg + arg % width]
        out[1, t] = x[t - arg] if lane - arg >= lane - lane % width else x[t]
        out[2, t] = x[t + arg] if lane % width + arg < width else x[t]
        src = lane ^ arg
        out[3, t] = x[base + src] if src < lane - lane % width + width else x[t]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float64, np.uint32])
@pytest.mark.parametrize("arg, width", [(1, 32), (5, 32), (3, 8), (16, 32), (1, 4)])
def test_shuffles_against_a_model(rng, dtype, arg, width):
    x = (rng.standard_normal(64) * 1000).astype(dtype)
    out = np.zeros((4, 64), dtype)
    sim.launch(shuffles, 1, 64, (x, out, arg, width))
    np.testing.assert_array_equal(out, shuffle_model(x, arg, width))


def warp_sum(x, out):
    t = threadIdx.x
    v = x[t]
    offset = 16
    while offset > 0:
        v += warp.shfl_down(FULL_MASK, v, offset)
        offset //= 2
    if laneid() == 0:
        out[t // warpsize()] = v


def test_shuffle_reduction(rng):
    x = rng.integers(-100, 100, 128).astype(np.int64)
    out = np.full(4, -1, np.int64)
    sim.launch(warp_sum, 1, 128, (x, out))
    np.testing.assert_array_equal(out, x.reshape(4, 32).sum(1))


def votes(pred, out):
    t = threadIdx.x
    p = pred[t] != 0
    out[0, t] = warp.ballot(FULL_MASK, p)
    out[1, t] = warp.any(FULL_MASK, p)
    out[2, t] = warp.all(FULL_MASK, p)
    out[3, t] = warp.activemask()


def test_votes_in_full_and_partial_warps(rng):
    n = 40  # the second warp has 8 lanes: the others do not exist
    pred = (rng.random(n) < 0.5).astype(np.int8)
    pred[32:] = 1
    out = np.full((4, n), -1, np.int64)
    sim.launch(votes, 1, n, (pred, out))
    ballot0 = sum(1 << i for i in range(32) if pred[i])
    assert (out[0, :32] == ballot0).all() and (out[0, 32:] == 0xFF).all()
    assert (out[1, :32] == int(pred[:32].any())).all()
    assert (out[2, :32] == int(pred[:32].all())).all() and (out[2, 32:] == 1).all()
    assert (out[3, :32] == 0xFFFFFFFF).all() and (out[3, 32:] == 0xFF).all()


def matches(x, out, flags):
    t = threadIdx.x
    out[0, t] = warp.match_any(FULL_MASK, x[t])
    mask, same = warp.match_all(FULL_MASK, x[t] // 100)
    out[1, t] = mask
    flags[t] = same


def test_match_any_and_all(rng):
    x = rng.integers(0, 4, 32).astype(np.int32)
    out = np.full((2, 32), -1, np.int64)
    flags = np.full(32, 2, np.int8)
    sim.launch(matches, 1, 32, (x, out, flags))
    for t in range(32):
        assert out[0, t] == sum(1 << i for i in range(32) if x[i] == x[t])
    assert (out[1] == 0xFFFFFFFF).all() and (flags == 1).all()


def reductions(x, out):
    t = threadIdx.x
    v = x[t]
    out[0, t] = warp.reduce_add(FULL_MASK, v)
    out[1, t] = warp.reduce_min(FULL_MASK, v)
    out[2, t] = warp.reduce_max(FULL_MASK, v)
    out[3, t] = warp.reduce_and(FULL_MASK, v)
    out[4, t] = warp.reduce_or(FULL_MASK, v)
    out[5, t] = warp.reduce_xor(FULL_MASK, v)


def test_reductions_wrap_like_redux(rng):
    x = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    out = np.zeros((6, 32), np.uint32)
    sim.launch(reductions, 1, 32, (x, out))
    expect = [x.sum(dtype=np.uint32), x.min(), x.max(), np.bitwise_and.reduce(x),
              np.bitwise_or.reduce(x), np.bitwise_xor.reduce(x)]
    for row, e in zip(out, expect):
        assert (row == e).all()


def half_warps(x, out):
    t = threadIdx.x
    mask = 0x0000FFFF if t % 32 < 16 else 0xFFFF0000
    out[t] = warp.shfl_xor(mask, x[t], 1)


def test_masks_naming_half_a_warp(rng):
    x = rng.standard_normal(64)
    out = np.full(64, np.nan)
    sim.launch(half_warps, 1, 64, (x, out))
    np.testing.assert_array_equal(out, x.reshape(-1, 2)[:, ::-1].ravel())


def lane_outside_mask(out):
    out[threadIdx.x] = warp.ballot(0x1, True)


def mismatched_ops(out):
    if threadIdx.x < 8:
        out[threadIdx.x] = warp.ballot(FULL_MASK, True)
    else:
        out[threadIdx.x] = warp.any(FULL_MASK, True)


def lane_exits(out):
    if threadIdx.x == 5:
        return
    out[threadIdx.x] = warp.ballot(FULL_MASK, True)


@pytest.mark.parametrize("kernel, words", [
    (lane_outside_mask, "not in mask"),
    (mismatched_ops, "different warp operations"),
    (lane_exits, "lane 5"),
])
def test_misused_collectives_are_reported(kernel, words):
    with pytest.raises(BarrierError, match=words):
        sim.launch(kernel, 1, 32, (np.zeros(32, np.int64),))


def single_thread(out):
    out[0] = warp.shfl_down(FULL_MASK, 7, 1)
    out[1] = warp.ballot(FULL_MASK, True)


def test_a_one_thread_block_runs_collectives_serially():
    out = np.zeros(2, np.int64)
    sim.launch(single_thread, 1, 1, (out,))
    np.testing.assert_array_equal(out, [7, 1])


def divergent_activemask(out):
    t = threadIdx.x
    if t % 3 == 0:
        out[t] = warp.activemask()
    else:
        out[t] = warp.activemask()


def test_activemask_names_the_lanes_on_the_same_path():
    n = 40
    out = np.zeros(n, np.int64)
    sim.launch(divergent_activemask, 1, n, (out,))
    for t in range(n):
        base = t - t % 32
        same = [u for u in range(base, min(base + 32, n)) if (u % 3 == 0) == (t % 3 == 0)]
        assert out[t] == sum(1 << (u - base) for u in same), t
