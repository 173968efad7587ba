"""saxpy and vecadd on 2^28 float32 elements: cupric kernels beside the same kernels in
CUDA C (CuPy RawKernel, NVRTC) and numba-cuda, in one process, on one stream.

Every kernel runs on the same CuPy-allocated arrays (cupric and numba take them through
`__cuda_array_interface__`), timed with CUDA events: 3 warm-up launches, then 20 timed
launches per kernel, alternating, median reported. Bandwidth counts 3 arrays of 2^28
floats moved per launch (saxpy: read x, read y, write y; vecadd: read x, y, write out).
Besides the plain one-element-per-thread kernel (the same code as the peers), cupric's
"x4" variant gives each thread four elements a grid apart (four independent, coalesced
loads in flight per thread), and "v4" four neighbouring elements, which the compiler
turns into 128-bit loads and stores because the launch found the arrays 16-byte
aligned. Goal on an H200: >= 1.0x CUDA C and >= 3600 GB/s.

    python3 benchmarks/saxpy.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

import cupric
from cupric.device import grid, gridsize
from cupric.types import Array, f32

N = 1 << 28
BLOCK = 256
WARMUP = 3
REPEATS = 20


@cupric.kernel
def saxpy(a: f32, x: Array[f32, 1, "C"], y: Array[f32, 1, "C"]):
    i = grid(1)
    if i < len(x):
        y[i] = a * x[i] + y[i]


@cupric.kernel
def saxpy_x4(a: f32, x: Array[f32, 1, "C"], y: Array[f32, 1, "C"]):
    i = grid(1)
    step = gridsize(1)
    n = len(x)
    if i + 3 * step < n:
        x0 = x[i]
        x1 = x[i + step]
        x2 = x[i + 2 * step]
        x3 = x[i + 3 * step]
        y0 = y[i]
        y1 = y[i + step]
        y2 = y[i + 2 * step]
        y3 = y[i + 3 * step]
        y[i] = a * x0 + y0
        y[i + step] = a * x1 + y1
        y[i + 2 * step] = a * x2 + y2
        y[i + 3 * step] = a * x3 + y3
    else:
        for j in range(i, n, step):
            y[j] = a * x[j] + y[j]


@cupric.kernel
def saxpy_v4(a: f32, x: Array[f32, 1, "C"], y: Array[f32, 1, "C"]):
    i = grid(1) * 4
    n = len(x)
    if i + 3 < n:
        x0 = x[i]
        x1 = x[i + 1]
        x2 = x[i + 2]
        x3 = x[i + 3]
        y0 = y[i]
        y1 = y[i + 1]
        y2 = y[i + 2]
        y3 = y[i + 3]
        y[i] = a * x0 + y0
        y[i + 1] = a * x1 + y1
        y[i + 2] = a * x2 + y2
        y[i + 3] = a * x3 + y3
    else:
        for j in range(i, n):
            y[j] = a * x[j] + y[j]


@cupric.kernel
def vecadd_v4(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"], out: Array[f32, 1, "C"]):
    i = grid(1) * 4
    n = len(x)
    if i + 3 < n:
        a0 = x[i]
        a1 = x[i + 1]
        a2 = x[i + 2]
        a3 = x[i + 3]
        b0 = y[i]
        b1 = y[i + 1]
        b2 = y[i + 2]
        b3 = y[i + 3]
        out[i] = a0 + b0
        out[i + 1] = a1 + b1
        out[i + 2] = a2 + b2
        out[i + 3] = a3 + b3
    else:
        for j in range(i, n):
            out[j] = x[j] + y[j]


@cupric.kernel
def vecadd(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"], out: Array[f32, 1, "C"]):
    i = grid(1)
    if i < len(x):
        out[i] = x[i] + y[i]


@cupric.kernel
def vecadd_x4(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"], out: Array[f32, 1, "C"]):
    i = grid(1)
    step = gridsize(1)
    n = len(x)
    if i + 3 * step < n:
        a0 = x[i]
        a1 = x[i + step]
        a2 = x[i + 2 * step]
        a3 = x[i + 3 * step]
        b0 = y[i]
        b1 = y[i + step]
        b2 = y[i + 2 * step]
        b3 = y[i + 3 * step]
        out[i] = a0 + b0
        out[i + step] = a1 + b1
        out[i + 2 * step] = a2 + b2
        out[i + 3 * step] = a3 + b3
    else:
        for j in range(i, n, step):
            out[j] = x[j] + y[j]


CUDA_C = r'''
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y,
                                 long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void vecadd(const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ out, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}
'''


def _time(cp, stream, fn) -> float:
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3


def run(json_path: str | None = None) -> dict:
    """Measure; returns GB/s per implementation and the ratios to CUDA C."""
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    s = stream.ptr
    rng = cp.random.default_rng(1)
    x = rng.random(N, dtype=cp.float32)
    y0 = rng.random(N, dtype=cp.float32)
    y = y0.copy()
    out = cp.empty_like(x)
    a = np.float32(2.5)
    blocks = (N + BLOCK - 1) // BLOCK
    blocks4 = (N // 4 + BLOCK - 1) // BLOCK
    module = cp.RawModule(code=CUDA_C)
    c_saxpy, c_vecadd = module.get_function("saxpy"), module.get_function("vecadd")

    impls = {
        "saxpy": {
            "cupric": lambda: saxpy[blocks, BLOCK, s](a, x, y),
            "cupric_x4": lambda: saxpy_x4[blocks4, BLOCK, s](a, x, y),
            "cupric_v4": lambda: saxpy_v4[blocks4, BLOCK, s](a, x, y),
            "cuda_c": lambda: c_saxpy((blocks,), (BLOCK,), (a, x, y, np.int64(N)),
                                      stream=stream),
        },
        "vecadd": {
            "cupric": lambda: vecadd[blocks, BLOCK, s](x, y, out),
            "cupric_x4": lambda: vecadd_x4[blocks4, BLOCK, s](x, y, out),
            "cupric_v4": lambda: vecadd_v4[blocks4, BLOCK, s](x, y, out),
            "cuda_c": lambda: c_vecadd((blocks,), (BLOCK,), (x, y, out, np.int64(N)),
                                       stream=stream),
        },
    }
    try:
        if not hasattr(np, "row_stack"):
            np.row_stack = np.vstack  # numba-cuda 0.30 with NumPy 2.5
        from numba import cuda

        @cuda.jit
        def n_saxpy(a, x, y):
            i = cuda.grid(1)
            if i < x.size:
                y[i] = a * x[i] + y[i]

        @cuda.jit
        def n_vecadd(x, y, out):
            i = cuda.grid(1)
            if i < x.size:
                out[i] = x[i] + y[i]

        ns = cuda.external_stream(s)
        nx, ny, nout = (cuda.as_cuda_array(v) for v in (x, y, out))
        impls["saxpy"]["numba_cuda"] = lambda: n_saxpy[blocks, BLOCK, ns](a, nx, ny)
        impls["vecadd"]["numba_cuda"] = lambda: n_vecadd[blocks, BLOCK, ns](nx, ny, nout)
    except Exception as exc:  # reported, the other peers still run
        print(f"numba-cuda unavailable: {exc}")

    cp.cuda.Device().synchronize()  # inputs were made on the legacy default stream
    results: dict = {"n": N, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    nbytes = 3 * N * 4
    for bench, fns in impls.items():
        for fn in fns.values():
            for _ in range(WARMUP):
                fn()
        stream.synchronize()
        times = {name: [] for name in fns}
        for _ in range(REPEATS):
            for name, fn in fns.items():
                times[name].append(_time(cp, stream, fn))
        gbps = {name: nbytes / statistics.median(t) / 1e9 for name, t in times.items()}
        entry = {f"{name}_GBps": v for name, v in gbps.items()}
        entry["cupric_vs_cuda_c"] = gbps["cupric"] / gbps["cuda_c"]
        entry["cupric_x4_vs_cuda_c"] = gbps["cupric_x4"] / gbps["cuda_c"]
        entry["cupric_v4_vs_cuda_c"] = gbps["cupric_v4"] / gbps["cuda_c"]
        results[bench] = entry

    # Correctness of what was timed (y was updated in place by every saxpy launch). The
    # stream is non-blocking: order CuPy's default-stream work explicitly.
    cp.cuda.Device().synchronize()
    y[...] = y0
    cp.cuda.Device().synchronize()
    saxpy_x4[blocks4, BLOCK, s](a, x, y)
    vecadd_x4[blocks4, BLOCK, s](x, y0, out)
    stream.synchronize()
    assert cp.allclose(y, a * x + y0, rtol=1e-5, atol=1e-6)
    assert cp.array_equal(out, x + y0)
    y[...] = y0
    out[...] = 0
    cp.cuda.Device().synchronize()
    saxpy_v4[blocks4, BLOCK, s](a, x, y)
    vecadd_v4[blocks4, BLOCK, s](x, y0, out)
    stream.synchronize()
    assert cp.allclose(y, a * x + y0, rtol=1e-5, atol=1e-6)
    assert cp.array_equal(out, x + y0)
    for name, kern in (("saxpy_v4", saxpy_v4), ("vecadd_v4", vecadd_v4)):
        ptx = kern.inspect_ptx(None)
        results[f"{name}_has_128bit_loads"] = ".v4.f32" in ptx
    results["launch_us"] = _launch_overhead(cp, stream)
    _print(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


def _launch_overhead(cp, stream) -> dict:
    """Host time per launch of saxpy on 1024 elements (4 arguments): cupric with its own
    DeviceBuffers and with CuPy arrays (through the CUDA Array Interface), beside CuPy's
    RawKernel; 20000 back-to-back launches after 200 warm-up ones."""
    from cupric.runtime import memory

    n = 1024
    hx = np.ones(n, np.float32)
    dx, dy = memory.to_device(hx), memory.to_device(hx)
    cx, cy = cp.ones(n, cp.float32), cp.ones(n, cp.float32)
    module = cp.RawModule(code=CUDA_C)
    c_saxpy = module.get_function("saxpy")
    a = np.float32(1.0)
    s = stream.ptr
    import time

    def measure(fn, repeats=20000):
        for _ in range(200):
            fn()
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        t1 = time.perf_counter()
        stream.synchronize()
        return (t1 - t0) / repeats * 1e6

    launch = saxpy[4, 256, s]
    return {
        "cupric_devicebuffer": measure(lambda: launch(a, dx, dy)),
        "cupric_devicebuffer_indexing_each_time": measure(lambda: saxpy[4, 256, s](a, dx, dy)),
        "cupric_cupy_arrays": measure(lambda: launch(a, cx, cy), 5000),
        "cupy_rawkernel": measure(lambda: c_saxpy((4,), (256,), (a, cx, cy, np.int64(n)),
                                                  stream=stream)),
    }


def _print(results: dict) -> None:
    print(f"saxpy / vecadd, 2^28 f32 on {results['device']} (GB/s, 3 arrays moved)")
    for bench in ("saxpy", "vecadd"):
        entry = results[bench]
        row = "  ".join(f"{k[:-5]} {v:7.0f}" for k, v in entry.items() if k.endswith("_GBps"))
        print(f"  {bench:7s} {row}   cupric/C {entry['cupric_vs_cuda_c']:.3f}  "
              f"x4/C {entry['cupric_x4_vs_cuda_c']:.3f}  v4/C {entry['cupric_v4_vs_cuda_c']:.3f}")
    print("  host time per launch (us): " + ", ".join(
        f"{k} {v:.2f}" for k, v in results.get("launch_us", {}).items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    run(parser.parse_args().json)
