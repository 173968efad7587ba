"""Jumps and streams, checked on the polynomials and on reduced cases.

The published jump constants must equal x^(2^d) mod P (P the engine's characteristic
polynomial), and applying x^k mod P must equal k engine steps; together these show that
`jump` advances exactly 2^d steps. The parallel stream initializers (doubling on the host,
digit tables for the device) must give stream i = `jump` applied i times. State
transitions depend only on the linear engine, so those run once per engine (six of them).
"""

from __future__ import annotations

import numpy as np
import pytest

from cupric.gpu_rand import ALGORITHMS, BitGenerator, algorithms, gf2, streams

JUMPING = sorted(n for n, a in ALGORITHMS.items() if a.jump is not None)

# Known factorizations of 2^n - 1 = (2^(n/2) - 1)(2^(n/2) + 1) down to the Fermat numbers
# F0..F4 (primes), F5 = 641 * 6700417, F6, F7 and F8 (factored in 1880, 1970 and 1990).
_FERMAT_FACTORS = {
    5: [641, 6700417],
    6: [274177, 67280421310721],
    7: [59649589127497217, 5704689200685129054721],
    8: [1238926361552897,
        93461639715357977769163558199606896584051237541638188580280321],
}


def prime_factors_of_mersenne(n: int) -> list[int]:
    """Prime factors of 2^n - 1 for n a power of two, 32 <= n <= 512."""
    factors = [3, 5, 17, 257, 65537]  # F0..F4
    m = 32
    while m < n:
        factors += _FERMAT_FACTORS[m.bit_length() - 1]  # 2^m + 1 = F_log2(m)
        m *= 2
    return factors


def is_probable_prime(n: int) -> bool:
    """Miller–Rabin with the first 20 prime bases (no composite below 3.3e24 passes them,
    and a composite passes each base with probability at most 1/4)."""
    bases = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71]
    if n < 2:
        return False
    for p in bases:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def one_per_engine() -> list[str]:
    seen, names = set(), []
    for name, alg in sorted(ALGORITHMS.items()):
        key = (alg.engine, alg.engine_params, alg.word_bits)
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_charpoly_degree_and_irreducible(name):
    p = streams.charpoly(name)
    assert gf2.degree(p) == ALGORITHMS[name].state_bits
    assert gf2.is_irreducible(p)


@pytest.mark.parametrize("name", one_per_engine())
def test_charpoly_primitive(name):
    """x has order 2^n - 1 modulo P: the engine cycles through every nonzero state."""
    p = streams.charpoly(name)
    n = gf2.degree(p)
    order = (1 << n) - 1
    factors = prime_factors_of_mersenne(n)
    assert np.prod([float(f) for f in factors]) == pytest.approx(float(order))
    product = 1
    for f in factors:
        product *= f
        assert is_probable_prime(f)
    assert product == order
    assert gf2.powmod_x(order, p) == 1
    for q in factors:
        assert gf2.powmod_x(order // q, p) != 1, q


@pytest.mark.parametrize("name", JUMPING)
def test_published_jumps_are_powers_of_x(name):
    alg = ALGORITHMS[name]
    assert streams.jump_polynomial(name, 2 ** alg.jump_log2) == \
        streams.words_to_poly(name, alg.jump)
    assert streams.jump_polynomial(name, 2 ** alg.long_jump_log2) == \
        streams.words_to_poly(name, alg.long_jump)
    assert streams.jump_power_polynomials(name, 1)[0] == streams.words_to_poly(name, alg.jump)


@pytest.mark.parametrize("name", one_per_engine())
def test_polynomial_of_k_equals_k_steps(name, rng):
    """The reduced case: x^k mod P applied to a state is k engine steps, for small k."""
    alg = ALGORITHMS[name]
    seeds = rng.integers(0, 2**63, size=3)
    start = BitGenerator.seed_from_u64(name, seeds)
    for k in (0, 1, 2, alg.state_bits - 1, alg.state_bits, 3 * alg.state_bits + 5,
              int(rng.integers(1, 2000))):
        stepped = start.state.copy()
        for _ in range(k):
            algorithms.engine_step(alg, stepped)
        jumped = start.copy()
        jumped.advance(streams.jump_polynomial(name, k))
        assert np.array_equal(jumped.state, stepped), k


@pytest.mark.parametrize("name", ["xoroshiro128++", "xoshiro256**", "xoshiro128+"])
def test_jump_distances_add(name):
    """x^a * x^b = x^(a+b): jump then long jump equals one polynomial of 2^d + 2^e steps."""
    alg = ALGORITHMS[name]
    a = BitGenerator.seed_from_u64(name, 99)
    b = a.copy()
    a.jump()
    a.long_jump()
    b.advance(streams.jump_polynomial(name, 2 ** alg.jump_log2 + 2 ** alg.long_jump_log2))
    assert a == b


@pytest.mark.parametrize("name", one_per_engine())
def test_stream_states_are_repeated_jumps(name):
    alg = ALGORITHMS[name]
    base = BitGenerator.seed_from_u64(name, 2024)
    n = 21 if alg.state_bits <= 256 else 9
    got = streams.stream_states(name, base.state[:, 0], n)
    seq = base.copy()
    poly = streams.jump_polynomial(name, 2 ** streams.stream_log2(name))
    for i in range(n):
        assert np.array_equal(got[:, i], seq.state[:, 0]), i
        if alg.jump is not None:
            seq.jump()
        else:
            seq.advance(poly)


@pytest.mark.parametrize("name, digit_bits",
                         [(n, b) for n in one_per_engine() for b in (1, 3)]
                         + [("xoshiro128++", 8), ("xoroshiro128+", 8), ("xoroshiro64**", 8)])
def test_table_init_equals_doubling(name, digit_bits):
    base = BitGenerator.seed_from_u64(name, 7).state
    n = 45
    table = streams.jump_table(name, n, digit_bits=digit_bits)
    levels = -(-(n - 1).bit_length() // digit_bits)
    assert table.shape == (levels, 2 ** digit_bits, ALGORITHMS[name].words)
    assert not table.flags.writeable
    want = streams.stream_states(name, base[:, 0], n)
    got = streams.stream_states_from_table(name, base, np.arange(n), table)
    assert np.array_equal(got, want)
    # entry 0 of every level is the identity polynomial x^0
    assert all(streams.words_to_poly(name, table[lv, 0]) == 1 for lv in range(levels))


def test_streams_tile_one_sequence():
    """With short streams (2^4 steps) the outputs of stream i followed by stream i+1 are
    one run of consecutive outputs: the streams are adjacent, disjoint pieces of one cycle.
    The default streams have the same structure at the jump distance."""
    name, d = "xoshiro128++", 4
    base = BitGenerator.seed_from_u64(name, 5)
    starts = BitGenerator(name, streams.stream_states(name, base.state[:, 0], 6, d))
    per_stream = starts.next_u32(2 ** d)           # (16, 6)
    run = base.next_u32(6 * 2 ** d)[:, 0]          # 96 consecutive outputs
    assert np.array_equal(per_stream.T.reshape(-1), run)


def test_stream_count_limits():
    assert streams.max_streams("xoroshiro64*") == 2**32 - 1
    assert streams.max_streams("xoshiro128++") == 2**64 - 1
    with pytest.raises(ValueError, match="do not fit"):
        streams.stream_states("xoroshiro64**", [1, 2], 2**32)
    with pytest.raises(ValueError, match="at least one"):
        streams.jump_table("xoshiro256++", 0)
    with pytest.raises(ValueError, match="digit_bits"):
        streams.jump_table("xoshiro256++", 10, digit_bits=13)


def test_gf2_basics(rng):
    a, b = int(rng.integers(1, 2**62)), int(rng.integers(1, 2**62))
    assert gf2.square(a) == gf2.mul(a, a)
    p = streams.charpoly("xoroshiro64*")
    assert gf2.mulmod(a, b, p) == gf2.mod(gf2.mul(a, b), p)
    assert gf2.powmod_x(2**20, p) == gf2.x_pow2_mod(20, p)
    assert gf2.mod(gf2.gcd(gf2.mul(a, p), gf2.mul(b, p)), p) == 0  # P divides the gcd
    assert gf2.berlekamp_massey([1, 0, 1, 0, 1, 0]) == 0b101  # s_i = s_(i-2): x^2 + 1
    with pytest.raises(ValueError):
        gf2.is_irreducible(0b1011)  # degree 3
    with pytest.raises(ZeroDivisionError):
        gf2.mod(5, 0)
