"""A module of tables read through its own device function, for the by-module packing
test of tests/compiler/test_constant_policy.py ("a library's tables")."""

import numpy as np

import cupric

LIBRARY_TABLE = np.arange(6000, dtype=np.float32)  # 24000 bytes


@cupric.device_function
def read_table(i):
    return LIBRARY_TABLE[i % 6000]
