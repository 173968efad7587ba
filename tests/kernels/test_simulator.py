"""CPU lane: every ready kernel runs on the CPU simulator through its host function, at
small odd sizes, with fresh random inputs and poisoned outputs, against NumPy; argument
errors are checked without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.kernels import (elementwise, gemm, histogram, image, reduce, scan, sort,
                            transpose)

from kernels_helpers import mandelbrot_reference, poison, random_array, sorted_reference

pytestmark = pytest.mark.usefixtures("sim")


@pytest.mark.parametrize("dtype", ["f4", "f8", "i4", "u8", "f2"])
def test_vecadd_saxpy_memcpy(rng, dtype):
    a = random_array(rng, 1037, dtype)
    b = random_array(rng, 1037, dtype)
    out = poison(1037, dtype)
    assert elementwise.vecadd(a, b, out=out) is out
    np.testing.assert_array_equal(out, a + b)
    got = elementwise.saxpy(3, a, b)
    tol = {"f2": 1e-3, "f4": 1e-6, "f8": 1e-14}.get(dtype, 0)
    np.testing.assert_allclose(got, a * np.dtype(dtype).type(3) + b, rtol=tol,
                               atol=tol * 10)
    np.testing.assert_array_equal(elementwise.memcpy(a), a)


def test_elementwise_two_groups_per_trip(rng):
    # Past two grids of groups of four (SIMULATOR_MAX_BLOCKS blocks): every path of the
    # grid-stride loops.
    from cupric.kernels._common import SIMULATOR_MAX_BLOCKS
    n = 2 * 4 * SIMULATOR_MAX_BLOCKS * elementwise.STREAM_BLOCK + 37
    assert n > 2 * 4 * SIMULATOR_MAX_BLOCKS * elementwise.BLOCK
    a, b = random_array(rng, n, "f4"), random_array(rng, n, "f4")
    np.testing.assert_array_equal(elementwise.vecadd(a, b), a + b)
    np.testing.assert_allclose(elementwise.saxpy(2, a, b), 2 * a + b, rtol=1e-6)
    np.testing.assert_array_equal(elementwise.memcpy(a), a)
    np.testing.assert_allclose(reduce.sum(a), a.astype(np.float64).sum(), rtol=1e-4)
    assert reduce.max(a)[()] == a.max()
    a[[5000, 6001]] = a.max() + 1  # a tie across threads: the first index wins
    assert reduce.argmax(a)[()] == 5000
    img = rng.integers(0, 256, (n, 4), dtype=np.uint8).reshape(1, n, 4)
    gray = image.rgba2gray(img)
    weights = np.array(image.GRAY_WEIGHTS, np.float32)
    expect = np.floor(img[..., :3].astype(np.float32) @ weights + np.float32(0.5))
    assert np.abs(gray.astype(int) - expect.astype(int)).max() <= 1


def test_elementwise_shapes_and_fill(rng):
    a = random_array(rng, (7, 9), "f4")
    b = random_array(rng, (7, 9), "f4")
    np.testing.assert_array_equal(elementwise.vecadd(a, b), a + b)
    out = poison((5, 3), "i2")
    elementwise.fill(out, -7)
    assert (out == -7).all()
    empty = np.empty(0, np.float32)
    assert elementwise.vecadd(empty, empty).shape == (0,)


@cupric.device_function
def _poly(x, y):
    return x * x - 2 * y


def test_map(rng):
    x = random_array(rng, 301, "f8")
    y = random_array(rng, 301, "f8")
    np.testing.assert_allclose(elementwise.map(_poly, x, y), x * x - 2 * y, rtol=1e-14)
    out = poison(301, "f4")
    elementwise.map(_poly, x, y, out=out)
    np.testing.assert_allclose(out, (x * x - 2 * y).astype(np.float32), rtol=1e-6)


def test_elementwise_errors(rng, monkeypatch):
    a = random_array(rng, 10, "f4")
    with pytest.raises(TypeError, match="b has dtype float64, but a has float32"):
        elementwise.vecadd(a, a.astype(np.float64))
    with pytest.raises(ValueError, match="shape"):
        elementwise.vecadd(a, a[:9])
    with pytest.raises(ValueError, match="C-contiguous"):
        elementwise.vecadd(np.ones((4, 4), np.float32).T, np.ones((4, 4), np.float32))
    with pytest.raises(TypeError, match="not an integer"):
        elementwise.saxpy(0.5, np.ones(3, np.int32), np.ones(3, np.int32))
    with pytest.raises(ValueError, match="does not fit"):
        elementwise.fill(np.ones(3, np.uint8), 300)
    with pytest.raises(TypeError, match="device_function"):
        elementwise.map(abs, a)
    # With a GPU, host arrays are refused with the way to copy them.
    monkeypatch.setattr("cupric.kernels._common.on_simulator", lambda: False)
    with pytest.raises(TypeError, match=r"host NumPy array; copy it to the device first"):
        elementwise.vecadd(a, a)


def test_rgba2gray(rng):
    img = rng.integers(0, 256, (13, 17, 4), dtype=np.uint8)
    out = poison((13, 17), "u1")
    image.rgba2gray(img, out=out)
    weights = np.array(image.GRAY_WEIGHTS, np.float32)
    expect = np.floor(img[..., :3].astype(np.float32) @ weights + np.float32(0.5))
    assert np.abs(out.astype(int) - expect.astype(int)).max() <= 1
    fimg = img.astype(np.float64) / 255
    np.testing.assert_allclose(image.rgba2gray(fimg), fimg[..., :3] @ weights.astype(
        np.float64), rtol=1e-6)
    with pytest.raises(ValueError, match=r"\(height, width, 4\)"):
        image.rgba2gray(img[..., :3].copy())


def test_mandelbrot():
    got = image.mandelbrot(33, 21, max_iter=40)
    assert got.shape == (21, 33) and got.dtype == np.uint8
    expect = mandelbrot_reference(33, 21, (-0.5, 0.0), 3.0, 40)
    # Points on the boundary may escape one iteration apart (FMA on the GPU).
    assert np.mean(got != expect) < 0.02


@pytest.mark.parametrize("dtype", ["f4", "f8", "i4", "u2", "f2", "?"])
def test_reductions(rng, dtype):
    x = random_array(rng, 1531, dtype)
    tol = {"f2": 2e-2, "f4": 1e-5, "f8": 1e-12}.get(dtype, 0)
    got = reduce.sum(x)
    assert got.dtype == x.sum().dtype
    np.testing.assert_allclose(got.astype(np.float64), x.astype(np.float64).sum(),
                               rtol=tol, atol=tol * 100)
    if dtype != "?":
        assert reduce.min(x)[()] == x.min() and reduce.max(x)[()] == x.max()
    assert reduce.argmin(x)[()] == x.argmin() and reduce.argmax(x)[()] == x.argmax()


def test_reductions_nan_ties_and_dot(rng):
    x = random_array(rng, 777, "f4")
    x[[100, 400]] = x.min() - 1  # ties: the first index wins
    assert reduce.argmin(x)[()] == 100
    x[[300, 650]] = np.nan
    assert np.isnan(reduce.min(x)[()]) and np.isnan(reduce.max(x)[()])
    assert reduce.argmin(x)[()] == 300 and reduce.argmax(x)[()] == 300
    a, b = random_array(rng, 999, "f8"), random_array(rng, 999, "f8")
    out = poison((), "f8")
    reduce.dot(a, b, out=out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    with pytest.raises(ValueError, match="empty"):
        reduce.min(np.empty(0, np.float32))
    assert reduce.sum(np.empty(0, np.int32))[()] == 0


@pytest.mark.parametrize("n", [1, 3839, 3841 + 3840])
def test_scans(rng, n):
    x = random_array(rng, n, "i4")
    out = poison(n, "i8")
    scan.inclusive_scan(x, out=out)
    np.testing.assert_array_equal(out, np.cumsum(x))
    ex = scan.exclusive_scan(x, dtype=np.int32)
    np.testing.assert_array_equal(ex, np.concatenate([[0], np.cumsum(x)[:-1]]))
    f = random_array(rng, n, "f4")
    np.testing.assert_allclose(scan.inclusive_scan(f), np.cumsum(f, dtype=np.float64),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape, dtype", [((37, 70), "f4"), ((64, 3), "i8"), ((1, 1), "u1")])
def test_transpose(rng, shape, dtype):
    a = random_array(rng, shape, dtype)
    out = poison(shape[::-1], dtype)
    transpose.transpose(a, out=out)
    np.testing.assert_array_equal(out, a.T)
    view = random_array(rng, (40, 50), dtype)[::3, 5:]
    np.testing.assert_array_equal(transpose.transpose(view), view.T)
    np.testing.assert_array_equal(transpose.transpose(a, tile_dim=64), a.T)


@pytest.mark.parametrize("algorithm", ["blocked", "tiled"])
def test_gemm(rng, algorithm):
    a = random_array(rng, (67, 19), "f4")
    b = random_array(rng, (19, 131), "f4")
    out = poison((67, 131), "f4")
    gemm.gemm(a, b, out, algorithm=algorithm)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3)
    c = random_array(rng, (5, 7), "f8")
    a2, b2 = random_array(rng, (5, 11), "f8"), random_array(rng, (11, 7), "f8")
    expect = 2 * a2 @ b2 - 0.5 * c
    gemm.dgemm(a2, b2, c, alpha=2.0, beta=-0.5)
    np.testing.assert_allclose(c, expect, rtol=1e-12)
    # A transposed (column-major) operand takes the strided kernel.
    bt = np.ascontiguousarray(b.T).T
    np.testing.assert_allclose(gemm.gemm(a, bt, algorithm=algorithm), a @ b, rtol=1e-4,
                               atol=1e-3)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm.gemm(a, a)
    with pytest.raises(TypeError, match="float32"):
        gemm.sgemm(a2, b2)


@pytest.mark.parametrize("algorithm", ["bitonic_sort", "radix_sort"])
@pytest.mark.parametrize("dtype", ["u4", "i4", "f4"])
def test_sorts(rng, algorithm, dtype):
    n = 2500
    if dtype == "f4":
        x = random_array(rng, n, dtype)
        x[[3, 70]] = np.nan
        x[5] = -0.0
        x[6] = np.inf
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    descending = dtype == "i4"
    out = poison(n, dtype)
    getattr(sort, algorithm)(x, out, descending=descending)
    np.testing.assert_array_equal(out, sorted_reference(x, descending))


def test_sort_small_and_in_place(rng):
    x = random_array(rng, 7, "f4")
    expect = np.sort(x)
    sort.bitonic_sort(x, x)
    np.testing.assert_array_equal(x, expect)
    y = random_array(rng, 5, "i4")
    np.testing.assert_array_equal(sort.radix_sort(y, descending=True), np.sort(y)[::-1])
    with pytest.raises(TypeError, match="float64"):
        sort.radix_sort(np.ones(3))


@pytest.mark.parametrize("dtype, bins, range_", [("f4", 37, (-20, 30)), ("i4", 10, None),
                                                  ("f8", 5000, (-40.0, 40.0))])
def test_histogram(rng, dtype, bins, range_):
    x = random_array(rng, 2049, dtype)
    if dtype == "f4":
        x[9] = np.nan
    out = poison(bins, "i8")
    counts, edges = histogram.histogram(x, bins, range_, out=out)
    expect, expect_edges = np.histogram(x, bins, range_)
    assert counts is out
    np.testing.assert_array_equal(out, expect)
    np.testing.assert_array_equal(edges, expect_edges)
