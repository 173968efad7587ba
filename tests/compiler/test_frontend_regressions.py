"""Regression tests for the bugs of issue 15 (the simulator as the compiler's twin) and
the literal bugs of issue 14: each found by a kernel a new user wrote, each checked in
both the compiled IR (or its constant) and the simulator, against the documented
semantics (docs/kernel-language.md, "Semantics of arithmetic")."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cupric
from cupric.compiler.errors import CompileError
from cupric.compiler.kernel import KernelArgumentError
from cupric.device import grid
from cupric.types import Array, f32, f64, i32, i64, u64

I64 = "Array[i64, 1, 'C']"


def _ir(kern, sig):
    return kern.inspect_ir(sig)


# -- constant folding follows run-time semantics -------------------------------------------

def test_negative_integer_power_folds_to_zero_like_run_time():
    @cupric.kernel
    def k(out: Array[i64, 1], n: i64):
        out[0] = 5 ** -1
        out[1] = n ** -1
        out[2] = (1 ** -1) << 3          # folded: 0 << 3 (was an internal TypeError)
    out = np.full(3, 7, np.int64)
    k.simulate[1, 1](out, 5)
    assert out.tolist() == [0, 0, 0]
    assert "store i64 0" in _ir(k, f"{I64}, i64")


def test_int_of_a_literal_conditional_compiles():
    @cupric.kernel
    def k(out: Array[i64, 1], a: i64):
        out[0] = int(1 if a > 3 else 2)  # was KeyError: <ast.IfExp ...> in the compiler
    out = np.zeros(1, np.int64)
    k.simulate[1, 1](out, 5)
    assert out[0] == 1
    assert "sitofp" not in _ir(k, f"{I64}, i64")  # compiles, as integer code
    k.simulate[1, 1](out, 1)
    assert out[0] == 2


def test_float_division_by_zero_constant_is_inf_not_an_error():
    @cupric.kernel
    def k(out: Array[f64, 1]):
        out[0] = 1.0 / 0.0
        out[1] = -1.0 // 0.0
    out = np.zeros(2)
    k.simulate[1, 1](out)
    assert out[0] == math.inf and math.isnan(out[1])
    _ir(k, "Array[f64, 1, 'C']")


# -- the simulator computes with compiled semantics ----------------------------------------

def test_math_domain_errors_give_nan_and_inf():
    @cupric.kernel
    def k(x: Array[f32, 1], out: Array[f32, 1], ints: Array[i64, 1]):
        out[0] = math.sqrt(x[0])          # sqrt(-1)
        out[1] = math.log(x[1])           # log(0)
        out[2] = math.exp(x[2])           # overflow
        out[3] = math.acosh(x[3])         # domain
        ints[0] = math.trunc(x[4])        # f32 argument, i64 result
        ints[1] = math.floor(x[5])
    x = np.array([-1, 0, 1000, 0.5, -2.5, 3.75], np.float32)
    out = np.zeros(4, np.float32)
    ints = np.zeros(2, np.int64)
    k.simulate[1, 1](x, out, ints)
    assert math.isnan(out[0]) and out[1] == -math.inf and out[2] == math.inf
    assert math.isnan(out[3])
    assert ints.tolist() == [-2, 3]


def test_bool_arithmetic_is_i64():
    @cupric.kernel
    def k(a: Array[i64, 1], out: Array[i64, 1]):
        p = a[0] > 0
        q = a[1] > 0
        out[0] = p - q                    # was a TypeError (numpy bool subtract)
        out[1] = p + p                    # 2, not True
        out[2] = -p
    out = np.zeros(3, np.int64)
    k.simulate[1, 1](np.array([1, 0], np.int64), out)
    assert out.tolist() == [1, 2, -1]


def test_casts_and_builtins_give_typed_values():
    @cupric.kernel
    def k(x: Array[f32, 1], out: Array[f64, 1], o2: Array[i64, 1]):
        out[0] = float(x[0]) / 3.0        # f64 division of the f32 value
        o2[0] = int(x[1]) * 2**40         # i64, wraps as i64
        o2[1] = i32(x[2])                 # truncation toward zero
    x = np.array([1.1, 2**23, -7.9], np.float32)
    out = np.zeros(1)
    o2 = np.zeros(2, np.int64)
    k.simulate[1, 1](x, out, o2)
    assert out[0] == np.float64(np.float32(1.1)) / 3.0
    assert o2[0] == -2**63  # 2^23 * 2^40 = 2^63 wraps in i64
    assert o2[1] == -7


def test_scalar_parameters_are_converted_to_their_type():
    @cupric.kernel
    def k(out: Array[i64, 1], n: i32):
        out[0] = n + 1                    # i32 arithmetic: wraps at 2^31
    out = np.zeros(1, np.int64)
    k.simulate[1, 1](out, 2**31 - 1)
    assert out[0] == -2**31
    with pytest.raises(KernelArgumentError, match="does not fit in i32"):
        k.simulate[1, 1](out, 2**31)


def test_struct_parameter_as_a_numpy_record():
    point = np.dtype([("x", np.float32), ("y", np.float32)])

    @cupric.kernel
    def k(out: Array[f32, 1], p):
        out[0] = p.x + p.y                # was AttributeError: 'numpy.void' ... 'x'
    out = np.zeros(1, np.float32)
    rec = np.array([(1.5, 2.25)], point)[0]
    k.simulate[1, 1](out, rec)
    assert out[0] == 3.75


# -- errors the user gets instead of internal ones ----------------------------------------

def test_assigning_a_float_to_an_integer_parameter_compiles():
    @cupric.kernel
    def k(out: Array[f64, 1], n: i32):
        n = n * 0.5                       # was IRTypeError: store of i32 through double*
        out[0] = n
    out = np.zeros(1)
    k.simulate[1, 1](out, 3)
    assert out[0] == 1.5
    assert "sitofp i32" in _ir(k, "Array[f64, 1, 'C'], i32")


def test_writing_a_module_array_is_a_compile_error_in_both_modes():
    @cupric.kernel
    def k(x: Array[f32, 1]):
        TABLE[0] = x[0]
    with pytest.raises(CompileError, match="module-level array"):
        _ir(k, "Array[f32, 1, 'C']")
    with pytest.raises(CompileError, match="module-level array"):
        k.simulate[1, 1](np.zeros(1, np.float32))
    assert TABLE[0] == 1.0


TABLE = cupric.device.constant(np.ones(4, np.float32))


def test_shared_array_with_a_runtime_size_names_the_variable():
    from cupric.device import shared

    @cupric.kernel
    def k(x: Array[f32, 1], n: i64):
        tile = shared.array(n, f32)
        x[0] = tile[0]
    with pytest.raises(CompileError) as info:
        k.simulate[1, 1](np.zeros(1, np.float32), 4)
    message = info.value.message
    assert message.count("shared.array") == 1 and "'n' is not a compile-time constant" in message


def test_internal_failures_are_compile_errors_at_the_line(monkeypatch):
    from cupric.compiler.codegen import function as fn

    def broken(self, *args, **kwargs):
        raise KeyError("boom")
    monkeypatch.setattr(fn.FunctionCodegen, "power", broken)

    @cupric.kernel
    def k(out: Array[f64, 1], a: f64):
        out[0] = a ** a
    with pytest.raises(CompileError) as info:
        _ir(k, "Array[f64, 1, 'C'], f64")
    err = info.value
    assert "internal compiler error" in err.message and "KeyError" in err.message
    assert err.line == k.py_func.__code__.co_firstlineno + 2
    assert err.__cause__ is None


# -- literals of u64 range (issue 14) -----------------------------------------------------

GOLDEN = 0x9E3779B97F4A7C15


def test_u64_literals_compile_and_wrap():
    @cupric.kernel
    def k(x: Array[u64, 1]):
        i = grid(1)
        if i < x.size:
            x[i] = x[i] * u64(0x9E3779B97F4A7C15) + 0xFFFFFFFFFFFFFFFF
    x = np.arange(5, dtype=np.uint64)
    want = [(int(v) * GOLDEN + 2**64 - 1) % 2**64 for v in x]
    k.simulate[1, 8](x)
    assert x.tolist() == want
    ir = _ir(k, "Array[u64, 1, 'C']")
    assert str(GOLDEN - 2**64) in ir  # the constant's 64 bits, as LLVM prints an i64


def test_a_literal_too_big_for_its_context_gets_a_hint_that_works():
    @cupric.kernel
    def bad(x: Array[i64, 1]):
        x[0] = x[0] * 0x9E3779B97F4A7C15
    with pytest.raises(CompileError) as info:
        _ir(bad, I64)
    err = info.value
    assert "does not fit in i64" in err.message
    assert "i64(11400714819323198485) takes its low 64 bits" in err.hint
    assert "u64(x)" in err.hint

    # Both suggestions compile and agree with the wrapped value.
    @cupric.kernel
    def fixed(x: Array[i64, 1], y: Array[u64, 1]):
        x[0] = x[0] * i64(0x9E3779B97F4A7C15)
        y[0] = u64(y[0]) * 0x9E3779B97F4A7C15
    x, y = np.array([3], np.int64), np.array([3], np.uint64)
    fixed.simulate[1, 1](x, y)
    assert int(x[0]) % 2**64 == int(y[0]) == (3 * GOLDEN) % 2**64
    _ir(fixed, f"{I64}, Array[u64, 1, 'C']")


def test_literals_beyond_64_bits_are_refused():
    @cupric.kernel
    def k(x: Array[u64, 1]):
        x[0] = u64(2**64)
    with pytest.raises(CompileError, match="does not fit in 64 bits"):
        _ir(k, "Array[u64, 1, 'C']")
