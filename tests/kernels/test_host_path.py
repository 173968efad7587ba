"""CPU lane: the ready kernels' host path on a fake GPU (`fake_device.FakeGpu`): foreign
arrays read through the array adapters give the same launches, errors and stream ordering
as the CUDA Array Interface path; per-dtype plans follow dtype and shape changes; the
radix sort's scratch lives in the workspace (reused, grown, per call past the limit) and
calls on several streams and threads never interleave their use of it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cupric.kernels import _common
from cupric.runtime import intake
from fake_device import FakeGpu


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu(monkeypatch)
    yield fake
    fake.close()


def _values(gpu):
    """The recorded launches without the addresses of workspace arrays (fresh per run)."""
    return [(name, grid, block, stream) for name, grid, block, stream, _ in gpu.launches]


def test_adapter_and_interface_paths_launch_the_same(gpu, monkeypatch):
    from cupric.kernels import elementwise, reduce, scan
    x, y, out = gpu.array((64, 65), "f4"), gpu.array((64, 65), "f4"), gpu.array((64, 65), "f4")
    total = gpu.array((), "f8")
    xd = gpu.array(4099, "f8")

    def calls():
        elementwise.vecadd(x, y, out=out)
        elementwise.saxpy(2.0, x, y, out=out)
        reduce.sum(xd, out=total)
        scan.inclusive_scan(x, out=out)
        return list(gpu.launches)

    adapted = calls()
    gpu.launches.clear()
    monkeypatch.setattr(intake, "_TRUSTED", frozenset())  # the interface path only
    interfaced = calls()
    assert [launch[:4] for launch in adapted] == [launch[:4] for launch in interfaced]
    # Pointers, lengths and strides of the user's arrays are the same (the workspace
    # arrays of the scan and the sum are the same ones too: one workspace); the scan's
    # look-back epoch (argument 7) is one more.
    assert adapted[3][4][7] + 1 == interfaced[3][4][7]
    assert [v[:7] + v[8:] for _, _, _, _, v in adapted] == \
        [v[:7] + v[8:] for _, _, _, _, v in interfaced]
    first = adapted[0][4]
    assert first[:3] == (x.data.ptr, 64 * 65, 1) and first[6:9] == (out.data.ptr, 64 * 65, 1)


def test_same_errors_as_the_interface_path(gpu, monkeypatch):
    from cupric.kernels import elementwise, reduce
    a, b = gpu.array(8, "f4"), gpu.array(8, "f8")
    wide, strided = gpu.array((4, 4), "f4"), gpu.array((4, 4), "f4")
    strided.strides = (4, 16)  # Fortran order: not C-contiguous
    messages = []
    for trusted in (intake._TRUSTED, frozenset()):
        monkeypatch.setattr(intake, "_TRUSTED", trusted)
        found = []
        for fn, exc in ((lambda: elementwise.vecadd(a, b), TypeError),
                        (lambda: elementwise.vecadd(a, wide), ValueError),
                        (lambda: elementwise.vecadd(strided, strided), ValueError),
                        (lambda: reduce.sum(gpu.array(8, "c8")), TypeError),
                        (lambda: elementwise.vecadd(np.zeros(8, "f4"), a), TypeError),
                        (lambda: elementwise.vecadd(a, a, out=gpu.array(8, "f8")),
                         TypeError)):
            with pytest.raises(exc) as info:
                fn()
            found.append(str(info.value))
        messages.append(found)
    assert messages[0] == messages[1]
    assert "vecadd: b has dtype float64, but a has float32" in messages[0][0]
    assert "must be C-contiguous" in messages[0][2]
    assert "host NumPy array" in messages[0][4]


def test_producer_streams_ordered_once_per_call(gpu):
    from cupric.kernels import elementwise
    x, y, out = gpu.array(100, "f4"), gpu.array(100, "f4"), gpu.array(100, "f4")
    gpu.set_cupy_stream(0x55)  # CuPy's current stream: a real stream
    elementwise.vecadd(x, y, out=out, stream=7)
    assert gpu.orders == [(7, 0x55)]  # three arrays, one producer: one wait
    gpu.orders.clear()
    gpu.set_cupy_stream(0)  # CuPy's null stream (the legacy one) and the legacy stream
    elementwise.vecadd(x, y, out=out)
    assert gpu.orders == []
    elementwise.vecadd(x, y, out=out, stream=7)
    # The fake says stream 7 is a blocking stream: the legacy stream orders it already.
    assert gpu.orders == []


def test_plans_follow_dtype_and_shape(gpu):
    from cupric.kernels import reduce, scan
    for dtype, acc in (("f4", "f4"), ("f8", "f8"), ("i2", "i8"), ("f4", "f4")):
        gpu.launches.clear()
        x = gpu.array(5000, dtype)
        reduce.sum(x)
        name, grid, block, stream, values = gpu.launches[0]
        assert values[:2] == (x.data.ptr, 5000)
        assert type(values[6]) is np.dtype(acc).type  # the initial value's dtype
    for n, dtype in ((3840 * 3, "f4"), (3840 * 7 + 1, "i8"), (10, "f8")):
        gpu.launches.clear()
        x, out = gpu.array(n, dtype), gpu.array(n, dtype)
        scan.inclusive_scan(x, out=out)
        (_, tiles, _, _, values), = gpu.launches
        assert tiles == -(-n // scan.TILE)
        assert values[3:6] == (out.data.ptr, n, 1)
        ws = _common._workspace(0)
        assert ws.arrays[f"scan.aggregates.{np.dtype(dtype)}"].size >= tiles
        assert ws.arrays[f"scan.prefixes.{np.dtype(dtype)}"].dtype == np.dtype(dtype)


def test_histogram_plan_and_fresh_edges(gpu):
    from cupric.kernels import histogram
    x, counts = gpu.array(1000, "u1"), gpu.array(256, "i8")
    _, edges = histogram.histogram(x, 256, (0, 256), out=counts)
    np.testing.assert_array_equal(edges, np.histogram(np.zeros(1), 256, (0, 256))[1])
    edges[:] = -1  # the caller's copy: the next call's edges are untouched
    _, again = histogram.histogram(x, 256, (0, 256), out=counts)
    np.testing.assert_array_equal(again, np.linspace(0, 256, 257))
    _, other = histogram.histogram(x, 10, (0, 5))
    np.testing.assert_array_equal(other, np.histogram(np.zeros(1), 10, (0, 5))[1])
    scalars = [launch[4][-6:-3] for launch in gpu.launches]
    assert scalars[0] == scalars[1] == (0.0, 256.0, 1.0)
    assert scalars[2] == (0.0, 5.0, 2.0)


def _radix_scratch(gpu):
    return {name: arr for name, arr in _common._workspace(0).arrays.items()
            if name.startswith("radix.")}


def test_radix_sort_scratch_lives_in_the_workspace(gpu):
    from cupric.kernels import sort
    keys, out = gpu.array(10_000, "u4"), gpu.array(10_000, "u4")
    sort.radix_sort(keys, out)
    first = _radix_scratch(gpu)
    assert sorted(first) == ["radix.counts", "radix.keys", "radix.offsets", "radix.spare"]
    gpu.allocations.clear()
    gpu.launches.clear()
    sort.radix_sort(keys, out, stream=3)
    assert gpu.allocations == []  # nothing allocated on a repeated call
    assert len(gpu.launches) == 14
    assert _radix_scratch(gpu) == first
    # The last launch (back to the dtype) writes `out` from one of the scratch arrays.
    assert gpu.launches[-1][4][3:6] == (out.data.ptr, 10_000, 1)
    assert gpu.launches[-1][4][0] in (first["radix.keys"].ptr, first["radix.spare"].ptr)


def test_radix_sort_workspace_grows_and_shrinks_by_views(gpu):
    from cupric.kernels import sort
    small, big = gpu.array(9000, "i4"), gpu.array(70_000, "f4")
    sort.radix_sort(small, gpu.array(9000, "i4"), stream=5)
    old = _radix_scratch(gpu)
    gpu.allocations.clear()
    sort.radix_sort(big, gpu.array(70_000, "f4"), stream=5)
    grown = _radix_scratch(gpu)
    assert grown["radix.keys"].size >= 70_000 and grown["radix.counts"].size >= 256 * 35
    assert [shape for shape, _, _ in gpu.allocations[:4]] == \
        [(70_000,), (70_000,), (256 * 35,), (256 * 35,)]
    # The old arrays were freed in stream order, on the stream that used them last.
    closed = {ptr for ptr, stream in gpu.closes if stream == 5}
    assert {arr.ptr for arr in old.values()} <= closed
    gpu.allocations.clear()
    gpu.launches.clear()
    sort.radix_sort(small, gpu.array(9000, "i4"), stream=5)
    assert gpu.allocations == []
    to_keys = gpu.launches[0][4]
    assert to_keys[3:5] == (grown["radix.keys"].ptr, 9000)  # a 9000-key view of it
    histograms = [launch for launch in gpu.launches if launch[0] == "radix_histogram_kernel"]
    assert all(launch[1] == 5 and launch[4][4] == 5 * 256 for launch in histograms)


def test_radix_sort_past_the_limit_allocates_per_call(gpu, monkeypatch):
    from cupric.kernels import sort
    monkeypatch.setattr(sort, "RADIX_WORKSPACE_KEYS", 9000)
    keys = gpu.array(9001, "u4")
    sort.radix_sort(keys, keys, stream=9)
    assert _radix_scratch(gpu) == {}
    scratch = [(shape, stream) for shape, dtype, stream in gpu.allocations[:4]]
    assert scratch == [((9001,), 9), ((9001,), 9), ((1280,), 9), ((1280,), 9)]
    freed = {ptr for ptr, stream in gpu.closes if stream == 9}  # in stream order
    assert len(freed) == 4 and not freed & {a.ptr for a in _common._workspace(0).arrays.values()}


def test_workspace_users_on_several_streams_and_threads(gpu):
    from cupric.kernels import reduce, scan, sort
    keys = gpu.array(9000, "u4")
    sort.radix_sort(keys, gpu.array(9000, "u4"), stream=11)
    x = gpu.array(9000, "f4")
    scan.inclusive_scan(x, stream=12)
    reduce.sum(x, stream=12)
    sort.radix_sort(keys, gpu.array(9000, "u4"), stream=11)
    # Each change of stream waits for the previous user's stream.
    assert gpu.orders == [(12, 11), (11, 12)]
    gpu.launches.clear()
    errors = []

    def worker(stream):
        try:
            for _ in range(20):
                sort.radix_sort(keys, gpu.array(9000, "u4"), stream=stream)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (21, 22, 23)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    streams = [launch[3] for launch in gpu.launches]
    assert len(streams) == 3 * 20 * 14
    # The workspace is held for a whole sort: its 14 launches are never interleaved.
    for start in range(0, len(streams), 14):
        assert len(set(streams[start:start + 14])) == 1


def test_flat_views_and_reinterpretation(gpu):
    from cupric.runtime import memory
    call = _common.Call("test")
    arr = call.array(memory.borrow(0x7E0000000000, (3, 5), None, "f4"), "x")
    flat = call.flat(arr, "x")
    assert (flat.shape, flat.strides, flat.ptr) == ((15,), (4,), arr.ptr)
    bits = call.flat(arr, "x", np.dtype("u4"))
    assert bits.dtype == np.dtype("u4") and bits.shape == (15,)
    assert call.flat(flat, "x") is flat
    with pytest.raises(ValueError, match="cannot view"):
        _common.vector(arr, np.dtype("u2"))
    prefix = _common.vector_prefix(flat, 4)
    assert (prefix.shape, prefix.ptr, prefix.base is arr or prefix.base is arr.base) == \
        ((4,), arr.ptr, True)


# -- PyTorch tensors and CuPy arrays read once per call (`_common.Foreign`) ------------------

def _kinds(gpu):
    return {"cupy": gpu.array, "torch": lambda shape, dtype: gpu.tensor(
        shape, {"f4": "float32", "f8": "float64", "i8": "int64", "u4": "uint32"}[dtype])}


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_foreign_arrays_reach_the_launch_themselves(gpu, kind):
    from cupric.kernels import elementwise, sort
    make = _kinds(gpu)[kind]
    x, y, out = make(1000, "f4"), make(1000, "f4"), make(1000, "f4")
    call = _common.Call("test")
    fx = call.array(x, "x")
    assert fx.__class__ is _common.Foreign and fx.launchable() is x
    assert (fx.shape, fx.dtype, fx.size, fx.readonly) == ((1000,), np.dtype("f4"), 1000, False)
    bits = call.flat(fx, "x", np.dtype("u4")).launchable()  # another dtype: a launch view
    assert (bits.ptr, bits.shape, bits.dtype) == (fx.ptr, (1000,), np.dtype("u4"))
    seen, attempted = [], []
    real, real_attempt = _common.launch_now, elementwise.attempt

    def spy(kern, grid, block, stream, shared_bytes, args):
        seen.append(args)
        return real(kern, grid, block, stream, shared_bytes, args)

    def attempt_spy(kern, grid, block, stream, shared_bytes, args, items):
        done = real_attempt(kern, grid, block, stream, shared_bytes, args, items)
        attempted.append((args, items, done))
        return done

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_common, "launch_now", spy)
        mp.setattr(elementwise, "attempt", attempt_spy)
        # The first call of the kind takes the general path, which makes the kernel's
        # launcher for it; the second is that launcher's, checked there.
        elementwise.vecadd(x, y, out=out)
        elementwise.vecadd(x, y, out=out)
    # The arrays themselves reach the launch (its launcher reads them), no borrow.
    assert [a.launchable() if a.__class__ is _common.Foreign else a for a in seen[0]] == \
        [x, y, out]
    assert len(seen) == 1 and [done for _, _, done in attempted] == [False, True]
    assert attempted[1][:2] == ((x, y, out), 1000)
    first, second = gpu.launches[-2:]
    assert first == second
    name, grid, block, stream, values = second
    assert values[:3] == (fx.ptr, 1000, 1) and values[6:9] == (call.array(out, "o").ptr,
                                                               1000, 1)
    gpu.launches.clear()
    sort.radix_sort(x, out)  # float32 keys as uint32 bits: launch views, one launch
    (name, _, _, _, values), = gpu.launches
    assert name == "radix_tile_sort_kernel" and values[:2] == (fx.ptr, 1000)


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_foreign_arrays_refused_before_any_launch(gpu, kind):
    from cupric.kernels import elementwise, reduce, sort
    make = _kinds(gpu)[kind]
    a, b = make(8, "f4"), make(8, "f8")
    cases = [(lambda: elementwise.vecadd(a, b), TypeError, "dtype float64, but a has"),
             (lambda: elementwise.vecadd(a, make((2, 4), "f4")), ValueError, "shape"),
             (lambda: elementwise.vecadd(a, a, out=make(8, "f8")), TypeError, "out has dtype"),
             (lambda: elementwise.vecadd(a, a, out=make(9, "f4")), ValueError, "out has shape"),
             (lambda: reduce.sum(a, out=make((), "i8")), TypeError, "out has dtype"),
             (lambda: sort.radix_sort(make(9000, "f8")), TypeError, "float64"),
             (lambda: sort.radix_sort(make(9000, "f4"), make(9001, "f4")), ValueError,
              "shape")]
    for fn, exc, message in cases:
        with pytest.raises(exc, match=message):
            fn()
    assert gpu.launches == [] and gpu.allocations == []


def test_foreign_torch_tensors_the_adapter_cannot_read_take_the_intake_path(gpu):
    from cupric.kernels import elementwise
    grad = gpu.tensor(8, "float32", requires_grad=True)
    call = _common.Call("test")
    with pytest.raises(TypeError):  # the interface path's error (autograd tensors)
        call.array(grad, "x")
    empty = gpu.tensor(0, "float32")
    assert call.array(empty, "x").__class__ is not _common.Foreign  # a borrow
    strided = gpu.tensor((4, 4), "float32")
    strided._stride = (1, 4)  # Fortran order: not C-contiguous
    with pytest.raises(ValueError, match="C-contiguous"):
        elementwise.vecadd(strided, strided)
    assert gpu.launches == []


def test_foreign_fast_path_only_with_one_gpu(gpu, monkeypatch):
    # With several GPUs each array's device matters: the intake layer's borrow, whose
    # device the launch checks, instead.
    monkeypatch.setattr(_common, "_single_device", lambda: False)
    call = _common.Call("test")
    arr = call.array(gpu.array(16, "f4"), "x")
    assert arr.__class__ is not _common.Foreign and arr.ptr and arr.shape == (16,)


def test_cupy_stream_ordered_once_per_call(gpu):
    from cupric.kernels import elementwise, sort
    make = _kinds(gpu)["cupy"]
    x, y, out = make(100, "f4"), make(100, "f4"), make(100, "f4")
    gpu.set_cupy_stream(0x66)
    # The arrays themselves: the launch (its launcher) orders after CuPy's stream.
    elementwise.vecadd(x, y, out=out, stream=7)
    assert gpu.orders == [(7, 0x66)]
    gpu.orders.clear()
    # Launch views (float32 keys as uint32): the call orders, once for both arrays.
    sort.radix_sort(x, out, stream=7)
    assert gpu.orders == [(7, 0x66)]
    gpu.orders.clear()
    gpu.set_cupy_stream(0)  # the null stream and the legacy one: nothing to order
    sort.radix_sort(x, out)
    elementwise.vecadd(x, y, out=out)
    assert gpu.orders == []


def test_strided_torch_vectors_take_the_strided_path(gpu):
    from cupric.kernels import elementwise, sort
    x = gpu.tensor(200, "float32")
    x.shape, x._stride, x._numel = (100,), (2,), 100  # every other element
    out = gpu.tensor(100, "float32")
    elementwise.vecadd(x, x, out=out)  # the launcher sends it to the general path
    (_, _, _, _, values), = gpu.launches
    assert values[:3] == (x.data_ptr(), 100, 2)  # pointer, length, stride in items
    gpu.launches.clear()
    sort.radix_sort(x, out)  # a launch view: the intake layer's strided borrow
    (_, _, _, _, values), = gpu.launches
    assert values[:3] == (x.data_ptr(), 100, 2)


def test_closed_buffers_refused_before_any_launch(gpu):
    from cupric.kernels import elementwise, sort
    from cupric.runtime import memory
    buf = memory.borrow(0x7E0000000000, (9000,), None, "f4")
    live = memory.borrow(0x7E0000100000, (9000,), None, "f4")
    buf._alloc._closed = True  # what close() sets on every view's record
    for fn in (lambda: elementwise.vecadd(buf, live), lambda: elementwise.vecadd(live, live,
                                                                                 out=buf),
               lambda: sort.radix_sort(live, buf)):
        with pytest.raises(intake.ClosedError):
            fn()
    assert gpu.launches == []


def test_release_workspaces_frees_in_stream_order(gpu):
    from cupric import kernels
    from cupric.kernels import sort
    keys = gpu.array(9000, "u4")
    sort.radix_sort(keys, gpu.array(9000, "u4"), stream=13)
    kept = {arr.ptr for arr in _common._workspace(0).arrays.values()}
    assert kept
    gpu.closes.clear()
    kernels.release_workspaces()
    assert {ptr for ptr, stream in gpu.closes if stream == 13} == kept
    assert _common._workspace(0).arrays == {}
    gpu.allocations.clear()
    sort.radix_sort(keys, gpu.array(9000, "u4"), stream=13)  # allocated afresh
    assert len(gpu.allocations) >= 4


def test_outputs_allocated_on_the_call_stream(gpu):
    from cupric.kernels import elementwise
    x = gpu.tensor(64, "float32")
    elementwise.vecadd(x, x)
    elementwise.vecadd(x, x, stream=21)
    assert [stream for _, _, stream in gpu.allocations] == [0, 21]


def test_float16_foreign_arrays_copied_and_filled_as_bits(gpu):
    from cupric.kernels import elementwise
    src, out = gpu.tensor(64, "float16"), gpu.tensor(64, "float16")
    elementwise.memcpy(src, out=out)
    elementwise.fill(out, 1.5)
    (copy, _, _, _, copied), (fill, _, _, _, filled) = gpu.launches
    assert copy == "copy_kernel" and copied[:2] == (src.data_ptr(), 64)
    assert fill == "fill_kernel" and filled[:2] == (out.data_ptr(), 64)
    assert filled[3] == np.float16(1.5).view(np.uint16)


class _FakeGraph:
    """`cupric.runtime.graph.Graph` stand-in: records nodes, instantiates to `_FakeExec`."""

    made: list = []

    def __init__(self):
        self.nodes, self.closed = [], False
        _FakeGraph.made.append(self)

    @classmethod
    def create(cls, device=None):
        return cls()

    def add_memset(self, dst, value, *, width=1, count=None, depends_on=()):
        self.nodes.append(("memset", dst.ptr, value, width, len(depends_on)))
        return len(self.nodes)

    def add_kernel(self, kernel, grid, block, *args, depends_on=()):
        self.nodes.append((kernel.__name__, grid, block, args, tuple(depends_on)))
        return len(self.nodes)

    def instantiate(self):
        return _FakeExec(self)

    def close(self):
        self.closed = True


class _FakeExec:
    def __init__(self, graph):
        self.graph, self.launches, self.closed = graph, [], False

    def launch(self, stream=None):
        self.launches.append(stream)

    def close(self):
        self.closed = True


@pytest.fixture
def graphs(gpu, monkeypatch):
    from cupric.kernels import sort
    from cupric.runtime import graph
    monkeypatch.setattr(graph, "Graph", _FakeGraph)
    monkeypatch.setattr(sort, "PASS_GRAPHS", [True])
    monkeypatch.setattr(_FakeGraph, "made", [])
    return _FakeGraph.made


def test_radix_passes_replay_one_graph_per_key_count(gpu, graphs):
    from cupric.kernels import sort
    keys, out = gpu.array(20_000, "f4"), gpu.array(20_000, "f4")
    sort.radix_sort(keys, out, stream=4)
    sort.radix_sort(keys, out, stream=4)
    graph, = graphs  # made once, replayed twice
    exe = sort._PASS_GRAPHS[(0, 20_000)].exec
    assert exe.launches == [4, 4] and exe.graph is graph
    # Around each replay, the two key transforms: 3 operations per sort, not 14.
    assert [name for name, *_ in gpu.launches] == ["to_keys_kernel", "from_keys_kernel"] * 2
    kinds = [node[0] for node in graph.nodes]
    assert kinds == ["memset"] + ["radix_histogram_kernel", "scan_kernel",
                                  "radix_scatter_kernel"] * 4
    tiles = -(-20_000 // sort.RADIX_TILE)
    ws = _common._workspace(0)
    # The scans tag the graph's own flags with epochs 1..4, cleared by the first node.
    flags = ws.arrays["radix.graph_flags"]
    assert graph.nodes[0][1:4] == (flags.ptr, 0, 4)
    scans = [node for node in graph.nodes if node[0] == "scan_kernel"]
    assert [int(node[3][3]) for node in scans] == [1, 2, 3, 4]
    assert all(node[3][5] is flags for node in scans)
    # Keys and spare swap each pass: the last scatter writes back into the keys.
    scatters = [node for node in graph.nodes if node[0] == "radix_scatter_kernel"]
    assert scatters[-1][3][1].ptr == ws.arrays["radix.keys"].ptr
    assert all(node[1] == tiles for node in scatters)


def test_radix_pass_graphs_follow_the_workspace(gpu, graphs):
    from cupric import kernels
    from cupric.kernels import sort
    small, big = gpu.array(20_000, "u4"), gpu.array(90_000, "u4")
    sort.radix_sort(small, gpu.array(20_000, "u4"))
    first = sort._PASS_GRAPHS[(0, 20_000)]
    sort.radix_sort(big, gpu.array(90_000, "u4"))  # the workspace grows
    sort.radix_sort(small, gpu.array(20_000, "u4"))  # its arrays changed: made again
    assert len(graphs) == 3 and first.exec.closed and graphs[0].closed
    assert sort._PASS_GRAPHS[(0, 20_000)] is not first
    kept = list(sort._PASS_GRAPHS.values())
    kernels.release_workspaces()  # the owner frees them with the workspace
    assert sort._PASS_GRAPHS == {} and all(g.exec.closed and g.graph.closed for g in kept)


def test_radix_pass_graphs_kept_are_bounded(gpu, graphs, monkeypatch):
    from cupric.kernels import sort
    monkeypatch.setattr(sort, "PASS_GRAPHS_KEPT", 2)
    for n in (30_000, 20_000, 10_000):
        sort.radix_sort(gpu.array(n, "u4"), gpu.array(n, "u4"))
    assert sorted(k[1] for k in sort._PASS_GRAPHS) == [10_000, 20_000]
    assert graphs[0].closed and not graphs[1].closed
