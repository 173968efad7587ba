"""gpu_rand's host engines, seeding and jumps at their edges: state shapes and all-zero
states, seeds of exactly the seed size and one byte less, counters that wrap, zero-step
and full-period jumps, the stream-count limit exactly and one past, digit tables at the
level boundaries, and the GF(2) arithmetic under them (checked against brute force).

A wrong jump or a stream limit off by one makes streams overlap: nothing fails, the
random numbers are just correlated. So each rule is checked where it switches.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from cupric.gpu_rand import algorithms as A
from cupric.gpu_rand import gf2, host, splitmix, streams
from cupric.gpu_rand.host import GENERATORS, BitGenerator

M64 = (1 << 64) - 1


# -- the class of each generator ----------------------------------------------------------------

@pytest.mark.parametrize("name", ["xoroshiro64**", "xoshiro128+", "xoshiro256++", "xoroshiro128**"])
@pytest.mark.parametrize("fresh", [False, True], ids=["module", "factory"])
def test_each_generator_class_keeps_its_type_and_algorithm(name, fresh):
    alg = A.get(name)
    # The module's class, and one the factory makes now (the same code, run in the test).
    cls = host._make_class(alg) if fresh else GENERATORS[name]
    assert cls.__name__ == alg.class_name and issubclass(cls, BitGenerator)
    assert cls.__module__ == "cupric.gpu_rand.host"
    assert cls.__doc__ == (f"{name}: {alg.words} x {alg.word_bits}-bit state, vectorized "
                           f"(see `BitGenerator`).")
    g = cls.seed_from_u64([1, 2, 3])
    assert type(g) is cls and len(g) == 3 and g.algorithm is alg
    assert g == BitGenerator.seed_from_u64(name, [1, 2, 3])
    seed = bytes(range(1, alg.seed_bytes + 1))
    s = cls.from_seed(seed)
    assert type(s) is cls and s == BitGenerator.from_seed(name, seed)
    t = cls.from_state(g.state)
    assert type(t) is cls and t == g and t.state is not g.state
    c = g.copy()
    assert type(c) is cls and c == g
    c.next_u64()
    assert c != g                                    # a copy advances on its own
    for index, n in ((0, 1), (-1, 1), (slice(0, 2), 2), ([2, 0], 2), (slice(1, 1), 0)):
        part = g[index]
        assert type(part) is cls and len(part) == n
    assert np.array_equal(g[[2, 0]].state, g.state[:, [2, 0]])
    assert np.array_equal(g[-1].state, g.state[:, 2:])
    assert cls(g.state, algorithm=name) == g
    assert cls(g.state, algorithm=alg.class_name) == g
    other = "xoshiro512**"
    with pytest.raises(ValueError, match=re.escape(f"{alg.class_name} cannot hold '{other}'")):
        cls(g.state, algorithm=other)


def test_generators_of_different_algorithms_are_never_equal():
    a = BitGenerator("xoshiro128+", [[1], [2], [3], [4]])
    b = BitGenerator("xoshiro128++", [[1], [2], [3], [4]])
    assert a != b and a == BitGenerator("xoshiro128+", [[1], [2], [3], [4]])
    assert a != a.state and (a == "xoshiro128+") is False
    assert BitGenerator("xoshiro128+", [[1], [2], [3], [5]]) != a


# -- states ---------------------------------------------------------------------------------------

def test_states_take_their_words_dtype_and_are_copied():
    state = [1, 2, 3, 0xFFFFFFFF]
    g = BitGenerator("xoshiro128**", state)
    assert g.state.dtype == np.uint32 and g.state.shape == (4, 1)
    assert g.state[:, 0].tolist() == state
    arr = np.array([[5, 6], [7, 8], [9, 10], [11, 12]], np.uint32)
    g = BitGenerator("xoshiro128**", arr)
    arr[0, 0] = 99
    assert g.state[0, 0] == 5
    wide = BitGenerator("xoshiro256**", [[M64], [1], [0], [0]])
    assert wide.state.dtype == np.uint64 and int(wide.state[0, 0]) == M64


@pytest.mark.parametrize("shape", [(3, 1), (5, 2), (4, 1, 1), (2, 4)])
def test_state_shapes_refused(shape):
    with pytest.raises(ValueError, match=r"Xoshiro128Plus state must have shape \(4, n\), got"):
        BitGenerator("xoshiro128+", np.ones(shape, np.uint32))


def test_one_all_zero_generator_among_others_is_refused():
    with pytest.raises(ValueError, match="an all-zero state never leaves zero"):
        BitGenerator("xoroshiro64*", [[1, 0, 2], [1, 0, 0]])
    # A single set bit anywhere is a valid state.
    assert len(BitGenerator("xoroshiro64*", [[0, 0], [1, 1 << 31]])) == 2


# -- seeds ----------------------------------------------------------------------------------------

def _splitmix_reference(x):
    """SplitMix64's next_u64 in plain Python: (new counter, output)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


def _splitmix_u32_reference(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 33)) * 0x62A9D9ED799705F5) & M64
    z = ((z ^ (z >> 28)) * 0xCB24D0A5C88C35B3) & M64
    return x, z >> 32


COUNTERS = [0, 1, M64, M64 - 0x9E3779B97F4A7C15, M64 - 0x9E3779B97F4A7C15 + 1, 1 << 63]


def test_splitmix_counters_wrap_at_2_64():
    sm = splitmix.SplitMix64(np.array(COUNTERS, np.uint64))
    sm32 = splitmix.SplitMix64(np.array(COUNTERS, np.uint64))
    expected, expected32 = list(COUNTERS), list(COUNTERS)
    for _ in range(3):
        outs = []
        for i, x in enumerate(expected):
            expected[i], out = _splitmix_reference(x)
            outs.append(out)
        assert sm.next_u64().tolist() == outs
        outs32 = []
        for i, x in enumerate(expected32):
            expected32[i], out = _splitmix_u32_reference(x)
            outs32.append(out)
        got = sm32.next_u32()
        assert got.dtype == np.uint32 and got.tolist() == outs32
    assert splitmix.splitmix64_mix([1, 2]).tolist() == splitmix.splitmix64_mix(
        np.array([1, 2], np.uint64)).tolist()
    assert splitmix.splitmix64_mix([1]).dtype == np.uint64


@pytest.mark.parametrize("seed, same", [(-1, M64), (1 << 64, 0), ((1 << 64) + 5, 5),
                                        (np.uint64(M64), M64), (np.int8(-1), M64)])
def test_python_int_seeds_are_taken_modulo_2_64(seed, same):
    assert BitGenerator.seed_from_u64("xoshiro256++", seed) == \
        BitGenerator.seed_from_u64("xoshiro256++", same)


def test_seed_arrays_flatten_and_must_be_integers():
    g = BitGenerator.seed_from_u64("xoshiro128++", [[1, 2], [3, 4]])
    assert len(g) == 4 and g == BitGenerator.seed_from_u64("xoshiro128++", [1, 2, 3, 4])
    assert len(splitmix.SplitMix64([[1, 2], [3, 4]])) == 4
    for bad in ([1.0, 2.0], np.array([True])):
        with pytest.raises(TypeError, match="seeds must be integers, got dtype"):
            splitmix.SplitMix64(bad)


@pytest.mark.parametrize("name", ["xoroshiro64*", "xoshiro256**", "xoshiro512+"])
def test_byte_seeds_of_exactly_the_seed_size(name):
    alg = A.get(name)
    raw = bytes(range(7, 7 + alg.seed_bytes))
    g = BitGenerator.from_seed(name, raw)
    words = np.frombuffer(raw, dtype=alg.dtype.newbyteorder("<")).astype(alg.dtype)
    assert np.array_equal(g.state[:, 0], words)
    # The same bytes as a list, a 1-d array, a bytearray, or one row of a 2-d array.
    for form in (list(raw), np.frombuffer(raw, np.uint8), bytearray(raw), memoryview(raw),
                 [list(raw)], np.frombuffer(raw, np.uint8)[None, :]):
        assert BitGenerator.from_seed(name, form) == g
    two = BitGenerator.from_seed(name, [list(raw), list(raw[::-1])])
    assert len(two) == 2 and two[0] == g
    for short in (raw[:-1], list(raw) + [0], [list(raw[:-1])], raw * 2):
        with pytest.raises(ValueError, match=re.escape(
                f"{alg.class_name} takes {alg.seed_bytes}-byte seeds, got an array of shape")):
            BitGenerator.from_seed(name, short)


def test_all_zero_byte_seeds_become_seed_zero_row_by_row():
    alg = A.get("xoshiro128+")
    zero = BitGenerator.seed_from_u64("xoshiro128+", 0)
    rows = np.zeros((3, alg.seed_bytes), np.uint8)
    rows[1, -1] = 1                                   # one bit set: kept as given
    g = BitGenerator.from_seed("xoshiro128+", rows)
    assert g[0] == zero and g[2] == zero
    assert g.state[:, 1].tolist() == [0, 0, 0, 1 << 24]


# -- outputs --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["xoshiro128++", "xoshiro256+", "xoroshiro128++"])
def test_outputs_in_blocks_equal_one_at_a_time(name):
    g = BitGenerator.seed_from_u64(name, [3, 4])
    h = g.copy()
    block32 = g.next_u32(size=3)
    assert block32.dtype == np.uint32 and block32.shape == (3, 2)
    assert np.array_equal(block32, np.stack([h.next_u32() for _ in range(3)]))
    block64 = g.next_u64(size=2)
    assert block64.dtype == np.uint64 and block64.shape == (2, 2)
    assert np.array_equal(block64, np.stack([h.next_u64() for _ in range(2)]))
    assert g.next_u64(size=0).shape == (0, 2) and g == h
    assert h.next_u32().dtype == np.uint32


def test_u32_of_64_bit_generators_takes_the_crates_half():
    for name, half in (("xoshiro256+", "high"), ("xoroshiro128++", "low")):
        g = BitGenerator.seed_from_u64(name, 11)
        x = int(g.copy().next_u64()[0])
        want = x >> 32 if half == "high" else x & 0xFFFFFFFF
        assert int(g.next_u32()[0]) == want


# -- jumps and polynomials ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["xoroshiro64**", "xoshiro128+"])
def test_polynomials_of_zero_one_and_the_full_period(name):
    alg = A.get(name)
    g = BitGenerator.seed_from_u64(name, [5, 6])
    stepped = g.copy()
    stepped.next_u32()                                # one engine step for 32-bit words
    assert np.array_equal(host.apply_polynomial(alg, g.state, 1), g.state)
    assert not host.apply_polynomial(alg, g.state, 0).any()
    assert np.array_equal(host.apply_polynomial(alg, g.state, 2), stepped.state)
    assert streams.jump_polynomial(name, 0) == 1
    assert streams.jump_polynomial(name, 1) == 2
    period = (1 << alg.state_bits) - 1                # the engine's period (primitive P)
    assert streams.jump_polynomial(name, period) == 1
    assert streams.jump_polynomial(name, period + 1) == 2
    # A Python list of words is a state too, in the engine's word type.
    as_list = g.state.tolist()
    out = host.apply_polynomial(alg, as_list, 0b1011)
    assert out.dtype == alg.dtype
    assert np.array_equal(out, host.apply_polynomial(alg, g.state, 0b1011))


def test_generators_without_published_jumps_say_so():
    g = BitGenerator.seed_from_u64("xoroshiro64*", 1)
    with pytest.raises(NotImplementedError, match="Xoroshiro64Star has no jump: "):
        g.jump()
    with pytest.raises(NotImplementedError, match="Xoroshiro64Star has no long_jump: "):
        g.long_jump()


def test_stream_distances():
    assert streams.stream_log2("xoroshiro64**") == 32
    assert streams.stream_log2("xoshiro256++") == 128
    assert streams.max_streams("xoroshiro64**") == (M64 >> 32)
    assert streams.max_streams("xoroshiro64**", 0) == M64          # the whole period
    assert streams.max_streams("xoroshiro64**", 63) == 1
    assert streams.max_streams("xoshiro256++", 200) == ((1 << 256) - 1) >> 200


def test_stream_counts_exactly_at_the_limit_and_one_past():
    name = "xoroshiro64**"
    with pytest.raises(ValueError, match="need at least one stream, got 0"):
        streams.stream_states(name, [1, 2], 0)
    with pytest.raises(ValueError, match="need at least one stream, got -1"):
        streams.jump_table(name, -1)
    assert streams.stream_states(name, [1, 2], 1).tolist() == [[1], [2]]
    limit = streams.max_streams(name)                               # 2^32 - 1
    assert streams.jump_table(name, limit, digit_bits=8).shape == (4, 256, 2)
    with pytest.raises(ValueError, match=re.escape(
            f"{name}: {limit + 1} streams of 2^32 steps do not fit in the period")):
        streams.jump_table(name, limit + 1)
    # With an explicit distance the limit is that distance's, not the default's.
    assert streams.stream_states(name, [1, 2], 1, distance_log2=63).shape == (2, 1)
    with pytest.raises(ValueError, match=r"2 streams of 2\^63 steps do not fit"):
        streams.stream_states(name, [1, 2], 2, distance_log2=63)
    with pytest.raises(ValueError, match=r"2 streams of 2\^63 steps do not fit"):
        streams.jump_table(name, 2, distance_log2=63)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9])
def test_stream_states_at_the_doubling_boundaries(n):
    name = "xoshiro128++"
    base = BitGenerator.seed_from_u64(name, 9)
    got = streams.stream_states(name, base.state.tolist(), n)   # (words, 1) as a list
    assert got.dtype == np.uint32 and got.shape == (4, n)
    g = base.copy()
    for i in range(n):
        assert np.array_equal(got[:, i], g.state[:, 0]), i
        g.jump()


def test_stream_states_with_an_explicit_distance():
    name = "xoroshiro64*"
    alg = A.get(name)
    base = np.array([3, 4], np.uint32)
    got = streams.stream_states(name, base, 4, distance_log2=5)
    g = BitGenerator(name, base)
    for i in range(4):
        assert np.array_equal(got[:, i], g.state[:, 0])
        g.advance(streams.jump_polynomial(alg, 32))


@pytest.mark.parametrize("n, digit_bits, levels", [
    (1, 8, 1), (2, 8, 1), (256, 8, 1), (257, 8, 2), (65536, 8, 2), (65537, 8, 3),
    (2, 1, 1), (3, 1, 2), (4, 1, 2), (5, 1, 3), (17, 2, 3), (4096, 12, 1), (4097, 12, 2),
])
def test_jump_table_levels_at_their_boundaries(n, digit_bits, levels):
    table = streams.jump_table("xoroshiro64**", n, digit_bits=digit_bits)
    assert table.shape == (levels, 1 << digit_bits, 2)
    assert not table.flags.writeable


def test_jump_table_defaults_and_digit_limits():
    assert streams.jump_table("xoroshiro64**", 3).shape == (1, 256, 2)
    for bad in (0, 13, -1):
        with pytest.raises(ValueError, match=f"digit_bits must be in 1..12, got {bad}"):
            streams.jump_table("xoroshiro64**", 3, digit_bits=bad)


@pytest.mark.parametrize("digit_bits, distance", [(2, None), (3, 7), (1, None)])
def test_table_initialization_equals_repeated_jumps(digit_bits, distance):
    name = "xoroshiro64**"
    alg = A.get(name)
    n = 19
    base = [[11], [12]]
    table = streams.jump_table(name, n, digit_bits=digit_bits, distance_log2=distance)
    d = streams.stream_log2(alg) if distance is None else distance
    assert np.array_equal(table[0, 0], [1, 0])                       # x^0: identity
    assert streams.words_to_poly(alg, table[0, 1]) == gf2.x_pow2_mod(d, streams.charpoly(alg))
    indices = np.arange(n).reshape(-1, 1).tolist()                   # nested: flattened
    got = streams.stream_states_from_table(name, base, indices, table)
    want = streams.stream_states(name, np.array(base, np.uint32), n, distance_log2=d)
    assert got.dtype == np.uint32 and np.array_equal(got, want)
    some = streams.stream_states_from_table(name, base, [18, 0, 5], table)
    assert np.array_equal(some, want[:, [18, 0, 5]])


def test_jump_power_polynomials_of_count_zero_and_one():
    assert streams.jump_power_polynomials("xoshiro128+", 0) == []
    p = streams.charpoly("xoshiro128+")
    assert streams.jump_power_polynomials("xoshiro128+", 1) == [gf2.x_pow2_mod(64, p)]
    assert streams.jump_power_polynomials("xoshiro128+", 2, distance_log2=3) == [
        gf2.x_pow2_mod(3, p), gf2.x_pow2_mod(4, p)]


@pytest.mark.parametrize("name", ["xoroshiro64*", "xoshiro128+", "xoshiro256+"])
def test_polynomial_words_round_trip_at_word_edges(name):
    alg = A.get(name)
    w = alg.word_bits
    for poly in (0, 1, (1 << w) - 1, 1 << w, (1 << (w + 1)) - 1,
                 (1 << alg.state_bits) - 1, 1 << (alg.state_bits - 1)):
        words = streams.poly_to_words(alg, poly)
        assert words.dtype == alg.dtype and words.shape == (alg.words,)
        assert [int(x) for x in words] == [(poly >> (w * i)) & ((1 << w) - 1)
                                           for i in range(alg.words)]
        assert streams.words_to_poly(name, words) == poly


# -- GF(2) ----------------------------------------------------------------------------------------

def test_gf2_products_and_remainders_at_zero_and_equal_degree():
    assert gf2.degree(0) == -1 and gf2.degree(1) == 0 and gf2.degree(0b100) == 2
    assert gf2.square(0) == 0 and gf2.square(1) == 1 and gf2.square(0b11) == 0b101
    assert gf2.square(0xFF) == 0x5555 and gf2.square(1 << 8) == 1 << 16
    assert gf2.mul(0, 0b101) == 0 and gf2.mul(0b11, 0b11) == 0b101
    assert gf2.mul(0b110, 0b11) == gf2.mul(0b11, 0b110) == 0b1010
    assert gf2.mod(0b1011, 0b1011) == 0                       # equal degree reduces
    assert gf2.mod(0b1010, 0b1011) == 0b1
    assert gf2.mod(0b111, 0b1011) == 0b111                    # lower degree: unchanged
    with pytest.raises(ZeroDivisionError):
        gf2.mod(5, 0)
    p = 0b10011                                               # x^4 + x + 1
    assert gf2.powmod_x(0, p) == 1 and gf2.powmod_x(4, p) == 0b0011
    assert gf2.powmod_x(15, p) == 1                           # primitive: period 15
    assert gf2.x_pow2_mod(0, p) == 0b10 and gf2.x_pow2_mod(2, p) == gf2.powmod_x(4, p)
    with pytest.raises(ValueError, match="exponent must be non-negative"):
        gf2.powmod_x(-1, p)
    assert gf2.gcd(0b101, 0b11) == 0b11 and gf2.gcd(p, 0b10) == 1 and gf2.gcd(7, 0) == 7


@pytest.mark.parametrize("p, irreducible", [
    (0b10, True), (0b11, True),                     # degree 1
    (0b111, True), (0b101, False), (0b100, False),  # degree 2
    (0b10011, True), (0b11111, True),               # x^4+x+1; x^4+x^3+x^2+x+1 (not primitive)
    (0b10101, False), (0b10001, False),             # (x^2+x+1)^2; (x+1)^4
    (0x11B, True), (0x11D, True), (0x101, False),   # degree 8
])
def test_irreducibility_of_small_polynomials(p, irreducible):
    assert gf2.is_irreducible(p) is irreducible


@pytest.mark.parametrize("p", [1, 0b1011, 0b101011])        # degrees 0, 3, 5
def test_irreducibility_needs_a_power_of_two_degree(p):
    with pytest.raises(ValueError, match=f"degree {gf2.degree(p)} is not a power of two"):
        gf2.is_irreducible(p)


def _satisfies(poly: int, bits) -> bool:
    """Whether s[i] = c_1 s[i-1] + ... + c_L s[i-L] for poly = x^L + c_1 x^(L-1) + ..."""
    length = gf2.degree(poly)
    return all(
        sum(bits[i - j] for j in range(1, length + 1) if poly >> (length - j) & 1) % 2 == bits[i]
        for i in range(length, len(bits)))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_berlekamp_massey_finds_the_shortest_recurrence(n):
    # Every sequence of n bits: the result holds for the whole sequence and no
    # polynomial of lower degree does (brute force over all of them).
    for bits in itertools.product((0, 1), repeat=n):
        poly = gf2.berlekamp_massey(list(bits))
        assert gf2.degree(poly) >= 0 and poly >> gf2.degree(poly) == 1
        assert _satisfies(poly, bits), (bits, bin(poly))
        length = gf2.degree(poly)
        for shorter in range(length):
            assert not any(_satisfies((1 << shorter) | low, bits) for low in range(1 << shorter))


def test_berlekamp_massey_recovers_a_known_register():
    # x^4 + x + 1: s[i] = s[i-3] + s[i-4].
    bits = [1, 0, 0, 0]
    for i in range(4, 30):
        bits.append(bits[i - 3] ^ bits[i - 4])
    assert gf2.berlekamp_massey(bits) == 0b10011
    assert gf2.berlekamp_massey([0] * 10) == 1                # the zero sequence: degree 0
    assert gf2.degree(gf2.berlekamp_massey([0, 0, 0, 1])) == 4  # nothing shorter fits


def test_plain_bit_generators_index_and_rebuild_like_the_classes():
    g = BitGenerator("xoshiro128**", np.arange(1, 13, dtype=np.uint32).reshape(4, 3))
    assert type(g) is BitGenerator
    one = g[1]
    assert type(one) is BitGenerator and one.state.tolist() == [[2], [5], [8], [11]]
    two = g[0:2]
    assert type(two) is BitGenerator and two.state.shape == (4, 2)
    again = BitGenerator.from_state("xoshiro128**", g.state)
    assert type(again) is BitGenerator and again == g and again.algorithm is g.algorithm
    assert repr(g) == "<Xoshiro128StarStar x3>"


def test_byte_seeds_from_any_integer_array():
    alg = A.get("xoroshiro64**")
    raw = list(range(1, 9))
    want = BitGenerator.from_seed("xoroshiro64**", bytes(raw)).state
    assert np.array_equal(splitmix.state_from_seed_bytes(alg, [raw]), want)
    assert np.array_equal(splitmix.state_from_seed_bytes(alg, np.array([raw], np.int64)), want)
