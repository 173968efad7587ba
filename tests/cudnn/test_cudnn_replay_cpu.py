"""CPU lane: the compiled replay of cuDNN calls, against C stand-ins for cuDNN.

The extension is configured with ctypes callbacks in place of the backend entry points
and of a legacy routine, and with buffers at made-up addresses: what it patches, reuses,
allocates and refuses is checked without a GPU. (The GPU lane checks the same paths
against cuDNN itself, in test_cudnn_replay_gpu.py.)
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from cupric.cudnn import _replay
from cupric.runtime import memory

P = ctypes.c_void_p


@pytest.fixture
def ext():
    module = _replay.load()
    if module is None:
        pytest.skip(f"replay extension unavailable: {_replay.build_error()}")
    return module


class FakeCudnn:
    """ctypes stand-ins: the five backend calls and one 8-pointer legacy routine."""

    def __init__(self):
        self.log = []
        self.status = 0
        self.next = 0x5000
        self.packs = {}
        self.live = set()

        def create(kind, out):
            self.next += 16
            ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.next
            self.packs[self.next] = {}
            self.live.add(self.next)
            return 0

        def set_attr(desc, name, atype, count, data):
            if atype == 99:  # INT64 stand-in
                values = list(ctypes.cast(data, ctypes.POINTER(ctypes.c_int64))[:count])
            else:
                values = [v or 0 for v in ctypes.cast(data, ctypes.POINTER(P))[:count]]
            self.packs[desc][name] = values
            return 0

        def finalize(desc):
            return 0

        def destroy(desc):
            self.live.discard(desc)
            return 0

        def execute(handle, plan, pack):
            self.log.append(("execute", handle, plan, dict(self.packs[pack]), pack))
            return self.status

        def legacy(*args):
            self.log.append(("legacy",) + tuple(a or 0 for a in args))
            return self.status

        self.fns = [
            ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, P)(create),
            ctypes.CFUNCTYPE(ctypes.c_int, P, ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                             P)(set_attr),
            ctypes.CFUNCTYPE(ctypes.c_int, P)(finalize),
            ctypes.CFUNCTYPE(ctypes.c_int, P)(destroy),
            ctypes.CFUNCTYPE(ctypes.c_int, P, P, P)(execute),
        ]
        self.legacy = ctypes.CFUNCTYPE(ctypes.c_int, *([P] * 8))(legacy)
        self.context = 0xC0FFEE

        def current(out):
            ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.context
            return 0

        self.current = ctypes.CFUNCTYPE(ctypes.c_int, P)(current)

    def address(self, fn) -> int:
        return ctypes.cast(fn, ctypes.c_void_p).value


class Resource:
    """Stands for a descriptor the entry guards (the real Resource's `_closed` slot)."""


@pytest.fixture
def fake(ext, monkeypatch):
    from cupric.cudnn import lib
    from cupric.cudnn.handle import Handle, _Owned, _tls, resolve
    from cupric.runtime._lifetime import Resource as RealResource
    from cupric.runtime.memory import DeviceBuffer, _Allocation
    f = FakeCudnn()
    made = []

    def empty(shape, dtype, stream):
        # Fresh "allocations" 1 MiB apart, far from the inputs' addresses.
        buf = memory.borrow(0x40000000 + len(made) * (1 << 20), shape, None, dtype,
                            stream=stream)
        made.append(buf)
        return buf

    from cupric.cudnn.backend import check as backend_check
    ext.configure(DeviceBuffer, _Allocation, RealResource, Handle, _Owned, _tls, empty,
                  backend_check, lib.check, resolve, tuple(f.address(fn) for fn in f.fns),
                  (7, 11, 12, 13, 99, 98), f.address(f.current))
    f.made = made
    f.handles = []
    yield f
    # Entries holding the stand-ins' variant packs go while the stand-ins are configured.
    import gc
    for h in f.handles:
        h._replays.clear()
    f.handles.clear()
    gc.collect()
    _replay._configure(ext)  # back to the real entry points


def buf(ptr, shape=(2, 3, 4, 4), dtype=np.float32, readonly=False):
    return memory.borrow(ptr, shape, None, dtype, readonly=readonly)


def closed_guard():
    from cupric.runtime._lifetime import Resource as RealResource

    class G(RealResource):
        __slots__ = ()
    g = G.__new__(G)
    g._init_resource(1, None)
    return g


def handle(f):
    from cupric.cudnn.handle import Handle
    h = Handle.from_handle(0xDEAD0, stream=0)
    f.handles.append(h)
    return h


SHAPE = (2, 3, 4, 4)
NBYTES = 2 * 3 * 4 * 4 * 4


def legacy_entry(ext, f, h, x, out, *, alias=0, allocs=(None,), guards=()):
    head = ("test_p8",)
    key = ext.key_of(head, (x,), (out,), h)
    assert key is not None
    h._replays[key] = ext.make_entry(
        _replay.KINDS["p8"], f.address(f.legacy), h._ptr,
        (h._ptr, 0x111, 0x222, 0x333, 0, 0x444, 0x555, 0), (-1, -1, -1, -1, 0, -1, -1, 1),
        (), 0, (), (), None, 0, 1, ((0, NBYTES), (0, NBYTES)), (alias,), allocs, guards,
        None)
    return head


def test_legacy_call_patches_pointers_and_keeps_constants(ext, fake):
    h = handle(fake)
    x, y = buf(0x10000), buf(0x20000)
    head = legacy_entry(ext, fake, h, x, y)
    y2 = buf(0x30000)  # another output at another address: same key, same entry
    assert ext.run(head, (buf(0x70000), ), (y2,), h, None) == (y2,)
    assert fake.log == [("legacy", 0xDEAD0, 0x111, 0x222, 0x333, 0x70000, 0x444, 0x555,
                         0x30000)]
    # The handle's own stream named beside it: resolved as the Python path does.
    assert ext.run(head, (x,), (y,), h, 0) == (y,)
    assert fake.log[-1][5] == 0x10000


def test_refusals_fall_back_to_the_python_path(ext, fake):
    h = handle(fake)
    x, y = buf(0x10000), buf(0x20000)
    head = legacy_entry(ext, fake, h, x, y)
    cases = [
        ((buf(0x10000, shape=(2, 3, 4, 5)),), (y,)),       # another shape: no entry
        ((buf(0x10000, dtype=np.float64),), (y,)),         # another dtype
        ((buf(0x10004),), (y,)),                           # less aligned
        ((x,), (buf(0x20000, readonly=True),)),            # read-only output
        ((x,), (buf(0x10000 + 64),)),                      # output overlaps the input
        ((x,), (x,)),                                      # the input itself (no alias)
        ((np.zeros(SHAPE, np.float32),), (y,)),            # a host array
    ]
    for arrays, outs in cases:
        assert ext.run(head, arrays, outs, h, None) is None, (arrays, outs)
    assert ext.run(head, (x,), (y,), h, 5) is None          # another stream than the handle's
    closed = buf(0x10000)
    closed.close()
    assert ext.run(head, (closed,), (y,), h, None) is None
    assert fake.log == []
    h.close()
    assert ext.run(head, (x,), (y,), h, None) is None
    assert fake.log == []


def test_exact_alias_where_the_operation_runs_in_place(ext, fake):
    h = handle(fake)
    x = buf(0x10000)
    head = legacy_entry(ext, fake, h, x, x, alias=1)
    assert ext.run(head, (x,), (x,), h, None) == (x,)
    assert fake.log[-1][5] == fake.log[-1][8] == 0x10000
    # Overlapping but not the same array: still refused.
    key = ext.key_of(head, (x,), (buf(0x10000 + 64),), h)
    h._replays[key] = h._replays[ext.key_of(head, (x,), (x,), h)]
    assert ext.run(head, (x,), (buf(0x10000 + 64),), h, None) is None


def test_closed_guard_and_failing_status(ext, fake):
    from cupric.cudnn import lib
    h = handle(fake)
    x, y = buf(0x10000), buf(0x20000)
    g = closed_guard()
    head = legacy_entry(ext, fake, h, x, y, guards=(g,))
    fake.status = 3000  # CUDNN_STATUS_NOT_SUPPORTED
    with pytest.raises(lib.CudnnError):
        ext.run(head, (x,), (y,), h, None)
    g._closed = True
    assert ext.run(head, (x,), (y,), h, None) is None


def test_outputs_allocated_in_the_recorded_layout(ext, fake):
    h = handle(fake)
    x = buf(0x10000)
    physical = (2, 4, 4, 3)
    view_shape, view_strides = SHAPE, (192, 4, 48, 12)   # NHWC seen as NCHW
    head = legacy_entry(ext, fake, h, x, None,
                        allocs=((physical, np.dtype(np.float32), view_shape, view_strides),))
    (out,) = ext.run(head, (x,), (None,), h, None)
    assert out.shape == view_shape and out.strides == view_strides
    assert out.ptr == fake.made[0].ptr and fake.log[-1][8] == out.ptr


def test_graph_variant_pack_reused_while_pointers_stay(ext, fake):
    h = handle(fake)
    x, y = buf(0x10000), buf(0x20000)
    head = ("test_graph",)
    key = ext.key_of(head, (x,), (y,), h)
    h._replays[key] = ext.make_entry(
        _replay.KINDS["graph"], 0, h._ptr, (), (), (), 0x7777, (5, 6), (1, 0), None, 0, 1,
        ((0, NBYTES), (0, NBYTES)), (0,), (None,), (), None)
    for _ in range(2):
        assert ext.run(head, (x,), (y,), h, None) == (y,)
    y2 = buf(0x30000)
    ext.run(head, (x,), (y2,), h, None)
    (_, h1, plan1, pack1, id1), (_, _, _, _, id2), (_, _, _, pack3, id3) = fake.log
    assert (h1, plan1) == (0xDEAD0, 0x7777)
    assert pack1[11] == [5, 6] and pack1[12] == [0x20000, 0x10000] and pack1[13] == [0]
    assert id1 == id2 != id3 and pack3[12] == [0x30000, 0x10000]
    assert fake.live == {id3}  # the replaced pack was destroyed


def test_full_path_overlap_check():
    from cupric.cudnn import _validate as V

    def t(ptr, shape=SHAPE, strides=None):
        b = memory.borrow(ptr, shape, strides, np.float32)
        return V.Tensor(b, "f32", b.shape, tuple(s // 4 for s in b.strides), "NCHW")

    x, w = t(0x10000), t(0x90000)
    V.check_overlap("op", ("out", t(0x10000 + NBYTES)), ("x", x), ("w", w), ("b", None))
    with pytest.raises(ValueError, match="out overlaps x"):
        V.check_overlap("op", ("out", t(0x10000 + NBYTES - 4)), ("x", x))
    with pytest.raises(ValueError, match="out overlaps x"):
        V.check_overlap("op", ("out", x), ("x", x))
    # In place: the very same array only, not a shifted or re-strided view of it.
    V.check_overlap("op", ("out", x), ("x", x), inplace=("x",))
    with pytest.raises(ValueError, match=r"or x itself"):
        V.check_overlap("op", ("out", t(0x10000 + 64)), ("x", x), inplace=("x",))
    nhwc = t(0x10000, strides=(192, 4, 48, 12))
    with pytest.raises(ValueError):
        V.check_overlap("op", ("out", nhwc), ("x", x), inplace=("x",))


def test_several_gpus_need_the_current_context_and_each_arrays_device(ext, fake):
    h = handle(fake)
    h._multi, h._ctx, h._device = True, 0xC0FFEE, 0
    x = memory.borrow(0x10000, SHAPE, None, np.float32, device=0)
    y = memory.borrow(0x20000, SHAPE, None, np.float32, device=0)
    head = legacy_entry(ext, fake, h, x, y)
    assert ext.run(head, (x,), (y,), h, None) == (y,)
    fake.context = 0xBEEF  # another device's context is current
    assert ext.run(head, (x,), (y,), h, None) is None
    fake.context = 0xC0FFEE
    elsewhere = memory.borrow(0x30000, SHAPE, None, np.float32, device=1)
    unknown = memory.borrow(0x30000, SHAPE, None, np.float32)  # device -1: cannot say
    assert ext.run(head, (elsewhere,), (y,), h, None) is None
    assert ext.run(head, (unknown,), (y,), h, None) is None
    assert len(fake.log) == 1


def test_allocation_specs_and_extents_of_recorded_calls():
    base = memory.borrow(0x50000, (2, 4, 4, 3), None, np.float32)
    nhwc = base.transpose(0, 3, 1, 2)            # what an NHWC output allocation gives
    plain = memory.borrow(0x60000, SHAPE, None, np.float32)
    given = object()
    specs = _replay._allocs((None, None, given, None), (nhwc, plain, plain, plain),
                            (True, True, True, False))
    assert specs == (((2, 4, 4, 3), np.dtype(np.float32), SHAPE, (192, 4, 48, 12)),
                     (SHAPE, np.dtype(np.float32), None, None), None, None)
    # A uint16 stand-in for bfloat16 is never replayed (it must be remembered as such).
    u16 = memory.borrow(0x70000, SHAPE, None, np.uint16)
    assert _replay._allocs((None,), (u16,), (True,)) is None
    assert _replay._spans((plain, None, nhwc)) == ((0, NBYTES), (0, 0), (0, NBYTES))


# --------------------------------------------------------------------------------------
# CuPy arrays, read by the extension as the intake's CuPy adapter reads them


class FakeMemoryPointer:
    """cupy.cuda.MemoryPointer: ``ptr`` and ``device_id``."""

    def __init__(self, ptr, device_id):
        self.ptr, self.device_id = ptr, device_id


class FakeCupyArray:
    """cupy.ndarray's attributes: ``data`` (ptr, device_id), ``shape``, byte ``strides``,
    ``dtype``."""

    def __init__(self, ptr, shape=SHAPE, dtype=np.float32, strides=None, device=0):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.strides = tuple(strides) if strides is not None else \
            memory.c_strides(self.shape, self.dtype.itemsize)
        self.data = FakeMemoryPointer(ptr, device)


@pytest.fixture
def cupy_stream(ext):
    """`FakeCupyArray` registered as cupy.ndarray; CuPy's current stream is settable."""
    current = {"ptr": 0, "asked": 0}

    def stream():
        current["asked"] += 1
        return current["ptr"]
    ext.set_cupy(FakeCupyArray, stream)
    yield current
    ext.set_cupy(None, None)
    _replay._cupy_type = None


def test_cupy_arrays_replay_with_their_pointers(ext, fake, cupy_stream):
    h = handle(fake)
    h._device = 0
    x, y = FakeCupyArray(0x10000), FakeCupyArray(0x20000)
    head = legacy_entry(ext, fake, h, x, y)
    y2 = FakeCupyArray(0x30000)
    assert ext.run(head, (FakeCupyArray(0x70000),), (y2,), h, None) == (y2,)
    assert fake.log == [("legacy", 0xDEAD0, 0x111, 0x222, 0x333, 0x70000, 0x444, 0x555,
                         0x30000)]
    # CuPy's current stream is asked once per call, however many CuPy arrays it has.
    asked = cupy_stream["asked"]
    ext.run(head, (x,), (y,), h, None)
    assert cupy_stream["asked"] == asked + 1
    # A DeviceBuffer input with a CuPy output: another key, recorded apart.
    assert ext.run(head, (buf(0x10000),), (y,), h, None) is None
    assert len(fake.log) == 2


def test_cupy_arrays_are_refused_where_the_python_path_must_decide(ext, fake, cupy_stream):
    h = handle(fake)
    h._device = 0
    x, y = FakeCupyArray(0x10000), FakeCupyArray(0x20000)
    head = legacy_entry(ext, fake, h, x, y)
    cases = [
        ((FakeCupyArray(0x10000, shape=(2, 3, 4, 5)),), (y,)),        # another shape
        ((FakeCupyArray(0x10000, dtype=np.float64),), (y,)),          # another dtype
        ((FakeCupyArray(0x10000, strides=(192, 4, 48, 12)),), (y,)),  # another layout
        ((FakeCupyArray(0x10004),), (y,)),                            # less aligned
        ((FakeCupyArray(0x10000, device=1),), (y,)),                  # another device
        ((x,), (FakeCupyArray(0x20000, device=1),)),
        ((x,), (FakeCupyArray(0x10000 + 64),)),                       # overlaps the input
        ((x,), (FakeCupyArray(0x10000),)),                            # the input itself
        ((buf(0x10000),), (FakeCupyArray(0x10000),)),                 # aliasing a buffer
    ]
    for arrays, outs in cases:
        assert ext.run(head, arrays, outs, h, None) is None, (arrays, outs)
    # CuPy's current stream (the arrays' producer) is not the handle's: the Python path
    # orders the two; 0 and 1 both name the legacy default stream the handle runs on.
    cupy_stream["ptr"] = 0x5555
    assert ext.run(head, (x,), (y,), h, None) is None
    assert ext.key_of(head, (x,), (y,), h) is None      # and nothing is recorded
    assert fake.log == []
    cupy_stream["ptr"] = 1
    assert ext.run(head, (x,), (y,), h, None) == (y,)
    assert len(fake.log) == 1


def test_cupy_stream_errors_take_the_python_path(ext, fake):
    h = handle(fake)
    h._device = 0

    def broken():
        raise RuntimeError("no CUDA context")
    ext.set_cupy(FakeCupyArray, broken)
    try:
        x, y = FakeCupyArray(0x10000), FakeCupyArray(0x20000)
        assert ext.key_of(("test_p8",), (x,), (y,), h) is None
        # No stream in CuPy's interface (export version 2): none is asked or compared.
        ext.set_cupy(FakeCupyArray, None)
        head = legacy_entry(ext, fake, h, x, y)
        assert ext.run(head, (x,), (y,), h, None) == (y,)
        with pytest.raises(TypeError):
            ext.set_cupy(FakeCupyArray, 5)
    finally:
        ext.set_cupy(None, None)
    assert ext.key_of(("test_p8",), (x,), (y,), h) is None   # forgotten again


def test_recorded_calls_register_cupy_from_the_intake_adapter(ext, fake, monkeypatch):
    """`_replay._key` hands the extension cupy.ndarray with the intake adapter's reader of
    CuPy's current stream (a fake ``cupy`` module here)."""
    import sys
    import types

    from cupric.runtime import array_adapters as aa
    cupy = types.ModuleType("cupy")
    ndarray = type("ndarray", (FakeCupyArray,), {"__module__": "cupy._core.core"})
    cupy.ndarray = ndarray
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=0))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(_replay, "_cupy_type", None)
    h = handle(fake)
    h._device = 0
    x, y = ndarray(0x10000), ndarray(0x20000)
    try:
        assert ext.key_of(("op",), (x,), (y,), h) is None      # not known yet
        key = _replay._key(h, ("op",), (x,), (y,))
        assert key is not None and key[1] is ndarray
        assert key[2:5] == (np.dtype(np.float32), SHAPE, memory.c_strides(SHAPE, 4))
        assert _replay._cupy_type is ndarray
    finally:
        ext.set_cupy(None, None)
        aa.unregister_array_adapter(ndarray)


# --------------------------------------------------------------------------------------
# Batch norm's persistent kernels (the Ex entry points): doubles, sizes and the workspace


def _bn_ex_stand_in(nargs, doubles, sizes):
    """A ctypes stand-in with the Ex routine's C signature: `doubles` and `sizes` are the
    argument positions of type double and size_t, the rest pointers (ints at 1 and 2)."""
    calls = []
    types = []
    for i in range(nargs):
        if i in doubles:
            types.append(ctypes.c_double)
        elif i in sizes:
            types.append(ctypes.c_size_t)
        elif i in (1, 2):
            types.append(ctypes.c_int)
        else:
            types.append(P)

    def impl(*args):
        calls.append(tuple(0 if a is None else a for a in args))
        return 0
    return ctypes.CFUNCTYPE(ctypes.c_int, *types)(impl), calls


@pytest.mark.parametrize("kind,nargs,doubles,sizes", [
    ("bn_train_ex", 25, (14, 17), (22, 24)), ("bn_bwd_ex", 30, (22,), (27, 29))])
def test_batch_norm_ex_entries_pass_doubles_sizes_and_the_workspace(ext, fake, kind, nargs,
                                                                    doubles, sizes):
    h = handle(fake)
    ws = memory.borrow(0x900000, (1 << 20,), None, np.uint8)
    h._owned.workspace = ws
    fn, calls = _bn_ex_stand_in(nargs, doubles, sizes)
    x, y = buf(0x10000), buf(0x20000)
    head = ("test_" + kind,)
    args, slots = [], []
    for i in range(nargs):
        value = {0: h._ptr, 1: 2, 2: 0}.get(i, 0x100 + i)
        if i in doubles:
            value = 0
        elif i in sizes:
            value = 1000 + i
        elif i == 6:
            value = ws.ptr                     # where the template holds the workspace
        slot = {8: 0, 10: 1}.get(i, -1)
        args.append(0 if slot >= 0 else value)
        slots.append(slot)
    key = ext.key_of(head, (x,), (y,), h)
    h._replays[key] = ext.make_entry(
        _replay.KINDS[kind], ctypes.cast(fn, ctypes.c_void_p).value, h._ptr, tuple(args),
        tuple(slots), (0.25, 1e-3)[:len(doubles)], 0, (), (), ws, ws.ptr, 1,
        ((0, NBYTES), (0, NBYTES)), (0,), (None,), (), None)
    y2 = buf(0x30000)
    assert ext.run(head, (buf(0x70000),), (y2,), h, None) == (y2,)
    (got,) = calls
    assert got[0] == 0xDEAD0 and (got[1], got[2]) == (2, 0)
    assert (got[8], got[10]) == (0x70000, 0x30000)
    assert [got[i] for i in doubles] == [0.25, 1e-3][:len(doubles)]
    assert [got[i] for i in sizes] == [1000 + i for i in sizes]
    assert got[6] == ws.ptr
    others = [i for i in range(nargs) if i not in (0, 1, 2, 6, 8, 10, *doubles, *sizes)]
    assert [got[i] for i in others] == [0x100 + i for i in others]
    # The handle's workspace replaced (grown) or closed: the Python path re-records.
    h._owned.workspace = memory.borrow(0xA00000, (2 << 20,), None, np.uint8)
    assert ext.run(head, (x,), (y,), h, None) is None
    h._owned.workspace = ws
    ws.close()
    assert ext.run(head, (x,), (y,), h, None) is None
    assert len(calls) == 1


def test_remember_legacy_records_the_workspace_guard(ext, fake, monkeypatch):
    """`remember_legacy(workspace=...)` hands the entry the handle's workspace buffer."""
    seen = {}
    real = ext.make_entry

    def spy(*args):
        seen["ws"] = args[9:11]
        return real(*args)
    monkeypatch.setattr(_replay.EXTENSION, "module", type("M", (), {
        "make_entry": staticmethod(spy), "key_of": staticmethod(ext.key_of),
        "set_torch": staticmethod(ext.set_torch), "set_cupy": staticmethod(ext.set_cupy)}))
    h = handle(fake)
    ws = memory.borrow(0x900000, (1 << 20,), None, np.uint8)
    x, y = buf(0x10000), buf(0x20000)
    fn, _ = _bn_ex_stand_in(8, (), ())
    from cupric.cudnn import lib
    address = lib.ffi.cast("void *", ctypes.cast(fn, ctypes.c_void_p).value)
    _replay.remember_legacy(h, ("op",), (x,), (y,), (x, y), "p8", address,
                            (h._ptr, ws.ptr, 0, 0, ("t", 0), 0, 0, ("t", 1)),
                            workspace=ws)
    assert seen["ws"] == (ws, ws.ptr) and len(h._replays) == 1
