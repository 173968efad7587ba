"""Helpers of the cupric.kernels tests: poisoned outputs, random inputs, and skipping
GPU tests whose intrinsics the compiler cannot lower yet."""

from __future__ import annotations

import numpy as np
import pytest

#: Intrinsics each kernel module needs from the compiler's lowering tables.
NEEDS = {
    "elementwise": ("grid", "gridsize"),
    "image": ("grid", "gridsize"),
    "reduce": ("shared.array", "syncthreads", "warp.shfl_xor", "atomic.add", "threadfence"),
    "scan": ("shared.array", "syncthreads", "warp.shfl_up", "warp.shfl_xor", "warp.any",
             "warp.ballot", "atomic.add", "atomic.load", "atomic.store"),
    "transpose": ("shared.array", "syncthreads"),
    "gemm": ("shared.array", "local.array", "syncthreads"),
    "sort": ("shared.array", "local.array", "syncthreads", "warp.match_any",
             "warp.shfl_up", "bits.popc", "atomic.add"),
    "histogram": ("shared.array", "syncthreads", "atomic.add"),
}


def missing_lowering(module: str) -> list[str]:
    """The intrinsics `module`'s kernels use that have no compiler lowering rule."""
    from cupric.compiler.lowering.registry import rule_for
    return [name for name in NEEDS[module] if rule_for(name) is None]


def require_lowering(module: str) -> None:
    """Skip (with the precise reason) when `module`'s kernels cannot compile yet."""
    missing = missing_lowering(module)
    if missing:
        pytest.skip(f"cupric.kernels.{module} needs compiler lowering of "
                    f"{', '.join(missing)} (cupric/compiler/lowering has no rule yet); "
                    f"it runs on the simulator only")


def poison(shape, dtype) -> np.ndarray:
    """A host array of garbage that no correct kernel result equals: NaN for floats,
    0xA5 bytes for integers."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, 0xA5, np.uint8).view(dtype) if dtype.itemsize == 1 else \
        np.frombuffer(b"\xa5" * (int(np.prod(shape, dtype=np.int64)) * dtype.itemsize),
                      dtype).reshape(shape).copy()


def random_array(rng, shape, dtype, *, low=None, high=None) -> np.ndarray:
    """Fresh random values of `dtype` (integers over a range that keeps sums exact)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    info = np.iinfo(dtype)
    lo = max(info.min, -1000) if low is None else low
    hi = min(info.max, 1000) if high is None else high
    return rng.integers(lo, hi, shape, dtype=dtype, endpoint=True)


def mandelbrot_reference(width, height, center, scale, max_iter):
    """What `cupric.kernels.image.mandelbrot` computes, with NumPy complex numbers."""
    dx = scale / width
    x = center[0] - dx * (width - 1) / 2 + dx * np.arange(width)
    y = center[1] + dx * (height - 1) / 2 - dx * np.arange(height)
    c = x[None, :] + 1j * y[:, None]
    z = np.zeros_like(c)
    k = np.full(c.shape, max_iter)
    for it in range(max_iter):
        alive = k == max_iter
        z[alive] = z[alive] ** 2 + c[alive]
        k[alive & (np.abs(z) > 2)] = it + 1  # escaped after it + 1 updates
    out = np.where(k >= max_iter, 0, 1 + (254 * k) // max_iter)
    return out.astype(np.uint8)


def sorted_reference(x, descending):
    """NumPy's sort; descending: reversed, NaNs (last ascending) first."""
    ref = np.sort(x)
    if not descending:
        return ref
    nan = np.isnan(ref) if ref.dtype.kind == "f" else np.zeros(ref.shape, bool)
    return np.concatenate([ref[nan], ref[~nan][::-1]])
