"""Mixed-precision GEMM: ``cublasGemmEx`` and its batched forms.

The inputs' element type, the output's, and the type arithmetic is done in (the
*compute type*) are chosen separately: float16 or bfloat16 inputs with float32
accumulation on tensor cores, float32 through TF32 tensor cores, int8 into int32. fp8
inputs go through cuBLASLt (`cupric.cublas.ltmatmul`), which is the only cuBLAS API
that takes them. Matrices are column-major, as in `cupric.cublas.level3`.
"""

from __future__ import annotations

import numpy as np

from . import _validate as V
from .handle import invoke, resolve
from .level3 import batched_geometry, gemm_geometry, pointer_array, strided_geometry

__all__ = ["gemm_ex", "gemm_batched_ex", "gemm_strided_batched_ex", "DATA_TYPES",
           "COMPUTE_TYPES", "data_type_of", "default_compute"]

# Element types by short name: (cudaDataType_t value, item size). Values fixed by the C
# API (library_types.h); a CPU test compares them with the generated module.
DATA_TYPES = {
    "f16": (2, 2), "bf16": (14, 2), "f32": (0, 4), "f64": (1, 8),
    "c64": (4, 8), "c128": (5, 16), "i8": (3, 1), "u8": (8, 1), "i32": (10, 4),
    "f8e4m3": (28, 1), "f8e5m2": (29, 1),
}
_BY_DTYPE = {
    np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
    np.dtype(np.complex64): "c64", np.dtype(np.complex128): "c128",
    np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8", np.dtype(np.int32): "i32",
}
# ml_dtypes (JAX's NumPy dtypes) names, recognized without importing ml_dtypes.
_BY_NAME = {"bfloat16": "bf16", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}

# cublasComputeType_t values by name.
COMPUTE_TYPES = {
    "16F": 64, "16F_pedantic": 65, "32F": 68, "32F_pedantic": 69, "32F_fast_16F": 74,
    "32F_fast_16BF": 75, "32F_fast_tf32": 77, "tf32": 77, "64F": 70, "64F_pedantic": 71,
    "32I": 72, "32I_pedantic": 73,
}
_COMPUTE_FAMILY = {64: "16F", 65: "16F", 68: "32F", 69: "32F", 74: "32F_fast",
                   75: "32F_fast", 77: "32F_fast", 70: "64F", 71: "64F", 72: "32I",
                   73: "32I"}

# (compute family, A/B type, C type) triples cublasGemmEx accepts.
_SUPPORTED = {
    ("16F", "f16", "f16"),
    ("32I", "i8", "i32"),
    ("32F", "bf16", "bf16"), ("32F", "bf16", "f32"), ("32F", "f16", "f16"),
    ("32F", "f16", "f32"), ("32F", "i8", "f32"), ("32F", "f32", "f32"),
    ("32F", "c64", "c64"),
    ("32F_fast", "f32", "f32"), ("32F_fast", "c64", "c64"),
    ("64F", "f64", "f64"), ("64F", "c128", "c128"),
}
_FP8 = ("f8e4m3", "f8e5m2")
_ALGO_DEFAULT = -1  # CUBLAS_GEMM_DEFAULT


def data_type_of(buf, override, name: str) -> str:
    """The short element-type name of a buffer, or of `override` when given.

    `override` ("bf16", "f8e4m3"...) reinterprets a buffer of the same item size, e.g. a
    PyTorch bfloat16 tensor viewed as int16 (NumPy has no bfloat16 dtype).

    Raises
    ------
    TypeError
        For an unknown name, a size mismatch, or a dtype with no cuBLAS type.
    """
    if override is not None:
        spec = DATA_TYPES.get(override)
        if spec is None:
            raise TypeError(f"{name}: unknown element type {override!r}; one of "
                            f"{', '.join(DATA_TYPES)}")
        if spec[1] != buf.itemsize:
            raise TypeError(f"{name}: element type {override} has {spec[1]}-byte items but "
                            f"the array's dtype {buf.dtype} has {buf.itemsize}")
        return override
    kind = _BY_DTYPE.get(buf.dtype) or _BY_NAME.get(buf.dtype.name)
    if kind is None:
        raise TypeError(f"{name} has dtype {buf.dtype}, which cuBLAS does not take; pass "
                        f"its element type explicitly (e.g. a_type='bf16' for bfloat16 "
                        f"data viewed as int16)")
    return kind


def default_compute(a_type: str, c_type: str) -> int:
    """The compute type used when none is given: float32 accumulation for 16-bit and
    int8-into-float inputs, int32 for int8 into int32, float64 for double precision."""
    if a_type in ("f64", "c128"):
        return COMPUTE_TYPES["64F"]
    if a_type in ("i8", "u8") and c_type == "i32":
        return COMPUTE_TYPES["32I"]
    return COMPUTE_TYPES["32F"]


def _compute_code(compute) -> int:
    if compute is None:
        return -1
    if isinstance(compute, str) and compute in COMPUTE_TYPES:
        return COMPUTE_TYPES[compute]
    raise ValueError(f"compute must be one of {', '.join(COMPUTE_TYPES)}, got {compute!r}")


def scale_letter(compute: int, c_type: str) -> str:
    """Type letter of alpha/beta for a compute type: the scale type cuBLAS expects."""
    family = _COMPUTE_FAMILY[compute]
    if family == "16F":
        return "H"
    if family == "32I":
        return "I"
    if family == "64F":
        return "Z" if c_type == "c128" else "D"
    return "C" if c_type == "c64" else "S"


def _types(routine, ab, bb, cb, a_type, b_type, c_type, compute):
    ta_ = data_type_of(ab, a_type, "a")
    tb_ = data_type_of(bb, b_type, "b")
    tc_ = data_type_of(cb, c_type, "c")
    if ta_ != tb_ and not (ta_ in _FP8 and tb_ in _FP8):
        raise TypeError(f"{routine}: a is {ta_} but b is {tb_}; they must match")
    code = _compute_code(compute)
    if ta_ in _FP8:
        return ta_, tb_, tc_, code
    if code == -1:
        code = default_compute(ta_, tc_)
    family = _COMPUTE_FAMILY[code]
    if (family, ta_, tc_) not in _SUPPORTED:
        combos = ", ".join(f"{a}->{c} ({f})" for f, a, c in sorted(_SUPPORTED))
        raise TypeError(f"{routine}: inputs {ta_} into {tc_} with compute {family} is not a "
                        f"combination cublasGemmEx supports ({combos})")
    return ta_, tb_, tc_, code


def _algo(algo) -> int:
    if algo is None or algo == "default":
        return _ALGO_DEFAULT
    if isinstance(algo, bool) or not isinstance(algo, int):
        raise ValueError(f"algo must be None, 'default' or a cublasGemmAlgo_t int, got "
                         f"{algo!r}")
    return algo


def gemm_ex(transa, transb, alpha, a, b, beta, c, *, compute=None, a_type=None,
            b_type=None, c_type=None, algo=None, handle=None) -> None:
    """``C = alpha * op(A) @ op(B) + beta * C`` with separate element and compute types
    (``cublasGemmEx``).

    Parameters
    ----------
    transa, transb : {"N", "T", "C"}
    alpha, beta : numbers in the compute's scale type (float for 32F compute, int for
        32I); one-element device arrays in device pointer mode
    a, b, c : device arrays, 2-d, column-major
        Element types from their dtypes: float16, float32, float64, complex64/128, int8
        (into int32 or float32); bfloat16 and fp8 from ml_dtypes dtypes or by
        `a_type`/`b_type`/`c_type`.
    compute : str, optional
        "32F" (default for 16-bit, float32 and int8->float32 inputs), "tf32" (float32
        through TF32 tensor cores), "32F_fast_16F", "32F_fast_16BF", "16F", "32I"
        (default for int8 -> int32), "64F", and the "_pedantic" forms.
    a_type, b_type, c_type : str, optional
        Element types by name ("f16", "bf16", "f32", "i8", "i32", "f8e4m3",
        "f8e5m2"...), overriding the dtype of a buffer with the same item size.
    algo : int, optional
        A cublasGemmAlgo_t; default lets cuBLAS choose (the fast choice on Ampere and
        newer, where the other values are ignored).

    Notes
    -----
    int8 inputs run on cuBLAS's integer kernels, which cover some shapes and layouts
    only: others fail with ``CUBLAS_STATUS_NOT_SUPPORTED`` (seen for a 64x48x96 "N", "N"
    problem with cuBLAS 13.1 on an H200, while 8x16x32 ran).

    fp8 inputs (sm_89 and newer) are computed by cuBLASLt with float32 compute; there
    `transa` must be "T" and `transb` "N" on current GPUs, and c may be bf16, f16 or
    f32.

    Raises
    ------
    TypeError
        A combination of types cublasGemmEx does not support, listed in the message.
    ValueError
        Shapes, leading dimensions, devices, as `gemm`.
    """
    h = resolve(handle)
    ta, tb, ab, bb, cb, m, n, k, lda, ldb, ldc = gemm_geometry(h, "gemm_ex", transa,
                                                                transb, a, b, c)
    t_a, t_b, t_c, code = _types("gemm_ex", ab, bb, cb, a_type, b_type, c_type, compute)
    if t_a in _FP8:
        from .ltmatmul import lt_matmul
        lt_matmul(transa, transb, alpha, ab, bb, beta, cb, cb, a_type=t_a, b_type=t_b,
                  c_type=t_c, d_type=t_c, handle=h)
        return
    letter = scale_letter(code, t_c)
    ka, pa = h.scalar(letter, alpha, "alpha")
    kb, pb = h.scalar(letter, beta, "beta")
    name = "cublasGemmEx_64" if V.needs_64(m, n, k, lda, ldb, ldc) else "cublasGemmEx"
    invoke(name, h.ready(), ta, tb, m, n, k, pa, ab.ptr, DATA_TYPES[t_a][0], lda, bb.ptr,
           DATA_TYPES[t_b][0], ldb, pb, cb.ptr, DATA_TYPES[t_c][0], ldc, code, _algo(algo))


def gemm_strided_batched_ex(transa, transb, alpha, a, b, beta, c, *, compute=None,
                            a_type=None, b_type=None, c_type=None, algo=None,
                            handle=None) -> None:
    """`gemm_ex` over 3-d batches at fixed strides (``cublasGemmStridedBatchedEx``).

    Batches as `gemm_strided_batched` (a batch axis of 1 in a or b broadcasts); types
    as `gemm_ex`, fp8 excepted.
    """
    h = resolve(handle)
    (ta, tb, ab, bb, cb, m, n, k, lda, ldb, ldc, sa, sb, sc,
     batch) = strided_geometry(h, "gemm_strided_batched_ex", transa, transb, a, b, c)
    t_a, t_b, t_c, code = _types("gemm_strided_batched_ex", ab, bb, cb, a_type, b_type,
                                 c_type, compute)
    if t_a in _FP8:
        raise TypeError("gemm_strided_batched_ex: fp8 batches go through "
                        "cupric.cublas.ltmatmul.lt_matmul")
    letter = scale_letter(code, t_c)
    ka, pa = h.scalar(letter, alpha, "alpha")
    kb, pb = h.scalar(letter, beta, "beta")
    big = V.needs_64(m, n, k, lda, ldb, ldc, batch)
    invoke("cublasGemmStridedBatchedEx_64" if big else "cublasGemmStridedBatchedEx",
           h.ready(), ta, tb, m, n, k, pa, ab.ptr, DATA_TYPES[t_a][0], lda, sa, bb.ptr,
           DATA_TYPES[t_b][0], ldb, sb, pb, cb.ptr, DATA_TYPES[t_c][0], ldc, sc, batch,
           code, _algo(algo))


def gemm_batched_ex(transa, transb, alpha, a, b, beta, c, *, compute=None, a_type=None,
                    b_type=None, c_type=None, algo=None, handle=None) -> None:
    """`gemm_ex` over lists of matrices (``cublasGemmBatchedEx``); see `gemm_batched`.

    Cost
    ----
    Three small uploads of pointer arrays on the handle's stream.
    """
    h = resolve(handle)
    (ta, tb, abufs, bbufs, cbufs, m, n, k, lda, ldb, ldc,
     batch) = batched_geometry(h, "gemm_batched_ex", transa, transb, a, b, c)
    t_a, t_b, t_c, code = _types("gemm_batched_ex", abufs[0], bbufs[0], cbufs[0], a_type,
                                 b_type, c_type, compute)
    if t_a in _FP8:
        raise TypeError("gemm_batched_ex: fp8 batches go through "
                        "cupric.cublas.ltmatmul.lt_matmul")
    letter = scale_letter(code, t_c)
    ka, pa = h.scalar(letter, alpha, "alpha")
    kb, pb = h.scalar(letter, beta, "beta")
    arrays = [pointer_array(h, bufs) for bufs in (abufs, bbufs, cbufs)]
    try:
        big = V.needs_64(m, n, k, lda, ldb, ldc, batch)
        invoke("cublasGemmBatchedEx_64" if big else "cublasGemmBatchedEx", h.ready(), ta,
               tb, m, n, k, pa, arrays[0].ptr, DATA_TYPES[t_a][0], lda, arrays[1].ptr,
               DATA_TYPES[t_b][0], ldb, pb, arrays[2].ptr, DATA_TYPES[t_c][0], ldc, batch,
               code, _algo(algo))
    finally:
        for arr in arrays:
            arr.close(stream=h.stream)
