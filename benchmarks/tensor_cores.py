"""Tensor-core kernels written in cupric beside their peers, in one process: the bf16 GEMM
of `cupric.kernels.gemm_tc` (warp-level mma.sync) beside cuBLAS (torch.matmul), and the
FlashAttention-2-style forward of `cupric.kernels.attention` beside PyTorch's
scaled_dot_product_attention restricted to its flash backend, with a Triton kernel of the
tutorial's shape beside both where Triton is installed.

GEMM: 8192^3, bf16 operands, f32 accumulation, bf16 result (as torch.matmul gives).
Attention: batch 8, 16 heads, sequence 4096, head dim 128, bf16, causal (and not, unless
--quick). Every contender's output is poisoned and checked before timing: the GEMM
against torch.matmul's result (one bf16 unit in the last place apart, both rounding f32
sums), attention against SDPA's (within 2e-2, what bf16 probabilities allow). Timing:
CUDA events on PyTorch's stream, a lead-in call, then the median of samples of a few
back-to-back calls, contenders alternating which goes first.

    python3 benchmarks/tensor_cores.py [--json PATH] [--quick]
"""

from __future__ import annotations

import math
import statistics
import sys
import time

from _common import CheckError, device_samples, error_text, finish, print_tables, ratio, table

SIZE = 8192
SHAPE = (8, 16, 4096, 128)
SAMPLES, PER_SAMPLE = 9, 3


def _time(torch, fns: dict, samples: int = SAMPLES) -> dict:
    """Median seconds per call of each callable, interleaved sample by sample."""
    stream = torch.cuda.current_stream()
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    times = device_samples(torch, fns, samples, PER_SAMPLE, stream)
    return {name: statistics.median(t) for name, t in times.items()}


def _check(torch, label: str, run, out, expected, atol: float, rtol: float = 0.0) -> float:
    """Poison `out` (NaN), run, and compare with `expected` on the device, every element
    within atol + rtol * |expected|; the largest difference."""
    out.fill_(math.nan)
    torch.cuda.synchronize()
    run()
    torch.cuda.synchronize()
    want = expected.float()
    err = (out.float() - want).abs()
    worst = float(err.max())
    if math.isnan(worst) or not bool((err <= atol + rtol * want.abs()).all()):
        raise CheckError(f"{label}: largest difference {worst} past {atol} + {rtol} |x|")
    return worst


def _gemm(torch, results: dict) -> None:
    from cupric.kernels import gemm_tc
    gen = torch.Generator(device="cuda").manual_seed(1234)
    a = torch.randn((SIZE, SIZE), device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn((SIZE, SIZE), device="cuda", dtype=torch.bfloat16, generator=gen)
    ours = torch.empty((SIZE, SIZE), device="cuda", dtype=torch.bfloat16)
    peer = torch.empty_like(ours)
    fns = {"cupric gemm_tc": lambda: gemm_tc.matmul(a, b, ours),
           "cuBLAS (torch.matmul)": lambda: torch.matmul(a, b, out=peer)}
    fns["cuBLAS (torch.matmul)"]()
    expected = peer.clone()
    # Both round f32 sums of the same products to bf16: one unit in the last place of
    # the result apart (2^-7 relative), plus what a different order of the f32 sums makes
    # (far below 2^-16 of the sum of |terms|, about sqrt(k) for normal operands).
    atol = 2.0 ** -16 * math.sqrt(SIZE) * 4
    errs = {name: _check(torch, f"gemm {name}", fn, out, expected, atol, 2.0 ** -7)
            for (name, fn), out in zip(fns.items(), (ours, peer))}
    times = _time(torch, fns)
    flop = 2.0 * SIZE ** 3
    rows = {name: {"ms": t * 1e3, "TFLOPs": flop / t / 1e12, "max_abs_diff": errs[name]}
            for name, t in times.items()}
    rows["cupric gemm_tc"]["ratio_to_cublas"] = ratio(times["cuBLAS (torch.matmul)"],
                                                      times["cupric gemm_tc"])
    results["gemm_bf16_8192"] = rows


def _attention(torch, results: dict, quick: bool) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from cupric.kernels import attention as att
    try:
        from _triton_attention import attention as triton_attention
    except Exception as exc:  # Triton missing or broken: reported, never hidden
        triton_attention = None
        results["triton"] = error_text(exc)
    gen = torch.Generator(device="cuda").manual_seed(99)
    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))
    scale = 1.0 / math.sqrt(SHAPE[-1])
    out = {}
    for causal in ((True,) if quick else (True, False)):
        ours = torch.empty_like(q)
        peer = torch.empty_like(q)
        box = {}

        def run_peer(causal=causal, peer=peer):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                peer.copy_(sdpa(q, k, v, is_causal=causal))

        fns = {"cupric attention": lambda causal=causal, ours=ours: att.attention(
                   q, k, v, ours, causal=causal),
               "SDPA flash": run_peer}
        outs = [ours, peer]
        if triton_attention is not None:
            def run_triton(causal=causal):
                box["t"] = triton_attention(q, k, v, scale, causal)
            fns["Triton (tutorial-style)"] = run_triton
        run_peer()
        expected = peer.clone()
        errs = {}
        for (name, fn), o in zip(list(fns.items())[:2], outs):
            errs[name] = _check(torch, f"attention {name}", fn, o, expected, 2e-2)
        if triton_attention is not None:
            run_triton()
            torch.cuda.synchronize()
            errs["Triton (tutorial-style)"] = float((box["t"].float() - expected.float())
                                                    .abs().max())
            if errs["Triton (tutorial-style)"] > 2e-2:
                results["triton"] = f"wrong result: {errs['Triton (tutorial-style)']}"
                del fns["Triton (tutorial-style)"]
        times = _time(torch, fns, 5)
        b, h, s, d = SHAPE
        flop = 4.0 * b * h * s * s * d / (2 if causal else 1)
        rows = {name: {"ms": t * 1e3, "TFLOPs": flop / t / 1e12,
                       "max_abs_diff": errs.get(name),
                       "ratio_to_sdpa": ratio(times["SDPA flash"], t)}
                for name, t in times.items()}
        out["causal" if causal else "full"] = rows
    results["attention"] = out


def run(json_path: str | None = None, quick: bool = False) -> dict:
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import torch
        results["device"] = torch.cuda.get_device_name()
        results["torch"] = torch.__version__
    except Exception as exc:
        results["setup_error"] = error_text(exc)
        return finish(results, json_path, METHOD, [])
    for part in (_gemm, _attention):
        try:
            part(torch, results, quick) if part is _attention else part(torch, results)
        except Exception as exc:  # one part failing must not hide the other
            results[f"{part.__name__.strip('_')}_error"] = error_text(exc)
        torch.cuda.empty_cache()
    finish(results, json_path, METHOD, _tables(results))
    print_tables(results)
    return results


METHOD = __doc__.split("\n\n")[1] + " " + __doc__.split("\n\n")[2]


def _tables(results: dict) -> list:
    out = []
    cols = [("kernel", ""), ("ms", ".3f"), ("TFLOP/s", ".0f"), ("peer / cupric time", ".3f")]
    gemm = results.get("gemm_bf16_8192") or {}
    if gemm:
        rows = [[n, r["ms"], r["TFLOPs"], r.get("ratio_to_cublas")] for n, r in gemm.items()]
        out.append(table(f"bf16 GEMM {SIZE}^3 (f32 accumulation, bf16 out)", cols, rows,
                         "cupric: warp-level mma.sync m16n8k16 (gemm_tc); cuBLAS uses the "
                         "Hopper wgmma kernels."))
    for kind, rows in (results.get("attention") or {}).items():
        b, h, s, d = SHAPE
        out.append(table(f"attention forward, {kind}, batch {b}, {h} heads, seq {s}, "
                         f"head dim {d}, bf16",
                         [("kernel", ""), ("ms", ".3f"), ("TFLOP/s", ".0f"),
                          ("SDPA time / kernel time", ".3f")],
                         [[n, r["ms"], r["TFLOPs"], r["ratio_to_sdpa"]]
                          for n, r in rows.items()]))
    return out


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--quick", action="store_true", help="causal attention only")
    args = parser.parse_args(argv)
    results = run(args.json, args.quick)
    return 1 if any(key.endswith("error") for key in results) else 0


if __name__ == "__main__":
    sys.exit(main())
