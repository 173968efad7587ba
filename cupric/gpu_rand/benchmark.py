"""GPU benchmark of gpu_rand beside cuRAND, in one process run (needs a GPU and CuPy).

Measures uniform and normal float32 fills of 2^28 values (Gsamples/s) for cupric's
device half and cuRAND's Philox4x32-10 and XORWOW host API (through CuPy), and the time
to initialize 2^20 streams on the device. `python -m cupric.gpu_rand.benchmark` prints a
table; `run(json_path)` also writes JSON (the `benchmarks/run_all.py` protocol).
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

__all__ = ["run", "main"]

N = 1 << 28
REPEATS = 20


def _timed(fn, sync, repeats: int = REPEATS) -> float:
    """Median seconds of `fn` over `repeats` calls, each closed by a device-wide `sync`."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cupric(results: dict, algorithm: str, streams: int) -> None:
    from cupric import runtime
    from cupric.gpu_rand import Generator
    from cupric.gpu_rand.backends import CudaBackend
    from cupric.gpu_rand.generator import DIGIT_BITS
    from cupric.gpu_rand.streams import jump_table
    from cupric.runtime.memory import empty

    sync = runtime.synchronize
    tag = f"cupric_{algorithm}_S{streams}"
    rng = Generator(1234, algorithm=algorithm, streams=streams)
    out = empty(N, np.float32)
    results[f"{tag}_uniform_f32_Gsamples_s"] = N / _timed(lambda: rng.random(out=out), sync) / 1e9
    results[f"{tag}_normal_f32_Gsamples_s"] = \
        N / _timed(lambda: rng.standard_normal(out=out), sync) / 1e9
    out.close()

    # Stream initialization: the kernel alone (tables already on the device), and the
    # whole first use (tables from the host cache, copies, kernel).
    n = 1 << 20
    backend = CudaBackend()
    alg = rng._alg
    table = backend.to_device(jump_table(alg, n, digit_bits=DIGIT_BITS))
    base = backend.to_device(rng._base.reshape(alg.words, 1))
    states = backend.empty((alg.words, n), alg.dtype)
    init = (states, base, table, DIGIT_BITS)
    results[f"cupric_{algorithm}_init_1M_streams_kernel_ms"] = 1e3 * _timed(
        lambda: backend.launch("init_streams", alg, n, init), sync)
    results[f"cupric_{algorithm}_init_1M_streams_first_use_ms"] = 1e3 * _timed(
        lambda: Generator(99, algorithm=algorithm, streams=n).device_states(backend), sync,
        repeats=5)


def _curand(results: dict) -> None:
    import cupy as cp
    from cupy.cuda import curand

    sync = cp.cuda.Device().synchronize
    out = cp.empty(N, dtype=cp.float32)
    for label, kind in [("philox", curand.CURAND_RNG_PSEUDO_PHILOX4_32_10),
                        ("xorwow", curand.CURAND_RNG_PSEUDO_XORWOW)]:
        g = curand.createGenerator(kind)
        curand.setPseudoRandomGeneratorSeed(g, 1234)
        results[f"curand_{label}_uniform_f32_Gsamples_s"] = N / _timed(
            lambda: curand.generateUniform(g, out.data.ptr, N), sync) / 1e9
        results[f"curand_{label}_normal_f32_Gsamples_s"] = N / _timed(
            lambda: curand.generateNormal(g, out.data.ptr, N, 0.0, 1.0), sync) / 1e9
        curand.destroyGenerator(g)


def run(json_path: str | None = None) -> dict:
    """Measure everything in this process; return (and optionally write) the results."""
    results: dict = {"N": N}
    for algorithm, streams in [("xoshiro128++", 1 << 16), ("xoshiro128++", 1 << 18),
                               ("xoroshiro128**", 1 << 18), ("xoshiro256++", 1 << 18)]:
        _cupric(results, algorithm, streams)
    try:
        _curand(results)
    except ImportError as exc:  # CuPy missing: report it, keep cupric's figures
        results["curand_error"] = f"CuPy is not importable: {exc}"
    best_uniform = max(v for k, v in results.items()
                       if k.startswith("cupric_") and k.endswith("uniform_f32_Gsamples_s"))
    results["cupric_best_uniform_f32_Gsamples_s"] = best_uniform
    if "curand_philox_uniform_f32_Gsamples_s" in results:
        results["ratio_uniform_vs_philox"] = \
            best_uniform / results["curand_philox_uniform_f32_Gsamples_s"]
        best_normal = max(v for k, v in results.items()
                          if k.startswith("cupric_") and k.endswith("normal_f32_Gsamples_s"))
        results["ratio_normal_vs_philox"] = \
            best_normal / results["curand_philox_normal_f32_Gsamples_s"]
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=2)
    return results


def main() -> None:
    results = run()
    width = max(len(k) for k in results)
    for key, value in results.items():
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")


if __name__ == "__main__":
    main()
