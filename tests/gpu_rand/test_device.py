"""The device half gives the host half's bits.

Each kernel of `cupric.gpu_rand.device` is a thin shell (find t, guard it) around a
per-stream body. The bodies run here as plain Python over t, except those that call
`cupric.device` intrinsics (the normal fills' `math.sincospi`, which runs only inside a
kernel or the simulator): those kinds, and the whole kernels below, run on
`cupric.simulator.launch`.
"""

from __future__ import annotations

import numpy as np
import pytest

from cupric.gpu_rand import ALGORITHMS, BitGenerator, device, distributions, streams

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

ALL = sorted(ALGORITHMS)
S = 5


# Kinds whose bodies call cupric.device intrinsics, so they need the simulator's state.
USES_INTRINSICS = {"normal_f32", "normal_f64"}


def run_body(kind, name, states, *args):
    """Every stream's body of `kind`, one stream after another (or one simulator thread
    per stream where the body needs intrinsics)."""
    body, kernel = device.kernel_function(kind, name)
    if kind in USES_INTRINSICS:
        _simulator_launch()(kernel, (1,), (states.shape[1],), (states, *args))
        return
    for t in range(states.shape[1]):
        body(t, states, *args)


def seeded(name, rng, n=S):
    return BitGenerator.seed_from_u64(name, rng.integers(0, 2**63, size=n)).state


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kind, dtype, fill", [
    ("bits32", np.uint32, distributions.fill_bits),
    ("bits64", np.uint64, distributions.fill_bits),
    ("uniform_f32", np.float32, distributions.fill_uniform),
    ("uniform_f64", np.float64, distributions.fill_uniform),
])
def test_fills_bit_exact(name, kind, dtype, fill, rng):
    host_state = seeded(name, rng)
    dev_state = host_state.copy()
    want, got = np.zeros(17, dtype), np.zeros(17, dtype)
    fill(name, host_state, want)
    affine = (dtype(0.0), dtype(1.0)) if kind.startswith("uniform") else ()
    run_body(kind, name, dev_state, got, *affine)
    assert np.array_equal(got, want)
    assert np.array_equal(dev_state, host_state)


@pytest.mark.parametrize("kind, dtype", [("uniform_f32", np.float32),
                                         ("uniform_f64", np.float64)])
def test_uniform_affine(kind, dtype, rng):
    name = "xoshiro128**"
    host_state = seeded(name, rng)
    dev_state = host_state.copy()
    want, got = np.zeros(17, dtype), np.zeros(17, dtype)
    distributions.fill_uniform(name, host_state, want, -2.0, 5.0)
    run_body(kind, name, dev_state, got, dtype(-2.0), dtype(5.0))
    assert np.array_equal(got, want)  # without fma contraction (Python) the same roundings


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kind, out_dtype, span", [
    ("integers32", np.uint32, 7),
    ("integers32", np.uint32, 3 * 2**30),
    ("integers32_to64", np.uint64, 2**32),
    ("integers64", np.uint64, 3 * 2**62),
    ("integers64", np.uint64, 2**64),
])
def test_integers_bit_exact(name, kind, out_dtype, span, rng):
    host_state = seeded(name, rng)
    dev_state = host_state.copy()
    low = -3
    want, got = np.zeros(29, out_dtype), np.zeros(29, out_dtype)
    distributions.fill_integers(name, host_state, want, low, span)
    bits = 64 if kind == "integers64" else 32
    run_body(kind, name, dev_state, got, np.uint64(low % 2**64), np.uint64(span % 2**64),
             np.uint64(distributions.lemire_threshold(span, bits)))
    assert np.array_equal(got, want)
    assert np.array_equal(dev_state, host_state)


@pytest.mark.parametrize("name", ["xoshiro128++", "xoshiro256**", "xoroshiro64*", "xoshiro512+"])
@pytest.mark.parametrize("kind, dtype, fill", [
    ("normal_f32", np.float32, distributions.fill_normal),
    ("normal_f64", np.float64, distributions.fill_normal),
    ("exponential_f32", np.float32, distributions.fill_exponential),
    ("exponential_f64", np.float64, distributions.fill_exponential),
])
def test_transcendental_fills_close(name, kind, dtype, fill, rng):
    """Same draws, same formula; float32 math may round differently from the host's
    float64-then-round, so these agree to a few ulp, and the states agree exactly."""
    host_state = seeded(name, rng)
    dev_state = host_state.copy()
    want, got = np.zeros(23, dtype), np.zeros(23, dtype)
    fill(name, host_state, want, 1.5, 2.0)
    run_body(kind, name, dev_state, got, dtype(1.5), dtype(2.0))
    tol = 4e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert np.array_equal(dev_state, host_state)


ONE_PER_ENGINE = ["xoroshiro128+", "xoroshiro128++", "xoroshiro64*", "xoshiro128**",
                  "xoshiro256+", "xoshiro512**"]


@pytest.mark.parametrize("name", ONE_PER_ENGINE)
def test_init_streams_bit_exact(name):
    n = 40
    alg = ALGORITHMS[name]
    base = BitGenerator.seed_from_u64(name, 31337).state
    table = streams.jump_table(name, n, digit_bits=4)  # two levels of 4-bit digits
    assert table.shape[0] == 2
    got = np.zeros((alg.words, n), alg.dtype)
    run_body("init_streams", name, got, base, table, 4)
    assert np.array_equal(got, streams.stream_states(name, base[:, 0], n))


@pytest.mark.parametrize("name", sorted(n for n, a in ALGORITHMS.items() if a.jump))
def test_jump_kernel(name, rng):
    alg = ALGORITHMS[name]
    state = seeded(name, rng)
    want = BitGenerator(name, state)
    want.jump()
    table = streams.poly_to_words(name, streams.words_to_poly(name, alg.jump))[None, None]
    run_body("jump", name, state, table)
    assert np.array_equal(state, want.state)


def test_unknown_kind():
    with pytest.raises(KeyError, match="known"):
        device.kernel_function("gamma_f32", "xoshiro128++")
    assert set(device.KERNELS) >= {"uniform_f32", "normal_f32", "init_streams"}


def _simulator_launch():
    try:
        from cupric.simulator import launch
    except ImportError as exc:
        pytest.skip(f"cupric.simulator.launch is not available yet: {exc}")
    return launch


@pytest.mark.parametrize("name", ["xoshiro128++", "xoroshiro128**", "xoshiro512++"])
def test_simulator_kernels(name, rng):
    launch = _simulator_launch()
    alg = ALGORITHMS[name]
    host_state = seeded(name, rng, 40)
    dev_state = host_state.copy()
    want, got = np.zeros(173, np.float32), np.zeros(173, np.float32)
    distributions.fill_uniform(name, host_state, want)
    _, kernel = device.kernel_function("uniform_f32", name)
    launch(kernel, (2,), (32,), (dev_state, got, np.float32(0.0), np.float32(1.0)))
    assert np.array_equal(got, want) and np.array_equal(dev_state, host_state)

    base = host_state[:, :1].copy()
    table = streams.jump_table(name, 64, digit_bits=4)
    states = np.zeros((alg.words, 64), alg.dtype)
    _, init = device.kernel_function("init_streams", name)
    launch(init, (2,), (32,), (states, base, table, 4))
    assert np.array_equal(states, streams.stream_states(name, base[:, 0], 64))


def test_simulator_normal_and_wide_integers(rng):
    launch = _simulator_launch()
    name = "xoshiro256++"
    host_state = seeded(name, rng, 33)
    dev_state = host_state.copy()
    want, got = np.zeros(101, np.float32), np.zeros(101, np.float32)
    distributions.fill_normal(name, host_state, want)
    launch(device.kernel_function("normal_f32", name)[1], (2,), (32,),
           (dev_state, got, np.float32(0.0), np.float32(1.0)))
    np.testing.assert_allclose(got, want, rtol=4e-6, atol=4e-6)
    assert np.array_equal(dev_state, host_state)

    span = 3 * 2**62
    want, got = np.zeros(77, np.uint64), np.zeros(77, np.uint64)
    distributions.fill_integers(name, host_state, want, 10, span)
    launch(device.kernel_function("integers64", name)[1], (2,), (32,),
           (dev_state, got, np.uint64(10), np.uint64(span),
            np.uint64(distributions.lemire_threshold(span, 64))))
    assert np.array_equal(got, want) and np.array_equal(dev_state, host_state)
