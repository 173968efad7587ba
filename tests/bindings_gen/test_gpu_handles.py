"""GPU lane: a handle of each library created and destroyed through the generated
modules, and an OptiX device context through the driver's function table."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cupric.bindings_gen import cache, libraries

from bindings_helpers import WHEEL_LIBRARIES

pytestmark = pytest.mark.gpu


def _driver_check(result):
    from cuda.bindings import driver

    err = result[0] if isinstance(result, tuple) else result
    assert err == driver.CUresult.CUDA_SUCCESS, err
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


@pytest.fixture(scope="module")
def cuda_context():
    """The primary context of device 0, current on this thread."""
    from cuda.bindings import driver

    _driver_check(driver.cuInit(0))
    device = _driver_check(driver.cuDeviceGet(0))
    context = _driver_check(driver.cuDevicePrimaryCtxRetain(device))
    _driver_check(driver.cuCtxSetCurrent(context))
    yield context
    _driver_check(driver.cuDevicePrimaryCtxRelease(device))


def test_cublas_handle(cuda_context):
    from cupric.cublas import lib

    handle = lib.ffi.new("cublasHandle_t *")
    lib.check(lib.cublasCreate(handle))
    try:
        version = lib.ffi.new("int *")
        lib.check(lib.cublasGetVersion(handle[0], version))  # the _v2 alias
        assert version[0] // 10000 == lib.CUBLAS_VER_MAJOR
    finally:
        lib.check(lib.cublasDestroy(handle[0]))


def test_cublaslt_handle(cuda_context):
    from cupric.cublas import lt

    handle = lt.ffi.new("cublasLtHandle_t *")
    lt.check(lt.cublasLtCreate(handle))
    lt.check(lt.cublasLtDestroy(handle[0]))


def test_cudnn_handle(cuda_context):
    from cupric.cudnn import lib

    handle = lib.ffi.new("cudnnHandle_t *")
    lib.check(lib.cudnnCreate(handle))
    try:
        assert lib.cudnnGetVersion() // 10000 == lib.CUDNN_MAJOR
    finally:
        lib.check(lib.cudnnDestroy(handle[0]))


def test_curand_device_generator(cuda_context, rng):
    from cuda.bindings import driver

    from cupric.curand import lib

    count = 1 << 20
    generator = lib.ffi.new("curandGenerator_t *")
    lib.check(lib.curandCreateGenerator(generator, lib.CURAND_RNG_PSEUDO_PHILOX4_32_10))
    buffer = _driver_check(driver.cuMemAlloc(count * 4))
    try:
        _driver_check(driver.cuMemsetD32(buffer, 0xFFFFFFFF, count))  # poison: NaN
        lib.check(lib.curandSetPseudoRandomGeneratorSeed(generator[0], int(rng.integers(1, 2**62))))
        lib.check(lib.curandGenerateUniform(generator[0], lib.ffi.cast("float *", int(buffer)), count))
        host = np.empty(count, dtype=np.float32)
        _driver_check(driver.cuMemcpyDtoH(host, buffer, count * 4))
    finally:
        lib.check(lib.curandDestroyGenerator(generator[0]))
        _driver_check(driver.cuMemFree(buffer))
    assert np.all((host > 0) & (host <= 1))
    assert abs(host.mean() - 0.5) < 0.005


def test_nccl_communicator(cuda_context):
    from cupric.nccl import lib

    comms = lib.ffi.new("ncclComm_t[1]")
    devices = lib.ffi.new("int[1]", [0])
    lib.check(lib.ncclCommInitAll(comms, 1, devices))
    try:
        count = lib.ffi.new("int *")
        lib.check(lib.ncclCommCount(comms[0], count))
        assert count[0] == 1
    finally:
        lib.check(lib.ncclCommDestroy(comms[0]))


def test_optix_device_context(cuda_context):
    from cupric.optix import lib

    try:
        lib.table
    except ImportError as exc:
        if isinstance(exc.__cause__, OSError):  # no libnvoptix at all: not this test's fault
            pytest.skip(f"OptiX runtime not installed here: {exc}")
        raise
    print(f"OptiX declarations: {lib.source()}, ABI {lib.abi_version()}")
    ffi = lib.ffi
    options = ffi.new("OptixDeviceContextOptions *")
    options.validationMode = lib.OPTIX_DEVICE_CONTEXT_VALIDATION_MODE_OFF
    context = ffi.new("OptixDeviceContext *")
    lib.check(lib.optixDeviceContextCreate(ffi.cast("CUcontext", int(cuda_context)), options, context))
    try:
        rtcore = ffi.new("unsigned int *")
        lib.check(lib.optixDeviceContextGetProperty(
            context[0], lib.OPTIX_DEVICE_PROPERTY_RTCORE_VERSION, rtcore, ffi.sizeof("unsigned int")))
        depth = ffi.new("unsigned int *")
        lib.check(lib.optixDeviceContextGetProperty(
            context[0], lib.OPTIX_DEVICE_PROPERTY_LIMIT_MAX_TRACE_DEPTH, depth, 4))
        print(f"RT core version {rtcore[0]}, max trace depth {depth[0]}")
        assert depth[0] >= 1
        name = ffi.string(lib.optixGetErrorName(lib.OPTIX_ERROR_INVALID_VALUE)).decode()
        assert name == "OPTIX_ERROR_INVALID_VALUE"
    finally:
        lib.check(lib.optixDeviceContextDestroy(context[0]))


def test_generation_timing_on_an_idle_machine(tmp_path):
    # Not a GPU test: here because the GPU machine is otherwise idle, so the wall time
    # of generating every library is a clean figure for the report.
    start = time.perf_counter()
    results = cache.ensure_many([libraries.get(n) for n in WHEEL_LIBRARIES], root=str(tmp_path))
    wall = time.perf_counter() - start
    cpu = 0.0
    for name, (value, error) in results.items():
        assert error is None, (name, error)
        cpu += value[1].cpu_seconds
        print(f"{name}: {len(value[1].functions)} functions, "
              f"{sum(value[1].seconds.values()):.2f} s ({value[1].backend})")
    print(f"all libraries: {wall:.2f} s wall, {cpu:.2f} s CPU")
    best = min(_timed(lambda: cache.load_module(libraries.get("cublas"))) for _ in range(3))
    print(f"cached cuBLAS module load: {best * 1000:.1f} ms")
    assert cpu <= 10.0 and best <= 0.05


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
