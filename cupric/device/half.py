"""Half precision: IEEE f16 (`cupric.types.f16`, NumPy float16) and bfloat16.

f16 is a full scalar type: `f16(x)` converts and f16 values do arithmetic, which compiles
to the native half instructions (add.f16, mul.f16, fma.rn.f16; division through f32,
correctly rounded). NumPy has no bfloat16, so a bf16 value lives in an f32 whose low 16
bits are zero (`half.bf16(x)` rounds to it), and arrays of bf16 are u16 arrays of bit
patterns, read and written through `half.bf16_from_bits` / `half.bf16_bits`. Pairs of
halves packed in a u32 (`half2`, `bfloat162`: the low half first) go through the packed
instructions (`half.fma2_bf16`, ...; `mma.pack_bf16x2` packs). Conversions take a
rounding mode: "rn" (nearest even), "rz" (toward zero), "rd" (down), "ru" (up).
"""

from ._intrinsic import Intrinsic, Namespace

__all__ = ["half"]

half = Namespace(
    "half",
    bf16=Intrinsic(
        "half.bf16",
        "half.bf16(x) -> f32: x rounded to the nearest bfloat16 (ties to even; NaN stays "
        "NaN), returned as the f32 of the same value."),
    bf16_bits=Intrinsic(
        "half.bf16_bits",
        "half.bf16_bits(x) -> u16: the bfloat16 bit pattern of x rounded to nearest even."),
    bf16_from_bits=Intrinsic(
        "half.bf16_from_bits",
        "half.bf16_from_bits(bits) -> f32: the value of a bfloat16 bit pattern (u16)."),
    f16_bits=Intrinsic(
        "half.f16_bits",
        "half.f16_bits(x) -> u16: the IEEE half bit pattern of x rounded to nearest even."),
    f16_from_bits=Intrinsic(
        "half.f16_from_bits",
        "half.f16_from_bits(bits) -> f16: the f16 value of an IEEE half bit pattern (u16)."),
    fma=Intrinsic(
        "half.fma",
        "half.fma(a, b, c) -> f16 or bf16: a*b+c with a single rounding, in bf16 where an "
        "argument is bf16 (fma.rn.bf16, sm_80+), else in f16 (fma.rn.f16)."),
    to_f16=Intrinsic(
        "half.to_f16",
        "half.to_f16(x, rounding='rn') -> f16: x (f32) rounded to IEEE half by `rounding` "
        "('rn', 'rz', 'rd', 'ru'; cvt.<rounding>.f16.f32); past the range: inf, or the "
        "largest finite value where the mode rounds toward it."),
    to_bf16=Intrinsic(
        "half.to_bf16",
        "half.to_bf16(x, rounding='rn') -> f32: x rounded to bfloat16 by `rounding` ('rn', "
        "'rz', 'rd', 'ru'), as the f32 of the same value (integer arithmetic on the f32 "
        "bits: every architecture and the simulator give the same bits; an f64 or a "
        "wide integer x is rounded once, from its own value; bf16(...) of the result is "
        "exact)."),
    bf16_fma=Intrinsic(
        "half.bf16_fma",
        "half.bf16_fma(a, b, c) -> f32: a*b+c of three bfloat16 values (f32 inputs are first "
        "rounded to nearest bfloat16) with one rounding to bfloat16 (fma.rn.bf16, sm_80+)."),
    fma2_f16=Intrinsic(
        "half.fma2_f16",
        "half.fma2_f16(a, b, c) -> u32: lane-wise a*b+c of two packed f16 pairs (u32 words, "
        "the low half first), one rounding each (fma.rn.f16x2)."),
    fma2_bf16=Intrinsic(
        "half.fma2_bf16",
        "half.fma2_bf16(a, b, c) -> u32: lane-wise a*b+c of two packed bfloat16 pairs, one "
        "rounding each (fma.rn.bf16x2, sm_80+)."),
    add2_f16=Intrinsic(
        "half.add2_f16",
        "half.add2_f16(a, b) -> u32: lane-wise a+b of packed f16 pairs (fma.rn.f16x2 with "
        "1.0: one rounding, as add.f16x2)."),
    add2_bf16=Intrinsic(
        "half.add2_bf16",
        "half.add2_bf16(a, b) -> u32: lane-wise a+b of packed bfloat16 pairs (one rounding)."),
    mul2_f16=Intrinsic(
        "half.mul2_f16",
        "half.mul2_f16(a, b) -> u32: lane-wise a*b of packed f16 pairs (fma.rn.f16x2 adding "
        "-0.0: one rounding, as mul.f16x2)."),
    mul2_bf16=Intrinsic(
        "half.mul2_bf16",
        "half.mul2_bf16(a, b) -> u32: lane-wise a*b of packed bfloat16 pairs (one rounding)."),
    unpack2_f16=Intrinsic(
        "half.unpack2_f16",
        "half.unpack2_f16(w) -> (f16, f16): the low and high halves of a packed f16 pair."),
    unpack2_bf16=Intrinsic(
        "half.unpack2_bf16",
        "half.unpack2_bf16(w) -> (f32, f32): the low and high bfloat16 of a packed pair, as "
        "f32 values."),
)

#: Rounding modes of the conversions, and their PTX spelling.
ROUNDINGS = {"rn": "rn", "rz": "rz", "rd": "rm", "ru": "rp"}
