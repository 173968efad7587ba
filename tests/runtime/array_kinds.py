"""GPU-lane helpers shared by the intake and launch-adapter tests: the array libraries
(skipped with a reason where absent) and wrappers that expose an array through one
protocol only."""

from __future__ import annotations

import numpy as np
import pytest


def cupy():
    return pytest.importorskip("cupy")


def torch():
    module = pytest.importorskip("torch")
    if not module.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return module


def numba_cuda():
    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still calls it (gone in NumPy 2.5)
        np.row_stack = np.vstack
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("numba-cuda sees no GPU")
    return cuda


class ViaInterface:
    """The same array seen through its `__cuda_array_interface__` alone."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__


class ViaDLPack:
    """The same array seen through `__dlpack__` alone."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
