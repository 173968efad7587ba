"""Zero-copy interop with PyTorch, CuPy, numba-cuda and JAX on a GPU (the `gpu` lane).

Each direction is checked for the same device pointer (no copy) and for values, with
fresh random data, and writes through one library are seen by the other.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def rt():
    from cupric import runtime
    runtime.Device(0).make_current()
    return runtime


@pytest.fixture(scope="module")
def torch(rt):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


@pytest.fixture(scope="module")
def cp(rt):
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def numba_cuda(rt):
    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still calls it (gone in NumPy 2.5)
        np.row_stack = np.vstack
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("numba-cuda sees no GPU")
    return cuda


@pytest.fixture(scope="module")
def jnp(rt):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError as exc:
        pytest.skip(f"JAX has no GPU backend here: {exc}")
    import jax.numpy as jnp
    return jnp


# ------------------------------------------------------------------------------ PyTorch


def test_torch_into_cupric_by_cai_and_dlpack(rt, torch, rng):
    from cupric.runtime.dlpack import from_dlpack
    from cupric.runtime.interop import as_device_array
    data = rng.standard_normal((50, 30)).astype(np.float32)
    t = torch.from_numpy(data).cuda()
    for buf in (as_device_array(t), from_dlpack(t)):
        assert buf.ptr == t.data_ptr() and buf.shape == (50, 30) and buf.strides == (120, 4)
        assert not buf.owns_memory
        np.testing.assert_array_equal(buf.to_numpy(), data)
    view = as_device_array(t[3:, ::2].T)
    np.testing.assert_array_equal(view.to_numpy(), data[3:, ::2].T)
    dl_view = from_dlpack(t[::3])
    assert dl_view.strides == (360, 4)
    np.testing.assert_array_equal(dl_view.to_numpy(), data[::3])
    # A write through cupric is seen by PyTorch: the same memory.
    new = rng.standard_normal((50, 30)).astype(np.float32)
    as_device_array(t).copy_from(new)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), new)
    bf = torch.randn(8, device="cuda", dtype=torch.float64)
    np.testing.assert_array_equal(from_dlpack(bf).to_numpy(), bf.cpu().numpy())


def test_cupric_into_torch(rt, torch, rng):
    from cupric.runtime import memory as m
    data = rng.standard_normal((40, 7))
    buf = m.to_device(data)
    by_cai = torch.as_tensor(buf, device="cuda")
    assert by_cai.data_ptr() == buf.ptr
    np.testing.assert_array_equal(by_cai.cpu().numpy(), data)
    by_dlpack = torch.from_dlpack(buf)
    assert by_dlpack.data_ptr() == buf.ptr and by_dlpack.shape == (40, 7)
    by_dlpack.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buf.to_numpy(), 2 * data)
    strided = torch.from_dlpack(buf[::2, 1:])
    np.testing.assert_array_equal(strided.cpu().numpy(), 2 * data[::2, 1:])


def test_torch_stream_semantics(rt, torch, rng):
    from cupric.runtime import memory as m
    from cupric.runtime.interop import as_device_array
    ours = rt.Device(0).create_stream(non_blocking=True)
    data = rng.standard_normal(1 << 20).astype(np.float32)
    buf = m.empty(data.shape, np.float32, stream=ours)
    buf.copy_from(data, stream=ours)  # pending on our stream: consumers must wait for it
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.from_dlpack(buf)  # passes `side` as the consumer stream
        doubled = t * 2
    side.synchronize()
    np.testing.assert_array_equal(doubled.cpu().numpy(), 2 * data)
    with torch.cuda.stream(side):
        x = torch.from_numpy(data).cuda() + 1  # queued on `side`; its CAI names `side`
        if x.__cuda_array_interface__.get("stream") is None:
            side.synchronize()  # PyTorch exports CAI v2 (no stream): order by hand
        imported = as_device_array(x, stream=ours)
        assert imported.ptr == x.data_ptr()
    np.testing.assert_array_equal(imported.to_numpy(stream=ours), data + 1)
    ours.synchronize()
    ours.close()


# ------------------------------------------------------------------------------ CuPy


def test_cupy_both_ways(rt, cp, rng):
    from cupric.runtime import memory as m
    from cupric.runtime.dlpack import from_dlpack
    from cupric.runtime.interop import as_device_array
    data = rng.standard_normal((64, 33)).astype(np.float64)
    x = cp.asarray(data)
    for buf in (as_device_array(x), from_dlpack(x)):
        assert buf.ptr == x.data.ptr
        np.testing.assert_array_equal(buf.to_numpy(), data)
    np.testing.assert_array_equal(as_device_array(x[::-1, 2::3]).to_numpy(),
                                  data[::-1, 2::3])
    ints = rng.integers(-100, 100, (5, 6), dtype=np.int16)
    buf = m.to_device(ints)
    y = cp.asarray(buf)
    assert y.data.ptr == buf.ptr and y.dtype == np.int16
    z = cp.from_dlpack(buf)
    assert z.data.ptr == buf.ptr
    z += 3
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(buf.to_numpy(), ints + 3)
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(buf[1:, ::2])), (ints + 3)[1:, ::2])


def test_cupy_stream_in_cai(rt, cp, rng):
    from cupric.runtime.interop import as_device_array
    data = rng.standard_normal(1 << 20).astype(np.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.asarray(data) * 3
        cai = x.__cuda_array_interface__
        buf = as_device_array(x)  # our legacy stream waits for `s`
    np.testing.assert_array_equal(buf.to_numpy(), data * 3)
    assert cai.get("stream") in (None, s.ptr)
    s.synchronize()


def test_cupy_managed_and_pool_buffers(rt, cp, rng):
    from cupric.runtime import managed as mg
    from cupric.runtime import pool as pl
    data = rng.standard_normal(1000).astype(np.float32)
    managed = mg.managed_array(data)
    x = cp.asarray(managed)
    assert x.data.ptr == managed.ptr
    np.testing.assert_array_equal(cp.asnumpy(x), data)
    pool = pl.create_pool(0)
    pooled = pool.empty(1000, np.float32)
    pooled.copy_from(data)
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(pooled)), data)
    pooled.close()
    managed.close()
    pool.close()


# ------------------------------------------------------------------------------ numba-cuda


def test_numba_both_ways(rt, numba_cuda, rng):
    from cupric.runtime import memory as m
    from cupric.runtime.interop import as_device_array
    data = rng.standard_normal((20, 10)).astype(np.float32)
    buf = m.to_device(data)
    arr = numba_cuda.as_cuda_array(buf)
    assert arr.__cuda_array_interface__["data"][0] == buf.ptr
    np.testing.assert_array_equal(arr.copy_to_host(), data)
    dev = numba_cuda.to_device(data * 2)
    back = as_device_array(dev)
    assert back.ptr == dev.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(back.to_numpy(), data * 2)


# ------------------------------------------------------------------------------ JAX


def test_jax_both_ways(rt, jnp, rng):
    import jax
    from cupric.runtime import memory as m
    from cupric.runtime.interop import as_device_array
    data = rng.standard_normal((16, 24)).astype(np.float32)
    x = jax.device_put(data, jax.devices("gpu")[0])
    x.block_until_ready()
    buf = as_device_array(x)
    assert buf.ptr == x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(buf.to_numpy(), data)
    mine = m.to_device(data * 5)
    y = jax.dlpack.from_dlpack(mine)
    np.testing.assert_array_equal(np.asarray(y), data * 5)
    assert y.unsafe_buffer_pointer() == mine.ptr


# ------------------------------------------------------------------------------ refusals


def test_host_arrays_are_refused_with_advice(rt, torch):
    from cupric.runtime.interop import as_device_array
    with pytest.raises(TypeError, match="to_device"):
        as_device_array(np.zeros(3))
    with pytest.raises(TypeError, match="to_device|non-CUDA"):
        as_device_array(torch.zeros(3))


def test_dlpack_copy_true_exports_a_fresh_copy(rt, rng):
    from cupric.runtime import memory as m
    from cupric.runtime.dlpack import from_dlpack
    data = rng.standard_normal((10, 3))
    buf = m.to_device(data)
    copied = from_dlpack(buf.__dlpack__(copy=True, max_version=(1, 0), stream=-1))
    assert copied.ptr != buf.ptr
    np.testing.assert_array_equal(copied.to_numpy(), data)
    same = from_dlpack(buf)
    assert same.ptr == buf.ptr
    same.close()  # hands the tensor back; the memory stays buf's
    np.testing.assert_array_equal(buf.to_numpy(), data)


def test_cupy_takes_managed_memory_by_dlpack(rt, cp, rng):
    from cupric.runtime import managed as mg
    data = rng.standard_normal(256).astype(np.float32)
    managed = mg.managed_array(data)
    x = cp.from_dlpack(managed)
    assert x.data.ptr == managed.ptr
    np.testing.assert_array_equal(cp.asnumpy(x), data)
