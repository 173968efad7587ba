"""GPU lane: the ready kernels' faster host path on the device: CuPy arrays read through
the array adapters (N-d, producers on other streams), per-dtype plans across dtype and
size changes, the radix sort's scratch kept in the workspace (grown, reused by smaller
sorts, per call past the limit) and shared by sorts on several streams and threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kernels_helpers import random_array, require_lowering

pytestmark = pytest.mark.gpu


def _host(d):
    from cupric.runtime import synchronize
    synchronize()
    return d.to_numpy()


def test_cupy_nd_arrays_and_a_producer_stream(rng):
    require_lowering("scan")
    cp = pytest.importorskip("cupy")
    from cupric.kernels import elementwise, reduce, scan
    a, b = random_array(rng, (33, 1001), "f4"), random_array(rng, (33, 1001), "f4")
    producer = cp.cuda.Stream(non_blocking=True)
    with producer:
        # Written on a non-blocking CuPy stream: the kernels' stream must wait for it.
        x = cp.asarray(a) * 1
        y = cp.asarray(b) * 1
        out = cp.full(a.shape, cp.nan, dtype=cp.float32)
        assert elementwise.vecadd(x, y, out=out) is out
        total = reduce.sum(out)
        running = scan.inclusive_scan(out.ravel())
    producer.synchronize()
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), a + b)
    c = (a + b).astype(np.float64)
    np.testing.assert_allclose(_host(total), c.sum(), rtol=0, atol=1e-5 * np.abs(c).sum())
    np.testing.assert_allclose(_host(running), np.cumsum(c.ravel()), rtol=0,
                               atol=1e-5 * np.abs(c).sum())


def test_plans_across_dtypes_and_sizes(rng):
    require_lowering("scan")
    from cupric.kernels import reduce, scan
    from cupric.runtime import to_device
    for n, dtype in ((5000, "f4"), (70_001, "f8"), (3, "i2"), (5000, "f4"), (1 << 20, "u4")):
        a = random_array(rng, n, dtype)
        got = _host(reduce.sum(to_device(a)))
        scanned = _host(scan.inclusive_scan(to_device(a)))
        if a.dtype.kind == "f":
            scale = np.abs(a.astype(np.float64)).sum()
            atol = scale * (1e-5 if dtype == "f4" else 1e-12)
            np.testing.assert_allclose(got, a.astype(np.float64).sum(), rtol=0, atol=atol)
            np.testing.assert_allclose(scanned, np.cumsum(a.astype(np.float64)), rtol=0,
                                       atol=atol)
        else:  # integers sum exactly (in 64 bits, as NumPy)
            assert got == a.sum() and got.dtype == a.sum().dtype
            np.testing.assert_array_equal(scanned, np.cumsum(a))


def test_radix_sort_workspace_sizes(rng, monkeypatch):
    require_lowering("sort")
    from cupric.kernels import _common, sort
    from cupric.runtime import current_device, to_device
    stream = current_device().create_stream()
    # Grown, reused by a smaller sort (a view of the bigger scratch), grown again, and
    # past the workspace limit allocated per call.
    monkeypatch.setattr(sort, "RADIX_WORKSPACE_KEYS", 300_000)
    # Earlier sorts of this process (under the default limit) may have grown it already.
    before = _common._workspace(_common.device_ordinal()).arrays.get("radix.keys")
    before = 0 if before is None else before.size
    for n, dtype, descending in ((5000, "u4", False), (200_003, "f4", False),
                                 (2049, "i4", True), (299_999, "i4", False),
                                 (1_000_003, "f4", True), (7, "u4", False)):
        a = random_array(rng, n, dtype)
        keys = to_device(a)
        out = sort.radix_sort(keys, descending=descending, stream=stream)
        stream.synchronize()
        expect = np.sort(a)[::-1] if descending else np.sort(a)
        np.testing.assert_array_equal(out.to_numpy(), expect)
        np.testing.assert_array_equal(keys.to_numpy(), a)  # the input is untouched
    scratch = _common._workspace(_common.device_ordinal()).arrays["radix.keys"]
    # Grown for the sorts within the limit, never for the one past it.
    assert 299_999 <= scratch.size <= max(before, 2 * 300_000)


def test_radix_sorts_on_several_streams_and_threads(rng):
    require_lowering("sort")
    from cupric.kernels import sort
    from cupric.runtime import current_device, to_device
    device = current_device()
    inputs = [random_array(rng, n, "u4") for n in (100_000, 3_001, 250_000)]
    errors, results = [], {}

    def worker(index):
        try:
            stream = device.create_stream()
            keys = to_device(inputs[index])
            outs = [sort.radix_sort(keys, stream=stream) for _ in range(5)]
            stream.synchronize()
            results[index] = [o.to_numpy() for o in outs]
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for index, outs in results.items():
        for out in outs:
            np.testing.assert_array_equal(out, np.sort(inputs[index]))


def test_histogram_plans(rng):
    require_lowering("histogram")
    cp = pytest.importorskip("cupy")
    from cupric.kernels import histogram
    data = random_array(rng, 100_000, "u1")
    x = cp.asarray(data)
    for bins, range_ in ((256, (0, 256)), (10, (0, 100)), (256, (0, 256))):
        counts, edges = histogram.histogram(x, bins, range_)
        expect_counts, expect_edges = np.histogram(data, bins, range_)
        np.testing.assert_array_equal(_host(counts), expect_counts)
        np.testing.assert_array_equal(edges, expect_edges)
        edges[:] = 0  # the caller's copy


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_every_ready_kernel_on_foreign_arrays(rng, kind):
    """PyTorch tensors and CuPy arrays (read as `Foreign`: handed to the launchers or as
    launch views) give NumPy's results, outputs poisoned first."""
    require_lowering("sort")
    from cupric.kernels import elementwise, histogram, reduce, scan, sort, transpose
    if kind == "torch":
        torch = pytest.importorskip("torch")

        def dev(a):
            # np.array keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d).
            return torch.from_numpy(np.array(a, order="C")).cuda()

        def host(t):
            torch.cuda.synchronize()
            return t.cpu().numpy()
    else:
        cp = pytest.importorskip("cupy")

        def dev(a):
            return cp.asarray(a)

        def host(a):
            cp.cuda.Device().synchronize()
            return cp.asnumpy(a)

    def poisoned(shape, dtype):
        return dev(np.full(shape, -7, dtype) if np.dtype(dtype).kind in "iu" else
                   np.full(shape, np.nan, dtype))

    n = 70_001
    a, b = random_array(rng, n, "f4"), random_array(rng, n, "f4")
    x, y = dev(a), dev(b)
    out = poisoned(n, "f4")
    elementwise.vecadd(x, y, out=out)
    np.testing.assert_array_equal(host(out), a + b)
    yy = dev(b)
    elementwise.saxpy(0.5, x, yy, out=yy)  # in place
    np.testing.assert_allclose(host(yy), 0.5 * a.astype(np.float64) + b, rtol=1e-6,
                               atol=1e-6)
    total = poisoned((), "f4")
    reduce.sum(x, out=total)
    scale = np.abs(a.astype(np.float64)).sum()
    np.testing.assert_allclose(host(total), a.astype(np.float64).sum(), rtol=0,
                               atol=1e-5 * scale)
    out = poisoned(n, "f4")
    scan.inclusive_scan(x, out=out)
    np.testing.assert_allclose(host(out), np.cumsum(a.astype(np.float64)), rtol=0,
                               atol=1e-5 * scale)
    for m in (1000, 8192, n):  # one tile, and the graph of digit passes
        out = poisoned(m, "f4")
        sort.radix_sort(x[:m], out, descending=True)
        np.testing.assert_array_equal(host(out), np.sort(a[:m])[::-1])
    counts = poisoned(64, "i8")
    histogram.histogram(x, 64, (-30.0, 30.0), out=counts)
    np.testing.assert_array_equal(host(counts), np.histogram(a, 64, (-30.0, 30.0))[0])
    m2 = random_array(rng, (300, 257), "f4")
    t = poisoned((257, 300), "f4")
    transpose.transpose(dev(m2), out=t)
    np.testing.assert_array_equal(host(t), m2.T)
    half = random_array(rng, 999, "f2")
    copied = poisoned(999, "f2")
    elementwise.memcpy(dev(half), out=copied)
    np.testing.assert_array_equal(host(copied), half)
    # A strided vector (every other element): the general launch path, the same result.
    strided = x[::2]
    out = poisoned(strided.shape[0], "f4")
    elementwise.vecadd(strided, strided, out=out)
    np.testing.assert_array_equal(host(out), a[::2] * 2)
    if kind == "torch":
        with pytest.raises(TypeError):  # a host tensor: refused before any launch
            elementwise.vecadd(torch.from_numpy(a), x)
