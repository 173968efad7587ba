"""GPU lane: every language feature of golden/lang_kernels.py compiled, launched on the
device through `kern[grid, block](...)` and compared with NumPy on fresh random inputs
(outputs are poisoned first, never zeros). Also layouts, aliasing arguments, foreign
(CuPy) arrays, launch keywords and the cache."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))

import lang_kernels  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True, scope="module")
def _primary_context():
    """Make device 0's primary context current: an earlier test module that released a
    primary context it had made current leaves the thread pointing at a destroyed one."""
    from cupric import runtime as rt
    rt.Device(0).make_current()


def on_gpu(kern, grid, block, *args):
    from cupric import runtime as rt
    from cupric.runtime.memory import to_device
    dev = [to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    kern[grid, block](*dev)
    rt.synchronize()
    return [d.to_numpy() for a, d in zip(args, dev) if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("check", lang_kernels.CHECKS, ids=lambda c: c.__name__)
def test_on_gpu(check, rng):
    check(on_gpu, rng)


def test_aliasing_arguments_use_the_safe_variant(rng):
    from cupric import runtime as rt
    from cupric.runtime.memory import to_device
    x = rng.standard_normal(1000).astype(np.float32)
    d = to_device(x)
    lang_kernels.vecadd[8, 128](d, d, d)  # out aliases both inputs
    rt.synchronize()
    np.testing.assert_array_equal(d.to_numpy(), x + x)
    variants = next(iter(lang_kernels.vecadd._specs.values()))[1]
    assert variants[(False, True)]._prepared is not None  # the may-alias variant ran


def test_strided_views(rng):
    from cupric import runtime as rt
    from cupric.runtime.memory import to_device
    a = rng.standard_normal((24, 40)).astype(np.float32)
    b = rng.standard_normal((40, 24)).astype(np.float32)
    da, db = to_device(a), to_device(b.T.copy())  # db holds b.T, C-contiguous
    dbt = db.transpose()                                 # an F-ordered view of b
    out = to_device(np.full((24, 40), np.nan, np.float32))
    lang_kernels.matrix_2d[(3, 5), (8, 8)](da, dbt, out)
    rt.synchronize()
    expect = a * b.T
    idx = np.arange(24)
    expect[idx, idx] = 40
    np.testing.assert_allclose(out.to_numpy(), expect, rtol=1e-6)


def test_cupy_arrays_and_launch_keywords(rng):
    cp = pytest.importorskip("cupy")
    from cupric import runtime as rt
    from cupric.runtime.memory import to_device
    x = cp.asarray(rng.standard_normal(513).astype(np.float32))
    y = cp.asarray(rng.standard_normal(513).astype(np.float32))
    out = cp.full(513, cp.nan, dtype=cp.float32)
    stream = rt.current_device().create_stream() if hasattr(rt.current_device(),
                                                            "create_stream") else None
    lang_kernels.saxpy.launch(np.float32(3.0), x, y, out, grid=5, block=128, stream=stream,
                              shared_bytes=0)
    rt.synchronize()
    # The GPU contracts a*x + y into one FMA (one rounding instead of two): near a
    # cancellation the relative error can pass 1e-6 while the absolute one stays ~1 ulp.
    np.testing.assert_allclose(cp.asnumpy(out), 3 * cp.asnumpy(x) + cp.asnumpy(y), rtol=1e-6,
                               atol=1e-6)


def test_python_scalars_convert_to_annotated_types(rng):
    x = rng.standard_normal(64).astype(np.float32)
    y = rng.standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    got = on_gpu(lang_kernels.saxpy, 1, 64, 2.5, x, y, out)[2]  # Python float -> f32
    # a*x + y contracts to one FMA on the GPU: near a cancellation only the absolute error
    # stays at float32 rounding.
    np.testing.assert_allclose(got, np.float32(2.5) * x + y, rtol=1e-6, atol=1e-6)
