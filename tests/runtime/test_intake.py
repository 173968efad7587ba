"""`cupric.runtime.intake` without a GPU: every kind of array argument (DeviceBuffers and
their views, fakes of CuPy, PyTorch and numba-cuda arrays as those libraries describe
them, plain CUDA Array Interface producers, DLPack producers, host arrays) read into
pointer, shape, strides, dtype, device, read-only flag and producer stream; the stream
waits the consumer gets; closed buffers and views of them; other devices; the one stream
resolver."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.runtime import array_adapters as aa
from cupric.runtime import intake, memory
from cupric.runtime.errors import ClosedError, DeviceMismatchError
from cupric.runtime.stream import Stream

F32 = np.dtype(np.float32)


# -- fakes -------------------------------------------------------------------------------------

class CupyStream:
    ptr = 0


CUPY_STREAM = CupyStream()


class CupyMemory:
    def __init__(self, ptr, device):
        self.ptr, self.device_id = ptr, device


class FakeCupy:
    """cupy.ndarray's attributes (current-stream interface, version 3)."""

    def __init__(self, ptr, shape, strides=None, device=0):
        self.dtype, self.shape = F32, tuple(shape)
        self.strides = strides or tuple(4 * int(np.prod(self.shape[i + 1:]))
                                        for i in range(len(self.shape)))
        self.data = CupyMemory(ptr, device)


class FakeTensor:
    """torch.Tensor's attributes; a host tensor refuses the interface and says CPU through
    DLPack, as PyTorch does."""

    def __init__(self, ptr, shape, device=0, is_cuda=True):
        self.dtype, self.shape = "float32", tuple(shape)
        self._ptr, self._device, self.is_cuda = ptr, device, is_cuda
        self.requires_grad, self.layout = False, STRIDED

    def stride(self, dim=None):
        steps = tuple(int(np.prod(self.shape[i + 1:])) for i in range(len(self.shape)))
        return steps if dim is None else steps[dim]

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return self._device

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    def __dlpack__(self, **kwargs):
        raise AssertionError("a host tensor is refused by its device before export")

    def __dlpack_device__(self):
        return (1, 0)


STRIDED = object()


class FakeNumba:
    """numba-cuda's DeviceNDArray attributes (bound stream; no device of its own)."""

    def __init__(self, ptr, shape, stream=0):
        self.dtype, self.shape, self.strides = F32, tuple(shape), (4,)
        self.device_ctypes_pointer = type("P", (), {"value": ptr})()
        self.stream = stream


class Interface:
    """A plain CUDA Array Interface producer."""

    def __init__(self, ptr, shape, strides=None, readonly=False, stream=None,
                 typestr="<f4"):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (ptr, readonly),
            "version": 3, "strides": strides, "stream": stream}


class DLPackOnly:
    """A DLPack producer (here: a DeviceBuffer exported through the protocol)."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self, **kwargs):
        return self.buf.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


@pytest.fixture(autouse=True)
def adapters(monkeypatch):
    aa.register_array_adapter(FakeCupy, aa.CupyAdapter(lambda: CUPY_STREAM.ptr))
    aa.register_array_adapter(FakeTensor, aa.TorchAdapter({"float32": "<f4"}, STRIDED))
    aa.register_array_adapter(FakeNumba, aa.NumbaAdapter())
    CUPY_STREAM.ptr = 0
    yield
    for cls in (FakeCupy, FakeTensor, FakeNumba):
        aa.unregister_array_adapter(cls)


@pytest.fixture
def waits(monkeypatch):
    """The (consumer, producers) pairs intake hands to the event-wait machinery."""
    log = []
    monkeypatch.setattr(aa, "order_launch_after",
                        lambda consumer, producers: log.append((consumer, list(producers))))
    return log


@pytest.fixture
def facts(monkeypatch):
    """What the driver says about pointers: ptr -> (memory type, device, managed, pool)."""
    table = {}
    monkeypatch.setattr(aa, "pointer_facts", lambda ptr: table.get(ptr, (0, -1, False, 0)))
    return table


def buffer(ptr=0x10000, shape=(64,), device=0):
    return memory.borrow(ptr, shape, None, F32, device=device)


# -- reading -----------------------------------------------------------------------------------

def test_device_buffer_and_its_views():
    buf = buffer(0x10000, (8, 16))
    info = intake.read(buf)
    assert (info.ptr, info.shape, info.strides, info.dtype) == (0x10000, (8, 16), (64, 4),
                                                                 F32)
    assert (info.device, info.readonly, info.kind, info.owner) == (0, False, "buffer", buf)
    assert (info.itemsize, info.ndim, info.size, info.nbytes) == (4, 2, 128, 512)
    view = buf[2:4, ::2]
    info = intake.read(view)
    assert (info.ptr, info.shape, info.strides) == (0x10000 + 128, (2, 8), (64, 8))
    assert intake.as_buffer(view) is view


def test_cupy_torch_numba_read_through_their_attributes():
    CUPY_STREAM.ptr = 0
    info = intake.read(FakeCupy(0x20000, (4, 6)))
    assert (info.ptr, info.shape, info.strides, info.kind) == (0x20000, (4, 6), (24, 4),
                                                               "cupy")
    assert info.producer == 1 and info.device == 0  # CuPy's null stream: the legacy one
    info = intake.read(FakeTensor(0x30000, (3, 5), device=0))
    assert (info.ptr, info.shape, info.strides, info.kind) == (0x30000, (3, 5), (20, 4),
                                                               "torch")
    assert info.producer is None and info.device == 0 and info.torch_dtype is None
    info = intake.read(FakeNumba(0x40000, (7,), stream=0x9000))
    assert (info.ptr, info.kind, info.producer, info.device) == (0x40000, "numba", 0x9000, -1)


def test_interface_producers_and_their_flags():
    info = intake.read(Interface(0x50000, (4, 4), strides=(4, 16), readonly=True,
                                 stream=0x7000))
    assert (info.kind, info.strides, info.readonly, info.producer) == \
        ("cai", (4, 16), True, 0x7000)
    with pytest.raises(intake.ReadOnlyError, match="out is read-only"):
        intake.array_info(Interface(0x50000, (4,), readonly=True), name="out",
                          writable=True)
    with pytest.raises(ValueError, match="version"):
        bad = Interface(0x50000, (4,))
        bad.__cuda_array_interface__["version"] = 9
        intake.read(bad)


def test_dlpack_producers_are_borrowed():
    buf = buffer(0x60000, (5, 3))
    info = intake.read(DLPackOnly(buf))
    assert (info.kind, info.ptr, info.shape, info.strides) == ("dlpack", 0x60000, (5, 3),
                                                               (12, 4))
    assert isinstance(info.owner, memory.DeviceBuffer) and info.owner is not buf
    info.owner.close()                       # hands the exported tensor back
    borrowed = intake.as_buffer(DLPackOnly(buf))
    assert borrowed.ptr == 0x60000
    borrowed.close()


def test_host_memory_and_non_arrays_are_typed_errors():
    with pytest.raises(intake.HostMemoryError, match="to_device"):
        intake.read(np.zeros(4, np.float32))
    with pytest.raises(intake.HostMemoryError, match="CPU"):
        intake.read(FakeTensor(0x1000, (4,), is_cuda=False))
    with pytest.raises(intake.HostMemoryError, match="host array"):
        intake.read(type("HostLike", (), {"__array__": lambda self: np.zeros(2)})())
    with pytest.raises(intake.NotAnArrayError, match="neither"):
        intake.read(object())
    assert issubclass(intake.HostMemoryError, TypeError)
    with pytest.raises(intake.HostMemoryError, match="^x: "):
        intake.array_info(np.zeros(2), name="x")


def test_strides_that_are_not_whole_items():
    with pytest.raises(intake.StrideError, match="a: a stride of 6 bytes"):
        intake.array_info(Interface(0x1000, (4,), strides=(6,)), name="a")
    with pytest.raises(intake.StrideError):
        intake.array_info(FakeCupy(0x1000, (4,), strides=(2,)))
    assert issubclass(intake.StrideError, TypeError) and \
        issubclass(intake.StrideError, ValueError)


def test_as_buffer_borrows_and_keeps_the_owner():
    arr = FakeCupy(0x20000, (4, 6))
    buf = intake.as_buffer(arr)
    assert isinstance(buf, memory.DeviceBuffer)
    assert (buf.ptr, buf.shape, buf.strides) == (0x20000, (4, 6), (24, 4))
    assert buf._alloc.owner is arr and not buf.owns_memory


# -- closed buffers ----------------------------------------------------------------------------

def test_closed_buffers_and_views_are_refused():
    buf = buffer()
    view = buf[8:16]
    buf.close()
    for closed in (buf, view):
        for call in (intake.read, intake.array_info, intake.as_buffer,
                     lambda b: intake.ArrayInfo(*intake.array_parts(b)),
                     intake.check_open):
            with pytest.raises(ClosedError, match="closed"):
                call(closed)
    with pytest.raises(ClosedError, match="^x is a closed DeviceBuffer"):
        intake.as_buffer(view, name="x")
    # Closing a view closes the whole allocation, and every other view with it.
    other = buffer(0x90000)
    part = other[:4]
    part.close()
    with pytest.raises(ClosedError):
        intake.read(other[4:])


def test_info_of_a_closed_buffer_refuses_as_buffer():
    buf = buffer()
    info = intake.read(buf)
    buf.close()
    with pytest.raises(ClosedError):
        info.as_buffer()


# -- stream ordering ---------------------------------------------------------------------------

def test_producer_streams_are_ordered_only_where_cuda_does_not(waits):
    CUPY_STREAM.ptr = 0
    intake.array_info(FakeCupy(0x1000, (4,)))                  # legacy after legacy
    assert waits == []
    CUPY_STREAM.ptr = 0x7000
    intake.array_info(FakeCupy(0x1000, (4,)), 0x5000)
    assert waits == [(0x5000, [0x7000])]
    waits.clear()
    intake.array_info(FakeCupy(0x1000, (4,)), 0x5000, order=False)
    assert waits == []
    info = intake.array_info(FakeNumba(0x1000, (4,), stream=0x9000))
    assert waits == [(0, [0x9000])] and info.producer == 0x9000
    waits.clear()
    intake.array_info(FakeTensor(0x1000, (4,)), 0x5000)         # PyTorch names none
    assert waits == []


def test_as_buffer_orders_once_per_producer(waits):
    CUPY_STREAM.ptr = 0x7000
    ordered = []
    for _ in range(3):
        intake.as_buffer(FakeCupy(0x1000, (4,)), 0x5000, ordered=ordered)
    assert waits == [(0x5000, [0x7000])] and ordered == [0x7000]


def test_a_buffers_own_stream_is_waited_for(waits):
    buf = buffer()
    buf._stream = 0x3000
    intake.as_buffer(buf, 0x5000)
    assert waits == [(0x5000, [0x3000])]


def test_order_after_resolves_the_consumer(waits):
    intake.order_after(None, (1,))
    assert waits == []
    intake.order_after(None, (0x7000, 1))
    assert waits == [(0, [0x7000])]


# -- devices -----------------------------------------------------------------------------------

def test_other_devices_are_refused_and_reachable_memory_accepted(facts):
    facts[0x1000] = (aa.MEMORY_DEVICE, 1, False, 0)
    with pytest.raises(DeviceMismatchError, match="x lives on device 1") as info:
        intake.array_info(FakeCupy(0x1000, (4,), device=1), name="x", device=0)
    assert (info.value.device, info.value.expected) == (1, 0)
    with pytest.raises(DeviceMismatchError):
        intake.array_info(buffer(0x1000, device=1), device=0)
    with pytest.raises(DeviceMismatchError):                   # numba: the driver says
        intake.array_info(FakeNumba(0x1000, (4,)), device=0)
    facts[0x2000] = (aa.MEMORY_DEVICE, 1, True, 0)              # managed: reachable
    intake.array_info(FakeNumba(0x2000, (4,)), device=0)
    facts[0x3000] = (aa.MEMORY_HOST, -1, False, 0)              # pinned host memory
    intake.array_info(Interface(0x3000, (4,)), device=0)
    assert intake.array_info(FakeCupy(0x1000, (4,), device=0), device=0).device == 0


def test_borrowed_buffer_device_is_asked_once(facts):
    facts[0x5000] = (aa.MEMORY_DEVICE, 0, False, 0)
    buf = buffer(0x5000, device=-1)
    intake.array_info(buf, device=0)
    assert buf._alloc.device == 0


# -- streams -----------------------------------------------------------------------------------

class CudaStreamProtocol:
    def __cuda_stream__(self):
        return (0, 0x4400)


def test_the_one_stream_resolver():
    assert intake.stream_handle(None) == 0
    assert intake.stream_handle(0x1234) == 0x1234
    assert intake.stream_handle(CudaStreamProtocol()) == 0x4400
    assert intake.stream_handle(type("T", (), {"cuda_stream": 0x55})()) == 0x55  # PyTorch
    assert intake.stream_handle(type("C", (), {"ptr": 0x66})()) == 0x66          # CuPy
    assert intake.stream_handle(np.uint64(9)) == 9
    for bad in (True, -1, "0", 1.5):
        with pytest.raises(TypeError):
            intake.stream_handle(bad)
    keep = CudaStreamProtocol()
    assert intake.stream_parts(keep) == (0x4400, keep)
    assert intake.stream_parts(7) == (7, None)
    from cupric.runtime.memory import stream_handle
    from cupric.runtime.shared_handles import stream_parts
    assert stream_handle is intake.stream_handle and stream_parts is intake.stream_parts


def test_a_closed_stream_is_refused():
    stream = Stream._wrap(None, 0x8800, owned=False)
    assert intake.stream_handle(stream) == 0x8800
    stream.close()
    with pytest.raises(ClosedError, match="Stream is closed"):
        intake.stream_handle(stream)
