"""How fast the simulator runs: a 64k-thread elementwise launch must take seconds at
most (the CPU test lane and the README's fallback depend on it)."""

import time

import numpy as np

from cupric import simulator as sim
from cupric.device import grid


def saxpy(a, x, y, out):
    i = grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def test_64k_thread_elementwise_launch_takes_seconds_not_minutes(rng):
    n = 1 << 16
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    a = np.float32(rng.standard_normal())
    start = time.perf_counter()
    sim.launch(saxpy, n // 256, 256, (a, x, y, out))
    elapsed = time.perf_counter() - start
    print(f"simulator: {n} threads of saxpy in {elapsed:.3f} s "
          f"({n / elapsed / 1e3:.0f}k threads/s)")
    np.testing.assert_array_equal(out, a * x + y)
    assert elapsed < 10.0
