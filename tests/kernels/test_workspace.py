"""CPU lane: the per-device workspace that reductions and scans reuse between calls:
arrays grow geometrically (the old one freed in stream order), new ones start zeroed,
a call on another stream first waits for the previous user's stream, epochs restart
(with the flags cleared) before their tags overflow. The device side is faked."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.kernels import _common


class FakeBuffer:
    def __init__(self, size, dtype, stream):
        self.size, self.dtype, self.stream = size, np.dtype(dtype), stream
        self.events = []

    def memset(self, value, width, stream=None):
        self.events.append(("memset", value, stream))

    def close(self, stream=None):
        self.events.append(("close", stream))


@pytest.fixture
def fake_device(monkeypatch):
    orders = []
    monkeypatch.setattr("cupric.runtime.memory.empty",
                        lambda size, dtype, stream=None: FakeBuffer(size, dtype, stream))
    monkeypatch.setattr("cupric.runtime.memory.order_after",
                        lambda consumer, producer: orders.append((consumer, producer)))
    monkeypatch.setattr("cupric.runtime.memory.stream_handle",
                        lambda stream: 0 if stream is None else int(stream))
    monkeypatch.setattr(_common, "device_ordinal", lambda: 0)
    monkeypatch.setattr(_common, "on_simulator", lambda: False)
    monkeypatch.setattr(_common, "_WORKSPACES", {})
    return orders


def test_arrays_grow_and_start_zeroed(fake_device):
    call = _common.Call("test", stream=7)
    with call.workspace() as ws:
        a = ws.array("counter", np.uint32, 1, call.order, zero=True)
        assert a.events == [("memset", 0, 7)]
        assert ws.array("counter", np.uint32, 1, call.order, zero=True) is a
        p = ws.array("partials", np.float32, 100, call.order)
        bigger = ws.array("partials", np.float32, 150, call.order)
        assert bigger.size == 200 and p.events == [("close", 7)]
        assert ws.array("partials", np.float32, 120, call.order) is bigger


def test_other_streams_wait_for_the_previous_user(fake_device):
    for stream in (5, 5, 9, None, None):
        with _common.Call("test", stream=stream).workspace():
            pass
    assert fake_device == [(9, 5), (0, 9)]


def test_epochs_restart_before_overflow(fake_device):
    call = _common.Call("test", stream=3)
    with call.workspace() as ws:
        flags = ws.array("scan.flags", np.int32, 10, call.order, zero=True)
        assert ws.next_epoch(call.order) == 1
        ws.epoch = 2 ** 30 - 1
        assert ws.next_epoch(call.order) == 1
        assert flags.events[-1] == ("memset", 0, 3)
