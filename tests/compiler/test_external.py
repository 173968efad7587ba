"""External device code (`cupric.compiler.external.declare_device`): CPU lane: a kernel
calling a CUDA C++ function (NVRTC -> LTO-IR, nvJitLink -lto), a PTX function taking an
array's pointer, a cubin and an LTO-IR function, links into one cubin, and without the
external code the same PTX does not link; the simulator runs the Python twins; calls
with the wrong arguments are compile errors at the call; NVRTC errors carry the log;
cubin/LTO-IR for another arch is refused naming both. GPU lane: each kind of external
function computes what NumPy (and the simulator) compute."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import cupric
from cupric.compiler import CompileError, external, link
from cupric.compiler.errors import LinkError
from cupric.device import grid
from cupric.types import Array, f32, i32

sys.path.insert(0, str(Path(__file__).parent))
import external_kernels as ek  # noqa: E402

POLY_SIG = "Array[f32, 1, 'C'], Array[f32, 1, 'C'], f32, i32"
SCALE_SIG = "Array[f32, 1, 'C'], i32, f32"
ADD_SOURCE = b'extern "C" __device__ float cupric_ext_add(float a, float b) { return a + b; }'


def nvrtc_cubin(source: bytes, arch: str) -> bytes:
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source, b"add.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}".encode(), b"-rdc=true"]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == 0
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    out = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, out)
    nvrtc.nvrtcDestroyProgram(prog)
    return out


def test_cuda_cpp_function_links_with_lto():
    art = ek.apply_poly.compile(POLY_SIG, arch="sm_90")
    assert ".extern .func  (.param .b32 func_retval0) cupric_ext_poly" in art.ptx or \
        ".extern .func (.param .b32 func_retval0) cupric_ext_poly" in art.ptx
    assert art.linker == "nvjitlink" and art.cubin[:4] == b"\x7fELF"
    kind, data, _ = ek.poly.link_input("sm_90", lto=True)
    assert kind == external.INPUT_LTOIR and len(data) > 100
    assert "apply_poly" in art.resource_usage


def test_without_the_external_code_the_ptx_does_not_link(monkeypatch):
    ptx = ek.apply_poly.compile(POLY_SIG, arch="sm_90").ptx
    monkeypatch.setattr(external, "_BY_SYMBOL", {})
    with pytest.raises(LinkError):
        link.link_ptx(ptx, cupric.compiler.CompileOptions(arch="sm_90"))


def test_ptx_function_with_an_array_pointer_and_no_result():
    art = ek.scale_prefix.compile(SCALE_SIG, arch="sm_90")
    assert "call.uni" in art.ptx and art.cubin[:4] == b"\x7fELF"
    with pytest.raises(LinkError, match="needs nvJitLink, not ptxas"):
        link.link_ptx(art.ptx, cupric.compiler.CompileOptions(arch="sm_90"),
                      linker="ptxas")


def test_cubin_and_ltoir_inputs_are_tied_to_their_arch(tmp_path):
    cubin = nvrtc_cubin(ADD_SOURCE, "sm_90")
    add = external.declare_device("cupric_ext_add", f32, (f32, f32), cubin=cubin,
                                  arch="sm_90")

    @cupric.kernel
    def add_one(x: Array[f32, 1, 'C']):
        i = grid(1)
        if i < len(x):
            x[i] = add(x[i], 1.0)

    assert add_one.compile("Array[f32, 1, 'C']", arch="sm_90").cubin[:4] == b"\x7fELF"
    with pytest.raises(LinkError, match="given as cubin for sm_90; the kernel links for sm_80"):
        add_one.compile("Array[f32, 1, 'C']", arch="sm_80")

    ltoir = external.compile_cuda(ADD_SOURCE.replace(b"cupric_ext_add", b"cupric_ext_add2"),
                                  "sm_90", lto=True)
    add2 = external.declare_device("cupric_ext_add2", f32, (f32, f32), ltoir=ltoir,
                                   arch="sm_90")

    @cupric.kernel
    def add_two(x: Array[f32, 1, 'C']):
        i = grid(1)
        if i < len(x):
            x[i] = add2(x[i], 2.0)

    assert add_two.compile("Array[f32, 1, 'C']", arch="sm_90").cubin[:4] == b"\x7fELF"


def test_the_simulator_runs_the_twins(rng):
    x = rng.standard_normal(100).astype(np.float32)
    y = np.full(100, np.nan, np.float32)
    ek.apply_poly.simulate[1, 128](x, y, np.float32(0.5), np.int32(3))
    np.testing.assert_allclose(y, 0.5 * x ** 3 + x, rtol=1e-6)
    v = rng.standard_normal(10).astype(np.float32)
    w = v.copy()
    ek.scale_prefix.simulate[1, 32](w, np.int32(6), np.float32(-2))
    np.testing.assert_array_equal(w, np.concatenate([v[:6] * -2, v[6:]]))


def test_no_twin_no_simulation():
    bare = external.declare_device("cupric_ext_bare", f32, (f32,), ptx=b"// unused")

    @cupric.kernel
    def uses_bare(x: Array[f32, 1, 'C']):
        x[0] = bare(x[0])

    with pytest.raises(Exception, match="no Python twin"):
        uses_bare.simulate[1, 1](np.zeros(1, np.float32))
    with pytest.raises(Exception, match="runs inside a kernel"):
        bare(1.0)


def test_wrong_calls_are_compile_errors_at_the_call():
    @cupric.kernel
    def too_few(x: Array[f32, 1, 'C']):
        x[0] = ek.poly(x[0], 1.0)

    @cupric.kernel
    def wrong_array(x: Array[i32, 1, 'C']):
        ek.scale_ptx(x, 1, 2.0)

    with pytest.raises(CompileError, match="takes 3 arguments, got 2"):
        too_few.inspect_ir("Array[f32, 1, 'C']")
    with pytest.raises(CompileError, match="must be an array of f32"):
        wrong_array.inspect_ir("Array[i32, 1, 'C']")


def test_declaration_and_nvrtc_errors():
    with pytest.raises(ValueError, match="exactly one of"):
        external.declare_device("f", f32, (f32,))
    with pytest.raises(ValueError, match="pass arch="):
        external.declare_device("f", f32, (f32,), cubin=b"x")
    with pytest.raises(ValueError, match="C identifier"):
        external.declare_device("not a name", f32, (f32,), ptx=b"x")
    with pytest.raises(TypeError, match="parameter 0"):
        external.declare_device("f", f32, (float,), ptx=b"x")
    with pytest.raises(external.NvrtcError) as info:
        external.compile_cuda(b'extern "C" __device__ int broken( { }', "sm_90", lto=True)
    assert "error" in info.value.log


@pytest.mark.gpu
def test_external_functions_on_the_gpu(rng):
    from cupric import runtime as rt
    from cupric.compiler.target import current_arch
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    d_x = rt.to_device(x)
    d_y = rt.to_device(np.full(n, np.nan, np.float32))
    ek.apply_poly[(n + 255) // 256, 256](d_x, d_y, np.float32(0.5), np.int32(3))
    gpu = d_y.to_numpy()
    np.testing.assert_allclose(gpu, 0.5 * x.astype(np.float64) ** 3 + x, rtol=2e-6,
                               atol=1e-6)
    sim = np.full(n, np.nan, np.float32)
    ek.apply_poly.simulate[(n + 255) // 256, 256](x, sim, np.float32(0.5), np.int32(3))
    np.testing.assert_allclose(gpu, sim, rtol=2e-6, atol=1e-6)

    v = rng.standard_normal(64).astype(np.float32)
    d_v = rt.to_device(v)
    ek.scale_prefix[1, 32](d_v, np.int32(40), np.float32(-3))
    np.testing.assert_array_equal(d_v.to_numpy(), np.concatenate([v[:40] * -3, v[40:]]))

    arch = current_arch()
    add = external.declare_device("cupric_ext_add_gpu", f32, (f32, f32), cubin=nvrtc_cubin(
        ADD_SOURCE.replace(b"cupric_ext_add", b"cupric_ext_add_gpu"), arch), arch=arch)

    @cupric.kernel
    def add_k(x: Array[f32, 1, 'C'], y: Array[f32, 1, 'C']):
        i = grid(1)
        if i < len(x):
            y[i] = add(x[i], 0.25)

    d_z = rt.to_device(np.full(n, np.nan, np.float32))
    add_k[(n + 255) // 256, 256](d_x, d_z)
    np.testing.assert_array_equal(d_z.to_numpy(), x + np.float32(0.25))
