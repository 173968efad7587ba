"""Run every benchmark in one process on a GPU and print one table last.

Each benchmark module exposes `run(json_path=None) -> dict` measuring cupric beside its
peers in the same process run. A benchmark that fails is reported with its error and makes
the exit status non-zero; the others still run.

    python3 benchmarks/run_all.py [--json PATH] [--only NAME[,NAME...]]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

BENCHMARKS = ["launch_overhead", "bandwidth", "compile_latency", "saxpy", "kernels",
              "rng", "gemm", "conv"]


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
    sys.path.insert(0, here)
    sys.path.insert(0, os.path.dirname(here))
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
        try:
            module = importlib.import_module(name)
            results[name] = module.run()
        except Exception as exc:  # reported below and in the exit status
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
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
