"""Non-overlapping per-thread streams: stream i starts i jumps after stream 0.

A generator's engine is a linear map T on GF(2)^n with characteristic polynomial P, so
d steps are p(T) with p = x^d mod P. Here live P itself (found by Berlekamp–Massey), jump
polynomials for any distance, the powers J^(2^k) and base-2^b digit tables of the jump J
that let every stream start be computed at once, and the host's parallel initializer.
"""

from __future__ import annotations

import functools

import numpy as np

from . import algorithms as _alg
from . import gf2
from .host import BitGenerator, apply_polynomial

__all__ = ["charpoly", "jump_polynomial", "stream_log2", "jump_power_polynomials",
           "poly_to_words", "words_to_poly", "stream_states", "jump_table",
           "stream_states_from_table", "max_streams"]


@functools.cache
def charpoly(algorithm) -> int:
    """The characteristic polynomial of the generator's engine (degree = state bits).

    Found with Berlekamp–Massey on bit 0 of word 0 over 2n steps. The authors prove the
    polynomial primitive, so every nonzero bit sequence of the engine has it as its
    minimal polynomial; `tests/gpu_rand` checks the degree and irreducibility (Rabin).
    """
    alg = _alg.get(algorithm)
    n = alg.state_bits
    gen = BitGenerator.seed_from_u64(alg, 0x5EED)
    bits = []
    one = alg.dtype.type(1)
    for _ in range(2 * n):
        bits.append(int(gen.state[0, 0] & one))
        _alg.engine_step(alg, gen.state)
    poly = gf2.berlekamp_massey(bits)
    if gf2.degree(poly) != n:
        raise ArithmeticError(f"{alg.name}: minimal polynomial of degree {gf2.degree(poly)}, "
                              f"expected {n}")
    return poly


def jump_polynomial(algorithm, steps: int) -> int:
    """x^steps mod P: the polynomial that advances a state by `steps` engine steps.

    Apply it with `BitGenerator.advance` (host) or the device half's jump function. The
    published ``jump`` polynomial of a generator equals ``jump_polynomial(alg, 2**jump_log2)``.
    """
    return gf2.powmod_x(steps, charpoly(algorithm))


def stream_log2(algorithm) -> int:
    """log2 of the distance between consecutive streams: the generator's ``jump``, or half
    the state size for the xoroshiro64 pair, which publish no jump."""
    alg = _alg.get(algorithm)
    return alg.jump_log2 if alg.jump_log2 is not None else alg.state_bits // 2


def max_streams(algorithm, distance_log2: int | None = None) -> int:
    """How many disjoint streams of length 2^distance_log2 fit in the period 2^n - 1."""
    alg = _alg.get(algorithm)
    d = stream_log2(alg) if distance_log2 is None else distance_log2
    return ((1 << alg.state_bits) - 1) >> d


@functools.cache
def _power_polys(algorithm, distance_log2: int, count: int) -> tuple:
    p = charpoly(algorithm)
    q = gf2.x_pow2_mod(distance_log2, p)
    out = [q]
    for _ in range(count - 1):
        q = gf2.mod(gf2.square(q), p)
        out.append(q)
    return tuple(out)


def jump_power_polynomials(algorithm, count: int, distance_log2: int | None = None) -> list[int]:
    """[x^(D * 2^k) mod P for k in range(count)] with D = 2^distance_log2: the powers
    J^(2^k) of the jump J, each one squaring of the last."""
    alg = _alg.get(algorithm)
    d = stream_log2(alg) if distance_log2 is None else distance_log2
    return list(_power_polys(alg, d, count)) if count > 0 else []


def poly_to_words(algorithm, poly: int) -> np.ndarray:
    """A polynomial of degree < n as state-sized words, word 0 holding x^0..x^(w-1)."""
    alg = _alg.get(algorithm)
    mask = (1 << alg.word_bits) - 1
    return np.array([(poly >> (alg.word_bits * i)) & mask for i in range(alg.words)],
                    dtype=alg.dtype)


def words_to_poly(algorithm, words) -> int:
    """Inverse of `poly_to_words`."""
    alg = _alg.get(algorithm)
    return sum(int(w) << (alg.word_bits * i) for i, w in enumerate(words))


def _check_count(alg: _alg.Algorithm, n: int, d: int) -> None:
    if n < 1:
        raise ValueError(f"need at least one stream, got {n}")
    if n > max_streams(alg, d):
        raise ValueError(f"{alg.name}: {n} streams of 2^{d} steps do not fit in the period")


def stream_states(algorithm, base_state, n: int, distance_log2: int | None = None) -> np.ndarray:
    """States of streams 0..n-1: stream i is `base_state` advanced by i * 2^distance_log2.

    Vectorized by doubling: the states 2^k..2^(k+1)-1 are J^(2^k) applied to states
    0..2^k-1, so there are ceil(log2 n) polynomial applications, each over a whole block.

    Parameters
    ----------
    base_state : array_like
        Shape (words,) or (words, 1): stream 0.
    n : int
        Number of streams.
    distance_log2 : int, optional
        Stream length; default `stream_log2(algorithm)` (the generator's ``jump``).

    Returns
    -------
    numpy.ndarray
        Shape (words, n).

    Cost
    ----
    About n * state_bits engine steps of NumPy work in total (a second for 2^20 streams of
    xoshiro128); the device half does the same in a kernel.
    """
    alg = _alg.get(algorithm)
    d = stream_log2(alg) if distance_log2 is None else distance_log2
    _check_count(alg, n, d)
    base = np.asarray(base_state, dtype=alg.dtype).reshape(alg.words)
    out = np.empty((alg.words, n), dtype=alg.dtype)
    out[:, 0] = base
    polys = jump_power_polynomials(alg, max(1, (n - 1).bit_length()), d)
    filled, k = 1, 0
    while filled < n:
        m = min(filled, n - filled)
        out[:, filled:filled + m] = apply_polynomial(alg, out[:, :m], polys[k])
        filled += m
        k += 1
    return out


@functools.cache
def _table(alg: _alg.Algorithm, levels: int, digit_bits: int, d: int) -> np.ndarray:
    radix = 1 << digit_bits
    p = charpoly(alg)
    table = np.zeros((levels, radix, alg.words), dtype=alg.dtype)
    for level in range(levels):
        # base = J^(radix^level) = x^(D * 2^(digit_bits*level)); entry j = base^j.
        base = gf2.x_pow2_mod(d + digit_bits * level, p)
        entry = 1
        for j in range(radix):
            table[level, j] = poly_to_words(alg, entry)
            entry = gf2.mulmod(entry, base, p)
    table.setflags(write=False)
    return table


def jump_table(algorithm, n: int, digit_bits: int = 8,
               distance_log2: int | None = None) -> np.ndarray:
    """Digit tables of jump powers, for initializing n streams in one kernel launch.

    ``table[l, j]`` holds (as state words) the polynomial of J^(j * 2^(digit_bits*l)).
    Stream i writes i in base 2^digit_bits and applies one table entry per nonzero digit,
    so each thread runs at most ``levels * state_bits`` engine steps, independently of
    every other thread (entry 0 is the identity, x^0).

    Returns
    -------
    numpy.ndarray
        Read-only, shape (levels, 2^digit_bits, words), levels = ceil(log2(n)/digit_bits).

    Cost
    ----
    levels * 2^digit_bits polynomial multiplications on the host, cached per arguments
    (a fraction of a second for xoshiro512 at the default 8 bits).
    """
    alg = _alg.get(algorithm)
    d = stream_log2(alg) if distance_log2 is None else distance_log2
    _check_count(alg, n, d)
    if not 1 <= digit_bits <= 12:
        raise ValueError(f"digit_bits must be in 1..12, got {digit_bits}")
    levels = max(1, -(-max(1, (n - 1).bit_length()) // digit_bits))
    return _table(alg, levels, digit_bits, d)


def stream_states_from_table(algorithm, base_state, indices, table: np.ndarray) -> np.ndarray:
    """Host version of the device initializer: stream i's state from the digit table.

    The reference the device kernel is tested against; `stream_states` is faster on the host.
    """
    alg = _alg.get(algorithm)
    levels, radix, _ = table.shape
    digit_bits = radix.bit_length() - 1
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    base = np.asarray(base_state, dtype=alg.dtype).reshape(alg.words, 1)
    out = np.repeat(base, indices.size, axis=1)
    for level in range(levels):
        digits = (indices >> (digit_bits * level)) & (radix - 1)
        for j in np.unique(digits):
            if j == 0:
                continue
            sel = digits == j
            out[:, sel] = apply_polynomial(alg, out[:, sel], words_to_poly(alg, table[level, j]))
    return out
