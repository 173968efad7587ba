"""The bad-kernel corpus (bad_kernels/cases.py): every kernel outside the language fails
with a CompileError naming file:line:col of the marked line, showing that line with a
caret, with a message matching the marker, and no internal exception chained to it.
Also the launch-time errors: wrong argument count and argument types."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

import cupric
from cupric.compiler.errors import CompileError

HERE = Path(__file__).parent / "bad_kernels"
sys.path.insert(0, str(HERE))

import cases  # noqa: E402
import launches  # noqa: E402

SOURCE = (HERE / "cases.py").read_text().splitlines()
MARKER = re.compile(r"#\s*ERROR:\s*(.*?)\s*(?:#\s*noqa.*)?$")


def _marker(line: int):
    m = MARKER.search(SOURCE[line - 1])
    return m.group(1) if m else None


def _function_lines(fn):
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return range(first, first + len(lines))


def test_corpus_is_large_enough():
    assert len(cases.CASES) >= 40


@pytest.mark.parametrize("fn,sig", cases.CASES, ids=[f.__name__ for f, _ in cases.CASES])
def test_bad_kernel(fn, sig):
    kern = cupric.kernel(fn)
    with pytest.raises(CompileError) as info:
        kern.inspect_ir(sig)
    err = info.value
    assert err.filename and Path(err.filename).name == "cases.py"
    assert err.line is not None and err.col is not None
    pattern = _marker(err.line)
    assert pattern is not None, (f"error reported at line {err.line} which has no ERROR "
                                 f"marker:\n{err}")
    own = [n for n in _function_lines(fn) if _marker(n)]
    if own:
        assert err.line in own, f"expected line {own}, got {err.line}:\n{err}"
    assert re.search(pattern, err.message), f"{pattern!r} not in {err.message!r}"
    text = str(err)
    assert f"cases.py:{err.line}:{err.col + 1}:" in text
    assert SOURCE[err.line - 1].strip() in text
    assert "^" in text.splitlines()[2]
    # No internal traceback or exception chained to the user's error.
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__


def _sample(t, poison=7):
    """A launch argument of type `t`: arrays filled with `poison`, scalars 1."""
    from cupric.types import ArrayType, ScalarType
    if isinstance(t, ArrayType):
        return np.full((4,) * t.ndim, poison, dtype=t.dtype.dtype)
    if isinstance(t, ScalarType):
        return t.dtype.type(1)
    raise AssertionError(f"no sample for {t!r}")


@pytest.mark.parametrize("fn,sig", cases.CASES, ids=[f.__name__ for f, _ in cases.CASES])
def test_bad_kernel_is_refused_by_the_simulator(fn, sig, monkeypatch):
    """The simulator (explicit, and as the no-GPU fallback of a plain launch) runs the
    compiler's front end first: the same CompileError at the same line, nothing run."""
    from cupric.compiler import kernel as kmod
    from cupric.compiler.signature import parse_signature
    with pytest.raises(CompileError) as expected:
        cupric.kernel(fn).inspect_ir(sig)
    want = expected.value
    monkeypatch.setattr(kmod, "_SIMULATOR", [True])
    monkeypatch.setattr(kmod, "_SIM_NOTICE", [True])
    for launch in ("simulate", "fallback"):
        kern = cupric.kernel(fn)
        args = [_sample(t) for t in parse_signature(sig)]
        target = kern.simulate if launch == "simulate" else kern
        with pytest.raises(CompileError) as info:
            target[1, 1](*args)
        err = info.value
        assert (err.filename, err.line, err.col, err.message) == \
            (want.filename, want.line, want.col, want.message), launch
        assert err.__cause__ is None
        for a in args:
            if isinstance(a, np.ndarray):
                assert (a == 7).all(), "a refused kernel must not run"


def test_bad_launch_corpus_is_large_enough():
    assert len(launches.LAUNCHES) >= 25
    assert len(cases.CASES) >= 80


@pytest.mark.parametrize("case", launches.LAUNCHES, ids=[c[0] for c in launches.LAUNCHES])
def test_bad_launch_is_refused_by_the_simulator(case, monkeypatch):
    """Arguments and configurations that do not fit: a typed error naming the problem
    before any simulated thread runs; the plain launch without a GPU says the same."""
    from cupric.compiler import kernel as kmod
    name, kern, make_args, (grid, block, shared_bytes), kind, pattern = case
    monkeypatch.setattr(kmod, "_SIMULATOR", [True])
    monkeypatch.setattr(kmod, "_SIM_NOTICE", [True])
    for target in (kern.simulate, kern):
        args = make_args(launches._host)
        with pytest.raises(kind, match=pattern):
            target[grid, block, None, shared_bytes](*args)
        for a in args:
            if isinstance(a, np.ndarray) and a.dtype != object:
                assert (a == 7).all(), f"{name}: a refused launch must not run"


def test_argument_errors_are_located_at_the_parameter():
    """The simulator's argument errors are the compiled launch's: KernelArgumentError at
    the parameter (a range error included, which the GPU launch's packing also refuses)."""
    from cupric.compiler.kernel import KernelArgumentError
    with pytest.raises(KernelArgumentError) as info:
        launches.scale.simulate[1, 8](np.zeros(8, np.float32), 2.0, 2**31)
    err = info.value
    assert err.line == launches.scale.py_func.__code__.co_firstlineno + 1
    assert err.source_line[err.col:].startswith("n: i32")


def test_scalar_arguments_take_their_parameter_types():
    """An i32 parameter is an i32 in the simulated kernel: i32 arithmetic wraps."""
    @cupric.kernel
    def k(out: cupric.types.Array[cupric.types.i64, 1], n: cupric.types.i32,
          a: cupric.types.f32):
        out[0] = n + 1
        out[1] = cupric.types.i64(a * a)

    out = np.zeros(2, np.int64)
    k.simulate[1, 1](out, 2**31 - 1, 16777217.0)
    assert out[0] == -2**31
    # f32(16777217) is 16777216; squared in f32 it rounds to 2^48 exactly
    assert out[1] == 2**48


def test_error_names_what_is_allowed():
    kern = cupric.kernel(cases.with_statement)
    with pytest.raises(CompileError) as info:
        kern.inspect_ir(cases.F1)
    assert "hint: kernels may use" in str(info.value)


def test_traceback_stays_short():
    import traceback
    kern = cupric.kernel(cases.list_literal)
    try:
        kern.inspect_ir(cases.F1)
    except CompileError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        internal = [f for f in frames if "cupric/compiler/typing" in f.filename
                    or "cupric/compiler/codegen" in f.filename]
        assert not internal, frames


# -- launch-time argument errors ---------------------------------------------------------

@cupric.kernel
def _scale(x: cupric.types.Array[cupric.types.f32, 1], a: cupric.types.f32):
    pass


def test_wrong_argument_count():
    with pytest.raises(TypeError, match=r"_scale\(\) takes 2 arguments \(x, a\), got 1"):
        _scale.bind_types((np.zeros(3, np.float32),))


def test_wrong_array_dtype():
    with pytest.raises(TypeError, match="argument 'x' of _scale\\(\\) expects Array\\[f32"):
        _scale.bind_types((np.zeros(3, np.float64), 1.0))


def test_launch_argument_errors_point_at_the_parameter():
    from cupric.compiler.kernel import KernelArgumentError
    with pytest.raises(KernelArgumentError) as info:
        _scale.bind_types((np.zeros(3, np.float32), np.zeros(3, np.float32)))
    err = info.value
    assert isinstance(err, CompileError) and isinstance(err, TypeError)
    assert err.line == _scale.py_func.__code__.co_firstlineno + 1
    line = err.source_line
    assert line[err.col:].startswith("a: cupric.types.f32")
    assert "^" in str(err) and "test_frontend_errors.py:" in str(err)
    with pytest.raises(KernelArgumentError) as info:
        _scale.bind_types(())
    assert info.value.line == _scale.py_func.__code__.co_firstlineno + 1


def test_float_for_integer_parameter():
    @cupric.kernel
    def k(n: cupric.types.i32):
        pass
    with pytest.raises(TypeError, match="expects i32, got a float"):
        k.bind_types((1.5,))


def test_contiguity_annotation_is_checked():
    @cupric.kernel
    def k(x: cupric.types.Array[cupric.types.f32, 2, "C"]):
        pass
    with pytest.raises(TypeError, match="expects a C-contiguous array"):
        k.bind_types((np.zeros((4, 4), np.float32).T,))


T = TypeVar("T")


def test_typevar_must_bind_consistently():
    @cupric.kernel
    def k(x: T, y: T):
        pass
    with pytest.raises(TypeError, match="TypeVar T is already"):
        k.bind_types((np.zeros(3, np.float32), np.zeros(3, np.float64)))


def test_calling_a_kernel_directly_says_how_to_launch():
    with pytest.raises(TypeError, match=r"_scale\[grid, block\]"):
        _scale(1)


def test_bad_launch_config():
    with pytest.raises(TypeError, match="launch _scale as"):
        _scale[1]


def test_signature_string_errors():
    with pytest.raises(ValueError, match="cannot parse signature"):
        _scale.inspect_ir("Array[f32, 1, 'C'], float32")


def test_device_memory_the_simulator_cannot_read_is_an_argument_error():
    """A GPU array that is not a DeviceBuffer (CuPy, PyTorch CUDA, any
    __cuda_array_interface__ producer) cannot be read by the simulator: refused at the
    parameter before anything runs."""
    from cupric.compiler.kernel import KernelArgumentError

    class ForeignDeviceArray:
        shape, strides, dtype, ptr = (4,), (4,), np.dtype(np.float32), 1 << 40
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "version": 3,
                                    "data": (1 << 40, False)}
    with pytest.raises(KernelArgumentError, match="cannot read the device memory of a "
                                                  "ForeignDeviceArray") as info:
        launches.scale.simulate[1, 4](ForeignDeviceArray(), 2.0, 4)
    assert info.value.source_line[info.value.col:].startswith("x: Array")
