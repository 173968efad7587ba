"""Layout arithmetic of device buffers (pure Python, checked against NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.runtime import memory as m


def _offset(view: np.ndarray, base: np.ndarray) -> int:
    return view.__array_interface__["data"][0] - base.__array_interface__["data"][0]


KEYS = [
    0, -1, 2, slice(None), slice(1, 4), slice(None, None, 2), slice(None, None, -1),
    slice(4, 0, -2), slice(10, 20), slice(3, 3), (1, 2), (slice(None), 1),
    (Ellipsis, 0), (0, Ellipsis), (None, 1), (slice(None), None, slice(None, None, -1)),
    (Ellipsis,), (1, Ellipsis, None), (slice(-2, None), slice(None, 1), -1),
    (slice(None, None, 3), Ellipsis, slice(1, None, 2)),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_index_layout_matches_numpy(key):
    base = np.zeros((5, 6, 4), np.float32)
    try:
        expected = base[key]
    except IndexError:
        with pytest.raises(IndexError):
            m.index_layout(base.shape, base.strides, key)
        return
    offset, shape, strides = m.index_layout(base.shape, base.strides, key)
    assert shape == expected.shape
    assert strides == expected.strides or expected.size == 0
    if expected.size:
        assert offset == _offset(expected, base)


def test_index_layout_on_strided_and_negative_views():
    base = np.zeros((8, 9), np.int16)
    view = base[::-2, 1::3]
    for key in [(1, slice(None)), (slice(None, None, -1), 0), (Ellipsis, slice(1, None))]:
        expected = view[key]
        offset, shape, strides = m.index_layout(view.shape, view.strides, key)
        assert (shape, strides) == (expected.shape, expected.strides)
        assert _offset(view, base) + offset == _offset(expected, base)


@pytest.mark.parametrize("key,match", [
    ((0, 0, 0, 0), "too many indices"),
    (7, "out of bounds"),
    (-8, "out of bounds"),
    ((Ellipsis, Ellipsis), "single ellipsis"),
    ([0, 1], "advanced indexing"),
    (np.array([0]), "advanced indexing"),
    (True, "boolean"),
    (1.5, "advanced indexing"),
])
def test_index_errors(key, match):
    with pytest.raises(IndexError, match=match):
        m.index_layout((5, 6, 4), (96, 16, 4), key)


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (4, 1, 5), (2, 0, 3)])
@pytest.mark.parametrize("dtype", ["u1", "f4", "c16"])
def test_c_strides_and_contiguity(shape, dtype):
    a = np.zeros(shape, dtype)
    strides = m.c_strides(shape, a.itemsize)
    if a.size:
        assert strides == a.strides
    assert m.is_c_contiguous(shape, strides, a.itemsize)
    f = np.asfortranarray(a)
    assert m.is_f_contiguous(f.shape, f.strides, a.itemsize)
    assert m.is_f_contiguous(shape, strides, a.itemsize) == f.flags.c_contiguous or a.size == 0


@pytest.mark.parametrize("key", [(slice(None, None, 2),), (slice(None), slice(1, 3)),
                                 (slice(None, None, -1),), (Ellipsis, 0)])
def test_contiguity_flags_like_numpy(key):
    v = np.zeros((4, 6), np.float64)[key]
    assert m.is_c_contiguous(v.shape, v.strides, 8) == v.flags.c_contiguous
    assert m.is_f_contiguous(v.shape, v.strides, 8) == v.flags.f_contiguous


def test_extent():
    base = np.zeros((4, 5), np.float32)
    v = base[::-1, 1::2]
    low, high = m.extent(v.shape, v.strides, 4)
    start = _offset(v, base)
    assert start + low == _offset(base[3, 1:2], base) - 3 * 20  # first row touched: row 0
    assert start + low == 4  # row 0, column 1
    assert start + high == 3 * 20 + 4 * 4  # row 3, column 3, plus one item
    assert m.extent((0, 5), (20, 4), 4) == (0, 0)


@pytest.mark.parametrize("new", [(6, 4), (-1,), (2, -1, 3), 24, (1, 24, 1)])
def test_reshape_layout(new):
    a = np.zeros((4, 6), np.int32)
    shape, strides = m.reshape_layout(a.shape, a.strides, 4, new)
    b = a.reshape(new)
    assert (shape, strides) == (b.shape, b.strides)


@pytest.mark.parametrize("new,match", [((5, 5), "cannot reshape"), ((-1, -1), "one unknown"),
                                       ((7, -1), "cannot reshape")])
def test_reshape_errors(new, match):
    with pytest.raises(ValueError, match=match):
        m.reshape_layout((4, 6), (24, 4), 4, new)


@pytest.mark.parametrize("old,new", [("f4", "u4"), ("f4", "u1"), ("f4", "f8"), ("u1", "c8"),
                                     ("c16", "f8")])
def test_view_layout_matches_numpy(old, new):
    a = np.zeros((3, 8), old)
    b = a.view(new)
    assert m.view_layout(a.shape, a.strides, a.itemsize, b.itemsize) == (b.shape, b.strides)
    rows = a[::2]
    c = rows.view(new)
    assert m.view_layout(rows.shape, rows.strides, a.itemsize, c.itemsize) == (c.shape,
                                                                               c.strides)


def test_view_layout_errors():
    with pytest.raises(ValueError, match="last axis must be contiguous"):
        m.view_layout((3, 4), (16, 8), 4, 2)
    with pytest.raises(ValueError, match="not a multiple"):
        m.view_layout((3, 3), (12, 4), 4, 8)
    with pytest.raises(ValueError, match="0-d"):
        m.view_layout((), (), 4, 8)


def test_shape_and_dtype_normalization():
    assert m.normalize_shape(5) == (5,)
    assert m.normalize_shape(np.int64(3)) == (3,)
    assert m.normalize_shape([2, np.int32(3)]) == (2, 3)
    with pytest.raises(ValueError, match="negative"):
        m.normalize_shape((2, -1))
    with pytest.raises(TypeError, match="shape"):
        m.normalize_shape((2.5,))
    with pytest.raises(TypeError, match="Python objects"):
        m.normalize_dtype(object)
    with pytest.raises(TypeError, match="not a dtype"):
        m.normalize_dtype("no-such-type")
    assert m.normalize_dtype("f4") == np.float32


def test_stream_handle():
    class Proto:
        def __cuda_stream__(self):
            return (0, 1234)

    class Torchish:
        cuda_stream = 99

    assert m.stream_handle(None) == 0
    assert m.stream_handle(7) == 7
    assert m.stream_handle(Proto()) == 1234
    assert m.stream_handle(Torchish()) == 99
    with pytest.raises(TypeError, match="not a stream"):
        m.stream_handle("stream")


def test_borrowed_view_semantics_without_driver():
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    buf = m.borrow(host.ctypes.data, host.shape, host.strides, host.dtype, owner=host,
                   device=0)
    assert not buf.owns_memory and buf.device == 0
    view = buf[1:3, ::2]
    assert view.base is buf and view.ptr == buf.ptr + 24
    assert view.shape == (2, 3) and view.strides == (24, 8)
    assert view.view(np.int32).dtype == np.int32
    t = buf.T
    assert t.shape == (6, 4) and t.strides == (4, 24) and t.is_f_contiguous
    assert buf.transpose(1, 0).strides == t.strides
    with pytest.raises(ValueError, match="permutation"):
        buf.transpose(0, 0)
    assert len(buf) == 4 and "DeviceBuffer" in repr(buf)
    buf.close()  # a borrow frees nothing (no driver here to call)
    assert view.closed
