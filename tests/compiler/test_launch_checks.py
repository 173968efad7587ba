"""Device checks and stream ordering of `@cupric.kernel` launches, without a GPU.

Fake arrays of several devices (cupric DeviceBuffers over fake allocations, CuPy, PyTorch
and numba-cuda look-alikes registered with the array adapters, bare CUDA Array Interface
objects), a fake pointer query and fake stream flags drive the general launch path and the
generated fast launcher: a wrong-device argument must raise `DeviceMismatchError` naming
the kernel, the parameter and both devices before anything is launched or ordered, and the
launch stream must wait for a producer's stream exactly when CUDA does not order the two
already.
"""

from __future__ import annotations

import ctypes
import importlib
import pickle
import types

import numpy as np
import pytest

import cupric
from cupric.runtime import array_adapters as aa
from cupric.runtime.errors import DeviceMismatchError
from cupric.runtime.managed import ManagedBuffer
from cupric.types import Array, f32

kmod = importlib.import_module("cupric.compiler.kernel")
memory = importlib.import_module("cupric.runtime.memory")
pool = importlib.import_module("cupric.runtime.pool")

F32 = np.dtype(np.float32)
NON_BLOCKING = 1
# Fake stream handles and their flags (CU_STREAM_NON_BLOCKING is bit 0).
BLOCKING_A, BLOCKING_B, FREE_A, FREE_B = 0x7A00, 0x7B00, 0xF100, 0xF200
FLAGS = {BLOCKING_A: 0, BLOCKING_B: 0, FREE_A: NON_BLOCKING, FREE_B: NON_BLOCKING}


# -- fakes -------------------------------------------------------------------------------------


def fake_allocation(device):
    """The allocation record of a borrow (it frees nothing), said to live on `device`."""
    alloc = memory.borrow_validated(0, (0,), (1,), F32, False, None, None).allocation
    alloc.device = device
    return alloc

def device_buffer(ptr, n, device, cls=None):
    """A real DeviceBuffer (or subclass) over a fake allocation of `device`."""
    return memory.DeviceBuffer.view_of(fake_allocation(device), ptr, (n,), (4,), F32, False,
                                       None, cls=cls)


class ManagedLike(ManagedBuffer):
    """A `ManagedBuffer` over a fake allocation: memory any device may use."""

    __slots__ = ()


class CupyMemory:
    def __init__(self, ptr, device):
        self.ptr = ptr
        self.device_id = device


class CupyNoDevice:
    """A memory pointer whose device must never be read (one-GPU launches)."""

    def __init__(self, ptr):
        self.ptr = ptr

    @property
    def device_id(self):
        raise AssertionError("the device was read on a one-GPU machine")


class CupyStream:
    ptr = 0


CUPY_STREAM = CupyStream()


class FakeCupy:
    def __init__(self, ptr, n, device=0):
        self.dtype, self.shape, self.strides = F32, (n,), (4,)
        self.data = CupyMemory(ptr, device) if device is not None else CupyNoDevice(ptr)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f4", "data": (self.data.ptr, False),
                "version": 3, "strides": None, "stream": CUPY_STREAM.ptr or 1}


STRIDED = object()


class FakeTensor:
    def __init__(self, ptr, n, device=0, is_cuda=True):
        self.dtype, self.shape = "float32", (n,)
        self._ptr, self._device, self.is_cuda = ptr, device, is_cuda
        self.requires_grad, self.layout = False, STRIDED

    def stride(self, dim=None):
        return (1,) if dim is None else 1

    def is_contiguous(self):  # the compiled launcher's unit-stride read
        return True

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        return self.shape[0]

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self._device if self.is_cuda else -1

    @property
    def __cuda_array_interface__(self):
        if not self.is_cuda:
            raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")
        return {"typestr": "<f4", "shape": self.shape, "strides": None,
                "data": (self._ptr, False), "version": 2}


class FakeNumba:
    def __init__(self, ptr, n, stream=0):
        self.dtype, self.shape, self.strides = F32, (n,), (4,)
        self.device_ctypes_pointer = types.SimpleNamespace(value=ptr)
        self.stream = stream

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": None, "typestr": "<f4", "version": 3,
                "data": (self.device_ctypes_pointer.value, False),
                "stream": int(self.stream) if self.stream != 0 else None}


class ViaInterface:
    """Only `__cuda_array_interface__`: the general fallback path."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__


class Prepared:
    def __init__(self, log, device):
        self.log, self.device = log, device

    def launch(self, grid, block, stream, shared_bytes, *values):
        self.log.append((self.device, stream, values))


@cupric.kernel
def axpy(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    i = cupric.device.grid(1)
    if i < len(x):
        y[i] = a * x[i] + y[i]


@cupric.kernel
def scale2d(a: f32, m: Array[f32, 2]):
    i, j = cupric.device.grid(2)
    if i < m.shape[0] and j < m.shape[1]:
        m[i, j] = a * m[i, j]


class Machine:
    """The launch path's view of the machine: GPUs, the current device, what the driver
    says about pointers and streams, and every launch and ordering it issued."""

    def __init__(self, monkeypatch, gpus=2):
        self.monkeypatch = monkeypatch
        self.current = 0
        self.launches = []
        self.orders = []        # (consumer, producer) of each event wait
        self.flag_queries = []
        self.pointers = {}      # ptr -> (memory type, device, managed, pool)
        self.facts_asked = []
        self.prepared_for = []  # devices Specialization.prepared was asked for
        monkeypatch.setattr(kmod, "_SIMULATOR", [False])
        monkeypatch.setattr(kmod, "_MULTI", [gpus > 1])
        monkeypatch.setattr(kmod, "_current_device", lambda: self.current)
        monkeypatch.setattr(kmod.Specialization, "prepared",
                            lambda spec, device=None: self._prepared(spec, device))
        monkeypatch.setattr(aa, "pointer_facts", self._facts)
        monkeypatch.setattr(aa, "stream_flags", self._flags)
        self.capturing = set()
        self.capture_queries = []
        monkeypatch.setattr(aa, "stream_capturing", self._capturing)
        monkeypatch.setattr(memory, "order_after",
                            lambda consumer, producer: self.orders.append((consumer,
                                                                           producer)))
        monkeypatch.setattr(pool, "_PEERS", set())
        monkeypatch.setattr(pool, "_POOL_ACCESS", set())
        for kern in (axpy, scale2d):
            kern._specs.clear()
            kern._variants.clear()
            kern._fast = None
            kern._no_fast.clear()

    def _prepared(self, spec, device=None):
        ordinal = self.current if device is None else device
        assert ordinal == self.current  # always loaded on the current device
        self.prepared_for.append(device)
        return Prepared(self.launches, ordinal)

    def _facts(self, ptr):
        self.facts_asked.append(ptr)
        return self.pointers.get(ptr, (0, -1, False, 0))

    def _flags(self, handle):
        self.flag_queries.append(handle)
        return FLAGS[handle]

    def _capturing(self, handle):
        self.capture_queries.append(handle)
        return handle in self.capturing

    def memory(self, ptr, device, managed=False, pool_handle=0, kind=aa.MEMORY_DEVICE):
        self.pointers[ptr] = (kind, device, managed, pool_handle)


@pytest.fixture
def machine(monkeypatch):
    aa.register_array_adapter(FakeCupy, aa.CupyAdapter(lambda: CUPY_STREAM.ptr))
    aa.register_array_adapter(FakeTensor, aa.TorchAdapter({"float32": "<f4"}, STRIDED))
    aa.register_array_adapter(FakeNumba, aa.NumbaAdapter())
    CUPY_STREAM.ptr = 0
    yield Machine(monkeypatch)
    for cls in (FakeCupy, FakeTensor, FakeNumba):
        aa.unregister_array_adapter(cls)
    CUPY_STREAM.ptr = 0


A = np.float32(2)


def launch_twice(kern_args, *, stream=None):
    """Launch twice (the second time through the generated launcher when there is one);
    returns whether it was generated."""
    for _ in range(2):
        axpy[4, 64, stream, 0](*kern_args)
    return axpy._fast is not None


# -- wrong device: the error, and nothing launched ---------------------------------------------

def wrong_device_error(machine, args, index_name="argument 1 (x)", found=1):
    before = (len(machine.launches), len(machine.orders))
    with pytest.raises(DeviceMismatchError) as info:
        axpy[4, 64](*args)
    message = str(info.value)
    assert message.startswith("axpy: ")
    assert f"{index_name} lives on device {found}" in message
    assert f"the launch runs on device {machine.current}" in message
    assert isinstance(info.value, ValueError)
    assert (info.value.device, info.value.expected) == (found, machine.current)
    assert (len(machine.launches), len(machine.orders)) == before  # nothing queued
    return info.value


def test_device_buffer_of_another_device_raises_on_both_paths(machine):
    y = device_buffer(0x20000, 256, 0)
    assert launch_twice((A, device_buffer(0x10000, 256, 0), y))  # the fast path exists
    machine.memory(0x30000, 1)
    error = wrong_device_error(machine, (A, device_buffer(0x30000, 256, 1), y))
    assert error.argument == "x"
    axpy._fast = None                                            # the general path alone
    axpy._no_fast.update(axpy._specs)
    wrong_device_error(machine, (A, device_buffer(0x30000, 256, 1), y))
    assert len(machine.launches) == 2


def test_the_parameter_is_named(machine):
    machine.memory(0x30000, 1)
    x = device_buffer(0x10000, 256, 0)
    wrong_device_error(machine, (A, x, device_buffer(0x30000, 256, 1)), "argument 2 (y)")
    with pytest.raises(DeviceMismatchError, match=r"scale2d: argument 1 \(m\) lives on "
                                                  r"device 1"):
        m = memory.DeviceBuffer.view_of(fake_allocation(1), 0x30000, (4, 8), (32, 4), F32,
                                        False, None)
        scale2d[(1, 1), (8, 8)](A, m)


def test_error_pickles_with_its_fields():
    error = DeviceMismatchError("k: argument 1 (x) lives on device 1", argument="x",
                                device=1, expected=0)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.argument, copy.device, copy.expected) == \
        (str(error), "x", 1, 0)


def test_right_device_buffers_launch_through_the_fast_path(machine):
    x, y = device_buffer(0x10000, 256, 0), device_buffer(0x20000, 256, 0)
    assert launch_twice((A, x, y))
    assert [entry[0] for entry in machine.launches] == [0, 0]
    assert machine.facts_asked == []  # known devices: the driver is never asked


def test_borrowed_buffer_is_asked_once_then_remembered(machine):
    machine.memory(0x10000, 0)
    x, y = device_buffer(0x10000, 256, -1), device_buffer(0x20000, 256, 0)
    for _ in range(3):
        axpy[4, 64](A, x, y)
    assert machine.facts_asked == [0x10000]
    assert x._alloc.device == 0 and len(machine.launches) == 3
    machine.memory(0x50000, 1)
    wrong_device_error(machine, (A, device_buffer(0x50000, 256, -1), y))


@pytest.mark.parametrize("facts", [(aa.MEMORY_DEVICE, 1, True, 0),   # managed
                                   (aa.MEMORY_HOST, 1, False, 0),    # pinned host memory
                                   (0, -1, False, 0)],               # unknown to the driver
                         ids=["managed", "pinned", "unknown"])
def test_memory_every_device_reaches_is_accepted(machine, facts):
    machine.pointers[0x30000] = facts
    y = device_buffer(0x20000, 256, 0)
    axpy[4, 64](A, device_buffer(0x30000, 256, 1), y)
    axpy[4, 64](A, ViaInterface(FakeCupy(0x30000, 256, 1)), y)
    assert len(machine.launches) == 2


def test_managed_buffers_are_never_checked(machine):
    x = device_buffer(0x10000, 256, 1, cls=ManagedLike)
    y = device_buffer(0x20000, 256, 0)
    assert launch_twice((A, x, y))
    assert machine.facts_asked == [] and len(machine.launches) == 2


def test_empty_arrays_never_mismatch(machine):
    y = device_buffer(0x20000, 256, 0)
    axpy[4, 64](A, device_buffer(0, 0, 1), y)
    assert len(machine.launches) == 1


@pytest.mark.parametrize("make", [
    lambda ptr, device: FakeCupy(ptr, 256, device),
    lambda ptr, device: FakeTensor(ptr, 256, device),
], ids=["cupy", "torch"])
def test_adapter_arrays_of_another_device_raise_on_both_paths(machine, make):
    y = make(0x20000, 0)
    assert launch_twice((A, make(0x10000, 0), y))
    assert machine.facts_asked == []          # their own attributes say where they live
    machine.memory(0x30000, 1)
    wrong_device_error(machine, (A, make(0x30000, 1), y))
    axpy._fast = None
    axpy._no_fast.update(axpy._specs)
    wrong_device_error(machine, (A, make(0x30000, 1), y))


def test_numba_and_interface_arrays_ask_the_driver(machine):
    y = device_buffer(0x20000, 256, 0)
    machine.memory(0x10000, 0)
    machine.memory(0x30000, 1)
    for value in (FakeNumba(0x10000, 256), ViaInterface(FakeCupy(0x10000, 256, 0))):
        axpy[4, 64](A, value, y)
    assert machine.facts_asked == [0x10000, 0x10000]
    for value in (FakeNumba(0x30000, 256), ViaInterface(FakeCupy(0x30000, 256, 1))):
        wrong_device_error(machine, (A, value, y))


def test_peer_access_enabled_by_cupric_is_accepted(machine):
    y = device_buffer(0x20000, 256, 0)
    machine.memory(0x30000, 1)                             # cuMemAlloc memory of device 1
    machine.memory(0x40000, 1, pool_handle=0x9900)         # device 1's pool memory
    x, pooled = device_buffer(0x30000, 256, 1), device_buffer(0x40000, 256, 1)
    wrong_device_error(machine, (A, x, y))
    pool._PEERS.add((1, 0))                  # device 1 reaching device 0: the wrong way
    wrong_device_error(machine, (A, x, y))
    pool._PEERS.add((0, 1))
    axpy[4, 64](A, x, y)
    axpy[4, 64](A, FakeCupy(0x30000, 256, 1), y)
    # Peer access does not cover stream-ordered pools: the pool must grant access too.
    wrong_device_error(machine, (A, pooled, y))
    pool._POOL_ACCESS.add((0x9900, 0))
    axpy[4, 64](A, pooled, y)
    assert len(machine.launches) == 3


def test_peer_registry_follows_enable_and_disable(monkeypatch):
    monkeypatch.setattr(pool, "_PEERS", set())
    monkeypatch.setattr(pool, "_POOL_ACCESS", set())
    assert not pool.peer_reachable(0, 1)
    pool._PEERS.add((0, 1))
    assert pool.peer_reachable(0, 1) and not pool.peer_reachable(1, 0)
    assert not pool.peer_reachable(0, 1, pool=0x9900)
    pool._POOL_ACCESS.add((0x9900, 0))
    assert pool.peer_reachable(0, 1, pool=0x9900)


def test_current_device_picks_the_module_and_the_expected_device(machine):
    x0, y0 = device_buffer(0x10000, 256, 0), device_buffer(0x20000, 256, 0)
    x1, y1 = device_buffer(0x30000, 256, 1), device_buffer(0x40000, 256, 1)
    machine.memory(0x10000, 0)
    assert launch_twice((A, x0, y0))
    machine.current = 1                      # the generated launcher defers: device 1
    axpy[4, 64](A, x1, y1)
    assert machine.prepared_for[-1] == 1 and machine.launches[-1][0] == 1
    wrong_device_error(machine, (A, x0, y1), found=0)
    machine.current = 0
    axpy[4, 64](A, x0, y0)
    assert machine.launches[-1][0] == 0


def test_one_gpu_reads_no_device(machine):
    kmod._MULTI[0] = False
    x = FakeCupy(0x10000, 256, device=None)   # reading its device would fail the test
    y = device_buffer(0x20000, 256, 5)
    assert launch_twice((A, x, y))
    axpy._fast = None
    axpy._no_fast.update(axpy._specs)
    axpy[4, 64](A, x, y)
    assert machine.facts_asked == [] and len(machine.launches) == 3


@pytest.mark.parametrize("gpus", [1, 2])
def test_host_arrays_keep_raising(machine, gpus):
    kmod._MULTI[0] = gpus > 1
    y = device_buffer(0x20000, 256, 0)
    with pytest.raises(TypeError, match="host NumPy array"):
        axpy[4, 64](A, np.ones(256, np.float32), y)
    with pytest.raises(TypeError, match="argument 1: FakeTensor is not a device array"):
        axpy[4, 64](A, FakeTensor(0x10000, 256, is_cuda=False), y)
    assert machine.launches == [] and machine.orders == []


# -- stream ordering ---------------------------------------------------------------------------

@pytest.mark.parametrize("consumer,producer,wait,asked", [
    (0, 1, False, []), (1, 1, False, []), (0, 0, False, []),   # the legacy stream itself
    (2, 1, False, []), (0, 2, False, []),                      # legacy vs per-thread
    (2, 2, False, []),
    (FREE_A, FREE_A, False, []),                               # the same stream
    (0, BLOCKING_A, False, [BLOCKING_A]),                      # legacy waits for blocking
    (BLOCKING_A, 1, False, [BLOCKING_A]),                      # blocking waits for legacy
    (0, FREE_A, True, [FREE_A]),                               # non-blocking: a wait
    (FREE_A, 1, True, [FREE_A]),
    (BLOCKING_A, BLOCKING_B, True, []),                        # two streams: never ordered
    (FREE_A, BLOCKING_A, True, []),
    (2, BLOCKING_A, True, []), (BLOCKING_A, 2, True, []),      # per-thread vs a stream
])
def test_needs_wait(machine, consumer, producer, wait, asked):
    assert aa.needs_wait(consumer, producer) is wait
    assert machine.flag_queries == asked


def test_order_launch_after_uses_order_after_where_needed(machine):
    aa.order_launch_after(0, [1, BLOCKING_A, FREE_A, FREE_B])
    assert machine.orders == [(0, FREE_A), (0, FREE_B)]
    assert machine.capture_queries == []   # the legacy stream is never captured
    aa.order_launch_after(FREE_B, [1, BLOCKING_A, FREE_A])
    assert machine.orders[2:] == [(FREE_B, 1), (FREE_B, BLOCKING_A), (FREE_B, FREE_A)]
    assert machine.capture_queries == [FREE_B]   # asked once, when a wait is needed
    aa.order_launch_after(FREE_B, [FREE_B])
    assert machine.capture_queries == [FREE_B]


def test_a_capturing_launch_stream_gets_no_wait(machine):
    """Waiting on an event recorded outside a capture is illegal in CUDA (it would
    invalidate the capture): the ordering is left to when the graph is launched."""
    machine.capturing.add(FREE_B)
    CUPY_STREAM.ptr = FREE_A
    x, y = FakeCupy(0x10000, 256), FakeCupy(0x20000, 256)
    assert launch_twice((A, x, y), stream=FREE_B)
    axpy._fast = None
    axpy[4, 64, FREE_B, 0](A, x, y)
    assert machine.orders == [] and len(machine.launches) == 3
    assert machine.capture_queries == [FREE_B] * 3
    machine.capturing.clear()
    axpy[4, 64, FREE_B, 0](A, x, y)
    assert machine.orders == [(FREE_B, FREE_A)]


CASES = [
    # (CuPy's current stream, the launch stream, the expected waits)
    (0, None, []),                              # everything on the legacy stream
    (BLOCKING_A, None, []),                     # the legacy stream orders blocking streams
    (FREE_A, None, [(0, FREE_A)]),              # the case the old code got right
    (FREE_A, FREE_A, []),                       # launched on CuPy's own stream
    (FREE_A, FREE_B, [(FREE_B, FREE_A)]),       # the race: the launch stream must wait
    (0, FREE_B, [(FREE_B, 1)]),                 # CuPy's null stream, non-blocking launch
    (0, BLOCKING_B, []),                        # ... a blocking launch stream: ordered
    (BLOCKING_A, BLOCKING_B, [(BLOCKING_B, BLOCKING_A)]),
]


@pytest.mark.parametrize("cupy_stream,stream,expected", CASES)
@pytest.mark.parametrize("path", ["fast", "general", "interface"])
def test_cupy_producer_orders_the_launch_stream(machine, cupy_stream, stream, expected,
                                                path):
    x, y = FakeCupy(0x10000, 256), FakeCupy(0x20000, 256)
    if path == "interface":
        x, y = ViaInterface(x), ViaInterface(y)
    assert launch_twice((A, x, y)) == (path != "interface")
    if path == "general":
        axpy._fast = None
        axpy._no_fast.update(axpy._specs)
    CUPY_STREAM.ptr = cupy_stream
    machine.orders.clear()
    axpy[4, 64, stream, 0](A, x, y)
    assert machine.orders == expected            # once for both arrays
    assert machine.launches[-1][1] == stream
    assert len(machine.launches) == 3


def test_numba_bound_stream_orders_the_launch_stream(machine):
    y = device_buffer(0x20000, 256, 0)
    machine.memory(0x10000, 0)
    for bound, stream, expected in ((0, FREE_B, []),           # numba's default: no stream
                                    (FREE_A, None, [(0, FREE_A)]),
                                    (FREE_A, FREE_B, [(FREE_B, FREE_A)]),
                                    (BLOCKING_A, None, [])):
        machine.orders.clear()
        axpy[4, 64, stream, 0](A, FakeNumba(0x10000, 256, stream=bound), y)
        assert machine.orders == expected, (bound, stream)


def test_no_wait_when_the_launch_is_refused(machine):
    CUPY_STREAM.ptr = FREE_A
    machine.memory(0x30000, 1)
    with pytest.raises(DeviceMismatchError):
        axpy[4, 64](A, FakeCupy(0x10000, 256), device_buffer(0x30000, 256, 1))
    with pytest.raises(TypeError):               # a dtype the kernel does not take
        x = FakeCupy(0x10000, 256)
        x.dtype = np.dtype(np.float64)
        axpy[4, 64](A, x, FakeCupy(0x20000, 256))
    assert machine.orders == [] and machine.launches == []


def test_events_come_from_a_reused_pool(monkeypatch):
    """`order_after` (the one helper every protocol path uses) records and waits on one
    event per thread and device, created once, not per launch."""
    created, calls = [], []

    class Driver:
        CUevent_flags = types.SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)

        def cuEventCreate(self, flags):
            created.append(flags)
            return (0, f"event{len(created)}")

        def cuEventRecord(self, event, stream):
            calls.append(("record", event, stream))
            return (0,)

        def cuStreamWaitEvent(self, stream, event, flags):
            calls.append(("wait", event, stream))
            return (0,)

    monkeypatch.setattr(memory, "driver", lambda: Driver())
    monkeypatch.setattr(memory, "_device_of_context", lambda: 0)
    monkeypatch.setattr(memory._tls, "events", {}, raising=False)
    monkeypatch.setattr(aa, "stream_flags", lambda handle: FLAGS[handle])
    monkeypatch.setattr(aa, "stream_capturing", lambda handle: False)
    for _ in range(5):
        aa.order_launch_after(FREE_B, [FREE_A])
    assert created == [2]
    assert calls == [("record", "event1", FREE_A), ("wait", "event1", FREE_B)] * 5


def test_stream_queries_ask_the_driver(monkeypatch):
    driver_module = importlib.import_module("cupric.runtime._driver")
    asked = []

    class Driver:
        def cuStreamGetFlags(self, handle):
            asked.append(handle)
            return (0, FLAGS[handle])

        def cuStreamIsCapturing(self, handle):
            asked.append(handle)
            return (0, 1 if handle == FREE_B else 0)

    monkeypatch.setattr(driver_module, "driver", lambda: Driver())
    assert aa.stream_flags(FREE_A) == 1 and aa.stream_flags(BLOCKING_A) == 0
    assert aa.stream_capturing(FREE_B) and not aa.stream_capturing(FREE_A)
    assert asked == [FREE_A, BLOCKING_A, FREE_B, FREE_A]


# -- the pointer query -------------------------------------------------------------------------

def fake_query(answers, result=0):
    """A stand-in for libcuda's cuPointerGetAttributes writing each attribute with its C
    width (unsigned int, bool, int, pointer)."""
    widths = {2: ctypes.c_uint32, 8: ctypes.c_bool, 9: ctypes.c_int32, 17: ctypes.c_uint64}

    def query(count, attributes, data, ptr):
        if result:
            return result
        for i in range(count):
            attribute = attributes[i]
            if ptr in answers:
                widths[attribute].from_address(data[i]).value = answers[ptr][attribute]
        return 0
    return query


@pytest.fixture
def query(monkeypatch):
    monkeypatch.setattr(aa.sys, "platform", "linux")

    def install(answers, result=0):
        monkeypatch.setattr(aa._PointerQuery, "function", fake_query(answers, result))
    return install


def test_pointer_facts_reads_each_attribute(query):
    query({0x1000: {2: 2, 8: False, 9: 1, 17: 0},
           0x2000: {2: 2, 8: True, 9: 0, 17: 0},
           0x3000: {2: 2, 8: False, 9: 0, 17: 0xFFFF_0000_1234},
           0x4000: {2: 1, 8: False, 9: 0, 17: 0}})
    assert aa.pointer_facts(0x1000) == (aa.MEMORY_DEVICE, 1, False, 0)
    assert aa.pointer_facts(0x2000) == (aa.MEMORY_DEVICE, 0, True, 0)
    assert aa.pointer_facts(0x3000) == (aa.MEMORY_DEVICE, 0, False, 0xFFFF_0000_1234)
    assert aa.pointer_facts(0x4000) == (aa.MEMORY_HOST, 0, False, 0)
    # Slots are cleared between calls: an address the driver does not know reads 0s.
    assert aa.pointer_facts(0x5000) == (0, -1, False, 0)


def test_pointer_facts_without_the_pool_attribute(query, monkeypatch):
    """A driver that refuses the pool attribute for memory outside pools: the other
    attributes are asked alone and the pool reads 0."""
    answers = {0x1000: {2: 2, 8: False, 9: 1, 17: 0}}
    inner = fake_query(answers)
    counts = []

    def refusing(count, attributes, data, ptr):
        counts.append(count)
        return 1 if count == 4 else inner(count, attributes, data, ptr)

    monkeypatch.setattr(aa._PointerQuery, "function", refusing)
    assert aa.pointer_facts(0x1000) == (aa.MEMORY_DEVICE, 1, False, 0)
    assert counts == [4, 3]


def test_pointer_facts_raises_the_typed_error(query):
    query({}, result=201)
    from cupric.runtime.errors import InvalidContextError
    with pytest.raises(InvalidContextError, match="where address 0x5000 lives"):
        aa.pointer_facts(0x5000)


def test_device_problem_rules(monkeypatch):
    facts = {0x1000: (aa.MEMORY_DEVICE, 1, False, 0), 0x2000: (aa.MEMORY_DEVICE, 0, False, 0)}
    asked = []

    def pointer_facts(ptr):
        asked.append(ptr)
        return facts[ptr]

    monkeypatch.setattr(aa, "pointer_facts", pointer_facts)
    monkeypatch.setattr(pool, "_PEERS", set())
    assert aa.device_problem(0x2000, 0, 0) is None and asked == []   # its word suffices
    assert aa.device_problem(0, 1, 0) is None and asked == []        # empty
    assert aa.device_problem(0x1000, 1, 0) == 1
    assert aa.device_problem(0x1000, None, 0) == 1
    assert aa.device_problem(0x2000, 1, 0) is None                   # the driver disagrees
    assert aa.device_problem(0x1000, None, 1) is None
