"""The ready kernels' plans: for a call whose arrays are of one kind and dtype, the
checks their kernel needs, found once per (array class, dtype) and made in a few
attribute reads per call, before the arrays go to the kernel's compiled launcher as they
are (or as 1-D views of their memory), with no `Call` made; what a plan refuses takes
`Call`'s general path, with its checks and errors. PyTorch tensors and CuPy arrays handed
over as they are are checked once, by the launcher itself (`attempt`), which gives back
what it refuses."""

from __future__ import annotations

import numpy as np

from cupric.kernels import _common
from cupric.compiler.launcher import attempt, launch_now
from cupric.kernels._foreign import _DIRECT, _TRANSIENT
from cupric.runtime.array_adapters import ADAPTERS as _ADAPTERS
from cupric.runtime.array_adapters import adapter_for as _adapter_for
from cupric.runtime.intake import order_after as _order_after
from cupric.runtime.intake import stream_handle as _stream_handle
from cupric.runtime.memory import DeviceBuffer as _DeviceBuffer

__all__ = ["Plans", "direct", "direct_views", "order_cupy", "forget_plans", "launch_now",
           "attempt"]

_UNSEEN = object()


#: Every `Plans` table (`forget_plans` empties them).
_PLAN_TABLES: list = []
_BUFFER, _CUPY, _TORCH = 0, 1, 2


class Plans(dict):
    """One ready kernel's plans: (array class, the arrays' own ``dtype``) -> (kind,
    NumPy dtype, PyTorch's ``strided`` layout or CuPy's adapter) for the arrays its
    kernel takes as they are (DeviceBuffers; PyTorch tensors and CuPy arrays on a
    one-GPU machine, read by the compiled launcher), or None for every other class or a
    dtype outside `dtypes`. Made at a key's first use (`__missing__`); a hit is one dict
    lookup. `direct` and `direct_views` read it.

    Thread safety
    -------------
    A plan depends only on its key, so two threads making one store equal values.
    """

    __slots__ = ("dtypes",)

    def __init__(self, dtypes) -> None:
        super().__init__()
        self.dtypes = frozenset(np.dtype(d) for d in dtypes)
        _PLAN_TABLES.append(self)

    def __missing__(self, key):
        plan = _plan(key[0], key[1], self.dtypes)
        if len(self) < 256:  # classes and dtypes are few; a stream of new ones is not kept
            self[key] = plan
        return plan


def _plan(cls, raw, dtypes):
    """`Plans`' value for arrays of class `cls` with ``dtype`` `raw`."""
    if cls is _DeviceBuffer:
        return (_BUFFER, raw, None) if raw in dtypes else None
    adapter = _ADAPTERS.get(cls, _UNSEEN)
    if adapter is _UNSEEN:
        adapter = _adapter_for(cls)
    if adapter is None or adapter.kind not in _common._FOREIGN_KINDS or \
            not _common._single_device():
        return None
    if adapter.kind == "cupy":
        dtype = adapter.dtypes[raw]
        kind, extra = _CUPY, adapter
    else:
        dtype = adapter.dtypes.get(raw)
        kind, extra = _TORCH, adapter.strided
    if dtype is None or dtype is False or dtype.kind == "V" or dtype not in dtypes:
        return None
    return kind, dtype, extra


def forget_plans() -> None:
    """Empty every `Plans` table (tests that swap the array adapters or the device count
    start afresh)."""
    for table in _PLAN_TABLES:
        table.clear()


def _lookup(plans: Plans, first):
    """The plan of arrays like `first` in `plans`, or None."""
    if _common.on_simulator():
        return None
    try:
        return plans[first.__class__, first.dtype]
    except (AttributeError, TypeError):  # no dtype, or an unhashable one
        return None


def _admit(plans: Plans, arrays: tuple, stream, written, shape, plan=_UNSEEN):
    """`arrays`' plan when they share one class and dtype with a plan in `plans` (and,
    unless `shape` is None, that shape) and pass the per-array checks of their kind
    (`direct_views`), else None. `plan`: the first array's, when looked up already."""
    first = arrays[0]
    if plan is _UNSEEN:
        plan = _lookup(plans, first)
    if plan is None:
        return None
    cls, raw = first.__class__, first.dtype
    kind = plan[0]
    if kind == _BUFFER:
        for arr in arrays:
            if arr.__class__ is not cls or arr.dtype is not raw or arr.allocation.closed or \
                    (shape is not None and arr.shape != shape) or \
                    (stream is not None and arr.ordering_stream is not None):
                return None
        if written is not None and written.readonly:
            return None
    elif not _common._FOREIGN[0]:
        return None
    elif kind == _TORCH:
        strided = plan[2]
        for arr in arrays:
            if arr.__class__ is not cls or arr.dtype is not raw or not arr.is_cuda or \
                    arr.requires_grad or arr.layout is not strided or \
                    (shape is not None and arr.shape != shape):
                return None
    else:
        for arr in arrays:
            if arr.__class__ is not cls or arr.dtype is not raw or \
                    not getattr(arr, "_c_contiguous", False) or \
                    (shape is not None and arr.shape != shape):
                return None
    return plan


def direct(plans: Plans, arrays: tuple, stream, written=None):
    """(NumPy dtype, length, checked) when `arrays` may go to the kernel as they are: the
    first one non-empty and 1-D, of a class and dtype with a plan in `plans`. None
    otherwise: the caller then takes `Call`'s general path, which makes every check
    and raises its errors, so a refused call behaves as before.

    DeviceBuffers are checked here (`checked` True; the caller launches with
    `launch_now`): one class, dtype and shape, open, `written` (one of `arrays`, or None)
    not read-only, and with a `stream` given, none that names a stream of its own (the
    general path orders the call after it). PyTorch tensors and CuPy arrays (`checked`
    False) are checked by the kernel's launcher, which the caller reaches with
    ``attempt(kern, ..., arrays, length)``: each array of the launcher's class and dtype,
    1-D of that length; tensors on the GPU, strided with unit stride, no autograd; CuPy
    arrays C-contiguous (the launcher orders the launch after CuPy's current stream).
    What it refuses comes back, and the caller takes the general path.

    Cost
    ----
    One dict lookup and a few attribute reads per DeviceBuffer; for PyTorch tensors and
    CuPy arrays the first one's class, dtype and shape, then their launcher's reads.
    """
    first = arrays[0]
    shape = getattr(first, "shape", None)
    if shape is None or len(shape) != 1 or not shape[0] or _common.on_simulator():
        return None
    try:  # `_lookup`, inline
        plan = plans[first.__class__, first.dtype]
    except (AttributeError, TypeError):  # no dtype, or an unhashable one
        return None
    if plan is None:
        return None
    kind = plan[0]
    if kind == _BUFFER:
        if _admit(plans, arrays, stream, written, shape, plan) is None:
            return None
        return plan[1], shape[0], True
    if not _common._FOREIGN[0] or not _DIRECT["torch" if kind == _TORCH else "cupy"]:
        return None
    return plan[1], shape[0], False


def direct_views(plans: Plans, arrays: tuple, stream, written=None):
    """(NumPy dtype, 1-D views, CuPy's adapter or None) for non-empty C-contiguous
    arrays of any shapes (each its own) that pass `direct`'s checks but the shape's:
    each array's items as a 1-D DeviceBuffer, what `Call.flat` gives (`vector` of a
    DeviceBuffer; for a PyTorch tensor or CuPy array, a view for this launch only, as
    `Foreign.launch_view`). None otherwise (the general path then).

    With CuPy arrays, the caller runs `order_cupy` with the adapter once its own checks
    passed and before the launch: the views do not tell the launcher they are CuPy's.
    """
    plan = _admit(plans, arrays, stream, written, None)
    if plan is None:
        return None
    kind, dtype, extra = plan
    views = []
    if kind == _BUFFER:
        for arr in arrays:
            if not arr.size or not arr.is_c_contiguous:
                return None
            views.append(_common.vector(arr))
        return dtype, views, None
    torch = kind == _TORCH
    itemsize = (dtype.itemsize,)
    for arr in arrays:
        if torch:
            if not arr.is_contiguous():
                return None
            n, ptr = arr.numel(), arr.data_ptr()
        else:
            n, ptr = arr.size, arr.data.ptr
        if not n:
            return None
        views.append(_DeviceBuffer.view_of(_TRANSIENT, ptr, (n,), itemsize, dtype, False,
                                         None))
    return dtype, views, (None if torch else extra)


def order_cupy(adapter, stream) -> None:
    """Order `stream` after CuPy's current stream (what `Call._settle` does once per
    call before a view of a CuPy array is used); nothing where CUDA orders them
    already."""
    if adapter.current_stream is not None:
        producer = adapter.current_stream() or 1
        if producer != 1 or stream is not None:
            _order_after(_stream_handle(stream), (producer,))
