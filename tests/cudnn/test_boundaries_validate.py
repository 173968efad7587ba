"""cuDNN argument checks at their edges: strides exactly dense and one element off, zero
and broadcast strides, dimensions of exactly 2**31 - 1 and one more, layouts whose C or
spatial extents are 1, alignment at each power of two, filters exactly as large as the
padded input and one larger, pooling padding exactly below the window, group counts that
divide and do not, and outputs adjacent to inputs versus overlapping them by one byte.

The arrays are fakes exporting made-up device pointers (validation never reads them).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from cupric.cudnn import _validate as V

from _cudnn_fake import FakeDeviceArray


def dense(shape, order, dtype="float32"):
    item = np.dtype(dtype).itemsize
    return FakeDeviceArray(shape, dtype,
                           strides=tuple(s * item for s in V.packed_strides(shape, order)))


# -- element types ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, name", [
    ("f4", "f32"), ("f8", "f64"), ("f2", "f16"), ("i1", "i8"), ("i4", "i32"), ("u1", "u8"),
    ("i8", "i64"), ("?", "bool"), ("c8", None), ("u2", None), ("i2", None), ("u4", None),
])
def test_element_types(dtype, name):
    assert V.element_type(dtype) == name
    assert V.element_type(np.dtype(dtype)) == name


def test_bfloat16_by_its_dtype_name():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert V.element_type(ml_dtypes.bfloat16) == "bf16"
    assert V.alloc_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("etype, dtype", [
    ("f32", "f4"), ("f64", "f8"), ("f16", "f2"), ("i8", "i1"), ("i32", "i4"), ("u8", "u1"),
    ("i64", "i8"), ("bool", "?"),
])
def test_allocation_dtypes(etype, dtype):
    assert V.alloc_dtype(etype) == np.dtype(dtype)
    assert V.ITEMSIZE[etype] == np.dtype(dtype).itemsize


def test_bfloat16_allocates_as_uint16_without_ml_dtypes(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    assert V.alloc_dtype("bf16") == np.dtype(np.uint16)
    with pytest.raises(TypeError, match="no NumPy dtype for element type 'c64'"):
        V.alloc_dtype("c64")


def test_data_type_codes_are_the_c_enum():
    assert V.DATA_TYPES == {"f32": 0, "f64": 1, "f16": 2, "i8": 3, "i32": 4, "u8": 6,
                            "bf16": 9, "i64": 10, "bool": 11}


# -- layouts --------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, order, strides", [
    ((2, 3, 4, 5), (0, 1, 2, 3), (60, 20, 5, 1)),
    ((2, 3, 4, 5), (0, 2, 3, 1), (60, 1, 15, 3)),
    ((2, 0, 4, 5), (0, 1, 2, 3), (20, 20, 5, 1)),       # a zero extent steps like one
    ((2, 3, 0, 5), (0, 2, 3, 1), (15, 1, 15, 3)),
    ((7,), (0,), (1,)), ((1, 1, 1), (0, 2, 1), (1, 1, 1)),
])
def test_packed_strides(shape, order, strides):
    assert V.packed_strides(shape, order) == strides


@pytest.mark.parametrize("shape, strides, layout", [
    ((2, 3, 4, 5), (60, 20, 5, 1), "NCHW"), ((2, 3, 4, 5), (60, 1, 15, 3), "NHWC"),
    ((2, 1, 4, 5), (20, 20, 5, 1), "NCHW"),     # C == 1: both fit, channels-first wins
    ((2, 1, 4, 5), (20, 1, 5, 1), "NCHW"),
    ((2, 3, 1, 1), (3, 1, 3, 3), "NCHW"),       # H = W = 1: both fit
    ((1, 3, 4, 5), (999, 20, 5, 1), "NCHW"),    # N == 1: its stride is free
    ((2, 3, 4, 5), (60, 20, 5, 2), None), ((2, 3, 4, 5), (61, 20, 5, 1), None),
    ((2, 3, 4, 5), (0, 20, 5, 1), None),         # broadcast batch
    ((2, 3, 4, 5), (60, 1, 15, 4), None),
    ((2, 3, 4), (12, 4, 1), "NCW"), ((2, 3, 4), (12, 1, 3), "NWC"),
    ((2, 3, 2, 2, 2), (24, 8, 4, 2, 1), "NCDHW"), ((2, 3, 2, 2, 2), (24, 1, 12, 6, 3), "NDHWC"),
    ((4, 5), (5, 1), None), ((2, 2, 2, 2, 2, 2), (32, 16, 8, 4, 2, 1), None),
])
def test_layout_names(shape, strides, layout):
    assert V.layout_of(shape, strides) == layout


def test_layout_orders_per_rank():
    assert V._orders(4) == {"NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1)}
    assert V._orders(3) == {"NCW": (0, 1, 2), "NWC": (0, 2, 1)}
    assert V._orders(5) == {"NCDHW": (0, 1, 2, 3, 4), "NDHWC": (0, 2, 3, 4, 1)}
    assert V._orders(2) == {} and V._orders(6) == {}


@pytest.mark.parametrize("layout, last", [("NHWC", True), ("NDHWC", True), ("NWC", True),
                                          ("NCHW", False), ("NCDHW", False), ("NCW", False),
                                          ("NC", False), (None, False)])
def test_channels_last(layout, last):
    assert V.channels_last(layout) is last


@pytest.mark.parametrize("ptr, alignment", [
    (0, 16), (1, 1), (2, 2), (3, 1), (4, 4), (8, 8), (12, 4), (16, 16), (24, 8), (32, 16),
    (48, 16), (0x7F0000000000, 16), (0x7F0000000008, 8),
])
def test_alignment(ptr, alignment):
    assert V.alignment_of(ptr) == alignment


# -- tensors --------------------------------------------------------------------------------------

def test_dense_tensors_of_each_rank_are_described():
    t = V.tensor(dense((2, 3, 4, 5), (0, 1, 2, 3)), "x", "op")
    assert (t.etype, t.shape, t.strides, t.layout, t.ndim) == (
        "f32", (2, 3, 4, 5), (60, 20, 5, 1), "NCHW", 4)
    t5 = V.tensor(dense((1, 2, 2, 2, 2), (0, 2, 3, 4, 1), "float16"), "x", "op", ndims=(4, 5))
    assert t5.layout == "NDHWC" and t5.etype == "f16"
    t3 = V.tensor(dense((2, 3, 4), (0, 2, 1), "float64"), "x", "op", ndims=(3,))
    assert t3.layout == "NWC" and t3.strides == (12, 1, 3)
    flat = V.tensor(FakeDeviceArray((6, 7)), "m", "matmul", ndims=(2,))
    assert flat.layout is None and flat.strides == (7, 1)
    again = V.tensor(t, "x", "op2")                   # a Tensor passes through, as described
    assert again.etype == "f32" and again.buf is t.buf
    assert V.tensor(t, "x", "op", types=("f32",)).shape == (2, 3, 4, 5)


@pytest.mark.parametrize("strides, message", [
    ((240, 80, 20, -4), "conv: x has byte strides (240, 80, 20, -4), not whole non-negative "
                        "multiples of its 4-byte elements"),
    ((240, 80, 20, 6), "conv: x: its strides are not whole multiples of the element size"),
    ((240, 80, 20, 2), "conv: x: its strides are not whole multiples of the element size"),
])
def test_strides_that_are_not_whole_elements(strides, message):
    with pytest.raises(ValueError) as info:
        V.tensor(FakeDeviceArray((2, 3, 4, 5), strides=strides), "x", "conv")
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("strides, problem", [
    ((80, 20, 4), None), ((80, 20, 6), "not whole"), ((80, 20, -4), "not whole"),
    ((80, -20, 4), "not whole"), ((0, 20, 4), None), ((80, 21, 4), "not whole"),
])
def test_layout_description_of_whole_and_partial_strides(strides, problem):
    buf = SimpleNamespace(dtype=np.dtype("f4"), itemsize=4, strides=strides, shape=(3, 4, 5),
                          ndim=3)
    etype, elem, layout, found = V._describe(buf, None)
    assert etype == "f32"
    if problem is None:
        assert found is None and elem == tuple(s // 4 for s in strides)
        assert layout == ("NCW" if strides[0] else None)
    else:
        assert found == (f"has byte strides {strides}, not whole non-negative multiples of "
                         f"its 4-byte elements") and elem is None and layout is None
    assert V._describe(buf, "bf16")[0] == "bf16"


def test_broadcast_strides_are_whole_but_not_a_dense_layout():
    x = FakeDeviceArray((2, 3, 4, 5), strides=(0, 80, 20, 4))
    with pytest.raises(ValueError, match=r"conv: x of shape \(2, 3, 4, 5\) has element strides "
                                         r"\(0, 20, 5, 1\), which is neither dense NCHW or NHWC"):
        V.tensor(x, "x", "conv")
    t = V.tensor(x, "x", "softmax", layouts=False)
    assert t.strides == (0, 20, 5, 1) and t.layout is None


def test_dimensions_up_to_int32_max():
    big = 2**31 - 1
    t = V.tensor(FakeDeviceArray((1, 1, 1, big), "int8"), "x", "op", types=("i8",))
    assert t.shape[-1] == big
    with pytest.raises(ValueError, match=r"op: x has a dimension above 2\*\*31 - 1 \(shape "
                                         r"\(1, 1, 1, 2147483648\)\)"):
        V.tensor(FakeDeviceArray((1, 1, 1, big + 1), "int8"), "x", "op", types=("i8",))


@pytest.mark.parametrize("shape", [(0, 2, 3, 4), (1, 2, 3, 0), (1, 0, 1, 1)])
def test_empty_tensors_are_refused(shape):
    with pytest.raises(ValueError, match=r"op: x is empty \(shape .*\); cuDNN takes no "
                                         r"zero-sized tensors"):
        V.tensor(FakeDeviceArray(shape), "x", "op")


def test_rank_and_type_messages():
    with pytest.raises(ValueError, match=r"pool: x has 3 dimensions \(shape \(2, 3, 4\)\); pool "
                                         r"takes 4 or 5-d tensors"):
        V.tensor(FakeDeviceArray((2, 3, 4)), "x", "pool", ndims=(4, 5))
    with pytest.raises(TypeError, match="pool: x has element type f64; pool takes f32, f16"):
        V.tensor(FakeDeviceArray((1, 1, 2, 2), "float64"), "x", "pool", types=("f32", "f16"))
    with pytest.raises(TypeError, match="op: x has element type complex64; op takes"):
        V.tensor(FakeDeviceArray((1, 1, 2, 2), "complex64"), "x", "op")
    with pytest.raises(ValueError, match="op: y is read-only .* but op writes it"):
        V.tensor(FakeDeviceArray((1, 1, 2, 2), readonly=True), "y", "op", writable=True)
    ro = V.tensor(FakeDeviceArray((1, 1, 2, 2), readonly=True), "x", "op")
    assert ro.shape == (1, 1, 2, 2)


def test_expected_shapes_and_types():
    t = V.tensor(dense((2, 3, 4, 5), (0, 1, 2, 3)), "x", "op")
    V.expect(t, [2, 3, 4, 5], "f32", "x", "op")
    with pytest.raises(ValueError, match=r"bn: scale has shape \(2, 3, 4, 5\), expected "
                                         r"\(2, 3, 4, 6\)"):
        V.expect(t, (2, 3, 4, 6), "f32", "scale", "bn")
    with pytest.raises(TypeError, match="bn: scale has element type f32, expected f16"):
        V.expect(t, (2, 3, 4, 5), "f16", "scale", "bn")
    h = V.tensor(dense((2, 3, 4, 5), (0, 1, 2, 3), "float16"), "w", "op")
    assert V.same_type("op", ("x", t)) == "f32"
    assert V.same_type("op", ("x", t), ("y", t)) == "f32"
    with pytest.raises(TypeError, match="conv: w has element type f16 but x has f32; they "
                                        "must match"):
        V.same_type("conv", ("x", t), ("y", t), ("w", h))


def test_caller_outputs_are_checked():
    out = dense((2, 4, 3, 3), (0, 2, 3, 1))
    t = V.output(out, (2, 4, 3, 3), "f32", "NHWC", "y", "conv", None)
    assert t.layout == "NHWC" and t.shape == (2, 4, 3, 3)
    assert V.result(out, t) is out and V.result(t, t) is t.buf and V.result(None, t) is t.buf
    with pytest.raises(ValueError, match=r"conv: y has shape \(2, 4, 3, 3\), expected "
                                         r"\(2, 4, 3, 4\)"):
        V.output(out, (2, 4, 3, 4), "f32", "NHWC", "y", "conv", None)
    with pytest.raises(TypeError, match="conv: y has element type f32; conv takes f16"):
        V.output(out, (2, 4, 3, 3), "f16", "NHWC", "y", "conv", None)
    with pytest.raises(ValueError, match="conv: y is read-only"):
        V.output(dense((2, 4, 3, 3), (0, 1, 2, 3)).__class__(
            (2, 4, 3, 3), readonly=True), (2, 4, 3, 3), "f32", "NCHW", "y", "conv", None)
    # Without a layout to follow, any whole-element strides do.
    odd = FakeDeviceArray((2, 4, 3, 3), strides=(0, 36, 12, 4))
    assert V.output(odd, (2, 4, 3, 3), "f32", None, "y", "op", None).layout is None
    with pytest.raises(ValueError, match="neither dense"):
        V.output(odd, (2, 4, 3, 3), "f32", "NCHW", "y", "op", None)
    two = FakeDeviceArray((4, 3))
    assert V.output(two, (4, 3), "f32", None, "y", "mm", None, ndims=(2,)).shape == (4, 3)


# -- overlapping outputs --------------------------------------------------------------------------

def fake(ptr, shape=(4,), strides=(4,), itemsize=4):
    return SimpleNamespace(buf=SimpleNamespace(ptr=ptr, shape=shape, strides=strides,
                                               itemsize=itemsize))


def test_outputs_may_touch_inputs_but_not_share_a_byte():
    out = fake(1000)                                   # bytes 1000..1015
    V.check_overlap("op", ("y", out), ("x", fake(1016)), ("b", fake(984)), ("n", None))
    for ptr in (1015, 985, 1000, 1008):
        with pytest.raises(ValueError) as info:
            V.check_overlap("op", ("y", out), ("x", fake(2000)), ("w", fake(ptr)))
        assert str(info.value) == ("op: y overlaps w in memory; pass an output that shares "
                                   "no bytes with the inputs")
    # Reversed and strided views count the bytes they reach.
    V.check_overlap("op", ("y", fake(1000, (4,), (-4,))), ("x", fake(1004)))
    with pytest.raises(ValueError, match="y overlaps x"):
        V.check_overlap("op", ("y", fake(1012, (4,), (-4,))), ("x", fake(996)))
    with pytest.raises(ValueError, match="y overlaps x"):
        V.check_overlap("op", ("y", fake(1000, (2,), (64,))), ("x", fake(1060)))


def test_in_place_needs_the_very_same_array():
    out = fake(1000, (2, 4), (16, 4))
    V.check_overlap("relu", ("y", out), ("x", fake(1000, (2, 4), (16, 4))), inplace=("x",))
    for other in (fake(1004, (2, 4), (16, 4)), fake(1000, (4, 2), (8, 4)),
                  fake(1000, (2, 4), (4, 8)), fake(1000, (1, 4), (16, 4))):
        with pytest.raises(ValueError) as info:
            V.check_overlap("relu", ("y", out), ("x", other), inplace=("x",))
        assert str(info.value).endswith("shares no bytes with the inputs (or x itself)")
    with pytest.raises(ValueError) as info:
        V.check_overlap("relu", ("y", out), ("dy", fake(1000, (2, 4), (16, 4))), inplace=("x",))
    assert str(info.value).endswith("with the inputs")


# -- shape arithmetic -----------------------------------------------------------------------------

@pytest.mark.parametrize("value, n, minimum, expected", [
    (3, 2, 0, (3, 3)), (np.int64(0), 3, 0, (0, 0, 0)), ((1, 2), 2, 1, (1, 2)),
    ([np.int32(4), 5, 6], 3, 4, (4, 5, 6)), (1, 1, 1, (1,)),
])
def test_as_tuple(value, n, minimum, expected):
    got = V.as_tuple(value, n, "stride", "conv", minimum=minimum)
    assert got == expected and all(type(v) is int for v in got)


@pytest.mark.parametrize("value, n, minimum, error, message", [
    (0, 2, 1, ValueError, r"conv: stride = \(0, 0\): each value must be >= 1"),
    ((1, 0), 2, 1, ValueError, r"conv: stride = \(1, 0\): each value must be >= 1"),
    (-1, 2, 0, ValueError, r"each value must be >= 0"),
    ((1, 2, 3), 2, 0, ValueError, r"conv: stride has 3 values, expected 2 \(one per spatial "
                                  r"dimension\)"),
    ((1,), 2, 0, ValueError, "has 1 values, expected 2"),
    (True, 2, 0, TypeError, "conv: stride must be an int or a sequence of 2 ints, got True"),
    (1.0, 2, 0, TypeError, "must be an int or a sequence of 2 ints, got 1.0"),
    ((1.0, 2), 2, 0, TypeError, "must be an int or a sequence"),
])
def test_as_tuple_refused(value, n, minimum, error, message):
    with pytest.raises(error, match=message):
        V.as_tuple(value, n, "stride", "conv", minimum=minimum)


@pytest.mark.parametrize("x, w, pad, stride, dil, expected", [
    ((1, 3, 5, 5), (8, 3, 5, 5), (0, 0), (1, 1), (1, 1), (1, 8, 1, 1)),   # filter = input
    ((1, 3, 3, 3), (8, 3, 5, 5), (1, 1), (1, 1), (1, 1), (1, 8, 1, 1)),   # = padded input
    ((1, 3, 5, 5), (8, 3, 3, 3), (0, 0), (1, 1), (2, 2), (1, 8, 1, 1)),   # dilated span 5
    ((2, 3, 7, 8), (4, 3, 3, 3), (0, 1), (2, 3), (1, 1), (2, 4, 3, 3)),
    ((2, 3, 8, 8), (4, 3, 3, 3), (1, 1), (2, 2), (1, 1), (2, 4, 4, 4)),
    ((2, 3, 9, 9), (4, 3, 1, 1), (0, 0), (4, 4), (1, 1), (2, 4, 3, 3)),
])
def test_conv_output_shapes_at_the_fit_boundary(x, w, pad, stride, dil, expected):
    assert V.conv_output_shape(x, w, pad, stride, dil) == expected


@pytest.mark.parametrize("x, w, pad, dil, axis, size, span", [
    ((1, 3, 4, 5), (8, 3, 5, 5), (0, 0), (1, 1), 0, 4, 5),
    ((1, 3, 5, 2), (8, 3, 5, 5), (0, 1), (1, 1), 1, 2, 5),
    ((1, 3, 4, 4), (8, 3, 3, 3), (0, 0), (2, 2), 0, 4, 5),
])
def test_filters_one_past_the_padded_input_are_refused(x, w, pad, dil, axis, size, span):
    with pytest.raises(ValueError, match=rf"conv2d: along spatial axis {axis} the input extent "
                                         rf"{size} with padding {pad[axis]} is smaller than the "
                                         rf"dilated filter extent {span}"):
        V.conv_output_shape(x, w, pad, (1, 1), dil, op="conv2d")


def test_conv_operands_and_groups():
    V.check_conv_operands((2, 6, 5, 5), (4, 3, 3, 3), 2, "conv")
    V.check_conv_operands((2, 6, 5, 5), (6, 1, 3, 3), 6, "conv")   # depthwise
    V.check_conv_operands((2, 6, 5, 5), (4, 6, 3, 3), 1, "conv")
    for x, w, groups, message in (
            ((2, 6, 5, 5), (4, 6, 3), 1, "conv: the filter has 3 dimensions but the input has 4"),
            ((2, 6, 5, 5), (4, 2, 3, 3), 4, "conv: input channels 6 are not divisible by "
                                            "groups=4"),
            ((2, 6, 5, 5), (4, 1, 3, 3), 6, r"conv: output channels \(filter dim 0\) 4 are not "
                                            r"divisible by groups=6"),
            ((2, 6, 5, 5), (4, 2, 3, 3), 2, r"conv: the filter has 2 input channels per group "
                                            r"\(shape \(4, 2, 3, 3\)\) but the input has 6 "
                                            r"channels and groups=2: expected filter dim 1 = 3"),
            ((2, 6, 5, 5), (4, 4, 3, 3), 1, "expected filter dim 1 = 6")):
        with pytest.raises(ValueError, match=message):
            V.check_conv_operands(x, w, groups, "conv")


def test_conv_input_shape_from_gradient_and_filter():
    assert V.conv_input_shape((5, 8, 3, 3), (8, 2, 3, 3), (7, 6), 3) == (5, 6, 7, 6)
    assert V.conv_input_shape((1, 4, 2), (4, 4, 3), [9], 1) == (1, 4, 9)


@pytest.mark.parametrize("x, window, pad, stride, expected", [
    ((1, 2, 4, 4), (4, 4), (0, 0), (1, 1), (1, 2, 1, 1)),     # window = input
    ((1, 2, 2, 2), (4, 4), (1, 1), (1, 1), (1, 2, 1, 1)),     # = padded input
    ((1, 2, 5, 5), (3, 3), (2, 2), (2, 2), (1, 2, 4, 4)),     # padding = window - 1
    ((3, 2, 7, 6), (2, 3), (0, 1), (2, 3), (3, 2, 3, 2)),
])
def test_pool_output_shapes_at_the_boundaries(x, window, pad, stride, expected):
    assert V.pool_output_shape(x, window, pad, stride) == expected


@pytest.mark.parametrize("x, window, pad, message", [
    ((1, 2, 8, 8), (3, 3), (0, 3), "max_pool2d: padding 3 along spatial axis 1 must be smaller "
                                   "than the window 3"),
    ((1, 2, 8, 8), (2, 2), (4, 0), "padding 4 along spatial axis 0 must be smaller"),
    ((1, 2, 3, 8), (4, 4), (0, 0), "max_pool2d: the window 4 is larger than the padded input "
                                   "extent 3 along spatial axis 0"),
    ((1, 2, 8, 1), (4, 4), (0, 1), "the window 4 is larger than the padded input extent 3 "
                                   "along spatial axis 1"),
])
def test_pool_windows_refused(x, window, pad, message):
    with pytest.raises(ValueError, match=message):
        V.pool_output_shape(x, window, pad, (1, 1), op="max_pool2d")


def test_allocated_outputs_are_described_from_their_strides(monkeypatch):
    made = []

    def new_output(shape, etype, layout, stream):
        made.append((shape, etype, layout, stream))
        order = (0, 2, 3, 1) if layout == "NHWC" else tuple(range(len(shape)))
        return SimpleNamespace(shape=tuple(shape), itemsize=2, ndim=len(shape),
                               strides=tuple(2 * s for s in V.packed_strides(shape, order)))

    monkeypatch.setattr(V, "new_output", new_output)
    t = V.output(None, (2, 4, 3, 3), "f16", "NHWC", "y", "conv", 77)
    assert made == [((2, 4, 3, 3), "f16", "NHWC", 77)]
    assert (t.etype, t.shape, t.strides, t.layout) == ("f16", (2, 4, 3, 3), (36, 1, 12, 4),
                                                       "NHWC")
    m = V.output(None, (4, 3), "f16", None, "y", "mm", None, ndims=(2,))
    assert m.layout is None and m.strides == (3, 1)


def test_allocated_outputs_of_each_rank_keep_integer_strides_and_their_buffer(monkeypatch):
    bufs = []

    def new_output(shape, etype, layout, stream):
        order = {"NWC": (0, 2, 1), "NDHWC": (0, 2, 3, 4, 1)}.get(layout,
                                                                   tuple(range(len(shape))))
        b = SimpleNamespace(shape=tuple(shape), itemsize=4, ndim=len(shape),
                            strides=tuple(4 * s for s in V.packed_strides(shape, order)))
        bufs.append(b)
        return b

    monkeypatch.setattr(V, "new_output", new_output)
    t3 = V.output(None, (2, 3, 5), "f32", "NWC", "y", "conv1d", None, ndims=(3,))
    assert t3.layout == "NWC" and t3.strides == (15, 1, 3) and t3.buf is bufs[-1]
    assert all(type(s) is int for s in t3.strides)
    t5 = V.output(None, (1, 2, 2, 2, 3), "f32", "NDHWC", "y", "conv3d", None, ndims=(5,))
    assert t5.layout == "NDHWC" and t5.buf is bufs[-1]
    assert V.result(None, t5) is bufs[-1]


@pytest.mark.parametrize("shape, strides, names", [
    ((2, 3, 4), (0, 16, 4), "NCW or NWC"),
    ((1, 2, 2, 2, 3), (96, 48, 24, 12, 8), "NCDHW or NDHWC"),
])
def test_non_dense_3d_and_5d_tensors_are_refused(shape, strides, names):
    with pytest.raises(ValueError, match=f"which is neither dense {names}"):
        V.tensor(FakeDeviceArray(shape, strides=strides), "x", "op", ndims=(3, 5))


def test_a_described_tensor_keeps_its_element_type_override():
    from cupric.runtime import memory as m
    raw = m.borrow(0x30000, (1, 3, 7, 11), (462, 154, 22, 2), np.uint16)
    with pytest.raises(TypeError, match="has element type uint16"):
        V.tensor(raw, "x", "op")
    t = V.Tensor(raw, "bf16", raw.shape, (231, 77, 11, 1), "NCHW")
    again = V.tensor(t, "x", "op")
    assert again.etype == "bf16" and again.layout == "NCHW"


def test_the_description_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(V, "_described", {})
    monkeypatch.setattr(V, "_DESCRIBED_LIMIT", 2)
    for n in (2, 3, 4):
        V.tensor(FakeDeviceArray((1, 1, 1, n)), "x", "op")
    assert len(V._described) == 2


def test_overlap_checks_go_on_past_absent_and_in_place_inputs():
    out = fake(1000)                                   # bytes 1000..1015
    with pytest.raises(ValueError, match="y overlaps w"):
        V.check_overlap("op", ("y", out), ("n", None), ("w", fake(1008)))
    with pytest.raises(ValueError, match="y overlaps w"):
        V.check_overlap("op", ("y", out), ("x", fake(1000)), ("w", fake(1004)), inplace=("x",))
    # A reversed input reaching down into the output.
    with pytest.raises(ValueError, match="y overlaps x"):
        V.check_overlap("op", ("y", fake(990)), ("x", fake(1012, (4,), (-4,))))


def test_default_operation_names_in_messages():
    with pytest.raises(ValueError, match="^conv: along spatial axis 0"):
        V.conv_output_shape((1, 1, 2, 2), (1, 1, 3, 3), (0, 0), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="^pool: padding 2 along spatial axis 0"):
        V.pool_output_shape((1, 1, 4, 4), (2, 2), (2, 0), (1, 1))
