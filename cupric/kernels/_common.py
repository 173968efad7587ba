"""Plumbing shared by the ready kernels: where a call runs (the GPU, or the CPU simulator
when there is none), turning user arrays into launchable ones with clear errors,
allocating outputs, launch geometry (grids covering the data once for elementwise kernels,
grids bounded per SM for kernels that need them), and the per-device workspace
that reductions and scans reuse between calls."""

from __future__ import annotations

import functools
import threading

import numpy as np

from cupric._config import simulator_requested

__all__ = ["on_simulator", "Call", "Foreign", "Workspace", "release_workspaces",
           "blocks_for", "covering_blocks", "sm_count", "device_ordinal", "same_shape",
           "same_dtype", "NUMERIC", "FLOATS", "INTEGERS", "SORTABLE", "NUMERIC_BOOL",
           "MAX_GRID_X", "vector", "vector_prefix", "Plans", "direct", "direct_views",
           "order_cupy", "forget_plans", "launch_now", "MadeOnce"]

#: dtypes every generic kernel accepts (cupric's scalar types).
INTEGERS = tuple(np.dtype(t) for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"))
FLOATS = tuple(np.dtype(t) for t in ("f2", "f4", "f8"))
NUMERIC = INTEGERS + FLOATS
SORTABLE = tuple(np.dtype(t) for t in ("i4", "u4", "f4"))
#: NUMERIC and bool.
NUMERIC_BOOL = NUMERIC + (np.dtype(bool),)

#: Kernels that need a bounded grid (reductions with one partial result per block,
#: block-private histograms) launch at most this many blocks per SM: enough resident
#: warps to hide DRAM latency, few enough that each thread loops a while.
WAVES_PER_SM = 8
#: The most blocks a grid's x dimension takes (CUDA's limit for compute capability >= 3).
MAX_GRID_X = 2 ** 31 - 1
#: The simulator runs blocks one after another; small grids keep its per-block cost low.
SIMULATOR_MAX_BLOCKS = 4


def on_simulator() -> bool:
    """True when kernels run on the CPU simulator: `CUPRIC_SIMULATOR` is set or the
    machine has no CUDA driver (the same rule as `Kernel` launches)."""
    if simulator_requested():
        return True
    known = _DRIVER[0]
    if known is None:
        from cupric.runtime import driver_available
        known = driver_available()
        if known:  # a driver that loaded stays loaded; a failure is asked again
            _DRIVER[0] = True
    return not known


#: Whether the CUDA driver loaded (None until it has).
_DRIVER = [None]


@functools.cache
def _sm_count(ordinal: int) -> int:
    from cupric.runtime import Device
    return Device(ordinal).multiprocessor_count


@functools.cache
def _single_device() -> bool:
    from cupric.runtime import device_count
    return device_count() == 1


def device_ordinal() -> int:
    """The current device's ordinal (no driver call on a one-GPU machine)."""
    if _single_device():
        return 0
    from cupric.runtime import current_device
    return int(current_device())


def sm_count() -> int:
    """Multiprocessors of the current device (cached per device; 1 on the simulator)."""
    if on_simulator():
        return 1
    return _sm_count(device_ordinal())


class MadeOnce(dict):
    """Kernels (or anything costly) made once per key: ``table[key]`` is a dictionary
    lookup once made; a missing key is made by ``make(key)`` under a lock, so that
    threads asking at once make it once.

    Thread safety
    -------------
    Safe from any thread.
    """

    __slots__ = ("_make", "_lock")

    def __init__(self, make) -> None:
        super().__init__()
        self._make = make
        self._lock = threading.Lock()

    def __missing__(self, key):
        with self._lock:
            made = dict.get(self, key)
            if made is None:
                made = self._make(key)
                dict.__setitem__(self, key, made)
        return made


def blocks_for(n: int, block: int, per_thread: int = 1, waves: int = WAVES_PER_SM,
               simulator: bool | None = None) -> int:
    """Blocks for a grid-stride kernel whose design wants a bounded grid (per-block
    partial results, shared-memory privatization) over `n` items, `per_thread` items per
    thread per trip: enough to cover `n` once, capped at `waves` blocks per SM (or a few
    blocks on the simulator). Never less than 1. Bandwidth-bound elementwise kernels use
    `covering_blocks` instead."""
    need = max(1, -(-n // (block * per_thread)))
    if on_simulator() if simulator is None else simulator:
        return min(need, SIMULATOR_MAX_BLOCKS)
    return min(need, waves * _sm_count(device_ordinal()))


def covering_blocks(n: int, block: int, per_thread: int = 1,
                    simulator: bool | None = None) -> int:
    """Blocks for an elementwise grid-stride kernel over `n` items, `per_thread` items
    per thread per trip: a grid that covers `n` once, so each thread makes one trip (the
    geometry of a plain CUDA C elementwise kernel; a grid capped at 8 blocks per SM ran
    vecadd, saxpy, memcpy and fill on float32 slower; see
    `elementwise.quad_geometry` for where it is used). Capped at `MAX_GRID_X` blocks
    (beyond that the kernels' grid-stride loops take the rest) and at
    `SIMULATOR_MAX_BLOCKS` on the simulator, which runs blocks one after another. Never
    less than 1."""
    need = max(1, -(-n // (block * per_thread)))
    if on_simulator() if simulator is None else simulator:
        return min(need, SIMULATOR_MAX_BLOCKS)
    return min(need, MAX_GRID_X)


class Workspace:
    """Device memory the kernels of one device reuse from call to call: tickets, look-back
    flags, per-block partial results. Kernels leave it ready for the next launch
    (counters back at zero; look-back flags tagged with a per-launch epoch), so a call
    needs no allocation and no memset.

    Thread safety
    -------------
    One reentrant lock per device; `Call.workspace()` holds it while a call orders itself after
    the previous user (a different stream waits for the previous user's stream) and
    queues its launches, so work of different streams never overlaps on it.
    """

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        # Reentrant: a stream collected by the garbage collector on a thread that holds
        # this lock runs `_forget_stream`, which takes it again (a plain Lock hung the
        # GPU lane's threaded radix sort test that way).
        self.lock = threading.RLock()
        self.arrays: dict = {}
        self.last_stream: int | None = None
        #: Look-back epoch of the scans (flags below 2 * epoch are stale).
        self.epoch = 0

    def array(self, name: str, dtype, count: int, order: int, *, zero: bool = False):
        """The named array, at least `count` items of `dtype` (grown as needed; a new
        array is zero-filled when `zero`). `order` is the caller's stream handle."""
        current = self.arrays.get(name)
        if current is not None and current.size >= count and current.dtype is dtype:
            return current
        from cupric.runtime.memory import empty
        dtype = np.dtype(dtype)
        if current is not None and current.size >= count and current.dtype == dtype:
            return current
        size = max(int(count), 1)
        if current is not None and current.dtype == dtype:
            size = max(size, 2 * current.size)  # grow geometrically: few reallocations
        fresh = empty(size, dtype, stream=order)
        if zero:
            fresh.memset(0, 8, stream=order)
        if current is not None:
            # Every earlier use is ordered before this stream's current work.
            current.close(stream=order)
        self.arrays[name] = fresh
        return fresh

    def release(self) -> None:
        """Free every array, in the order of the stream that used them last (work
        queued on them finishes first); the next call allocates afresh. Hold `lock`."""
        order = self.last_stream if self.last_stream is not None else 0
        arrays, self.arrays = self.arrays, {}
        self.epoch = 0  # new look-back flags start zeroed, below every epoch
        for arr in arrays.values():
            arr.close(stream=order)

    def next_epoch(self, order: int) -> int:
        """A fresh look-back epoch; when the tags would overflow 31 bits, the flags
        are cleared (on the caller's stream) and epochs restart at 1."""
        self.epoch += 1
        if 2 * self.epoch + 1 >= 2 ** 31:
            flags = self.arrays.get("scan.flags")
            if flags is not None:
                flags.memset(0, 8, stream=order)
            self.epoch = 1
        return self.epoch


_WORKSPACES: dict = {}
_WORKSPACES_LOCK = threading.Lock()


def _workspace(ordinal: int) -> Workspace:
    ws = _WORKSPACES.get(ordinal)
    if ws is None:
        with _WORKSPACES_LOCK:
            ws = _WORKSPACES.setdefault(ordinal, Workspace(ordinal))
    return ws


def release_workspaces() -> None:
    """Free the memory the ready kernels keep between calls (`Workspace`: partial
    results, look-back state, the radix sort's key arrays) on every device, in stream
    order; later calls allocate it again as they need it.

    Thread safety
    -------------
    Waits for calls holding a workspace to queue their work first.
    """
    import sys
    for ws in list(_WORKSPACES.values()):
        with ws.lock:
            sort = sys.modules.get("cupric.kernels.sort")
            if sort is not None:  # its graphs point into the workspace's arrays
                sort.forget_pass_graphs(ws.ordinal)
            ws.release()


def _forget_device(ordinal: int) -> None:
    """After a reset of device `ordinal`'s context: its workspace, the cached device
    copies of histogram edges and the radix sort's pass graphs lived in the old context
    (their releases were retired with it)."""
    with _WORKSPACES_LOCK:
        _WORKSPACES.pop(ordinal, None)
    import sys
    histogram = sys.modules.get("cupric.kernels.histogram")
    if histogram is not None:
        with histogram._EDGES_LOCK:
            for key in [k for k in histogram._EDGES if k[0] == ordinal]:
                del histogram._EDGES[key]
    sort = sys.modules.get("cupric.kernels.sort")
    if sort is not None:
        sort.forget_pass_graphs(ordinal)


def _forget_stream(handle) -> None:
    """Before stream `handle` is destroyed: a workspace whose last user it was waits for
    its work now, since the next user can no longer order itself after a stream that
    is gone (and whose address a new stream may get)."""
    h = int(handle)
    for ws in list(_WORKSPACES.values()):
        with ws.lock:
            if ws.last_stream == h:
                from cupric.runtime.native import check, driver
                check(driver().cuStreamSynchronize(h))
                ws.last_stream = None


def _register_reset_hook() -> None:
    from cupric.runtime.context import on_reset
    from cupric.runtime.resource import on_stream_destroyed
    on_reset(_forget_device)
    on_stream_destroyed(_forget_stream)


_register_reset_hook()


class _Held:
    """`Call.workspace()`: holds the workspace's lock for a ``with`` block, after ordering
    the call's stream after the previous user's stream (a plain class: a generator-based
    context manager costs microseconds per call)."""

    __slots__ = ("ws", "call")

    def __init__(self, ws: Workspace, call) -> None:
        self.ws = ws
        self.call = call

    def __enter__(self) -> Workspace:
        ws = self.ws
        handle = self.call.handle
        ws.lock.acquire()
        try:
            last = ws.last_stream
            if last is not None and last != handle:
                from cupric.runtime.memory import order_after
                order_after(handle, last)
            ws.last_stream = handle
        except BaseException:
            ws.lock.release()
            raise
        return ws

    def __exit__(self, *exc) -> None:
        self.ws.lock.release()


#: id(dtypes tuple) -> (the tuple, frozenset of it): membership without comparing each.
_DTYPE_SETS: dict = {}


def _dtype_set(dtypes) -> frozenset:
    known = _DTYPE_SETS.get(id(dtypes))
    if known is None or known[0] is not dtypes:
        known = (dtypes, frozenset(np.dtype(d) for d in dtypes))
        if len(_DTYPE_SETS) > 256:
            _DTYPE_SETS.clear()
        _DTYPE_SETS[id(dtypes)] = known
    return known[1]


_UNSEEN = object()


class Call:
    """The arrays of one call of a ready kernel, all on the GPU or all on the host.

    On the GPU, inputs are device arrays: `DeviceBuffer` or anything with
    `__cuda_array_interface__`/`__dlpack__` (CuPy, PyTorch, numba-cuda); a NumPy array is
    refused with a message saying how to copy it. On the simulator they are NumPy arrays
    (array-likes are converted). Outputs are allocated where the inputs live.

    Every array is read and checked once, when `array` or `output` takes it, before
    anything is queued: DeviceBuffers by their attributes (closed ones refused);
    C-contiguous PyTorch tensors and CuPy arrays on a one-GPU machine as `Foreign`
    (their own attributes, no borrow; CuPy's current stream ordered once per call);
    everything else through `cupric.runtime.intake.as_buffer`, whose typed errors and
    stream ordering it keeps.

    Cost
    ----
    A DeviceBuffer: a few attribute reads. A PyTorch tensor or CuPy array: six or so of
    its own attributes and one small object; the launch hands the array itself to the
    kernel's compiled launcher. Other kinds: the intake layer's read and a borrow.
    Kernels whose common call has arrays of one kind and dtype check them first through
    a cached plan (`Plans`, `direct`, `direct_views`), without a `Call`, and come here
    only when the plan refuses them.
    """

    __slots__ = ("op", "simulator", "stream", "_scratch", "_handle", "_ordered",
                 "_foreign", "_cupy")

    def __init__(self, op: str, stream=None) -> None:
        self.op = op
        self.simulator = on_simulator()
        self.stream = stream
        self._scratch = []
        self._handle = None
        self._ordered = None  # producers' streams this call's stream is ordered after
        self._foreign = False  # whether an argument was read as a `Foreign` array
        # CuPy's adapter while this call's stream is not yet ordered after CuPy's
        # current stream (`_settle`), else None.
        self._cupy = None

    @property
    def handle(self) -> int:
        """The raw handle of the call's stream (0: the legacy default stream)."""
        handle = self._handle
        if handle is None:
            handle = self._handle = _stream_handle(self.stream)
        return handle

    def scratch(self, shape, dtype, *, zero: bool = False):
        """Temporary memory for this call's kernels: stream-ordered on the GPU (from the
        device's pool, on the call's stream), freed in stream order by `finish`."""
        if self.simulator:
            return np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
        from cupric.runtime.memory import empty
        # An int 0 (the legacy stream) still takes the stream-ordered path: a plain
        # cuMemAlloc/cuMemFree pair would synchronize the device on every call.
        order = self.stream if self.stream is not None else 0
        buf = empty(shape, dtype, stream=order)
        if zero:
            buf.memset(0, 8, stream=order)
        self._scratch.append(buf)
        return buf

    def workspace(self) -> _Held:
        """The device's `Workspace`, locked and ordered after its previous user, for the
        duration of a ``with`` block (queue the launches that use it inside). GPU only."""
        return _Held(_workspace(device_ordinal()), self)

    @property
    def order(self):
        """The stream handle for stream-ordered allocations and frees (0: the legacy
        default stream; a plain cuMemAlloc/cuMemFree pair would synchronize)."""
        return self.stream if self.stream is not None else 0

    def blocks(self, n: int, block: int, per_thread: int = 1) -> int:
        """`blocks_for` (a grid capped per SM) with this call's simulator decision."""
        return blocks_for(n, block, per_thread, simulator=self.simulator)

    def covering_blocks(self, n: int, block: int, per_thread: int = 1) -> int:
        """`covering_blocks` (a grid covering `n` once) with this call's simulator
        decision."""
        return covering_blocks(n, block, per_thread, simulator=self.simulator)

    def finish(self) -> None:
        """Free the scratch memory after the work queued on the call's stream."""
        order = self.stream if self.stream is not None else 0
        while self._scratch:
            self._scratch.pop().close(stream=order)

    def array(self, obj, name: str, *, dtypes=None, ndim=None, writable=False):
        """`obj` as a launchable array (a NumPy array on the simulator, a DeviceBuffer
        otherwise), its dtype checked against `dtypes` and its rank against `ndim`."""
        if self.simulator:
            if isinstance(obj, np.ndarray):
                arr = obj
            elif hasattr(obj, "to_numpy"):
                raise TypeError(f"{self.op}: {name} is a device array, but kernels run on "
                                f"the CPU simulator here; pass NumPy arrays")
            elif writable:
                raise TypeError(f"{self.op}: {name} must be a NumPy array (it is written "
                                f"in place), got {type(obj).__name__}")
            else:
                arr = np.asarray(obj)
        else:
            reader = _READERS.get(obj.__class__)
            arr = reader[0](obj, reader[1], self) if reader is not None and _FOREIGN[0] \
                else None
            if arr is not None:  # a PyTorch tensor or CuPy array, read once
                self._foreign = True
            else:
                arr = self._device_array(obj, name)
                if writable and arr.readonly:
                    raise ValueError(f"{self.op}: {name} is read-only")
        if dtypes is not None and arr.dtype not in _dtype_set(dtypes):
            names = ", ".join(str(d) for d in dtypes)
            raise TypeError(f"{self.op}: {name} has dtype {arr.dtype}; expected one of "
                            f"{names}")
        if ndim is not None and arr.ndim != ndim:
            raise ValueError(f"{self.op}: {name} must have {ndim} dimension(s), got shape "
                             f"{tuple(arr.shape)}")
        return arr

    def output(self, out, name: str, shape, dtype, arr=None):
        """`out` checked to have `shape` and `dtype` (writable), or a new array of them
        where the call runs. Returns (launchable array, what to give back to the user).
        `arr` is `self.array(out, name)` when the caller made it already."""
        if type(shape) is not tuple:
            shape = tuple(int(s) for s in shape)
        if not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)
        if out is None:
            if self.simulator:
                arr = np.empty(shape, dtype)
            else:
                from cupric.runtime.memory import empty
                # Stream-ordered, from the device's pool, on the call's stream (the
                # legacy one included): a plain cuMemAlloc costs more, and its
                # cuMemFree waits for the whole device.
                arr = empty(shape, dtype, stream=self.order)
            return arr, arr
        if arr is None:
            arr = self.array(out, name, writable=True)
        elif arr.readonly:
            raise ValueError(f"{self.op}: {name} is read-only")
        if arr.shape != shape and tuple(arr.shape) != shape:
            shape = tuple(int(s) for s in shape)
            raise ValueError(f"{self.op}: {name} has shape {tuple(arr.shape)}; expected "
                             f"{shape}")
        if arr.dtype != dtype:
            raise TypeError(f"{self.op}: {name} has dtype {arr.dtype}; expected {dtype}")
        return arr, out

    def flat(self, arr, name: str, dtype=None):
        """A 1-D view of a C-contiguous array (ValueError otherwise), its bytes read as
        `dtype` (a NumPy dtype of the same item size) when given."""
        if self.simulator:
            if arr.ndim != 1:
                if not arr.flags.c_contiguous:
                    raise ValueError(f"{self.op}: {name} must be C-contiguous, got "
                                     f"strides {arr.strides}")
                arr = arr.reshape(-1)
            return arr if dtype is None else arr.view(dtype)
        if arr.__class__ is Foreign:  # C-contiguous by construction
            if dtype is None and len(arr.shape) == 1:
                return arr
            return arr.flat(dtype)
        if arr.ndim == 1:  # strided too: the kernels take 1-D strides
            if dtype is None or dtype is arr.dtype:
                return arr
            if arr.strides[0] != arr.itemsize:
                return arr.view(dtype)
        if not arr.is_c_contiguous:
            raise ValueError(f"{self.op}: {name} must be C-contiguous, got strides "
                             f"{arr.strides} for shape {arr.shape}")
        return vector(arr, arr.dtype if dtype is None else dtype)

    def launch(self, kern, grid, block, *args, shared_bytes: int = 0) -> None:
        """Launch `kern` on this call's stream (or on the simulator)."""
        if self.simulator:
            kern.simulate[grid, block, None, shared_bytes](*args)
            return
        if self._foreign:
            args = tuple([(a.obj if a.direct else a.launch_view())
                          if a.__class__ is Foreign else a for a in args])
        launch_now(kern, grid, block, self.stream, shared_bytes, args)

    def _device_array(self, obj, name: str):
        """`obj` as a DeviceBuffer through the runtime's intake layer
        (`cupric.runtime.intake.as_buffer`: the same borrow, stream ordering and typed
        errors as `as_device_array`, read through the arrays' own attributes); the call's
        stream is ordered after each producer's stream once per call."""
        cls = obj.__class__
        if cls is _DeviceBuffer and (self.stream is None or obj.ordering_stream is None):
            if obj.allocation.closed:  # nothing to order: the buffer itself
                _check_open(obj, f"{self.op}: {name}")
            return obj
        if cls is Foreign:  # read by an earlier call (a kernel calling another)
            self._foreign = True
            return obj
        adapter = _ADAPTERS.get(cls, _UNSEEN)
        if adapter is _UNSEEN:
            adapter = _adapter_for(cls)
        if adapter is not None and adapter.kind in _FOREIGN_KINDS and _single_device():
            # From now on `array` reads this class itself (the devices of a one-GPU
            # machine need no check); here only the first time.
            reader = _READERS[cls] = (_FOREIGN_KINDS[adapter.kind], adapter)
            arr = reader[0](obj, adapter, self) if _FOREIGN[0] else None
            if arr is not None:
                self._foreign = True
                return arr
        if isinstance(obj, np.ndarray):
            raise TypeError(f"{self.op}: {name} is a host NumPy array; copy it to the "
                            f"device first (cupric.runtime.to_device({name}))")
        ordered = self._ordered
        if ordered is None:
            ordered = self._ordered = []
        try:
            return _as_buffer(obj, self.stream, name=name, ordered=ordered)
        except TypeError as exc:  # HostMemoryError, NotAnArrayError: the same class
            raise exc.__class__(f"{self.op}: {exc}") from None


    def _settle(self, arr):
        """Before a view of `Foreign` array `arr` is used (a launch view, a memset, a
        borrow): order the call's stream after CuPy's current stream once, and find
        whether a 1-D PyTorch tensor read without its strides is contiguous. Returns
        None when the plain contiguous view is right, else the DeviceBuffer to use (the
        intake layer's borrow of a strided tensor, read as `arr`'s dtype)."""
        adapter = self._cupy
        if adapter is not None and arr.kind == "cupy":
            self._cupy = None
            producer = adapter.current_stream() or 1
            if producer != 1 or self.stream is not None:
                self._order_after(producer)
        if arr.kind == "torch" and arr.ndim == 1 and not arr.obj.is_contiguous():
            buf = _as_buffer(arr.obj, self.stream, name=self.op)
            return buf if buf.dtype == arr.dtype else buf.view(arr.dtype)
        return None

    def _order_after(self, producer: int) -> None:
        """Order the call's stream after a producer's stream (a CAI v3 ``stream``
        value), once per producer and call; nothing where CUDA orders them already."""
        ordered = self._ordered
        if ordered is None:
            ordered = self._ordered = []
        if producer not in ordered:
            _order_after(self.handle, (producer,))
            ordered.append(producer)


from cupric.runtime.array_adapters import ADAPTERS as _ADAPTERS  # noqa: E402
from cupric.runtime.array_adapters import adapter_for as _adapter_for  # noqa: E402
from cupric.runtime.intake import as_buffer as _as_buffer  # noqa: E402
from cupric.runtime.intake import check_open as _check_open  # noqa: E402
from cupric.runtime.intake import order_after as _order_after  # noqa: E402
from cupric.runtime.intake import stream_handle as _stream_handle  # noqa: E402
from cupric.runtime.memory import DeviceBuffer as _DeviceBuffer  # noqa: E402
from cupric.kernels._foreign import _DIRECT, _FOREIGN, Foreign  # noqa: E402,F401
from cupric.kernels._foreign import read_cupy as _read_cupy  # noqa: E402
from cupric.kernels._foreign import read_torch as _read_torch  # noqa: E402

#: Adapter kinds read as `Foreign` -> their reader.
_FOREIGN_KINDS = {"torch": _read_torch, "cupy": _read_cupy}
#: Array class -> (reader, adapter) of the classes `Call.array` reads as `Foreign`
#: (filled on one-GPU machines as each class is first seen).
_READERS: dict = {}

from cupric.kernels._plans import Plans, direct, direct_views, forget_plans  # noqa: E402,F401
from cupric.kernels._plans import launch_now, order_cupy  # noqa: E402,F401


def vector(buf, dtype=None):
    """A 1-D view of all of C-contiguous DeviceBuffer `buf` (the caller checked that), its
    bytes read as `dtype` (same item size) when given: what ``buf.reshape(-1).view(dtype)``
    gives, without the general layout arithmetic."""
    buf.check_open()
    if dtype is None:
        dtype = buf.dtype
    elif dtype.itemsize != buf.itemsize:
        raise ValueError(f"cannot view {buf.dtype} items as {dtype}")
    base = buf.view_base
    return _DeviceBuffer.view_of(buf.allocation, buf.ptr, (buf.size,), (buf.itemsize,),
                                 dtype, buf.readonly, buf.ordering_stream,
                                 base=buf if base is None else base)


def vector_prefix(buf, count: int):
    """The first `count` items of 1-D contiguous DeviceBuffer `buf` (a workspace array
    grown past what one call needs), as a view."""
    buf.check_open()
    base = buf.view_base
    return _DeviceBuffer.view_of(buf.allocation, buf.ptr, (count,), (buf.itemsize,),
                                 buf.dtype, buf.readonly, buf.ordering_stream,
                                 base=buf if base is None else base)


def same_shape(op: str, arrays: dict) -> tuple:
    """The common shape of named arrays (ValueError naming the ones that differ)."""
    items = list(arrays.items())
    shape = tuple(items[0][1].shape)
    for name, arr in items[1:]:
        if tuple(arr.shape) != shape:
            raise ValueError(f"{op}: {name} has shape {tuple(arr.shape)}, but {items[0][0]} "
                             f"has {shape}")
    return shape


def same_dtype(op: str, arrays: dict) -> np.dtype:
    """The common dtype of named arrays (TypeError naming the ones that differ)."""
    items = list(arrays.items())
    dtype = np.dtype(items[0][1].dtype)
    for name, arr in items[1:]:
        if np.dtype(arr.dtype) != dtype:
            raise TypeError(f"{op}: {name} has dtype {arr.dtype}, but {items[0][0]} has "
                            f"{dtype}; convert one of them first")
    return dtype
