"""The compiled GEMM path (cupric.cublas._fastgemm) on the CPU lane.

A small C library stands in for cublasSgemm/cublasDgemm (a column-major GEMM over host
memory with cuBLAS's signature), so the compiled replay runs exactly as on the GPU: the
plan made by the checked Python call, then C reading the buffers, checking them and
calling the entry point through its address. Once a plan exists the Python function
table is replaced by one that fails on any lookup, so a passing replay proves the C path
did the work; every refusal (closed, read-only, overlapping, odd scalars) must fall back
to the Python path and raise its typed error.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from cupric.cublas import _fastgemm
from cupric.cublas import api as cb
from cupric.cublas import handle as handle_mod
from cupric.runtime.errors import ClosedError

from _cublas_fake import dev, forbid_calls, install_table

lib = pytest.importorskip("cupric.cublas.lib")
if not lib.is_available():
    pytest.skip("cuBLAS bindings cannot be generated/loaded here", allow_module_level=True)

EMULATOR = r"""
static long calls = 0;
static int status = 0;
long emu_calls(void) { return calls; }
void emu_set_status(int s) { status = s; }
#define GEMM(NAME, T)                                                                   \
int NAME(void *h, int ta, int tb, int m, int n, int k, const T *alpha, const T *A,       \
         int lda, const T *B, int ldb, const T *beta, T *C, int ldc) {                  \
    calls++;                                                                            \
    if (status) return status;                                                          \
    for (int j = 0; j < n; j++)                                                         \
        for (int i = 0; i < m; i++) {                                                   \
            double acc = 0;                                                             \
            for (int p = 0; p < k; p++) {                                               \
                double x = ta == 0 ? A[i + (long)p * lda] : A[p + (long)i * lda];       \
                double y = tb == 0 ? B[p + (long)j * ldb] : B[j + (long)p * ldb];       \
                acc += x * y;                                                           \
            }                                                                           \
            double r = (double)*alpha * acc;                                            \
            if (*beta != 0) r += (double)*beta * C[i + (long)j * ldc];                  \
            C[i + (long)j * ldc] = (T)r;                                                \
        }                                                                               \
    return 0;                                                                           \
}
GEMM(emu_sgemm, float)
GEMM(emu_dgemm, double)

/* cublasGemmEx for bfloat16 operands and result, 32F compute (the only route compiled). */
#include <string.h>
static float bf(unsigned short v) { unsigned u = (unsigned)v << 16; float f; memcpy(&f, &u, 4); return f; }
static unsigned short to_bf(float f) {
    unsigned u; memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return (unsigned short)(u >> 16);
}
int emu_gemm_ex(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                const unsigned short *A, int at, int lda, const unsigned short *B, int bt,
                int ldb, const float *beta, unsigned short *C, int ct, int ldc, int compute,
                int algo) {
    calls++;
    if (status) return status;
    if (at != 14 || bt != 14 || ct != 14 || compute != 68 || algo != -1) return 7;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0;
            for (int p = 0; p < k; p++)
                acc += bf(ta == 0 ? A[i + (long)p * lda] : A[p + (long)i * lda])
                     * bf(tb == 0 ? B[p + (long)j * ldb] : B[j + (long)p * ldb]);
            float r = *alpha * acc;
            if (*beta != 0) r += *beta * bf(C[i + (long)j * ldc]);
            C[i + (long)j * ldc] = to_bf(r);
        }
    return 0;
}
"""


@pytest.fixture(scope="module")
def ext():
    module = _fastgemm.load()
    if module is None:
        pytest.skip(f"fast-path extension unavailable: {_fastgemm.build_error()}")
    _fastgemm.install()
    return module


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the cuBLAS stand-in")
    d = tmp_path_factory.mktemp("emu")
    (d / "emu.c").write_text(EMULATOR)
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(d / "emu.so"),
                    str(d / "emu.c")], check=True, capture_output=True)
    import cffi
    ffi = cffi.FFI()
    ffi.cdef("long emu_calls(void); void emu_set_status(int);")
    so = ffi.dlopen(str(d / "emu.so"))
    import ctypes
    raw = ctypes.CDLL(str(d / "emu.so"))
    cffi_lib = lib.ffi
    table = {}
    for letter, symbol in (("S", "emu_sgemm"), ("D", "emu_dgemm")):
        sig = handle_mod._integer_signature(cffi_lib, getattr(lib.lib, f"cublas{letter}gemm_v2"))
        address = ctypes.cast(getattr(raw, symbol), ctypes.c_void_p).value
        table[f"cublas{letter}gemm"] = cffi_lib.cast(sig, address)
    sig = handle_mod._integer_signature(cffi_lib, lib.lib.cublasGemmEx)
    table["cublasGemmEx"] = cffi_lib.cast(
        sig, ctypes.cast(raw.emu_gemm_ex, ctypes.c_void_p).value)
    return so, table, raw


class _Table(dict):
    def __init__(self, table):
        super().__init__()
        self._table = table

    def get(self, name, default=None):
        return self._table.get(name, default)

    def __setitem__(self, name, value):
        raise AssertionError(f"unexpected cuBLAS function lookup {name}")


@pytest.fixture
def h(ext, emulator, monkeypatch):
    so, table, _ = emulator
    install_table(monkeypatch, _Table(table))
    so.emu_set_status(0)
    handle = handle_mod.Handle.from_handle(0xDEAD0, device=0)
    yield handle
    handle.close()
    so.emu_set_status(0)


def _rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _planned(h, monkeypatch, call):
    """Run `call` once through Python (making the plan), then with every Python lookup
    failing: the second run can only be the compiled path."""
    call()
    assert h._fast_plans, "the checked call made no compiled plan"
    forbid_calls(monkeypatch)
    return call()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "F", "T"])
def test_matmul_replay_matches_numpy(h, emulator, monkeypatch, rng, dtype, layout):
    so = emulator[0]
    a, b = _rand(rng, (7, 5), dtype), _rand(rng, (5, 6), dtype)
    if layout == "F":
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    elif layout == "T":
        a, b = np.ascontiguousarray(a.T).T, b
    out = np.zeros((7, 6), dtype)
    ad, bd, od = dev(a), dev(b), dev(out)
    _planned(h, monkeypatch, lambda: cb.matmul(ad, bd, out=od, handle=h))
    before = so.emu_calls()
    out[...] = np.nan
    result = cb.matmul(ad, bd, out=od, handle=h)
    assert result is od and so.emu_calls() == before + 1
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=tol, atol=tol)
    assert od.stream == h.stream


def test_matmul_scalars_and_other_buffers_of_the_same_layout(h, emulator, monkeypatch, rng):
    a, b = _rand(rng, (4, 3)), _rand(rng, (3, 5))
    c0 = _rand(rng, (4, 5))
    out = c0.copy()
    _planned(h, monkeypatch, lambda: cb.matmul(dev(_rand(rng, (4, 3))), dev(_rand(rng, (3, 5))),
                                               out=dev(np.zeros((4, 5), np.float32)), handle=h))
    cb.matmul(dev(a), dev(b), out=dev(out), alpha=2, beta=-0.5, handle=h)
    np.testing.assert_allclose(out, 2 * (a.astype(np.float64) @ b) - 0.5 * c0, rtol=1e-5,
                               atol=1e-5)


def test_gemm_replay(h, emulator, monkeypatch, rng):
    so = emulator[0]
    a = np.asfortranarray(_rand(rng, (6, 4), np.float64))   # op(a) = a.T: 4 x 6
    b = np.asfortranarray(_rand(rng, (6, 3), np.float64))
    c = np.asfortranarray(np.zeros((4, 3)))
    ad, bd, cd = dev(a), dev(b), dev(c)
    _planned(h, monkeypatch, lambda: cb.gemm("T", "N", 1.0, ad, bd, 0.0, cd, handle=h))
    before = so.emu_calls()
    c[...] = 1.0
    assert cb.gemm("T", "N", 3.0, ad, bd, 1.0, cd, handle=h) is None
    assert so.emu_calls() == before + 1
    np.testing.assert_allclose(c, 3.0 * (a.T @ b) + 1.0, rtol=1e-12)


def test_refusals_take_the_python_path_and_raise(h, emulator, monkeypatch, rng):
    a, b = _rand(rng, (4, 4)), _rand(rng, (4, 4))
    ad, bd = dev(a), dev(b)
    od = dev(np.zeros((4, 4), np.float32))
    _planned(h, monkeypatch, lambda: cb.matmul(ad, bd, out=od, handle=h))
    # out overlapping an input (same layout, so the plan's key matches)
    with pytest.raises(ValueError, match="overlaps"):
        cb.matmul(ad, bd, out=ad, handle=h)
    # read-only out
    with pytest.raises(ValueError, match="read-only"):
        cb.matmul(ad, bd, out=dev(np.zeros((4, 4), np.float32), readonly=True), handle=h)
    # a closed operand
    closed = dev(a.copy())
    closed._alloc.close()
    with pytest.raises(ClosedError):
        cb.matmul(closed, bd, out=od, handle=h)
    # a bool scalar is refused by the Python checks, never converted by C
    with pytest.raises(TypeError):
        cb.matmul(ad, bd, out=od, alpha=True, handle=h)
    # a closed handle
    h.close()
    with pytest.raises(ClosedError):
        cb.matmul(ad, bd, out=od, handle=h)


def test_numpy_scalars_fall_back_and_still_compute(h, emulator, rng):
    a, b = _rand(rng, (3, 3)), _rand(rng, (3, 3))
    out = np.zeros((3, 3), np.float32)
    ad, bd, od = dev(a), dev(b), dev(out)
    cb.matmul(ad, bd, out=od, handle=h)
    cb.matmul(ad, bd, out=od, alpha=np.float32(2.0), handle=h)  # Python path
    np.testing.assert_allclose(out, 2 * (a.astype(np.float64) @ b), rtol=1e-5)


def test_failing_status_raises_from_the_compiled_path(h, emulator, monkeypatch, rng):
    so = emulator[0]
    ad, bd = dev(_rand(rng, (2, 2))), dev(_rand(rng, (2, 2)))
    od = dev(np.zeros((2, 2), np.float32))
    _planned(h, monkeypatch, lambda: cb.matmul(ad, bd, out=od, handle=h))
    so.emu_set_status(7)  # CUBLAS_STATUS_INVALID_VALUE
    with pytest.raises(lib.CublasError, match="INVALID_VALUE"):
        cb.matmul(ad, bd, out=od, handle=h)


def test_plans_are_recorded_only_for_real_entry_points(ext, monkeypatch, rng):
    from _cublas_fake import Emulator, host_uploads
    host_uploads(monkeypatch)
    emu = Emulator()
    emu.install(monkeypatch)  # Python functions, not C entry points
    hd = handle_mod.Handle.from_handle(0xBEEF0, device=0)
    try:
        a, b = dev(_rand(rng, (3, 11))), dev(_rand(rng, (11, 2)))  # a shape no test plans
        cb.matmul(a, b, out=dev(np.zeros((3, 2), np.float32)), handle=hd)
        assert len(emu.calls) == 1 and hd._fast_plans == {}
    finally:
        hd.close()


def test_plan_info_and_fields(h, emulator, monkeypatch, rng):
    ad, bd = dev(_rand(rng, (5, 2))), dev(_rand(rng, (2, 3)))
    cb.matmul(ad, bd, out=dev(np.zeros((5, 3), np.float32)), handle=h)
    (plan,) = h._fast_plans.values()
    info = _fastgemm.info(plan)
    # C-ordered operands: computed as out.T = b.T @ a.T, so m, n swap.
    assert info["lt"] is False  # borrowed handles keep the classic call
    assert (info["m"], info["n"], info["k"], info["swap"]) == (3, 5, 2, 1)
    assert " ".join(_fastgemm.FIELDS) == ext_fields()


def ext_fields():
    return _fastgemm.load().FIELDS


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("CUPRIC_CUBLAS_FASTPATH", "0")
    monkeypatch.setattr(_fastgemm.EXTENSION, "module", None)
    monkeypatch.setattr(_fastgemm.EXTENSION, "error", None)
    assert _fastgemm.load() is None
    assert "CUPRIC_CUBLAS_FASTPATH" in _fastgemm.build_error()


def test_python_replay_gives_a_new_handle_its_compiled_plan(h, emulator, rng):
    """The Python plan cache is global, the compiled one per handle: a second handle that
    replays through Python records its own compiled plan (matmul and gemm)."""
    a = dev(_rand(rng, (6, 9)))
    b = dev(_rand(rng, (9, 4)))
    out = dev(np.zeros((6, 4), np.float32))
    cf = dev(np.asfortranarray(np.zeros((9, 9), np.float32)))
    af = dev(np.asfortranarray(_rand(rng, (9, 9))))
    cb.matmul(a, b, out=out, handle=h)
    cb.gemm("N", "N", 1.0, af, af, 0.0, cf, handle=h)
    assert len(h._fast_plans) == 2
    other = handle_mod.Handle.from_handle(0xFACE0, device=0)
    try:
        cb.matmul(a, b, out=out, handle=other)
        cb.gemm("N", "N", 1.0, af, af, 0.0, cf, handle=other)
        assert set(other._fast_plans) == set(h._fast_plans)
    finally:
        other.close()


def test_other_array_kinds_replay_through_the_compiled_path(h, emulator, monkeypatch, rng):
    """Arrays of other libraries (here: CUDA Array Interface producers over host memory)
    are read once by the runtime's intake layer and replay the same compiled plan; the
    user's `out` comes back; a read-only `out` is refused by the Python path."""
    from _cublas_fake import FakeDeviceArray
    so = emulator[0]
    a, b = _rand(rng, (7, 5)), _rand(rng, (5, 6))
    out = np.zeros((7, 6), np.float32)
    fa, fb, fo = FakeDeviceArray(a), FakeDeviceArray(b), FakeDeviceArray(out)
    _planned(h, monkeypatch, lambda: cb.matmul(fa, fb, out=fo, handle=h))
    before = so.emu_calls()
    out[...] = np.nan
    assert cb.matmul(fa, fb, out=fo, handle=h) is fo
    assert so.emu_calls() == before + 1
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    # A DeviceBuffer beside them: the same plan (keys are layouts, not kinds).
    out[...] = np.nan
    assert cb.matmul(dev(a), fb, out=fo, handle=h) is fo
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="read-only"):
        cb.matmul(fa, fb, out=FakeDeviceArray(out, readonly=True), handle=h)


class _FakeTorch:
    """A stand-in `torch` module: its `Tensor` answers what the intake layer's PyTorch
    adapter and the compiled path read (``dtype``, ``shape``, ``stride()``,
    ``data_ptr()``, ``is_cuda``, ``requires_grad``, ``layout``) over host memory."""

    def __init__(self):
        import types
        self.module = types.ModuleType("torch")
        self.module.float32 = type("dtype", (), {"__repr__": lambda s: "torch.float32"})()
        self.module.bfloat16 = type("dtype", (), {"__repr__": lambda s: "torch.bfloat16"})()
        self.module.strided = object()
        module = self.module

        class Tensor:
            __module__ = "torch"

            def __init__(self, array, requires_grad=False):
                self.array = array
                self.dtype = module.float32 if array.dtype == np.float32 else module.bfloat16
                self.shape = array.shape
                self.requires_grad = requires_grad
                self.is_cuda = True
                self.layout = module.strided

            def stride(self):
                return tuple(s // self.array.itemsize for s in self.array.strides)

            def data_ptr(self):
                return self.array.__array_interface__["data"][0]

            def get_device(self):
                return 0
        module.Tensor = Tensor


def _replayed_in_c(monkeypatch, so, call, out, poison):
    """Run `call` with the runtime's intake layer forbidden (so only the compiled path can
    have read the arrays), `out` poisoned first: exactly one cuBLAS call; its result."""
    from cupric.runtime import intake

    def no_intake(*args, **kwargs):
        raise AssertionError("the intake layer was asked")
    with monkeypatch.context() as m:
        m.setattr(intake, "array_info", no_intake)
        before = so.emu_calls()
        out[...] = poison
        result = call()
        assert so.emu_calls() == before + 1
    return result


def test_torch_tensors_replay_in_c_without_the_intake_layer(h, emulator, monkeypatch, rng):
    """PyTorch tensors: the first calls read them through the intake layer and file the
    plan under the tensors' own key; later calls read them in C (the intake layer is
    then never asked), out given or allocated; a tensor outside the adapter's common case
    (requires_grad) falls back to the Python path and its error."""
    import sys

    from cupric.runtime import array_adapters
    fake = _FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake.module)
    T = fake.module.Tensor
    monkeypatch.setitem(array_adapters.ADAPTERS, T, array_adapters.adapter_for(T))
    so = emulator[0]
    a, b = _rand(rng, (6, 5)), _rand(rng, (5, 4))
    out = np.zeros((6, 4), np.float32)
    ta, tb, to = T(a), T(b), T(out)
    for _ in range(2):  # the checked call, then the intake-read replay that files the key
        assert cb.matmul(ta, tb, out=to, handle=h) is to
    assert any(k[0] == "torch" for k in h._fast_plans if isinstance(k, tuple))
    assert _replayed_in_c(monkeypatch, so, lambda: cb.matmul(ta, tb, out=to, handle=h),
                          out, np.nan) is to
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    # other tensors of the same layout: the same plan
    a2 = _rand(rng, (6, 5))
    _replayed_in_c(monkeypatch, so, lambda: cb.matmul(T(a2), tb, out=to, alpha=2.0, handle=h),
                   out, np.nan)
    np.testing.assert_allclose(out, 2 * (a2.astype(np.float64) @ b), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError):
        cb.matmul(T(a, requires_grad=True), tb, out=to, handle=h)
    with pytest.raises(ValueError, match="overlaps"):
        # the plan's layout, over a's memory: the C alias check refuses it
        cb.matmul(ta, tb, out=T(a.reshape(-1)[:24].reshape(6, 4)), handle=h)


class _FakeCupy:
    """A stand-in `cupy` module: `ndarray` answers what the CuPy adapter and the compiled
    path read (``dtype``, ``shape``, ``strides``, ``data.ptr``) over host memory, and
    ``cuda.get_current_stream().ptr`` says CuPy's current stream (`current`)."""

    def __init__(self):
        import types
        self.module = types.ModuleType("cupy")
        self.current = 0
        fake = self

        class Stream:
            @property
            def ptr(self):
                return fake.current
        self.module.cuda = types.SimpleNamespace(get_current_stream=lambda: Stream())

        class ndarray:
            __module__ = "cupy"

            def __init__(self, array):
                self.array = array
                self.dtype, self.shape, self.strides = array.dtype, array.shape, array.strides
                self.data = types.SimpleNamespace(
                    ptr=array.__array_interface__["data"][0], device_id=0)
        self.module.ndarray = ndarray


def test_cupy_arrays_replay_in_c_when_streams_agree(h, ext, emulator, monkeypatch, rng):
    """CuPy arrays: filed under their own key after the intake-read calls, then read in C
    while CuPy's current stream is ordered before the handle's (the legacy default
    stream here); another current stream leaves the call to the Python path."""
    import sys

    from cupric.runtime import array_adapters
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake.module)
    A = fake.module.ndarray
    monkeypatch.setitem(array_adapters.ADAPTERS, A, array_adapters.adapter_for(A))
    so = emulator[0]
    a, b = _rand(rng, (5, 7)), _rand(rng, (7, 3))
    out = np.zeros((5, 3), np.float32)
    ca, cbm, co = A(a), A(b), A(out)
    for _ in range(2):
        assert cb.matmul(ca, cbm, out=co, handle=h) is co
    assert any(k[0] == "cupy" for k in h._fast_plans if isinstance(k, tuple))
    assert _replayed_in_c(monkeypatch, so, lambda: cb.matmul(ca, cbm, out=co, handle=h),
                          out, np.nan) is co
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    fake.current = 0x5000  # a CuPy stream the handle's is not ordered after
    assert ext.matmul(ca, cbm, co, 1, 0, h) is None


def test_bfloat16_torch_tensors_replay_through_gemm_ex_in_c(h, emulator, monkeypatch, rng):
    """PyTorch bfloat16 tensors ("<V2" in their interface): the checked call runs
    cublasGemmEx and files a GemmEx plan under the tensors' own key only (the layouts'
    key could not tell bfloat16 from other 2-byte types); the next calls run it in C,
    writing allocated or given outputs, against float64."""
    import sys

    from cupric.runtime import array_adapters
    fake = _FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", fake.module)
    T = fake.module.Tensor
    monkeypatch.setitem(array_adapters.ADAPTERS, T, array_adapters.adapter_for(T))
    so = emulator[0]
    bits = lambda x: (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    value = lambda x: (x.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
    a = rng.integers(-4, 5, (6, 5)).astype(np.float32)
    b = rng.integers(-4, 5, (5, 4)).astype(np.float32)
    out = np.zeros((6, 4), np.uint16)
    ta, tb, to = T(bits(a)), T(bits(b)), T(out)
    assert cb.matmul(ta, tb, out=to, handle=h) is to
    plans = [k for k in h._fast_plans if isinstance(k, tuple)]
    assert plans and all(k[0] == "torch" for k in plans)
    assert _fastgemm.info(h._fast_plans[plans[0]])["ex"] is True
    assert _replayed_in_c(monkeypatch, so,
                          lambda: cb.matmul(ta, tb, out=to, alpha=0.5, handle=h),
                          out, 0xFFC0) is to  # poisoned with a bfloat16 NaN
    np.testing.assert_array_equal(value(out), 0.5 * (a.astype(np.float64) @ b))
