"""CUDA Array Interface and DLPack on the CPU lane: dict building and parsing, struct
layout, capsule round trips with fake producers, validation errors. No GPU involved:
pointers here are host addresses that nothing dereferences as device memory."""

from __future__ import annotations

import ctypes
import gc
import weakref

import numpy as np
import pytest

from cupric.runtime import dlpack as dl
from cupric.runtime import interop
from cupric.runtime import memory as m
from cupric.runtime.errors import ClosedError


def _host_borrow(array, **kwargs):
    return m.borrow(array.ctypes.data, array.shape, array.strides, array.dtype, owner=array,
                    device=kwargs.pop("device", 0), **kwargs)


# ---------------------------------------------------------------------------- CAI


def test_cai_export_contiguous_and_strided():
    host = np.zeros((4, 6), np.float32)
    buf = _host_borrow(host)
    cai = buf.__cuda_array_interface__
    assert cai == {"shape": (4, 6), "typestr": "<f4", "data": (host.ctypes.data, False),
                   "version": 3, "strides": None, "stream": None}
    view = buf[:, ::2]
    cai = view.__cuda_array_interface__
    assert cai["strides"] == (24, 8) and cai["shape"] == (4, 3)


def test_cai_export_advertises_stream():
    buf = _host_borrow(np.zeros(3))
    buf.stream = 0x1234
    assert buf.__cuda_array_interface__["stream"] == 0x1234
    buf.stream = 0  # the legacy default stream is advertised as 1 (0 is forbidden)
    assert buf.__cuda_array_interface__["stream"] == 1
    with pytest.raises(TypeError):
        buf.stream = "nope"


def test_cai_export_readonly_and_structured():
    host = np.zeros(3, [("a", "<i4"), ("b", "<f8")])
    buf = _host_borrow(host, readonly=True)
    cai = buf.__cuda_array_interface__
    assert cai["data"][1] is True and cai["descr"] == host.dtype.descr


class FakeCai:
    def __init__(self, array, **overrides):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str,
            "data": (array.ctypes.data, False), "version": 3,
            "strides": array.strides, "stream": None, **overrides}


def test_parse_round_trip():
    host = np.zeros((5, 4), np.int16)[::2, 1:]
    info = interop.parse_cuda_array_interface(FakeCai(host).__cuda_array_interface__)
    assert info == {"ptr": host.ctypes.data, "shape": (3, 3), "strides": host.strides,
                    "dtype": np.dtype(np.int16), "readonly": False, "stream": None}
    info = interop.parse_cuda_array_interface({"shape": (2, 3), "typestr": "<f8",
                                               "data": (64, True), "version": 2})
    assert info["strides"] == (24, 8) and info["readonly"] is True


@pytest.mark.parametrize("change,error,match", [
    ({"version": 9}, ValueError, "version 9"),
    ({"mask": object()}, ValueError, "masked"),
    ({"strides": (8,)}, ValueError, "1 strides for 2"),
    ({"stream": 0}, ValueError, "forbids"),
    ({"stream": 1.5}, TypeError, "int or None"),
    ({"data": 5}, TypeError, "pointer, read_only"),
    ({"typestr": "|O"}, TypeError, "Python objects"),
    ({"shape": 3}, TypeError, "tuple of ints"),
])
def test_parse_errors(change, error, match):
    cai = FakeCai(np.zeros((2, 2))).__cuda_array_interface__
    cai.update(change)
    with pytest.raises(error, match=match):
        interop.parse_cuda_array_interface(cai)


def test_parse_missing_key():
    with pytest.raises(TypeError, match="'typestr'"):
        interop.parse_cuda_array_interface({"shape": (1,), "data": (0, False), "version": 3})
    with pytest.raises(TypeError, match="dict"):
        interop.parse_cuda_array_interface([1])


def test_as_device_array_borrows_cai_and_keeps_owner_alive():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    producer = FakeCai(host)
    alive = weakref.ref(producer)
    buf = interop.as_device_array(producer)
    assert (buf.ptr, buf.shape, buf.strides, buf.dtype) == (host.ctypes.data, (3, 4),
                                                             (16, 4), np.float32)
    assert not buf.owns_memory
    del producer
    gc.collect()
    assert alive() is not None  # the borrow keeps its producer alive
    view = buf[1:]
    buf.close()
    gc.collect()
    assert alive() is None and view.closed
    with pytest.raises(ClosedError):
        interop.as_device_array(view)


def test_as_device_array_of_a_device_buffer_is_itself():
    buf = _host_borrow(np.zeros(3))
    assert interop.as_device_array(buf) is buf


def test_as_device_array_refuses_host_arrays():
    with pytest.raises(TypeError, match=r"to_device\(array\) first"):
        interop.as_device_array(np.zeros(3))

    class HostOnly:
        __array_interface__ = np.zeros(2).__array_interface__

    with pytest.raises(TypeError, match="host array"):
        interop.as_device_array(HostOnly())
    with pytest.raises(TypeError, match="neither"):
        interop.as_device_array(object())


def test_as_device_array_cpu_dlpack_object_says_to_copy():
    # A NumPy-like host object offering only DLPack (like a PyTorch CPU tensor).
    class HostDlpack:
        def __init__(self):
            self.a = np.zeros(3)

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    with pytest.raises(TypeError, match="to_device"):
        interop.as_device_array(HostDlpack())
    assert not interop.is_device_array(HostDlpack())


def test_cai_property_that_raises_falls_back_to_dlpack_or_explains():
    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise ValueError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    with pytest.raises(TypeError, match="non-CUDA tensor"):
        interop.as_device_array(Broken())
    assert not interop.is_device_array(Broken())


def test_is_device_array():
    assert interop.is_device_array(_host_borrow(np.zeros(2)))
    assert interop.is_device_array(FakeCai(np.zeros(2)))
    assert not interop.is_device_array(np.zeros(2))


# ---------------------------------------------------------------------------- DLPack


def test_struct_layout_matches_dlpack_h():
    # Offsets of dlpack.h's structs on a 64-bit platform.
    assert ctypes.sizeof(dl.DLDevice) == 8
    assert ctypes.sizeof(dl.DLDataType) == 4
    assert [getattr(dl.DLTensor, f).offset for f in
            ("data", "device", "ndim", "dtype", "shape", "strides", "byte_offset")] == \
        [0, 8, 16, 20, 24, 32, 40]
    assert ctypes.sizeof(dl.DLTensor) == 48
    assert (dl.DLManagedTensor.manager_ctx.offset, dl.DLManagedTensor.deleter.offset) == (48, 56)
    assert ctypes.sizeof(dl.DLManagedTensor) == 64
    assert [getattr(dl.DLManagedTensorVersioned, f).offset for f in
            ("version", "manager_ctx", "deleter", "flags", "dl_tensor")] == [0, 8, 16, 24, 32]
    assert ctypes.sizeof(dl.DLManagedTensorVersioned) == 80


@pytest.mark.parametrize("dtype,code", [
    ("?", (6, 8, 1)), ("i1", (0, 8, 1)), ("i8", (0, 64, 1)), ("u2", (1, 16, 1)),
    ("f2", (2, 16, 1)), ("f4", (2, 32, 1)), ("f8", (2, 64, 1)), ("c8", (5, 64, 1)),
    ("c16", (5, 128, 1)),
])
def test_dtype_codes(dtype, code):
    assert dl.dtype_to_dlpack(np.dtype(dtype)) == code
    assert dl.dtype_from_dlpack(*code) == np.dtype(dtype)


def test_dtype_errors():
    with pytest.raises(BufferError, match="no DLPack"):
        dl.dtype_to_dlpack(np.dtype("U3"))
    with pytest.raises(BufferError, match="big-endian"):
        dl.dtype_to_dlpack(np.dtype(">f4"))
    with pytest.raises(TypeError, match="lanes"):
        dl.dtype_from_dlpack(2, 32, 4)
    with pytest.raises(TypeError, match="no NumPy dtype"):
        dl.dtype_from_dlpack(2, 8, 1)


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (1, 3), (2, 0)])
def test_export_parse_round_trip(max_version):
    host = np.arange(40, dtype=np.float32).reshape(5, 8)
    buf = _host_borrow(host)[1:, ::-2]
    before = dl.export_count()
    capsule = buf.__dlpack__(max_version=max_version, stream=-1)
    versioned = max_version is not None and max_version[0] >= 1
    assert ("dltensor_versioned" if versioned else "dltensor") in repr(capsule)
    assert dl.export_count() == before + 1
    info = dl.parse_capsule(capsule)
    assert "used_" in repr(capsule)
    assert info["ptr"] == buf.ptr and info["shape"] == (4, 4)
    assert info["strides"] == buf.strides and info["dtype"] == np.float32
    assert info["device"] == (dl.DEVICE_CUDA, 0) and info["readonly"] is False
    with pytest.raises(ValueError, match="already consumed"):
        dl.parse_capsule(capsule)
    del capsule
    gc.collect()
    assert dl.export_count() == before + 1  # the consumer owns it until it calls the deleter
    info["release"]()
    assert dl.export_count() == before


def test_unconsumed_capsule_hands_the_tensor_back():
    before = dl.export_count()
    buf = _host_borrow(np.zeros(4))
    alive = weakref.ref(buf._alloc)
    capsule = buf.__dlpack__(stream=-1)
    del buf
    gc.collect()
    assert alive() is not None  # the export keeps the allocation alive
    del capsule
    gc.collect()
    assert dl.export_count() == before
    assert alive() is None


def test_versioned_flags():
    buf = _host_borrow(np.zeros(4), readonly=True)
    info = dl.parse_capsule(buf.__dlpack__(max_version=(1, 0), stream=-1))
    assert info["readonly"] is True
    info["release"]()


def test_export_arguments():
    buf = _host_borrow(np.zeros(4), device=0)
    assert buf.__dlpack_device__() == (dl.DEVICE_CUDA, 0)
    with pytest.raises(BufferError, match="does not copy"):
        buf.__dlpack__(dl_device=(dl.DEVICE_CPU, 0))
    with pytest.raises(ValueError, match="ambiguous"):
        buf.__dlpack__(stream=0)
    with pytest.raises(TypeError, match="copy must be"):
        buf.__dlpack__(copy="yes", stream=-1)
    odd = m.borrow(np.zeros(8).ctypes.data, (3,), (6,), np.float32, device=0)
    with pytest.raises(BufferError, match="multiples of the item size"):
        odd.__dlpack__(stream=-1)
    buf.close()
    with pytest.raises(ClosedError):
        buf.__dlpack__()


def test_numpy_capsules_parse_and_cpu_is_refused():
    host = np.arange(6, dtype=np.int64).reshape(2, 3)
    info = dl.parse_capsule(host.__dlpack__(max_version=(1, 0)))
    assert info["ptr"] == host.ctypes.data and info["device"] == (dl.DEVICE_CPU, 0)
    assert info["strides"] == host.strides
    info["release"]()
    with pytest.raises(TypeError, match="to_device"):
        dl.from_dlpack(host)
    with pytest.raises(TypeError, match="to_device"):
        dl.from_dlpack(host.__dlpack__())


class FakeCudaProducer:
    """Exports a host array labelled as CUDA memory, counting deleter calls."""

    def __init__(self, array, versioned=True):
        self.array = array
        self.versioned = versioned
        self.streams = []
        self.inner = _host_borrow(array)

    def __dlpack_device__(self):
        return (dl.DEVICE_CUDA, 0)

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        return self.inner.__dlpack__(max_version=max_version if self.versioned else None,
                                     stream=-1)


@pytest.mark.parametrize("versioned", [True, False])
def test_from_dlpack_borrows_and_hands_back(versioned):
    before = dl.export_count()
    producer = FakeCudaProducer(np.arange(10, dtype=np.uint16), versioned)
    buf = dl.from_dlpack(producer)
    assert producer.streams == [1]  # no stream given: the legacy default stream
    assert buf.ptr == producer.array.ctypes.data and buf.dtype == np.uint16
    assert not buf.owns_memory
    assert dl.export_count() == before + 1
    buf.close()
    assert dl.export_count() == before  # the deleter ran at close
    buf2 = dl.from_dlpack(producer, stream=77)
    assert producer.streams[-1] == 77
    del buf2
    gc.collect()
    assert dl.export_count() == before + 1  # queued, not run inside garbage collection
    from cupric.runtime import _lifetime
    _lifetime.drain()
    assert dl.export_count() == before


def test_from_dlpack_old_producer_without_max_version():
    class Old(FakeCudaProducer):
        def __dlpack__(self, stream=None):
            self.streams.append(stream)
            return self.inner.__dlpack__(stream=-1)

    buf = dl.from_dlpack(Old(np.zeros(3)))
    assert buf.shape == (3,)
    buf.close()


def test_from_dlpack_of_a_capsule_directly():
    inner = _host_borrow(np.ones(5, np.float64))
    buf = dl.from_dlpack(inner.__dlpack__(stream=-1))
    assert buf.ptr == inner.ptr and buf.shape == (5,)
    buf.close()
