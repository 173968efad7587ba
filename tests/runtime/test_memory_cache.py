"""CPU lane: the allocation cache of stream-ordered device memory.

The compiled allocation path (`cupric.runtime._fastalloc`) runs over the fake libcuda of
test_memory_fastalloc.py (blocks are malloc'd, every driver call is counted, double and
unknown frees are refused), with its cache on: blocks freed on a stream come back on
that stream without a driver call, never on another stream, never while the stream is
being captured; `release_cached`, the limit, the stream and reset hooks, and the
statistics are checked against the fake's own counts.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from cupric.runtime import _lifetime
from cupric.runtime import allocation as al
from cupric.runtime import memory as m
from cupric.runtime.errors import ClosedError, CudaOutOfMemoryError

from test_memory_fastalloc import (  # noqa: F401  (fixtures)
    CTX0, CTX1, STREAM, close_from_threads, entry, fake_lib)

OTHER = STREAM + 0x100  # another (non-special) stream handle
ALLOC_ASYNC, FREE_ASYNC, BAD_FREES, CAPTURE_QUERIES = 1, 4, 5, 6


@pytest.fixture
def cached(monkeypatch, fake_lib, entry):  # noqa: F811
    """The memory module on the compiled path over the fake libcuda, its cache on."""
    gc.collect()
    _lifetime.drain()
    monkeypatch.setattr(al, "_fast", entry)
    fake_lib.fake_set_capturing(0, 0)
    start, bad = fake_lib.fake_live(), fake_lib.fake_calls(BAD_FREES)
    yield fake_lib
    fake_lib.fake_set_capturing(0, 0)
    fake_lib.fake_set_current(CTX0, 0)
    gc.collect()
    _lifetime.drain()
    m.release_cached(synchronize=False)
    assert m.cache_stats().cached_blocks == 0
    assert fake_lib.fake_live() == start, "the test leaked fake device memory"
    assert fake_lib.fake_calls(BAD_FREES) == bad, "a pointer was freed twice"


def _calls(lib, kind):
    return lib.fake_calls(kind)


def test_a_block_freed_on_a_stream_comes_back_on_it_without_the_driver(cached):
    buf = m.empty(1000, np.uint8, stream=STREAM)
    ptr = buf.ptr
    before = m.cache_stats()
    allocs, frees = _calls(cached, ALLOC_ASYNC), _calls(cached, FREE_ASYNC)
    buf.close()
    assert m.cache_stats().cached_blocks == before.cached_blocks + 1
    assert m.cache_stats().cached_bytes == before.cached_bytes + 1024  # its size class
    again = m.empty(1010, np.uint8, stream=STREAM)  # the same class (1024 bytes)
    assert again.ptr == ptr and again.nbytes == 1010
    assert _calls(cached, ALLOC_ASYNC) == allocs and _calls(cached, FREE_ASYNC) == frees
    stats = m.cache_stats()
    assert stats.hits == before.hits + 1 and stats.cached_blocks == before.cached_blocks
    again.close()


def test_other_size_classes_and_streams_get_their_own_blocks(cached):
    buf = m.empty(1000, np.uint8, stream=STREAM)
    ptr = buf.ptr
    buf.close()
    allocs = _calls(cached, ALLOC_ASYNC)
    bigger = m.empty(5000, np.uint8, stream=STREAM)  # another class
    elsewhere = m.empty(1000, np.uint8, stream=OTHER)  # another stream: never reused
    assert ptr not in (bigger.ptr, elsewhere.ptr)
    assert _calls(cached, ALLOC_ASYNC) == allocs + 2
    assert m.cache_stats().cached_blocks == 1
    same = m.empty(700, np.uint8, stream=STREAM)  # 700 rounds to 1024 as well
    assert same.ptr == ptr
    for b in (bigger, elsewhere, same):
        b.close()


def test_size_classes_waste_at_most_an_eighth():
    for n in (1, 512, 513, 1000, 4096, 4097, 10000, 65536 + 1, 10**6, 3 * 2**30 + 7):
        klass = _class_of(n)
        assert klass >= n and klass % 512 == 0
        if n > 4096:
            assert klass - n <= n / 8


def _class_of(n):
    # The size class rule of the C side: what the cache charges for a block of n bytes.
    if n <= 512:
        return 512
    top = (n - 1).bit_length() - 1
    step = 1 << max(top - 3, 9)
    return (n + step - 1) // step * step


def test_cached_bytes_follow_the_size_class_rule(cached):
    for n in (100, 1000, 5000, 70000):
        before = m.cache_stats().cached_bytes
        m.empty(n, np.uint8, stream=STREAM).close()
        assert m.cache_stats().cached_bytes - before == _class_of(n)


def test_closing_on_another_stream_caches_the_block_there(cached):
    buf = m.empty(256, np.float32, stream=STREAM)
    ptr = buf.ptr
    buf.close(stream=OTHER)  # freed in OTHER's order: reusable on OTHER only
    on_first = m.empty(256, np.float32, stream=STREAM)
    assert on_first.ptr != ptr
    on_other = m.empty(256, np.float32, stream=OTHER)
    assert on_other.ptr == ptr
    on_first.close()
    on_other.close()


def test_the_garbage_collector_returns_blocks_at_once(cached):
    frees = _calls(cached, FREE_ASYNC)
    bufs = [m.empty(300, np.uint8, stream=STREAM) for _ in range(20)]
    ptrs = {b.ptr for b in bufs}
    views = [b[10:] for b in bufs[:5]]
    del bufs
    assert _lifetime.pending_count() == 0  # no deferred queue: into the cache directly
    assert m.cache_stats().cached_blocks == 15 and _calls(cached, FREE_ASYNC) == frees
    again = [m.empty(300, np.uint8, stream=STREAM) for _ in range(15)]
    assert {b.ptr for b in again} <= ptrs
    del views
    cycle = [m.empty(300, np.uint8, stream=STREAM)]
    cycle.append(cycle)
    del cycle
    gc.collect()  # the collector's frees go into the cache too
    assert m.cache_stats().cached_blocks == 5  # the views' five (the cycle took one back)
    del again


def test_close_twice_and_views_put_the_block_back_once(cached):
    buf = m.empty(64, np.float64, stream=STREAM)
    view = buf[3:]
    view.close()  # closes the allocation
    buf.close()
    buf.close()
    assert m.cache_stats().cached_blocks == 1
    with pytest.raises(ClosedError):
        buf[0]
    with pytest.raises(ClosedError):
        view.to_numpy()
    a = m.empty(64, np.float64, stream=STREAM)
    b = m.empty(64, np.float64, stream=STREAM)
    assert a.ptr != b.ptr  # the one cached block was handed out once
    a.close()
    b.close()


def test_concurrent_closes_put_the_block_back_once(cached):
    for _ in range(30):
        close_from_threads(cached, m.empty(32, np.uint8, stream=STREAM))
    assert m.cache_stats().cached_blocks == 1


def test_a_capturing_stream_bypasses_the_cache(cached):
    m.empty(512, np.uint8, stream=STREAM).close()  # one block cached for STREAM
    cached.fake_set_capturing(STREAM, 0)
    allocs, frees = _calls(cached, ALLOC_ASYNC), _calls(cached, FREE_ASYNC)
    hits = m.cache_stats().hits
    in_graph = m.empty(512, np.uint8, stream=STREAM)  # a graph allocation, not the block
    assert _calls(cached, ALLOC_ASYNC) == allocs + 1 and m.cache_stats().hits == hits
    assert m.cache_stats().cached_blocks == 1
    cached.fake_set_capturing(0, 0)
    in_graph.close()  # never joins the cache: freed with cuMemFreeAsync
    assert _calls(cached, FREE_ASYNC) == frees + 1
    assert m.cache_stats().cached_blocks == 1
    # A query the driver refuses (a global-mode capture seen from the legacy stream)
    # bypasses the cache as well.
    m.empty(512, np.uint8, stream=0).close()
    cached.fake_set_capturing(0, 905)  # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, on stream 0
    allocs = _calls(cached, ALLOC_ASYNC)
    implicit = m.empty(512, np.uint8, stream=0)
    assert _calls(cached, ALLOC_ASYNC) == allocs + 1
    cached.fake_set_capturing(0, 0)
    implicit.close()
    assert m.cache_stats().cached_blocks == 2


def test_the_per_thread_stream_is_never_cached(cached):
    frees = _calls(cached, FREE_ASYNC)
    m.empty(512, np.uint8, stream=2).close()  # a different stream in every thread
    assert _calls(cached, FREE_ASYNC) == frees + 1 and m.cache_stats().cached_blocks == 0


def test_blocks_are_kept_per_context(cached):
    buf = m.empty(512, np.uint8, stream=0)  # device 0's legacy stream
    ptr = buf.ptr
    buf.close()
    cached.fake_set_current(CTX1, 1)  # stream 0 now names device 1's legacy stream
    other = m.empty(512, np.uint8, stream=0)
    assert other.ptr != ptr and other.device == 1
    other.close()
    cached.fake_set_current(CTX0, 0)
    mine = m.empty(512, np.uint8, stream=0)
    assert mine.ptr == ptr and mine.device == 0
    mine.close()
    cached.fake_set_current(CTX1, 1)  # device 1's block is freed from its own context
    for ptr, stream, device, _size in al._fast.take(1, None):
        assert (stream, device) == (0, 1) and al._fast.free(ptr, stream, device) == 0
    cached.fake_set_current(CTX0, 0)


def test_release_cached_frees_every_block_and_reports_bytes(cached):
    start = cached.fake_live()
    bufs = [m.empty(n, np.uint8, stream=s) for n in (100, 2000, 30000)
            for s in (STREAM, OTHER)]
    for b in bufs:
        b.close()
    assert cached.fake_live() == start + 6
    frees = _calls(cached, FREE_ASYNC)
    released = m.release_cached(synchronize=False)
    assert released == 2 * (512 + 2048 + _class_of(30000))
    assert cached.fake_live() == start and _calls(cached, FREE_ASYNC) == frees + 6
    stats = m.cache_stats()
    assert (stats.cached_blocks, stats.cached_bytes) == (0, 0)
    assert m.release_cached(synchronize=False) == 0


def test_release_cached_refuses_during_a_capture(cached, monkeypatch):
    m.empty(100, np.uint8, stream=STREAM).close()
    with monkeypatch.context() as patch:
        patch.setattr(_lifetime, "_captures", [1])  # a capture begun through cupric
        with pytest.raises(RuntimeError, match="capture"):
            m.release_cached()
    assert m.cache_stats().cached_blocks == 1


def test_stats_count_hits_and_misses(cached):
    before = m.cache_stats()
    assert before.enabled and before.limit == 0
    for _ in range(5):
        m.empty(4096, np.uint8, stream=STREAM).close()
    stats = m.cache_stats()
    assert stats.misses - before.misses == 1 and stats.hits - before.hits == 4


def test_the_limit_sends_the_excess_to_the_driver(cached):
    al._fast.cache(None, 1024)
    bufs = [m.empty(1024, np.uint8, stream=STREAM) for _ in range(3)]
    frees = _calls(cached, FREE_ASYNC)
    del bufs  # the first fits under the limit; the others are freed (through the queue)
    _lifetime.drain()
    assert m.cache_stats().cached_bytes == 1024
    assert _calls(cached, FREE_ASYNC) == frees + 2


def test_the_cache_turned_off_frees_at_once(cached):
    al._fast.cache(False, None)
    frees = _calls(cached, FREE_ASYNC)
    buf = m.empty(100, np.uint8, stream=STREAM)
    assert _live_release(buf)[0] is m._free_async
    buf.close()
    assert _calls(cached, FREE_ASYNC) == frees + 1 and m.cache_stats().cached_blocks == 0
    assert not m.cache_stats().enabled


def test_a_destroyed_stream_frees_its_blocks_on_it_first(cached, monkeypatch):
    kept = m.empty(100, np.uint8, stream=OTHER)  # alive when the stream goes
    m.empty(100, np.uint8, stream=OTHER).close()
    m.empty(100, np.uint8, stream=STREAM).close()
    frees = _calls(cached, FREE_ASYNC)
    m._forget_stream(OTHER)  # what destroying a cupric Stream does first
    assert _calls(cached, FREE_ASYNC) == frees + 1
    assert cached.fake_last_stream() == OTHER
    assert m.cache_stats().cached_blocks == 1  # STREAM's block stays
    # The live buffer's free no longer names the dead handle: it never joins the cache,
    # but waits for the device and frees on the legacy stream.
    assert _live_release(kept)[2][0] is m._GONE_STREAM
    synchronized = []

    class Bindings:
        @staticmethod
        def cuCtxSynchronize():
            synchronized.append(True)
            return (0,)
    monkeypatch.setattr(al, "driver", lambda: Bindings)
    monkeypatch.setattr(al, "_context_for_free", lambda ptr, device=-1, stream=None: None)
    blocks = m.cache_stats().cached_blocks
    kept.close()
    assert synchronized == [True] and cached.fake_last_stream() == m.LEGACY_STREAM
    assert m.cache_stats().cached_blocks == blocks


def _live_release(buf):
    return _lifetime._live[id(buf._alloc)]


def test_a_reset_context_drops_its_blocks_without_freeing(cached, monkeypatch):
    m.empty(100, np.uint8, stream=STREAM).close()
    buf = m.empty(5000, np.uint8, stream=STREAM)  # another size class
    ptrs = [buf.ptr]
    buf.close()
    assert m.cache_stats().cached_blocks == 2
    frees = _calls(cached, FREE_ASYNC)
    taken = al._fast.take(0, STREAM)  # what forget drops, seen first (then put back)
    for ptr, stream, device, size in taken:
        assert al._fast.put(ptr, size, stream, CTX0, device)
    m._forget_frees(0)
    assert m.cache_stats().cached_blocks == 0 and _calls(cached, FREE_ASYNC) == frees
    # The fake still holds the memory the "reset" destroyed: hand it back by hand.
    for ptr, stream, device, size in taken:
        assert al._fast.free(ptr, stream, device) == 0
    assert set(ptrs) <= {t[0] for t in taken}


def test_out_of_memory_releases_the_cache_and_retries(cached, monkeypatch):
    m.empty(1024, np.uint8, stream=OTHER).close()  # a block cached elsewhere
    released = []
    real = al.release_cached

    def release(synchronize=True):  # the CPU lane has no device to wait for
        released.append(synchronize)
        return real(synchronize=False)
    monkeypatch.setattr(al, "release_cached", release)
    cached.fake_fail_next(2)  # the first allocation is refused for memory
    buf = m.empty(1024, np.uint8, stream=STREAM)
    assert released == [True] and m.cache_stats().cached_blocks == 0
    buf.close()
    al.release_cached()  # (the patched one: nothing to wait for here)
    released.clear()
    cached.fake_fail_next(2)  # nothing cached to give back: the typed error at once
    with pytest.raises(CudaOutOfMemoryError) as info:
        m.empty(1024, np.uint8, stream=STREAM)
    assert info.value.requested == 1024 and released == []


def test_a_rounded_size_that_does_not_fit_is_tried_exactly(cached):
    cached.fake_fail_next(2)  # the 1024-byte class is refused; 1000 bytes are not
    buf = m.empty(1000, np.uint8, stream=STREAM)
    assert _live_release(buf)[0] is m._free_async  # outside the cache
    frees = _calls(cached, FREE_ASYNC)
    buf.close()
    assert _calls(cached, FREE_ASYNC) == frees + 1 and m.cache_stats().cached_blocks == 0


@pytest.mark.parametrize("shape, dtype", [((16, 32), np.float32), ((), np.int64), (7, "u1"),
                                          ((2, 3, 4), np.complex64)])
def test_the_compiled_buffer_equals_the_python_one(cached, shape, dtype):
    made = m.empty(shape, dtype, stream=STREAM)  # one C call: block and DeviceBuffer
    twin = m._new_buffer(shape, dtype, STREAM, cls=m.DeviceBox)  # the Python path
    assert type(made) is m.DeviceBuffer and type(twin) is m.DeviceBox
    for name in ("shape", "strides", "dtype", "itemsize", "size", "nbytes", "ndim",
                 "readonly", "stream", "base"):
        assert getattr(made, name) == getattr(twin, name), name
    assert made.ptr == made._alloc.ptr and made.ptr != twin.ptr
    assert made._alloc.kind == m.ASYNC and made._alloc.owns_handle and not made.closed
    assert _live_release(made)[0] is m._free_cached
    made.close()
    twin.close()


def test_the_compiled_buffer_keeps_reference_counts_balanced(cached):
    import sys
    layout = m._layout((8, 8), np.float32)
    m.empty((8, 8), np.float32, stream=STREAM).close()
    # The layout's own tuples and the stream handle: objects no one else touches meanwhile
    # (small ints and dtypes are shared by the whole interpreter).
    watched = (layout[0], layout[1], STREAM)
    before = [sys.getrefcount(item) for item in watched]
    for _ in range(500):
        buf = m.empty((8, 8), np.float32, stream=STREAM)
        view = buf[1:]
        del buf, view
    assert [sys.getrefcount(item) for item in watched] == before
