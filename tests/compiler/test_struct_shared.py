"""Shared-memory arrays of structs: `tile[i].field` read and written in compiled code (GPU
lane) and on the simulator (CPU lane), against NumPy."""

import re

import numpy as np
import pytest

import cupric
from cupric.device import shared, syncthreads, threadIdx
from cupric.types import Array, f32

PAIR = np.dtype([("x", np.float32), ("y", np.float32)], align=True)
N = 64


@cupric.kernel
def reverse_pairs(inp: Array[f32, 1], out: Array[f32, 1]):
    tile = shared.array(64, PAIR)
    t = threadIdx.x
    tile[t].x = inp[t]
    tile[t].y = inp[t] * 2.0
    syncthreads()
    out[t] = tile[63 - t].x + tile[63 - t].y


SIG = "Array[f32, 1, 'C'], Array[f32, 1, 'C']"


def test_struct_shared_array_on_the_simulator(rng):
    x = rng.standard_normal(N).astype(np.float32)
    out = np.full(N, np.nan, np.float32)
    reverse_pairs.simulate[1, N](x, out)
    np.testing.assert_allclose(out, 3 * x[::-1], rtol=1e-6)


def test_struct_shared_array_compiles_to_shared_accesses():
    ptx = reverse_pairs.inspect_ptx(SIG, arch="sm_90")
    # Both fields of a pair move as one 8-byte access.
    assert re.search(r"st\.shared(\.v2)?\.f32", ptx) and re.search(r"ld\.shared(\.v2)?\.f32", ptx)
    assert "bar.sync" in ptx


@pytest.mark.gpu
def test_struct_shared_array_on_the_gpu(rng):
    from cupric import runtime as rt

    x = rng.standard_normal(N).astype(np.float32)
    out = rt.to_device(np.full(N, np.nan, np.float32))
    reverse_pairs[1, N](rt.to_device(x), out)
    np.testing.assert_allclose(out.to_numpy(), 3 * x[::-1], rtol=1e-6)
