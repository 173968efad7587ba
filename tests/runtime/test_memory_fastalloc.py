"""CPU lane: the compiled allocation path and the tracked ownership of device memory.

The extension (`cupric.runtime._fastalloc`) is built here and bound to a fake libcuda, a
small C library compiled for the test: it keeps a current context per thread, hands out
malloc'd blocks as device pointers, records every call and refuses unknown pointers, so
that double frees and leaks show. The memory module then runs its real fast path over
it (`allocation._fast`), with no driver and no GPU; the GPU lane repeats the essentials on a device.
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

from cupric.runtime import _fastalloc, _lifetime
from cupric.runtime import allocation as al
from cupric.runtime import memory as m
from cupric.runtime.errors import ClosedError, CudaError, CudaOutOfMemoryError

NO_CONTEXT, NEED_PYTHON = _fastalloc.NO_CONTEXT, _fastalloc.NEED_PYTHON

FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_LIVE 65536
static uintptr_t live[MAX_LIVE];
static int nlive = 0;
static __thread void *current = NULL;
static __thread int current_device = -1;
static int fail_next = 0;
static uintptr_t last_stream = 12345, last_pool = 0;
static int last_free_device = -9;
static int calls[8];   /* alloc, alloc_async, alloc_pool, free, free_async, bad frees,
                          capture queries */

void fake_set_current(void *ctx, int device) { current = ctx; current_device = device; }
void fake_fail_next(int code) { fail_next = code; }
int fake_live(void) { return nlive; }
uintptr_t fake_last_stream(void) { return last_stream; }
uintptr_t fake_last_pool(void) { return last_pool; }
int fake_last_free_device(void) { return last_free_device; }
int fake_calls(int kind) { return calls[kind]; }

static int take(unsigned long long *p, size_t n) {
    if (fail_next) { int e = fail_next; fail_next = 0; return e; }
    if (nlive == MAX_LIVE) return 2;
    void *block = malloc(n ? n : 1);
    live[nlive++] = (uintptr_t)block;
    *p = (unsigned long long)(uintptr_t)block;
    return 0;
}

static int give(unsigned long long p) {
    if (fail_next) { int e = fail_next; fail_next = 0; return e; }
    for (int i = 0; i < nlive; i++) {
        if (live[i] == (uintptr_t)p) {
            live[i] = live[--nlive];
            free((void *)(uintptr_t)p);
            last_free_device = current_device;
            return 0;
        }
    }
    calls[5]++;
    return 1;   /* CUDA_ERROR_INVALID_VALUE: not a live allocation (a double free) */
}

int cuCtxGetCurrent(void **ctx) { *ctx = current; return 0; }
int cuCtxGetDevice(int *device) {
    if (current == NULL) return 201;
    *device = current_device;
    return 0;
}
int cuMemAlloc_v2(unsigned long long *p, size_t n) { calls[0]++; return take(p, n); }
int cuMemAllocAsync(unsigned long long *p, size_t n, void *s) {
    calls[1]++; last_stream = (uintptr_t)s; return take(p, n);
}
int cuMemAllocFromPoolAsync(unsigned long long *p, size_t n, void *pool, void *s) {
    calls[2]++; last_stream = (uintptr_t)s; last_pool = (uintptr_t)pool; return take(p, n);
}
int cuMemFree_v2(unsigned long long p) { calls[3]++; return give(p); }
int cuMemFreeAsync(unsigned long long p, void *s) {
    calls[4]++; last_stream = (uintptr_t)s; return give(p);
}

/* The stream being captured, and the error the query answers for it (a global-mode
   capture makes the legacy stream's query fail); (0, 0): no capture. */
static uintptr_t capturing = 0;
static int capture_error = 0, capture_on = 0;
void fake_set_capturing(uintptr_t s, int error) {
    capturing = s; capture_error = error; capture_on = s != 0 || error != 0;
}
int cuStreamIsCapturing(void *s, int *status) {
    calls[6]++;
    if (capture_on && (uintptr_t)s == capturing) {
        if (capture_error) return capture_error;
        *status = 1;   /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
        return 0;
    }
    *status = 0;
    return 0;
}

/* For the exit test: what is still live when the process unloads the library. */
__attribute__((destructor)) static void report(void) {
    const char *path = getenv("FAKE_CUDA_REPORT");
    if (path == NULL) return;
    FILE *f = fopen(path, "w");
    if (f == NULL) return;
    fprintf(f, "%d %d\n", nlive, calls[5]);
    fclose(f);
}
"""

CTX0, CTX1 = 0xC000, 0xC100  # fake contexts of devices 0 and 1
STREAM = 0x5000               # a fake (non-special) stream handle


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the fake libcuda")
    if _fastalloc.load() is None:
        pytest.skip(f"the allocation extension cannot be built: {_fastalloc.build_error()}")
    folder = tmp_path_factory.mktemp("fakecuda")
    source = folder / "fakecuda.c"
    source.write_text(FAKE_LIBCUDA)
    path = folder / "libfakecuda.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", str(source), "-o", str(path)],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(str(path))
    lib.fake_last_stream.restype = ctypes.c_uint64
    lib.fake_last_pool.restype = ctypes.c_uint64
    lib.fake_set_current.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.fake_set_capturing.argtypes = [ctypes.c_uint64, ctypes.c_int]
    lib.path = str(path)
    return lib


@pytest.fixture
def entry(fake_lib):
    fake_lib.fake_set_current(CTX0, 0)
    fake_lib.fake_fail_next(0)
    yield _fastalloc.Entry(_fastalloc.load(), _fastalloc.libcuda_addresses(fake_lib.path))
    fake_lib.fake_set_current(None, -1)


@pytest.fixture
def fast(monkeypatch, fake_lib, entry):
    """The memory module on the compiled path over the fake libcuda, its allocation
    cache off (every free reaches the driver; `cached` below turns it on)."""
    gc.collect()
    _lifetime.drain()
    entry.cache(False, None)
    monkeypatch.setattr(al, "_fast", entry)
    start, bad = fake_lib.fake_live(), fake_lib.fake_calls(5)
    yield fake_lib
    gc.collect()
    _lifetime.drain()
    m.release_cached(synchronize=False)
    assert fake_lib.fake_live() == start, "the test leaked fake device memory"
    assert fake_lib.fake_calls(5) == bad, "a pointer was freed twice (or never allocated)"


# -- the extension itself -------------------------------------------------------------------


def test_device_follows_the_current_context(fake_lib, entry):
    assert entry.device() == 0
    fake_lib.fake_set_current(CTX1, 1)
    assert entry.device() == 1
    fake_lib.fake_set_current(None, -1)
    assert entry.device() == NO_CONTEXT
    seen = []
    thread = threading.Thread(target=lambda: seen.append(entry.device()))
    thread.start()
    thread.join()
    assert seen == [NO_CONTEXT]  # the current context is per thread, never cached


def test_alloc_routes_and_frees(fake_lib, entry):
    calls = [fake_lib.fake_calls(k) for k in range(5)]
    err, ptr, device = entry.alloc(64, None, 0)
    assert (err, device) == (0, 0) and ptr
    assert entry.free(ptr, None, 0) == 0
    err, ptr, device = entry.alloc(64, STREAM, 0)
    assert err == 0 and fake_lib.fake_last_stream() == STREAM
    assert entry.free(ptr, STREAM + 8, 0) == 0 and fake_lib.fake_last_stream() == STREAM + 8
    err, ptr, _ = entry.alloc(64, 0, 0xB00)
    assert err == 0 and fake_lib.fake_last_pool() == 0xB00 and fake_lib.fake_last_stream() == 0
    assert entry.free(ptr, 0, 0) == 0
    assert [fake_lib.fake_calls(k) - c for k, c in enumerate(calls)] == [1, 1, 1, 1, 2]


def test_driver_errors_come_back_as_codes(fake_lib, entry):
    fake_lib.fake_fail_next(2)
    assert entry.alloc(1 << 40, STREAM, 0) == (2, 0, 0)
    err, ptr, _ = entry.alloc(8, STREAM, 0)
    bad = fake_lib.fake_calls(5)
    assert entry.free(ptr + 1, STREAM, 0) == 1  # not an allocation: the driver's code
    assert fake_lib.fake_calls(5) == bad + 1
    assert entry.free(ptr, STREAM, 0) == 0
    fake_lib.fake_set_current(None, -1)
    assert entry.alloc(8, STREAM, 0) == (NO_CONTEXT, 0, -1)
    bad = fake_lib.fake_calls(5)
    assert entry.free(ptr, STREAM, 0) == NEED_PYTHON  # nothing was called
    assert fake_lib.fake_calls(5) == bad


@pytest.mark.parametrize("args", [(8.0, None, 0), (-8, None, 0), (8, -1, 0), (8, "s", 0),
                                  (8, None, None), (2**70, None, 0)])
def test_what_is_not_a_plain_int_goes_to_python(entry, args):
    assert entry.alloc(*args) == (NEED_PYTHON, 0, -1)


def test_frees_that_name_the_current_context_need_its_device(fake_lib, entry):
    err, ptr, device = entry.alloc(8, 0, 0)
    fake_lib.fake_set_current(CTX1, 1)
    for stream in (None, 0, 1, 2):  # cuMemFree, legacy and per-thread streams
        assert entry.free(ptr, stream, device) == NEED_PYTHON
    bad = fake_lib.fake_calls(5)
    assert entry.free(ptr, STREAM, device) == 0  # a real stream carries its context
    assert fake_lib.fake_calls(5) == bad


def test_make_checks_addresses():
    module = _fastalloc.load()
    if module is None:
        pytest.skip(f"the allocation extension cannot be built: {_fastalloc.build_error()}")
    with pytest.raises(TypeError):
        module.make(1, 2, 3)
    with pytest.raises(ValueError):
        module.make(*([1] * (len(_fastalloc.SYMBOLS) - 1)), 0)


# -- the memory module on the compiled path ---------------------------------------------------


def test_empty_close_and_context_manager(fast):
    start = fast.fake_live()
    buf = m.empty((16, 32), np.float32, stream=STREAM)
    assert fast.fake_live() == start + 1 and fast.fake_last_stream() == STREAM
    assert buf.shape == (16, 32) and buf.strides == (128, 4) and buf.nbytes == 2048
    assert buf.device == 0 and buf.stream == STREAM and buf.owns_memory
    assert buf._alloc.owns_handle and buf._alloc.kind == m.ASYNC
    buf.close(stream=STREAM + 16)  # freed on the stream close names
    assert fast.fake_live() == start and fast.fake_last_stream() == STREAM + 16
    buf.close()
    with pytest.raises(ClosedError):
        buf[0]
    with m.empty(100, np.uint8) as sync:
        assert sync._alloc.kind == m.SYNC and fast.fake_live() == start + 1
    assert sync.closed and fast.fake_live() == start


def test_garbage_collected_buffers_free_through_the_queue(fast):
    start = fast.fake_live()
    live = _lifetime.live_count()
    bufs = [m.empty(256, np.uint8, stream=STREAM) for _ in range(100)]
    views = [b[10:] for b in bufs[:10]]
    assert fast.fake_live() == start + 100 and _lifetime.live_count() == live + 100
    del bufs
    assert fast.fake_live() == start + 100  # queued, never freed inside __del__
    assert _lifetime.pending_count() == 90
    m.empty(8, np.uint8, stream=STREAM).close()  # the next allocation drains the queue
    assert fast.fake_live() == start + 10 and _lifetime.pending_count() == 0
    del views
    _lifetime.drain()
    assert fast.fake_live() == start and _lifetime.live_count() == live


def test_cycles_are_collected_and_freed(fast):
    start = fast.fake_live()
    buf = m.empty(64, np.uint8, stream=STREAM)
    holder = {"buf": buf}
    buf._alloc.owner = holder  # a cycle through the allocation itself
    holder["self"] = holder
    del buf, holder
    gc.collect()
    _lifetime.drain()
    assert fast.fake_live() == start


def close_from_threads(lib, buf, count: int = 4) -> None:
    """Close `buf` from `count` threads at once (each with device 0's fake context)."""
    barrier = threading.Barrier(count)

    def close():
        lib.fake_set_current(CTX0, 0)  # contexts are current per thread
        barrier.wait()
        buf.close()
    threads = [threading.Thread(target=close) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_concurrent_close_frees_once(fast):
    start = fast.fake_live()
    for _ in range(50):
        buf = m.empty(32, np.uint8, stream=STREAM)
        close_from_threads(fast, buf)
        assert buf.closed
    assert fast.fake_live() == start


def test_no_context_makes_one_current(fast, monkeypatch):
    made = []

    def make_device_zero_current():
        made.append(True)
        fast.fake_set_current(CTX0, 0)
        return 0
    monkeypatch.setattr(al, "_device_of_context", make_device_zero_current)
    fast.fake_set_current(None, -1)
    buf = m.empty(10, np.int32, stream=STREAM)
    assert made == [True] and buf.device == 0
    buf.close()


def test_allocation_records_the_current_device(fast):
    fast.fake_set_current(CTX1, 1)
    buf = m.empty(10, np.int32, stream=STREAM)
    assert buf.device == 1
    buf.close()


def test_out_of_memory_is_typed(fast):
    fast.fake_fail_next(2)
    with pytest.raises(CudaOutOfMemoryError) as info:
        m.empty(1 << 20, np.uint8, stream=STREAM)
    assert info.value.requested == 1 << 20
    fast.fake_fail_next(1)
    with pytest.raises(CudaError):
        m.empty(8, np.uint8)


def test_failed_free_raises_and_stays_closed(fast):
    buf = m.empty(8, np.uint8, stream=STREAM)
    ptr = buf.ptr
    fast.fake_fail_next(999)
    with pytest.raises(CudaError):
        buf.close()
    assert buf.closed
    buf.close()  # not retried
    # The fake kept the block (the free failed): hand it back so the fixture sees no leak.
    entry = al._fast
    assert entry.free(ptr, STREAM, 0) == 0


def test_deferred_free_failure_is_reported(fast):
    buf = m.empty(8, np.uint8, stream=STREAM)
    ptr = buf.ptr
    del buf
    fast.fake_fail_next(999)
    with pytest.warns(RuntimeWarning, match=r"device allocation \(async, 8 bytes\)"):
        _lifetime.drain()
    assert al._fast.free(ptr, STREAM, 0) == 0


def test_free_from_another_device_goes_through_its_context(fast, monkeypatch):
    buf = m.empty(8, np.uint8, stream=0)  # device 0, legacy stream
    fast.fake_set_current(CTX1, 1)         # another device's context is current
    pushed = []

    class Pushed:
        def __enter__(self):
            pushed.append("enter")
            fast.fake_set_current(CTX0, 0)

        def __exit__(self, *exc):
            pushed.append("exit")
            fast.fake_set_current(CTX1, 1)

    def context_for_free(ptr, device=-1, stream=None):
        assert (device, stream) == (0, 0)
        return Pushed()

    class Bindings:  # the cuda.bindings free, over the fake library
        @staticmethod
        def cuMemFreeAsync(ptr, stream):
            return (fast.cuMemFreeAsync(ctypes.c_uint64(ptr), ctypes.c_void_p(stream)),)

    monkeypatch.setattr(al, "_context_for_free", context_for_free)
    monkeypatch.setattr(al, "driver", lambda: Bindings)
    buf.close()
    assert pushed == ["enter", "exit"] and fast.fake_last_free_device() == 0


def test_pool_allocations_use_the_pool(fast):
    class Pool:  # what _allocate reads of a MemoryPool
        closed = False
        _ptr = 0xB0B0

        @property
        def handle(self):
            if self.closed:
                raise ClosedError("this MemoryPool is closed")
            return self._ptr
    pool = Pool()
    buf = m._new_buffer((4, 4), np.float64, None, pool=pool)
    assert fast.fake_last_pool() == 0xB0B0 and fast.fake_last_stream() == 0
    assert buf.stream is None and buf._alloc.kind == m.ASYNC
    buf.close()
    pool.closed = True
    with pytest.raises(ClosedError):
        m._new_buffer(4, np.float64, 7, pool=pool)


def test_zero_bytes_allocate_nothing(fast, monkeypatch):
    monkeypatch.setattr(al, "_device_of_context", lambda: 0)
    calls = [fast.fake_calls(k) for k in range(5)]
    buf = m.empty((0, 5), np.float32, stream=STREAM)
    assert buf.nbytes == 0 and buf.ptr == 0 and not buf._alloc.owns_handle
    buf.close()
    assert [fast.fake_calls(k) for k in range(5)] == calls


def test_interpreter_exit_frees_live_buffers_once(fake_lib, tmp_path):
    report = tmp_path / "report.txt"
    script = textwrap.dedent(f"""
        import gc
        import numpy as np
        from cupric.runtime import _fastalloc, allocation as al, memory as m
        import ctypes
        lib = ctypes.CDLL({fake_lib.path!r})
        lib.fake_set_current.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.fake_set_current(0xC000, 0)
        al._fast = _fastalloc.Entry(_fastalloc.load(), _fastalloc.libcuda_addresses({fake_lib.path!r}))
        kept = [m.empty(100, np.uint8, stream=0x5000) for _ in range(10)]
        sync = m.empty(100, np.uint8)
        closed = m.empty(100, np.uint8, stream=0x5000)
        closed.close()    # into the allocation cache, still held from the driver
        cycle = [m.empty(100, np.uint8, stream=0x5000)]
        cycle.append(cycle)
        del cycle         # garbage, never collected before exit
        dead = m.empty(100, np.uint8, stream=0x5000)
        del dead          # back into the cache at once
        assert lib.fake_live() == 13 and m.cache_stats().cached_blocks == 1  # cycle reused
    """)
    env = dict(os.environ, FAKE_CUDA_REPORT=str(report),
               PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", script],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    live, bad_frees = map(int, report.read_text().split())
    assert (live, bad_frees) == (0, 0)


# -- layouts ---------------------------------------------------------------------------------


def test_layout_cache_matches_normalization(monkeypatch):
    monkeypatch.setattr(m, "_layouts", {})
    for shape, dtype in [((3, 4), np.float32), (5, "f8"), ((), np.int8), ((2, 0, 3), "c8"),
                         ((7,), np.dtype(">i4")), ((2, 3), [("a", "f4"), ("b", "i2")])]:
        for _ in range(2):  # a miss, then a hit (where cacheable)
            norm, strides, dt, itemsize, size, nbytes, ndim, *_given = m._layout(shape, dtype)
            expected = np.empty(shape, dtype)
            assert norm == expected.shape and strides == m.c_strides(norm, itemsize)
            if size:  # NumPy gives empty arrays zero strides; cupric keeps C strides
                assert strides == expected.strides
            assert dt == expected.dtype and nbytes == expected.nbytes and ndim == expected.ndim
            assert size == expected.size and itemsize == expected.itemsize


def test_layout_cache_refuses_what_normalization_refuses(monkeypatch):
    monkeypatch.setattr(m, "_layouts", {})
    m._layout((2, 3), np.float32)
    with pytest.raises(TypeError):
        m._layout((2.0, 3), np.float32)  # equal to a cached key, still refused
    with pytest.raises(TypeError):
        m._layout(2.0, np.float32)
    assert m._layout([2, 3], np.float32)[0] == (2, 3)  # unhashable: normalized each time
    assert m._layout((np.int64(2), 3), np.float32)[0] == (2, 3)
    with pytest.raises(ValueError):
        m._layout((-1, 3), np.float32)


def test_layout_cache_keeps_dtype_metadata(monkeypatch):
    monkeypatch.setattr(m, "_layouts", {})
    plain = np.dtype("f4")
    tagged = np.dtype("f4", metadata={"unit": "m"})
    assert m._layout((4,), plain)[2].metadata is None
    assert m._layout((4,), tagged)[2].metadata == {"unit": "m"}
    assert m._layout((4,), plain)[2].metadata is None


def test_layout_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(m, "_layouts", {})
    for n in range(m._LAYOUTS_MAX + 10):
        m._layout(n, np.uint8)
    assert len(m._layouts) <= m._LAYOUTS_MAX


# -- TrackedResource -------------------------------------------------------------------------


class Tracked(_lifetime.TrackedResource):
    __slots__ = ()


def _tracked(log, fail=False):
    def release(handle, tag):
        log.append((handle, tag))
        if fail:
            raise CudaError(1, "release failed")
    t = Tracked()
    t._track(0x77, release, ("tag",), ("tracked %s", "thing"))
    return t


def test_tracked_close_releases_once_and_refuses_use():
    log = []
    live = _lifetime.live_count()
    t = _tracked(log)
    assert t.owns_handle and t.handle == 0x77 and _lifetime.live_count() == live + 1
    with t:
        pass
    t.close()
    assert log == [(0x77, "tag")] and t.closed and _lifetime.live_count() == live
    with pytest.raises(ClosedError):
        t.handle
    with pytest.raises(ClosedError):
        with t:
            pass


def test_tracked_death_queues_the_release():
    log = []
    _lifetime.drain()
    t = _tracked(log)
    del t
    assert log == [] and _lifetime.pending_count() == 1
    _lifetime.drain()
    assert log == [(0x77, "tag")]


def test_tracked_failed_release_names_the_object():
    log = []
    t = _tracked(log, fail=True)
    del t
    with pytest.warns(RuntimeWarning, match="deferred release of tracked thing failed"):
        _lifetime.drain()
    t = _tracked(log, fail=True)
    with pytest.raises(CudaError):
        t.close()
    assert t.closed and len(log) == 2


def test_tracked_borrow_never_releases():
    t = Tracked()
    t._init_resource(0x99, None)
    assert not t.owns_handle
    t.close()
    del t
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _lifetime.drain()


def test_libcuda_path_takes_the_library_already_loaded(monkeypatch):
    """With libcuda in the process (cuda.bindings loaded it at cuInit), its soname is the
    answer and cuda.pathfinder is not imported; without it, pathfinder is asked."""
    import ctypes
    import os
    import sys

    from cupric.runtime import launch
    if not hasattr(os, "RTLD_NOLOAD"):
        pytest.skip("RTLD_NOLOAD is Linux's")
    asked = []

    def loaded(name, mode=0):
        asked.append((name, mode))
        return object()
    monkeypatch.setattr(ctypes, "CDLL", loaded)
    monkeypatch.delitem(sys.modules, "cuda.pathfinder", raising=False)
    assert launch._libcuda_path() == "libcuda.so.1"
    assert asked == [("libcuda.so.1", os.RTLD_NOLOAD | os.RTLD_LOCAL)]
    assert "cuda.pathfinder" not in sys.modules

    def absent(name, mode=0):
        raise OSError(f"{name}: not loaded")
    monkeypatch.setattr(ctypes, "CDLL", absent)
    path = launch._libcuda_path()
    assert path  # pathfinder's path, or the soname where pathfinder finds none
