"""GEMM through cupric.cublas beside PyTorch and CuPy, in one process run.

Two measurements:

* Rate of an 8192^3 GEMM in fp32, tf32, bf16 and fp16 (float32 accumulation): the same
  random operands (never zeros) for every library, CUDA events on the same stream,
  3 warm-up calls, the median of 10 samples of 4 back-to-back calls. The rows take
  turns sample by sample.
* Host cost of a 64x64 sgemm call: calls queued back to back in batches of 500 with a
  synchronize between batches (so the launch queue never fills and the GPU never sets
  the pace), rows interleaved batch by batch, median batch reported; beside it one
  continuous run of 20,000 calls per row (the method of peer_baseline.py).

    python3 benchmarks/gemm.py [--json PATH]
"""

from __future__ import annotations

import json
import statistics
import time

from _common import script_main

import numpy as np

SIZE = 8192
WARMUP, TIMED, PER_SAMPLE = 3, 10, 4
SMALL = 64
BATCHES, PER_BATCH, CONTINUOUS = 20, 500, 20000


def _rates(results: dict) -> None:
    import torch

    from cupric.cublas import api as cb

    stream = torch.cuda.current_stream()
    handle = cb.Handle.get(stream=stream.cuda_stream)
    torch.manual_seed(1234)
    rows = {}
    for name, dtype in (("fp32", torch.float32), ("tf32", torch.float32),
                        ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        try:
            rows[name] = _rate(torch, cb, handle, stream, name, dtype)
        except Exception as exc:  # one failing precision must not hide the others
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        torch.cuda.empty_cache()
    torch.backends.cuda.matmul.allow_tf32 = False
    results["gemm_8192"] = rows


def _rate(torch, cb, handle, stream, name, dtype) -> dict:
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=dtype)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=dtype)
    c_torch = torch.empty(SIZE, SIZE, device="cuda", dtype=dtype)
    c_ours = torch.empty(SIZE, SIZE, device="cuda", dtype=dtype)
    precision = "tf32" if name == "tf32" else None

    def run_torch():
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        torch.matmul(a, b, out=c_torch)

    def run_ours():
        cb.matmul(a, b, out=c_ours, precision=precision, handle=handle)

    samples = {"torch": [], "cupric": []}
    for fn in (run_torch, run_ours):
        for _ in range(WARMUP):
            fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(TIMED):
        for key, fn in (("torch", run_torch), ("cupric", run_ours)):
            # A few calls per sample: each library's host work for call i+1 overlaps the
            # GPU's work on call i, as in a real training step, for both rows alike.
            start.record(stream)
            for _ in range(PER_SAMPLE):
                fn()
            end.record(stream)
            end.synchronize()
            samples[key].append(start.elapsed_time(end) / 1e3 / PER_SAMPLE)
    flop = 2.0 * SIZE ** 3
    tf_torch = flop / statistics.median(samples["torch"]) / 1e12
    tf_ours = flop / statistics.median(samples["cupric"]) / 1e12
    # Same inputs, same precision: the results must agree (relative max difference).
    diff = (c_ours.float() - c_torch.float()).abs().max().item()
    scale = c_torch.float().abs().max().item()
    return {"cupric_TFLOPs": tf_ours, "torch_TFLOPs": tf_torch, "ratio": tf_ours / tf_torch,
            "max_rel_diff_vs_torch": diff / scale}


def _host_cost(results: dict) -> None:
    import cupy as cp
    import torch

    from cupric import runtime as rt
    from cupric.cublas import api as cb
    from cupric.runtime.memory import empty, to_device

    torch.backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng(7)
    host_a = rng.standard_normal((SMALL, SMALL)).astype(np.float32)
    host_b = rng.standard_normal((SMALL, SMALL)).astype(np.float32)
    a, b = to_device(host_a), to_device(host_b)
    c = empty((SMALL, SMALL), np.float32)
    af, bf, cf = a.T, b.T, c.T  # column-major views for the BLAS-level call
    handle = cb.Handle.get()
    ta, tb = torch.from_numpy(host_a).cuda(), torch.from_numpy(host_b).cuda()
    tc = torch.empty_like(ta)
    ca, cbuf = cp.asarray(host_a), cp.asarray(host_b)
    cc = cp.empty_like(ca)
    torch.cuda.synchronize()
    cp.cuda.Device().synchronize()
    rt.synchronize()

    def sync_all():
        rt.synchronize()

    rows = [
        ("cupric matmul(a, b, out=c)", lambda: cb.matmul(a, b, out=c)),
        ("cupric gemm (BLAS level)", lambda: cb.gemm("N", "N", 1.0, af, bf, 0.0, cf,
                                                     handle=handle)),
        ("cupric matmul(a, b) allocating", lambda: cb.matmul(a, b)),
        ("torch A @ B", lambda: ta @ tb),
        ("torch matmul(out=)", lambda: torch.matmul(ta, tb, out=tc)),
        ("cupy A @ B", lambda: ca @ cbuf),
        ("cupy matmul(out=)", lambda: cp.matmul(ca, cbuf, out=cc)),
    ]
    # Correctness of the cupric rows before timing.
    cb.matmul(a, b, out=c)
    expect = host_a.astype(np.float64) @ host_b
    got = c.to_numpy()
    assert np.abs(got - expect).max() < 1e-3 * np.abs(expect).max(), "cupric 64x64 wrong"
    for _, fn in rows:
        for _ in range(200):
            fn()
    sync_all()
    samples = {name: [] for name, _ in rows}
    for _ in range(BATCHES):
        for name, fn in rows:
            t0 = time.perf_counter()
            for _ in range(PER_BATCH):
                fn()
            t1 = time.perf_counter()
            sync_all()
            samples[name].append((t1 - t0) / PER_BATCH * 1e6)
    out = {}
    for name, fn in rows:
        t0 = time.perf_counter()
        for _ in range(CONTINUOUS):
            fn()
        t1 = time.perf_counter()
        sync_all()
        out[name] = {"us": statistics.median(samples[name]),
                     "continuous_us": (t1 - t0) / CONTINUOUS * 1e6}
    results["sgemm_64_host_us"] = out


def run(json_path: str | None = None) -> dict:
    """Measure, print the table, and return (and optionally write) the results."""
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import torch
        results["device"] = torch.cuda.get_device_name()
        results["torch"] = torch.__version__
    except Exception as exc:  # reported in the table and JSON, never hidden
        results["setup_error"] = f"{type(exc).__name__}: {exc}"
    for part in (_rates, _host_cost):
        try:
            part(results)
        except Exception as exc:
            results[f"{part.__name__.strip('_')}_error"] = f"{type(exc).__name__}: {exc}"[:500]
    from cupric.cublas import lib
    results["cublas_library"] = lib.binding.path  # known once the library was loaded
    _print(results)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


def _print(results: dict) -> None:
    print(f"device: {results.get('device')}  torch {results.get('torch')}")
    rates = results.get("gemm_8192", {})
    if rates:
        print(f"{'8192^3 GEMM':12s} {'cupric TF/s':>12s} {'torch TF/s':>12s} {'ratio':>7s}"
              f" {'max rel diff':>13s}")
        for name, row in rates.items():
            if "error" in row:
                print(f"{name:12s} error: {row['error']}")
                continue
            print(f"{name:12s} {row['cupric_TFLOPs']:12.1f} {row['torch_TFLOPs']:12.1f} "
                  f"{row['ratio']:7.3f} {row['max_rel_diff_vs_torch']:13.2e}")
    host = results.get("sgemm_64_host_us", {})
    if host:
        print(f"{'64x64 sgemm host cost':34s} {'median us':>10s} {'continuous us':>14s}")
        for name, row in host.items():
            print(f"{name:34s} {row['us']:10.2f} {row['continuous_us']:14.2f}")
    for key, value in results.items():
        if key.endswith("error"):
            print(f"{key}: {value}")


main = script_main(run, __doc__.splitlines()[0], "gemm_8192")


if __name__ == "__main__":
    raise SystemExit(main())
