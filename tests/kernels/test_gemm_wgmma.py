"""The Hopper GEMM written in cupric (`cupric.kernels.gemm_wgmma`): on the simulator
against NumPy (both layouts of B, both kinds, shapes that are not multiples of the tile),
its PTX (wgmma, TMA, mbarriers, no local memory), argument errors, and on the GPU against
float64 and cuBLAS through PyTorch on fresh inputs and poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.kernels import gemm_wgmma

gpu = pytest.mark.gpu


def bf16_bits(x) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def values(bits, kind) -> np.ndarray:
    if kind == "f16":
        return np.asarray(bits).view(np.float16).astype(np.float64)
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)


def operands(kind, m, n, k, layout, rng):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n) if layout == "kn" else (n, k)).astype(np.float32)
    if kind == "bf16":
        a, b = bf16_bits(a), bf16_bits(b)
    else:
        a, b = a.astype(np.float16), b.astype(np.float16)
    av, bv = values(a, kind), values(b, kind)
    exact = av @ (bv if layout == "kn" else bv.T)
    scale = np.abs(av) @ np.abs(bv if layout == "kn" else bv.T)
    return a, b, exact, scale


def check(out_bits, kind, exact, scale, k):
    """The result is the exact product within one rounding to the 16-bit type (2^-8
    relative for bf16, 2^-11 for f16) plus float32 accumulation error."""
    got = values(out_bits, kind)
    rel = 2.0 ** -8 if kind == "bf16" else 2.0 ** -11
    bound = rel * np.abs(exact) + k * 2.0 ** -22 * scale + 1e-30
    bad = np.abs(got - exact) > bound
    assert not bad.any(), f"{bad.sum()} elements off, e.g. {np.argwhere(bad)[:3]}"


@pytest.fixture
def simulator(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")


@pytest.mark.parametrize("kind, layout, shape, bn", [
    ("bf16", "kn", (130, 72, 72), 64), ("bf16", "nk", (70, 40, 136), 64),
    ("bf16", "nk", (66, 37, 24), 64),
    ("f16", "kn", (64, 136, 40), 128)])
def test_simulator_matches_numpy(kind, layout, shape, bn, rng, simulator):
    m, n, k = shape
    a, b, exact, scale = operands(kind, m, n, k, layout, rng)
    out = np.full((m, n), 0xFFFF, np.uint16)
    cfg = gemm_wgmma.Config(bn=bn, stages=2)
    assert gemm_wgmma.matmul(a, b, out, kind=kind, b_layout=layout, config=cfg) is out
    check(out, kind, exact, scale, k)


def test_ml_dtypes_bfloat16_in_and_out(rng, simulator):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 NumPy arrays")
    a = rng.standard_normal((40, 24)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((24, 16)).astype(ml_dtypes.bfloat16)
    out = gemm_wgmma.matmul(a, b, config=gemm_wgmma.Config(bn=64, stages=2))
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (40, 16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    check(out.view(np.uint16), "bf16", exact, scale, 24)


def test_argument_errors(simulator):
    a = np.zeros((16, 24), np.uint16)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        gemm_wgmma.matmul(a, np.zeros((16, 8), np.uint16))
    with pytest.raises(ValueError, match="multiples of 8"):
        gemm_wgmma.matmul(np.zeros((16, 20), np.uint16), np.zeros((20, 8), np.uint16))
    with pytest.raises(ValueError, match="b_layout"):
        gemm_wgmma.matmul(a, np.zeros((24, 8), np.uint16), b_layout="tn")
    with pytest.raises(ValueError, match="unsupported tiling"):
        gemm_wgmma.Config(bn=96).check()
    with pytest.raises(TypeError):
        gemm_wgmma.matmul(a, np.zeros((24, 8), np.uint16), np.zeros((16, 8), np.float32))


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_ptx_uses_wgmma_tma_and_mbarriers(layout):
    kern = gemm_wgmma.kernel("bf16", layout)
    art = kern.compile(gemm_wgmma._signature())
    ptx = art.ptx
    assert art.arch == "sm_90a"
    for text in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                 "cp.async.bulk.tensor.2d.shared::cluster.global.tile",
                 "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx",
                 "wgmma.wait_group.sync.aligned 1", "setmaxnreg.inc"):
        assert text in ptx, text
    if art.cubin is not None:
        usage = art.resource_usage["gemm_wgmma"]
        assert usage.stack_bytes == 0 and usage.spill_stores == 0
        # No copies of in-flight accumulators (ptxas would serialize the wgmma).
        assert "C7515" not in art.log


# -- GPU -------------------------------------------------------------------------------

SHAPES = [("kn", 256, 256, 256), ("kn", 1000, 1000, 1000), ("kn", 129, 264, 72),
          ("nk", 333, 517, 136), ("kn", 2048, 1536, 1024), ("nk", 1024, 2056, 520)]


@gpu
@pytest.mark.parametrize("layout, m, n, k", SHAPES)
def test_gpu_matches_float64_and_cublas(layout, m, n, k):
    torch = pytest.importorskip("torch", reason="PyTorch is the cuBLAS peer")
    gen = torch.Generator(device="cuda").manual_seed(int(np.random.SeedSequence().entropy
                                                         % 2 ** 31))
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(*((k, n) if layout == "kn" else (n, k)), device="cuda",
                    generator=gen).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if m % 2:   # bfloat16 tensors as they come
        gemm_wgmma.matmul(a, b, out, b_layout=layout)
    else:       # or their bits
        gemm_wgmma.matmul(a.view(torch.int16), b.view(torch.int16), out.view(torch.int16),
                          b_layout=layout)
    torch.cuda.synchronize()
    bb = b if layout == "kn" else b.T
    exact = a.double() @ bb.double()
    scale = a.double().abs() @ bb.double().abs()
    bound = 2.0 ** -8 * exact.abs() + k * 2.0 ** -22 * scale
    got = out.double()
    assert bool(torch.all((got - exact).abs() <= bound)), \
        f"max error {(got - exact).abs().max().item()}"
    peer = (a @ bb).double()
    assert bool(torch.all((got - peer).abs() <= 2 * bound))


@gpu
def test_gpu_f16():
    torch = pytest.importorskip("torch", reason="PyTorch holds the operands")
    m, n, k = 300, 264, 200
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(k, n, device="cuda").half()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    gemm_wgmma.matmul(a, b, out, kind="f16")
    torch.cuda.synchronize()
    exact = a.double() @ b.double()
    bound = 2.0 ** -11 * exact.abs() + k * 2.0 ** -22 * (a.double().abs() @ b.double().abs())
    assert bool(torch.all((out.double() - exact).abs() <= bound))
