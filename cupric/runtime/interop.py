"""Array interop: the CUDA Array Interface (v3) and DLPack, in and out, without copies.

`__cuda_array_interface__` is a dict a GPU array exposes (pointer, shape, typestr, strides,
and the `stream` its producer last wrote it on); a consumer orders its own work after that
stream. `as_device_array(obj)` turns any such object, any DLPack producer, or a
`DeviceBuffer`, into a `DeviceBuffer` that borrows the memory and keeps its owner alive.
"""

from __future__ import annotations

import operator

import numpy as np

from .memory import (DeviceBuffer, LEGACY_STREAM, borrow_validated, c_strides, cai_dict,
                     normalize_dtype, order_after, stream_handle)

__all__ = ["as_device_array", "from_cuda_array_interface", "parse_cuda_array_interface",
           "cai_dict", "is_device_array"]

_SUPPORTED_CAI_VERSIONS = (1, 2, 3)


_DTYPE_BY_TYPESTR: dict[str, np.dtype] = {}


def _dtype_of(typestr, descr) -> np.dtype:
    dtype = _DTYPE_BY_TYPESTR.get(typestr)
    if dtype is not None:
        return dtype
    try:
        dtype = np.dtype(typestr)
        if dtype.kind == "V" and descr is not None and descr != [("", typestr)]:
            return normalize_dtype(np.dtype([tuple(field) for field in descr]))
    except TypeError as exc:
        raise TypeError(f"__cuda_array_interface__ typestr {typestr!r} is not understood: "
                        f"{exc}") from None
    dtype = normalize_dtype(dtype)
    if dtype.kind != "V" and isinstance(typestr, str):
        _DTYPE_BY_TYPESTR[typestr] = dtype
    return dtype


def parse_cuda_array_interface(interface: dict) -> dict:
    """Validate a ``__cuda_array_interface__`` dict and normalize it.

    Returns
    -------
    dict
        ``ptr`` (int), ``shape`` (tuple), ``strides`` (bytes, never None), ``dtype``,
        ``readonly`` (bool) and ``stream`` (int handle, or None when the producer needs no
        synchronization).

    Raises
    ------
    TypeError
        For a malformed dict or an unsupported typestr.
    ValueError
        For a mask (masked arrays are not supported), a version cupric does not know,
        strides of the wrong length, or ``stream == 0`` (forbidden by the protocol).
    """
    return dict(zip(("ptr", "shape", "strides", "dtype", "readonly", "stream"),
                    _parse(interface)))


def _parse(interface):
    if type(interface) is not dict:
        if not isinstance(interface, dict):
            raise TypeError(f"__cuda_array_interface__ must be a dict, got "
                            f"{type(interface).__name__}")
    try:
        shape = interface["shape"]
        typestr = interface["typestr"]
        data = interface["data"]
        version = interface["version"]
    except KeyError as exc:
        raise TypeError(f"__cuda_array_interface__ lacks the required key {exc}") from None
    if version not in _SUPPORTED_CAI_VERSIONS:
        raise ValueError(f"__cuda_array_interface__ version {version} is not supported "
                         f"(cupric reads versions {_SUPPORTED_CAI_VERSIONS})")
    if type(shape) is not tuple or not all(type(n) is int for n in shape):
        try:
            shape = tuple(operator.index(n) for n in shape)
        except TypeError:
            raise TypeError(f"__cuda_array_interface__['shape'] must be a tuple of ints, "
                            f"got {shape!r}") from None
    dtype = _dtype_of(typestr, interface.get("descr"))
    if type(data) is not tuple or len(data) != 2:
        raise TypeError(f"__cuda_array_interface__['data'] must be (pointer, read_only), got "
                        f"{data!r}")
    ptr = data[0]
    if type(ptr) is not int:
        ptr = 0 if ptr is None else operator.index(ptr)
    readonly = bool(data[1])
    if interface.get("mask") is not None:
        raise ValueError("masked CUDA arrays (__cuda_array_interface__['mask']) are not "
                         "supported")
    strides = interface.get("strides")
    if strides is None:
        strides = c_strides(shape, dtype.itemsize)
    else:
        strides = tuple(operator.index(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"__cuda_array_interface__ has {len(strides)} strides for "
                             f"{len(shape)} dimensions")
    stream = interface.get("stream") if version >= 3 else None
    if stream is not None:
        if type(stream) is not int:
            if isinstance(stream, bool) or not isinstance(stream, int):
                raise TypeError(f"__cuda_array_interface__['stream'] must be an int or "
                                f"None, got {type(stream).__name__}")
            stream = int(stream)
        if stream == 0:
            raise ValueError("__cuda_array_interface__['stream'] is 0, which the protocol "
                             "forbids as ambiguous (1 means the legacy default stream)")
    return ptr, shape, strides, dtype, readonly, stream


def from_cuda_array_interface(obj, interface: dict | None = None, stream=None) -> DeviceBuffer:
    """A `DeviceBuffer` borrowing the memory an object exposes by
    ``__cuda_array_interface__``.

    The producer's `stream` is honoured as the protocol asks: work queued later on
    `stream` (the legacy default stream when None) waits for the producer's stream,
    through an event; the host does not block.
    """
    if interface is None:
        interface = obj.__cuda_array_interface__
    ptr, shape, strides, dtype, readonly, producer = _parse(interface)
    if producer is not None:
        order_after(stream_handle(stream), producer)
    kept = stream if stream is not None else producer
    return borrow_validated(ptr, shape, strides, dtype, readonly, obj, kept)


def is_device_array(obj) -> bool:
    """True for a DeviceBuffer or an object exposing CUDA memory by CAI or DLPack.

    Never raises and never consumes anything (DLPack objects are asked for their device
    only).
    """
    if isinstance(obj, DeviceBuffer):
        return True
    if isinstance(obj, np.ndarray):
        return False
    try:
        if getattr(obj, "__cuda_array_interface__", None) is not None:
            return True
    except Exception:  # properties that raise for host tensors (PyTorch CPU): not device
        pass
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    try:
        from .dlpack import DEVICE_CUDA, DEVICE_CUDA_MANAGED
        return int(device()[0]) in (DEVICE_CUDA, DEVICE_CUDA_MANAGED)
    except Exception:  # a producer whose __dlpack_device__ fails is not usable here
        return False


def as_device_array(obj, stream=None) -> DeviceBuffer:
    """A `DeviceBuffer` for any device array, without copying.

    Parameters
    ----------
    obj : DeviceBuffer, or an object with ``__cuda_array_interface__`` or ``__dlpack__``
        PyTorch, CuPy, JAX, numba-cuda arrays and cupric's own buffers. The CUDA Array
        Interface is preferred where both are offered (it consumes nothing).
    stream : Stream, optional
        The stream the memory will be used on: it is made to wait for the producer's
        stream (CAI ``stream`` key, DLPack ``stream`` argument).

    Returns
    -------
    DeviceBuffer
        `obj` itself for a DeviceBuffer; otherwise a borrow that keeps `obj` alive and
        never frees its memory.

    Raises
    ------
    TypeError
        For host arrays (NumPy, PyTorch CPU tensors...), saying to copy them with
        `cupric.runtime.to_device` first, and for objects that are not arrays.

    Cost
    ----
    A DeviceBuffer: none. CAI: reading the dict and one small Python object (a few
    microseconds), plus an event record and wait when the producer names a stream other
    than the consumer's. DLPack: a capsule round trip.

    Examples
    --------
    >>> x = torch.randn(1000, device="cuda")                   # doctest: +SKIP
    >>> buf = cupric.runtime.as_device_array(x)   # same memory as x
    """
    if isinstance(obj, DeviceBuffer):
        obj._check_open()
        if stream is not None and obj._stream is not None:
            order_after(stream_handle(stream), stream_handle(obj._stream) or LEGACY_STREAM)
        return obj
    from .intake import protocol_of  # the typed errors of host memory and non-arrays
    interface = protocol_of(obj)
    if interface is not None:
        return from_cuda_array_interface(obj, interface, stream)
    from .dlpack import from_dlpack
    return from_dlpack(obj, stream)
