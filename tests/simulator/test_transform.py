"""The generator rewrite behind the fast threaded engine: what it rewrites, what it keeps
(file, lines, defaults, closures, declaration sites) and when it declines."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import FULL_MASK, atomic, shared, syncthreads, threadIdx, warp
from cupric.simulator._transform import transform
from cupric.types import f64


def tile_sum(tile, t, n):
    # a device function with a barrier and a shared array of its own
    scratch = shared.array(64, f64)
    scratch[t] = tile[t] * n
    syncthreads()
    return scratch[63 - t]


def kernel_with_helper(x, out, scale=3.0):
    tile = shared.array(64, f64)
    t = threadIdx.x
    tile[t] = x[t]
    syncthreads()
    if t >= 60:
        out[t] = -1.0
    out[t] = tile_sum(tile, t, scale)


def test_device_functions_defaults_and_early_paths(rng):
    assert transform(kernel_with_helper) is not None
    x = rng.standard_normal(64)
    out = np.full(64, np.nan)
    sim.launch(kernel_with_helper, 1, 64, (x, out))
    np.testing.assert_array_equal(out, 3.0 * x[::-1])


def failing_after_barrier(x):
    syncthreads()
    assert x[threadIdx.x] == 0, "nonzero"


def test_failures_keep_the_original_file_and_line(engine):
    x = np.zeros(32)
    x[9] = 1
    with pytest.raises(sim.KernelAssertionError) as info:
        sim.launch(failing_after_barrier, 1, 32, (x,))
    assert info.value.filename == __file__
    assert info.value.line == failing_after_barrier.__code__.co_firstlineno + 2
    assert info.value.thread == (9, 0, 0)


def make_closure_kernel(offset):
    def kernel(out):
        v = warp.shfl_xor(FULL_MASK, threadIdx.x + offset, 1)
        out[threadIdx.x] = v
    return kernel


def test_closures_are_kept():
    kernel = make_closure_kernel(100)
    assert transform(kernel) is not None
    out = np.zeros(32, np.int64)
    sim.launch(kernel, 1, 32, (out,))
    np.testing.assert_array_equal(out, (np.arange(32) ^ 1) + 100)


def aliases_a_collective(out):
    shuffle = warp.shfl_down
    out[threadIdx.x] = shuffle(FULL_MASK, 1, 1)


def collective_in_comprehension(out):
    out[threadIdx.x] = sum([warp.shfl_down(FULL_MASK, k, 1) for k in range(2)])


def test_unsafe_kernels_fall_back_to_os_threads():
    assert transform(aliases_a_collective) is None
    assert transform(collective_in_comprehension) is None
    for kernel in (aliases_a_collective, collective_in_comprehension):
        out = np.zeros(32, np.int64)
        sim.launch(kernel, 1, 32, (out,))
        assert out[0] >= 1


def counts_in_turn(counter, order):
    # Thread t waits (spinning on an atomic) until every lower thread has taken a ticket.
    t = threadIdx.x
    while atomic.load(counter, 0) != t:
        pass
    order[t] = atomic.add(counter, 0, 1)
    syncthreads()


def test_spin_waits_on_other_threads_make_progress(engine):
    counter = np.zeros(1, np.int64)
    order = np.full(64, -1, np.int64)
    sim.launch(counts_in_turn, 1, 64, (counter, order))
    np.testing.assert_array_equal(order, np.arange(64))


def test_engine_choice_is_validated(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR_ENGINE", "fibers")
    with pytest.raises(ValueError, match="CUPRIC_SIMULATOR_ENGINE"):
        sim.launch(failing_after_barrier, 1, 2, (np.zeros(2),))
    monkeypatch.setenv("CUPRIC_SIMULATOR_ENGINE", "generators")
    with pytest.raises(sim.SimulatorError, match="cannot be rewritten"):
        sim.launch(aliases_a_collective, 1, 32, (np.zeros(32, np.int64),))


square = lambda v: v * v  # noqa: E731  (a helper with no def: nothing to rewrite)


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def uses_plain_helpers(out):
    t = threadIdx.x
    syncthreads()
    out[t] = square(t) + fact(t % 5)


def test_helpers_that_reach_no_collective_need_no_rewrite():
    assert transform(uses_plain_helpers) is not None
    out = np.zeros(32, np.int64)
    sim.launch(uses_plain_helpers, 1, 32, (out,))
    t = np.arange(32)
    np.testing.assert_array_equal(out, t * t + np.array([1, 1, 2, 6, 24])[t % 5])
