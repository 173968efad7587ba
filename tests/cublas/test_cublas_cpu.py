"""cupric.cublas on the CPU lane: tables against the generated bindings, validation that
fails before any cuBLAS call, and the row-major translation of matmul checked with real
data through a host-memory GEMM emulator (see _cublas_fake)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest

from cupric.cublas import _validate as V
from cupric.cublas import api as cb
from cupric.cublas import handle as handle_mod
from cupric.runtime.errors import ClosedError

from _cublas_fake import Emulator, FakeDeviceArray, dev, forbid_calls, host_uploads

lib = pytest.importorskip("cupric.cublas.lib")
if not lib.is_available():
    pytest.skip("cuBLAS bindings cannot be generated/loaded here", allow_module_level=True)


@pytest.fixture
def h():
    """A borrowed handle with a fake address: nothing can reach the GPU through it."""
    handle = handle_mod.Handle.from_handle(0xDEAD0, device=0)
    yield handle
    handle.close()


@pytest.fixture
def no_calls(monkeypatch):
    forbid_calls(monkeypatch)


@pytest.fixture
def emu(monkeypatch):
    e = Emulator()
    e.install(monkeypatch)
    host_uploads(monkeypatch)
    return e


def f_order(a):
    return np.asfortranarray(a)


# ---------------------------------------------------------------------------------------
# Import hygiene and tables


def test_import_loads_nothing():
    code = ("import sys, cupric.cublas.api, cupric.cublas\n"
            "assert 'cuda.bindings' not in sys.modules and 'cuda.bindings.driver' not in "
            "sys.modules\n"
            "from cupric.cublas import lib, lt\n"
            "assert lib.binding._module is None and lt.binding._module is None\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def _enum(ffi, typename):
    return {name: value for value, name in ffi.typeof(typename).elements.items()}


def test_enum_tables_match_headers():
    ffi = lib.ffi
    ops = _enum(ffi, "cublasOperation_t")
    assert V.TRANS == {"N": ops["CUBLAS_OP_N"], "T": ops["CUBLAS_OP_T"], "C": ops["CUBLAS_OP_C"]}
    fill = _enum(ffi, "cublasFillMode_t")
    assert V.UPLO == {"L": fill["CUBLAS_FILL_MODE_LOWER"], "U": fill["CUBLAS_FILL_MODE_UPPER"]}
    diag = _enum(ffi, "cublasDiagType_t")
    assert V.DIAG == {"N": diag["CUBLAS_DIAG_NON_UNIT"], "U": diag["CUBLAS_DIAG_UNIT"]}
    side = _enum(ffi, "cublasSideMode_t")
    assert V.SIDE == {"L": side["CUBLAS_SIDE_LEFT"], "R": side["CUBLAS_SIDE_RIGHT"]}
    math = _enum(ffi, "cublasMath_t")
    assert handle_mod.MATH_MODES == {
        "default": math["CUBLAS_DEFAULT_MATH"], "tensor_op": math["CUBLAS_TENSOR_OP_MATH"],
        "pedantic": math["CUBLAS_PEDANTIC_MATH"], "tf32": math["CUBLAS_TF32_TENSOR_OP_MATH"]}
    assert handle_mod._DISALLOW_REDUCED_PRECISION_REDUCTION == \
        math["CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION"]


def test_data_and_compute_types_match_headers():
    gemm_ex = importlib.import_module("cupric.cublas.gemm_ex")  # the module, not gemm_ex()
    ffi = lib.ffi
    types = _enum(ffi, "cudaDataType_t")
    names = {"f16": "CUDA_R_16F", "bf16": "CUDA_R_16BF", "f32": "CUDA_R_32F",
             "f64": "CUDA_R_64F", "c64": "CUDA_C_32F", "c128": "CUDA_C_64F", "i8": "CUDA_R_8I",
             "u8": "CUDA_R_8U", "i32": "CUDA_R_32I", "f8e4m3": "CUDA_R_8F_E4M3",
             "f8e5m2": "CUDA_R_8F_E5M2"}
    for short, (code, _size) in gemm_ex.DATA_TYPES.items():
        assert types[names[short]] == code, short
    compute = _enum(ffi, "cublasComputeType_t")
    for short, code in gemm_ex.COMPUTE_TYPES.items():
        full = {"tf32": "32F_FAST_TF32"}.get(short, short.upper())
        assert compute[f"CUBLAS_COMPUTE_{full}"] == code, short


def test_lt_tables_match_headers():
    from cupric.cublas import lt, ltmatmul
    ffi = lt.ffi
    epi = _enum(ffi, "cublasLtEpilogue_t")
    for name, spec in ltmatmul.EPILOGUES.items():
        assert epi[f"CUBLASLT_EPILOGUE_{name.upper()}"] == spec.code, name
    desc = _enum(ffi, "cublasLtMatmulDescAttributes_t")
    for name, code in ltmatmul._DESC.items():
        assert desc[f"CUBLASLT_MATMUL_DESC_{name}"] == code, name
    layout = _enum(ffi, "cublasLtMatrixLayoutAttribute_t")
    for name, code in ltmatmul._LAYOUT.items():
        assert layout[f"CUBLASLT_MATRIX_LAYOUT_{name}"] == code, name
    pref = _enum(ffi, "cublasLtMatmulPreferenceAttributes_t")
    for name, code in ltmatmul._PREF.items():
        assert pref[f"CUBLASLT_MATMUL_PREF_{name}"] == code, name


def test_every_dispatch_entry_resolves():
    """Each (routine, precision) of the table names a function the library exports, in
    both the 32-bit and the 64-bit-integer API, and the integer cast accepts it."""
    count = 0
    for routine, prefixes in V.SUPPORTED.items():
        for prefix in prefixes:
            for big in (False, True):
                if big and routine in ("rotg", "rotmg"):
                    continue  # scalars only: no _64 form exists or is needed
                name = V.routine_name(routine, prefix, big)
                fn = handle_mod.fast_function(name)
                assert fn is not None
                count += 1
    for name in ("cublasGemmEx", "cublasGemmBatchedEx", "cublasGemmStridedBatchedEx",
                 "cublasGemmEx_64", "cublasSetStream", "cublasSetWorkspace",
                 "cublasSetMathMode", "cublasSetAtomicsMode", "cublasSetPointerMode",
                 "cublasDestroy"):
        handle_mod.fast_function(name)
    from cupric.cublas import lt
    handle_mod.fast_function("cublasLtMatmul", lt)
    assert count > 150


def test_dispatch_names():
    assert V.routine_name("gemm", "Z") == "cublasZgemm"
    assert V.routine_name("nrm2", "C") == "cublasScnrm2"
    assert V.routine_name("iamax", "D", True) == "cublasIdamax_64"
    assert V.routine_name("scal_real", "Z") == "cublasZdscal"
    assert V.routine_name("rot_real", "C") == "cublasCsrot"


def test_integer_signature_of_gemm():
    sig = handle_mod._integer_signature(lib.ffi, lib.lib.cublasSgemm)
    assert sig == ("int(*)(uintptr_t, int, int, int, int, int, uintptr_t, uintptr_t, int, "
                   "uintptr_t, int, uintptr_t, uintptr_t, int)")


def test_options_validation():
    with pytest.raises(ValueError, match="math_mode"):
        cb.HandleOptions(math_mode="fast")
    with pytest.raises(ValueError, match="pointer_mode"):
        cb.HandleOptions(pointer_mode="gpu")
    with pytest.raises(ValueError, match="workspace_bytes"):
        cb.HandleOptions(workspace_bytes=-1)
    assert cb.HandleOptions(math_mode="tf32",
                            disallow_reduced_precision_reduction=True).math_flags() == 3 | 16


def test_handle_has_no_constructor():
    with pytest.raises(TypeError, match="Handle.get"):
        cb.Handle()


def test_host_scalars():
    keep, ptr = handle_mod.host_scalar("Z", 1 + 2j, "alpha")
    assert list(keep) == [1.0, 2.0]
    assert handle_mod.host_scalar("S", 1.0, "alpha")[1] == handle_mod.host_scalar("S", 1.0, "alpha")[1]
    with pytest.raises(TypeError, match="complex"):
        handle_mod.host_scalar("D", 1 + 1j, "alpha")
    with pytest.raises(TypeError, match="number"):
        handle_mod.host_scalar("S", "1", "alpha")
    with pytest.raises(TypeError, match="number"):
        handle_mod.host_scalar("S", True, "alpha")
    assert handle_mod.host_scalar("H", 1.5, "alpha")[0][0] == 0x3E00


# ---------------------------------------------------------------------------------------
# Validation before any call


def test_host_array_refused(h, no_calls):
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match="^x: .*host"):
        cb.axpy(1.0, x, dev(np.ones(4, np.float32)), handle=h)
    with pytest.raises(TypeError, match="^a: "):
        cb.matmul(np.ones((2, 2)), dev(np.ones((2, 2))), out=dev(np.ones((2, 2))), handle=h)


def test_closed_handle(h, no_calls):
    x, y = dev(np.ones(4)), dev(np.ones(4))
    h.close()
    with pytest.raises(ClosedError, match="Handle is closed"):
        cb.axpy(1.0, x, y, handle=h)
    with pytest.raises(ClosedError):
        cb.matmul(dev(np.ones((2, 2))), dev(np.ones((2, 2))), out=dev(np.ones((2, 2))),
                  handle=h)
    with pytest.raises(ClosedError):
        h.ptr


def test_closed_buffer(h, no_calls):
    x = dev(np.ones(4))
    x.close()
    with pytest.raises(ClosedError, match="x is a closed"):
        cb.axpy(1.0, x, dev(np.ones(4)), handle=h)


def test_not_a_handle(no_calls):
    with pytest.raises(TypeError, match="handle must be"):
        cb.axpy(1.0, dev(np.ones(2)), dev(np.ones(2)), handle=object())


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.bool_])
def test_unsupported_dtype(h, no_calls, dtype):
    x = dev(np.ones(4, dtype))
    with pytest.raises(TypeError, match="cuBLAS routines take"):
        cb.axpy(1.0, x, x, handle=h)


def test_mixed_dtypes(h, no_calls):
    with pytest.raises(TypeError, match="share one dtype"):
        cb.axpy(1.0, dev(np.ones(4, np.float32)), dev(np.ones(4)), handle=h)
    with pytest.raises(TypeError, match="matmul: a is float32 but b is float64"):
        cb.matmul(dev(np.ones((2, 2), np.float32)), dev(np.ones((2, 2))),
                  out=dev(np.ones((2, 2))), handle=h)


def test_routine_precision_table(h, no_calls):
    with pytest.raises(TypeError, match="hemv is defined for complex64, complex128"):
        cb.hemv("L", 1.0, dev(f_order(np.ones((2, 2)))), dev(np.ones(2)), 0.0,
                dev(np.ones(2)), handle=h)
    with pytest.raises(TypeError, match="rotm is defined for float32, float64"):
        cb.rotm(dev(np.ones(2, np.complex64)), dev(np.ones(2, np.complex64)), np.zeros(5),
                handle=h)


def test_vector_checks(h, no_calls):
    with pytest.raises(ValueError, match="x has 4 elements but y has 3"):
        cb.axpy(1.0, dev(np.ones(4)), dev(np.ones(3)), handle=h)
    with pytest.raises(ValueError, match="1-d vector"):
        cb.axpy(1.0, dev(np.ones((2, 2))), dev(np.ones((2, 2))), handle=h)
    with pytest.raises(ValueError, match="positive multiple"):
        cb.axpy(1.0, dev(np.ones(4)[::-1]), dev(np.ones(4)), handle=h)
    with pytest.raises(ValueError, match="read-only"):
        cb.axpy(1.0, dev(np.ones(4)), dev(np.ones(4), readonly=True), handle=h)
    with pytest.raises(TypeError, match="complex but this call's scalars are real"):
        cb.axpy(1j, dev(np.ones(4)), dev(np.ones(4)), handle=h)


def test_matrix_checks(h, no_calls):
    c_order = dev(np.ones((3, 4)))
    with pytest.raises(ValueError, match="not column-major.*row-major"):
        cb.gemm("N", "N", 1.0, c_order, dev(f_order(np.ones((4, 2)))), 0.0,
                dev(f_order(np.ones((3, 2)))), handle=h)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        cb.gemm("N", "N", 1.0, dev(f_order(np.ones((3, 4)))), dev(f_order(np.ones((5, 2)))),
                0.0, dev(f_order(np.ones((3, 2)))), handle=h)
    with pytest.raises(ValueError, match="c must be 3x2, got 2x3"):
        cb.gemm("N", "N", 1.0, dev(f_order(np.ones((3, 4)))), dev(f_order(np.ones((4, 2)))),
                0.0, dev(f_order(np.ones((2, 3)))), handle=h)
    with pytest.raises(ValueError, match="trans must be one of"):
        cb.gemv("X", 1.0, dev(f_order(np.ones((2, 2)))), dev(np.ones(2)), 0.0,
                dev(np.ones(2)), handle=h)
    with pytest.raises(ValueError, match="must be square"):
        cb.trsv("L", "N", "N", dev(f_order(np.ones((2, 3)))), dev(np.ones(2)), handle=h)
    with pytest.raises(ValueError, match="herk: trans must be 'N' or 'C'"):
        cb.herk("L", "T", 1.0, dev(f_order(np.ones((2, 2), np.complex64))), 0.0,
                dev(f_order(np.ones((2, 2), np.complex64))), handle=h)
    with pytest.raises(ValueError, match="kl \\+ ku \\+ 1 = 3 rows"):
        cb.gbmv("N", 4, 1, 1, 1.0, dev(f_order(np.ones((4, 4)))), dev(np.ones(4)), 0.0,
                dev(np.ones(4)), handle=h)


def test_leading_dimension_check(h, no_calls):
    # A column-major 4x3 view whose columns are only 2 elements apart overlaps itself.
    base = np.zeros(20)
    bad = np.lib.stride_tricks.as_strided(base, shape=(4, 3), strides=(8, 16))
    with pytest.raises(ValueError, match="leading dimension must be"):
        cb.gemv("N", 1.0, dev(bad), dev(np.ones(3)), 0.0, dev(np.ones(4)), handle=h)


def test_batched_checks(h, no_calls):
    a = dev(np.ones((3, 2, 2)).transpose(0, 2, 1))
    with pytest.raises(ValueError, match="batch of 2, c of 3"):
        cb.gemm_strided_batched("N", "N", 1.0, a, dev(np.ones((2, 2, 2)).transpose(0, 2, 1)),
                                0.0, dev(np.ones((3, 2, 2)).transpose(0, 2, 1)), handle=h)
    with pytest.raises(ValueError, match="shares one shape"):
        cb.gemm_batched("N", "N", 1.0, [dev(f_order(np.ones((2, 2)))),
                                        dev(f_order(np.ones((3, 2))))],
                        [dev(f_order(np.ones((2, 2))))] * 2, 0.0,
                        [dev(f_order(np.ones((2, 2))))] * 2, handle=h)


def test_gemm_ex_type_checks(h, no_calls):
    a = dev(f_order(np.ones((4, 4), np.float16)))
    c32 = dev(f_order(np.ones((4, 4), np.int32)))
    with pytest.raises(TypeError, match="not a combination cublasGemmEx supports"):
        cb.gemm_ex("N", "N", 1.0, a, a, 0.0, c32, handle=h)
    with pytest.raises(TypeError, match="f32 has 4-byte items"):
        cb.gemm_ex("N", "N", 1.0, a, a, 0.0, a, a_type="f32", handle=h)
    with pytest.raises(ValueError, match="compute must be"):
        cb.gemm_ex("N", "N", 1.0, a, a, 0.0, a, compute="fp7", handle=h)
    with pytest.raises(TypeError, match="int32"):
        i8 = dev(f_order(np.ones((4, 4), np.int8)))
        cb.gemm_ex("N", "N", 1.5, i8, i8, 0, c32, handle=h)


def test_lt_matmul_checks(h, no_calls):
    a = dev(f_order(np.ones((4, 4), np.float32)))
    with pytest.raises(ValueError, match="epilogue must be one of"):
        cb.lt_matmul("N", "N", 1.0, a, a, 0.0, None, a, epilogue="swish", handle=h)
    with pytest.raises(ValueError, match="needs bias="):
        cb.lt_matmul("N", "N", 1.0, a, a, 0.0, None, a, epilogue="relu_bias", handle=h)
    with pytest.raises(ValueError, match="vector of 4 elements"):
        cb.lt_matmul("N", "N", 1.0, a, a, 0.0, None, a, epilogue="bias",
                     bias=dev(np.ones(3, np.float32)), handle=h)
    with pytest.raises(ValueError, match="at least 64 bytes"):
        cb.lt_matmul("N", "N", 1.0, a, a, 0.0, None, a, epilogue="relu_aux",
                     aux=dev(np.zeros(8, np.uint8)), handle=h)
    with pytest.raises(ValueError, match="c is None, so beta must be 0"):
        cb.lt_matmul("N", "N", 1.0, a, a, 1.0, None, a, handle=h)


def test_aux_layout():
    assert cb.aux_layout("relu_aux", 100, 3, "f16") == (128, 128 * 3 // 8)
    assert cb.aux_layout("gelu_aux", 100, 3, "f16") == (104, 104 * 3 * 2)
    assert cb.aux_layout("bias", 100, 3, "f16") == (0, 0)


def test_matmul_checks(h, no_calls):
    out = dev(np.ones((2, 2)))
    with pytest.raises(ValueError, match="contracted dimensions differ"):
        cb.matmul(dev(np.ones((2, 3))), dev(np.ones((2, 2))), out=out, handle=h)
    with pytest.raises(ValueError, match="out must have shape \\(2, 3\\)"):
        cb.matmul(dev(np.ones((2, 2))), dev(np.ones((2, 3))), out=out, handle=h)
    with pytest.raises(ValueError, match="do not broadcast"):
        cb.matmul(dev(np.ones((2, 2, 2))), dev(np.ones((3, 2, 2))),
                  out=dev(np.ones((2, 2, 2))), handle=h)
    a = np.ones((4, 4))
    with pytest.raises(ValueError, match="overlaps a"):
        cb.matmul(dev(a[:2, :2]), dev(np.ones((2, 2))), out=dev(a[1:3, 1:3]), handle=h)
    with pytest.raises(ValueError, match="no unit stride"):
        cb.matmul(dev(a[::2, ::2]), dev(np.ones((2, 2))), out=out, handle=h)
    with pytest.raises(ValueError, match="precision must be"):
        cb.matmul(dev(np.ones((2, 2), np.float32)), dev(np.ones((2, 2), np.float32)),
                  out=dev(np.ones((2, 2), np.float32)), precision="fp4", handle=h)
    with pytest.raises(ValueError, match="applies to float32"):
        cb.matmul(dev(np.ones((2, 2))), dev(np.ones((2, 2))), out=out, precision="tf32",
                  handle=h)
    with pytest.raises(TypeError, match="not supported"):
        i = dev(np.ones((2, 2), np.int64))
        cb.matmul(i, i, out=i, handle=h)


def test_device_pointer_mode_needs_device_scalars(no_calls):
    handle = handle_mod.Handle.from_handle(0xDEAD0, device=0, pointer_mode="device")
    with pytest.raises(TypeError, match="^alpha: "):
        cb.axpy(1.0, dev(np.ones(2)), dev(np.ones(2)), handle=handle)
    with pytest.raises(ValueError, match="pass out="):
        cb.nrm2(dev(np.ones(2)), handle=handle)


# ---------------------------------------------------------------------------------------
# Row-major translation, with data, through the emulator


def _rand(rng, shape, dtype=np.float64):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


LAYOUTS = {
    "C": lambda a: np.ascontiguousarray(a),
    "F": lambda a: np.asfortranarray(a),
    "sliceC": lambda a: np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, 3)])[..., :a.shape[-1]],
    "sliceF": lambda a: np.asfortranarray(np.pad(a, [(0, 0)] * (a.ndim - 2) + [(0, 2), (0, 0)]))[..., :a.shape[-2], :],
}


@pytest.mark.parametrize("la", sorted(LAYOUTS))
@pytest.mark.parametrize("lb", sorted(LAYOUTS))
@pytest.mark.parametrize("lo", ["C", "F"])
def test_matmul_2d_layouts(h, emu, rng, la, lb, lo):
    a, b = _rand(rng, (5, 3)), _rand(rng, (3, 4))
    out = LAYOUTS[lo](np.full((5, 4), np.nan))
    ad, bd = LAYOUTS[la](a), LAYOUTS[lb](b)
    cb.matmul(dev(ad), dev(bd), out=dev(out), handle=h)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    assert len(emu.calls) == 1 and emu.calls[0][0] == "Dgemm"


def test_matmul_transposed_views_need_no_copy(h, emu, rng):
    a = _rand(rng, (3, 5), np.complex128)
    b = _rand(rng, (4, 3), np.complex128)
    out = np.full((5, 4), np.nan, np.complex128)
    cb.matmul(dev(a).T, dev(b).T, out=dev(out), handle=h)
    np.testing.assert_allclose(out, a.T @ b.T, rtol=1e-12)
    # C.T = B.T @ A.T with both stored row-major: b.T (row-major view of b's transpose...)
    name, ta, tb, m, n, k, lda, ldb, ldc = emu.calls[0]
    assert (name, m, n, k) == ("Zgemm", 4, 5, 3)


def test_matmul_alpha_beta(h, emu, rng):
    a, b = _rand(rng, (4, 4)), _rand(rng, (4, 4))
    c0 = _rand(rng, (4, 4))
    out = c0.copy()
    cb.matmul(dev(a), dev(b), out=dev(out), alpha=2.0, beta=-0.5, handle=h)
    np.testing.assert_allclose(out, 2 * a @ b - 0.5 * c0, rtol=1e-12)


@pytest.mark.parametrize("shapes", [((3,), (3, 4)), ((5, 3), (3,)), ((3,), (3,)),
                                    ((2, 5, 3), (3,)), ((3,), (2, 3, 4))])
def test_matmul_vectors(h, emu, rng, shapes):
    sa, sb = shapes
    a, b = _rand(rng, sa), _rand(rng, sb)
    expect = np.matmul(a, b)
    out = np.full(np.shape(expect), np.nan)
    # strided vectors: take every other element of a longer one
    ad = np.repeat(a, 2, axis=-1)[..., ::2] if a.ndim == 1 else a
    cb.matmul(dev(ad), dev(b), out=dev(out), handle=h)
    np.testing.assert_allclose(out, expect, rtol=1e-12)


@pytest.mark.parametrize("sa,sb", [((4, 5, 3), (4, 3, 2)), ((4, 5, 3), (3, 2)),
                                   ((5, 3), (4, 3, 2)), ((2, 1, 5, 3), (1, 3, 3, 2)),
                                   ((1, 5, 3), (4, 3, 2))])
def test_matmul_batches(h, emu, rng, sa, sb):
    a, b = _rand(rng, sa, np.float32), _rand(rng, sb, np.float32)
    expect = np.matmul(a.astype(np.float64), b)
    out = np.full(expect.shape, np.nan, np.float32)
    cb.matmul(dev(a), dev(b), out=dev(out), handle=h)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)
    # (2, 1) @ (1, 3) batch axes broadcast crosswise: no single stride, pointer arrays.
    want = "SgemmBatched" if sa == (2, 1, 5, 3) else "SgemmStridedBatched"
    assert emu.calls[0][0] == want


def test_matmul_batch_of_transposes(h, emu, rng):
    a = _rand(rng, (3, 4, 5))
    b = _rand(rng, (3, 4, 2))
    out = np.full((3, 5, 2), np.nan)
    cb.matmul(dev(a).transpose(0, 2, 1), dev(b), out=dev(out), handle=h)
    np.testing.assert_allclose(out, a.transpose(0, 2, 1) @ b, rtol=1e-12)


def test_matmul_float16_and_int8_go_through_gemm_ex(h, emu, rng):
    a = rng.integers(-3, 4, (4, 8)).astype(np.float16)
    b = rng.integers(-3, 4, (8, 4)).astype(np.float16)
    out = np.full((4, 4), np.nan, np.float16)
    cb.matmul(dev(a), dev(b), out=dev(out), handle=h)
    np.testing.assert_array_equal(out, (a.astype(np.float32) @ b).astype(np.float16))
    assert emu.calls[-1][0] == "GemmEx" and emu.calls[-1][-1] == 68
    ai = rng.integers(-100, 100, (4, 8)).astype(np.int8)
    bi = rng.integers(-100, 100, (8, 4)).astype(np.int8)
    oi = np.full((4, 4), -1, np.int32)
    cb.matmul(dev(ai), dev(bi), out=dev(oi), handle=h)
    np.testing.assert_array_equal(oi, ai.astype(np.int32) @ bi)
    assert emu.calls[-1][-1] == 72


def test_matmul_tf32_precision_selects_compute(h, emu, rng):
    a = _rand(rng, (4, 4), np.float32)
    out = np.zeros((4, 4), np.float32)
    cb.matmul(dev(a), dev(a), out=dev(out), precision="tf32", handle=h)
    assert emu.calls[-1][0] == "GemmEx" and emu.calls[-1][-1] == 77


def test_outer_and_dot_shapes(h, emu, rng):
    x, y = _rand(rng, 5), _rand(rng, 3)
    out = np.full((5, 3), np.nan)
    cb.outer(dev(x), dev(y), out=dev(out), handle=h)
    np.testing.assert_allclose(out, np.outer(x, y), rtol=1e-12)
    a, b = _rand(rng, (2, 3)), _rand(rng, (3, 2))
    o2 = np.full((2, 2), np.nan)
    cb.dot(dev(a), dev(b), out=dev(o2), handle=h)
    np.testing.assert_allclose(o2, a @ b, rtol=1e-12)


def test_blas_gemm_batched_lists(h, emu, rng):
    mats = [[f_order(_rand(rng, shape)) for _ in range(3)] for shape in ((4, 3), (3, 2))]
    outs = [f_order(np.full((4, 2), np.nan)) for _ in range(3)]
    cb.gemm_batched("N", "N", 1.0, [dev(x) for x in mats[0]], [dev(x) for x in mats[1]],
                    0.0, [dev(x) for x in outs], handle=h)
    for a, b, c in zip(mats[0], mats[1], outs):
        np.testing.assert_allclose(c, a @ b, rtol=1e-12)


def test_blas_gemm_column_major(h, emu, rng):
    a, b = f_order(_rand(rng, (4, 3), np.complex64)), f_order(_rand(rng, (2, 3), np.complex64))
    c = f_order(np.full((4, 2), np.nan, np.complex64))
    cb.gemm("N", "C", 1.0, dev(a), dev(b), 0.0, dev(c), handle=h)
    np.testing.assert_allclose(c, a @ b.conj().T, rtol=1e-5)


def test_gemm_strided_batched_broadcast(h, emu, rng):
    a = np.ascontiguousarray(_rand(rng, (1, 3, 4)).transpose(0, 2, 1)).transpose(0, 2, 1)
    b = _rand(rng, (5, 2, 4)).transpose(0, 2, 1)  # (5, 4, 2) column-major matrices
    c = np.full((5, 2, 3), np.nan).transpose(0, 2, 1)
    cb.gemm_strided_batched("N", "N", 1.0, dev(a), dev(b), 0.0, dev(c), handle=h)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)
    assert emu.calls[0][-4] == 0  # a's batch stride: broadcast


def test_fake_array_roundtrip():
    arr = np.arange(6.0).reshape(2, 3)
    buf = dev(arr)
    assert buf.shape == (2, 3) and buf.ptr == arr.ctypes.data
    assert FakeDeviceArray(arr).__cuda_array_interface__["version"] == 2


# ---------------------------------------------------------------------------------------
# Every wrapper against the real C signatures (argument count and kinds)


@pytest.fixture
def arity(monkeypatch):
    from _cublas_fake import ArityTable, install_table
    table = ArityTable()
    install_table(monkeypatch, table)
    host_uploads(monkeypatch)
    return table


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_every_routine_calls_with_the_c_arity(h, arity, dtype):
    v = lambda n=4: dev(np.ones(n, dtype))  # noqa: E731
    M = lambda r=4, c=4: dev(f_order(np.ones((r, c), dtype)))  # noqa: E731
    cplx = np.dtype(dtype).kind == "c"
    cb.axpy(1.0, v(), v(), handle=h)
    cb.dot(v(), v(), handle=h)
    if cplx:
        cb.dotu(v(), v(), handle=h)
        cb.dotc(v(), v(), handle=h)
        cb.geru(1.0, v(), v(), M(), handle=h)
        cb.gerc(1.0, v(), v(), M(), handle=h)
        cb.hemv("L", 1.0, M(), v(), 0.0, v(), handle=h)
        cb.her("U", 1.0, v(), M(), handle=h)
        cb.herk("L", "C", 1.0, M(), 0.0, M(), handle=h)
        cb.scal(2.0, v(), handle=h)
        cb.scal(2j, v(), handle=h)
        cb.rot(v(), v(), 0.5, 0.5j, handle=h)
    else:
        cb.blas_dot(v(), v(), handle=h)
        cb.rotm(v(), v(), np.zeros(5), handle=h)
        cb.rotmg(1.0, 1.0, 1.0, 1.0, dtype=dtype, handle=h)
        cb.scal(2.0, v(), handle=h)
    cb.nrm2(v(), handle=h)
    cb.asum(v(), handle=h)
    assert cb.iamax(v(), handle=h) == -1  # the fake writes nothing: 0 - 1
    cb.iamin(v(), handle=h)
    cb.copy(v(), v(), handle=h)
    cb.swap(v(), v(), handle=h)
    cb.rot(v(), v(), 0.5, 0.5, handle=h)
    cb.rotg(1.0, 2.0, dtype=dtype, handle=h)
    cb.gemv("T", 1.0, M(), v(), 0.0, v(), handle=h)
    cb.gbmv("N", 4, 1, 1, 1.0, M(3, 4), v(), 0.0, v(), handle=h)
    cb.ger(1.0, v(), v(), M(), handle=h)
    cb.symv("U", 1.0, M(), v(), 0.0, v(), handle=h)
    cb.trmv("L", "N", "U", M(), v(), handle=h)
    cb.trsv("U", "T", "N", M(), v(), handle=h)
    cb.syr("L", 1.0, v(), M(), handle=h)
    cb.gemm("N", "T", 1.0, M(), M(), 0.5, M(), handle=h)
    cb.gemm("N", "T", 1.0, M(), M(), 0.5, M(), handle=h)  # the replayed plan
    cb.gemm_batched("N", "N", 1.0, [M(), M()], [M(), M()], 0.0, [M(), M()], handle=h)
    batch = dev(np.ones((2, 4, 4), dtype).transpose(0, 2, 1))
    cb.gemm_strided_batched("N", "N", 1.0, batch, batch, 0.0,
                            dev(np.ones((2, 4, 4), dtype).transpose(0, 2, 1)), handle=h)
    cb.symm("R", "U", 1.0, M(), M(), 0.0, M(), handle=h)
    cb.syrk("L", "T", 1.0, M(), 0.0, M(), handle=h)
    cb.trmm("L", "U", "N", "N", 1.0, M(), M(), M(), handle=h)
    cb.trsm("R", "L", "T", "U", 1.0, M(), M(), handle=h)
    cb.geam("T", "N", 1.0, M(), 1.0, M(), M(), handle=h)
    cb.geam("T", "N", 1.0, M(), 0.0, None, M(), handle=h)
    cb.dgmm("L", M(), v(), M(), handle=h)
    cb.matmul(dev(np.ones((2, 3, 4), dtype)), dev(np.ones((2, 4, 5), dtype)),
              out=dev(np.ones((2, 3, 5), dtype)), handle=h)
    cb.matmul(dev(np.ones((2, 1, 3, 4), dtype)), dev(np.ones((1, 2, 4, 5), dtype)),
              out=dev(np.ones((2, 2, 3, 5), dtype)), handle=h)
    cb.solve_triangular(dev(np.ones((4, 4), dtype)), dev(np.ones((4, 2), dtype)),
                        overwrite_b=True, handle=h)
    names = {c[0] for c in arity.calls}
    prefix = V.PREFIX[np.dtype(dtype)]
    assert f"cublas{prefix}gemmBatched" in names and f"cublas{prefix}trsm" in names


def test_gemm_ex_forms_call_with_the_c_arity(h, arity):
    M = lambda dt, r=8, c=8: dev(f_order(np.ones((r, c), dt)))  # noqa: E731
    cb.gemm_ex("N", "N", 1.0, M(np.float16), M(np.float16), 0.0, M(np.float32), handle=h)
    cb.gemm_ex("N", "N", 1, M(np.int8), M(np.int8), 0, M(np.int32), handle=h)
    cb.gemm_ex("N", "N", 1.0, M(np.int16), M(np.int16), 0.0, M(np.float32), a_type="bf16",
               b_type="bf16", handle=h)
    cb.gemm_ex("N", "N", 1.0, M(np.float16), M(np.float16), 0.0, M(np.float16),
               compute="16F", handle=h)
    batch = dev(np.ones((2, 8, 8), np.float16).transpose(0, 2, 1))
    cb.gemm_strided_batched_ex("N", "N", 1.0, batch, batch, 0.0,
                               dev(np.ones((2, 8, 8), np.float32).transpose(0, 2, 1)),
                               handle=h)
    cb.gemm_batched_ex("N", "N", 1.0, [M(np.float16)] * 2, [M(np.float16)] * 2, 0.0,
                       [M(np.float32), M(np.float32)], handle=h)
    assert [c[0] for c in arity.calls].count("cublasGemmEx") == 4


class _TorchLikeBF16(FakeDeviceArray):
    """What PyTorch hands over for a bfloat16 tensor: a raw 2-byte typestr."""

    dtype = "torch.bfloat16"

    @property
    def __cuda_array_interface__(self):
        cai = dict(super().__cuda_array_interface__)
        cai["typestr"] = "|V2"
        return cai


def test_foreign_bfloat16_operands_take_the_bf16_route(h, monkeypatch, rng):
    from cupric.cublas import numpy_api
    a = rng.integers(-3, 4, (4, 8)).astype(np.float32)
    b = rng.integers(-3, 4, (8, 4)).astype(np.float32)
    bits = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731 (exact ints)
    buf, kind = numpy_api._operand(_TorchLikeBF16(bits(a)), "a", 0)
    assert kind == "bf16" and buf.itemsize == 2
    out = np.zeros((4, 4), np.uint16)
    calls = []
    emu_fn = lambda *args: calls.append(args) or 0  # noqa: E731
    from _cublas_fake import install_table
    table = type("T", (dict,), {"get": lambda self, n, d=None: emu_fn})()
    install_table(monkeypatch, table)
    cb.matmul(_TorchLikeBF16(bits(a)), _TorchLikeBF16(bits(b)), out=_TorchLikeBF16(out),
              handle=h)
    (args,) = calls
    assert args[8] == args[11] == args[15] == 14 and args[17] == 68  # 16BF, 32F compute


class _CupyLikeBF16(FakeDeviceArray):
    """What CuPy hands over for a bfloat16 array: its interface says ``"<V2"``; its own
    dtype is ml_dtypes' bfloat16 (`named`), or only its DLPack export says bfloat16."""

    def __init__(self, array, named: bool):
        super().__init__(array)
        self.named = named

    @property
    def dtype(self):
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16) if self.named else np.dtype("V2")

    @property
    def __cuda_array_interface__(self):
        cai = dict(super().__cuda_array_interface__)
        cai["typestr"] = "<V2"
        return cai

    code = 4  # kDLBfloat

    def __dlpack__(self, stream=None, max_version=None):
        return _dlpack_capsule(self.code, 16)


_CAPSULE_NAME = __import__("ctypes").create_string_buffer(b"dltensor")
_KEEP: list = []


def _dlpack_capsule(code: int, bits: int):
    """A legacy DLPack capsule whose tensor says only its dtype (never consumed here)."""
    import ctypes

    from cupric.runtime import dlpack
    managed = dlpack.DLManagedTensor()
    managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits = code, bits
    managed.dl_tensor.dtype.lanes = 1
    _KEEP.append(managed)
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
    return new(ctypes.addressof(managed), ctypes.addressof(_CAPSULE_NAME), None)


class _VoidArray(_CupyLikeBF16):
    """A 2-byte void array whose DLPack export says int16: not bfloat16."""

    code = 0  # kDLInt


@pytest.mark.parametrize("named", [True, False], ids=["ml_dtypes", "dlpack"])
def test_cupy_bfloat16_operands_take_the_bf16_route(h, monkeypatch, rng, named):
    from cupric.cublas import numpy_api
    pytest.importorskip("ml_dtypes")
    a = rng.integers(-3, 4, (4, 8)).astype(np.float32)
    b = rng.integers(-3, 4, (8, 4)).astype(np.float32)
    bits = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731 (exact ints)
    buf, kind = numpy_api._operand(_CupyLikeBF16(bits(a), named), "a", 0)
    assert kind == "bf16" and buf.itemsize == 2
    calls = []
    emu_fn = lambda *args: calls.append(args) or 0  # noqa: E731
    from _cublas_fake import install_table
    table = type("T", (dict,), {"get": lambda self, n, d=None: emu_fn})()
    install_table(monkeypatch, table)
    out = np.zeros((4, 4), np.uint16)
    cb.matmul(_CupyLikeBF16(bits(a), named), _CupyLikeBF16(bits(b), named),
              out=_CupyLikeBF16(out, named), handle=h)
    (args,) = calls
    assert args[8] == args[11] == args[15] == 14 and args[17] == 68  # 16BF, 32F compute
    # A 2-byte void array that DLPack calls int16 is still refused.
    with pytest.raises(TypeError, match="not supported"):
        cb.matmul(_VoidArray(bits(a), False), _VoidArray(bits(b), False), handle=h)
