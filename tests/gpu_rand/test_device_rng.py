"""The device API (`cupric.gpu_rand.device_rng`) inside a user's own kernel and device
function gives the host half's values: bit for bit for bits, uniforms and integers, to a
few ulp for normal and exponential (libdevice vs NumPy). Simulator on the CPU lane, the
compiled kernel on the GPU lane; PTX on the CPU lane."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.device import grid
from cupric.gpu_rand import ALGORITHMS, BitGenerator, algorithms, distributions
from cupric.gpu_rand.device_rng import device_rng
from cupric.gpu_rand.host import draw_u32, draw_u64

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

ALL = sorted(ALGORITHMS)
WIDE = 3 << 40  # a span above 2^32: u64 draws and the 128-bit Lemire product


def make_kernel(name):
    """A user kernel (plain function; `cupric.kernel` of it for the GPU) drawing one of
    everything per thread, through a user device function too."""
    rng = device_rng(name)

    @cupric.device_function
    def two_uniforms(st):
        a, st = rng.uniform_f32(st)
        b, st = rng.uniform_f64(st)
        return a, b, st

    def kernel(states, bits, floats, doubles, ints, normals, exps):
        t = grid(1)
        if t < states.shape[1]:
            st = rng.load(states, t)
            x, st = rng.next_u32(st)
            bits[0, t] = x
            y, st = rng.next_u64(st)
            bits[1, t] = y
            a, b, st = two_uniforms(st)
            floats[0, t] = a
            doubles[0, t] = b
            k, st = rng.integers(st, -3, 7)
            ints[0, t] = k
            k, st = rng.integers(st, 5, 5 + WIDE)
            ints[1, t] = k
            k, st = rng.integers(st, 4, 4)  # empty range: low, nothing drawn
            ints[2, t] = k
            z0, z1, st = rng.normal2_f32(st)
            floats[1, t] = z0
            floats[2, t] = z1
            z, st = rng.normal_f64(st)
            normals[t] = z
            e, st = rng.exponential_f64(st)
            exps[t] = e
            rng.store(states, t, st)

    return kernel


def host_reference(name, states):
    """The same draws, stream by stream, from the host half (states advanced in place)."""
    alg = algorithms.get(name)
    n = states.shape[1]
    bits = np.zeros((2, n), np.uint64)
    floats = np.zeros((3, n), np.float32)
    doubles = np.zeros((1, n), np.float64)
    ints = np.zeros((3, n), np.int64)
    normals, exps = np.zeros(n), np.zeros(n)
    for t in range(n):
        s = states[:, t:t + 1].copy()
        bits[0, t] = draw_u32(alg, s)[0]
        bits[1, t] = draw_u64(alg, s)[0]
        floats[0, t] = distributions.u32_to_f32(draw_u32(alg, s))[0]
        doubles[0, t] = distributions.u64_to_f64(draw_u64(alg, s))[0]
        one = np.zeros(1, np.int64)
        distributions.fill_integers(alg, s, one, -3, 10)
        ints[0, t] = one[0]
        distributions.fill_integers(alg, s, one, 5, WIDE)
        ints[1, t] = one[0]
        ints[2, t] = 4
        pair = np.zeros(2, np.float32)
        distributions.fill_normal(alg, s, pair)
        floats[1:, t] = pair
        pair64 = np.zeros(2)
        distributions.fill_normal(alg, s, pair64)
        normals[t] = pair64[0]
        distributions.fill_exponential(alg, s, exps[t:t + 1])
        states[:, t:t + 1] = s
    return bits, floats, doubles, ints, normals, exps


def outputs(n, empty):
    return (empty((2, n), np.uint64), empty((3, n), np.float32), empty((1, n), np.float64),
            empty((3, n), np.int64), empty(n, np.float64), empty(n, np.float64))


def poisoned_host(shape, dtype):
    fill = np.nan if np.dtype(dtype).kind == "f" else np.iinfo(dtype).max
    return np.full(shape, fill, dtype)


def assert_matches(got, want, label):
    g_bits, g_f, g_d, g_i, g_n, g_e = got
    w_bits, w_f, w_d, w_i, w_n, w_e = want
    assert np.array_equal(g_bits, w_bits), label
    assert np.array_equal(g_f[0], w_f[0]), label          # uniform f32: exact
    assert np.array_equal(g_d, w_d), label                # uniform f64: exact
    assert np.array_equal(g_i, w_i), label                # integers: exact
    np.testing.assert_allclose(g_f[1:], w_f[1:], rtol=2e-6, atol=2e-6, err_msg=label)
    np.testing.assert_allclose(g_n, w_n, rtol=1e-14, atol=1e-14, err_msg=label)
    np.testing.assert_allclose(g_e, w_e, rtol=1e-14, atol=1e-14, err_msg=label)


def seeded(name, rng, n):
    return BitGenerator.seed_from_u64(name, rng.integers(0, 2**63, size=n)).state


@pytest.mark.parametrize("name", ALL)
def test_simulator_matches_host(name, rng):
    from cupric.simulator import launch

    n = 6
    dev_states = seeded(name, rng, n)
    host_states = dev_states.copy()
    got = outputs(n, poisoned_host)
    launch(make_kernel(name), (1,), (8,), (dev_states, *got))
    want = host_reference(name, host_states)
    assert_matches(got, want, name)
    assert np.array_equal(dev_states, host_states)  # the state stored back, advanced


def seed_kernel(name):
    rng = device_rng(name)

    def kernel(keys, states):
        t = grid(1)
        if t < keys.size:
            st = rng.seed_from_u64(keys[t])
            rng.store(states, t, st)

    return kernel


# The seed whose first SplitMix64 output is zero (an all-zero 64-bit seed for the
# xoroshiro64 pair: the host then takes seed 0's state).
ZERO_SEED = (-0x9E3779B97F4A7C15) % 2**64


@pytest.mark.parametrize("name", ALL)
def test_seed_from_u64_matches_host(name, rng):
    from cupric.simulator import launch

    keys = np.concatenate([rng.integers(0, 2**63, 5, dtype=np.uint64) * np.uint64(2),
                           np.array([0, ZERO_SEED, 2**64 - 1], np.uint64)])
    alg = algorithms.get(name)
    got = poisoned_host((alg.words, keys.size), alg.dtype)
    launch(seed_kernel(name), (1,), (16,), (keys, got))
    assert np.array_equal(got, BitGenerator.seed_from_u64(name, keys).state)


def test_every_generator_has_the_api():
    for name in ALL:
        r = device_rng(name)
        assert r.algorithm.name == name and r.name == name
        for role in ("load", "store", "seed_from_u64", "next_u32", "next_u64", "uniform_f32",
                     "uniform_f64", "normal_f32", "normal_f64", "normal2_f32", "normal2_f64",
                     "exponential_f32", "exponential_f64", "integers"):
            assert getattr(getattr(r, role), "_cupric_device_function", False), (name, role)
    with pytest.raises(KeyError):
        device_rng("mersenne")


def _signature(name):
    word = "u64" if ALGORITHMS[name].word_bits == 64 else "u32"
    return (f"Array[{word}, 2, 'C'], Array[u64, 2, 'C'], Array[f32, 2, 'C'], "
            f"Array[f64, 2, 'C'], Array[i64, 2, 'C'], Array[f64, 1, 'C'], "
            f"Array[f64, 1, 'C']")


@pytest.mark.parametrize("name", ["xoshiro256**", "xoshiro128++", "xoroshiro64*"])
def test_user_kernel_compiles_to_ptx(name):
    pytest.importorskip("cuda.bindings.nvvm", reason="libNVVM bindings are not installed")
    ptx = cupric.kernel(make_kernel(name)).inspect_ptx(_signature(name))
    body = ptx.split(".entry", 1)[1]
    assert "xor.b" in body  # the linear engine, in registers
    assert "st.global.u64" in body or "st.global.b64" in body
    assert "call.uni" not in body  # every device function inlined
    word = "u64" if ALGORITHMS[name].word_bits == 64 else "u32"
    ptx = cupric.kernel(seed_kernel(name)).inspect_ptx(
        f"Array[u64, 1, 'C'], Array[{word}, 2, 'C']")
    assert "mul.lo.s64" in ptx  # SplitMix64's finalizer


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["xoshiro256**", "xoshiro128++", "xoroshiro128+",
                                  "xoroshiro64**", "xoshiro512++"])
def test_gpu_matches_host(name, rng):
    from cupric.runtime.memory import to_device

    n = 1000
    states = seeded(name, rng, n)
    host_states = states.copy()
    dev_states = to_device(states)
    got = outputs(n, lambda shape, dtype: to_device(poisoned_host(shape, dtype)))
    cupric.kernel(make_kernel(name))[(n + 127) // 128, 128](dev_states, *got)
    want = host_reference(name, host_states)
    assert_matches(tuple(g.to_numpy() for g in got), want, name)
    assert np.array_equal(dev_states.to_numpy(), host_states)
    keys = to_device(rng.integers(0, 2**63, n, dtype=np.uint64))
    alg = algorithms.get(name)
    seeded_states = to_device(poisoned_host((alg.words, n), alg.dtype))
    cupric.kernel(seed_kernel(name))[(n + 127) // 128, 128](keys, seeded_states)
    assert np.array_equal(seeded_states.to_numpy(),
                          BitGenerator.seed_from_u64(name, keys.to_numpy()).state)


def test_monte_carlo_example_runs_on_the_simulator():
    import os
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parents[2] / "examples" / "monte_carlo.py"
    env = dict(os.environ, CUPRIC_SIMULATOR="1")
    done = subprocess.run([sys.executable, str(script), "--threads", "128", "--paths", "16"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pi      ~ 3." in done.stdout and "Black-Scholes" in done.stdout
