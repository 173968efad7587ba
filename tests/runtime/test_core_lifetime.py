"""CPU lane: the ownership machinery (close, finalizers through the deferred queue)."""

from __future__ import annotations

import gc
import threading
import warnings

import pytest

from cupric.runtime import _lifetime
from cupric.runtime._lifetime import Resource
from cupric.runtime.errors import ClosedError, CudaError


class Thing(Resource):
    __slots__ = ("extra",)


def make(handle, log, fail=False, owned=True):
    def release(h, tag):
        log.append((h, tag))
        if fail:
            raise CudaError(1, "release failed")
    t = Thing()
    t._init_resource(handle, release if owned else None, "tag")
    return t


@pytest.fixture(autouse=True)
def _empty_queue():
    _lifetime.drain()
    yield
    _lifetime.drain()


def test_close_releases_once():
    log = []
    t = make(7, log)
    assert not t.closed and t.owns_handle and t.handle == 7
    t.close()
    t.close()
    assert log == [(7, "tag")]
    assert t.closed
    with pytest.raises(ClosedError):
        t.handle


def test_close_raises_on_failure_and_stays_closed():
    log = []
    t = make(1, log, fail=True)
    with pytest.raises(CudaError, match="release failed"):
        t.close()
    assert t.closed
    t.close()  # no second release attempt
    assert log == [(1, "tag")]


def test_finalizer_defers_to_the_queue():
    log = []
    t = make(3, log)
    del t
    gc.collect()
    assert log == []                       # never inside garbage collection
    assert _lifetime.pending_count() == 1
    _lifetime.drain()
    assert log == [(3, "tag")]
    assert _lifetime.pending_count() == 0


def test_deferred_failure_is_reported_as_warning():
    log = []
    t = make(4, log, fail=True)
    del t
    gc.collect()
    with pytest.warns(RuntimeWarning, match="deferred release of Thing failed"):
        _lifetime.drain()


def test_borrowed_objects_never_release():
    log = []
    t = make(5, log, owned=False)
    assert not t.owns_handle
    t.close()
    assert t.closed
    t2 = make(6, log, owned=False)
    del t2
    gc.collect()
    _lifetime.drain()
    assert log == []


def test_context_manager_closes_and_refuses_closed():
    log = []
    with make(8, log) as t:
        assert t.handle == 8
    assert log == [(8, "tag")]
    with pytest.raises(ClosedError):
        with t:
            pass


def test_close_races_release_exactly_once():
    log = []
    for _ in range(50):
        t = make(9, log)
        barrier = threading.Barrier(4)

        def closer():
            barrier.wait()
            t.close()

        threads = [threading.Thread(target=closer) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert len(log) == 50


def test_check_drains_the_queue():
    from cupric.runtime._driver import check
    log = []
    t = make(10, log)
    del t
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check((0,))
    assert log == [(10, "tag")]


def test_finalizer_does_not_keep_object_alive():
    import weakref
    log = []
    t = make(11, log)
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


def test_queue_is_drained_at_exit():
    import subprocess
    import sys
    code = """
import gc
from cupric.runtime._lifetime import Resource
class T(Resource):
    pass
def release(h):
    print("released", h, flush=True)
t = T(); t._init_resource(42, release)
del t; gc.collect()
print("exiting", flush=True)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["exiting", "released", "42"]


def test_live_objects_release_directly_at_exit():
    import subprocess
    import sys
    code = """
from cupric.runtime import _lifetime
from cupric.runtime._lifetime import Resource
class T(Resource):
    pass
def release(h, tag):
    print("released", h, tag, "queued" if _lifetime.pending_count() else "direct", flush=True)
keep = []
for i in range(3):
    t = T(); t._init_resource(i, release, "x"); keep.append(t)
print("exiting", flush=True)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    # Newest first, each released directly by the exit hook (nothing left queued).
    assert out.stdout.split("\n")[:4] == ["exiting", "released 2 x direct",
                                          "released 1 x direct", "released 0 x direct"]
    assert "Warning" not in out.stderr and "Traceback" not in out.stderr
