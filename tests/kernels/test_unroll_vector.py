"""CPU lane: the compile-time `unroll` and the wide access helpers `vload`/`vstore` of
cupric.device. The PTX holds the expanded body and the 128-bit accesses; the simulator
gives NumPy's results; a count that is not a constant is a CompileError at its line."""

from __future__ import annotations

import re

import numpy as np
import pytest

import cupric
from cupric import simulator
from cupric.compiler import CompileError
from cupric.device import grid, unroll, vload, vstore

F4 = "Array[f32, 1, 'C']"
WIDTH = 4


def _ptx(kern, signature: str) -> str:
    from cupric.compiler.toolchain import ToolchainNotFoundError
    try:
        return kern.inspect_ptx(signature, arch="sm_90")
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no libNVVM here: {exc}")


@cupric.kernel
def scale_quads(a, out, alpha):
    i = grid(1)
    if i < len(out) >> 2:
        j = i * WIDTH
        v = vload(a, j, WIDTH)
        for k in unroll(WIDTH):
            out[j + k] = alpha * v[k] + k


@cupric.kernel
def tuple_round_trip(a, out):
    i = grid(1)
    if i < len(out) >> 1:
        j = i * 2
        vstore(out, j, vload(a, j, 2))


@cupric.kernel
def nested_unroll(out):
    i = grid(1)
    if i == 0:
        for r in unroll(3):
            for c in unroll(2 * 2):
                out[r * 4 + c] = r * 10 + c


@cupric.kernel
def unroll_with_inner_loop(out, n):
    i = grid(1)
    if i == 0:
        for k in unroll(2):
            total = 0
            for m in range(n):
                if m > 5:
                    break
                total += m + k
            out[k] = total


def test_simulator_equals_numpy():
    rng = np.random.default_rng(7)
    a = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    simulator.launch(scale_quads, 2, 8, (a, out, np.float32(1.5)))
    want = np.float32(1.5) * a + np.tile(np.arange(4, dtype=np.float32), 16)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_vload_vstore_on_the_simulator():
    a = np.arange(10, dtype=np.int64) * 3
    out = np.full(10, -1, np.int64)
    simulator.launch(tuple_round_trip, 1, 8, (a, out))
    np.testing.assert_array_equal(out, a)


def test_nested_unroll_and_inner_loops_on_the_simulator():
    out = np.full(12, -1, np.int32)
    simulator.launch(nested_unroll, 1, 1, (out,))
    np.testing.assert_array_equal(out, [r * 10 + c for r in range(3) for c in range(4)])
    out = np.full(2, -1, np.int64)
    simulator.launch(unroll_with_inner_loop, 1, 1, (out, 10))
    np.testing.assert_array_equal(out, [sum(range(6)), sum(range(6)) + 6])


def test_ptx_has_the_expanded_body_and_vector_accesses():
    ptx = _ptx(scale_quads, f"{F4}, {F4}, f32")
    assert "ld.global.nc.v4.f32" in ptx
    assert "st.global.v4.f32" in ptx
    # Four copies of the body: four fused multiply-adds and no loop back-edge.
    assert len(re.findall(r"\bfma\.rn\.f32", ptx)) == 4
    assert not re.search(r"bra(\.uni)?\s+\$L__BB0_1;", ptx)


def test_ptx_of_a_two_wide_round_trip():
    f8 = "Array[f64, 1, 'C']"
    ptx = _ptx(tuple_round_trip, f"{f8}, {f8}")
    assert "ld.global.nc.v2.f64" in ptx and "st.global.v2.f64" in ptx


def _compile(kern, signature):
    # Typing and NVVM IR only: no libNVVM needed, so these run on every CI machine.
    kern.inspect_ir(signature)


def _line_of(text: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(test_non_constant_count_is_an_error_at_its_line)
    return next(first + k for k, line in enumerate(lines) if text in line)


def test_non_constant_count_is_an_error_at_its_line():
    @cupric.kernel
    def bad(out, n):
        for k in unroll(n):  # the offending line
            out[k] = k

    with pytest.raises(CompileError) as info:
        _compile(bad, "Array[i32, 1, 'C'], i32")
    err = info.value
    assert "compile-time constant" in str(err)
    assert err.line == _line_of("# the offending line")


@pytest.mark.parametrize("body, message", [
    ("for k in unroll(4):\n            break", "break inside"),
    ("for k in unroll(4):\n            k = 1", "cannot be assigned"),
    ("for k in unroll(100000):\n            pass", "outside 0.."),
    ("x = unroll(4)", "only as the iterable"),
    ("x = vload(out, 0, 3)", "width must be a constant"),
])
def test_misuse_is_a_compile_error(tmp_path, monkeypatch, body, message):
    src = tmp_path / "mod_unroll_misuse.py"
    src.write_text(
        "import cupric\nfrom cupric.device import unroll, vload\n\n"
        "@cupric.kernel\ndef bad(out):\n    if True:\n        " + body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    mod = importlib.import_module("mod_unroll_misuse")
    try:
        with pytest.raises(CompileError, match=message):
            _compile(mod.bad, "Array[i32, 1, 'C']")
    finally:
        import sys
        sys.modules.pop("mod_unroll_misuse", None)


def test_outside_a_kernel_they_are_plain_python():
    # A device function run as plain Python (gpu_rand's fills in tests) may use them.
    a = np.arange(6, dtype=np.float32)
    assert list(unroll(3)) == [0, 1, 2]
    assert vload(a, 2, 4) == (2.0, 3.0, 4.0, 5.0)
    vstore(a, 0, (9.0, 8.0))
    np.testing.assert_array_equal(a[:2], [9.0, 8.0])
