"""The legacy-API calls of cupric.cudnn on the CPU lane: each operation runs its real code
up to the cuDNN call, which is answered by a C callback of the function's exact
signature (so cffi converts every argument as the real call would: count, types), and
the descriptors it received are read back from cuDNN (descriptor calls run without a
GPU). What is checked: dims, strides, element types, modes and scalars passed, and the
device pointers in the right places."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from cupric.cudnn import _validate as V
from cupric.cudnn import api as dnn
from cupric.cudnn import handle as handle_mod
from cupric.runtime import memory

from _cudnn_fake import FakeDeviceArray, nhwc

libmod = pytest.importorskip("cupric.cudnn.lib")
if not libmod.is_available():
    pytest.skip("cuDNN bindings cannot be loaded here", allow_module_level=True)

REAL = libmod.lib
FFI = libmod.ffi


class Recorder:
    """The real library, except the named functions, which record their C arguments."""

    def __init__(self, answers: dict):
        self._real = REAL
        self.calls: list[tuple[str, tuple]] = []
        self._callbacks = {}
        for name, answer in answers.items():
            self._callbacks[name] = self._callback(name, answer)

    def _callback(self, name, answer):
        def impl(*args):
            self.calls.append((name, args))
            if callable(answer):
                answer(*args)
            return 0
        return FFI.callback(FFI.typeof(getattr(REAL, name)), impl)

    def __getattr__(self, name):
        cb = self._callbacks.get(name)
        return cb if cb is not None else getattr(self._real, name)

    def only(self, name):
        found = [args for n, args in self.calls if n == name]
        assert len(found) == 1, f"{name} called {len(found)} times"
        return found[0]


def tensor_of(desc):
    """(element type, dims, strides) of a legacy tensor descriptor."""
    dtype, nb = FFI.new("cudnnDataType_t *"), FFI.new("int *")
    dims, strides = FFI.new("int[8]"), FFI.new("int[8]")
    libmod.check(REAL.cudnnGetTensorNdDescriptor(desc, 8, dtype, nb, dims, strides))
    names = {v: k for k, v in V.DATA_TYPES.items()}
    return names[dtype[0]], tuple(dims[0:nb[0]]), tuple(strides[0:nb[0]])


def address(ptr) -> int:
    return int(FFI.cast("uintptr_t", ptr))


def scalar(ptr, ctype="float"):
    return FFI.cast(f"{ctype} *", ptr)[0]


@pytest.fixture
def h():
    handle = handle_mod.Handle.from_handle(0xDEAD0, device=0)
    yield handle
    handle.close()


@pytest.fixture
def record(monkeypatch):
    def install(**answers):
        recorder = Recorder(answers)
        monkeypatch.setattr(libmod, "lib", recorder)
        return recorder
    return install


@pytest.fixture
def fake_alloc(monkeypatch):
    """Outputs cupric allocates become borrows of made-up addresses."""
    made = []

    def new_output(shape, etype, layout, stream):
        arr = FakeDeviceArray(shape, V.alloc_dtype(etype))
        buf = memory.borrow(arr.ptr, shape, None, arr.dtype)
        made.append(buf)
        return buf

    def empty(shape, dtype=np.float64, stream=None):
        arr = FakeDeviceArray(memory.normalize_shape(shape), dtype)
        buf = memory.borrow(arr.ptr, arr.shape, None, arr.dtype)
        made.append(buf)
        return buf

    monkeypatch.setattr(V, "new_output", new_output)
    monkeypatch.setattr(memory, "empty", empty)
    return made


def test_pooling_calls(h, record):
    rec = record(cudnnPoolingForward=None, cudnnPoolingBackward=None)
    x = nhwc((2, 8, 9, 9), "float16")
    y = nhwc((2, 8, 5, 5), "float16")
    dnn.pool_forward(x, "avg_exclude_pad", window=3, stride=2, padding=1, out=y, handle=h)
    handle, pool, alpha, xd, xp, beta, yd, yp = rec.only("cudnnPoolingForward")
    assert address(handle) == 0xDEAD0
    assert scalar(alpha) == 1.0 and scalar(beta) == 0.0
    assert tensor_of(xd) == ("f16", (2, 8, 9, 9), (648, 1, 72, 8))
    assert tensor_of(yd) == ("f16", (2, 8, 5, 5), (200, 1, 40, 8))
    assert (address(xp), address(yp)) == (x.ptr, y.ptr)
    mode, nan, nb = FFI.new("cudnnPoolingMode_t *"), FFI.new("cudnnNanPropagation_t *"), \
        FFI.new("int *")
    window, padding, stride = FFI.new("int[3]"), FFI.new("int[3]"), FFI.new("int[3]")
    libmod.check(REAL.cudnnGetPoolingNdDescriptor(pool, 3, mode, nan, nb, window, padding,
                                                  stride))
    assert mode[0] == REAL.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING
    assert nan[0] == REAL.CUDNN_PROPAGATE_NAN
    assert nb[0] == 2 and list(window)[:2] == [3, 3] and list(padding)[:2] == [1, 1] \
        and list(stride)[:2] == [2, 2]
    dy, dx = nhwc((2, 8, 5, 5), "float16"), nhwc((2, 8, 9, 9), "float16")
    dnn.pool_backward(dy, x, y, "avg_exclude_pad", window=3, stride=2, padding=1, out=dx,
                      handle=h)
    args = rec.only("cudnnPoolingBackward")
    assert [address(args[i]) for i in (4, 6, 8, 11)] == [y.ptr, dy.ptr, x.ptr, dx.ptr]


def test_activation_calls(h, record):
    rec = record(cudnnActivationForward=None, cudnnActivationBackward=None)
    x = FakeDeviceArray((3, 7), "float64")
    y = FakeDeviceArray((3, 7), "float64")
    dnn.activation_forward(x, "swish", beta=1.7, out=y, handle=h)
    _h, act, alpha, xd, xp, beta, yd, yp = rec.only("cudnnActivationForward")
    assert scalar(alpha, "double") == 1.0 and scalar(beta, "double") == 0.0
    assert tensor_of(xd) == ("f64", (3, 7, 1, 1), (7, 1, 1, 1))
    mode, nan, coef = FFI.new("cudnnActivationMode_t *"), \
        FFI.new("cudnnNanPropagation_t *"), FFI.new("double *")
    libmod.check(REAL.cudnnGetActivationDescriptor(act, mode, nan, coef))
    swish_beta = FFI.new("double *")
    libmod.check(REAL.cudnnGetActivationDescriptorSwishBeta(act, swish_beta))
    assert mode[0] == REAL.CUDNN_ACTIVATION_SWISH and swish_beta[0] == 1.7
    assert nan[0] == REAL.CUDNN_PROPAGATE_NAN
    dy, dx = FakeDeviceArray((3, 7), "float64"), FakeDeviceArray((3, 7), "float64")
    dnn.activation_backward(dy, x, y, "elu", alpha=0.3, out=dx, handle=h)
    args = rec.only("cudnnActivationBackward")
    assert [address(args[i]) for i in (4, 6, 8, 11)] == [y.ptr, dy.ptr, x.ptr, dx.ptr]
    libmod.check(REAL.cudnnGetActivationDescriptor(args[1], mode, nan, coef))
    assert mode[0] == REAL.CUDNN_ACTIVATION_ELU and coef[0] == pytest.approx(0.3)


@pytest.mark.parametrize("dtype,etype", [("float32", "f32"), ("float16", "f16"),
                                         ("float64", "f64")])
def test_clipped_relu_backward_bound(h, record, fake_alloc, dtype, etype):
    """The forward clips at `clip`; the backward hands cuDNN the largest element below
    it, so that cuDNN's inclusive test gives no gradient at x == clip (PyTorch's
    convention)."""
    from cupric.cudnn.activation import largest_below
    rec = record(cudnnActivationForward=None, cudnnActivationBackward=None)
    x, dy, dx = (FakeDeviceArray((3, 5), dtype) for _ in range(3))
    dnn.activation_backward(dy, x, mode="clipped_relu", clip=1.5, out=dx, handle=h)
    mode, nan, coef = FFI.new("cudnnActivationMode_t *"), \
        FFI.new("cudnnNanPropagation_t *"), FFI.new("double *")
    forward = rec.only("cudnnActivationForward")
    libmod.check(REAL.cudnnGetActivationDescriptor(forward[1], mode, nan, coef))
    assert mode[0] == REAL.CUDNN_ACTIVATION_CLIPPED_RELU and coef[0] == 1.5
    backward = rec.only("cudnnActivationBackward")
    libmod.check(REAL.cudnnGetActivationDescriptor(backward[1], mode, nan, coef))
    assert mode[0] == REAL.CUDNN_ACTIVATION_CLIPPED_RELU
    assert coef[0] == largest_below(1.5, etype) < 1.5
    assert tensor_of(backward[7])[0] == etype


def test_softmax_backward_refuses_mixed_layouts(h, record):
    rec = record(cudnnSoftmaxBackward=None)
    y, dy = FakeDeviceArray((2, 10, 3, 4)), nhwc((2, 10, 3, 4))
    with pytest.raises(ValueError, match=r"softmax_backward: y and dy must be laid out "
                                         r"alike.*\(120, 12, 4, 1\).*\(120, 1, 40, 10\)"):
        dnn.softmax_backward(y, dy, 1, handle=h)
    assert rec.calls == []
    # The output may differ from them.
    dnn.softmax_backward(nhwc((2, 10, 3, 4)), dy, 1, out=FakeDeviceArray((2, 10, 3, 4)),
                         handle=h)
    args = rec.only("cudnnSoftmaxBackward")
    assert tensor_of(args[4]) == tensor_of(args[6]) == ("f32", (2, 10, 12, 1),
                                                        (120, 1, 10, 1))
    assert tensor_of(args[9]) == ("f32", (2, 10, 12, 1), (120, 12, 1, 1))


def test_activation_backward_recomputes_y(h, record, fake_alloc):
    rec = record(cudnnActivationForward=None, cudnnActivationBackward=None)
    x, dy = FakeDeviceArray((4, 4)), FakeDeviceArray((4, 4))
    dnn.activation_backward(dy, x, mode="tanh", out=FakeDeviceArray((4, 4)), handle=h)
    forward = rec.only("cudnnActivationForward")
    backward = rec.only("cudnnActivationBackward")
    assert address(forward[7]) == address(backward[4]) == fake_alloc[0].ptr


def test_softmax_calls(h, record):
    rec = record(cudnnSoftmaxForward=None, cudnnSoftmaxBackward=None)
    x, y = nhwc((2, 10, 3, 4)), nhwc((2, 10, 3, 4))
    dnn.softmax_forward(x, 1, log=True, out=y, handle=h)
    _h, algo, mode, alpha, xd, xp, beta, yd, yp = rec.only("cudnnSoftmaxForward")
    assert algo == REAL.CUDNN_SOFTMAX_LOG and mode == REAL.CUDNN_SOFTMAX_MODE_CHANNEL
    assert tensor_of(xd) == ("f32", (2, 10, 12, 1), (120, 1, 10, 1))
    dx = nhwc((2, 10, 3, 4))
    dnn.softmax_backward(y, x, 1, out=dx, handle=h)
    args = rec.only("cudnnSoftmaxBackward")
    assert args[1] == REAL.CUDNN_SOFTMAX_ACCURATE
    assert [address(args[i]) for i in (5, 7, 10)] == [y.ptr, x.ptr, dx.ptr]


def test_batch_norm_calls(h, record, fake_alloc):
    rec = record(cudnnBatchNormalizationForwardTraining=None,
                 cudnnBatchNormalizationForwardInference=None,
                 cudnnBatchNormalizationBackward=None)
    x, y = nhwc((4, 6, 5, 5), "float16"), nhwc((4, 6, 5, 5), "float16")
    w, b, rm, rv = (FakeDeviceArray((6,)) for _ in range(4))
    # persistent=False: the spatial kernels even for channels-last data.
    res = dnn.batch_norm_training(x, w, b, rm, rv, momentum=0.25, eps=1e-3, out=y, handle=h,
                                  persistent=False)
    assert res.reserve is None
    args = rec.only("cudnnBatchNormalizationForwardTraining")
    assert args[1] == REAL.CUDNN_BATCHNORM_SPATIAL
    assert tensor_of(args[4])[0] == "f16" and address(args[5]) == x.ptr
    assert tensor_of(args[8]) == ("f32", (1, 6, 1, 1), (6, 1, 1, 1))
    assert [address(args[i]) for i in (9, 10, 12, 13)] == [w.ptr, b.ptr, rm.ptr, rv.ptr]
    assert args[11] == 0.25 and args[14] == 1e-3
    assert [address(args[i]) for i in (15, 16)] == [res.save_mean.ptr, res.save_inv_std.ptr]
    dy, dx = nhwc((4, 6, 5, 5), "float16"), nhwc((4, 6, 5, 5), "float16")
    got = dnn.batch_norm_backward(dy, x, w, res.save_mean, res.save_inv_std, eps=1e-3,
                                  out=dx, handle=h, persistent=False)
    args = rec.only("cudnnBatchNormalizationBackward")
    assert args[1] == REAL.CUDNN_BATCHNORM_SPATIAL
    assert len(args) == 19 and args[16] == 1e-3
    assert [address(args[i]) for i in (7, 9, 11, 13, 14, 15, 17, 18)] == [
        x.ptr, dy.ptr, dx.ptr, w.ptr, got[1].ptr, got[2].ptr, res.save_mean.ptr,
        res.save_inv_std.ptr]
    dnn.batch_norm_inference(x, w, b, rm, rv, eps=1e-4, out=y, handle=h)
    args = rec.only("cudnnBatchNormalizationForwardInference")
    assert args[13] == 1e-4 and [address(args[i]) for i in (9, 10, 11, 12)] == [
        w.ptr, b.ptr, rm.ptr, rv.ptr]


def _bn_sizes(workspace, reserve, backward=None):
    """Answers of cuDNN's size queries for the persistent kernels (the last argument)."""
    def answer(size):
        return lambda *args: args[-1].__setitem__(0, size)
    return dict(
        cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize=answer(workspace),
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize=answer(reserve),
        cudnnGetBatchNormalizationBackwardExWorkspaceSize=answer(
            workspace if backward is None else backward))


@pytest.mark.parametrize("reserve_bytes", [0, 3072])
def test_batch_norm_persistent_calls_on_channels_last_data(h, record, fake_alloc,
                                                           reserve_bytes):
    """Training on NHWC data runs the Ex entry points in the persistent mode (PyTorch's
    choice), with the workspace and reserve space of the sizes cuDNN reports."""
    rec = record(cudnnBatchNormalizationForwardTrainingEx=None,
                 cudnnBatchNormalizationBackwardEx=None,
                 cudnnBatchNormalizationForwardTraining=None,
                 cudnnBatchNormalizationBackward=None,
                 **_bn_sizes(4 << 20, reserve_bytes, backward=6 << 20))
    x, y = nhwc((4, 6, 5, 5), "float16"), nhwc((4, 6, 5, 5), "float16")
    w, b, rm, rv = (FakeDeviceArray((6,)) for _ in range(4))
    res = dnn.batch_norm_training(x, w, b, rm, rv, momentum=0.25, eps=1e-3, out=y, handle=h)
    assert [n for n, _ in rec.calls if not n.startswith("cudnnGet")] == [
        "cudnnBatchNormalizationForwardTrainingEx"]
    args = rec.only("cudnnBatchNormalizationForwardTrainingEx")
    assert len(args) == 25
    assert (args[1], args[2]) == (REAL.CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
                                  REAL.CUDNN_BATCHNORM_OPS_BN)
    assert tensor_of(args[5])[0] == "f16" and address(args[6]) == x.ptr
    assert address(args[7]) == address(args[8]) == 0           # no z (BN only)
    assert address(args[10]) == y.ptr and tensor_of(args[11])[1] == (1, 6, 1, 1)
    assert [address(args[i]) for i in (12, 13, 15, 16)] == [w.ptr, b.ptr, rm.ptr, rv.ptr]
    assert args[14] == 0.25 and args[17] == 1e-3
    assert [address(args[i]) for i in (18, 19)] == [res.save_mean.ptr,
                                                    res.save_inv_std.ptr]
    assert address(args[20]) == 0                              # no activation
    assert address(args[21]) == h._owned.workspace.ptr and args[22] == 4 << 20
    # Sized for the backward pass too, so that it does not grow (and move) it.
    workspace = h._owned.workspace
    assert workspace.nbytes >= 6 << 20
    if reserve_bytes:
        assert res.reserve.nbytes == reserve_bytes and res.reserve.dtype == np.uint8
        assert address(args[23]) == res.reserve.ptr and args[24] == reserve_bytes
    else:
        assert res.reserve is None and address(args[23]) == 0 and args[24] == 0
    # The forward's own queries: the same mode, operation and descriptors.
    query = rec.only("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize")
    assert (query[1], query[2]) == (REAL.CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
                                    REAL.CUDNN_BATCHNORM_OPS_BN)
    dy, dx = nhwc((4, 6, 5, 5), "float16"), nhwc((4, 6, 5, 5), "float16")
    got = dnn.batch_norm_backward(dy, x, w, res.save_mean, res.save_inv_std, eps=1e-3,
                                  out=dx, handle=h, reserve=res.reserve)
    args = rec.only("cudnnBatchNormalizationBackwardEx")
    assert len(args) == 30 and args[1] == REAL.CUDNN_BATCHNORM_SPATIAL_PERSISTENT
    assert [address(args[i]) for i in (8, 12, 16, 18, 20, 21, 23, 24)] == [
        x.ptr, dy.ptr, dx.ptr, w.ptr, got[1].ptr, got[2].ptr, res.save_mean.ptr,
        res.save_inv_std.ptr]
    assert [address(args[i]) for i in (9, 10, 13, 14, 19, 25)] == [0] * 6
    assert args[22] == 1e-3 and args[27] == 6 << 20
    assert h._owned.workspace is workspace and address(args[26]) == workspace.ptr
    assert args[29] == reserve_bytes
    assert address(args[28]) == (res.reserve.ptr if reserve_bytes else 0)
    assert not any(n == "cudnnBatchNormalizationBackward" for n, _ in rec.calls)
    if reserve_bytes:
        # Without the reserve space the persistent backward cannot run: the spatial one does.
        dnn.batch_norm_backward(dy, x, w, res.save_mean, res.save_inv_std, eps=1e-3,
                                out=dx, handle=h)
        assert rec.only("cudnnBatchNormalizationBackward")[1] == REAL.CUDNN_BATCHNORM_SPATIAL


def test_batch_norm_keeps_the_spatial_kernels_where_pytorch_does(h, record, fake_alloc):
    """Channels-first and float64 data, and an output or gradient in another layout than
    the input's: the plain calls in the spatial mode."""
    rec = record(cudnnBatchNormalizationForwardTrainingEx=None,
                 cudnnBatchNormalizationBackwardEx=None,
                 cudnnBatchNormalizationForwardTraining=None,
                 cudnnBatchNormalizationBackward=None, **_bn_sizes(0, 0))
    x16 = nhwc((4, 6, 5, 5), "float16")
    nchw16 = FakeDeviceArray((4, 6, 5, 5), "float16")
    cases = [(FakeDeviceArray((4, 6, 5, 5), "float16"), "float32", None, None),
             (nhwc((4, 6, 5, 5), "float64"), "float64", None, None),
             (x16, "float32", nchw16, nchw16)]          # NHWC x, NCHW y and dy
    for x, ptype, y, dy in cases:
        w, b = FakeDeviceArray((6,), ptype), FakeDeviceArray((6,), ptype)
        res = dnn.batch_norm_training(x, w, b, handle=h, out=y)
        dnn.batch_norm_backward(x if dy is None else dy, x, w, res.save_mean,
                                res.save_inv_std, handle=h,
                                out=FakeDeviceArray(x.shape, x.dtype, x.strides))
    names = [n for n, _ in rec.calls if not n.startswith("cudnnGet")]
    assert names == ["cudnnBatchNormalizationForwardTraining",
                     "cudnnBatchNormalizationBackward"] * 3
    assert all(args[1] == REAL.CUDNN_BATCHNORM_SPATIAL for _, args in rec.calls)


def test_batch_norm_persistent_refused_falls_back_to_spatial(h, record, fake_alloc,
                                                            monkeypatch):
    """cuDNN refusing the persistent kernels (NOT_SUPPORTED) for a layout: the spatial
    ones run, and are chosen for that layout from then on; explicitly asked, it raises."""
    from cupric.cudnn import batchnorm
    monkeypatch.setattr(batchnorm, "_refused", set())
    rec = record(cudnnBatchNormalizationForwardTraining=None, **_bn_sizes(0, 0))
    refusals = []

    def refuse(*args):
        refusals.append(args)
        return 3000                                # CUDNN_STATUS_NOT_SUPPORTED
    rec._callbacks["cudnnBatchNormalizationForwardTrainingEx"] = FFI.callback(
        FFI.typeof(REAL.cudnnBatchNormalizationForwardTrainingEx), refuse)
    x, y = nhwc((4, 6, 5, 5), "float16"), nhwc((4, 6, 5, 5), "float16")
    w, b = FakeDeviceArray((6,)), FakeDeviceArray((6,))
    for _ in range(2):
        dnn.batch_norm_training(x, w, b, handle=h, out=y)
    assert len(refusals) == 1
    assert [n for n, _ in rec.calls if not n.startswith("cudnnGet")] == [
        "cudnnBatchNormalizationForwardTraining"] * 2
    with pytest.raises(libmod.CudnnError):
        dnn.batch_norm_training(x, w, b, handle=h, out=y, persistent=True)
    # Other failures are raised, not hidden by the fallback.
    assert not batchnorm._refuse(None, RuntimeError("not cuDNN's"))
    assert not batchnorm._refuse(None, libmod.CudnnError(5000, "CUDNN_STATUS_EXECUTION_FAILED",
                                                         "failed"))


def test_bias_calls(h, record):
    rec = record(cudnnConvolutionBackwardBias=None, cudnnAddTensor=None)
    dy = nhwc((2, 16, 4, 4))
    db = FakeDeviceArray((16,))
    dnn.conv_backward_bias(dy, out=db, handle=h)
    _h, alpha, dyd, dyp, beta, dbd, dbp = rec.only("cudnnConvolutionBackwardBias")
    assert tensor_of(dbd) == ("f32", (1, 16, 1, 1), (16, 1, 1, 1))
    assert (address(dyp), address(dbp)) == (dy.ptr, db.ptr)
    conv_mod = importlib.import_module("cupric.cudnn.conv")   # the module, not conv()
    ty = V.tensor(dy, "y", "t")
    tb = V.tensor(db, "b", "t", ndims=(1,), layouts=False)
    conv_mod._add_bias(h, ty, tb, 16)
    _h, alpha, bd, bp, beta, yd, yp = rec.only("cudnnAddTensor")
    assert scalar(alpha) == 1.0 and scalar(beta) == 1.0          # accumulates onto y
    assert tensor_of(yd)[2] == (256, 1, 64, 16)


def test_dropout_calls(h, record, fake_alloc):
    def states_size(handle, size):
        size[0] = 4096

    def reserve_size(desc, size):
        size[0] = 128

    rec = record(cudnnDropoutGetStatesSize=states_size, cudnnSetDropoutDescriptor=None,
                 cudnnDropoutGetReserveSpaceSize=reserve_size, cudnnDropoutForward=None,
                 cudnnDropoutBackward=None)
    layer = dnn.Dropout.create(0.25, seed=99, handle=h)
    _d, _h, p, states, size, seed = rec.only("cudnnSetDropoutDescriptor")
    assert p == 0.25 and size == 4096 and seed == 99
    assert address(states) == fake_alloc[0].ptr and layer.states_bytes == 4096
    x, y = FakeDeviceArray((8, 32), "float16"), FakeDeviceArray((8, 32), "float16")
    _, reserve = layer.forward(x, out=y)
    args = rec.only("cudnnDropoutForward")
    assert [address(args[i]) for i in (3, 5, 6)] == [x.ptr, y.ptr, reserve.ptr]
    assert args[7] == 128
    dx = FakeDeviceArray((8, 32), "float16")
    layer.backward(y, reserve, out=dx)
    args = rec.only("cudnnDropoutBackward")
    assert [address(args[i]) for i in (3, 5, 6)] == [y.ptr, dx.ptr, reserve.ptr]
    with pytest.raises(ValueError, match="reserve has 64 bytes"):
        layer.backward(y, memory.borrow(0x5000, 64, None, np.uint8), out=dx)
    layer.close()
    assert layer.closed
