"""Intake: every array and stream argument of a cupric call, read once, in one place.

A CUDA library call needs, per array, a device address, the shape, byte strides, element
type, the device the memory lives on and whether it may be written; and, per the CUDA
Array Interface (v3), an ordering of the call's stream after the stream the producer last
wrote the array on. This module answers those for every kind of array cupric accepts
(`DeviceBuffer` and its views, PyTorch, CuPy, numba-cuda, JAX and anything with
``__cuda_array_interface__`` or ``__dlpack__``) through the per-class readers of
`cupric.runtime.array_adapters`, and resolves every kind of stream argument to a raw
``CUstream`` handle. Kernel launches, cuBLAS, the ready kernels, gpu_rand fills and
`as_device_array` take their arguments through here (the other library wrappers are
moving onto it), so they accept the same arrays, order the same streams and raise the
same typed errors.

Contract
--------
- `read(obj)` -> `ArrayInfo` (pointer, shape, byte strides, normalized NumPy dtype, the
  array's own word on its device, read-only flag, the producer's stream, the kind of
  array). It orders nothing and keeps nothing alive beyond `ArrayInfo.owner`.
- `array_info(obj, stream, ...)` -> `ArrayInfo`, checked (closed, writable, device) and
  with the consumer `stream` ordered after the producer's stream where CUDA does not order
  the two already (`order_after`). Nothing is ordered when a check fails.
- `as_buffer(obj, stream, ...)` -> a `DeviceBuffer` (the object itself, or a borrow of its
  memory that keeps it alive), for code that wants a buffer's views and methods.
- `array_parts(obj)`: `read` as a plain tuple (the launch path's form); `protocol_of(obj)`:
  which protocol a foreign array is read through, or the typed error.
- `stream_handle(stream)` -> int: the one resolver of stream arguments (None: the legacy
  default stream, 0; an int handle; a cupric `Stream`, refused with `ClosedError` once
  closed; ``__cuda_stream__``; PyTorch's ``cuda_stream``; CuPy's ``ptr``; a cuda.bindings
  `CUstream`). `stream_parts(stream)` also gives the object to keep alive.
- `check_open(buf)`: the one closed check of a DeviceBuffer and of every view of it (all
  views share one allocation record, whose ``_closed`` flag `close()` sets): two attribute
  reads, inlined by the generated kernel launchers as ``buf._alloc._closed``.

Errors (all raised before anything is queued): `ClosedError` (a closed buffer or a view of
one, a closed stream); `HostMemoryError` (a `TypeError`: NumPy arrays, CPU tensors, host
DLPack tensors; the message says how to copy to the device); `NotAnArrayError` (a
`TypeError`: neither protocol); `StrideError` (a `TypeError` and `ValueError`: a stride
that is not a whole number of items); `DeviceMismatchError` (a `ValueError`: memory of a
device the call's device cannot reach); `ReadOnlyError` (a `ValueError`: a read-only array
where the call writes).

Thread safety
-------------
Everything here may be called from any thread; the per-thread event that `order_after`
records lives in thread-local storage.

Cost
----
A DeviceBuffer: two attribute reads. CuPy, PyTorch and numba-cuda arrays: their own
attributes (no ``__cuda_array_interface__`` dict). Other CAI producers: the dict, parsed.
DLPack: a capsule round trip and a borrow. Device checks ask the driver only where the
array cannot say (`array_adapters.device_problem`); a stream wait costs a flags query and
an event record + wait.
"""

from __future__ import annotations

import numpy as np

from . import array_adapters as _aa
from .array_adapters import device_problem
from .errors import ClosedError, DeviceMismatchError
from .stream import as_stream_handle as stream_handle
from .stream import stream_parts

__all__ = ["ArrayInfo", "read", "array_info", "as_buffer", "array_parts", "protocol_of",
           "check_open", "check_device", "check_strides", "buffer_device", "device_problem",
           "order_after", "stream_handle", "stream_parts", "HostMemoryError",
           "NotAnArrayError", "StrideError", "ReadOnlyError", "ClosedError",
           "DeviceMismatchError", "BUFFER", "CAI", "DLPACK"]

#: `ArrayInfo.kind` of cupric's own buffers, of arrays read through their
#: ``__cuda_array_interface__`` dict, and of DLPack borrows; adapter-read arrays carry
#: their adapter's kind ("cupy", "torch", "numba", "custom").
BUFFER = "buffer"
CAI = "cai"
DLPACK = "dlpack"


class HostMemoryError(TypeError):
    """A host array (NumPy, a PyTorch CPU tensor, a host DLPack tensor) where device
    memory is needed. Also a `TypeError`."""


class NotAnArrayError(TypeError):
    """An object that is neither a DeviceBuffer nor offers ``__cuda_array_interface__``
    or ``__dlpack__``. Also a `TypeError`."""


class StrideError(TypeError, ValueError):
    """A stride that is not a whole number of items (or a layout a call cannot address).
    Both a `TypeError` (as the kernel launch always raised it) and a `ValueError`."""


class ReadOnlyError(ValueError):
    """A read-only array (its producer exported it read-only) passed where the call
    writes. Also a `ValueError`."""


class ArrayInfo:
    """What a call needs of one array argument, read once.

    Attributes
    ----------
    ptr : int
        Device address of the first element (0 for an empty array).
    shape, strides : tuple of int
        Strides in bytes (C strides filled in where the producer leaves them out).
    dtype : numpy.dtype
        Normalized; PyTorch's bfloat16 reads as a 2-byte void type (``"<V2"``, as its
        interface says): `torch_dtype` names it.
    itemsize, ndim, size, nbytes : int
    device : int
        The array's own word on its device's ordinal, or -1 where it names none (numba,
        plain CAI producers, borrows not yet asked): `check_device` asks the driver then.
    readonly : bool
    producer : int or None
        The stream handle the producer's interface names (CAI v3), else None.
    kind : str
        `BUFFER`, `CAI`, `DLPACK` or the adapter's kind ("cupy", "torch", "numba", ...).
    owner : object
        The object whose lifetime the memory follows (the argument itself, or the DLPack
        borrow that holds the capsule): keep it referenced while the memory is used.

    The attribute names are a DeviceBuffer's, so code that only reads layouts takes
    either.
    """

    __slots__ = ("ptr", "shape", "strides", "dtype", "itemsize", "ndim", "device",
                 "readonly", "producer", "kind", "owner")

    def __init__(self, ptr, shape, strides, dtype, readonly, producer, device, kind,
                 owner) -> None:
        # The order of `array_parts`' tuple.
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        self.ndim = len(shape)
        self.device = device
        self.readonly = readonly
        self.producer = producer
        self.kind = kind
        self.owner = owner

    @property
    def size(self) -> int:
        size = 1
        for n in self.shape:
            size *= n
        return size

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        from .memory import is_c_contiguous
        return is_c_contiguous(self.shape, self.strides, self.itemsize)

    @property
    def is_f_contiguous(self) -> bool:
        from .memory import is_f_contiguous
        return is_f_contiguous(self.shape, self.strides, self.itemsize)

    @property
    def torch_dtype(self) -> str | None:
        """The name of the owner's PyTorch dtype (``"torch.bfloat16"``), else None: for
        element types NumPy lacks, it says what the bytes are."""
        name = str(getattr(self.owner, "dtype", ""))
        return name if name.startswith("torch.") else None

    def as_buffer(self):
        """A DeviceBuffer over the same memory (the owner itself when it is one, else a
        borrow that keeps the owner alive): for views, reshapes and methods."""
        from .memory import DeviceBuffer, borrow_validated
        owner = self.owner
        if isinstance(owner, DeviceBuffer):
            check_open(owner)
            return owner
        return borrow_validated(self.ptr, self.shape, self.strides, self.dtype,
                                self.readonly, owner, self.producer)

    def __repr__(self) -> str:
        return (f"<ArrayInfo {self.kind} ptr=0x{self.ptr:x} shape={self.shape} "
                f"strides={self.strides} dtype={self.dtype} device={self.device}"
                f"{' readonly' if self.readonly else ''}>")


# -- the shared checks -------------------------------------------------------------------------

def check_open(buf, name: str | None = None) -> None:
    """Raise `ClosedError` when DeviceBuffer `buf` (or the buffer it views) was closed.

    Every view shares its allocation record, and ``close()`` on any of them sets that
    record's ``_closed``: this is the one liveness check of every path (the generated
    kernel launchers read ``buf._alloc._closed`` inline)."""
    if buf._alloc._closed:
        what = f"{name} is a closed DeviceBuffer" if name else "this DeviceBuffer is closed"
        raise ClosedError(f"{what} (or views a closed buffer); its memory was freed")


def check_device(info_or_ptr, own: int | None, launch: int, name: str = "array",
                 facts=None) -> None:
    """Raise `DeviceMismatchError` when memory at a pointer (or an `ArrayInfo`'s) cannot
    be used by work on device `launch`.

    `own` is what the array says about its device (None or -1: nothing; the driver is
    then asked about the pointer). Memory every device reaches (managed, pinned host,
    addresses the driver does not know) and memory of a device cupric enabled peer access
    to are accepted (see `array_adapters.device_problem`)."""
    if isinstance(info_or_ptr, ArrayInfo):
        ptr = info_or_ptr.ptr
        if own is None:
            own = info_or_ptr.device
    else:
        ptr = info_or_ptr
    found = _aa.device_problem(ptr, own, launch, facts)
    if found is not None:
        raise DeviceMismatchError(
            f"{name} lives on device {found}, but the call runs on device {launch}; copy "
            f"it to device {launch} (cupric.runtime.copy_peer) or enable peer access "
            f"(cupric.runtime.enable_peer_access({found}, device={launch}))",
            argument=name, device=found, expected=launch)


#: Kinds whose strides are whole items by construction (DeviceBuffer layouts, PyTorch's
#: element strides, DLPack's); the others state byte strides, checked by `check_strides`.
_ITEM_STRIDES = frozenset({"buffer", "torch", "dlpack"})


def check_strides(strides, itemsize: int, name: str | None = None, index=None) -> None:
    """Raise `StrideError` when a byte stride is not a whole number of items (no kernel
    or library can address such a layout)."""
    for s in strides:
        if s % itemsize:
            where = name or (f"argument {index}" if index is not None else "the array")
            raise StrideError(f"{where}: a stride of {s} bytes is not a multiple of the "
                              f"item size {itemsize}")


def buffer_device(buf, launch: int) -> int | None:
    """The device a DeviceBuffer's memory lives on when work on `launch` cannot use it,
    else None: its recorded device first, managed memory accepted, borrows asked of the
    driver once (and remembered). A class that only quacks like a buffer is asked of
    the driver each time."""
    alloc = getattr(buf, "_alloc", None)
    if alloc is None:
        return _aa.device_problem(buf.ptr, None, launch)
    known = alloc.device
    if known == launch or getattr(buf, "_dl_device_type", 2) == 13:
        return None  # managed memory (ManagedBuffer): reachable from every device
    ptr = buf.ptr
    if not ptr:
        return None
    facts = _aa.pointer_facts(ptr)
    if known < 0 and facts[0] == _aa.MEMORY_DEVICE and not facts[2]:
        alloc.device = facts[1]  # a borrow: remembered, as `DeviceBuffer.device` does
    return _aa.device_problem(ptr, known, launch, facts)


def order_after(consumer, producers) -> None:
    """Order work queued next on stream `consumer` (a raw handle, or anything
    `stream_handle` takes) after each producer stream handle of `producers` (CAI v3
    ``stream`` values), with no event where CUDA orders the two already (the same stream;
    the legacy default stream against the per-thread one or a blocking stream) and none
    on a stream being captured (see `array_adapters.order_launch_after`)."""
    if consumer is None or consumer.__class__ is not int:
        consumer = stream_handle(consumer)
    todo = [p for p in producers if not (p == 1 and consumer <= 1)]
    if todo:
        _aa.order_launch_after(consumer, todo)


# -- reading one array -------------------------------------------------------------------------

_UNSEEN = object()
_ADAPTERS = _aa.ADAPTERS
#: Classes read as cupric buffers: DeviceBuffer and its subclasses (also in
#: `OWN_BUFFERS`), and classes that quack like one (``ptr``, ``shape``, ``strides``,
#: ``itemsize``, ``dtype``) with no adapter, once seen. The kernel launch path shares it.
BUFFER_CLASSES: set = set()
#: The DeviceBuffer classes among them: these have the shared liveness record
#: (``_alloc._closed``) and a recorded device.
OWN_BUFFERS: set = set()
#: Adapter families whose arrays' interfaces never mark the memory read-only (CuPy,
#: PyTorch and numba-cuda all give ``data = (ptr, False)``).
_TRUSTED = frozenset({"cupy", "torch", "numba"})
_BUFFER_ATTRIBUTES = ("ptr", "shape", "strides", "itemsize", "dtype")


_FOREIGN: set = set()  # classes known not to be DeviceBuffers (hashable ones)


def _is_own(cls) -> bool:
    """Whether `cls` is DeviceBuffer or a subclass (remembered in both sets)."""
    if cls in _FOREIGN:
        return False
    from .memory import DeviceBuffer
    if not issubclass(cls, DeviceBuffer):
        if len(_FOREIGN) < 4096:
            _FOREIGN.add(cls)
        return False
    OWN_BUFFERS.add(cls)
    BUFFER_CLASSES.add(cls)
    return True


def _is_buffer(obj, cls, adapter) -> bool:
    """Whether `obj`'s class reads as a buffer (remembered in `BUFFER_CLASSES`)."""
    if _is_own(cls):
        return True
    if adapter is not None or isinstance(obj, np.ndarray) or \
            not all(hasattr(obj, a) for a in _BUFFER_ATTRIBUTES):
        return False
    BUFFER_CLASSES.add(cls)
    return True


def _buffer_parts(obj):
    if obj.__class__ in OWN_BUFFERS:
        alloc = obj._alloc
        if alloc._closed:
            check_open(obj)
        device = -1 if getattr(obj, "_dl_device_type", 2) == 13 else alloc.device
    else:
        device = -1
    return (obj.ptr, obj.shape, obj.strides, obj.dtype, getattr(obj, "readonly", False),
            None, device, BUFFER, obj)


def array_parts(obj, stream=None, with_device: bool = True):
    """``(ptr, shape, strides, dtype, readonly, producer, device, kind, owner)`` of one
    array argument, or raises; the tuple form of `read` for the launch path. With
    `with_device` False an adapter-read array's device is not asked (-1): machines with
    one GPU have nothing to check.

    `stream` matters only for DLPack producers, which are handed the consumer's stream
    and order their pending work before it themselves (their `producer` is None then).
    Nothing else is ordered here.
    """
    cls = obj.__class__
    if cls in BUFFER_CLASSES:
        return _buffer_parts(obj)
    adapter = _ADAPTERS.get(cls, _UNSEEN)
    if adapter is _UNSEEN:
        adapter = _aa.adapter_for(cls)
    if adapter is None and _is_buffer(obj, cls, adapter):
        return _buffer_parts(obj)
    if adapter is not None:
        parts = adapter.read(obj)
        if parts is not None and adapter.kind in _TRUSTED:
            ptr, shape, strides, dtype, producer = parts
            own = adapter.device(obj) if with_device else None
            return (ptr, shape, strides, dtype, False, producer,
                    -1 if own is None else own, adapter.kind, obj)
        # Custom adapters may not know the read-only flag: the interface says it.
    interface = protocol_of(obj)
    if interface is not None:
        from .dlpack import _wait_for_async_producer
        from .interop import _parse
        _wait_for_async_producer(obj)  # JAX: no stream to order after
        ptr, shape, strides, dtype, readonly, producer = _parse(interface)
        return ptr, shape, strides, dtype, readonly, producer, -1, CAI, obj
    from .dlpack import from_dlpack
    buf = from_dlpack(obj, stream)  # host tensors: HostMemoryError
    return (buf.ptr, buf.shape, buf.strides, buf.dtype, buf.readonly, None,
            buf._alloc.device, DLPACK, buf)


def protocol_of(obj):
    """The ``__cuda_array_interface__`` dict of `obj`, or None when `obj` is to be read
    through ``__dlpack__``; the typed error when it offers neither (or is host memory).
    Shared by `array_parts` and `cupric.runtime.interop.as_device_array`."""
    if isinstance(obj, np.ndarray):
        raise HostMemoryError("a NumPy array lives in host memory; copy it to the device "
                              "with cupric.runtime.to_device(array) first")
    failure = None
    try:
        interface = obj.__cuda_array_interface__
    except AttributeError:
        interface = None
    except Exception as exc:  # e.g. PyTorch CPU tensors raise here; DLPack may still say
        interface = None
        failure = exc
    if interface is not None or hasattr(obj, "__dlpack__"):
        return interface
    name = obj.__class__.__name__
    if failure is not None:
        raise NotAnArrayError(f"{name} is not a usable device array: {failure}") \
            from failure
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        raise HostMemoryError(f"{name} is a host array; copy it to the device with "
                              f"cupric.runtime.to_device(array) first")
    raise NotAnArrayError(f"{name} is not a device array: it has neither "
                          f"__cuda_array_interface__ nor __dlpack__")


def read(obj, stream=None) -> ArrayInfo:
    """The `ArrayInfo` of one array argument, unchecked beyond what reading needs (a
    closed DeviceBuffer raises `ClosedError`; host memory `HostMemoryError`); the
    producer's stream is reported, not ordered. `stream` is handed to DLPack producers.
    """
    return ArrayInfo(*array_parts(obj, stream))


def array_info(obj, stream=None, *, name: str | None = None, writable: bool = False,
               device: int | None = None, order: bool = True,
               with_device: bool = True) -> ArrayInfo:
    """One array argument, read and checked, with `stream` ordered after its producer.

    Parameters
    ----------
    obj : DeviceBuffer, PyTorch / CuPy / numba-cuda / JAX array, CAI or DLPack producer
    stream : optional
        The consumer stream (anything `stream_handle` takes; None: the legacy default
        stream): ordered after the producer's stream where CUDA does not order them.
    name : str, optional
        Names the argument in error messages.
    writable : bool
        The call writes the array: a read-only one raises `ReadOnlyError`.
    device : int, optional
        The ordinal the call runs on: memory it cannot reach raises
        `DeviceMismatchError`. None: no device check.
    order : bool
        False reports the producer in `ArrayInfo.producer` without ordering (the caller
        orders all arguments at once with `order_after`, after its own checks).
    with_device : bool
        False leaves `ArrayInfo.device` at -1 for adapter-read arrays unless `device` is
        given (machines with one GPU have nothing to compare it with).

    Raises
    ------
    ClosedError, HostMemoryError, NotAnArrayError, ReadOnlyError, DeviceMismatchError
        See the module docstring; TypeError/ValueError of a malformed interface.
    """
    try:
        parts = array_parts(obj, stream, with_device or device is not None)
    except (ClosedError, HostMemoryError, NotAnArrayError) as exc:
        if name is None:
            raise
        raise type(exc)(f"{name}: {exc}") from None
    except (TypeError, ValueError) as exc:  # a malformed interface: its plain error
        if name is None or type(exc) not in (TypeError, ValueError):
            raise
        raise type(exc)(f"{name}: {exc}") from None
    info = ArrayInfo(*parts)
    if info.kind not in _ITEM_STRIDES:
        check_strides(info.strides, info.itemsize, name)
    if writable and info.readonly:
        raise ReadOnlyError(f"{name or 'the array'} is read-only (its producer exported it "
                            f"read-only) but this call writes it")
    if device is not None and device >= 0:
        if info.kind == BUFFER:
            found = buffer_device(obj, device)
            if found is not None:
                raise DeviceMismatchError(
                    f"{name or 'the array'} lives on device {found}, but the call runs on "
                    f"device {device}", argument=name, device=found, expected=device)
        else:
            check_device(info, None, device, name or "the array")
    if order and info.producer is not None:
        order_after(stream, (info.producer,))
    return info


def as_buffer(obj, stream=None, *, name: str | None = None, writable: bool = False,
              ordered: list | None = None):
    """`obj` as a `DeviceBuffer`: the buffer itself (checked open), or a borrow of the
    memory that keeps `obj` alive and never frees it, with `stream` ordered after the
    producer's stream (once per producer when the caller passes its `ordered` list).

    Errors as `array_info`; for the memory protocols the borrow is what
    `cupric.runtime.as_device_array` makes, without building the interface dict for
    CuPy, PyTorch and numba-cuda arrays.
    """
    cls = obj.__class__
    if cls in OWN_BUFFERS or _is_own(cls):
        if obj._alloc._closed:
            check_open(obj, name)
        if writable and obj.readonly:
            raise ReadOnlyError(f"{name or 'the array'} is read-only (its producer exported "
                                f"it read-only) but this call writes it")
        if stream is not None and obj._stream is not None:
            handle = stream_handle(stream)
            producer = stream_handle(obj._stream) or 1
            if ordered is None or producer not in ordered:
                order_after(handle, (producer,))
                if ordered is not None:
                    ordered.append(producer)
        return obj
    info = array_info(obj, stream, name=name, writable=writable, order=False)
    producer = info.producer
    if producer is not None and (ordered is None or producer not in ordered):
        order_after(stream, (producer,))
        if ordered is not None:
            ordered.append(producer)
    if info.kind == DLPACK:
        return info.owner
    from .memory import borrow_validated
    return borrow_validated(info.ptr, info.shape, info.strides, info.dtype, info.readonly,
                            obj, stream if stream is not None else producer)
