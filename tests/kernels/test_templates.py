"""CPU lane: `cupric.kernels.templates.elementwise` and the ready elementwise kernels built
on it. The hot loop of vecadd and saxpy keeps the code of the hand-written kernels it
replaced (golden instruction counts and vector widths, taken from their PTX); generated
kernels of every width and group count give NumPy's results on the simulator."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import cupric
from cupric import simulator
from cupric.kernels import elementwise as ew
from cupric.kernels.templates import elementwise, reduction

A1 = "Array[{}, 1, 'C']"
F4, F8 = A1.format("f32"), A1.format("f64")


def _ptx(kern, signature: str) -> str:
    from cupric.compiler.toolchain import ToolchainNotFoundError
    try:
        return kern.inspect_ptx(signature, arch="sm_90")
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no libNVVM here: {exc}")


def loop_body(ptx: str) -> list[str]:
    """The instructions of the first loop of `ptx`: from its label to its back-edge."""
    lines = [line.strip() for line in ptx.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("//", ".loc"))]
    for i, line in enumerate(lines):
        label = re.fullmatch(r"(\$L__\w+):", line)
        if label:
            back = re.compile(r"\bbra(\.uni)?\s+" + re.escape(label.group(1)) + ";")
            for j in range(i + 1, len(lines)):
                if back.search(lines[j]):
                    return lines[i + 1:j + 1]
    raise AssertionError("no loop in the PTX")


def opcode_counts(body: list[str]) -> dict:
    return dict(collections.Counter(
        (line.split()[1] if line.startswith("@") else line.split()[0]) for line in body))


# The loop bodies of the hand-unrolled kernels before the template (commit 2408424),
# compiled for sm_90 from 16-byte aligned float32 arrays: two groups of four elements per
# trip, four 128-bit loads in flight before two 128-bit stores.
GOLDEN = {
    "vecadd": (ew.vecadd_kernel, f"{F4}, {F4}, {F4}", 26,
               {"shl.b64": 2, "add.s64": 8, "ld.global.nc.v4.f32": 4, "add.f32": 8,
                "st.global.v4.f32": 2, "setp.lt.s64": 1, "bra": 1}),
    "saxpy": (ew.saxpy_kernel, f"f32, {F4}, {F4}, {F4}", 26,
              {"shl.b64": 2, "add.s64": 8, "ld.global.nc.v4.f32": 4, "fma.rn.f32": 8,
               "st.global.v4.f32": 2, "setp.lt.s64": 1, "bra": 1}),
    "copy": (ew.copy_kernel, f"{F8}, {F8}", 18,
             {"shl.b64": 2, "add.s64": 6, "ld.global.nc.v2.f64": 4, "st.global.v2.f64": 4,
              "setp.lt.s64": 1, "bra": 1}),
    "fill": (ew.fill_kernel, f"{F4}, f32", 6,
             {"shl.b64": 1, "add.s64": 2, "st.global.v4.f32": 1, "setp.lt.s64": 1,
              "bra": 1}),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_hot_loop_equals_the_hand_written_kernel(name):
    kern, signature, count, ops = GOLDEN[name]
    body = loop_body(_ptx(kern, signature))
    assert opcode_counts(body) == ops
    assert len(body) == count


@cupric.device_function
def _blend(w, x, y, z):
    return w * x + (1.0 - w) * y - z


@cupric.device_function
def _negate(v):
    return -v


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("n", [0, 1, 7, 37, 130])
def test_generated_kernels_equal_numpy(width, groups, n):
    rng = np.random.default_rng(n * 10 + width + groups)
    x, y, z = (rng.standard_normal(n) for _ in range(3))
    out = np.full(n, np.nan)
    kern = elementwise(_blend, "w, x, y, z, out", arrays="x, y, z", width=width,
                       groups=groups)
    # A small grid: the loop makes several trips, and the tail lands on threads past 0.
    simulator.launch(kern, 2, 3, (0.25, x, y, z, out))
    np.testing.assert_allclose(out, 0.25 * x + 0.75 * y - z, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("n", [0, 5, 37, 130])
def test_output_read_and_updated_in_place(groups, n):
    # out among the arrays: read, passed in its place, overwritten (y = a * x + y).
    rng = np.random.default_rng(n + groups)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    expect = 0.5 * x + y
    kern = elementwise(ew._axpy, "a, x, y", arrays="x, y", out="y", width=4,
                       groups=groups, name="axpy_update")
    simulator.launch(kern, 2, 3, (0.5, x, y))
    np.testing.assert_allclose(y, expect, rtol=1e-15, atol=1e-15)


def test_output_first_and_no_array_inputs():
    out = np.full(11, -1, np.int32)
    kern = elementwise(_negate, "out, v", arrays=(), out="out", width=4, name="neg_fill")
    simulator.launch(kern, 1, 2, (out, 5))
    np.testing.assert_array_equal(out, np.full(11, -5, np.int32))
    assert kern.py_func.__name__ == "neg_fill"


def test_map_kernels_come_from_the_template(sim):
    a = np.arange(10, dtype=np.float32)
    b = ew.map(_negate, a)
    np.testing.assert_array_equal(b, -a)
    assert ew.map_kernel(_negate, 1) is ew.map_kernel(_negate, 1)
    assert ew.map_kernel(_negate, 1).py_func.__name__ == "map1_kernel"


def test_generated_ptx_is_vectorized_for_any_width():
    kern = elementwise(_negate, "x, out", width=2, groups=1, name="neg2")
    ptx = _ptx(kern, f"{F8}, {F8}")
    assert "ld.global.nc.v2.f64" in ptx and "st.global.v2.f64" in ptx


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(fn=lambda v: v, params="x, out"), TypeError, "device_function"),
    (dict(fn=_negate, params="x, out", width=3), ValueError, "width"),
    (dict(fn=_negate, params="x, out", groups=3), ValueError, "groups"),
    (dict(fn=_negate, params="_x, out"), ValueError, "identifier"),
    (dict(fn=_negate, params="x, x"), ValueError, "repeat"),
    (dict(fn=_negate, params="x, out", out="y"), ValueError, "not one of"),
    (dict(fn=_negate, params="x, out", arrays="y"), ValueError, "not parameters"),
])
def test_bad_templates_are_refused(kwargs, error, message):
    fn = kwargs.pop("fn")
    params = kwargs.pop("params")
    with pytest.raises(error, match=message):
        elementwise(fn, params, **kwargs)


def test_error_in_the_function_points_at_its_line():
    from cupric.compiler import CompileError

    @cupric.device_function
    def broken(v):
        return v.no_such_field  # the offending line

    kern = elementwise(broken, "x, out")
    with pytest.raises(CompileError) as info:
        kern.inspect_ir(f"{F4}, {F4}")
    assert "the offending line" in str(info.value)


# -- reductions -----------------------------------------------------------------------------

def _reduce_signature(x: str, acc: str) -> str:
    a = A1.format
    return f"{a(x)}, {a(x)}, {acc}, {a(acc)}, {a(acc)}, {a('u32')}"


# The grid-stride loop of reduce.py's hand-written sum and dot before the template: two
# 128-bit loads per array per trip into four accumulators.
REDUCE_GOLDEN = {
    "sum": ("f4", 18, {"shl.b64": 2, "add.s64": 4, "ld.global.nc.v4.f32": 2, "add.f32": 8,
                       "setp.lt.s64": 1, "bra": 1}),
    "dot": ("f4", 22, {"shl.b64": 2, "add.s64": 6, "ld.global.nc.v4.f32": 4,
                       "fma.rn.f32": 8, "setp.lt.s64": 1, "bra": 1}),
}


@pytest.mark.parametrize("kind", sorted(REDUCE_GOLDEN))
def test_reduction_hot_loop_equals_the_hand_written_kernel(kind):
    from cupric.kernels import reduce
    acc, count, ops = REDUCE_GOLDEN[kind]
    kern = reduce.reduce_kernel(kind, np.dtype(acc))
    body = loop_body(_ptx(kern, _reduce_signature("f32", "f32")))
    assert opcode_counts(body) == ops
    assert len(body) == count


@cupric.device_function
def _add(a, b):
    return a + b


@cupric.device_function
def _smaller(a, b):
    return b if b < a else a


@cupric.device_function
def _squared_difference(x, y):
    return (x - y) * (x - y)


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [1, 5, 300, 1031])
def test_reduction_template_equals_numpy(width, n):
    from cupric.types import f64, i64
    rng = np.random.default_rng(n + width)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    blocks, block = 3, 64
    got = {}
    for label, kern, args, dtype in [
        ("ssd", reduction(_add, _squared_difference, acc=f64, width=width, block=block),
         (x, y, 0.0), np.float64),
        ("min", reduction(_smaller, acc=i64, width=width, block=block),
         ((x * 1000).astype(np.int64),) * 2 + (np.iinfo(np.int64).max,), np.int64),
    ]:
        out = np.full(1, 7, dtype)
        partials = np.full(blocks, 7, dtype)
        counter = np.zeros(1, np.uint32)
        simulator.launch(kern, blocks, block, (*args, out, partials, counter))
        assert counter[0] == 0
        got[label] = out[0]
    np.testing.assert_allclose(got["ssd"], np.sum((x - y) ** 2), rtol=1e-12)
    assert got["min"] == (x * 1000).astype(np.int64).min()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(combine=lambda a, b: a), TypeError, "combine"),
    (dict(combine=_add, map=len), TypeError, "map"),
    (dict(combine=_add, width=5), ValueError, "width"),
    (dict(combine=_add, block=100), ValueError, "block"),
])
def test_bad_reductions_are_refused(kwargs, error, message):
    from cupric.types import f32
    with pytest.raises(error, match=message):
        reduction(acc=f32, **kwargs)


# -- one thread per item --------------------------------------------------------------------

@cupric.device_function
def _row_sum(t, table, out):
    total = 0.0
    for c in range(table.shape[1]):
        total += table[t, c]
    out[t] = total


def test_per_thread_covers_each_item_once():
    from cupric.kernels.templates import per_thread
    table = np.random.default_rng(3).standard_normal((13, 5))
    out = np.full(13, np.nan)
    kern = per_thread(_row_sum, "table, out", count="table.shape[0]", name="row_sums")
    simulator.launch(kern, 2, 8, (table, out))  # 16 threads, 13 items
    np.testing.assert_allclose(out, table.sum(axis=1), rtol=1e-12)
    assert kern.py_func.__name__ == "row_sums"


@pytest.mark.parametrize("count, message", [("table.shape[", "not an expression"),
                                            ("n", "not parameters")])
def test_per_thread_refuses_a_bad_count(count, message):
    from cupric.kernels.templates import per_thread
    with pytest.raises(ValueError, match=message):
        per_thread(_row_sum, "table, out", count=count)
    with pytest.raises(TypeError, match="device_function"):
        per_thread(len, "table, out", count="table.shape[0]")
