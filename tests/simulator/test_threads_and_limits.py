"""The simulator under threads and at the device's limits: concurrent launches from many
threads all take the generator engine (a rewrite in progress in one thread is waited for,
never mistaken for recursion) and leave the process-wide thread stack size alone; and a
launch configuration is checked against an sm_90 device's limits by the same function
that explains a refused GPU launch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import cupric
from cupric.device import grid, shared, syncthreads, threadIdx
from cupric.runtime.launch import SM90_LIMITS, LaunchConfigError, _UNCHECKED, check_config
from cupric.simulator import _launch
from cupric.types import Array, f32


def _fresh_kernel():
    # A new function object each time: every thread's first launch rewrites it.
    @cupric.kernel
    def reverse(x: Array[f32, 1], out: Array[f32, 1]):
        tile = shared.array(64, f32)
        t = threadIdx.x
        tile[t] = x[grid(1)]
        syncthreads()
        out[grid(1)] = tile[63 - t]
    return reverse


def test_concurrent_launches_use_generators_and_keep_the_stack_size(monkeypatch):
    def no_os_threads(*args, **kwargs):
        raise AssertionError("a launch fell back to one OS thread per simulated thread")
    monkeypatch.setattr(_launch, "_run_os_threads", no_os_threads)
    before = threading.stack_size()
    kernels = [_fresh_kernel() for _ in range(4)]
    errors, results = [], {}
    start = threading.Barrier(16)

    def work(k):
        try:
            x = np.arange(64, dtype=np.float32) + k
            out = np.full(64, np.nan, np.float32)
            start.wait()
            kernels[k % 4].simulate[1, 64](x, out)
            results[k] = (x, out)
        except BaseException as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert threading.stack_size() == before
    for x, out in results.values():
        assert np.array_equal(out, x[::-1])
    assert len(results) == 16


def test_the_simulated_limits_are_an_sm90_devices():
    assert SM90_LIMITS.max_threads_per_block == 1024
    assert SM90_LIMITS.max_block_dims == (1024, 1024, 64)
    assert SM90_LIMITS.max_grid_dims == (2**31 - 1, 65535, 65535)
    assert SM90_LIMITS.max_shared_memory_per_block == 48 * 1024
    assert SM90_LIMITS.max_shared_memory_per_block_optin == 227 * 1024


@pytest.mark.parametrize("grid_,block,shared,words", [
    (1, 1024, 0, None), ((2**31 - 1, 65535, 65535), 1, 0, None), (1, (1, 1, 64), 227 * 1024, None),
    (1, 1025, 0, "1025 threads"), ((1, 65536), 1, 0, "grid.y = 65536"),
    (1, (2, 1, 65), 0, "block.z = 65"), (1, 1, 227 * 1024 + 1, "232449 bytes"),
    (0, 1, 0, "grid.x = 0"), (1, -3, 0, "block.x = -3"), (1, 1, -1, "non-negative"),
    (2**32, 1, 0, "is outside"), ((1, 2, 3, 4), 1, 0, "1 to 3 dimensions"),
    (1.0, 1, 0, "must be an int or a tuple"), (1, True, 0, "must be ints"),
])
def test_check_config_at_and_past_each_limit(grid_, block, shared, words):
    if words is None:
        check_config("k", grid_, block, shared)
        return
    with pytest.raises(LaunchConfigError, match=words) as info:
        check_config("k", grid_, block, shared)
    assert isinstance(info.value, ValueError)


def test_the_shape_only_check_of_the_general_launch_path():
    """PreparedLaunch.launch checks the shape (not the limits, which the driver checks)
    of what it hands the driver's unsigned parameters: a negative shared_bytes is a
    LaunchConfigError, not an OverflowError from the C call."""
    with pytest.raises(LaunchConfigError, match="non-negative"):
        check_config("k", (1, 1, 1), (1, 1, 1), -4, _UNCHECKED)
    assert check_config("k", (2**31, 1, 1), (4096, 1, 1), 2**20, _UNCHECKED)[2] == 2**20


def test_simulated_launches_refuse_what_a_gpu_refuses():
    k = _fresh_kernel()
    x = np.zeros(64, np.float32)
    with pytest.raises(LaunchConfigError, match="block.z = 65"):
        k.simulate[1, (1, 1, 65)](x, x)
    with pytest.raises(LaunchConfigError, match="grid.x = -1"):
        k.simulate[-1, 64](x, x)
    with pytest.raises(LaunchConfigError, match="dynamic shared memory"):
        k.simulate[1, 64, None, 300 * 1024](x, x)
