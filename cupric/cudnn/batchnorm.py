"""Batch normalization: training and inference forward, and backward.

Per channel c, ``y = gamma[c] * (x - mean[c]) / sqrt(var[c] + eps) + beta[c]``: in
training the mean and (biased) variance come from the batch (over N and the spatial
axes) and the running statistics are updated; in inference the running statistics are
used. cupric calls cuDNN's ``cudnnBatchNormalization*`` routines: the graph API's
batch-norm operations are served only by specialized engines for narrow layouts (see
docs/cudnn.md).
"""

from __future__ import annotations

import dataclasses

from . import _replay
from . import _validate as V
from .descriptors import describe, scalars, tensor_descriptor

__all__ = ["BatchNormResult", "batch_norm_training", "batch_norm_inference",
           "batch_norm_backward", "batch_norm"]

# cudnnBatchNormMode_t values (a CPU test compares them).
_SPATIAL = 1
_SPATIAL_PERSISTENT = 2
# cuDNN refuses smaller epsilons (CUDNN_BN_MIN_EPSILON, 0.0 since cuDNN 7.5).
MIN_EPSILON = 0.0


@dataclasses.dataclass
class BatchNormResult:
    """What a training-mode forward pass returns.

    Attributes
    ----------
    y : device array
        The normalized output.
    save_mean, save_inv_std : DeviceBuffer (C,) float32 (float64 for float64 data)
        The batch mean and ``1 / sqrt(var + eps)``: pass them to `batch_norm_backward`.
    """

    y: object
    save_mean: object
    save_inv_std: object

    def __iter__(self):
        return iter((self.y, self.save_mean, self.save_inv_std))


def _param_type(etype: str) -> str:
    # Scale, bias and statistics are float32 for half/bfloat16/float32 data (what
    # cudnnDeriveBNTensorDescriptor gives), float64 for float64 data.
    return "f64" if etype == "f64" else "f32"


def _param(obj, name: str, c: int, ptype: str, op: str, stream, writable=False):
    t = V.tensor(obj, name, op, stream=stream, ndims=(1,), types=(ptype,), layouts=False,
                 writable=writable)
    if t.shape != (c,):
        raise ValueError(f"{op}: {name} has shape {t.shape}, expected ({c},) (one value per "
                         f"channel)")
    if t.strides != (1,):
        raise ValueError(f"{op}: {name} must be contiguous, got element strides {t.strides}")
    return t


def _param_descriptor(ptype: str, ndim: int, c: int):
    shape = (1, c) + (1,) * (ndim - 2)
    return tensor_descriptor(ptype, shape, (c, 1) + (1,) * (ndim - 2))


def _epsilon(eps: float, op: str) -> float:
    eps = float(eps)
    if eps < MIN_EPSILON:
        raise ValueError(f"{op}: eps = {eps} is below cuDNN's minimum {MIN_EPSILON}")
    return eps


def _mode(tx: V.Tensor, persistent: bool) -> int:
    # The persistent kernels are faster for NHWC half/bfloat16 data; they may overflow
    # for some inputs, hence opt-in.
    return _SPATIAL_PERSISTENT if persistent else _SPATIAL


def _ptr(t):
    from . import lib
    return lib.ffi.cast("void *", 0 if t is None else t.ptr)


def batch_norm_training(x, weight, bias, running_mean=None, running_var=None, *,
                        momentum: float = 0.1, eps: float = 1e-5, out=None,
                        persistent: bool = False, handle=None,
                        stream=None) -> BatchNormResult:
    """Normalize with the batch statistics and update the running ones.

    Parameters
    ----------
    x : device array (N, C, H, W) or (N, C, D, H, W)
        NCHW or NHWC; float32, float16, bfloat16 or float64.
    weight, bias : device arrays (C,)
        gamma and beta; float32 (float64 for float64 data), as in PyTorch's mixed
        precision.
    running_mean, running_var : device arrays (C,), optional
        Updated in place: ``running = (1 - momentum) * running + momentum * batch``
        (unbiased batch variance), as ``torch.nn.functional.batch_norm``.
    momentum : float
    eps : float
        Added to the variance; not negative.
    out : device array, optional
    persistent : bool
        Use cuDNN's persistent kernels (faster for NHWC half precision).
    handle, stream
        As in `cupric.cudnn.conv_forward`.

    Returns
    -------
    BatchNormResult
        ``(y, save_mean, save_inv_std)``.
    """
    head = ("bn_train", momentum, eps, persistent)
    done = _replay.run(head, (x, weight, bias), (out, running_mean, running_var, None, None),
                       handle, stream)
    if done is not None:
        return BatchNormResult(done[0], done[3], done[4])
    op = "batch_norm_training"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=(4, 5))
    c = tx.shape[1]
    ptype = _param_type(tx.etype)
    tw = _param(weight, "weight", c, ptype, op, s)
    tb = _param(bias, "bias", c, ptype, op, s)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: pass both running_mean and running_var, or neither")
    trm = trv = None
    if running_mean is not None:
        trm = _param(running_mean, "running_mean", c, ptype, op, s, writable=True)
        trv = _param(running_var, "running_var", c, ptype, op, s, writable=True)
    if not 0.0 <= float(momentum) <= 1.0:
        raise ValueError(f"{op}: momentum must be in [0, 1], got {momentum}")
    eps = _epsilon(eps, op)
    ty = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    ins = (("x", tx), ("weight", tw), ("bias", tb))
    V.check_overlap(op, ("out", ty), *ins, ("running_mean", trm), ("running_var", trv))
    if trm is not None:
        V.check_overlap(op, ("running_mean", trm), *ins, ("running_var", trv))
        V.check_overlap(op, ("running_var", trv), *ins)
    save_mean = V.new_output((c,), ptype, None, s)
    save_inv = V.new_output((c,), ptype, None, s)
    from . import lib
    one, zero = scalars(tx.etype)
    h = resolve(handle, stream)
    mode = _mode(tx, persistent)
    xd, yd, bnd = describe(tx), describe(ty), _param_descriptor(ptype, tx.ndim, c)
    fn = lib.lib.cudnnBatchNormalizationForwardTraining
    lib.check(fn(h.ready(), mode, one, zero, xd.raw, _ptr(tx), yd.raw, _ptr(ty), bnd.raw,
                 _ptr(tw), _ptr(tb), float(momentum), _ptr(trm), _ptr(trv), eps,
                 lib.ffi.cast("void *", save_mean.ptr), lib.ffi.cast("void *", save_inv.ptr)))
    A = _replay.address
    _replay.remember_legacy(
        h, head, (x, weight, bias), (out, running_mean, running_var, None, None),
        (tx, tw, tb, ty, trm, trv, save_mean, save_inv), "bn_train", fn,
        (h._ptr, mode, A(one), A(zero), xd._ptr, ("t", 0), yd._ptr, ("t", 3), bnd._ptr,
         ("t", 1), ("t", 2), 0, ("t", 4), ("t", 5), 0, ("t", 6), ("t", 7)),
        doubles=(float(momentum), eps), guards=(xd, yd, bnd), keep=(one, zero),
        allocated=(True, False, False, True, True))
    return BatchNormResult(V.result(out, ty), save_mean, save_inv)


def batch_norm_inference(x, weight, bias, running_mean, running_var, *, eps: float = 1e-5,
                         out=None, handle=None, stream=None):
    """Normalize with the running statistics (evaluation mode).

    Parameters
    ----------
    x, weight, bias, running_mean, running_var, eps, out, handle, stream
        As in `batch_norm_training`; the statistics are only read.

    Returns
    -------
    y
    """
    head = ("bn_infer", eps)
    done = _replay.run(head, (x, weight, bias, running_mean, running_var), (out,), handle,
                       stream)
    if done is not None:
        return done[0]
    op = "batch_norm_inference"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=(4, 5))
    c = tx.shape[1]
    ptype = _param_type(tx.etype)
    tw = _param(weight, "weight", c, ptype, op, s)
    tb = _param(bias, "bias", c, ptype, op, s)
    trm = _param(running_mean, "running_mean", c, ptype, op, s)
    trv = _param(running_var, "running_var", c, ptype, op, s)
    eps = _epsilon(eps, op)
    ty = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    V.check_overlap(op, ("out", ty), ("x", tx), ("weight", tw), ("bias", tb),
                    ("running_mean", trm), ("running_var", trv))
    from . import lib
    one, zero = scalars(tx.etype)
    h = resolve(handle, stream)
    xd, yd, bnd = describe(tx), describe(ty), _param_descriptor(ptype, tx.ndim, c)
    fn = lib.lib.cudnnBatchNormalizationForwardInference
    lib.check(fn(h.ready(), _SPATIAL, one, zero, xd.raw, _ptr(tx), yd.raw, _ptr(ty),
                 bnd.raw, _ptr(tw), _ptr(tb), _ptr(trm), _ptr(trv), eps))
    A = _replay.address
    _replay.remember_legacy(
        h, head, (x, weight, bias, running_mean, running_var), (out,),
        (tx, tw, tb, trm, trv, ty), "bn_infer", fn,
        (h._ptr, _SPATIAL, A(one), A(zero), xd._ptr, ("t", 0), yd._ptr, ("t", 5), bnd._ptr,
         ("t", 1), ("t", 2), ("t", 3), ("t", 4), 0),
        doubles=(eps,), guards=(xd, yd, bnd), keep=(one, zero))
    return V.result(out, ty)


def batch_norm_backward(dy, x, weight, save_mean, save_inv_std, *, eps: float = 1e-5,
                        out=None, persistent: bool = False, handle=None, stream=None):
    """Gradients of a training-mode batch normalization.

    Parameters
    ----------
    dy : device array
        Gradient of the output (shape of `x`).
    x : device array
        The forward input.
    weight : device array (C,)
    save_mean, save_inv_std : device arrays (C,)
        From `batch_norm_training` (the same `eps` must be passed).
    out : device array, optional
        Receives dx.

    Returns
    -------
    (dx, dweight, dbias)
    """
    head = ("bn_bwd", eps, persistent)
    done = _replay.run(head, (dy, x, weight, save_mean, save_inv_std), (out, None, None),
                       handle, stream)
    if done is not None:
        return done
    op = "batch_norm_backward"
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=(4, 5))
    tdy = V.tensor(dy, "dy", op, stream=s, ndims=(tx.ndim,))
    V.same_type(op, ("x", tx), ("dy", tdy))
    if tdy.shape != tx.shape:
        raise ValueError(f"{op}: dy has shape {tdy.shape} but x has {tx.shape}")
    c = tx.shape[1]
    ptype = _param_type(tx.etype)
    tw = _param(weight, "weight", c, ptype, op, s)
    tm = _param(save_mean, "save_mean", c, ptype, op, s)
    tv = _param(save_inv_std, "save_inv_std", c, ptype, op, s)
    eps = _epsilon(eps, op)
    tdx = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    V.check_overlap(op, ("out", tdx), ("dy", tdy), ("x", tx), ("weight", tw),
                    ("save_mean", tm), ("save_inv_std", tv))
    dweight = V.new_output((c,), ptype, None, s)
    dbias = V.new_output((c,), ptype, None, s)
    from . import lib
    ffi = lib.ffi
    one, zero = scalars(tx.etype)
    h = resolve(handle, stream)
    mode = _mode(tx, persistent)
    xd, dyd, dxd = describe(tx), describe(tdy), describe(tdx)
    bnd = _param_descriptor(ptype, tx.ndim, c)
    fn = lib.lib.cudnnBatchNormalizationBackward
    lib.check(fn(h.ready(), mode, one, zero, one, zero, xd.raw, _ptr(tx), dyd.raw, _ptr(tdy),
                 dxd.raw, _ptr(tdx), bnd.raw, _ptr(tw), ffi.cast("void *", dweight.ptr),
                 ffi.cast("void *", dbias.ptr), eps, _ptr(tm), _ptr(tv)))
    A = _replay.address
    _replay.remember_legacy(
        h, head, (dy, x, weight, save_mean, save_inv_std), (out, None, None),
        (tdy, tx, tw, tm, tv, tdx, dweight, dbias), "bn_bwd", fn,
        (h._ptr, mode, A(one), A(zero), A(one), A(zero), xd._ptr, ("t", 1), dyd._ptr,
         ("t", 0), dxd._ptr, ("t", 5), bnd._ptr, ("t", 2), ("t", 6), ("t", 7), 0, ("t", 3),
         ("t", 4)),
        doubles=(eps,), guards=(xd, dyd, dxd, bnd), keep=(one, zero))
    return V.result(out, tdx), dweight, dbias


def batch_norm(x, running_mean, running_var, weight, bias, *, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5, out=None, handle=None,
               stream=None):
    """As ``torch.nn.functional.batch_norm`` (argument order included); returns y."""
    if training:
        return batch_norm_training(x, weight, bias, running_mean, running_var,
                                   momentum=momentum, eps=eps, out=out, handle=handle,
                                   stream=stream).y
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm: inference (training=False) needs running_mean and "
                         "running_var")
    return batch_norm_inference(x, weight, bias, running_mean, running_var, eps=eps,
                                out=out, handle=handle, stream=stream)
