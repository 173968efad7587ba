"""Differential fuzzing on the CPU (tests/simulator/fuzz.py): random expression and
control-flow kernels run on the simulator and compared with a NumPy reference of the
documented semantics. A few hundred kernels here; CUPRIC_FUZZ_COUNT runs more, and
`python3 tests/simulator/fuzz.py --count 10000` is the long run (docs/kernel-language.md
records its result). The GPU lane's twin is tests/compiler/test_fuzz_gpu.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import fuzz  # noqa: E402

COUNT = int(os.environ.get("CUPRIC_FUZZ_COUNT", "120"))


@pytest.mark.parametrize("seed", [11, 12])
def test_simulator_matches_the_reference(seed):
    count, compared, mismatches, refused = fuzz.run(COUNT // 2, seed=seed)
    assert refused == 0, "\n".join(str(m) for m in mismatches[:3])
    assert not mismatches, f"{len(mismatches)} mismatches; first:\n{mismatches[0]}"
    # Most elements are defined: a generator that made everything undefined proves nothing.
    assert compared > 0.8 * count * fuzz.N


def test_the_reference_marks_what_is_undefined():
    """The reference itself: division by zero and MIN // -1 are undefined, float to int
    out of range is undefined, in-range values convert by truncation."""
    a = fuzz.V("i32", np.array([7, -2**31] + [1] * (fuzz.N - 2), np.int32))
    b = fuzz.V("i32", np.array([0, -1] + [2] * (fuzz.N - 2), np.int32))
    r = fuzz.binop("//", a, b, "i32", "i32")
    assert r.undef[:2].all() and not r.undef[2:].any() and r.a[2] == 0
    f = fuzz.V("f64", np.array([np.nan, 3e9, -2.7] + [0.0] * (fuzz.N - 3)))
    c = fuzz.convert(f, "i32")
    assert c.undef[:2].all() and not c.undef[2] and c.a[2] == -2
    assert fuzz._round_f32(2**24 + 1) == 2**24 and fuzz._round_f32(2**24 + 3) == 2**24 + 4


def test_a_wrong_simulator_is_caught(monkeypatch):
    """The comparison has teeth: a simulator whose integer addition saturates instead of
    wrapping is reported."""
    from cupric.compiler.typing import semantics

    real = semantics.binary

    def saturating(op, a, b, c_division=False):
        r = real(op, a, b, c_division)
        if op == "+" and isinstance(a, np.signedinteger) and (a > 0) and (b > 0) and r < 0:
            return a.dtype.type(np.iinfo(a.dtype).max)
        return r
    cases = fuzz.generate(200, seed=5)
    case = next(c for c in cases if "+" in c.source and "Array[i32" in c.source)
    kern = fuzz.build([case], "teeth")[case.name]
    arrays = {n: np.full(fuzz.N, 2**31 - 1, fuzz.DTYPE[t]) if t == "i32" else
              fuzz.inputs_for(case, np.random.default_rng(0))[n] for n, t in case.inputs}
    want = fuzz.reference(case, arrays)
    out = np.zeros(fuzz.N, fuzz.DTYPE[case.out_t])
    kern.simulate[1, fuzz.N](*[arrays[n] for n, _ in case.inputs], out)
    assert not fuzz.compare(case, out, want, exact_inexact=True)
    broken = out.copy()
    defined = np.flatnonzero(~want.undef)
    broken[defined[0]] = broken[defined[0]] + 1 if case.out_t != "bool" else \
        not broken[defined[0]]
    assert fuzz.compare(case, broken, want, exact_inexact=True)
