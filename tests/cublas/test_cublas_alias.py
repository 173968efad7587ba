"""cublas.gemm refuses an output C that overlaps A or B (cuBLAS would read the inputs while
writing them), on the first call and on every later call that reuses a checked plan."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.cublas import api as cb

from _cublas_fake import dev
from test_cublas_cpu import emu, h  # noqa: F401  (fixtures: a fake handle, the GEMM emulator)


@pytest.mark.parametrize("which", ["a", "b"])
def test_gemm_refuses_c_overlapping_an_input(h, emu, rng, which):
    a = np.asfortranarray(rng.standard_normal((6, 6)))
    b = np.asfortranarray(rng.standard_normal((6, 6)))
    c = np.asfortranarray(np.full((6, 6), np.nan))
    da, db, dc = dev(a), dev(b), dev(c)
    cb.gemm("N", "N", 1.0, da, db, 0.0, dc, handle=h)  # checked, then planned
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)
    calls = len(emu.calls)
    target = da if which == "a" else db
    for _ in range(2):  # the first and the planned path
        with pytest.raises(ValueError, match=f"c overlaps {which}"):
            cb.gemm("N", "N", 1.0, da, db, 0.0, target, handle=h)
    # A view sharing part of the memory overlaps too.
    big = np.asfortranarray(rng.standard_normal((6, 12)))  # column blocks are contiguous
    with pytest.raises(ValueError, match="overlaps"):
        cb.gemm("N", "N", 1.0, dev(big[:, :6]), db, 0.0, dev(big[:, 3:9]), handle=h)
    assert len(emu.calls) == calls  # nothing reached cuBLAS
    first = big[:, :6].copy()
    cb.gemm("N", "N", 1.0, dev(big[:, :6]), db, 0.0, dev(big[:, 6:]), handle=h)  # disjoint
    np.testing.assert_allclose(big[:, 6:], first @ b, rtol=1e-12)
