"""A fake GPU for the ready kernels' host path on the CPU lane.

`FakeGpu` makes `cupric.kernels` believe it runs on a one-GPU machine: allocations are
borrowed DeviceBuffers over made-up addresses, fills and frees are recorded, kernels are
typed for real (the launch path's key, variants and fast launcher are the real ones) but
their prepared launch only records ``(kernel, grid, block, stream, values)``. A fake
``cupy`` module provides arrays read by the real CuPy adapter (and by the CUDA Array
Interface, like CuPy's), and fake CUDA PyTorch tensors are read by the real PyTorch adapter.
Nothing runs on a device, so results are not computed: it serves
to check what a call launches and allocates, and to time the Python work of a call.
"""

from __future__ import annotations

import itertools
import sys
import types

import numpy as np


class FakeMemory:
    """CuPy's `MemoryPointer` stand-in: ``.ptr`` and ``.device_id``."""

    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.device_id = 0


class FakeCupyArray:
    """A C-contiguous `cupy.ndarray` stand-in over a made-up device address."""

    __module__ = "cupy"

    def __init__(self, shape, dtype, ptr: int, readonly: bool = False) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.data = FakeMemory(ptr)
        strides, step = [], self.dtype.itemsize
        for n in reversed(self.shape):
            strides.append(step)
            step *= max(n, 1)
        self.strides = self._c_strides = tuple(reversed(strides))
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.ndim = len(self.shape)
        self.readonly = readonly

    @property
    def _c_contiguous(self) -> bool:  # a plain field of CuPy's, kept up to date there
        return self.strides == self._c_strides

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": self.dtype.descr,
                "data": (self.data.ptr if self.size else 0, self.readonly),
                "version": 3, "strides": None if self.strides == self._c_strides else
                self.strides, "stream": _CUPY_STREAM[0] or 1}


FakeCupyArray.__name__ = FakeCupyArray.__qualname__ = "ndarray"
_CUPY_STREAM = [0]


class FakeTorchDtype:
    """A `torch.dtype` stand-in (compared by identity, as PyTorch's are)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


#: The fake dtypes' names and the typestrs PyTorch's interface gives them.
TORCH_TYPESTRS = {"float16": "<f2", "float32": "<f4", "float64": "<f8", "int32": "<i4",
                  "int64": "<i8", "uint32": "<u4", "uint8": "|u1", "bfloat16": "<V2"}
TORCH_DTYPES = {name: FakeTorchDtype(name) for name in TORCH_TYPESTRS}
TORCH_STRIDED = object()


class FakeTensor:
    """A CUDA `torch.Tensor` stand-in over a made-up address: the attributes and methods
    the PyTorch adapter and the launchers read."""

    __module__ = "torch"

    def __init__(self, shape, dtype: str, ptr: int, requires_grad: bool = False) -> None:
        self.shape = tuple(shape)
        self.dtype = TORCH_DTYPES[dtype]
        self._ptr = ptr
        self.is_cuda = True
        self.requires_grad = requires_grad
        self.layout = TORCH_STRIDED
        steps, step = [], 1
        for n in reversed(self.shape):
            steps.append(step)
            step *= max(n, 1)
        self._stride = tuple(reversed(steps))
        self.ndim = len(self.shape)
        self._numel = int(np.prod(self.shape, dtype=np.int64))

    @property
    def __cuda_array_interface__(self):
        if self.requires_grad:  # as PyTorch
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that "
                               "requires grad.")
        typestr = TORCH_TYPESTRS[self.dtype.name]
        size = np.dtype(typestr).itemsize
        strides = None if self.is_contiguous() else tuple(s * size for s in self._stride)
        return {"shape": self.shape, "typestr": typestr, "version": 2,
                "data": (self._ptr if self.numel() else 0, False), "strides": strides}

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return self._numel

    def stride(self, dim=None):
        return self._stride if dim is None else self._stride[dim]

    def is_contiguous(self) -> bool:
        step = 1
        for n, s in zip(reversed(self.shape), reversed(self._stride)):
            if n != 1 and s != step:
                return False
            step *= n
        return True

    def get_device(self) -> int:
        return 0


FakeTensor.__name__ = FakeTensor.__qualname__ = "Tensor"


class FakePrepared:
    """A prepared launch that records instead of launching."""

    def __init__(self, gpu, name: str) -> None:
        self.gpu, self.name = gpu, name

    def launch(self, grid, block, stream, shared_bytes, *values) -> None:
        self.gpu.launches.append((self.name, grid, block, stream, values))


class FakeGpu:
    """Installs the fakes with a pytest `monkeypatch` (undone after the test)."""

    def __init__(self, monkeypatch, sms: int = 132) -> None:
        from cupric.compiler import kernel as kmod
        from cupric.kernels import _common
        from cupric.runtime import array_adapters, memory
        self.launches: list = []
        self.allocations: list = []
        self.fills: list = []
        self.closes: list = []
        self.orders: list = []
        self.uploads: list = []
        self._addresses = itertools.count(0x7F0000000000, 1 << 24)
        gpu = self

        cupy = types.ModuleType("cupy")
        cupy.ndarray = FakeCupyArray
        cupy.cuda = types.SimpleNamespace(
            get_current_stream=lambda: types.SimpleNamespace(ptr=_CUPY_STREAM[0]))
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        monkeypatch.setitem(array_adapters.ADAPTERS, FakeCupyArray,
                            array_adapters.CupyAdapter.from_module(cupy))
        _CUPY_STREAM[0] = 0
        typestrs = {TORCH_DTYPES[name]: typestr for name, typestr in TORCH_TYPESTRS.items()}
        monkeypatch.setitem(array_adapters.ADAPTERS, FakeTensor,
                            array_adapters.TorchAdapter(typestrs, TORCH_STRIDED))

        def empty(shape, dtype=np.float64, stream=None):
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
            buf = memory.borrow(next(gpu._addresses), shape, None, dtype)
            gpu.allocations.append((shape, np.dtype(dtype), stream))
            return buf

        def to_device(array, stream=None):
            array = np.asarray(array)
            buf = empty(array.shape, array.dtype, stream)
            gpu.uploads.append((buf.ptr, array.copy()))
            return buf

        def memset(buf, value, width=8, stream=None):
            gpu.fills.append((buf.ptr, value, stream))

        def close(buf, stream=None):
            gpu.closes.append((buf.ptr, stream))

        def order_after(consumer, producer):
            gpu.orders.append((consumer, producer))

        def prepared(spec, device=None):
            spec._prepared = FakePrepared(gpu, spec.kernel.__name__)
            return spec._prepared

        monkeypatch.setattr(memory, "empty", empty)
        monkeypatch.setattr(memory, "to_device", to_device)
        monkeypatch.setattr(memory.DeviceBuffer, "memset", memset)
        monkeypatch.setattr(memory.DeviceBuffer, "close", close)
        monkeypatch.setattr(memory, "order_after", order_after)
        monkeypatch.setattr(memory, "_device_of_context", lambda: 0)
        # Every stream is a blocking one, none is capturing.
        monkeypatch.setattr(array_adapters, "stream_flags", lambda handle: 0, raising=False)
        monkeypatch.setattr(array_adapters, "stream_capturing", lambda handle: False,
                            raising=False)
        monkeypatch.setattr(kmod.Specialization, "prepared", prepared)
        monkeypatch.setattr(kmod, "_SIMULATOR", [False])
        monkeypatch.setattr(kmod, "_MULTI", [False])
        monkeypatch.setattr(_common, "on_simulator", lambda: False)
        monkeypatch.setattr(_common, "device_ordinal", lambda: 0)
        monkeypatch.setattr(_common, "_single_device", lambda: True)
        monkeypatch.setattr(_common, "_READERS", {})  # the fake classes' readers
        _common.forget_plans()  # plans of the fake classes (and device count) start afresh
        monkeypatch.setattr(_common, "_sm_count", lambda ordinal: sms)
        monkeypatch.setattr(_common, "_WORKSPACES", {})
        monkeypatch.delenv("CUPRIC_SIMULATOR", raising=False)
        from cupric.kernels import histogram, sort
        monkeypatch.setattr(histogram, "_EDGES", {})  # device copies of bin edges
        # The radix sort's digit passes launch one by one (no driver graphs here; a
        # test replaces `Graph` to check those).
        monkeypatch.setattr(sort, "PASS_GRAPHS", [False])
        monkeypatch.setattr(sort, "_PASS_GRAPHS", {})
        # Kernels that launched before (on a GPU lane) start without their launch state
        # here and get it back afterwards; `close` clears what the fakes left.
        for kern in _kernels():
            for name, empty_value in _LAUNCH_STATE:
                monkeypatch.setattr(kern, name, empty_value())

    def close(self) -> None:
        """Forget every launch handle and launcher made with the fakes (kernels made
        during the fake's use keep nothing of it); run before the monkeypatch's undo."""
        from cupric.kernels import _common
        _common.forget_plans()
        for kern in _kernels():
            if any(isinstance(spec._prepared, FakePrepared)
                   for spec in kern._variants.values()):
                for name, empty_value in _LAUNCH_STATE:
                    setattr(kern, name, empty_value())

    def array(self, shape, dtype, readonly: bool = False) -> FakeCupyArray:
        """A fake CuPy array at a fresh address."""
        shape = (shape,) if isinstance(shape, int) else shape
        return FakeCupyArray(shape, dtype, next(self._addresses), readonly)

    def tensor(self, shape, dtype: str, requires_grad: bool = False) -> FakeTensor:
        """A fake CUDA PyTorch tensor at a fresh address."""
        shape = (shape,) if isinstance(shape, int) else shape
        return FakeTensor(shape, dtype, next(self._addresses), requires_grad)

    @staticmethod
    def set_cupy_stream(handle: int) -> None:
        """CuPy's current stream as the fake module reports it (0: the null stream)."""
        _CUPY_STREAM[0] = handle


#: A kernel's launch state: attribute -> a fresh empty value.
_LAUNCH_STATE = (("_fast", lambda: None), ("_no_fast", set), ("_specs", dict),
                 ("_variants", dict))


def _kernels() -> list:
    import gc

    from cupric.compiler.kernel import Kernel
    return [obj for obj in gc.get_objects() if isinstance(obj, Kernel)]
