"""Atomics in the simulator: histograms, returned old values, CAS loops, every operation
against a sequential model, and the argument checks the GPU would impose."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import atomic, grid, shared, syncthreads, threadIdx
from cupric.types import scalar_from_dtype, u32


def histogram(data, bins, nbins):
    i = grid(1)
    if i < data.size:
        atomic.add(bins, data[i] % nbins, 1)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_histogram(rng, dtype):
    data = rng.integers(0, 1000, 5000)
    bins = np.zeros(17, dtype)
    sim.launch(histogram, 40, 128, (data, bins, 17))
    np.testing.assert_array_equal(bins, np.bincount(data % 17, minlength=17))


def shared_histogram(data, bins):
    local_bins = shared.array(8, u32)
    t = threadIdx.x
    if t < 8:
        local_bins[t] = 0
    syncthreads()
    i = grid(1)
    if i < data.size:
        atomic.add(local_bins, data[i] & 7, 1, scope="block")
    syncthreads()
    if t < 8:
        atomic.add(bins, t, local_bins[t])


def test_shared_memory_histogram(rng):
    data = rng.integers(0, 2**16, 3000)
    bins = np.zeros(8, np.uint32)
    sim.launch(shared_histogram, 12, 256, (data, bins))
    np.testing.assert_array_equal(bins, np.bincount(data & 7, minlength=8))


def ticket(counter, tickets):
    i = grid(1)
    if i < tickets.size:
        tickets[i] = atomic.add(counter, 0, 1)


def test_add_returns_the_old_value():
    tickets = np.full(1000, -1, np.int64)
    counter = np.zeros(1, np.int64)
    sim.launch(ticket, 8, 128, (counter, tickets))
    assert counter[0] == 1000
    np.testing.assert_array_equal(np.sort(tickets), np.arange(1000))


def cas_add(x, total):
    i = grid(1)
    if i < x.size:
        old = total[0]
        while True:
            seen = atomic.cas(total, 0, old, old + x[i])
            if seen == old:
                break
            old = seen


def test_cas_loop_float_add(rng):
    x = rng.integers(-50, 50, 300).astype(np.float64)  # exact sums, any order
    total = np.zeros(1)
    sim.launch(cas_add, 3, 128, (x, total))
    assert total[0] == x.sum()


def apply_ops(arr, vals, old):
    i = grid(1)
    if i < vals.size:
        v = vals[i]
        old[i, 0] = atomic.sub(arr, 0, v)
        old[i, 1] = atomic.min(arr, 1, v)
        old[i, 2] = atomic.max(arr, 2, v, scope="system", order="acq_rel")
        old[i, 3] = atomic.and_(arr, 3, v)
        old[i, 4] = atomic.or_(arr, 4, v)
        old[i, 5] = atomic.xor(arr, 5, v)
        old[i, 6] = atomic.inc(arr, 6, 5)
        old[i, 7] = atomic.dec(arr, 7, 5)
        old[i, 8] = atomic.exch(arr, 8, v)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_integer_operations_against_a_sequential_model(rng, dtype):
    vals = rng.integers(0, 2**31 - 1, 96).astype(dtype)
    start = rng.integers(0, 2**31 - 1, 9).astype(dtype)
    start[6] = 0
    start[7] = 2
    arr = start.copy()
    old = np.zeros((96, 9), dtype)
    # Serial mode runs threads in index order, so the model can replay that order.
    sim.launch(apply_ops, 1, 96, (arr, vals, old))
    model = [int(v) for v in start]
    wrap = scalar_from_dtype(dtype)
    for i, v in enumerate(int(v) for v in vals):
        expect = list(model)
        model[0] = int(wrap(model[0] - v))
        model[1] = min(model[1], v)
        model[2] = max(model[2], v)
        model[3] &= v
        model[4] |= v
        model[5] ^= v
        model[6] = 0 if model[6] >= 5 else model[6] + 1
        model[7] = 5 if model[7] == 0 or model[7] > 5 else model[7] - 1
        model[8] = v
        np.testing.assert_array_equal(old[i], np.array(expect, dtype))
    np.testing.assert_array_equal(arr, np.array(model, dtype))


def float_ops(arr, vals):
    i = grid(1)
    if i < vals.size:
        atomic.add(arr, 0, vals[i])
        atomic.min(arr, 1, vals[i])
        atomic.max(arr, 2, vals[i])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_add_min_max(rng, dtype):
    vals = rng.integers(-1000, 1000, 200).astype(dtype)
    arr = np.array([0, np.inf, -np.inf], dtype)
    sim.launch(float_ops, 2, 128, (arr, vals))
    np.testing.assert_array_equal(arr, np.array([vals.sum(), vals.min(), vals.max()], dtype))


def packed_adds(h, b):
    i = grid(1)
    if i < 64:
        atomic.add_f16x2(h, 2, 0.5, 1.5)
        atomic.add_bf16x2(b, 0, 1.0, 2.0)


def test_packed_half_adds():
    h = np.zeros(4, np.float16)
    b = np.zeros(2, np.uint16)
    sim.launch(packed_adds, 1, 64, (h, b))
    np.testing.assert_array_equal(h, np.array([0, 0, 32, 96], np.float16))
    as_f32 = (b.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(as_f32, [64, 128])


def bad_call(arr, which):
    if which == 0:
        atomic.and_(arr, 0, 1)
    elif which == 1:
        atomic.add(arr, 0, 1, scope="cluster")
    elif which == 2:
        atomic.add(arr, 0, 1, order="consume")
    elif which == 3:
        atomic.add(arr, -1, 1)
    elif which == 4:
        atomic.add(arr, 5, 1)


def test_operations_the_gpu_lacks_are_refused():
    with pytest.raises(TypeError, match="int8"):
        sim.launch(bad_call, 1, 1, (np.zeros(4, np.int8), 1))
    with pytest.raises(TypeError, match="float32"):
        sim.launch(bad_call, 1, 1, (np.zeros(4, np.float32), 0))
    with pytest.raises(ValueError, match="scope"):
        sim.launch(bad_call, 1, 1, (np.zeros(4, np.int32), 1))
    with pytest.raises(ValueError, match="order"):
        sim.launch(bad_call, 1, 1, (np.zeros(4, np.int32), 2))
    for which, index in ((3, "-1"), (4, "5")):
        with pytest.raises(sim.KernelIndexError, match=f"index {index} "):
            sim.launch(bad_call, 1, 1, (np.zeros(4, np.int32), which))


def spin_lock(lock, counter):
    # A block-wide spin lock: only works because a failing CAS lets other threads run.
    while atomic.cas(lock, 0, 0, 1) != 0:
        pass
    counter[0] = counter[0] + 1
    atomic.exch(lock, 0, 0)
    syncthreads()


def test_spin_lock_in_threaded_mode():
    lock = np.zeros(1, np.int32)
    counter = np.zeros(1, np.int64)
    sim.launch(spin_lock, 2, 64, (lock, counter))
    assert counter[0] == 128
