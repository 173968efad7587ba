"""Argument checking and dispatch tables shared by every cuBLAS wrapper.

cuBLAS sees matrices in column-major order as (pointer, rows, cols, leading dimension)
and vectors as (pointer, n, increment); it checks almost nothing itself and a bad
leading dimension reads out of bounds. Everything here runs before any library call and
needs neither the GPU nor libcublas, so the CPU test lane covers it.
"""

from __future__ import annotations

import numpy as np

from cupric.runtime.intake import ReadOnlyError, as_buffer, check_open
from cupric.runtime.memory import DeviceBuffer

__all__ = [
    "PREFIX", "REAL_PREFIX", "SCALAR_DTYPE", "TRANS", "UPLO", "DIAG", "SIDE",
    "routine_name", "prefix_of", "same_prefix", "device_array", "vector", "matrix",
    "trans_code", "uplo_code", "diag_code", "side_code", "op_shape", "INT32_MAX",
    "says_bfloat16",
]

INT32_MAX = 2**31 - 1

# The dispatcher's table: one BLAS precision letter per dtype. Every s/d/c/z routine is
# one Python function that picks its C symbol from this letter.
PREFIX: dict[np.dtype, str] = {
    np.dtype(np.float32): "S",
    np.dtype(np.float64): "D",
    np.dtype(np.complex64): "C",
    np.dtype(np.complex128): "Z",
}
# The real type of each precision (the type of nrm2's result, herk's alpha...).
REAL_PREFIX = {"S": "S", "D": "D", "C": "S", "Z": "D"}
SCALAR_DTYPE = {"S": np.dtype(np.float32), "D": np.dtype(np.float64),
                "C": np.dtype(np.complex64), "Z": np.dtype(np.complex128)}

# Enumerator values of cublasOperation_t, cublasFillMode_t, cublasDiagType_t and
# cublasSideMode_t. They are fixed by the C API; a CPU test compares them with the
# generated module, so that parsing options never needs the library loaded.
TRANS = {"N": 0, "T": 1, "C": 2}
UPLO = {"L": 0, "U": 1}
DIAG = {"N": 0, "U": 1}
SIDE = {"L": 0, "R": 1}

_TRANS_WORDS = {"n": "N", "no": "N", "none": "N", "t": "T", "transpose": "T",
                "c": "C", "h": "C", "conj": "C", "conjugate": "C", "hermitian": "C"}
_UPLO_WORDS = {"l": "L", "lower": "L", "u": "U", "upper": "U"}
_DIAG_WORDS = {"n": "N", "non_unit": "N", "nonunit": "N", "u": "U", "unit": "U"}
_SIDE_WORDS = {"l": "L", "left": "L", "r": "R", "right": "R"}

# (routine, precision) pairs whose C name does not follow "cublas" + letter + routine.
_IRREGULAR = {
    ("nrm2", "C"): "cublasScnrm2", ("nrm2", "Z"): "cublasDznrm2",
    ("asum", "C"): "cublasScasum", ("asum", "Z"): "cublasDzasum",
    ("iamax", "S"): "cublasIsamax", ("iamax", "D"): "cublasIdamax",
    ("iamax", "C"): "cublasIcamax", ("iamax", "Z"): "cublasIzamax",
    ("iamin", "S"): "cublasIsamin", ("iamin", "D"): "cublasIdamin",
    ("iamin", "C"): "cublasIcamin", ("iamin", "Z"): "cublasIzamin",
    ("scal_real", "C"): "cublasCsscal", ("scal_real", "Z"): "cublasZdscal",
    ("rot_real", "C"): "cublasCsrot", ("rot_real", "Z"): "cublasZdrot",
}
# Which precisions each routine exists for (the rest raise TypeError up front).
_REAL = ("S", "D")
_COMPLEX = ("C", "Z")
_ALL = ("S", "D", "C", "Z")
SUPPORTED: dict[str, tuple[str, ...]] = {
    "axpy": _ALL, "dot": _REAL, "dotu": _COMPLEX, "dotc": _COMPLEX, "nrm2": _ALL,
    "asum": _ALL, "iamax": _ALL, "iamin": _ALL, "scal": _ALL, "scal_real": _COMPLEX,
    "copy": _ALL, "swap": _ALL, "rot": _ALL, "rot_real": _COMPLEX, "rotg": _ALL,
    "rotm": _REAL, "rotmg": _REAL,
    "gemv": _ALL, "gbmv": _ALL, "ger": _REAL, "geru": _COMPLEX, "gerc": _COMPLEX,
    "symv": _ALL, "hemv": _COMPLEX, "trmv": _ALL, "trsv": _ALL, "syr": _ALL,
    "her": _COMPLEX,
    "gemm": _ALL, "gemmBatched": _ALL, "gemmStridedBatched": _ALL, "symm": _ALL,
    "syrk": _ALL, "herk": _COMPLEX, "trmm": _ALL, "trsm": _ALL, "geam": _ALL, "dgmm": _ALL,
}


def routine_name(routine: str, prefix: str, big: bool = False) -> str:
    """The C symbol of a routine for one precision, e.g. ("gemm", "S") -> "cublasSgemm".

    `big` picks the 64-bit-integer variant (``cublasSgemm_64``) needed once a dimension or
    leading dimension exceeds 2**31 - 1. The names without ``_v2`` resolve through the
    binding's aliases to the current API.
    """
    name = _IRREGULAR.get((routine, prefix))
    if name is None:
        name = f"cublas{prefix}{routine.removesuffix('_real')}"
    return name + "_64" if big else name


def _check_supported(routine: str, prefix: str, what: str) -> None:
    allowed = SUPPORTED.get(routine, _ALL)
    if prefix not in allowed:
        names = ", ".join(str(SCALAR_DTYPE[p]) for p in allowed)
        raise TypeError(f"{routine} is defined for {names}; {what} is "
                        f"{SCALAR_DTYPE[prefix]}")


def prefix_of(buf: DeviceBuffer, name: str) -> str:
    """The precision letter of a buffer's dtype, or TypeError naming the argument."""
    prefix = PREFIX.get(buf.dtype)
    if prefix is None:
        raise TypeError(f"{name} has dtype {buf.dtype}; cuBLAS routines take float32, "
                        f"float64, complex64 or complex128 (use gemm_ex or ltmatmul for "
                        f"float16, bfloat16, int8 and fp8)")
    return prefix


def same_prefix(routine: str, *named) -> str:
    """Check that every (name, buffer) pair shares one supported dtype; its letter.

    Raises
    ------
    TypeError
        For an unsupported dtype, mixed dtypes, or a dtype the routine lacks.
    """
    first_name, first = named[0]
    prefix = prefix_of(first, first_name)
    for name, buf in named[1:]:
        if buf.dtype != first.dtype:
            raise TypeError(f"{routine}: {name} has dtype {buf.dtype} but {first_name} has "
                            f"{first.dtype}; all operands must share one dtype")
    _check_supported(routine, prefix, first_name)
    return prefix


def device_array(obj, name: str, stream=None, *, writable: bool = False) -> DeviceBuffer:
    """`obj` as a `DeviceBuffer` (any CAI/DLPack device array), through the runtime's
    intake layer (`cupric.runtime.intake.as_buffer`); errors name the argument.

    `stream` (a raw handle or Stream) is the stream the call runs on: a producer that
    advertises another stream is waited for, as the array protocols require.

    Raises
    ------
    ClosedError
        A closed DeviceBuffer or a view of one.
    TypeError
        Host memory or an object that is no array (`HostMemoryError`, `NotAnArrayError`).
    ValueError
        A read-only array where the routine writes (`ReadOnlyError`).
    """
    if obj.__class__ is DeviceBuffer:  # the common case, inline
        if obj.allocation.closed:
            check_open(obj, name)
        if writable and obj.readonly:
            raise ReadOnlyError(f"{name} is read-only (its producer exported it read-only) "
                                f"but this routine writes it")
        if stream is None or obj.ordering_stream is None:
            return obj
    try:
        return as_buffer(obj, stream, name=name, writable=writable)
    except ReadOnlyError:
        raise ReadOnlyError(f"{name} is read-only (its producer exported it read-only) but "
                            f"this routine writes it") from None


def vector(buf: DeviceBuffer, name: str) -> tuple[int, int]:
    """(n, increment) of a 1-d buffer, the increment in elements.

    Raises
    ------
    ValueError
        For other than one dimension, a zero or negative stride, or a stride that is not
        a multiple of the item size.
    """
    if buf.ndim != 1:
        raise ValueError(f"{name} must be a 1-d vector, got shape {buf.shape}")
    n = buf.shape[0]
    if n <= 1:
        return n, 1
    stride = buf.strides[0]
    inc, rest = divmod(stride, buf.itemsize)
    if rest or inc <= 0:
        raise ValueError(f"{name} has a byte stride of {stride}; cuBLAS needs a positive "
                         f"multiple of the item size ({buf.itemsize})")
    return n, inc


def matrix(buf: DeviceBuffer, name: str) -> tuple[int, int, int]:
    """(rows, cols, leading dimension) of a 2-d buffer in column-major layout.

    The rows must be contiguous (stride of axis 0 equal to the item size) and the columns
    a multiple of it apart, at least `rows` elements (a Fortran-ordered array, or a
    slice of one). A C-ordered matrix ``a`` is the column-major ``a.T``: pass that with
    the opposite ``trans``, or use the NumPy-like `cupric.cublas.matmul`, which does it.

    Raises
    ------
    ValueError
        For other than two dimensions or a layout cuBLAS cannot address.
    """
    if buf.ndim != 2:
        raise ValueError(f"{name} must be a 2-d matrix, got shape {buf.shape}")
    rows, cols = buf.shape
    item = buf.itemsize
    s0, s1 = buf.strides
    if rows > 1 and s0 != item:
        hint = (" (it is row-major: pass its transpose .T with the opposite trans, or use "
                "cupric.cublas.matmul)" if s1 == item else "")
        raise ValueError(f"{name} is not column-major: strides {buf.strides} for shape "
                         f"{buf.shape}; cuBLAS needs unit stride down each column{hint}")
    if cols <= 1:
        return rows, cols, max(1, rows)
    ld, rest = divmod(s1, item)
    if rest or ld < max(1, rows):
        raise ValueError(f"{name} has a column stride of {s1} bytes: the leading dimension "
                         f"must be a whole number of elements >= rows ({rows})")
    return rows, cols, ld


def _code(table: dict, words: dict, value, what: str, choices: str) -> int:
    if isinstance(value, str):
        key = value if value in table else words.get(value.lower())
        if key is not None:
            return table[key]
    raise ValueError(f"{what} must be one of {choices}, got {value!r}")


def trans_code(value, name: str = "trans") -> int:
    """cublasOperation_t of "N", "T" or "C" (also "n", "transpose", "conj"...)."""
    return _code(TRANS, _TRANS_WORDS, value, name, "'N', 'T', 'C'")


def uplo_code(value, name: str = "uplo") -> int:
    """cublasFillMode_t of "L"/"lower" or "U"/"upper"."""
    return _code(UPLO, _UPLO_WORDS, value, name, "'L', 'U'")


def diag_code(value, name: str = "diag") -> int:
    """cublasDiagType_t of "N"/"non_unit" or "U"/"unit"."""
    return _code(DIAG, _DIAG_WORDS, value, name, "'N', 'U'")


def side_code(value, name: str = "side") -> int:
    """cublasSideMode_t of "L"/"left" or "R"/"right"."""
    return _code(SIDE, _SIDE_WORDS, value, name, "'L', 'R'")


def op_shape(rows: int, cols: int, op: int) -> tuple[int, int]:
    """Shape of op(A) for an A of (rows, cols): transposed unless op is N."""
    return (rows, cols) if op == 0 else (cols, rows)


def needs_64(*values: int) -> bool:
    """Whether any dimension, leading dimension or increment overflows a C int."""
    for v in values:
        if v > INT32_MAX:
            return True
    return False


def check_int32(routine: str, **values: int) -> None:
    """Raise OverflowError for routines that have no 64-bit-integer variant."""
    for name, v in values.items():
        if v > INT32_MAX:
            raise OverflowError(f"{routine}: {name} = {v} exceeds 2**31 - 1, which this "
                                f"cuBLAS routine cannot take")


def says_bfloat16(obj, stream=None) -> bool:
    """Whether a 2-byte array whose interface says only ``"<V2"`` holds bfloat16: its
    own dtype is ml_dtypes' bfloat16 (CuPy with ml_dtypes), or its DLPack export says
    so (type code kDLBfloat, 16 bits). The DLPack capsule is read, not consumed: dropped
    unconsumed, it hands the tensor back to its producer itself."""
    if getattr(getattr(obj, "dtype", None), "name", None) == "bfloat16":
        return True
    export = getattr(obj, "__dlpack__", None)
    if export is None:
        return False
    from cupric.runtime import dlpack
    consumer = stream if isinstance(stream, int) and stream > 1 else 1
    try:
        try:
            capsule = export(stream=consumer, max_version=dlpack.VERSION)
        except TypeError:  # producers older than DLPack 1.0
            capsule = export(stream=consumer)
    except (BufferError, TypeError, ValueError, RuntimeError):
        return False  # no export of this array: the dtype error stands
    dtype = _capsule_dtype(capsule)
    return dtype == (dlpack.CODE_BFLOAT, 16, 1)


def _capsule_dtype(capsule):
    """(code, bits, lanes) of an unconsumed DLPack capsule's tensor, or None."""
    import ctypes

    from cupric.runtime import dlpack
    api = ctypes.pythonapi
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", api))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", api))
    if type(capsule).__name__ != "PyCapsule":
        return None
    name = get_name(capsule)
    layout = {b"dltensor_versioned": dlpack.DLManagedTensorVersioned,
              b"dltensor": dlpack.DLManagedTensor}.get(name)
    if layout is None:
        return None
    dtype = layout.from_address(get_pointer(capsule, name)).dl_tensor.dtype
    return int(dtype.code), int(dtype.bits), int(dtype.lanes)
