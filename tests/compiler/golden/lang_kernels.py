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
]

