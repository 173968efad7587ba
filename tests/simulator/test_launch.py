"""How the simulator takes arguments and kernels, and what it leaves behind."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import OutsideKernelError, grid, threadIdx
from cupric.simulator import KernelIndexError


def add_scalar(x, k, out):
    i = grid(1)
    if i < x.size:
        out[i] = x[i] + k
        assert type(k) is np.int64 or type(k) is np.float64


def test_numpy_arrays_are_modified_in_place_and_scalars_typed(rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = np.full(100, np.nan, np.float32)
    sim.launch(add_scalar, 4, 32, (x, 3, out))
    np.testing.assert_array_equal(out, x + np.float32(3))
    sim.launch(add_scalar, 4, 32, (x, 0.5, out))
    np.testing.assert_allclose(out, x + 0.5, rtol=1e-6)


class FakeDeviceBuffer:
    """What the simulator needs of a runtime DeviceBuffer: to_numpy and copy_from."""

    def __init__(self, host):
        self._data = host.copy()
        self.copies_back = 0

    def to_numpy(self):
        return self._data.copy()

    def copy_from(self, host):
        self.copies_back += 1
        self._data[...] = host


def test_device_buffers_are_copied_in_and_back(rng):
    x = rng.integers(0, 100, 64).astype(np.int64)
    buf = FakeDeviceBuffer(np.full(64, -1, np.int64))
    sim.launch(add_scalar, 2, 32, (x, 1, buf))
    assert buf.copies_back == 1
    np.testing.assert_array_equal(buf._data, x + 1)


def test_kernel_objects_with_py_func_and_the_bracket_launcher(rng):
    class Compiled:  # what a compiled kernel exposes
        py_func = staticmethod(add_scalar)

    x = rng.standard_normal(10)
    out = np.full(10, np.nan)
    sim.launch(Compiled(), 1, 16, (x, 2.0, out))
    np.testing.assert_array_equal(out, x + 2)
    out[:] = np.nan
    sim.kernel(add_scalar)[1, 16](x, 1.0, out)
    np.testing.assert_array_equal(out, x + 1)
    with pytest.raises(TypeError, match="configuration"):
        sim.kernel(add_scalar)(x, 1.0, out)


def returns_value(out):
    return 1


def test_a_kernel_returning_a_value_is_an_error():
    with pytest.raises(TypeError, match="returned a value"):
        sim.launch(returns_value, 1, 1, (np.zeros(1),))


def negative_index(out):
    out[threadIdx.x - 2] = 1.0


def test_negative_index_is_out_of_bounds_not_wrapped():
    out = np.zeros(8)
    with pytest.raises(KernelIndexError) as info:
        sim.launch(negative_index, 1, 8, (out,))
    err = info.value
    assert err.array == "out" and err.index == -2 and err.shape == (8,)
    assert err.filename == __file__ and err.line == negative_index.__code__.co_firstlineno + 1
    assert err.thread == (0, 0, 0) and err.block == (0, 0, 0)
    assert "test_launch.py" in str(err) and "'out'" in str(err)


def test_state_is_removed_after_a_launch_even_a_failed_one():
    with pytest.raises(KernelIndexError):
        sim.launch(negative_index, 1, 8, (np.zeros(8),))
    with pytest.raises(OutsideKernelError):
        threadIdx.x


def test_mode_is_validated():
    with pytest.raises(ValueError, match="mode"):
        sim.launch(returns_value, 1, 1, (np.zeros(1),), mode="fast")


def test_notice_no_gpu_prints_once(capsys, monkeypatch):
    monkeypatch.setattr(sim, "_noticed", False)
    sim.notice_no_gpu("no libcuda.so")
    sim.notice_no_gpu()
    err = capsys.readouterr().err
    assert err.count("CPU simulator") == 1 and "no libcuda.so" in err


def test_requested_reads_the_environment(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    assert sim.requested()
    monkeypatch.setenv("CUPRIC_SIMULATOR", "0")
    assert not sim.requested()
