"""Context reset and loss on the CPU lane: what was made in the old context is never
released through the driver again (so a new object at the same address is never freed),
and every cache of context-bound objects forgets them. The GPU lane
(test_reset_gpu.py) faults real kernels and checks that every library works again."""

from __future__ import annotations

import gc
import types

import pytest

from cupric.runtime import _lifetime, context, errors
from cupric.runtime import allocation, buffer
from cupric.runtime import memory as m

pytest.importorskip("cuda.bindings.driver")


class Recorder(_lifetime.Resource):
    """A resource whose release is recorded instead of calling a driver."""

    @classmethod
    def make(cls, log, *, bound=True):
        self = cls.__new__(cls)
        self._init_resource(object(), lambda handle, tag: log.append(tag), "released",
                            bound=bound)
        return self


@pytest.fixture
def isolated(monkeypatch):
    """Private copies of the process-wide tables this file changes."""
    monkeypatch.setattr(_lifetime, "_epoch", _lifetime._Epoch())
    monkeypatch.setattr(context, "_generations", {})
    saved = list(_lifetime._pending)
    _lifetime._pending.clear()
    yield
    _lifetime._pending.clear()
    _lifetime._pending.extend(saved)


def test_releases_of_a_retired_epoch_do_nothing(isolated):
    log = []
    closed, dropped, kept, after = (Recorder.make(log) for _ in range(4))
    unbound = Recorder.make(log, bound=False)
    _lifetime.retire_epoch()
    closed.close()
    assert closed.closed and log == []
    del dropped
    gc.collect()
    _lifetime.drain()
    assert log == []
    unbound.close()  # not tied to a context (a context's own retain)
    assert log == ["released"]
    fresh = Recorder.make(log)  # made in the new context: released as usual
    fresh.close()
    assert log == ["released", "released"]
    del kept, after


def test_forget_drops_frees_of_one_device_only(isolated):
    keys = []
    for device in (0, 1, 0, 1):
        holder = object()
        keys.append(id(holder))
        _lifetime._live[id(holder)] = (m._free_sync, 0x1000 + device, (device,), "x")
        keys.append(holder)
    _lifetime._pending.append((m._free_async, 0x2000, (None, 0), "queued on 0"))
    _lifetime._pending.append((m._free_async, 0x2001, (None, 1), "queued on 1"))
    try:
        m._forget_frees(0)
        left = {k: v for k, v in _lifetime._live.items() if k in keys}
        assert sorted(v[2][0] for v in left.values()) == [1, 1]
        assert [e[3] for e in _lifetime._pending] == ["queued on 1"]
    finally:
        for k in keys:
            if isinstance(k, int):
                _lifetime._live.pop(k, None)


@pytest.fixture
def fake_memory(monkeypatch, isolated):
    from test_memory_fake import FakeDriver
    drv = FakeDriver()
    for module in (m, allocation, buffer):  # memory.py's parts read their own names
        monkeypatch.setattr(module, "driver", lambda: drv, raising=False)
        monkeypatch.setattr(module, "_device_of_context", lambda: 0)
    monkeypatch.setattr(allocation, "_fast", None)
    monkeypatch.setattr(m, "_tls", type(m._tls)())
    import cupric.runtime._driver as d
    monkeypatch.setattr(d, "driver", lambda: drv)
    return drv


def test_buffers_of_a_reset_context_are_never_freed(fake_memory):
    drv = fake_memory
    kept = m.empty(1000, "f4")
    dropped = m.empty(1000, "f4")
    queued = m.empty(1000, "f4", stream=0)
    old = {kept.ptr, dropped.ptr, queued.ptr}
    context._retire(0)  # what a reset (or a lost context) does to the memory tables
    kept.close()
    del dropped, queued
    gc.collect()
    _lifetime.drain()
    assert not old & set(drv.freed)
    fresh = m.empty(1000, "f4")  # the new context's memory is freed normally
    ptr = fresh.ptr
    fresh.close()
    assert ptr in drv.freed


def test_invalidate_runs_every_reset_hook(isolated, monkeypatch):
    import cupric.kernels._common as common
    from cupric.compiler import kernel as kmod
    from cupric.runtime.shared_handles import SharedHandles

    seen = []
    monkeypatch.setattr(context, "_reset_callbacks", list(context._reset_callbacks))
    context.on_reset(seen.append)
    # A kernel with launch handles on devices 0 and 1.
    kern = kmod.kernel(lambda_free_kernel)
    spec = kern._variant((), True, True)
    spec._on_device.update({0: "handle on 0", 1: "handle on 1"})
    spec._prepared = "handle on 0"
    kern._fast = "launcher"
    # A shared library handle of each device.
    log = []

    class LibHandle(_lifetime.Resource):
        _key = None

        def close(self):
            table.discard(self)
            super().close()

    def make(ordinal):
        handle = LibHandle.__new__(LibHandle)
        handle._init_resource(object(), lambda h: log.append(ordinal))
        return handle

    table = SharedHandles()
    monkeypatch.setattr(table, "get", lambda device, stream, create: _get(device, create))

    def _get(device, create):
        key = (device, 0)
        if key not in table._handles:
            handle = create(device)
            handle._key = key
            table._handles[key] = handle
        return table._handles[key]

    h0, h1 = table.get(0, None, make), table.get(1, None, make)
    common._WORKSPACES[0] = "workspace of 0"
    common._WORKSPACES[1] = "workspace of 1"
    try:
        context._invalidate(0)
        assert seen == [0] and context.generation(0) == 1 and context.generation(1) == 0
        assert spec._on_device == {1: "handle on 1"} and spec._prepared is None
        assert kern._fast is None
        assert h0.closed and not h1.closed and log == []  # closed, but nothing released
        assert table.get(0, None, make) is not h0
        assert 0 not in common._WORKSPACES and common._WORKSPACES[1] == "workspace of 1"
    finally:
        common._WORKSPACES.pop(1, None)
        common._WORKSPACES.pop(0, None)


def lambda_free_kernel():
    pass


def test_a_sticky_error_stops_releases_through_the_lost_context(isolated, monkeypatch):
    log = []
    made_before = Recorder.make(log)
    monkeypatch.setattr(errors, "_current_context_key", lambda: 0xC0FFEE)
    monkeypatch.setitem(context._primary_ordinals, 0xC0FFEE, 0)
    try:
        first = errors.error_from_code(700)  # CUDA_ERROR_ILLEGAL_ADDRESS, first seen
        assert isinstance(first, errors.IllegalAddressError)
        assert isinstance(errors.error_from_code(700), errors.ContextLostError)
        made_before.close()
        assert log == []
    finally:
        errors.reset_context_poison(0xC0FFEE)


class FakeContextDriver:
    def __init__(self, calls):
        self.calls = calls
        self.handle = 0xC1

    def cuDevicePrimaryCtxReset(self, dev):
        self.calls.append("reset")
        self.handle = 0xC2
        return (0,)

    def cuDevicePrimaryCtxRetain(self, dev):
        self.calls.append("retain")
        return (0, self.handle)

    def cuDevicePrimaryCtxRelease(self, dev):
        self.calls.append("release")
        return (0,)

    def cuCtxSetCurrent(self, handle):
        self.calls.append(("current", handle))
        return (0,)


def test_reset_forgets_caches_first_and_makes_the_new_context_current(isolated, monkeypatch):
    calls = []
    drv = FakeContextDriver(calls)
    monkeypatch.setattr(context, "driver", lambda: drv)
    monkeypatch.setattr(context, "check", lambda result: result[1] if len(result) > 1
                        else None)
    monkeypatch.setattr(context, "_reset_callbacks", [lambda o: calls.append(("hook", o))])
    device = types.SimpleNamespace(ordinal=3, handle="dev3")
    ctx = context.Context._retain_primary(device)
    try:
        assert context._primary_ordinals[0xC1] == 3
        ctx.reset()
        assert calls == ["retain", ("hook", 3), "reset", "retain", "release",
                         ("current", 0xC2)]
        assert ctx.ptr == 0xC2 and context._primary_ordinals.get(0xC2) == 3
        assert 0xC1 not in context._primary_ordinals
        assert context.generation(3) == 1
    finally:
        context._primary_ordinals.pop(0xC2, None)
        ctx._finalizer.detach()


# -- a destroyed stream ----------------------------------------------------------------------
# Stream handles are addresses the driver hands out again: once a stream is destroyed, no
# table may keep its raw handle (found by the soak: a later free or event record on it
# failed with CUDA_ERROR_CONTEXT_IS_DESTROYED).


def test_hooks_run_before_a_release_while_the_handle_is_valid(isolated, monkeypatch):
    log = []

    def release(handle, tag):
        log.append(("released", tag))

    monkeypatch.setattr(_lifetime, "_before_release", {})
    _lifetime.before_release(release, lambda handle: log.append(("hook", handle)))
    resource = Recorder.__new__(Recorder)
    resource._init_resource(0x5, release, "x")
    resource.close()
    assert log == [("hook", 0x5), ("released", "x")]
    log.clear()
    gone = Recorder.__new__(Recorder)
    gone._init_resource(0x6, release, "y")
    _lifetime.retire_epoch()
    gone.close()
    assert log == []  # neither: the context is gone


def test_frees_ordered_on_a_destroyed_stream_are_moved_off_it(isolated):
    holders = [object(), object()]
    _lifetime._live[id(holders[0])] = (m._free_async, 0x1000, (0xABC, 0), "on it")
    _lifetime._live[id(holders[1])] = (m._free_async, 0x2000, (0xDEF, 0), "elsewhere")
    _lifetime._pending.append((m._free_async, 0x3000, (0xABC, 0), "queued on it"))
    try:
        m._forget_stream(0xABC)
        assert _lifetime._live[id(holders[0])][2] == (m._GONE_STREAM, 0)
        assert _lifetime._live[id(holders[1])][2] == (0xDEF, 0)
        assert [e[2] for e in _lifetime._pending] == [(m._GONE_STREAM, 0)]
    finally:
        for holder in holders:
            _lifetime._live.pop(id(holder), None)


def test_workspace_and_shared_handles_forget_a_destroyed_stream(monkeypatch):
    import cupric.kernels._common as common
    from cupric.runtime import _driver
    from cupric.runtime import shared_handles as sh

    from cupric.runtime import native

    calls = []
    fake = types.SimpleNamespace(cuStreamSynchronize=lambda h: calls.append(h) or (0,))
    # The workspace asks through runtime.native, which holds its own names for the
    # driver functions (bound when it was first imported): both are replaced.
    for module in (_driver, native):
        monkeypatch.setattr(module, "driver", lambda: fake)
        monkeypatch.setattr(module, "check", lambda result: None)
    ws = common.Workspace(7)
    ws.last_stream = 0xABC
    monkeypatch.setitem(common._WORKSPACES, 7, ws)
    common._forget_stream(0xABC)
    assert calls == [0xABC] and ws.last_stream is None  # waited for, then forgotten

    closed = []
    table = sh.SharedHandles()
    for key in ((0, 0xABC), (0, 0xDEF)):
        table._handles[key] = types.SimpleNamespace(
            _key=key, close=lambda key=key: closed.append(key))
    sh._forget_stream(0xABC)
    assert closed == [(0, 0xABC)] and list(table._handles) == [(0, 0xDEF)]


def test_deferred_releases_wait_for_an_open_capture():
    # A release run inside a global-mode capture would invalidate it: drain() holds the
    # queue back between capture_began and capture_ended.
    from cupric.runtime import _lifetime
    ran = []
    _lifetime._pending.append((lambda handle: ran.append(handle), 7, (), "test"))
    _lifetime.capture_began()
    try:
        _lifetime.drain()
        assert ran == []
    finally:
        _lifetime.capture_ended()
    _lifetime.drain()
    assert ran == [7]
