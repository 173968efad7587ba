"""Vector types (float3, int2, ...) and tuples as values in simulated kernels."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import float3, float4, grid, int2, uint2, vector, VECTOR_TYPES


def shade(pos, light, out):
    i = grid(1)
    if i < pos.shape[0]:
        p = float3(pos[i, 0], pos[i, 1], pos[i, 2])
        n = vector.normalize(p)
        l3 = vector.normalize(float3(light[0], light[1], light[2]) - p)
        c = vector.cross(n, l3)
        out[i, 0] = vector.dot(n, l3)
        out[i, 1] = vector.length(c)
        m = vector.max(p * 2.0, float3(0.0)) + 1
        out[i, 2] = m.x + m.y + m.z


def test_float3_arithmetic_and_geometry(rng):
    pos = rng.standard_normal((50, 3)).astype(np.float32)
    light = np.array([3, 4, 5], np.float32)
    out = np.full((50, 3), np.nan, np.float32)
    sim.launch(shade, 2, 32, (pos, light, out))
    n = pos / np.linalg.norm(pos, axis=1, keepdims=True)
    d = light - pos
    l3 = d / np.linalg.norm(d, axis=1, keepdims=True)
    np.testing.assert_allclose(out[:, 0], (n * l3).sum(1), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out[:, 1], np.linalg.norm(np.cross(n, l3), axis=1),
                               rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out[:, 2], (np.maximum(2 * pos, 0) + 1).sum(1), rtol=1e-6)


def int_vectors(out):
    a = int2(2**31 - 1, -7)
    b = a + 1
    out[0] = b.x
    out[1] = (a // 2).y
    out[2] = (a % 3).y
    out[3] = (uint2(1, 2) - 2).x
    out[4] = (int2(6, 3) & int2(3, 1)).x
    out[5] = (-int2(5, 0)).x


def test_int_vectors_wrap_and_floor():
    out = np.zeros(6, np.int64)
    sim.launch(int_vectors, 1, 1, (out,))
    np.testing.assert_array_equal(out, [-2**31, -4, 2, 2**32 - 1, 2, -5])


def test_vector_types_are_immutable_typed_tuples():
    v = float4(1, 2, 3, 4)
    assert all(type(c) is np.float32 for c in v) and v.w == 4
    assert v * 2 == float4(2, 4, 6, 8) and 1 - v == float4(0, -1, -2, -3)
    with pytest.raises(AttributeError):
        v.x = 3
    with pytest.raises(TypeError, match="takes 4"):
        float4(1, 2)
    with pytest.raises(TypeError, match="do not match"):
        float3(1, 2, 3) + float4(1, 2, 3, 4)
    assert set(VECTOR_TYPES) >= {"float2", "float3", "float4", "int2", "int4", "double3",
                                 "uint4", "long2", "ulong3", "half2"}
    assert VECTOR_TYPES["double3"].dtype.itemsize == 24


def tuples(pairs, out):
    i = grid(1)
    a, b = pairs[i, 0], pairs[i, 1]
    t = (a + b, a * b)
    lo, hi = min(t), max(t)
    out[i, 0], out[i, 1] = lo, hi


def test_tuples_pack_and_unpack(rng):
    pairs = rng.integers(-9, 9, (32, 2))
    out = np.zeros((32, 2), np.int64)
    sim.launch(tuples, 1, 32, (pairs, out))
    s, p = pairs.sum(1), pairs.prod(1)
    np.testing.assert_array_equal(out, np.stack([np.minimum(s, p), np.maximum(s, p)], 1))
