"""cuDNN raw handles reused across `Handle` lifetimes (CPU lane, fake library and device):
a closed handle's ``cudnnHandle_t`` goes back to a per-device list (bound to no stream)
and the next `Handle.create` takes it instead of calling ``cudnnCreate``; at most four
are kept, the rest destroyed; `release_idle_handles` destroys the kept ones; a context
reset forgets them without a driver call. (Each cudnnCreate/cudnnDestroy pair left
memory behind inside cuDNN in the soak: benchmarks/soak.py.)"""

from __future__ import annotations

import pytest

cudnn = pytest.importorskip("cupric.cudnn")
if not cudnn.is_available():
    pytest.skip("cuDNN is not loadable", allow_module_level=True)

from cupric.cudnn import handle as H  # noqa: E402
from cupric.cudnn import lib  # noqa: E402


class FakeContext:
    ptr = 0xC7


class FakeDevice:
    def __init__(self, device=0):
        self.ordinal = device if isinstance(device, int) else device.ordinal

    @classmethod
    def current(cls):
        return cls(0)

    def make_current(self):
        return FakeContext()


class FakeCudnn:
    """cudnnCreate hands out new addresses; every call is recorded."""

    def __init__(self):
        self.calls = []
        self.next = 0x7000

    def cudnnCreate(self, out):
        self.next += 0x100
        out[0] = lib.ffi.cast("cudnnHandle_t", self.next)
        self.calls.append(("create", self.next))
        return 0

    def cudnnSetStream(self, handle, stream):
        self.calls.append(("stream", int(lib.ffi.cast("uintptr_t", handle)),
                           int(lib.ffi.cast("uintptr_t", stream))))
        return 0

    def cudnnDestroy(self, handle):
        self.calls.append(("destroy", int(lib.ffi.cast("uintptr_t", handle))))
        return 0


@pytest.fixture
def fake(monkeypatch):
    import cupric.runtime.device as device_module
    lib.binding.load()
    fake = FakeCudnn()
    monkeypatch.setattr(lib, "lib", fake)
    monkeypatch.setattr(device_module, "Device", FakeDevice)
    monkeypatch.setattr(device_module, "device_count", lambda: 1)
    monkeypatch.setattr(H, "_idle", {})
    return fake


def _kinds(fake):
    return [call[0] for call in fake.calls]


def test_a_closed_handles_raw_handle_is_reused_unbound(fake):
    a = H.Handle.create(stream=0x51)
    raw = a.ptr
    a.close()
    # Kept, bound to no stream (its stream may be destroyed), not destroyed.
    assert fake.calls == [("create", raw), ("stream", raw, 0x51), ("stream", raw, 0)]
    b = H.Handle.create(stream=0x52)
    assert b.ptr == raw and b.stream == 0x52 and not b.closed
    assert fake.calls[-1] == ("stream", raw, 0x52)
    assert _kinds(fake).count("create") == 1
    b.close()


def test_at_most_four_are_kept_per_device_and_release_destroys_them(fake):
    handles = [H.Handle.create(stream=0x60 + i) for i in range(6)]
    raws = [h.ptr for h in handles]
    for h in handles:
        h.close()
    destroyed = [c[1] for c in fake.calls if c[0] == "destroy"]
    assert destroyed == raws[4:]                 # the fifth and sixth: the list was full
    assert sorted(H._idle[0]) == sorted(raws[:4])
    assert H.release_idle_handles() == 4
    assert sorted(c[1] for c in fake.calls if c[0] == "destroy") == sorted(raws)
    assert H._idle == {} and H.release_idle_handles() == 0


def test_a_reset_forgets_the_kept_handles_without_a_driver_call(fake):
    h = H.Handle.create()
    raw = h.ptr
    h.close()
    before = list(fake.calls)
    H._forget_idle(0)
    assert fake.calls == before and H._idle == {}
    fresh = H.Handle.create()
    assert fresh.ptr != raw and _kinds(fake).count("create") == 2   # a new cudnnCreate
    fresh.close()


def test_the_public_name():
    assert cudnn.release_idle_handles is H.release_idle_handles


def test_the_soaks_handle_cycles_make_one_raw_handle(fake):
    # 1,000 create/close cycles on changing streams (the soak's handle phase): one
    # cudnnCreate, no cudnnDestroy, and nothing left open but the one kept raw handle.
    from cupric.runtime import resource
    live = resource.live_count()
    for i in range(1000):
        h = H.Handle.create(stream=0x1000 + 16 * i)
        h.close()
    assert _kinds(fake).count("create") == 1 and "destroy" not in _kinds(fake)
    assert len(H._idle[0]) == 1 and resource.live_count() == live
