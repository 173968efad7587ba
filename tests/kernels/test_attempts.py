"""CPU lane: vecadd and saxpy hand PyTorch tensors and CuPy arrays to their kernel's
launcher as an attempt (`cupric.compiler.launcher.attempt`): the launcher makes every
per-array check once and either launches exactly what the general path (`Call`) launches
or refuses with nothing launched or ordered, and the call then takes the general path,
with its errors. Both launcher kinds: the compiled extension's and the generated Python
one."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.compiler import _fastcall, launcher
from cupric.kernels import _common, _plans, elementwise  # _common first: it imports _plans
from fake_device import FakeGpu

TORCH_NAMES = {"f4": "float32", "f8": "float64"}


@pytest.fixture(params=[True, False], ids=["compiled", "python"])
def gpu(request, monkeypatch):
    if request.param and _fastcall.load() is None:
        pytest.skip(f"the launch extension is not built here: {_fastcall.build_error()}")
    monkeypatch.setattr(_fastcall, "_enabled", request.param)
    fake = FakeGpu(monkeypatch)
    fake.compiled = request.param
    yield fake
    fake.close()


def _make(gpu, kind):
    if kind == "cupy":
        return gpu.array
    return lambda n, dtype: gpu.tensor(n, TORCH_NAMES[dtype])


def _spy(monkeypatch):
    """Record every attempt's answer (True: launched by the launcher)."""
    answers = []
    real = elementwise.attempt

    def spy(*args):
        done = real(*args)
        answers.append(done)
        return done

    monkeypatch.setattr(elementwise, "attempt", spy)
    return answers


def _outcome(gpu, fn):
    """What a call did: its launches and orders, or its error."""
    gpu.launches.clear()
    gpu.orders.clear()
    try:
        fn()
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    return list(gpu.launches), list(gpu.orders)


def _general(gpu, monkeypatch, fn):
    with monkeypatch.context() as mp:
        mp.setattr(elementwise, "direct", lambda *args, **kw: None)
        return _outcome(gpu, fn)


def _misaligned(arr, kind):
    if kind == "cupy":
        arr.data.ptr += 4
    else:
        arr._ptr += 4
    return arr


def _refused_cases(gpu, kind):
    """(name, call) pairs whose arrays pass `direct`'s look at the first array but that
    the launcher must refuse (each call's arrays made once)."""
    make = _make(gpu, kind)
    x, y = make(64, "f4"), make(64, "f4")
    short, f8, square = make(63, "f4"), make(64, "f8"), make((8, 8), "f4")
    shifted = _misaligned(make(64, "f4"), kind)
    other = gpu.tensor(64, "float32") if kind == "cupy" else gpu.array(64, "f4")
    cases = [("length", lambda: elementwise.vecadd(x, y, out=short)),
             ("dtype", lambda: elementwise.vecadd(x, f8, out=y)),
             ("rank", lambda: elementwise.vecadd(x, y, out=square)),
             ("aligned", lambda: elementwise.vecadd(x, y, out=shifted)),
             ("overlap", lambda: elementwise.vecadd(x, y, out=x)),
             ("class", lambda: elementwise.saxpy(2.0, x, other, out=y))]
    if kind == "torch":
        def tensor(**attributes):
            t = make(64, "f4")
            for name, value in attributes.items():
                setattr(t, name, value)
            return t
        host, grad = tensor(is_cuda=False), tensor(requires_grad=True)
        sparse, strided = tensor(layout=object()), tensor(_stride=(2,))
        cases += [("host", lambda: elementwise.vecadd(x, y, out=host)),
                  ("grad", lambda: elementwise.vecadd(x, grad, out=y)),
                  ("layout", lambda: elementwise.vecadd(x, sparse, out=y)),
                  ("stride", lambda: elementwise.saxpy(3.0, x, y, out=strided))]
    else:
        strided = make(64, "f4")
        strided.strides = (8,)  # every other item: not C-contiguous
        cases.append(("contiguous", lambda: elementwise.vecadd(x, strided, out=y)))
    return x, y, cases


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_refused_attempts_take_the_general_path(gpu, monkeypatch, kind):
    x, y, cases = _refused_cases(gpu, kind)
    out = _make(gpu, kind)(64, "f4")
    answers = _spy(monkeypatch)
    for _ in range(2):  # the first of a kind makes its launchers, on the general path
        elementwise.vecadd(x, y, out=out)
        elementwise.saxpy(np.float32(2), x, y, out=out)
    assert answers == [False, False, True, True]
    gpu.set_cupy_stream(0x66)  # CuPy's current stream: ordered only by a launch
    for name, fn in cases:
        answers.clear()
        got = _outcome(gpu, fn)
        assert answers == [False], name  # the launcher refused: the general path ran
        assert got == _general(gpu, monkeypatch, fn), name


@pytest.mark.parametrize("kind", ["torch", "cupy"])
def test_accepted_attempts_launch_what_the_general_path_launches(gpu, monkeypatch, kind):
    make = _make(gpu, kind)
    x, y, out = make(5000, "f4"), make(5000, "f4"), make(5000, "f4")
    calls = [lambda s: elementwise.vecadd(x, y, out=out, stream=s),
             lambda s: elementwise.saxpy(0.5, x, y, out=out, stream=s),
             lambda s: elementwise.saxpy(0.5, x, y, out=y, stream=s)]
    for fn in calls:
        fn(None)
    answers = _spy(monkeypatch)
    gpu.set_cupy_stream(0x66)  # CuPy arrays: the launch is ordered after it
    for fn in calls:
        for stream in (None, 7):
            answers.clear()
            planned = _outcome(gpu, lambda: fn(stream))
            assert answers == [True]
            assert len(planned[0]) == 1 and planned[0][0][3] == stream
            if stream is not None:  # (the legacy stream waits for CuPy's by itself)
                assert planned[1] == ([(stream, 0x66)] if kind == "cupy" else [])
            assert planned == _general(gpu, monkeypatch, lambda: fn(stream))


def test_attempts_go_along_the_chain_of_launchers(gpu, monkeypatch):
    # Two dtypes of one kind: two launchers of one class; the newer refuses the older's
    # dtype and the attempt goes on to the older one, never to the general path.
    f4 = [gpu.tensor(64, "float32") for _ in range(3)]
    f8 = [gpu.tensor(64, "float64") for _ in range(3)]
    elementwise.vecadd(*f4[:2], out=f4[2])
    elementwise.vecadd(*f8[:2], out=f8[2])
    kern = elementwise.vecadd_kernel
    assert len(launcher.launcher_keys(kern._fast)) == 2
    answers = _spy(monkeypatch)
    with monkeypatch.context() as mp:
        mp.setattr(elementwise, "Call", None)  # no general path
        for arrays in (f4, f8, f4):
            elementwise.vecadd(*arrays[:2], out=arrays[2])
    assert answers == [True, True, True]
    assert launcher.is_compiled(kern._fast) == gpu.compiled


def test_attempt_refuses_other_lengths_and_kernels_without_launchers(gpu):
    x, y, out = (gpu.tensor(64, "float32") for _ in range(3))
    kern = elementwise.vecadd_kernel
    assert kern._fast is None
    assert _plans.attempt(kern, 1, 768, None, 0, (x, y, out), 64) is False
    elementwise.vecadd(x, y, out=out)  # makes the launcher
    gpu.launches.clear()
    assert _plans.attempt(kern, 1, 768, None, 0, (x, y, out), 65) is False
    assert _plans.attempt(kern, 1, 768, None, 0, (x, y, out), 0) is False
    assert gpu.launches == []
    assert _plans.attempt(kern, 1, 768, None, 0, (x, y, out), 64) is True
    assert len(gpu.launches) == 1
