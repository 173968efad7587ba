"""GPU lane for the backend: what it builds loads and runs on the installed driver, with
no version skew surfacing. Raw Driver API only, so this tests the backend alone."""

from __future__ import annotations

import ctypes
import json
import os

import numpy as np
import pytest

from _backend_samples import exp_kernel, shared_kernel
from cupric.compiler import backend, link, target, toolchain
from cupric.compiler.cache import KernelCache
from cupric.compiler.options import CompileOptions

pytestmark = pytest.mark.gpu


def _check(result):
    from cuda.bindings import driver

    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise RuntimeError(f"driver call failed: {name.decode() if name else err}")
    return values[0] if len(values) == 1 else values


@pytest.fixture(scope="module")
def context():
    from cuda.bindings import driver

    _check(driver.cuInit(0))
    device = _check(driver.cuDeviceGet(0))
    ctx = _check(driver.cuDevicePrimaryCtxRetain(device))
    _check(driver.cuCtxSetCurrent(ctx))
    yield device
    # Leave no stale handle current: once released, the primary context may be destroyed,
    # and later tests (cupric.runtime) would find the dead context current on this thread.
    _check(driver.cuCtxPopCurrent())
    _check(driver.cuDevicePrimaryCtxRelease(device))


def _save(name, data):
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, name), "w") as file:
            json.dump(data, file, indent=1, default=str)


def _load(kind, image):
    from cuda.bindings import driver

    data = image.encode() + b"\0" if kind == "ptx" else image
    buffer = ctypes.create_string_buffer(data, len(data))  # the driver copies the image
    return _check(driver.cuModuleLoadData(ctypes.addressof(buffer)))


def _run_exp(module, rng, n=10_000):
    from cuda.bindings import driver

    function = _check(driver.cuModuleGetFunction(module, b"exp_kernel"))
    x = rng.uniform(-10, 10, n).astype(np.float32)
    out = np.full(n, np.nan, dtype=np.float32)  # poisoned: unwritten slots stay NaN
    d_in = _check(driver.cuMemAlloc(x.nbytes))
    d_out = _check(driver.cuMemAlloc(out.nbytes))
    try:
        _check(driver.cuMemcpyHtoD(d_in, x.ctypes.data, x.nbytes))
        _check(driver.cuMemcpyHtoD(d_out, out.ctypes.data, out.nbytes))
        args = [ctypes.c_uint64(int(d_out)), ctypes.c_uint64(int(d_in)), ctypes.c_int64(n)]
        pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        block = 256
        _check(driver.cuLaunchKernel(function, (n + block - 1) // block, 1, 1, block, 1, 1, 0, 0,
                                     ctypes.addressof(pointers), 0))
        _check(driver.cuCtxSynchronize())
        _check(driver.cuMemcpyDtoH(out.ctypes.data, d_out, out.nbytes))
    finally:
        _check(driver.cuMemFree(d_in))
        _check(driver.cuMemFree(d_out))
    np.testing.assert_allclose(out, np.exp(x.astype(np.float64)), rtol=2e-6)


def test_toolchain_and_driver_seen_here():
    report = toolchain.report()
    _save("backend_toolchain.json", report)
    for piece in ("libnvvm", "libdevice", "ptxas", "nvjitlink"):
        assert "error" not in report[piece], report[piece]
    assert target.driver_version() is not None and target.current_arch() is not None


def test_built_cubin_loads_and_runs(context, rng, tmp_path):
    arch = target.current_arch()
    artifact = backend.build(exp_kernel(), options=CompileOptions(arch=arch),
                             cache=KernelCache(tmp_path))
    kind, image = artifact.image()
    _save("backend_image.json", {"arch": arch, "kind": kind, "driver": target.driver_version(),
                                 "ptx_isa": target.ptx_isa(artifact.ptx),
                                 "linker": artifact.linker, "linker_release": artifact.linker_release,
                                 "resource_usage": {k: v.to_dict() for k, v in
                                                    artifact.resource_usage.items()}})
    assert kind == "cubin"
    _run_exp(_load(kind, image), rng)


@pytest.mark.parametrize("linker", ["nvjitlink", "ptxas"])
def test_each_linker_cubin_runs(context, rng, linker):
    arch = target.current_arch()
    from cupric.compiler.nvvm import compile_ir

    options = CompileOptions(arch=arch)
    ptx = compile_ir([exp_kernel()], options).ptx
    out = link.link_ptx(ptx, options, linker=linker)
    _run_exp(_load("cubin", out.cubin), rng)


def test_ptx_loads_when_the_driver_accepts_its_isa(context, rng):
    from cupric.compiler.nvvm import compile_ir

    arch = target.current_arch()
    ptx = compile_ir([exp_kernel()], CompileOptions(arch=arch)).ptx

    def no_linker(ptx, arch):
        from cupric.compiler.errors import ToolchainNotFoundError
        raise ToolchainNotFoundError("linking disabled for this test")

    if target.ptx_isa(ptx) <= target.driver_max_ptx_isa():
        kind, image = target.choose_image(ptx, arch, link=no_linker)
        assert kind == "ptx"
        _run_exp(_load(kind, image), rng)
    else:
        with pytest.raises(target.VersionSkewError):
            target.choose_image(ptx, arch, link=no_linker)


def test_shared_memory_kernel_runs_with_fast_math(context):
    from cuda.bindings import driver

    arch = target.current_arch()
    artifact = backend.build(shared_kernel(), options=CompileOptions(arch=arch, fast_math=True),
                             cache=False)
    module = _load(*artifact.image())
    function = _check(driver.cuModuleGetFunction(module, b"reverse_div"))
    out = np.full(256, np.nan, dtype=np.float32)
    d_out = _check(driver.cuMemAlloc(out.nbytes))
    try:
        args = [ctypes.c_uint64(int(d_out)), ctypes.c_float(4.0)]
        pointers = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])
        _check(driver.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, 0,
                                     ctypes.addressof(pointers), 0))
        _check(driver.cuCtxSynchronize())
        _check(driver.cuMemcpyDtoH(out.ctypes.data, d_out, out.nbytes))
    finally:
        _check(driver.cuMemFree(d_out))
    np.testing.assert_allclose(out, (255 - np.arange(256)) / 4.0, rtol=1e-6)
