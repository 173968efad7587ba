"""FlashAttention-2-style forward written in cupric (`cupric.kernels.attention`): on the
simulator against a float64 softmax reference (causal and not, sequence lengths that are
not multiples of the tile), its PTX (tensor cores, registers only), argument errors, and
on the GPU against torch.nn.functional.scaled_dot_product_attention."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.kernels import attention as att


def bf16_bits(x) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def reference(q, k, v, causal, scale=None):
    qq, kk, vv = (bf16_values(x).astype(np.float64) for x in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = qq @ np.swapaxes(kk, -1, -2) * scale
    if causal:
        n = q.shape[-2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ vv


@pytest.fixture
def simulator(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")


@pytest.mark.parametrize("heads, seq, head_dim, causal, block_m", [
    (2, 80, 64, True, 64), (2, 70, 64, False, 64), (1, 40, 128, True, 64),
    (1, 150, 64, True, 128)])
def test_simulator_matches_reference(heads, seq, head_dim, causal, block_m, rng, simulator):
    q, k, v = (bf16_bits(rng.standard_normal((1, heads, seq, head_dim))) for _ in range(3))
    out = np.full(q.shape, 0xFFFF, np.uint16)
    assert att.attention(q, k, v, out, causal=causal, block_m=block_m) is out
    err = np.abs(bf16_values(out) - reference(q, k, v, causal))
    # P is rounded to bf16 before P V, and O once more at the end: a few bf16 ulps of 1
    assert err.max() < 2e-2, err.max()
    assert np.mean(err) < 2e-3


def test_variants_and_bfloat16_arrays(rng, simulator, monkeypatch):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes' bfloat16 arrays")
    q, k, v = (bf16_bits(rng.standard_normal((1, 1, 40, 64))) for _ in range(3))
    base = att.attention(q, k, v, causal=True)
    # bfloat16 arrays in: the same bits out, in an array of q's dtype
    out = att.attention(*(x.view(ml_dtypes.bfloat16) for x in (q, k, v)), causal=True)
    assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out.view(np.uint16), base)
    # Q's fragments held in registers: the same products, the same bits
    monkeypatch.setattr(att, "Q_REGS", not att.Q_REGS)
    assert np.array_equal(att.attention(q, k, v, causal=True), base)
    # a negative scale takes the unfused softmax (the maximum of the scaled scores)
    scale = -0.3
    err = np.abs(bf16_values(att.attention(q, k, v, causal=True, scale=scale))
                 - reference(q, k, v, True, scale))
    assert err.max() < 2e-2, err.max()


def test_argument_errors(simulator):
    q = np.zeros((1, 1, 8, 64), np.uint16)
    with pytest.raises(ValueError, match="head_dim"):
        att.attention(*(np.zeros((1, 1, 8, 32), np.uint16),) * 3)
    with pytest.raises(ValueError, match="shape"):
        att.attention(q, q, np.zeros((1, 1, 9, 64), np.uint16))
    with pytest.raises(TypeError, match="dtype"):
        att.attention(q, q, q.astype(np.float32))


@pytest.mark.parametrize("head_dim, causal, block_m", [(128, True, 128), (64, False, 64)])
def test_ptx_is_tensor_core_code_in_registers(head_dim, causal, block_m):
    pytest.importorskip("cuda.bindings.nvvm", reason="libNVVM bindings are not installed")
    ptx = att.kernel(head_dim, causal, block_m).inspect_ptx(att.SIGNATURE)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "cp.async.cg.shared.global" in ptx and "ex2.approx" in ptx
    assert "local" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 3, 1000, 128), (1, 4, 256, 64), (2, 2, 77, 128)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_m", att.BLOCK_MS)
def test_gpu_matches_torch_sdpa(shape, causal, block_m):
    torch = pytest.importorskip("torch", reason="PyTorch's SDPA is the peer")
    gen = torch.Generator(device="cuda").manual_seed(
        int(np.random.SeedSequence().entropy % 2**31))
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    out = torch.full(shape, -1, device="cuda", dtype=torch.int16)
    att.attention(q, k, v, out,  # bfloat16 tensors as they are, bits out
                  causal=causal, block_m=block_m)
    ours = out.view(torch.bfloat16).double()
    exact = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=causal)
    peer = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ours_err = (ours - exact).abs().max().item()
    peer_err = (peer.double() - exact).abs().max().item()
    assert ours_err < max(4 * peer_err, 2e-2), (ours_err, peer_err)
