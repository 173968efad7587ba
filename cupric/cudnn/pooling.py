"""Pooling (max and average) forward and backward, through cuDNN's legacy routines.

A pooling window slides over each channel's spatial plane and keeps the maximum or the
average of what it covers. The graph API describes pooling (resample operations) only
for a narrow set of fused layouts, so cupric uses ``cudnnPoolingForward/Backward``, which
take any NCHW or NHWC tensor (see docs/cudnn.md).
"""

from __future__ import annotations

import dataclasses
import threading

from . import _replay
from . import _validate as V
from .descriptors import LegacyDescriptor, describe, publish, scalars

__all__ = ["Pool", "pool_forward", "pool_backward", "max_pool2d", "avg_pool2d",
           "pool_output_shape", "POOLING_MODES"]

# cudnnPoolingMode_t values (fixed by the C API; a CPU test compares them).
POOLING_MODES = {"max": 0, "avg_include_pad": 1, "avg_exclude_pad": 2,
                 "max_deterministic": 3}
_PROPAGATE_NAN = 1


@dataclasses.dataclass(frozen=True)
class Pool:
    """A pooling window (validated once).

    Parameters
    ----------
    mode : {"max", "avg_include_pad", "avg_exclude_pad", "max_deterministic"}
        "avg_include_pad" divides by the window size everywhere (PyTorch's
        ``count_include_pad=True``); "avg_exclude_pad" by the number of input elements
        covered. "max_deterministic" gives bitwise-reproducible max-pooling gradients
        when windows overlap.
    window : int or tuple of int
    stride : int or tuple of int, optional
        Defaults to the window (non-overlapping windows), as PyTorch.
    padding : int or tuple of int
        Must be smaller than the window.
    n : int
        Spatial dimensions (2 for 2-d pooling).
    """

    mode: str
    window: tuple
    stride: tuple | None = None
    padding: tuple = 0
    n: int = 2

    def __post_init__(self) -> None:
        op = "pool"
        if self.mode not in POOLING_MODES:
            raise ValueError(f"{op}: mode must be one of {', '.join(POOLING_MODES)}, got "
                             f"{self.mode!r}")
        if self.n not in (2, 3):
            raise ValueError(f"{op}: n (spatial dimensions) must be 2 or 3, got {self.n}")
        window = V.as_tuple(self.window, self.n, "window", op, minimum=1)
        stride = window if self.stride is None else V.as_tuple(self.stride, self.n,
                                                                "stride", op, minimum=1)
        padding = V.as_tuple(self.padding, self.n, "padding", op)
        for p, w in zip(padding, window):
            if p >= w:
                raise ValueError(f"{op}: padding {padding} must be smaller than the window "
                                 f"{window} along every axis")
        object.__setattr__(self, "window", window)
        object.__setattr__(self, "stride", stride)
        object.__setattr__(self, "padding", padding)

    def output_shape(self, x_shape, op: str = "pool"):
        """(N, C, spatial...) of the output (floor mode)."""
        return V.pool_output_shape(x_shape, self.window, self.padding, self.stride, op)


def pool_output_shape(x_shape, window, stride=None, padding=0):
    """Output shape of pooling an input of `x_shape` (pure arithmetic).

    Examples
    --------
    >>> pool_output_shape((8, 64, 112, 112), 3, 2, 1)
    (8, 64, 56, 56)
    """
    return Pool("max", window, stride, padding, len(x_shape) - 2).output_shape(tuple(x_shape))


_descriptors: dict[Pool, LegacyDescriptor] = {}
_lock = threading.Lock()


def _descriptor(pool: Pool) -> LegacyDescriptor:
    d = _descriptors.get(pool)
    if d is not None:
        return d
    from . import lib
    ffi = lib.ffi
    d = LegacyDescriptor.create("Pooling")
    lib.check(lib.lib.cudnnSetPoolingNdDescriptor(
        d.raw, POOLING_MODES[pool.mode], _PROPAGATE_NAN, pool.n,
        ffi.new("int[]", list(pool.window)), ffi.new("int[]", list(pool.padding)),
        ffi.new("int[]", list(pool.stride))))
    return publish(_descriptors, _lock, pool, d)


def _pool(mode, window, stride, padding, ndim) -> Pool:
    return Pool(mode, window, stride, padding, ndim - 2)


def _ptr(t: V.Tensor):
    from . import lib
    return lib.ffi.cast("void *", t.ptr)


def pool_forward(x, mode: str = "max", *, window, stride=None, padding=0, out=None,
                 handle=None, stream=None):
    """Pool each channel's spatial plane.

    Parameters
    ----------
    x : device array (N, C, H, W) or (N, C, D, H, W)
        NCHW or NHWC; float32, float16, bfloat16, float64.
    mode : {"max", "avg_include_pad", "avg_exclude_pad", "max_deterministic"}
    window, stride, padding : int or tuple of int
        See `Pool`.
    out : device array, optional
        Allocated in `x`'s layout when None.
    handle, stream
        As in `cupric.cudnn.conv_forward`.

    Returns
    -------
    y

    Raises
    ------
    ValueError
        For a window that does not fit, padding not smaller than the window, or a
        layout other than dense NCHW/NHWC.
    """
    head = ("pool_fwd", mode, window, stride, padding)
    done = _replay.run(head, (x,), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = f"pool_forward({mode!r})"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=(4, 5))
    pool = _pool(mode, window, stride, padding, tx.ndim)
    ty = V.output(out, pool.output_shape(tx.shape, op), tx.etype, tx.layout, "out", op, s,
                  ndims=(tx.ndim,))
    V.check_overlap(op, ("out", ty), ("x", tx))
    h = resolve(handle, stream)
    h.check_device(tx.buf, "x", op)
    from . import lib
    one, zero = scalars(tx.etype)
    pd, xd, yd = _descriptor(pool), describe(tx), describe(ty)
    lib.check(lib.lib.cudnnPoolingForward(h.ready(), pd.raw, one, xd.raw, _ptr(tx), zero,
                                          yd.raw, _ptr(ty)))
    A = _replay.address
    _replay.remember_legacy(h, head, (x,), (out,), (tx, ty), "p8",
                            lib.lib.cudnnPoolingForward,
                            (h.ptr, pd._ptr, A(one), xd._ptr, ("t", 0), A(zero), yd._ptr,
                             ("t", 1)), guards=(pd, xd, yd), keep=(pd, xd, yd, one, zero))
    return V.result(out, ty)


def pool_backward(dy, x, y, mode: str = "max", *, window, stride=None, padding=0,
                  out=None, handle=None, stream=None):
    """Gradient of `pool_forward` with respect to its input.

    Parameters
    ----------
    dy : device array
        Gradient of the output (the shape of `y`).
    x, y : device arrays
        The forward input and output (max pooling finds each window's maximum again).
    mode, window, stride, padding
        As in the forward call.
    out : device array, optional
        Receives dx (allocated in `x`'s layout when None).

    Returns
    -------
    dx
    """
    head = ("pool_bwd", mode, window, stride, padding)
    done = _replay.run(head, (dy, x, y), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = f"pool_backward({mode!r})"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=(4, 5))
    ty = V.tensor(y, "y", op, stream=s, ndims=(tx.ndim,))
    tdy = V.tensor(dy, "dy", op, stream=s, ndims=(tx.ndim,))
    V.same_type(op, ("x", tx), ("y", ty), ("dy", tdy))
    pool = _pool(mode, window, stride, padding, tx.ndim)
    y_shape = pool.output_shape(tx.shape, op)
    if ty.shape != y_shape:
        raise ValueError(f"{op}: y has shape {ty.shape}, but pooling x {tx.shape} gives "
                         f"{y_shape}")
    if tdy.shape != y_shape:
        raise ValueError(f"{op}: dy has shape {tdy.shape}, expected {y_shape} (that of y)")
    tdx = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    V.check_overlap(op, ("out", tdx), ("dy", tdy), ("x", tx), ("y", ty))
    from . import lib
    one, zero = scalars(tx.etype)
    h = resolve(handle, stream)
    pd, yd, dyd, xd, dxd = (_descriptor(pool), describe(ty), describe(tdy), describe(tx),
                            describe(tdx))
    lib.check(lib.lib.cudnnPoolingBackward(
        h.ready(), pd.raw, one, yd.raw, _ptr(ty), dyd.raw, _ptr(tdy), xd.raw, _ptr(tx),
        zero, dxd.raw, _ptr(tdx)))
    A = _replay.address
    _replay.remember_legacy(h, head, (dy, x, y), (out,), (tdy, tx, ty, tdx), "p12",
                            lib.lib.cudnnPoolingBackward,
                            (h.ptr, pd._ptr, A(one), yd._ptr, ("t", 2), dyd._ptr, ("t", 0),
                             xd._ptr, ("t", 1), A(zero), dxd._ptr, ("t", 3)),
                            guards=(pd, yd, dyd, xd, dxd), keep=(one, zero))
    return V.result(out, tdx)


def max_pool2d(x, kernel_size, stride=None, padding=0, *, out=None, handle=None,
               stream=None):
    """As ``torch.nn.functional.max_pool2d`` (floor mode, no dilation)."""
    return pool_forward(x, "max", window=kernel_size, stride=stride, padding=padding,
                        out=out, handle=handle, stream=stream)


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad: bool = True, *,
               out=None, handle=None, stream=None):
    """As ``torch.nn.functional.avg_pool2d`` (floor mode)."""
    mode = "avg_include_pad" if count_include_pad else "avg_exclude_pad"
    return pool_forward(x, mode, window=kernel_size, stride=stride, padding=padding,
                        out=out, handle=handle, stream=stream)
