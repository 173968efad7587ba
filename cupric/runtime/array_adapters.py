"""Fast readers of other libraries' device arrays, for the kernel launch path.

The CUDA Array Interface is the general way in, but CuPy, PyTorch and numba-cuda build a
fresh `__cuda_array_interface__` dict on every access, and the consumer then validates it:
most of the host cost of a launch with such arrays. An adapter reads the same facts
(pointer, shape, byte strides, dtype and the producer's stream) through the cheapest
attributes of one known array class and answers exactly what parsing that class's
interface would answer. Outside its common case (a host or autograd tensor, a dtype the
interface would describe differently, ...) it answers None, and the caller takes the
interface path, which raises the usual errors.

Known classes are recognized by identity through `sys.modules` (`cupy.ndarray`,
`torch.Tensor`, numba-cuda's `DeviceNDArray`; subclasses are not), so nothing is ever
imported here. `register_array_adapter` adds other classes.
"""

from __future__ import annotations

import os
import sys

__all__ = ["ArrayAdapter", "CupyAdapter", "TorchAdapter", "NumbaAdapter", "adapter_for",
           "register_array_adapter", "unregister_array_adapter", "ADAPTERS"]

#: Exact class -> its adapter, or None for a class known to have none. Filled lazily by
#: `adapter_for`; the launch path reads it directly.
ADAPTERS: dict = {}

_CACHE_LIMIT = 4096


class ArrayAdapter:
    """Reads one array class's device memory description.

    `read(obj)` returns ``(ptr, shape, strides, dtype, stream)`` exactly as
    `cupric.runtime.interop.parse_cuda_array_interface` would for ``obj``'s interface:
    ``ptr`` an int, ``shape`` a tuple, ``strides`` in bytes (C-contiguous strides where the
    interface leaves them out), ``dtype`` a normalized NumPy dtype and ``stream`` the
    producer's stream handle or None; or None when ``obj`` is outside the adapter's
    common case. `kind` names the family ("cupy", "torch", "numba" or "custom"); the kernel
    launch path inlines the first two for 1-d arrays.
    """

    kind = "custom"

    def read(self, obj):
        raise NotImplementedError


# -- layouts -----------------------------------------------------------------------------------

_BYTE_LAYOUTS: dict = {}     # (shape, byte strides, itemsize) -> (shape, strides, empty)
_ELEMENT_LAYOUTS: dict = {}  # (shape, element strides, itemsize) -> the same


def _byte_layout(shape, strides, itemsize):
    """(shape tuple, the strides the interface would give, empty?) for byte strides."""
    key = (shape, strides, itemsize)
    known = _BYTE_LAYOUTS.get(key)
    if known is None:
        known = _store(_BYTE_LAYOUTS, key, _interface_layout(tuple(shape), tuple(strides),
                                                             itemsize))
    return known


def _element_layout(shape, strides, itemsize):
    """As `_byte_layout`, for strides counted in elements (PyTorch's `stride()`)."""
    key = (shape, strides, itemsize)
    known = _ELEMENT_LAYOUTS.get(key)
    if known is None:
        known = _store(_ELEMENT_LAYOUTS, key, _interface_layout(
            tuple(shape), tuple(s * itemsize for s in strides), itemsize))
    return known


def _store(cache: dict, key, value):
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


def _interface_layout(shape, strides, itemsize):
    """Producers leave `strides` out of the interface for C-contiguous arrays (sizes of 1
    ignored; any zero-size array counts), and the parser fills in C strides."""
    from .memory import c_strides, is_c_contiguous
    if is_c_contiguous(shape, strides, itemsize):
        strides = c_strides(shape, itemsize)
    return shape, strides, 0 in shape


def _interface_dtype(typestr, descr):
    """The dtype the interface parser makes of (typestr, descr), or None where it raises
    (the interface path then raises the same error)."""
    from .interop import _dtype_of
    try:
        return _dtype_of(typestr, descr)
    except (TypeError, ValueError):
        return None


class _DtypeMap(dict):
    """Producer dtype object -> normalized NumPy dtype (False: leave to the interface)."""

    __slots__ = ("convert",)

    def __init__(self, convert) -> None:
        super().__init__()
        self.convert = convert

    def __missing__(self, dtype):
        found = self.convert(dtype)
        if len(self) < 256:
            self[dtype] = False if found is None else found
        return False if found is None else found


# -- CuPy --------------------------------------------------------------------------------------

class CupyAdapter(ArrayAdapter):
    """`cupy.ndarray`: ``.data.ptr``, ``.shape``, ``.strides``, ``.dtype``.

    CuPy's interface (version 3) names CuPy's *current* stream at the time of reading
    (the legacy default stream, 1, for the null stream), so `read` asks
    `current_stream()` each time; with ``CUPY_CUDA_ARRAY_INTERFACE_EXPORT_VERSION=2``
    CuPy names no stream and neither does the adapter. The pointer of a zero-size array
    reads 0, as in CuPy's interface.

    Parameters
    ----------
    current_stream : callable or None
        Returns the raw handle of CuPy's current stream (0 for the null stream); None
        when the interface carries no stream.
    """

    kind = "cupy"
    __slots__ = ("current_stream", "dtypes")

    def __init__(self, current_stream=None) -> None:
        self.current_stream = current_stream
        self.dtypes = _DtypeMap(lambda dt: _interface_dtype(dt.str, dt.descr))

    @classmethod
    def from_module(cls, cupy) -> CupyAdapter:
        stream = None
        if os.environ.get("CUPY_CUDA_ARRAY_INTERFACE_EXPORT_VERSION", "3") != "2":
            get_current_stream = cupy.cuda.get_current_stream

            def stream():
                return get_current_stream().ptr
        return cls(stream)

    def read(self, a):
        dtype = self.dtypes[a.dtype]
        if dtype is False:
            return None
        shape, strides, empty = _BYTE_LAYOUTS.get((a.shape, a.strides, dtype.itemsize)) or \
            _byte_layout(a.shape, a.strides, dtype.itemsize)
        stream = None
        if self.current_stream is not None:
            stream = self.current_stream() or 1
        return 0 if empty else a.data.ptr, shape, strides, dtype, stream


# -- PyTorch -----------------------------------------------------------------------------------

# torch's own dtype -> typestr table, for versions without `torch._tensor._dtype_to_typestr`.
_TORCH_TYPESTRS = {"complex64": "<c8", "complex128": "<c16", "bfloat16": "<V2",
                   "float16": "<f2", "float32": "<f4", "float64": "<f8", "uint8": "|u1",
                   "int8": "|i1", "uint16": "<u2", "int16": "<i2", "uint32": "<u4",
                   "int32": "<i4", "uint64": "<u8", "int64": "<i8", "bool": "|b1"}


class TorchAdapter(ArrayAdapter):
    """`torch.Tensor` (exactly; not subclasses such as `nn.Parameter`): ``.data_ptr()``,
    ``.shape``, ``.stride()``, ``.dtype``.

    Only CUDA tensors of the strided layout that do not require grad, the ones whose
    interface PyTorch gives; others (host, sparse, autograd tensors) go the interface
    way and meet its errors. PyTorch's interface (version 2) names no stream. The pointer
    of a zero-size tensor reads 0, as in PyTorch's interface.

    Parameters
    ----------
    typestrs : dict
        torch dtype -> the interface typestr PyTorch gives it (bfloat16 is ``"<V2"``).
    strided : object
        ``torch.strided``.
    """

    kind = "torch"
    __slots__ = ("dtypes", "strided")

    def __init__(self, typestrs: dict, strided) -> None:
        self.dtypes = {}
        for torch_dtype, typestr in typestrs.items():
            dtype = _interface_dtype(typestr, None)
            if dtype is not None:
                self.dtypes[torch_dtype] = dtype
        self.strided = strided

    @classmethod
    def from_module(cls, torch) -> TorchAdapter:
        to_typestr = getattr(getattr(torch, "_tensor", None), "_dtype_to_typestr", None)
        typestrs = {}
        for name, fallback in _TORCH_TYPESTRS.items():
            dtype = getattr(torch, name, None)
            if dtype is None:
                continue
            if to_typestr is None:
                typestrs[dtype] = fallback
                continue
            try:
                typestrs[dtype] = to_typestr(dtype)
            except KeyError:  # a dtype this torch cannot describe: the interface raises
                pass
        return cls(typestrs, torch.strided)

    def read(self, t):
        dtype = self.dtypes.get(t.dtype)
        if dtype is None or not t.is_cuda or t.requires_grad or t.layout is not self.strided:
            return None
        size, steps = t.shape, t.stride()
        shape, strides, empty = _ELEMENT_LAYOUTS.get((size, steps, dtype.itemsize)) or \
            _element_layout(size, steps, dtype.itemsize)
        return 0 if empty else t.data_ptr(), shape, strides, dtype, None


# -- numba-cuda --------------------------------------------------------------------------------

class NumbaAdapter(ArrayAdapter):
    """numba-cuda's `DeviceNDArray`: ``.device_ctypes_pointer``, ``.shape``, ``.strides``,
    ``.dtype``, ``.stream``.

    numba's interface names the array's bound stream (None for the default one) and leaves
    out the strides where its own contiguity test passes, which also skips broadcast axes
    (stride 0): the adapter applies the same test. The pointer is read as numba-cuda's
    interface reads it (`.value`, or int() of a pointer object without one); older
    releases whose interface took int() of a ctypes pointer (empty arrays) failed there,
    where the adapter reads 0.
    """

    kind = "numba"
    __slots__ = ("dtypes",)

    def __init__(self) -> None:
        self.dtypes = _DtypeMap(lambda dt: _interface_dtype(dt.str, None))

    def read(self, a):
        dtype = self.dtypes[a.dtype]
        if dtype is False:
            return None
        shape, strides = tuple(a.shape), tuple(a.strides)
        key = (shape, strides, dtype.itemsize)
        interface = _NUMBA_STRIDES.get(key)
        if interface is None:
            interface = strides
            if _numba_contiguous(shape, strides, dtype.itemsize):
                from .memory import c_strides
                interface = c_strides(shape, dtype.itemsize)
            _store(_NUMBA_STRIDES, key, interface)
        strides = interface
        # numba-cuda's interface reads the pointer's `.value` (0 for None); versions that
        # hand out a cuda.bindings CUdeviceptr (no `.value`) take int() of it.
        pointer = a.device_ctypes_pointer
        ptr = getattr(pointer, "value", _NO_VALUE)
        if ptr is _NO_VALUE:
            try:
                ptr = int(pointer)
            except (TypeError, ValueError):  # the interface path meets the same failure
                return None
        elif ptr is None:
            ptr = 0
        elif type(ptr) is not int:
            return None
        stream = a.stream
        return ptr, shape, strides, dtype, (int(stream) if stream != 0 else None)


_NO_VALUE = object()

#: (shape, strides, itemsize) -> the strides numba's interface leads the parser to.
_NUMBA_STRIDES: dict = {}


def _numba_contiguous(shape, strides, itemsize) -> bool:
    """numba-cuda's `is_contiguous`: C order over the axes longer than 1 and not
    broadcast."""
    size = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != 0:
            if s != size:
                return False
            size *= n
    return True


# -- registry ----------------------------------------------------------------------------------

def adapter_for(cls):
    """The adapter of array class `cls`, or None; recognizes CuPy, PyTorch and numba-cuda
    classes by identity once imported (never importing them) and remembers the answer."""
    try:
        return ADAPTERS[cls]
    except KeyError:
        pass
    except TypeError:  # an unhashable class: nothing to adapt
        return None
    adapter = _classify(cls)
    ADAPTERS[cls] = adapter
    return adapter


def _classify(cls):
    module = getattr(cls, "__module__", None)
    if not isinstance(module, str):
        return None
    root = module.partition(".")[0]
    if root == "cupy":
        cupy = sys.modules.get("cupy")
        if cupy is not None and cls is getattr(cupy, "ndarray", None):
            return CupyAdapter.from_module(cupy)
    elif root == "torch":
        torch = sys.modules.get("torch")
        if torch is not None and cls is getattr(torch, "Tensor", None):
            return TorchAdapter.from_module(torch)
    elif root in ("numba", "numba_cuda"):
        if cls.__name__ == "DeviceNDArray" and module.endswith(".devicearray"):
            return NumbaAdapter()
    return None


def register_array_adapter(cls, adapter: ArrayAdapter) -> None:
    """Use `adapter` for arrays of exactly class `cls` (see `ArrayAdapter`)."""
    if not isinstance(adapter, ArrayAdapter):
        raise TypeError(f"expected an ArrayAdapter, got {type(adapter).__name__}")
    ADAPTERS[cls] = adapter


def unregister_array_adapter(cls) -> None:
    """Forget `cls`; the next lookup classifies it again."""
    ADAPTERS.pop(cls, None)
