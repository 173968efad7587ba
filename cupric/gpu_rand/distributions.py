"""Host distributions over many streams, in the element order the device fills use.

A fill of M elements from S streams runs in rounds of GROUP = 4 elements per stream: in
round k, stream t produces the four neighbouring elements at flat indices
4*(k*S + t) + j, j = 0..3, from its next draws in order. So element i comes from stream
(i // 4) mod S, as that stream's draw number 4*(i // 4S) + i mod 4 (for the fills that
take one draw per element). The device writes a group with one 16-byte store, which is
why groups rather than single elements are dealt out (see `device`). Normal variates come
in Box–Muller pairs, each (cos, sin) as neighbours: a group is two pairs. A stream whose
group straddles the end of the array draws only what the remaining elements need (whole
pairs for normal), and a stream whose group lies past the end does not draw at all.
"""

from __future__ import annotations

import numpy as np

from . import algorithms as _alg
from .host import draw_u32, draw_u64

__all__ = ["GROUP", "u32_to_f32", "u64_to_f64", "fill_bits", "fill_uniform", "fill_normal",
           "fill_exponential", "fill_integers", "lemire_threshold", "mul_hi_lo_u64",
           "TWO_PI"]

_F32_SCALE = np.float32(2.0 ** -24)
_F64_SCALE = np.float64(2.0 ** -53)
TWO_PI = 6.283185307179586
# Neighbouring elements a stream produces per round: 4 float32 = one 16-byte vector store.
GROUP = 4


def u32_to_f32(x: np.ndarray) -> np.ndarray:
    """Uniform float32 in [0, 1): the top 24 bits times 2^-24 (exact, every value equally likely)."""
    return (x >> np.uint32(8)).astype(np.float32) * _F32_SCALE


def u64_to_f64(x: np.ndarray) -> np.ndarray:
    """Uniform float64 in [0, 1): the top 53 bits times 2^-53."""
    return (x >> np.uint64(11)).astype(np.float64) * _F64_SCALE


def _fill(alg, state, out, draw, width: int = 1) -> None:
    """Drive the round structure of the module docstring.

    `draw(view)` advances the streams of `view` (a prefix of `state`) and returns
    (width, streams) values: `width` neighbouring elements per stream and call (1, or 2
    for a Box–Muller pair), so a group takes GROUP // width calls.
    """
    n_streams = state.shape[1]
    total = out.size
    block = GROUP * n_streams
    for base in range(0, total, block):
        remaining = total - base
        for j in range(0, GROUP, width):
            # streams t whose unit at base + GROUP*t + j starts inside `out`: a prefix
            active = min(n_streams, -(-(remaining - j) // GROUP))
            if active <= 0:
                break
            values = draw(state[:, :active])
            for w in range(width):
                # of those, the ones whose element j + w is inside too (a straddling
                # pair's sine may not be)
                count = min(active, max(0, -(-(remaining - j - w) // GROUP)))
                start = base + j + w
                out[start:start + GROUP * count:GROUP] = values[w, :count]


def _check_out(out: np.ndarray, dtypes) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array on the host, got {type(out).__name__}")
    if out.dtype not in dtypes:
        raise TypeError(f"out has dtype {out.dtype}; expected one of "
                        f"{', '.join(str(np.dtype(d)) for d in dtypes)}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writeable C-contiguous array")
    return out.reshape(-1)


def fill_bits(algorithm, state: np.ndarray, out: np.ndarray) -> None:
    """Raw ``next_u32`` (uint32 out) or ``next_u64`` (uint64 out) outputs, in place."""
    alg = _alg.get(algorithm)
    flat = _check_out(out, (np.dtype(np.uint32), np.dtype(np.uint64)))
    draw = draw_u32 if flat.dtype == np.uint32 else draw_u64
    _fill(alg, state, flat, lambda s: draw(alg, s)[None], 1)


def _affine(values: np.ndarray, dtype: np.dtype, shift: float, scale: float) -> np.ndarray:
    """shift + scale * values in `dtype`, as the device kernels write it."""
    v = values.astype(dtype, copy=False)
    return dtype.type(shift) + dtype.type(scale) * v


def fill_uniform(algorithm, state: np.ndarray, out: np.ndarray,
                 shift: float = 0.0, scale: float = 1.0) -> None:
    """shift + scale * U, U uniform in [0, 1): float32 from ``next_u32``, float64 from
    ``next_u64`` (the standard construction, exact for shift 0 and scale 1)."""
    alg = _alg.get(algorithm)
    flat = _check_out(out, (np.dtype(np.float32), np.dtype(np.float64)))
    dt = flat.dtype
    if dt == np.float32:
        _fill(alg, state, flat,
              lambda s: _affine(u32_to_f32(draw_u32(alg, s)), dt, shift, scale)[None], 1)
    else:
        _fill(alg, state, flat,
              lambda s: _affine(u64_to_f64(draw_u64(alg, s)), dt, shift, scale)[None], 1)


def _uniform_open_closed(alg, s, f32: bool) -> np.ndarray:
    """1 - U: uniform in (0, 1], as float64 (exact for both widths)."""
    if f32:
        return 1.0 - u32_to_f32(draw_u32(alg, s)).astype(np.float64)
    return 1.0 - u64_to_f64(draw_u64(alg, s))


def fill_normal(algorithm, state: np.ndarray, out: np.ndarray,
                shift: float = 0.0, scale: float = 1.0) -> None:
    """shift + scale * Z, Z standard normal by Box–Muller, both values of each pair used.

    Each pair takes u1 then u2 from the stream (24-bit uniforms for float32, 53-bit for
    float64) and gives r*cos(2 pi u2), r*sin(2 pi u2) with r = sqrt(-2 ln(1 - u1)),
    written as neighbours (cos first); a group of four elements is two pairs.
    The host evaluates in float64 and rounds once, so float32 results are correctly
    rounded; the compiled device code uses single-precision libdevice (logf, sqrtf and
    sincospif of 2*u2, each within 1 ulp) and may differ by a few ulp. The largest |z| is
    sqrt(48 ln 2) = 5.77 for float32 (8.57 for float64).
    """
    alg = _alg.get(algorithm)
    flat = _check_out(out, (np.dtype(np.float32), np.dtype(np.float64)))
    f32 = flat.dtype == np.float32

    def pair(s):
        u1 = _uniform_open_closed(alg, s, f32)
        u2 = _uniform_open_closed(alg, s, f32)  # (0, 1]: the angle's range is immaterial
        r = np.sqrt(-2.0 * np.log(u1))
        theta = TWO_PI * u2
        z = np.stack([r * np.cos(theta), r * np.sin(theta)]).astype(flat.dtype)  # (cos, sin)
        return _affine(z, flat.dtype, shift, scale)

    _fill(alg, state, flat, pair, width=2)


def fill_exponential(algorithm, state: np.ndarray, out: np.ndarray,
                     shift: float = 0.0, scale: float = 1.0) -> None:
    """shift + scale * E, E = -ln(1 - U) standard exponential (inversion; E <= 16.6 for
    float32, 36.7 for float64)."""
    alg = _alg.get(algorithm)
    flat = _check_out(out, (np.dtype(np.float32), np.dtype(np.float64)))
    f32 = flat.dtype == np.float32

    def draw(s):
        e = (-np.log(_uniform_open_closed(alg, s, f32))).astype(flat.dtype)
        return _affine(e, flat.dtype, shift, scale)[None]

    _fill(alg, state, flat, draw, 1)


def lemire_threshold(span: int, bits: int) -> int:
    """Rejection threshold of Lemire's method: (2^bits - span) mod span."""
    return ((1 << bits) - span) % span


def mul_hi_lo_u64(a: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit products a*b as (high, low) uint64 halves, from 32-bit limbs."""
    mask = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a_lo, a_hi = a & mask, a >> s32
    b_lo, b_hi = np.uint64(b & 0xFFFFFFFF), np.uint64(b >> 32)
    ll = a_lo * b_lo
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    hh = a_hi * b_hi
    mid = (ll >> s32) + (lh & mask) + (hl & mask)  # < 3 * 2^32: no overflow
    low = (ll & mask) | (mid << s32)
    high = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    return high, low


def fill_integers(algorithm, state: np.ndarray, out: np.ndarray, low: int, span: int) -> None:
    """Uniform integers in [low, low + span) without modulo bias (Lemire's method).

    A span up to 2^32 uses one ``next_u32`` per try: m = x * span as 64 bits, accept when
    the low half m mod 2^32 >= (2^32 - span) mod span, return low + (m >> 32). Larger spans
    (up to 2^64) do the same with ``next_u64`` and a 128-bit product. The accepted region
    covers every result exactly floor(2^bits / span) times, so there is no bias; a try is
    rejected with probability below span / 2^bits. Each stream redraws until it accepts,
    so the values stay in the module's round order.

    Parameters
    ----------
    out : numpy.ndarray
        Integer dtype of at most 64 bits; results wrap into it (callers check the range).
    low : int
    span : int
        1 <= span <= 2^64.
    """
    alg = _alg.get(algorithm)
    if not isinstance(out, np.ndarray) or out.dtype.kind not in "iu":
        raise TypeError("out must be an integer NumPy array")
    if not 1 <= span <= 1 << 64:
        raise ValueError(f"span must be in 1..2^64, got {span}")
    flat = _check_out(out, (out.dtype,))
    low_u = np.uint64(low & 0xFFFFFFFFFFFFFFFF)
    wide = span > 1 << 32
    bits = 64 if wide else 32
    threshold = lemire_threshold(span, bits)

    def one_try(s):
        if span == 1 << 64:  # the product is x * 2^64: the result is x, never rejected
            x = draw_u64(alg, s)
            return x, np.zeros_like(x)
        if wide:
            return mul_hi_lo_u64(draw_u64(alg, s), span)
        m = draw_u32(alg, s).astype(np.uint64) * np.uint64(span)
        return m >> np.uint64(32), m & np.uint64(0xFFFFFFFF)

    def draw(s):
        value, low_bits = one_try(s)
        if threshold:
            pending = np.flatnonzero(low_bits < np.uint64(threshold))
            while pending.size:
                sub = s[:, pending]
                v2, l2 = one_try(sub)
                s[:, pending] = sub
                value[pending] = v2
                keep = l2 < np.uint64(threshold)
                pending = pending[keep]
        return (value + low_u).astype(flat.dtype, casting="unsafe")[None]

    _fill(alg, state, flat, draw, 1)
