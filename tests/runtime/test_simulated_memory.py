"""cupric.runtime's allocations without a driver: host-memory SimulatedBuffers that
kernels (falling back to the simulator) read and write, with the DeviceBuffer methods."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric import runtime as rt
from cupric.device import grid
from cupric.runtime.simulated import SimulatedBuffer
from cupric.types import Array, f32

pytestmark = pytest.mark.skipif(rt.driver_available(),
                                reason="a CUDA driver is here: allocations are real device "
                                       "memory, not the simulator's stand-ins")


@cupric.kernel
def _scale(a: f32, x: Array[f32, 1], out: Array[f32, 1]):
    i = grid(1)
    if i < len(out):
        out[i] = a * x[i]


def test_allocations_are_simulated_buffers():
    host = np.random.default_rng(0).random(10).astype(np.float32)
    x = rt.to_device(host)
    assert isinstance(x, SimulatedBuffer) and x.dtype == np.float32
    host[0] = -1                                 # a copy: the source can change after
    assert x.to_numpy()[0] != -1 and type(x.to_numpy()) is np.ndarray
    assert isinstance(rt.zeros((2, 3), np.int64), SimulatedBuffer)
    assert not rt.zeros((2, 3), np.int64).to_numpy().any()
    assert np.isnan(rt.empty(4, np.float32).to_numpy()).all()     # poisoned, not zero
    assert (rt.empty(4, np.uint16).to_numpy() == 0xFFFF).all()
    like = rt.zeros_like(x)
    assert like.shape == x.shape and not like.to_numpy().any()
    assert rt.to_device(x).to_numpy().tolist() == x.to_numpy().tolist()
    assert float(rt.device_box(2.5).to_numpy()) == 2.5


def test_methods_and_views():
    x = rt.zeros((3, 4), np.float32)
    x.fill(2)
    x[1].fill(5)                                 # a view shares the memory
    assert x.to_numpy()[:, 0].tolist() == [2, 5, 2]
    assert x.T.shape == (4, 3) and x.reshape(12).to_numpy()[4] == 5
    x.copy_from(np.ones((3, 4), np.float32))
    out = np.empty((3, 4), np.float32)
    x.copy_to(out)
    assert out.sum() == 12
    with pytest.raises(ValueError, match="copy_from"):
        x.copy_from(np.ones(5, np.float32))
    x.zero()
    assert not x.to_numpy().any()


def test_closed_buffer_refuses_use():
    with rt.zeros(3, np.float32) as x:
        pass
    assert x.closed
    with pytest.raises(rt.ClosedError):
        x.to_numpy()
    with pytest.raises(rt.ClosedError):
        x.copy_from(np.zeros(3, np.float32))


def test_kernel_runs_on_them(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    x = rt.to_device(np.arange(300, dtype=np.float32))
    out = rt.empty(300, np.float32)
    _scale[2, 256](3.0, x, out)
    np.testing.assert_array_equal(out.to_numpy(), 3 * np.arange(300, dtype=np.float32))
