"""The tensor-core GEMM written in cupric (`cupric.kernels.gemm_tc`): on the simulator
against NumPy (shapes that are not multiples of the tile, both output kinds), its PTX
(mma.sync, ldmatrix, cp.async, no local memory), argument errors, and on the GPU against
cuBLAS through PyTorch on fresh inputs and poisoned outputs."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.kernels import gemm_tc


def bf16_bits(x) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def operands(kind, m, n, k, rng):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if kind == "bf16":
        a, b = bf16_bits(a), bf16_bits(b)
        exact = bf16_values(a).astype(np.float64) @ bf16_values(b).astype(np.float64)
    else:
        a, b = a.astype(np.float16), b.astype(np.float16)
        exact = a.astype(np.float64) @ b.astype(np.float64)
    return a, b, exact


@pytest.fixture
def simulator(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")


@pytest.mark.parametrize("kind, shape", [("bf16", (40, 24, 40)), ("f16", (20, 136, 72))])
def test_simulator_matches_numpy(kind, shape, rng, simulator):
    m, n, k = shape
    a, b, exact = operands(kind, m, n, k, rng)
    out = np.full((m, n), np.nan, np.float32)
    assert gemm_tc.matmul(a, b, out, kind=kind) is out
    # float32 accumulation of k products: well inside k * 2^-24 of the sum of |terms|
    bound = k * 2.0 ** -23 * (np.abs(a.astype(np.float32) if kind == "f16" else
                                     bf16_values(a)) @ np.abs(
        b.astype(np.float32) if kind == "f16" else bf16_values(b)))
    assert np.all(np.abs(out - exact) <= bound + 1e-30)
    packed = np.full((m, n), 0xFFFF, np.uint16)
    gemm_tc.matmul(a, b, packed, kind=kind)
    assert np.array_equal(packed, bf16_bits(out))  # the same sums, rounded to bf16


def test_bfloat16_arrays(rng, simulator):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes' bfloat16 arrays")
    a, b, _ = operands("bf16", 24, 16, 32, rng)
    a16, b16 = a.view(ml_dtypes.bfloat16), b.view(ml_dtypes.bfloat16)
    want = gemm_tc.matmul(a, b)
    assert np.array_equal(gemm_tc.matmul(a16, b16), want)
    out = np.zeros((24, 16), ml_dtypes.bfloat16)
    assert gemm_tc.matmul(a16, b16, out) is out
    assert np.array_equal(out.view(np.uint16), bf16_bits(want))


def test_empty_inner_dimension_gives_zeros(simulator):
    out = gemm_tc.matmul(np.zeros((5, 0), np.uint16), np.zeros((0, 8), np.uint16))
    assert out.shape == (5, 8) and not out.any()


def test_argument_errors(simulator):
    a = np.zeros((16, 24), np.uint16)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm_tc.matmul(a, np.zeros((16, 8), np.uint16))
    with pytest.raises(ValueError, match="multiples of 8"):
        gemm_tc.matmul(np.zeros((16, 20), np.uint16), np.zeros((20, 8), np.uint16))
    with pytest.raises(TypeError, match="dtype"):
        gemm_tc.matmul(a, np.zeros((24, 8), np.float32))
    with pytest.raises(TypeError, match="out has dtype"):
        gemm_tc.matmul(a, np.zeros((24, 8), np.uint16), np.zeros((16, 8), np.float64))
    with pytest.raises(ValueError, match="kind"):
        gemm_tc.matmul(a, np.zeros((24, 8), np.uint16), kind="fp8")
    with pytest.raises(ValueError, match="unsupported tiling"):
        gemm_tc.kernel("bf16", "f32", gemm_tc.Config(bk=48))


@pytest.mark.parametrize("out, word", [("f32", "f32"), ("bf16", "u32")])
def test_ptx_is_tensor_core_code_in_registers(out, word):
    pytest.importorskip("cuda.bindings.nvvm", reason="libNVVM bindings are not installed")
    ptx = gemm_tc.kernel("bf16", out).inspect_ptx(
        f"Array[u16, 1, 'C'], Array[u16, 1, 'C'], Array[{word}, 1, 'C'], i32, i32, i32")
    cfg = gemm_tc.DEFAULT
    per_slice = (cfg.bk // 16) * (cfg.bm // cfg.warps_m // 16) * (cfg.bn // cfg.warps_n // 8)
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == per_slice
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 2" in ptx
    assert "local" not in ptx  # accumulators and fragments stay in registers


# -- GPU lane ---------------------------------------------------------------------------------

SHAPES = [(256, 512, 1024), (1000, 520, 264), (129, 136, 72), (77, 8, 8),
          (2048, 2048, 2048)]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bf16", "f16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_matches_cublas(kind, shape):
    torch = pytest.importorskip("torch", reason="PyTorch is the cuBLAS peer")
    m, n, k = shape
    dtype = torch.bfloat16 if kind == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(int(np.random.SeedSequence().entropy % 2**31))
    a = torch.randn((m, k), device="cuda", dtype=dtype, generator=gen)
    b = torch.randn((k, n), device="cuda", dtype=dtype, generator=gen)
    view = torch.int16 if kind == "bf16" else torch.float16
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    gemm_tc.matmul(a, b, out, kind=kind)  # bfloat16 tensors as they are
    exact = a.double() @ b.double()
    torch.cuda.synchronize()
    scale = (a.abs().double() @ b.abs().double())
    err = ((out.double() - exact).abs() / (scale + 1e-30)).max().item()
    assert err < 1e-5, err  # f32 accumulation: far below bf16/f16 rounding
    peer = torch.matmul(a, b).double()  # cuBLAS, rounded to the input type
    half_ulp = 2.0 ** -8 if kind == "bf16" else 2.0 ** -10  # at the bottom of a binade
    assert ((out.double() - peer).abs() <= half_ulp * peer.abs() + 1e-5 * scale).all()
    packed = torch.full((m, n), -1, device="cuda", dtype=torch.int16)
    gemm_tc.matmul(a.view(view), b.view(view), packed, kind=kind)
    # bf16 output: the same float32 sums, rounded to nearest even
    assert torch.equal(packed, out.to(torch.bfloat16).view(torch.int16))


@pytest.mark.gpu
def test_gpu_refuses_unaligned_operands():
    torch = pytest.importorskip("torch", reason="PyTorch makes the offset view")
    a = torch.zeros(16 * 24 + 1, dtype=torch.int16, device="cuda")[1:].view(16, 24)
    b = torch.zeros((24, 8), dtype=torch.int16, device="cuda")
    with pytest.raises(ValueError, match="16-byte boundary"):
        gemm_tc.matmul(a, b)
