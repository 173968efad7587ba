"""GPU lane: the bad-launch corpus (bad_kernels/launches.py) launched for real. Every
launch is refused with a typed error naming the problem before anything runs: the
output array (poisoned with 7.0) is unchanged and the context stays usable, which a
last, correct launch checks."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "bad_kernels"))

import launches  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True, scope="module")
def _primary_context():
    from cupric import runtime as rt
    rt.Device(0).make_current()


def _device(array):
    from cupric.runtime.memory import to_device
    return to_device(array)


@pytest.mark.parametrize("case", launches.LAUNCHES, ids=[c[0] for c in launches.LAUNCHES])
def test_bad_launch_is_refused_on_the_gpu(case):
    from cupric import runtime as rt
    name, kern, make_args, (grid, block, shared_bytes), kind, pattern = case
    args = make_args(_device)
    # Host NumPy arrays are refused on a GPU by type; the corpus's own mistake is what
    # must be named, so only cases whose arguments are all device arrays or scalars run.
    if any(isinstance(a, np.ndarray) for a in args):
        pytest.skip("a host array is refused on a GPU before the case's own mistake")
    with pytest.raises(kind, match=pattern):
        kern[grid, block, None, shared_bytes](*args)
    rt.synchronize()
    for a in args:
        if hasattr(a, "to_numpy") and a.dtype == np.float32:
            assert (a.to_numpy() == 7).all(), f"{name}: a refused launch must not run"


def test_the_context_is_usable_after_every_refusal():
    from cupric import runtime as rt
    x = _device(np.arange(8, dtype=np.float32))
    launches.scale[1, 8](x, np.float32(2.0), 8)
    rt.synchronize()
    assert np.array_equal(x.to_numpy(), 2 * np.arange(8, dtype=np.float32))
