"""Soak test: many cycles of allocate / launch / library call / free over mixed sizes and
streams, many kernel compilations and many library-handle lifetimes in one process, with
device memory and host RSS read after each phase and compared with the baseline taken
after a warm-up.

The goals (issue 20): device memory back within 1 MiB of the baseline and host RSS
within 5 % after 100,000 cycles, 1,000 compilations and 1,000 handle create/close
cycles. Results are checked against NumPy along the way, so a leak-free but wrong run
fails too.

    python3 benchmarks/soak.py                  # the full soak (minutes)
    python3 benchmarks/soak.py --short          # 2,000 / 50 / 50: the sanitizer/GPU lane
    python3 benchmarks/soak.py --rounds 3       # each phase three times: a leak grows
                                                # every round, a cache fills once
    python3 benchmarks/soak.py --json out.json

Before each reading, every cache a user can release is released through its public API
(`release_caches`; the table's "released" column is what they gave back): what is left
is what the process cannot give back, a leak. Device
memory is read with `cuMemGetInfo`, which counts every process on the GPU: run the soak
alone on the device.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import linecache
import os
import sys
import tempfile
import time
from typing import Callable

import numpy as np

FULL = {"cycles": 100_000, "compilations": 1_000, "handles": 1_000}
SHORT = {"cycles": 2_000, "compilations": 50, "handles": 50}
WARM_UP = {"cycles": 300, "compilations": 5, "handles": 5}
PHASES = ("cycles", "compilations", "handles")
SIZES = (1, 7, 256, 4099, 65_536, 1 << 20)  # elements of float32: 4 B .. 4 MiB
DEVICE_LIMIT = 1 << 20     # bytes of device memory the run may end above its baseline
RSS_LIMIT = 0.05           # fraction of the baseline RSS the run may end above it


# --------------------------------------------------------------------------------------
# Measuring


@dataclasses.dataclass
class Reading:
    """What one settled reading saw: device memory in use (every process on the GPU),
    this process's RSS, cupric's live tracked allocations and pending releases, the
    Python allocator's block count (a Python-object leak grows it; fragmentation does
    not), live cupric objects by class (with ``census``), and the device memory each
    cache gave back when released just before (`release_caches`)."""

    device_bytes: int
    rss_bytes: int
    live_allocations: int = 0
    pending_releases: int = 0
    python_blocks: int = 0
    objects: dict = dataclasses.field(default_factory=dict)
    released: dict = dataclasses.field(default_factory=dict)

    @property
    def released_bytes(self) -> int:
        return sum(v for v in self.released.values() if v)


def rss_bytes() -> int:
    """This process's resident set size (``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def release_caches(synchronize: Callable[[], None], device: int = 0,
                   free_bytes: Callable[[], int] | None = None) -> dict:
    """Release, through their public APIs, every cache a user can release: the ready
    kernels' workspaces, the raw cuDNN handles kept for reuse, the allocation cache
    (freed blocks kept per stream and size class), the device's stream-ordered pool
    (freed memory stays reserved until trimmed; trimmed after each device release), the
    kernel cache's memory layer, and Python's source-line cache (the compiler reads each
    kernel's source through it).

    Parameters
    ----------
    synchronize : callable
        Waits for the device: after the frees made in stream order, before the trim.
    free_bytes : callable, optional
        Free device bytes now; with it, each release's share is measured.

    Returns
    -------
    dict
        Release name -> device bytes it gave back (None where not measured). A device
        release that gives nothing back after a phase that filled its cache is a bug.
    """
    import cupric.kernels
    from cupric import cudnn
    from cupric.compiler.cache import default_cache
    from cupric.runtime import memory, pool

    def trim():
        synchronize()  # the stream-ordered frees reach the pool first
        pool.default_pool(device).trim(0)
        pool.current_pool(device).trim(0)  # the same pool unless a user set another

    # The workspaces and a destroyed cuDNN handle's workspace are freed in stream order,
    # which puts their blocks in the allocation cache: it is released after them (the
    # other order left a 32 MiB workspace block in the cache at the baseline).
    steps = [("kernels.release_workspaces()",
              lambda: (cupric.kernels.release_workspaces(), trim()))]
    if cudnn.is_available():
        steps.append(("cudnn.release_idle_handles()",
                      lambda: (cudnn.release_idle_handles(), trim())))
    steps += [("memory.release_cached()", lambda: (memory.release_cached(), trim())),
              ("kernel_cache.clear_memory()", default_cache().clear_memory),
              ("linecache.clearcache()", linecache.clearcache)]
    released = {}
    for name, release in steps:
        before = free_bytes() if free_bytes else None
        release()
        released[name] = None if before is None else free_bytes() - before
    return released


def _cupric_objects() -> dict:
    """Live objects of cupric's classes, by class name (diagnostics: what a leak keeps)."""
    counts: dict = {}
    for obj in gc.get_objects():
        cls = type(obj)
        module = cls.__dict__.get("__module__")  # a class's own; a metaclass has none
        if isinstance(module, str) and module.startswith("cupric."):
            name = f"{module}.{cls.__qualname__}"
            counts[name] = counts.get(name, 0) + 1
    return counts


def settle(rt, *, census: bool = False) -> Reading:
    """A reading once everything freed has been released: the device synchronized,
    garbage collected, cupric's deferred releases drained and `release_caches` run
    (`Reading.released_bytes`: what the caches gave back, so each is seen to free)."""
    from cupric.runtime import resource
    rt.synchronize()
    for _ in range(3):
        gc.collect()
        resource.drain()
    rt.synchronize()
    released = release_caches(rt.synchronize, free_bytes=lambda: rt.memory_info()[0])
    rt.synchronize()
    free, total = rt.memory_info()
    return Reading(total - free, rss_bytes(), resource.live_count(),
                   resource.pending_count(), sys.getallocatedblocks(),
                   _cupric_objects() if census else {}, released)


def judge(baseline: Reading, readings: list, *, device_limit: int = DEVICE_LIMIT,
          rss_limit: float = RSS_LIMIT) -> dict:
    """Per-phase growth and the verdict.

    Parameters
    ----------
    baseline : Reading
    readings : list of (phase name, Reading)
        In the order taken; each phase's growth is against the reading before it.

    Returns
    -------
    dict
        ``phases``: one row per reading (device and RSS growth against the previous
        reading and against the baseline); ``device_growth_bytes`` and
        ``rss_growth_fraction`` of the last reading; ``ok``: both within their limits.
    """
    if not readings:
        raise ValueError("judge needs at least one reading after the baseline")
    if baseline.rss_bytes <= 0:
        raise ValueError(f"baseline RSS must be positive, got {baseline.rss_bytes}")
    rows, previous = [], baseline
    for name, reading in readings:
        rows.append({
            "phase": name,
            "device_bytes": reading.device_bytes,
            "rss_bytes": reading.rss_bytes,
            "device_step_bytes": reading.device_bytes - previous.device_bytes,
            "rss_step_fraction": (reading.rss_bytes - previous.rss_bytes)
            / baseline.rss_bytes,
            "device_growth_bytes": reading.device_bytes - baseline.device_bytes,
            "rss_growth_fraction": (reading.rss_bytes - baseline.rss_bytes)
            / baseline.rss_bytes,
            "released_bytes": reading.released_bytes,
            "released": dict(reading.released),
            "live_allocations": reading.live_allocations,
            "pending_releases": reading.pending_releases,
            "python_blocks_step": reading.python_blocks - previous.python_blocks,
            "objects_step": _grown(previous.objects, reading.objects),
        })
        previous = reading
    last = rows[-1]
    return {
        "phases": rows,
        "device_growth_bytes": last["device_growth_bytes"],
        "rss_growth_fraction": last["rss_growth_fraction"],
        "ok": last["device_growth_bytes"] <= device_limit
        and last["rss_growth_fraction"] <= rss_limit,
    }


def _grown(before: dict, after: dict, top: int = 8) -> dict:
    if not before or not after:
        return {}
    grown = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    grown = {k: v for k, v in grown.items() if v}
    return dict(sorted(grown.items(), key=lambda kv: -abs(kv[1]))[:top])


def table(verdict: dict, plan: dict, timings: dict) -> str:
    """The per-phase table the script prints."""
    lines = [f"{'phase':<16}{'count':>8}{'s':>8}{'device MiB':>12}{'step MiB':>10}"
             f"{'released':>10}{'RSS MiB':>10}{'step %':>8}{'live':>7}{'py blocks':>11}"]
    for row in verdict["phases"]:
        name = row["phase"]
        kind = name.split("#")[0]
        lines.append(
            f"{name:<16}{plan.get(kind, 0):>8}{timings.get(name, 0.0):>8.1f}"
            f"{row['device_bytes'] / 2**20:>12.2f}{row['device_step_bytes'] / 2**20:>+10.3f}"
            f"{row['released_bytes'] / 2**20:>10.2f}{row['rss_bytes'] / 2**20:>10.1f}{100 * row['rss_step_fraction']:>+8.2f}"
            f"{row['live_allocations']:>7}{row['python_blocks_step']:>+11}")
        freed = {k: v for k, v in row.get("released", {}).items() if v}
        if freed:
            lines.append("    released: " + ", ".join(
                f"{k} {v / 2**20:.2f} MiB" for k, v in freed.items()))
        if row["objects_step"]:
            lines.append("    objects: " + ", ".join(
                f"{k.rsplit('.', 1)[-1]} {v:+d}" for k, v in row["objects_step"].items()))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The workloads


KERNEL_TEMPLATE = '''
from cupric.device import grid
from cupric.types import Array, f32


def soak_{i}(x: Array[f32, 1]):
    j = grid(1)
    if j < len(x):
        x[j] = x[j] * {scale} + {i}.0
'''


class Workloads:
    """The three phases on one device; each method runs `count` rounds of its phase."""

    def __init__(self, folder: str, rng) -> None:
        import cupric
        import cupric.kernels as kernels
        from cupric import runtime as rt
        self.cupric, self.kernels, self.rt = cupric, kernels, rt
        self.folder, self.rng = folder, rng
        self.next_kernel = 0

    def compilations(self, count: int) -> None:
        """Compile, load, launch and drop `count` distinct kernels."""
        rt, cupric = self.rt, self.cupric
        x = np.arange(100, dtype=np.float32)
        buf = rt.to_device(x)
        for i in range(self.next_kernel, self.next_kernel + count):
            path = os.path.join(self.folder, f"soak_{i}.py")
            with open(path, "w") as f:
                f.write(KERNEL_TEMPLATE.format(i=i, scale=1.0 + i % 7))
            spec = importlib.util.spec_from_file_location(f"soak_{i}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            kern = cupric.kernel(getattr(module, f"soak_{i}"))
            buf.copy_from(x)
            kern[1, 128](buf)
            got = buf.to_numpy()
            want = x * np.float32(1.0 + i % 7) + np.float32(i)
            if not np.array_equal(got, want):
                raise AssertionError(f"kernel {i} computed wrong values")
            del kern, module  # its module is unloaded once the kernel is gone
            sys.modules.pop(f"soak_{i}", None)
        self.next_kernel += count
        buf.close()

    def handles(self, count: int) -> None:
        """Create and close cuBLAS and cuDNN handles, streams and events."""
        from cupric import cublas, cudnn
        rt = self.rt
        device = rt.Device(0)
        use_dnn = cudnn.is_available()
        for i in range(count):
            stream = device.create_stream()
            h = cublas.Handle.create(stream=stream)
            a = rt.to_device(np.eye(4))
            c = cublas.matmul(a, a, handle=h)
            h.close()
            if use_dnn:
                d = cudnn.Handle.create(stream=stream)
                d.close()
            event = device.create_event()
            event.record(stream)
            event.synchronize()
            event.close()
            stream.synchronize()
            if i % 97 == 0 and not np.array_equal(c.to_numpy(), np.eye(4)):
                raise AssertionError("cuBLAS on a fresh handle computed wrong values")
            stream.close()

    def cycles(self, count: int) -> None:
        """`count` cycles of allocate / launch / library call / free on mixed streams."""
        from cupric import cublas
        from cupric.gpu_rand import Generator
        rt, kernels, rng = self.rt, self.kernels, self.rng
        device = rt.Device(0)
        streams = [None, device.create_stream(), device.create_stream(non_blocking=True)]
        generator = Generator(int(rng.integers(0, 2**63)), streams=64)
        host_generator = Generator(generator.seed, streams=64)
        small = rt.to_device(rng.standard_normal((8, 8)))
        small_host = small.to_numpy()
        kept: list = []
        for i in range(count):
            stream = streams[i % len(streams)]
            n = SIZES[i % len(SIZES)]
            x = rt.empty(n, np.float32, stream=stream)
            y = rt.empty(n, np.float32, stream=stream)
            kernels.fill(x, 1.5, stream=stream)
            kernels.fill(y, 2.0, stream=stream)
            kernels.saxpy(3.0, x, y, out=y, stream=stream)
            kind = i % 3
            if kind == 0:
                out = cublas.matmul(small, small)
            elif kind == 1:
                out = rt.empty(97, np.float32, stream=stream)
                generator.random(out=out)
            else:
                out = kernels.sum(y, stream=stream)
            if i % 1000 == 0:  # results stay right all along
                if stream is not None:
                    stream.synchronize()
                if not np.all(y.to_numpy() == np.float32(6.5)):
                    raise AssertionError(f"cycle {i}: saxpy wrong")
                if kind == 0 and not np.allclose(out.to_numpy(), small_host @ small_host):
                    raise AssertionError(f"cycle {i}: cuBLAS wrong")
                if kind == 1:
                    if stream is not None:
                        stream.synchronize()
                    if not np.array_equal(out.to_numpy(),
                                          host_generator.random(97, dtype=np.float32)):
                        raise AssertionError(f"cycle {i}: gpu_rand wrong")
            elif kind == 1:
                host_generator.random(97, dtype=np.float32)  # keep the host twin in step
            # Three ways to free: explicitly in stream order, explicitly, and by dropping.
            how = i % 4
            if how == 0:
                x.close(stream=stream)
                y.close(stream=stream)
            elif how == 1:
                x.close()
                y.close()
            elif how == 2:
                kept.append((x, y))  # dropped in a batch below (finalizer-driven frees)
            if len(kept) >= 64:
                kept.clear()
            del x, y, out
        kept.clear()
        small.close()
        for s in streams[1:]:
            s.synchronize()
            s.close()


# --------------------------------------------------------------------------------------
# The run


def run(plan: dict, json_path: str | None = None, *, rounds: int = 1,
        census: bool = False, workloads: Callable | None = None,
        measure: Callable | None = None, out=print) -> dict:
    """Warm up, take the baseline, run each phase `rounds` times with a reading after
    each, and judge the last reading against the baseline.

    Parameters
    ----------
    plan : dict
        Counts per phase: ``{"cycles": ..., "compilations": ..., "handles": ...}``.
    rounds : int
        How many times each phase runs (its count each time). A leak grows every round;
        a cache that fills once grows only the first.
    census : bool
        Count live cupric objects by class at each reading (seconds per reading).
    workloads, measure : callable, optional
        ``workloads(folder, rng)`` returns an object with one method per phase taking a
        count (default `Workloads`), and ``measure(census=)`` returns a `Reading`
        (default `settle` on the runtime); tests pass fakes.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    rng = np.random.default_rng()
    results: dict = {"plan": plan, "rounds": rounds}
    timings: dict = {}
    readings: list = []
    with tempfile.TemporaryDirectory(prefix="cupric-soak-") as folder:
        os.environ.setdefault("CUPRIC_CACHE_DIR", os.path.join(folder, "cache"))
        if measure is None:
            from cupric import runtime as rt
            measure = (lambda census=False: settle(rt, census=census))
        work = (workloads or Workloads)(folder, rng)
        for phase in PHASES:  # everything built, loaded and allocated once
            getattr(work, phase)(WARM_UP[phase])
        baseline = measure(census=census)
        for phase in PHASES:
            for r in range(rounds):
                name = phase if rounds == 1 else f"{phase}#{r + 1}"
                began = time.perf_counter()
                getattr(work, phase)(plan[phase])
                timings[name] = time.perf_counter() - began
                readings.append((name, measure(census=census)))
    verdict = judge(baseline, readings)
    results.update(verdict)
    results["timings_s"] = timings
    results["baseline"] = {"device_bytes": baseline.device_bytes,
                           "rss_bytes": baseline.rss_bytes,
                           "released": dict(baseline.released)}
    out(table(verdict, plan, timings))
    out(f"device memory: {baseline.device_bytes / 2**20:.2f} MiB at the baseline, "
        f"{verdict['device_growth_bytes'] / 2**20:+.3f} MiB at the end "
        f"(goal <= +{DEVICE_LIMIT / 2**20:g} MiB)")
    out(f"host RSS: {baseline.rss_bytes / 2**20:.1f} MiB at the baseline, "
        f"{100 * verdict['rss_growth_fraction']:+.2f} % at the end "
        f"(goal <= +{100 * RSS_LIMIT:g} %)")
    out("soak: " + ("PASS" if verdict["ok"] else "FAIL"))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="2,000 / 50 / 50 (the lane)")
    for phase in PHASES:
        parser.add_argument(f"--{phase}", type=int, help=f"count of {phase} per round")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each phase this many times, with a reading after each")
    parser.add_argument("--census", action="store_true",
                        help="count live cupric objects by class at each reading")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    plan = dict(SHORT if args.short else FULL)
    for name in PHASES:
        if getattr(args, name) is not None:
            plan[name] = getattr(args, name)
    results = run(plan, args.json, rounds=args.rounds, census=args.census)
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
