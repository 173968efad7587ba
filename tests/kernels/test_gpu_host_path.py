"""GPU lane: the ready kernels' faster host path on the device: CuPy arrays read through
the array adapters (N-d, producers on other streams), per-dtype plans across dtype and
size changes, the radix sort's scratch kept in the workspace (grown, reused by smaller
sorts, per call past the limit) and shared by sorts on several streams and threads;
vecadd and saxpy on PyTorch tensors and CuPy arrays once their kernel's launcher checks
them (`attempt`): NumPy's results on every call, and what the launcher refuses (host and
autograd tensors, misaligned or strided views, other lengths, dtypes or kinds) the general
path's result or error."""

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


def _foreign(kind):
    """(to device, to host, poisoned array of a shape and dtype) for PyTorch tensors or
    CuPy arrays."""
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
    return dev, host, poisoned


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_every_ready_kernel_on_foreign_arrays(rng, kind):
    """PyTorch tensors and CuPy arrays (read as `Foreign`: handed to the launchers or as
    launch views) give NumPy's results, outputs poisoned first."""
    require_lowering("sort")
    from cupric.kernels import elementwise, histogram, reduce, scan, sort, transpose
    dev, host, poisoned = _foreign(kind)
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
        import torch
        with pytest.raises(TypeError):  # a host tensor: refused before any launch
            elementwise.vecadd(torch.from_numpy(a), x)


# -- vecadd and saxpy after the first call of a kind: the launcher's checks (`attempt`) ----

def _fresh_launchers(monkeypatch):
    """The elementwise kernels without the launchers earlier tests of the process made
    (a kernel keeps a few; the calls here must not depend on what came before)."""
    from cupric.kernels import elementwise
    for kern in (elementwise.vecadd_kernel, elementwise.vecadd_scalar_kernel,
                 elementwise.saxpy_kernel, elementwise.saxpy_update_kernel,
                 elementwise.saxpy_scalar_kernel):
        monkeypatch.setattr(kern, "_fast", None)
        monkeypatch.setattr(kern, "_no_fast", set())


def _error(fn):
    """(type, message) of what `fn` raises, or None."""
    try:
        fn()
    except Exception as exc:  # compared between two paths, type and message
        return type(exc), str(exc)
    return None


def _spy(monkeypatch):
    from cupric.kernels import elementwise
    answers, real = [], elementwise.attempt

    def spy(*args):
        answers.append(real(*args))
        return answers[-1]
    monkeypatch.setattr(elementwise, "attempt", spy)
    return answers


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_repeated_calls_give_numpys_results(rng, monkeypatch, kind):
    require_lowering("elementwise")
    from cupric.kernels import elementwise
    dev, host, poisoned = _foreign(kind)
    _fresh_launchers(monkeypatch)
    answers = _spy(monkeypatch)
    for dtype in ("f4", "f8", "i4", "f2"):
        alpha = 3 if dtype == "i4" else 0.5
        for n in (4096, 70_001):
            for _ in range(3):
                a, b = random_array(rng, n, dtype), random_array(rng, n, dtype)
                x, y = dev(a), dev(b)
                out = poisoned(n, dtype)
                assert elementwise.vecadd(x, y, out=out) is out
                np.testing.assert_array_equal(host(out), a + b)
                if dtype == "f2":  # float16 arithmetic: the sum only (rounded once)
                    continue
                expect = alpha * a.astype(np.float64) + b
                tol = {"f4": (1e-6, 1e-5), "f8": (1e-13, 1e-12), "i4": (0, 0)}[dtype]
                out = poisoned(n, dtype)
                elementwise.saxpy(np.dtype(dtype).type(alpha), x, y, out=out)
                np.testing.assert_allclose(host(out), expect, rtol=tol[0], atol=tol[1])
                elementwise.saxpy(alpha, x, y, out=y)  # in place
                np.testing.assert_allclose(host(y), expect, rtol=tol[0], atol=tol[1])
    # The launcher took every call after the first of each kernel and dtype (vecadd,
    # saxpy and saxpy in place in three dtypes, vecadd's float16 kernel).
    assert answers.count(False) <= 10 and answers.count(True) >= len(answers) - 10


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_refused_arrays_take_the_general_path(rng, monkeypatch, kind):
    require_lowering("elementwise")
    from cupric.kernels import elementwise
    dev, host, poisoned = _foreign(kind)
    _fresh_launchers(monkeypatch)
    n = 4099
    a, b = random_array(rng, n + 1, "f4"), random_array(rng, n + 1, "f4")
    x, y = dev(a[:n]), dev(b[:n])
    elementwise.vecadd(x, y, out=poisoned(n, "f4"))  # the kind's launcher, made
    elementwise.vecadd(x, y, out=poisoned(n, "f4"))
    answers = _spy(monkeypatch)
    # Misaligned views (one item in), strided views: the general path's launch.
    xs, ys = dev(a)[1:], dev(b)[1:]
    out = poisoned(n, "f4")
    elementwise.vecadd(xs, ys, out=out)
    np.testing.assert_array_equal(host(out), a[1:] + b[1:])
    xs, ys = dev(a)[::2], dev(b)[::2]
    out = poisoned(xs.shape[0], "f4")
    elementwise.vecadd(xs, ys, out=out)
    np.testing.assert_array_equal(host(out), a[::2] + b[::2])
    assert answers == [False, False]  # misaligned, then not unit-stride: refused
    answers.clear()
    # Another length, another dtype, another kind: the general path's errors.
    with pytest.raises(ValueError):
        elementwise.vecadd(x, y, out=poisoned(n - 1, "f4"))
    with pytest.raises(TypeError):
        elementwise.vecadd(x, dev(b[:n].astype(np.float64)), out=poisoned(n, "f4"))
    from cupric.runtime import to_device
    out = to_device(np.full(n, np.nan, np.float32))
    elementwise.vecadd(x, y, out=out)  # mixed kinds: the general path takes them
    np.testing.assert_array_equal(out.to_numpy(), a[:n] + b[:n])
    assert answers == [False, False, False]
    if kind == "torch":
        import torch
        answers.clear()
        with pytest.raises(TypeError):  # a host tensor
            elementwise.vecadd(x, y, out=torch.from_numpy(np.full(n, np.nan, np.float32)))
        grad = dev(a[:n]).requires_grad_()
        planned = _error(lambda: elementwise.vecadd(grad, y, out=poisoned(n, "f4")))
        with monkeypatch.context() as mp:  # autograd: the general path's error, as before
            mp.setattr(elementwise, "direct", lambda *args, **kw: None)
            general = _error(lambda: elementwise.vecadd(grad, y, out=poisoned(n, "f4")))
        assert planned is not None and planned == general
        one = dev(a)[4::5000]  # one item, any stride: contiguous, taken by the launcher
        assert one.shape == (1,) and one.is_contiguous()
        out = poisoned(1, "f4")
        elementwise.vecadd(one, one, out=out)
        np.testing.assert_array_equal(host(out), a[4:5] * 2)
        assert answers == [False, False, True]
