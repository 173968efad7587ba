"""The documented arithmetic of the kernel language (docs/kernel-language.md, "Semantics of
arithmetic"), as operations on NumPy scalars of the operation's type: fixed-width integers
that wrap, IEEE floats that give NaN and infinities instead of raising, C conversions.

The simulator's typed twin of a kernel computes with these functions, and constant folding
uses them, so that a constant expression, the simulator and compiled code agree. Every
function here takes operands already converted to the type it computes in (the typer's
promoted type) and returns a NumPy scalar of that type (bool: `np.bool_`). Callers run
them under `np.errstate(all="ignore")`: wrap-around and invalid operations are the defined
results, not warnings.
"""

from __future__ import annotations

import numpy as np

from cupric.types import ScalarType

__all__ = ["convert", "converter", "binary", "power", "floor_div", "mod", "truth", "minmax",
           "absolute"]


def truth(value) -> np.bool_:
    """Python's bool(x) of a number: nonzero, NaN true."""
    return np.bool_(value != 0) if not isinstance(value, (bool, np.bool_)) else np.bool_(value)


def _saturating(value, dtype: np.dtype):
    """A float converted to an integer type: truncated toward zero. Out-of-range and NaN
    inputs are unspecified in the language; this gives what the GPU's `cvt.rzi` gives
    (NaN -> 0, clamped to the type's range), so that the simulator matches today's GPUs."""
    info = np.iinfo(dtype)
    f = float(value)
    if f != f:
        return dtype.type(0)
    if f >= info.max:
        return dtype.type(info.max)
    if f <= info.min:
        return dtype.type(info.min)
    return dtype.type(int(f))


def convert(value, to: ScalarType):
    """`value` (a NumPy or Python scalar) as type `to`, with C conversion rules: integers
    wrap, floats round to nearest, floats to integers truncate toward zero, anything to
    bool is its truth."""
    if type(value).__name__ == "bfloat16":  # ml_dtypes' scalar: its exact f32
        value = np.float32(value)
    if to.name == "bf16":  # rounded once, from any source (cupric.types.bf16)
        return to(value)
    dtype = to.dtype
    if to.kind == "b":
        return truth(value)
    if isinstance(value, (bool, np.bool_)):
        return dtype.type(1 if value else 0)
    if isinstance(value, float) or (isinstance(value, np.floating)):
        if to.kind == "f":
            return dtype.type(value)
        return _saturating(value, dtype)
    if isinstance(value, int):
        value = int(value)
        if to.kind == "f":
            return dtype.type(value)
        bits = dtype.itemsize * 8
        value &= (1 << bits) - 1
        if to.kind == "i" and value >= 1 << (bits - 1):
            value -= 1 << bits
        return dtype.type(value)
    if isinstance(value, np.integer):
        return value.astype(dtype)
    raise TypeError(f"cannot convert {type(value).__name__} to {to!r}")


def converter(src, to: ScalarType):
    """A one-argument function converting values of type `src` (a ScalarType, or None
    when unknown) to `to`; None when nothing needs doing."""
    if src == to:
        return None
    if to.name == "bf16" or getattr(src, "name", None) == "bf16":
        return lambda v: convert(v, to)
    dtype = to.dtype
    if isinstance(src, ScalarType) and src.kind in "iu" and to.kind in "iuf":
        return lambda v: v.astype(dtype) if type(v) is not int else convert(v, to)
    if isinstance(src, ScalarType) and src.kind == "f" and to.kind == "f":
        return dtype.type
    return lambda v: convert(v, to)


def floor_div(a, b, c_division: bool = False):
    """`a // b` in the type of `a` and `b`: floor for signed integers (truncation with
    `c_division`), the exact Python quotient for floats (the compiled formula: the
    quotient of a - fmod(a, b), corrected, rounded). Integer division by zero is
    undefined; here it gives 0."""
    if _is_bf16(a):  # in f32, rounded once, as compiled
        return _bf16_via_f32(floor_div, a, b)
    if isinstance(a, np.floating):
        zero = a.dtype.type(0)
        rem = np.fmod(a, b)
        div = (a - rem) / b
        if rem != zero and ((rem < zero) != (b < zero)):
            div = div - a.dtype.type(1)
        if div != zero:
            floor = np.floor(div)
            return floor + a.dtype.type(1) if div - floor > a.dtype.type(0.5) else floor
        return np.copysign(zero, a / b)
    if b == 0:
        return a.dtype.type(0)
    if c_division and a.dtype.kind == "i":
        q = abs(int(a)) // abs(int(b))
        return convert(-q if (a < 0) != (b < 0) else q, _scalar(a.dtype))
    if a.dtype.kind == "i" and b == -1:
        return -a  # wraps for the minimum value (undefined on the GPU)
    return a // b


def mod(a, b, c_division: bool = False):
    """`a % b`: the remainder takes the sign of the divisor (of the dividend with
    `c_division`). Integer modulo by zero is undefined; here it gives 0."""
    if _is_bf16(a):
        return _bf16_via_f32(mod, a, b)
    if isinstance(a, np.floating):
        r = np.fmod(a, b)
        zero = a.dtype.type(0)
        if r != zero and ((r < zero) != (b < zero)):
            return r + b
        if r == zero:
            return np.copysign(zero, b)  # a zero remainder takes the divisor's sign too
        return r
    if b == 0:
        return a.dtype.type(0)
    if c_division and a.dtype.kind == "i":
        r = abs(int(a)) % abs(int(b))
        return a.dtype.type(-r if a < 0 else r)
    if a.dtype.kind == "i" and b == -1:
        return a.dtype.type(0)
    return a % b


def power(a, b, t: ScalarType):
    """`a ** b` computed in type `t`. Integers: square-and-multiply, wrapping, and a
    negative (signed) exponent gives 0. Floats: `pow` computed in f64 and rounded
    (compiled code calls libdevice's `pow`, or `powi` for an integer exponent of at most
    32 bits; their last bits may differ)."""
    if t.kind == "f":
        # Computed in f64 and rounded: at least as accurate as libdevice's pow/powi.
        return t(np.power(np.float64(a), np.float64(b)))
    dtype = t.dtype
    if t.kind == "b":
        return np.bool_(True) if not b else np.bool_(a)
    e = int(b)
    if t.kind == "i" and e < 0:
        return dtype.type(0)
    if e < 0:  # unsigned: the bits read as a large exponent
        e &= (1 << t.bits) - 1
    result = pow(int(a), e, 1 << t.bits)
    return convert(result, t)


def absolute(a):
    """abs(x): fabs for floats, identity for unsigned, wrapping negation for signed."""
    if isinstance(a, np.unsignedinteger):
        return a
    return np.abs(a)


def minmax(values, is_min: bool):
    """min()/max() as compiled: left to right, a later value replaces the result only when
    strictly smaller (larger); so NaN never replaces a number, and a NaN first stays."""
    result = values[0]
    for v in values[1:]:
        if (v < result) if is_min else (v > result):
            result = v
    return result


def binary(op: str, a, b, c_division: bool = False):
    """`a op b` for `+ - * / // % & | ^ << >>` on operands of one type."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    if op == "//":
        return floor_div(a, b, c_division)
    if op == "%":
        return mod(a, b, c_division)
    if op == "&":
        return a & b
    if op == "|":
        return a | b
    if op == "^":
        return a ^ b
    if op in ("<<", ">>"):
        # A count outside 0..bits-1 is undefined on the GPU (LLVM poison); here the count
        # is taken modulo the width, as the PTX shift instructions would clamp differently.
        bits = a.dtype.itemsize * 8
        count = int(b) & (bits - 1)
        return (a << a.dtype.type(count)) if op == "<<" else (a >> a.dtype.type(count))
    raise ValueError(f"unknown operator {op}")


def _is_bf16(value) -> bool:
    return type(value).__name__ == "bfloat16"  # ml_dtypes' scalar


def _bf16_via_f32(fn, a, b):
    """`fn(a, b)` of two bf16 values computed in f32 and rounded once to bf16."""
    from cupric.types import bf16
    return bf16(fn(np.float32(a), np.float32(b)))


def _scalar(dtype) -> ScalarType:
    from cupric.types import scalar_from_dtype
    return scalar_from_dtype(dtype)
