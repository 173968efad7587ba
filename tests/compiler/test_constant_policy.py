"""Constant-memory policy (CPU lane): `global_memory()` forces an array out of the bank;
explicit-only placement per kernel and process-wide; a configurable warning range;
packing orders (small first, large first, by module, a user ranking); the placement
report from `Kernel.inspect_constants` and `python -m cupric compile --report`, which
agrees with the `.const`/`.global` declarations of the PTX; the policy keys the cache.
GPU lane: the placed arrays read back right from both spaces."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from cupric.compiler.lowering.const import ConstantMemoryWarning
from cupric.device.const import (ConstantCandidate, ConstantPolicy, constant_policy,
                                 get_constant_policy, global_memory, set_constant_policy)

sys.path.insert(0, str(Path(__file__).parent))
import constant_policy_kernels as ck  # noqa: E402

SIG = "Array[f32, 1, 'C']"


@pytest.fixture(autouse=True)
def default_policy():
    previous = set_constant_policy()
    yield
    set_constant_policy(previous)


def where(report) -> dict:
    return {e.name: e.space for e in report.entries}


def ptx_spaces(ptx: str) -> dict:
    names = {"const": "constant", "global": "global"}
    return {name: names[space] for space, name in
            re.findall(r"\.(const|global) \.align \d+ \.b8 cupric_const_(\w+)\[", ptx)}


def test_default_policy_spills_the_largest_and_honours_both_markers():
    report = ck.mixed.inspect_constants(SIG)
    assert where(report) == {"SMALL": "constant", "MID": "constant", "BIG": "global",
                             "MARKED": "constant", "TABLE": "global"}
    reasons = {e.name: e.reason for e in report.entries}
    assert reasons["BIG"] == "spilled" and reasons["TABLE"] == "marked global_memory()"
    assert report.constant_bytes == 64 + 24000 + 32
    assert report.global_bytes == 48000 + 256
    assert "BIG" in report.warnings[0]
    with pytest.warns(ConstantMemoryWarning, match="BIG do not fit"):
        ptx = ck.mixed.specialize(SIG).ir
    assert "addrspace(4)" in ptx


def test_the_report_matches_the_ptx():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantMemoryWarning)
        ptx = ck.mixed_large.inspect_ptx(SIG, arch="sm_90")
    report = ck.mixed_large.inspect_constants(SIG)
    assert ptx_spaces(ptx) == where(report)
    assert where(report)["BIG"] == "constant" and where(report)["MID"] == "global"


def test_explicit_only_per_kernel():
    report = ck.explicit.inspect_constants(SIG)
    assert where(report) == {"SMALL": "global", "MARKED": "constant", "TABLE": "global"}
    assert {e.name: e.reason for e in report.entries}["SMALL"] == "explicit-only policy"
    assert ptx_spaces(ck.explicit.inspect_ptx(SIG, arch="sm_90")) == where(report)


def test_explicit_only_process_wide():
    set_constant_policy(placement="explicit")
    assert get_constant_policy().placement == "explicit"
    report = ck.mixed.inspect_constants(SIG)
    assert where(report) == {"SMALL": "global", "MID": "global", "BIG": "global",
                             "MARKED": "constant", "TABLE": "global"}
    assert report.warnings == ()


def test_the_warning_range_is_configurable():
    report = ck.near.inspect_constants(SIG)
    assert report.warnings and "near the 65536-byte constant bank" in report.warnings[0]
    set_constant_policy(warn_range=(0.95, 1.0))
    assert ck.near.inspect_constants(SIG).warnings == ()
    set_constant_policy(warn_range=(0.5, 0.95))
    assert ck.near.inspect_constants(SIG).warnings
    set_constant_policy(warn_range=None)
    assert ck.near.inspect_constants(SIG).warnings == ()
    with pytest.raises(ValueError, match="low <= high"):
        ConstantPolicy(warn_range=(0.9, 0.5))
    with pytest.raises(ValueError, match="placement"):
        ConstantPolicy(placement="sometimes")
    with pytest.raises(ValueError, match="packing"):
        ConstantPolicy(packing="random")


def test_by_module_keeps_the_kernels_own_module_first():
    # SMALL + BIG (the kernel's module) + the library's 24000-byte table do not fit.
    # small_first would keep the library's table and spill BIG; by_module offers the
    # kernel module's arrays first, so the library's table spills.
    report = ck.by_module.inspect_constants(SIG)
    modules = {e.name: e.module for e in report.entries}
    assert modules == {"SMALL": "constant_policy_kernels", "BIG": "constant_policy_kernels",
                       "LIBRARY_TABLE": "constant_policy_tables"}
    assert where(report) == {"SMALL": "constant", "BIG": "constant",
                             "LIBRARY_TABLE": "global"}
    assert report.warnings and "LIBRARY_TABLE" in report.warnings[0]


def test_a_user_ranking():
    seen = []

    def mid_last(candidates):
        seen.extend(candidates)
        return sorted(candidates, key=lambda c: c.name == "MID")

    set_constant_policy(packing=mid_last)
    report = ck.mixed.inspect_constants(SIG)
    assert {c.name for c in seen} == {"SMALL", "MID", "BIG"}  # markers are not candidates
    assert all(isinstance(c, ConstantCandidate) for c in seen)
    # SMALL, then BIG (48000 bytes) fit; MID no longer does.
    assert where(report)["MID"] == "global" and where(report)["BIG"] == "constant"

    set_constant_policy(packing=lambda candidates: candidates[:1])
    with pytest.raises(ValueError, match="exactly once"):
        ck.mixed.inspect_constants(SIG)


def test_the_policy_keys_the_kernel_cache():
    spec = ck.mixed.specialize(SIG)
    options = ck.mixed.options.resolve("sm_90")
    default_key = spec.cache_key(options)
    set_constant_policy(packing="large_first")
    assert spec.cache_key(options) != default_key
    set_constant_policy()
    assert spec.cache_key(options) == default_key


def test_global_memory_marker_is_read_only_and_a_plain_array_in_views():
    table = global_memory([1, 2, 3], dtype=np.int32)
    assert not table.flags.writeable
    np.testing.assert_array_equal(np.asarray(table), [1, 2, 3])


def test_per_kernel_decorator_over_the_kernel_object():
    import cupric

    @cupric.kernel
    def local_kernel(out):
        out[0] = ck.SMALL[0]
    constant_policy(placement="explicit")(local_kernel)
    assert local_kernel.py_func.__cupric_constant_policy__.placement == "explicit"


def test_cli_report_text_and_json():
    path = Path(ck.__file__)
    out = subprocess.run([sys.executable, "-m", "cupric", "compile", f"{path}::mixed",
                          "--report"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("kernel mixed: 24096 of 65536 constant bytes")
    assert any(re.match(r"\s+BIG\s+\S+\s+48000\s+global\s+spilled", l) for l in lines)
    out = subprocess.run([sys.executable, "-m", "cupric", "compile", f"{path}::mixed",
                          "--report", "--json"], capture_output=True, text=True, timeout=300)
    data = json.loads(out.stdout)
    assert data["constant_bytes"] == 24096 and data["global_bytes"] == 48256
    assert {a["name"]: a["space"] for a in data["arrays"]}["TABLE"] == "global"


@pytest.mark.gpu
def test_arrays_in_both_spaces_read_right_on_the_gpu():
    from cupric import runtime as rt
    n = 50_000
    i = np.arange(n)
    expected = (ck.SMALL[i % 16] + ck.MID[i % 6000] + ck.BIG[i % 12000]
                + ck.MARKED[i % 8] + ck.TABLE[i % 64]).astype(np.float32)
    # mixed: BIG in global memory; mixed_large: MID there; explicit: all but MARKED.
    for kern in (ck.mixed, ck.mixed_large):
        out = rt.to_device(np.full(n, np.nan, np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConstantMemoryWarning)
            kern[(n + 255) // 256, 256](out)
        np.testing.assert_array_equal(out.to_numpy(), expected)
    out = rt.to_device(np.full(n, np.nan, np.float32))
    ck.explicit[(n + 255) // 256, 256](out)
    np.testing.assert_array_equal(out.to_numpy(), (ck.SMALL[i % 16] + ck.MARKED[i % 8]
                                                   + ck.TABLE[i % 64]).astype(np.float32))
