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


import cupric.device as cd  # noqa: E402  (the scan must follow attribute chains)
from cupric.simulator._scan import needs  # noqa: E402


class DeviceFn:
    """Like the compiler's DeviceFunction: callable, with the plain function as py_func."""

    def __init__(self, f):
        self.py_func = f

    def __call__(self, *args):
        return self.py_func(*args)


@DeviceFn
def helper_with_barrier(tile, t):
    cd.syncthreads()
    return tile[t]


def uses_helper(out):
    tile = cd.shared.array(32, np.float64)
    tile[cd.threadIdx.x] = cd.threadIdx.x
    out[cd.threadIdx.x] = helper_with_barrier(tile, 31 - cd.threadIdx.x)


def uses_warp_in_lambda(out):
    f = lambda v: cd.warp.reduce_add(cd.FULL_MASK, v)  # noqa: E731
    out[0] = f(1)


def plain(out):
    out[cd.threadIdx.x] = np.float64(cd.blockIdx.x)


def test_the_scan_follows_device_functions_attributes_and_lambdas():
    assert needs(uses_helper) == {"block"}
    assert needs(uses_warp_in_lambda) == {"warp"}
    assert needs(plain) == frozenset()
    out = np.full(32, np.nan)
    sim.launch(uses_helper, 1, 32, (out,))
    np.testing.assert_array_equal(out, np.arange(32)[::-1])


def calls_what_it_is_given(fn, out):
    out[cd.threadIdx.x] = fn(cd.FULL_MASK, cd.threadIdx.x, 1)


def test_intrinsics_passed_as_arguments_are_scanned_too():
    out = np.full(32, -1, np.int64)
    sim.launch(calls_what_it_is_given, 1, 32, (cd.warp.shfl_xor, out))
    np.testing.assert_array_equal(out, np.arange(32) ^ 1)


def shuffles_a_tuple(out):
    cd.warp.shfl_down(cd.FULL_MASK, (1, 2), 1)


def test_shuffles_refuse_values_a_gpu_cannot_move():
    with pytest.raises(TypeError, match="scalars"):
        sim.launch(shuffles_a_tuple, 1, 32, (np.zeros(1),))


def test_arguments_a_compiled_launch_would_refuse_are_refused():
    with pytest.raises(TypeError, match="argument 'x'.*complex"):
        sim.launch(add_scalar, 1, 1, (np.zeros(2, np.complex64), 1, np.zeros(2)))
    with pytest.raises(OverflowError, match="argument 'k'"):
        sim.launch(add_scalar, 1, 1, (np.zeros(2), 2**70, np.zeros(2)))
