"""A FlashAttention-2-style forward in Triton, in the shape of Triton's fused-attention
tutorial (written for this benchmark, a peer only): one program per 128 query rows of one
(batch, head), 64-key tiles, online softmax in base 2, causal tiles on the diagonal masked
and the ones above it skipped."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, WARPS, STAGES = 128, 64, 8, 3


@triton.jit
def _tile(acc, l_i, m_i, q, k_ptr, v_ptr, base, start, offs_m, offs_n, offs_d, qk_scale,
          D: tl.constexpr, MASK: tl.constexpr):
    kt = tl.load(k_ptr + base + (start + offs_n)[None, :] * D + offs_d[:, None])
    qk = tl.dot(q, kt)
    if MASK:
        qk = tl.where(offs_m[:, None] >= (start + offs_n)[None, :], qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_ptr + base + (start + offs_n)[:, None] * D + offs_d[None, :])
    acc = tl.dot(p.to(tl.bfloat16), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq, D: tl.constexpr, BM: tl.constexpr,
             BN: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest rows first
    base = tl.program_id(1).to(tl.int64) * seq * D
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    end = pid_m * BM if CAUSAL else seq
    for start in range(0, end, BN):
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptr, v_ptr, base, start, offs_m, offs_n,
                              offs_d, qk_scale, D, False)
    if CAUSAL:
        for start in range(pid_m * BM, (pid_m + 1) * BM, BN):
            acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptr, v_ptr, base, start, offs_m,
                                  offs_n, offs_d, qk_scale, D, True)
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :],
             (acc / l_i[:, None]).to(tl.bfloat16))


def attention(q, k, v, sm_scale: float, causal: bool):
    """softmax(q k^T * sm_scale) v of contiguous bf16 (batch, heads, seq, head_dim) tensors;
    seq a multiple of 128."""
    b, h, s, d = q.shape
    if s % BLOCK_M:
        raise ValueError(f"seq must be a multiple of {BLOCK_M}")
    o = torch.empty_like(q)
    _forward[(s // BLOCK_M, b * h)](q, k, v, o, sm_scale, s, D=d, BM=BLOCK_M, BN=BLOCK_N,
                                    CAUSAL=causal, num_warps=WARPS, num_stages=STAGES)
    return o
