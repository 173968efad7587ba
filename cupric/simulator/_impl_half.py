"""Simulator implementations of the half-precision conversions with rounding modes, the
bfloat16 fma and the packed f16x2 / bf16x2 operations of `cupric.device.half`.

Every result is the exact value rounded once, as the GPU's instructions define it: the
exact sum a*b + c is formed in rationals (`fractions.Fraction`), then rounded to the
format by the mode, subnormals and overflow included. NaN results are the canonical NaN
0x7FFF of the PTX instructions.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ._state import implements

__all__ = ["round_bits", "F16", "BF16"]

# (mantissa bits, exponent bias, largest exponent) of the two formats.
F16 = (10, 15, 15)
BF16 = (7, 127, 127)
_CANONICAL_NAN = 0x7FFF


def round_bits(value, fmt, mode: str = "rn") -> int:
    """The bits of `value` (a Fraction, or a float: +-inf, NaN) rounded to `fmt` by
    `mode` ("rn" nearest even, "rz" toward zero, "rd" down, "ru" up)."""
    mant, bias, emax = fmt
    exp_mask = (2 * bias + 1) << mant
    if isinstance(value, float):
        if value != value:
            return _CANONICAL_NAN
        if value in (float("inf"), float("-inf")):
            return (0x8000 if value < 0 else 0) | exp_mask
        if value == 0:  # a Fraction has no sign of zero
            return 0x8000 if math.copysign(1.0, value) < 0 else 0
        value = Fraction(value)
    sign = 0x8000 if value < 0 else 0
    mag = -value if value < 0 else value
    if mag == 0:
        return sign
    # exponent e with 2^e <= mag < 2^(e+1), at least the smallest normal exponent
    e = mag.numerator.bit_length() - mag.denominator.bit_length()
    if Fraction(2) ** e > mag:
        e -= 1
    e = max(e, 1 - bias)
    quantum = Fraction(2) ** (e - mant)
    n, rest = divmod(mag, quantum)
    n = int(n)
    if rest:
        half = quantum / 2
        if mode == "rn":
            up = rest > half or (rest == half and n & 1)
        elif mode == "rz":
            up = False
        elif mode == "ru":
            up = not sign
        else:  # rd
            up = bool(sign)
        n += int(up)
    if n == 1 << (mant + 1):  # rounded up into the next binade
        n >>= 1
        e += 1
    if e > emax:  # overflow: inf, or the largest finite where the mode rounds toward it
        to_inf = mode == "rn" or (mode == "ru" and not sign) or (mode == "rd" and sign)
        return sign | (exp_mask if to_inf else exp_mask - 1)
    if n < 1 << mant:  # subnormal (e is the smallest normal exponent)
        return sign | n
    return sign | ((e + bias) << mant) | (n - (1 << mant))


def _value(bits: int, fmt) -> float:
    """The float of a 16-bit pattern of `fmt`."""
    if fmt is F16:
        return float(np.uint16(bits).view(np.float16))
    return float(np.uint32(bits << 16).view(np.float32))


def _exact(x: float):
    """x as a Fraction, or the float itself for zeros, inf and NaN."""
    if x != x or x in (float("inf"), float("-inf")) or x == 0:
        return x
    return Fraction(x)


def _fma_bits(a: int, b: int, c: int, fmt) -> int:
    x, y, z = _value(a, fmt), _value(b, fmt), _value(c, fmt)
    if any(v != v or v in (float("inf"), float("-inf")) for v in (x, y, z)):
        return round_bits(float(np.float64(x) * np.float64(y) + np.float64(z)), fmt)
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:  # the IEEE sign of an exact zero, which float64 gets right
        return round_bits(float(np.float64(x) * np.float64(y) + np.float64(z)), fmt)
    return round_bits(exact, fmt)


@implements("half.to_f16")
def _to_f16(s, x, rounding="rn"):
    bits = round_bits(_exact(float(np.float32(x))), F16, rounding)
    return np.uint16(bits).view(np.float16)


def _bf16_rn(x) -> int:
    return round_bits(_exact(float(np.float32(x))), BF16, "rn") if x == x else \
        (int(np.float32(x).view(np.uint32)) >> 16) | 0x40


@implements("half.to_bf16")
def _to_bf16(s, x, rounding="rn"):
    from cupric.types import bf16_round_bits
    if isinstance(x, (float, np.float64)) or type(x).__name__ == "bfloat16":
        bits = bf16_round_bits(x, rounding)  # from the value itself, rounded once
    elif isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and \
            (isinstance(x, int) or x.dtype.itemsize > 2):
        bits = bf16_round_bits(int(x), rounding)
    else:
        x = np.float32(x)
        if x != x:  # a quiet NaN with the input's top bits, as the compiled code
            bits = (int(x.view(np.uint32)) >> 16) | 0x40
        else:
            bits = round_bits(_exact(float(x)), BF16, rounding)
    return np.uint32(bits << 16).view(np.float32)


@implements("half.bf16_fma")
def _bf16_fma(s, a, b, c):
    bits = _fma_bits(_bf16_rn(a), _bf16_rn(b), _bf16_rn(c), BF16)
    return np.uint32(bits << 16).view(np.float32)


def bf16_fma(a, b, c):
    """a*b + c of three numbers taken as bf16 (each rounded to it first), rounded once:
    the bf16 scalar `half.fma` gives where an argument is bf16."""
    from cupric.types import bf16, bf16_round_bits
    bits = _fma_bits(*(bf16_round_bits(v) for v in (a, b, c)), BF16)
    return np.array(bits, np.uint16).view(bf16.dtype)[()]


def _packed(fmt, combine):
    def impl(s, *words):
        ws = [int(w) & 0xFFFFFFFF for w in words]
        lo = combine([w & 0xFFFF for w in ws], fmt)
        hi = combine([w >> 16 for w in ws], fmt)
        return np.uint32(lo | hi << 16)
    return impl


_ONE = {id(F16): 0x3C00, id(BF16): 0x3F80}
for _name, _fmt in (("f16", F16), ("bf16", BF16)):
    implements(f"half.fma2_{_name}")(_packed(_fmt, lambda h, f: _fma_bits(h[0], h[1], h[2], f)))
    implements(f"half.add2_{_name}")(_packed(
        _fmt, lambda h, f: _fma_bits(h[0], _ONE[id(f)], h[1], f)))
    implements(f"half.mul2_{_name}")(_packed(
        _fmt, lambda h, f: _fma_bits(h[0], h[1], 0x8000, f)))
del _name, _fmt


@implements("half.unpack2_f16")
def _unpack2_f16(s, w):
    w = int(w) & 0xFFFFFFFF
    return np.uint16(w & 0xFFFF).view(np.float16), np.uint16(w >> 16).view(np.float16)


@implements("half.unpack2_bf16")
def _unpack2_bf16(s, w):
    w = int(w) & 0xFFFFFFFF
    return (np.uint32((w & 0xFFFF) << 16).view(np.float32),
            np.uint32(w & 0xFFFF0000).view(np.float32))
