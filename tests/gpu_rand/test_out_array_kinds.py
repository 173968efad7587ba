"""gpu_rand fills into arrays of other libraries: `out=` is read by the intake layer.

PyTorch names its element types ``torch.float32``, which NumPy cannot interpret; the
Generator takes the element type the intake layer reads for any array kind. CPU lane: a
fake ``torch`` module whose Tensor the intake's PyTorch adapter reads, and a plain CUDA
Array Interface producer, each over host memory that the device kernels fill on the
simulator. GPU lane: real PyTorch tensors and CuPy arrays against the host half.
"""

from __future__ import annotations

import numpy as np
import pytest

from cupric.gpu_rand import Generator
from cupric.gpu_rand.backends import CudaBackend, SimulatorBackend
from cupric.runtime import intake


class _CaiArray:
    """A CUDA Array Interface producer with a dtype attribute NumPy cannot read."""

    def __init__(self, host):
        self.host, self.shape, self.dtype = host, host.shape, object()

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str, "strides": None,
                "data": (self.host.ctypes.data, False), "version": 3, "stream": None}


class _SimulatedDevice(CudaBackend):
    """The CUDA backend's reading of `out` (the intake layer, any array kind), with the
    device kernels run by the simulator over the host memory the pointer names."""

    def __init__(self, memory):
        super().__init__()
        self.memory = {a.ctypes.data: a for a in memory}
        self.sim = SimulatorBackend()
        self.read = []

    def empty(self, shape, dtype):
        return self.sim.empty(shape, dtype)

    def to_device(self, host):
        return self.sim.to_device(host)

    def to_host(self, array):
        return self.sim.to_host(array)

    def flat(self, out):
        info = intake.array_info(out, name="out", writable=True)
        self.read.append(info.kind)
        host = self.memory[info.ptr]
        assert host.dtype == info.dtype and info.is_c_contiguous
        return host.reshape(-1)

    def launch(self, kind, algorithm, n_threads, args):
        self.sim.launch(kind, algorithm, n_threads, args)


def _poisoned(n, dtype):
    dtype = np.dtype(dtype)
    return np.full(n, np.nan if dtype.kind == "f" else np.iinfo(dtype).max, dtype)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_torch_tensor_out_takes_the_intake_dtype(fake_torch):
    seed = int(np.random.default_rng().integers(2**62))
    host, dev = Generator(seed, streams=32), Generator(seed, streams=32)
    memory = [_poisoned(101, np.float32), _poisoned(40, np.float64),
              _poisoned(33, np.int64), _poisoned(17, np.uint32)]
    backend = _SimulatedDevice(memory)
    f32, f64, i64, u32 = (fake_torch.Tensor(a, str(a.dtype)) for a in memory)
    with pytest.raises(TypeError):  # what the Generator used to hand NumPy
        np.dtype(f32.dtype)

    assert dev.random(out=f32, backend=backend) is f32
    assert np.array_equal(memory[0], host.random(101, dtype=np.float32))
    dev.uniform(-2.0, 5.0, out=f64, backend=backend)
    assert np.array_equal(memory[1], host.uniform(-2.0, 5.0, 40))
    dev.integers(-9, 10**6, out=i64, backend=backend)
    assert np.array_equal(memory[2], host.integers(-9, 10**6, 33))
    dev.bits(out=u32, backend=backend)
    assert np.array_equal(memory[3], host.bits(17, dtype=np.uint32))
    assert backend.read == ["torch"] * 4


def test_torch_bfloat16_out_is_refused_before_any_launch(fake_torch):
    memory = np.zeros(8, np.uint16)
    backend = _SimulatedDevice([memory])
    out = fake_torch.Tensor(memory, "bfloat16")
    with pytest.raises(TypeError, match="float32 or float64"):
        Generator(1).random(out=out, backend=backend)
    with pytest.raises(TypeError, match="integer type"):
        Generator(1).integers(0, 5, out=out, backend=backend)
    assert backend.read == [] and not memory.any()


def test_cai_array_out_with_an_unreadable_dtype_attribute():
    seed = int(np.random.default_rng().integers(2**62))
    memory = _poisoned(64, np.float32)
    backend = _SimulatedDevice([memory])
    out = _CaiArray(memory)
    Generator(seed, streams=8).standard_normal(out=out, backend=backend)
    np.testing.assert_allclose(
        memory, Generator(seed, streams=8).standard_normal(64, dtype=np.float32),
        rtol=1e-5, atol=1e-5)
    assert backend.read == [intake.CAI]


def test_size_must_still_match_out(fake_torch):
    memory = _poisoned(12, np.float32)
    with pytest.raises(ValueError, match="does not match"):
        Generator(3).random(size=13, out=fake_torch.Tensor(memory, "float32"),
                            backend=_SimulatedDevice([memory]))


# -- GPU lane ------------------------------------------------------------------------------------

def _device_arrays(library):
    if library == "torch":
        torch = pytest.importorskip("torch")
        dtypes = {np.float32: torch.float32, np.float64: torch.float64,
                  np.int64: torch.int64, np.int32: torch.int32,
                  np.uint32: getattr(torch, "uint32", None)}

        def make(host):
            """The tensor, or None for a dtype this PyTorch cannot export."""
            dtype = dtypes[host.dtype.type]
            if dtype is None:
                return None
            t = torch.tensor(host.view(np.int32) if host.dtype == np.uint32 else host,
                             device="cuda").view(dtype)
            try:
                intake.read(t)
            except TypeError:
                return None
            return t

        def back(array):  # PyTorch's NumPy conversion lacks uint32 in some versions
            if array.dtype == dtypes[np.uint32]:
                return array.view(torch.int32).cpu().numpy().view(np.uint32)
            return array.cpu().numpy()
        return make, back
    cupy = pytest.importorskip("cupy")
    return cupy.asarray, cupy.asnumpy


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_fills_into_other_libraries_arrays_equal_the_host_half(library):
    make, back = _device_arrays(library)
    seed = int(np.random.default_rng().integers(2**62))
    host, dev = Generator(seed, streams=500), Generator(seed, streams=500)
    out = make(_poisoned(10_007, np.float32))
    assert dev.random(out=out) is out
    assert np.array_equal(back(out), host.random(10_007, dtype=np.float32))
    out = make(_poisoned(3_001, np.float64))
    dev.normal(1.5, 2.0, out=out)
    np.testing.assert_allclose(back(out), host.normal(1.5, 2.0, 3_001), rtol=1e-13,
                               atol=1e-13)
    out = make(_poisoned(2_000, np.int64))
    dev.integers(-50, 7_000_000_000, out=out)
    assert np.array_equal(back(out), host.integers(-50, 7_000_000_000, 2_000))
    out = make(_poisoned(1_500, np.int32))
    dev.integers(-5, 5, out=out)
    assert np.array_equal(back(out), host.integers(-5, 5, 1_500, dtype=np.int32))
    out = make(_poisoned(999, np.uint32))
    if out is not None:  # PyTorch before 2.3 has no uint32 to export
        dev.bits(out=out)
        assert np.array_equal(back(out), host.bits(999, dtype=np.uint32))


@pytest.mark.gpu
def test_torch_bfloat16_out_is_refused_on_the_gpu():
    torch = pytest.importorskip("torch")
    out = torch.zeros(16, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="float32 or float64"):
        Generator(5).random(out=out)
    assert not out.any().item()
