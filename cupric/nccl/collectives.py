"""NCCL collectives on any device array: all-reduce, reduce, broadcast, all-gather,
reduce-scatter, all-to-all and send/recv, each argument checked before anything is
queued.

Every rank calls the same collectives in the same order; each call is queued on a CUDA
stream and returns at once. The arrays are read through `cupric.runtime.intake`
(DeviceBuffer, PyTorch, CuPy, ``__cuda_array_interface__``, DLPack) and ordered after
their producers' streams.
"""

from __future__ import annotations

from cupric.runtime import intake

from .tables import reduction_op, wire_type
from .waiting import _group_state, group

__all__ = ["Collectives", "ShapeMismatchError", "DtypeMismatchError", "OverlapError",
           "RankError"]


class ShapeMismatchError(ValueError):
    """Arrays whose sizes do not fit the collective (e.g. an all-gather output that is
    not world_size times the input)."""


class DtypeMismatchError(TypeError):
    """Send and receive arrays of different element types."""


class OverlapError(ValueError):
    """Send and receive memory that overlap other than the way the collective's in-place
    form lays them out."""


class RankError(ValueError):
    """A root or peer rank outside ``0 .. world_size - 1`` (or the caller's own rank for
    a send/recv)."""


class Collectives:
    """The collectives of `cupric.nccl.Communicator` and their argument checks (a base
    class: the communicator supplies ``_c_comm``, ``_wait_queued`` and its facts)."""

    __slots__ = ()

    # -- argument intake ---------------------------------------------------------------

    def _array(self, obj, name: str, stream, writable: bool):
        # On one GPU no array can live elsewhere: its device is not even asked.
        info = intake.array_info(obj, stream, name=name, writable=writable,
                                 device=self._device if self._multi else None,
                                 order=False, with_device=self._multi)
        if not info.is_c_contiguous:
            raise intake.StrideError(f"{name} must be contiguous for NCCL (shape "
                                     f"{info.shape}, strides {info.strides}); pass a "
                                     f"contiguous copy")
        return info

    def _begin(self, stream, arrays):
        """Order `stream` after each array's producer and register with an open group;
        returns the raw stream handle and the NCCL communicator."""
        handle = intake.stream_handle(stream)
        producers = {info.producer for info in arrays if info.producer is not None}
        if producers:
            intake.order_after(handle, tuple(producers))
        state = _group_state()
        if state[0] and not self._options.blocking and self not in state[1]:
            state[1].append(self)
        return handle, self._c_comm()

    def _queue(self, name: str, stream, arrays, pointers, *args) -> None:
        """Order `stream` after the arrays' producers, then queue the NCCL call `name`
        with ``(*pointers, *args, comm, stream)`` (device addresses as pointers) and
        raise its error."""
        handle, comm = self._begin(stream, arrays)
        from . import lib
        status = getattr(lib.lib, name)(*[_p(lib, a) for a in pointers], *args, comm,
                                        _p(lib, handle))
        self._finish(status, comm, name)

    def _finish(self, status: int, comm, what: str) -> None:
        if status == 0:
            return
        from . import lib
        if status == lib.IN_PROGRESS and not _group_state()[0]:
            self._wait_queued(what)
            return
        if status == lib.IN_PROGRESS:
            return
        raise lib.error_of(status, comm, prefix=what)

    def _equal_pair(self, send, out, stream, what: str, writes_send: bool):
        """The intake of a collective whose output has its input's size: `out` None is
        in place (the same `ArrayInfo` twice); otherwise same type, same size, and either
        the very same memory or none shared."""
        s = self._array(send, "send", stream, writable=writes_send)
        if out is None:
            return s, s
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, what)
        if r.size != s.size:
            raise ShapeMismatchError(f"{what}: out has {r.size} elements, send {s.size}")
        self._disjoint(s, r, r.ptr, what)
        return s, r

    @staticmethod
    def _same_type(a, b, what: str) -> None:
        if a.dtype != b.dtype or a.torch_dtype != b.torch_dtype:
            raise DtypeMismatchError(f"{what}: send is {a.torch_dtype or a.dtype} but "
                                     f"recv is {b.torch_dtype or b.dtype}")

    @staticmethod
    def _disjoint(send, recv, in_place_ptr: int | None, what: str) -> None:
        """Raise `OverlapError` unless the two spans are disjoint, or `send` starts at
        `in_place_ptr` (the collective's in-place layout)."""
        if in_place_ptr is not None and send.ptr == in_place_ptr:
            return
        a0, a1 = send.ptr, send.ptr + send.nbytes
        b0, b1 = recv.ptr, recv.ptr + recv.nbytes
        if a0 < b1 and b0 < a1 and send.nbytes and recv.nbytes:
            raise OverlapError(f"{what}: send and recv overlap but not in the in-place "
                               f"layout; use separate buffers or the in-place form")

    def _check_rank(self, value, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not 0 <= value < self._size:
            raise RankError(f"{name} {value} is outside 0 .. {self._size - 1}")
        return value

    def _wire(self, info, count: int, op: int | None):
        dtype, n = wire_type(info.dtype, info.torch_dtype, count, op)
        if dtype >= 10:
            from . import lib
            if lib.NCCL_VERSION_CODE < 22400:
                from .tables import UnsupportedDtypeError
                raise UnsupportedDtypeError("float8 collectives need NCCL 2.24 or newer")
        return dtype, n

    def _output(self, out, shape, like, name: str):
        """`out`, or a new DeviceBuffer of `shape` on this device."""
        if out is not None:
            return out
        from cupric.runtime.device import Device
        from cupric.runtime.memory import empty
        if like.torch_dtype is not None and like.dtype.kind == "V":
            raise TypeError(f"{name}: pass out= for {like.torch_dtype} arrays (cupric "
                            f"allocates NumPy types only)")
        Device(self._device).make_current()
        return empty(shape, like.dtype)

    # -- collectives -------------------------------------------------------------------

    def all_reduce(self, send, out=None, *, op: str = "sum", stream=None):
        """Reduce `send` over every rank with `op` into `out` on every rank
        (``ncclAllReduce``); `out` None reduces in place. Returns the output array.

        Parameters
        ----------
        send : device array
        out : device array, optional
            Same size and element type as `send`; may be `send` itself.
        op : {"sum", "prod", "max", "min", "avg"}
        stream : stream-like, optional

        Raises
        ------
        ShapeMismatchError, DtypeMismatchError, OverlapError, UnsupportedDtypeError
            Before anything is queued; the intake errors (`HostMemoryError`,
            `ReadOnlyError`, `DeviceMismatchError`, `StrideError`, `ClosedError`) too.
        NcclError
        """
        code = reduction_op(op)
        s, r = self._equal_pair(send, out, stream, "all_reduce", out is None)
        dtype, count = self._wire(s, s.size, code)
        self._queue("ncclAllReduce", stream, (s, r), (s.ptr, r.ptr), count, dtype, code)
        return send if out is None else out

    def reduce(self, send, out=None, *, root: int = 0, op: str = "sum", stream=None):
        """Reduce `send` over every rank into `out` on rank `root` (``ncclReduce``);
        `out` None reduces in place (into `send` on the root). Other ranks' `out` is
        not written. Returns the output array (`send` where `out` is None)."""
        code = reduction_op(op)
        root = self._check_rank(root, "root")
        s, r = self._equal_pair(send, out, stream, "reduce",
                                out is None and root == self._rank)
        dtype, count = self._wire(s, s.size, code)
        self._queue("ncclReduce", stream, (s, r), (s.ptr, r.ptr), count, dtype, code, root)
        return send if out is None else out

    def broadcast(self, send, out=None, *, root: int = 0, stream=None):
        """Copy rank `root`'s `send` into `out` on every rank (``ncclBroadcast``); `out`
        None broadcasts in place (into `send`). Returns the output array."""
        root = self._check_rank(root, "root")
        s, r = self._equal_pair(send, out, stream, "broadcast", out is None)
        dtype, count = self._wire(s, s.size, None)
        self._queue("ncclBroadcast", stream, (s, r), (s.ptr, r.ptr), count, dtype, root)
        return send if out is None else out

    def all_gather(self, send, out=None, *, stream=None):
        """Concatenate every rank's `send` in rank order into `out` on every rank
        (``ncclAllGather``). `out` has world_size times `send`'s elements; None makes a
        DeviceBuffer of shape ``(world_size * send.shape[0], *send.shape[1:])``. In
        place: pass as `send` the view of `out` at this rank's slot. Returns `out`."""
        s = self._array(send, "send", stream, writable=False)
        n = self._size
        out = self._output(out, (n * s.shape[0], *s.shape[1:]) if s.ndim else (n,), s,
                           "all_gather")
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, "all_gather")
        if r.size != n * s.size:
            raise ShapeMismatchError(f"all_gather: out must have world_size * "
                                     f"send.size = {n * s.size} elements, got {r.size}")
        self._disjoint(s, r, r.ptr + self._rank * s.nbytes, "all_gather")
        dtype, count = self._wire(s, s.size, None)
        self._queue("ncclAllGather", stream, (s, r), (s.ptr, r.ptr), count, dtype)
        return out

    def reduce_scatter(self, send, out=None, *, op: str = "sum", stream=None):
        """Reduce `send` over every rank and leave block ``rank`` of the result in `out`
        (``ncclReduceScatter``). `send` has world_size times `out`'s elements; `out`
        None makes a DeviceBuffer of shape ``(send.shape[0] // world_size,
        *send.shape[1:])``. In place: pass as `out` the view of `send` at this rank's
        block. Returns `out`."""
        code = reduction_op(op)
        s = self._array(send, "send", stream, writable=False)
        n = self._size
        if out is None:
            if not s.ndim or s.shape[0] % n:
                raise ShapeMismatchError(f"reduce_scatter: send's first dimension must "
                                         f"divide by world_size {n} to size out; pass out=")
        out = self._output(out, (s.shape[0] // n, *s.shape[1:]) if s.ndim else (), s,
                           "reduce_scatter")
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, "reduce_scatter")
        if s.size != n * r.size:
            raise ShapeMismatchError(f"reduce_scatter: send must have world_size * "
                                     f"out.size = {n * r.size} elements, got {s.size}")
        if r.ptr != s.ptr + self._rank * r.nbytes:
            self._disjoint(r, s, None, "reduce_scatter")
        dtype, count = self._wire(r, r.size, code)
        self._queue("ncclReduceScatter", stream, (s, r), (s.ptr, r.ptr), count, dtype,
                    code)
        return out

    def all_to_all(self, send, out=None, *, stream=None):
        """Send block j of `send` to rank j and receive rank i's block into block i of
        `out` (grouped ``ncclSend``/``ncclRecv``, one pair per peer). Both have the same
        size, a multiple of world_size; `out` None makes a DeviceBuffer like `send`. Not
        in place. Returns `out`."""
        s = self._array(send, "send", stream, writable=False)
        n = self._size
        out = self._output(out, s.shape, s, "all_to_all")
        r = self._array(out, "out", stream, writable=True)
        self._same_type(s, r, "all_to_all")
        if r.size != s.size or s.size % n:
            raise ShapeMismatchError(f"all_to_all: send and out must have the same size, "
                                     f"a multiple of world_size {n}; got {s.size} and "
                                     f"{r.size}")
        self._disjoint(s, r, None, "all_to_all")
        dtype, count = self._wire(s, s.size // n, None)
        block = s.nbytes // n
        from . import lib
        with group():
            handle, comm = self._begin(stream, (s, r))
            stream_p = _p(lib, handle)
            for peer in range(n):
                self._finish(lib.lib.ncclSend(_p(lib, s.ptr + peer * block), count, dtype,
                                              peer, comm, stream_p), comm, "ncclSend")
                self._finish(lib.lib.ncclRecv(_p(lib, r.ptr + peer * block), count, dtype,
                                              peer, comm, stream_p), comm, "ncclRecv")
        return out

    def send(self, array, peer: int, *, stream=None) -> None:
        """Send `array` to rank `peer` (``ncclSend``); that rank calls `recv` with the
        same size and type. Pair sends and receives that must progress together inside
        `group()`."""
        peer = self._check_rank(peer, "peer")
        s = self._array(array, "array", stream, writable=False)
        dtype, count = self._wire(s, s.size, None)
        self._queue("ncclSend", stream, (s,), (s.ptr,), count, dtype, peer)

    def recv(self, array, peer: int, *, stream=None):
        """Receive from rank `peer` into `array` (``ncclRecv``); returns `array`."""
        peer = self._check_rank(peer, "peer")
        r = self._array(array, "array", stream, writable=True)
        dtype, count = self._wire(r, r.size, None)
        self._queue("ncclRecv", stream, (r,), (r.ptr,), count, dtype, peer)
        return array


def _p(lib, address: int):
    # NCCL takes device addresses and streams as pointers.
    return lib.ffi.cast("void *", address)
