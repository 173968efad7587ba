"""The device half compiles: NVVM IR for every kernel of every generator, and PTX for a
few, checked for what makes them fast (state in registers, rotations as funnel shifts)."""

from __future__ import annotations

import pytest

from cupric.gpu_rand import ALGORITHMS, device

pytest.importorskip("cupric.compiler.kernel", reason="the compiler front end is not present")

SIGNATURES = {
    "bits32": "W2, Array[u32, 1, 'C']", "bits64": "W2, Array[u64, 1, 'C']",
    "uniform_f32": "W2, Array[f32, 1, 'C'], f32, f32", "uniform_f64": "W2, Array[f64, 1, 'C'], f64, f64",
    "normal_f32": "W2, Array[f32, 1, 'C'], f32, f32", "normal_f64": "W2, Array[f64, 1, 'C'], f64, f64",
    "exponential_f32": "W2, Array[f32, 1, 'C'], f32, f32", "exponential_f64": "W2, Array[f64, 1, 'C'], f64, f64",
    "integers32": "W2, Array[u32, 1, 'C'], u64, u64, u64",
    "integers32_to64": "W2, Array[u64, 1, 'C'], u64, u64, u64",
    "integers64": "W2, Array[u64, 1, 'C'], u64, u64, u64",
    "init_streams": "W2, W2, W3, i64",
    "jump": "W2, W3",
}


def signature(kind: str, name: str) -> str:
    word = "u64" if ALGORITHMS[name].word_bits == 64 else "u32"
    return (SIGNATURES[kind].replace("W2", f"Array[{word}, 2, 'C']")
            .replace("W3", f"Array[{word}, 3, 'C']"))


def test_signatures_cover_every_kernel():
    assert set(SIGNATURES) == set(device.KERNELS)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_kernel_lowers_to_ir(name):
    for kind in device.KERNELS:
        ir = device.compiled_kernel(kind, name).inspect_ir(signature(kind, name))
        assert "define" in ir, kind


@pytest.mark.parametrize("kind, name", [("uniform_f32", "xoshiro128++"),
                                        ("uniform_f64", "xoshiro256**"),
                                        ("normal_f32", "xoshiro128++"),
                                        ("init_streams", "xoshiro256++"),
                                        ("integers64", "xoroshiro128++")])
def test_ptx(kind, name):
    ptx = device.compiled_kernel(kind, name).inspect_ptx(signature(kind, name))
    assert ".entry" in ptx
    if not kind.startswith("normal"):  # libdevice's sinf keeps a local buffer for huge args
        assert ".local" not in ptx  # the state tuple lives in registers, never spilled
    if kind == "uniform_f32":
        assert "shf.l.wrap.b32" in ptx  # rotations map to the funnel shifter


@pytest.mark.parametrize("kind, name", [("uniform_f32", "xoshiro128++"),
                                        ("init_streams", "xoshiro512++"),
                                        ("integers64", "xoshiro256**")])
def test_cubin_keeps_state_in_registers(kind, name):
    """ptxas (through nvJitLink) for sm_90: no spills and no stack for these kernels."""
    spec = device.compiled_kernel(kind, name).specialize(signature(kind, name))
    usage = spec.artifact("sm_90").resource_usage["kernel"]
    assert usage.spill_stores == 0 and usage.spill_loads == 0 and usage.stack_bytes == 0
    assert usage.registers <= 64
