"""Property tests: random arithmetic expression kernels (hypothesis) over arrays of
i32/i64/f32/f64, compared with NumPy evaluating the same expression on NumPy scalars
(NEP 50 promotion, wrapping integers, floor division). The CPU lane checks the inferred
result type, compiles every kernel through libNVVM and runs it on the simulator; the GPU
lane runs it on the device."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DTYPES = {"i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}
N = 64
_DIR = Path(tempfile.mkdtemp(prefix="cupric_props_"))
_COUNTER = itertools.count()


# -- expression trees: (text, evaluate(env) -> numpy scalar) ----------------------------------

def _leaf(draw, types):
    kind = draw(st.sampled_from(["var", "var", "var", "int", "float"]))
    if kind == "var":
        name = draw(st.sampled_from(sorted(types)))
        return f"{name}[i]", (lambda env, n=name: env[n])
    if kind == "int":
        v = draw(st.integers(-9, 9))
        return f"({v})", (lambda env, v=v: v)
    v = draw(st.sampled_from([0.5, 1.5, -2.25, 3.0, 0.125]))
    return f"({v})", (lambda env, v=v: v)


def _python(x) -> bool:
    """A bare Python number (a weak literal), not a NumPy scalar."""
    return type(x) in (int, float)


@st.composite
def expressions(draw, types, depth=3):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return _leaf(draw, types)
    op = draw(st.sampled_from(["+", "-", "*", "/", "//c", "%c", "min", "max", "abs",
                               "neg", "ifexp"]))
    a_text, a_eval = draw(expressions(types, depth - 1))
    if op in ("abs", "neg"):
        if op == "abs":
            return f"abs({a_text})", lambda env: abs(a_eval(env))
        return f"(-{a_text})", lambda env: -a_eval(env)
    if op in ("//c", "%c"):
        c = draw(st.sampled_from([2, 3, 5, -3, -7]))
        sym = op[:-1]
        fn = (lambda x, y: x // y) if sym == "//" else (lambda x, y: x % y)
        return f"({a_text} {sym} {c})", lambda env: fn(a_eval(env), c)
    b_text, b_eval = draw(expressions(types, depth - 1))
    if op in ("min", "max"):
        pick = min if op == "min" else max

        def ev(env, a=a_eval, b=b_eval, pick=pick):
            x, y = a(env), b(env)
            t = np.result_type(x, y)
            if _python(x) and _python(y):
                if float in (type(x), type(y)):  # typed statically: both floats
                    x, y = float(x), float(y)
                return pick(x, y)
            return pick(t.type(x), t.type(y))
        return f"{op}({a_text}, {b_text})", ev
    if op == "ifexp":
        c_text, c_eval = draw(expressions(types, depth - 1))

        def ev(env, a=a_eval, b=b_eval, c=c_eval):
            x, y = a(env), b(env)
            t = np.result_type(x, y)
            if not (_python(x) and _python(y)):
                x, y = t.type(x), t.type(y)
            elif float in (type(x), type(y)):  # the kernel language types it statically
                x, y = float(x), float(y)
            return x if c(env) > 0 else y
        return f"({a_text} if {c_text} > 0 else {b_text})", ev
    if op == "/":
        return f"({a_text} / {b_text})", lambda env: a_eval(env) / b_eval(env)
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}[op]
    return f"({a_text} {op} {b_text})", lambda env: fn(a_eval(env), b_eval(env))


@st.composite
def kernels(draw):
    types = {name: draw(st.sampled_from(sorted(DTYPES))) for name in ("a", "b", "c")}
    text, ev = draw(expressions(types))
    seed = draw(st.integers(0, 2**31))
    return types, text, ev, seed


def _reference(types, ev, inputs):
    out = []
    with np.errstate(all="ignore"):
        for k in range(N):
            env = {n: DTYPES[t](inputs[n][k]) for n, t in types.items()}
            out.append(ev(env))
    return out


def _build(types, text):
    """Write the kernel to a real file (kernels need readable source) and import it."""
    n = next(_COUNTER)
    params = ", ".join(f"{name}: Array[{t}, 1]" for name, t in types.items())
    path = _DIR / f"prop_{n}.py"
    path.write_text(
        "import cupric\nfrom cupric.device import grid\n"
        "from cupric.types import Array, i32, i64, f32, f64\n\n"
        "# No FMA contraction: the GPU then rounds exactly as NumPy does.\n"
        f"@cupric.kernel(fma=False)\ndef expr_kernel({params}, out):\n"
        "    i = grid(1)\n"
        "    if i < len(out):\n"
        f"        out[i] = {text}\n")
    spec = importlib.util.spec_from_file_location(f"cupric_prop_{n}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.expr_kernel


def _inputs(types, seed):
    rng = np.random.default_rng(seed)
    data = {}
    for name, t in types.items():
        if t.startswith("i"):
            data[name] = rng.integers(-1000, 1000, N).astype(DTYPES[t])
        else:
            data[name] = rng.uniform(-10, 10, N).astype(DTYPES[t])
    return data


def _result_dtype(reference) -> np.dtype:
    first = reference[0]
    if type(first) is int:
        return np.dtype(np.int64)
    if type(first) is float:
        return np.dtype(np.float64)
    return np.asarray(first).dtype


def _compare(got, reference, dtype, eps=None):
    expect = np.array(reference, dtype=dtype)
    if dtype.kind == "f":
        eps = eps or np.finfo(dtype).eps
        # FMA contraction and libdevice differ from NumPy in the last bits; scale by the
        # size of the operands so cancellation does not make the check flaky.
        scale = np.maximum(np.abs(expect), 1.0) * 1e3
        assert_close(got, expect, eps * scale)
    else:
        np.testing.assert_array_equal(got, expect)


def assert_close(got, expect, tol):
    finite = np.isfinite(expect)
    assert np.array_equal(np.isfinite(got), finite), (got, expect)
    bad = np.abs(got[finite] - expect[finite]) > tol[finite]
    assert not bad.any(), (got[finite][bad], expect[finite][bad])


def _run_case(case, runner, simulator=False):
    types, text, ev, seed = case
    inputs = _inputs(types, seed)
    try:
        reference = _reference(types, ev, inputs)
    except ZeroDivisionError:  # a constant 0 / 0: a compile error in kernels, too
        hypothesis.assume(False)
    dtype = _result_dtype(reference)
    kern = _build(types, text)
    sig = ", ".join(f"Array[{t}, 1, 'C']" for t in types.values())
    sig += f", Array[{dtype.kind}{dtype.itemsize * 8}, 1, 'C']"
    spec = kern.specialize(sig)
    out = np.full(N, -123, dtype)
    got = runner(kern, sig, [inputs["a"], inputs["b"], inputs["c"], out])
    eps = None
    if simulator and "f32" in types.values():
        # The simulator runs Python: min/max and `x if c else y` return an operand without
        # promoting it, so mixed f32/f64 expressions may round at f32 there.
        eps = np.finfo(np.float32).eps
    _compare(got, reference, dtype, eps)
    return kern, spec


def _typed_result(spec):
    """The inferred type of the expression stored by the kernel."""
    from cupric.compiler.typing.ktypes import materialize
    assign = spec.typed.source.tree.body[1].body[0]
    return materialize(spec.typed.types[assign.value])


def _simulate(kern, sig, args):
    try:
        kern.simulate[1, N](*args)
    except ZeroDivisionError:
        # Python raises on x / 0 with plain Python numbers where the GPU gives inf/nan.
        hypothesis.assume(False)
    return args[3]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(kernels())
def test_expressions_on_simulator_and_through_libnvvm(case):
    from cupric.compiler import backend
    from cupric.compiler.options import CompileOptions

    kern, spec = _run_case(case, _simulate, simulator=True)
    types, text, ev, seed = case
    reference = _reference(types, ev, _inputs(types, seed))  # succeeded in _run_case
    rt = _typed_result(spec)
    assert np.dtype(rt.dtype) == _result_dtype(reference), (text, rt)
    for arch in ("sm_80", "sm_90", "sm_100"):  # libNVVM, then nvJitLink/ptxas
        artifact = backend.build(spec.ir, options=CompileOptions(arch=arch), cache=False)
        assert ".entry expr_kernel" in artifact.ptx and artifact.cubin, arch


@pytest.mark.gpu
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(kernels())
def test_expressions_on_gpu(case):
    from cupric import runtime as rt
    from cupric.runtime.memory import to_device

    rt.Device(0).make_current()  # see test_lang_gpu._primary_context

    def on_gpu(kern, sig, args):
        dev = [to_device(a) for a in args]
        kern[1, N](*dev)
        rt.synchronize()
        return dev[3].to_numpy()

    _run_case(case, on_gpu)
