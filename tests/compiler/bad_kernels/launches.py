"""Launches that must be refused before anything runs: arguments that do not fit the
parameters and launch configurations no device (or no sm_90 device) accepts. Each entry
is (name, kernel, arguments factory, (grid, block, shared_bytes), exception type, regex
of the message); the factory takes `to_device` (identity for the simulator, a copy to
the GPU for compiled launches) so one list serves both modes
(tests/compiler/test_frontend_errors.py on the CPU, test_frontend_errors_gpu.py on a GPU).
"""

import numpy as np

import cupric
from cupric.compiler.errors import CompileError
from cupric.runtime.launch import LaunchConfigError
from cupric.types import Array, f32, i32, u32, u64

POINT = np.dtype([("x", np.float32), ("y", np.float32)])
OTHER = np.dtype([("a", np.int32), ("b", np.int32), ("c", np.int32)])


@cupric.kernel
def scale(x: Array[f32, 1, "C"], a: f32, n: i32):
    i = cupric.device.grid(1)
    if i < n:
        x[i] = x[i] * a


@cupric.kernel
def widths(x: Array[f32, 1], n: u32, m: u64):
    x[0] = f32(n) + f32(m)


@cupric.kernel
def point(x: Array[f32, 1], p):
    x[0] = p.x + p.y


@cupric.kernel
def pair(x: Array[f32, 1], t):
    a, b = t
    x[0] = a + b


def _x(to_device):
    return to_device(np.full(8, 7.0, np.float32))


A = TypeError    # a KernelArgumentError: also a TypeError (and a CompileError)
C = LaunchConfigError
OK = (1, 8, 0)

LAUNCHES = [
    ("too_few_arguments", scale, lambda d: (_x(d), 2.0), OK, A,
     r"scale\(\) takes 3 arguments \(x, a, n\), got 2"),
    ("too_many_arguments", scale, lambda d: (_x(d), 2.0, 8, 9), OK, A,
     r"takes 3 arguments .* got 4"),
    ("float64_array_for_f32", scale, lambda d: (d(np.full(8, 7.0)), 2.0, 8), OK, A,
     r"argument 'x' of scale\(\) expects Array\[f32"),
    ("wrong_rank", scale, lambda d: (d(np.full((2, 4), 7, np.float32)), 2.0, 8), OK, A,
     r"with 2 dimension"),
    ("float_for_i32", scale, lambda d: (_x(d), 2.0, 8.5), OK, A,
     r"argument 'n' of scale\(\) expects i32, got a float"),
    ("array_for_scalar", scale, lambda d: (_x(d), _x(d), 8), OK, A,
     r"argument 'a' of scale\(\) expects f32, got an array"),
    ("scalar_for_array", scale, lambda d: (1.0, 2.0, 8), OK, A,
     r"argument 'x' of scale\(\) expects Array\[f32"),
    ("i32_out_of_range", scale, lambda d: (_x(d), 2.0, 2**31), OK, A,
     r"2147483648 does not fit in i32|must fit a i32 parameter, got 2147483648"),
    ("u32_negative", widths, lambda d: (_x(d), -1, 1), OK, A,
     r"-1 does not fit in u32|must fit a u32 parameter, got -1"),
    ("u64_too_large", widths, lambda d: (_x(d), 1, 2**64), OK, A,
     r"18446744073709551616 does not fit in u64|must fit a u64 parameter|64 bits"),
    ("not_contiguous", scale,
     lambda d: (d(np.full((8, 2), 7, np.float32))[:, 0], 2.0, 8), OK, A,
     r"expects a C-contiguous array"),
    ("string_argument", scale, lambda d: (_x(d), "2.0", 8), OK, A,
     r"argument 1 of scale\(\)|argument 'a'|argument 1: \w+ is not a device array"),
    ("none_argument", scale, lambda d: (_x(d), None, 8), OK, A,
     r"argument 1 of scale\(\)|argument 'a'|argument 1: \w+ is not a device array"),
    ("complex_argument", scale, lambda d: (_x(d), 1j, 8), OK, A,
     r"argument 1 of scale\(\)|argument 'a'|argument 1: \w+ is not a device array"),
    ("list_argument", scale, lambda d: (_x(d), [1.0], 8), OK, A,
     r"argument 1 of scale\(\)|argument 'a'|argument 1: \w+ is not a device array"),
    ("object_array", scale, lambda d: (np.array([None] * 8, dtype=object), 2.0, 8), OK, A,
     r"argument 0 of scale\(\)|argument 'x'"),
    ("struct_wrong_record", point, lambda d: (_x(d), np.zeros(1, OTHER)[0]), OK,
     CompileError, r"has no field 'x'"),
    ("tuple_wrong_length", pair, lambda d: (_x(d), (1.0, 2.0, 3.0)), OK, CompileError,
     r"cannot unpack a tuple of 3 into 2"),
    ("negative_grid", scale, lambda d: (_x(d), 2.0, 8), (-1, 8, 0), C,
     r"grid.x = -1: grid dimensions must be >= 1"),
    ("zero_block", scale, lambda d: (_x(d), 2.0, 8), (1, 0, 0), C,
     r"block.x = 0: block dimensions must be >= 1"),
    ("block_too_large", scale, lambda d: (_x(d), 2.0, 8), (1, (32, 33), 0), C,
     r"1056 threads exceeds"),
    ("block_z_too_large", scale, lambda d: (_x(d), 2.0, 8), (1, (1, 1, 65), 0), C,
     r"block.z = 65 exceeds the device limit of 64"),
    ("grid_y_too_large", scale, lambda d: (_x(d), 2.0, 8), ((1, 65536), 8, 0), C,
     r"grid.y = 65536 exceeds the device limit of 65535"),
    ("grid_x_too_large", scale, lambda d: (_x(d), 2.0, 8), (2**31, 8, 0), C,
     r"grid.x = 2147483648 exceeds the device limit of 2147483647"),
    ("grid_beyond_unsigned", scale, lambda d: (_x(d), 2.0, 8), (2**32, 8, 0), C,
     r"grid.x = 4294967296 is outside"),
    ("negative_shared_bytes", scale, lambda d: (_x(d), 2.0, 8), (1, 8, -4), C,
     r"shared_bytes must be a non-negative int"),
    ("shared_bytes_too_large", scale, lambda d: (_x(d), 2.0, 8), (1, 8, 300 * 1024), C,
     r"307200 bytes of dynamic shared memory requested"),
    ("float_grid", scale, lambda d: (_x(d), 2.0, 8), (1.5, 8, 0), C,
     r"grid must be an int or a tuple|grid dimensions must be ints"),
    ("four_dimensional_block", scale, lambda d: (_x(d), 2.0, 8), (1, (1, 1, 1, 1), 0), C,
     r"block must have 1 to 3 dimensions"),
    ("string_grid", scale, lambda d: (_x(d), 2.0, 8), ("a", 8, 0), C,
     r"grid dimensions must be ints"),
]


def _host(array):
    return array
