"""cupric.cudnn on the CPU lane: tables against the generated bindings, layout and shape
arithmetic, validation that fails before any GPU use, graph construction up to the
point a GPU is needed (every descriptor attribute set against the installed cuDNN), the
plan cache and autotuning choice, and the GELU fallback kernels on the simulator."""

from __future__ import annotations

import importlib
import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from cupric.cudnn import _validate as V
from cupric.cudnn import api as dnn
from cupric.cudnn import graph as G
from cupric.cudnn import engine_choice as C
from cupric.cudnn import plans as P
from cupric.cudnn import handle as handle_mod
from cupric.runtime.errors import ClosedError

from _cudnn_fake import FakeDeviceArray, nhwc

# the submodule, not the public `cupric.cudnn.conv` function of the same name
conv_mod = importlib.import_module("cupric.cudnn.conv")


def cudnn_lib():
    lib = pytest.importorskip("cupric.cudnn.lib")
    if not lib.is_available():
        pytest.skip(f"cuDNN bindings cannot be loaded here: {lib.binding.unavailable_reason}")
    return lib


@pytest.fixture
def fake_handle():
    """A borrowed handle with a fake address: resolve() takes it without a GPU."""
    h = handle_mod.Handle.from_handle(0xDEAD0, device=0)
    yield h
    h.close()


@pytest.fixture
def captured(monkeypatch):
    """Replace graph execution by a recorder of (spec, pointers, options)."""
    calls = []

    def fake_execute(handle, spec, pointers, options=None):
        calls.append((spec, dict(pointers), options))

    monkeypatch.setattr(conv_mod, "execute", fake_execute)
    monkeypatch.setattr(C, "execute", fake_execute)
    return calls


# --------------------------------------------------------------------------------------
# Import hygiene and tables


def test_import_loads_nothing():
    code = ("import sys, cupric.cudnn, cupric.cudnn.api\n"
            "assert 'cuda.bindings.driver' not in sys.modules\n"
            "assert 'cupric.cudnn.lib' not in sys.modules\n"
            "assert '_cffi_backend' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tables_match_headers():
    lib = cudnn_lib().lib
    for name, value in V.DATA_TYPES.items():
        c_name = {"f32": "FLOAT", "f64": "DOUBLE", "f16": "HALF", "i8": "INT8",
                  "i32": "INT32", "u8": "UINT8", "bf16": "BFLOAT16", "i64": "INT64",
                  "bool": "BOOLEAN"}[name]
        assert getattr(lib, f"CUDNN_DATA_{c_name}") == value, name
    for name, value in G.POINTWISE_MODES.items():
        assert getattr(lib, f"CUDNN_POINTWISE_{name.upper()}") == value, name
    for name, value in G.HEUR_MODES.items():
        assert getattr(lib, f"CUDNN_HEUR_MODE_{name.upper()}") == value, name
    from cupric.cudnn.activation import LEGACY_MODES
    for name, value in LEGACY_MODES.items():
        assert getattr(lib, f"CUDNN_ACTIVATION_{name.upper()}") == value, name
    from cupric.cudnn.pooling import POOLING_MODES
    c_pool = {"max": "MAX", "avg_include_pad": "AVERAGE_COUNT_INCLUDE_PADDING",
              "avg_exclude_pad": "AVERAGE_COUNT_EXCLUDE_PADDING",
              "max_deterministic": "MAX_DETERMINISTIC"}
    for name, value in POOLING_MODES.items():
        assert getattr(lib, f"CUDNN_POOLING_{c_pool[name]}") == value
    from cupric.cudnn.softmax import ALGORITHMS, _CHANNEL
    for name, value in ALGORITHMS.items():
        assert getattr(lib, f"CUDNN_SOFTMAX_{name.upper()}") == value
    assert lib.CUDNN_SOFTMAX_MODE_CHANNEL == _CHANNEL
    from cupric.cudnn import batchnorm
    assert lib.CUDNN_BATCHNORM_SPATIAL == batchnorm._SPATIAL
    assert lib.CUDNN_BATCHNORM_SPATIAL_PERSISTENT == batchnorm._SPATIAL_PERSISTENT
    assert lib.CUDNN_BATCHNORM_OPS_BN == batchnorm._OPS_BN
    assert lib.CUDNN_CROSS_CORRELATION == G._CROSS_CORRELATION
    assert lib.CUDNN_NUMERICAL_NOTE_TENSOR_CORE == G._NOTE_TENSOR_CORE
    assert lib.CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS == G._NOTE_DOWN_CONVERT_INPUTS
    assert lib.CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC == G._NOTE_NONDETERMINISTIC
    assert lib.CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION == \
        G._NOTE_REDUCED_PRECISION_REDUCTION


def test_declared_attributes_and_descriptor_kinds_exist():
    lib = cudnn_lib().lib
    from cupric.cudnn.backend import _CTYPES, ATTRIBUTE_TYPES, DESCRIPTOR_TYPES
    for attribute, vtype in ATTRIBUTE_TYPES.items():
        getattr(lib, f"CUDNN_ATTR_{attribute}")
        if vtype != "FLOAT_OR_DOUBLE":
            getattr(lib, f"CUDNN_TYPE_{vtype}")
            assert vtype in _CTYPES
    for kind in DESCRIPTOR_TYPES:
        getattr(lib, f"CUDNN_BACKEND_{kind}_DESCRIPTOR")


# --------------------------------------------------------------------------------------
# Layouts and shapes


def test_layouts_from_strides():
    shape = (2, 3, 4, 5)
    assert V.packed_strides(shape, (0, 1, 2, 3)) == (60, 20, 5, 1)
    assert V.packed_strides(shape, (0, 2, 3, 1)) == (60, 1, 15, 3)
    assert V.layout_of(shape, (60, 20, 5, 1)) == "NCHW"
    assert V.layout_of(shape, (60, 1, 15, 3)) == "NHWC"
    assert V.layout_of(shape, (60, 20, 1, 4)) is None       # H and W swapped
    assert V.layout_of(shape, (120, 40, 10, 2)) is None     # every other element
    # Unit extents take any stride; channels-first wins when both fit.
    assert V.layout_of((2, 3, 1, 1), (3, 1, 3, 3)) == "NCHW"
    assert V.layout_of((2, 1, 4, 5), (20, 1, 5, 1)) == "NCHW"
    assert V.layout_of((2, 3, 4, 5, 6), V.packed_strides((2, 3, 4, 5, 6), (0, 2, 3, 4, 1))) \
        == "NDHWC"
    assert V.channels_last("NHWC") and not V.channels_last("NCHW")
    assert not V.channels_last(None)


def test_alignment():
    assert V.alignment_of(0x1000) == 16
    assert V.alignment_of(0x1004) == 4
    assert V.alignment_of(0x1002) == 2
    assert V.alignment_of(0x1008) == 8


def _reference_out(size, k, pad, stride, dil):
    """Count window positions directly."""
    span = dil * (k - 1) + 1
    return sum(1 for start in range(-pad, size + pad - span + 1, stride))


@pytest.mark.parametrize("size,k,pad,stride,dil",
                         list(itertools.product((1, 5, 8, 56), (1, 3, 5), (0, 1, 2), (1, 2, 3),
                                                (1, 2))))
def test_conv_output_extent_matches_counting(size, k, pad, stride, dil):
    span = dil * (k - 1) + 1
    if size + 2 * pad < span:
        with pytest.raises(ValueError, match="smaller than the dilated filter"):
            V.conv_output_shape((1, 1, size), (1, 1, k), (pad,), (stride,), (dil,))
        return
    got = V.conv_output_shape((1, 1, size), (1, 1, k), (pad,), (stride,), (dil,))
    assert got == (1, 1, _reference_out(size, k, pad, stride, dil))


def test_conv_output_shape_resnet_cases():
    assert dnn.conv_output_shape((256, 64, 56, 56), (64, 64, 3, 3), padding=1) == \
        (256, 64, 56, 56)
    assert dnn.conv_output_shape((8, 3, 224, 224), (64, 3, 7, 7), stride=2, padding=3) == \
        (8, 64, 112, 112)
    assert dnn.conv_output_shape((8, 32, 10, 10), (32, 1, 3, 3), groups=32) == (8, 32, 8, 8)
    assert dnn.conv_output_shape((2, 4, 9, 9, 9), (6, 4, 3, 3, 3), stride=(1, 2, 3)) == \
        (2, 6, 7, 4, 3)


def test_conv_geometry_validation():
    with pytest.raises(ValueError, match="groups=2"):
        dnn.conv_output_shape((1, 3, 8, 8), (4, 3, 3, 3), groups=2)
    with pytest.raises(ValueError, match="expected filter dim 1 = 2"):
        dnn.conv_output_shape((1, 4, 8, 8), (4, 4, 3, 3), groups=2)
    with pytest.raises(ValueError, match="output channels"):
        dnn.conv_output_shape((1, 4, 8, 8), (3, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="stride"):
        dnn.Conv(stride=0)
    with pytest.raises(ValueError, match="2 values, expected 3"):
        dnn.Conv(padding=(1, 1), n=3)
    with pytest.raises(ValueError, match="groups"):
        dnn.Conv(groups=0)
    with pytest.raises(TypeError, match="padding"):
        dnn.Conv(padding="same")
    c = dnn.Conv(stride=2, padding=(1, 0))
    assert c.stride == (2, 2) and c.padding == (1, 0) and c.dilation == (1, 1)


def _reference_pool(size, w, pad, stride):
    return sum(1 for start in range(-pad, size + pad - w + 1, stride))


@pytest.mark.parametrize("size,w,pad,stride",
                         [(s, w, p, st) for s, w, p, st in itertools.product(
                             (3, 7, 8, 112), (1, 2, 3), (0, 1), (1, 2, 3)) if p < w])
def test_pool_output_extent(size, w, pad, stride):
    if size + 2 * pad < w:
        with pytest.raises(ValueError):
            dnn.pool_output_shape((1, 1, size, size), w, stride, pad)
        return
    got = dnn.pool_output_shape((1, 1, size, size), w, stride, pad)
    ref = _reference_pool(size, w, pad, stride)
    assert got == (1, 1, ref, ref)


def test_pool_validation():
    with pytest.raises(ValueError, match="smaller than the window"):
        dnn.Pool("max", 2, 2, 2)
    with pytest.raises(ValueError, match="mode"):
        dnn.Pool("median", 2)
    assert dnn.Pool("max", 3).stride == (3, 3)          # PyTorch's default stride
    assert dnn.pool_output_shape((8, 64, 112, 112), 3, 2, 1) == (8, 64, 56, 56)


# --------------------------------------------------------------------------------------
# Tensor validation (fails before any GPU use)


def test_tensor_description():
    x = nhwc((2, 8, 5, 6))
    t = V.tensor(x, "x", "op")
    assert t.shape == (2, 8, 5, 6) and t.layout == "NHWC" and t.etype == "f32"
    assert t.strides == (240, 1, 48, 8)
    assert t.signature() == ("f32", (2, 8, 5, 6), (240, 1, 48, 8), 16)


def test_tensor_errors_name_operation_and_argument():
    with pytest.raises(TypeError, match=r"conv_forward: x has element type i32"):
        V.tensor(FakeDeviceArray((1, 1, 2, 2), "int32"), "x", "conv_forward")
    with pytest.raises(ValueError, match=r"conv_forward: w has 3 dimensions"):
        V.tensor(FakeDeviceArray((1, 2, 2)), "w", "conv_forward")
    with pytest.raises(ValueError, match="neither dense NCHW or NHWC"):
        V.tensor(FakeDeviceArray((1, 2, 3, 4), strides=(96, 48, 16, 8)), "x", "op")
    with pytest.raises(ValueError, match="read-only"):
        V.tensor(FakeDeviceArray((1, 2, 3, 4), readonly=True), "out", "op", writable=True)
    with pytest.raises(ValueError, match="not whole"):
        V.tensor(FakeDeviceArray((1, 2, 3, 4), strides=(96, 48, 16, 2)), "x", "op")
    with pytest.raises(ValueError, match="empty"):
        V.tensor(FakeDeviceArray((0, 2, 3, 4)), "x", "op")
    with pytest.raises(TypeError, match="host array|NumPy"):
        V.tensor(np.zeros((1, 2, 3, 4), np.float32), "x", "op")


def test_conv_forward_validates_before_the_gpu():
    # No handle and no GPU: every one of these must fail on validation, before cuDNN.
    x = FakeDeviceArray((2, 4, 8, 8))
    with pytest.raises(TypeError, match="conv_forward: w has element type f16 but x has f32"):
        dnn.conv_forward(x, FakeDeviceArray((4, 4, 3, 3), "float16"))
    with pytest.raises(ValueError, match="conv_forward: the filter has 3 input channels"):
        dnn.conv_forward(x, FakeDeviceArray((4, 3, 3, 3)))
    with pytest.raises(ValueError, match="conv_forward: out has shape"):
        dnn.conv_forward(x, FakeDeviceArray((4, 4, 3, 3)), out=FakeDeviceArray((2, 4, 8, 8)))
    with pytest.raises(TypeError, match="conv_forward: out has element type f16"):
        dnn.conv_forward(x, FakeDeviceArray((4, 4, 3, 3)), padding=1,
                         out=FakeDeviceArray((2, 4, 8, 8), "float16"))
    with pytest.raises(ValueError, match="conv_backward_data: dy has shape"):
        dnn.conv_backward_data(FakeDeviceArray((2, 4, 8, 8)), FakeDeviceArray((4, 4, 3, 3)),
                               (2, 4, 8, 8))
    with pytest.raises(ValueError, match="conv_backward_filter: filter_shape"):
        dnn.conv_backward_filter(x, FakeDeviceArray((2, 4, 6, 6)), (4, 4, 3))
    with pytest.raises(ValueError, match="conv_bias_activation: bias has shape"):
        dnn.conv_bias_activation(x, FakeDeviceArray((4, 4, 3, 3)), FakeDeviceArray((3,)))
    with pytest.raises(ValueError, match="activation must be one of"):
        dnn.conv_bias_activation(x, FakeDeviceArray((4, 4, 3, 3)), None, "leaky")
    with pytest.raises(ValueError, match="conv2d takes"):
        dnn.conv2d(FakeDeviceArray((2, 4, 8)), FakeDeviceArray((4, 4, 3)))


def test_other_ops_validate_before_the_gpu():
    x = FakeDeviceArray((2, 4, 8, 8))
    with pytest.raises(ValueError, match="smaller than the window"):
        dnn.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match=r"pool_backward\('max'\): y has shape"):
        dnn.pool_backward(FakeDeviceArray((2, 4, 4, 4)), x, FakeDeviceArray((2, 4, 3, 3)),
                          window=2)
    with pytest.raises(ValueError, match="mode must be one of"):
        dnn.activation_forward(x, "leaky_relu")
    with pytest.raises(ValueError, match="clipped_relu needs clip"):
        from cupric.cudnn.activation import _coef
        _coef("clipped_relu", None, None, "activation_forward")
    with pytest.raises(ValueError, match=r"activation_backward.*x has shape \(2, 4, 8, 8\) but dy has \(2, 4\)"):
        dnn.activation_backward(FakeDeviceArray((2, 4)), x, mode="relu")
    with pytest.raises(ValueError, match="axis 4 is out of range"):
        dnn.softmax(x, 4)
    with pytest.raises(TypeError, match="batch_norm_training: weight has element type f16"):
        dnn.batch_norm_training(FakeDeviceArray((2, 4, 8, 8), "float16"),
                                FakeDeviceArray((4,), "float16"),
                                FakeDeviceArray((4,), "float16"))
    with pytest.raises(ValueError, match="weight has shape"):
        dnn.batch_norm_training(x, FakeDeviceArray((3,)), FakeDeviceArray((4,)))
    with pytest.raises(ValueError, match="eps"):
        dnn.batch_norm_inference(x, *(FakeDeviceArray((4,)) for _ in range(4)), eps=-1e-5)
    with pytest.raises(ValueError, match="both running_mean and running_var"):
        dnn.batch_norm_training(x, FakeDeviceArray((4,)), FakeDeviceArray((4,)),
                                FakeDeviceArray((4,)))
    with pytest.raises(ValueError, match="p must be in"):
        dnn.Dropout.create(1.0)
    with pytest.raises(ValueError, match="matmul: inner dimensions differ"):
        dnn.matmul(FakeDeviceArray((3, 4)), FakeDeviceArray((5, 6)))
    with pytest.raises(TypeError, match="matmul: b has element type f16"):
        dnn.matmul(FakeDeviceArray((3, 4)), FakeDeviceArray((4, 6), "float16"))


def test_softmax_views():
    from cupric.cudnn.softmax import softmax_layout
    assert softmax_layout((4, 10), (10, 1), -1)[1:] == ((4, 10, 1, 1), (10, 1, 1, 1))
    assert softmax_layout((4, 10, 5, 6), (300, 30, 6, 1), 1)[1:] == \
        ((4, 10, 30, 1), (300, 30, 1, 1))
    # NHWC over channels: C has unit stride, the spatial positions merge.
    assert softmax_layout((4, 10, 5, 6), (300, 1, 60, 10), 1)[1:] == \
        ((4, 10, 30, 1), (300, 1, 10, 1))
    assert softmax_layout((2, 3, 4), (12, 4, 1), 1)[1:] == ((2, 3, 4, 1), (12, 4, 1, 1))
    assert softmax_layout((7,), (1,), 0)[1:] == ((1, 7, 1, 1), (7, 1, 1, 1))
    with pytest.raises(ValueError, match="make it contiguous"):
        softmax_layout((4, 10, 5, 6), (300, 1, 60, 10), -1)


# --------------------------------------------------------------------------------------
# Graph construction


def test_graph_spec_keys():
    def build(strides):
        g = G.GraphSpec("conv_forward")
        x = g.tensor((2, 4, 8, 8), strides, "f32")
        w = g.tensor((4, 4, 3, 3), (36, 9, 3, 1), "f32")
        y = g.tensor((2, 4, 8, 8), strides, "f32")
        g.conv_fwd(x, w, y, G.ConvParams((1, 1), (1, 1), (1, 1), (1, 1)))
        return g
    a, b = build((256, 64, 8, 1)), build((256, 64, 8, 1))
    c = build(V.packed_strides((2, 4, 8, 8), (0, 2, 3, 1)))
    assert a.key() == b.key() and hash(a.key()) == hash(b.key())
    assert a.key() != c.key()
    assert a.io_uids() == (1, 2, 3)


def test_graph_spec_rejects_bad_wiring():
    g = G.GraphSpec("t")
    x = g.tensor((2, 3), (3, 1), "f32")
    y = g.tensor((2, 3), (3, 1), "f32")
    with pytest.raises(ValueError, match="takes x, dy and dx"):
        g.pointwise("relu_bwd", x=x, y=y)
    with pytest.raises(ValueError, match="unknown pointwise mode"):
        g.pointwise("cube", x=x, y=y)
    with pytest.raises(KeyError):
        g.pointwise("relu_fwd", x=x, y=99)
    with pytest.raises(ValueError, match="matmul takes 3-d"):
        g.matmul(x, y, y)
    with pytest.raises(ValueError, match="spatial dims"):
        g.conv_fwd(x, y, y, G.ConvParams((0, 0), (0, 0), (1, 1), (1, 1)))
    with pytest.raises(ValueError, match="positive"):
        g.tensor((0, 3), (3, 1), "f32")


def test_conv_forward_builds_its_graph(fake_handle, captured):
    x = nhwc((2, 8, 10, 10))
    w = nhwc((16, 8, 3, 3))
    out = nhwc((2, 16, 5, 5))
    result = dnn.conv_forward(x, w, stride=2, padding=1, out=out, handle=fake_handle)
    assert result.shape == (2, 16, 5, 5)
    (spec, pointers, options), = captured
    assert [op.kind for op in spec.ops] == ["conv_fwd"]
    conv = spec.ops[0].param("conv")
    assert conv.stride == (2, 2) and conv.pre_padding == (1, 1) and conv.post_padding == (1, 1)
    assert conv.compute == "f32"
    tx, tw, ty = (spec.tensors[spec.ops[0].tensor(r)] for r in ("x", "w", "y"))
    assert tx.dims == (2, 8, 10, 10) and tx.strides == (800, 1, 80, 8)
    assert tw.dims == (16, 8, 3, 3) and ty.dims == (2, 16, 5, 5)
    assert pointers[tx.uid] == x.ptr and pointers[tw.uid] == w.ptr and pointers[ty.uid] == out.ptr
    assert not any(t.virtual for t in spec.tensors.values())


def test_backward_graphs(fake_handle, captured):
    x = FakeDeviceArray((2, 4, 9, 9), "float16")
    w = FakeDeviceArray((6, 2, 3, 3), "float16")
    dy = FakeDeviceArray((2, 6, 4, 4), "float16")
    dnn.conv_backward_data(dy, w, (2, 4, 9, 9), stride=2, groups=2,
                           out=FakeDeviceArray((2, 4, 9, 9), "float16"), handle=fake_handle)
    dnn.conv_backward_filter(x, dy, (6, 2, 3, 3), stride=2, groups=2,
                             out=FakeDeviceArray((6, 2, 3, 3), "float16"), handle=fake_handle)
    (data_spec, _, _), (filter_spec, _, _) = captured
    assert data_spec.ops[0].kind == "conv_bwd_data"
    assert filter_spec.ops[0].kind == "conv_bwd_filter"
    assert data_spec.ops[0].param("conv").compute == "f32"       # half data, float32 compute
    assert filter_spec.tensors[filter_spec.ops[0].tensor("dw")].dims == (6, 2, 3, 3)


def test_fused_conv_bias_activation_graph(fake_handle, captured):
    x = nhwc((2, 8, 6, 6), "float16")
    w = nhwc((16, 8, 3, 3), "float16")
    b = FakeDeviceArray((16,), "float16")
    out = nhwc((2, 16, 6, 6), "float16")
    dnn.conv2d(x, w, b, padding=1, activation="relu", out=out, handle=fake_handle)
    (spec, pointers, _), = captured
    assert [op.kind for op in spec.ops] == ["conv_fwd", "pointwise", "pointwise"]
    assert [op.param("mode") for op in spec.ops[1:]] == ["add", "relu_fwd"]
    virtual = [t for t in spec.tensors.values() if t.virtual]
    assert len(virtual) == 2 and all(t.etype == "f32" for t in virtual)
    bias = spec.tensors[spec.ops[1].tensor("b")]
    assert bias.dims == (1, 16, 1, 1) and bias.strides[1] == 1
    assert set(pointers) == set(spec.io_uids()) and len(pointers) == 4
    assert spec.ops[2].tensor("y") == [u for u, p in pointers.items() if p == out.ptr][0]


def test_fused_falls_back_to_three_steps(fake_handle, monkeypatch):
    runs = []

    def refuse_fused(handle, spec, pointers, options=None):
        runs.append([op.kind for op in spec.ops])
        if len(spec.ops) > 1:
            raise G.NoEngineError(spec.name, [(7, "CUDNN_STATUS_NOT_SUPPORTED")])

    monkeypatch.setattr(conv_mod, "execute", refuse_fused)
    monkeypatch.setattr(conv_mod, "_unfusable", set())
    steps = []
    monkeypatch.setattr(conv_mod, "_add_bias", lambda h, ty, tb, k: steps.append(("bias", k)))
    import cupric.cudnn.activation as act
    monkeypatch.setattr(act, "activation_forward",
                        lambda y, mode, **kw: steps.append(("act", mode)))
    args = (FakeDeviceArray((1, 3, 5, 5)), FakeDeviceArray((4, 3, 3, 3)),
            FakeDeviceArray((4,)))
    out = FakeDeviceArray((1, 4, 3, 3))
    dnn.conv_bias_activation(*args, "gelu", out=out, handle=fake_handle)
    dnn.conv_bias_activation(*args, "gelu", out=out, handle=fake_handle)
    # The fused graph is asked once per shape; afterwards the three steps run directly.
    assert runs == [["conv_fwd", "pointwise", "pointwise"], ["conv_fwd"], ["conv_fwd"]]
    assert steps == [("bias", 4), ("act", "gelu")] * 2


def test_matmul_graph(fake_handle, captured):
    a = FakeDeviceArray((3, 4, 5), "float16")
    b = FakeDeviceArray((3, 5, 6), "float16")
    bias = FakeDeviceArray((6,), "float16")
    out = FakeDeviceArray((3, 4, 6), "float16")
    dnn.matmul(a, b, bias=bias, activation="gelu", out=out, handle=fake_handle)
    (spec, pointers, _), = captured
    assert [op.kind for op in spec.ops] == ["matmul", "pointwise", "pointwise"]
    assert spec.ops[2].param("mode") == "gelu_fwd"
    assert len(pointers) == 4
    dnn.matmul(FakeDeviceArray((4, 5)), FakeDeviceArray((5, 6)), out=FakeDeviceArray((4, 6)),
               handle=fake_handle)
    spec2 = captured[1][0]
    assert spec2.tensors[spec2.ops[0].tensor("a")].dims == (1, 4, 5)


def test_descriptors_accept_every_attribute():
    """Every attribute cupric sets is accepted by the installed cuDNN (types, values);
    finalizing needs a GPU, so the graph stops there."""
    cudnn_lib()
    g = G.GraphSpec("all")
    x = g.tensor((2, 8, 6, 6), V.packed_strides((2, 8, 6, 6), (0, 2, 3, 1)), "bf16",
                 alignment=16)
    w = g.tensor((8, 8, 3, 3), (72, 9, 3, 1), "bf16")
    y = g.tensor((2, 8, 6, 6), (288, 36, 6, 1), "bf16")
    t = g.virtual_like(y)
    b = g.tensor((1, 8, 1, 1), (8, 1, 1, 1), "bf16")
    t2 = g.virtual_like(y)
    conv = G.ConvParams((1, 1), (1, 1), (1, 1), (1, 1))
    g.conv_fwd(x, w, t, conv)
    g.pointwise("add", x=t, b=b, y=t2)
    g.pointwise("swish_fwd", x=t2, y=y, swish_beta=1.5)
    g.conv_bwd_data(y, w, x, conv)
    g.conv_bwd_filter(x, y, w, conv)
    g.pointwise("gelu_bwd", x=x, dy=x, dx=x)
    a = g.tensor((1, 4, 5), (20, 5, 1), "f32")
    m = g.tensor((1, 5, 6), (30, 6, 1), "f32")
    c = g.tensor((1, 4, 6), (24, 6, 1), "f32")
    g.matmul(a, m, c)
    g64 = G.GraphSpec("double")
    x64 = g64.tensor((1, 1, 4, 4), (16, 16, 4, 1), "f64")
    g64.conv_fwd(x64, x64, x64, G.ConvParams((0, 0), (0, 0), (1, 1), (1, 1), "f64"))
    for spec in (g, g64):
        tensors, ops = spec.build_descriptors(finalize=False)
        assert len(tensors) == len(spec.tensors) and len(ops) == len(spec.ops)
        for d in list(tensors.values()) + ops:
            d.close()


def test_backend_descriptor_typing():
    lib = cudnn_lib()
    from cupric.cudnn.backend import Descriptor
    t = Descriptor.create("TENSOR")
    with pytest.raises(TypeError, match="TENSOR_DIMENSIONS takes integers"):
        t.set("TENSOR_DIMENSIONS", [1.5, 2])
    with pytest.raises(KeyError, match="not declared"):
        t.set("TENSOR_FANCY", 1)
    op = Descriptor.create("OPERATION_CONVOLUTION_FORWARD")
    with pytest.raises(TypeError, match="takes backend descriptors"):
        op.set("OPERATION_CONVOLUTION_FORWARD_X", 5)
    graph = Descriptor.create("OPERATIONGRAPH")
    # cuDNN refuses an operation that is not finalized; its own reason is appended.
    with pytest.raises(lib.CudnnError, match="OPERATIONGRAPH_OPS") as info:
        graph.set("OPERATIONGRAPH_OPS", [op])
    assert info.value.code == 2004
    with pytest.raises(ValueError, match="unknown cuDNN backend descriptor kind"):
        Descriptor.create("TENSORS")
    with pytest.raises(TypeError, match="no public constructor"):
        Descriptor()
    t.close()
    t.close()
    with pytest.raises(ClosedError):
        t.raw
    graph.close()
    op.close()


def test_legacy_descriptors_on_cpu():
    cudnn_lib()
    from cupric.cudnn.descriptors import legacy_dims, scalars, tensor_descriptor
    d = tensor_descriptor("f16", (2, 3), (3, 1))
    assert tensor_descriptor("f16", (2, 3, 1, 1), (3, 1, 1, 1)) is d   # padded to 4-d
    assert legacy_dims((5,), (1,)) == ((5, 1, 1, 1), (1, 1, 1, 1))
    with pytest.raises(ValueError, match="int32"):
        legacy_dims((2**31, 1), (1, 1))
    one, zero = scalars("f64")
    assert one[0] == 1.0 and zero[0] == 0.0
    from cupric.cudnn.activation import _activation_descriptor
    assert _activation_descriptor("swish", 0.0, 1.0) is _activation_descriptor("swish", 0.0, 1.0)
    from cupric.cudnn.pooling import _descriptor
    assert _descriptor(dnn.Pool("max", 3, 2, 1)) is _descriptor(dnn.Pool("max", (3, 3), 2, 1))


# --------------------------------------------------------------------------------------
# Engine choice and the plan cache


def test_plan_options():
    with pytest.raises(ValueError, match="heuristics"):
        dnn.PlanOptions(heuristics=("z",))
    with pytest.raises(ValueError, match="candidates"):
        dnn.PlanOptions(candidates=0)
    assert dnn.PlanOptions(heuristics="fallback").heuristics == ("fallback",)
    strict = dnn.PlanOptions(allow_tf32=False, deterministic=True,
                             allow_reduced_precision_reduction=False)
    assert strict.rejects([G._NOTE_TENSOR_CORE], {"f32"})
    assert strict.rejects([G._NOTE_TENSOR_CORE], {"f16"}) is None     # half: no TF32
    assert strict.rejects([G._NOTE_NONDETERMINISTIC], {"f16"})
    assert strict.rejects([G._NOTE_REDUCED_PRECISION_REDUCTION], {"f16"})
    assert dnn.PlanOptions(allow_down_convert=True).rejects([0, 1, 2, 4], {"f32"}) is None
    # As PyTorch: engines that narrow their inputs first are left out by default.
    assert "narrower" in dnn.PlanOptions().rejects([G._NOTE_DOWN_CONVERT_INPUTS], {"f16"})
    assert dnn.PlanOptions().rejects([0, 2, 4], {"f32"}) is None


class _FakePlan:
    def __init__(self, engine):
        self.engine = engine
        self.time_ms = None
        self.closed = False
        self._graph = None

    def close(self):
        self.closed = True


class _FakeGraph:
    closed = False

    def close(self):
        self.closed = True


def _spec():
    g = G.GraphSpec("cache")
    x = g.tensor((1, 1, 4, 4), (16, 16, 4, 1), "f32")
    g.conv_fwd(x, x, x, G.ConvParams((0, 0), (0, 0), (1, 1), (1, 1)))
    return g


def test_plan_cache_and_autotune(fake_handle, monkeypatch):
    built = []
    monkeypatch.setattr(G.GraphSpec, "build", lambda self, h: built.append(self) or _FakeGraph())
    plans = {}

    def candidates(handle, spec, graph, options, limit):
        made = [_FakePlan(e) for e in (11, 22, 33)][:limit]
        plans.setdefault(limit, []).extend(made)
        return made, []

    monkeypatch.setattr(C, "_candidate_plans", candidates)
    monkeypatch.setattr(C, "_time", lambda h, p, ptrs: {11: 3.0, 22: 1.0, 33: 2.0}[p.engine])
    # Heuristics only: the first plan, built once and cached.
    first = C.plan_for(fake_handle, _spec(), P.PlanOptions(), [1])
    again = C.plan_for(fake_handle, _spec(), P.PlanOptions(), [1])
    assert first is again and first.engine == 11 and len(built) == 1
    # Autotuning: the fastest wins, the others are closed, the result is cached apart.
    tuned = C.plan_for(fake_handle, _spec(), P.PlanOptions(autotune=True), [1])
    assert tuned.engine == 22 and tuned.time_ms == 1.0
    assert [p.closed for p in plans[P.PlanOptions().candidates]] == [True, False, True]
    assert C.plan_for(fake_handle, _spec(), P.PlanOptions(autotune=True), [1]) is tuned
    assert len(fake_handle.plans) == 2
    fake_handle.clear_plans()
    assert first.closed and tuned.closed and not fake_handle.plans


def test_no_engine_error(fake_handle, monkeypatch):
    graph = _FakeGraph()
    monkeypatch.setattr(G.GraphSpec, "build", lambda self, h: graph)
    monkeypatch.setattr(C, "_candidate_plans",
                        lambda *a: ([], [(5, "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT")]))
    with pytest.raises(G.NoEngineError, match="engine 5: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT"):
        C.plan_for(fake_handle, _spec(), None, [1])
    assert graph.closed and not fake_handle.plans


def test_execute_orders_pointers(fake_handle, monkeypatch):
    seen = []

    class Recorder:
        def execute(self, handle, pointers):
            seen.append(pointers)

    monkeypatch.setattr(C, "plan_for", lambda h, spec, options, ptrs: Recorder())
    spec = G.GraphSpec("order")
    a = spec.tensor((1, 2, 3), (6, 3, 1), "f32")
    v = spec.tensor((1, 2, 3), (6, 3, 1), "f32", virtual=True)
    b = spec.tensor((1, 2, 3), (6, 3, 1), "f32")
    spec.pointwise("relu_fwd", x=a, y=v)
    spec.pointwise("tanh_fwd", x=v, y=b)
    C.execute(fake_handle, spec, {b: 0x200, a: 0x100})
    assert seen == [[0x100, 0x200]]
    with pytest.raises(ValueError, match="no device pointer for tensor uid 3"):
        C.execute(fake_handle, spec, {a: 0x100})


# --------------------------------------------------------------------------------------
# Handles


def test_handle_rules(fake_handle):
    with pytest.raises(TypeError, match="no public constructor"):
        handle_mod.Handle()
    with pytest.raises(TypeError, match="cupric.cudnn.Handle"):
        handle_mod.resolve(object())
    with pytest.raises(ValueError, match="differs from the handle's stream"):
        handle_mod.resolve(fake_handle, stream=0x1234)
    assert handle_mod.resolve(fake_handle) is fake_handle
    assert handle_mod.stream_of(fake_handle, None) == 0
    assert handle_mod.stream_of(None, 0x77) == 0x77
    assert not fake_handle.owns_handle
    assert fake_handle.workspace(0) == 0
    fake_handle.close()  # borrowed: nothing destroyed
    with pytest.raises(ClosedError):
        fake_handle.ready()


# --------------------------------------------------------------------------------------
# GELU fallback kernels (simulator)


def _gelu_ref(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_grad_ref(x, dy):
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return dy * (cdf + x * pdf)


def _gelu_tanh_ref(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_gelu_fallback_functions_on_the_simulator(monkeypatch, rng):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    from cupric.cudnn.activation import _gelu_functions
    from cupric.kernels.elementwise import map as elementwise_map
    fns = _gelu_functions()
    x = rng.standard_normal(64) * 3
    dy = rng.standard_normal(64)
    for bits, dtype, tol in ((32, np.float32, 2e-6), (64, np.float64, 1e-13)):
        xs, dys = x.astype(dtype), dy.astype(dtype)
        out = np.empty_like(xs)
        elementwise_map(fns[("gelu", False, bits)], xs, out=out)
        np.testing.assert_allclose(out, _gelu_ref(xs.astype(np.float64)), rtol=tol, atol=tol)
        elementwise_map(fns[("gelu", True, bits)], xs, dys, out=out)
        np.testing.assert_allclose(out, _gelu_grad_ref(xs.astype(np.float64), dys),
                                   rtol=tol * 4, atol=tol * 4)
        elementwise_map(fns[("gelu_tanh", False, bits)], xs, out=out)
        np.testing.assert_allclose(out, _gelu_tanh_ref(xs.astype(np.float64)), rtol=tol * 4,
                                   atol=tol * 4)
        # The tanh form's derivative against a central difference.
        h = 1e-6
        num = (_gelu_tanh_ref(x + h) - _gelu_tanh_ref(x - h)) / (2 * h) * dy
        elementwise_map(fns[("gelu_tanh", True, bits)], xs, dys, out=out)
        np.testing.assert_allclose(out, num, rtol=1e-5, atol=1e-5)


def test_graph_refused_is_no_engine(fake_handle, monkeypatch):
    lib = cudnn_lib()

    def refuse(self, h):
        raise lib.CudnnError(3001, "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN", "pattern")

    monkeypatch.setattr(G.GraphSpec, "build", refuse)
    with pytest.raises(G.NoEngineError, match="graph refused: CUDNN_STATUS_NOT_SUPPORTED"):
        C.plan_for(fake_handle, _spec(), None, [1])

    def bad(self, h):
        raise lib.CudnnError(2000, "CUDNN_STATUS_BAD_PARAM", "bad")

    monkeypatch.setattr(G.GraphSpec, "build", bad)
    with pytest.raises(lib.CudnnError):          # a real error is not hidden as "no engine"
        C.plan_for(fake_handle, _spec(), None, [1])


def test_conv1d_runs_as_2d(fake_handle, captured):
    x = FakeDeviceArray((2, 4, 20))
    w = FakeDeviceArray((6, 4, 5))
    out = FakeDeviceArray((2, 6, 9))
    dnn.conv_forward(x, w, stride=2, padding=1, out=out, handle=fake_handle)
    (spec, _, _), = captured
    conv = spec.ops[0].param("conv")
    assert conv.stride == (1, 2) and conv.pre_padding == (0, 1) and conv.dilation == (1, 1)
    tx = spec.tensors[spec.ops[0].tensor("x")]
    assert tx.dims == (2, 4, 1, 20) and tx.strides == (80, 20, 20, 1)
    assert V.layout_of(tx.dims, tx.strides) == "NCHW"
    # Channels-last 1-d input stays channels-last.
    t = V.tensor(FakeDeviceArray((2, 4, 20), strides=(320, 4, 16)), "x", "op", ndims=(3,))
    dims, strides = conv_mod._with_unit_height(t)
    assert V.layout_of(dims, strides) == "NHWC"


def test_descriptors_from_arrays():
    lib = cudnn_lib()
    d = dnn.tensor_descriptor_of(nhwc((2, 8, 5, 6), "float16"))
    ffi = lib.ffi
    dtype, nb = ffi.new("cudnnDataType_t *"), ffi.new("int *")
    dims, strides = ffi.new("int[8]"), ffi.new("int[8]")
    lib.check(lib.lib.cudnnGetTensorNdDescriptor(d.raw, 8, dtype, nb, dims, strides))
    assert dtype[0] == V.DATA_TYPES["f16"] and nb[0] == 4
    assert list(dims)[:4] == [2, 8, 5, 6] and list(strides)[:4] == [240, 1, 48, 8]
    t = dnn.backend_tensor_of(FakeDeviceArray((4, 3, 2), ptr=0x1008), 7, finalize=False)
    assert t.kind == "TENSOR" and not t.finalized
    t.close()
    with pytest.raises(TypeError, match="backend_tensor_of: w has element type i32"):
        dnn.backend_tensor_of(FakeDeviceArray((4,), "int32"), 1, name="w", finalize=False)


def test_context_bound_objects_have_factories():
    with pytest.raises(TypeError, match=r"Dropout.create"):
        dnn.Dropout(0.5)
    with pytest.raises(TypeError, match=r"Handle.get"):
        dnn.Handle()


@pytest.mark.parametrize("dtype", ["f32", "f16", "f64"])
def test_gelu_fallback_kernels_compile(dtype):
    """The fallback kernels go through libNVVM to PTX for sm_90 (no GPU needed)."""
    from cupric.compiler.toolchain import ToolchainNotFoundError
    from cupric.cudnn.activation import _gelu_functions
    from cupric.kernels.elementwise import map_kernel
    bits = 64 if dtype == "f64" else 32
    array = f"Array[{dtype}, 1, 'C']"
    for (mode, grad, b), fn in _gelu_functions().items():
        if b != bits:
            continue
        kern = map_kernel(fn, 2 if grad else 1)
        try:
            ptx = kern.inspect_ptx(", ".join([array] * (3 if grad else 2)), arch="sm_90")
        except ToolchainNotFoundError as exc:
            pytest.skip(f"no libNVVM here: {exc}")
        assert ".entry" in ptx, (mode, grad)


def test_workspace_grows_in_stream_order(monkeypatch):
    from cupric.runtime import memory
    events = []

    class Block:
        next_ptr = 0x100000

        def __init__(self, size, stream):
            self.nbytes, self.ptr = size, Block.next_ptr
            Block.next_ptr += size
            events.append(("alloc", size, stream))

        def close(self, stream=None):
            events.append(("free", self.ptr, stream))

    monkeypatch.setattr(memory, "empty", lambda n, dtype, stream=None: Block(n, stream))
    monkeypatch.setattr(handle_mod, "_capturing", lambda stream: False)
    h = handle_mod.Handle.from_handle(0xDEAD0, stream=0x77)
    first = h.workspace(1000)
    assert h.workspace(10) == first and h.workspace(1 << 20) == first
    bigger = h.workspace(3 * (1 << 20) + 1)
    assert bigger != first and h.workspace_bytes == 4 << 20
    h.close()   # borrowed handle: its workspace is still freed, in stream order
    assert events == [("alloc", 1 << 20, 0x77), ("alloc", 4 << 20, 0x77),
                      ("free", first, 0x77), ("free", bigger, 0x77)]


def test_workspace_never_grows_during_capture(monkeypatch):
    from cupric.runtime import memory
    sizes = []

    class Block:
        def __init__(self, size, stream):
            self.nbytes, self.ptr = size, 0x100000 + len(sizes) * (16 << 20)
            sizes.append(size)

        def close(self, stream=None):
            pass

    monkeypatch.setattr(memory, "empty", lambda n, dtype, stream=None: Block(n, stream))
    capturing = []
    monkeypatch.setattr(handle_mod, "_capturing", lambda stream: bool(capturing))
    h = handle_mod.Handle.from_handle(0xDEAD0, stream=0x77)
    first = h.reserve_workspace(2 << 20)
    capturing.append(True)
    # Large enough already: the same block, no allocation inside the capture.
    assert h.workspace(1 << 20) == first and sizes == [2 << 20]
    with pytest.raises(RuntimeError, match="reserve_workspace"):
        h.workspace(3 << 20)
    assert sizes == [2 << 20]
    with pytest.raises(ValueError):
        h.reserve_workspace(-1)
    capturing.clear()
    h.close()


# --------------------------------------------------------------------------------------
# Inputs PyTorch will not export, and clipped ReLU's bound


class _RequiresGrad(FakeDeviceArray):
    """What a PyTorch tensor with requires_grad looks like to cupric: exporting it fails
    (PyTorch raises BufferError from __dlpack__, RuntimeError from the array interface)."""

    requires_grad = True

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires "
                           "grad. If gradients aren't needed, use var.detach()")

    def __dlpack__(self, stream=None, max_version=None):
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")


class _RefusesExport(FakeDeviceArray):
    @property
    def __cuda_array_interface__(self):
        raise AttributeError("no array interface")

    def __dlpack__(self, stream=None, max_version=None):
        raise BufferError("Can't export tensors with the conjugate bit set")

    def __dlpack_device__(self):
        return (2, 0)


def test_requires_grad_input_is_refused_before_the_gpu():
    with pytest.raises(TypeError, match=r"conv_forward: w is a PyTorch tensor that "
                                        r"requires grad.*\.detach\(\)"):
        dnn.conv_forward(FakeDeviceArray((2, 4, 8, 8)), _RequiresGrad((4, 4, 3, 3)))
    with pytest.raises(TypeError, match=r"activation_forward\('relu'\): x is a PyTorch"):
        dnn.relu(_RequiresGrad((3, 4)))
    # requires_grad False (a detached tensor) is an ordinary input.
    plain = FakeDeviceArray((3, 4))
    plain.requires_grad = False
    assert V.tensor(plain, "x", "op", ndims=(2,), layouts=False).shape == (3, 4)


def test_refused_export_names_the_argument():
    with pytest.raises(TypeError, match=r"softmax: x could not be borrowed through DLPack: "
                                        r"Can't export tensors with the conjugate bit") as info:
        dnn.softmax(_RefusesExport((3, 4)))
    assert isinstance(info.value.__cause__, BufferError)


def _bf16_numbers():
    """Every finite non-negative bfloat16 number, in order, as float64."""
    bits = (np.arange(0, 0x7F80, dtype=np.uint32) << 16)
    return bits.view(np.float32).astype(np.float64)


@pytest.mark.parametrize("etype", ["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("value", [1.5, 6.0, 0.1, 1e-3, 3.0e38, 65504.0, 1e5, -0.1, 0.0,
                                   math.inf])
def test_largest_below(etype, value):
    from cupric.cudnn.activation import largest_below
    below = largest_below(value, etype)
    assert below < value
    # Nothing of the element type lies strictly between: the next number up is >= value.
    if etype == "f64":
        up = math.nextafter(below, math.inf)
    elif etype == "bf16":
        numbers = _bf16_numbers()
        numbers = np.concatenate([-numbers[:0:-1], numbers, [math.inf]])
        assert below in numbers
        up = numbers[np.searchsorted(numbers, below, side="right")]
    else:
        dtype = np.float16 if etype == "f16" else np.float32
        assert float(dtype(below)) == below
        with np.errstate(over="ignore"):     # the step above the largest is inf
            up = float(np.nextafter(dtype(below), dtype(np.inf)))
    assert up >= value


def test_clip_must_be_a_number():
    from cupric.cudnn.activation import _coef
    with pytest.raises(ValueError, match="clip must be a number"):
        _coef("clipped_relu", None, math.nan, "activation_forward('clipped_relu')")


def test_float32_matmul_without_tf32_is_refused_before_cuDNN(fake_handle, monkeypatch):
    def no_build(self, handle):
        raise AssertionError("the graph must not be built")

    monkeypatch.setattr(G.GraphSpec, "build", no_build)
    exact = P.PlanOptions(allow_tf32=False)
    with pytest.raises(G.NoEngineError, match="float32 matmul with allow_tf32=False.*TF32"):
        dnn.matmul(FakeDeviceArray((4, 5)), FakeDeviceArray((5, 6)), options=exact,
                   handle=fake_handle)
    assert not fake_handle.plans
    spec = G.GraphSpec("mm")
    a = spec.tensor((1, 4, 5), (20, 5, 1), "f32")
    b = spec.tensor((1, 5, 6), (30, 6, 1), "f32")
    c = spec.tensor((1, 4, 6), (24, 6, 1), "f32")
    spec.matmul(a, b, c)
    assert "TF32" in C.ieee_matmul_refusal(spec, exact)
    assert C.ieee_matmul_refusal(spec, P.PlanOptions()) is None      # TF32 allowed
    half = G.GraphSpec("mm16")
    ua, ub, uc = (half.tensor(d, st, "f16") for d, st in (((1, 4, 5), (20, 5, 1)),
                                                           ((1, 5, 6), (30, 6, 1)),
                                                           ((1, 4, 6), (24, 6, 1))))
    half.matmul(ua, ub, uc)
    assert C.ieee_matmul_refusal(half, exact) is None
    # Convolutions are filtered by their engines' notes, not refused.
    assert C.ieee_matmul_refusal(_spec(), exact) is None


def test_gelu_fallback_handles_bfloat16_bit_patterns_on_the_simulator(monkeypatch):
    """The kernel fallback of GELU takes bfloat16 as u16 bit patterns, computes in f32."""
    import math

    import numpy as np

    from cupric.cudnn import activation as act
    from cupric.kernels.elementwise import map as elementwise_map

    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    x = np.random.default_rng().standard_normal(257).astype(np.float32) * 2
    b = x.view(np.uint32)
    bits = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    value = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    out = np.full_like(bits, 0x7FC0)  # poisoned: a bfloat16 NaN
    elementwise_map(act._gelu_functions()[("gelu", False, 16)], bits, out=out)
    got = (out.astype(np.uint32) << 16).view(np.float32)
    ref = 0.5 * value * (1 + np.array([math.erf(v / math.sqrt(2)) for v in value]))
    np.testing.assert_allclose(got, ref, rtol=2 ** -7, atol=2 ** -7)


def test_autotune_times_single_calls_until_stable(monkeypatch):
    """A candidate is timed as one execution between two events, after a warm-up, until
    a run is no longer 5 % faster than the best (at least three runs); the best counts."""
    from cupric.runtime import device as device_mod
    samples = iter([5.0, 4.0, 3.9, 1.0])
    log = []

    class Event:
        def record(self, stream):
            log.append("record")

        def synchronize(self):
            log.append("sync")

        def elapsed_time(self, other):
            return next(samples)

        def close(self):
            pass

    class Device:
        def __init__(self, ordinal):
            pass

        def create_event(self, timing):
            return Event()

    class Plan:
        def execute(self, handle, pointers):
            log.append("execute")

    monkeypatch.setattr(device_mod, "Device", Device)
    handle = type("H", (), {"device": 0, "stream": None})()
    assert C._time(handle, Plan(), [1]) == 3.9
    assert log.count("execute") == 4  # the warm-up and three timed runs
    # each timed run alone between its events, the stream idle before it
    assert log[:3] == ["execute", "record", "sync"]
    assert log[3:7] == ["record", "execute", "record", "sync"]
