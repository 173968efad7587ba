"""Every language feature against NumPy on the CPU simulator (the CPU lane's way of
running the kernels of golden/lang_kernels.py; the GPU lane runs the same checks on a
device in test_lang_gpu.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))

import lang_kernels  # noqa: E402


def simulate(kern, grid, block, *args):
    kern.simulate[grid, block](*args)
    return [a for a in args if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("check", lang_kernels.CHECKS, ids=lambda c: c.__name__)
def test_on_simulator(check, rng):
    check(simulate, rng)
