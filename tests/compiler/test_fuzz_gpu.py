"""GPU lane of the differential fuzzer (tests/simulator/fuzz.py): random kernels compiled
and launched on the GPU, compared with the simulator and the NumPy reference of the
documented semantics. CUPRIC_FUZZ_GPU_COUNT sets how many (the long run: `python3
tests/simulator/fuzz.py --gpu --count 2000`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "simulator"))

import fuzz  # noqa: E402

pytestmark = pytest.mark.gpu

COUNT = int(os.environ.get("CUPRIC_FUZZ_GPU_COUNT", "150"))


@pytest.fixture(autouse=True, scope="module")
def _primary_context():
    from cupric import runtime as rt
    rt.Device(0).make_current()


def test_compiled_matches_simulator_and_reference():
    count, compared, mismatches, refused = fuzz.run(COUNT, seed=101, gpu=True)
    assert refused == 0
    assert not mismatches, f"{len(mismatches)} mismatches; first:\n{mismatches[0]}"
    assert compared > 0.8 * count * fuzz.N
