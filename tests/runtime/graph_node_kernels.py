"""Kernels for tests/runtime/test_graph_nodes.py."""

import cupric
from cupric.device import grid
from cupric.types import Array, f32


@cupric.kernel
def axpy(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    i = grid(1)
    if i < len(y):
        y[i] = a * x[i] + y[i]


@cupric.kernel
def scale(a: f32, x: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        x[i] = a * x[i]
