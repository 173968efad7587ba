"""DLPack: the C-level tensor exchange format, passed between libraries in a PyCapsule.

A producer hands out a `DLManagedTensor` (or, since DLPack 1.0, a `DLManagedTensorVersioned`)
describing its memory (device, dtype, shape, strides) plus a deleter; the consumer renames
the capsule to mark it used and calls the deleter when it no longer needs the memory.
This module declares those structs with ctypes, exports `DeviceBuffer`s and imports any
`__dlpack__` object, without copies.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = [
    "DLDevice", "DLDataType", "DLTensor", "DLManagedTensor", "DLPackVersion",
    "DLManagedTensorVersioned", "to_dlpack", "from_dlpack", "dlpack_device",
    "DEVICE_CPU", "DEVICE_CUDA", "DEVICE_CUDA_HOST", "DEVICE_CUDA_MANAGED",
    "FLAG_READ_ONLY", "FLAG_IS_COPIED", "VERSION",
]

# DLDeviceType values (dlpack.h).
DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3
DEVICE_CUDA_MANAGED = 13

# DLDataTypeCode values.
CODE_INT = 0
CODE_UINT = 1
CODE_FLOAT = 2
CODE_BFLOAT = 4
CODE_COMPLEX = 5
CODE_BOOL = 6

# DLManagedTensorVersioned.flags bits.
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1

# The DLPack ABI version cupric implements and exports.
VERSION = (1, 0)

_NAME_LEGACY = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_NAME_USED_LEGACY = b"used_dltensor"
_NAME_USED_VERSIONED = b"used_dltensor_versioned"


class DLDevice(ctypes.Structure):
    """Where the tensor's memory lives: device type and ordinal."""
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """Element type: type code, bits per lane and lane count (1 for scalars)."""
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """The tensor itself; `shape` and `strides` (in elements, may be NULL) have `ndim`
    entries; the first element is at ``data + byte_offset``."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# void (*deleter)(DLManagedTensor*); declared with a void* argument, the address.
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    """The unversioned (pre-1.0) managed tensor, in capsules named ``"dltensor"``."""
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """The versioned managed tensor (DLPack >= 1.0), in capsules named
    ``"dltensor_versioned"``; `flags` carries read-only and is-copied bits."""
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# --------------------------------------------------------------------------------------
# PyCapsule C API through ctypes (pythonapi holds the GIL and raises Python errors).

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_PyCapsule_New = _api.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]

_PyCapsule_GetName = _api.PyCapsule_GetName
_PyCapsule_GetName.restype = ctypes.c_char_p
_PyCapsule_GetName.argtypes = [ctypes.py_object]

_PyCapsule_GetPointer = _api.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_PyCapsule_SetName = _api.PyCapsule_SetName
_PyCapsule_SetName.restype = ctypes.c_int
_PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]

_PyCapsule_IsValid = _api.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

# The same functions taking the capsule as a raw PyObject*, for the capsule destructor
# (which receives a borrowed pointer to a capsule being destroyed).
_raw_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_raw_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# Names must outlive every capsule: static buffers, never freed.
_STATIC_NAMES = {name: ctypes.create_string_buffer(name) for name in
                 (_NAME_LEGACY, _NAME_VERSIONED, _NAME_USED_LEGACY, _NAME_USED_VERSIONED)}


def _wait_for_async_producer(obj) -> None:
    """JAX arrays: wait until the array's data exist. JAX exposes no stream its work runs
    on (``__cuda_array_interface__`` names none), and reading a JAX array right after a
    ``device_put`` read zeros in our GPU lane. A ready array (the common case) costs one
    ``is_ready()`` call; other producers are not touched."""
    if type(obj).__module__.startswith(("jax", "jaxlib")):
        is_ready = getattr(obj, "is_ready", None)
        if is_ready is None or not is_ready():
            obj.block_until_ready()


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


# --------------------------------------------------------------------------------------
# dtypes


def dtype_to_dlpack(dtype: np.dtype) -> tuple[int, int, int]:
    """(code, bits, lanes) of a NumPy dtype.

    Raises
    ------
    BufferError
        For dtypes DLPack cannot describe (structured, strings, ...).
    """
    dt = np.dtype(dtype)
    if dt.byteorder == ">":
        raise BufferError(f"DLPack holds native little-endian data; dtype {dt} is big-endian")
    kind = dt.kind
    bits = dt.itemsize * 8
    if kind == "b":
        return CODE_BOOL, 8, 1
    if kind == "i":
        return CODE_INT, bits, 1
    if kind == "u":
        return CODE_UINT, bits, 1
    if kind == "f":
        return CODE_FLOAT, bits, 1
    if kind == "c":
        return CODE_COMPLEX, bits, 1
    if dt.name == "bfloat16":  # ml_dtypes' bfloat16 (kind 'V')
        return CODE_BFLOAT, 16, 1
    raise BufferError(f"dtype {dt} has no DLPack equivalent")


def dtype_from_dlpack(code: int, bits: int, lanes: int) -> np.dtype:
    """The NumPy dtype of a DLPack (code, bits, lanes).

    Raises
    ------
    TypeError
        For vector types (lanes > 1) and codes NumPy has no dtype for.
    """
    if lanes != 1:
        raise TypeError(f"DLPack vector types (lanes={lanes}) are not supported")
    name = {CODE_INT: "int", CODE_UINT: "uint", CODE_FLOAT: "float",
            CODE_COMPLEX: "complex"}.get(code)
    if code == CODE_BOOL and bits == 8:
        return np.dtype(np.bool_)
    if code == CODE_BFLOAT and bits == 16:
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError("DLPack bfloat16 needs the ml_dtypes package for a NumPy "
                            "dtype (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    if name is not None:
        try:
            return np.dtype(f"{name}{bits}")
        except TypeError:
            pass
    raise TypeError(f"DLPack dtype (code={code}, bits={bits}) has no NumPy dtype")


# --------------------------------------------------------------------------------------
# Export


class _Export:
    """What an exported tensor keeps alive until the consumer calls its deleter."""

    __slots__ = ("struct", "shape", "strides", "buffer")

    def __init__(self, struct, shape, strides, buffer) -> None:
        self.struct = struct
        self.shape = shape
        self.strides = strides
        self.buffer = buffer


# Struct address -> _Export. The deleter removes the entry; until then the buffer lives.
_exports: dict[int, _Export] = {}
_exports_lock = threading.Lock()


def _deleter(address) -> None:
    with _exports_lock:
        _exports.pop(address, None)


def _capsule_destructor(capsule) -> None:
    # A capsule dying unconsumed still owns its tensor: hand it back (the consumer never
    # took it). A consumed capsule was renamed "used_..." and is the consumer's business.
    for name in (_NAME_VERSIONED, _NAME_LEGACY):
        if _raw_IsValid(capsule, name):
            address = _raw_GetPointer(capsule, name)
            if address:
                _deleter(address)
            return


_DELETER_C = DELETER(_deleter)
_DESTRUCTOR_C = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def export_count() -> int:
    """How many exported tensors have not been handed back (for tests)."""
    return len(_exports)


def dlpack_device(buf) -> tuple[int, int]:
    """``(device_type, device_id)`` of a `DeviceBuffer` (``__dlpack_device__``)."""
    return getattr(buf, "_dl_device_type", DEVICE_CUDA), buf.device


def _consumer_stream(stream) -> int | None:
    """The consumer's stream of the DLPack protocol as a raw handle; None: do not sync."""
    if stream is None:
        return 1  # the protocol's default for CUDA: the legacy default stream
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"__dlpack__(stream=...) takes an int for CUDA, got "
                        f"{type(stream).__name__}")
    if stream == -1:
        return None
    if stream == 0:
        raise ValueError("__dlpack__(stream=0) is ambiguous and not allowed by the DLPack "
                         "protocol: pass 1 for the legacy default stream, 2 for the "
                         "per-thread default stream")
    return stream


def to_dlpack(buf, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Export a `DeviceBuffer` as a DLPack capsule (what ``buf.__dlpack__`` returns).

    Parameters
    ----------
    stream : int, optional
        The consumer's stream (1: legacy default, 2: per-thread default, other: a
        `CUstream` handle, -1: do not synchronize). When the buffer has a producing
        stream (`DeviceBuffer.stream`), the consumer's stream is made to wait for it.
    max_version : tuple of int, optional
        The newest DLPack version the consumer understands; ``(1, x)`` or newer gives a
        versioned capsule, None or ``(0, x)`` the legacy one.
    dl_device : tuple, optional
        Must be the buffer's own device; cupric does not copy across devices.
    copy : bool, optional
        True: export a fresh device copy (flagged as copied); False or None: no copy.

    Raises
    ------
    BufferError
        For another `dl_device`, a dtype DLPack lacks, or byte strides that are not a
        multiple of the item size.
    ClosedError
        If the buffer was closed.

    Safety
    ------
    The capsule keeps the buffer's allocation alive until its consumer calls the deleter,
    but an explicit ``close()`` of the buffer frees the memory regardless.
    """
    buf._check_open()
    device = dlpack_device(buf)
    if dl_device is not None and tuple(int(x) for x in dl_device) != device:
        raise BufferError(f"this buffer lives on DLPack device {device}; cupric does not "
                          f"copy it to {tuple(dl_device)}")
    consumer = _consumer_stream(stream)
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, got {copy!r}")
    copied = False
    if copy:
        buf = buf.copy()
        copied = True
    if consumer is not None and buf._stream is not None:
        from .memory import order_after, stream_handle
        order_after(consumer, stream_handle(buf._stream))
    code, bits, lanes = dtype_to_dlpack(buf.dtype)
    ndim = buf.ndim
    itemsize = buf.itemsize
    shape = (ctypes.c_int64 * max(ndim, 1))(*buf.shape)
    element_strides = []
    for s in buf.strides:
        if s % itemsize:
            raise BufferError(f"byte strides {buf.strides} are not multiples of the item "
                              f"size {itemsize}; DLPack counts strides in elements")
        element_strides.append(s // itemsize)
    strides = (ctypes.c_int64 * max(ndim, 1))(*element_strides)
    versioned = max_version is not None and int(max_version[0]) >= 1
    if versioned:
        struct = DLManagedTensorVersioned()
        struct.version.major, struct.version.minor = VERSION
        flags = 0
        if buf.readonly:
            flags |= FLAG_READ_ONLY
        if copied:
            flags |= FLAG_IS_COPIED
        struct.flags = flags
        name = _NAME_VERSIONED
    else:
        struct = DLManagedTensor()
        name = _NAME_LEGACY
    tensor = struct.dl_tensor
    tensor.data = buf.ptr or None
    tensor.device.device_type, tensor.device.device_id = device
    tensor.ndim = ndim
    tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, lanes
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    tensor.byte_offset = 0
    struct.manager_ctx = None
    struct.deleter = _DELETER_C
    address = ctypes.addressof(struct)
    with _exports_lock:
        _exports[address] = _Export(struct, shape, strides, buf)
    try:
        return _PyCapsule_New(address, _STATIC_NAMES[name], _DESTRUCTOR_C)
    except BaseException:
        _deleter(address)
        raise


# --------------------------------------------------------------------------------------
# Import


def _call_deleter(function_address: int, tensor_address: int) -> None:
    DELETER(function_address)(tensor_address)


def parse_capsule(capsule):
    """Consume a DLPack capsule: read its tensor, mark it used, return what was read.

    Returns
    -------
    dict
        ``ptr``, ``shape``, ``strides`` (bytes), ``dtype``, ``device`` (type, id),
        ``readonly``, and ``release``: a callable that hands the tensor back to its
        producer (its deleter), or None when it has none. The caller must run `release`
        exactly once, when it no longer uses the memory.

    Raises
    ------
    ValueError
        If the capsule was already consumed or is not a DLPack capsule.
    BufferError
        For a versioned tensor of a newer major version than 1.
    TypeError
        For a dtype NumPy cannot represent.
    """
    if not _is_capsule(capsule):
        raise TypeError(f"expected a DLPack PyCapsule, got {type(capsule).__name__}")
    name = _PyCapsule_GetName(capsule)
    if name in (_NAME_USED_LEGACY, _NAME_USED_VERSIONED):
        raise ValueError("this DLPack capsule was already consumed; a capsule can be "
                         "imported once")
    if name == _NAME_VERSIONED:
        address = _PyCapsule_GetPointer(capsule, _NAME_VERSIONED)
        managed = DLManagedTensorVersioned.from_address(address)
        if managed.version.major > VERSION[0]:
            raise BufferError(f"the producer's DLPack {managed.version.major}."
                              f"{managed.version.minor} tensor is newer than the "
                              f"{VERSION[0]}.x cupric reads")
        readonly = bool(managed.flags & FLAG_READ_ONLY)
        used = _NAME_USED_VERSIONED
    elif name == _NAME_LEGACY:
        address = _PyCapsule_GetPointer(capsule, _NAME_LEGACY)
        managed = DLManagedTensor.from_address(address)
        readonly = False
        used = _NAME_USED_LEGACY
    else:
        raise ValueError(f"not a DLPack capsule (its name is {name!r})")
    tensor = managed.dl_tensor
    dtype = dtype_from_dlpack(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    ndim = tensor.ndim
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if tensor.strides:
        strides = tuple(int(tensor.strides[i]) * dtype.itemsize for i in range(ndim))
    else:
        from .memory import c_strides
        strides = c_strides(shape, dtype.itemsize)
    ptr = (tensor.data or 0) + int(tensor.byte_offset)
    deleter = ctypes.cast(managed.deleter, ctypes.c_void_p).value
    release = None
    if deleter:
        import functools
        release = functools.partial(_call_deleter, deleter, address)
    # From here on we own the tensor: the capsule's destructor must not delete it.
    if _PyCapsule_SetName(capsule, ctypes.addressof(_STATIC_NAMES[used])) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    return {"ptr": ptr, "shape": shape, "strides": strides, "dtype": dtype,
            "device": (int(tensor.device.device_type), int(tensor.device.device_id)),
            "readonly": readonly, "release": release}


_DEVICE_NAMES = {DEVICE_CPU: "CPU", DEVICE_CUDA: "CUDA", DEVICE_CUDA_HOST: "CUDA host (pinned)",
                 DEVICE_CUDA_MANAGED: "CUDA managed", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                 10: "ROCm", 14: "oneAPI"}


def _check_device(device_type: int) -> None:
    if device_type in (DEVICE_CUDA, DEVICE_CUDA_MANAGED):
        return
    where = _DEVICE_NAMES.get(device_type, f"device type {device_type}")
    from .intake import HostMemoryError, NotAnArrayError  # TypeErrors, as ever
    if device_type in (DEVICE_CPU, DEVICE_CUDA_HOST):
        raise HostMemoryError(f"this array lives in {where} memory, not on a CUDA device; "
                              f"copy it to the device with cupric.runtime.to_device() first")
    raise NotAnArrayError(f"this array lives on {where}, not on a CUDA device")


def from_dlpack(obj, stream=None):
    """A `DeviceBuffer` borrowing the memory of a DLPack producer, without a copy.

    Parameters
    ----------
    obj : object with ``__dlpack__``, or a DLPack PyCapsule
        A CUDA (or CUDA managed) tensor: PyTorch, CuPy, JAX, numba-cuda, another
        `DeviceBuffer`...
    stream : Stream, optional
        The stream the memory will be used on; the producer makes it wait for its pending
        work (the legacy default stream when None).

    Returns
    -------
    DeviceBuffer
        Keeps `obj` alive and never frees its memory; closing it (or its death) hands the
        tensor back through the producer's deleter.

    Raises
    ------
    TypeError
        For host (CPU) tensors, with the advice to copy them with `to_device`, and for
        dtypes without a NumPy equivalent.
    BufferError, ValueError
        For a producer's newer DLPack major version, or a capsule consumed already.
    """
    from .memory import borrow
    from .stream import as_stream_handle as stream_handle
    if _is_capsule(obj):
        info = parse_capsule(obj)
        owner = None
    else:
        device_fn = getattr(obj, "__dlpack_device__", None)
        if device_fn is not None:
            _check_device(int(device_fn()[0]))
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{type(obj).__name__} does not implement __dlpack__")
        handle = stream_handle(stream)
        consumer = handle if handle != 0 else 1
        _wait_for_async_producer(obj)
        try:
            capsule = obj.__dlpack__(stream=consumer, max_version=VERSION)
        except TypeError:
            # Producers older than DLPack 1.0 take no max_version.
            capsule = obj.__dlpack__(stream=consumer)
        info = parse_capsule(capsule)
        owner = obj
    try:
        _check_device(info["device"][0])
    except TypeError:
        if info["release"] is not None:
            info["release"]()
        raise
    buf = borrow(info["ptr"], info["shape"], info["strides"], info["dtype"],
                 readonly=info["readonly"], owner=owner, release=info["release"],
                 device=info["device"][1], stream=stream)
    return buf
