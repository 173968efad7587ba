"""GPU lane: the device checks and the stream ordering of `@cupric.kernel` launches on real
hardware.

One GPU: host arrays are refused before anything runs; the driver's answers about real
pointers and streams are what `pointer_facts` and `needs_wait` assume; a CuPy array
written by a slow kernel on one stream and read by a cupric launch on another comes out
right (and comes out stale when the ordering is switched off: the test sees the race).
A launch being captured into a graph gets no wait and replays right. Two GPUs (skipped
with one): arrays of the other device raise `DeviceMismatchError`, launches follow the
current device, peer access enabled through cupric is accepted.
"""

from __future__ import annotations

import contextlib
import importlib

import numpy as np
import pytest

import cupric
from cupric.device import grid
from cupric.types import Array, f32

pytestmark = pytest.mark.gpu

kmod = importlib.import_module("cupric.compiler.kernel")
aa = importlib.import_module("cupric.runtime.array_adapters")
memory = importlib.import_module("cupric.runtime.memory")

N = 1 << 20


def _copy_py(x: Array[f32, 1], y: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        y[i] = x[i]


def _axpy_py(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        y[i] = a * x[i] + y[i]


@pytest.fixture(scope="module")
def rt():
    from cupric import runtime
    runtime.Device(0).make_current()
    return runtime


@pytest.fixture(scope="module")
def cp(rt):
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def torch(rt):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


@pytest.fixture
def two_gpus(rt):
    if rt.device_count() < 2:
        pytest.skip("one GPU: no array on another device to pass")
    yield rt
    rt.Device(0).make_current()


@pytest.fixture
def waits(monkeypatch):
    """Every event wait the launches issue: (consumer, producer) stream handles."""
    calls = []
    real = memory.order_after

    def spy(consumer, producer):
        calls.append((consumer, producer))
        return real(consumer, producer)

    monkeypatch.setattr(memory, "order_after", spy)
    return calls


_MISSING = object()


@contextlib.contextmanager
def adapters_off(cls):
    """Arrays of `cls` take the general `__cuda_array_interface__` path."""
    saved = aa.ADAPTERS.get(cls, _MISSING)
    aa.ADAPTERS[cls] = None
    try:
        yield
    finally:
        if saved is _MISSING:
            aa.ADAPTERS.pop(cls, None)
        else:
            aa.ADAPTERS[cls] = saved


# -- one GPU -----------------------------------------------------------------------------------

def test_host_arrays_raise_and_nothing_runs(rt, rng):
    kern = cupric.kernel(_copy_py)
    y = rt.to_device(np.full(256, np.nan, np.float32))
    with pytest.raises(TypeError, match="host NumPy array"):
        kern[1, 256](rng.standard_normal(256).astype(np.float32), y)
    pinned = rt.pinned_empty(256, np.float32)
    with pytest.raises(TypeError, match="host NumPy array"):
        kern[1, 256](pinned.array, y)
    rt.synchronize()
    assert np.isnan(y.to_numpy()).all()
    pinned.close()


def test_torch_host_tensor_raises(torch, rt):
    kern = cupric.kernel(_copy_py)
    y = torch.full((256,), float("nan"), device="cuda")
    with pytest.raises(TypeError, match="argument 0"):
        kern[1, 256](torch.ones(256), y)
    torch.cuda.synchronize()
    assert torch.isnan(y).all()


def test_pointer_facts_of_real_memory(rt):
    plain = rt.empty(1024, np.float32)
    stream = rt.Device(0).create_stream()
    pooled = rt.empty(1024, np.float32, stream=stream)
    managed = rt.managed_empty(1024, np.float32)
    pinned = rt.pinned_empty(1024, np.float32)
    host = np.ones(1024, np.float32)
    try:
        assert aa.pointer_facts(plain.ptr) == (aa.MEMORY_DEVICE, 0, False, 0)
        kind, ordinal, is_managed, pool = aa.pointer_facts(pooled.ptr)
        assert (kind, ordinal, is_managed) == (aa.MEMORY_DEVICE, 0, False) and pool != 0
        kind, _, is_managed, _ = aa.pointer_facts(managed.ptr)
        assert is_managed and kind in (aa.MEMORY_DEVICE, aa.MEMORY_UNIFIED)
        assert aa.pointer_facts(pinned.array.ctypes.data)[0] == aa.MEMORY_HOST
        assert aa.pointer_facts(host.ctypes.data) == (0, -1, False, 0)
        for ptr in (plain.ptr, pooled.ptr, managed.ptr, pinned.array.ctypes.data,
                    host.ctypes.data):
            assert aa.device_problem(ptr, None, 0) is None
        # Device 0's memory seen from a (pretended) device 1: refused, except managed.
        assert aa.device_problem(plain.ptr, None, 1) == 0
        assert aa.device_problem(managed.ptr, None, 1) is None
    finally:
        pooled.close(stream=stream)
        stream.synchronize()
        for buf in (plain, managed, pinned):
            buf.close()
        stream.close()


def test_stream_flags_and_implied_ordering(rt):
    blocking = rt.Device(0).create_stream()
    free = rt.Device(0).create_stream(non_blocking=True)
    try:
        assert aa.stream_flags(blocking.handle) & 1 == 0
        assert aa.stream_flags(free.handle) & 1 == 1
        assert not aa.needs_wait(0, int(blocking.handle))
        assert not aa.needs_wait(int(blocking.handle), 1)
        assert aa.needs_wait(0, int(free.handle))
        assert aa.needs_wait(int(free.handle), int(blocking.handle))
    finally:
        blocking.close()
        free.close()


DELAYED_FILL = r"""
extern "C" __global__ void delayed_fill(float* x, float value, int n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = value;
}
"""


@pytest.fixture(scope="module")
def delayed_fill(cp):
    return cp.RawKernel(DELAYED_FILL, "delayed_fill")


def _produce(cp, fill, producer, value):
    """On CuPy stream `producer`: x = 0, then (about 20 ms later) x = value."""
    with producer:
        x = cp.zeros(N, cp.float32)
        fill((1,), (1024,), (x, cp.float32(value), cp.int32(N), cp.int64(40_000_000)))
    return x


SCENARIOS = [
    # (CuPy's stream, the launch stream, whether an event wait is expected)
    ("non-blocking", "cupric non-blocking", True),    # the race the old code left open
    ("non-blocking", "legacy", True),
    ("null", "cupric non-blocking", True),
    ("blocking", "legacy", False),                    # CUDA orders these by itself
    ("null", "cupric blocking", False),
]


@pytest.mark.parametrize("path", ["fast", "interface"])
@pytest.mark.parametrize("producer_kind,launch_kind,expect_wait", SCENARIOS)
def test_cupy_producer_stream_orders_the_launch(cp, rt, delayed_fill, waits, path,
                                                producer_kind, launch_kind, expect_wait):
    producer = {"non-blocking": lambda: cp.cuda.Stream(non_blocking=True),
                "blocking": lambda: cp.cuda.Stream(),
                "null": lambda: cp.cuda.Stream.null}[producer_kind]()
    launch = {"cupric non-blocking": lambda: rt.Device(0).create_stream(non_blocking=True),
              "cupric blocking": lambda: rt.Device(0).create_stream(),
              "legacy": lambda: None}[launch_kind]()
    kern = cupric.kernel(_copy_py)
    off = adapters_off(cp.ndarray) if path == "interface" else contextlib.nullcontext()
    with off:
        for _ in range(2):  # compiled, and (CuPy path) the generated launcher made
            kern[N // 256, 256, launch, 0](cp.ones(N, cp.float32), cp.ones(N, cp.float32))
        rt.synchronize()
        assert (kern._fast is not None) == (path == "fast")
        value = float(np.random.default_rng().integers(2, 1000))
        y = cp.full(N, cp.nan, cp.float32)
        cp.cuda.Device().synchronize()   # y ready
        x = _produce(cp, delayed_fill, producer, value)   # x's value lands ~20 ms later
        waits.clear()
        with producer:                    # CuPy's current stream names the producer
            kern[N // 256, 256, launch, 0](x, y)
        rt.synchronize()
        cp.cuda.Device().synchronize()
    assert bool((y == value).all()), f"stale values: {cp.unique(y)[:4]}"
    handle = 0 if launch is None else int(launch.handle)
    if expect_wait:
        assert waits == [(handle, producer.ptr or 1)]
    else:
        assert waits == []
    if launch is not None:
        launch.close()


def test_the_race_is_visible_without_the_wait(cp, rt, delayed_fill, monkeypatch):
    """The same launch with the ordering switched off reads x before the slow fill: the
    test above would see a missing wait."""
    kern = cupric.kernel(_copy_py)
    launch = rt.Device(0).create_stream(non_blocking=True)
    producer = cp.cuda.Stream(non_blocking=True)
    for _ in range(2):
        kern[N // 256, 256, launch, 0](cp.ones(N, cp.float32), cp.ones(N, cp.float32))
    rt.synchronize()
    y = cp.full(N, cp.nan, cp.float32)
    cp.cuda.Device().synchronize()
    x = _produce(cp, delayed_fill, producer, 7.0)
    monkeypatch.setattr(aa, "order_launch_after", lambda consumer, producers: None)
    with producer:
        kern[N // 256, 256, launch, 0](x, y)
    rt.synchronize()
    cp.cuda.Device().synchronize()
    assert not bool((y == 7.0).all())
    launch.close()


def test_capture_gets_no_wait_and_replays_right(cp, rt, waits, rng):
    """A launch captured into a graph with a CuPy array of another stream: no event wait
    (illegal during capture), the capture stays valid, and the replay reads x."""
    kern = cupric.kernel(_copy_py)
    stream = rt.Device(0).create_stream(non_blocking=True)
    producer = cp.cuda.Stream(non_blocking=True)
    host = rng.standard_normal(N).astype(np.float32)
    with producer:
        x = cp.asarray(host)
    y = cp.full(N, cp.nan, cp.float32)
    for _ in range(2):                              # compiled, launcher generated
        kern[N // 256, 256, stream, 0](x, y)
    stream.synchronize()
    cp.cuda.Device().synchronize()
    # Releases deferred from earlier tests' garbage (modules, memory) must not land inside
    # the global-mode capture, where a module unload invalidates it: run them now.
    import gc
    gc.collect()
    from cupric.runtime import _lifetime
    _lifetime.drain()
    waits.clear()
    with producer:
        with stream.capture() as capture:
            kern[N // 256, 256, stream, 0](x, y)
    assert waits == []
    graph = capture.graph.instantiate()
    y.fill(cp.nan)
    cp.cuda.Device().synchronize()
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(y), host)
    graph.close()
    capture.graph.close()
    stream.close()


# -- two GPUs ----------------------------------------------------------------------------------

def test_device_buffer_of_another_device_raises(two_gpus, rng):
    rt = two_gpus
    kern = cupric.kernel(_axpy_py)
    host = rng.standard_normal(1000).astype(np.float32)
    with rt.Device(1).primary_context():
        x1 = rt.to_device(host)
    x0 = rt.to_device(host)
    y0 = rt.to_device(np.zeros(1000, np.float32))
    for _ in range(2):   # the general path, then the generated launcher's deferral
        with pytest.raises(rt.DeviceMismatchError,
                           match=r"argument 1 \(x\) lives on device 1, but the launch runs "
                                 r"on device 0") as info:
            kern[4, 256](np.float32(1), x1, y0)
        assert (info.value.device, info.value.expected) == (1, 0)
        kern[4, 256](np.float32(1), x0, y0)   # the right device: launched
    assert kern._fast is not None
    rt.synchronize()
    np.testing.assert_allclose(y0.to_numpy(), 2 * host, rtol=1e-6)  # refused ones: no-ops


def test_launches_follow_the_current_device(two_gpus, rng):
    rt = two_gpus
    kern = cupric.kernel(_axpy_py)
    hx = rng.standard_normal(1000).astype(np.float32)
    hy = rng.standard_normal(1000).astype(np.float32)
    x0, y0 = rt.to_device(hx), rt.to_device(hy)
    kern[4, 256](np.float32(2), x0, y0)
    kern[4, 256](np.float32(2), x0, y0)      # the generated launcher, device 0
    with rt.Device(1).primary_context():
        x1, y1 = rt.to_device(hx), rt.to_device(hy)
        kern[4, 256](np.float32(3), x1, y1)  # device 1: its own module
        with pytest.raises(rt.DeviceMismatchError, match="lives on device 0"):
            kern[4, 256](np.float32(3), x0, y1)
        rt.synchronize()
        # The kernel's multiply-add is fused (one rounding), NumPy's is not.
        np.testing.assert_allclose(y1.to_numpy(), 3 * hx + hy, rtol=1e-5, atol=1e-6)
    rt.synchronize()
    np.testing.assert_allclose(y0.to_numpy(), 4 * hx + hy, rtol=1e-5, atol=1e-6)


def test_cupy_and_torch_arrays_of_another_device_raise(two_gpus):
    rt = two_gpus
    kern = cupric.kernel(_axpy_py)
    cp = pytest.importorskip("cupy")
    with cp.cuda.Device(1):
        x = cp.ones(1000, cp.float32)
    y = cp.zeros(1000, cp.float32)
    for _ in range(3):
        with pytest.raises(rt.DeviceMismatchError, match=r"argument 1 \(x\)"):
            kern[4, 256](np.float32(1), x, y)
        kern[4, 256](np.float32(1), y, cp.zeros(1000, cp.float32))
    torch = pytest.importorskip("torch")
    t = torch.ones(1000, device="cuda:1")
    with pytest.raises(rt.DeviceMismatchError, match=r"argument 2 \(y\) lives on device 1"):
        kern[4, 256](np.float32(1), torch.ones(1000, device="cuda:0"), t)


def test_peer_access_enabled_through_cupric_is_accepted(two_gpus, rng):
    rt = two_gpus
    if not rt.can_access_peer(0, 1):
        pytest.skip("devices 0 and 1 cannot access each other")
    kern = cupric.kernel(_axpy_py)
    hx = rng.standard_normal(1000).astype(np.float32)
    with rt.Device(1).primary_context():
        x1 = rt.to_device(hx)                 # cuMemAlloc memory: peer access covers it
    y0 = rt.to_device(np.zeros(1000, np.float32))
    rt.enable_peer_access(1, device=0)
    try:
        kern[4, 256](np.float32(2), x1, y0)
        rt.synchronize()
        np.testing.assert_allclose(y0.to_numpy(), 2 * hx, rtol=1e-6)
    finally:
        rt.disable_peer_access(1, device=0)
    with pytest.raises(rt.DeviceMismatchError):
        kern[4, 256](np.float32(2), x1, y0)
