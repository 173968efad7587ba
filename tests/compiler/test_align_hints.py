"""Alignment hints of the aligned kernel variant: 16 bytes, except for 2-byte elements,
where libNVVM 13.0 cannot split the wide f16 accesses that `align 16` invites."""

import numpy as np

import cupric
from cupric.device import grid


@cupric.kernel
def copy_any(src, out):
    i = grid(1)
    if i < len(out):
        out[i] = src[i]


def test_two_byte_elements_get_align_4_and_others_align_16():
    f16 = copy_any.inspect_ir("Array[f16, 1, 'C'], Array[f16, 1, 'C']", aligned=True)
    assert "half addrspace(1)* noalias align 4" in f16 and "align 16" not in f16.split("{")[0]
    f32 = copy_any.inspect_ir("Array[f32, 1, 'C'], Array[f32, 1, 'C']", aligned=True)
    assert "float addrspace(1)* noalias align 16" in f32


def test_f16_copy_still_compiles_and_runs_on_the_simulator(rng):
    src = rng.standard_normal(300).astype(np.float16)
    out = np.full(300, np.nan, np.float16)
    copy_any.simulate[2, 256](src, out)
    np.testing.assert_array_equal(out, src)
    assert ".version" in copy_any.inspect_ptx("Array[f16, 1, 'C'], Array[f16, 1, 'C']",
                                              arch="sm_90")
