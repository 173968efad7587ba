"""The Hopper bf16 GEMM written in cupric (`cupric.kernels.gemm_wgmma`: wgmma, TMA,
mbarriers) beside cuBLAS through PyTorch, in one process run, on an sm_90 GPU.

8192^3 bf16 with float32 accumulation and a bf16 result: the same random operands for
every contender, each result checked first (its output poisoned, then every element
against the float64 product), CUDA events on PyTorch's stream, 3 warm-up calls, the
median of 10 samples of 4 back-to-back calls after a lead-in call, the contenders taking
turns sample by sample (the order rotated). B is k x n row-major ("kn", cuBLAS: a @ b) or
n x k ("nk", cuBLAS: a @ b.T, the same memory).

    python3 benchmarks/gemm_wgmma.py [--json PATH] [--size N]
"""

from __future__ import annotations

import argparse
import statistics

from _common import assert_correct, device_samples, finish, print_tables, ratio, table

SIZE = 8192
WARMUP, TIMED, PER_SAMPLE = 3, 10, 4


def _contenders(torch, gemm_wgmma, a, b, bt, stream):
    """name -> (run, output, B layout) for cuBLAS and each cupric tiling."""
    out = {}
    c_torch = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)
    c_torch_t = torch.empty_like(c_torch)
    out["cuBLAS a @ b"] = (lambda: torch.matmul(a, b, out=c_torch), c_torch, "kn")
    out["cuBLAS a @ b.T"] = (lambda: torch.matmul(a, bt.T, out=c_torch_t), c_torch_t, "nk")
    configs = {"cupric kn 128x256 s4": ("kn", gemm_wgmma.Config(bn=256, stages=4)),
               "cupric kn 128x128 s6": ("kn", gemm_wgmma.Config(bn=128, stages=6)),
               "cupric nk 128x256 s4": ("nk", gemm_wgmma.Config(bn=256, stages=4))}
    a16 = a.view(torch.int16)
    for name, (layout, cfg) in configs.items():
        c = torch.empty_like(c_torch)
        bb = (b if layout == "kn" else bt).view(torch.int16)
        out[name] = ((lambda bb=bb, c=c, layout=layout, cfg=cfg: gemm_wgmma.matmul(
            a16, bb, c.view(torch.int16), b_layout=layout, config=cfg, stream=stream)),
            c, layout)
    return out


def run(json_path: str | None = None, size: int = SIZE, quick: bool = False) -> dict:
    import torch

    from cupric.kernels import gemm_wgmma

    results: dict = {"size": size}
    if quick:
        size = results["size"] = 4096
    results["device"] = torch.cuda.get_device_name()
    stream = torch.cuda.current_stream()
    torch.manual_seed(1234)
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    bt = b.T.contiguous()
    contenders = _contenders(torch, gemm_wgmma, a, b, bt, stream)
    reference = a.double() @ b.double()
    scale = float(reference.abs().max())
    rows = {}
    for name, (fn, out, layout) in contenders.items():
        try:
            rows[name] = {"check": assert_correct(f"{name} {size}^3", fn, out, reference,
                                                  outputs=[out], rtol=2e-2,
                                                  atol=2e-2 * scale)}
        except Exception as exc:  # noqa: BLE001 - recorded; the row is not timed
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    del reference
    torch.cuda.empty_cache()
    timed = [name for name in contenders if "error" not in rows[name]]
    for name in timed:
        for _ in range(WARMUP):
            contenders[name][0]()
    torch.cuda.synchronize()
    samples = device_samples(torch, {name: contenders[name][0] for name in timed}, TIMED,
                             PER_SAMPLE, stream)
    flop = 2.0 * size ** 3
    for name in timed:
        rows[name]["TFLOPs"] = flop / statistics.median(samples[name]) / 1e12
        rows[name]["seconds"] = samples[name]
    for name in timed:
        peer = "cuBLAS a @ b" if contenders[name][2] == "kn" else "cuBLAS a @ b.T"
        if peer in timed:
            rows[name]["vs_cublas"] = ratio(statistics.median(samples[peer]),
                                            statistics.median(samples[name]))
    results["rows"] = rows
    tables = [table(f"bf16 GEMM {size}^3 written in cupric (wgmma + TMA) beside cuBLAS",
                    [("contender", ""), ("TFLOP/s", ".1f"), ("x cuBLAS (same layout)", ".3f")],
                    [[name, row.get("TFLOPs"), row.get("vs_cublas")]
                     for name, row in rows.items()],
                    notes="cuBLAS through torch.matmul on bf16; ratios from one run.")]
    return finish(results, json_path, __doc__.split("\n\n")[1], tables)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--size", type=int, default=SIZE)
    args = parser.parse_args(argv)
    results = run(args.json, args.size)
    print_tables(results)
    return 1 if any("error" in row for row in results["rows"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
