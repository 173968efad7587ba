"""Kernels for tests/compiler/test_constant_policy.py: module-level arrays of known sizes
(the placement is decided over every array a kernel and its device functions name)."""

import numpy as np

import cupric
from cupric.device import constant, global_memory, grid
from cupric.device.const import constant_policy
from cupric.types import Array, f32

SMALL = np.arange(16, dtype=np.float32)                    # 64 bytes
MID = np.arange(6000, dtype=np.float32)                    # 24000 bytes
BIG = np.arange(12000, dtype=np.float32)                   # 48000 bytes
MARKED = constant(np.full(8, 2.0, np.float32))             # 32 bytes, constant()
TABLE = global_memory(np.arange(64, dtype=np.float32))     # 256 bytes, global_memory()
NEAR = np.zeros(15000, np.float32)                         # 60000 bytes: 91.6 % of the bank


@cupric.device_function
def read_big(i):
    return BIG[i % 12000]


@cupric.kernel
def mixed(out: Array[f32, 1, 'C']):
    i = grid(1)
    if i < len(out):
        out[i] = SMALL[i % 16] + MID[i % 6000] + read_big(i) + MARKED[i % 8] + TABLE[i % 64]


@cupric.kernel
@constant_policy(placement="explicit")
def explicit(out: Array[f32, 1, 'C']):
    i = grid(1)
    if i < len(out):
        out[i] = SMALL[i % 16] + MARKED[i % 8] + TABLE[i % 64]


@cupric.kernel
def near(out: Array[f32, 1, 'C']):
    i = grid(1)
    if i < len(out):
        out[i] = NEAR[i % 15000]


@cupric.kernel
@constant_policy(packing="large_first")
def mixed_large(out: Array[f32, 1, 'C']):
    i = grid(1)
    if i < len(out):
        out[i] = SMALL[i % 16] + MID[i % 6000] + read_big(i) + MARKED[i % 8] + TABLE[i % 64]


@cupric.kernel
@constant_policy(packing="by_module")
def by_module(out: Array[f32, 1, 'C']):
    i = grid(1)
    if i < len(out):
        out[i] = SMALL[i % 16] + read_big(i) + constant_policy_tables.read_table(i)


import constant_policy_tables  # noqa: E402  (another module's arrays, for by_module)
