import numpy as np
import pytest

from cupric import types as t


def test_integer_casts_wrap_at_width():
    assert t.i32(2**31) == -(2**31)
    assert t.u8(-1) == 255
    assert t.u64(-1) == 2**64 - 1
    assert t.i8(200) == -56
    assert t.i64(-1.7) == -1  # truncation toward zero
    assert t.i32(3.9) == 3


def test_float_casts_round_to_type():
    assert t.f32(0.1) == np.float32(0.1)
    assert t.f16(1.0 / 3).dtype == np.float16


def test_array_type_and_typeof():
    assert t.Array[t.f32, 2] == t.ArrayType(t.f32, 2, "A")
    assert t.Array[t.f32, 2, "C"] != t.Array[t.f32, 2, "F"]
    a = np.zeros((3, 4), np.float32)
    assert t.typeof(a) == t.Array[t.f32, 2, "C"]
    assert t.typeof(a.T) == t.Array[t.f32, 2, "F"]
    assert t.typeof(a[:, ::2]) == t.Array[t.f32, 2, "A"]
    assert t.typeof(3) is t.i64 and t.typeof(2.0) is t.f64 and t.typeof(True) is t.bool_
    with pytest.raises(TypeError, match="no cupric scalar type"):
        t.typeof(np.zeros(2, np.complex64))
    with pytest.raises(TypeError):
        t.Array[t.f32, 9]
