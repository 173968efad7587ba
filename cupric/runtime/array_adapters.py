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

Two checks of the launch path live here too, shared by every way an array comes in:
where a pointer's memory lives (`pointer_facts`, `device_problem`) and ordering the
launch's stream after a producer's stream as the CUDA Array Interface v3 asks
(`needs_wait`, `order_launch_after`).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

__all__ = ["ArrayAdapter", "CupyAdapter", "TorchAdapter", "NumbaAdapter", "adapter_for",
           "register_array_adapter", "unregister_array_adapter", "ADAPTERS",
           "pointer_facts", "device_problem", "needs_wait", "order_launch_after"]

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

    def device(self, obj):
        """Ordinal of the device `obj`'s memory was allocated on, read from its own
        attributes, or None when the adapter cannot say cheaply (the launch then asks the
        driver about the pointer; see `pointer_facts`). Only asked on machines with
        several GPUs, for an array `read` accepted."""
        return None


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


def _ml_bfloat16():
    """ml_dtypes' bfloat16 dtype where that package is installed (kernels then type
    PyTorch's bfloat16 tensors as `cupric.types.bf16`), else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    import numpy as np
    return np.dtype(ml_dtypes.bfloat16)


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
    stream_source : (callable, str) or None
        The same read as (function, attribute of its result), for compiled callers that
        make it without a Python frame (`cupric.compiler._fastcall`); None: they call
        `current_stream`.
    """

    kind = "cupy"
    __slots__ = ("current_stream", "stream_source", "dtypes")

    def __init__(self, current_stream=None, stream_source=None) -> None:
        self.current_stream = current_stream
        self.stream_source = stream_source
        self.dtypes = _DtypeMap(lambda dt: _interface_dtype(dt.str, dt.descr))

    @classmethod
    def from_module(cls, cupy) -> CupyAdapter:
        stream = source = None
        if os.environ.get("CUPY_CUDA_ARRAY_INTERFACE_EXPORT_VERSION", "3") != "2":
            get_current_stream = cupy.cuda.get_current_stream
            source = (get_current_stream, "ptr")

            def stream():
                return get_current_stream().ptr
        return cls(stream, source)

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

    def device(self, a):
        """``a.data.device_id``: the device CuPy allocated the memory on."""
        return a.data.device_id


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
            if dtype is not None and str(torch_dtype) == "torch.bfloat16":
                dtype = _ml_bfloat16() or dtype  # the same "<V2" bytes, typed bf16 in kernels
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

    def device(self, t):
        """``t.get_device()``: the CUDA tensor's device index."""
        return t.get_device()


# -- numba-cuda --------------------------------------------------------------------------------

class NumbaAdapter(ArrayAdapter):
    """numba-cuda's `DeviceNDArray`: ``.device_ctypes_pointer``, ``.shape``, ``.strides``,
    ``.dtype``, ``.stream``.

    numba's interface names the array's bound stream (None for the default one) and leaves
    out the strides where its own contiguity test passes, which also skips broadcast axes
    (stride 0): the adapter applies the same test. `device` answers None: numba-cuda
    records the context that was current when it wrapped foreign memory, not the memory's
    own device, so the launch asks the driver about the pointer instead. The pointer is read as numba-cuda's
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


# -- where a pointer's memory lives ------------------------------------------------------------

#: `CUmemorytype` values `pointer_facts` answers (0: memory the driver does not know).
MEMORY_HOST = 1
MEMORY_DEVICE = 2
MEMORY_UNIFIED = 4

# CUpointer_attribute: MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL, MEMPOOL_HANDLE.
_FACT_ATTRIBUTES = (2, 8, 9, 17)


class _PointerQuery(threading.local):
    """libcuda's `cuPointerGetAttributes` through ctypes, with per-thread result slots.

    cuda-bindings 13.3 reads `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` back from the wrong
    field (see `cupric.runtime.memory.pointer_device`), so the attributes are read from
    libcuda itself. Every slot is 8 zeroed bytes, wide enough for each attribute's C type
    (unsigned int, bool, int, pointer) on a little-endian machine.
    """

    function = None  # shared by all threads once loaded

    def __init__(self) -> None:
        self.slots = (ctypes.c_uint64 * len(_FACT_ATTRIBUTES))()
        self.data = (ctypes.c_void_p * len(_FACT_ATTRIBUTES))(
            *(ctypes.addressof(self.slots) + 8 * i for i in range(len(_FACT_ATTRIBUTES))))
        self.attributes = (ctypes.c_int * len(_FACT_ATTRIBUTES))(*_FACT_ATTRIBUTES)


_QUERY = _PointerQuery()


def _load_query():
    function = ctypes.CDLL("libcuda.so.1").cuPointerGetAttributes  # loaded by the driver
    function.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_ulonglong]
    function.restype = ctypes.c_int
    _PointerQuery.function = function
    return function


def pointer_facts(ptr: int) -> tuple[int, int, bool, int]:
    """``(memory type, device ordinal, managed, pool handle)`` of device address `ptr`,
    in one `cuPointerGetAttributes` call.

    The memory type is `MEMORY_DEVICE`, `MEMORY_HOST` (pinned host memory) or
    `MEMORY_UNIFIED`, or 0 with device -1 for an address the driver does not know (the
    driver answers that without an error). `pool` is the stream-ordered pool the memory
    came from (0 for other memory).

    Raises
    ------
    CudaError
        The driver refused the query (no context, for example).

    Cost
    ----
    About a microsecond (one driver call through ctypes). The kernel launch asks only on
    machines with several GPUs, for arrays whose device it cannot read otherwise.
    """
    if not sys.platform.startswith("linux"):
        # Other platforms' bindings are trusted (the field mix-up is Linux wheels' own).
        from .memory import pointer_device
        return MEMORY_DEVICE, pointer_device(ptr), False, 0
    function = _PointerQuery.function or _load_query()
    query = _QUERY
    slots = query.slots
    for i in range(len(slots)):
        slots[i] = 0
    err = function(len(_FACT_ATTRIBUTES), query.attributes, query.data, ptr)
    if err:
        # Memory outside any pool may make the pool attribute fail on some drivers: the
        # other three alone (MEMPOOL_HANDLE is last), the pool slot left at 0.
        for i in range(len(slots)):
            slots[i] = 0
        err = function(len(_FACT_ATTRIBUTES) - 1, query.attributes, query.data, ptr)
    if err:
        from .errors import error_from_code
        raise error_from_code(err, f"asking the driver where address 0x{ptr:x} lives")
    kind = slots[0] & 0xFFFFFFFF
    if not kind:
        return 0, -1, False, 0
    ordinal = ctypes.c_int32(slots[2] & 0xFFFFFFFF).value
    return kind, ordinal, bool(slots[1] & 0xFF), slots[3]


def device_problem(ptr: int, device, launch: int, facts=None):
    """The ordinal of the device whose memory at `ptr` a launch on device `launch` cannot
    use, or None when it can.

    `device` is what the array says about itself (an ordinal; None or a negative value
    when it cannot say). The driver is asked about the pointer (`pointer_facts`, or
    `facts` when given) where the array's own word is missing or disagrees, because
    some memory is reachable from every device: managed memory, pinned host memory, and
    an address the driver does not know (HMM system memory, say; not judged here).
    Memory of another device is accepted where cupric enabled peer access to it
    (`cupric.runtime.pool.peer_reachable`). An empty array (`ptr` 0) never mismatches.
    """
    if not ptr:
        return None
    if device is not None and device >= 0 and device == launch:
        return None
    kind, ordinal, managed, pool = pointer_facts(ptr) if facts is None else facts
    if kind != MEMORY_DEVICE or managed or ordinal < 0 or ordinal == launch:
        return None
    from .pool import peer_reachable
    if peer_reachable(launch, ordinal, pool):
        return None
    return ordinal


# -- ordering a launch after the producers' streams --------------------------------------------

_LEGACY = 1      # CU_STREAM_LEGACY (the NULL stream, 0, means it under the driver API)
_PER_THREAD = 2  # CU_STREAM_PER_THREAD


def stream_flags(handle: int) -> int:
    """`cuStreamGetFlags` of a real stream handle (bit 0: CU_STREAM_NON_BLOCKING)."""
    from ._driver import check, driver
    return int(check(driver().cuStreamGetFlags(handle)))


def stream_capturing(handle: int) -> bool:
    """Whether stream `handle` is being captured into a graph (`cuStreamIsCapturing`)."""
    from ._driver import check, driver
    return int(check(driver().cuStreamIsCapturing(handle))) != 0


def needs_wait(consumer: int, producer: int) -> bool:
    """Whether work queued next on stream `consumer` must be made to wait (an event) for
    the work now on stream `producer` (raw handles of one context), or CUDA's stream
    semantics order it already:

    - the same stream (0 and 1 both name the legacy default stream): ordered;
    - the legacy default stream and the per-thread default stream (2): they synchronize
      with each other, ordered;
    - the legacy default stream and a *blocking* stream (created without
      CU_STREAM_NON_BLOCKING), either way round: the legacy stream waits for all earlier
      work of the context's blocking streams, and they wait for its earlier work:
      ordered (asked of the driver: one `cuStreamGetFlags`);
    - anything else (a non-blocking stream against a default stream; two distinct
      streams, the per-thread default stream included): not ordered, a wait is needed.

    A per-thread default stream named by a producer is taken to be this thread's.
    """
    if consumer == 0:
        consumer = _LEGACY
    if producer == 0:
        producer = _LEGACY
    if consumer == producer:
        return False
    if consumer <= _PER_THREAD and producer <= _PER_THREAD:
        return False
    if consumer == _LEGACY:
        return bool(stream_flags(producer) & 1)
    if producer == _LEGACY:
        return bool(stream_flags(consumer) & 1)
    return True


def order_launch_after(consumer: int, producers) -> None:
    """Make work queued next on stream `consumer` (a raw handle) wait for the work now on
    each stream of `producers` (CUDA Array Interface ``stream`` values) where
    `needs_wait` says so: an event recorded on the producer and waited on by the consumer
    (`cupric.runtime.memory.order_after`; one reusable event per thread and device, none
    created per launch). The host never waits.

    A consumer stream that is being captured into a graph gets no wait: waiting there on
    an event recorded outside the capture is illegal in CUDA (it would invalidate the
    capture), and what the graph's later replays read is ordered when they are launched,
    not now; the producer's work must be finished or ordered before those launches.
    """
    from . import memory
    capturing = None
    for producer in producers:
        if needs_wait(consumer, producer):
            if capturing is None:
                capturing = consumer > _LEGACY and stream_capturing(consumer)
            if capturing:
                return
            memory.order_after(consumer, producer)
