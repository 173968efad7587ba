"""saxpy and vecadd on 2^28 float32 elements: cupric kernels beside the same kernels in
CUDA C (CuPy RawKernel, NVRTC) and numba-cuda, in one process, on one stream.

Every contender runs on the same CuPy-allocated arrays (cupric and numba take them through
`__cuda_array_interface__`) with the same launch geometry. Three forms, each written in
cupric and in CUDA C: one element per thread (numba-cuda too), "x4" (four elements a grid
apart per thread: four independent coalesced loads in flight) and "v4" (four neighbouring
elements per thread: one 128-bit access per array; cupric merges the four accesses because
the launch found the arrays 16-byte aligned, the C kernel uses float4). "library" is
`cupric.kernels.saxpy`/`vecadd` (grid-stride kernels, two float4-wide groups per trip, on
the grid the library picks: one covering the array once); "library_kernel_one_trip" is its
kernel launched on the geometry of v4, to tell the grid size apart from the code.

Timing, CUDA events, device time only: each sample is one lead-in call, then two events
around BATCH calls; the lead-in keeps the GPU busy while the host queues the events and
the batch, so no contender's host cost (Python, argument checks, the CUDA Array Interface
dict) is timed as idle GPU time. REPEATS rounds, the order of the contenders rotated
every round, medians reported, and per round the paired ratio to the CUDA C twin (its
median and spread say whether a gap is noise). Also reported: "idle" -- one launch from
an idle stream between two events, the method of earlier versions of this script, which
counts the host's launch cost as kernel time. Bandwidth counts 3 arrays of 2^28 floats
per call (saxpy: read x, read y, write y; vecadd: read x, y, write out).
Goal on an H200: >= 1.0x CUDA C and >= 3600 GB/s.

    python3 benchmarks/saxpy.py [--json PATH] [--dump DIR]

``--dump DIR`` writes the PTX and cubin cupric loads for the one-element kernels (for
`cuobjdump -sass`), to compare with the CUDA C kernel's.
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

import cupric
from cupric.device import grid, gridsize
from cupric.types import Array, f32

from _common import EventTimer, assert_on_device, table

N = 1 << 28
BLOCK = 256
WARMUP = 3
REPEATS = 30
BATCH = 4


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


CUDA_C = r"""
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
extern "C" __global__ void saxpy_x4(float a, const float* __restrict__ x,
                                    float* __restrict__ y, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  long step = (long)blockDim.x * gridDim.x;
  if (i + 3 * step < n) {
    float x0 = x[i], x1 = x[i + step], x2 = x[i + 2 * step], x3 = x[i + 3 * step];
    float y0 = y[i], y1 = y[i + step], y2 = y[i + 2 * step], y3 = y[i + 3 * step];
    y[i] = a * x0 + y0;
    y[i + step] = a * x1 + y1;
    y[i + 2 * step] = a * x2 + y2;
    y[i + 3 * step] = a * x3 + y3;
  } else {
    for (long j = i; j < n; j += step) y[j] = a * x[j] + y[j];
  }
}
extern "C" __global__ void vecadd_x4(const float* __restrict__ x, const float* __restrict__ y,
                                     float* __restrict__ out, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  long step = (long)blockDim.x * gridDim.x;
  if (i + 3 * step < n) {
    float a0 = x[i], a1 = x[i + step], a2 = x[i + 2 * step], a3 = x[i + 3 * step];
    float b0 = y[i], b1 = y[i + step], b2 = y[i + 2 * step], b3 = y[i + 3 * step];
    out[i] = a0 + b0;
    out[i + step] = a1 + b1;
    out[i + 2 * step] = a2 + b2;
    out[i + 3 * step] = a3 + b3;
  } else {
    for (long j = i; j < n; j += step) out[j] = x[j] + y[j];
  }
}
// The arrays are 16-byte aligned (CuPy's pool): one float4 per array and thread.
extern "C" __global__ void saxpy_v4(float a, const float* __restrict__ x,
                                    float* __restrict__ y, long n) {
  long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    float4 u = *reinterpret_cast<const float4*>(x + i);
    float4 v = *reinterpret_cast<const float4*>(y + i);
    *reinterpret_cast<float4*>(y + i) =
        make_float4(a * u.x + v.x, a * u.y + v.y, a * u.z + v.z, a * u.w + v.w);
  } else {
    for (long j = i; j < n; ++j) y[j] = a * x[j] + y[j];
  }
}
extern "C" __global__ void vecadd_v4(const float* __restrict__ x, const float* __restrict__ y,
                                     float* __restrict__ out, long n) {
  long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i + 3 < n) {
    float4 u = *reinterpret_cast<const float4*>(x + i);
    float4 v = *reinterpret_cast<const float4*>(y + i);
    *reinterpret_cast<float4*>(out + i) = make_float4(u.x + v.x, u.y + v.y, u.z + v.z,
                                                      u.w + v.w);
  } else {
    for (long j = i; j < n; ++j) out[j] = x[j] + y[j];
  }
}
"""

#: (cupric contender, its CUDA C twin) pairs whose per-round ratio is reported.
PAIRS = (("cupric", "cuda_c"), ("cupric_x4", "cuda_c_x4"), ("cupric_v4", "cuda_c_v4"))


def _measure(timer: EventTimer, fns: dict, nbytes: int) -> dict:
    """Interleaved rounds (order rotated each round) of device and idle samples."""
    for fn in fns.values():
        for _ in range(WARMUP):
            fn()
    timer.stream.synchronize()
    names = list(fns)
    device = {name: [] for name in names}
    idle = {name: [] for name in names}
    for r in range(REPEATS):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            device[name].append(timer.device(fns[name]))
            idle[name].append(timer.idle(fns[name]))
    entry: dict = {}
    for name in names:
        entry[f"{name}_GBps"] = nbytes / statistics.median(device[name]) / 1e9
    for name in names:
        entry[f"{name}_idle_GBps"] = nbytes / statistics.median(idle[name]) / 1e9
    for ours, theirs in PAIRS:
        # Paired per round: both samples of a round saw the same machine state.
        ratios = sorted(b / a for a, b in zip(device[ours], device[theirs]))
        q = statistics.quantiles(ratios, n=4)
        entry[f"{ours}_vs_{theirs}"] = statistics.median(ratios)
        entry[f"{ours}_vs_{theirs}_spread"] = {"min": ratios[0], "q1": q[0], "q3": q[2],
                                               "max": ratios[-1]}
    entry["cupric_vs_cuda_c_idle"] = (entry["cupric_idle_GBps"]
                                      / entry["cuda_c_idle_GBps"])
    for name in ("library", "library_kernel_one_trip"):
        entry[f"{name}_vs_cuda_c_v4"] = entry[f"{name}_GBps"] / entry["cuda_c_v4_GBps"]
    return entry


def run(json_path: str | None = None, dump: str | None = None, quick: bool = False) -> dict:
    """Measure; returns GB/s per implementation and the ratios to CUDA C."""
    global REPEATS
    if quick:
        REPEATS = 5
    import cupy as cp

    from cupric.kernels import elementwise as ew

    stream = cp.cuda.Stream(non_blocking=True)
    s = stream.ptr
    rng = cp.random.default_rng(1)
    x = rng.random(N, dtype=cp.float32)
    y0 = rng.random(N, dtype=cp.float32)
    y = y0.copy()
    out = cp.empty_like(x)
    a = np.float32(2.5)
    n64 = np.int64(N)
    blocks = (N + BLOCK - 1) // BLOCK
    blocks4 = (N // 4 + BLOCK - 1) // BLOCK
    module = cp.RawModule(code=CUDA_C)
    c = {name: module.get_function(name) for name in
         ("saxpy", "vecadd", "saxpy_x4", "vecadd_x4", "saxpy_v4", "vecadd_v4")}

    def cuda_c(name, grid, *args):
        fn = c[name]
        return lambda: fn((grid,), (BLOCK,), args, stream=stream)

    impls = {
        "saxpy": {
            "cupric": lambda: saxpy[blocks, BLOCK, s](a, x, y),
            "cuda_c": cuda_c("saxpy", blocks, a, x, y, n64),
            "cupric_x4": lambda: saxpy_x4[blocks4, BLOCK, s](a, x, y),
            "cuda_c_x4": cuda_c("saxpy_x4", blocks4, a, x, y, n64),
            "cupric_v4": lambda: saxpy_v4[blocks4, BLOCK, s](a, x, y),
            "cuda_c_v4": cuda_c("saxpy_v4", blocks4, a, x, y, n64),
            "library": lambda: ew.saxpy(a, x, y, out=y, stream=s),
            "library_kernel_one_trip": lambda: ew.saxpy_kernel[blocks4, BLOCK, s](a, x, y, y),
        },
        "vecadd": {
            "cupric": lambda: vecadd[blocks, BLOCK, s](x, y, out),
            "cuda_c": cuda_c("vecadd", blocks, x, y, out, n64),
            "cupric_x4": lambda: vecadd_x4[blocks4, BLOCK, s](x, y, out),
            "cuda_c_x4": cuda_c("vecadd_x4", blocks4, x, y, out, n64),
            "cupric_v4": lambda: vecadd_v4[blocks4, BLOCK, s](x, y, out),
            "cuda_c_v4": cuda_c("vecadd_v4", blocks4, x, y, out, n64),
            "library": lambda: ew.vecadd(x, y, out=out, stream=s),
            "library_kernel_one_trip": lambda: ew.vecadd_kernel[blocks4, BLOCK, s](x, y, out),
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
    _check(cp, stream, impls, a, x, y, y0, out)
    results: dict = {"n": N, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                     "repeats": REPEATS, "batch": BATCH}
    timer = EventTimer(cp, stream, BATCH)
    for bench, fns in impls.items():
        results[bench] = _measure(timer, fns, 3 * N * 4)

    for name, kern in (("saxpy_v4", saxpy_v4), ("vecadd_v4", vecadd_v4)):
        ptx = kern.inspect_ptx(None)
        results[f"{name}_has_128bit_loads"] = ".v4.f32" in ptx
    if dump:
        results["dumped"] = _dump(dump)
    results["title"] = "Compiled kernels: saxpy and vecadd, 2^28 float32"
    results["method"] = (
        "cupric kernels beside the same kernels in CUDA C (CuPy RawKernel) and numba-cuda, "
        "on the same CuPy arrays (random inputs) with the same grid; every contender's "
        "result checked on the device before timing. Device time only: a lead-in call, "
        f"then {BATCH} calls between two events; {REPEATS} rounds, the order rotated each "
        "round; GB/s count 3 arrays of 2^28 floats per call; the ratio is the median of "
        "the per-round paired ratios, with its range. `library` is cupric.kernels.saxpy / "
        "vecadd on the grid the library picks.")
    results["tables"] = _tables(results)
    _print(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


def _check(cp, stream, impls, a, x, y, y0, out) -> None:
    """Every contender's result, from fresh inputs (y is updated in place by saxpy). The
    stream is non-blocking: CuPy's default-stream work is ordered explicitly."""
    def reset():
        cp.cuda.Device().synchronize()
        y[...] = y0
        out.fill(cp.nan)

    for bench, fns in impls.items():
        ok = (lambda: cp.allclose(y, a * x + y0, rtol=1e-5, atol=1e-6)) if bench == "saxpy" \
            else (lambda: cp.array_equal(out, x + y0))
        for name, fn in fns.items():
            assert_on_device(f"{bench} {name}", fn, ok, reset=reset)
    cp.cuda.Device().synchronize()
    y[...] = y0
    cp.cuda.Device().synchronize()


def _dump(directory: str) -> list:
    """PTX and cubin of the one-element cupric kernels (as loaded) into `directory`."""
    import os
    os.makedirs(directory, exist_ok=True)
    written = []
    for name, kern in (("saxpy", saxpy), ("vecadd", vecadd)):
        art = kern.compile(None)
        for ext, data in (("ptx", art.ptx.encode()), ("cubin", art.cubin)):
            if data:
                path = os.path.join(directory, f"cupric_{name}.{ext}")
                with open(path, "wb") as fh:
                    fh.write(data)
                written.append(path)
    return written


def _tables(results: dict) -> list:
    rows = []
    for bench in ("saxpy", "vecadd"):
        e = results[bench]
        for ours, theirs in PAIRS + (("library", "cuda_c_v4"),
                                     ("library_kernel_one_trip", "cuda_c_v4")):
            spread = e.get(f"{ours}_vs_{theirs}_spread") or {}
            paired = e.get(f"{ours}_vs_{theirs}")
            rows.append([bench, ours, e[f"{ours}_GBps"], theirs, e[f"{theirs}_GBps"],
                         paired if paired is not None else e[f"{ours}_GBps"] / e[f"{theirs}_GBps"],
                         spread.get("min"), spread.get("max")])
        if "numba_cuda_GBps" in e:
            rows.append([bench, "cupric", e["cupric_GBps"], "numba_cuda", e["numba_cuda_GBps"],
                         e["cupric_GBps"] / e["numba_cuda_GBps"], None, None])
    return [table("GB/s, device time", [
        ("kernel", ""), ("cupric form", ""), ("GB/s", ".0f"), ("peer", ""), ("peer GB/s", ".0f"),
        ("cupric / peer", ".3f"), ("per-round min", ".3f"), ("per-round max", ".3f")], rows,
        "cupric / peer is peer time over cupric time (above 1: cupric faster); x4: four "
        "elements a grid apart per thread; v4: four neighbours (128-bit accesses); "
        "numba-cuda has the one-element form only.")]


def _print(results: dict) -> None:
    print(f"saxpy / vecadd, 2^28 f32 on {results['device']} (GB/s, 3 arrays moved; "
          f"device time, median of {results['repeats']} rounds)")
    for bench in ("saxpy", "vecadd"):
        entry = results[bench]
        print(f"  {bench}")
        row = "  ".join(f"{k[:-5]} {v:.0f}" for k, v in entry.items()
                        if k.endswith("_GBps") and not k.endswith("_idle_GBps"))
        print(f"    {row}")
        for ours, theirs in PAIRS:
            sp = entry[f"{ours}_vs_{theirs}_spread"]
            print(f"    {ours}/{theirs} {entry[f'{ours}_vs_{theirs}']:.3f} (per-round "
                  f"min {sp['min']:.3f}, q1 {sp['q1']:.3f}, q3 {sp['q3']:.3f}, "
                  f"max {sp['max']:.3f})")
        print(f"    library/cuda_c_v4 {entry['library_vs_cuda_c_v4']:.3f}, its kernel on a "
              f"one-trip grid {entry['library_kernel_one_trip_vs_cuda_c_v4']:.3f}")
        row = "  ".join(f"{k[:-10]} {v:.0f}" for k, v in entry.items()
                        if k.endswith("_idle_GBps"))
        print(f"    one launch from idle, host cost included: {row}  "
              f"(cupric/C {entry['cupric_vs_cuda_c_idle']:.3f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--dump", metavar="DIR",
                        help="write the one-element kernels' PTX and cubin here")
    args = parser.parse_args()
    run(args.json, args.dump)
