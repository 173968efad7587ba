"""The launch path without a GPU: argument flattening per the Kernel ABI, specialization
keys, the alias check that picks the noalias/read-only variant, runtime parameter types,
and the simulator fallback."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import cupric
from cupric.compiler.typing.ktypes import StructType, TupleType
from cupric.types import Array, bool_, f32, i32, i64

kmod = importlib.import_module("cupric.compiler.kernel")


class FakeBuffer:
    """Quacks like cupric.runtime.DeviceBuffer (ptr, shape, strides in bytes, dtype)."""

    def __init__(self, ptr, shape, dtype=np.float32, strides=None):
        self.ptr = ptr
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        if strides is None:
            strides, acc = [], self.itemsize
            for n in reversed(self.shape):
                strides.insert(0, acc)
                acc *= n
        self.strides = tuple(strides)


def test_array_flattening_and_key():
    flat, extents = [], []
    buf = FakeBuffer(0x1000, (4, 8))
    key = kmod._arg_parts(buf, flat, extents, 0)
    assert flat == [0x1000, 4, 8, 8, 1]  # strides in elements
    assert key == (np.dtype(np.float32), 2, "C")
    assert extents == [(0x1000, 0x1000 + 4 * 8 * 4, 0, 0x1000)]
    t = FakeBuffer(0x1000, (8, 4), strides=(4, 32))
    assert kmod._arg_parts(t, [], [], 0)[2] == "F"


def test_scalars_tuples_and_bad_strides():
    flat = []
    key = kmod._arg_parts((1, 2.0, True), flat, [], 0)
    assert key == (tuple, int, float, bool) and flat == [1, 2.0, True]
    with pytest.raises(TypeError, match="not a multiple of the item size"):
        kmod._arg_parts(FakeBuffer(0, (4,), strides=(6,)), [], [], 0)
    with pytest.raises(TypeError, match="host NumPy array"):
        kmod._arg_parts(np.zeros(3), [], [], 0)


def test_alias_check():
    a = FakeBuffer(0x1000, (256,))
    b = FakeBuffer(0x2000, (256,))
    overlap = FakeBuffer(0x1000 + 512, (256,))
    ext = []
    for i, buf in enumerate((a, b)):
        kmod._arg_parts(buf, [], ext, i)
    assert kmod._disjoint(ext, frozenset({1}))
    ext2 = []
    for i, buf in enumerate((a, overlap)):
        kmod._arg_parts(buf, [], ext2, i)
    assert not kmod._disjoint(ext2, frozenset({1}))
    assert kmod._disjoint(ext2, frozenset())  # read-only overlap is harmless
    # The same array passed twice and written: may alias.
    ext3 = []
    for i, buf in enumerate((a, a)):
        kmod._arg_parts(buf, [], ext3, i)
    assert not kmod._disjoint(ext3, frozenset({0}))


def test_param_types_follow_the_abi():
    point = StructType(np.dtype([("x", np.float32), ("n", np.int64)], align=True))
    types = [f32, Array[f32, 2, "C"], bool_, TupleType([i32, i64]), point]
    assert kmod.param_types(types) == ["f32", "ptr", "i64", "i64", "i64", "i64", "bool",
                                       "i32", "i64", ("bytes", 16, 8)]


@cupric.kernel
def _copy(x: Array[f32, 1], y: Array[f32, 1]):
    i = cupric.device.grid(1)
    if i < len(x):
        y[i] = x[i]


def test_writes_decide_read_only_arrays():
    spec = _copy.specialize("Array[f32, 1, 'C'], Array[f32, 1, 'C']")
    assert spec.typed.writes == {1}
    types = spec.typed.arg_types
    assert types[0].readonly and not types[1].readonly
    plain = _copy.specialize("Array[f32, 1, 'C'], Array[f32, 1, 'C']", noalias=False)
    assert not plain.typed.arg_types[0].readonly
    assert _copy.writes(spec.arg_types) == frozenset({1})


def test_writes_through_device_functions_and_aliases():
    @cupric.device_function
    def put(a, i, v):
        a[i] = v

    @cupric.kernel
    def k(x: Array[f32, 1], y: Array[f32, 1], z: Array[f32, 1]):
        w = z
        put(x, 0, 1.0)
        w[0] = y[0]

    spec = k.specialize("Array[f32, 1, 'C'], Array[f32, 1, 'C'], Array[f32, 1, 'C']")
    assert spec.typed.writes == {0, 2}


def test_simulator_fallback_without_gpu(monkeypatch, capsys):
    monkeypatch.setattr(kmod, "_SIMULATOR", [True])
    monkeypatch.setattr(kmod, "_SIM_NOTICE", [False])
    seen = []
    import cupric.simulator._launch as sim
    monkeypatch.setattr(sim, "run", lambda f, body, g, b, a, shared_bytes=0: seen.append(
        (f, g, b, a, shared_bytes)))
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, np.float32)
    _copy[1, 4](x, y)
    _copy[(1,), (4,), None, 16](x, y)
    assert seen[0][:3] == (_copy.py_func, (1, 1, 1), (4, 1, 1)) and seen[1][4] == 16
    err = capsys.readouterr().err
    assert err.count("CPU simulator") == 1


def test_simulate_and_launch_keywords(monkeypatch):
    seen = []
    import cupric.simulator._launch as sim
    monkeypatch.setattr(sim, "run", lambda f, body, g, b, a, shared_bytes=0: seen.append(g))
    monkeypatch.setattr(kmod, "_SIMULATOR", [True])
    _copy.simulate[2, 32](np.zeros(2, np.float32), np.zeros(2, np.float32))
    _copy.launch(np.zeros(2, np.float32), np.zeros(2, np.float32), grid=3, block=32)
    assert seen == [(2, 1, 1), (3, 1, 1)]


class _Prepared:
    def __init__(self, log, spec):
        self.log, self.spec = log, spec

    def launch(self, grid, block, stream, shared_bytes, *values):
        self.log.append((self.spec.noalias, self.spec.aligned, grid, block, stream,
                         shared_bytes, values))


def test_launch_picks_the_variant(monkeypatch):
    """The hot path: flattened values reach PreparedLaunch.launch, and the variant follows
    the aliasing and alignment of the arguments."""
    log = []
    monkeypatch.setattr(kmod, "_SIMULATOR", [False])
    monkeypatch.setattr(kmod.Specialization, "prepared",
                        lambda self: _Prepared(log, self))
    kmod._ARRAY_CLASSES.add(FakeBuffer)
    x = FakeBuffer(0x1000, (256,))
    y = FakeBuffer(0x2000, (256,))
    _copy[2, 128](x, y)
    assert log[-1] == (True, True, 2, 128, None, 0, (0x1000, 256, 1, 0x2000, 256, 1))
    _copy[(2,), (128,), 7, 64](x, FakeBuffer(0x1000 + 64, (256,)))  # overlaps x
    assert log[-1][:2] == (False, True) and log[-1][4:6] == (7, 64)
    _copy[2, 128](FakeBuffer(0x1004, (256,)), y)  # not 16-byte aligned
    assert log[-1][:2] == (True, False)
    strided = FakeBuffer(0x1000, (128,), strides=(8,))
    _copy[2, 128](strided, y)  # a new specialization: layout 'A'
    assert log[-1][6] == (0x1000, 128, 2, 0x2000, 256, 1)
    assert len(_copy._specs) == 2
    with pytest.raises(TypeError, match=r"_copy\(\) takes 2 arguments"):
        _copy[1, 1](x)


def test_launch_test_kernels_build_for_every_arch():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from test_frontend_golden import build_everywhere
    build_everywhere(_copy, "Array[f32, 1, 'C'], Array[f32, 1, 'A']")


def test_compile_options_dataclass_and_env_simulator(monkeypatch):
    from cupric.compiler.options import CompileOptions
    opts = CompileOptions(arch="sm_80", lineinfo=True, ftz=True)

    @cupric.kernel(options=opts)
    def k(x: Array[f32, 1]):
        x[0] = 1.0

    assert k.options is opts and k.options.lineinfo and not k.fast_math
    assert "!DILocation" in k.inspect_ir("Array[f32, 1, 'C']")
    assert ".target sm_80" in k.inspect_ptx("Array[f32, 1, 'C']")
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    assert kmod._simulator_reason() == "CUPRIC_SIMULATOR is set"


def test_device_function_runs_as_python():
    @cupric.device_function
    def twice(v):
        return 2 * v
    assert twice(21) == 42


def test_fast_path_matches_the_general_path(monkeypatch):
    """After a first launch, a generated launcher handles the same signature; it must pass
    exactly what the general path would, and defer to it whenever a guard fails."""
    monkeypatch.setattr(kmod, "_SIMULATOR", [False])
    kmod._ARRAY_CLASSES.add(FakeBuffer)

    @cupric.kernel
    def axpy(a: f32, n: i64, x: Array[f32, 1], y: Array[f32, 1], flag: bool_):
        i = cupric.device.grid(1)
        if flag and i < n:
            y[i] = a * x[i] + y[i]

    def run(use_fast, calls):
        log = []
        monkeypatch.setattr(kmod.Specialization, "prepared",
                            lambda self: _Prepared(log, self))
        axpy._specs.clear()
        axpy._variants.clear()
        axpy._fast = None
        axpy._no_fast.clear()
        for args in calls:
            if not use_fast:
                axpy._fast = None
            axpy[3, 64](*args)
        return log, axpy._fast

    x = FakeBuffer(0x1000, (256,))
    y = FakeBuffer(0x2000, (256,))
    calls = [
        (np.float32(2), 256, x, y, True),
        (np.float32(3), 10, x, y, False),                       # fast path
        (1.5, 256, x, y, True),                                 # other class: general
        (np.float32(2), 256, x, FakeBuffer(0x1000 + 512, (256,)), True),  # overlap
        (np.float32(2), 256, FakeBuffer(0x1008, (256,)), y, True),        # misaligned
        (np.float32(2), 256, x, FakeBuffer(0x3000, (0,)), True),          # empty
        (np.float32(2), 256, x, y),                             # wrong count
    ]
    general, _ = run(False, calls[:-1])
    fast, fn = run(True, calls[:-1])
    assert fn is not None
    assert fast == general
    assert [entry[:2] for entry in fast] == [(True, True), (True, True), (True, True),
                                             (False, True), (True, False), (True, True)]
    with pytest.raises(TypeError, match="takes 5 arguments"):
        axpy[1, 1](*calls[-1])
    with pytest.raises(TypeError, match="expects Array\\[f32"):  # dtype guard, then refused
        axpy[1, 1](np.float32(2), 256, FakeBuffer(0x1000, (64,), np.float64), y, True)
