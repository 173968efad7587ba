"""Bad input found by the hardening review, each refused with a typed error before anything
runs (or, for `jumped(2**70)`, answered quickly instead of looping)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import cupric
import cupric.kernels
from cupric import runtime as rt
from cupric.gpu_rand import Generator
from cupric.gpu_rand.host import BitGenerator


@pytest.mark.parametrize("seed", [2**64 + 5, 2**64, -1, -(2**70)])
def test_seeds_outside_64_bits_are_refused(seed):
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\)"):
        Generator(seed)


def test_extreme_valid_seeds_are_distinct():
    assert Generator(0).random(4).tolist() != Generator(2**64 - 1).random(4).tolist()
    assert Generator(2**64 - 1).seed == 2**64 - 1


def test_negative_jumps_and_children_are_refused():
    g = Generator(1)
    with pytest.raises(ValueError, match="jumps must be >= 0"):
        g.jumped(-1)
    with pytest.raises(ValueError, match="n_children must be >= 0"):
        g.spawn(-1)
    with pytest.raises(TypeError):
        g.jumped(1.5)
    assert g.spawn(0) == []


@pytest.mark.parametrize("algorithm", ["xoshiro256++", "xoshiro128++"])
def test_many_jumps_are_fast_and_equal_repeated_long_jumps(algorithm):
    g = Generator(12345, algorithm=algorithm)
    start = time.perf_counter()
    far = g.jumped(2**70)
    assert time.perf_counter() - start < 1.0
    assert far.random(3).tolist() != g.random(3).tolist()
    # Past the looped range the polynomial path must agree with the published long jump.
    bits = BitGenerator(g._alg, g._base)
    for _ in range(40):
        bits.long_jump()
    np.testing.assert_array_equal(g.jumped(40)._base, bits.state[:, 0])
    # Jumping by the period (2^n - 1 steps, in long-jump units when it divides) is modular.
    assert g.jumped(0).random(2).tolist() == Generator(12345, algorithm=algorithm).random(2).tolist()


@pytest.mark.parametrize("name", ["transpose", "gemm", "histogram"])
def test_kernel_names_shared_with_submodules_are_callable(name):
    value = getattr(cupric.kernels, name)
    assert callable(value)
    module = __import__(f"cupric.kernels.{name}", fromlist=["_"])
    assert callable(getattr(cupric.kernels, name))  # still, after a direct submodule import
    assert getattr(module, name) is not None


def test_callable_kernel_modules_compute_on_the_simulator(rng):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(cupric.kernels.transpose(a)), a.T)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    # float32 sums of 7 products in another order than NumPy's: bound the error by the
    # magnitudes summed (|a| @ |b|), not by the result, which can cancel towards zero.
    got = np.asarray(cupric.kernels.gemm(a, b))
    bound = 8 * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(got - a.astype(np.float64) @ b) <= bound)
    x = rng.random(100).astype(np.float32)
    counts, edges = cupric.kernels.histogram(x, 4, (0, 1))
    np.testing.assert_array_equal(np.asarray(counts), np.histogram(x, 4, (0, 1))[0])


@pytest.mark.parametrize("fn", [rt.zeros_like, rt.empty_like])
def test_like_functions_refuse_non_arrays(fn):
    for bad in (None, 42, "x", [1, 2]):
        with pytest.raises(TypeError, match="expected an array"):
            fn(bad)


@pytest.mark.parametrize("bad", [42, "f", None.__class__, print])
def test_kernel_refuses_what_is_not_a_function(bad):
    with pytest.raises(TypeError, match="plain Python function"):
        cupric.kernel(bad)
