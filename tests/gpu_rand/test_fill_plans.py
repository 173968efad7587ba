"""Fill plans (`cupric.gpu_rand.plans`): repeated device fills skip the general path.

CPU lane: a stand-in GPU. Device memory is host memory behind real DeviceBuffers (over
fake allocation records); the CUDA backend's general launch and a plan's launch handle
both run the fill kernels on the simulator over NumPy views of the pointers they are
given, so a plan's flattened ABI values are exercised, and compared bit for bit with the
general path's results and with the host half. Every fill a plan refuses must take the
general path, with its values and errors. GPU lane: real fills through the plans against
the general path and the host half, for DeviceBuffers, PyTorch tensors and CuPy arrays.
"""

from __future__ import annotations

import ctypes
import types

import numpy as np
import pytest

from cupric import simulator
from cupric.gpu_rand import Generator, plans
from cupric.gpu_rand.backends import CudaBackend, SimulatorBackend
from cupric.runtime import array_adapters as aa
from cupric.runtime import intake
from cupric.runtime.errors import ClosedError
from cupric.runtime.memory import DeviceBuffer, borrow_validated
from cupric.runtime.stream import Stream

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _view(ptr, shape, strides, dtype):
    """The NumPy array over `ptr` (host memory standing in for device memory)."""
    if not shape or 0 in shape:
        return np.empty(shape, dtype)
    span = sum((n - 1) * s for n, s in zip(shape, strides)) + np.dtype(dtype).itemsize
    raw = (ctypes.c_char * span).from_address(ptr)
    return np.ndarray(shape, dtype, buffer=raw, strides=strides)


def fake_allocation(device):
    """A borrow's allocation record (frees nothing) on `device`: buffers over it answer
    every public name as real ones do."""
    record = borrow_validated(0, (0,), (1,), F32, False, None, None).allocation
    record.device = device
    return record


class FakeGpu:
    """Device memory in host memory, kernels on the simulator, plans allowed."""

    def __init__(self):
        self.memory = []      # the host arrays behind the buffers (kept alive)
        self.general = []     # kinds launched by the CUDA backend's general path
        self.planned = []     # (grid, block, stream, shared, values) of plan launches

    def buffer(self, host, alloc=None):
        host = np.ascontiguousarray(host)
        self.memory.append(host)
        alloc = alloc or fake_allocation(0)
        return DeviceBuffer.view_of(alloc, host.ctypes.data, host.shape, host.strides,
                                  host.dtype, False, None)

    def empty(self, n, dtype, align=16):
        """A 1-D buffer of `n` poisoned items starting `align` bytes past a 64-byte
        boundary (16: aligned; 4: not)."""
        dtype = np.dtype(dtype)
        raw = np.full(n * dtype.itemsize + 128, 0xFF, np.uint8)
        start = (-raw.ctypes.data) % 64 + (align % 64)
        host = raw[start:start + n * dtype.itemsize].view(dtype)
        self.memory.append(raw)
        alloc = fake_allocation(0)
        return DeviceBuffer.view_of(alloc, host.ctypes.data, (n,), (dtype.itemsize,), dtype,
                                  False, None)

    @staticmethod
    def host(buf):
        return _view(buf.ptr, buf.shape, buf.strides, buf.dtype)

    def install(self, monkeypatch):
        gpu = self

        def launch(backend, kind, algorithm, n_threads, args):
            gpu.general.append(kind)
            for a in args:  # the kernel launch's own liveness checks
                if isinstance(a, DeviceBuffer):
                    intake.check_open(a)
            intake.stream_handle(backend.stream)  # a closed Stream: ClosedError
            arrays = tuple(gpu.host(a) if isinstance(a, DeviceBuffer) else a for a in args)
            SimulatorBackend().launch(kind, algorithm, n_threads, arrays)

        def handle(kern, args):
            states_dtype, out_dtype = args[0].dtype, args[1].dtype

            def planned(grid, block, stream, shared, sp, words, n_streams, s0, s1, p, n,
                        step, *scalars):
                gpu.planned.append((grid, block, stream, shared,
                                    (sp, words, n_streams, s0, s1, p, n, step, *scalars)))
                size = states_dtype.itemsize
                states = _view(sp, (words, n_streams), (s0 * size, s1 * size), states_dtype)
                out = _view(p, (n,), (step * out_dtype.itemsize,), out_dtype)
                simulator.launch(kern.py_func, (grid,), (block,), (states, out, *scalars))
            return planned

        monkeypatch.setattr(CudaBackend, "empty", lambda self, shape, dtype:
                            gpu.buffer(np.zeros(shape, dtype)))
        monkeypatch.setattr(CudaBackend, "to_device", lambda self, host: gpu.buffer(host))
        monkeypatch.setattr(CudaBackend, "to_host", lambda self, buf: gpu.host(buf).copy())
        monkeypatch.setattr(CudaBackend, "launch", launch)
        monkeypatch.setattr(plans, "_gpu_launches", lambda: True)
        monkeypatch.setattr(plans, "launch_handle", handle)


class Unplanned(CudaBackend):
    """The CUDA backend under another class: its fills always take the general path."""


def fake_stream(handle):
    """A cupric Stream object naming raw handle `handle` (never used with a driver)."""
    stream = Stream.__new__(Stream)
    stream._ptr, stream._closed = handle, False
    return stream


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu()
    fake.install(monkeypatch)
    return fake


@pytest.fixture
def seed(rng):
    return int(rng.integers(0, 2**63))


def _calls():
    """(method, parameters) of every planned distribution, standard and parametrized."""
    return [("random", ()), ("uniform", (-2.5, 7.0)), ("standard_normal", ()),
            ("normal", (1.5, 3.0)), ("standard_exponential", ()), ("exponential", (0.25,))]


@pytest.mark.parametrize("dtype", [F32, F64])
def test_planned_fills_equal_the_general_path_bit_for_bit(gpu, seed, dtype):
    """The same sequence of fills through plans (backend None) and through the general
    path only (`Unplanned`): every value and the final states identical; uniform also
    equal to the host half."""
    streams = 40
    planned, general = Generator(seed, streams=streams), Generator(seed, streams=streams)
    host = Generator(seed, streams=streams)
    for round_ in range(2):
        for method, params in _calls():
            for n in (4 * streams + 7, 33):  # several rounds with a straddling group; fewer
                a, b = gpu.empty(n, dtype), gpu.empty(n, dtype)
                assert getattr(planned, method)(*params, out=a) is a
                getattr(general, method)(*params, out=b, backend=Unplanned())
                assert np.array_equal(gpu.host(a), gpu.host(b), equal_nan=False), method
                want = getattr(host, method)(*params, size=n, dtype=dtype)
                if method in ("random", "uniform"):
                    assert np.array_equal(gpu.host(a), want), method
                else:  # the simulator's libm against NumPy's
                    np.testing.assert_allclose(gpu.host(a), want, rtol=1e-5, atol=1e-6)
    # Each distribution: its first fill went the general way, every later one planned.
    assert len(gpu.planned) == 2 * 2 * len(_calls()) - 3
    assert np.array_equal(planned.stream_states, general.stream_states)
    assert np.array_equal(planned.stream_states, host.stream_states)


#: (dtype, low, high) of integer fills: 32-bit draws into int64 and int32, 64-bit draws
#: (a span over 2^32), the whole uint32 range.
_INTEGER_RANGES = [(np.int64, -9, 10**6), (np.int64, -3, 3 * 2**40), (np.int32, -5, 5),
                   (np.uint32, 0, 2**32), (np.uint64, 2**63, 2**64)]


def test_planned_integer_and_bits_fills_equal_the_host_half(gpu, seed):
    """Integer fills (a plan per 32- and 64-bit draw family) and raw bits, planned from
    the second fill of each key on: equal to the general path and to the host half."""
    streams = 20
    planned, general = Generator(seed, streams=streams), Generator(seed, streams=streams)
    host = Generator(seed, streams=streams)
    n = 4 * streams + 9
    for _ in range(2):
        for dtype, low, high in _INTEGER_RANGES:
            a, b = gpu.empty(n, dtype), gpu.empty(n, dtype)
            planned.integers(low, high, out=a)
            general.integers(low, high, out=b, backend=Unplanned())
            assert np.array_equal(gpu.host(a), host.integers(low, high, n, dtype=dtype))
            assert np.array_equal(gpu.host(a), gpu.host(b))
        for dtype in (np.uint32, np.uint64):
            a, b = gpu.empty(n, dtype), gpu.empty(n, dtype)
            planned.bits(out=a)
            general.bits(out=b, backend=Unplanned())
            assert np.array_equal(gpu.host(a), host.bits(n, dtype=dtype))
            assert np.array_equal(gpu.host(a), gpu.host(b))
    a = gpu.empty(n, np.int64)
    planned.integers(0, 7, endpoint=True, out=a)  # [0, 8): the int64 32-bit draw plan
    assert np.array_equal(gpu.host(a), host.integers(0, 7, n, dtype=np.int64, endpoint=True))
    # Five integer keys (int64 has a 32- and a 64-bit one) and two bits keys, each planned
    # from its second fill on; the endpoint fill reused a plan.
    assert len(gpu.planned) == 7 + 1
    assert np.array_equal(planned.stream_states, host.stream_states)


def test_planned_integer_fills_raise_the_general_errors(gpu, seed):
    g = Generator(seed, streams=8)
    out = gpu.empty(40, np.int32)
    g.integers(-5, 5, out=out)
    g.integers(-5, 5, out=out)
    assert len(gpu.planned) == 1
    with pytest.raises(ValueError, match="empty range"):
        g.integers(5, 5, out=out)
    with pytest.raises(ValueError, match="does not fit"):
        g.integers(0, 2**31 + 1, out=out)
    with pytest.raises(ValueError, match="does not fit"):
        g.integers(-2**31 - 1, 0, out=out)
    with pytest.raises(TypeError):
        g.integers(0.5, 3, out=out)
    g.integers(-2**31, 2**31, out=out)  # the whole range: fine, planned
    assert len(gpu.planned) == 2
    plan = g._plans["integers32", DeviceBuffer, np.dtype(np.int32)]
    assert plan.integer_arguments(-2**31, 2**31) == (np.uint64(2**64 - 2**31),
                                                     np.uint64(2**32), np.uint64(0))


def test_plan_launch_values(gpu, seed):
    """The launch a plan makes: the backend's grid and block on the legacy default stream,
    the states' pointer, shape and steps, `out` as one vector, shift and scale of the
    element type."""
    g = Generator(seed, streams=300)
    out = gpu.empty(1000, F32)
    g.random(out=out)
    g.uniform(1.0, 3.0, out=out)
    states = g.device_states(CudaBackend())
    (grid, block, stream, shared, values), = gpu.planned
    assert (grid, block, stream, shared) == (2, 256, None, 0)
    assert values[:8] == (states.ptr, 4, 300, 300, 1, out.ptr, 1000, 1)
    shift, scale = values[8:]
    assert shift.__class__ is scale.__class__ is np.float32 and (shift, scale) == (1, 2)


def test_multidimensional_and_unaligned_outs(gpu, seed):
    g, host = Generator(seed, streams=16), Generator(seed, streams=16)
    flat = gpu.empty(75, F32)
    square = flat.reshape(3, 25)
    for _ in range(2):  # planned the second time: filled as one vector
        g.random(out=square)
        assert np.array_equal(gpu.host(flat), host.random(75, np.float32))
    assert len(gpu.planned) == 1
    unaligned = gpu.empty(50, F32, align=4)
    g.random(out=unaligned)  # refused (not 16-byte aligned): the general path
    assert len(gpu.planned) == 1
    assert np.array_equal(gpu.host(unaligned), host.random(50, np.float32))


def test_refused_fills_take_the_general_path_and_its_errors(gpu, seed):
    g = Generator(seed, streams=8)
    out = gpu.empty(64, F32)
    g.random(out=out)
    g.random(out=out)
    assert len(gpu.planned) == 1
    closed = gpu.empty(64, F32)
    closed._alloc._closed = True
    with pytest.raises(ClosedError):
        g.random(out=closed)
    readonly = gpu.empty(64, F32)
    readonly.readonly = True
    with pytest.raises(intake.ReadOnlyError):
        g.standard_normal(out=readonly)
    strided = gpu.empty(64, F32)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        g.random(out=strided)
    empty = gpu.empty(0, F32)
    assert g.random(out=empty) is empty
    # A float view of the states' own memory: the plan refuses the overlap and the
    # general path launches (its unaligned/aliasing variant on a GPU).
    states = g.device_states(CudaBackend())
    alias = DeviceBuffer._make(states._alloc, states.ptr, (8,), (4,), F32, False, None)
    before = len(gpu.general)
    g.random(out=alias)
    assert len(gpu.general) == before + 1
    assert len(gpu.planned) == 1


def test_plans_follow_the_states(gpu, seed):
    """States brought home (or closed) drop the plans; the next device fill goes the
    general way again and makes a new plan, with the values still the host half's."""
    g, host = Generator(seed, streams=12), Generator(seed, streams=12)
    out = gpu.empty(100, F32)
    for _ in range(2):
        g.random(out=out)
        assert np.array_equal(gpu.host(out), host.random(100, np.float32))
    assert len(gpu.planned) == 1
    assert np.array_equal(g.stream_states, host.stream_states)  # home: plans dropped
    assert g._plans == {}
    for _ in range(2):
        g.random(out=out)
        assert np.array_equal(gpu.host(out), host.random(100, np.float32))
    assert len(gpu.planned) == 2 and gpu.general.count("uniform_f32") == 2
    g.device_states(CudaBackend())._alloc._closed = True  # closed under the plan
    with pytest.raises(ClosedError):
        g.random(out=out)
    assert len(gpu.planned) == 2


def test_no_plans_on_the_simulator_or_with_another_backend(monkeypatch, seed):
    """Without the stand-in GPU's permission (`_gpu_launches`, False on this machine) or
    with a backend of another class, fills are never planned; an explicit CudaBackend on
    the default stream takes the default's plans."""
    fake = FakeGpu()
    fake.install(monkeypatch)
    g = Generator(seed, streams=8)
    out = fake.empty(32, F32)
    for _ in range(3):
        g.random(out=out, backend=Unplanned())
    assert list(g._plans.values()) == [None] and not fake.planned
    monkeypatch.setattr(plans, "_gpu_launches", lambda: False)
    h = Generator(seed, streams=8)
    for _ in range(3):
        h.random(out=out)
    assert list(h._plans.values()) == [None] and not fake.planned
    assert fake.general == (["init_streams"] + ["uniform_f32"] * 3) * 2
    monkeypatch.setattr(plans, "_gpu_launches", lambda: True)
    k = Generator(seed, streams=8)
    k.random(out=out)
    k.random(out=out, backend=CudaBackend())
    k.random(out=out, backend="cuda")  # a name: the general path, the same states
    assert len(fake.planned) == 1 and fake.general[-2:] == ["uniform_f32"] * 2


def test_plans_on_a_stream(gpu, seed, monkeypatch):
    """A backend on a cupric Stream: its plan launches there, ordered after the stream a
    DeviceBuffer was made on as the intake layer orders it; another stream's fills move
    the states (the plans go with them); a closed stream goes to the general path's
    error."""
    ordered = []
    monkeypatch.setattr(aa, "order_launch_after",
                        lambda consumer, producers: ordered.append((consumer, producers)))
    s, other = fake_stream(0x7A00), fake_stream(0x7B00)
    g, host = Generator(seed, streams=16), Generator(seed, streams=16)
    out = gpu.empty(200, F32)
    mine = gpu.empty(200, F32)
    mine._stream = s
    theirs = gpu.empty(200, F32)
    theirs._stream = other
    for buf in (out, out, mine, theirs):
        g.random(out=buf, backend=CudaBackend(s))
        assert np.array_equal(gpu.host(buf), host.random(200, np.float32))
    assert [call[2] for call in gpu.planned] == [s, s, s]
    assert ordered == [(0x7A00, [0x7B00])]
    g.random(out=out)  # the default stream: states moved, plans dropped and made again
    host.random(200, np.float32)
    assert list(g._plans) == [("uniform", DeviceBuffer, F32)]
    assert g._plans["uniform", DeviceBuffer, F32].stream is None
    g.random(out=out, backend=CudaBackend(s))
    g.random(out=out, backend=CudaBackend(s))
    assert len(gpu.planned) == 4
    s._closed = True
    with pytest.raises(ClosedError):
        g.random(out=out, backend=CudaBackend(s))
    assert len(gpu.planned) == 4


class FakeCupy:
    """A CuPy-like array over host memory (its adapter is registered by the test)."""

    def __init__(self, host):
        self.host, self.dtype, self.shape, self.strides = host, host.dtype, host.shape, \
            host.strides
        self.size, self.ndim = host.size, host.ndim
        self._c_contiguous = host.flags.c_contiguous
        self.data = types.SimpleNamespace(ptr=host.ctypes.data, device_id=0)


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_foreign_arrays(gpu, seed, kind, request, monkeypatch):
    ordered = []
    monkeypatch.setattr(aa, "order_launch_after",
                        lambda consumer, producers: ordered.append((consumer, producers)))
    current = [0]
    if kind == "torch":
        torch = request.getfixturevalue("fake_torch")
        wrap = torch.Tensor
    else:
        aa.register_array_adapter(FakeCupy, aa.CupyAdapter(lambda: current[0]))
        request.addfinalizer(lambda: aa.unregister_array_adapter(FakeCupy))
        wrap = FakeCupy
    g, general = Generator(seed, streams=24), Generator(seed, streams=24)
    poisoned = np.full(2 * 24 * 4 + 5 + 64, np.nan, np.float64)
    start = (-poisoned.ctypes.data % 64) // 8
    host = poisoned[start:start + 2 * 24 * 4 + 5]
    out = wrap(host)
    check = gpu.empty(host.size, F64)
    for step in range(4):
        if kind == "cupy" and step == 3:
            current[0] = 0x7A00  # CuPy's current stream is another one: ordered after
        g.normal(0.5, 2.0, out=out)
        general.normal(0.5, 2.0, out=check, backend=Unplanned())
        assert np.array_equal(host, gpu.host(check))
    assert len(gpu.planned) == 3
    if kind == "cupy":
        assert ordered == [(0, [0x7A00])]
    if kind == "torch":
        out.requires_grad = True  # refused by the plan: the general path and its error
        with pytest.raises(TypeError):
            g.random(out=out)
        assert len(gpu.planned) == 3


def test_plan_arguments_keep_the_sign_of_zero():
    """`FillPlan.arguments` remembers by identity: an equal parameter of another sign
    (``-0.0 == 0.0``) is converted afresh, as the general path converts it."""
    plan = plans.FillPlan(None, F32)
    zero, negative_zero = 0.0, -0.0
    assert np.signbit(plan.arguments(zero, 1.0, True)[0]) == False  # noqa: E712
    assert np.signbit(plan.arguments(negative_zero, 1.0, True)[0]) == True  # noqa: E712
    shift, scale = plan.arguments(-2.5, 7.0, True)
    assert (shift, scale) == (np.float32(-2.5), np.float32(9.5))
    assert plan.arguments(1.5, 3.0, False) == (np.float32(1.5), np.float32(3.0))


# -- GPU lane ------------------------------------------------------------------------------------

def _gpu_outs(kind, n, dtype):
    """A poisoned device array of `kind` and a function reading it back to NumPy."""
    dtype = np.dtype(dtype)
    host = np.full(n, np.nan if dtype.kind == "f" else np.iinfo(dtype).max, dtype)
    if kind == "buffer":
        from cupric.runtime.memory import to_device
        return to_device(host), lambda a: a.to_numpy()
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return torch.tensor(host, device="cuda"), lambda a: a.cpu().numpy()
    cupy = pytest.importorskip("cupy")
    return cupy.asarray(host), cupy.asnumpy


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["buffer", "torch", "cupy"])
def test_planned_fills_on_the_gpu_equal_the_general_path(kind, seed):
    """Repeated fills of one array (planned from the second on) against the same fills
    through the general path only, bit for bit, and against the host half."""
    streams = 3000
    planned, general = Generator(seed, streams=streams), Generator(seed, streams=streams)
    host = Generator(seed, streams=streams)
    for dtype in (F32, F64):
        n = 4 * streams * 3 + 13
        a, back = _gpu_outs(kind, n, dtype)
        b, _ = _gpu_outs(kind, n, dtype)
        for method, params in _calls() * 2:
            getattr(planned, method)(*params, out=a)
            getattr(general, method)(*params, out=b, backend=Unplanned())
            got = back(a)
            assert np.array_equal(got, back(b)), (method, dtype)
            want = getattr(host, method)(*params, size=n, dtype=dtype)
            if method == "random":
                assert np.array_equal(got, want), (method, dtype)
            else:  # a device fill may fuse shift + scale * v (see Generator.uniform)
                tol = 2e-6 if dtype == F32 else 1e-13
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    ranges = [r for r in _INTEGER_RANGES if kind != "torch" or r[0] != np.uint32 and
              r[0] != np.uint64]  # PyTorch's unsigned types are not everywhere
    words = (np.uint32, np.uint64) if kind != "torch" else ()
    n = 4 * streams * 2 + 5
    for _ in range(2):
        for dtype, low, high in ranges:
            a, back = _gpu_outs(kind, n, dtype)
            b, _ = _gpu_outs(kind, n, dtype)
            planned.integers(low, high, out=a)
            general.integers(low, high, out=b, backend=Unplanned())
            got = back(a)
            assert np.array_equal(got, back(b)), (dtype, low, high)
            assert np.array_equal(got, host.integers(low, high, n, dtype=dtype))
        for dtype in words:
            a, back = _gpu_outs(kind, n, dtype)
            b, _ = _gpu_outs(kind, n, dtype)
            planned.bits(out=a)
            general.bits(out=b, backend=Unplanned())
            got = back(a)
            assert np.array_equal(got, back(b)), dtype
            assert np.array_equal(got, host.bits(n, dtype=dtype))
    made = [p for p in planned._plans.values() if p is not None]
    # Three float distributions x two dtypes, an integer plan per (draw width, dtype),
    # a bits plan per dtype.
    assert len(made) == 6 + len(ranges) + len(words), planned._plans
    assert not any(general._plans.values())
    assert np.array_equal(planned.stream_states, host.stream_states)
    assert np.array_equal(general.stream_states, host.stream_states)


@pytest.mark.gpu
def test_planned_fill_of_a_cupy_array_written_on_another_stream(seed):
    """CuPy's current stream wrote `out` last: the planned launch on the legacy default
    stream is ordered after it, so the fill lands after the poison."""
    cupy = pytest.importorskip("cupy")
    g, host = Generator(seed, streams=2048), Generator(seed, streams=2048)
    n = 1 << 22
    out = cupy.empty(n, cupy.float32)
    g.random(out=out)
    host.random(n, np.float32)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        for _ in range(3):
            out.fill(cupy.nan)  # queued on `stream`
            g.random(out=out)
            want = host.random(n, np.float32)
        stream.synchronize()
    cupy.cuda.Device().synchronize()
    assert np.array_equal(cupy.asnumpy(out), want)


@pytest.mark.gpu
def test_refused_fills_on_the_gpu(seed):
    """An unaligned view and a closed buffer after a plan exists: the general path."""
    from cupric.runtime.memory import to_device
    g, host = Generator(seed, streams=1000), Generator(seed, streams=1000)
    base = to_device(np.full(40_002, np.nan, np.float32))
    g.random(out=base)
    g.random(out=base)
    host.random(40_002, np.float32)
    want = host.random(40_002, np.float32)
    assert np.array_equal(base.to_numpy(), want)
    view = base[1:40_001]
    g.random(out=view)
    assert np.array_equal(view.to_numpy(), host.random(40_000, np.float32))
    closed = to_device(np.zeros(64, np.float32))
    closed.close()
    with pytest.raises(ClosedError):
        g.random(out=closed)
    assert np.array_equal(g.stream_states, host.stream_states)


@pytest.mark.gpu
def test_planned_fills_on_a_stream(seed):
    """A backend on a non-blocking cupric Stream: planned fills launch there, after the
    stream the DeviceBuffer was made on; values equal the host half's."""
    from cupric.runtime import Device, empty
    stream = Device(0).create_stream(non_blocking=True)
    maker = Device(0).create_stream(non_blocking=True)
    try:
        g, host = Generator(seed, streams=2048), Generator(seed, streams=2048)
        n = 1 << 21
        out = empty(n, np.float32, stream=maker)
        assert out._stream is maker
        backend = CudaBackend(stream)
        for _ in range(3):
            out.fill(np.nan, stream=maker)  # queued on `maker`: the fill waits for it
            g.random(out=out, backend=backend)
            want = host.random(n, np.float32)
        assert g._plans["uniform", out.__class__, out.dtype].stream is stream
        stream.synchronize()
        assert np.array_equal(out.to_numpy(stream=stream), want)
        out.close(stream=stream)
    finally:
        stream.close()
        maker.close()
