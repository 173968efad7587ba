"""Integer bit manipulation: population count, leading zeros, bit reversal, high half of
products, byte permutes and funnel shifts (PTX popc, clz, brev, mul.hi, prmt, shf).

Each works on 32-bit integers, and on 64-bit ones where PTX offers the 64-bit form; the
result width follows the argument's type (a Python int counts as i64).
"""

from ._intrinsic import Intrinsic, Namespace

__all__ = ["bits"]

bits = Namespace(
    "bits",
    popc=Intrinsic("bits.popc", "bits.popc(x) -> i32: the number of set bits of x."),
    clz=Intrinsic("bits.clz", "bits.clz(x) -> i32: the number of leading zero bits of x "
                  "(its width when x == 0)."),
    ffs=Intrinsic("bits.ffs", "bits.ffs(x) -> i32: 1 + the position of the least "
                  "significant set bit of x, or 0 when x == 0."),
    brev=Intrinsic("bits.brev", "bits.brev(x) -> same type: x with its bits reversed."),
    mulhi=Intrinsic("bits.mulhi", "bits.mulhi(a, b) -> same type: the high half of the "
                    "full-width product a*b (signed or unsigned by the arguments' type)."),
    byte_perm=Intrinsic("bits.byte_perm", "bits.byte_perm(x, y, s) -> u32: the bytes of the "
                        "64-bit value (y << 32 | x) picked by the low four nibbles of s "
                        "(prmt.b32)."),
    funnelshift_l=Intrinsic("bits.funnelshift_l", "bits.funnelshift_l(lo, hi, shift) -> u32: "
                            "the high 32 bits of (hi:lo) << (shift & 31)."),
    bitcast=Intrinsic("bits.bitcast", "bits.bitcast(x, type) -> type: the bits of x read as "
                      "`type`, a cupric scalar type of the same width (f32 <-> i32/u32, "
                      "f64 <-> i64/u64, f16 <-> i16/u16): __float_as_int and friends. A "
                      "Python int counts as i64 and a Python float as f64."),
    funnelshift_r=Intrinsic("bits.funnelshift_r", "bits.funnelshift_r(lo, hi, shift) -> u32: "
                            "the low 32 bits of (hi:lo) >> (shift & 31)."),
)
