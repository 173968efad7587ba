"""Compiled replay of cuDNN calls: a checked call's plan and arguments, run again in C.

Every cupric.cudnn operation first offers its arguments to `run`, a small CPython
extension. It reads each array (a cupric `DeviceBuffer` through its slots, a PyTorch
tensor through ``data_ptr()``, ``shape``, ``stride()``, ``dtype``..., a CuPy array
through ``data.ptr``, ``shape``, ``strides``, ``dtype``, ``data.device_id``), builds
the call's key (the operation's parameters and each array's type, dtype, shape, strides
and alignment) and looks it up in the handle's table of *entries*. An entry is what a
full Python call of the same key used: the execution plan (and its workspace) or the
legacy entry point with its descriptors, scalars and workspace, which arguments take
which data pointers, the byte extents of every array and how to allocate each output.
The extension checks what the key cannot (closed handle, stream, buffers, descriptors
and workspace; read-only outputs; outputs overlapping inputs; the device of PyTorch
tensors and CuPy arrays; CuPy's current stream, which CuPy names as its arrays'
producer, being the handle's), allocates outputs through `cupric.runtime.memory.empty`
(the compiled allocation path), patches the pointers into a variant pack (reused while
they stay the same) or the argument list, and calls cuDNN with the GIL held (which
serializes replays and their variant packs). On a machine with several GPUs it also
checks that the handle's context is current and that every array says it lives on the
handle's device. Anything it does not know - another array kind, a new shape, a failed
check - returns None, and the Python path runs, raising the typed error where there is
one, and records the entry after a successful call.

The extension is built once per machine and Python version into the cupric cache (see
`cupric.runtime.native.Extension`); without a compiler everything runs through the Python paths.
``CUPRIC_CUDNN_FASTPATH=0`` turns replay off; ``CUPRIC_BUILD_LAUNCHER=0`` stops cupric
from compiling it.
"""

from __future__ import annotations

from cupric.runtime.native import Extension, Pending

from ._replay_c import SOURCE

__all__ = ["run", "load", "build_error", "remember_graph", "remember_legacy", "address",
           "KINDS", "ENTRY_LIMIT"]

# The call shapes the extension knows (the order of its C enum).
KINDS = {"graph": 0, "p8": 1, "p12": 2, "softmax_fwd": 3, "softmax_bwd": 4,
         "bn_train": 5, "bn_infer": 6, "bn_bwd": 7, "dropout": 8, "p7": 9,
         "bn_train_ex": 10, "bn_bwd_ex": 11}
ENTRY_LIMIT = 2048  # per handle


def build_error() -> str | None:
    """Why the extension could not be built, loaded or configured, or None."""
    return EXTENSION.error


def load(build: bool | None = None, wait: bool = True):
    """The configured extension module (built into the cache if needed), or None.

    A failure is recorded in `build_error` and not retried within the process. With
    `wait` False a build still running in the background raises
    `cupric.runtime.native.Pending`.
    """
    return EXTENSION.load(build, wait)


def _configure(module) -> None:
    from cupric.runtime.memory import DeviceBuffer, empty
    from cupric.runtime.native import Allocation
    from cupric.runtime.resource import Resource

    from . import lib
    from .backend import check as backend_check
    from .handle import Handle, _Owned, _tls, resolve
    ffi, L = lib.ffi, lib.lib
    fns = tuple(int(ffi.cast("uintptr_t", getattr(L, name))) for name in (
        "cudnnBackendCreateDescriptor", "cudnnBackendSetAttribute", "cudnnBackendFinalize",
        "cudnnBackendDestroyDescriptor", "cudnnBackendExecute"))
    enums = (int(L.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR),
             int(L.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
             int(L.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS),
             int(L.CUDNN_ATTR_VARIANT_PACK_WORKSPACE), int(L.CUDNN_TYPE_INT64),
             int(L.CUDNN_TYPE_VOID_PTR))
    module.configure(DeviceBuffer, Allocation, Resource, Handle, _Owned, _tls, empty,
                     backend_check, lib.check, resolve, fns, enums, _current_context())


#: The extension, loaded through the one cached loader (`cupric.runtime.native.Extension`).
EXTENSION = Extension("_cupric_dnnreplay", "cudnn", "cuDNN replay extension", SOURCE,
                      switch="CUDNN_FASTPATH", configure=_configure)


def _current_context() -> int:
    """The address of libcuda's ``cuCtxGetCurrent`` (0 where libcuda is absent: handles
    spanning several GPUs then take the Python path)."""
    import ctypes
    try:
        return ctypes.cast(ctypes.CDLL("libcuda.so.1").cuCtxGetCurrent, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return 0


def _first_call(head, arrays, outs, handle, stream):
    """`run` before the first call: load and install the extension, take the Python path.

    While the extension is built in the background `run` stays this function (each call
    asks again and takes the Python path)."""
    global run
    try:
        module = load(wait=False)
    except Pending:
        return None
    run = module.run if module is not None else _python_path
    return None


def _python_path(head, arrays, outs, handle, stream):
    return None


#: run(head, arrays, outs, handle, stream) -> tuple of outputs, or None (Python path).
run = _first_call


# --------------------------------------------------------------------------------------
# Entries (recorded by the Python paths after a successful, fully checked call)


def _torch_seen(arrays) -> None:
    import sys
    torch = sys.modules.get("torch")
    module = EXTENSION.module
    if torch is None or module is None:
        return
    if any(type(a) is torch.Tensor for a in arrays):
        module.set_torch(torch.Tensor, torch.strided)


_cupy_type = None


def _cupy_seen(arrays) -> None:
    """Hand the extension `cupy.ndarray` and the intake's reader of CuPy's current stream
    (so both paths agree on which producer stream a CuPy array names), once."""
    import sys
    global _cupy_type
    cupy = sys.modules.get("cupy")
    ndarray = getattr(cupy, "ndarray", None)
    module = EXTENSION.module
    if ndarray is None or module is None or ndarray is _cupy_type:
        return
    if any(type(a) is ndarray for a in arrays):
        from cupric.runtime.array_adapters import adapter_for
        adapter = adapter_for(ndarray)
        if adapter is None or adapter.kind != "cupy":
            return
        module.set_cupy(ndarray, adapter.current_stream)
        _cupy_type = ndarray


def _key(h, head, arrays, outs):
    module = EXTENSION.module
    if module is None or len(h._replays) >= ENTRY_LIMIT:
        return None
    _torch_seen(arrays + outs)
    _cupy_seen(arrays + outs)
    return module.key_of(head, arrays, outs, h)


def _spans(tensors) -> tuple:
    from cupric.runtime.memory import extent
    spans = []
    for t in tensors:
        if t is None:
            spans.append((0, 0))
        else:
            buf = getattr(t, "buf", t)  # a checked tensor, or a buffer cupric made
            spans.append(extent(buf.shape, buf.strides, buf.itemsize))
    return tuple(spans)


def _allocs(outs, out_tensors, allocated) -> tuple | None:
    """Per output: how the entry allocates it when the caller passes None, else None;
    None overall when an allocation cannot be replayed (a uint16 stand-in for
    bfloat16, which must be remembered as such)."""
    import numpy as np
    specs = []
    for given, t, alloc in zip(outs, out_tensors, allocated):
        if given is not None or not alloc:
            specs.append(None)
            continue
        buf = t.buf if hasattr(t, "buf") else t
        if buf.dtype == np.uint16:
            return None
        base = buf.base
        if base is None:
            specs.append((buf.shape, buf.dtype, None, None))
        else:
            if base.base is not None or base.ptr != buf.ptr or base.nbytes != buf.nbytes:
                return None
            specs.append((base.shape, buf.dtype, buf.shape, buf.strides))
    return tuple(specs)


def _replayable(tensors) -> bool:
    import numpy as np
    # A uint16 DeviceBuffer stands for bfloat16 only when cupric made it: never replayed.
    return not any(getattr(t, "etype", None) == "bf16" and t.buf.dtype == np.uint16
                   for t in tensors)


def remember_graph(h, head, arrays, outs, tensors, plan, uid_slots, *, allocated=None,
                   inplace=None) -> None:
    """Record the entry of a graph call that just ran.

    Parameters
    ----------
    h : Handle
    head : tuple
        The operation's parameters, as its fast path passes them to `run`.
    arrays, outs : tuple
        The caller's input and output arguments (outputs None where allocated).
    tensors : sequence of V.Tensor or None
        The checked tensors of `arrays` then `outs`, in that order.
    plan : plans.Plan
        The plan that ran (its workspace is the handle's current one).
    uid_slots : dict uid -> index into `tensors`
    allocated : sequence of bool, optional
        Per output, whether the Python path allocated it when None (default: all).
    inplace : sequence of int, optional
        Per output, a bit mask of the inputs it may coincide with exactly.
    """
    key = _key(h, head, arrays, outs)
    if key is None or not _replayable(tensors):
        return
    n_in = len(arrays)
    allocs = _allocs(outs, tensors[n_in:], allocated or (True,) * len(outs))
    if allocs is None:
        return
    ws_obj = None
    ws = 0
    if plan.workspace_size > 0:
        ws_obj = h.owned.workspace
        if ws_obj is None or ws_obj.nbytes < plan.workspace_size:
            return
        ws = ws_obj.ptr
    uids = tuple(plan.uids)
    slots = tuple(uid_slots[u] for u in uids)
    entry = EXTENSION.module.make_entry(
        KINDS["graph"], 0, h.ptr, (), (), (), plan.descriptor._ptr, uids, slots,
        ws_obj, ws, n_in, _spans(tensors), tuple(inplace or (0,) * len(outs)), allocs,
        (plan.descriptor,), plan)
    h._replays[key] = entry


def remember_legacy(h, head, arrays, outs, tensors, kind, fn, template, *, doubles=(),
                    guards=(), keep=None, allocated=None, inplace=None,
                    alloc_tensors=None, workspace=None) -> None:
    """Record the entry of a legacy call that just ran.

    `template` lists the call's arguments: an int (the address of a descriptor or a
    scalar, an enum), or ``("t", i)`` for the data pointer of ``tensors[i]``; `fn` the
    cffi function called; `guards` the Resources (descriptors) it used, which must still
    be open; `keep` what else the addresses belong to (scalars). `alloc_tensors`
    replaces the output tensors for the allocation specs (outputs that are not checked
    tensors, such as a dropout reserve). `workspace` is the handle's workspace buffer
    whose address the template holds: the entry replays only while it is still the
    handle's (and open).
    """
    key = _key(h, head, arrays, outs)
    if key is None or not _replayable(tensors):
        return
    from . import lib
    n_in = len(arrays)
    allocs = _allocs(outs, alloc_tensors if alloc_tensors is not None else tensors[n_in:],
                     allocated or (True,) * len(outs))
    if allocs is None:
        return
    args, slots = [], []
    for item in template:
        if isinstance(item, tuple):
            args.append(0)
            slots.append(item[1])
        else:
            args.append(int(item))
            slots.append(-1)
    entry = EXTENSION.module.make_entry(
        KINDS[kind], int(lib.ffi.cast("uintptr_t", fn)), h.ptr, tuple(args),
        tuple(slots), tuple(float(d) for d in doubles), 0, (), (), workspace,
        0 if workspace is None else workspace.ptr, n_in,
        _spans(tensors), tuple(inplace or (0,) * len(outs)), allocs, tuple(guards), keep)
    h._replays[key] = entry


def address(cdata) -> int:
    """The address held by a cffi pointer (a descriptor, a scalar's storage)."""
    from . import lib
    return int(lib.ffi.cast("uintptr_t", cdata))
