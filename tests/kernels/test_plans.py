"""CPU lane: the ready kernels' plans (`_common.Plans`, `direct`, `direct_views`) on a fake
GPU: vecadd, saxpy and transpose hand checked arrays straight to the kernel's launcher;
a plan is made once per (array class, dtype) and a new kind or dtype makes its own; every
launch equals the general path's (`Call`) and every refusal is the general path's."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.kernels import _common, _plans, elementwise, transpose
from cupric.runtime import intake, memory
from fake_device import FakeGpu


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGpu(monkeypatch)
    yield fake
    fake.close()


def _buffer(gpu, shape, dtype, **kw):
    shape = (shape,) if isinstance(shape, int) else shape
    return memory.borrow(next(gpu._addresses), shape, None, dtype, **kw)


def _maker(gpu, kind):
    torch_names = {"f2": "float16", "f4": "float32", "f8": "float64", "i4": "int32",
                   "i8": "int64", "u1": "uint8", "u4": "uint32"}
    return {"buffer": lambda shape, dtype: _buffer(gpu, shape, dtype),
            "cupy": gpu.array,
            "torch": lambda shape, dtype: gpu.tensor(shape, torch_names[dtype])}[kind]


def _general_only(monkeypatch):
    """Every call takes `Call`'s general path (what the plans replace)."""
    monkeypatch.setattr(elementwise, "direct", lambda *args, **kw: None)
    monkeypatch.setattr(transpose, "direct_views", lambda *args, **kw: None)


def _calls(make, dtype):
    x, y, out = make(5000, dtype), make(5000, dtype), make(5000, dtype)
    a, t = make((70, 40), dtype), make((40, 70), dtype)
    return [lambda: elementwise.vecadd(x, y, out=out),
            lambda: elementwise.saxpy(3, x, y, out=out),
            lambda: elementwise.saxpy(3, x, y, out=y),
            lambda: transpose.transpose(a, out=t),
            lambda: transpose.transpose(a, out=t, tile_dim=64)]


def _record(gpu, calls, stream=None):
    gpu.launches.clear()
    gpu.orders.clear()
    for fn in calls:
        fn()
    return list(gpu.launches), list(gpu.orders)


@pytest.mark.parametrize("kind", ["buffer", "cupy", "torch"])
@pytest.mark.parametrize("dtype", ["f4", "f8", "f2", "i4", "u1"])
def test_plans_launch_what_the_general_path_launches(gpu, monkeypatch, kind, dtype):
    if kind == "torch" and dtype == "u1":
        dtype = "i8"
    calls = _calls(_maker(gpu, kind), dtype)
    if kind != "buffer" and dtype == "f2":
        # float16 saxpy in place passes y twice to one kernel (read, and written as out):
        # the launcher refuses overlapping arrays, so the call takes the general path.
        del calls[2]
    if kind != "buffer":
        # The first call of a kind makes the kernel's launcher for it, on the general
        # path: PyTorch tensors and CuPy arrays are then checked by that launcher.
        _record(gpu, calls)
    with monkeypatch.context() as mp:  # no general path taken: no `Call` made
        mp.setattr(elementwise, "Call", None)
        mp.setattr(transpose, "Call", None)
        planned = _record(gpu, calls)
    assert len(planned[0]) == len(calls)
    # The plans were used: each op has one for this class and dtype.
    for table in (elementwise._VECADD_PLANS, elementwise._SAXPY_PLANS, transpose._PLANS):
        assert [plan[1] for plan in table.values()] == [np.dtype(dtype)]
    with monkeypatch.context() as mp:
        _general_only(mp)
        general = _record(gpu, calls)
    assert planned == general


def test_a_plan_is_made_once_per_class_and_dtype(gpu, monkeypatch):
    made = []
    real = _plans._plan

    def counting(cls, raw, dtypes):
        made.append((cls.__name__, str(raw)))
        return real(cls, raw, dtypes)

    monkeypatch.setattr(_plans, "_plan", counting)
    x, y, out = gpu.array(100, "f4"), gpu.array(100, "f4"), gpu.array(100, "f4")
    for _ in range(3):  # hits after the first
        elementwise.vecadd(x, y, out=out)
    assert made == [("ndarray", "float32")]
    elementwise.vecadd(gpu.array(100, "f8"), gpu.array(100, "f8"))  # out=None: general
    assert made == [("ndarray", "float32")]
    f8 = [gpu.array(100, "f8") for _ in range(3)]
    elementwise.vecadd(*f8[:2], out=f8[2])  # a new dtype
    t = [gpu.tensor(100, "float32") for _ in range(3)]
    elementwise.vecadd(*t[:2], out=t[2])  # a new kind
    b = [_buffer(gpu, 100, "f4") for _ in range(3)]
    elementwise.vecadd(*b[:2], out=b[2])
    elementwise.vecadd(*b[:2], out=b[2])
    assert made == [("ndarray", "float32"), ("ndarray", "float64"), ("Tensor", "torch.float32"),
                    ("DeviceBuffer", "float32")]
    assert len(gpu.launches) == 8
    # Each kind keeps its plan: the kernel's launcher table holds one launcher a kind.
    assert set(elementwise._VECADD_PLANS) >= {(type(x), np.dtype("f4")),
                                              (type(t[0]), t[0].dtype)}


def test_classes_and_dtypes_without_a_plan(gpu, monkeypatch):
    plans = elementwise._VECADD_PLANS
    f4 = np.dtype("f4")
    assert plans[np.ndarray, f4] is None  # host arrays: the general path refuses them
    assert plans[memory.DeviceBuffer, np.dtype(bool)] is None  # outside NUMERIC
    assert plans[memory.DeviceBuffer, f4][1] is f4
    bf16 = gpu.tensor(8, "bfloat16")
    assert plans[type(bf16), bf16.dtype] is None
    # Several GPUs: PyTorch and CuPy arrays take the general path (each array's device).
    _common.forget_plans()
    monkeypatch.setattr(_common, "_single_device", lambda: False)
    assert plans[type(bf16), gpu.tensor(8, "float32").dtype] is None
    assert plans[memory.DeviceBuffer, f4] is not None
    assert _common.direct(plans, (object(),), None) is None  # no dtype at all


def _refusals(gpu, make):
    x, y = make(64, "f4"), make(64, "f4")
    return [lambda: elementwise.vecadd(x, make(64, "f8"), out=y),
            lambda: elementwise.vecadd(x, make(65, "f4"), out=y),
            lambda: elementwise.vecadd(x, y, out=make(64, "f8")),
            lambda: elementwise.vecadd(x, y, out=make(63, "f4")),
            lambda: elementwise.vecadd(x, y, out=make((8, 8), "f4")),
            lambda: elementwise.saxpy(2.5, make(64, "i4"), make(64, "i4"),
                                      out=make(64, "i4")),
            lambda: elementwise.saxpy(2 ** 40, make(64, "i4"), make(64, "i4"),
                                      out=make(64, "i4")),
            lambda: transpose.transpose(make((4, 6), "f4"), out=make((4, 6), "f4")),
            lambda: transpose.transpose(make((4, 6), "f4"), out=make((6, 4), "f8")),
            lambda: transpose.transpose(make(24, "f4"), out=make(24, "f4")),
            lambda: transpose.transpose(make((4, 6), "f4"), out=make((6, 4), "f4"),
                                        tile_dim=16)]


@pytest.mark.parametrize("kind", ["buffer", "cupy", "torch"])
def test_refusals_are_the_general_paths(gpu, monkeypatch, kind):
    def errors():
        found = []
        for fn in _refusals(gpu, _maker(gpu, kind)):
            with pytest.raises((TypeError, ValueError)) as info:
                fn()
            found.append((type(info.value), str(info.value)))
        return found

    planned = errors()
    with monkeypatch.context() as mp:
        _general_only(mp)
        general = errors()
    assert planned == general
    assert gpu.launches == [] and gpu.orders == [] and gpu.allocations == []


def test_buffers_closed_read_only_or_with_a_stream_take_the_general_path(gpu):
    plans = elementwise._VECADD_PLANS
    x, y, out = _buffer(gpu, 64, "f4"), _buffer(gpu, 64, "f4"), _buffer(gpu, 64, "f4")
    assert _common.direct(plans, (x, y, out), None, out) == (np.dtype("f4"), 64, True)
    closed = _buffer(gpu, 64, "f4")
    closed._alloc._closed = True
    assert _common.direct(plans, (x, y, closed), None, closed) is None
    with pytest.raises(intake.ClosedError):
        elementwise.vecadd(x, y, out=closed)
    with pytest.raises(intake.ClosedError):
        transpose.transpose(closed.reshape(8, 8), out=_buffer(gpu, (8, 8), "f4"))
    frozen = _buffer(gpu, 64, "f4", readonly=True)
    assert _common.direct(plans, (x, y, frozen), None, frozen) is None
    assert _common.direct(plans, (frozen, y, out), None, out) is not None  # only read
    with pytest.raises(ValueError, match="read-only"):
        elementwise.vecadd(x, y, out=frozen)
    with pytest.raises(ValueError, match="read-only"):
        elementwise.saxpy(2.0, x, frozen, out=frozen)
    assert gpu.launches == []
    # A buffer naming its stream, on a call with another: the general path orders it.
    owned = _buffer(gpu, 64, "f4", stream=5)
    assert _common.direct(plans, (owned, y, out), None, out) is not None
    assert _common.direct(plans, (owned, y, out), 9, out) is None
    elementwise.vecadd(owned, y, out=out, stream=9)
    assert gpu.orders == [(9, 5)] and len(gpu.launches) == 1
    # Strided 1-D buffers go as they are (the kernels take strides, as on the general
    # path), n-D ones that are not C-contiguous take the general path.
    strided = memory.borrow(next(gpu._addresses), (32,), (8,), "f4")
    assert _common.direct(plans, (strided, strided, strided), None, strided) == \
        (np.dtype("f4"), 32, True)
    fortran = memory.borrow(next(gpu._addresses), (8, 8), (4, 32), "f4")
    assert _common.direct_views(transpose._PLANS, (fortran, out.reshape(8, 8)), None) is None


def test_cupy_views_order_after_cupys_stream_once(gpu, monkeypatch):
    a, t = gpu.array((70, 40), "f4"), gpu.array((40, 70), "f4")
    gpu.set_cupy_stream(0x66)
    transpose.transpose(a, out=t, stream=7)
    planned = list(gpu.orders)
    assert planned == [(7, 0x66)]
    gpu.orders.clear()
    with monkeypatch.context() as mp:
        _general_only(mp)
        transpose.transpose(a, out=t, stream=7)
    assert gpu.orders == planned
    gpu.orders.clear()
    gpu.set_cupy_stream(0)  # CuPy's null stream and the legacy stream: nothing to order
    transpose.transpose(a, out=t)
    assert gpu.orders == []
    # A refused call orders nothing.
    gpu.set_cupy_stream(0x66)
    with pytest.raises(ValueError):
        transpose.transpose(a, out=gpu.array((70, 40), "f4"), stream=7)
    assert gpu.orders == []


def test_switches_and_the_simulator_turn_plans_off(gpu, monkeypatch):
    plans = elementwise._VECADD_PLANS
    x, y, out = gpu.array(64, "f4"), gpu.array(64, "f4"), gpu.array(64, "f4")
    assert _common.direct(plans, (x, y, out), None, out) is not None
    monkeypatch.setitem(_common._DIRECT, "cupy", False)
    assert _common.direct(plans, (x, y, out), None, out) is None
    monkeypatch.setattr(_common, "_FOREIGN", [False])
    assert _common.direct_views(transpose._PLANS, (x, out), None, out) is None
    monkeypatch.setattr(_common, "on_simulator", lambda: True)
    b = _buffer(gpu, 64, "f4")
    assert _common.direct(plans, (b, b, b), None, b) is None
    # Mixed kinds: the general path.
    monkeypatch.setattr(_common, "on_simulator", lambda: False)
    assert _common.direct(plans, (b, b, gpu.tensor(64, "float32")), None) is None


def test_saxpy_scalar_conversion(gpu):
    x, y, out = gpu.array(64, "f4"), gpu.array(64, "f4"), gpu.array(64, "f4")
    for alpha in (0.5, np.float32(0.5), np.float64(0.5), 1):
        elementwise.saxpy(alpha, x, y, out=out)
        value = gpu.launches[-1][4][0]
        assert type(value) is np.float32 and value == np.float32(alpha)
    i, j, k = gpu.array(64, "i4"), gpu.array(64, "i4"), gpu.array(64, "i4")
    elementwise.saxpy(np.int32(-7), i, j, out=k)
    assert gpu.launches[-1][4][0] == -7 and type(gpu.launches[-1][4][0]) is np.int32
    with pytest.raises(ValueError, match="does not fit in int32"):
        elementwise.saxpy(np.int64(2 ** 40), i, j, out=k)
    with pytest.raises(TypeError, match="is not an integer"):
        elementwise.saxpy(np.float32(0.5), i, j, out=k)
