"""gpu_rand inside your own kernels: one thread's generator as a tuple of registers.

A kernel loads its thread's state from a (words, streams) states array (the layout
`Generator.device_states` and `stream_states` produce), draws with the functions of a
`DeviceRng`, and stores the state back so the next launch goes on where this one stopped.
Every function takes the state and returns ``(value..., new state)``; the same code runs
compiled (`@cupric.kernel`, `@cupric.device_function`) and on the simulator.

Examples
--------
>>> import cupric
>>> from cupric.device import grid
>>> from cupric.types import f32
>>> from cupric.gpu_rand.device_rng import device_rng
>>> rng = device_rng("xoshiro256**")
>>> @cupric.kernel
... def noisy(states, out):
...     t = grid(1)
...     if t < out.size:
...         st = rng.load(states, t)
...         u, st = rng.uniform_f32(st)
...         z0, z1, st = rng.normal2_f32(st)
...         k, st = rng.integers(st, 0, 6)
...         out[t] = u + z0 + z1 + f32(k)
...         rng.store(states, t, st)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from cupric.compiler.kernel import device_function
from cupric.device import math as device_math
from cupric.types import f32, f64, i64, u32, u64

from . import algorithms as _alg
from . import device as _prim

__all__ = ["DeviceRng", "device_rng", "splitmix64", "u32_to_f32", "u64_to_f64",
           "box_muller_f32", "box_muller_f64"]

_F32_SCALE = f32(2.0 ** -24)
_F64_SCALE = f64(2.0 ** -53)
# SplitMix64's Weyl increment and finalizer multipliers (`splitmix`), as u64 constants.
_PHI = u64(0x9E3779B97F4A7C15)
_M1 = u64(0xBF58476D1CE4E5B9)
_M2 = u64(0x94D049BB133111EB)


@device_function
def splitmix64(counter):
    """(output, next counter) of SplitMix64: the host `SplitMix64.next_u64`."""
    z = counter + _PHI
    counter = z
    z = (z ^ (z >> 30)) * _M1
    z = (z ^ (z >> 27)) * _M2
    return z ^ (z >> 31), counter


# ---- conversions of raw draws (shared by every generator and by the library fills) ------

@device_function
def u32_to_f32(x):
    """Uniform f32 in [0, 1) from a u32: the top 24 bits times 2^-24 (exact)."""
    return f32(x >> 8) * _F32_SCALE


@device_function
def u64_to_f64(x):
    """Uniform f64 in [0, 1) from a u64: the top 53 bits times 2^-53 (exact)."""
    return f64(x >> 11) * _F64_SCALE


@device_function
def box_muller_f32(x1, x2):
    """(r cos 2 pi u2, r sin 2 pi u2), r = sqrt(-2 ln u1), u = 1 - U in (0, 1].

    sincospi(2 u2) instead of sin/cos(f32(2 pi) * u2): 2 u2 is exact in f32, so the angle
    carries no rounding of 2 pi and of the product (up to 4e-7 rad, i.e. 2.3e-6 in z for
    |z| near 5.77), and libdevice's sincospif needs no Payne-Hanek reduction, so it is
    branch-free and keeps no local-memory buffer.
    """
    u1 = f32(1.0) - f32(x1 >> 8) * _F32_SCALE
    u2 = f32(1.0) - f32(x2 >> 8) * _F32_SCALE
    r = math.sqrt(f32(-2.0) * math.log(u1))
    sin_t, cos_t = device_math.sincospi(f32(2.0) * u2)
    return r * cos_t, r * sin_t


@device_function
def box_muller_f64(x1, x2):
    """The float64 pair from two 53-bit uniforms (see `box_muller_f32`)."""
    u1 = 1.0 - f64(x1 >> 11) * _F64_SCALE
    u2 = 1.0 - f64(x2 >> 11) * _F64_SCALE
    r = math.sqrt(-2.0 * math.log(u1))
    sin_t, cos_t = device_math.sincospi(2.0 * u2)
    return r * cos_t, r * sin_t


def _lemire32(draw):
    @device_function
    def lemire32(st, span, threshold):
        """One integer in [0, span) from u32 draws (1 <= span <= 2^32); threshold =
        (2^32 - span) mod span. Rejection keeps it unbiased, as `fill_integers`."""
        x, st = draw(st)
        m = u64(x) * span
        while (m & 0xFFFFFFFF) < threshold:
            x, st = draw(st)
            m = u64(x) * span
        return m >> 32, st
    return lemire32


def _lemire64(draw):
    @device_function
    def lemire64(st, span, threshold):
        """One integer in [0, span) from u64 draws; span 0 stands for 2^64; threshold =
        (2^64 - span) mod span (the 128-bit product's low half is x * span mod 2^64)."""
        x, st = draw(st)
        value = x
        if span:
            lo = x * span
            while lo < threshold:
                x, st = draw(st)
                lo = x * span
            value = _prim.mulhi64(x, span)
        return value, st
    return lemire64


@device_function
def _splitmix_pair(counter):
    """Two SplitMix64 outputs and the next counter."""
    a, counter = splitmix64(counter)
    b, counter = splitmix64(counter)
    return a, b, counter


def _seeder(alg: _alg.Algorithm):
    """seed_from_u64(seed) -> state: rand_xoshiro's seeding (SplitMix64 outputs as the
    little-endian byte seed; an all-zero state becomes seed 0's), as `seed_words`."""
    n64 = alg.seed_bytes // 8

    if alg.word_bits == 64 and n64 == 2:
        @device_function
        def raw(c):
            a, b, c = _splitmix_pair(c)
            return (a, b), a | b
    elif alg.word_bits == 64 and n64 == 4:
        @device_function
        def raw(c):
            a, b, c = _splitmix_pair(c)
            d, e, c = _splitmix_pair(c)
            return (a, b, d, e), a | b | d | e
    elif alg.word_bits == 64:
        @device_function
        def raw(c):
            a, b, c = _splitmix_pair(c)
            d, e, c = _splitmix_pair(c)
            f, g, c = _splitmix_pair(c)
            h, k, c = _splitmix_pair(c)
            return (a, b, d, e, f, g, h, k), a | b | d | e | f | g | h | k
    elif n64 == 1:  # 32-bit words: each output is (low word, high word), little-endian
        @device_function
        def raw(c):
            a, c = splitmix64(c)
            return (u32(a), u32(a >> 32)), a
    else:
        @device_function
        def raw(c):
            a, b, c = _splitmix_pair(c)
            return (u32(a), u32(a >> 32), u32(b), u32(b >> 32)), a | b

    @device_function
    def seed_from_u64(seed):
        st, any_bits = raw(u64(seed))
        if any_bits == 0:  # the one seed whose state would be all zero: as the crate
            st, any_bits = raw(u64(0))
        return st

    return seed_from_u64


# ---- the per-generator API --------------------------------------------------------------

@dataclass(frozen=True)
class DeviceRng:
    """The kernel-callable functions of one generator (every attribute a device function).

    Attributes
    ----------
    algorithm : Algorithm
        The generator (`words` state words of `word_bits` bits).
    load(states, t) -> state
        Thread t's state: column t of the (words, streams) states array.
    seed_from_u64(seed) -> state
        A fresh state, as `BitGenerator.seed_from_u64(seed)` (SplitMix64; seed is taken
        as u64): counter-based use without a states array, e.g. one generator per pixel
        and sample from a key that packs both. Streams seeded from different keys are
        not guaranteed disjoint, as jumped streams are; prefer `load` for long runs.
    store(states, t, state)
        Write it back (do this before the kernel ends, or the next launch repeats draws).
    next_u32(state) -> (u32, state), next_u64(state) -> (u64, state)
        rand_xoshiro's outputs, bit for bit (`BitGenerator.next_u32` / `next_u64`).
    uniform_f32(state) -> (f32, state), uniform_f64(state) -> (f64, state)
        [0, 1): 24 bits of one next_u32 / 53 bits of one next_u64, exact, as
        `Generator.random` with dtype float32 / float64.
    normal2_f32(state) -> (f32, f32, state), normal2_f64(state) -> (f64, f64, state)
        A Box–Muller pair (cos, sin) from two draws, in the order of `Generator.normal`.
    normal_f32(state) -> (f32, state), normal_f64(state) -> (f64, state)
        The first value of a pair (two draws; the second value is dropped).
    exponential_f32(state) -> (f32, state), exponential_f64(state) -> (f64, state)
        -ln(1 - U), as `Generator.standard_exponential`.
    integers(state, low, high) -> (i64, state)
        Uniform in [low, high) without modulo bias (Lemire), the values
        `Generator.integers(low, high)` gives: u32 draws for spans up to 2^32, u64 draws
        above. high <= low returns low and draws nothing.
    lemire32(state, span, threshold), lemire64(state, span, threshold) -> (u64, state)
        The steps of `integers` for a precomputed threshold = (2^bits - span) mod span
        (the library's integer fills hoist it out of their loops).

    Notes
    -----
    Integers, bits and uniforms equal the host half's bit for bit. Normal and exponential
    values go through libdevice's log, sqrt and sincospi, each within an ulp or two, where
    the host evaluates in float64: equal to a few ulp, not bit for bit.
    """

    algorithm: _alg.Algorithm
    load: object
    store: object
    seed_from_u64: object
    next_u32: object
    next_u64: object
    uniform_f32: object
    uniform_f64: object
    normal2_f32: object
    normal2_f64: object
    normal_f32: object
    normal_f64: object
    exponential_f32: object
    exponential_f64: object
    integers: object
    lemire32: object
    lemire64: object

    def __repr__(self) -> str:
        return f"<cupric.gpu_rand device generator {self.algorithm.name}>"

    @property
    def name(self) -> str:
        return self.algorithm.name


@functools.cache
def device_rng(algorithm) -> DeviceRng:
    """The `DeviceRng` of a generator name (any name `algorithms.get` accepts).

    Raises
    ------
    KeyError
        For an unknown generator (the message lists the known ones).
    """
    da = _prim.device_algorithm(algorithm)
    draw32, draw64 = da.u32, da.u64

    @device_function
    def uniform_f32(st):
        x, st = draw32(st)
        return u32_to_f32(x), st

    @device_function
    def uniform_f64(st):
        x, st = draw64(st)
        return u64_to_f64(x), st

    @device_function
    def normal2_f32(st):
        x1, st = draw32(st)
        x2, st = draw32(st)
        c, s = box_muller_f32(x1, x2)
        return c, s, st

    @device_function
    def normal2_f64(st):
        x1, st = draw64(st)
        x2, st = draw64(st)
        c, s = box_muller_f64(x1, x2)
        return c, s, st

    @device_function
    def normal_f32(st):
        c, s, st = normal2_f32(st)
        return c, st

    @device_function
    def normal_f64(st):
        c, s, st = normal2_f64(st)
        return c, st

    @device_function
    def exponential_f32(st):
        x, st = draw32(st)
        return -math.log(f32(1.0) - u32_to_f32(x)), st

    @device_function
    def exponential_f64(st):
        x, st = draw64(st)
        return -math.log(1.0 - u64_to_f64(x)), st

    lemire32 = _lemire32(draw32)
    lemire64 = _lemire64(draw64)

    @device_function
    def integers(st, low, high):
        value = i64(low)
        if high > low:
            span = u64(i64(high) - i64(low))
            base = u64(value)
            if span <= u64(0x100000000):
                threshold = (u64(0x100000000) - span) % span
                r, st = lemire32(st, span, threshold)
                value = i64(base + r)
            else:
                threshold = (u64(0) - span) % span
                r, st = lemire64(st, span, threshold)
                value = i64(base + r)
        return value, st

    return DeviceRng(da.algorithm, da.load, da.store, _seeder(da.algorithm), draw32, draw64,
                     uniform_f32, uniform_f64, normal2_f32, normal2_f64, normal_f32,
                     normal_f64, exponential_f32, exponential_f64, integers, lemire32,
                     lemire64)
