"""cuBLAS argument checks at their edges: leading dimension exactly the row count and one
less, increments of 0 / negative / not a whole item, vectors and matrices of 0 and 1
elements (whose strides cuBLAS never uses), the 32-bit limit, option words, and the symbol
table for every precision.

cuBLAS itself checks almost nothing: a leading dimension one too small reads the wrong
elements without an error, so these checks are the only guard. The buffers here are
stand-ins with the attributes the checks read (no device memory is needed).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cupric.cublas import _validate as V


def buf(shape, strides, dtype=np.float64):
    dt = np.dtype(dtype)
    return SimpleNamespace(shape=tuple(shape), strides=tuple(strides), ndim=len(shape),
                           itemsize=dt.itemsize, dtype=dt)


# -- vectors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, strides, expected", [
    ((0,), (8,), (0, 1)), ((0,), (0,), (0, 1)),
    ((1,), (8,), (1, 1)), ((1,), (0,), (1, 1)), ((1,), (-8,), (1, 1)), ((1,), (3,), (1, 1)),
    ((2,), (8,), (2, 1)), ((5,), (24,), (5, 3)), ((3,), (8 * 2**20,), (3, 2**20)),
])
def test_vector_increments(shape, strides, expected):
    assert V.vector(buf(shape, strides), "x") == expected


@pytest.mark.parametrize("strides", [(0,), (-8,), (-16,), (12,), (4,), (9,)])
def test_vector_increments_refused(strides):
    with pytest.raises(ValueError, match=rf"x has a byte stride of {strides[0]}; cuBLAS needs a "
                                         rf"positive multiple of the item size \(8\)"):
        V.vector(buf((2,), strides), "x")


@pytest.mark.parametrize("shape", [(), (2, 2), (1, 1, 1)])
def test_vector_needs_one_dimension(shape):
    with pytest.raises(ValueError, match=rf"y must be a 1-d vector, got shape"):
        V.vector(buf(shape, (8,) * len(shape)), "y")


# -- matrices ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, strides, expected", [
    ((4, 3), (8, 32), (4, 3, 4)),            # ld exactly the row count
    ((4, 3), (8, 40), (4, 3, 5)),            # padded columns
    ((4, 3), (8, 8 * 2**20), (4, 3, 2**20)),
    ((1, 3), (999, 8), (1, 3, 1)),           # one row: its stride is never used
    ((1, 3), (8, 24), (1, 3, 3)),
    ((4, 1), (8, 0), (4, 1, 4)),             # one column: ld is rows, whatever the stride
    ((4, 1), (8, -8), (4, 1, 4)),
    ((4, 0), (8, 8), (4, 0, 4)),
    ((0, 0), (8, 8), (0, 0, 1)),             # ld is at least 1
    ((0, 1), (8, 8), (0, 1, 1)),
    ((0, 3), (8, 8), (0, 3, 1)),
    ((1, 1), (0, 0), (1, 1, 1)),
])
def test_matrix_leading_dimensions(shape, strides, expected):
    assert V.matrix(buf(shape, strides), "a") == expected


@pytest.mark.parametrize("shape, strides", [
    ((4, 3), (8, 24)),                       # ld = rows - 1: columns overlap
    ((4, 3), (8, 0)),                        # broadcast columns
    ((4, 3), (8, -32)),
    ((4, 3), (8, 36)),                       # not a whole number of elements
    ((0, 3), (8, 0)),                        # ld must still be >= 1
    ((4, 2), (8, 4)),
])
def test_matrix_leading_dimension_refused(shape, strides):
    with pytest.raises(ValueError, match=rf"a has a column stride of {strides[1]} bytes: the "
                                         rf"leading dimension must be a whole number of "
                                         rf"elements >= rows \({shape[0]}\)"):
        V.matrix(buf(shape, strides), "a")


def test_matrix_rows_must_be_contiguous_with_a_hint_for_row_major():
    with pytest.raises(ValueError) as info:
        V.matrix(buf((2, 3), (24, 8)), "b")       # C order: row-major
    assert str(info.value) == (
        "b is not column-major: strides (24, 8) for shape (2, 3); cuBLAS needs unit stride "
        "down each column (it is row-major: pass its transpose .T with the opposite trans, "
        "or use cupric.cublas.matmul)")
    with pytest.raises(ValueError) as info:
        V.matrix(buf((2, 3), (16, 32)), "b")      # neither
    assert str(info.value) == ("b is not column-major: strides (16, 32) for shape (2, 3); "
                               "cuBLAS needs unit stride down each column")


@pytest.mark.parametrize("shape", [(4,), (), (2, 2, 2)])
def test_matrix_needs_two_dimensions(shape):
    with pytest.raises(ValueError, match="c must be a 2-d matrix, got shape"):
        V.matrix(buf(shape, (8,) * len(shape)), "c")


# -- the 32-bit limit --------------------------------------------------------------------------

def test_the_int32_limit_exactly_and_one_past():
    assert V.INT32_MAX == 2**31 - 1
    assert V.needs_64() is False
    assert V.needs_64(0, V.INT32_MAX, 5) is False
    assert V.needs_64(1, V.INT32_MAX + 1) is True
    assert V.needs_64(V.INT32_MAX + 1, 0) is True
    V.check_int32("rotg", n=V.INT32_MAX, lda=1)
    with pytest.raises(OverflowError, match=r"rotg: lda = 2147483648 exceeds 2\*\*31 - 1"):
        V.check_int32("rotg", n=V.INT32_MAX, lda=V.INT32_MAX + 1)


# -- options -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn, value, code", [
    (V.trans_code, "N", 0), (V.trans_code, "T", 1), (V.trans_code, "C", 2),
    (V.trans_code, "n", 0), (V.trans_code, "no", 0), (V.trans_code, "None", 0),
    (V.trans_code, "t", 1), (V.trans_code, "Transpose", 1), (V.trans_code, "c", 2),
    (V.trans_code, "H", 2), (V.trans_code, "conj", 2), (V.trans_code, "CONJUGATE", 2),
    (V.trans_code, "hermitian", 2),
    (V.uplo_code, "L", 0), (V.uplo_code, "U", 1), (V.uplo_code, "l", 0),
    (V.uplo_code, "Lower", 0), (V.uplo_code, "u", 1), (V.uplo_code, "UPPER", 1),
    (V.diag_code, "N", 0), (V.diag_code, "U", 1), (V.diag_code, "n", 0),
    (V.diag_code, "non_unit", 0), (V.diag_code, "NonUnit", 0), (V.diag_code, "u", 1),
    (V.diag_code, "Unit", 1),
    (V.side_code, "L", 0), (V.side_code, "R", 1), (V.side_code, "l", 0),
    (V.side_code, "left", 0), (V.side_code, "r", 1), (V.side_code, "Right", 1),
])
def test_option_words(fn, value, code):
    assert fn(value) == code


@pytest.mark.parametrize("fn, value, message", [
    (V.trans_code, "X", "trans must be one of 'N', 'T', 'C', got 'X'"),
    (V.trans_code, 0, "trans must be one of 'N', 'T', 'C', got 0"),
    (V.trans_code, "", "trans must be one of 'N', 'T', 'C', got ''"),
    (V.trans_code, None, "trans must be one of 'N', 'T', 'C', got None"),
    (V.uplo_code, "C", "uplo must be one of 'L', 'U', got 'C'"),
    (V.diag_code, "T", "diag must be one of 'N', 'U', got 'T'"),
    (V.side_code, "U", "side must be one of 'L', 'R', got 'U'"),
])
def test_option_words_refused(fn, value, message):
    with pytest.raises(ValueError) as info:
        fn(value)
    assert str(info.value) == message


def test_option_errors_name_the_argument():
    with pytest.raises(ValueError, match="transb must be one of"):
        V.trans_code("Q", "transb")
    with pytest.raises(ValueError, match="fill must be one of"):
        V.uplo_code("Q", "fill")


@pytest.mark.parametrize("op, expected", [(0, (3, 5)), (1, (5, 3)), (2, (5, 3))])
def test_op_shape(op, expected):
    assert V.op_shape(3, 5, op) == expected


# -- precisions and symbols --------------------------------------------------------------------

@pytest.mark.parametrize("dtype, letter, real", [
    (np.float32, "S", "S"), (np.float64, "D", "D"), (np.complex64, "C", "S"),
    (np.complex128, "Z", "D"),
])
def test_precision_tables(dtype, letter, real):
    assert V.prefix_of(buf((1,), (1,), dtype), "x") == letter
    assert V.SCALAR_DTYPE[letter] == np.dtype(dtype)
    assert V.REAL_PREFIX[letter] == real


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int8, np.uint8, np.bool_])
def test_dtypes_without_a_blas_precision(dtype):
    with pytest.raises(TypeError, match=rf"x has dtype {np.dtype(dtype)}; cuBLAS routines "
                                        rf"take float32, float64, complex64 or complex128"):
        V.prefix_of(buf((1,), (1,), dtype), "x")


def test_operands_share_one_supported_dtype():
    a, b = buf((2,), (8,)), buf((2,), (8,))
    assert V.same_prefix("axpy", ("x", a), ("y", b)) == "D"
    assert V.same_prefix("axpy", ("x", a)) == "D"
    with pytest.raises(TypeError, match="axpy: y has dtype float32 but x has float64; all "
                                        "operands must share one dtype"):
        V.same_prefix("axpy", ("x", a), ("y", buf((2,), (4,), np.float32)))
    with pytest.raises(TypeError, match="axpy: z has dtype"):
        V.same_prefix("axpy", ("x", a), ("y", b), ("z", buf((2,), (4,), np.float32)))
    z = buf((2,), (16,), np.complex128)
    with pytest.raises(TypeError, match="dot is defined for float32, float64; x is complex128"):
        V.same_prefix("dot", ("x", z))
    with pytest.raises(TypeError, match="dotc is defined for complex64, complex128; x is "
                                        "float64"):
        V.same_prefix("dotc", ("x", a))
    assert V.same_prefix("dotc", ("x", z)) == "Z"
    assert V.same_prefix("no_such_routine_table_entry", ("x", z)) == "Z"  # all four


@pytest.mark.parametrize("routine, prefix, big, name", [
    ("gemm", "S", False, "cublasSgemm"), ("gemm", "Z", True, "cublasZgemm_64"),
    ("axpy", "D", False, "cublasDaxpy"), ("rot_real", "C", False, "cublasCsrot"),
    ("rot_real", "Z", True, "cublasZdrot_64"), ("scal_real", "C", False, "cublasCsscal"),
    ("scal_real", "Z", False, "cublasZdscal"), ("nrm2", "S", False, "cublasSnrm2"),
    ("nrm2", "C", False, "cublasScnrm2"), ("nrm2", "Z", False, "cublasDznrm2"),
    ("asum", "C", False, "cublasScasum"), ("asum", "Z", True, "cublasDzasum_64"),
    ("iamax", "S", False, "cublasIsamax"), ("iamax", "D", False, "cublasIdamax"),
    ("iamax", "C", False, "cublasIcamax"), ("iamax", "Z", False, "cublasIzamax"),
    ("iamin", "S", False, "cublasIsamin"), ("iamin", "D", True, "cublasIdamin_64"),
    ("iamin", "C", False, "cublasIcamin"), ("iamin", "Z", False, "cublasIzamin"),
    ("gemmStridedBatched", "C", False, "cublasCgemmStridedBatched"),
])
def test_routine_names(routine, prefix, big, name):
    assert V.routine_name(routine, prefix, big) == name


@pytest.mark.parametrize("routine, allowed", [
    ("dot", "SD"), ("dotu", "CZ"), ("dotc", "CZ"), ("rotm", "SD"), ("rotmg", "SD"),
    ("ger", "SD"), ("geru", "CZ"), ("gerc", "CZ"), ("hemv", "CZ"), ("her", "CZ"),
    ("herk", "CZ"), ("scal_real", "CZ"), ("rot_real", "CZ"), ("gemm", "SDCZ"),
    ("axpy", "SDCZ"), ("trsm", "SDCZ"), ("syr", "SDCZ"),
])
def test_which_precisions_each_routine_takes(routine, allowed):
    for letter, dtype in V.SCALAR_DTYPE.items():
        b = buf((1,), (1,), dtype)
        if letter in allowed:
            assert V.same_prefix(routine, ("x", b)) == letter
        else:
            with pytest.raises(TypeError, match=f"{routine} is defined for"):
                V.same_prefix(routine, ("x", b))


def test_the_first_operand_is_named_when_its_dtype_has_no_precision():
    with pytest.raises(TypeError, match="a has dtype float16; cuBLAS routines take"):
        V.same_prefix("gemm", ("a", buf((2,), (2,), np.float16)), ("b", buf((2,), (8,))))


class _Exported:
    """A device array known only through the CUDA Array Interface (a made-up pointer)."""

    def __init__(self, readonly):
        self.__cuda_array_interface__ = {"shape": (4,), "typestr": "<f8", "strides": None,
                                         "data": (0x20000, readonly), "version": 3,
                                         "stream": None}


def test_device_arrays_read_only_where_the_routine_writes():
    from cupric.runtime import memory as m
    ro = m.borrow(0x10000, (4,), (8,), np.float64, readonly=True)
    assert V.device_array(ro, "x") is ro
    assert V.device_array(ro, "x", stream=5) is ro      # no producer stream to wait for
    with pytest.raises(ValueError) as info:
        V.device_array(ro, "y", writable=True)
    assert str(info.value) == ("y is read-only (its producer exported it read-only) but this "
                               "routine writes it")
    rw = m.borrow(0x10000, (4,), (8,), np.float64)
    assert V.device_array(rw, "y", writable=True) is rw
    got = V.device_array(_Exported(readonly=True), "x")
    assert (got.ptr, got.shape, got.readonly) == (0x20000, (4,), True)
    with pytest.raises(ValueError) as info:
        V.device_array(_Exported(readonly=True), "c", writable=True)
    assert str(info.value) == ("c is read-only (its producer exported it read-only) but this "
                               "routine writes it")
    assert V.device_array(_Exported(readonly=False), "c", writable=True).readonly is False
