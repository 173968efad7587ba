"""Kernels that exercise the kernel language, shared by the golden-IR tests, the
compile-for-every-arch tests (CPU lane) and the NumPy comparisons (GPU lane and
simulator). Each entry of CASES: (kernel, signature, make_args(rng) -> (args, expected
outputs) ) where outputs are computed by NumPy."""

from __future__ import annotations

import math
from typing import TypeVar

import numpy as np

import cupric
from cupric.device import blockDim, blockIdx, grid, gridsize, syncthreads, threadIdx
from cupric.compiler.typing.ktypes import TupleType, struct_type
from cupric.types import Array, bool_, f16, f32, f64, i8, i16, i32, i64, u8, u32, u64

T = TypeVar("T")
SCALE = 3
OFFSET = 0.25


@cupric.kernel
def saxpy(a: f32, x: Array[f32, 1], y: Array[f32, 1], out: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        out[i] = a * x[i] + y[i]


@cupric.kernel
def vecadd(x: Array[f32, 1], y: Array[f32, 1], out: Array[f32, 1]):
    i = grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]


@cupric.kernel
def grid_stride_scale(x: Array[f64, 1], factor: f64):
    start = grid(1)
    step = gridsize(1)
    for i in range(start, len(x), step):
        x[i] = x[i] * factor + OFFSET


@cupric.kernel
def int_arith(a: Array[i32, 1], b: Array[i32, 1], out: Array[i32, 2]):
    i = grid(1)
    if i < len(a):
        x = a[i]
        y = b[i]
        out[i, 0] = x // y
        out[i, 1] = x % y
        out[i, 2] = x * SCALE - y
        out[i, 3] = (x & 0xFF) | (y ^ 7)
        out[i, 4] = x >> 2
        out[i, 5] = -x + abs(y)
        out[i, 6] = min(x, y, 5)
        out[i, 7] = max(x, y)


@cupric.kernel
def wrap_u8(a: Array[u8, 1], out: Array[u8, 1]):
    i = grid(1)
    if i < len(a):
        out[i] = a[i] * u8(3) + u8(200)


@cupric.kernel
def float_math(x: Array[f64, 1], out: Array[f64, 2]):
    i = grid(1)
    if i < len(x):
        v = x[i]
        out[i, 0] = math.sqrt(abs(v))
        out[i, 1] = math.exp(v) - math.log(abs(v) + 1.0)
        out[i, 2] = math.sin(v) * math.cos(v) + math.tanh(v)
        out[i, 3] = math.pow(abs(v), 1.5) + math.erf(v)
        out[i, 4] = math.floor(v) + math.ceil(v)
        out[i, 5] = v // 0.75 + v % 0.75
        out[i, 6] = v ** 2 + 2.0 ** v
        out[i, 7] = math.pi * v if not math.isnan(v) else 0.0


@cupric.kernel
def float32_math(x: Array[f32, 1], out: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        v = x[i]
        out[i] = math.sqrt(abs(v)) + math.exp(v * f32(0.5)) + math.atan2(v, f32(2.0))


@cupric.kernel
def control_flow(n: Array[i32, 1], out: Array[i64, 1]):
    i = grid(1)
    if i >= len(n):
        return
    total = 0
    k = 0
    while True:
        k += 1
        if k > n[i]:
            break
        if k % 3 == 0:
            continue
        total += k
    for j in range(10, 0, -3):
        total += j
    if total > 100:
        total -= 100
    elif total > 50:
        total -= 50
    else:
        total += 1
    out[i] = total


@cupric.kernel
def logic(a: Array[f32, 1], b: Array[f32, 1], out: Array[bool_, 1]):
    i = grid(1)
    if i < len(a):
        x = a[i]
        y = b[i]
        out[i] = (x < y < 1.0 or x == y) and not (x > 0.5) if x != 0.0 else y >= 0


@cupric.device_function
def clamp(x, lo, hi):
    return min(max(x, lo), hi)


@cupric.device_function
def div_mod(a, b):
    return a // b, a % b


@cupric.kernel
def device_calls(a: Array[i64, 1], out: Array[i64, 2]):
    i = grid(1)
    if i < len(a):
        q, r = div_mod(a[i], 7)
        out[i, 0] = q
        out[i, 1] = r
        out[i, 2] = clamp(a[i], -10, 10)


@cupric.kernel
def matrix_2d(a: Array[f32, 2], b: Array[f32, 2], out: Array[f32, 2]):
    i, j = grid(2)
    if i < a.shape[0] and j < a.shape[1]:
        out[i, j] = a[i, j] * b[j, i] if i != j else f32(a.shape[1])


@cupric.kernel
def generic_scale(x: T, factor: T, out: T):
    i = grid(1)
    if i < len(x):
        out[i] = x[i] * factor[0]


@cupric.kernel
def casts(x: Array[f64, 1], out: Array[i64, 2]):
    i = grid(1)
    if i < len(x):
        v = x[i]
        out[i, 0] = i32(v)
        out[i, 1] = i8(i32(v))
        out[i, 2] = u32(i64(v) & 0xFFFF)
        out[i, 3] = int(f32(v) * 2)
        out[i, 4] = bool(v > 0) + True
        out[i, 5] = i16(f16(v))


@cupric.kernel
def tuples_and_shapes(a: Array[f32, 3], out: Array[i64, 1]):
    i = grid(1)
    if i == 0:
        s = a.shape
        n0, n1, n2 = s
        t = (n0, n1 * 2)
        out[0] = n0 * n1 * n2 + len(t) + t[1] + a.size + a.ndim
        out[1] = a.strides[0] + a.strides[2]


@cupric.kernel
def block_sum(x: Array[f32, 1], out: Array[f32, 1]):
    # One partial sum per thread, written after a barrier (no shared memory needed).
    i = blockIdx.x * blockDim.x + threadIdx.x
    acc = f32(0)
    j = i
    while j < len(x):
        acc += x[j]
        j += blockDim.x * 4
    syncthreads()
    if i < len(out):
        out[i] = acc


@cupric.kernel
def power_and_unsigned(a: Array[u64, 1], e: Array[i32, 1], out: Array[u64, 1]):
    i = grid(1)
    if i < len(a):
        out[i] = a[i] ** u64(e[i]) + a[i] // u64(3) + a[i] % u64(5)


PARTICLE = np.dtype([("x", np.float32), ("n", np.int64), ("alive", np.bool_)], align=True)


class Weights:
    lo: f32
    hi: f64


@cupric.kernel
def structs_and_tuples(p: PARTICLE, w: Weights, t: tuple[i32, f64], out: Array[f64, 1]):
    i = grid(1)
    if i < len(out):
        k, scale = t
        base = p.x * p.n if p.alive else -1.0
        out[i] = base + w.lo * i - w.hi + k * scale


# (name, kernel, signature) for golden IR and multi-arch compiles.
C1 = "Array[f32, 1, 'C']"
SIGNATURES = [
    ("saxpy", saxpy, f"f32, {C1}, {C1}, {C1}"),
    ("vecadd", vecadd, f"{C1}, {C1}, {C1}"),
    ("grid_stride_scale", grid_stride_scale, "Array[f64, 1, 'A'], f64"),
    ("int_arith", int_arith, "Array[i32, 1, 'C'], Array[i32, 1, 'C'], Array[i32, 2, 'C']"),
    ("wrap_u8", wrap_u8, "Array[u8, 1, 'C'], Array[u8, 1, 'C']"),
    ("float_math", float_math, "Array[f64, 1, 'C'], Array[f64, 2, 'C']"),
    ("float32_math", float32_math, f"{C1}, {C1}"),
    ("control_flow", control_flow, "Array[i32, 1, 'C'], Array[i64, 1, 'C']"),
    ("logic", logic, f"{C1}, {C1}, Array[bool, 1, 'C']"),
    ("device_calls", device_calls, "Array[i64, 1, 'C'], Array[i64, 2, 'C']"),
    ("matrix_2d", matrix_2d, "Array[f32, 2, 'C'], Array[f32, 2, 'F'], Array[f32, 2, 'A']"),
    ("generic_scale", generic_scale, "Array[f64, 1, 'C'], Array[f64, 1, 'C'], "
                                     "Array[f64, 1, 'C']"),
    ("casts", casts, "Array[f64, 1, 'C'], Array[i64, 2, 'C']"),
    ("tuples_and_shapes", tuples_and_shapes, "Array[f32, 3, 'C'], Array[i64, 1, 'C']"),
    ("block_sum", block_sum, f"{C1}, {C1}"),
    ("power_and_unsigned", power_and_unsigned,
     "Array[u64, 1, 'C'], Array[i32, 1, 'C'], Array[u64, 1, 'C']"),
    ("structs_and_tuples", structs_and_tuples,
     (struct_type(PARTICLE), struct_type(Weights), TupleType([i32, f64]),
      Array[f64, 1, "C"])),
]



# -- NumPy references: each check runs a kernel through `run` (GPU or simulator) on fresh
# random inputs and compares with NumPy. run(kern, grid, block, *args) -> list of the
# arrays among args, as NumPy arrays after the launch.

def _py_control_flow(n):
    total = 0
    k = 0
    while True:
        k += 1
        if k > n:
            break
        if k % 3 == 0:
            continue
        total += k
    for j in range(10, 0, -3):
        total += j
    if total > 100:
        total -= 100
    elif total > 50:
        total -= 50
    else:
        total += 1
    return total


def _py_logic(x, y):
    if x != 0.0:
        return bool((x < y < 1.0 or x == y) and not (x > 0.5))
    return bool(y >= 0)


def check_saxpy(run, rng):
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    a = np.float32(rng.standard_normal())
    _, _, got = run(saxpy, (n + 127) // 128, 128, a, x, y, out)
    np.testing.assert_allclose(got, a * x + y, rtol=1e-6, atol=1e-6)


def check_vecadd(run, rng):
    n = 777
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    got = run(vecadd, 7, 128, x, y, out)[2]
    np.testing.assert_array_equal(got, x + y)


def check_grid_stride(run, rng):
    x = rng.standard_normal(5000)
    factor = float(rng.uniform(0.5, 2))
    got = run(grid_stride_scale, 3, 64, x.copy(), factor)[0]
    # x * factor + OFFSET may be one fused multiply-add on the GPU (rounded once).
    np.testing.assert_allclose(got, x * factor + OFFSET, rtol=1e-15, atol=1e-15)


def check_int_arith(run, rng):
    n = 500
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    b = rng.integers(-50, 50, n).astype(np.int32)
    b[b == 0] = 3
    out = np.full((n, 8), -7, np.int32)
    got = run(int_arith, 4, 128, a, b, out)[2]
    expect = np.stack([a // b, a % b, a * 3 - b, (a & 0xFF) | (b ^ 7), a >> 2,
                       -a + np.abs(b), np.minimum(np.minimum(a, b), 5), np.maximum(a, b)],
                      axis=1)
    np.testing.assert_array_equal(got, expect)


def check_wrap_u8(run, rng):
    a = rng.integers(0, 256, 300).astype(np.uint8)
    out = np.zeros(300, np.uint8)
    got = run(wrap_u8, 3, 128, a, out)[1]
    np.testing.assert_array_equal(got, ((a.astype(np.int64) * 3 + 200) % 256).astype(np.uint8))


def check_float_math(run, rng):
    x = rng.uniform(-4, 4, 400)
    out = np.full((400, 8), np.nan)
    got = run(float_math, 4, 128, x, out)[1]
    erf = np.vectorize(math.erf)
    expect = np.stack([
        np.sqrt(np.abs(x)), np.exp(x) - np.log(np.abs(x) + 1.0),
        np.sin(x) * np.cos(x) + np.tanh(x), np.abs(x) ** 1.5 + erf(x),
        np.floor(x) + np.ceil(x), x // 0.75 + x % 0.75, x ** 2 + 2.0 ** x, math.pi * x], axis=1)
    np.testing.assert_allclose(got, expect, rtol=1e-13, atol=1e-13)


def check_float32_math(run, rng):
    x = rng.uniform(-4, 4, 300).astype(np.float32)
    out = np.full(300, np.nan, np.float32)
    got = run(float32_math, 3, 128, x, out)[1]
    expect = np.sqrt(np.abs(x)) + np.exp(x * np.float32(0.5)) + np.arctan2(x, np.float32(2))
    np.testing.assert_allclose(got, expect, rtol=2e-6)


def check_control_flow(run, rng):
    n = rng.integers(0, 40, 200).astype(np.int32)
    out = np.full(200, -1, np.int64)
    got = run(control_flow, 2, 128, n, out)[1]
    np.testing.assert_array_equal(got, [_py_control_flow(int(v)) for v in n])


def check_logic(run, rng):
    a = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, -0.5], 300).astype(np.float32)
    b = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, -0.5], 300).astype(np.float32)
    out = np.zeros(300, np.bool_)
    got = run(logic, 3, 128, a, b, out)[2]
    np.testing.assert_array_equal(got, [_py_logic(float(x), float(y)) for x, y in zip(a, b)])


def check_device_calls(run, rng):
    a = rng.integers(-100, 100, 256).astype(np.int64)
    out = np.zeros((256, 3), np.int64)
    got = run(device_calls, 2, 128, a, out)[1]
    np.testing.assert_array_equal(got, np.stack([a // 7, a % 7, np.clip(a, -10, 10)], 1))


def check_matrix_2d(run, rng):
    a = rng.standard_normal((33, 17)).astype(np.float32)
    b = rng.standard_normal((17, 33)).astype(np.float32)
    out = np.full((33, 17), np.nan, np.float32)
    got = run(matrix_2d, (5, 3), (8, 8), a, b, out)[2]
    expect = a * b.T
    idx = np.arange(17)
    expect[idx, idx] = 17
    np.testing.assert_allclose(got, expect, rtol=1e-6)


def check_generic(run, rng):
    x = rng.standard_normal(100)
    factor = np.array([rng.standard_normal()])
    out = np.zeros(100)
    got = run(generic_scale, 1, 128, x, factor, out)[2]
    np.testing.assert_array_equal(got, x * factor[0])


def check_casts(run, rng):
    x = rng.uniform(-1000, 1000, 200)
    out = np.zeros((200, 6), np.int64)
    got = run(casts, 2, 128, x, out)[1]
    expect = [[int(i32(v)), int(i8(i32(v))), int(u32(int(i64(v)) & 0xFFFF)),
               int(float(np.float32(v)) * 2), int(v > 0) + 1, int(i16(f16(v)))] for v in x]
    np.testing.assert_array_equal(got, np.array(expect, np.int64))


def check_tuples(run, rng):
    a = np.zeros((3, 4, 5), np.float32)
    out = np.zeros(2, np.int64)
    got = run(tuples_and_shapes, 1, 32, a, out)[1]
    np.testing.assert_array_equal(got, [60 + 2 + 8 + 60 + 3, 80 + 4])


def check_block_sum(run, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros(128, np.float32)
    got = run(block_sum, 2, 64, x, out)[1]
    expect = np.array([x[i::256].sum(dtype=np.float32) for i in range(128)])
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def check_power(run, rng):
    a = rng.integers(0, 1 << 40, 100).astype(np.uint64)
    e = rng.integers(0, 6, 100).astype(np.int32)
    out = np.zeros(100, np.uint64)
    got = run(power_and_unsigned, 1, 128, a, e, out)[2]
    m = 1 << 64
    expect = [(pow(int(v), int(k), m) + int(v) // 3 + int(v) % 5) % m for v, k in zip(a, e)]
    np.testing.assert_array_equal(got, np.array(expect, np.uint64))


def check_structs(run, rng):
    # NumPy records (np.record: fields also as attributes, as the simulator needs).
    p = np.zeros((), PARTICLE).view(np.recarray)[()]
    p["x"], p["n"], p["alive"] = rng.standard_normal(), rng.integers(1, 9), True
    w = np.zeros((), struct_type(Weights).dtype).view(np.recarray)[()]
    w["lo"], w["hi"] = rng.standard_normal(), rng.standard_normal()
    t = (int(rng.integers(-5, 5)), float(rng.standard_normal()))
    out = np.full(50, np.nan)
    got = run(structs_and_tuples, 1, 64, p, w, t, out)[0]
    i = np.arange(50)
    base = float(np.float32(p["x"])) * int(p["n"])  # f32 * i64 -> f64 (NumPy)
    expect = base + float(np.float32(w["lo"])) * i - float(w["hi"]) + t[0] * t[1]
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-12)


CHECKS = [check_saxpy, check_vecadd, check_grid_stride, check_int_arith, check_wrap_u8,
          check_float_math, check_float32_math, check_control_flow, check_logic,
          check_device_calls, check_matrix_2d, check_generic, check_casts, check_tuples,
          check_block_sum, check_power, check_structs]
