"""GPU lane: every ready kernel on the device against NumPy, with fresh random inputs,
odd sizes (1, one past a tile, millions) and poisoned outputs; foreign (CuPy) arrays and
streams. A module whose intrinsics the compiler cannot lower yet is skipped, saying
which."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from kernels_helpers import (mandelbrot_reference, poison, random_array, require_lowering,
                             sorted_reference)

pytestmark = pytest.mark.gpu


def dev(a):
    from cupric.runtime import to_device
    return to_device(a)


def host(d):
    from cupric.runtime import synchronize
    synchronize()
    return d.to_numpy()


@pytest.mark.parametrize("n", [1, 1027, 1_000_003])
@pytest.mark.parametrize("dtype", ["f4", "f8", "i4", "f2", "u1"])
def test_elementwise(rng, n, dtype):
    require_lowering("elementwise")
    from cupric.kernels import elementwise
    a, b = random_array(rng, n, dtype), random_array(rng, n, dtype)
    da, db, out = dev(a), dev(b), dev(poison(n, dtype))
    elementwise.vecadd(da, db, out=out)
    np.testing.assert_array_equal(host(out), a + b)
    alpha = 3 if dtype != "u1" else 2
    elementwise.saxpy(alpha, da, db, out=db)  # in place
    if dtype == "f2":
        # float16 arithmetic happens in float32, rounded once at the store.
        expect = (np.float32(alpha) * a.astype(np.float32) + b.astype(np.float32)) \
            .astype(np.float16)
        np.testing.assert_allclose(host(db), expect, rtol=1e-3)
    elif np.dtype(dtype).kind == "f":
        # A fused multiply-add differs from NumPy's two roundings by up to an ulp of the
        # product, which is large next to a result near zero.
        expect = np.dtype(dtype).type(alpha) * a + b
        atol = 4 * np.finfo(dtype).eps * float(np.abs(alpha * a).max())
        np.testing.assert_allclose(host(db), expect, rtol=4 * np.finfo(dtype).eps,
                                   atol=atol)
    else:
        np.testing.assert_array_equal(host(db), np.dtype(dtype).type(alpha) * a + b)
    np.testing.assert_array_equal(host(elementwise.memcpy(da)), a)
    filled = dev(poison((3, n), dtype))
    elementwise.fill(filled, 7)
    assert (host(filled) == 7).all()


@cupric.device_function
def _blend(x, y, t):
    return x + t * (y - x)


def test_map(rng):
    require_lowering("elementwise")
    from cupric.kernels import elementwise
    n = 100_003
    x, y = random_array(rng, n, "f4"), random_array(rng, n, "f4")
    t = rng.random(n).astype(np.float32)
    got = host(elementwise.map(_blend, dev(x), dev(y), dev(t)))
    np.testing.assert_allclose(got, x + t * (y - x), rtol=1e-5, atol=1e-5)


def test_foreign_arrays_and_streams(rng):
    require_lowering("reduce")
    cp = pytest.importorskip("cupy")
    from cupric.kernels import elementwise, reduce
    from cupric.runtime import current_device
    x = cp.asarray(random_array(rng, 50_001, "f4"))
    y = cp.asarray(random_array(rng, 50_001, "f4"))
    out = cp.full(50_001, cp.nan, dtype=cp.float32)
    stream = current_device().create_stream()
    assert elementwise.vecadd(x, y, out=out, stream=stream) is out
    total = reduce.sum(out, stream=stream)
    stream.synchronize()
    cp.testing.assert_array_equal(out, x + y)
    np.testing.assert_allclose(total.to_numpy(), float((x + y).sum()), rtol=1e-4)


def test_image(rng):
    require_lowering("image")
    from cupric.kernels import image
    img = rng.integers(0, 256, (1001, 777, 4), dtype=np.uint8)
    out = dev(poison((1001, 777), "u1"))
    image.rgba2gray(dev(img), out=out)
    weights = np.array(image.GRAY_WEIGHTS, np.float32)
    expect = np.floor(img[..., :3].astype(np.float32) @ weights + np.float32(0.5))
    assert np.abs(host(out).astype(int) - expect.astype(int)).max() <= 1
    fimg = rng.random((301, 203, 4)).astype(np.float32)
    np.testing.assert_allclose(host(image.rgba2gray(dev(fimg))), fimg[..., :3] @ weights,
                               rtol=1e-5, atol=1e-6)
    got = host(image.mandelbrot(1001, 513, max_iter=100, out=dev(poison((513, 1001),
                                                                         "u1"))))
    expect = mandelbrot_reference(1001, 513, (-0.5, 0.0), 3.0, 100)
    assert np.mean(got != expect) < 0.01


@pytest.mark.parametrize("n", [1, 1025, 1_000_003, (1 << 22) + 7])
@pytest.mark.parametrize("dtype", ["f4", "f8", "i4", "u8", "i2"])
def test_reductions(rng, n, dtype):
    require_lowering("reduce")
    from cupric.kernels import reduce
    x = random_array(rng, n, dtype)
    dx = dev(x)
    out = dev(poison((), np.sum(x[:1]).dtype))
    reduce.sum(dx, out=out)
    tol = {"f4": 1e-4, "f8": 1e-12}.get(dtype, 0)
    np.testing.assert_allclose(host(out).astype(np.float64), x.astype(np.float64).sum(),
                               rtol=tol, atol=tol * 100)
    assert host(reduce.min(dx))[()] == x.min()
    assert host(reduce.max(dx))[()] == x.max()
    assert host(reduce.argmin(dx))[()] == x.argmin()
    assert host(reduce.argmax(dx))[()] == x.argmax()


def test_reductions_float16(rng):
    require_lowering("reduce")
    from cupric.kernels import reduce
    x = random_array(rng, 100_003, "f2")
    dx = dev(x)
    got = host(reduce.sum(dx))
    assert got.dtype == np.float16
    np.testing.assert_allclose(float(got), x.astype(np.float64).sum(), rtol=2e-3, atol=0.5)
    assert host(reduce.min(dx))[()] == x.min() and host(reduce.max(dx))[()] == x.max()
    assert host(reduce.argmin(dx))[()] == x.argmin()
    # Small values: the dot product of 10^5 products must fit in float16 (< 65504).
    a = (rng.standard_normal(100_003) / 4).astype(np.float16)
    b = (rng.standard_normal(100_003) / 4).astype(np.float16)
    np.testing.assert_allclose(float(host(reduce.dot(dev(a), dev(b)))),
                               a.astype(np.float64) @ b.astype(np.float64), rtol=1e-2,
                               atol=0.5)


def test_reductions_nan_and_dot(rng):
    require_lowering("reduce")
    from cupric.kernels import reduce
    x = random_array(rng, 2_000_001, "f4")
    x[[1_500_000, 70]] = x.min() - 1
    assert host(reduce.argmin(dev(x)))[()] == 70
    x[[1_999_999, 123_456]] = np.nan
    dx = dev(x)
    assert np.isnan(host(reduce.max(dx))[()])
    assert host(reduce.argmax(dx))[()] == 123_456
    a, b = random_array(rng, 3_000_017, "f8"), random_array(rng, 3_000_017, "f8")
    np.testing.assert_allclose(host(reduce.dot(dev(a), dev(b))), a @ b, rtol=1e-10)


@pytest.mark.parametrize("n", [1, 3 * 3840 + 1, 1_000_003, (1 << 24) + 5])
def test_scans(rng, n):
    require_lowering("scan")
    from cupric.kernels import scan
    x = random_array(rng, n, "i4")
    dx = dev(x)
    out = dev(poison(n, "i8"))
    scan.inclusive_scan(dx, out=out)
    np.testing.assert_array_equal(host(out), np.cumsum(x))
    ex = scan.exclusive_scan(dx, dtype=np.int32)
    expect = np.zeros(n, np.int32)
    expect[1:] = np.cumsum(x, dtype=np.int32)[:-1]
    np.testing.assert_array_equal(host(ex), expect)
    f = rng.random(n).astype(np.float32)
    got = host(scan.inclusive_scan(dev(f)))
    np.testing.assert_allclose(got, np.cumsum(f, dtype=np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, dtype", [((1025, 2047), "f4"), ((3, 100_001), "i2"),
                                          ((1, 1), "f8"), ((4097, 33), "u8")])
def test_transpose(rng, shape, dtype):
    require_lowering("transpose")
    from cupric.kernels import transpose
    a = random_array(rng, shape, dtype)
    for tile_dim in (32, 64):
        out = dev(poison(shape[::-1], dtype))
        transpose.transpose(dev(a), out=out, tile_dim=tile_dim)
        np.testing.assert_array_equal(host(out), a.T)


@pytest.mark.parametrize("algorithm", ["blocked", "tiled"])
@pytest.mark.parametrize("dtype", ["f4", "f8"])
def test_gemm(rng, algorithm, dtype):
    require_lowering("gemm")
    from cupric.kernels import gemm
    m, n, k = 513, 1027, 259
    a, b = random_array(rng, (m, k), dtype), random_array(rng, (k, n), dtype)
    out = dev(poison((m, n), dtype))
    gemm.gemm(dev(a), dev(b), out, algorithm=algorithm)
    expect = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-4 if dtype == "f4" else 1e-12
    np.testing.assert_allclose(host(out), expect, rtol=tol, atol=tol * 100)
    c = random_array(rng, (m, n), dtype)
    dc = dev(c)
    gemm.gemm(dev(a), dev(b), dc, alpha=0.5, beta=-2.0, algorithm=algorithm)
    np.testing.assert_allclose(host(dc), 0.5 * expect - 2.0 * c, rtol=tol, atol=tol * 100)
    # A transposed view (F-ordered operand) gives the same product.
    bt = dev(np.ascontiguousarray(b.T)).transpose()
    np.testing.assert_allclose(host(gemm.gemm(dev(a), bt, algorithm=algorithm)), expect,
                               rtol=tol, atol=tol * 100)


@pytest.mark.parametrize("algorithm", ["bitonic_sort", "radix_sort"])
@pytest.mark.parametrize("dtype", ["u4", "i4", "f4"])
@pytest.mark.parametrize("n", [1, 2049, 4097, 8192, 8193, 1_000_003])
def test_sorts(rng, algorithm, dtype, n):
    require_lowering("sort")
    from cupric.kernels import sort
    if dtype == "f4":
        x = random_array(rng, n, dtype)
        x[rng.integers(0, n, 3)] = np.nan
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    for descending in (False, True):
        out = dev(poison(n, dtype))
        getattr(sort, algorithm)(dev(x), out, descending=descending)
        np.testing.assert_array_equal(host(out), sorted_reference(x, descending))


@pytest.mark.parametrize("dtype, bins, range_", [("f4", 256, (-30, 30)), ("u1", 256, None),
                                                  ("f8", 5000, (-40.0, 40.0))])
def test_histogram(rng, dtype, bins, range_):
    require_lowering("histogram")
    from cupric.kernels import histogram
    x = random_array(rng, 1_000_003, dtype, low=0, high=255) if dtype == "u1" else \
        random_array(rng, 1_000_003, dtype)
    out = dev(poison(bins, "i8"))
    _, edges = histogram.histogram(dev(x), bins, range_, out=out)
    expect, expect_edges = np.histogram(x, bins, range_)
    np.testing.assert_array_equal(host(out), expect)
    np.testing.assert_array_equal(edges, expect_edges)


def _record_grids(monkeypatch):
    """Grids of the ready kernels' launches, recorded on the way to the real launch: every
    GPU launch goes through `launch_now`, from `Call.launch` or from a cached plan."""
    from cupric.kernels import _common, elementwise
    grids = []
    launch = _common.launch_now

    def recording(kern, grid, block, stream, shared_bytes, args):
        grids.append((grid, block))
        return launch(kern, grid, block, stream, shared_bytes, args)
    for module in (_common, elementwise):
        monkeypatch.setattr(module, "launch_now", recording)
    return grids


def test_elementwise_covering_grid(rng, monkeypatch):
    # vecadd, saxpy, memcpy and fill on items of 4 bytes or more launch a grid covering
    # the array once (four elements a thread), past the WAVES_PER_SM cap of blocks_for;
    # the n % 4 tail elements go to the first threads. Smaller items, the one-element
    # kernels (float16 arithmetic, map) and rgba2gray keep the bounded grid.
    require_lowering("elementwise")
    from cupric.kernels import elementwise, image
    from cupric.kernels._common import WAVES_PER_SM, blocks_for, sm_count
    n = (1 << 22) + 3
    wide = elementwise.STREAM_BLOCK
    stream_grid, quads_grid = -(-n // (wide * 4)), -(-n // (256 * 4))
    bounded4, bounded1 = blocks_for(n, 256, 4), blocks_for(n, 256)
    assert quads_grid > WAVES_PER_SM * sm_count() == bounded4
    grids = _record_grids(monkeypatch)
    a, b = random_array(rng, n, "f4"), random_array(rng, n, "f4")
    da, db, out = dev(a), dev(b), dev(poison(n, "f4"))
    elementwise.vecadd(da, db, out=out)
    np.testing.assert_array_equal(host(out), a + b)
    elementwise.saxpy(2.0, da, db, out=out)
    np.testing.assert_allclose(host(out), 2 * a + b, rtol=1e-6, atol=1e-5)
    elementwise.memcpy(db, out=out)
    np.testing.assert_array_equal(host(out), b)
    elementwise.fill(out, -3.5)
    assert (host(out) == -3.5).all()
    d = random_array(rng, n, "f8")
    np.testing.assert_array_equal(host(elementwise.vecadd(dev(d), dev(d))), d + d)
    assert grids == [(stream_grid, wide)] * 2 + [(quads_grid, 256)] * 2 + \
        [(stream_grid, wide)]
    grids.clear()
    got = host(elementwise.map(_blend, da, db, db))
    np.testing.assert_allclose(got, a + b * (b - a), rtol=1e-5, atol=1e-3)
    half = random_array(rng, n, "f2")
    np.testing.assert_array_equal(host(elementwise.vecadd(dev(half), dev(half))), half + half)
    small = random_array(rng, n, "u1")
    np.testing.assert_array_equal(host(elementwise.vecadd(dev(small), dev(small))),
                                  small + small)
    img = rng.integers(0, 256, (1, n, 4), dtype=np.uint8)
    gray = host(image.rgba2gray(dev(img)))
    weights = np.array(image.GRAY_WEIGHTS, np.float32)
    expect = np.floor(img[..., :3].astype(np.float32) @ weights + np.float32(0.5))
    assert np.abs(gray.astype(int) - expect.astype(int)).max() <= 1
    assert grids == [(bounded1, 256)] * 2 + [(bounded4, 256)] * 2


def test_elementwise_kernels_on_small_grids(rng):
    # Launched by hand on grids far smaller than the array, every thread loops (two
    # groups a grid apart per trip, then one group, then the tail): the paths the host
    # functions' covering grids leave unused on the GPU.
    require_lowering("elementwise")
    from cupric.kernels import elementwise as ew
    n = 100_003
    a, b = random_array(rng, n, "f4"), random_array(rng, n, "f4")
    da, db = dev(a), dev(b)
    for blocks in (1, 3, 7):
        out = dev(poison(n, "f4"))
        ew.vecadd_kernel[blocks, 256](da, db, out)
        np.testing.assert_array_equal(host(out), a + b)
        ew.saxpy_kernel[blocks, 256](np.float32(3), da, db, out)
        np.testing.assert_allclose(host(out), 3 * a + b, rtol=1e-6, atol=1e-5)
        ew.copy_kernel[blocks, 256](da, out)
        np.testing.assert_array_equal(host(out), a)
        ew.fill_kernel[blocks, 256](out, np.float32(0.25))
        assert (host(out) == 0.25).all()


@pytest.mark.parametrize("dtype", ["f4", "u1", "f2"])
def test_elementwise_unaligned_views(rng, dtype):
    # Views starting 1 to 3 elements into CuPy arrays (not 16-byte aligned: the kernels
    # are compiled without 128-bit accesses), odd lengths; the elements around the
    # output view keep their values.
    require_lowering("elementwise")
    cp = pytest.importorskip("cupy")
    from cupric.kernels import elementwise
    n = 1_000_003
    base_a = random_array(rng, n + 8, dtype)
    base_b = random_array(rng, n + 8, dtype)
    ga, gb = cp.asarray(base_a), cp.asarray(base_b)
    for off in (1, 2, 3):
        o = (off + 1) % 4
        a, b = base_a[off:off + n], base_b[3 - off:3 - off + n]
        va, vb = ga[off:off + n], gb[3 - off:3 - off + n]
        guard = poison(n + 8, dtype)
        gout = cp.asarray(guard)
        out = gout[o:o + n]
        elementwise.vecadd(va, vb, out=out)
        cp.cuda.Device().synchronize()
        got = cp.asnumpy(gout)
        np.testing.assert_array_equal(got[o:o + n], a + b)
        np.testing.assert_array_equal(got[:o].view(np.uint8), guard[:o].view(np.uint8))
        np.testing.assert_array_equal(got[o + n:].view(np.uint8),
                                      guard[o + n:].view(np.uint8))
        elementwise.memcpy(va, out=out)
        if o:
            elementwise.fill(gout[:o], 1)
        cp.cuda.Device().synchronize()
        got = cp.asnumpy(gout)
        np.testing.assert_array_equal(got[o:o + n], a)
        assert (got[:o] == 1).all()
        np.testing.assert_array_equal(got[o + n:].view(np.uint8),
                                      guard[o + n:].view(np.uint8))
        if dtype != "u1":
            elementwise.saxpy(2, va, vb, out=out)
            cp.cuda.Device().synchronize()
            tol = 1e-3 if dtype == "f2" else 1e-6
            np.testing.assert_allclose(cp.asnumpy(out).astype(np.float64),
                                       2.0 * a.astype(np.float64) + b, rtol=tol,
                                       atol=tol * 50)
