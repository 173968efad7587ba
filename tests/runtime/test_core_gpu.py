"""GPU lane: the runtime core against a real driver and device.

Kernels are CUDA C compiled to cubin with NVRTC (the project's own compiler is tested
elsewhere); device memory is allocated with the raw driver API so that these tests do not
depend on cupric.runtime.memory. Results are checked against NumPy with fresh random
inputs and poisoned outputs.
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

KERNELS = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
struct Params { int a; float b; double c; char d; };
extern "C" __global__ void by_value(Params p, double* out) {
    out[0] = p.a; out[1] = p.b; out[2] = p.c; out[3] = p.d;
}
extern "C" __global__ void all_types(signed char a, short b, int c, long long d,
                                     unsigned char e, unsigned short f, unsigned int g,
                                     unsigned long long h, float i, double j, double* out) {
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f;
    out[6] = g; out[7] = (double)h; out[8] = i; out[9] = j;
}
extern "C" __global__ void dyn_shared(float* out, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x;
    for (int i = t; i < n; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    if (t == 0) { float s = 0; for (int i = 0; i < n; ++i) s += buf[i]; out[0] = s; }
}
__device__ int counter;
__constant__ float scale[4];
extern "C" __global__ void use_globals(float* out) {
    int i = threadIdx.x;
    out[i] = scale[i % 4] * (float)i;
    atomicAdd(&counter, 1);
}
extern "C" __global__ void block_ids(int* out) {
    out[blockIdx.x + gridDim.x * blockIdx.y] = blockIdx.x + 1000 * blockIdx.y;
}
extern "C" __global__ void fault(int* p) { *(volatile int*)((char*)0 + 16) = 1; }
"""


def _nvrtc_cubin(source: str, arch: str) -> bytes:
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernels.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.decode())
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


@pytest.fixture(scope="module")
def rt():
    import cupric.runtime as rt
    return rt


@pytest.fixture(scope="module")
def dev(rt):
    return rt.Device(0)


@pytest.fixture(scope="module")
def cubin(dev):
    return _nvrtc_cubin(KERNELS, dev.arch)


@pytest.fixture(scope="module")
def mod(rt, dev, cubin):
    return rt.Module.from_data(cubin, device=dev)


class Mem:
    """Device memory through the raw driver (independent of cupric.runtime.memory)."""

    def __init__(self, nbytes: int):
        from cupric.runtime._driver import check, driver
        self._d, self._check = driver(), check
        self.nbytes = nbytes
        self.ptr = int(check(self._d.cuMemAlloc(nbytes)))

    @classmethod
    def from_array(cls, a):
        m = cls(a.nbytes)
        m._check(m._d.cuMemcpyHtoD(m.ptr, np.ascontiguousarray(a), a.nbytes))
        return m

    def get(self, dtype, count):
        out = np.empty(count, dtype)
        self._check(self._d.cuMemcpyDtoH(out, self.ptr, out.nbytes))
        return out

    def free(self):
        self._check(self._d.cuMemFree(self.ptr))


# -- devices and contexts ----------------------------------------------------------------

def test_device_facts(rt, dev):
    assert rt.Device.count() >= 1 and rt.Device(0) is dev
    assert isinstance(dev.name, str) and dev.name
    assert dev.uuid.startswith("GPU-") and len(dev.uuid) == 40
    assert dev.total_memory > 1 << 30
    major, minor = dev.compute_capability
    assert major >= 7 and dev.arch == f"sm_{major}{minor}"
    assert dev.multiprocessor_count > 0
    assert dev.max_threads_per_block == dev.attribute("MAX_THREADS_PER_BLOCK") == 1024
    assert dev.attribute("warp_size") == 32
    assert dev.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE") == dev.l2_cache_size > 0
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    assert len(rt.devices()) == rt.Device.count()
    with pytest.raises(rt.NoDeviceError):
        rt.Device(rt.Device.count())
    with pytest.raises(ValueError):
        dev.attribute("no_such_attribute")
    assert "max_grid_dim_x" in dev.attributes()


def test_primary_context_is_shared_with_the_runtime_api(rt, dev):
    from cuda.bindings import runtime as cudart
    from cupric.runtime._driver import check, driver
    ctx = dev.primary_context()
    assert dev.primary_context() is ctx
    seen = {}

    def worker():
        # A fresh thread: the Runtime API initializes the device's primary context, and
        # cupric must see exactly that one.
        (err,) = cudart.cudaFree(0)
        assert int(err) == 0
        seen["runtime"] = int(check(driver().cuCtxGetCurrent()))
        ctx.make_current()
        seen["cupric"] = int(check(driver().cuCtxGetCurrent()))
        seen["device"] = rt.current_device()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["runtime"] == seen["cupric"] == ctx.ptr
    assert seen["device"] is dev


def test_context_limits_and_flags(rt, dev):
    ctx = dev.primary_context()
    old = ctx.printf_fifo_size
    ctx.printf_fifo_size = 2 << 20
    assert ctx.printf_fifo_size >= 2 << 20
    ctx.printf_fifo_size = old
    assert ctx.stack_size > 0 and ctx.malloc_heap_size > 0
    assert ctx.cache_config in ("none", "shared", "l1", "equal")
    assert isinstance(ctx.flags, rt.ContextFlags)
    assert ctx.is_active and ctx.api_version >= 3020
    ctx.synchronize()
    rt.synchronize()
    with pytest.raises(ValueError):
        ctx.set_limit("bogus", 1)


# -- modules and functions ------------------------------------------------------------------

def test_module_functions_and_attributes(rt, mod, dev):
    axpy = mod.get_function("axpy")
    assert mod.get_function("axpy") is axpy and mod["axpy"] is axpy
    assert axpy.num_regs > 0
    assert 0 < axpy.max_threads_per_block <= 1024
    assert axpy.shared_size_bytes == 0 and axpy.ptx_version > 0 and axpy.binary_version > 0
    assert axpy.max_active_blocks_per_sm(256) > 0
    grid, block = axpy.suggested_launch_config()
    assert grid > 0 and 0 < block <= 1024
    with pytest.raises(rt.NotFoundError, match="no kernel named 'nope'"):
        mod.get_function("nope")


def test_module_from_file(rt, cubin, tmp_path):
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    with rt.Module.from_file(path) as m:
        assert m.kind == "cubin" and m.get_function("axpy").name == "axpy"
    assert m.closed
    with pytest.raises(rt.ClosedError):
        m.get_function("by_value")


PTX_OK = """.version 7.8
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 p, .param .u32 v)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [v];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
"""


def test_ptx_jit_with_logs(rt):
    m = rt.Module.from_data(PTX_OK, rt.JitOptions(verbose_log=True, optimization_level=3))
    assert isinstance(m.info_log, str)
    out = Mem(4)
    try:
        m.get_function("fill").launch(1, 1, out, np.uint32(1234))
        rt.synchronize()
        assert out.get(np.uint32, 1)[0] == 1234
    finally:
        out.free()
    with pytest.raises(rt.ModuleLoadError) as info:
        rt.Module.from_data(PTX_OK.replace("ret;", "bogus_instruction;"))
    assert "bogus_instruction" in info.value.log and "bogus_instruction" in str(info.value)


def test_linker_cubin_loads(rt, dev):
    from cupric.runtime import linker
    if not linker.is_available():
        pytest.skip("nvJitLink not installed")
    cubin = linker.link([PTX_OK], arch=dev.arch)
    m = rt.Module.from_data(cubin)
    assert m.kind == "cubin" and m.get_function("fill")


def test_module_globals(rt, mod, rng):
    scale = rng.random(4).astype(np.float32)
    mod.write_global("scale", scale)
    mod.write_global("counter", np.int32(0))
    assert np.array_equal(mod.read_global("scale", np.float32), scale)
    ptr, size = mod.get_global("counter")
    assert ptr and size == 4
    out = Mem(64 * 4)
    try:
        mod.get_function("use_globals").launch(1, 64, out)
        rt.synchronize()
        expect = scale[np.arange(64) % 4] * np.arange(64, dtype=np.float32)
        np.testing.assert_allclose(out.get(np.float32, 64), expect, rtol=1e-6)
        assert mod.read_global("counter", np.int32)[0] == 64
    finally:
        out.free()
    with pytest.raises(rt.NotFoundError):
        mod.get_global("missing")
    with pytest.raises(ValueError, match="16 bytes"):
        mod.write_global("scale", np.zeros(5, np.float32))


# -- launching ------------------------------------------------------------------------------

def test_prepared_launch_matches_numpy(rt, mod, rng):
    n = 10_000
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    dx, dy = Mem.from_array(x), Mem.from_array(y)
    try:
        p = mod.get_function("axpy").prepare(["ptr", "ptr", "f32", "i32"])
        a = float(rng.random())
        s = rt.Device(0).create_stream()
        p.launch((n + 255) // 256, 256, s, 0, dx.ptr, dy.ptr, a, n)
        p.launch((n + 255) // 256, (256, 1, 1), s, 0, dx.ptr, dy.ptr, np.float32(a), np.int32(n))
        s.synchronize()
        expect = np.float32(a) * x + (np.float32(a) * x + y)
        np.testing.assert_allclose(dy.get(np.float32, n), expect, rtol=1e-5)
    finally:
        dx.free(), dy.free()


@pytest.mark.parametrize("backend", ["c", "bindings", "cffi", "api", "ctypes"])
def test_every_launch_backend(rt, mod, rng, backend, monkeypatch):
    """cupric's backends, and the benchmark's comparison ones ("api", "ctypes")."""
    from cupric.runtime.launch import build_launcher, launch_backends
    if backend == "c" and not build_launcher():
        pytest.skip(f"launch extension unavailable: {launch_backends()['c_error']}")
    n = 3000
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    dx, dy = Mem.from_array(x), Mem.from_array(y)
    try:
        types = ["ptr", "ptr", "f32", "i32"]
        if backend in ("api", "ctypes"):
            import pathlib
            monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parents[2] / "benchmarks"))
            pytest.importorskip("setuptools")
            import _launch_backends
            p = _launch_backends.comparison_prepared(mod.get_function("axpy"), types, backend)
        else:
            p = mod.get_function("axpy").prepare(types, backend=backend)
        assert p.backend == backend
        s = rt.Device(0).create_stream()
        p.launch((n + 127) // 128, 128, s, 0, dx.ptr, dy.ptr, 0.5, n)
        p(((n + 127) // 128, 1), (128, 1, 1), s.ptr, 0, dx.ptr, dy.ptr, 0.25, n)
        s.synchronize()
        np.testing.assert_allclose(dy.get(np.float32, n), 0.75 * x + y, rtol=1e-5)
        with pytest.raises(rt.LaunchError, match="exceeds its maximum"):
            p.launch(1, 2048, s, 0, dx.ptr, dy.ptr, 0.5, n)
        with pytest.raises(rt.KernelArgumentError, match="host NumPy array"):
            p.launch(1, 32, s, 0, x, dy.ptr, 0.5, n)
        s.close()
        with pytest.raises(rt.ClosedError):
            p.launch(1, 32, s, 0, dx.ptr, dy.ptr, 0.5, n)

        # A fresh thread has no current context: the launch makes it current and retries.
        errors = []

        def fresh():
            try:
                p.launch((n + 127) // 128, 128, None, 0, dx.ptr, dy.ptr, 1.0, n)
            except BaseException as exc:  # re-raised by the assertion below
                errors.append(exc)

        t = threading.Thread(target=fresh)
        t.start()
        t.join()
        assert not errors, errors
        rt.synchronize()
        np.testing.assert_allclose(dy.get(np.float32, n), 1.75 * x + y, rtol=1e-5)
    finally:
        dx.free(), dy.free()


def test_general_launch_infers_types(rt, mod, rng):
    n = 1000
    x = rng.random(n, dtype=np.float32)
    dx, dy = Mem.from_array(x), Mem.from_array(np.zeros(n, np.float32))
    try:
        f = mod.get_function("axpy")
        f.launch(4, 256, dx, dy, np.float32(3.0), np.int32(n))
        f(rt.LaunchConfig(4, 256), dx, dy, np.float32(1.0), np.int32(n))
        rt.synchronize()
        y = dy.get(np.float32, n)
        np.testing.assert_allclose(y, 4 * x, rtol=1e-6)
        with pytest.raises(rt.KernelArgumentError, match="host NumPy array"):
            f.launch(4, 256, x, dy, np.float32(1.0), np.int32(n))
    finally:
        dx.free(), dy.free()


def test_every_scalar_type_reaches_the_kernel(rt, mod):
    out = Mem(10 * 8)
    try:
        f = mod.get_function("all_types")
        vals = [np.int8(-5), np.int16(-300), np.int32(-70000), np.int64(-(1 << 40)),
                np.uint8(250), np.uint16(65000), np.uint32(4_000_000_000),
                np.uint64(1 << 50), np.float32(1.5), np.float64(-2.25)]
        f.launch(1, 1, *vals, out)
        rt.synchronize()
        np.testing.assert_array_equal(out.get(np.float64, 10), [float(v) for v in vals])
    finally:
        out.free()


def test_struct_by_value(rt, mod):
    dt = np.dtype([("a", np.int32), ("b", np.float32), ("c", np.float64), ("d", np.int8)],
                  align=True)
    value = np.array([(7, 2.5, -1.25, 9)], dt)[0]
    out = Mem(4 * 8)
    try:
        mod.get_function("by_value").launch(1, 1, value, out)
        p = mod.get_function("by_value").prepare([("bytes", dt.itemsize, dt.alignment), "ptr"])
        p.launch(1, 1, None, 0, value.tobytes(), out.ptr)
        rt.synchronize()
        np.testing.assert_array_equal(out.get(np.float64, 4), [7, 2.5, -1.25, 9])
    finally:
        out.free()


def test_launch_validation(rt, mod, dev):
    f = mod.get_function("dyn_shared")
    out = Mem(4)
    try:
        with pytest.raises(rt.LaunchError, match="exceeds its maximum"):
            f.launch(1, 2048, out, np.int32(4))
        with pytest.raises(rt.LaunchError, match="grid.y"):
            f.launch((1, 1 << 20), 32, out, np.int32(4))
        big = 64 * 1024
        with pytest.raises(rt.LaunchError, match="max_dynamic_shared_size_bytes"):
            f.launch(1, 128, out, np.int32(big // 4), shared_bytes=big)
        p = f.prepare(["ptr", "i32"])
        with pytest.raises(rt.LaunchError, match="max_dynamic_shared_size_bytes"):
            p.launch(1, 128, None, big, out.ptr, big // 4)   # refused by the driver, explained
        f.max_dynamic_shared_size_bytes = big
        assert f.max_dynamic_shared_size_bytes == big
        f.launch(1, 128, out, np.int32(big // 4), shared_bytes=big)
        rt.synchronize()
        n = big // 4
        assert out.get(np.float32, 1)[0] == pytest.approx(n * (n - 1) / 2, rel=1e-3)
    finally:
        out.free()


def test_cooperative_and_cluster_launch(rt, mod, dev):
    f = mod.get_function("block_ids")
    out = Mem(8 * 4)
    try:
        f.launch(8, 32, out, cooperative=True)
        rt.synchronize()
        np.testing.assert_array_equal(out.get(np.int32, 8), np.arange(8))
        if dev.compute_capability[0] < 9:
            pytest.skip("thread-block clusters need sm_90")
        f.launch((4, 2), 32, out, cluster=(2, 1, 1))
        rt.synchronize()
        got = out.get(np.int32, 8)
        np.testing.assert_array_equal(got, [x + 1000 * y for y in range(2) for x in range(4)])
        with pytest.raises(rt.LaunchError, match="multiple"):
            f.launch((3, 1), 32, out, cluster=(2, 1, 1))
    finally:
        out.free()


def test_launch_from_many_threads(rt, mod, rng):
    n = 4096
    p = mod.get_function("axpy").prepare(["ptr", "ptr", "f32", "i32"])
    xs = [rng.random(n, dtype=np.float32) for _ in range(8)]
    bufs = [(Mem.from_array(x), Mem.from_array(np.zeros(n, np.float32))) for x in xs]
    errors = []

    def work(i):
        try:
            s = rt.Device(0).create_stream(non_blocking=True)
            dx, dy = bufs[i]
            for _ in range(50):
                p.launch(n // 256, 256, s, 0, dx.ptr, dy.ptr, float(i + 1), n)
            s.synchronize()
            s.close()
        except BaseException as exc:  # collected and re-raised by the test below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (dx, dy) in enumerate(bufs):
        np.testing.assert_allclose(dy.get(np.float32, n), 50 * (i + 1) * xs[i], rtol=1e-4)
        dx.free(), dy.free()


# -- streams, events, callbacks, graphs ------------------------------------------------------

def test_streams_and_events(rt, dev, mod):
    low, high = dev.stream_priority_range
    s1 = dev.create_stream(priority=high)
    s2 = dev.create_stream(non_blocking=True)
    assert s1.priority == high and s2.non_blocking and not s1.non_blocking
    start = s1.record()
    out = Mem(4 * 256)
    try:
        f = mod.get_function("dyn_shared")
        for _ in range(10):
            f.launch(1, 256, out, np.int32(256), shared_bytes=1024, stream=s1)
        end = s1.record()
        s2.wait_event(end)
        s2.synchronize()
        assert end.query() and s1.query()
        ms = start.elapsed_time(end)
        assert 0 < ms < 1000
        notiming = dev.create_event(timing=False)
        notiming.record(s1)
        notiming.synchronize()
        with pytest.raises(ValueError):
            start.elapsed_time(notiming)
        s2.wait(s1)
    finally:
        out.free()
    s1.close(), s2.close()
    with pytest.raises(rt.ClosedError):
        s1.synchronize()
    assert dev.default_stream().ptr == 0 and dev.per_thread_stream().ptr == 2
    dev.default_stream().synchronize()
    assert s1.__cuda_stream__()[1] == s1.ptr


def test_borrowed_stream_is_not_destroyed(rt, dev):
    from cupric.runtime._driver import check, driver
    d = driver()
    dev.make_current()
    raw = check(d.cuStreamCreate(0))
    borrowed = rt.Stream.from_handle(int(raw))
    assert not borrowed.owns_handle
    borrowed.synchronize()
    borrowed.close()
    del borrowed
    gc.collect()
    check(d.cuStreamSynchronize(raw))   # still valid: cupric did not destroy it
    check(d.cuStreamDestroy(raw))


def test_host_callbacks_run_in_order_and_report_errors(rt, dev):
    s = dev.create_stream()
    seen = []
    s.launch_host_func(seen.append, 1)
    s.launch_host_func(lambda: seen.append(2))
    s.synchronize()
    assert seen == [1, 2]

    def boom():
        raise ZeroDivisionError("in callback")

    s.launch_host_func(boom)
    s.launch_host_func(seen.append, 3)
    with pytest.raises(rt.HostCallbackError, match="ZeroDivisionError") as info:
        s.synchronize()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert seen == [1, 2, 3]
    s.synchronize()  # reported once
    from cupric.runtime import stream as stream_mod
    assert not stream_mod._callbacks  # nothing kept alive after running


def test_graph_capture_replay_update(rt, dev, mod, rng):
    n = 2048
    x = rng.random(n, dtype=np.float32)
    dx, dy = Mem.from_array(x), Mem.from_array(np.zeros(n, np.float32))
    s = dev.create_stream()
    p = mod.get_function("axpy").prepare(["ptr", "ptr", "f32", "i32"])
    try:
        with s.capture() as cap:
            p.launch(n // 256, 256, s, 0, dx.ptr, dy.ptr, 1.0, n)
            p.launch(n // 256, 256, s, 0, dx.ptr, dy.ptr, 2.0, n)
        graph = cap.graph
        assert graph.node_count == 2 and not s.is_capturing
        exe = graph.instantiate(upload_stream=s)
        for _ in range(3):
            exe.launch(s)
        s.synchronize()
        np.testing.assert_allclose(dy.get(np.float32, n), 9 * x, rtol=1e-5)
        with s.capture() as cap2:
            p.launch(n // 256, 256, s, 0, dx.ptr, dy.ptr, 10.0, n)
            p.launch(n // 256, 256, s, 0, dx.ptr, dy.ptr, 20.0, n)
        exe.update(cap2.graph)
        exe.launch(s)
        s.synchronize()
        np.testing.assert_allclose(dy.get(np.float32, n), 39 * x, rtol=1e-5)
        with s.capture() as cap3:
            p.launch(n // 256, 256, s, 0, dx.ptr, dy.ptr, 1.0, n)
        with pytest.raises(rt.GraphUpdateError) as info:
            exe.update(cap3.graph)
        assert "TOPOLOGY" in info.value.result, info.value.result
        with pytest.raises(ZeroDivisionError):
            with s.capture():
                p.launch(1, 32, s, 0, dx.ptr, dy.ptr, 1.0, 0)
                1 / 0
        assert not s.is_capturing
        exe.close(), graph.close(), cap2.graph.close(), cap3.graph.close()
    finally:
        s.synchronize()
        dx.free(), dy.free()


def test_finalizers_release_through_the_queue(rt, dev):
    from cupric.runtime import _lifetime
    objects = [dev.create_stream() for _ in range(20)] + [dev.create_event() for _ in range(20)]
    del objects
    gc.collect()
    assert _lifetime.pending_count() >= 40
    dev.mem_get_info()  # any checked driver call drains
    assert _lifetime.pending_count() == 0


FAULT_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path[:0] = {paths!r}
    from test_core_gpu import KERNELS, _nvrtc_cubin
    import cupric.runtime as rt
    dev = rt.Device(0)
    mod = rt.Module.from_data(_nvrtc_cubin(KERNELS, dev.arch))
    mod.get_function("fault").launch(1, 1, np.uint64(0))
    try:
        dev.synchronize()
    except rt.IllegalAddressError as e:
        print("FIRST", type(e).__name__, e.code)
    try:
        dev.synchronize()
    except rt.ContextLostError as e:
        print("LATER", type(e).__name__, type(e.original).__name__, e)
    try:
        dev.create_stream()
        print("STREAM created")
    except rt.CudaError as e:
        print("STREAM", type(e).__name__)
""")


def test_fault_is_reported_then_context_lost(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    script = FAULT_SCRIPT.format(paths=[here, root])
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    out = proc.stdout
    assert "FIRST IllegalAddressError 700" in out, out + proc.stderr
    assert "LATER ContextLostError IllegalAddressError" in out, out + proc.stderr
    assert "ILLEGAL_ADDRESS" in out


def test_out_of_memory_says_how_much(rt, dev):
    from cupric.runtime._driver import check, driver
    dev.make_current()
    huge = 1 << 50
    with pytest.raises(rt.CudaOutOfMemoryError) as info:
        check(driver().cuMemAlloc(huge), requested=huge)
    text = str(info.value)
    assert "tried to allocate 1048576.00 GiB" in text and "free on the device" in text
    assert info.value.free is not None and info.value.total == dev.mem_get_info()[1]


def test_torch_tensors_and_streams_interoperate(rt, mod, rng):
    torch = pytest.importorskip("torch")
    n = 5000
    x = torch.from_numpy(rng.random(n, dtype=np.float32)).cuda()
    y = torch.from_numpy(rng.random(n, dtype=np.float32)).cuda()
    expect = (2.0 * x + y).cpu().numpy()
    torch_stream = torch.cuda.Stream()
    borrowed = rt.Stream.from_handle(torch_stream)
    assert borrowed.ptr == torch_stream.cuda_stream and not borrowed.owns_handle
    torch.cuda.synchronize()
    mod.get_function("axpy").launch((n + 255) // 256, 256, x, y, np.float32(2.0),
                                    np.int32(n), stream=borrowed)
    torch_stream.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), expect, rtol=1e-6)
    borrowed.close()
    torch_stream.synchronize()  # still alive: the borrow never destroyed it
