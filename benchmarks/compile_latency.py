"""Compile latency of a small kernel (saxpy) in fresh processes, beside NVRTC (CuPy
RawKernel) and numba-cuda, and the time of `import cupric`.

Each figure is the median over fresh Python processes. The comparison with the peers is
of the same work: compile and load, CUDA initialized. CuPy's `RawKernel.compile()` and
numba-cuda's `cuda.jit(sig)` both initialize CUDA and load the module into a context, so
cupric's figure beside them (`cold_compile_load_s`) adds making the primary context
current and loading the cubin to its compile. cupric's own figures:
- import: `import cupric` alone;
- cold: after `import cupric` and the kernel's module, `kern.compile(sig)` with an empty
  kernel cache (typing, codegen, libNVVM, nvJitLink/ptxas);
- hit: the same in a new process whose cache holds the kernel (no typing, no libNVVM).
Goals: import <= 150 ms, cold <= 50 ms, hit <= 2 ms. The peers compile the same kernel
with their own caches disabled (CuPy: empty CUPY_CACHE_DIR; numba: no cache).

cupric runs from a copy of the package, so that what the children find is known:
- `cold_compile_s` (the goal's figure): the copy has bytecode (.pyc), as an installed
  package does, and the cache root remembers where the toolchain libraries are, as it
  does after the first compile in an environment; only the kernel cache is emptied;
- `cold_compile_no_bytecode_s`: the same with PYTHONDONTWRITEBYTECODE=1 and a copy
  without bytecode: every cupric module a compile imports is compiled from source (a
  source checkout on a machine that forbids bytecode; stdlib and site-packages keep theirs);
- `first_compile_new_environment_s`: an empty cache root, so the toolchain is searched
  for through cuda.pathfinder once (the first compile after an install).
One untimed process runs before each series: it writes the bytecode (or not) and reads the
toolchain libraries into the page cache, which a user pays once, not per process.

    python3 benchmarks/compile_latency.py [--json PATH] [--runs N] [--phases]

`--phases` also times the parts of a cold compile (medians over fresh processes; the
loader thread's time overlaps the main thread's): where the time goes on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

from _common import ratio, table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL = '''
import cupric
from cupric.device import grid
from cupric.types import Array, f32

@cupric.kernel
def saxpy(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    i = grid(1)
    if i < len(x):
        y[i] = a * x[i] + y[i]
'''

CHILD = '''
import json, sys, time
t0 = time.perf_counter()
import cupric
t1 = time.perf_counter()
sys.path.insert(0, {dir!r})
import saxpy_kernel
sig = "f32, Array[f32, 1, 'C'], Array[f32, 1, 'C']"
t2 = time.perf_counter()
artifact = saxpy_kernel.saxpy.compile(sig, arch={arch!r})
t3 = time.perf_counter()
assert artifact.ptx and ".entry saxpy" in artifact.ptx
assert artifact.cubin is not None
assert cupric.__file__.startswith({source!r}), cupric.__file__
pathfinder = "cuda.pathfinder" in sys.modules
# What the peers' figures include as well: CUDA initialized, the module loaded.
from cupric import runtime as rt
rt.Device(0).make_current()
function = rt.Module.from_data(artifact.cubin).get_function("saxpy")
t4 = time.perf_counter()
# Untimed: the compiled kernel computes saxpy (1000 random values against NumPy).
import numpy as np
hx = np.random.default_rng(1).random(1000, dtype=np.float32)
hy = np.random.default_rng(2).random(1000, dtype=np.float32)
x, y = rt.to_device(hx), rt.to_device(hy)
saxpy_kernel.saxpy[4, 256](np.float32(2.0), x, y)
assert np.allclose(y.to_numpy(), 2 * hx + hy, rtol=1e-6), "cupric's saxpy is wrong"
print(json.dumps({{"import_s": t1 - t0, "compile_s": t3 - t2, "load_s": t4 - t3,
                  "from_cache": artifact.from_cache, "pathfinder": pathfinder}}))
'''

# Times the parts of a cold compile by wrapping the functions that do them (the wrappers
# only read the clock). Keys are printed in this order.
PHASES_CHILD = '''
import json, sys, threading, time
import cupric
sys.path.insert(0, {dir!r})
import saxpy_kernel
from cupric.compiler import kernel, link, nvvm, toolchain
clock = time.perf_counter
times = {{}}
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        start = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            times[label] = times.get(label, 0.0) + clock() - start
    setattr(owner, name, wrapper)
timed(kernel, "_start_toolchain_load", "start the loader threads")
timed(toolchain, "_load_libnvvm", "load libNVVM (thread)")
timed(toolchain, "_load_nvjitlink", "load nvJitLink (thread)")
timed(toolchain, "_wait_for_loader", "wait for the nvJitLink thread")
timed(nvvm, "compile_ir", "libNVVM compile")
timed(link, "link_ptx", "link (nvJitLink/ptxas)")
ir_property = kernel.Specialization.ir
def ir(self):
    start = clock()
    try:
        return ir_property.fget(self)
    finally:
        times.setdefault("typing + codegen (with imports)", clock() - start)
kernel.Specialization.ir = property(ir)
sig = "f32, Array[f32, 1, 'C'], Array[f32, 1, 'C']"
start = clock()
artifact = saxpy_kernel.saxpy.compile(sig, arch={arch!r})
times["total"] = clock() - start
assert not artifact.from_cache
print(json.dumps(times))
'''

CUPY_CHILD = '''
import json, time
import cupy as cp
src = r"""extern "C" __global__ void saxpy(float a, const float* __restrict__ x,
    float* __restrict__ y, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }"""
t0 = time.perf_counter()
k = cp.RawKernel(src, "saxpy")
k.compile()
t1 = time.perf_counter()
# Untimed: the compiled kernel computes saxpy (1000 random values against NumPy).
import numpy as np
hx = np.random.default_rng(1).random(1000, dtype=np.float32)
hy = np.random.default_rng(2).random(1000, dtype=np.float32)
x, y = cp.asarray(hx), cp.asarray(hy)
k((4,), (256,), (np.float32(2.0), x, y, np.int64(1000)))
assert np.allclose(y.get(), 2 * hx + hy, rtol=1e-6), "CuPy's saxpy is wrong"
print(json.dumps({"compile_s": t1 - t0}))
'''

NUMBA_CHILD = '''
import json, time
import numpy as np
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
from numba import cuda
t0 = time.perf_counter()
@cuda.jit("void(float32, float32[::1], float32[::1])")
def saxpy(a, x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = a * x[i] + y[i]
t1 = time.perf_counter()
# Untimed: the compiled kernel computes saxpy (1000 random values against NumPy).
import numpy as np
hx = np.random.default_rng(1).random(1000, dtype=np.float32)
hy = np.random.default_rng(2).random(1000, dtype=np.float32)
x, y = cuda.to_device(hx), cuda.to_device(hy)
saxpy[4, 256](np.float32(2.0), x, y)
assert np.allclose(y.copy_to_host(), 2 * hx + hy, rtol=1e-6), "numba's saxpy is wrong"
print(json.dumps({"compile_s": t1 - t0}))
'''


def _child(code: str, env: dict) -> dict:
    # Run from the kernel's folder: `python -c` puts the working folder first on sys.path.
    cwd = env.get("CUPRIC_BENCH_CWD", ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip()[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(source: str = ROOT, *, bytecode: bool | None = None, **extra) -> dict:
    """The parent's environment with `source` (where `cupric` is imported from) first on
    PYTHONPATH; `bytecode` True/False allows/forbids writing .pyc files, None keeps the
    parent's setting."""
    env = dict(os.environ)
    env["PYTHONPATH"] = source + os.pathsep + env.get("PYTHONPATH", "")
    if source != ROOT:
        env["CUPRIC_BENCH_CWD"] = source
    if bytecode is True:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    elif bytecode is False:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def _arch() -> str:
    try:
        from cupric.compiler.target import current_arch
        return current_arch() or "sm_90"
    except Exception:  # no driver: compile for the default target
        return "sm_90"


def _empty_kernel_cache(root: str) -> None:
    shutil.rmtree(os.path.join(root, "kernels"), ignore_errors=True)


def run(json_path: str | None = None, runs: int = 3, phases: bool = True,
        quick: bool = False) -> dict:
    """Measure; returns seconds (medians) and the goals' pass/fail."""
    if quick:
        runs, phases = 2, False
    arch = _arch()
    imports, cold, hit, cold_source, first, pathfinder = [], [], [], [], [], []
    cold_load, hit_load = [], []
    parts: dict = {}
    with tempfile.TemporaryDirectory(prefix="cupric-compile-latency-") as work:
        source = os.path.join(work, "source")
        shutil.copytree(os.path.join(ROOT, "cupric"), os.path.join(source, "cupric"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        kdir = os.path.join(work, "kernel")
        os.mkdir(kdir)
        with open(os.path.join(kdir, "saxpy_kernel.py"), "w") as fh:
            fh.write(textwrap.dedent(KERNEL))
        code = CHILD.format(dir=kdir, arch=arch, source=source)
        root = os.path.join(work, "cache")  # keeps the toolchain's locations between runs

        # 1. No bytecode (first, while the copy has none); the untimed run also writes the
        #    toolchain record of the cache root.
        env = _env(source, bytecode=False, CUPRIC_CACHE_DIR=root)
        for i in range(runs + 1):
            _empty_kernel_cache(root)
            sample = _child(code, env)
            assert not sample["from_cache"], sample
            if i:
                cold_source.append(sample["compile_s"])
        # 2. With bytecode: the untimed run writes it.
        env = _env(source, bytecode=True, CUPRIC_CACHE_DIR=root)
        for i in range(runs + 1):
            _empty_kernel_cache(root)
            sample, again = _child(code, env), _child(code, env)
            assert not sample["from_cache"] and again["from_cache"], (sample, again)
            if i:
                imports += [sample["import_s"], again["import_s"]]
                pathfinder.append(sample["pathfinder"])
                cold.append(sample["compile_s"])
                hit.append(again["compile_s"])
                cold_load.append(sample["compile_s"] + sample["load_s"])
                hit_load.append(again["compile_s"] + again["load_s"])
        # 3. A new environment: nothing remembered.
        for _ in range(runs):
            with tempfile.TemporaryDirectory(dir=work) as fresh:
                sample = _child(code, _env(source, bytecode=True, CUPRIC_CACHE_DIR=fresh))
                first.append(sample["compile_s"])
        if phases:
            code = PHASES_CHILD.format(dir=kdir, arch=arch)
            for _ in range(runs):
                _empty_kernel_cache(root)
                for name, value in _child(code, env).items():
                    parts.setdefault(name, []).append(value)
    results = {"arch": arch, "import_cupric_s": statistics.median(imports),
               "cold_compile_load_s": statistics.median(cold_load),
               "cache_hit_load_s": statistics.median(hit_load),
               "cold_compile_s": statistics.median(cold),
               "cache_hit_s": statistics.median(hit),
               "cold_compile_no_bytecode_s": statistics.median(cold_source),
               "first_compile_new_environment_s": statistics.median(first),
               # whether a cold compile with the toolchain remembered imported it
               "cold_imports_cuda_pathfinder": any(pathfinder)}
    for name, code, extra in (("nvrtc_cupy", CUPY_CHILD, "CUPY_CACHE_DIR"),
                              ("numba_cuda", NUMBA_CHILD, None)):
        samples, warm = [], []
        try:
            for _ in range(runs):
                with tempfile.TemporaryDirectory() as cache:
                    env = _env(**({extra: cache} if extra else {}))
                    samples.append(_child(code, env)["compile_s"])
                    if extra:  # CuPy's kernel cache, filled by the run above
                        warm.append(_child(code, env)["compile_s"])
            results[f"{name}_cold_compile_load_s"] = statistics.median(samples)
            if warm:
                results[f"{name}_cache_hit_load_s"] = statistics.median(warm)
        except Exception as exc:  # a peer that is not installed is reported, not fatal
            results[f"{name}_cold_compile_load_s"] = f"unavailable: {str(exc)[-200:]}"
    if parts:
        results["cold_phases_s"] = {name: statistics.median(v) for name, v in parts.items()}
    results["goals"] = {"import<=0.150s": results["import_cupric_s"] <= 0.150,
                        "cold<=0.050s": results["cold_compile_s"] <= 0.050,
                        "hit<=0.002s": results["cache_hit_s"] <= 0.002}
    results["title"] = "Compile latency of a small kernel"
    results["method"] = METHOD
    results["tables"] = _tables(results)
    _print(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


METHOD = (
    "saxpy compiled in fresh processes, medians; each process then runs the kernel it "
    "compiled on 1000 random values against NumPy (untimed), or its figure is not kept. "
    "The headline compares the same work on "
    "every side: compile and load, CUDA initialized (cupric: `kern.compile(sig)`, then "
    "the primary context made current and the cubin loaded; CuPy: `RawKernel.compile()`, "
    "which compiles with NVRTC, initializes CUDA and loads the module; numba-cuda: "
    "`cuda.jit(sig)`, which compiles, initializes CUDA and loads it). Library imports are "
    "outside every figure. cupric's compile alone (PTX and cubin, no driver) has no peer "
    "figure of the same work and is listed apart.")


def _tables(r: dict) -> list:
    def num(key):
        v = r.get(key)
        return v * 1e3 if isinstance(v, float) else None
    cupy_cold = num("nvrtc_cupy_cold_compile_load_s")
    numba_cold = num("numba_cuda_cold_compile_load_s")
    ours = num("cold_compile_load_s")
    rows = [["first compile + load (empty kernel caches)", ours, cupy_cold, numba_cold,
             ratio(cupy_cold, ours), ratio(numba_cold, ours)],
            ["compile + load, kernel cache warm", num("cache_hit_load_s"),
             num("nvrtc_cupy_cache_hit_load_s"), None,
             ratio(num("nvrtc_cupy_cache_hit_load_s"), num("cache_hit_load_s")), None]]
    errors = "; ".join(f"{k}: {v}" for k, v in r.items() if isinstance(v, str)
                       and v.startswith("unavailable"))
    head = table("Compile + load, CUDA initialized (ms)",
                 [("what", ""), ("cupric", ".1f"), ("CuPy (NVRTC)", ".1f"),
                  ("numba-cuda", ".1f"), ("CuPy / cupric", ".2f"), ("numba / cupric", ".2f")],
                 rows, errors)
    rows = [["`import cupric`", num("import_cupric_s")],
            ["compile only (PTX and cubin, no driver), empty kernel cache", num("cold_compile_s")],
            ["compile only, cache hit in a new process", num("cache_hit_s")],
            ["compile only, no bytecode (PYTHONDONTWRITEBYTECODE=1)",
             num("cold_compile_no_bytecode_s")],
            ["compile only, new environment (toolchain searched for)",
             num("first_compile_new_environment_s")]]
    rows += [[f"phase: {k}", v * 1e3] for k, v in (r.get("cold_phases_s") or {}).items()]
    own = table("cupric alone (ms; no peer does the same work)", [("what", ""), ("ms", ".2f")],
                rows)
    return [head, own]


def _print(results: dict) -> None:
    print(f"compile latency ({results['arch']}), medians over fresh processes")
    for key, value in results.items():
        if key in ("arch", "goals", "tables", "method", "title"):
            continue
        if key == "cold_phases_s":
            print("  cold compile phases (medians):")
            for name, seconds in value.items():
                print(f"    {name:38s} {seconds * 1e3:9.2f} ms")
            continue
        shown = f"{value * 1e3:9.2f} ms" if isinstance(value, float) else value
        print(f"  {key:32s} {shown}")
    print("  goals: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}"
                                  for k, v in results["goals"].items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--phases", action="store_true",
                        help="also time the parts of a cold compile")
    args = parser.parse_args()
    run(args.json, args.runs, args.phases)
