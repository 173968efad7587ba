"""Cooperative launches in the simulator: grid_sync across every block of a small grid."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import blockIdx, grid, grid_sync, gridsize, threadIdx

pytestmark = pytest.mark.usefixtures("engine")


def two_phase(x, partial, out):
    i = grid(1)
    n = gridsize(1)
    partial[i] = x[i] * 2
    grid_sync()
    # After the grid barrier every block sees every other block's writes.
    out[i] = partial[(i + 37) % n] + partial[n - 1 - i]


def test_grid_sync_orders_all_blocks(rng):
    n = 4 * 64
    x = rng.standard_normal(n)
    partial = np.full(n, np.nan)
    out = np.full(n, np.nan)
    sim.launch(two_phase, 4, 64, (x, partial, out))
    idx = np.arange(n)
    np.testing.assert_array_equal(out, 2 * x[(idx + 37) % n] + 2 * x[n - 1 - idx])


def early_exit_before_grid_sync(out):
    if blockIdx.x == 1 and threadIdx.x == 0:
        return
    grid_sync()


def test_a_thread_missing_the_grid_barrier_is_reported():
    with pytest.raises(sim.BarrierError, match="grid_sync"):
        sim.launch(early_exit_before_grid_sync, 3, 8, (np.zeros(1),))


def test_a_grid_too_large_to_be_live_is_refused(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR_MAX_THREADS", "100")
    with pytest.raises(sim.SimulatorError, match="smaller grid"):
        sim.launch(two_phase, 4, 64, (np.zeros(256), np.zeros(256), np.zeros(256)))
