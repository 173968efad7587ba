"""GPU lane: `cupric.runtime.intake` with real arrays of every kind.

What intake reads of DeviceBuffers (and their views), CuPy arrays, PyTorch tensors,
numba-cuda arrays, JAX arrays and plain CAI / DLPack producers must match what the array
itself says; kernel launches (general path and generated launchers, several kinds on one
kernel), `cublas.matmul` (full path and plan replay) and the ready kernels must give
NumPy's results for every kind (fresh random inputs, poisoned outputs); closed buffers and
views of closed buffers are refused everywhere before anything is queued.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.device import grid
from cupric.types import Array, f32, i64

import array_kinds
from array_kinds import ViaDLPack, ViaInterface

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def rt():
    from cupric import runtime
    runtime.Device(0).make_current()
    return runtime


@pytest.fixture(scope="module")
def intake(rt):
    from cupric.runtime import intake
    return intake


_cupy, _torch, _numba = array_kinds.cupy, array_kinds.torch, array_kinds.numba_cuda


def _upload(kind, host, rt):
    """(device array of `kind` holding `host`, a function reading it back)."""
    if kind == "buffer":
        buf = rt.to_device(host)
        return buf, buf.to_numpy
    if kind == "view":
        padded = rt.to_device(np.concatenate([host, host]))
        view = padded[:len(host)]
        return view, view.to_numpy
    if kind in ("cupy", "cai", "dlpack"):
        cp = _cupy()
        arr = cp.asarray(host)
        wrapped = {"cupy": arr, "cai": ViaInterface(arr), "dlpack": ViaDLPack(arr)}[kind]
        return wrapped, lambda: cp.asnumpy(arr)
    if kind == "torch":
        torch = _torch()
        t = torch.from_numpy(host).cuda()
        return t, lambda: t.cpu().numpy()
    if kind == "numba":
        cuda = _numba()
        arr = cuda.to_device(host)
        return arr, arr.copy_to_host
    if kind == "jax":
        jax = pytest.importorskip("jax")
        try:
            arr = jax.device_put(host, jax.devices("gpu")[0])
        except RuntimeError:
            pytest.skip("JAX sees no GPU")
        return arr, lambda: np.asarray(arr)
    raise AssertionError(kind)


KINDS = ["buffer", "view", "cupy", "torch", "numba", "cai", "dlpack", "jax"]


@pytest.mark.parametrize("kind", KINDS)
def test_read_matches_what_the_array_says(rt, intake, kind):
    host = np.random.default_rng().standard_normal(300).astype(np.float32)
    arr, _ = _upload(kind, host, rt)
    info = intake.read(arr)
    assert info.shape == (300,) and info.strides == (4,) and info.dtype == np.float32
    assert info.ptr != 0 and info.readonly == (kind == "jax")  # JAX exports read-only
    # The pointer is the memory's: a DeviceBuffer borrowing it reads the same values.
    from cupric.runtime import memory
    back = memory.borrow(info.ptr, info.shape, info.strides, info.dtype, owner=arr)
    np.testing.assert_array_equal(back.to_numpy(), host)
    if kind in ("buffer", "view", "cupy", "torch"):
        assert intake.array_info(arr, device=0).device == 0


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "jax"])  # JAX: immutable
def test_kernel_results_for_every_kind_on_both_paths(rt, kind):
    rng = np.random.default_rng()

    @cupric.kernel
    def axpy(a: f32, x: Array[f32, 1], y: Array[f32, 1], n: i64):
        i = grid(1)
        if i < n:
            y[i] = a * x[i] + y[i]

    for _ in range(3):  # general path, then the generated launcher where there is one
        hx = rng.standard_normal(1000).astype(np.float32)
        hy = rng.standard_normal(1000).astype(np.float32)
        x, _ = _upload(kind, hx, rt)
        y, read_y = _upload(kind, hy, rt)
        axpy[4, 256](np.float32(2.5), x, y, 1000)
        rt.Device(0).synchronize()
        # The kernel contracts a * x + y into one FMA: within an ulp or two of NumPy's.
        expect = 2.5 * hx.astype(np.float64) + hy
        np.testing.assert_allclose(read_y(), expect, rtol=1e-6, atol=1e-6)


def test_several_kinds_keep_a_launcher_each(rt):
    cp, torch = _cupy(), _torch()
    from cupric.compiler import launcher

    @cupric.kernel
    def scale(a: f32, x: Array[f32, 1]):
        i = grid(1)
        if i < len(x):
            x[i] = a * x[i]

    rng = np.random.default_rng()
    makers = [rt.to_device, cp.asarray, lambda h: torch.from_numpy(h).cuda()]
    readers = [lambda b: b.to_numpy(), cp.asnumpy, lambda t: t.cpu().numpy()]
    for _ in range(2):
        for make, read in zip(makers, readers):
            host = rng.standard_normal(512).astype(np.float32)
            arr = make(host)
            scale[2, 256](np.float32(3.0), arr)
            rt.Device(0).synchronize()
            np.testing.assert_allclose(read(arr), 3.0 * host, rtol=1e-6)
    kinds = {key[1][1] for key in launcher.launcher_keys(scale._fast)}
    assert kinds == {rt.DeviceBuffer, cp.ndarray, torch.Tensor}


@pytest.mark.parametrize("kind", ["buffer", "cupy", "torch", "cai", "dlpack"])
def test_matmul_every_kind_full_path_and_replay(rt, kind):
    from cupric import cublas
    rng = np.random.default_rng()
    for _ in range(3):  # the first call plans; the next ones replay the plan
        ha = rng.standard_normal((48, 40)).astype(np.float32)
        hb = rng.standard_normal((40, 24)).astype(np.float32)
        a, _ = _upload(kind, ha, rt)
        b, _ = _upload(kind, hb, rt)
        out, read_out = _upload(kind, np.full((48, 24), np.nan, np.float32), rt)
        cublas.matmul(a, b, out=out)
        rt.Device(0).synchronize()
        np.testing.assert_allclose(read_out(), ha @ hb, rtol=1e-4, atol=1e-4)


def test_closed_buffers_and_views_are_refused_everywhere(rt, intake):
    from cupric import cublas
    from cupric.kernels import elementwise
    from cupric.runtime.errors import ClosedError

    @cupric.kernel
    def copy(x: Array[f32, 1], y: Array[f32, 1]):
        i = grid(1)
        if i < len(x):
            y[i] = x[i]

    rng = np.random.default_rng()
    host = rng.standard_normal(512).astype(np.float32)
    x, y = rt.to_device(host), rt.to_device(np.full(512, np.nan, np.float32))
    copy[2, 256](x, y)
    copy[2, 256](x, y)  # the generated launcher exists now
    assert copy._fast is not None
    rt.Device(0).synchronize()
    np.testing.assert_array_equal(y.to_numpy(), host)
    view = x[:256]
    x.close()
    for closed in (x, view):
        with pytest.raises(ClosedError):
            copy[1, 256](closed, y)                    # generated launcher
        with pytest.raises(ClosedError):
            copy.launch(closed, y, grid=1, block=256)  # general path
        with pytest.raises(ClosedError):
            intake.read(closed)
        with pytest.raises(ClosedError):
            elementwise.vecadd(closed, closed)
    a = rt.to_device(rng.standard_normal((8, 8)).astype(np.float32))
    b = rt.to_device(rng.standard_normal((8, 8)).astype(np.float32))
    c = rt.to_device(np.zeros((8, 8), np.float32))
    cublas.matmul(a, b, out=c)
    cublas.matmul(a, b, out=c)  # the plan and the compiled replay exist now
    c_view = c[:, :]
    a.close()
    with pytest.raises(ClosedError):
        cublas.matmul(a, b, out=c)
    c.close()
    with pytest.raises(ClosedError):
        cublas.matmul(b, b, out=c_view)
    # Nothing of the refused calls ran: y still holds the copy.
    rt.Device(0).synchronize()
    np.testing.assert_array_equal(y.to_numpy(), host)
