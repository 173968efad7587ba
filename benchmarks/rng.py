"""Random fills of gpu_rand beside cuRAND, and stream initialization beside numba-cuda,
all in one process.

Fills of 2^28 float32 values, uniform and normal, for every cupric configuration
(algorithm and number of streams) and for cuRAND's Philox4x32-10 and XORWOW (host API,
through CuPy), each configuration with its own ratio to Philox (no best-of). Two timings
per fill: "wall", one call closed by a device-wide synchronize (host work included), and
"events", device time per call of 4 back-to-back calls between two events (after a
lead-in call); medians of 15 samples (5 with --quick), contenders interleaved.

Checked before timing, for every contender: the output is poisoned (NaN), filled, and
every one of the 2^28 values must lie in [0, 1) (uniform; cuRAND: (0, 1], as it
documents) or be finite (normal), with
mean and variance within 6 standard errors of the distribution's. The device engines
must also give what gpu_rand's host half (NumPy) gives: a fill of 2^20 values with 2^16
streams of each algorithm, compared in full (uniform: the same bits; normal: within 1e-5,
as libdevice's and NumPy's logarithm and sine may round differently).

Stream initialization: 2^20 streams on the device, cupric's first use (jump tables from
the host cache, copies, one kernel) beside numba-cuda's `create_xoroshiro128p_states`
(its jumps run on the host, then one copy), both closed by a synchronize, in this
process; cupric's kernel alone (tables already on the device) has no peer figure of the
same work and is listed apart. The first 2^16 of cupric's device states must equal the
host half's states of 2^16 streams.

    python3 benchmarks/rng.py [--json PATH] [--quick]
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import numpy as np

from _common import CheckError, error_text, finish, print_tables, ratio, table

N = 1 << 28
REPEATS = 15
BATCH = 4
CONFIGS = (("xoshiro128++", 1 << 16), ("xoshiro128++", 1 << 17), ("xoshiro128++", 1 << 18),
           ("xoroshiro128**", 1 << 18), ("xoshiro256++", 1 << 18))
INIT_STREAMS = 1 << 20


def _moments(label: str, family: str, view, cp) -> dict:
    """The whole output on the device: range (uniform: [0, 1) for gpu_rand, (0, 1] for
    cuRAND, as each documents) or finiteness (normal), and the moments."""
    v = view
    n = v.size
    mean = float(cp.mean(v, dtype=cp.float64))
    var = float(cp.var(v, dtype=cp.float64))
    se = 6.0 / math.sqrt(n)
    if family == "uniform":
        lo, hi = float(v.min()), float(v.max())
        in_range = (0.0 < lo and hi <= 1.0) if label.startswith("cuRAND") else \
            (0.0 <= lo and hi < 1.0)
        ok = in_range and abs(mean - 0.5) < se * math.sqrt(1 / 12) and \
            abs(var - 1 / 12) < se * 0.075
        detail = f"min {lo}, max {hi}"
    else:
        finite = bool(cp.isfinite(v).all())
        ok = finite and abs(mean) < se and abs(var - 1.0) < se * math.sqrt(2)
        detail = f"all finite {finite}"
    if not ok:
        raise CheckError(f"{label} {family}: {detail}, mean {mean}, variance {var}")
    return {"compared": int(n), "mean": mean, "variance": var}


def _exact_against_host(results: dict) -> None:
    """Device fills equal the host half's bits (2^20 values, 2^16 streams, each engine)."""
    from cupric.gpu_rand import Generator
    from cupric.runtime.memory import empty
    n = 1 << 20
    for algorithm in sorted({a for a, _ in CONFIGS}):
        for family in ("uniform", "normal"):
            key = f"exact_{algorithm}_{family}"
            try:
                dev, host = (Generator(77, algorithm=algorithm, streams=1 << 16)
                             for _ in range(2))
                out = empty(n, np.float32)
                out.memset(0xFF, 8)
                expect = np.empty(n, np.float32)
                if family == "uniform":
                    dev.random(dtype=np.float32, out=out)
                    host.random(dtype=np.float32, out=expect)
                else:
                    dev.standard_normal(dtype=np.float32, out=out)
                    host.standard_normal(dtype=np.float32, out=expect)
                got = out.to_numpy()
                out.close()
                if family == "uniform":  # the same bits, scaled: equal
                    bad = int(np.count_nonzero(got.view(np.uint32) != expect.view(np.uint32)))
                    if bad:
                        raise CheckError(f"{algorithm} {family}: {bad} of {n} device values "
                                         "differ from the host half's")
                    results[key] = "equal"
                    continue
                # Normals: the same uniforms through log and sincospi, whose device
                # (libdevice) and NumPy forms may round differently in the last bits.
                diff = np.abs(got.astype(np.float64) - expect)
                bad = int(np.count_nonzero(~(diff <= 1e-5 * (1.0 + np.abs(expect)))))
                if bad:
                    raise CheckError(f"{algorithm} {family}: {bad} of {n} device values "
                                     "differ from the host half's by more than 1e-5")
                results[key] = f"within {float(diff.max()):.1e}"
            except Exception as exc:
                results[key] = {"error": error_text(exc)}


def _fills(results: dict, quick: bool) -> None:
    import cupy as cp
    from cupy.cuda import curand

    from cupric.gpu_rand import Generator
    from cupric.runtime.memory import empty

    repeats = 5 if quick else REPEATS
    sync = cp.cuda.Device().synchronize
    ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    contenders = {}  # name -> {family: (fill, output view)}
    out = empty(N, np.float32)
    view = cp.asarray(out)  # the same memory, through the CUDA Array Interface
    results["_keep"] = [out]
    for algorithm, streams in (CONFIGS[:1] if quick else CONFIGS):
        gen = Generator(1234, algorithm=algorithm, streams=streams)
        contenders[f"cupric {algorithm}, {streams} streams"] = {
            "uniform": lambda g=gen: g.random(dtype=np.float32, out=out),
            "normal": lambda g=gen: g.standard_normal(dtype=np.float32, out=out)}
    c_out = cp.empty(N, dtype=cp.float32)
    generators = []
    for label, kind in (("cuRAND Philox4_32_10", curand.CURAND_RNG_PSEUDO_PHILOX4_32_10),
                        ("cuRAND XORWOW", curand.CURAND_RNG_PSEUDO_XORWOW)):
        g = curand.createGenerator(kind)
        curand.setPseudoRandomGeneratorSeed(g, 1234)
        generators.append(g)
        contenders[label] = {
            "uniform": lambda g=g: curand.generateUniform(g, c_out.data.ptr, N),
            "normal": lambda g=g: curand.generateNormal(g, c_out.data.ptr, N, 0.0, 1.0)}
    rows: dict = {name: {} for name in contenders}
    for family in ("uniform", "normal"):
        ready = {}
        for name, fills in contenders.items():
            target = c_out if name.startswith("cuRAND") else view
            try:
                target.fill(cp.nan)
                sync()
                fills[family]()
                sync()
                rows[name][f"{family}_check"] = _moments(name, family, target, cp)
                ready[name] = fills[family]
            except Exception as exc:  # recorded; never timed
                rows[name][f"{family}_error"] = error_text(exc)
        wall = {n: [] for n in ready}
        events = {n: [] for n in ready}
        for fn in ready.values():
            fn()
        sync()
        names = list(ready)
        for r in range(repeats):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                fn = ready[name]
                t0 = time.perf_counter()
                fn()
                sync()
                wall[name].append(time.perf_counter() - t0)
                fn()  # lead-in: the GPU is busy while the events and the batch are queued
                ev0.record()
                for _ in range(BATCH):
                    fn()
                ev1.record()
                ev1.synchronize()
                events[name].append(cp.cuda.get_elapsed_time(ev0, ev1) / 1e3 / BATCH)
        for name in names:
            rows[name][f"{family}_wall_Gsamples_s"] = N / statistics.median(wall[name]) / 1e9
            rows[name][f"{family}_events_Gsamples_s"] = N / statistics.median(events[name]) / 1e9
    for g in generators:
        curand.destroyGenerator(g)
    results["fills"] = rows


def _init_streams(results: dict, quick: bool) -> None:
    from cupric import runtime as rt
    from cupric.gpu_rand import Generator
    from cupric.gpu_rand.backends import CudaBackend
    from cupric.gpu_rand.generator import DIGIT_BITS
    from cupric.gpu_rand.streams import jump_table

    n = 1 << 18 if quick else INIT_STREAMS
    entry: dict = {"streams": n}
    backend = CudaBackend()
    sync = rt.synchronize
    # Correct first: the device's first 2^16 streams are the host half's 2^16 streams.
    gen = Generator(99, algorithm="xoshiro128++", streams=n)
    states = backend.to_host(gen.device_states(backend))
    expect = Generator(99, algorithm="xoshiro128++", streams=1 << 16).stream_states
    if not np.array_equal(states[:, :1 << 16], expect):
        raise CheckError("init_streams: the device's stream states differ from the host's")
    sample = states[:, ::max(1, n // 4096)]
    if len({tuple(c) for c in sample.T}) != sample.shape[1]:
        raise CheckError("init_streams: repeated stream states")

    def first_use():
        Generator(99, algorithm="xoshiro128++", streams=n).device_states(backend)
        sync()

    def timed(fn, repeats):
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    entry["cupric_first_use_ms"] = 1e3 * timed(first_use, 5)
    alg = gen._alg
    table_ = backend.to_device(jump_table(alg, n, digit_bits=DIGIT_BITS))
    base = backend.to_device(gen._base.reshape(alg.words, 1))
    out = backend.empty((alg.words, n), alg.dtype)

    def kernel_only():
        backend.launch("init_streams", alg, n, (out, base, table_, DIGIT_BITS))
        sync()
    entry["cupric_kernel_only_ms"] = 1e3 * timed(kernel_only, 5)
    try:
        if not hasattr(np, "row_stack"):
            np.row_stack = np.vstack  # numba-cuda 0.30 with NumPy 2.5
        from numba import cuda
        from numba.cuda.random import create_xoroshiro128p_states
        create_xoroshiro128p_states(16, seed=1)  # its host-side jump function compiled

        def numba_init():
            states = create_xoroshiro128p_states(n, seed=99)
            cuda.synchronize()
            return states
        host = numba_init().copy_to_host()
        words = host.view(np.uint64).reshape(n, -1)
        if len({tuple(r) for r in words[::max(1, n // 4096)]}) != len(words[::max(1, n // 4096)]):
            raise CheckError("numba init: repeated stream states")
        entry["numba_cuda_ms"] = 1e3 * timed(numba_init, 1 if quick else 2)
    except Exception as exc:
        entry["numba_cuda_error"] = error_text(exc)
    results["init_streams"] = entry


def run(json_path: str | None = None, quick: bool = False) -> dict:
    """Measure everything in this process; return (and optionally write) the results."""
    results: dict = {"title": "Random numbers: gpu_rand beside cuRAND and numba-cuda", "N": N}
    for part in (_exact_against_host, _fills, _init_streams):
        try:
            if part is _exact_against_host:
                part(results)
            else:
                part(results, quick)
        except Exception as exc:
            results[f"{part.__name__.strip('_')}_error"] = error_text(exc)
    results.pop("_keep", None)
    return finish(results, json_path, " ".join(__doc__.split("\n\n")[1:3]), _tables(results))


def _tables(results: dict) -> list:
    out = []
    fills = results.get("fills") or {}
    philox = fills.get("cuRAND Philox4_32_10", {})
    rows = []
    for name, row in fills.items():
        cells = [name]
        for family in ("uniform", "normal"):
            for timing in ("wall", "events"):
                v = row.get(f"{family}_{timing}_Gsamples_s")
                cells += [v, ratio(v, philox.get(f"{family}_{timing}_Gsamples_s"))
                          if not name.startswith("cuRAND Philox") else None]
        cells.append("; ".join(v for k, v in row.items() if k.endswith("error")))
        rows.append(cells)
    cols = [("generator", "")]
    for family in ("uniform", "normal"):
        for timing in ("wall", "events"):
            cols += [(f"{family} {timing}", ".0f"), ("/ Philox", ".2f")]
    out.append(table("Fills of 2^28 float32 values (Gsamples/s)", cols + [("error", "")],
                     rows, "Each cupric configuration with its own ratio: value / Philox's "
                     "value of the same column (above 1: cupric faster)."))
    init = results.get("init_streams") or {}
    if init:
        n = init.get("streams")
        ours, numba = init.get("cupric_first_use_ms"), init.get("numba_cuda_ms")
        out.append(table(f"Initializing {n} streams on the device (ms, synchronized)",
                         [("what", ""), ("cupric", ".2f"), ("numba-cuda", ".1f"),
                          ("numba / cupric", ".0f"), ("error", "")],
                         [["first use: states built and on the device", ours, numba,
                           ratio(numba, ours), init.get("numba_cuda_error", "")],
                          ["cupric's kernel alone (tables already on the device; no peer)",
                           init.get("cupric_kernel_only_ms"), None, None, ""]],
                         "cupric: xoshiro128++ (stream i is i jumps ahead, built on the "
                         "device from jump tables); numba-cuda: xoroshiro128+ "
                         "(create_xoroshiro128p_states, jumps on the host)."))
    exact = {k: v for k, v in results.items() if k.startswith("exact_")}
    if exact:
        out.append(table("Device fills against the host half (2^20 values, 2^16 streams)",
                         [("engine and distribution", ""), ("bits", "")],
                         [[k[6:].replace("_", " "), v if isinstance(v, str) else v.get("error")]
                          for k, v in exact.items()]))
    return out


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.json, quick=args.quick)
    print_tables(results)
    failed = [k for k, v in results.items() if k.endswith("error") or
              (isinstance(v, dict) and "error" in v)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
