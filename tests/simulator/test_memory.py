"""Shared memory (static and dynamic), local arrays and constant arrays in the simulator."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import (blockIdx, constant, grid, local, shared, syncthreads, threadIdx)
from cupric.types import f32, f64, i32, u8


def static_shared_is_per_block(out):
    tile = shared.array((4, 8), i32)
    t = threadIdx.x
    tile[t // 8, t % 8] = blockIdx.x * 100 + t
    syncthreads()
    out[blockIdx.x, t] = tile[(31 - t) // 8, (31 - t) % 8]


def test_static_shared_arrays_are_shared_within_a_block_only():
    out = np.full((3, 32), -1, np.int64)
    sim.launch(static_shared_is_per_block, 3, 32, (out,))
    expect = np.arange(3)[:, None] * 100 + np.arange(32)[::-1][None, :]
    np.testing.assert_array_equal(out, expect)


def two_arrays(out):
    a = shared.array(4, f64)
    b = shared.array(4, f64)
    t = threadIdx.x
    a[t] = t
    b[t] = 10.0 * t
    syncthreads()
    out[t] = a[3 - t] + b[t]


def test_each_declaration_site_is_its_own_array():
    out = np.full(4, np.nan)
    sim.launch(two_arrays, 1, 4, (out,))
    np.testing.assert_array_equal(out, [3, 12, 21, 30])


POINT = np.dtype([("x", np.float32), ("y", np.float32), ("tag", np.int32)])


def struct_shared(out):
    pts = shared.array(8, POINT)
    t = threadIdx.x
    pts[t]["x"] = t
    pts[t]["y"] = 2 * t
    pts[t]["tag"] = -t
    syncthreads()
    p = pts[7 - t]
    out[t] = p["x"] + p["y"] + p["tag"]


def test_shared_arrays_of_structs():
    out = np.full(8, np.nan, np.float32)
    sim.launch(struct_shared, 1, 8, (out,))
    np.testing.assert_array_equal(out, 2.0 * np.arange(8)[::-1])


def dynamic_views(x, out):
    floats = shared.dynamic(f32)
    raw = shared.dynamic(u8)
    tail = shared.dynamic(i32, 4 * 64, 16)
    t = threadIdx.x
    floats[t] = x[grid(1)]
    if t < 16:
        tail[t] = t * t
    syncthreads()
    out[grid(1), 0] = floats[63 - t]
    out[grid(1), 1] = raw[4 * t + 3]  # the high byte of floats[t], little-endian
    out[grid(1), 2] = tail[t % 16]
    out[grid(1), 3] = floats.size


def test_dynamic_shared_memory_typed_views(rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.full((128, 4), np.nan)
    sim.launch(dynamic_views, 2, 64, (x, out), shared_bytes=4 * 64 + 4 * 16)
    xb = x.reshape(2, 64)
    np.testing.assert_array_equal(out[:, 0], xb[:, ::-1].ravel())
    np.testing.assert_array_equal(out[:, 1], x.view(np.uint8)[3::4])
    np.testing.assert_array_equal(out[:, 2], np.tile((np.arange(64) % 16) ** 2, 2))
    assert (out[:, 3] == 80).all()


def misaligned(out):
    shared.dynamic(f64, 4)


def too_big(out):
    shared.dynamic(f64, 0, 100)


def too_much_static(out):
    shared.array(7000, f64)


@pytest.mark.parametrize("kernel, words", [
    (misaligned, "not a non-negative multiple"),
    (too_big, "does not fit"),
    (too_much_static, "49152-byte limit"),
])
def test_shared_memory_limits(kernel, words):
    with pytest.raises(sim.SimulatorError, match=words) as info:
        sim.launch(kernel, 1, 1, (np.zeros(1),), shared_bytes=64)
    assert info.value.filename == __file__


def uninitialised(out):
    s = shared.array(4, f32)
    loc = local.array(4, i32)
    out[0] = s[threadIdx.x]
    out[1] = loc[threadIdx.x]


def test_fresh_memory_is_poisoned_not_zero():
    out = np.zeros(2)
    sim.launch(uninitialised, 1, 1, (out,))
    assert np.isnan(out[0]) and out[1] == -1


def local_sort(x, out):
    i = grid(1)
    buf = local.array(8, f64)
    for k in range(8):
        buf[k] = x[i, k]
    for a in range(8):  # insertion sort, private to the thread
        for b in range(a, 0, -1):
            if buf[b] < buf[b - 1]:
                buf[b], buf[b - 1] = buf[b - 1], buf[b]
    for k in range(8):
        out[i, k] = buf[k]


def test_local_arrays_are_private_per_thread(rng):
    x = rng.standard_normal((64, 8))
    out = np.full_like(x, np.nan)
    sim.launch(local_sort, 2, 32, (x, out))
    np.testing.assert_array_equal(out, np.sort(x, axis=1))


def local_out_of_bounds(out):
    buf = local.array(3, f32)
    buf[3] = 1.0


def test_local_array_bounds_are_checked():
    with pytest.raises(sim.KernelIndexError, match="local.array"):
        sim.launch(local_out_of_bounds, 1, 1, (np.zeros(1),))


WEIGHTS = constant([0.25, 0.5, 0.25], dtype=np.float32)


def blur(x, out):
    i = grid(1)
    if 0 < i < x.size - 1:
        out[i] = WEIGHTS[0] * x[i - 1] + WEIGHTS[1] * x[i] + WEIGHTS[2] * x[i + 1]


def test_constant_arrays_are_read_only_module_data(rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = np.zeros(100, np.float32)
    sim.launch(blur, 4, 32, (x, out))
    expect = np.float32(0.25) * x[:-2] + np.float32(0.5) * x[1:-1] + np.float32(0.25) * x[2:]
    np.testing.assert_allclose(out[1:-1], expect, rtol=1e-6)
    assert not WEIGHTS.flags.writeable
    with pytest.raises(ValueError, match="constant bank"):
        constant(np.zeros(70_000, np.uint8))
