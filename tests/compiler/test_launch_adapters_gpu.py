"""GPU lane: `@cupric.kernel` launches with real CuPy arrays, PyTorch tensors and numba-cuda
device arrays, read through `cupric.runtime.array_adapters`.

What each adapter reads must equal the parsed `__cuda_array_interface__` of the same array
(views, 0-d, zero-size, negative strides, broadcasts, f16, bf16, CuPy streams); launches must
give NumPy's results (fresh random inputs, the fast path included); host tensors, autograd
tensors and bf16 must raise exactly what the interface path raises.
"""

from __future__ import annotations

import contextlib
import importlib

import numpy as np
import pytest

import cupric
from cupric.device import grid
from cupric.types import Array, f32

import array_kinds
from array_kinds import ViaInterface

pytestmark = pytest.mark.gpu

kmod = importlib.import_module("cupric.compiler.kernel")
aa = importlib.import_module("cupric.runtime.array_adapters")
interop = importlib.import_module("cupric.runtime.interop")
memory = importlib.import_module("cupric.runtime.memory")


@pytest.fixture(scope="module")
def rt():
    from cupric import runtime
    runtime.Device(0).make_current()
    return runtime


@pytest.fixture(scope="module")
def cp(rt):
    return array_kinds.cupy()


@pytest.fixture(scope="module")
def torch(rt):
    return array_kinds.torch()


@pytest.fixture(scope="module")
def numba_cuda(rt):
    return array_kinds.numba_cuda()


_MISSING = object()


@contextlib.contextmanager
def adapters_off(*classes):
    """The launch path as it was before the adapters: these classes take the interface
    (or DLPack) path."""
    saved = {cls: aa.ADAPTERS.get(cls, _MISSING) for cls in classes}
    for cls in classes:
        aa.ADAPTERS[cls] = None
    try:
        yield
    finally:
        for cls, adapter in saved.items():
            if adapter is _MISSING:
                aa.ADAPTERS.pop(cls, None)
            else:
                aa.ADAPTERS[cls] = adapter


def check_parts(obj):
    """The adapter reads what the interface says, and the launch values, specialization
    key and alias extents are those of the interface path."""
    adapter = aa.adapter_for(type(obj))
    assert adapter is not None, type(obj)
    try:
        ptr, shape, strides, dtype, _readonly, stream = interop._parse(
            obj.__cuda_array_interface__)
        expected = (ptr, shape, strides, dtype, stream)
    except Exception:  # the interface refuses this array: so must the adapter
        expected = None
    if expected is not None and expected[3] == np.dtype("V2") \
            and str(getattr(obj, "dtype", "")) == "torch.bfloat16" and aa._ml_bfloat16():
        # The one deliberate difference: the interface says raw "<V2" items, the torch
        # adapter knows them as bfloat16 (kernels type them `cupric.types.bf16`).
        expected = expected[:3] + (aa._ml_bfloat16(),) + expected[4:]
        assert adapter.read(obj) == expected
        return expected
    assert adapter.read(obj) == expected
    if expected is not None:
        got = []
        for value in (obj, ViaInterface(obj)):
            flat, extents = [], []
            key = kmod._arg_parts(value, flat, extents, 0)
            got.append((flat, key, extents))
        assert got[0] == got[1]
    return expected


# -- what the adapters read ----------------------------------------------------------------

def test_cupy_parts_match_the_interface(cp):
    base = cp.arange(48, dtype=cp.float32).reshape(6, 8)
    cases = [base, base.T, base[::2, 1::3], base[::-1], base[:, ::-2], cp.asfortranarray(base),
             cp.array(3.0, dtype=cp.float32), cp.empty((3, 0), cp.float32),
             cp.empty(0, cp.float32), base[2:2], base[2:3], base[:, 3:4], base[0],
             cp.broadcast_to(cp.arange(8, dtype=cp.float32), (4, 8)),
             base.astype(cp.float16), base.astype(cp.int64), base.astype(cp.complex64)]
    for case in cases:
        assert check_parts(case) is not None
    assert check_parts(cp.empty(0, cp.float32))[0] == 0          # zero-size: pointer 0
    with cp.cuda.Stream(non_blocking=True) as stream:               # CuPy's current stream
        for case in (base, base.T, cp.empty(0, cp.float32)):
            assert check_parts(case)[4] == stream.ptr
    assert check_parts(base)[4] == 1                                # the legacy stream


def test_torch_parts_match_the_interface(torch):
    base = torch.arange(48, dtype=torch.float32, device="cuda").reshape(6, 8)
    cases = [base, base.T, base[::2, 1::3], base[:, 1], base[1:, 2:], base[2:3],
             base.t().contiguous().t(), torch.tensor(3.0, device="cuda"),
             torch.empty(3, 0, device="cuda"), torch.empty(0, device="cuda"),
             torch.arange(8.0, device="cuda").expand(4, 8), base.half(), base.long(),
             base.to(torch.complex64)]
    for case in cases:
        assert check_parts(case) is not None
    assert check_parts(torch.empty(0, device="cuda"))[0] == 0
    bf16 = check_parts(base.bfloat16())  # None where this PyTorch's interface lacks bf16
    # Raw 2-byte items ("<V2") through the interface; bfloat16 where ml_dtypes is present.
    assert bf16 is None or bf16[3] in (np.dtype("V2"), aa._ml_bfloat16())
    # Outside the adapter's case: the interface refuses them too.
    assert check_parts(torch.ones(4, device="cuda", requires_grad=True)) is None
    assert check_parts(torch.ones(4)) is None


def test_numba_parts_match_the_interface(numba_cuda):
    host = np.arange(48, dtype=np.float32).reshape(6, 8)
    base = numba_cuda.to_device(host)
    cases = [base, base[::2, 1::3], base[2], base[:, 3:4], base[:, ::3],
             numba_cuda.to_device(host.astype(np.float16))]
    for case in cases:
        assert check_parts(case) is not None
    check_parts(numba_cuda.device_array((3, 0), np.float32))  # whatever numba says of it
    stream = numba_cuda.stream()
    bound = numba_cuda.to_device(host, stream=stream)   # names its stream in the interface
    stream.synchronize()
    assert check_parts(bound) is not None


# -- launches against NumPy ----------------------------------------------------------------

def _axpy_py(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        y[i] = a * x[i] + y[i]


def _scale2_py(a: f32, x: Array[f32, 2], out: Array[f32, 2]):
    i, j = grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = a * x[i, j]


def _twice_py(x, y):
    i = grid(1)
    if i < len(x):
        y[i] = x[i] + x[i]


class Lib:
    def __init__(self, name, to_device, to_host, array_class, views_reverse=True,
                 transposes=True):
        self.name, self.to_device, self.to_host = name, to_device, to_host
        self.array_class, self.views_reverse = array_class, views_reverse
        self.transposes = transposes  # numba's .T launches a copy kernel: not a view


@pytest.fixture(params=["cupy", "torch", "numba"])
def lib(request):
    if request.param == "cupy":
        cp = request.getfixturevalue("cp")
        return Lib("cupy", cp.asarray, cp.asnumpy, cp.ndarray)
    if request.param == "torch":
        torch = request.getfixturevalue("torch")
        return Lib("torch", lambda h: torch.from_numpy(np.ascontiguousarray(h)).cuda(),
                   lambda t: t.cpu().numpy(), torch.Tensor, views_reverse=False)
    cuda = request.getfixturevalue("numba_cuda")
    return Lib("numba", cuda.to_device, lambda d: d.copy_to_host(),
               type(cuda.device_array(1, np.float32)), views_reverse=False,
               transposes=False)


def test_axpy_results_and_fast_path(lib, rt, rng):
    hx = rng.standard_normal(1000).astype(np.float32)
    hy = rng.standard_normal(1000).astype(np.float32)
    x, y = lib.to_device(hx), lib.to_device(hy)
    kern = cupric.kernel(_axpy_py)
    a = np.float32(1.75)
    expected = hy.copy()
    for _ in range(4):
        kern[4, 256](a, x, y)
        expected = a * hx + expected
    rt.synchronize()
    np.testing.assert_allclose(lib.to_host(y), expected, rtol=1e-5, atol=1e-5)
    # CuPy and PyTorch 1-D arrays get the generated launcher; numba's the general path.
    assert (kern._fast is not None) == (lib.name in ("cupy", "torch"))


def test_strided_1d_views(lib, rt, rng):
    hx = rng.standard_normal(1000).astype(np.float32)
    hy = rng.standard_normal(500).astype(np.float32)
    x, y = lib.to_device(hx), lib.to_device(hy)
    kern = cupric.kernel(_axpy_py)
    kern[2, 256](np.float32(2), x[::2], y)
    rt.synchronize()
    np.testing.assert_allclose(lib.to_host(y), 2 * hx[::2] + hy, rtol=1e-5, atol=1e-5)
    if lib.views_reverse:
        y2 = lib.to_device(hy)
        kern[2, 256](np.float32(2), x[::-2], y2)
        rt.synchronize()
        np.testing.assert_allclose(lib.to_host(y2), 2 * hx[::-2] + hy, rtol=1e-5, atol=1e-5)


def test_2d_views(lib, rt, rng):
    host = rng.standard_normal((20, 30)).astype(np.float32)
    x = lib.to_device(host)
    kern = cupric.kernel(_scale2_py)
    views = [(x, host), (x[::2, 1::3], host[::2, 1::3]), (x[3:17, 5:], host[3:17, 5:])]
    if lib.transposes:
        views.append((x.T, host.T))
    if lib.views_reverse:
        views.append((x[::-1, ::-2], host[::-1, ::-2]))
    for view, expect in views:
        out = lib.to_device(np.full(expect.shape, np.nan, np.float32))
        kern[(4, 4), (16, 16)](np.float32(-3), view, out)
        rt.synchronize()
        np.testing.assert_allclose(lib.to_host(out), -3 * expect, rtol=1e-6)


def test_zero_size_and_f16(lib, rt, rng):
    args = (np.float32(1), lib.to_device(np.empty(0, np.float32)),
            lib.to_device(np.empty(0, np.float32)))
    outcome = _launch_error(_axpy_py, *args)
    with adapters_off(lib.array_class):
        assert _launch_error(_axpy_py, *args) == outcome
    if lib.name != "numba":  # numba's interface of an empty array is its own business
        assert outcome is None
    h = rng.standard_normal(300).astype(np.float16)
    out = lib.to_device(np.full(300, np.nan, np.float16))
    cupric.kernel(_twice_py)[2, 256](lib.to_device(h), out)
    rt.synchronize()
    np.testing.assert_array_equal(lib.to_host(out), h + h)


# -- errors: the interface path's --------------------------------------------------------------

def _launch_error(py_func, *args):
    kern = cupric.kernel(py_func)
    try:
        kern[1, 32](*args)
    except Exception as exc:  # compared, type and message, with the adapters off
        return type(exc), str(exc)
    return None


def test_torch_errors_are_unchanged(torch, rt):
    y = torch.zeros(4, device="cuda")
    bad_args = [
        (np.float32(1), torch.ones(4), y),                                  # host tensor
        (np.float32(1), torch.ones(4, device="cuda", requires_grad=True), y),
        (np.float32(1), np.ones(4, np.float32), y),                          # NumPy array
    ]
    for args in bad_args:
        with_adapters = _launch_error(_axpy_py, *args)
        with adapters_off(torch.Tensor):
            without = _launch_error(_axpy_py, *args)
        assert with_adapters is not None and with_adapters == without, args[1]


def test_a_torch_bf16_tensor_is_typed_bf16_and_refused_for_an_f32_parameter(torch, rt):
    # The interface path sees raw "<V2" items; the adapter types them bf16. Either way a
    # bf16 tensor for an f32 array parameter is refused before the launch, and the
    # adapter's message names bf16.
    y = torch.zeros(4, device="cuda")
    x = torch.ones(4, device="cuda", dtype=torch.bfloat16)
    with_adapters = _launch_error(_axpy_py, np.float32(1), x, y)
    with adapters_off(torch.Tensor):
        without = _launch_error(_axpy_py, np.float32(1), x, y)
    assert with_adapters is not None and without is not None
    if aa._ml_bfloat16() is not None:
        assert "bf16" in with_adapters[1] or "bfloat16" in with_adapters[1], with_adapters
    assert torch.count_nonzero(y).item() == 0   # nothing was launched


def test_another_device_passes_as_before(torch):
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU: no array on another device to pass")
    t = torch.ones(8, device="cuda:1")
    got = []
    for off in (False, True):
        with adapters_off(torch.Tensor) if off else contextlib.nullcontext():
            flat, extents = [], []
            key = kmod._arg_parts(t, flat, extents, 0)
            got.append((key, flat, extents))
    assert got[0] == got[1]


# -- streams -------------------------------------------------------------------------------

def test_cupy_stream_ordering_is_the_interface_paths(cp, rt, rng, monkeypatch):
    calls = []
    real = memory.order_after

    def spy(consumer, producer):
        calls.append((consumer, producer))
        return real(consumer, producer)

    monkeypatch.setattr(memory, "order_after", spy)
    monkeypatch.setattr(interop, "order_after", spy)
    hx = rng.standard_normal(1 << 20).astype(np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    orders = []
    for off in (False, True):
        calls.clear()
        with stream:
            x = cp.asarray(hx) * 3          # queued on CuPy's stream
            y = cp.zeros_like(x)
            kern = cupric.kernel(_axpy_py)
            with adapters_off(cp.ndarray) if off else contextlib.nullcontext():
                kern[(1 << 20) // 256, 256](np.float32(1), x, y)   # the legacy stream
        rt.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(y), hx * 3)
        orders.append([c for c in calls if c[1] not in (0, 1)])
    # Both paths: the legacy stream (the launch's) waits for CuPy's non-blocking stream,
    # once for both arrays (tests/compiler/test_launch_checks_gpu.py: other streams).
    assert orders[0] == orders[1] == [(0, stream.ptr)]
