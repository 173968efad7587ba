"""GPU lane: the compiled device half against the host half, on poisoned device memory.

Run with ``pytest -m gpu`` on a GPU machine; skipped (with the reason) elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from cupric.gpu_rand import ALGORITHMS, Generator, streams
from cupric.gpu_rand.backends import CudaBackend

pytestmark = pytest.mark.gpu


def poisoned(n, dtype):
    from cupric.runtime.memory import to_device

    fill = np.nan if np.dtype(dtype).kind == "f" else np.iinfo(dtype).max
    return to_device(np.full(n, fill, dtype=dtype))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_uniform_and_bits_bit_exact(name, rng):
    seed = int(rng.integers(0, 2**63))
    dev, host = Generator(seed, algorithm=name, streams=3000), \
        Generator(seed, algorithm=name, streams=3000)
    out = poisoned(100_003, np.float32)
    dev.random(out=out)
    assert np.array_equal(out.to_numpy(), host.random(100_003, dtype=np.float32))
    out = poisoned(50_001, np.float64)
    dev.random(out=out)
    assert np.array_equal(out.to_numpy(), host.random(50_001))
    out = poisoned(20_000, np.uint64)
    dev.bits(out=out)
    assert np.array_equal(out.to_numpy(), host.bits(20_000))
    assert np.array_equal(dev.stream_states, host.stream_states)


@pytest.mark.parametrize("name", ["xoshiro128++", "xoshiro256**", "xoroshiro128+"])
def test_integers_normal_exponential(name, rng):
    seed = int(rng.integers(0, 2**63))
    dev, host = Generator(seed, algorithm=name, streams=1024), \
        Generator(seed, algorithm=name, streams=1024)
    for low, high, dtype in [(-3, 7, np.int64), (0, 3 * 2**30, np.uint32),
                             (0, 3 * 2**62, np.uint64)]:
        out = poisoned(30_011, dtype)
        dev.integers(low, high, out=out)
        assert np.array_equal(out.to_numpy(), host.integers(low, high, 30_011, dtype=dtype))
    for dtype, tol in [(np.float32, 2e-6), (np.float64, 1e-14)]:
        out = poisoned(40_001, dtype)
        dev.standard_normal(out=out)
        np.testing.assert_allclose(out.to_numpy(), host.standard_normal(40_001, dtype),
                                   rtol=tol, atol=tol)
        out = poisoned(40_001, dtype)
        dev.exponential(2.0, out=out)
        np.testing.assert_allclose(out.to_numpy(), host.exponential(2.0, 40_001, dtype),
                                   rtol=tol, atol=tol)
    assert np.array_equal(dev.stream_states, host.stream_states)


def test_unaligned_out(rng):
    """A view 4 bytes past a 16-byte boundary launches the variant without `align 16`
    (one store per element): same values as the host, nothing written outside the view."""
    seed = int(rng.integers(0, 2**63))
    dev, host = Generator(seed, streams=1000), Generator(seed, streams=1000)
    base = poisoned(40_002, np.float32)
    view = base[1:40_001]
    dev.random(out=view)
    assert np.array_equal(view.to_numpy(), host.random(40_000, dtype=np.float32))
    dev.standard_normal(out=view)
    np.testing.assert_allclose(view.to_numpy(), host.standard_normal(40_000, np.float32),
                               rtol=2e-6, atol=2e-6)
    whole = base.to_numpy()
    assert np.isnan(whole[0]) and np.isnan(whole[-1])
    assert np.array_equal(dev.stream_states, host.stream_states)


def test_one_million_streams_initialized_on_device(rng):
    n = 1 << 20
    g = Generator(int(rng.integers(0, 2**63)), algorithm="xoshiro128++", streams=n)
    states = g.device_states(CudaBackend()).to_numpy()
    idx = np.unique(np.concatenate([[0, 1, 255, 256, 65535, 65536, n - 1],
                                    rng.integers(0, n, 40)]))
    table = streams.jump_table("xoshiro128++", n, digit_bits=8)
    want = streams.stream_states_from_table("xoshiro128++", g._base.reshape(4, 1), idx, table)
    assert np.array_equal(states[:, idx], want)
