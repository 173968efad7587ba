"""Softmax and log-softmax, forward and backward, through cuDNN's legacy routines.

``softmax(x)[i] = exp(x[i]) / sum_j exp(x[j])`` along one axis; log-softmax is its
logarithm, computed without forming the quotient. cuDNN reduces either over all of C, H, W
of each sample ("instance") or over C at each spatial position ("channel"); cupric maps
an axis of an N-d array onto the second. The graph API's softmax operation arrived in
cuDNN 9.20, after the 9.19 of the GPU machines (see docs/cudnn.md).
"""

from __future__ import annotations

from . import _replay
from . import _validate as V
from .descriptors import scalars, tensor_descriptor

__all__ = ["softmax_forward", "softmax_backward", "softmax", "log_softmax",
           "softmax_layout", "ALGORITHMS"]

# cudnnSoftmaxAlgorithm_t and cudnnSoftmaxMode_t values (a CPU test compares them).
ALGORITHMS = {"fast": 0, "accurate": 1, "log": 2}
_CHANNEL = 1
_ANY_NDIM = (1, 2, 3, 4, 5, 6, 7, 8)


def softmax_layout(shape, strides, axis: int, op: str = "softmax"):
    """How cuDNN reduces along `axis` of a tensor: (mode, dims, strides) of a 4-d view.

    The axis becomes the C dimension of an (outer, C, inner, 1) view with the reduction
    over C at each (outer, inner) position ("channel" mode). Such a view needs the
    elements before the axis and those after it to each form one stride progression.

    Raises
    ------
    ValueError
        For an axis out of range, or strides that no such view describes.
    """
    ndim = len(shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for {ndim} dimensions")
    axis %= ndim
    c = shape[axis]
    c_stride = strides[axis]
    outer_dims = [(n, s) for n, s in zip(shape[:axis], strides[:axis]) if n != 1]
    inner_dims = [(n, s) for n, s in zip(shape[axis + 1:], strides[axis + 1:]) if n != 1]
    outer, outer_stride = _merge(outer_dims, shape, strides, op)
    inner, inner_stride = _merge(inner_dims, shape, strides, op)
    # Extents of 1 are never stepped over; give them strides past the data so that the
    # descriptor reads as a plain dense layout.
    if inner == 1:
        inner_stride = 1
    if c == 1:
        c_stride = inner * inner_stride
    if outer == 1:
        outer_stride = max(c * c_stride, inner * inner_stride)
    return _CHANNEL, (outer, c, inner, 1), (outer_stride, c_stride, inner_stride, 1)


def _merge(dims, shape, strides, op):
    """(extent, stride) of consecutive dimensions that step as one, or ValueError."""
    if not dims:
        return 1, 1
    total = 1
    for (n, s), (n_next, s_next) in zip(dims, dims[1:]):
        if s != s_next * n_next:
            raise ValueError(f"{op}: a tensor of shape {tuple(shape)} with element "
                             f"strides {tuple(strides)} cannot be viewed as (outer, axis, "
                             f"inner); make it contiguous first")
    for n, _s in dims:
        total *= n
    return total, dims[-1][1]


def _ptr(t: V.Tensor):
    from . import lib
    return lib.ffi.cast("void *", t.ptr)


def softmax_forward(x, axis: int = -1, *, log: bool = False, out=None, handle=None,
                    stream=None):
    """Softmax (or log-softmax) of `x` along `axis`.

    Parameters
    ----------
    x : device array (1 to 8 dimensions; float32, float16, bfloat16, float64)
    axis : int
        The axis normalized over (default: the last, as ``torch.softmax(x, -1)``).
    log : bool
        Log-softmax.
    out : device array, optional
        Same shape and element type; allocated C-contiguous (or in `x`'s layout) when None.
    handle, stream
        As in `cupric.cudnn.conv_forward`.

    Returns
    -------
    y

    Raises
    ------
    ValueError
        For an axis out of range or strides that cuDNN cannot address along it.
    """
    head = ("softmax_fwd", axis, log)
    done = _replay.run(head, (x,), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = "log_softmax" if log else "softmax"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=_ANY_NDIM, layouts=False)
    _mode, xd, xs = softmax_layout(tx.shape, tx.strides, axis, op)
    ty = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    _mode, yd, ys = softmax_layout(ty.shape, ty.strides, axis, op)
    V.check_overlap(op, ("out", ty), ("x", tx))
    one, zero = scalars(tx.etype)
    from . import lib
    h = resolve(handle, stream)
    algo = ALGORITHMS["log" if log else "accurate"]
    xdesc, ydesc = tensor_descriptor(tx.etype, xd, xs), tensor_descriptor(ty.etype, yd, ys)
    fn = lib.lib.cudnnSoftmaxForward
    lib.check(fn(h.ready(), algo, _CHANNEL, one, xdesc.raw, _ptr(tx), zero, ydesc.raw,
                 _ptr(ty)))
    A = _replay.address
    _replay.remember_legacy(h, head, (x,), (out,), (tx, ty), "softmax_fwd", fn,
                            (h.ptr, algo, _CHANNEL, A(one), xdesc._ptr, ("t", 0), A(zero),
                             ydesc._ptr, ("t", 1)),
                            guards=(xdesc, ydesc), keep=(one, zero))
    return V.result(out, ty)


def softmax_backward(y, dy, axis: int = -1, *, log: bool = False, out=None, handle=None,
                     stream=None):
    """Gradient of `softmax_forward` with respect to its input.

    Parameters
    ----------
    y : device array
        The forward output (softmax, or log-softmax when `log`).
    dy : device array
        Gradient of the output: same shape, and laid out as `y` (same strides; cuDNN
        refuses the pair otherwise).
    axis, log
        As in the forward call.
    out : device array, optional
        Receives dx.

    Returns
    -------
    dx

    Raises
    ------
    TypeError, ValueError
        For mismatched element types or shapes, an axis out of range, strides cuDNN
        cannot address along it, or `y` and `dy` laid out differently.
    """
    head = ("softmax_bwd", axis, log)
    done = _replay.run(head, (y, dy), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = "log_softmax_backward" if log else "softmax_backward"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    ty = V.tensor(y, "y", op, stream=s, ndims=_ANY_NDIM, layouts=False)
    tdy = V.tensor(dy, "dy", op, stream=s, ndims=(ty.ndim,), layouts=False)
    V.same_type(op, ("y", ty), ("dy", tdy))
    if tdy.shape != ty.shape:
        raise ValueError(f"{op}: dy has shape {tdy.shape} but y has {ty.shape}")
    # Refuses a bad axis before allocating.
    _mode, y_dims, y_strides = softmax_layout(ty.shape, ty.strides, axis, op)
    _mode, dy_dims, dy_strides = softmax_layout(tdy.shape, tdy.strides, axis, op)
    if dy_strides != y_strides:
        # cudnnSoftmaxBackward answers a bare CUDNN_STATUS_BAD_PARAM when y and dy are
        # laid out differently (seen on cuDNN 9.19 with an NCHW y and an NHWC dy, while
        # the same call with both NHWC runs): say which and why before any launch.
        raise ValueError(f"{op}: y and dy must be laid out alike, but y of shape "
                         f"{ty.shape} has element strides {ty.strides} and dy "
                         f"{tdy.strides}; make one like the other (e.g. "
                         f".contiguous(memory_format=...) in PyTorch)")
    tdx = V.output(out, ty.shape, ty.etype, ty.layout, "out", op, s, ndims=(ty.ndim,))
    _mode, dx_dims, dx_strides = softmax_layout(tdx.shape, tdx.strides, axis, op)
    descs = [tensor_descriptor(ty.etype, y_dims, y_strides),
             tensor_descriptor(tdy.etype, dy_dims, dy_strides),
             tensor_descriptor(tdx.etype, dx_dims, dx_strides)]
    V.check_overlap(op, ("out", tdx), ("y", ty), ("dy", tdy))
    one, zero = scalars(ty.etype)
    from . import lib
    h = resolve(handle, stream)
    algo = ALGORITHMS["log" if log else "accurate"]
    fn = lib.lib.cudnnSoftmaxBackward
    lib.check(fn(h.ready(), algo, _CHANNEL, one, descs[0].raw, _ptr(ty), descs[1].raw,
                 _ptr(tdy), zero, descs[2].raw, _ptr(tdx)))
    A = _replay.address
    _replay.remember_legacy(h, head, (y, dy), (out,), (ty, tdy, tdx), "softmax_bwd", fn,
                            (h.ptr, algo, _CHANNEL, A(one), descs[0]._ptr, ("t", 0),
                             descs[1]._ptr, ("t", 1), A(zero), descs[2]._ptr, ("t", 2)),
                            guards=tuple(descs), keep=(one, zero))
    return V.result(out, tdx)


def softmax(x, axis: int = -1, *, out=None, handle=None, stream=None):
    """As ``torch.softmax(x, axis)`` (see `softmax_forward`)."""
    return softmax_forward(x, axis, out=out, handle=handle, stream=stream)


def log_softmax(x, axis: int = -1, *, out=None, handle=None, stream=None):
    """As ``torch.log_softmax(x, axis)`` (see `softmax_forward`)."""
    return softmax_forward(x, axis, log=True, out=out, handle=handle, stream=stream)
