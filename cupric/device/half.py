"""Half precision: IEEE f16 (`cupric.types.f16`, NumPy float16) and bfloat16.

f16 is a full scalar type: `f16(x)` converts and f16 values do arithmetic. NumPy has no
bfloat16, so a bf16 value lives in an f32 whose low 16 bits are zero (`half.bf16(x)`
rounds to it), and arrays of bf16 are u16 arrays of bit patterns, read and written through
`half.bf16_from_bits` / `half.bf16_bits`. On the GPU these are cvt.rn.bf16.f32 and moves.
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
        "half.fma(a, b, c) -> f16: a*b+c in f16 with a single rounding (fma.rn.f16)."),
)
