"""CPU lane: every kernel of device_lowering_kernels.py compiled through libNVVM (and
assembled by the linker) for sm_80 and sm_90, its PTX checked for the instructions the
intrinsics should become, and run on the simulator against NumPy."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import device_lowering_kernels as dk  # noqa: E402


def simulate(kern, grid, block, *args, shared=0):
    kern.simulate[grid, block, None, shared](*args)
    return [a for a in args if isinstance(a, np.ndarray)]


@pytest.fixture(scope="module")
def cubin_arch():
    """Assemble PTX only where a linker is present (both come with the CUDA wheels)."""
    from cupric.compiler import toolchain
    try:
        toolchain.nvjitlink()
        return True
    except Exception as exc:  # noqa: BLE001 - reported as the skip reason
        return f"no linker: {exc}"


@pytest.mark.parametrize("case", dk.CASES, ids=repr)
def test_ptx_has_the_intended_instructions(case, cubin_arch):
    from cupric.compiler.link import ptx_to_cubin
    for arch in case.archs:
        ptx = case.kern.inspect_ptx(case.signature, arch=arch)
        missing = [p for p in case.ptx if not re.search(p, ptx)]
        assert not missing, f"{case.name} on {arch}: no {missing} in the PTX"
        if cubin_arch is True:
            assert ptx_to_cubin(ptx, arch)  # inline PTX that ptxas refuses fails here


@pytest.mark.parametrize("case", dk.CASES, ids=repr)
def test_runs_on_the_simulator(case, rng):
    case.check(simulate, rng)
