"""cupric.runtime.resource on the CPU lane: the stream-bound library-handle base (with a
fake library and a fake device). The rule that no package outside the runtime uses a
private runtime name is tests/test_architecture.py's, for every package."""

from __future__ import annotations

import pytest
import test_shared_handles  # tests/runtime: the sharing table's fake device

from cupric.runtime import resource
from cupric.runtime.errors import ClosedError


class FakeContext:
    ptr = 0xC7


class FakeDevice(test_shared_handles.FakeDevice):
    def make_current(self):
        return FakeContext()


class Owned:
    __slots__ = ("workspace", "device", "stream")

    def __init__(self, device, stream):
        self.workspace = None
        self.device = device
        self.stream = stream


def _destroy(raw, owned):
    destroyed.append((raw, owned.device, owned.stream))


destroyed: list = []
made = iter(range(0x1000, 0x100000, 0x10))


class FakeHandle(resource.StreamBoundHandle):
    __slots__ = ("setup",)
    library = "FakeLib"
    _shared = resource.SharedHandles()
    _owned_type = Owned
    _make_raw = staticmethod(lambda: next(made))
    _destroy = staticmethod(_destroy)

    def _init_state(self):
        self.setup = None

    def _call_arg(self):
        return ("call", self._ptr)

    @classmethod
    def create(cls, device=None, stream=None, fail=False):
        return cls._open(device, stream, fail=fail)

    def _setup(self, dev, fail):
        if fail:
            raise RuntimeError("setup failed")
        self.setup = (dev.ordinal, self._stream_ptr)


@pytest.fixture
def fake_device(monkeypatch):
    import cupric.runtime.device as device_module
    monkeypatch.setattr(device_module, "Device", FakeDevice)
    monkeypatch.setattr(device_module, "device_count", lambda: 1)
    destroyed.clear()
    yield
    FakeHandle._shared._forget(lambda key: True)


def test_owned_handle_lifecycle(fake_device):
    h = FakeHandle.create(1, 0x55)
    assert (h.device, h.stream, h.setup, h.owns_handle) == (1, 0x55, (1, 0x55), True)
    assert h.ready() == ("call", h._ptr)
    assert h.ready() is h.ready()  # made once
    assert repr(h).startswith(f"<{__name__.rsplit('.', 1)[0]}.FakeHandle 0x")
    assert h._label() == "FakeLib handle (device 1)"
    assert h.workspace_bytes == 0
    raw = h._ptr
    h.close()
    assert destroyed == [(raw, 1, 0x55)]
    h.close()  # once only
    assert destroyed == [(raw, 1, 0x55)]
    with pytest.raises(ClosedError, match="this FakeLib Handle is closed"):
        h.ready()


def test_failed_setup_closes_the_handle(fake_device):
    with pytest.raises(RuntimeError, match="setup failed"):
        FakeHandle.create(0, None, fail=True)
    assert len(destroyed) == 1


def test_shared_per_device_and_stream(fake_device):
    a = FakeHandle.get(0, 0x10)
    assert FakeHandle.get(0, 0x10) is a
    b = FakeHandle.get(0, 0x20)
    assert b is not a and b.stream == 0x20
    a.close()  # leaves the table: the next request makes a new one
    c = FakeHandle.get(0, 0x10)
    assert c is not a and not c.closed


def test_borrowed_handle_is_never_destroyed(fake_device):
    h = FakeHandle._borrow(0xBEEF0, 2, 0x33)
    assert (h.device, h.stream, h.owns_handle) == (2, 0x33, False)
    assert h.ready() == ("call", 0xBEEF0)
    h.close()
    assert destroyed == [] and h.closed


def test_closed_stream_is_refused(fake_device):
    class Stream:
        handle = 0x44
        _closed = False

        def __int__(self):
            return 0x44

    stream = Stream()
    h = FakeHandle._borrow(0xB0, 0, stream)
    assert h.stream_object is stream
    stream._closed = True
    with pytest.raises(ClosedError, match="stream this FakeLib Handle is bound to"):
        h.ready()


def test_no_public_constructor():
    with pytest.raises(TypeError, match="no public constructor"):
        FakeHandle()


def test_library_handles_build_on_the_base():
    from cupric.cublas.handle import Handle as Blas
    from cupric.cudnn.handle import Handle as Dnn
    assert issubclass(Blas, resource.StreamBoundHandle)
    assert issubclass(Dnn, resource.StreamBoundHandle)
    assert Blas._shared is not Dnn._shared
    assert repr(Blas._borrow(0xA0, 0, None)).startswith("<cupric.cublas.Handle 0xa0")


def test_default_make_raw_calls_the_binding(monkeypatch):
    import sys
    import types

    import cffi
    ffi = cffi.FFI()
    ffi.cdef("typedef struct fake_ctx *fakeHandle_t;")
    statuses = []

    def fake_create(out):
        out[0] = ffi.cast("fakeHandle_t", 0x4560)
        return 0

    binding = types.ModuleType("fake_binding")
    binding.ffi = ffi
    binding.lib = types.SimpleNamespace(fakeCreate=fake_create)
    binding.check = statuses.append
    monkeypatch.setitem(sys.modules, "fake_binding", binding)

    class Made(resource.StreamBoundHandle):
        __slots__ = ()
        _binding, _c_type, _c_create = "fake_binding", "fakeHandle_t", "fakeCreate"

    assert Made._make_raw() == 0x4560 and statuses == [0]
