"""Descriptors of cuDNN's legacy (fixed-function) API: tensors, activations, pooling,
dropout.

The legacy entry points take opaque descriptor objects (``cudnnTensorDescriptor_t`` and
friends) created, set and destroyed through their own calls. Tensor descriptors depend
only on (element type, dims, strides), so cupric makes each once and shares it from a
bounded cache; the others are owned by the objects that use them.
"""

from __future__ import annotations

import collections
import threading

from cupric.runtime.errors import ClosedError
from cupric.runtime.resource import Resource

from . import _validate as V

__all__ = ["LegacyDescriptor", "tensor_descriptor", "describe", "scalars",
           "legacy_dims", "clear_cache", "tensor_descriptor_of", "backend_tensor_of",
           "publish"]


def _lib():
    from . import lib
    return lib


def _destroy(raw: int, destroy_name: str, ctype: str) -> None:
    lib = _lib()
    lib.check(getattr(lib.lib, destroy_name)(lib.ffi.cast(ctype, raw)))


class LegacyDescriptor(Resource):
    """One owned legacy descriptor (tensor, activation, pooling, dropout...).

    No public constructor: `LegacyDescriptor.create("Tensor")` calls
    ``cudnnCreateTensorDescriptor`` and destroys with ``cudnnDestroyTensorDescriptor``.

    Thread safety
    -------------
    A descriptor set once and then only read (every descriptor cupric shares) may be
    used from several threads at once.
    """

    __slots__ = ("_ptr", "kind", "_ctype", "_keep")

    def __init__(self, *args, **kwargs):
        raise TypeError("cuDNN descriptors have no public constructor; use "
                        "LegacyDescriptor.create(kind)")

    @classmethod
    def create(cls, kind: str) -> "LegacyDescriptor":
        """A new ``cudnn<kind>Descriptor_t`` (kind: "Tensor", "Activation", "Pooling",
        "Dropout")."""
        lib = _lib()
        ffi = lib.ffi
        ctype = f"cudnn{kind}Descriptor_t"
        out = ffi.new(f"{ctype} *")
        lib.check(getattr(lib.lib, f"cudnnCreate{kind}Descriptor")(out))
        raw = int(ffi.cast("uintptr_t", out[0]))
        self = cls.__new__(cls)
        self._ptr = raw
        self.kind = kind
        self._ctype = ctype
        self._keep = None
        self._init_resource(raw, _destroy, f"cudnnDestroy{kind}Descriptor", ctype)
        return self

    def _label(self) -> str:
        return f"cuDNN {self.kind} descriptor"

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"0x{self._ptr:x}"
        return f"<cupric.cudnn.LegacyDescriptor {self.kind} {state}>"

    @property
    def raw(self):
        """The descriptor as its cffi C type."""
        if self._closed:
            raise ClosedError(f"this cuDNN {self.kind} descriptor is closed")
        return _lib().ffi.cast(self._ctype, self._ptr)

    def keep(self, obj) -> None:
        """Keep `obj` alive as long as the descriptor (memory it points at)."""
        self._keep = obj


# --------------------------------------------------------------------------------------
# Tensor descriptors


def legacy_dims(shape, strides) -> tuple[tuple, tuple]:
    """Dims and strides padded to at least 4 dimensions (the legacy routines want 4-d or
    5-d descriptors; trailing unit dimensions change nothing).

    Raises
    ------
    ValueError
        For more than 8 dimensions or an extent/stride beyond int32.
    """
    shape = tuple(shape)
    strides = tuple(strides)
    if len(shape) > 8:
        raise ValueError(f"cuDNN tensors have at most 8 dimensions, got shape {shape}")
    while len(shape) < 4:
        shape = shape + (1,)
        strides = strides + (1,)
    for v in shape + strides:
        if v > V.INT32_MAX:
            raise ValueError(f"shape {shape} / strides {strides} exceed the int32 range "
                             f"of cuDNN's legacy tensor descriptors")
    return shape, strides


_cache: "collections.OrderedDict[tuple, LegacyDescriptor]" = collections.OrderedDict()
_cache_lock = threading.Lock()
_CACHE_LIMIT = 256


def publish(cache: dict, lock, key, d: LegacyDescriptor,
            limit: int | None = None) -> LegacyDescriptor:
    """The shared descriptor of `key`: `d`, just made, now in `cache` (guarded by `lock`),
    or the one another thread put there first (then `d` is closed). With `limit` (an
    OrderedDict cache), the oldest entry is dropped past it: dropped descriptors are
    destroyed when the last user lets go of them."""
    with lock:
        existing = cache.get(key)
        if existing is not None:
            d.close()
            return existing
        cache[key] = d
        if limit is not None and len(cache) > limit:
            cache.popitem(last=False)
    return d


def tensor_descriptor(etype: str, shape, strides) -> LegacyDescriptor:
    """The shared tensor descriptor of (element type, dims, element strides).

    Cost
    ----
    A dictionary lookup when seen before; otherwise two cuDNN calls.
    """
    shape, strides = legacy_dims(shape, strides)
    key = (etype, shape, strides)
    d = _cache.get(key)
    if d is not None:
        return d
    lib = _lib()
    ffi = lib.ffi
    d = LegacyDescriptor.create("Tensor")
    n = len(shape)
    lib.check(lib.lib.cudnnSetTensorNdDescriptor(
        d.raw, V.DATA_TYPES[etype], n, ffi.new("int[]", list(shape)),
        ffi.new("int[]", list(strides))))
    return publish(_cache, _cache_lock, key, d, _CACHE_LIMIT)


def describe(t: V.Tensor) -> LegacyDescriptor:
    """The tensor descriptor of a validated `Tensor`."""
    return tensor_descriptor(t.etype, t.shape, t.strides)


def clear_cache() -> None:
    """Drop the shared tensor descriptors (they are destroyed once unused)."""
    with _cache_lock:
        _cache.clear()


# --------------------------------------------------------------------------------------
# Scaling factors


_scalars: dict[str, tuple] = {}


def scalars(etype: str) -> tuple:
    """(alpha = 1, beta = 0) host pointers of the type the legacy routines read for data
    of `etype`: double for double data, float otherwise."""
    pair = _scalars.get(etype)
    if pair is None:
        ffi = _lib().ffi
        ctype = "double[1]" if etype == "f64" else "float[1]"
        pair = (ffi.new(ctype, [1.0]), ffi.new(ctype, [0.0]))
        _scalars[etype] = pair
    return pair


# --------------------------------------------------------------------------------------
# Descriptors straight from device arrays


def tensor_descriptor_of(array, *, name: str = "array") -> LegacyDescriptor:
    """The (shared) legacy tensor descriptor of a device array: element type, dims and
    strides read from the array (NCHW, NHWC or any strides; float32, float16, bfloat16,
    float64).

    Raises
    ------
    TypeError, ValueError
        As the operations do, naming `name`.
    """
    t = V.tensor(array, name, "tensor_descriptor_of", ndims=tuple(range(1, 9)),
                 layouts=False)
    return describe(t)


def backend_tensor_of(array, uid: int, *, name: str = "array", virtual: bool = False,
                      finalize: bool = True):
    """A graph-API tensor descriptor (``CUDNN_BACKEND_TENSOR_DESCRIPTOR``) of a device
    array: its dims, strides, element type and pointer alignment, under unique id `uid`.

    ``finalize=False`` leaves it open (what runs without a GPU). The descriptor describes
    the array; it does not keep the memory alive.

    Returns
    -------
    cupric.cudnn.backend.Descriptor
    """
    from .backend import Descriptor
    t = V.tensor(array, name, "backend_tensor_of", ndims=tuple(range(1, 9)), layouts=False)
    d = Descriptor.create("TENSOR")
    d.set("TENSOR_DATA_TYPE", t.etype)
    d.set("TENSOR_DIMENSIONS", t.shape)
    d.set("TENSOR_STRIDES", t.strides)
    d.set("TENSOR_UNIQUE_ID", uid)
    d.set("TENSOR_BYTE_ALIGNMENT", V.alignment_of(t.ptr))
    d.set("TENSOR_IS_VIRTUAL", virtual)
    if finalize:
        d.finalize()
    return d
