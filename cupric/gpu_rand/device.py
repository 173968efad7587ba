"""The device half: xoshiro-family generators and fills written in the cupric kernel language.

A thread keeps its generator state in registers as a tuple of u32/u64 words, loaded from
and stored back to a (words, streams) state array; every function here returns the new
state rather than mutating it. Every function is a `@cupric.device_function`, declared
once here, so the same objects run on the simulator and compile into kernels (user
kernels reach them through `cupric.gpu_rand.device_rng`, which the fills below use too).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from cupric.compiler.kernel import device_function as _device
from cupric.device import unroll
from cupric.types import u32, u64

from . import algorithms as _alg

__all__ = ["DeviceAlgorithm", "device_algorithm", "kernel_function", "compiled_kernel",
           "KERNELS"]

# ---- state words in and out of registers ------------------------------------------------

@_device
def load2(states, t):
    return (states[0, t], states[1, t])


@_device
def load4(states, t):
    return (states[0, t], states[1, t], states[2, t], states[3, t])


@_device
def load8(states, t):
    return (states[0, t], states[1, t], states[2, t], states[3, t],
            states[4, t], states[5, t], states[6, t], states[7, t])


@_device
def store2(states, t, s):
    s0, s1 = s
    states[0, t] = s0
    states[1, t] = s1


@_device
def store4(states, t, s):
    s0, s1, s2, s3 = s
    states[0, t] = s0
    states[1, t] = s1
    states[2, t] = s2
    states[3, t] = s3


@_device
def store8(states, t, s):
    s0, s1, s2, s3, s4, s5, s6, s7 = s
    states[0, t] = s0
    states[1, t] = s1
    states[2, t] = s2
    states[3, t] = s3
    states[4, t] = s4
    states[5, t] = s5
    states[6, t] = s6
    states[7, t] = s7


@_device
def xor2(a, b):
    a0, a1 = a
    b0, b1 = b
    return (a0 ^ b0, a1 ^ b1)


@_device
def xor4(a, b):
    a0, a1, a2, a3 = a
    b0, b1, b2, b3 = b
    return (a0 ^ b0, a1 ^ b1, a2 ^ b2, a3 ^ b3)


@_device
def xor8(a, b):
    a0, a1, a2, a3, a4, a5, a6, a7 = a
    b0, b1, b2, b3, b4, b5, b6, b7 = b
    return (a0 ^ b0, a1 ^ b1, a2 ^ b2, a3 ^ b3, a4 ^ b4, a5 ^ b5, a6 ^ b6, a7 ^ b7)


# ---- linear engines --------------------------------------------------------------------
# Each family's members differ only in their constants: one factory per family, its
# constants closed over (so every shift count is still a literal to the compiler and a
# rotation still one funnel shift).

def _named(fn, name: str):
    fn.__name__ = fn.__qualname__ = name
    return _device(fn)


def _xoroshiro_step(name: str, a: int, b: int, c: int, bits: int):
    """The two-word xoroshiro engine with rotations a, c and shift b of `bits`-bit words."""
    def step(s):
        s0, s1 = s
        s1 = s1 ^ s0
        return (((s0 << a) | (s0 >> (bits - a))) ^ s1 ^ (s1 << b),
                (s1 << c) | (s1 >> (bits - c)))
    return _named(step, name)


def _xoshiro4_step(name: str, a: int, b: int, bits: int):
    """The four-word xoshiro engine with shift a and rotation b of `bits`-bit words."""
    def step(s):
        s0, s1, s2, s3 = s
        t = s1 << a
        s2 = s2 ^ s0
        s3 = s3 ^ s1
        s1 = s1 ^ s2
        s0 = s0 ^ s3
        s2 = s2 ^ t
        return (s0, s1, s2, (s3 << b) | (s3 >> (bits - b)))
    return _named(step, name)


xoroshiro128_step = _xoroshiro_step("xoroshiro128_step", 24, 16, 37, 64)
xoroshiro128pp_step = _xoroshiro_step("xoroshiro128pp_step", 49, 21, 28, 64)
xoroshiro64_step = _xoroshiro_step("xoroshiro64_step", 26, 9, 13, 32)
xoshiro128_step = _xoshiro4_step("xoshiro128_step", 9, 11, 32)
xoshiro256_step = _xoshiro4_step("xoshiro256_step", 17, 45, 64)


@_device
def xoshiro512_step(s):
    s0, s1, s2, s3, s4, s5, s6, s7 = s
    t = s1 << 11
    s2 = s2 ^ s0
    s5 = s5 ^ s1
    s1 = s1 ^ s2
    s7 = s7 ^ s3
    s3 = s3 ^ s4
    s4 = s4 ^ s5
    s0 = s0 ^ s6
    s6 = s6 ^ s7
    s6 = s6 ^ t
    return (s0, s1, s2, s3, s4, s5, s6, (s7 << 21) | (s7 >> 43))


# ---- outputs: each returns (value, new state), as next_u64 / next_u32 of rand_xoshiro ----
# The scramblers, on words i, j of the state: + is s[i] + s[j]; ++ is
# rotl(s[i] + s[j], r) + s[k]; ** is rotl(s[i] * 5, r) * 9.

def _plus(name: str, step, i: int, j: int):
    def next_native(s):
        return s[i] + s[j], step(s)
    return _named(next_native, name)


def _plusplus(name: str, step, i: int, j: int, r: int, k: int, bits: int):
    def next_native(s):
        x = s[i] + s[j]
        return ((x << r) | (x >> (bits - r))) + s[k], step(s)
    return _named(next_native, name)


def _starstar(name: str, step, i: int, r: int, bits: int):
    def next_native(s):
        x = s[i] * 5
        return ((x << r) | (x >> (bits - r))) * 9, step(s)
    return _named(next_native, name)


xoroshiro128p_u64 = _plus("xoroshiro128p_u64", xoroshiro128_step, 0, 1)
xoroshiro128pp_u64 = _plusplus("xoroshiro128pp_u64", xoroshiro128pp_step, 0, 1, 17, 0, 64)
xoroshiro128ss_u64 = _starstar("xoroshiro128ss_u64", xoroshiro128_step, 0, 7, 64)
xoshiro128p_u32 = _plus("xoshiro128p_u32", xoshiro128_step, 0, 3)
xoshiro128pp_u32 = _plusplus("xoshiro128pp_u32", xoshiro128_step, 0, 3, 7, 0, 32)
xoshiro128ss_u32 = _starstar("xoshiro128ss_u32", xoshiro128_step, 1, 7, 32)
xoshiro256p_u64 = _plus("xoshiro256p_u64", xoshiro256_step, 0, 3)
xoshiro256pp_u64 = _plusplus("xoshiro256pp_u64", xoshiro256_step, 0, 3, 23, 0, 64)
xoshiro256ss_u64 = _starstar("xoshiro256ss_u64", xoshiro256_step, 1, 7, 64)
xoshiro512p_u64 = _plus("xoshiro512p_u64", xoshiro512_step, 0, 2)
xoshiro512pp_u64 = _plusplus("xoshiro512pp_u64", xoshiro512_step, 0, 2, 17, 2, 64)
xoshiro512ss_u64 = _starstar("xoshiro512ss_u64", xoshiro512_step, 1, 7, 64)


@_device
def xoroshiro64s_u32(s):
    s0, s1 = s
    return s0 * 0x9E3779BB, xoroshiro64_step(s)


@_device
def xoroshiro64ss_u32(s):
    s0, s1 = s
    x = s0 * 0x9E3779BB
    return ((x << 5) | (x >> 27)) * 5, xoroshiro64_step(s)


# The other width of each output, made from the native one, once per generator: 64-bit
# generators give the high 32 bits (xoroshiro128+, every xoshiro256/512) or the low 32
# bits (xoroshiro128++ and **), as the host half does; 32-bit generators give two draws,
# the first in the low half.

def _u32_from_u64(next_u64, name: str, high: bool):
    if high:
        def next_u32(s):
            x, s = next_u64(s)
            return u32(x >> 32), s
    else:
        def next_u32(s):
            x, s = next_u64(s)
            return u32(x), s
    return _named(next_u32, name)


def _u64_from_u32(next_u32, name: str):
    def next_u64(s):
        lo, s = next_u32(s)
        hi, s = next_u32(s)
        return u64(lo) | (u64(hi) << 32), s
    return _named(next_u64, name)


xoroshiro128p_u32 = _u32_from_u64(xoroshiro128p_u64, "xoroshiro128p_u32", high=True)
xoshiro256p_u32 = _u32_from_u64(xoshiro256p_u64, "xoshiro256p_u32", high=True)
xoshiro256pp_u32 = _u32_from_u64(xoshiro256pp_u64, "xoshiro256pp_u32", high=True)
xoshiro256ss_u32 = _u32_from_u64(xoshiro256ss_u64, "xoshiro256ss_u32", high=True)
xoshiro512p_u32 = _u32_from_u64(xoshiro512p_u64, "xoshiro512p_u32", high=True)
xoshiro512pp_u32 = _u32_from_u64(xoshiro512pp_u64, "xoshiro512pp_u32", high=True)
xoshiro512ss_u32 = _u32_from_u64(xoshiro512ss_u64, "xoshiro512ss_u32", high=True)
xoroshiro128pp_u32 = _u32_from_u64(xoroshiro128pp_u64, "xoroshiro128pp_u32", high=False)
xoroshiro128ss_u32 = _u32_from_u64(xoroshiro128ss_u64, "xoroshiro128ss_u32", high=False)
xoroshiro64s_u64 = _u64_from_u32(xoroshiro64s_u32, "xoroshiro64s_u64")
xoroshiro64ss_u64 = _u64_from_u32(xoroshiro64ss_u32, "xoroshiro64ss_u64")
xoshiro128p_u64 = _u64_from_u32(xoshiro128p_u32, "xoshiro128p_u64")
xoshiro128pp_u64 = _u64_from_u32(xoshiro128pp_u32, "xoshiro128pp_u64")
xoshiro128ss_u64 = _u64_from_u32(xoshiro128ss_u32, "xoshiro128ss_u64")


@_device
def mulhi64(a, b):
    """The high 64 bits of the 128-bit product of two u64, from 32-bit limbs."""
    a_lo = a & 0xFFFFFFFF
    a_hi = a >> 32
    b_lo = b & 0xFFFFFFFF
    b_hi = b >> 32
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    mid = ((a_lo * b_lo) >> 32) + (lh & 0xFFFFFFFF) + (hl & 0xFFFFFFFF)
    return a_hi * b_hi + (lh >> 32) + (hl >> 32) + (mid >> 32)


# ---- per-algorithm table ----------------------------------------------------------------

@dataclass(frozen=True)
class DeviceAlgorithm:
    """The primitive device functions of one generator (see `device_rng` for the API)."""

    algorithm: _alg.Algorithm
    load: object
    store: object
    xor: object
    step: object
    u32: object
    u64: object

    def fn(self, role: str):
        """The device function for `role` ("load", "store", "xor", "step", "u32", "u64")."""
        return getattr(self, role)


_TAGS = {"xoroshiro128+": ("xoroshiro128p", "xoroshiro128_step"),
         "xoroshiro128++": ("xoroshiro128pp", "xoroshiro128pp_step"),
         "xoroshiro128**": ("xoroshiro128ss", "xoroshiro128_step"),
         "xoroshiro64*": ("xoroshiro64s", "xoroshiro64_step"),
         "xoroshiro64**": ("xoroshiro64ss", "xoroshiro64_step"),
         "xoshiro128+": ("xoshiro128p", "xoshiro128_step"),
         "xoshiro128++": ("xoshiro128pp", "xoshiro128_step"),
         "xoshiro128**": ("xoshiro128ss", "xoshiro128_step"),
         "xoshiro256+": ("xoshiro256p", "xoshiro256_step"),
         "xoshiro256++": ("xoshiro256pp", "xoshiro256_step"),
         "xoshiro256**": ("xoshiro256ss", "xoshiro256_step"),
         "xoshiro512+": ("xoshiro512p", "xoshiro512_step"),
         "xoshiro512++": ("xoshiro512pp", "xoshiro512_step"),
         "xoshiro512**": ("xoshiro512ss", "xoshiro512_step")}


def device_algorithm(algorithm) -> DeviceAlgorithm:
    """The `DeviceAlgorithm` of a generator name (any name `algorithms.get` accepts)."""
    alg = _alg.get(algorithm)
    tag, step = _TAGS[alg.name]
    w = alg.words
    g = globals()
    return DeviceAlgorithm(alg, g[f"load{w}"], g[f"store{w}"], g[f"xor{w}"], g[step],
                           g[f"{tag}_u32"], g[f"{tag}_u64"])


# ---- per-thread bodies, built per algorithm ---------------------------------------------
# Each factory returns `thread(t, ...)`: everything one GPU thread does for stream t. The
# kernels (`_kernel_*`) only find t and guard it, so the bodies can also run in a plain
# loop over t. The fill order is `distributions`': in round k, stream t produces the
# GROUP = 4 neighbouring elements 4*(k*S + t) .. 4*(k*S + t) + 3 (S = number of streams),
# so one thread writes 16 contiguous bytes of float32 per round. When the launch finds
# `out` 16-byte aligned (every allocation is), the compiler knows 4*(k*S + t) is a multiple
# of 4 elements and merges the four stores into one st.global.v4 (v2.f64 pairs for 8-byte
# elements): a quarter of the store instructions of one-element-per-round, each a full
# 16-byte access. A stream whose group straddles the end writes the elements that remain
# one by one; a stream whose group lies past the end draws nothing.
# Float fills write shift + scale * v (shift 0, scale 1 for the standard distributions;
# the compiler may fuse that into one fma, which leaves v exact in the standard case).


def _bits_body(da: DeviceAlgorithm, wide: bool):
    load, store = da.fn("load"), da.fn("store")
    draw = da.fn("u64" if wide else "u32")

    def thread(t, states, out):
        n_streams = states.shape[1]
        n = out.size
        st = load(states, t)
        i = 4 * t
        while i + 3 < n:  # whole groups: four draws, four neighbouring stores
            for k in unroll(4):
                x, st = draw(st)
                out[i + k] = x
            i += 4 * n_streams
        while i < n:  # the group that straddles the end, if this stream has it
            x, st = draw(st)
            out[i] = x
            i += 1
        store(states, t, st)

    return thread


def _four_per_group_body(da: DeviceAlgorithm, group, rest):
    """A float fill whose elements are shift + scale * v: `group(st)` draws a whole
    group's four values, (v0, v1, v2, v3, state), all before any store (libdevice's logf
    branches, and stores in different basic blocks could not merge into one vector
    store); `rest(st, out, i, n, shift, scale)` writes from the straddling group's
    element i on and returns (the next i, the state)."""
    load, store = da.fn("load"), da.fn("store")

    def thread(t, states, out, shift, scale):
        n_streams = states.shape[1]
        n = out.size
        st = load(states, t)
        i = 4 * t
        while i + 3 < n:
            v0, v1, v2, v3, st = group(st)
            out[i] = shift + scale * v0
            out[i + 1] = shift + scale * v1
            out[i + 2] = shift + scale * v2
            out[i + 3] = shift + scale * v3
            i += 4 * n_streams
        while i < n:  # the group that straddles the end, if this stream has it
            i, st = rest(st, out, i, n, shift, scale)
        store(states, t, st)

    return thread


def _affine_body(da: DeviceAlgorithm, variate):
    """A fill whose element is shift + scale * v, v from `variate(state)` (one draw):
    uniform and exponential, from the `device_rng` API."""

    @_device
    def group(st):
        v0, st = variate(st)
        v1, st = variate(st)
        v2, st = variate(st)
        v3, st = variate(st)
        return v0, v1, v2, v3, st

    @_device
    def rest(st, out, i, n, shift, scale):
        v, st = variate(st)
        out[i] = shift + scale * v
        return i + 1, st

    return _four_per_group_body(da, group, rest)


def _normal_body(da: DeviceAlgorithm, pair):
    """Box–Muller, both values used: a group is two pairs, each (cos, sin) as neighbours.

    The two pairs of a group are independent work (two logs, two sincospi in flight), and
    the four results leave in one 16-byte store.
    """

    @_device
    def group(st):
        c0, s0, st = pair(st)
        c1, s1, st = pair(st)
        return c0, s0, c1, s1, st

    @_device
    def rest(st, out, i, n, shift, scale):
        # Whole pairs drawn; a sine past the end is dropped.
        c0, s0, st = pair(st)
        out[i] = shift + scale * c0
        if i + 1 < n:
            out[i + 1] = shift + scale * s0
        return i + 2, st

    return _four_per_group_body(da, group, rest)


def _integers_body(da: DeviceAlgorithm, lemire, out_cast):
    """Lemire's method (`device_rng`'s lemire32 or lemire64); `out_cast` (u32 or u64) is
    the width of the output array's words.

    Arguments: low (u64), span (u64; 0 stands for 2^64 with lemire64), threshold (u64) =
    (2^bits - span) mod span, as `distributions.lemire_threshold` computes it. A rejection
    loop sits between any two stores, so they cannot merge into vector stores: one loop
    walks this stream's elements, jumping to its next group after every fourth.
    """
    load, store = da.fn("load"), da.fn("store")

    def thread(t, states, out, low, span, threshold):
        n_streams = states.shape[1]
        n = out.size
        st = load(states, t)
        i = 4 * t
        while i < n:
            value, st = lemire(st, span, threshold)
            out[i] = out_cast(low + value)
            i += 1
            if (i & 3) == 0:  # the group is done: on to this stream's next one
                i += 4 * (n_streams - 1)
        store(states, t, st)

    return thread


def _apply_fn(da: DeviceAlgorithm):
    """apply(st, table, level, d): p(T) st for the polynomial in table[level, d, :]."""
    step, xor = da.fn("step"), da.fn("xor")
    words = da.algorithm.words
    word_bits = da.algorithm.word_bits

    def apply(st, table, level, d):
        acc = xor(st, st)  # zero words of the state's own type
        for w in range(words):
            word = table[level, d, w]
            for b in range(word_bits):
                if word & 1:
                    acc = xor(acc, st)
                word = word >> 1
                st = step(st)
        return acc

    return apply


def _init_body(da: DeviceAlgorithm, apply):
    """Stream t = base advanced by t jumps, from the digit table of `streams.jump_table`."""
    load, store = da.fn("load"), da.fn("store")

    def thread(t, states, base, table, digit_bits):
        st = load(base, 0)
        mask = table.shape[1] - 1
        i = t
        for level in range(table.shape[0]):
            d = i & mask
            i = i >> digit_bits
            if d != 0:
                st = apply(st, table, level, d)
        store(states, t, st)

    return thread


def _jump_body(da: DeviceAlgorithm, apply):
    """Every stream advanced by the polynomial in table[0, 0, :] (jump, long_jump, ...)."""
    load, store = da.fn("load"), da.fn("store")

    def thread(t, states, table):
        store(states, t, apply(load(states, t), table, 0, 0))

    return thread


#: The parameters of each kind's kernel (after the streams' states).
_FILL = "states, out"
_AFFINE = "states, out, shift, scale"
_INTEGERS = "states, out, low, span, threshold"


def _build(kind: str, da: DeviceAlgorithm) -> tuple:
    """(thread body, kernel parameters) of `kind` for one algorithm; the body is a device
    function."""
    from .device_rng import device_rng  # it builds on this module's primitives

    rng = device_rng(da.algorithm.name)
    if kind in ("bits32", "bits64"):
        return _device(_bits_body(da, kind == "bits64")), _FILL
    if kind in ("uniform_f32", "uniform_f64", "exponential_f32", "exponential_f64"):
        return _device(_affine_body(da, getattr(rng, kind))), _AFFINE
    if kind in ("normal_f32", "normal_f64"):
        pair = rng.normal2_f64 if kind.endswith("64") else rng.normal2_f32
        return _device(_normal_body(da, pair)), _AFFINE
    if kind == "integers32":
        return _device(_integers_body(da, rng.lemire32, u32)), _INTEGERS
    if kind == "integers32_to64":
        return _device(_integers_body(da, rng.lemire32, u64)), _INTEGERS
    if kind == "integers64":
        return _device(_integers_body(da, rng.lemire64, u64)), _INTEGERS
    if kind == "init_streams":
        return _device(_init_body(da, _device(_apply_fn(da)))), "states, base, table, digit_bits"
    if kind == "jump":
        return _device(_jump_body(da, _device(_apply_fn(da)))), "states, table"
    raise KeyError(f"unknown kernel kind {kind!r}; known: {', '.join(KERNELS)}")


KERNELS = ("bits32", "bits64", "uniform_f32", "uniform_f64", "normal_f32", "normal_f64",
           "exponential_f32", "exponential_f64", "integers32", "integers32_to64",
           "integers64", "init_streams", "jump")


@functools.cache
def kernel_function(kind: str, algorithm) -> tuple:
    """The (thread body, kernel function) pair of `kind` for `algorithm`.

    The kernel is what `cupric.simulator.launch` runs (one thread per stream, grid >=
    streams); the body ``thread(t, *kernel_args)``, a device function that Python can
    call too, is the same work for one stream t.
    """
    from cupric.kernels.templates import per_thread

    body, params = _build(kind, device_algorithm(algorithm))
    return body, per_thread(body, params, count="states.shape[1]").py_func


@functools.cache
def compiled_kernel(kind: str, algorithm):
    """The `@cupric.kernel` of `kind` for `algorithm`, for launching on a GPU."""
    from cupric.compiler.kernel import kernel

    return kernel(kernel_function(kind, algorithm)[1])
