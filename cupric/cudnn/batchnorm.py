"""Batch normalization: training and inference forward, and backward.

Per channel c, ``y = gamma[c] * (x - mean[c]) / sqrt(var[c] + eps) + beta[c]``: in
training the mean and (biased) variance come from the batch (over N and the spatial
axes) and the running statistics are updated; in inference the running statistics are
used. cupric calls cuDNN's ``cudnnBatchNormalization*`` routines: the graph API's
batch-norm operations are served only by specialized engines for narrow layouts (see
docs/cudnn.md). Training on channels-last data runs cuDNN's persistent kernels through
the ``*Ex`` entry points (the choice PyTorch makes), with the workspace and reserve
space cuDNN asks for; other layouts keep the plain spatial kernels.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _replay
from . import _validate as V
from .descriptors import describe, scalars, tensor_descriptor

__all__ = ["BatchNormResult", "batch_norm_training", "batch_norm_inference",
           "batch_norm_backward", "batch_norm"]

# cudnnBatchNormMode_t values and CUDNN_BATCHNORM_OPS_BN (a CPU test compares them).
_SPATIAL = 1
_SPATIAL_PERSISTENT = 2
_OPS_BN = 0
# Element types the persistent kernels are chosen for by default (float64 keeps the plain
# spatial ones, as PyTorch, which never hands float64 to cuDNN's batch norm).
_PERSISTENT_TYPES = ("f16", "bf16", "f32")
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
    reserve : DeviceBuffer (nbytes,) uint8 or None
        The persistent kernels' reserve space (None when cuDNN asked for none, or the
        spatial kernels ran): pass it to `batch_norm_backward` as ``reserve``. Unpacking
        gives the first three attributes only.
    """

    y: object
    save_mean: object
    save_inv_std: object
    reserve: object = None

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


# Layouts (dtype, shape, strides) whose persistent kernels cuDNN refused: the spatial
# path runs them from then on (bounded like the other per-layout tables).
_refused: set = set()
_REFUSED_LIMIT = 1024


def _persistent(tx: V.Tensor, persistent: bool | None, *same: V.Tensor) -> bool:
    """Whether a training call runs the persistent kernels (the ``Ex`` entry points).

    None picks what PyTorch picks (aten/src/ATen/native/cudnn/BatchNorm.cpp): training on
    channels-last 4-d or 5-d data; channels-first data keeps the plain spatial kernels,
    whose accuracy PyTorch prefers where the persistent ones are not much faster.
    PyTorch always hands cuDNN the output and gradients in the input's layout; other
    mixes (`same`, the other data tensors) keep the spatial kernels too.
    """
    if persistent is not None:
        return bool(persistent)
    return (tx.ndim in (4, 5) and V.channels_last(tx.layout)
            and tx.etype in _PERSISTENT_TYPES
            and all(t.strides == tx.strides for t in same)
            and (tx.etype, tx.shape, tx.strides) not in _refused)


def _refuse(tx: V.Tensor, exc) -> bool:
    """After cuDNN refused the persistent kernels for `tx` with `exc`: whether to run the
    spatial ones instead (a BAD_PARAM or NOT_SUPPORTED status, which the spatial call
    raises again if the arguments are really wrong; other errors are the caller's)."""
    from .lib import CudnnError
    if not isinstance(exc, CudnnError) or not 2000 <= exc.code < 4000:
        return False
    if len(_refused) < _REFUSED_LIMIT:
        _refused.add((tx.etype, tx.shape, tx.strides))
    return True


def _ptr(t):
    from . import lib
    return lib.ffi.cast("void *", 0 if t is None else t.ptr)


def _size(query, *args) -> int:
    """A size cuDNN reports through its last ``size_t *`` argument."""
    from . import lib
    size = lib.ffi.new("size_t *")
    lib.check(query(*args, size))
    return int(size[0])


def _reserve_bytes(hr, mode: int, xd) -> int:
    from . import lib
    L = lib.lib
    return _size(L.cudnnGetBatchNormalizationTrainingExReserveSpaceSize, hr, mode, _OPS_BN,
                 lib.ffi.NULL, xd.raw)


def batch_norm_training(x, weight, bias, running_mean=None, running_var=None, *,
                        momentum: float = 0.1, eps: float = 1e-5, out=None,
                        persistent: bool | None = None, handle=None,
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
    persistent : bool, optional
        Run cuDNN's persistent kernels (``cudnnBatchNormalizationForwardTrainingEx``,
        made for channels-last data; cuDNN documents that they may overflow for inputs
        of a very large range). None (default) picks them as PyTorch does: for
        channels-last float32/float16/bfloat16 data with `out` in the same layout,
        falling back to the spatial kernels where cuDNN refuses them; False never, True
        always.
    handle, stream
        As in `cupric.cudnn.conv_forward`.

    Returns
    -------
    BatchNormResult
        ``(y, save_mean, save_inv_std)`` when unpacked; ``.reserve`` holds the
        persistent kernels' reserve space for `batch_norm_backward` (None if none).
    """
    head = ("bn_train", momentum, eps, persistent)
    done = _replay.run(head, (x, weight, bias),
                       (out, running_mean, running_var, None, None, None), handle, stream)
    if done is not None:
        return BatchNormResult(done[0], done[3], done[4], done[5])
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
    h = resolve(handle, stream)
    xd, yd, bnd = describe(tx), describe(ty), _param_descriptor(ptype, tx.ndim, c)
    call = (h, head, (x, weight, bias), (out, running_mean, running_var, None, None, None),
            tx, tw, tb, ty, trm, trv, save_mean, save_inv, xd, yd, bnd, float(momentum), eps)
    if _persistent(tx, persistent, ty):
        try:
            return _training_ex(*call, out)
        except Exception as exc:
            if persistent is not None or not _refuse(tx, exc):
                raise
    return _training_spatial(*call, out)


def _training_spatial(h, head, arrays, outs, tx, tw, tb, ty, trm, trv, save_mean, save_inv,
                      xd, yd, bnd, momentum, eps, out) -> BatchNormResult:
    from . import lib
    one, zero = scalars(tx.etype)
    fn = lib.lib.cudnnBatchNormalizationForwardTraining
    lib.check(fn(h.ready(), _SPATIAL, one, zero, xd.raw, _ptr(tx), yd.raw, _ptr(ty),
                 bnd.raw, _ptr(tw), _ptr(tb), momentum, _ptr(trm), _ptr(trv), eps,
                 _ptr(save_mean), _ptr(save_inv)))
    A = _replay.address
    _replay.remember_legacy(
        h, head, arrays, outs, (tx, tw, tb, ty, trm, trv, save_mean, save_inv, None),
        "bn_train", fn,
        (h.ptr, _SPATIAL, A(one), A(zero), xd._ptr, ("t", 0), yd._ptr, ("t", 3), bnd._ptr,
         ("t", 1), ("t", 2), 0, ("t", 4), ("t", 5), 0, ("t", 6), ("t", 7)),
        doubles=(momentum, eps), guards=(xd, yd, bnd), keep=(one, zero),
        allocated=(True, False, False, True, True, False))
    return BatchNormResult(V.result(out, ty), save_mean, save_inv)


def _training_ex(h, head, arrays, outs, tx, tw, tb, ty, trm, trv, save_mean, save_inv,
                 xd, yd, bnd, momentum, eps, out) -> BatchNormResult:
    """The persistent kernels: workspace (the handle's) and reserve space (a new buffer,
    which the backward pass reads) of the sizes cuDNN reports for this layout."""
    from cupric.runtime.memory import empty

    from . import lib
    L, NULL = lib.lib, lib.ffi.NULL
    hr = h.ready()
    mode = _SPATIAL_PERSISTENT
    ws_bytes = _size(L.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize, hr, mode,
                     _OPS_BN, xd.raw, xd.raw, yd.raw, bnd.raw, NULL)
    rs_bytes = _reserve_bytes(hr, mode, xd)
    # The workspace is sized for the backward pass as well (gradients in y's layout, as
    # PyTorch passes them): growing it there would leave this call's replay entry behind
    # the handle's new workspace, and a captured training step must not grow it at all.
    backward = _size(L.cudnnGetBatchNormalizationBackwardExWorkspaceSize, hr, mode, _OPS_BN,
                     xd.raw, yd.raw, yd.raw, NULL, yd.raw, bnd.raw, NULL)
    h.workspace(max(ws_bytes, backward))
    ws = h.workspace(ws_bytes)
    reserve = empty((rs_bytes,), np.uint8, stream=h.stream) if rs_bytes else None
    one, zero = scalars(tx.etype)
    fn = L.cudnnBatchNormalizationForwardTrainingEx
    lib.check(fn(hr, mode, _OPS_BN, one, zero, xd.raw, _ptr(tx), NULL, NULL, yd.raw,
                 _ptr(ty), bnd.raw, _ptr(tw), _ptr(tb), momentum, _ptr(trm), _ptr(trv), eps,
                 _ptr(save_mean), _ptr(save_inv), NULL, lib.ffi.cast("void *", ws), ws_bytes,
                 _ptr(reserve), rs_bytes))
    A = _replay.address
    _replay.remember_legacy(
        h, head, arrays, outs, (tx, tw, tb, ty, trm, trv, save_mean, save_inv, reserve),
        "bn_train_ex", fn,
        (h.ptr, mode, _OPS_BN, A(one), A(zero), xd._ptr, ("t", 0), 0, 0, yd._ptr, ("t", 3),
         bnd._ptr, ("t", 1), ("t", 2), 0, ("t", 4), ("t", 5), 0, ("t", 6), ("t", 7), 0, ws,
         ws_bytes, ("t", 8), rs_bytes),
        doubles=(momentum, eps), guards=(xd, yd, bnd), keep=(one, zero),
        allocated=(True, False, False, True, True, reserve is not None),
        workspace=h.owned.workspace if ws_bytes else None)
    return BatchNormResult(V.result(out, ty), save_mean, save_inv, reserve)


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
        (h.ptr, _SPATIAL, A(one), A(zero), xd._ptr, ("t", 0), yd._ptr, ("t", 5), bnd._ptr,
         ("t", 1), ("t", 2), ("t", 3), ("t", 4), 0),
        doubles=(eps,), guards=(xd, yd, bnd), keep=(one, zero))
    return V.result(out, ty)


def batch_norm_backward(dy, x, weight, save_mean, save_inv_std, *, eps: float = 1e-5,
                        out=None, persistent: bool | None = None, reserve=None, handle=None,
                        stream=None):
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
    persistent : bool, optional
        As in `batch_norm_training` (``cudnnBatchNormalizationBackwardEx``); pass what
        the forward pass got.
    reserve : device array, optional
        ``BatchNormResult.reserve`` of the forward pass. Where the persistent kernels
        need a reserve space and none is given, the spatial kernels run.

    Returns
    -------
    (dx, dweight, dbias)
    """
    head = ("bn_bwd", eps, persistent)
    arrays = (dy, x, weight, save_mean, save_inv_std, reserve)
    done = _replay.run(head, arrays, (out, None, None), handle, stream)
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
    trs = None
    if reserve is not None:
        trs = V.tensor(reserve, "reserve", op, stream=s, ndims=(1,), types=("u8",),
                       layouts=False)
        V.check_overlap(op, ("out", tdx), ("reserve", trs))
    dweight = V.new_output((c,), ptype, None, s)
    dbias = V.new_output((c,), ptype, None, s)
    h = resolve(handle, stream)
    xd, dyd, dxd = describe(tx), describe(tdy), describe(tdx)
    bnd = _param_descriptor(ptype, tx.ndim, c)
    call = (h, head, arrays, (out, None, None), tdy, tx, tw, tm, tv, trs, tdx, dweight,
            dbias, xd, dyd, dxd, bnd, eps)
    ran = False
    if _persistent(tx, persistent, tdy, tdx):
        try:
            ran = _backward_ex(*call)
        except Exception as exc:
            if persistent is not None or not _refuse(tx, exc):
                raise
    if not ran:
        _backward_spatial(*call)
    return V.result(out, tdx), dweight, dbias


def _backward_spatial(h, head, arrays, outs, tdy, tx, tw, tm, tv, trs, tdx, dweight, dbias,
                      xd, dyd, dxd, bnd, eps) -> None:
    from . import lib
    one, zero = scalars(tx.etype)
    fn = lib.lib.cudnnBatchNormalizationBackward
    lib.check(fn(h.ready(), _SPATIAL, one, zero, one, zero, xd.raw, _ptr(tx), dyd.raw,
                 _ptr(tdy), dxd.raw, _ptr(tdx), bnd.raw, _ptr(tw), _ptr(dweight),
                 _ptr(dbias), eps, _ptr(tm), _ptr(tv)))
    A = _replay.address
    _replay.remember_legacy(
        h, head, arrays, outs, (tdy, tx, tw, tm, tv, trs, tdx, dweight, dbias), "bn_bwd", fn,
        (h.ptr, _SPATIAL, A(one), A(zero), A(one), A(zero), xd._ptr, ("t", 1), dyd._ptr,
         ("t", 0), dxd._ptr, ("t", 6), bnd._ptr, ("t", 2), ("t", 7), ("t", 8), 0, ("t", 3),
         ("t", 4)),
        doubles=(eps,), guards=(xd, dyd, dxd, bnd), keep=(one, zero))


def _backward_ex(h, head, arrays, outs, tdy, tx, tw, tm, tv, trs, tdx, dweight, dbias, xd,
                 dyd, dxd, bnd, eps) -> bool:
    """The persistent kernels' backward pass, or False (nothing queued) when they need
    the forward pass's reserve space and the caller has not passed enough of it."""
    from . import lib
    L, NULL = lib.lib, lib.ffi.NULL
    hr = h.ready()
    mode = _SPATIAL_PERSISTENT
    rs_bytes = _reserve_bytes(hr, mode, xd)
    if rs_bytes and (trs is None or trs.buf.nbytes < rs_bytes):
        return False
    ws_bytes = _size(L.cudnnGetBatchNormalizationBackwardExWorkspaceSize, hr, mode, _OPS_BN,
                     xd.raw, xd.raw, dyd.raw, NULL, dxd.raw, bnd.raw, NULL)
    ws = h.workspace(ws_bytes)
    rs_bytes = trs.buf.nbytes if trs is not None else 0
    one, zero = scalars(tx.etype)
    fn = L.cudnnBatchNormalizationBackwardEx
    lib.check(fn(hr, mode, _OPS_BN, one, zero, one, zero, xd.raw, _ptr(tx), NULL, NULL,
                 dyd.raw, _ptr(tdy), NULL, NULL, dxd.raw, _ptr(tdx), bnd.raw, _ptr(tw), NULL,
                 _ptr(dweight), _ptr(dbias), eps, _ptr(tm), _ptr(tv), NULL,
                 lib.ffi.cast("void *", ws), ws_bytes, _ptr(trs), rs_bytes))
    A = _replay.address
    _replay.remember_legacy(
        h, head, arrays, outs, (tdy, tx, tw, tm, tv, trs, tdx, dweight, dbias), "bn_bwd_ex",
        fn,
        (h.ptr, mode, _OPS_BN, A(one), A(zero), A(one), A(zero), xd._ptr, ("t", 1), 0, 0,
         dyd._ptr, ("t", 0), 0, 0, dxd._ptr, ("t", 6), bnd._ptr, ("t", 2), 0, ("t", 7),
         ("t", 8), 0, ("t", 3), ("t", 4), 0, ws, ws_bytes, ("t", 5), rs_bytes),
        doubles=(eps,), guards=(xd, dyd, dxd, bnd), keep=(one, zero),
        workspace=h.owned.workspace if ws_bytes else None)
    return True


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
