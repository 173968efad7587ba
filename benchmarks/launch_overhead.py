"""Host cost of one kernel launch: cupric beside cuda.core, CuPy, PyTorch and numba-cuda.

A trivial 4-argument kernel (ptr, ptr, f32, i32) is launched 10,000 times back to back on
one stream, in 20 batches of 500 with a synchronize between batches; the time of the
launch loop alone, divided by the launches, is the host cost. Batches keep the driver's
launch queue from filling (a full queue makes the host wait for the GPU, which would
measure the GPU instead); the median batch is reported, and the single continuous
10,000-launch run of /work/shared/bench/peer_baseline.py beside it.

The cupric rows also compare the ways of reaching cuLaunchKernel (cffi ABI mode, ctypes,
cuda.bindings), with and without argument packing, to show where the time goes.

    python3 benchmarks/launch_overhead.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

SOURCE = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
N = 1024
GRID, BLOCK = 4, 256
BATCHES, PER_BATCH = 20, 500
WARMUP = 200


def _time_launches(launch, synchronize) -> dict:
    """Per-launch host microseconds: median of batches, and one continuous run."""
    for _ in range(WARMUP):
        launch()
    synchronize()
    per_batch = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(PER_BATCH):
            launch()
        t1 = time.perf_counter()
        synchronize()
        per_batch.append((t1 - t0) / PER_BATCH * 1e6)
    total = BATCHES * PER_BATCH
    t0 = time.perf_counter()
    for _ in range(total):
        launch()
    t1 = time.perf_counter()
    synchronize()
    return {"us": statistics.median(per_batch), "min_batch_us": min(per_batch),
            "continuous_us": (t1 - t0) / total * 1e6}


def _nvrtc_cubin(arch: str) -> bytes:
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"axpy.cu", 0, [], [])
    opts = [f"--gpu-architecture={arch}".encode()]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed: {log.decode()}")
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


def _measure(results: dict, name: str, setup) -> None:
    """Run one row; a peer that cannot run here is recorded with its error."""
    try:
        launch, synchronize = setup()
        results[name] = _time_launches(launch, synchronize)
    except Exception as exc:  # recorded in the results table, not hidden
        results[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}


def run(json_path: str | None = None) -> dict:
    """Measure every row; returns ``{row: {"us": ..., ...}, "device": ...}``."""
    global PER_BATCH, BATCHES
    import cupric.runtime as rt
    from cupric.runtime._driver import check, driver
    from cupric.runtime.launch import native

    dev = rt.Device(0)
    dev.make_current()
    d = driver()
    results: dict = {"device": dev.name, "launches": BATCHES * PER_BATCH}
    module = rt.Module.from_data(_nvrtc_cubin(dev.arch))
    fn = module.get_function("axpy")
    x_ptr = int(check(d.cuMemAlloc(N * 4)))
    y_ptr = int(check(d.cuMemAlloc(N * 4)))
    check(d.cuMemsetD32(x_ptr, 0, N))
    check(d.cuMemsetD32(y_ptr, 0, N))
    stream = dev.create_stream(non_blocking=True)
    sync = stream.synchronize
    a, n = 2.0, N

    def prepared(backend, numpy_scalars=False):  # backend None: the default one
        def setup():
            p = fn.prepare(["ptr", "ptr", "f32", "i32"], backend=backend)
            launch_ = p.launch
            if numpy_scalars:
                fa, fn_ = np.float32(a), np.int32(n)
                return (lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, fa, fn_)), sync
            return (lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)), sync
        return setup

    from cupric.runtime.launch import build_launcher, launch_backends
    build_launcher()
    results["backends"] = launch_backends()
    default = fn.prepare(["ptr", "ptr", "f32", "i32"]).backend
    results["default_backend"] = default
    _measure(results, "cupric PreparedLaunch", prepared(None))
    _measure(results, "cupric PreparedLaunch (NumPy scalars)", prepared(None, True))
    for backend in ("api", "bindings", "cffi", "ctypes"):
        if backend != default:
            _measure(results, f"cupric PreparedLaunch via {backend}", prepared(backend))

    class Buf:  # what a DeviceBuffer exposes to the launch path
        def __init__(self, ptr):
            self.ptr = ptr

    bx, by = Buf(x_ptr), Buf(y_ptr)

    def general():
        fa, fn_ = np.float32(a), np.int32(n)
        return (lambda: fn.launch(GRID, BLOCK, bx, by, fa, fn_, stream=stream)), sync

    _measure(results, "cupric Function.launch (inferred types)", general)

    def raw(backend):
        # The floor of each path: the same call with no packing and no Python logic.
        def setup():
            p = fn.prepare(["ptr", "ptr", "f32", "i32"], backend=backend)
            p.launch(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)
            call, f, argv, null, s = p._call, p._func, p._argv, p._null, stream.ptr
            err = call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, null)
            if err:
                raise RuntimeError(f"raw launch failed with CUresult {err}")
            return (lambda: call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, null)), sync
        return setup

    for backend in ("api", "cffi"):
        _measure(results, f"floor: cuLaunchKernel via {backend}, no packing", raw(backend))

    def raw_api_extra_buffer():
        # Parameters as one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER) instead of a void**.
        from cupric.runtime import launch as launch_mod
        p = fn.prepare(["ptr", "ptr", "f32", "i32"], backend="api")
        p.launch(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)
        ffi = launch_mod._launcher.ffi
        size = ffi.new("size_t *", p._size)
        buf = p._buf[0]
        extra = ffi.new("void *[]", [ffi.cast("void *", 1), ffi.cast("void *", int(
            native().ffi.cast("uintptr_t", buf))), ffi.cast("void *", 2), size,
            ffi.cast("void *", 0)])
        call, f, s = p._call, p._func, stream.ptr
        null = ffi.NULL
        keep = (buf, size, extra)
        err = call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, null, extra)
        if err:
            raise RuntimeError(f"launch with a parameter buffer failed with CUresult {err}")
        return (lambda: call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, null, extra) and keep), sync

    _measure(results, "floor: api with one parameter buffer (extra)", raw_api_extra_buffer)

    def gpu_time():
        # GPU time per kernel when launched back to back: if the host were faster than
        # this, the batches would measure the GPU, not the host.
        p = fn.prepare(["ptr", "ptr", "f32", "i32"])
        start, end = stream.record(), dev.create_event()
        for _ in range(PER_BATCH):
            p.launch(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / PER_BATCH

    try:
        results["gpu_us_per_kernel_back_to_back"] = gpu_time()
    except Exception as exc:  # recorded, as for every row
        results["gpu_us_per_kernel_back_to_back"] = f"error: {exc}"

    def small_batches(backend):
        def setup():
            p = fn.prepare(["ptr", "ptr", "f32", "i32"], backend=backend)
            launch_ = p.launch
            return (lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)), sync
        return setup

    saved = PER_BATCH, BATCHES
    PER_BATCH, BATCHES = 50, 200
    _measure(results, "cupric PreparedLaunch, batches of 50", small_batches(None))
    _measure(results, "floor: api, batches of 50", raw("api"))
    PER_BATCH, BATCHES = saved

    def raw_bindings():
        p = fn.prepare(["ptr", "ptr", "f32", "i32"], backend="bindings")
        p.launch(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)
        call, h, argv, s = d.cuLaunchKernel, fn.handle, p._argv, stream.handle
        return (lambda: call(h, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, 0)), sync

    _measure(results, "floor: cuLaunchKernel via cuda.bindings, no packing", raw_bindings)

    def cuda_core():
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        cdev = Device(0)
        cdev.set_current()
        s = cdev.create_stream()
        prog = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{cdev.arch}"))
        ker = prog.compile("cubin", name_expressions=("axpy",)).get_kernel("axpy")
        cfg = LaunchConfig(grid=GRID, block=BLOCK)
        fa, fn_ = np.float32(a), np.int32(n)
        return (lambda: launch(s, cfg, ker, x_ptr, y_ptr, fa, fn_)), s.sync

    _measure(results, "cuda.core launch", cuda_core)

    def cupy_raw():
        import cupy as cp
        k = cp.RawKernel(SOURCE, "axpy")
        xs = cp.zeros(N, dtype=cp.float32)
        ys = cp.zeros(N, dtype=cp.float32)
        s = cp.cuda.Stream(non_blocking=True)
        args = (xs, ys, np.float32(a), np.int32(n))

        def launch_():
            k((GRID,), (BLOCK,), args, stream=s)
        return launch_, s.synchronize

    _measure(results, "CuPy RawKernel", cupy_raw)

    def torch_add():
        import torch
        t_a = torch.ones(4, device="cuda")
        t_b = torch.ones(4, device="cuda")
        out = torch.empty(4, device="cuda")
        add = torch.add
        return (lambda: add(t_a, t_b, out=out)), torch.cuda.synchronize

    _measure(results, "PyTorch torch.add(out=), 4 elements", torch_add)

    def numba_cuda():
        if not hasattr(np, "row_stack"):  # numba-cuda 0.30.4 still calls it; NumPy 2.5 dropped it
            np.row_stack = np.vstack
        from numba import cuda

        @cuda.jit
        def axpy(x, y, a_, n_):
            i = cuda.grid(1)
            if i < n_:
                y[i] = a_ * x[i] + y[i]

        xs = cuda.device_array(N, dtype=np.float32)
        ys = cuda.device_array(N, dtype=np.float32)
        fa, fn_ = np.float32(a), np.int32(n)
        configured = axpy[GRID, BLOCK]
        return (lambda: configured(xs, ys, fa, fn_)), cuda.synchronize

    _measure(results, "numba-cuda (device arrays)", numba_cuda)

    stream.synchronize()
    check(d.cuMemFree(x_ptr))
    check(d.cuMemFree(y_ptr))
    _print_table(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


def _print_table(results: dict) -> None:
    base = results.get("cupric PreparedLaunch", {}).get("us")
    print(f"launch overhead on {results['device']}, {results['launches']} launches, "
          f"median of {BATCHES} batches of {PER_BATCH}; default backend "
          f"{results.get('default_backend')}; GPU time per kernel "
          f"{results.get('gpu_us_per_kernel_back_to_back')}")
    print(f"{'':55s} {'us/launch':>10s} {'continuous':>11s} {'vs cupric':>10s}")
    for name, row in results.items():
        if not isinstance(row, dict) or not ("us" in row or "error" in row):
            continue
        if "error" in row:
            print(f"{name:55s} error: {row['error']}")
            continue
        ratio = f"{row['us'] / base:9.2f}x" if base else ""
        print(f"{name:55s} {row['us']:10.2f} {row['continuous_us']:11.2f} {ratio:>10s}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    run(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
