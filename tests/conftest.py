"""Test lanes: the CPU lane runs everywhere; tests marked `gpu` need a driver and a GPU.

Run the GPU lane with `pytest -m gpu` on a GPU machine. Without a GPU every `gpu` test is
skipped with the reason found here (no driver library, cuInit failing, no device).
"""

from __future__ import annotations

import functools
import pathlib
import sys

import pytest

# Tests import with --import-mode=importlib (so test files in different folders may share
# a name); the helper modules beside them (bindings_helpers, kernels_helpers, ...) are
# found through these folders, so helper module names must be unique across tests/.
for _folder in sorted(pathlib.Path(__file__).parent.iterdir()):
    if _folder.is_dir() and not _folder.name.startswith((".", "_")):
        sys.path.insert(0, str(_folder))


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (one probe per session)."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # cuda-python not installed
        return f"cuda-python is not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder.DynamicLibNotFoundError without a driver
        return f"no CUDA driver on this machine ({type(exc).__name__})"
    if err != driver.CUresult.CUDA_SUCCESS:
        return f"cuInit failed: {err.name}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return "no CUDA device visible"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            if reason is None:
                reason = gpu_unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU lane: {reason}"))


@pytest.fixture
def rng():
    """A fresh, logged random generator: inputs differ every run, failures are replayable."""
    import numpy as np

    seed = np.random.SeedSequence().entropy % (2**32)
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)
