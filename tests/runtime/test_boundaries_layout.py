"""Layout arithmetic at its edges: zero-size dimensions, zero and negative strides, axes
of length one, indices at -n / n-1 / n, slices that select nothing, reshapes with -1 and
zero sizes, and item-size changes at the divisibility boundary.

Layouts decide which bytes a kernel or a copy touches, so an off-by-one here reads or
writes past a buffer without any error. Expected values are NumPy's where NumPy defines
them (strides of views, shapes), worked out by hand elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

from cupric.runtime import memory as m


# -- shapes, dtypes, C strides ----------------------------------------------------------------

@pytest.mark.parametrize("shape, expected", [
    (0, (0,)), (np.uint8(3), (3,)), ((), ()), ([], ()), ((2, 0), (2, 0)), ((0, 0, 0), (0, 0, 0)),
    ((np.int64(1), 7), (1, 7)),
])
def test_shapes_at_zero_and_empty(shape, expected):
    got = m.normalize_shape(shape)
    assert got == expected and all(type(n) is int for n in got)


@pytest.mark.parametrize("shape, error, match", [
    (-1, ValueError, r"negative dimension in shape \(-1,\)"),
    ((0, -1), ValueError, r"negative dimension in shape \(0, -1\)"),
    (2.0, TypeError, "a shape is an int or a sequence of ints, got 2.0"),
    ("ab", TypeError, "a shape is an int or a sequence of ints"),
    (None, TypeError, "a shape is an int or a sequence of ints, got None"),
])
def test_shapes_refused(shape, error, match):
    with pytest.raises(error, match=match):
        m.normalize_shape(shape)


def test_dtypes_of_zero_size_or_with_objects_are_refused():
    for bad in ("S0", "V0", np.dtype([("a", object)])):
        with pytest.raises(TypeError, match="fixed size and no Python objects"):
            m.normalize_dtype(bad)
    assert m.normalize_dtype("S1").itemsize == 1
    assert m.normalize_dtype("V3").itemsize == 3
    assert m.normalize_dtype([("a", "<i4"), ("b", "<f8")]).itemsize == 12


@pytest.mark.parametrize("shape, itemsize, expected", [
    ((), 8, ()), ((1,), 2, (2,)), ((5,), 4, (4,)), ((2, 3, 4), 4, (48, 16, 4)),
    # A zero-size axis counts as one, so every stride stays positive and distinct axes
    # keep distinct strides (what a consumer computing contiguity expects).
    ((2, 0, 3), 8, (24, 24, 8)), ((0,), 8, (8,)), ((0, 5), 2, (10, 2)), ((3, 0), 4, (4, 4)),
    ((1, 1, 1), 16, (16, 16, 16)),
])
def test_c_strides_at_zero_and_one(shape, itemsize, expected):
    assert m.c_strides(shape, itemsize) == expected


# -- contiguity -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, strides, c, f", [
    ((), (), True, True),
    ((0, 3), (12345, -7), True, True),        # empty: any strides are contiguous
    ((3, 0), (0, 0), True, True),
    ((1, 4), (999, 8), True, True),           # length-1 axes: their stride is irrelevant
    ((4, 1), (8, 999), True, True),
    ((4,), (8,), True, True), ((4,), (16,), False, False), ((4,), (-8,), False, False),
    ((4,), (0,), False, False),               # broadcast: not contiguous
    ((2, 3), (24, 8), True, False), ((2, 3), (8, 16), False, True),
    ((2, 3), (32, 8), False, False),          # a gap between rows
    ((2, 3), (8, 24), False, False),          # F order with a gap
    ((2, 1, 3), (24, 0, 8), True, False),
])
def test_contiguity_at_its_edges(shape, strides, c, f):
    assert m.is_c_contiguous(shape, strides, 8) is c
    assert m.is_f_contiguous(shape, strides, 8) is f


# -- the byte range a layout touches ----------------------------------------------------------

@pytest.mark.parametrize("shape, strides, itemsize, expected", [
    ((), (), 8, (0, 8)),                       # 0-d: one item
    ((0,), (8,), 8, (0, 0)), ((5, 0), (0, 8), 8, (0, 0)), ((0, 5), (-40, 8), 8, (0, 0)),
    ((1,), (-1000,), 4, (0, 4)),               # one element: its stride never applies
    ((5,), (0,), 4, (0, 4)),                   # broadcast: all elements at one address
    ((5,), (4,), 4, (0, 20)), ((5,), (-4,), 4, (-16, 4)),
    ((2, 3), (-24, 8), 8, (-24, 24)), ((2, 3), (24, -8), 8, (-16, 32)),
    ((2, 3), (-24, -8), 8, (-40, 8)), ((3, 2), (0, 8), 8, (0, 16)),
    ((2, 3), (24, 8), 8, (0, 48)), ((2, 3, 4), (96, 32, 8), 8, (0, 192)),
])
def test_extent_at_its_edges(shape, strides, itemsize, expected):
    assert m.extent(shape, strides, itemsize) == expected


def test_extent_matches_numpy_on_reversed_and_strided_views():
    base = np.zeros((6, 7), np.int16)
    for view in (base[::-2, 1::3], base[5:0:-1, ::-1], base[:, 3], base[2:2], base[::2, ::-3]):
        low, high = m.extent(view.shape, view.strides, 2)
        start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        if view.size == 0:
            assert (low, high) == (0, 0)
            continue
        touched = [start + sum(i * s for i, s in zip(idx, view.strides))
                   for idx in np.ndindex(view.shape)]
        assert (start + low, start + high) == (min(touched), max(touched) + 2)


# -- indexing ---------------------------------------------------------------------------------

SHAPE, STRIDES = (5, 6, 4), (96, 16, 4)


@pytest.mark.parametrize("index, offset", [(0, 0), (4, 384), (-1, 384), (-5, 0), (np.int64(2),
                                                                                    192)])
def test_int_index_at_both_ends(index, offset):
    assert m.index_layout(SHAPE, STRIDES, index) == (offset, (6, 4), (16, 4))


@pytest.mark.parametrize("index", [5, -6, 100, np.int32(-6)])
def test_int_index_one_past_either_end_is_refused(index):
    with pytest.raises(IndexError, match=f"index {int(index)} is out of bounds for axis 0 "
                                         f"with size 5"):
        m.index_layout(SHAPE, STRIDES, index)


def test_int_index_into_a_zero_length_axis_is_refused():
    with pytest.raises(IndexError, match="index 0 is out of bounds for axis 1 with size 0"):
        m.index_layout((3, 0), (0, 8), (1, 0))
    with pytest.raises(IndexError, match="index -1 is out of bounds for axis 0 with size 0"):
        m.index_layout((0,), (8,), -1)


@pytest.mark.parametrize("key", [slice(5, None), slice(10, 20), slice(3, 3), slice(4, 1),
                                 slice(None, None, -1), slice(-1, None, -2), slice(0, 0, -1),
                                 (slice(None), slice(6, None)), (1, slice(2, 2), 3)])
def test_slices_that_select_nothing_or_start_at_the_end_match_numpy(key):
    base = np.zeros(SHAPE, np.float32)
    expected = base[key]
    offset, shape, strides = m.index_layout(SHAPE, STRIDES, key)
    assert shape == expected.shape
    if expected.size:  # an empty view reads nothing: its strides and offset are free
        start = expected.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        assert (offset, strides) == (start, expected.strides)
    else:
        assert m.extent(shape, strides, 4) == (0, 0)


def test_empty_slices_never_move_the_offset():
    # slice(10, 20) on 5 rows: NumPy clamps the start to 5; a view of nothing must not
    # point 5 rows (one past the end) into the buffer.
    assert m.index_layout((5,), (8,), slice(10, 20)) == (0, (0,), (8,))
    assert m.index_layout((5,), (8,), slice(4, 1)) == (0, (0,), (8,))
    assert m.index_layout((5,), (8,), slice(4, 5)) == (32, (1,), (8,))
    assert m.index_layout((5,), (8,), slice(0, 0, -1)) == (0, (0,), (-8,))


@pytest.mark.parametrize("key, expected", [
    (None, (0, (1, 5, 6, 4), (0, 96, 16, 4))),
    ((None, None), (0, (1, 1, 5, 6, 4), (0, 0, 96, 16, 4))),
    ((Ellipsis, None), (0, (5, 6, 4, 1), (96, 16, 4, 0))),
    ((1, 2, 3), (96 + 32 + 12, (), ())),                  # exactly ndim indices
    ((1, 2, 3, Ellipsis), (140, (), ())),                 # ... standing for no axis
    ((Ellipsis, 1, 2, 3), (140, (), ())),
    ((1, Ellipsis, 3), (96 + 12, (6,), (16,))),
    ((), (0, (5, 6, 4), (96, 16, 4))),
    ((slice(None), None, 2), (32, (5, 1, 4), (96, 0, 4))),
])
def test_new_axes_and_ellipsis(key, expected):
    assert m.index_layout(SHAPE, STRIDES, key) == expected


@pytest.mark.parametrize("key, match", [
    ((1, 2, 3, 0), "too many indices: the array is 3-dimensional, but 4 were indexed"),
    ((1, None, 2, 3, 0), "but 4 were indexed"),
    ((Ellipsis, Ellipsis), "a single ellipsis"), ((0, Ellipsis, 1, Ellipsis), "single ellipsis"),
    (True, "boolean indices"), (np.bool_(False), "boolean indices"),
    (1.0, "got float"), ([0, 1], "got list"), (np.array([0]), "got ndarray"),
])
def test_indices_refused(key, match):
    with pytest.raises(IndexError, match=match):
        m.index_layout(SHAPE, STRIDES, key)


def test_zero_size_layouts_index_like_numpy():
    base = np.zeros((0, 3), np.float64)
    for key in (slice(None), (slice(None), 1), (Ellipsis, slice(1, None)), (None, slice(0, 0))):
        offset, shape, strides = m.index_layout((0, 3), (24, 8), key)
        assert shape == base[key].shape
        assert m.extent(shape, strides, 8) == (0, 0)


# -- reshape and item-size views --------------------------------------------------------------

@pytest.mark.parametrize("shape, new, expected", [
    ((0, 3), (-1,), (0,)), ((0, 3), (3, -1), (3, 0)), ((0, 3), (0, 5), (0, 5)),
    ((4, 6), (24,), (24,)), ((4, 6), 24, (24,)), ((4, 6), np.int64(24), (24,)),
    ((4, 6), (1, -1, 1), (1, 24, 1)), ((), (1, 1), (1, 1)), ((1,), (), ()),
    ((), -1, (1,)),
])
def test_reshape_at_zero_and_one(shape, new, expected):
    strides = m.c_strides(shape, 4)
    got_shape, got_strides = m.reshape_layout(shape, strides, 4, new)
    assert got_shape == expected and all(type(d) is int for d in got_shape)
    assert got_strides == m.c_strides(expected, 4)
    if 0 not in shape:
        b = np.zeros(shape, np.int32).reshape(new)
        assert (got_shape, got_strides) == (b.shape, b.strides)


@pytest.mark.parametrize("shape, new, match", [
    ((0, 3), (-1, 0), r"cannot reshape an array of size 0 into shape \(-1, 0\)"),
    ((4, 6), (5, -1), r"cannot reshape an array of size 24 into shape \(5, -1\)"),
    ((4, 6), (25,), r"cannot reshape an array of size 24 into shape \(25,\)"),
    ((4, 6), (23,), "size 24"),
    ((4, 6), (-1, -1), "only specify one unknown dimension"),
    ((4, 6), (-2, -12), r"negative dimension in shape \(-2, -12\)"),
    ((4, 6), (0, -1), "cannot reshape"),
])
def test_reshape_refused(shape, new, match):
    with pytest.raises(ValueError, match=match):
        m.reshape_layout(shape, m.c_strides(shape, 4), 4, new)


def test_reshape_needs_c_contiguous_but_ignores_length_one_axes():
    assert m.reshape_layout((1, 6), (999, 4), 4, (2, 3)) == ((2, 3), (12, 4))
    assert m.reshape_layout((0, 6), (4, 24), 4, (6, 0)) == ((6, 0), (4, 4))
    with pytest.raises(ValueError, match="reshape needs a C-contiguous buffer"):
        m.reshape_layout((2, 3), (4, 8), 4, (6,))


@pytest.mark.parametrize("shape, strides, old, new, expected", [
    ((3, 8), (8, 1), 1, 8, ((3, 1), (8, 8))),              # exactly one new item per row
    ((3, 8), (8, 1), 1, 4, ((3, 2), (8, 4))),
    ((3, 1), (16, 4), 4, 2, ((3, 2), (16, 2))),           # a length-1 last axis may be strided
    ((3, 2), (8, 4), 4, 4, ((3, 2), (8, 4))),             # same size: unchanged, any layout
    ((3, 2), (4, 12), 4, 4, ((3, 2), (4, 12))),
    ((5,), (2,), 2, 1, ((10,), (1,))),
    ((2, 0), (0, 4), 4, 8, ((2, 0), (0, 8))),             # zero-length last axis
])
def test_item_size_views(shape, strides, old, new, expected):
    got = m.view_layout(shape, strides, old, new)
    assert got == expected and all(type(d) is int for d in got[0])


@pytest.mark.parametrize("shape, strides, old, new, match", [
    ((3, 7), (7, 1), 1, 8, "the last axis is 7 bytes long, which is not a multiple of the new "
                           "item size 8"),
    ((3, 9), (9, 1), 1, 8, "9 bytes long"),
    ((3, 2), (8, -4), 4, 2, "the last axis must be contiguous"),
    ((3, 2), (8, 8), 4, 2, "the last axis must be contiguous"),
    ((), (), 4, 2, "cannot view a 0-d buffer of 4-byte items with 2-byte items"),
])
def test_item_size_views_refused(shape, strides, old, new, match):
    with pytest.raises(ValueError, match=match):
        m.view_layout(shape, strides, old, new)


# -- the allocation layout cache --------------------------------------------------------------

def test_allocation_layouts_at_zero_size_and_their_cache():
    shape, strides, dt, itemsize, size, nbytes, ndim, *_ = m._layout((2, 0, 3), "f8")
    assert (shape, strides, dt, itemsize, size, nbytes, ndim) == (
        (2, 0, 3), (24, 24, 8), np.dtype("f8"), 8, 0, 0, 3)
    assert m._layout(5, np.float32)[:7] == ((5,), (4,), np.dtype("f4"), 4, 5, 20, 1)
    assert m._layout((), "u2")[:7] == ((), (), np.dtype("u2"), 2, 1, 2, 0)
    # Equal keys that are not the same request: 2.0 is refused even after (2,) was cached.
    m._layout((2,), "f4")
    with pytest.raises(TypeError, match="shape"):
        m._layout((2.0,), "f4")
    assert m._exact_shape(3) and m._exact_shape((1, 2)) and m._exact_shape(())
    for inexact in ((1, 2.0), [1], (np.int64(1),), True, (True,), 2.0):
        assert m._exact_shape(inexact) is False


def test_the_layout_cache_returns_only_what_was_asked(monkeypatch):
    monkeypatch.setattr(m, "_layouts", {})
    first = m._layout((2, 3), "f4")
    assert m._layout((2, 3), "f4") is first                 # a hit: the same tuple
    assert m._layout(tuple([2, 3]), "f4") is first           # an equal exact shape hits too
    assert m._layout((2, 3), np.dtype("f4"))[:7] == first[:7]
    # Unhashable requests are answered, not cached.
    before = dict(m._layouts)
    assert m._layout([2, 3], "f4")[:7] == first[:7]
    assert m._layout((2, 3), [("a", "f4")])[0] == (2, 3)
    assert m._layouts == before
    # A dtype with metadata equals (and hashes as) the plain one, but is its own request:
    # answered with its own dtype, never cached, and the plain entry stays plain.
    meta = np.dtype("f4", metadata={"unit": "m"})
    got = m._layout((2, 3), meta)
    assert got[2] is meta and got[2].metadata == {"unit": "m"}
    assert m._layout((2, 3), "f4") is first and first[2].metadata is None
    m._layout((4,), meta)
    assert m._layout((4,), "f4")[2].metadata is None
    # An equal but inexact shape is refused even though (2, 3) is cached.
    with pytest.raises(TypeError):
        m._layout((2.0, 3), "f4")


def test_the_layout_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(m, "_layouts", {})
    for n in range(1, m._LAYOUTS_MAX + 1):
        m._layout((n,), "u1")
    assert len(m._layouts) == m._LAYOUTS_MAX
    m._layout((m._LAYOUTS_MAX + 1,), "u1")                  # full: cleared, then stored
    assert len(m._layouts) == 1
