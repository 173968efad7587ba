"""Host cost of one kernel launch: cupric beside CuPy, PyTorch, numba-cuda and cuda.core.

y = a * x + y on 1024 random float32 values is launched 10,000 times back to back per
row, in 20 batches of 500 with a synchronize between batches; the time of the launch
loop alone, divided by the launches, is the host cost. Batches keep the driver's launch
queue from filling (a full queue makes the host wait for the GPU, which would measure the
GPU instead). The rows take turns batch by batch, so that drift of the machine (clocks,
other load) hits every row alike; the median batch is reported, and beside it one
continuous 10,000-launch run per row. Before timing, every row launches once from the
same y and its result is compared with NumPy's.

The headline compares array with array: the `@cupric.kernel` form of the kernel
(`kern[grid, block, stream]` bound once, then called) with cupric DeviceBuffers, CuPy
arrays, PyTorch tensors and numba-cuda device arrays, each on a kernel object of its own,
beside the peer that takes the same arrays (CuPy's RawKernel, PyTorch's one-kernel
`add(alpha=, out=)`, a numba-cuda kernel), and CuPy arrays seen only through
`__cuda_array_interface__` (the general path that the per-type array adapters replace).
A second table puts each array kind on a kernel first launched with another kind beside
the same arrays on a kernel of their own (launchers are kept per argument kind). A third,
not comparable with the first, passes pre-typed raw pointers: cupric's `PreparedLaunch`
through each way of reaching cuLaunchKernel (cupric's compiled extension, cuda.bindings
and cffi; a cffi API-mode trampoline and ctypes from `_launch_backends.py`, which cupric
does not use), the floor of a bare call without argument packing, and cuda.core's
`launch`. Last, the floors of any launcher on this host beside CuPy's RawKernel: the same
kernel launched from one C loop with its parameters packed beforehand (the driver's own
cost, no Python), and launched by one call of a C function that takes no arguments (the
least a launch from Python can cost).

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

from _common import assert_correct, error_text, ratio, table
from _launch_backends import BACKENDS as COMPARISON_BACKENDS
from _launch_backends import comparison_prepared, floor_probe

SOURCE = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
N = 1024
GRID, BLOCK = 4, 256
A = np.float32(0.5)
X = np.random.default_rng(3).random(N, dtype=np.float32)
Y0 = np.random.default_rng(4).random(N, dtype=np.float32)
EXPECTED = A * X + Y0
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
    """Check, then time every (name, setup) row, interleaving the rows batch by batch.
    `setup()` gives the row's launch, synchronize, reset (y back to its start) and read
    (y as NumPy), and optionally ``timed(n)``: the seconds n launches took, timed by the
    row itself (the C loop's floor); each row's one launch from reset must give
    y = A * x + y."""
    ready = []
    for name, setup in rows:
        try:
            row = setup()
            assert_correct(f"launch overhead: {name}", lambda: (row["reset"](), row["launch"]()),
                           row["read"], EXPECTED, rtol=1e-6, atol=1e-6)
            for _ in range(WARMUP):
                row["launch"]()
            row["sync"]()
            ready.append((name + suffix, row["launch"], row["sync"], row.get("timed")))
        except Exception as exc:  # recorded in the results table, not hidden
            results[name + suffix] = {"error": error_text(exc)}
    samples: dict[str, list[float]] = {name: [] for name, _, _, _ in ready}

    def launches(launch, timed, n):
        if timed is not None:
            return timed(n)
        t0 = time.perf_counter()
        for _ in range(n):
            launch()
        return time.perf_counter() - t0

    for _ in range(batches):
        for name, launch, synchronize, timed in ready:
            seconds = launches(launch, timed, per_batch)
            synchronize()
            samples[name].append(seconds / per_batch * 1e6)
    total = batches * per_batch
    for name, launch, synchronize, timed in ready:
        seconds = launches(launch, timed, total)
        synchronize()
        results[name] = {"us": statistics.median(samples[name]),
                         "min_batch_us": min(samples[name]),
                         "continuous_us": seconds / total * 1e6}


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
    from cupric.runtime.launch import launch_backends
    from cupric.runtime.memory import to_device

    dev = rt.Device(0)
    dev.make_current()
    results: dict = {"title": "Kernel launch: host cost per launch", "device": dev.name,
                     "launches": BATCHES * PER_BATCH}
    module = rt.Module.from_data(_nvrtc_cubin(dev.arch))
    fn = module.get_function("axpy")
    # Raw-pointer rows share one pair of DeviceBuffers; array rows each get their own.
    bx, by = to_device(X), to_device(Y0)
    x_ptr, y_ptr = bx.ptr, by.ptr
    stream = dev.create_stream(non_blocking=True)
    sync = stream.synchronize
    a, n = float(A), N
    types = ["ptr", "ptr", "f32", "i32"]

    def raw_row(launch, synchronize=sync):
        def reset():
            synchronize()
            by.copy_from(Y0, stream=stream)
            stream.synchronize()
        return {"launch": launch, "sync": synchronize, "reset": reset,
                "read": lambda: (synchronize(), by.to_numpy())[1]}

    t0 = time.perf_counter()
    default = fn.prepare(types).backend   # builds the compiled launcher on first use
    results["first_prepare_s"] = time.perf_counter() - t0
    results["default_backend"] = default
    results["backends"] = launch_backends()

    def prepare(backend):
        if backend in COMPARISON_BACKENDS:  # not cupric's: benchmarks/_launch_backends.py
            return comparison_prepared(fn, types, backend)
        return fn.prepare(types, backend=backend)

    def prepared(backend, numpy_scalars=False):  # backend None: the default one
        def setup():
            p = prepare(backend)
            launch_ = p.launch
            if numpy_scalars:
                fa, fn_ = np.float32(a), np.int32(n)
                return raw_row(lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, fa, fn_))
            return raw_row(lambda: launch_(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n))
        return setup

    def general():
        fa, fn_ = np.float32(a), np.int32(n)
        return raw_row(lambda: fn.launch(GRID, BLOCK, bx, by, fa, fn_, stream=stream))

    def raw(backend):
        # The floor of a call path: the bare call, no packing and no Python logic.
        def setup():
            p = prepare(backend)
            p.launch(GRID, BLOCK, stream, 0, x_ptr, y_ptr, a, n)
            call, f, argv, null = p._call, p._func, p._argv, p._null
            s = stream.handle if backend == "bindings" else stream.ptr
            # `argv` points into buffers that `p` owns: the closures keep `p` alive, or the
            # kernel would read freed (and reused) argument memory.
            if backend == "bindings":
                return raw_row(lambda p=p: call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, 0))
            err = call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, null)
            if err:
                raise RuntimeError(f"raw launch failed with CUresult {err}")
            return raw_row(lambda p=p: call(f, GRID, 1, 1, BLOCK, 1, 1, 0, s, argv, null))
        return setup

    floor = []  # the probe, built once for the floor rows

    def floor_row(how):
        def setup():
            if not floor:
                floor.append(floor_probe(prepare("c"), GRID, BLOCK, stream.ptr,
                                         (x_ptr, y_ptr, a, n)))
            probe = floor[0]
            if how == "loop":
                row = raw_row(lambda: probe.loop(1))
                row["timed"] = probe.loop
                return row
            return raw_row(probe.once if how == "once" else probe.once_holding_gil)
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
        return raw_row(lambda: launch(s, cfg, ker, x_ptr, y_ptr, fa, fn_), s.sync)

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
        xs, ys = cp.asarray(X), cp.asarray(Y0)

        def reset():
            stream.synchronize()
            ys.set(Y0)
            cp.cuda.Device().synchronize()
        return xs, ys, reset, ys.get

    def cupy_raw():
        import cupy as cp
        k = cp.RawKernel(SOURCE, "axpy")
        xs, ys, reset, read = cupy_arrays()
        s = cp.cuda.ExternalStream(stream.ptr)
        args = (xs, ys, np.float32(a), np.int32(n))
        return {"launch": lambda: k((GRID,), (BLOCK,), args, stream=s), "sync": sync,
                "reset": reset, "read": read}

    def torch_arrays():
        import torch
        xs = torch.from_numpy(X).cuda()
        ys = torch.from_numpy(Y0).cuda()

        def reset():
            torch.cuda.synchronize()
            ys.copy_(torch.from_numpy(Y0))
            torch.cuda.synchronize()
        return xs, ys, reset, lambda: ys.cpu().numpy()

    def torch_add():
        import torch
        xs, ys, reset, read = torch_arrays()
        add, fa = torch.add, a
        return {"launch": lambda: add(ys, xs, alpha=fa, out=ys),
                "sync": torch.cuda.synchronize, "reset": reset, "read": read}

    def numba_cuda_arrays():
        if not hasattr(np, "row_stack"):  # numba-cuda 0.30.4 still calls it; NumPy 2.5 dropped it
            np.row_stack = np.vstack
        from numba import cuda
        xs, ys = cuda.to_device(X), cuda.to_device(Y0)

        def reset():
            cuda.synchronize()
            ys.copy_to_device(Y0)
            cuda.synchronize()
        return xs, ys, reset, ys.copy_to_host

    def numba_cuda():
        from numba import cuda
        xs, ys, reset, read = numba_cuda_arrays()

        @cuda.jit
        def axpy(x, y, a_, n_):
            i = cuda.grid(1)
            if i < n_:
                y[i] = a_ * x[i] + y[i]

        fa, fn_ = np.float32(a), np.int32(n)
        configured = axpy[GRID, BLOCK]
        return {"launch": lambda: configured(xs, ys, fa, fn_), "sync": cuda.synchronize,
                "reset": reset, "read": read}

    fast_paths = results["kernel_fast_path"] = {}

    compiled_paths = results["kernel_compiled_launcher"] = {}

    def python_kernel(label, make_arrays, compiled=True, first=None):
        # A @cupric.kernel of its own per row, bound to the stream once and called.
        # compiled=False: the generated Python launcher (CUPRIC_KERNEL_FASTCALL=0's path)
        # for this kernel, beside the compiled one in the same process. `first`: the
        # arrays the kernel is launched with first (this row's are then its second kind).
        def setup():
            import cupric
            from cupric.compiler import _fastcall, launcher
            kern = cupric.kernel(_axpy)
            xs, ys, reset, read = make_arrays()
            fa, fn_ = np.float32(a), np.int32(n)
            launch_ = kern[GRID, BLOCK, stream]
            if not compiled:  # today's Python binding too, not the extension's
                from cupric.compiler.kernel import _Launcher
                launch_ = _Launcher(kern, GRID, BLOCK, stream)
            was = _fastcall.enabled()
            _fastcall._enabled = was and compiled
            try:
                if first is not None:  # the first kind's launcher, checked too
                    xf, yf, reset_first, read_first = first()
                    reset_first()
                    launch_(xf, yf, fa, fn_)
                    stream.synchronize()
                    np.testing.assert_allclose(read_first(), EXPECTED, rtol=1e-6)
                reset()
                launch_(xs, ys, fa, fn_)  # makes the kernel's launcher for this kind
            finally:
                _fastcall._enabled = was
            stream.synchronize()
            # Whether a generated fast launcher took it (where the kernel says).
            fast_paths[label] = getattr(kern, "_fast", None) is not None
            compiled_paths[label] = launcher.is_compiled(getattr(kern, "_fast", None))
            return {"launch": lambda: launch_(xs, ys, fa, fn_), "sync": sync, "reset": reset,
                    "read": lambda: (sync(), read())[1]}
        return label, setup

    def buffers():
        xs, ys = to_device(X), to_device(Y0)

        def reset():
            stream.synchronize()
            ys.copy_from(Y0)
            rt.synchronize()
        return xs, ys, reset, ys.to_numpy

    def cupy_interface_only():
        xs, ys, reset, read = cupy_arrays()
        return _InterfaceOnly(xs), _InterfaceOnly(ys), reset, read

    # Array against array: each cupric row beside the peer that takes the same arrays.
    array_rows = [python_kernel(ROW_BUFFERS, buffers),
                  python_kernel(ROW_BUFFERS_SECOND, buffers, first=cupy_arrays),
                  python_kernel(ROW_BUFFERS_PY, buffers, compiled=False),
                  python_kernel(ROW_CUPY, cupy_arrays),
                  python_kernel(ROW_CUPY_SECOND, cupy_arrays, first=buffers),
                  python_kernel(ROW_CUPY_PY, cupy_arrays, compiled=False),
                  ("CuPy RawKernel, CuPy arrays", cupy_raw),
                  python_kernel(ROW_TORCH, torch_arrays),
                  python_kernel(ROW_TORCH_SECOND, torch_arrays, first=buffers),
                  ("PyTorch add(alpha=, out=), one kernel", torch_add),
                  python_kernel(ROW_NUMBA, numba_cuda_arrays),
                  ("numba-cuda kernel, its device arrays", numba_cuda),
                  python_kernel(ROW_CAI, cupy_interface_only)]
    # Pre-typed raw pointers: no array argument to read; not comparable with the above.
    pointer_rows = [(MAIN_ROW, prepared(None)),
                    (f"{MAIN_ROW} (NumPy scalars)", prepared(None, True)),
                    ("cupric Function.launch (types inferred per call)", general)]
    pointer_rows += [(f"{MAIN_ROW} via {b}", prepared(b))
                     for b in ("c", "bindings", "cffi") + COMPARISON_BACKENDS if b != default]
    pointer_rows += [(f"floor: bare cuLaunchKernel via {b}", raw(b))
                     for b in ("api", "bindings", "cffi")]
    pointer_rows += [("cuda.core launch", cuda_core)]
    pointer_rows += [(name, floor_row(how)) for how, name in FLOOR_ROWS.items()]
    results["array_rows"] = [name for name, _ in array_rows]
    results["pointer_rows"] = [name for name, _ in pointer_rows]
    _measure_rows(array_rows + pointer_rows, results, BATCHES, PER_BATCH)
    # Smaller batches: if these agree with the rows above, the queue never filled.
    _measure_rows([(MAIN_ROW, prepared(None)), ("cuda.core launch", cuda_core)], results,
                  200, 50, suffix=", batches of 50")

    stream.synchronize()
    if cupy_stream:
        import cupy as cp
        cp.cuda.Stream.null.use()
    results["tables"] = _tables(results)
    results["method"] = METHOD
    _print_table(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


#: The floors of any launcher (`_launch_backends.floor_probe`): how -> row.
FLOOR_ROWS = {"loop": "floor: cuLaunchKernel from one C loop, no Python",
              "once": "floor: one Python call of a C launch, GIL released (as cupric)",
              "held": "floor: one Python call of a C launch, GIL held"}
#: Each cupric array row and the peer row that takes the same arrays.
PEER_OF = {}
ROW_BUFFERS = "@cupric.kernel, DeviceBuffers"
ROW_CUPY = "@cupric.kernel, CuPy arrays"
ROW_TORCH = "@cupric.kernel, PyTorch tensors"
ROW_NUMBA = "@cupric.kernel, numba-cuda device arrays"
ROW_CAI = "@cupric.kernel, CuPy arrays through __cuda_array_interface__ only"
ROW_BUFFERS_PY = "@cupric.kernel, DeviceBuffers, Python launcher"
ROW_CUPY_PY = "@cupric.kernel, CuPy arrays, Python launcher"
ROW_BUFFERS_SECOND = "@cupric.kernel, DeviceBuffers, second kind (CuPy arrays first)"
ROW_CUPY_SECOND = "@cupric.kernel, CuPy arrays, second kind (DeviceBuffers first)"
ROW_TORCH_SECOND = "@cupric.kernel, PyTorch tensors, second kind (DeviceBuffers first)"
#: Each second-kind row and the row of the same arrays on a kernel of their own.
FIRST_OF = {ROW_BUFFERS_SECOND: ROW_BUFFERS, ROW_CUPY_SECOND: ROW_CUPY,
            ROW_TORCH_SECOND: ROW_TORCH}
PEER_OF.update({ROW_BUFFERS: "CuPy RawKernel, CuPy arrays",
                ROW_BUFFERS_SECOND: "CuPy RawKernel, CuPy arrays",
                ROW_CUPY_SECOND: "CuPy RawKernel, CuPy arrays",
                ROW_TORCH_SECOND: "PyTorch add(alpha=, out=), one kernel",
                ROW_BUFFERS_PY: "CuPy RawKernel, CuPy arrays",
                ROW_CUPY_PY: "CuPy RawKernel, CuPy arrays",
                ROW_CUPY: "CuPy RawKernel, CuPy arrays",
                ROW_CAI: "CuPy RawKernel, CuPy arrays",
                ROW_TORCH: "PyTorch add(alpha=, out=), one kernel",
                ROW_NUMBA: "numba-cuda kernel, its device arrays"})
METHOD = ("y = a * x + y on 1024 random float32 values (x, y, a, n), launched back to back: "
          f"{BATCHES} batches of {PER_BATCH} launches per row, a synchronize between batches "
          "outside the timed region, rows interleaved batch by batch, median batch. Every "
          "row's one launch from the same y is checked against NumPy first. The first table "
          "passes arrays on both sides (each cupric row beside the peer taking the same "
          "arrays; the PyTorch peer is a whole `add` op, one kernel); the second passes "
          "pre-typed raw pointers, which no array user writes, and is not the headline.")


def _tables(results: dict) -> list:
    def us(name):
        row = results.get(name, {})
        return row.get("us")

    def note(name):
        row = results.get(name, {})
        return row.get("error", "")
    rows = []
    for name in results["array_rows"]:
        peer = PEER_OF.get(name)
        rows.append([name, us(name), peer or "", us(peer) if peer else None,
                     ratio(us(peer), us(name)) if peer else None, note(name)])
    arrays = table("Array arguments (us per launch)",
                   [("launch", ""), ("us", ".2f"), ("peer with the same arrays", ""),
                    ("peer us", ".2f"), ("peer / cupric", ".2f"), ("error", "")], rows)
    rows = [[name, us(name), results.get(name, {}).get("continuous_us"), note(name)]
            for name in results["pointer_rows"]]
    rows += [[name, results[name].get("us"), results[name].get("continuous_us"),
              note(name)] for name in results if name.endswith(", batches of 50")]
    pointers = table("Pre-typed raw pointers (us per launch; not array against array)",
                     [("launch", ""), ("us", ".2f"), ("continuous", ".2f"), ("error", "")],
                     rows, f"cupric's default launch backend: {results.get('default_backend')}.")
    rows = [[second, us(second), first, us(first), ratio(us(second), us(first)),
             note(second)] for second, first in FIRST_OF.items()]
    kinds = table("A second array kind on one kernel (us per launch)",
                  [("launch", ""), ("us", ".2f"), ("the same arrays on a kernel of their "
                                                   "own", ""),
                   ("us", ".2f"), ("second / own", ".2f"), ("error", "")], rows,
                  "Goal: within 10 % of the arrays' own kernel (second / own <= 1.10).")
    peer = "CuPy RawKernel, CuPy arrays"
    rows = [[name, us(name), us(peer), ratio(us(name), us(peer)), note(name)]
            for name in list(FLOOR_ROWS.values()) + [ROW_BUFFERS, ROW_CUPY]]
    floors = table("Floors beside CuPy's RawKernel (us per launch)",
                   [("launch", ""), ("us", ".2f"), ("CuPy RawKernel us", ".2f"),
                    ("/ RawKernel", ".2f"), ("error", "")], rows,
                   "The same kernel from one C loop (the driver alone) and from one Python "
                   "call of a C function taking no arguments (the least any Python launch "
                   "costs), parameters packed beforehand. Goals: DeviceBuffers <= 0.6x, CuPy "
                   "arrays <= 0.8x RawKernel; a floor above a goal puts that goal below "
                   "this host's driver.")
    return [arrays, kinds, pointers, floors]


def _print_table(results: dict) -> None:
    print(f"launch overhead on {results['device']}: median of {BATCHES} batches of "
          f"{PER_BATCH} launches per row, rows interleaved")
    for t in results["tables"]:
        print(t["title"])
        for row in t["rows"]:
            print("  " + " | ".join(f"{c:.2f}" if isinstance(c, float) else str(c)
                                    for c in row))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    results = run(args.json)
    return 1 if any(isinstance(v, dict) and "error" in v for v in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
