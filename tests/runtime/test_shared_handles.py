"""The per-(device, stream) sharing table of library handles, on the CPU lane."""

import threading
import types

from cupric.runtime import shared_handles as sh


class FakeDevice:
    def __init__(self, device):
        self.ordinal = device if isinstance(device, int) else device.ordinal

    @classmethod
    def current(cls):
        return cls(0)


class FakeHandle:
    made = 0

    def __init__(self, ordinal):
        FakeHandle.made += 1
        self.ordinal = ordinal
        self._closed = False
        self._key = None


def test_one_handle_per_device_and_stream(monkeypatch):
    import cupric.runtime.device as device_module
    monkeypatch.setattr(device_module, "Device", FakeDevice)
    table = sh.SharedHandles()
    a = table.get(None, 7, FakeHandle)
    assert table.get(0, 7, FakeHandle) is a and a.ordinal == 0 and a._key == (0, 7)
    b = table.get(1, 7, FakeHandle)
    c = table.get(None, None, FakeHandle)
    assert len({id(a), id(b), id(c)}) == 3 and b.ordinal == 1
    a._closed = True
    table.discard(a)
    fresh = table.get(0, 7, FakeHandle)
    assert fresh is not a
    table.discard(a)  # a stale handle never removes its successor
    assert table.get(0, 7, FakeHandle) is fresh


def test_concurrent_first_requests_share_one_handle(monkeypatch):
    import cupric.runtime.device as device_module
    monkeypatch.setattr(device_module, "Device", FakeDevice)
    table = sh.SharedHandles()
    got = []
    barrier = threading.Barrier(8)

    def ask():
        barrier.wait()
        got.append(table.get(0, 3, FakeHandle))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(h) for h in got}) == 1


def test_stream_parts_and_device():
    assert sh.stream_parts(None) == (0, None)
    assert sh.stream_parts(5) == (5, None)
    torch_like = types.SimpleNamespace(cuda_stream=11, device=types.SimpleNamespace(index=1))
    assert sh.stream_parts(torch_like)[0] == 11
    assert sh.stream_device(torch_like) == 1
    assert sh.stream_device(types.SimpleNamespace(device=2)) == 2
    assert sh.stream_device(object()) is None
