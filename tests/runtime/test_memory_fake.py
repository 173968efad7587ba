"""DeviceBuffer's driver-facing logic on the CPU lane, against a fake driver.

The fake implements the few Driver API calls that `cupric.runtime.memory` makes, over host
memory (device pointers are host addresses), checks every call's argument count against
the real cuda.bindings signature, and refuses accesses outside live allocations. It lets
copies, fills, strided downloads, casts, closing and deferred frees be checked with real
data on a machine without a GPU; the GPU lane runs the same operations on a device.
"""

from __future__ import annotations

import ctypes
import gc
import inspect
import re

import numpy as np
import pytest

from cupric.runtime import _lifetime
from cupric.runtime import allocation, buffer
from cupric.runtime import memory as m
from cupric.runtime.errors import ClosedError, CudaOutOfMemoryError

real_driver = pytest.importorskip("cuda.bindings.driver")

POISON = 0xAB


def _arity(name: str) -> int:
    """Parameter count of a real cuda.bindings function, from its signature line."""
    first = getattr(real_driver, name).__doc__.split("\n")[0]
    inside = re.match(r"\w+\((.*)\)", first).group(1).strip()
    return 0 if not inside else inside.count(",") + 1


class FakeDriver:
    """Host-memory stand-in for the Driver API calls of the memory module."""

    CUevent_flags = real_driver.CUevent_flags
    CUpointer_attribute = real_driver.CUpointer_attribute

    def __init__(self, free_bytes: int = 1 << 30) -> None:
        self.allocations: dict[int, ctypes.Array] = {}
        self.calls: list[tuple] = []
        self.free_bytes = free_bytes
        self.total_bytes = 2 << 30
        self.freed: list[int] = []
        self.pointer_device = 0
        self.device_count = 1

    def __getattr__(self, name):
        impl = getattr(type(self), "_" + name, None)
        if impl is None:
            raise AttributeError(f"fake driver has no {name}")
        expected = _arity(name)

        def call(*args):
            assert len(args) == expected, f"{name} takes {expected} arguments, got {len(args)}"
            self.calls.append((name, *args))
            return impl(self, *args)
        return call

    # -- helpers --
    def _inside(self, ptr: int, n: int) -> bool:
        for base, raw in self.allocations.items():
            if base <= ptr and ptr + n <= base + len(raw):
                return True
        return False

    def _alloc(self, n):
        if n > self.free_bytes:
            return (2, 0)
        raw = (ctypes.c_ubyte * n)()
        ctypes.memset(raw, POISON, n)
        ptr = ctypes.addressof(raw)
        self.allocations[ptr] = raw
        return (0, ptr)

    def _free(self, ptr):
        ptr = int(ptr)
        if ptr not in self.allocations:
            return (1,)
        del self.allocations[ptr]
        self.freed.append(ptr)
        return (0,)

    def _copy(self, dst, src, n, dst_device, src_device):
        if (dst_device and not self._inside(dst, n)) or (src_device and not self._inside(src, n)):
            return (1,)
        ctypes.memmove(dst, src, n)
        return (0,)

    def _fill(self, ptr, pitch, value, width_bytes, count_words, word):
        if not self._inside(ptr, (count_words - 1) * pitch + word):
            return (1,)
        pattern = int(value).to_bytes(word, "little")
        for i in range(count_words):
            ctypes.memmove(ptr + i * pitch, pattern, word)
        return (0,)

    # -- the calls (names prefixed with _) --
    def _cuMemAlloc(self, n): return self._alloc(n)
    def _cuMemAllocAsync(self, n, stream): return self._alloc(n)
    def _cuMemAllocFromPoolAsync(self, n, pool, stream): return self._alloc(n)
    def _cuMemFree(self, ptr): return self._free(ptr)
    def _cuMemFreeAsync(self, ptr, stream): return self._free(ptr)
    def _cuMemGetInfo(self): return (0, self.free_bytes, self.total_bytes)
    def _cuMemcpyHtoD(self, d, s, n): return self._copy(d, s, n, True, False)
    def _cuMemcpyDtoH(self, d, s, n): return self._copy(d, s, n, False, True)
    def _cuMemcpyDtoD(self, d, s, n): return self._copy(d, s, n, True, True)
    def _cuMemcpyHtoDAsync(self, d, s, n, h): return self._copy(d, s, n, True, False)
    def _cuMemcpyDtoHAsync(self, d, s, n, h): return self._copy(d, s, n, False, True)
    def _cuMemcpyDtoDAsync(self, d, s, n, h): return self._copy(d, s, n, True, True)
    def _cuMemsetD8(self, p, v, n): return self._fill(p, 1, v, 1, n, 1)
    def _cuMemsetD16(self, p, v, n): return self._fill(p, 2, v, 2, n, 2)
    def _cuMemsetD32(self, p, v, n): return self._fill(p, 4, v, 4, n, 4)
    def _cuMemsetD8Async(self, p, v, n, h): return self._fill(p, 1, v, 1, n, 1)
    def _cuMemsetD16Async(self, p, v, n, h): return self._fill(p, 2, v, 2, n, 2)
    def _cuMemsetD32Async(self, p, v, n, h): return self._fill(p, 4, v, 4, n, 4)

    def _cuMemsetD2D32(self, p, pitch, v, width, height):
        assert width == 1
        return self._fill(p, pitch, v, 4, height, 4)

    def _cuMemsetD2D32Async(self, p, pitch, v, width, height, h):
        return self._cuMemsetD2D32(p, pitch, v, width, height)

    def _cuStreamSynchronize(self, h): return (0,)
    def _cuCtxSynchronize(self): return (0,)
    def _cuEventCreate(self, flags): return (0, 0xE0)
    def _cuEventRecord(self, event, stream): return (0,)
    def _cuStreamWaitEvent(self, stream, event, flags): return (0,)
    def _cuPointerGetAttribute(self, attribute, ptr): return (0, self.pointer_device)
    def _cuDeviceGetCount(self): return (0, self.device_count)
    def _cuCtxGetCurrent(self): return (0, 0xC0)  # a context is current


@pytest.fixture
def fake(monkeypatch):
    # Real allocations of earlier (GPU) tests must be released by the real driver, not
    # queued now and handed to the fake: collect and drain first, and keep the cyclic
    # collector off while the fake is installed.
    gc.collect()
    _lifetime.drain()
    gc.disable()
    drv = FakeDriver()
    for module in (m, allocation, buffer):  # memory.py's parts read their own names
        monkeypatch.setattr(module, "driver", lambda: drv, raising=False)
        monkeypatch.setattr(module, "_device_of_context", lambda: 0)
    monkeypatch.setattr(allocation, "_fast", None)  # the compiled path would reach the real driver
    monkeypatch.setattr(m, "_tls", type(m._tls)())
    try:
        yield drv
        gc.collect()
        _lifetime.drain()
    finally:
        gc.enable()


DTYPES = ["i1", "u1", "i2", "u2", "f2", "i4", "u4", "f4", "i8", "u8", "f8", "c8", "?"]


def _random(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip(fake, rng, dtype):
    host = _random(rng, (7, 5), dtype)
    buf = m.DeviceBuffer.from_numpy(host)
    assert buf.shape == (7, 5) and buf.dtype == np.dtype(dtype)
    assert buf.nbytes == host.nbytes and buf.strides == host.strides
    np.testing.assert_array_equal(buf.to_numpy(), host)
    np.testing.assert_array_equal(buf.to_numpy(stream=5), host)


def test_empty_is_uninitialized_and_zeros_is_zero(fake):
    buf = m.empty((4, 4), np.uint8)
    assert (buf.to_numpy() == POISON).all()
    z = m.zeros((3, 5), np.float32, stream=7)
    assert (z.to_numpy() == 0).all()
    assert z.stream == 7


@pytest.mark.parametrize("key", [
    (slice(None), 1), (1,), (slice(1, None, 2), slice(None, None, -1)),
    (Ellipsis, 2), (slice(None, None, -3), Ellipsis, None), (-1, slice(2, 0, -1)),
])
def test_strided_views_download(fake, rng, key):
    host = rng.standard_normal((6, 5, 4)).astype(np.float32)
    buf = m.to_device(host)
    view = buf[key]
    expected = host[key]
    assert view.shape == expected.shape
    assert view.strides == expected.strides
    np.testing.assert_array_equal(view.to_numpy(), expected)


def test_transpose_downloads_f_order(fake, rng):
    host = rng.standard_normal((3, 4))
    buf = m.to_device(host)
    out = buf.T.to_numpy()
    np.testing.assert_array_equal(out, host.T)
    assert buf.T.is_f_contiguous


def test_setitem_copies_into_rows(fake, rng):
    host = rng.standard_normal((4, 6)).astype(np.float32)
    buf = m.to_device(host)
    row = rng.standard_normal(6).astype(np.float32)
    buf[2] = row
    host[2] = row
    buf[0] = 3.5
    host[0] = 3.5
    np.testing.assert_array_equal(buf.to_numpy(), host)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_every_item_size(fake, rng, dtype):
    value = _random(rng, (), dtype)[()]
    buf = m.empty(9, dtype)
    if np.dtype(dtype).itemsize > 8:
        with pytest.raises(ValueError, match="1, 2, 4 or 8 bytes"):
            buf.fill(value)
        return
    buf.fill(value, stream=3)
    np.testing.assert_array_equal(buf.to_numpy(), np.full(9, value, dtype))


def test_fill_eight_bytes_uses_two_strided_fills(fake):
    buf = m.empty(5, np.float64)
    fake.calls.clear()
    buf.fill(1.5)
    names = [c[0] for c in fake.calls]
    assert names.count("cuMemsetD2D32") == 2
    np.testing.assert_array_equal(buf.to_numpy(), np.full(5, 1.5))


@pytest.mark.parametrize("width,value", [(8, 0x5A), (16, 0xBEEF), (32, 0xDEADBEEF)])
def test_memset_widths(fake, width, value):
    buf = m.empty(16, np.uint8)
    buf.memset(value, width)
    expected = np.full(16 // (width // 8), value, f"u{width // 8}").view(np.uint8)
    np.testing.assert_array_equal(buf.to_numpy(), expected)


def test_memset_validation_before_driver(fake):
    buf = m.empty(6, np.uint8)
    fake.calls.clear()
    with pytest.raises(ValueError, match="8, 16 or 32"):
        buf.memset(1, 64)
    with pytest.raises(ValueError, match="does not fit"):
        buf.memset(256, 8)
    with pytest.raises(ValueError, match="multiples of 4"):
        buf.memset(1, 32)
    with pytest.raises(ValueError, match="C-contiguous"):
        buf[::2].memset(1)
    assert fake.calls == []


def test_copy_errors_before_any_driver_call(fake, rng):
    buf = m.empty((4, 3), np.float32)
    fake.calls.clear()
    with pytest.raises(TypeError, match="dtype mismatch.*float32.*float64"):
        buf.copy_from(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"shape mismatch.*\(4, 3\).*\(3, 4\)"):
        buf.copy_from(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="ascontiguousarray"):
        buf.copy_from(np.zeros((3, 4), np.float32).T)
    with pytest.raises(ValueError, match="C-contiguous"):
        buf[:, :2].copy_from(np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="read-only"):
        buf.copy_to(_readonly((4, 3)))
    with pytest.raises(TypeError, match="NumPy array"):
        buf.copy_from(object())
    assert fake.calls == []


def _readonly(shape):
    a = np.zeros(shape, np.float32)
    a.setflags(write=False)
    return a


def test_device_to_device_and_copy(fake, rng):
    host = rng.standard_normal(100).astype(np.float32)
    a = m.to_device(host)
    b = m.empty_like(a)
    b.copy_from(a)
    np.testing.assert_array_equal(b.to_numpy(), host)
    c = a.copy(stream=4)
    np.testing.assert_array_equal(c.to_numpy(), host)
    d = m.empty(100, np.float32)
    a.copy_to(d, stream=9)
    assert d.stream == 9
    out = np.empty(100, np.float32)
    d.copy_to(out)
    np.testing.assert_array_equal(out, host)


def test_view_and_astype(fake, rng):
    host = rng.standard_normal((3, 4)).astype(np.float32)
    buf = m.to_device(host)
    np.testing.assert_array_equal(buf.view(np.uint32).to_numpy(), host.view(np.uint32))
    np.testing.assert_array_equal(buf.view(np.uint8).to_numpy(), host.view(np.uint8))
    np.testing.assert_array_equal(buf.view(np.float64).to_numpy(), host.view(np.float64))
    cast = buf.astype(np.int16)
    np.testing.assert_array_equal(cast.to_numpy(), host.astype(np.int16))
    assert cast.ptr != buf.ptr


def test_reshape_and_ravel(fake, rng):
    host = rng.standard_normal(24)
    buf = m.to_device(host)
    np.testing.assert_array_equal(buf.reshape(2, -1, 3).to_numpy(), host.reshape(2, -1, 3))
    np.testing.assert_array_equal(buf.reshape((4, 6))[1:3].ravel().to_numpy(),
                                  host.reshape(4, 6)[1:3].ravel())
    with pytest.raises(ValueError, match="C-contiguous"):
        buf.reshape(4, 6).T.reshape(-1)


def test_device_box(fake):
    box = m.device_box(2.5, np.float32)
    assert isinstance(box, m.DeviceBox) and box.shape == () and box.get() == np.float32(2.5)
    box.set(-7)
    assert box.get() == np.float32(-7)
    with pytest.raises(ValueError, match="one value"):
        m.device_box([1, 2])


def test_close_frees_once_and_views_refuse(fake):
    buf = m.empty(10, np.int32)
    view = buf[2:5]
    ptr = buf.ptr
    buf.close()
    assert fake.freed == [ptr]
    assert buf.closed and view.closed and buf.ptr == 0
    for call in (lambda: view.to_numpy(), lambda: buf.copy_from(np.zeros(10, np.int32)),
                 lambda: buf[1], lambda: buf.fill(1), lambda: buf.__cuda_array_interface__):
        with pytest.raises(ClosedError, match="closed"):
            call()
    buf.close()  # second close does nothing
    assert fake.freed == [ptr]
    with pytest.raises(ClosedError):
        with buf:
            pass


def test_close_of_a_view_closes_the_allocation(fake):
    buf = m.empty(10, np.int32, stream=3)
    view = buf[1:]
    ptr = buf.ptr
    fake.calls.clear()
    view.close(stream=11)
    assert buf.closed
    assert ("cuMemFreeAsync", ptr, 11) in fake.calls


def test_async_allocation_frees_on_its_stream(fake):
    buf = m.empty(10, np.int32, stream=21)
    ptr = buf.ptr
    fake.calls.clear()
    buf.close()
    assert [c for c in fake.calls if c[0] != "cuCtxGetCurrent"] == [("cuMemFreeAsync", ptr, 21)]


def test_garbage_collected_buffer_is_freed_through_the_deferred_queue(fake):
    buf = m.empty(10, np.int32)
    ptr = buf.ptr
    view = buf[3:]
    del buf
    gc.collect()
    assert ptr not in fake.freed  # a view still holds the allocation
    del view
    gc.collect()
    assert ptr not in fake.freed  # queued, not freed inside garbage collection
    assert _lifetime.pending_count() >= 1
    _lifetime.drain()
    assert ptr in fake.freed


def test_context_manager(fake):
    with m.empty(4) as buf:
        ptr = buf.ptr
    assert buf.closed and ptr in fake.freed


def test_out_of_memory_says_requested_and_free(fake):
    fake.free_bytes = 1000
    with pytest.raises(CudaOutOfMemoryError) as info:
        m.empty(1 << 20, np.uint8)
    assert info.value.requested == 1 << 20
    assert "1.00 MiB" in str(info.value)


def test_zero_size_buffers(fake):
    buf = m.empty((0, 3), np.float32)
    assert buf.nbytes == 0 and buf.ptr == 0
    assert buf.to_numpy().shape == (0, 3)
    buf.copy_from(np.empty((0, 3), np.float32))
    buf.zero()
    buf.close()
    assert fake.calls == []


def test_no_public_constructor():
    with pytest.raises(TypeError, match="cupric.runtime.empty"):
        m.DeviceBuffer()


def test_array_conversion_refused(fake):
    buf = m.empty(3)
    with pytest.raises(TypeError, match="to_numpy"):
        np.asarray(buf)
    with pytest.raises(TypeError, match="ambiguous"):
        bool(buf)


def test_fake_arity_matches_real_signatures():
    # The fake's parameter counts (minus self) agree with the real bindings'.
    for name, impl in vars(FakeDriver).items():
        if name.startswith("_cu"):
            params = len(inspect.signature(impl).parameters) - 1
            assert params == _arity(name[1:]), name


def test_to_device_of_a_device_array_copies_device_to_device(fake, rng):
    host = rng.standard_normal(16)
    a = m.to_device(host)
    fake.calls.clear()
    b = m.to_device(a)
    assert [c[0] for c in fake.calls] == ["cuMemAlloc", "cuMemcpyDtoD"]
    assert b.ptr != a.ptr
    np.testing.assert_array_equal(b.to_numpy(), host)


def test_protocol_stream_ordering(fake, rng):
    from cupric.runtime import dlpack, interop
    host = rng.standard_normal(8)

    class Producer:
        __cuda_array_interface__ = {"shape": (8,), "typestr": "<f8",
                                    "data": (host.ctypes.data, False), "version": 3,
                                    "strides": None, "stream": 5}

    fake.calls.clear()
    buf = interop.as_device_array(Producer(), stream=7)
    assert buf.stream == 7
    event = 0xE0  # what the fake's cuEventCreate returns
    assert fake.calls == [("cuEventCreate", 2), ("cuEventRecord", event, 5),
                          ("cuStreamWaitEvent", 7, event, 0)]
    fake.calls.clear()
    interop.as_device_array(Producer(), stream=5)  # same stream: nothing to do
    assert fake.calls == []
    mine = m.to_device(host, stream=11)
    fake.calls.clear()
    info = dlpack.parse_capsule(mine.__dlpack__(stream=9))
    assert fake.calls == [("cuEventRecord", event, 11), ("cuStreamWaitEvent", 9, event, 0)]
    info["release"]()
    fake.calls.clear()
    dlpack.parse_capsule(mine.__dlpack__(stream=-1))["release"]()  # -1: no ordering
    assert fake.calls == []
    legacy = m.to_device(host)  # synchronous copies leave the legacy stream as producer
    assert legacy.__cuda_array_interface__["stream"] == 1
    fake.calls.clear()
    dlpack.parse_capsule(legacy.__dlpack__())["release"]()  # consumer legacy too: nothing
    assert fake.calls == []


def test_device_of_borrowed_memory_is_asked_once(fake):
    host = np.zeros(4)
    fake.pointer_device = 3
    buf = m.borrow(host.ctypes.data, (4,), None, np.float64)
    assert buf.device == 3 and buf[1:].device == 3
    assert [c[0] for c in fake.calls].count("cuPointerGetAttribute") == 1
    fake.pointer_device = 0  # one device: 0 is the answer, no second opinion needed
    assert m.borrow(host.ctypes.data, (4,), None, np.float64).device == 0
