"""The compiled kernel launcher (`cupric.compiler._fastcall`), without a GPU.

Each kernel's prepared launch is the runtime's compiled packer calling a recorder in place
of libcuda's cuLaunchKernel, which reads the parameter bytes through the `void**` array as
the driver would. The same calls are made three ways: through the general path alone,
through the generated Python launchers (``CUPRIC_KERNEL_FASTCALL=0``) and through the
compiled launcher; the driver must see the same launches, byte for byte, and every
refused call must raise the Python path's typed error with nothing launched.
"""

from __future__ import annotations

import gc
import importlib
import shutil
import subprocess
import sys
import weakref

import cffi
import numpy as np
import pytest

import cupric
from cupric.compiler import _fastcall, launcher
from cupric.runtime import array_adapters as aa
from cupric.runtime import launch as L
from cupric.runtime.errors import ClosedError
from cupric.types import (Array, boolean, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32,
                          u64)

kmod = importlib.import_module("cupric.compiler.kernel")
memory = importlib.import_module("cupric.runtime.memory")
adapters = pytest.importorskip("test_launch_adapters")  # its CuPy / PyTorch fakes
FakeCupy, FakeTensor = adapters.FakeCupy, adapters.FakeTensor
FakeCupyFields = adapters.FakeCupyFields

SIGNATURE = ("int(uintptr_t, unsigned int, unsigned int, unsigned int, unsigned int, "
             "unsigned int, unsigned int, unsigned int, uintptr_t, void **, void **)")


class _Function:
    """A loaded kernel function as the prepared launch sees it; `ptr` names the variant."""
    name = "k"
    max_threads_per_block = 1024
    num_regs = 32
    max_dynamic_shared_size_bytes = 48 * 1024
    shared_size_bytes = 0

    def __init__(self, ptr):
        self.ptr = ptr
        self.device = None


@pytest.fixture(scope="module")
def extensions(tmp_path_factory):
    """Both extensions built once into a private cache."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the launch extensions")
    pytest.importorskip("setuptools")
    mp = pytest.MonkeyPatch()
    mp.setenv("CUPRIC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    mp.setenv("CUPRIC_BUILD_SYNC", "1")  # these two, here: no background builds of others
    from cupric.runtime import _fastlaunch
    for mod in (_fastlaunch, _fastcall):
        mp.setattr(mod.EXTENSION, "module", None)
        mp.setattr(mod.EXTENSION, "error", None)
    mp.setattr(_fastcall, "_enabled", True)
    assert _fastlaunch.load(build=True) is not None, _fastlaunch.build_error()
    assert _fastcall.load(build=True) is not None, _fastcall.build_error()
    yield
    mp.undo()


class _Launches(list):
    """The launches the fake driver saw; `code` is what it answers (0: success)."""
    code = 0


@pytest.fixture
def driver(extensions, monkeypatch):
    """Every specialization's prepared launch is the compiled packer over a recorder:
    returns the list of launches the 'driver' saw."""
    ffi = cffi.FFI()
    calls, keep = _Launches(), []
    prepared_by_spec: dict = {}

    def record(f, gx, gy, gz, bx, by, bz, shared, stream, argv, extra):
        sizes = record.sizes[f]
        params = tuple(bytes(ffi.buffer(argv[i], n)) for i, n in enumerate(sizes))
        calls.append((f, (gx, gy, gz), (bx, by, bz), shared, stream, params))
        return calls.code

    record.sizes = {}
    callback = ffi.callback(SIGNATURE, record)
    keep.append(callback)
    native = L._Native()
    native.ffi, native.lib, native.path, native.null = ffi, None, "fake", ffi.NULL
    native.launch = callback
    native.launch_cooperative = None
    monkeypatch.setattr(L, "native", lambda: native)

    def prepared(spec, device=None):
        key = (id(spec.kernel), spec.arg_types, spec.noalias, spec.aligned)
        if key not in prepared_by_spec:
            # The function address says which variant launched: noalias, aligned, types.
            ptr = 0x1000 + 4 * len(prepared_by_spec) + 2 * spec.noalias + spec.aligned
            types = kmod.param_types(spec.arg_types)
            p = L.make_prepared(_Function(ptr), types, backend="c")
            record.sizes[ptr] = [t[1] if isinstance(t, tuple) else L.PARAM_TYPES[t][1]
                                 for t in p.param_types]
            prepared_by_spec[key] = (ptr, p)
        return prepared_by_spec[key][1]

    monkeypatch.setattr(kmod, "_SIMULATOR", [False])
    monkeypatch.setattr(kmod, "_MULTI", [False])
    monkeypatch.setattr(kmod.Specialization, "prepared", prepared)
    monkeypatch.setattr(kmod, "_BIND", [kmod._Launcher])
    aa.register_array_adapter(FakeCupy, aa.CupyAdapter(lambda: 0))
    aa.register_array_adapter(FakeCupyFields, aa.CupyAdapter(lambda: 0))
    aa.register_array_adapter(FakeTensor, aa.TorchAdapter(adapters.TORCH_TYPESTRS,
                                                          adapters.STRIDED))
    yield calls
    for cls in (FakeCupy, FakeCupyFields, FakeTensor):
        aa.unregister_array_adapter(cls)


def _reset(kern):
    kern._specs.clear()
    kern._variants.clear()
    kern._fast = None
    kern._no_fast.clear()


def _run(kern, calls, mode, monkeypatch, log):
    """Launch every call in `mode` ("general", "python", "c"); returns (launches, errors,
    the kinds of launcher that were at the chain's head)."""
    _reset(kern)
    monkeypatch.setattr(_fastcall, "_enabled", mode == "c")
    monkeypatch.setattr(kmod, "_BIND", [kmod._Launcher])
    start = len(log)
    errors, heads = [], []
    for *config, args in calls:  # (grid, block[, stream[, shared_bytes]], args)
        if mode == "general":
            kern._fast = None
        heads.append(None if kern._fast is None else launcher.is_compiled(kern._fast))
        try:
            kern[tuple(config)](*args)
            errors.append(None)
        except Exception as exc:  # compared between the modes, type and message
            errors.append((type(exc), str(exc)))
    return log[start:], errors, heads


def _three_ways(kern, calls, monkeypatch, log):
    runs = {mode: _run(kern, calls, mode, monkeypatch, log)
            for mode in ("general", "python", "c")}
    assert runs["c"][:2] == runs["python"][:2] == runs["general"][:2]
    assert True not in runs["python"][2] and False not in runs["c"][2]
    return runs


def _buf(ptr, shape, dtype=np.float32, strides=None):
    return memory.borrow(ptr, shape, strides, dtype, device=0)


# -- kernels -----------------------------------------------------------------------------------

_axpy = adapters._axpy  # a: f32, x: Array[f32, 1], y: Array[f32, 1]; writes y


@cupric.kernel
def _scalars(a: i8, b: i16, c: i32, d: i64, e: u8, f: u16, g: u32, h: u64, p: f16,
             q: f32, r: f64, s: boolean, out: Array[f64, 1]):
    i = cupric.device.grid(1)
    if i < len(out):
        out[i] = r + q + d + h


@cupric.kernel
def _copy2(x, y):
    i = cupric.device.grid(1)
    if i < x.shape[0]:
        y[i, 0] = x[i, 0]


@cupric.kernel
def _copy3(x, y):
    i = cupric.device.grid(1)
    if i < x.shape[0]:
        y[i, 0, 0] = x[i, 0, 0]


@cupric.kernel
def _aggregate(t, s, out: Array[f32, 1]):
    i = cupric.device.grid(1)
    if i < len(out):
        out[i] = t[0] + s.x


# -- the same launches, byte for byte ----------------------------------------------------------

def test_one_d_arrays_and_scalars_launch_identically(driver, monkeypatch):
    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    a = np.float32(2)
    calls = [(4, 64, (a, x, y)), (4, 64, (a, x, y)), ((2, 3), (32, 2), (a, x, y)),
             (4, 64, (a, _buf(0x10008, (256,)), y)),       # misaligned: general path
             (4, 64, (a, x, _buf(0x10000 + 512, (256,)))),  # overlaps x: general path
             (4, 64, (a, x, _buf(0x30000, (0,)))),          # empty output
             (4, 64, (a, x[::2], y)),                        # strided view: general
             (4, 64, (2.5, x, y)),                           # a Python float: new key
             (4, 64, 7, (a, x, y)),                          # a stream handle
             (4, 64, None, 128, (a, x, y)),                  # and shared memory
             (4, 64, (a, x, y))]
    runs = _three_ways(_axpy, calls, monkeypatch, driver)
    launches, _, heads = runs["c"]
    assert heads[1] and heads[-1]                            # the compiled launcher ran
    assert launcher.is_compiled(_axpy._fast)
    assert type(_axpy[4, 64]).__name__ == "Bound"
    f, grid, block, shared, stream, params = launches[0]
    assert (grid, block, shared, stream) == ((4, 1, 1), (64, 1, 1), 0, 0)
    assert params == (np.float32(2).tobytes(), (0x10000).to_bytes(8, "little"),
                      (256).to_bytes(8, "little"), (1).to_bytes(8, "little"),
                      (0x20000).to_bytes(8, "little"), (256).to_bytes(8, "little"),
                      (1).to_bytes(8, "little"))
    assert launches[2][1:3] == ((2, 3, 1), (32, 2, 1))
    assert launches[-3][3:5] == (0, 7) and launches[-2][3:5] == (128, 0)
    assert type(_axpy[4, 64, 7, 128]).__name__ == "Bound" and _axpy[4, 64, 7].stream == 7
    # The variants: aligned and noalias, unaligned, may alias.
    assert [f & 3 for f, *_ in launches[:5]] == [3, 3, 3, 2, 1]


def test_every_scalar_type_packs_identically(driver, monkeypatch):
    out = _buf(0x40000, (64,), np.float64)
    numpy_values = (np.int8(-7), np.int16(-300), np.int32(-70000), np.int64(-(1 << 40)),
                    np.uint8(250), np.uint16(65000), np.uint32(4000000000),
                    np.uint64((1 << 64) - 1), np.float16(1.5), np.float32(0.1),
                    np.float64(1e300), np.bool_(True), out)
    calls = [(1, 64, numpy_values)] * 3
    runs = _three_ways(_scalars, calls, monkeypatch, driver)
    launches, errors, heads = runs["c"]
    assert errors == [None] * 3 and heads[1:] == [True, True]
    params = launches[0][5]
    assert params[:12] == tuple(np.asarray(v).tobytes() for v in numpy_values[:12])
    # Python scalars where the signature takes them (ints for every integer parameter,
    # a float for the floats, a bool): the packer converts them the same way too.
    python_values = (-7, -300, -70000, -(1 << 40), 250, 65000, 4000000000, (1 << 64) - 1,
                     1.5, 0.1, 1e300, True, out)
    runs = _three_ways(_scalars, [(1, 64, python_values)] * 3, monkeypatch, driver)
    assert runs["c"][1] == [None] * 3 and runs["c"][2][1:] == [True, True]


def test_numpy_scalars_are_copied_as_they_lie_only_where_verified(driver, monkeypatch):
    """The extension copies a NumPy scalar's value from the object only for classes whose
    sample showed NumPy's layout; refused samples fall back to converting, same bytes."""
    import struct
    module = _fastcall.load()
    assert module.raw_scalars(_fastcall._numpy_samples()) == 12
    out = _buf(0x40000, (64,), np.float64)
    values = (np.int8(-7), np.int16(-300), np.int32(-70000), np.int64(-(1 << 40)),
              np.uint8(250), np.uint16(65000), np.uint32(4000000000),
              np.uint64((1 << 64) - 1), np.float16(1.5), np.float32(0.1),
              np.float64(1e300), np.bool_(True), out)
    expected = tuple(np.asarray(v).tobytes() for v in values[:12])
    try:
        for samples in (_fastcall._numpy_samples(),
                        ((np.float32, "f", np.float32(1.5), struct.pack("<f", 2.5)),)):
            found = module.raw_scalars(samples)
            assert found == (12 if len(samples) == 12 else 0)
            launches = _run(_scalars, [(1, 64, values)] * 3, "c", monkeypatch, driver)[0]
            assert [call[5][:12] for call in launches] == [expected] * 3
    finally:
        module.raw_scalars(_fastcall._numpy_samples())


@pytest.mark.parametrize("shape,strides", [
    ((4, 8), None), ((8, 4), (4, 32)), ((4, 8), (64, 8)),
    ((2, 3, 4), None), ((2, 3, 4), (4, 8, 24)), ((2, 3, 4), (96, 32, 4))])
def test_arrays_of_every_rank_and_layout_launch_identically(driver, monkeypatch, shape,
                                                            strides):
    x = _buf(0x10000, shape, np.float32, strides)
    y = _buf(0x80000, shape, np.float32)
    calls = [(1, 32, (x, y))] * 3
    runs = _three_ways(_copy2 if len(shape) == 2 else _copy3, calls, monkeypatch, driver)
    launches, errors, heads = runs["c"]
    assert errors == [None] * 3
    assert heads == [None] * 3                 # n-d arrays: the general path each time
    assert len(launches) == 3 and len(launches[0][5]) == 2 * (1 + 2 * len(shape))


def test_structs_and_tuples_launch_identically(driver, monkeypatch):
    record = np.dtype([("x", np.float32), ("n", np.int64)], align=True)
    s = np.array([(1.5, 7)], dtype=record)[0]
    out = _buf(0x10000, (32,))
    calls = [(1, 32, ((3, 4.0), s, out))] * 3
    runs = _three_ways(_aggregate, calls, monkeypatch, driver)
    launches, errors, _ = runs["c"]
    assert errors == [None] * 3
    params = launches[0][5]
    assert params[:3] == ((3).to_bytes(8, "little"), np.float64(4.0).tobytes(),
                          s.tobytes())


@pytest.mark.parametrize("kind", ["cupy", "cupy_fields", "torch"])
def test_cupy_and_torch_launch_identically(driver, monkeypatch, kind):
    make = {"cupy": lambda p, n, **kw: FakeCupy(p, (n,), **kw),
            "cupy_fields": lambda p, n, **kw: FakeCupyFields(p, (n,), **kw),
            "torch": lambda p, n, **kw: FakeTensor(p, (n,), **kw)}[kind]
    x, y = make(0x10000, 256), make(0x20000, 256)
    a = np.float32(2)
    calls = [(4, 64, (a, x, y)), (4, 64, (a, x, y)),
             (4, 64, (a, make(0x10008, 256), y)),            # misaligned
             (4, 64, (a, x, make(0x10000 + 512, 256))),     # overlapping output
             (4, 64, (a, x, make(0x30000, 0))),              # empty: pointer 0
             (4, 64, (a, x, y))]
    runs = _three_ways(_axpy, calls, monkeypatch, driver)
    assert runs["c"][2][1] and runs["c"][2][-1]
    # The same bytes as DeviceBuffers at those addresses.
    by_buffer = _run(_axpy, [(4, 64, (a, _buf(0x10000, (256,)), _buf(0x20000, (256,))))] * 2,
                     "c", monkeypatch, driver)[0]
    assert by_buffer == [runs["c"][0][0]] * 2


def test_torch_contiguity_is_is_contiguous(driver, monkeypatch):
    """A 1-D tensor is read as contiguous when ``is_contiguous()`` says so: unit stride,
    or one item whose stride nothing reads; any other stride takes the general path."""
    a = np.float32(2)
    one = FakeTensor(0x10000, (1,), strides=(7,))
    calls = [(1, 32, (a, one, FakeTensor(0x20000, (1,))))] * 3 + \
        [(1, 32, (a, FakeTensor(0x30000, (8,), strides=(2,)), FakeTensor(0x20000, (8,))))]
    launches, errors, heads = _three_ways(_axpy, calls, monkeypatch, driver)["c"]
    assert errors == [None] * 4 and heads[1:] == [True] * 3
    assert launches[0] == launches[1] == launches[2]
    assert launches[3][5][1:4] == tuple(v.to_bytes(8, "little") for v in (0x30000, 8, 2))


def test_several_kinds_keep_a_compiled_launcher_each(driver, monkeypatch):
    a = np.float32(2)
    kinds = [(a, _buf(0x10000, (256,)), _buf(0x20000, (256,))),
             (a, FakeCupy(0x10000, (256,)), FakeCupy(0x20000, (256,))),
             (a, FakeTensor(0x10000, (256,)), FakeTensor(0x20000, (256,)))]
    calls = [(4, 64, args) for args in kinds * 3]
    runs = _three_ways(_axpy, calls, monkeypatch, driver)
    assert runs["c"][2][3:] == [True] * 6
    probe, table = _axpy._fast.dispatch
    assert probe == 1 and len(table) == 3
    assert all(launcher.is_compiled(fn) for fn in table.values())


def test_a_second_kind_never_goes_through_the_general_path(driver, monkeypatch):
    """Launchers keyed by argument kinds: once each kind launched twice, every later
    launch of either kind is its own compiled launcher's (the general path never runs),
    and a refusal of the second kind still gets the general path's typed error."""
    general = []
    original = kmod.Kernel._launch

    def spy(self, *args):
        general.append(args[-1][1].__class__.__name__)
        return original(self, *args)

    monkeypatch.setattr(kmod.Kernel, "_launch", spy)
    a = np.float32(2)
    buffers = (a, _buf(0x10000, (256,)), _buf(0x20000, (256,)))
    cupy = (a, FakeCupy(0x30000, (256,)), FakeCupy(0x40000, (256,)))
    calls = [(4, 64, buffers), (4, 64, cupy), (4, 64, buffers), (4, 64, cupy)] * 3
    launches, errors, _ = _run(_axpy, calls, "c", monkeypatch, driver)
    assert errors == [None] * 12 and len(launches) == 12
    assert len(general) == 2                      # each kind's first launch only
    by_kind = {(call[5][1], call[5][4]) for call in launches}      # x's and y's pointers
    assert by_kind == {((0x10000).to_bytes(8, "little"), (0x20000).to_bytes(8, "little")),
                       ((0x30000).to_bytes(8, "little"), (0x40000).to_bytes(8, "little"))}
    before = len(launches)
    bad = (a, FakeCupy(0x30000, (256,), dtype=np.float64), FakeCupy(0x40000, (256,)))
    with pytest.raises(TypeError):
        _axpy[4, 64](*bad)
    assert len(driver) == before and general[-1] == "FakeCupy"
    # Mixed kinds with fall-backs among them: what the general path alone would launch
    # (the unaligned or aliased variant) or raise, launch for launch.
    closed = _buf(0x50000, (256,))
    closed.close()
    mixed = [buffers, cupy, (a, FakeCupy(0x30008, (256,)), FakeCupy(0x40000, (256,))),
             buffers, (a, _buf(0x10000, (256,)), _buf(0x10000 + 512, (256,))), cupy,
             (a, closed, buffers[2]), bad, cupy, buffers]
    launches, errors, _ = _three_ways(_axpy, [(4, 64, args) for args in mixed],
                                      monkeypatch, driver)["c"]
    assert [e is None for e in errors] == [True] * 6 + [False, False, True, True]
    assert errors[6][0] is ClosedError and len({call[0] for call in launches}) == 3


#: (launch stream, CuPy's current stream, whether a wait is left to `order_after`).
STREAM_CASES = [
    (None, 0, False), (None, 1, False), (0, 0, False), (1, 0, False),  # legacy both sides
    (0x5000, 0x5000, False),                     # the launch stream is CuPy's current one
    (2, 0, False), (0, 2, False), (2, 2, False),  # default streams order each other
    (0x5000, 0, True), (None, 0x6000, True), (0x5000, 0x6000, True), (2, 0x6000, True)]


@pytest.mark.parametrize("launch_stream, current, waits", STREAM_CASES)
def test_order_cupy_leaves_out_what_cuda_orders_already(monkeypatch, launch_stream, current,
                                                        waits):
    """The Python launchers' ordering makes the compiled launcher's decision too."""
    from cupric.runtime import intake
    asked = []
    monkeypatch.setattr(intake, "order_after", lambda st, producers: asked.append(
        (st, producers)))
    launcher.order_cupy(launch_stream, current)
    assert asked == ([(launch_stream, (current or 1,))] if waits else [])


@pytest.mark.parametrize("launch_stream, current, waits", STREAM_CASES)
def test_cupy_current_stream_is_read_and_compared_in_c(driver, monkeypatch, launch_stream,
                                                        current, waits):
    """CuPy's current stream is read through the adapter's `stream_source` (a function
    and an attribute, no Python frame); the wait is left out exactly where `needs_wait`
    leaves it out by its first rules, else handed to `order_cupy` (which decides the
    rest); a refused call orders nothing."""
    class _Current:
        ptr = current

    reads, ordered = [], []

    def current_stream():
        reads.append(1)
        return _Current

    aa.unregister_array_adapter(FakeCupy)
    aa.register_array_adapter(FakeCupy, aa.CupyAdapter(lambda: current,
                                                      (current_stream, "ptr")))
    monkeypatch.setattr(launcher, "order_cupy", lambda st, q: ordered.append((st, q)))
    from cupric.runtime import intake
    monkeypatch.setattr(intake, "order_after", lambda st, producers: None)  # general path
    a = np.float32(2)
    good = (a, FakeCupy(0x10000, (256,)), FakeCupy(0x20000, (256,)))
    bad = (a, FakeCupy(0x10000, (256,), dtype=np.float64), FakeCupy(0x20000, (256,)))
    _reset(_axpy)
    monkeypatch.setattr(_fastcall, "_enabled", True)
    _axpy[4, 64, launch_stream](*good)  # the general path, which makes the launcher
    assert launcher.is_compiled(_axpy._fast)
    reads.clear()
    ordered.clear()
    _axpy[4, 64, launch_stream](*good)
    assert reads == [1]
    assert ordered == ([(launch_stream, current)] if waits else [])
    assert driver[-1][4] == (launch_stream or 0)
    ordered.clear()
    with pytest.raises(TypeError):
        _axpy[4, 64, launch_stream](*bad)
    assert ordered == []


def test_the_launch_packs_in_c_and_driver_errors_stay_typed(driver, monkeypatch):
    """The compiled launcher packs and calls cuLaunchKernel itself (the prepared launch's
    `c_layout`), not through `prepared.launch`; an error code from the driver comes back
    through the Python path (`launch_failed`) as its typed error, the launch tried once."""
    from cupric.runtime.errors import CudaError
    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    a = np.float32(2)
    _reset(_axpy)
    monkeypatch.setattr(_fastcall, "_enabled", True)
    _axpy[4, 64](a, x, y)                     # loads the variant; the general path
    prepared = next(s for s in _axpy._variants.values() if s.aligned).prepared()
    assert prepared.c_layout is not None and prepared.c_layout[1] == driver[-1][0]
    through_prepared = []
    original = prepared.launch
    prepared.launch = lambda *args: (through_prepared.append(1), original(*args))[1]
    _reset(_axpy)
    for _ in range(4):
        _axpy[4, 64](a, x, y)
    assert launcher.is_compiled(_axpy._fast)
    assert len(through_prepared) == 1 and len(driver) == 5   # general path once, C thrice
    assert driver[-1] == driver[-2] == driver[-3]
    driver.code = 999                          # CUDA_ERROR_UNKNOWN
    with pytest.raises(CudaError) as caught:
        _axpy[4, 64](a, x, y)
    assert caught.value.code == 999 and len(driver) == 6 and len(through_prepared) == 1
    driver.code = 0


@pytest.mark.parametrize("mode", ["c", "python"])
def test_attempts_launch_the_same_or_come_back_untouched(driver, monkeypatch, mode):
    """`launcher.attempt`: the launcher's call with the arrays' length added launches
    exactly what a launch does, or answers NotImplemented with nothing launched and the
    general path never entered (the caller takes its own)."""
    general = []
    original = kmod.Kernel._launch

    def spy(self, *args):
        general.append(args)
        return original(self, *args)

    monkeypatch.setattr(kmod.Kernel, "_launch", spy)
    a = np.float32(2)
    kinds = {"buffer": lambda p, n, **kw: _buf(p, (n,)),
             "cupy": lambda p, n, **kw: FakeCupyFields(p, (n,), **kw),
             "torch": lambda p, n, **kw: FakeTensor(p, (n,), **kw)}
    made = {k: (a, make(0x10000, 256), make(0x20000, 256)) for k, make in kinds.items()}
    _run(_axpy, [(4, 64, args) for args in made.values()] * 2, mode, monkeypatch, driver)
    assert launcher.is_compiled(_axpy._fast) == (mode == "c")
    general.clear()
    for kind, args in made.items():
        before = len(driver)
        _axpy[4, 64](*args)
        assert launcher.attempt(_axpy, 4, 64, None, 0, args, 256) is True
        assert len(driver) == before + 2 and driver[-1] == driver[-2]
        make = kinds[kind]
        refused = [args[:2] + (make(0x20000, 255),),                 # another length
                   args[:2] + (make(0x20008, 256),),                 # misaligned
                   (a, args[1], args[1]),                            # overlapping output
                   (a, args[1], made["cupy" if kind == "torch" else "torch"][2]),  # class
                   args[:2]]                                         # too few
        if kind == "torch":
            refused.append((a, args[1], make(0x20000, 256, requires_grad=True)))
        for bad in refused:
            assert launcher.attempt(_axpy, 4, 64, None, 0, bad, 256) is False
        assert launcher.attempt(_axpy, 4, 64, None, 0, args, 255) is False
        assert len(driver) == before + 2 and general == []
    if mode == "c":
        with pytest.raises(TypeError, match="items >= 0"):
            _axpy._fast(4, 64, None, 0, made["buffer"], -1)


# -- refusals: the Python path's typed errors, nothing launched -------------------------------

def test_refusals_raise_the_python_paths_errors(driver, monkeypatch):
    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    a = np.float32(2)
    closed = _buf(0x50000, (256,))
    view = closed[:128]
    closed.close()
    good = (4, 64, (a, x, y))
    calls = [good, good,
             (4, 64, (a, closed, y)),                                # closed buffer
             (4, 64, (a, view, y)),                                  # view of a closed one
             (4, 64, (a, _buf(0x10000, (256,), np.float64), y)),     # wrong dtype
             (4, 64, (a, _buf(0x10000, (16, 16)), y)),               # wrong rank
             (4, 64, (a, np.zeros(4, np.float32), y)),               # host array
             (4, 64, (a, "x", y)),                                   # wrong class
             (4, 64, (a, x)),                                        # too few arguments
             (4, 64, (a, x, y, y)),                                  # too many
             (4, 64, (a, FakeTensor(0x10000, (256,), requires_grad=True), y)),
             good]
    runs = _three_ways(_axpy, calls, monkeypatch, driver)
    launches, errors, heads = runs["c"]
    assert heads[2:] == [True] * 10
    assert errors[2][0] is ClosedError and "argument 1 is a closed DeviceBuffer" in errors[2][1]
    assert errors[3][0] is ClosedError
    assert all(e is not None for e in errors[2:11]) and errors[11] is None
    assert issubclass(errors[4][0], TypeError) and issubclass(errors[8][0], TypeError)
    assert len(launches) == 3                          # the refused calls launched nothing


def test_other_devices_keep_the_python_launcher(driver, monkeypatch):
    """With several GPUs the device checks stay in the generated Python launcher."""
    monkeypatch.setattr(kmod, "_MULTI", [True])
    monkeypatch.setattr(kmod, "_current_device", lambda: 0)
    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    _run(_axpy, [(4, 64, (np.float32(2), x, y))] * 2, "c", monkeypatch, driver)
    assert _axpy._fast is not None and not launcher.is_compiled(_axpy._fast)


def test_errors_inside_the_prepared_launch_propagate(driver, monkeypatch):
    """A configuration the packer refuses raises its typed error through either launcher."""
    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    a = np.float32(2)
    calls = [(4, 64, (a, x, y)), (4, 64, (a, x, y)), (0, 64, (a, x, y)),
             ((1, 2, 3, 4), 64, (a, x, y)), (4, (64, 0), (a, x, y)), (4, 64, (a, x, y))]
    launches, errors, heads = _three_ways(_axpy, calls, monkeypatch, driver)["c"]
    assert heads[2:] == [True] * 4 and len(launches) == 3
    assert all(e is not None for e in errors[2:5])


def test_a_kernel_with_a_compiled_launcher_is_collected(driver, monkeypatch):
    @cupric.kernel
    def k(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
        i = cupric.device.grid(1)
        if i < len(x):
            y[i] = a * x[i]

    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    k[4, 64](np.float32(1), x, y)
    k[4, 64](np.float32(1), x, y)
    assert launcher.is_compiled(k._fast)
    ref = weakref.ref(k)
    del k
    gc.collect()
    assert ref() is None


# -- the switch --------------------------------------------------------------------------------

def test_switched_off_keeps_todays_path(driver, monkeypatch):
    x, y = _buf(0x10000, (256,)), _buf(0x20000, (256,))
    _run(_axpy, [(4, 64, (np.float32(2), x, y))] * 2, "python", monkeypatch, driver)
    assert _axpy._fast is not None and not launcher.is_compiled(_axpy._fast)
    assert type(_axpy[4, 64]) is kmod._Launcher
    monkeypatch.setattr(_fastcall, "_enabled", False)
    monkeypatch.setattr(_fastcall.EXTENSION, "module", None)
    assert _fastcall.load() is None


def test_the_switch_is_read_from_the_environment():
    code = ("from cupric.compiler import _fastcall; print(_fastcall.enabled(), "
            "_fastcall.load() is None)")
    for value, expected in (("0", "False True"), ("1", "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**_env(), "CUPRIC_KERNEL_FASTCALL": value,
                                              "CUPRIC_BUILD_LAUNCHER": "0"}).stdout
        assert out.startswith(expected)


def _env():
    import os
    return {k: v for k, v in os.environ.items() if k != "CUPRIC_KERNEL_FASTCALL"}


def test_the_first_subscript_chooses_the_binding(extensions, monkeypatch):
    for simulated, enabled, expected in ((True, True, "_Launcher"), (False, True, "Bound"),
                                         (False, False, "_Launcher")):
        monkeypatch.setattr(kmod, "_SIMULATOR", [simulated])
        monkeypatch.setattr(_fastcall, "_enabled", enabled)
        monkeypatch.setattr(kmod, "_BIND", [kmod._first_bind])
        assert type(_axpy[1, 32]).__name__ == expected
        bound = _axpy[2, 64, 5, 16]                   # the choice stays
        assert type(bound).__name__ == expected
        assert (bound.kernel, bound.grid, bound.block, bound.stream, bound.shared_bytes) == \
            (_axpy, 2, 64, 5, 16)
    with pytest.raises(TypeError, match=r"_axpy\[grid, block\]"):
        _axpy[1, 2, 3, 4, 5]


def test_no_references_are_leaked(driver, monkeypatch):
    a = np.float32(2)
    kinds = [(a, _buf(0x10000, (256,)), _buf(0x20000, (256,))),
             (a, FakeCupyFields(0x10000, (256,)), FakeCupyFields(0x20000, (256,))),
             (a, FakeTensor(0x10000, (256,)), FakeTensor(0x20000, (256,))),
             (a, _buf(0x10008, (256,)), _buf(0x20000, (256,)))]   # refused: the fallback
    _run(_axpy, [(4, 64, args) for args in kinds * 2], "c", monkeypatch, driver)
    closed = _buf(0x50000, (256,))
    closed.close()
    for args in kinds + [(a, closed, kinds[0][2])]:
        before = [sys.getrefcount(v) for v in args]
        for _ in range(200):
            try:
                _axpy[4, 64](*args)
            except ClosedError:
                pass
            launcher.attempt(_axpy, 4, 64, None, 0, args, 256)  # launched or refused
            launcher.attempt(_axpy, 4, 64, None, 0, args, 255)  # refused
        assert [sys.getrefcount(v) for v in args] == before
