"""Array adapters on the kernel launch path, without a GPU: fake CuPy, PyTorch and
numba-cuda arrays (their attributes and their `__cuda_array_interface__` as those libraries
build them) are registered with the adapters, and every launch value, specialization key,
alias extent, stream ordering and error must be what the interface path gives."""

from __future__ import annotations

import ctypes
import importlib
import re
import subprocess
import sys
import types

import numpy as np
import pytest

import cupric
from cupric.runtime import array_adapters as aa
from cupric.types import Array, f32

kmod = importlib.import_module("cupric.compiler.kernel")
memory = importlib.import_module("cupric.runtime.memory")


def _c_contiguous(shape, strides, itemsize):
    """The libraries' own test (sizes of 1 ignored, empty arrays count), written out."""
    if 0 in shape:
        return True
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != expect:
                return False
            expect *= n
    return True


def _c_strides(shape, itemsize):
    out, step = [], itemsize
    for n in reversed(shape):
        out.insert(0, step)
        step *= max(n, 1)
    return tuple(out)


# -- fakes -------------------------------------------------------------------------------------

class _Stream:
    ptr = 0


CUPY_STREAM = _Stream()


class FakeMemoryPointer:
    def __init__(self, ptr):
        self.ptr = ptr


class FakeCupy:
    """cupy.ndarray's attributes and interface (version 3, the current stream)."""

    def __init__(self, ptr, shape, dtype=np.float32, strides=None):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.strides = tuple(strides) if strides is not None else \
            _c_strides(self.shape, self.dtype.itemsize)
        self.data = FakeMemoryPointer(ptr)

    @property
    def __cuda_array_interface__(self):
        size = int(np.prod(self.shape))
        contiguous = _c_contiguous(self.shape, self.strides, self.dtype.itemsize)
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": self.dtype.descr,
                "stream": CUPY_STREAM.ptr or 1, "version": 3,
                "strides": None if contiguous else self.strides,
                "data": (self.data.ptr if size > 0 else 0, False)}


class FakeTorchDtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"fake_torch.{self.name}"


TORCH_DTYPES = {name: FakeTorchDtype(name) for name in ("float32", "float16", "bfloat16",
                                                         "int64", "complex64", "float8")}
# PyTorch's own table; float8 has no typestr (its interface raises KeyError).
TORCH_TYPESTRS = {TORCH_DTYPES["float32"]: "<f4", TORCH_DTYPES["float16"]: "<f2",
                  TORCH_DTYPES["bfloat16"]: "<V2", TORCH_DTYPES["int64"]: "<i8",
                  TORCH_DTYPES["complex64"]: "<c8"}
STRIDED, SPARSE = object(), object()
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "complex64": 8,
            "float8": 1}


class FakeSize(tuple):
    """torch.Size: a tuple subclass."""


class FakeTensor:
    """torch.Tensor's attributes and interface (version 2, no stream)."""

    def __init__(self, ptr, shape, dtype="float32", strides=None, is_cuda=True,
                 requires_grad=False, layout=STRIDED):
        self.dtype = TORCH_DTYPES[dtype]
        self.shape = FakeSize(shape)
        self._itemsize = ITEMSIZE[dtype]
        self._strides = tuple(strides) if strides is not None else \
            tuple(s // self._itemsize for s in _c_strides(self.shape, self._itemsize))
        self._ptr = ptr
        self.is_cuda = is_cuda
        self.requires_grad = requires_grad
        self.layout = layout

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        count = 1
        for n in self.shape:
            count *= n
        return count

    def is_contiguous(self):
        byte_strides = tuple(s * self._itemsize for s in self._strides)
        return _c_contiguous(tuple(self.shape), byte_strides, self._itemsize)

    def data_ptr(self):
        return self._ptr

    @property
    def __cuda_array_interface__(self):
        if not self.is_cuda:
            raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")
        if self.layout is not STRIDED:
            raise AttributeError("Can't get __cuda_array_interface__ on sparse type")
        if self.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that "
                               "requires grad.")
        typestr = TORCH_TYPESTRS[self.dtype]
        byte_strides = tuple(s * self._itemsize for s in self._strides)
        contiguous = _c_contiguous(tuple(self.shape), byte_strides, self._itemsize)
        numel = int(np.prod(self.shape))
        return {"typestr": typestr, "shape": tuple(self.shape),
                "strides": None if contiguous else byte_strides,
                "data": (self._ptr if numel > 0 else 0, False), "version": 2}


class FakeNumbaStream:
    def __init__(self, handle):
        self.handle = handle

    def __int__(self):
        return self.handle

    def __eq__(self, other):
        return other == self.handle if isinstance(other, int) else other is self

    __hash__ = object.__hash__


class FakeDevicePointer:
    """The pointer object of newer numba-cuda: its interface reads `.value`."""

    def __init__(self, value):
        self.value = value


class FakeNumba:
    """numba-cuda DeviceNDArray's attributes and interface (version 3, the bound stream,
    contiguity that skips broadcast axes)."""

    def __init__(self, ptr, shape, dtype=np.float32, strides=None, stream=0):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.strides = tuple(strides) if strides is not None else \
            _c_strides(self.shape, self.dtype.itemsize)
        self.device_ctypes_pointer = FakeDevicePointer(ptr)
        self.stream = stream

    def _contiguous(self):
        size = self.dtype.itemsize
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n > 1 and s != 0:
                if s != size:
                    return False
                size *= n
        return True

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape,
                "strides": None if self._contiguous() else self.strides,
                "data": (self.device_ctypes_pointer.value or 0, False),
                "typestr": self.dtype.str,
                "stream": int(self.stream) if self.stream != 0 else None, "version": 3}


class ViaInterface:
    """The same array seen through its interface alone (the general path)."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__


@pytest.fixture(autouse=True)
def registered():
    aa.register_array_adapter(FakeCupy, aa.CupyAdapter(lambda: CUPY_STREAM.ptr))
    aa.register_array_adapter(FakeTensor, aa.TorchAdapter(TORCH_TYPESTRS, STRIDED))
    aa.register_array_adapter(FakeNumba, aa.NumbaAdapter())
    CUPY_STREAM.ptr = 0
    yield
    for cls in (FakeCupy, FakeTensor, FakeNumba):
        aa.unregister_array_adapter(cls)
    CUPY_STREAM.ptr = 0


@pytest.fixture
def orderings(monkeypatch):
    """The event record/wait pairs `order_after` issues, without a driver."""
    log = []

    class Driver:
        def cuEventRecord(self, event, stream):
            log.append(("record", stream))
            return (0,)

        def cuStreamWaitEvent(self, stream, event, flags):
            log.append(("wait", stream))
            return (0,)

    monkeypatch.setattr(memory, "driver", lambda: Driver())
    monkeypatch.setattr(memory, "_sync_event", lambda ordinal: "event")
    monkeypatch.setattr(memory, "_device_of_context", lambda: 0)
    # The producers' streams here are non-blocking: the legacy stream must wait for them
    # (tests/compiler/test_launch_checks.py covers the cases CUDA orders by itself).
    monkeypatch.setattr(aa, "stream_flags", lambda handle: 1)
    return log


def _both(array, index=0):
    """(flat, key, extents) by the adapter and by the interface path."""
    assert aa.ADAPTERS[type(array)].read(array) is not None  # really the adapter's way
    out = []
    for value in (array, ViaInterface(array)):
        flat, extents = [], []
        key = kmod._arg_parts(value, flat, extents, index)
        out.append((flat, key, extents))
    return out


# -- layouts: values and keys ------------------------------------------------------------------

F4 = 4
LAYOUTS = [
    ((256,), None),                      # contiguous 1-D
    ((4, 8), None),                      # C
    ((8, 4), (F4, 8 * F4)),              # F
    ((4, 8), (16 * F4, 2 * F4)),         # a strided view (every other row and column)
    ((), ()),                            # 0-d
    ((0,), None), ((3, 0), None),        # zero-size
    ((0, 5), (F4, 0)),                   # zero-size with odd strides
    ((16,), (-F4,)),                     # negative stride (reversed view)
    ((4, 6), (-6 * F4, F4)),             # rows reversed
    ((1, 8), (999 * F4, F4)),            # a size-1 axis with an odd stride: still C
    ((8, 1), (F4, 3 * F4)),
    ((4, 4), (0, F4)),                   # broadcast rows
]


@pytest.mark.parametrize("shape,strides", LAYOUTS)
def test_cupy_layouts_match_the_interface(shape, strides):
    by_adapter, by_interface = _both(FakeCupy(0x10000, shape, np.float32, strides))
    assert by_adapter == by_interface


@pytest.mark.parametrize("shape,strides", LAYOUTS)
def test_numba_layouts_match_the_interface(shape, strides):
    by_adapter, by_interface = _both(FakeNumba(0x10000, shape, np.float32, strides))
    assert by_adapter == by_interface


@pytest.mark.parametrize("shape,strides", [(s, None if st is None else
                                             tuple(x // F4 for x in st))
                                            for s, st in LAYOUTS if not st or min(st) >= 0])
def test_torch_layouts_match_the_interface(shape, strides):
    by_adapter, by_interface = _both(FakeTensor(0x10000, shape, "float32", strides))
    assert by_adapter == by_interface


def test_zero_size_arrays_pass_pointer_zero_and_no_extent():
    for array in (FakeCupy(0x10000, (0,)), FakeTensor(0x10000, (3, 0))):
        flat, key, ext = _both(array)[0]
        assert flat[0] == 0 and ext == []


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.uint16, np.bool_,
                                   np.complex64])
def test_dtypes_match_the_interface(dtype):
    for make in (FakeCupy, FakeNumba):
        got, expected = _both(make(0x20000, (2, 3), dtype))
        assert got == expected
        assert got[1][0] == np.dtype(dtype)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "int64", "complex64"])
def test_torch_dtypes_match_the_interface(name):
    got, expected = _both(FakeTensor(0x20000, (5,), name))
    assert got == expected
    if name == "bfloat16":  # PyTorch describes bf16 as raw 2-byte items ("<V2")
        assert got[1][0] == np.dtype("V2")


def test_structured_dtypes_take_the_interface_path():
    record = np.dtype([("a", np.float32), ("b", np.int32)])
    got, expected = _both(FakeCupy(0x20000, (4,), record))
    assert got == expected and got[1][0] == record


def test_unaligned_strides_raise_the_same_error():
    messages = []
    for value in (FakeCupy(0x1000, (4,), np.float32, (6,)),
                  ViaInterface(FakeCupy(0x1000, (4,), np.float32, (6,)))):
        with pytest.raises(TypeError, match="not a multiple of the item size") as info:
            kmod._arg_parts(value, [], [], 3)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


# -- torch: the cases the adapter leaves to the interface path --------------------------------

class UnregisteredTensor(FakeTensor):
    """The same fake, never registered: always the interface path."""


@pytest.mark.parametrize("kwargs", [dict(requires_grad=True), dict(is_cuda=False),
                                    dict(layout=SPARSE), dict(dtype="float8")])
def test_torch_unusual_tensors_raise_what_the_interface_path_raises(kwargs):
    errors = []
    for cls in (FakeTensor, UnregisteredTensor):
        with pytest.raises(Exception) as info:
            kmod._arg_parts(cls(0x1000, (4,), **kwargs), [], [], 2)
        errors.append((info.type, str(info.value).replace(cls.__name__, "T")))
    assert errors[0] == errors[1]


class FakeCUdeviceptr:
    """A cuda.bindings CUdeviceptr: int() but no `.value` (older numba-cuda's pointer)."""

    def __init__(self, value):
        self._value = value

    def __int__(self):
        return self._value


class FakeNumbaInt(FakeNumba):
    """Older numba-cuda: its interface takes int() of the pointer object."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape,
                "strides": None if self._contiguous() else self.strides,
                "data": (int(self.device_ctypes_pointer), False),
                "typestr": self.dtype.str,
                "stream": int(self.stream) if self.stream != 0 else None, "version": 3}


@pytest.mark.parametrize("pointer,cls", [
    (ctypes.c_void_p(0x5000), FakeNumba), (ctypes.c_void_p(None), FakeNumba),
    (FakeCUdeviceptr(0x5000), FakeNumbaInt), (FakeCUdeviceptr(0), FakeNumbaInt)])
def test_numba_pointer_kinds_read_as_the_interface_does(pointer, cls):
    aa.register_array_adapter(cls, aa.NumbaAdapter())
    try:
        array = cls(0, (4,))
        array.device_ctypes_pointer = pointer
        outcomes = []
        for value in (array, ViaInterface(array)):
            try:
                flat = []
                kmod._arg_parts(value, flat, [], 0)
                outcomes.append(flat)
            except TypeError as exc:
                outcomes.append(str(exc).replace("ViaInterface", cls.__name__))
        assert outcomes[0] == outcomes[1]
    finally:
        aa.unregister_array_adapter(cls)


# -- streams -----------------------------------------------------------------------------------

def test_cupy_current_stream_orders_the_legacy_stream_as_the_interface_path(orderings):
    for ptr, expected in ((0, []), (1, []), (0x7000, [("record", 0x7000), ("wait", 0)])):
        CUPY_STREAM.ptr = ptr
        for value in (FakeCupy(0x1000, (4,)), ViaInterface(FakeCupy(0x1000, (4,)))):
            orderings.clear()
            kmod._arg_parts(value, [], [], 0)
            assert orderings == expected, (ptr, type(value).__name__)


def test_numba_bound_stream_orders_like_the_interface_path(orderings):
    for stream, expected in ((0, []), (FakeNumbaStream(0x9000),
                                       [("record", 0x9000), ("wait", 0)])):
        for value in (FakeNumba(0x1000, (4,), stream=stream),
                      ViaInterface(FakeNumba(0x1000, (4,), stream=stream))):
            orderings.clear()
            kmod._arg_parts(value, [], [], 0)
            assert orderings == expected


# -- launches: the general path and the generated fast path ------------------------------------

class _Prepared:
    def __init__(self, log, spec):
        self.log, self.spec = log, spec

    def launch(self, grid, block, stream, shared_bytes, *values):
        self.log.append((self.spec.noalias, self.spec.aligned, grid, block, stream,
                         shared_bytes, values))


@cupric.kernel
def _axpy(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    i = cupric.device.grid(1)
    if i < len(x):
        y[i] = a * x[i] + y[i]


class FakeBuffer:
    """A cupric DeviceBuffer's launch attributes."""

    def __init__(self, ptr, shape, dtype=np.float32, strides=None):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.strides = tuple(strides) if strides is not None else \
            _c_strides(self.shape, self.itemsize)


def _run(monkeypatch, calls, fast=True):
    log = []
    monkeypatch.setattr(kmod, "_SIMULATOR", [False])
    monkeypatch.setattr(kmod.Specialization, "prepared", lambda self: _Prepared(log, self))
    _axpy._specs.clear()
    _axpy._variants.clear()
    _axpy._fast = None
    _axpy._no_fast.clear()
    used_fast = []
    for args in calls:
        if not fast:
            _axpy._fast = None
        used_fast.append(_axpy._fast is not None)
        _axpy[3, 64](*args)
    return log, used_fast


@pytest.mark.parametrize("make", [
    lambda p, shape, **kw: FakeCupy(p, shape, **kw),
    lambda p, shape, **kw: FakeTensor(p, shape, **kw),
], ids=["cupy", "torch"])
def test_fast_path_gives_the_general_paths_launches(monkeypatch, make):
    x, y = make(0x10000, (256,)), make(0x20000, (256,))
    a = np.float32(2)
    calls = [
        (a, x, y),
        (a, x, y),                                     # the generated launcher
        (a, make(0x10008, (256,)), y),                 # misaligned: general
        (a, x, make(0x10000 + 512, (256,))),           # overlaps x (written y): general
        (a, x, make(0x30000, (0,))),                   # empty: general (pointer 0)
        (a, make(0x10000, (64,), strides=(2,) if isinstance(x, FakeTensor) else (8,)), y),
        (a, x, y),
    ]
    general, _ = _run(monkeypatch, calls, fast=False)
    fast, used = _run(monkeypatch, calls)
    assert fast == general
    assert used[1] and used[-1]
    assert general[0][6] == (2.0, 0x10000, 256, 1, 0x20000, 256, 1)
    assert [entry[:2] for entry in general[:5]] == [(True, True), (True, True), (True, False),
                                                    (False, True), (True, True)]
    assert general[4][6][4:] == (0, 0, 1)             # the empty array's pointer reads 0


def test_fast_path_same_values_as_device_buffers(monkeypatch):
    a = np.float32(3)
    by_buffer, _ = _run(monkeypatch, [(a, FakeBuffer(0x1000, (64,)),
                                       FakeBuffer(0x2000, (64,)))] * 2)
    by_cupy, _ = _run(monkeypatch, [(a, FakeCupy(0x1000, (64,)), FakeCupy(0x2000, (64,)))] * 2)
    by_torch, _ = _run(monkeypatch, [(a, FakeTensor(0x1000, (64,)),
                                      FakeTensor(0x2000, (64,)))] * 2)
    assert by_buffer == by_cupy == by_torch


def test_fast_path_orders_after_a_cupy_stream(monkeypatch, orderings):
    x, y = FakeCupy(0x10000, (256,)), FakeCupy(0x20000, (256,))
    a = np.float32(2)
    log, used = _run(monkeypatch, [(a, x, y), (a, x, y)])
    assert used == [False, True] and orderings == []
    CUPY_STREAM.ptr = 0x7000
    _axpy[3, 64](a, x, y)                             # the generated launcher orders
    assert orderings == [("record", 0x7000), ("wait", 0)]  # once for both arrays
    assert log[-1] == log[0]


def test_fast_path_torch_guards_fall_back_to_the_same_errors(monkeypatch):
    x, y = FakeTensor(0x10000, (256,)), FakeTensor(0x20000, (256,))
    a = np.float32(2)
    _run(monkeypatch, [(a, x, y), (a, x, y)])
    assert _axpy._fast is not None
    for bad in (FakeTensor(0x10000, (256,), requires_grad=True),
                FakeTensor(0x10000, (256,), is_cuda=False)):
        errors = []
        for value in (bad, ViaInterface(bad) if bad.is_cuda else bad):
            with pytest.raises(Exception) as info:
                _axpy[3, 64](a, value, y)
            errors.append(info.type)
        assert errors[0] is errors[1]
    with pytest.raises(TypeError, match="not a usable device array"):
        _axpy[3, 64](a, FakeTensor(0x10000, (256,), requires_grad=True), y)


def test_dtype_errors_are_the_interface_paths(monkeypatch):
    """bf16 (no cupric scalar type yet) and a wrong dtype fail at binding, with the message
    the interface path gives."""
    _run(monkeypatch, [])
    y = FakeBuffer(0x2000, (8,))
    for bad, pattern in ((FakeTensor(0x1000, (8,), "bfloat16"), r"dtype \|V2 has no cupric"),
                         (FakeCupy(0x1000, (8,), np.float16), r"expects Array\[f32")):
        messages = []
        for value in (bad, ViaInterface(bad)):
            with pytest.raises(TypeError) as info:
                _axpy[1, 1](np.float32(1), value, y)
            messages.append(str(info.value))
        assert re.search(pattern, messages[0])
        assert messages[0] == messages[1]


# -- recognition -------------------------------------------------------------------------------

def test_known_classes_are_recognized_by_identity(monkeypatch):
    cupy = types.ModuleType("cupy")
    ndarray = type("ndarray", (), {"__module__": "cupy._core.core"})
    cupy.ndarray = ndarray
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=5))
    torch = types.ModuleType("torch")
    tensor = type("Tensor", (), {"__module__": "torch"})
    torch.Tensor, torch.strided = tensor, object()
    torch.float32 = FakeTorchDtype("float32")
    torch.bfloat16 = FakeTorchDtype("bfloat16")
    torch._tensor = types.SimpleNamespace(
        _dtype_to_typestr=lambda d: {"float32": "<f4", "bfloat16": "<V2"}[d.name])
    device_array = type("DeviceNDArray", (), {"__module__": "numba.cuda.cudadrv.devicearray"})
    lookalike = type("ndarray", (), {"__module__": "cupy._core.core"})
    subclass = type("Sub", (tensor,), {"__module__": "torch"})
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "torch", torch)
    try:
        got = aa.adapter_for(ndarray)
        assert got.kind == "cupy" and got.current_stream() == 5
        got = aa.adapter_for(tensor)
        assert got.kind == "torch" and got.strided is torch.strided
        assert got.dtypes[torch.bfloat16] == np.dtype("V2")
        assert got.dtypes[torch.float32] == np.dtype(np.float32)
        assert aa.adapter_for(device_array).kind == "numba"
        assert aa.adapter_for(lookalike) is None and aa.adapter_for(subclass) is None
        assert aa.adapter_for(int) is None and aa.adapter_for(np.ndarray) is None
    finally:
        for cls in (ndarray, tensor, device_array, lookalike, subclass, int, np.ndarray):
            aa.unregister_array_adapter(cls)


def test_cupy_export_version_2_names_no_stream(monkeypatch):
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=None))
    monkeypatch.setenv("CUPY_CUDA_ARRAY_INTERFACE_EXPORT_VERSION", "2")
    assert aa.CupyAdapter.from_module(cupy).current_stream is None


def test_register_refuses_non_adapters():
    with pytest.raises(TypeError, match="ArrayAdapter"):
        aa.register_array_adapter(FakeCupy, lambda obj: None)


def test_importing_the_launch_path_imports_no_array_library():
    code = ("import sys, cupric.compiler.kernel, cupric.runtime.array_adapters; "
            "print(sorted(m for m in ('cupy', 'torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# -- several array kinds on one kernel: a generated launcher each -----------------------------

class FakeCupyFields(FakeCupy):
    """A CuPy array with the plain fields real CuPy keeps (contiguity flag, size, rank):
    the generated launcher reads those instead of building shape tuples."""

    @property
    def _c_contiguous(self):
        return _c_contiguous(self.shape, self.strides, self.dtype.itemsize)

    @property
    def size(self):
        return int(np.prod(self.shape))

    @property
    def ndim(self):
        return len(self.shape)


def _device_buffer(ptr, n):
    return memory.borrow(ptr, (n,), None, np.float32, device=0)


def test_each_kind_keeps_its_launcher(monkeypatch):
    from cupric.compiler import launcher
    aa.register_array_adapter(FakeCupyFields, aa.CupyAdapter(lambda: CUPY_STREAM.ptr))
    try:
        a = np.float32(2)
        makers = [_device_buffer, lambda p, n: FakeCupy(p, (n,)),
                  lambda p, n: FakeTensor(p, (n,)), lambda p, n: FakeCupyFields(p, (n,))]
        calls = [(a, make(0x10000, 256), make(0x20000, 256)) for make in makers]
        general, _ = _run(monkeypatch, calls * 2, fast=False)
        log, used = _run(monkeypatch, calls * 2)
        assert log == general                       # the same launches, kind by kind
        keys = launcher.launcher_keys(_axpy._fast)
        assert len(keys) == 4 and {k[1][1] for k in keys} == {
            memory.DeviceBuffer, FakeCupy, FakeTensor, FakeCupyFields}
        # The head's table sends each kind straight to its own launcher.
        probe, table = _axpy._fast.dispatch
        assert probe == 1 and set(table) == {k[1][1] for k in keys}
        assert all(fn.launch_key[1][1] is cls for cls, fn in table.items())
        # Every kind's second launch went through its launcher, never the general path
        # (which ends in `_add_launcher`); a fifth combination takes the general path
        # every time: the chain is full.
        general_calls = []
        monkeypatch.setattr(kmod.Kernel, "_add_launcher",
                            lambda self, *args: general_calls.append(args[0]))
        for args in calls:
            _axpy[3, 64](*args)
        assert general_calls == [] and len(keys) == launcher.MAX_LAUNCHERS
        mixed = (a, _device_buffer(0x10000, 256), FakeCupy(0x20000, (256,)))
        _axpy[3, 64](*mixed)
        _axpy[3, 64](*mixed)
        assert len(general_calls) == 2
    finally:
        aa.unregister_array_adapter(FakeCupyFields)


def test_cupy_fields_launcher_falls_back_like_the_shape_one(monkeypatch):
    aa.register_array_adapter(FakeCupyFields, aa.CupyAdapter(lambda: CUPY_STREAM.ptr))
    try:
        x, y = FakeCupyFields(0x10000, (256,)), FakeCupyFields(0x20000, (256,))
        a = np.float32(2)
        calls = [(a, x, y), (a, x, y),
                 (a, FakeCupyFields(0x10008, (256,)), y),              # misaligned
                 (a, x, FakeCupyFields(0x30000, (0,))),                # empty
                 (a, FakeCupyFields(0x10000, (64,), strides=(8,)), y),  # strided
                 (a, FakeCupyFields(0x10000, (8, 8)), y),              # 2-d: refused
                 (a, x, y)]
        outcomes = []
        for fast in (False, True):
            try:
                log, _ = _run(monkeypatch, calls, fast=fast)
            except TypeError as exc:
                log = str(exc)
            outcomes.append(log)
        assert outcomes[0] == outcomes[1]
    finally:
        aa.unregister_array_adapter(FakeCupyFields)


def test_generated_launcher_refuses_closed_buffers_and_views(monkeypatch):
    from cupric.runtime.errors import ClosedError
    x, y = _device_buffer(0x10000, 256), _device_buffer(0x20000, 256)
    a = np.float32(2)
    log, used = _run(monkeypatch, [(a, x, y), (a, x, y)])
    assert used == [False, True] and len(log) == 2
    view = x[:128]
    _axpy[3, 64](a, view, y)
    x.close()
    for closed in (x, view):
        with pytest.raises(ClosedError, match="argument 1 is a closed DeviceBuffer"):
            _axpy[3, 64](a, closed, y)                      # the launcher, then general
        with pytest.raises(ClosedError):
            _axpy.launch(a, closed, y, grid=3, block=64)    # the general path alone
    assert len(log) == 3                                    # nothing more was launched
    assert x.ptr == 0 and view.ptr == 0x10000               # the view kept its address


class DLPackOnly:
    """A DLPack producer and nothing else (here: a DeviceBuffer exported by the
    protocol)."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self, **kwargs):
        return self.buf.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


def test_dlpack_only_producers_bind_and_launch_like_buffers(monkeypatch):
    x, y = _device_buffer(0x10000, 256), _device_buffer(0x20000, 256)
    a = np.float32(2)
    by_buffer, _ = _run(monkeypatch, [(a, x, y)] * 2)
    by_dlpack, _ = _run(monkeypatch, [(a, DLPackOnly(x), DLPackOnly(y))] * 2)
    assert by_dlpack == by_buffer
    import gc
    from cupric.runtime import _lifetime
    gc.collect()
    _lifetime.drain()  # the borrows hand their exported tensors back


def test_threads_adding_launchers_keep_every_kind(monkeypatch):
    import threading
    from cupric.compiler import launcher
    a = np.float32(2)
    kinds = [(a, _device_buffer(0x10000, 256), _device_buffer(0x20000, 256)),
             (a, FakeCupy(0x10000, (256,)), FakeCupy(0x20000, (256,))),
             (a, FakeTensor(0x10000, (256,)), FakeTensor(0x20000, (256,)))]
    for _ in range(5):
        log, _ = _run(monkeypatch, [])
        start = threading.Barrier(len(kinds))

        def launch(args):
            start.wait()
            for _ in range(20):
                _axpy[3, 64](*args)

        threads = [threading.Thread(target=launch, args=(args,)) for args in kinds]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(log) == 60
        assert {k[1][1] for k in launcher.launcher_keys(_axpy._fast)} == {
            memory.DeviceBuffer, FakeCupy, FakeTensor}
