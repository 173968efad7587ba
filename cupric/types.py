"""The types kernels are written in.

Scalars (`bool_`, `i8`..`i64`, `u8`..`u64`, `f16`, `bf16`, `f32`, `f64`) are callable: `f32(x)`
is a cast in compiled code, in the simulator and in plain Python alike, and integers wrap at
their width. `Array[f32, 2]` (or `Array[f32, 2, "C"]`) annotates an array parameter of a kernel.

This module is shared by the compiler (which lowers the types), the simulator (which runs
them with NumPy scalars) and the runtime (which packs arguments); it imports only NumPy.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "Type", "ScalarType", "ArrayType", "Array", "bool_", "boolean",
    "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64",
    "intp", "SCALARS", "scalar_from_dtype", "typeof",
]


class Type:
    """Base of every cupric type. Types are immutable and compare by value."""

    __slots__ = ()

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))


class ScalarType(Type):
    """A fixed-width scalar: boolean, signed or unsigned integer, or IEEE float.

    Calling the type casts a value with C semantics: integers wrap at the width (two's
    complement), floats convert to integers by truncation toward zero, and floats round
    to the nearest representable value.
    """

    __slots__ = ("name", "dtype", "kind", "bits")

    def __init__(self, name: str, dtype: np.dtype | type, kind: str) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self.kind = kind  # 'b' boolean, 'i' signed, 'u' unsigned, 'f' float
        self.bits = 1 if kind == "b" else self.dtype.itemsize * 8

    def _key(self) -> tuple:
        return (self.name,)

    def __repr__(self) -> str:
        return self.name

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        return self.kind == "i"

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    def __call__(self, value):
        if self.kind == "b":
            return np.bool_(bool(value))
        if self.kind == "f":
            return self.dtype.type(value)
        # Integers: wrap at the width, as the GPU does.
        if isinstance(value, (float, np.floating)):
            if not np.isfinite(value):
                raise OverflowError(f"cannot cast {value!r} to {self.name}")
            value = int(value)  # truncates toward zero, like fptosi/fptoui
        value = int(value)
        mask = (1 << self.bits) - 1
        value &= mask
        if self.kind == "i" and value >> (self.bits - 1):
            value -= 1 << self.bits
        return self.dtype.type(value)

    def min_value(self):
        return np.iinfo(self.dtype).min if self.is_integer else np.finfo(self.dtype).min

    def max_value(self):
        return np.iinfo(self.dtype).max if self.is_integer else np.finfo(self.dtype).max


bool_ = ScalarType("bool", np.bool_, "b")
boolean = bool_
i8 = ScalarType("i8", np.int8, "i")
i16 = ScalarType("i16", np.int16, "i")
i32 = ScalarType("i32", np.int32, "i")
i64 = ScalarType("i64", np.int64, "i")
u8 = ScalarType("u8", np.uint8, "u")
u16 = ScalarType("u16", np.uint16, "u")
u32 = ScalarType("u32", np.uint32, "u")
u64 = ScalarType("u64", np.uint64, "u")
f16 = ScalarType("f16", np.float16, "f")
f32 = ScalarType("f32", np.float32, "f")
f64 = ScalarType("f64", np.float64, "f")
intp = i64


def bf16_round_bits(value, mode: str = "rn") -> int:
    """The bfloat16 bit pattern (an int) of a real number `value` (Python or NumPy
    scalar: float, int or float16/32/64) rounded once by `mode`: "rn" nearest even, "rz"
    toward zero, "rd" down, "ru" up. NaN gives the quiet NaN of its sign and top bits.

    A float64 is first rounded to float32 *to odd* (toward zero, the last bit set where
    that was inexact), which keeps enough to round correctly to bfloat16 in any mode;
    rounding float64 -> float32 -> bfloat16 to nearest twice would not (ml_dtypes'
    float64 conversion does that).
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = int(value)
        t = np.float32(value)
        if abs(int(t)) > abs(value):  # toward zero, then the sticky bit
            t = np.nextafter(t, np.float32(0))
        inexact = int(t) != value
    else:
        x = float(value)
        if x != x:
            bits = int(np.float32(x).view(np.uint32))
            return ((bits >> 16) | 0x40) & 0xFFFF
        with np.errstate(over="ignore"):
            t = np.float32(x)
        if abs(float(t)) > abs(x):
            t = np.nextafter(t, np.float32(0))
        inexact = float(t) != x
    bits = int(t.view(np.uint32)) | int(inexact)
    top, low = bits >> 16, bits & 0xFFFF
    negative = bool(top & 0x8000)
    if mode == "rn":
        up = low > 0x8000 or (low == 0x8000 and top & 1)
    elif mode == "rz":
        up = False
    elif mode in ("rd", "ru"):
        up = low != 0 and negative == (mode == "rd")
    else:
        raise ValueError(f"rounding must be 'rn', 'rz', 'rd' or 'ru', got {mode!r}")
    return (top + int(up)) & 0xFFFF


class _BFloat16Type(ScalarType):
    """bfloat16: float32's sign and 8-bit exponent with 7 fraction bits.

    NumPy has no bfloat16; arrays and scalars of it are ml_dtypes' `bfloat16` (what
    PyTorch's bfloat16 tensors read as), imported at first use of `dtype`, so that
    `import cupric` does not pay for it. Calling the type rounds to nearest even once,
    also from float64 (see `bf16_round_bits`).
    """

    __slots__ = ()

    def __init__(self) -> None:
        self.name = "bf16"
        self.kind = "f"
        self.bits = 16

    @property
    def dtype(self) -> np.dtype:
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError("bf16 values on the host (NumPy arrays and scalars, the "
                              "simulator) need the ml_dtypes package: pip install "
                              "ml-dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)

    @property
    def itemsize(self) -> int:
        return 2

    def __call__(self, value):
        if isinstance(value, (bool, np.bool_)):
            value = int(value)
        return np.array(bf16_round_bits(value), np.uint16).view(self.dtype)[()]

    def min_value(self):
        return self(-3.3895313892515355e38)

    def max_value(self):
        return self(3.3895313892515355e38)


bf16 = _BFloat16Type()

SCALARS: dict[str, ScalarType] = {
    t.name: t for t in (bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64)
}
_BY_DTYPE: dict[np.dtype, ScalarType] = {t.dtype: t for t in SCALARS.values() if t is not bf16}


def is_bf16(t) -> bool:
    """Whether `t` is the bfloat16 scalar type."""
    return t is bf16


def scalar_from_dtype(dtype) -> ScalarType:
    """The scalar type of a NumPy dtype (or anything `np.dtype` accepts).

    Raises
    ------
    TypeError
        If the dtype has no cupric scalar type (complex, object, strings, ...).
    """
    dt = np.dtype(dtype)
    try:
        return _BY_DTYPE[dt.newbyteorder("=") if dt.byteorder == ">" else dt]
    except KeyError:
        if dt.name == "bfloat16":  # ml_dtypes' (kind 'V', so never in the table)
            return bf16
        hint = (" (a 2-byte void type: PyTorch's bfloat16 reads so without the "
                "ml_dtypes package; pip install ml-dtypes)" if dt == np.dtype("V2") else "")
        raise TypeError(f"dtype {dt} has no cupric scalar type{hint}; use one of "
                        f"{', '.join(SCALARS)}") from None


_LAYOUTS = ("C", "F", "A")


class ArrayType(Type):
    """An array parameter: element type, rank and layout ('C', 'F' or 'A' for any).

    Kernels receive arrays as a data pointer plus shape and strides (see
    docs/internals.md for the exact kernel ABI). A 'C' or 'F' array is known to be
    contiguous, so the compiler can drop the stride arithmetic.
    """

    __slots__ = ("dtype", "ndim", "layout", "readonly")

    def __init__(self, dtype: ScalarType, ndim: int, layout: str = "A", readonly: bool = False):
        if not isinstance(dtype, ScalarType):
            dtype = scalar_from_dtype(dtype)
        if not isinstance(ndim, int) or not 0 <= ndim <= 8:
            raise TypeError(f"array rank must be an int in 0..8, got {ndim!r}")
        if layout not in _LAYOUTS:
            raise TypeError(f"array layout must be one of {_LAYOUTS}, got {layout!r}")
        self.dtype = dtype
        self.ndim = ndim
        self.layout = layout
        self.readonly = readonly

    def _key(self) -> tuple:
        return (self.dtype, self.ndim, self.layout, self.readonly)

    def __repr__(self) -> str:
        ro = ", readonly" if self.readonly else ""
        return f"Array[{self.dtype!r}, {self.ndim}, {self.layout!r}{ro}]"

    def with_layout(self, layout: str) -> ArrayType:
        return ArrayType(self.dtype, self.ndim, layout, self.readonly)


class _ArrayFactory:
    """`Array[dtype, ndim]` or `Array[dtype, ndim, layout]` builds an `ArrayType`."""

    __slots__ = ()

    def __getitem__(self, params) -> ArrayType:
        if not isinstance(params, tuple):
            params = (params, 1)
        if len(params) == 2:
            return ArrayType(params[0], params[1])
        if len(params) == 3:
            return ArrayType(params[0], params[1], params[2])
        raise TypeError("use Array[dtype, ndim] or Array[dtype, ndim, layout]")

    def __call__(self, dtype, ndim: int = 1, layout: str = "A") -> ArrayType:
        return ArrayType(dtype, ndim, layout)

    def __repr__(self) -> str:
        return "Array"


Array = _ArrayFactory()


def _layout_of(strides: tuple[int, ...] | None, shape: tuple[int, ...], itemsize: int) -> str:
    if strides is None:
        return "C"
    expect = itemsize
    c = True
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != expect:
            c = False
            break
        expect *= n
    if c:
        return "C"
    expect = itemsize
    for n, s in zip(shape, strides):
        if n > 1 and s != expect:
            return "A"
        expect *= n
    return "F"


def typeof(value) -> Type:
    """The cupric type a launch would give `value`.

    Python ints map to i64, floats to f64 and bools to bool (as in NumPy); NumPy scalars
    keep their dtype; arrays (NumPy, or anything with `__cuda_array_interface__`) map to
    `ArrayType` with the layout their strides show.

    Raises
    ------
    TypeError
        If the value has no cupric type.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, int):
        return i64
    if isinstance(value, float):
        return f64
    if isinstance(value, np.generic):
        return scalar_from_dtype(value.dtype)
    if isinstance(value, np.ndarray):
        dt = scalar_from_dtype(value.dtype)
        return ArrayType(dt, value.ndim, _layout_of(value.strides, value.shape, value.itemsize),
                         readonly=False)
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        dt = scalar_from_dtype(np.dtype(cai["typestr"]))
        shape = tuple(cai["shape"])
        return ArrayType(dt, len(shape), _layout_of(cai.get("strides"), shape, dt.itemsize))
    raise TypeError(f"no cupric type for a value of type {type(value).__name__}")

