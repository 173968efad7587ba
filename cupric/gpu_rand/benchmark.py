"""GPU benchmark of gpu_rand beside cuRAND, in one process run (needs a GPU and CuPy).

Measures uniform and normal float32 fills of 2^28 values (Gsamples/s) for cupric's
device half and cuRAND's Philox4x32-10 and XORWOW host API (through CuPy), and the time
to initialize 2^20 streams on the device. `python -m cupric.gpu_rand.benchmark` prints a
table; `run(json_path)` also writes JSON. The checked, like-for-like comparison whose
figures BENCHMARKS.md shows is `benchmarks/rng.py`.

Two timings per fill, the same for every row:

- ``..._Gsamples_s`` (wall): median over 20 samples of one call closed by a device-wide
  synchronize, host time included (the launch's Python work, the sync's latency): what a
  caller that waits for each fill sees.
- ``..._events_Gsamples_s``: CUDA events around 4 back-to-back calls on the legacy
  default stream (both cupric and CuPy launch there), median of 20 samples, per call:
  the GPU's time for a fill once the host keeps ahead of it (the method of
  ../shared/bench/peer_baseline.py, which timed cuRAND this way, with batches as in
  benchmarks/bandwidth.py).
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

__all__ = ["run", "main"]

N = 1 << 28
REPEATS = 20
BATCH = 4  # calls per event-timed sample


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


def _event_timed(fn, start, stop, elapsed_ms, repeats: int = REPEATS) -> float:
    """Median GPU seconds per call of `fn`, from events `start`/`stop` (recorded by the
    callables given) around BATCH back-to-back calls."""
    fn()
    times = []
    for _ in range(repeats):
        start()
        for _ in range(BATCH):
            fn()
        stop()
        times.append(elapsed_ms() / 1e3 / BATCH)
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
    device = runtime.current_device()
    ev0, ev1 = device.create_event(), device.create_event()

    def elapsed_ms() -> float:
        ev1.synchronize()
        return ev0.elapsed_time(ev1)

    for label, fill in [("uniform", lambda: rng.random(out=out)),
                        ("normal", lambda: rng.standard_normal(out=out))]:
        results[f"{tag}_{label}_f32_Gsamples_s"] = N / _timed(fill, sync) / 1e9
        results[f"{tag}_{label}_f32_events_Gsamples_s"] = N / _event_timed(
            fill, ev0.record, ev1.record, elapsed_ms) / 1e9
    # The fill is correct before it is fast: uniform values in [0, 1), mean near 1/2.
    rng.random(out=out)
    head = out.to_numpy()[:1 << 20]
    if not (head.min() >= 0.0 and head.max() < 1.0 and abs(head.mean() - 0.5) < 0.01):
        raise RuntimeError(f"{tag}: the uniform fill is wrong (min {head.min()}, "
                           f"max {head.max()}, mean {head.mean()})")
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
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()

    def elapsed_ms() -> float:
        ev1.synchronize()
        return cp.cuda.get_elapsed_time(ev0, ev1)

    for label, kind in [("philox", curand.CURAND_RNG_PSEUDO_PHILOX4_32_10),
                        ("xorwow", curand.CURAND_RNG_PSEUDO_XORWOW)]:
        g = curand.createGenerator(kind)
        curand.setPseudoRandomGeneratorSeed(g, 1234)
        for family, fill in [
                ("uniform", lambda: curand.generateUniform(g, out.data.ptr, N)),
                ("normal", lambda: curand.generateNormal(g, out.data.ptr, N, 0.0, 1.0))]:
            results[f"curand_{label}_{family}_f32_Gsamples_s"] = N / _timed(fill, sync) / 1e9
            results[f"curand_{label}_{family}_f32_events_Gsamples_s"] = N / _event_timed(
                fill, ev0.record, ev1.record, elapsed_ms) / 1e9
        curand.destroyGenerator(g)


def run(json_path: str | None = None) -> dict:
    """Measure everything in this process; return (and optionally write) the results."""
    results: dict = {"N": N}
    for algorithm, streams in [("xoshiro128++", 1 << 16), ("xoshiro128++", 1 << 17),
                               ("xoshiro128++", 1 << 18), ("xoroshiro128**", 1 << 18),
                               ("xoshiro256++", 1 << 18)]:
        _cupric(results, algorithm, streams)
    try:
        _curand(results)
    except ImportError as exc:  # CuPy missing: report it, keep cupric's figures
        results["curand_error"] = f"CuPy is not importable: {exc}"
    # Each configuration with its own ratio to Philox (no best-of across them).
    for key, value in list(results.items()):
        if key.startswith("cupric_") and key.endswith("_Gsamples_s"):
            family_timing = key.split("_", 3)[3]  # e.g. uniform_f32_events_Gsamples_s
            philox = results.get(f"curand_philox_{family_timing}")
            if philox:
                results[f"{key[:-len('_Gsamples_s')]}_vs_philox"] = value / philox
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
