"""Run every benchmark on a GPU and print one table last.

Each benchmark module exposes `run(json_path=None) -> dict` measuring cupric beside its
peers in the same process run. Each module runs in a process of its own, so a fault that
poisons the CUDA context in one cannot take the others down; a benchmark that fails is
reported with its error and makes the exit status non-zero, and the others still run.

    python3 benchmarks/run_all.py [--json PATH] [--only NAME[,NAME...]]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

BENCHMARKS = ["launch_overhead", "bandwidth", "alloc", "compile_latency", "saxpy", "kernels",
              "rng", "gemm", "conv", "path_tracer"]


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write all results to this file")
    parser.add_argument("--only", help="comma-separated benchmark names")
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    names = args.only.split(",") if args.only else BENCHMARKS
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    failed = []
    for name in names:
        path = os.path.join(here, f"{name}.py")
        if not os.path.exists(path):
            results[name] = {"skipped": "benchmark not written yet"}
            continue
        print(f"=== {name}", flush=True)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            result_file = os.path.join(tmp, "result.json")
            code = ("import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
                    f"import {name} as b; r = b.run(); "
                    "json.dump(r, open(sys.argv[3], 'w'), default=str)")
            proc = subprocess.run([sys.executable, "-c", code, here, os.path.dirname(here),
                                   result_file])
            if proc.returncode == 0 and os.path.exists(result_file):
                with open(result_file) as fh:
                    results[name] = json.load(fh)
            else:
                results[name] = {"error": f"exit status {proc.returncode}"}
                failed.append(name)
        print(f"=== {name} took {time.perf_counter() - started:.1f} s", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    flat: dict = {}
    _flatten("", results, flat)
    print("\n--- summary ---")
    for key, value in flat.items():
        shown = f"{value:.4g}" if isinstance(value, float) else value
        print(f"{key:60s} {shown}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
