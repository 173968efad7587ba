"""GPU lane: the allocation cache of stream-ordered memory on a real device.

Blocks freed on a stream come back on that stream (same address, contents written and
read back through the new buffer), never on another stream, never into a graph being
captured; `release_cached` gives the memory back to the driver (the pool's used bytes
and `memory_info` show it); the hit counter moves only where it should.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from test_memory_fastalloc_gpu import rt, streams  # noqa: F401  (fixtures)

pytestmark = pytest.mark.gpu

N = 4096  # float32 items: 16 KiB


@pytest.fixture
def m(rt):
    from cupric.runtime import _lifetime
    from cupric.runtime import memory
    gc.collect()
    _lifetime.drain()
    memory.release_cached()
    if not memory.cache_stats().enabled:
        pytest.skip("the allocation cache is off (CUPRIC_ALLOC_CACHE=0 or no compiled path)")
    yield memory
    gc.collect()
    _lifetime.drain()
    memory.release_cached()
    assert memory.cache_stats().cached_blocks == 0


def test_reuse_on_the_same_stream_with_correct_contents(m, streams, rng):
    s = streams[0]
    first = m.empty(N, np.float32, stream=s)
    ptr = first.ptr
    first.fill(7.0, stream=s)
    first.close()
    hits = m.cache_stats().hits
    again = m.empty(N, np.float32, stream=s)
    assert again.ptr == ptr and m.cache_stats().hits == hits + 1
    data = rng.standard_normal(N).astype(np.float32)
    again.copy_from(data, stream=s)
    assert np.array_equal(again.to_numpy(stream=s), data)
    again.close()


def test_no_reuse_on_another_stream(m, streams):
    a, b = streams[:2]
    buf = m.empty(N, np.float32, stream=a)
    ptr = buf.ptr
    buf.fill(1.0, stream=a)
    buf.close()
    other = m.empty(N, np.float32, stream=b)
    assert other.ptr != ptr
    other.fill(2.0, stream=b)
    assert (other.to_numpy(stream=b) == 2.0).all()
    other.close()


def test_dropped_outputs_come_back_and_stay_correct(m, streams, rng):
    s = streams[0]
    expected = []
    for round_ in range(20):
        bufs = [m.empty(N, np.float32, stream=s) for _ in range(8)]
        for k, buf in enumerate(bufs):
            buf.fill(float(round_ * 8 + k), stream=s)
        expected = [b.to_numpy(stream=s) for b in bufs]
        del bufs  # back into the cache from the finalizers
    assert all((e == 19 * 8 + k).all() for k, e in enumerate(expected))
    stats = m.cache_stats()
    assert stats.cached_blocks >= 8 and stats.hits >= 8 * 19


def test_capture_gets_its_own_graph_allocation(m, rt, streams):
    s = streams[0]
    cached = m.empty(N, np.float32, stream=s)
    ptr = cached.ptr
    cached.close()
    hits = m.cache_stats().hits
    with s.capture() as cap:
        inside = m.empty(N, np.float32, stream=s)
        inside.fill(3.0, stream=s)
        inside.close(stream=s)  # a free node of the graph, never the cache
    assert m.cache_stats().hits == hits  # the cached block was not handed to the graph
    assert m.cache_stats().cached_blocks == 1
    graph = cap.graph
    exec_ = graph.instantiate()
    exec_.launch(s)
    s.synchronize()
    after = m.empty(N, np.float32, stream=s)
    assert after.ptr == ptr  # the block stayed cached for eager use
    after.close()
    exec_.close()
    graph.close()


def test_release_cached_returns_memory_to_the_driver(m, rt, streams):
    from cupric.runtime import pool as pl
    s = streams[1]
    pool = pl.current_pool(0)
    rt.synchronize()
    used = pool.used
    big = [m.empty(1 << 22, np.float32, stream=s) for _ in range(8)]  # 128 MiB
    del big
    assert m.cache_stats().cached_bytes >= 8 << 24
    assert pool.used >= used + (8 << 24)  # still held from the pool by the cache
    released = m.release_cached()
    assert released >= 8 << 24 and m.cache_stats().cached_bytes == 0
    assert pool.used == used
