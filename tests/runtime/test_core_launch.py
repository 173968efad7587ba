"""CPU lane: argument packing and launch validation, with the driver call replaced.

The native `cuLaunchKernel` is swapped for a recorder that reads the parameter buffer
through the `void**` array exactly as the driver would, so the whole hot path, from
values to the pointed-to bytes, runs without a GPU.
"""

from __future__ import annotations

import struct
from pathlib import Path

import cffi
import numpy as np
import pytest

from cupric.runtime import launch as L
from cupric.runtime.errors import CudaError, LaunchError


class FakeDevice:
    max_threads_per_block = 1024
    max_block_dims = (1024, 1024, 64)
    max_grid_dims = (2**31 - 1, 65535, 65535)
    max_shared_memory_per_block_optin = 227 * 1024

    def __init__(self):
        self.made_current = 0

    def make_current(self):
        self.made_current += 1


class FakeFunction:
    name = "k"
    ptr = 0x1234
    max_threads_per_block = 768
    num_regs = 80
    max_dynamic_shared_size_bytes = 48 * 1024 - 1024
    shared_size_bytes = 1024

    def __init__(self):
        self.device = FakeDevice()


class Recorder:
    """Stands in for libcuda's cuLaunchKernel."""

    def __init__(self, ffi, sizes, results=()):
        self.ffi = ffi
        self.sizes = sizes
        self.calls = []
        self.results = list(results)

    def __call__(self, f, gx, gy, gz, bx, by, bz, shared, stream, argv, extra):
        params = [bytes(self.ffi.buffer(argv[i], size)) for i, size in enumerate(self.sizes)]
        self.calls.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared,
                               stream=stream, params=params, extra=extra))
        return self.results.pop(0) if self.results else 0


def _sizes(types):
    out = []
    for t in types:
        out.append(t[1] if isinstance(t, tuple) else L.PARAM_TYPES[t][1])
    return out


@pytest.fixture
def prepare(monkeypatch):
    def make(types, results=()):
        ffi = cffi.FFI()
        rec = Recorder(ffi, _sizes(types), results)
        n = L._Native()
        n.ffi, n.lib, n.path, n.null = ffi, None, "fake", ffi.NULL
        n.launch = rec
        n.launch_cooperative = None
        monkeypatch.setattr(L, "native", lambda: n)
        fn = FakeFunction()
        return L.PreparedLaunch(fn, types, backend="cffi"), rec, fn
    return make


def test_layout_aligns_each_parameter():
    types, fmt, offsets, size = L.param_layout(["i8", "f64", "i16", ("bytes", 12, 4), "ptr"])
    assert offsets == [0, 8, 16, 20, 32]
    assert size == 40
    assert struct.calcsize(fmt) == 40
    assert L.param_layout([])[3] == 8


def test_layout_rejects_unknown_types():
    with pytest.raises(L.KernelArgumentError, match="unknown type 'float'"):
        L.param_layout(["float"])
    with pytest.raises(L.KernelArgumentError, match="power of two"):
        L.param_layout([("bytes", 8, 3)])


def test_values_land_at_their_offsets(prepare):
    p, rec, fn = prepare(["ptr", "ptr", "f32", "i32"])
    p.launch(4, 256, None, 0, 0xDEAD0000, 0xBEEF0000, 2.5, -7)
    (call,) = rec.calls
    assert call["f"] == 0x1234 and call["grid"] == (4, 1, 1) and call["block"] == (256, 1, 1)
    assert call["stream"] == 0 and call["shared"] == 0
    assert call["params"] == [struct.pack("<Q", 0xDEAD0000), struct.pack("<Q", 0xBEEF0000),
                              struct.pack("<f", 2.5), struct.pack("<i", -7)]


def test_numpy_scalars_pack_too(prepare):
    p, rec, _ = prepare(["u8", "i64", "f16", "f64", "bool"])
    p.launch((2, 3), (32, 4, 2), 99, 128, np.uint8(200), np.int64(-5), np.float16(1.5),
             np.float64(0.1), True)
    call = rec.calls[0]
    assert call["grid"] == (2, 3, 1) and call["block"] == (32, 4, 2)
    assert call["stream"] == 99 and call["shared"] == 128
    assert call["params"] == [b"\xc8", struct.pack("<q", -5), struct.pack("<e", 1.5),
                              struct.pack("<d", 0.1), b"\x01"]


def test_struct_by_value(prepare):
    dt = np.dtype([("a", np.int32), ("b", np.float32), ("c", np.int32)], align=True)
    p, rec, _ = prepare(["i8", ("bytes", dt.itemsize, dt.alignment)])
    value = np.array([(1, 2.0, 3)], dtype=dt)[0]
    p.launch(1, 1, None, 0, 5, value)
    p.launch(1, 1, None, 0, 5, value.tobytes())
    assert rec.calls[0]["params"][1] == value.tobytes() == rec.calls[1]["params"][1]
    with pytest.raises(L.KernelArgumentError, match="the struct is 12 bytes, got 4"):
        p.launch(1, 1, None, 0, 5, b"abcd")
    with pytest.raises(L.KernelArgumentError, match="argument 1"):
        p.launch(1, 1, None, 0, 5, 3.0)


def test_stream_like_objects(prepare):
    class TorchLike:
        cuda_stream = 0x77

    class CoreLike:
        def __cuda_stream__(self):
            return (0, 0x88)

    p, rec, _ = prepare(["i32"])
    p.launch(1, 1, TorchLike(), 0, 1)
    p.launch(1, 1, CoreLike(), 0, 1)
    assert [c["stream"] for c in rec.calls] == [0x77, 0x88]


def test_wrong_count(prepare):
    p, rec, _ = prepare(["ptr", "f32"])
    with pytest.raises(L.KernelArgumentError, match="takes 2 arguments, got 1"):
        p.launch(1, 1, None, 0, 0x1000)
    assert rec.calls == []


def test_wrong_type_names_the_argument(prepare):
    p, rec, _ = prepare(["ptr", "i32"])
    with pytest.raises(L.KernelArgumentError, match="argument 1 of kernel 'k'") as info:
        p.launch(1, 1, None, 0, 0x1000, 1.5)
    assert info.value.index == 1
    assert rec.calls == []


def test_host_array_where_a_pointer_is_needed(prepare):
    p, rec, _ = prepare(["ptr", "i32"])
    with pytest.raises(L.KernelArgumentError, match="host NumPy array") as info:
        p.launch(1, 1, None, 0, np.zeros(4), 4)
    assert info.value.index == 0
    assert rec.calls == []


def test_refused_block_is_explained(prepare):
    p, rec, fn = prepare(["i32"], results=[1])
    with pytest.raises(LaunchError, match=r"1024 threads exceeds its maximum of 768 "
                                          r"\(its 80 registers"):
        p.launch(1, (32, 32), None, 0, 1)


def test_refused_shared_memory_is_explained(prepare):
    p, rec, fn = prepare(["i32"], results=[1])
    with pytest.raises(LaunchError, match="max_dynamic_shared_size_bytes = 100000"):
        p.launch(1, 32, None, 100_000, 1)
    p, rec, fn = prepare(["i32"], results=[1])
    with pytest.raises(LaunchError, match="at most"):
        p.launch(1, 32, None, 500_000, 1)


def test_refused_grid_is_explained(prepare):
    p, rec, fn = prepare(["i32"], results=[1])
    with pytest.raises(LaunchError, match="grid.y = 70000 exceeds the device limit of 65535"):
        p.launch((1, 70000), 32, None, 0, 1)


def test_bad_dims_are_rejected_before_the_driver(prepare):
    p, rec, _ = prepare(["i32"])
    with pytest.raises(LaunchError, match=">= 1"):
        p.launch((0, 1), 32, None, 0, 1)
    with pytest.raises(LaunchError, match="1 to 3"):
        p.launch((1, 1, 1, 1), 32, None, 0, 1)
    assert rec.calls == []


def test_other_driver_errors_are_typed(prepare):
    p, rec, _ = prepare(["i32"], results=[400])
    with pytest.raises(CudaError) as info:
        p.launch(1, 32, None, 0, 1)
    assert info.value.code == 400 and "'k'" in str(info.value)


def test_no_current_context_is_made_current_and_retried(prepare):
    p, rec, fn = prepare(["i32"], results=[201, 0])
    p.launch(1, 32, None, 0, 5)
    assert fn.device.made_current == 1
    assert len(rec.calls) == 2 and rec.calls[1]["params"] == [struct.pack("<i", 5)]


def test_contended_buffer_uses_a_private_one(prepare):
    p, rec, _ = prepare(["i32"])
    p._lock_acquire()            # as if another thread were inside launch()
    try:
        p.launch(1, 32, None, 0, 11)
    finally:
        p._lock_release()
    p.launch(1, 32, None, 0, 12)
    assert [c["params"] for c in rec.calls] == [[struct.pack("<i", 11)],
                                               [struct.pack("<i", 12)]]


def test_infer_param():
    assert L.infer_param(np.float32(1.0), 0) == ("f32", 1.0)
    assert L.infer_param(3, 0) == ("i64", 3)
    assert L.infer_param(2.0, 0) == ("f64", 2.0)
    assert L.infer_param(np.int16(-2), 0) == ("i16", -2)

    class Buf:
        ptr = 0x5000

    class Cai:
        __cuda_array_interface__ = {"data": (0x6000, False), "shape": (3,), "typestr": "<f4",
                                    "version": 3}

    assert L.infer_param(Buf(), 0) == ("ptr", 0x5000)
    assert L.infer_param(Cai(), 0) == ("ptr", 0x6000)
    dt = np.dtype([("x", np.float64), ("n", np.int8)], align=True)
    t, v = L.infer_param(np.zeros(1, dt)[0], 0)
    assert t == ("bytes", 16, 8) and v == bytes(16)
    with pytest.raises(L.KernelArgumentError, match="argument 2 is a host NumPy array"):
        L.infer_param(np.zeros(3), 2)
    with pytest.raises(L.KernelArgumentError, match="cannot pass a str"):
        L.infer_param("x", 0)


def test_launch_config():
    c = L.LaunchConfig((4, 2), 128, 64)
    assert c.grid == (4, 2, 1) and c.block == (128, 1, 1) and c.shared_bytes == 64
    with pytest.raises(LaunchError):
        L.LaunchConfig(1, 1, -1)


def test_comparison_trampoline_reaches_the_driver_entry_point(monkeypatch, tmp_path):
    """benchmarks/launch_overhead.py's API-mode trampoline (a comparison backend, not
    cupric's) calls whatever cuLaunchKernel address it is given, packing as cupric does."""
    import shutil
    import sys
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the trampoline")
    pytest.importorskip("setuptools")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    monkeypatch.delitem(sys.modules, "_launch_backends", raising=False)
    import _launch_backends as backends
    ffi = cffi.FFI()
    types = ["ptr", "f32"]
    rec = Recorder(ffi, _sizes(types))
    signature = ("int(uintptr_t, unsigned int, unsigned int, unsigned int, unsigned int, "
                 "unsigned int, unsigned int, unsigned int, uintptr_t, void **, void **)")
    callback = ffi.callback(signature, rec)
    n = L._Native()
    n.ffi, n.lib, n.path, n.null = ffi, None, "fake", ffi.NULL
    n.launch = callback
    n.launch_cooperative = None
    monkeypatch.setattr(L, "native", lambda: n)
    backends.build_trampoline(str(tmp_path))
    p = backends.comparison_prepared(FakeFunction(), types, "api")
    assert p.backend == "api"
    p.launch((3, 2), 64, 0x99, 16, 0xABC000, 0.5)
    (call,) = rec.calls
    assert call["f"] == 0x1234 and call["grid"] == (3, 2, 1) and call["block"] == (64, 1, 1)
    assert call["stream"] == 0x99 and call["shared"] == 16
    assert call["params"] == [struct.pack("<Q", 0xABC000), struct.pack("<f", 0.5)]
    with pytest.raises(L.KernelArgumentError, match="argument 1"):
        p.launch(1, 1, 0, 0, 0xABC000, "x")
    # cupric itself takes only its own backends.
    with pytest.raises(ValueError, match="one of c, bindings, cffi"):
        L.PreparedLaunch(FakeFunction(), types, backend="api")


@pytest.fixture
def compiled(monkeypatch, tmp_path_factory):
    """PreparedLaunch on the compiled extension, calling a recorder instead of libcuda."""
    import shutil
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the launch extension")
    pytest.importorskip("setuptools")
    from cupric.runtime import _fastlaunch
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setattr(_fastlaunch.EXTENSION, "module", None)
    monkeypatch.setattr(_fastlaunch.EXTENSION, "error", None)
    assert _fastlaunch.load(build=True) is not None, _fastlaunch.build_error()
    keep = []

    def make(types, results=()):
        ffi = cffi.FFI()
        rec = Recorder(ffi, _sizes(types), results)
        signature = ("int(uintptr_t, unsigned int, unsigned int, unsigned int, unsigned int, "
                     "unsigned int, unsigned int, unsigned int, uintptr_t, void **, void **)")
        callback = ffi.callback(signature, rec)
        keep.append(callback)
        n = L._Native()
        n.ffi, n.lib, n.path, n.null = ffi, None, "fake", ffi.NULL
        n.launch = callback
        n.launch_cooperative = None
        monkeypatch.setattr(L, "native", lambda: n)
        fn = FakeFunction()
        p = L.make_prepared(fn, types, backend="c")
        assert p.backend == "c" and type(p).__name__ == "_CompiledPreparedLaunch"
        return p, rec, fn
    return make


ALL_TYPES = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64",
             "bool", "ptr", ("bytes", 12, 4)]


def test_compiled_packs_every_type_like_struct(compiled):
    p, rec, _ = compiled(ALL_TYPES)
    values = [-100, -30000, -(1 << 30), -(1 << 60), 200, 60000, (1 << 32) - 1, (1 << 64) - 1,
              1.5, 3.25, -1e300, True, 0xDEADBEEF000, b"0123456789ab"]
    p.launch((7, 3, 2), (32, 2), 0x55, 256, *values)
    numpy_values = [np.int8(-100), np.int16(-30000), np.int32(-(1 << 30)), np.int64(-(1 << 60)),
                    np.uint8(200), np.uint16(60000), np.uint32((1 << 32) - 1),
                    np.uint64((1 << 64) - 1), np.float16(1.5), np.float32(3.25),
                    np.float64(-1e300), np.bool_(True), np.uint64(0xDEADBEEF000),
                    b"0123456789ab"]
    p(7, 32, None, 0, *numpy_values)
    expect = [struct.pack("<" + (f"{t[1]}s" if isinstance(t, tuple) else L.PARAM_TYPES[t][0]), v)
              for t, v in zip(ALL_TYPES, values)]
    first, second = rec.calls
    assert first["grid"] == (7, 3, 2) and first["block"] == (32, 2, 1)
    assert first["stream"] == 0x55 and first["shared"] == 256 and first["f"] == 0x1234
    assert first["params"] == expect
    assert second["params"] == expect and second["stream"] == 0 and second["grid"] == (7, 1, 1)


def test_compiled_slow_paths_raise_typed_errors(compiled):
    p, rec, _ = compiled(["ptr", "i32"])
    with pytest.raises(L.KernelArgumentError, match="takes 2 arguments"):
        p.launch(1, 1, None, 0, 1)
    with pytest.raises(L.KernelArgumentError, match="argument 1"):
        p.launch(1, 1, None, 0, 1, 2.5)
    with pytest.raises(L.KernelArgumentError, match="argument 1"):
        p.launch(1, 1, None, 0, 1, 1 << 40)
    with pytest.raises(L.KernelArgumentError, match="host NumPy array"):
        p.launch(1, 1, None, 0, np.zeros(3), 1)
    with pytest.raises(LaunchError, match=">= 1"):
        p.launch((0, 1), 1, None, 0, 1, 2)
    assert rec.calls == []
    # Shapes and streams the C side does not take go through Python and still launch.
    p.launch([2, 2], np.int64(32), None, 0, 1, 2)
    assert rec.calls[-1]["grid"] == (2, 2, 1) and rec.calls[-1]["block"] == (32, 1, 1)

    class TorchLike:
        cuda_stream = 0x77

    p.launch(1, 1, TorchLike(), 0, 1, 2)
    assert rec.calls[-1]["stream"] == 0x77


def test_compiled_failures_are_diagnosed(compiled):
    p, rec, fn = compiled(["i32"], results=[1])
    with pytest.raises(LaunchError, match="exceeds its maximum of 768"):
        p.launch(1, (32, 32), None, 0, 1)
    p, rec, fn = compiled(["i32"], results=[201, 0])
    p.launch(1, 32, None, 0, 9)
    assert fn.device.made_current == 1
    assert [c["params"] for c in rec.calls] == [[struct.pack("<i", 9)]] * 2


def test_compiled_launch_does_not_keep_itself_alive(compiled):
    import gc
    import weakref
    p, rec, _ = compiled(["i32"])
    ref = weakref.ref(p)
    del p
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("backend", ["c", "cffi"])
def test_function_launch_infers_and_caches(compiled, monkeypatch, backend):
    """Function.launch end to end on a fake module: inference, limits, caching."""
    from cupric.runtime.module import Function
    monkeypatch.setenv("CUPRIC_LAUNCH_BACKEND", backend)
    types = ["ptr", "ptr", "f32", "i32"]
    _, rec, _ = compiled(types)          # installs the recording native launch

    class Dev(FakeDevice):
        pass

    class Mod:
        _device = Dev()
        handle = 1

    fn = Function._wrap(Mod(), "k", 0x1234)
    fn._attrs.update(max_threads_per_block=768, max_dynamic_shared_size_bytes=1024,
                     shared_size_bytes=0, num_regs=80)

    class Buf:
        def __init__(self, ptr):
            self.ptr = ptr

    class Cai:
        __cuda_array_interface__ = {"data": (0x7000, False), "shape": (4,), "typestr": "<f4",
                                    "version": 3}

    for _ in range(2):
        fn.launch(4, 256, Buf(0x1000), Cai(), np.float32(2.5), np.int32(9))
    fn(L.LaunchConfig((2, 2), 128, 512), Buf(0x3000), Buf(0x4000), np.float32(1.0),
       np.int32(1))
    assert len(fn._prepared) == 1
    params = [struct.pack("<Q", 0x1000), struct.pack("<Q", 0x7000), struct.pack("<f", 2.5),
              struct.pack("<i", 9)]
    assert rec.calls[0]["params"] == rec.calls[1]["params"] == params
    assert rec.calls[2]["grid"] == (2, 2, 1) and rec.calls[2]["shared"] == 512
    assert rec.calls[2]["params"][0] == struct.pack("<Q", 0x3000)
    with pytest.raises(L.KernelArgumentError, match="argument 1 is a host NumPy array"):
        fn.launch(1, 32, Buf(1), np.zeros(3, np.float32), np.float32(1), np.int32(1))
    with pytest.raises(LaunchError, match="exceeds its maximum of 768"):
        fn.launch(1, 1024, Buf(1), Buf(2), np.float32(1), np.int32(1))
    with pytest.raises(LaunchError, match="2048 bytes of dynamic shared memory"):
        fn.launch(1, 32, Buf(1), Buf(2), np.float32(1), np.int32(1), shared_bytes=2048)
    assert len(rec.calls) == 3
