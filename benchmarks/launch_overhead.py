"""Host cost of one kernel launch: cupric beside cuda.core, CuPy, PyTorch and numba-cuda.

A trivial 4-argument kernel (ptr, ptr, f32, i32) is launched 10,000 times back to back
per row, in 20 batches of 500 with a synchronize between batches; the time of the launch
loop alone, divided by the launches, is the host cost. Batches keep the driver's launch
queue from filling (a full queue makes the host wait for the GPU, which would measure the
GPU instead). The rows take turns batch by batch, so that drift of the machine (clocks,
other load) hits every row alike; the median batch is reported, and beside it one
continuous 10,000-launch run per row, the method of /work/shared/bench/peer_baseline.py.

The cupric rows also compare the ways of reaching cuLaunchKernel (compiled extension,
compiled cffi trampoline, cuda.bindings, cffi ABI mode, ctypes) and show the floor of a
bare call without argument packing. The `@cupric.kernel` rows launch the same computation
written in Python (`kern[grid, block, stream]` bound once, then called) with cupric
DeviceBuffers, CuPy arrays, PyTorch tensors and numba-cuda device arrays, each on a kernel
object of its own (a kernel keeps one generated fast launcher, for the first signature
it meets), and CuPy arrays seen only through `__cuda_array_interface__` (the general path
that the per-type array adapters replace).

    python3 benchmarks/launch_overhead.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from cupric.device import grid
from cupric.types import Array, f32, i32

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
MAIN_ROW = "cupric PreparedLaunch"


def _axpy(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"], a: f32, n: i32):
    """The C kernel `axpy` above, as a `@cupric.kernel` (applied per row)."""
    i = grid(1)
    if i < n:
        y[i] = a * x[i] + y[i]


class _InterfaceOnly:
    """An array seen only through its `__cuda_array_interface__` (no adapter knows it)."""

    __slots__ = ("array",)

    def __init__(self, array) -> None:
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return self.array.__cuda_array_interface__


def _measure_rows(rows: list, results: dict, batches: int, per_batch: int,
                  suffix: str = "") -> None:
    """Time every (name, launch, synchronize) row, interleaving the rows batch by batch."""
    ready = []
    for name, setup in rows:
        try:
            launch, synchronize = setup()
            for _ in range(WARMUP):
                launch()
            synchronize()
            ready.append((name + suffix, launch, synchronize))
        except Exception as exc:  # recorded in the results table, not hidden
            results[name + suffix] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    samples: dict[str, list[float]] = {name: [] for name, _, _ in ready}
    for _ in range(batches):
        for name, launch, synchronize in ready:
            t0 = time.perf_counter()
            for _ in range(per_batch):
                launch()
            t1 = time.perf_counter()
            synchronize()
            samples[name].append((t1 - t0) / per_batch * 1e6)
    total = batches * per_batch
    for name, launch, synchronize in ready:
        t0 = time.perf_counter()
        for _ in range(total):
            launch()
        t1 = time.perf_counter()
        synchronize()
        results[name] = {"us": statistics.median(samples[name]),
                         "min_batch_us": min(samples[name]),
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


def run(json_path: str | None = None) -> dict:
    """Measure every row; returns ``{row: {"us": ..., ...}, "device": ..., ...}``."""
    import cupric.runtime as rt
    from cupric.runtime._driver import check, driver
    from cupric.runtime.launch import launch_backends

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
    types = ["ptr", "ptr", "f32", "i32"]

    t0 = time.perf_counter()
    default = fn.prepare(types).backend   # builds the compiled launcher on first use
    results["first_prepare_s"] = time.perf_counter() - t0
    results["default_backend"] = default
    results["backends"] = launch_backends()

    def prepared(backend, numpy_scalars=False):  # backend None: the default one
        def setup():
            p = fn.prepare(types, backend=backend)
            launch_ = p.launch
            if numpy_scalars:
                fa, fn_ = np.float32(a), np.int32(n)
                return (lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, fa, fn_)), sync
            return (lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)), sync
        return setup

    class Buf:  # what a DeviceBuffer exposes to the launch path
        def __init__(self, ptr):
            self.ptr = ptr

    bx, by = Buf(x_ptr), Buf(y_ptr)

    def general():
        fa, fn_ = np.float32(a), np.int32(n)
        return (lambda: fn.launch(GRID, BLOCK, bx, by, fa, fn_, stream=stream)), sync

    def raw(backend):
        # The floor of a call path: the bare call, no packing and no Python logic.
        def setup():
            p = fn.prepare(types, backend=backend)
            p.launch(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)
            call, f, argv, null = p._call, p._func, p._argv, p._null
            s = stream.handle if backend == "bindings" else stream.ptr
            # `argv` points into buffers that `p` owns: the closures keep `p` alive, or the
            # kernel would read freed (and reused) argument memory.
            if backend == "bindings":
                (err,) = call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, 0)
                return (lambda p=p: call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, 0)), sync
            err = call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, null)
            if err:
                raise RuntimeError(f"raw launch failed with CUresult {err}")
            return (lambda p=p: call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, null)), sync
        return setup

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

    def cupy_raw():
        import cupy as cp
        k = cp.RawKernel(SOURCE, "axpy")
        xs = cp.zeros(N, dtype=cp.float32)
        ys = cp.zeros(N, dtype=cp.float32)
        s = cp.cuda.Stream(non_blocking=True)
        args = (xs, ys, np.float32(a), np.int32(n))
        return (lambda: k((GRID,), (BLOCK,), args, stream=s)), s.synchronize

    def torch_add():
        import torch
        t_a = torch.ones(4, device="cuda")
        t_b = torch.ones(4, device="cuda")
        out = torch.empty(4, device="cuda")
        add = torch.add
        return (lambda: add(t_a, t_b, out=out)), torch.cuda.synchronize

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

    fast_paths = results["kernel_fast_path"] = {}

    def python_kernel(label, make_arrays):
        # A @cupric.kernel of its own per row, bound to the stream once and called.
        def setup():
            import cupric
            kern = cupric.kernel(_axpy)
            xs, ys = make_arrays()
            fa, fn_ = np.float32(a), np.int32(n)
            launch_ = kern[GRID, BLOCK, stream]
            launch_(xs, ys, fa, fn_)
            stream.synchronize()
            fast_paths[label] = kern._fast is not None  # the generated launcher took it
            return (lambda: launch_(xs, ys, fa, fn_)), sync
        return label, setup

    def buffers():
        from cupric.runtime.memory import zeros
        return zeros(N, np.float32), zeros(N, np.float32)

    cupy_stream = []

    def cupy_arrays():
        import cupy as cp
        # CuPy's current stream is the launch's stream, as for a CuPy user who hands
        # cupric the stream they work on: the CUDA Array Interface then names the launch
        # stream itself and no wait is due. (With CuPy left on its default stream and the
        # launch on this non-blocking one, every launch also queues an event wait.)
        if not cupy_stream:
            cupy_stream.append(cp.cuda.ExternalStream(stream.ptr))
            cupy_stream[0].use()
        return cp.zeros(N, dtype=cp.float32), cp.zeros(N, dtype=cp.float32)

    def cupy_interface_only():
        xs, ys = cupy_arrays()
        return _InterfaceOnly(xs), _InterfaceOnly(ys)

    def torch_tensors():
        import torch
        return torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda")

    def numba_arrays():
        if not hasattr(np, "row_stack"):  # numba-cuda 0.30.4 still calls it
            np.row_stack = np.vstack
        from numba import cuda
        return (cuda.to_device(np.zeros(N, np.float32)),
                cuda.to_device(np.zeros(N, np.float32)))

    rows = [(MAIN_ROW, prepared(None)),
            (f"{MAIN_ROW} (NumPy scalars)", prepared(None, True)),
            ("cupric Function.launch (inferred types)", general)]
    rows += [(f"{MAIN_ROW} via {b}", prepared(b))
             for b in ("c", "api", "bindings", "cffi", "ctypes") if b != default]
    rows += [(f"floor: bare cuLaunchKernel via {b}", raw(b)) for b in ("api", "bindings", "cffi")]
    rows += [("cuda.core launch", cuda_core), ("CuPy RawKernel", cupy_raw),
             ("PyTorch torch.add(out=), 4 elements", torch_add),
             ("numba-cuda (device arrays)", numba_cuda)]
    rows += [python_kernel("@cupric.kernel, DeviceBuffers", buffers),
             python_kernel("@cupric.kernel, CuPy arrays", cupy_arrays),
             python_kernel("@cupric.kernel, PyTorch tensors", torch_tensors),
             python_kernel("@cupric.kernel, numba-cuda device arrays", numba_arrays),
             python_kernel("@cupric.kernel, CuPy arrays through __cuda_array_interface__ "
                           "only", cupy_interface_only)]
    _measure_rows(rows, results, BATCHES, PER_BATCH)
    # Smaller batches: if these agree with the rows above, the queue never filled.
    _measure_rows([(MAIN_ROW, prepared(None)), ("cuda.core launch", cuda_core)], results,
                  200, 50, suffix=", batches of 50")

    stream.synchronize()
    if cupy_stream:
        import cupy as cp
        cp.cuda.Stream.null.use()
    check(d.cuMemFree(x_ptr))
    check(d.cuMemFree(y_ptr))
    _print_table(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


def _print_table(results: dict) -> None:
    base = results.get(MAIN_ROW, {}).get("us")
    print(f"launch overhead on {results['device']}: median of {BATCHES} batches of "
          f"{PER_BATCH} launches per row, rows interleaved; cupric default backend "
          f"{results.get('default_backend')!r}")
    print(f"{'':66s} {'us/launch':>10s} {'continuous':>11s} {'vs cupric':>10s}")
    for name, row in results.items():
        if not isinstance(row, dict) or not ("us" in row or "error" in row):
            continue
        if "error" in row:
            print(f"{name:66s} error: {row['error']}")
            continue
        ratio = f"{row['us'] / base:9.2f}x" if base else ""
        print(f"{name:66s} {row['us']:10.2f} {row['continuous_us']:11.2f} {ratio:>10s}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    run(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
