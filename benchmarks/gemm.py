"""GEMM through cupric.cublas beside PyTorch and CuPy, in one process run.

Two measurements:

* Rate of an 8192^3 GEMM in fp32, tf32, bf16 and fp16 (float32 accumulation): the same
  random operands (never zeros) for every library, CUDA events on the same stream,
  3 warm-up calls, the median of 10 samples of 4 back-to-back calls after a lead-in
  call (so that no library's host work shows as GPU time). The rows take turns sample by
  sample, which one goes first alternating.
* Host cost of a 64x64 sgemm call: calls queued back to back in batches of 500 with a
  synchronize between batches, outside the timed region (so the launch queue never
  fills and the GPU never sets the pace), rows interleaved batch by batch, median batch
  reported; beside it one continuous run of 20,000 calls per row. Rows: the calls a
  user writes (cupric `matmul(a, b, out=c)`, handle-level `gemm`, allocating `matmul`;
  PyTorch `A @ B`, `mm(out=)`, `matmul(out=)`; CuPy `A @ B`, `matmul(out=)`), and the
  floors: cublasSgemm through cffi from Python with no checks, and cublasSgemm and
  cublasLtMatmul (algorithm cached) called from C in a loop, which is cuBLAS's own host
  work with nothing around it.

    python3 benchmarks/gemm.py [--json PATH] [--host-only]
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from _common import assert_correct, device_samples, ratio, table

SIZE = 8192
WARMUP, TIMED, PER_SAMPLE = 3, 10, 4
SMALL = 64
BATCHES, PER_BATCH, CONTINUOUS = 20, 500, 20000


def _rates(results: dict, quick: bool = False) -> None:
    import torch

    from cupric.cublas import api as cb

    stream = torch.cuda.current_stream()
    handle = cb.Handle.get(stream=stream.cuda_stream)
    torch.manual_seed(1234)
    rows = {}
    dtypes = (("fp32", torch.float32), ("tf32", torch.float32), ("bf16", torch.bfloat16),
              ("fp16", torch.float16))
    for name, dtype in (dtypes[2:3] if quick else dtypes):
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

    # Correct before timing: each side's product, its output poisoned first, against the
    # float64 product of the same operands (every element, on the device).
    reference = a.double() @ b.double()
    scale = float(reference.abs().max())
    tol = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 2e-2, "fp16": 1e-2}[name]
    checks = {key: assert_correct(f"{name} {SIZE}^3 {key}", fn, out, reference, outputs=[out],
                                  rtol=tol, atol=tol * scale)
              for key, fn, out in (("torch", run_torch, c_torch), ("cupric", run_ours, c_ours))}
    del reference
    for fn in (run_torch, run_ours):
        for _ in range(WARMUP):
            fn()
    torch.cuda.synchronize()
    samples = device_samples(torch, {"torch": run_torch, "cupric": run_ours}, TIMED,
                             PER_SAMPLE, stream)
    flop = 2.0 * SIZE ** 3
    tf_torch = flop / statistics.median(samples["torch"]) / 1e12
    tf_ours = flop / statistics.median(samples["cupric"]) / 1e12
    # Same inputs, same precision: how far apart the two results are (for the record).
    diff = (c_ours.float() - c_torch.float()).abs().max().item()
    scale = c_torch.float().abs().max().item()
    return {"cupric_TFLOPs": tf_ours, "torch_TFLOPs": tf_torch, "ratio": tf_ours / tf_torch,
            "max_rel_diff_vs_torch": diff / scale,
            "check_max_rel_diff": {k: v["max_rel_diff"] for k, v in checks.items()}}


# The cuBLAS entry points called from C in a loop: the floor of any caller's host cost.
_FLOOR_SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#include <time.h>
typedef int (*gemm_fn)(void *, int, int, int, int, int, const void *, const void *, int,
                       const void *, int, const void *, void *, int);
typedef int (*lt_fn)(void *, void *, const void *, const void *, void *, const void *,
                     void *, const void *, const void *, void *, void *, void *,
                     const void *, void *, size_t, void *);
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
double loop_sgemm(uintptr_t fn, uintptr_t h, int n, uintptr_t alpha, uintptr_t a,
                  uintptr_t b, uintptr_t beta, uintptr_t c, int calls, int *status) {
    gemm_fn f = (gemm_fn)fn; int s = 0; double t0 = now();
    for (int i = 0; i < calls; i++)
        s |= f((void *)h, 0, 0, n, n, n, (const void *)alpha, (const void *)a, n,
               (const void *)b, n, (const void *)beta, (void *)c, n);
    *status = s; return now() - t0;
}
double loop_lt(uintptr_t fn, uintptr_t lt, uintptr_t desc, uintptr_t alpha, uintptr_t a,
               uintptr_t la, uintptr_t b, uintptr_t lb, uintptr_t beta, uintptr_t c,
               uintptr_t lc, uintptr_t ld, uintptr_t algo, uintptr_t ws, size_t wsb,
               uintptr_t stream, int calls, int *status) {
    lt_fn f = (lt_fn)fn; int s = 0; double t0 = now();
    for (int i = 0; i < calls; i++)
        s |= f((void *)lt, (void *)desc, (const void *)alpha, (const void *)a, (void *)la,
               (const void *)b, (void *)lb, (const void *)beta, (const void *)c, (void *)lc,
               (void *)c, (void *)ld, (const void *)algo, (void *)ws, wsb, (void *)stream);
    *status = s; return now() - t0;
}
"""


def _floor_library():
    """The loops above, compiled with the system C compiler (None without one)."""
    import ctypes
    import os
    import shutil
    import subprocess
    import tempfile
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    d = tempfile.mkdtemp(prefix="cupric-gemm-floor-")
    src, so = os.path.join(d, "floor.c"), os.path.join(d, "floor.so")
    with open(src, "w") as f:
        f.write(_FLOOR_SOURCE)
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", so, src], check=True,
                   capture_output=True)
    lib = ctypes.CDLL(so)
    lib.loop_sgemm.restype = ctypes.c_double
    lib.loop_lt.restype = ctypes.c_double
    return lib


def _floor_rows(cb, h, a, b, c) -> list:
    """C loops over cublasSgemm and over cublasLtMatmul with the algorithm cached (the
    plan cupric's compiled path makes), on the same column-major operands."""
    import ctypes

    from cupric.cublas import _fastgemm, lib
    from cupric.cublas.handle import host_scalar
    floor = _floor_library()
    if floor is None:
        return [], []
    U = ctypes.c_uint64
    status = ctypes.c_int(0)
    keep_a, pa = host_scalar("S", 1.0, "alpha")
    keep_b, pb = host_scalar("S", 0.0, "beta")
    n = SMALL
    sgemm = int(lib.ffi.cast("uintptr_t", lib.lib.cublasSgemm_v2))

    def checked(t):
        if status.value:
            raise RuntimeError(f"cuBLAS status {status.value} in the C loop")
        return t

    keep = [keep_a, keep_b]
    rows = [("cuBLAS floor: cublasSgemm from C",
             lambda calls: checked(floor.loop_sgemm(U(sgemm), U(h.ptr), n, U(pa), U(a.ptr),
                                                    U(b.ptr), U(pb), U(c.ptr), calls,
                                                    ctypes.byref(status))))]
    route = _fastgemm._lt_route(h, 0, 0, n, n, n, n, n, n, (a.ptr, b.ptr, c.ptr))
    if route is not None:
        f, plan = route
        rows.append(("cuBLAS floor: cublasLtMatmul, cached algo, from C",
                     lambda calls: checked(floor.loop_lt(
                         U(f["lt"]), U(f["lt_handle"]), U(f["desc"]), U(pa), U(a.ptr),
                         U(f["la"]), U(b.ptr), U(f["lb"]), U(pb), U(c.ptr), U(f["lc"]),
                         U(f["ld"]), U(f["algo"]), U(f["ws"]), ctypes.c_size_t(f["wsb"]),
                         U(f["stream"]), calls, ctypes.byref(status)))))
        keep.append(plan)  # the descriptors the loop passes
    return rows, keep


def _host_cost(results: dict) -> None:
    import cupy as cp
    import torch

    from cupric import runtime as rt
    from cupric.cublas import _fastgemm
    from cupric.cublas import api as cb
    from cupric.cublas.handle import fast_function, host_scalar
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

    # Correctness of every cupric form before timing (the first calls make the plans).
    expect = host_a.astype(np.float64) @ host_b
    scale = np.abs(expect).max()
    for form in range(3):
        c.zero()
        if form == 0:
            got = cb.matmul(a, b, out=c)
        elif form == 1:
            cb.gemm("N", "N", 1.0, bf, af, 0.0, cf, handle=handle)  # c.T = b.T @ a.T
            got = c
        else:
            got = cb.matmul(a, b)
        assert np.abs(got.to_numpy() - expect).max() < 1e-5 * scale, "cupric 64x64 wrong"
    fast = _fastgemm.load(build=False)
    plans = [_fastgemm.info(p) for p in handle._fast_plans.values()] if fast else []
    results["sgemm_64_route"] = {
        "compiled_path": fast is not None, "compiled_error": _fastgemm.build_error(),
        "cublaslt_plans": sum(p["lt"] for p in plans), "plans": len(plans)}

    # The peers too, their outputs poisoned first (the allocating ones return theirs).
    peer_checks = (("torch A @ B", lambda: ta @ tb, None), ("torch mm(out=)",
                   lambda: torch.mm(ta, tb, out=tc), tc),
                   ("torch matmul(out=)", lambda: torch.matmul(ta, tb, out=tc), tc),
                   ("cupy A @ B", lambda: ca @ cbuf, None),
                   ("cupy matmul(out=)", lambda: cp.matmul(ca, cbuf, out=cc), cc))
    for label, fn, out in peer_checks:
        box = {}
        assert_correct(f"64x64 sgemm {label}", lambda fn=fn, box=box: box.setdefault("r", fn()),
                       lambda box=box: box["r"], expect, outputs=[out] if out is not None else [],
                       rtol=1e-5, atol=1e-5 * scale)
    sgemm = fast_function("cublasSgemm_v2")
    keep_a, pa = host_scalar("S", 1.0, "alpha")
    keep_b, pb = host_scalar("S", 0.0, "beta")
    raw = handle.ptr
    rows = [
        ("cupric matmul(a, b, out=c)", lambda: cb.matmul(a, b, out=c)),
        ("cupric gemm (BLAS level)", lambda: cb.gemm("N", "N", 1.0, bf, af, 0.0, cf,
                                                     handle=handle)),
        ("cupric matmul(a, b) allocating", lambda: cb.matmul(a, b)),
        ("cublasSgemm through cffi (no checks)",
         lambda: sgemm(raw, 0, 0, SMALL, SMALL, SMALL, pa, bf.ptr, SMALL, af.ptr, SMALL, pb,
                       cf.ptr, SMALL)),
    ]
    c_rows, keep_plans = _floor_rows(cb, handle, bf, af, cf)  # keep_plans: until the end
    rows += [
        ("torch A @ B", lambda: ta @ tb),
        ("torch mm(out=)", lambda: torch.mm(ta, tb, out=tc)),
        ("torch matmul(out=)", lambda: torch.matmul(ta, tb, out=tc)),
        ("cupy A @ B", lambda: ca @ cbuf),
        ("cupy matmul(out=)", lambda: cp.matmul(ca, cbuf, out=cc)),
    ]
    # Every row is a batch of PER_BATCH calls: Python rows call PER_BATCH times, the C
    # rows loop PER_BATCH times inside one call.
    def python_batch(fn):
        def batch(calls):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            return time.perf_counter() - t0
        return batch

    batches = [(name, python_batch(fn)) for name, fn in rows[:4]] + c_rows + [
        (name, python_batch(fn)) for name, fn in rows[4:]]
    for _, batch in batches:
        batch(200)
    rt.synchronize()
    samples = {name: [] for name, _ in batches}
    for _ in range(BATCHES):
        for name, batch in batches:
            seconds = batch(PER_BATCH)
            rt.synchronize()  # outside the timed region, the same for every row
            samples[name].append(seconds / PER_BATCH * 1e6)
    out = {}
    for name, batch in batches:
        seconds = batch(CONTINUOUS)
        rt.synchronize()
        out[name] = {"us": statistics.median(samples[name]),
                     "continuous_us": seconds / CONTINUOUS * 1e6}
    results["sgemm_64_host_us"] = out
    del keep_plans


def run(json_path: str | None = None, host_only: bool = False, quick: bool = False) -> dict:
    """Measure, print the table, and return (and optionally write) the results.

    `host_only` skips the 8192^3 rates (the host-cost table alone takes seconds)."""
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import torch
        results["device"] = torch.cuda.get_device_name()
        results["torch"] = torch.__version__
        import cupy
        results["cupy"] = cupy.__version__
    except Exception as exc:  # reported in the table and JSON, never hidden
        results["setup_error"] = f"{type(exc).__name__}: {exc}"
    for part in ((_host_cost,) if host_only else (_rates, _host_cost)):
        try:
            if part is _rates:
                part(results, quick)
            else:
                part(results)
        except Exception as exc:
            results[f"{part.__name__.strip('_')}_error"] = f"{type(exc).__name__}: {exc}"[:500]
    from cupric.cublas import lib
    results["cublas_library"] = lib.binding.path  # known once the library was loaded
    results["title"] = "GEMM through cupric.cublas"
    results["method"] = METHOD
    results["tables"] = _tables(results)
    _print(results)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


METHOD = (
    f"{SIZE}^3 products: the same random operands for both libraries, each side's result "
    "checked against the float64 product before timing; CUDA events on one stream, the "
    f"median of {TIMED} samples of {PER_SAMPLE} back-to-back calls after a lead-in call, "
    "the library that goes first alternating. 64x64 float32 host cost: calls queued back to "
    f"back in {BATCHES} batches of {PER_BATCH}, a synchronize between batches outside the "
    "timed region, rows interleaved, median batch; every row checked against NumPy first.")


def _tables(results: dict) -> list:
    out = []
    rates = results.get("gemm_8192") or {}
    if rates:
        rows = [[name, r.get("cupric_TFLOPs"), r.get("torch_TFLOPs"), r.get("ratio"),
                 r.get("max_rel_diff_vs_torch"), r.get("error", "")] for name, r in rates.items()]
        out.append(table(f"{SIZE}^3 GEMM (TFLOP/s)",
                         [("dtype", ""), ("cupric", ".1f"), ("PyTorch", ".1f"),
                          ("cupric / PyTorch", ".3f"), ("max rel. diff.", ".1e"),
                          ("error", "")], rows))
    host = results.get("sgemm_64_host_us") or {}
    if host:
        # Each peer beside the cupric form doing the same work: allocating its result
        # (`A @ B`) or writing a given one.
        into = host.get("cupric matmul(a, b, out=c)", {}).get("us")
        allocating = host.get("cupric matmul(a, b) allocating", {}).get("us")
        rows = []
        for name, r in host.items():
            peer = name.startswith(("torch", "cupy"))
            ours = allocating if "A @ B" in name else into
            rows.append([name, r["us"], r["continuous_us"],
                         ratio(r["us"], ours) if peer else None])
        out.append(table("64x64 float32 matmul: host cost per call (us)",
                         [("call", ""), ("median batch", ".2f"), ("continuous", ".2f"),
                          ("peer / cupric doing the same work", ".2f")], rows,
                         "`A @ B` rows allocate their result and are compared with cupric's "
                         "allocating `matmul(a, b)`; the others with `matmul(a, b, out=c)`. "
                         "Floors: cuBLAS entry points called with no checks (from Python "
                         "through cffi, or from C in a loop)."))
    return out


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
        route = results.get("sgemm_64_route", {})
        print(f"cupric compiled path: {route.get('compiled_path')} "
              f"({route.get('cublaslt_plans')} of {route.get('plans')} plans on cuBLASLt)"
              + (f"; {route['compiled_error']}" if route.get("compiled_error") else ""))
        print(f"{'64x64 sgemm host cost':50s} {'median us':>10s} {'continuous us':>14s}")
        for name, row in host.items():
            print(f"{name:50s} {row['us']:10.2f} {row['continuous_us']:14.2f}")
    for key, value in results.items():
        if key.endswith("error"):
            print(f"{key}: {value}")


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--host-only", action="store_true",
                        help="only the 64x64 host-cost table (skip the 8192^3 rates)")
    args = parser.parse_args(argv)
    results = run(args.json, host_only=args.host_only)
    failed = any(k.endswith("error") and results[k] for k in results) or any(
        "error" in row for row in results.get("gemm_8192", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
