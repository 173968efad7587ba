"""The device half compiles: NVVM IR for every kernel of every generator, and PTX for a
few, checked for what makes them fast (state in registers, rotations as funnel shifts,
each stream's group of four elements leaving in one 16-byte store)."""

from __future__ import annotations

import pytest

from cupric.gpu_rand import ALGORITHMS, device, distributions

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
    # the state tuple lives in registers, never spilled (and sincospif, unlike sinf, keeps
    # no local buffer for a Payne-Hanek reduction)
    assert ".local" not in ptx
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


@pytest.mark.parametrize("kind, name, vector_store", [
    ("uniform_f32", "xoshiro128++", "st.global.v4.f32"),
    ("uniform_f32", "xoroshiro128**", "st.global.v4.f32"),
    ("normal_f32", "xoshiro128++", "st.global.v4.f32"),
    ("exponential_f32", "xoshiro128++", "st.global.v4.f32"),
    ("bits32", "xoshiro128++", "st.global.v4.u32"),
    ("uniform_f64", "xoshiro256++", "st.global.v2.f64"),
    ("bits64", "xoshiro256++", "st.global.v2.u64"),
])
def test_groups_leave_in_full_width_stores(kind, name, vector_store):
    """With `out` 16-byte aligned (the launch's default variant for allocations), the four
    neighbouring elements of a group become one 16-byte store (two for 8-byte elements);
    the unaligned variant falls back to one store per element, with the same order."""
    assert distributions.GROUP == 4  # the device bodies are written out for groups of 4
    kern = device.compiled_kernel(kind, name)
    sig = signature(kind, name)
    assert vector_store in kern.inspect_ptx(sig)
    unaligned = kern.inspect_ptx(sig, aligned=False)
    assert ".v4." not in unaligned and ".v2." not in unaligned
