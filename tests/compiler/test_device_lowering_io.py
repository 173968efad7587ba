"""CPU lane: print, assert, trap, bounds checks and constant memory in compiled kernels
(the PTX and IR they produce, the simulator's behaviour), and the compile errors of
intrinsics called wrongly (each at its line)."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import cupric
from cupric.compiler import CompileError
from cupric.device import (KernelAssertionError, KernelIndexError, KernelTrapError, atomic,
                           constant, grid, grid_stride, local, shared, syncthreads,
                           syncthreads_count, threadIdx, warp)
from cupric.types import f32, i32

sys.path.insert(0, str(Path(__file__).parent))

import device_lowering_kernels as dk  # noqa: E402

F32 = "Array[f32, 1, 'C']"


def test_print_builds_one_vprintf_format(capsys):
    ir = dk.printer.inspect_ir(F32)
    assert 'c"thread %lld value %g %s fmt=%.2f|%3lld!\\0A\\00"' in ir
    assert "@vprintf" in dk.printer.inspect_ptx(F32, arch="sm_90") or \
        "vprintf" in dk.printer.inspect_ptx(F32, arch="sm_90")
    x = np.array([1.5, -2.25, 3.0], np.float32)
    dk.printer.simulate[1, 4](x)
    out = capsys.readouterr().out
    assert "thread 0 value 1.5 True fmt=1.50|  0!" in out
    assert "thread 1 value -2.25 True fmt=-2.25|  1!" in out


def test_assert_reaches_assertfail_with_file_and_line():
    line = dk.asserter.py_func.__code__.co_firstlineno + 3
    ir = dk.asserter.inspect_ir(F32)
    assert f"device_lowering_kernels.py:{line}: assertion failed: x must be non-negative" in ir
    assert "__assertfail" in dk.asserter.inspect_ptx(F32, arch="sm_90")
    dk.asserter.simulate[1, 4](np.ones(4, np.float32))
    with pytest.raises(KernelAssertionError) as info:
        dk.asserter.simulate[1, 4](np.array([1, 2, -1, 3], np.float32))
    assert info.value.line == line and "x must be non-negative" in str(info.value)


def test_assert_without_message_names_the_condition():
    @cupric.kernel
    def check(x):
        assert x[0] == 1

    assert "assertion failed: x[0] == 1" in check.inspect_ir(F32)


def test_trap():
    assert re.search(r"\btrap;", dk.trapper.inspect_ptx(F32, arch="sm_80"))
    with pytest.raises(KernelTrapError):
        dk.trapper.simulate[1, 2](np.array([1, -1], np.float32))


def test_bounds_check_reports_array_index_and_line():
    sig = f"{F32}, i64"
    line = dk.out_of_bounds.py_func.__code__.co_firstlineno + 3
    ir = dk.out_of_bounds.inspect_ir(sig)
    assert f"device_lowering_kernels.py:{line}: index %lld out of bounds for array 'x' of " \
           f"shape (%lld,)" in ir
    ptx = dk.out_of_bounds.inspect_ptx(sig, arch="sm_90")
    assert "__assertfail" in ptx and "vprintf" in ptx
    with pytest.raises(KernelIndexError) as info:
        dk.out_of_bounds.simulate[1, 4](np.zeros(4, np.float32), 2)
    assert info.value.array == "x" and info.value.line == line


def test_bounds_check_is_off_by_default_and_on_with_debug():
    def body(x, n):
        x[grid(1) + n] = 1.0

    plain = cupric.kernel(body)
    assert "__assertfail" not in plain.inspect_ptx(f"{F32}, i64", arch="sm_90")
    debug = cupric.kernel(debug=True)(body)
    assert "out of bounds" in debug.inspect_ir(f"{F32}, i64")


def test_atomics_mark_their_array_written():
    @cupric.kernel
    def count(x, hits):
        if x[grid(1)] > 0:
            atomic.add(hits, 0, 1)

    assert count.writes((cupric.types.Array[f32, 1, "C"], cupric.types.Array[
        cupric.types.i32, 1, "C"])) == frozenset({1})


HALF_A = constant(np.zeros(5000))      # 40 kB
HALF_B = constant(np.zeros(5000))      # 40 kB
NEAR = np.zeros(7500)                  # 60 kB, unmarked


def test_constant_memory_overflow_is_a_compile_error():
    @cupric.kernel
    def both(x):
        i = grid(1)
        x[i] = HALF_A[i] + HALF_B[i]

    with pytest.raises(CompileError, match="constant memory overflow"):
        both.inspect_ir("Array[f64, 1, 'C']")


def test_large_unmarked_arrays_spill_to_global_memory():
    @cupric.kernel
    def spill(x):
        i = grid(1)
        x[i] = dk.BIG_TABLE[i % 20000] + HALF_A[i]

    with pytest.warns(UserWarning, match="BIG_TABLE do not fit"):
        spill.inspect_ir("Array[f64, 1, 'C']")  # warns when lowered (not on cache hits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ptx = spill.inspect_ptx("Array[f64, 1, 'C']", arch="sm_90")
    assert ".global .align 16 .b8 cupric_const_BIG_TABLE" in ptx
    assert ".const .align 16 .b8 cupric_const_HALF_A" in ptx


def test_constant_memory_near_the_limit_warns():
    @cupric.kernel
    def near(x):
        i = grid(1)
        x[i] = NEAR[i]

    with pytest.warns(UserWarning, match="near the 65536-byte constant bank"):
        near.inspect_ir("Array[f64, 1, 'C']")


def test_constant_arrays_recompile_when_their_contents_change(tmp_path):
    from cupric.compiler.fingerprint import fingerprint
    table = np.arange(4.0)

    def body(x):
        x[grid(1)] = table[grid(1) % 4]

    first = fingerprint(body)
    table[0] = 7.0
    assert fingerprint(body) != first


PARTICLE = np.dtype([("x", np.float32), ("n", np.int32), ("live", np.bool_)], align=True)


@cupric.kernel
def struct_tiles(x, out, counts):
    parts = shared.array(32, PARTICLE)
    scratch = local.array(2, POINT)
    t = threadIdx.x
    parts[t].x = x[t] * 2
    parts[t].n = t
    parts[t].live = t % 2 == 0
    scratch[0].a = 1.5
    scratch[1] = scratch[0]
    syncthreads()
    p = parts[31 - t]
    out[t] = p.x + scratch[1].a
    counts[t] = p.n + i32(p.live)


def test_shared_and_local_arrays_of_structs():
    """Arrays of structs in shared and local memory: fields read and written in place,
    whole elements copied (the simulator does not run these yet: NumPy's np.void
    elements have no attribute access)."""
    sig = "Array[f32, 1, 'C'], Array[f32, 1, 'C'], Array[i32, 1, 'C']"
    ptx = struct_tiles.inspect_ptx(sig, arch="sm_90")
    assert re.search(r"\.shared \.align 16 \.b8 \w+\[384\]", ptx)  # 32 x 12-byte structs
    for op in ("st.shared.f32", "st.shared.u32", "st.shared.u8", "ld.shared.f32",
               "ld.shared.u32", "ld.shared.u8"):
        assert op in ptx, op


def _compile_error(body, sig="Array[f32, 1, 'C']"):
    kern = cupric.kernel(body)
    with pytest.raises(CompileError) as info:
        kern.inspect_ir(sig)
    return info.value


@pytest.mark.parametrize("body,message,offset", [
    (lambda: _k_atomic_and_float, "atomic.and_ works on arrays of i32", 1),
    (lambda: _k_atomic_float_index, "the index must be an int", 1),
    (lambda: _k_atomic_scope, "scope= must be one of", 1),
    (lambda: _k_shuffle_array, "value must be a number", 1),
    (lambda: _k_shared_runtime_shape, "shape must be an int or a tuple of compile-time", 2),
    (lambda: _k_struct_field_store_on_argument, "attributes cannot be assigned", 1),
    (lambda: _k_shared_too_big, "past the 49152-byte limit", 1),
    (lambda: _k_count_args, "syncthreads_count(pred) takes one", 1),
    (lambda: _k_grid_stride_value, "only as the iterable of a for loop", 1),
    (lambda: _k_print_array, "print() in kernels prints numbers", 1),
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_intrinsic_errors_name_the_line(body, message, offset):
    fn = body()
    err = _compile_error(fn)
    assert message in err.message, err
    assert err.line == fn.__code__.co_firstlineno + offset


def _k_atomic_and_float(x):
    atomic.and_(x, 0, 1.0)


def _k_atomic_float_index(x):
    atomic.add(x, 1.5, 1.0)


def _k_atomic_scope(x):
    atomic.add(x, 0, 1.0, scope="galaxy")


def _k_shuffle_array(x):
    warp.shfl_down(0xFFFFFFFF, x, 1)


def _k_shared_runtime_shape(x):
    n = len(x)
    tile = shared.array(n, f32)
    tile[0] = 1.0


POINT = np.dtype([("a", np.float32), ("b", np.int32)])


def _k_struct_field_store_on_argument(x):
    x.a = 1.0


def _k_shared_too_big(x):
    tile = shared.array(20000, f32)
    tile[0] = x[0]


def _k_count_args(x):
    syncthreads_count()


def _k_grid_stride_value(x):
    r = grid_stride(10)
    x[0] = r


def _k_print_array(x):
    print(x)


def test_warnings_module_is_clean():
    # Importing the lowering tables must not emit warnings of its own.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from cupric.compiler.lowering.registry import rule_for
        assert rule_for("atomic.add") is not None
