"""The Generator API: numpy.random.Generator's methods, reproducibility, and the element
order that device fills share: in round k, stream t fills the four neighbouring elements
4*(k*S + t) .. 4*(k*S + t) + 3.

That order replaced "element k*S + t comes from stream t" (one element per stream and
round) so that a GPU thread writes its four values with one 16-byte store; the tests
below that spell the order out were rewritten for it (`in_fill_order` states it once).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cupric.gpu_rand import BitGenerator, Generator, default_rng, streams
from cupric.gpu_rand.distributions import u32_to_f32, u64_to_f64


def test_same_seed_same_values():
    a, b = default_rng(5, streams=64), default_rng(5, streams=64)
    assert np.array_equal(a.random(1000), b.random(1000))
    assert np.array_equal(a.standard_normal(33, dtype=np.float32),
                          b.standard_normal(33, dtype=np.float32))
    assert np.array_equal(a.integers(0, 10, 100), b.integers(0, 10, 100))
    c = default_rng(6, streams=64)
    assert not np.array_equal(default_rng(5, streams=64).random(10), c.random(10))


def in_fill_order(draws: np.ndarray, m: int) -> np.ndarray:
    """The first m elements of a fill made of per-stream draws (draws[d, t] is stream t's
    d-th value): element i is stream (i // 4) mod S's draw 4 * (i // 4S) + i mod 4."""
    s = draws.shape[1]
    i = np.arange(m)
    return draws[4 * (i // (4 * s)) + i % 4, (i // 4) % s]


def test_element_order_matches_streams():
    """random(M)[4*(k*S + t) + j] is stream t's (4k + j)-th uniform; stream t starts t jumps
    ahead; a stream draws only for the elements it fills."""
    s, m = 8, 8 * 4 * 2 + 11  # two whole rounds, then 11 elements: streams 0, 1 and 3 of 2
    g = Generator(123, algorithm="xoshiro256++", streams=s)
    x = g.random(m)
    start = BitGenerator.seed_from_u64("xoshiro256++", 123).state[:, 0]

    def fresh():
        return BitGenerator("xoshiro256++", streams.stream_states("xoshiro256++", start, s))

    draws = u64_to_f64(fresh().next_u64(12))  # (draw, stream)
    assert np.array_equal(x, in_fill_order(draws, m))
    assert np.array_equal(x[:4], draws[:4, 0])  # a group is one stream's consecutive draws
    state = g.stream_states
    for count, cols in [(12, [0, 1]), (11, [2]), (8, list(range(3, s)))]:
        bits = fresh()
        bits.next_u64(count)
        assert np.array_equal(state[:, cols], bits.state[:, cols]), count


def test_normal_pair_order():
    """Round k of a normal fill gives stream t's group 4*(k*S + t) + (0..3): its two
    Box–Muller pairs, each written (cos, sin) as neighbours."""
    s = 4
    g = Generator(9, streams=s)
    z = g.standard_normal(4 * s * 3)  # three whole rounds: six pairs per stream
    g2 = Generator(9, streams=s)
    u = u64_to_f64(g2.bit_generator.next_u64(12))  # (12, s): float64 uses next_u64
    u1, u2 = 1.0 - u[0::2], 1.0 - u[1::2]  # (pair, stream)
    r = np.sqrt(-2.0 * np.log(u1))
    pairs = np.stack([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)], axis=-1)
    want = pairs.reshape(3, 2, s, 2).transpose(0, 2, 1, 3)  # (round, stream, pair, half)
    np.testing.assert_allclose(z.reshape(3, s, 2, 2), want, rtol=1e-12, atol=1e-12)
    after = Generator(9, streams=s).bit_generator
    after.next_u64(12)  # each stream drew its 12 uniforms, no more
    assert np.array_equal(g.stream_states, after.state)
    z32 = Generator(9, streams=s).standard_normal(4 * s * 3, dtype=np.float32)
    u = u32_to_f32(Generator(9, streams=s).bit_generator.next_u32(12)).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(1.0 - u[0::2]))
    t = 2 * np.pi * (1.0 - u[1::2])
    pairs = np.stack([r * np.cos(t), r * np.sin(t)], axis=-1).astype(np.float32)
    want = pairs.reshape(3, 2, s, 2).transpose(0, 2, 1, 3)
    assert np.array_equal(z32.reshape(3, s, 2, 2), want)  # float64 math, rounded once


def test_normal_straddling_group_draws_whole_pairs():
    """A group cut by the end still draws whole pairs: 7 elements from 4 streams are
    stream 0's group and 3 of stream 1's, i.e. its two pairs with the last sine dropped."""
    s = 4
    g = Generator(5, streams=s)
    z = g.standard_normal(7)
    ref = Generator(5, streams=s)
    whole = ref.standard_normal(8)
    assert np.array_equal(z, whole[:7])
    assert np.array_equal(g.stream_states, ref.stream_states)  # stream 1 drew 4 uniforms
    full = Generator(5, streams=s)
    full.standard_normal(4 * s)  # every stream draws its whole group once
    assert np.array_equal(g.stream_states[:, :2], full.stream_states[:, :2])
    assert np.array_equal(g.stream_states[:, 2:], Generator(5, streams=s).stream_states[:, 2:])


def test_scalars_and_shapes():
    g = Generator(1, streams=16)
    assert isinstance(g.random(), np.float64)
    assert isinstance(g.random(dtype=np.float32), np.float32)
    assert isinstance(g.integers(10), np.int64)
    assert g.random((3, 4)).shape == (3, 4)
    assert g.standard_normal((2, 0)).shape == (2, 0)
    out = np.empty((5, 5), np.float32)
    assert g.random(out=out) is out
    with pytest.raises(ValueError, match="negative"):
        g.random(-1)
    with pytest.raises(ValueError, match="does not match"):
        g.random((2, 2), out=np.empty(4))
    with pytest.raises(TypeError, match="float32 or float64"):
        g.random(3, dtype=np.int32)


def test_scalar_draws_use_stream_zero():
    g = Generator(42, streams=4)
    first = [g.random() for _ in range(3)]
    stream0 = BitGenerator.seed_from_u64("xoshiro128++", 42)
    assert first == u64_to_f64(stream0.next_u64(3)[:, 0]).tolist()


def test_location_scale():
    g = Generator(3, streams=64)
    u = g.uniform(-2.0, 3.0, 10000)
    assert u.min() >= -2.0 and u.max() < 3.0
    n = Generator(3, streams=64).normal(10.0, 2.0, 1000, dtype=np.float32)
    z = Generator(3, streams=64).standard_normal(1000, dtype=np.float32)
    assert n.dtype == np.float32
    np.testing.assert_allclose(n, np.float32(10.0) + np.float32(2.0) * z)
    e = Generator(4, streams=64).exponential(3.0, 500)
    assert np.array_equal(e, 3.0 * Generator(4, streams=64).standard_exponential(500))
    with pytest.raises(ValueError):
        g.normal(0.0, -1.0)
    with pytest.raises(ValueError):
        g.exponential(-1.0)


def test_bits():
    g = Generator(8, algorithm="xoroshiro128++", streams=2)
    raw = g.bits(12, dtype=np.uint32)
    ref = Generator(8, algorithm="xoroshiro128++", streams=2).bit_generator
    draws = ref.next_u32(8)  # (draw, stream)
    assert raw.tolist() == [*draws[:4, 0], *draws[:4, 1], *draws[4:, 0]]
    assert np.array_equal(raw, in_fill_order(draws, 12))
    with pytest.raises(TypeError):
        g.bits(3, dtype=np.int64)


def test_jumped_and_spawn():
    g = Generator(10, streams=32)
    j = g.jumped()
    base = BitGenerator.seed_from_u64("xoshiro128++", 10)
    base.long_jump()
    assert np.array_equal(j.stream_states[:, 0], base.state[:, 0])
    kids = g.spawn(3)
    assert np.array_equal(kids[0].random(10), g.jumped(1).random(10))
    assert not np.array_equal(kids[1].random(10), kids[2].random(10))
    with pytest.raises(NotImplementedError):
        Generator(1, algorithm="xoroshiro64**", streams=2).jumped()


def test_constructor_checks_and_repr():
    g = Generator(3, algorithm="Xoshiro512StarStar", streams=3)
    assert g.seed == 3 and g.algorithm == "xoshiro512**" and g.streams == 3
    assert repr(g) == "Generator(xoshiro512**, seed=3, streams=3)"
    for outside in (2**64 + 3, -1):  # no silent masking to 64 bits
        with pytest.raises(ValueError, match="seed must be in"):
            Generator(outside, streams=1)
    assert isinstance(Generator(streams=2).seed, int)  # from the OS
    with pytest.raises(ValueError, match="streams"):
        Generator(1, streams=0)
    with pytest.raises(KeyError):
        Generator(1, algorithm="pcg64")


def test_every_algorithm_fills(rng):
    from cupric.gpu_rand import ALGORITHMS

    seed = int(rng.integers(0, 2**63))
    for name in ALGORITHMS:
        g = Generator(seed, algorithm=name, streams=3)
        assert g.random(7).shape == (7,)
        assert g.integers(0, 2**40, 5).max() < 2**40


def test_import_is_light():
    """Importing cupric.gpu_rand loads neither the compiler nor cuda-python."""
    code = ("import sys, cupric.gpu_rand as g; g.Generator; "
            "bad = [m for m in sys.modules if m.startswith(('cupric.compiler', 'cuda', "
            "'cupric.runtime', 'cupric.gpu_rand.device'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("name", ["xoshiro128++", "xoshiro256**", "xoroshiro64**"])
def test_device_path_on_simulator_matches_host(name):
    """The device half, driven by the Generator (states built on the "device" by the
    jump-table kernel, fills by the device kernels), gives the host half's values; host
    and device calls interleave on one sequence."""
    s = 40
    host = Generator(2718, algorithm=name, streams=s)
    dev = Generator(2718, algorithm=name, streams=s)
    sim = "simulator"

    out = np.empty(97, np.float32)
    assert dev.random(out=out, backend=sim) is out
    assert dev._where == "device"
    assert np.array_equal(out, host.random(97, dtype=np.float32))

    out = np.empty(50, np.float64)
    dev.uniform(-1.0, 3.0, out=out, backend=sim)
    assert np.array_equal(out, host.uniform(-1.0, 3.0, 50))

    out = np.empty(61, np.int64)
    dev.integers(-7, 1000, out=out, backend=sim)
    assert np.array_equal(out, host.integers(-7, 1000, 61))
    out = np.empty(30, np.uint64)
    dev.integers(0, 3 * 2**62, out=out, backend=sim)
    assert np.array_equal(out, host.integers(0, 3 * 2**62, 30, dtype=np.uint64))
    out = np.empty(30, np.int32)
    dev.integers(-5, 5, out=out, backend=sim)
    assert np.array_equal(out, host.integers(-5, 5, 30, dtype=np.int32))

    out = np.empty(33, np.uint64)
    dev.bits(out=out, backend=sim)
    assert np.array_equal(out, host.bits(33))

    # a host call in between: the states come back from the "device" and continue there
    assert dev.random() == host.random()
    out = np.empty(45, np.float32)
    dev.normal(1.0, 2.0, out=out, backend=sim)
    np.testing.assert_allclose(out, host.normal(1.0, 2.0, 45, dtype=np.float32),
                               rtol=1e-5, atol=1e-5)
    out = np.empty(21, np.float64)
    dev.exponential(0.5, out=out, backend=sim)
    np.testing.assert_allclose(out, host.exponential(0.5, 21), rtol=1e-13)
    assert np.array_equal(dev.stream_states, host.stream_states)
    with pytest.raises(TypeError, match="32- or 64-bit"):
        dev.integers(0, 5, out=np.empty(3, np.int8), backend=sim)
    with pytest.raises(ValueError, match="backend"):
        dev.random(out=np.empty(3), backend="tpu")


def test_bulk_fills():
    from cupric import gpu_rand

    out = np.empty((3, 5), np.float32)
    assert gpu_rand.uniform(out, 2.0, 4.0, rng=Generator(1, streams=4)) is out
    assert np.array_equal(out, Generator(1, streams=4).uniform(2.0, 4.0, (3, 5), np.float32))
    z = gpu_rand.normal(np.empty(10), 1.0, 0.5, rng=Generator(2, streams=4))
    assert np.array_equal(z, Generator(2, streams=4).normal(1.0, 0.5, 10))
    e = gpu_rand.exponential(np.empty(10), 2.0, rng=Generator(3, streams=4))
    assert np.array_equal(e, Generator(3, streams=4).exponential(2.0, 10))
    k = gpu_rand.integers(np.empty(10, np.int16), 0, 5, endpoint=True, rng=Generator(4, streams=4))
    assert k.max() <= 5
    b = gpu_rand.random_bits(np.empty(6, np.uint32), rng=Generator(5, streams=4))
    assert np.array_equal(b, Generator(5, streams=4).bits(6, np.uint32))
    with pytest.raises(TypeError):
        gpu_rand.random_bits(np.empty(3, np.int64))
    assert gpu_rand.default_generator() is gpu_rand.default_generator()
    assert gpu_rand.uniform(np.empty(3)).shape == (3,)
