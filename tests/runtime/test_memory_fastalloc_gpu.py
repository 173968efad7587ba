"""GPU lane: the compiled allocation path and tracked frees on a real device.

Leaks are read from the driver: the stream-ordered pool's used bytes
(`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`) must come back to where they started after many
allocations freed by ``close()``, by the garbage collector and across streams; frees in
the wrong place would fail (or leak) here where the CPU lane's fake cannot tell.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

KIB16 = 4096  # float32 items in 16 KiB


@pytest.fixture(scope="module")
def rt():
    from cupric import runtime
    runtime.Device(0).make_current()
    return runtime


@pytest.fixture
def streams(rt):
    made = [rt.Device(0).create_stream(non_blocking=True) for _ in range(4)]
    yield made
    for s in made:
        s.synchronize()
        s.close()


def _settled_used(pool, streams=()) -> int:
    from cupric.runtime import _lifetime, context
    from cupric.runtime import memory as m
    gc.collect()
    _lifetime.drain()
    m.release_cached()  # freed buffers' blocks wait in the allocation cache
    for s in streams:
        s.synchronize()
    context.synchronize()  # every stream of the context, the legacy one included
    return pool.used


def test_the_compiled_path_is_in_use(rt):
    from cupric.runtime import _fastalloc
    from cupric.runtime import memory as m
    from cupric.runtime import allocation as al
    m.empty(16, np.uint8, stream=0).close()
    assert al._fast is not None and al._fast is not m._UNSET, _fastalloc.build_error()
    assert al._fast.device() == 0


def test_many_stream_ordered_buffers_leave_the_pool_as_found(rt, streams):
    from cupric.runtime import _lifetime
    from cupric.runtime import memory as m
    from cupric.runtime import pool as pl
    pool = pl.current_pool(0)
    s = streams[0]
    start = _settled_used(pool, streams)
    live = _lifetime.live_count()
    for _ in range(5000):
        buf = m.empty(KIB16, np.float32, stream=s)
        buf.close()
    with m.empty(KIB16, np.float32, stream=s) as buf:
        buf.fill(1.5, stream=s)
        assert (buf.to_numpy(stream=s) == 1.5).all()
    assert _settled_used(pool, streams) == start
    assert _lifetime.live_count() == live


def test_buffers_freed_by_the_garbage_collector(rt, streams):
    from cupric.runtime import _lifetime
    from cupric.runtime import memory as m
    from cupric.runtime import pool as pl
    pool = pl.current_pool(0)
    s = streams[1]
    start = _settled_used(pool, streams)
    bufs = [m.empty(KIB16, np.float32, stream=s) for _ in range(1000)]
    s.synchronize()
    assert pool.used >= start + 1000 * KIB16 * 4
    for i, buf in enumerate(bufs[:8]):
        buf.fill(float(i), stream=s)
    for i, buf in enumerate(bufs[:8]):
        assert (buf.to_numpy(stream=s) == i).all()
    del bufs, buf
    for _ in range(1000):  # dropped at once: queued by __del__, drained by allocations
        m.empty(KIB16, np.float32, stream=s)
    cycle = [m.empty(KIB16, np.float32, stream=s)]
    cycle.append(cycle)
    del cycle
    assert _settled_used(pool, streams) == start
    assert _lifetime.pending_count() == 0


def test_multi_stream_alloc_fill_free(rt, streams, rng):
    from cupric.runtime import memory as m
    from cupric.runtime import pool as pl
    pool = pl.current_pool(0)
    start = _settled_used(pool, streams)
    for round_ in range(50):
        bufs = []
        for k, s in enumerate(streams):
            buf = m.empty((64, 64), np.float32, stream=s)
            buf.fill(float(round_ * 4 + k), stream=s)
            bufs.append(buf)
        for k, (buf, s) in enumerate(zip(bufs, streams)):
            assert (buf.to_numpy(stream=s) == round_ * 4 + k).all()
            # Freed on another stream than the one it was made on: close orders it there.
            other = streams[(k + 1) % len(streams)]
            other.wait(s)
            buf.close(stream=other)
    assert _settled_used(pool, streams) == start


def test_synchronous_buffers_and_memory_info(rt):
    from cupric.runtime import _lifetime
    from cupric.runtime import memory as m
    live = _lifetime.live_count()
    items = 16384  # 64 KiB each, 128 MiB in all: a leak would show in cuMemGetInfo
    m.empty(items, np.float32).close()
    free_before, _ = m.memory_info()
    bufs = [m.empty(items, np.float32) for _ in range(2000)]
    assert all(b._alloc.kind == m.SYNC for b in bufs) and len({b.ptr for b in bufs}) == 2000
    for b in bufs[:1000]:
        b.close()
    del bufs
    gc.collect()
    _lifetime.drain()
    free_after, _ = m.memory_info()
    assert _lifetime.live_count() == live
    # cuMemFree returns the memory to the driver (which may cache part of it).
    assert free_after >= free_before - (64 << 20)


def test_buffer_closed_after_its_stream(rt):
    from cupric.runtime import memory as m
    from cupric.runtime import pool as pl
    pool = pl.current_pool(0)
    s = rt.Device(0).create_stream()
    start = _settled_used(pool, [s])
    buf = m.empty(KIB16, np.float32, stream=s)
    buf.fill(2.0, stream=s)
    s.synchronize()
    s.close()
    buf.close()  # its stream is gone: synchronize, then free on the legacy stream
    assert _settled_used(pool) == start


def test_pool_buffers_return_to_their_pool(rt, streams):
    from cupric.runtime import pool as pl
    pool = pl.create_pool(0)
    try:
        s = streams[2]
        for _ in range(200):
            buf = pool.empty(KIB16, np.float32, stream=s)
            assert buf._alloc.owner is pool
            buf.close()
        kept = [pool.empty(KIB16, np.float32, stream=s) for _ in range(10)]
        s.synchronize()
        assert pool.used >= 10 * KIB16 * 4
        del kept
        assert _settled_used(pool, streams) == 0
    finally:
        pool.close()


def test_out_of_memory_is_typed(rt, streams):
    from cupric.runtime import memory as m
    from cupric.runtime.errors import CudaError, CudaOutOfMemoryError
    _free, total = m.memory_info()
    with pytest.raises(CudaOutOfMemoryError) as info:
        m.empty(total * 2, np.uint8)
    assert info.value.requested == total * 2 and info.value.total == total
    with pytest.raises(CudaError) as info:  # the pool may answer another typed error
        m.empty(total * 2, np.uint8, stream=streams[0])
    print("stream-ordered refusal:", type(info.value).__name__, info.value)
    if isinstance(info.value, CudaOutOfMemoryError):
        assert info.value.requested == total * 2
    buf = m.empty(KIB16, np.float32, stream=streams[0])  # still usable afterwards
    buf.close()


def test_a_thread_without_a_context_gets_device_zero(rt):
    from cupric.runtime import _driver
    from cupric.runtime import memory as m
    from cupric.runtime import allocation as al
    seen = {}

    def work():
        d = _driver.driver()
        seen["before"] = int(_driver.check(d.cuCtxGetCurrent()))
        seen["fast"] = al._fast.device()
        buf = m.empty(KIB16, np.float32, stream=0)
        seen["device"] = buf.device
        buf.fill(3.0)
        seen["ok"] = bool((buf.to_numpy() == 3.0).all())
        buf.close()
        seen["after"] = int(_driver.check(d.cuCtxGetCurrent()))
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen["before"] == 0 and seen["fast"] == -1
    assert seen["device"] == 0 and seen["ok"]
    assert seen["after"] == rt.Device(0).primary_context().ptr


def test_device_query_follows_push_and_pop(rt):
    from cupric.runtime import _driver
    from cupric.runtime import memory as m
    from cupric.runtime import allocation as al
    d = _driver.driver()
    ctx = rt.Device(0).primary_context()
    seen = []

    def work():
        seen.append(al._fast.device())
        with ctx:  # cuCtxPushCurrent / cuCtxPopCurrent
            seen.append(al._fast.device())
            buf = m.empty(64, np.uint8, stream=0)
            seen.append(buf.device)
            buf.close()
        seen.append(al._fast.device())
        seen.append(int(_driver.check(d.cuCtxGetCurrent())))
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [-1, 0, 0, -1, 0]


def test_buffers_alive_at_exit_are_freed_quietly(tmp_path):
    script = textwrap.dedent("""
        import numpy as np
        from cupric import runtime
        from cupric.runtime import memory as m
        from cupric.runtime import allocation as al
        runtime.Device(0).make_current()
        s = runtime.Device(0).create_stream()
        kept = [m.empty(4096, np.float32, stream=s) for _ in range(100)]
        sync = [m.empty(4096, np.float32) for _ in range(10)]
        dead = m.empty(4096, np.float32, stream=s)
        del dead
        assert al._fast is not None
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    # A failed release at exit is reported as "cupric: releasing ... at exit failed".
    assert "cupric:" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_cross_device_free_uses_the_owning_context(rt):
    if rt.Device.count() < 2:
        pytest.skip("needs two GPUs")
    from cupric.runtime import memory as m
    from cupric.runtime import pool as pl
    pool1 = pl.current_pool(1)
    start = _settled_used(pool1)
    with rt.Device(1).primary_context():
        bufs = [m.empty(KIB16, np.float32, stream=0) for _ in range(20)]
    assert all(b.device == 1 for b in bufs)
    rt.Device(0).make_current()
    for b in bufs[:10]:
        b.close()       # legacy stream of device 1: the compiled path hands it to Python
    del bufs            # the rest through the queue, from device 0's context
    with rt.Device(1).primary_context():
        rt.Device(1).synchronize()
    assert _settled_used(pool1) == start
