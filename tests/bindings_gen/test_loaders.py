"""The low-level loader modules: lazy loading, status checks, missing libraries, cuRAND."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from cupric.bindings_gen.binding import Binding
from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError

LOADERS = {
    "cublas": ("cupric.cublas.lib", "CublasError", 7, "CUBLAS_STATUS_INVALID_VALUE"),
    "cublaslt": ("cupric.cublas.lt", "CublasLtError", 7, "CUBLAS_STATUS_INVALID_VALUE"),
    "curand": ("cupric.curand.lib", "CurandError", 104, "CURAND_STATUS_OUT_OF_RANGE"),
    "cudnn": ("cupric.cudnn.lib", "CudnnError", 2000, "CUDNN_STATUS_BAD_PARAM"),
    "nccl": ("cupric.nccl.lib", "NcclError", 4, "ncclInvalidArgument"),
}


def _loader(generated, name):
    import importlib

    generated.require(name)
    return importlib.import_module(LOADERS[name][0])


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_check_raises_typed_errors(generated, name):
    module = _loader(generated, name)
    _, error_name, code, status_name = LOADERS[name]
    assert module.is_available()
    assert module.check(0) is None
    with pytest.raises(getattr(module, error_name)) as info:
        module.check(code)
    error = info.value
    assert isinstance(error, LibraryStatusError)
    assert (error.code, error.name) == (code, status_name)
    assert error.description and error.description != status_name or name == "cudnn"
    assert status_name in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert (again.code, again.name, again.description) == (error.code, error.name, error.description)


def test_unknown_status_values_are_named(generated):
    module = _loader(generated, "curand")
    with pytest.raises(module.CurandError) as info:
        module.check(12345)
    assert info.value.name == "UNKNOWN(12345)"


def test_missing_shared_library_names_the_package(generated, monkeypatch):
    generated.require("curand")
    import cupric.bindings_gen.binding as binding_module

    def not_found(name, header_dir):
        raise OSError(f"lib{name} is nowhere")

    monkeypatch.setattr(binding_module, "find_shared_library", not_found)
    binding = Binding("curand", "cuRAND")
    assert not binding.is_available()
    assert "pip install nvidia-curand" in binding.unavailable_reason
    with pytest.raises(ImportError, match="pip install nvidia-curand") as info:
        binding.load()
    assert isinstance(info.value, LibraryNotFoundError)
    assert info.value.package == "nvidia-curand"


def test_missing_headers_name_the_package(monkeypatch):
    import cupric.bindings_gen.headers as headers

    monkeypatch.setattr(headers, "_pathfinder_dir", lambda key: None)
    monkeypatch.setattr(headers, "_wheel_dirs", lambda header: [])
    monkeypatch.setattr(headers, "_environment_dirs", lambda: [])
    binding = Binding("nccl", "NCCL")
    with pytest.raises(LibraryNotFoundError, match="pip install nvidia-nccl-cu13"):
        binding.load()


def test_unexported_function_is_a_clear_attribute_error(generated):
    module = _loader(generated, "curand")
    with pytest.raises(AttributeError, match="not exported"):
        module.curandGenerateBinomial
    with pytest.raises(AttributeError):
        module.curandNoSuchFunction


def _host_generator(lib, seed):
    generator = lib.ffi.new("curandGenerator_t *")
    lib.check(lib.curandCreateGeneratorHost(generator, lib.CURAND_RNG_PSEUDO_PHILOX4_32_10))
    lib.check(lib.curandSetPseudoRandomGeneratorSeed(generator[0], seed))
    return generator[0]


def _uniform(lib, seed, count):
    generator = _host_generator(lib, seed)
    try:
        out = np.full(count, -1.0, dtype=np.float32)  # poisoned: every value must be written
        pointer = lib.ffi.cast("float *", out.ctypes.data)
        lib.check(lib.curandGenerateUniform(generator, pointer, count))
        return out
    finally:
        lib.check(lib.curandDestroyGenerator(generator))


def test_curand_host_generator_produces_numbers(generated, rng):
    lib = _loader(generated, "curand")
    seed = int(rng.integers(1, 2**62))
    values = _uniform(lib, seed, 100_000)
    assert np.all((values > 0.0) & (values <= 1.0))
    assert abs(values.mean() - 0.5) < 0.01
    assert abs(values.var() - 1 / 12) < 0.005
    assert np.array_equal(values, _uniform(lib, seed, 100_000))  # seeded: reproducible
    assert not np.array_equal(values, _uniform(lib, seed + 1, 100_000))


def test_curand_host_normal_distribution(generated, rng):
    lib = _loader(generated, "curand")
    generator = _host_generator(lib, int(rng.integers(1, 2**62)))
    try:
        out = np.full(200_000, np.nan, dtype=np.float64)
        lib.check(lib.curandGenerateNormalDouble(
            generator, lib.ffi.cast("double *", out.ctypes.data), out.size, 3.0, 2.0))
    finally:
        lib.check(lib.curandDestroyGenerator(generator))
    assert np.isfinite(out).all()
    assert abs(out.mean() - 3.0) < 0.03 and abs(out.std() - 2.0) < 0.03


def test_package_level_is_available(generated):
    import cupric.cublas
    import cupric.cudnn
    import cupric.curand
    import cupric.nccl

    for name in ("cublas", "cudnn", "curand", "nccl"):
        generated.require(name)
    assert cupric.cublas.is_available() and cupric.cudnn.is_available()
    assert cupric.curand.is_available() and cupric.nccl.is_available()
    assert cupric.cublas.lt.cublasLtGetVersion() > 0
