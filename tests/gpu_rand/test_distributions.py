"""Statistical sanity of the host distributions, and their exact construction.

Moments against their expected values with a few-sigma tolerance, chi-square over bins
(p-value by the Wilson–Hilferty approximation, rejecting below 1e-4), bias checks that a
modulo reduction would fail, and no correlation between adjacent streams. The seeds are
fixed so the lane is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cupric.gpu_rand import Generator, distributions

N = 200_000
ALPHA = 1e-4


def chi2_pvalue(observed, expected) -> float:
    """Upper-tail p-value of Pearson's statistic, Wilson–Hilferty approximation."""
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    stat = float(((observed - expected) ** 2 / expected).sum())
    k = observed.size - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def check_moments(x, mean, var, label=""):
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / n), (label, x.mean())
    # the variance of the sample variance is below 3 var^2 / n for these distributions
    assert abs(x.var() - var) < 5 * math.sqrt(3 * var * var / n) + 1e-12, (label, x.var())


@pytest.fixture(params=["xoshiro128++", "xoshiro256**", "xoroshiro128+", "xoroshiro64*"])
def gen(request):
    return Generator(20261121, algorithm=request.param, streams=257)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform(gen, dtype):
    x = gen.random(N, dtype=dtype)
    assert x.dtype == dtype and x.shape == (N,)
    assert x.min() >= 0.0 and x.max() < 1.0
    bits = 24 if dtype == np.float32 else 53
    scaled = x.astype(np.float64) * 2.0**bits  # exact: every value is k * 2^-bits
    assert np.array_equal(scaled, np.floor(scaled))
    check_moments(x, 0.5, 1 / 12, "uniform")
    counts = np.bincount((x * 64).astype(np.int64), minlength=64)
    assert chi2_pvalue(counts, np.full(64, N / 64)) > ALPHA


def normal_cdf(z):
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(z) / math.sqrt(2.0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normal(gen, dtype):
    z = gen.standard_normal(N, dtype=dtype)
    assert z.dtype == dtype
    check_moments(z, 0.0, 1.0, "normal")
    zz = z.astype(np.float64)
    assert abs(np.mean(zz**3)) < 5 * math.sqrt(15 / N)
    assert abs(np.mean(zz**4) - 3.0) < 5 * math.sqrt(96 / N)
    edges = np.linspace(-3, 3, 41)
    probs = np.diff(np.concatenate([[0.0], normal_cdf(edges), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, zz), minlength=probs.size)
    assert chi2_pvalue(counts, probs * N) > ALPHA
    # f32 Box-Muller with 24-bit uniforms cannot exceed sqrt(48 ln 2)
    if dtype == np.float32:
        assert np.abs(zz).max() <= math.sqrt(48 * math.log(2)) + 1e-6


def test_normal_pairs_uncorrelated():
    """Both Box–Muller values are used: the cos and sin halves are each normal and
    uncorrelated with each other."""
    s = 512
    g = Generator(3, streams=s)
    z = g.standard_normal(2 * s * 400).reshape(-1, 2)  # each pair is (cos, sin), neighbours
    cos_half, sin_half = z[:, 0], z[:, 1]
    check_moments(cos_half, 0.0, 1.0, "cos half")
    check_moments(sin_half, 0.0, 1.0, "sin half")
    assert abs(np.corrcoef(cos_half, sin_half)[0, 1]) < 5 / math.sqrt(cos_half.size)
    assert abs(np.corrcoef(cos_half**2, sin_half**2)[0, 1]) < 5 / math.sqrt(cos_half.size)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exponential(gen, dtype):
    e = gen.standard_exponential(N, dtype=dtype)
    assert e.dtype == dtype and e.min() >= 0.0
    check_moments(e, 1.0, 1.0, "exponential")
    edges = np.linspace(0, 6, 31)
    probs = np.diff(np.concatenate([1.0 - np.exp(-edges), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, e.astype(np.float64), side="right") - 1,
                         minlength=probs.size)
    assert chi2_pvalue(counts, probs * N) > ALPHA


@pytest.mark.parametrize("span", [1, 2, 7, 10, 1000, 2**31 + 1])
def test_integers_chi_square(gen, span):
    x = gen.integers(-5, -5 + span, size=N)
    assert x.dtype == np.int64 and x.min() >= -5 and x.max() < -5 + span
    if span == 1:
        assert (x == -5).all()
        return
    bins = min(span, 64)
    counts = np.bincount(((x + 5) * bins // span).astype(np.int64), minlength=bins)
    expected = np.array([(math.ceil((b + 1) * span / bins) - math.ceil(b * span / bins))
                         for b in range(bins)], dtype=np.float64) / span * N
    assert chi2_pvalue(counts, expected) > ALPHA


@pytest.mark.parametrize("span, bits", [(3 * 2**30, 32), (3 * 2**62, 64)])
def test_integers_no_modulo_bias(gen, span, bits):
    """x mod span over 2^bits inputs would put half the mass below 2^bits - span (a third
    of the range): Lemire's rejection must give a third."""
    cut = 2**bits - span
    n = 40_000  # the bias would be 1/6, over 30 standard errors at this size
    x = gen.integers(0, span, size=n, dtype=np.uint64)
    frac = float(np.mean(x < np.uint64(cut)))
    assert abs(frac - 1 / 3) < 5 * math.sqrt(2 / 9 / n), frac


def test_integers_full_64_bit_range():
    g = Generator(1, streams=8)
    x = g.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=1000, endpoint=True)
    raw = Generator(1, streams=8).bits(1000, dtype=np.uint64)
    # span 2^64: the value is low + next_u64, with no rejection
    assert np.array_equal(x.view(np.uint64), raw + np.uint64(2**63))


def test_integers_bounds_and_dtypes():
    g = Generator(11, streams=16)
    assert set(np.unique(g.integers(3, size=5000)).tolist()) == {0, 1, 2}
    assert set(np.unique(g.integers(1, 3, size=5000, endpoint=True)).tolist()) == {1, 2, 3}
    small = g.integers(-128, 128, size=5000, dtype=np.int8)
    assert small.dtype == np.int8 and small.min() == -128 and small.max() == 127
    u = g.integers(0, 2**32, size=100, dtype=np.uint32)
    assert u.dtype == np.uint32
    with pytest.raises(ValueError, match="does not fit"):
        g.integers(0, 300, dtype=np.uint8)
    with pytest.raises(ValueError, match="empty"):
        g.integers(5, 5)
    with pytest.raises(TypeError):
        g.integers(0, 5, dtype=np.float32)


def test_adjacent_streams_uncorrelated():
    """Streams t and t+1 start one jump apart; their outputs must not correlate."""
    s, k = 256, 2000
    g = Generator(77, streams=s)
    # each round gives stream t the 4 neighbours 4*(round*s + t) + (0..3): regroup them so
    # that column t holds stream t's first k values in order
    u = g.random(s * k).reshape(k // 4, s, 4).transpose(0, 2, 1).reshape(k, s)
    r = np.array([np.corrcoef(u[:, t], u[:, t + 1])[0, 1] for t in range(s - 1)])
    bound = 5 / math.sqrt(k)
    assert np.abs(r).max() < bound + 1.5 / math.sqrt(k)  # max over 255 pairs
    assert abs(r.mean()) < 5 / math.sqrt(k * (s - 1))
    # and the whole panel is uniform across streams (no stream is off)
    counts = np.bincount((u * 16).astype(np.int64).ravel(), minlength=16)
    assert chi2_pvalue(counts, np.full(16, u.size / 16)) > ALPHA


def test_lemire_threshold_and_product():
    assert distributions.lemire_threshold(3, 32) == (2**32 - 3) % 3
    assert distributions.lemire_threshold(2**32, 32) == 0
    a = np.array([2**64 - 1, 12345678901234567890, 2**63], dtype=np.uint64)
    for b in (2**64 - 1, 3, 2**40 + 7):
        hi, lo = distributions.mul_hi_lo_u64(a, b)
        for i in range(a.size):
            assert (int(hi[i]) << 64) | int(lo[i]) == int(a[i]) * b


def test_fill_rejects_bad_out():
    g = Generator(1, streams=4)
    with pytest.raises(TypeError, match="dtype"):
        g.random(out=np.empty(4, np.int32))
    with pytest.raises(ValueError, match="contiguous"):
        g.random(out=np.empty(8)[::2])
