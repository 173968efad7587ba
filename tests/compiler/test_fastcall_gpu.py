"""GPU lane: the compiled kernel launcher (`cupric.compiler._fastcall`) on real kernels.

With DeviceBuffers, CuPy arrays and PyTorch tensors, launches through the compiled launcher
must give NumPy's results and exactly the results of the generated Python launchers
(``CUPRIC_KERNEL_FASTCALL=0``'s path), on fresh random inputs over poisoned outputs; a
closed buffer must still be refused with nothing launched.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import cupric
from cupric.compiler import _fastcall, launcher
from cupric.device import grid
from cupric.types import Array, f32, i32

import array_kinds

pytestmark = pytest.mark.gpu

kmod = importlib.import_module("cupric.compiler.kernel")


@pytest.fixture(scope="module")
def rt():
    from cupric import runtime
    runtime.Device(0).make_current()
    return runtime


def _axpy_source():
    def axpy(a: f32, x: Array[f32, 1], y: Array[f32, 1], n: i32):
        i = grid(1)
        if i < n:
            y[i] = a * x[i] + y[i]
    return axpy


def _kinds(rt):
    kinds = {"buffers": (rt.to_device, lambda d: d.to_numpy())}
    try:
        cp = array_kinds.cupy()
        kinds["cupy"] = (cp.asarray, cp.asnumpy)
    except pytest.skip.Exception:
        pass
    try:
        torch = array_kinds.torch()
        kinds["torch"] = (lambda h: torch.from_numpy(h).cuda(), lambda d: d.cpu().numpy())
    except pytest.skip.Exception:
        pass
    return kinds


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_launches_match_numpy_and_each_other(rt, monkeypatch, compiled):
    monkeypatch.setattr(_fastcall, "_enabled", compiled)
    rng = np.random.default_rng()
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    a = np.float32(rng.standard_normal())
    expected = y0.copy()
    for _ in range(4):  # the general path once, then the kind's launcher
        expected = a * x + expected
    results = {}
    for name, (to_dev, to_host) in _kinds(rt).items():
        kern = cupric.kernel(_axpy_source())
        dx, dy = to_dev(x), to_dev(y0)
        for _ in range(4):
            kern[(n + 255) // 256, 256](a, dx, dy, np.int32(n))
        rt.synchronize()
        got = to_host(dy)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert kern._fast is not None
        assert launcher.is_compiled(kern._fast) is compiled, name
        results[name] = got
    first = next(iter(results.values()))
    for got in results.values():
        np.testing.assert_array_equal(got, first)


def test_compiled_and_python_launchers_agree_bitwise(rt, monkeypatch):
    rng = np.random.default_rng()
    n = 4099
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    a = np.float32(1.75)
    out = []
    for compiled in (True, False):
        monkeypatch.setattr(_fastcall, "_enabled", compiled)
        kern = cupric.kernel(_axpy_source())
        dx, dy = rt.to_device(x), rt.to_device(y0)
        for _ in range(3):
            kern[(n + 127) // 128, 128](a, dx, dy, np.int32(n))
        assert launcher.is_compiled(kern._fast) is compiled
        out.append(dy.to_numpy())
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_allclose(out[0], 3 * a * x + y0, rtol=1e-5, atol=1e-5)


def test_closed_buffers_are_refused_on_the_compiled_path(rt, monkeypatch):
    from cupric.runtime.errors import ClosedError
    monkeypatch.setattr(_fastcall, "_enabled", True)
    kern = cupric.kernel(_axpy_source())
    n = 1024
    x = rt.to_device(np.ones(n, np.float32))
    y = rt.to_device(np.zeros(n, np.float32))
    kern[4, 256](np.float32(1), x, y, np.int32(n))
    kern[4, 256](np.float32(1), x, y, np.int32(n))
    assert launcher.is_compiled(kern._fast)
    view = x[:512]
    x.close()
    for closed in (x, view):
        with pytest.raises(ClosedError, match="closed DeviceBuffer"):
            kern[4, 256](np.float32(1), closed, y, np.int32(n))
    rt.synchronize()
    np.testing.assert_array_equal(y.to_numpy(), np.full(n, 2, np.float32))


def test_driver_refusals_and_streams_on_the_compiled_path(rt, monkeypatch):
    """The compiled launcher packs and calls cuLaunchKernel itself: a block the driver
    refuses comes back as the Python path's LaunchConfigError naming the limit, a closed
    stream as ClosedError, with nothing run; streams given as None, an int handle and a
    cupric Stream all launch, in order, on that stream."""
    from cupric.runtime.errors import ClosedError
    from cupric.runtime.launch import LaunchConfigError
    monkeypatch.setattr(_fastcall, "_enabled", True)
    kern = cupric.kernel(_axpy_source())
    rng = np.random.default_rng()
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    dx, dy = rt.to_device(x), rt.to_device(y0)
    a = np.float32(0.5)
    blocks = (n + 255) // 256
    kern[blocks, 256](a, dx, dy, np.int32(n))
    assert launcher.is_compiled(kern._fast)
    stream = rt.Device(0).create_stream(non_blocking=True)
    rt.synchronize()
    for s in (None, stream.ptr, stream, 0):
        kern[blocks, 256, s](a, dx, dy, np.int32(n))
        rt.synchronize()  # the non-blocking stream is not ordered with the legacy one
    expected = y0.copy()
    for _ in range(5):
        expected = a * x + expected
    np.testing.assert_allclose(dy.to_numpy(), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(LaunchConfigError, match="exceeds"):
        kern[1, 2048](a, dx, dy, np.int32(n))
    stream.close()
    with pytest.raises(ClosedError):
        kern[blocks, 256, stream](a, dx, dy, np.int32(n))
    rt.synchronize()
    np.testing.assert_allclose(dy.to_numpy(), expected, rtol=1e-5, atol=1e-5)
