"""Dropout with cuDNN's random-number states.

Training-time dropout zeroes each element with probability p and scales the survivors by
``1 / (1 - p)``; the backward pass applies the same mask to the gradient. cuDNN keeps
the generator's states in device memory (initialized once per seed by a kernel) and
writes the mask into a *reserve space* that forward hands to backward. The graph API's
RNG operation produces random tensors but no ready dropout, so this uses the legacy
``cudnnDropout*`` routines (see docs/cudnn.md).
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from cupric.runtime.errors import ClosedError

from . import _replay
from . import _validate as V
from .descriptors import LegacyDescriptor, describe

__all__ = ["Dropout", "dropout"]

_ANY_NDIM = (1, 2, 3, 4, 5, 6, 7, 8)
# Names a layer in its replay entries' keys; the entries hold its descriptor, never the
# layer, and go when the layer does (`_forget`).
_tokens = itertools.count()


def _forget(table: dict, token: int) -> None:
    """Drop the replay entries of layer `token` from a handle's table."""
    for key in [k for k in list(table) if k[0][0] in _HEADS and k[0][1] == token]:
        table.pop(key, None)


_HEADS = ("dropout_fwd", "dropout_bwd")


class Dropout:
    """A dropout layer: probability, seed and the generator states, bound to a handle.

    No public constructor (it owns device memory of one context): `Dropout.create`
    takes the parameters below.

    Parameters
    ----------
    p : float
        Probability of zeroing an element, in [0, 1).
    seed : int
        Seed of the generator (a 64-bit unsigned integer).
    handle : Handle, optional
        Defaults to the shared handle of `stream`; the states are initialized and used
        on its stream.
    stream : stream-like, optional

    Examples
    --------
    >>> drop = cupric.cudnn.Dropout.create(0.1, seed=1234)            # doctest: +SKIP
    >>> y, reserve = drop.forward(x)
    >>> dx = drop.backward(dy, reserve)

    Thread safety
    -------------
    The states advance with every forward call: calls from several threads must be
    ordered on the handle's stream (they are, when made through the same handle) and
    then draw in that order.

    Cost
    ----
    Construction allocates the states (a few MiB, scaling with the GPU's size) and runs
    the initialization kernel once. A forward call allocates its reserve space (one
    byte per 8 elements or so) in stream order.
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("Dropout has no public constructor; use "
                        "cupric.cudnn.Dropout.create(p, seed, handle=..., stream=...)")

    @classmethod
    def create(cls, p: float, seed: int = 0, *, handle=None, stream=None) -> "Dropout":
        """A new dropout layer with its generator states initialized (see the class)."""
        self = cls.__new__(cls)
        self._setup(p, seed, handle, stream)
        return self

    def _setup(self, p, seed, handle, stream) -> None:
        self._descriptor = None
        self._states = None
        p = float(p)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or \
                not 0 <= int(seed) < 2**64:
            raise ValueError(f"Dropout: seed must be an int in [0, 2**64), got {seed!r}")
        from . import lib
        from .handle import resolve
        h = resolve(handle, stream)
        self.p = p
        self.seed = int(seed)
        self._handle = h
        self._lock = threading.Lock()
        self._token = next(_tokens)
        self._forget = weakref.finalize(self, _forget, h._replays, self._token)
        ffi = lib.ffi
        size = ffi.new("size_t *")
        lib.check(lib.lib.cudnnDropoutGetStatesSize(h.ready(), size))
        from cupric.runtime.memory import empty
        self._states = empty(max(int(size[0]), 1), np.uint8, stream=h.stream)
        self._descriptor = LegacyDescriptor.create("Dropout")
        try:
            lib.check(lib.lib.cudnnSetDropoutDescriptor(
                self._descriptor.raw, h.ready(), p, ffi.cast("void *", self._states.ptr),
                int(size[0]), self.seed))
        except BaseException:
            self.close()
            raise
        self._descriptor.keep(self._states)

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"<cupric.cudnn.Dropout p={self.p} seed={self.seed}{state}>"

    @property
    def closed(self) -> bool:
        return self._descriptor is None or self._descriptor.closed

    @property
    def states_bytes(self) -> int:
        """Bytes of generator states."""
        return 0 if self._states is None else self._states.nbytes

    def _ready(self):
        if self.closed:
            raise ClosedError("this Dropout is closed")
        return self._handle

    def forward(self, x, *, out=None):
        """``y = x * mask / (1 - p)`` with a fresh random mask.

        Parameters
        ----------
        x : device array (float32, float16, bfloat16, float64; any layout cuDNN takes)
        out : device array, optional

        Returns
        -------
        (y, reserve)
            `reserve` (a uint8 DeviceBuffer) holds the mask: pass it to `backward`.
        """
        head = ("dropout_fwd", self._token)
        done = _replay.run(head, (x,), (out, None), self._handle, None)
        if done is not None:
            return done
        op = "dropout_forward"
        h = self._ready()
        s = h.stream
        tx = V.tensor(x, "x", op, stream=s, ndims=_ANY_NDIM, layouts=False)
        ty = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
        V.check_overlap(op, ("out", ty), ("x", tx))
        from . import lib
        ffi = lib.ffi
        size = ffi.new("size_t *")
        xd = describe(tx)
        lib.check(lib.lib.cudnnDropoutGetReserveSpaceSize(xd.raw, size))
        from cupric.runtime.memory import empty
        reserve = empty(max(int(size[0]), 1), np.uint8, stream=s)
        dd, yd = self._descriptor, describe(ty)
        fn = lib.lib.cudnnDropoutForward
        with self._lock:
            lib.check(fn(h.ready(), dd.raw, xd.raw, ffi.cast("void *", tx.ptr), yd.raw,
                         ffi.cast("void *", ty.ptr), ffi.cast("void *", reserve.ptr),
                         int(size[0])))
        _replay.remember_legacy(
            h, head, (x,), (out, None), (tx, ty, reserve), "dropout", fn,
            (h.ptr, dd._ptr, xd._ptr, ("t", 0), yd._ptr, ("t", 1), ("t", 2), int(size[0])),
            guards=(dd, xd, yd))
        return V.result(out, ty), reserve

    def backward(self, dy, reserve, *, out=None):
        """``dx = dy * mask / (1 - p)`` with the mask of the forward call that gave
        `reserve`.

        Raises
        ------
        ValueError
            If `reserve` is smaller than this shape needs (it came from another call).
        """
        head = ("dropout_bwd", self._token)
        done = _replay.run(head, (dy, reserve), (out,), self._handle, None)
        if done is not None:
            return done[0]
        op = "dropout_backward"
        h = self._ready()
        s = h.stream
        tdy = V.tensor(dy, "dy", op, stream=s, ndims=_ANY_NDIM, layouts=False)
        tdx = V.output(out, tdy.shape, tdy.etype, tdy.layout, "out", op, s,
                       ndims=(tdy.ndim,))
        from . import lib
        ffi = lib.ffi
        size = ffi.new("size_t *")
        dyd = describe(tdy)
        lib.check(lib.lib.cudnnDropoutGetReserveSpaceSize(dyd.raw, size))
        rs = V.tensor(reserve, "reserve", op, stream=s, ndims=(1,), types=("u8",),
                      layouts=False)
        if rs.buf.nbytes < int(size[0]):
            raise ValueError(f"{op}: reserve has {rs.buf.nbytes} bytes but a tensor of "
                             f"shape {tdy.shape} needs {int(size[0])}: pass the reserve "
                             f"of the forward call")
        V.check_overlap(op, ("out", tdx), ("dy", tdy), ("reserve", rs))
        dd, dxd = self._descriptor, describe(tdx)
        fn = lib.lib.cudnnDropoutBackward
        lib.check(fn(h.ready(), dd.raw, dyd.raw, ffi.cast("void *", tdy.ptr), dxd.raw,
                     ffi.cast("void *", tdx.ptr), ffi.cast("void *", rs.ptr), int(size[0])))
        _replay.remember_legacy(
            h, head, (dy, reserve), (out,), (tdy, rs, tdx), "dropout", fn,
            (h.ptr, dd._ptr, dyd._ptr, ("t", 0), dxd._ptr, ("t", 2), ("t", 1), int(size[0])),
            guards=(dd, dyd, dxd))
        return V.result(out, tdx)

    def close(self) -> None:
        """Destroy the descriptor and free the states in the handle's stream order."""
        forget = getattr(self, "_forget", None)
        if forget is not None:
            forget()
        d, self._descriptor = self._descriptor, None
        states, self._states = self._states, None
        try:
            if d is not None:
                d.close()
        finally:
            if states is not None:
                states.close(stream=self._handle.stream)

    def __enter__(self):
        if self.closed:
            raise ClosedError("cannot enter a closed Dropout")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def dropout(x, p: float, *, seed: int = 0, handle=None, stream=None):
    """One-shot dropout: ``(y, reserve, layer)``; keep `layer` for the backward pass
    (``layer.backward(dy, reserve)``).

    Cost
    ----
    Initializes generator states each call: make a `Dropout` once for training loops.
    """
    layer = Dropout.create(p, seed, handle=handle, stream=stream)
    y, reserve = layer.forward(x)
    return y, reserve, layer
