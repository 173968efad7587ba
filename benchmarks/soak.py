"""Soak test: many cycles of allocate / launch / library call / free over mixed sizes and
streams, many kernel compilations and many library-handle lifetimes in one process, then
device memory and host RSS compared with the baseline taken after a warm-up.

The goals (issue 20): device memory back within 1 MiB of the baseline and host RSS
within 5 % after 100,000 cycles, 1,000 compilations and 1,000 handle create/close
cycles. Results are checked against NumPy along the way, so a leak-free but wrong run
fails too.

    python3 benchmarks/soak.py                  # the full soak (minutes)
    python3 benchmarks/soak.py --short          # 2,000 / 50 / 50: the sanitizer/GPU lane
    python3 benchmarks/soak.py --json out.json

Device memory is read with `cuMemGetInfo`, which counts every process on the GPU: run
the soak alone on the device.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import tempfile
import time

import numpy as np

FULL = {"cycles": 100_000, "compilations": 1_000, "handles": 1_000}
SHORT = {"cycles": 2_000, "compilations": 50, "handles": 50}
SIZES = (1, 7, 256, 4099, 65_536, 1 << 20)  # elements of float32: 4 B .. 4 MiB


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _settle(rt) -> tuple[int, int]:
    """(device bytes in use, host RSS) once everything freed has been released."""
    from cupric.runtime import _lifetime, pool
    rt.synchronize()
    for _ in range(3):
        gc.collect()
        _lifetime.drain()
    rt.synchronize()
    pool.default_pool(0).trim(0)  # stream-ordered frees keep pages in the pool until trimmed
    free, total = rt.memory_info()
    return total - free, _rss()


KERNEL_TEMPLATE = '''
from cupric.device import grid
from cupric.types import Array, f32


def soak_{i}(x: Array[f32, 1]):
    j = grid(1)
    if j < len(x):
        x[j] = x[j] * {scale} + {i}.0
'''


def _compile_kernels(count: int, start: int, folder: str, rt, cupric) -> float:
    """Compile, load, launch and drop `count` distinct kernels; returns seconds."""
    began = time.perf_counter()
    x = np.arange(100, dtype=np.float32)
    buf = rt.to_device(x)
    for i in range(start, start + count):
        path = os.path.join(folder, f"soak_{i}.py")
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
    return time.perf_counter() - began


def _handles(count: int, rt) -> float:
    """Create and close cuBLAS and cuDNN handles, streams and events `count` times."""
    from cupric import cublas, cudnn
    began = time.perf_counter()
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
    return time.perf_counter() - began


def _cycles(count: int, rt, kernels, rng) -> float:
    """`count` cycles of allocate / launch / library call / free on mixed streams."""
    from cupric import cublas
    from cupric.gpu_rand import Generator
    began = time.perf_counter()
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
    for s in streams[1:]:
        s.synchronize()
        s.close()
    return time.perf_counter() - began


def run(plan: dict, json_path: str | None = None) -> dict:
    import cupric
    import cupric.kernels as kernels
    from cupric import runtime as rt

    rng = np.random.default_rng()
    results: dict = {"plan": plan}
    with tempfile.TemporaryDirectory(prefix="cupric-soak-") as folder:
        os.environ.setdefault("CUPRIC_CACHE_DIR", os.path.join(folder, "cache"))
        # Warm-up: everything built, loaded and allocated once before the baseline.
        _cycles(300, rt, kernels, rng)
        _compile_kernels(5, 0, folder, rt, cupric)
        _handles(5, rt)
        base_device, base_rss = _settle(rt)
        results["baseline"] = {"device_bytes": base_device, "rss_bytes": base_rss}
        timings = {
            "cycles_s": _cycles(plan["cycles"], rt, kernels, rng),
            "compilations_s": _compile_kernels(plan["compilations"], 5, folder, rt, cupric),
            "handles_s": _handles(plan["handles"], rt),
        }
        device, rss = _settle(rt)
    results["timings"] = timings
    results["after"] = {"device_bytes": device, "rss_bytes": rss}
    device_growth = device - base_device
    rss_growth = (rss - base_rss) / base_rss
    results["device_growth_bytes"] = device_growth
    results["rss_growth_fraction"] = rss_growth
    results["ok"] = device_growth <= 1 << 20 and rss_growth <= 0.05
    print(f"soak: {plan['cycles']} cycles in {timings['cycles_s']:.1f} s, "
          f"{plan['compilations']} compilations in {timings['compilations_s']:.1f} s, "
          f"{plan['handles']} handle cycles in {timings['handles_s']:.1f} s")
    print(f"device memory: {base_device / 2**20:.2f} -> {device / 2**20:.2f} MiB "
          f"({device_growth / 2**20:+.3f} MiB; goal <= +1 MiB)")
    print(f"host RSS: {base_rss / 2**20:.1f} -> {rss / 2**20:.1f} MiB "
          f"({100 * rss_growth:+.2f} %; goal <= +5 %)")
    print("soak:", "PASS" if results["ok"] else "FAIL")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="2,000 / 50 / 50 (the lane)")
    parser.add_argument("--cycles", type=int)
    parser.add_argument("--compilations", type=int)
    parser.add_argument("--handles", type=int)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    plan = dict(SHORT if args.short else FULL)
    for name in plan:
        if getattr(args, name) is not None:
            plan[name] = getattr(args, name)
    return 0 if run(plan, args.json)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
