"""Run every benchmark on a GPU and keep the run as one JSON file.

Each benchmark module exposes `run(json_path=None) -> dict` (and, where it has one, a
`quick` keyword) measuring cupric beside its peers in the same process; each module runs
in a process of its own, so a fault that poisons the CUDA context in one cannot take the
others down. A benchmark that fails, or outlives its time limit, is recorded with its
error and the others go on; the exit status says whether any failed.

The run is written to `benchmarks/results/<date>-<device>-<commit>.json` (or
`--results-dir`): the machine (device, driver, CUDA), the code (git commit and whether
the tree had uncommitted changes), the library versions, and every benchmark's figures
with its peers' and the tables that `tools/benchmarks_md.py` renders into BENCHMARKS.md.

    python3 benchmarks/run_all.py [--only NAME[,NAME...]] [--quick] [--results-dir DIR]
                                  [--json PATH] [--timeout SECONDS]

On a copy of the tree sent to a GPU machine (no .git, or a stale one), pass the commit
in CUPRIC_COMMIT and the dirty flag in CUPRIC_DIRTY (1/0); they win over git.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

BENCHMARKS = ["launch_overhead", "host_cost", "bandwidth", "alloc", "compile_latency",
              "saxpy", "kernels", "rng", "gemm", "tensor_cores", "gemm_wgmma", "conv",
              "path_tracer", "train_digits", "first_epoch"]
#: Seconds a benchmark may run before it is stopped and recorded as failed.
TIMEOUT = {"host_cost": 300, "tensor_cores": 300, "gemm_wgmma": 180, "kernels": 240,
           "path_tracer": 240, "train_digits": 300, "first_epoch": 420}
DEFAULT_TIMEOUT = 180
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = """
import inspect, json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import {name} as b
quick = sys.argv[4] == "1" and "quick" in inspect.signature(b.run).parameters
kwargs = {{"quick": True}} if quick else {{}}
r = b.run(**kwargs)
json.dump(r, open(sys.argv[3], "w"), default=str)
"""

_ENVIRONMENT = """
import json, platform, sys
info = {"python": platform.python_version()}
for name in ("torch", "cupy", "numba_cuda", "cuda.bindings", "numpy", "cudnn"):
    try:
        module = __import__(name, fromlist=["_"])
        info[name] = getattr(module, "__version__", "?")
    except Exception as exc:
        info[name] = None
try:
    import torch
    info["torch_cuda"] = torch.version.cuda
    info["torch_cudnn"] = torch.backends.cudnn.version()
except Exception:
    pass
try:
    from cupric import runtime as rt
    dev = rt.Device(0)
    info["device"] = dev.name
    info["arch"] = dev.arch
    major, minor = rt.driver_version()
    info["cuda_driver_api"] = f"{major}.{minor}"
except Exception as exc:
    info["device_error"] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(info))
"""


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def environment() -> dict:
    """Where and what ran: date, machine, driver, CUDA, code, library versions."""
    meta: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    # CUPRIC_COMMIT first: a copy sent to a GPU machine may carry a stale .git.
    commit = None if os.environ.get("CUPRIC_COMMIT") else _git("rev-parse", "HEAD")
    if commit is not None:
        status = _git("status", "--porcelain", "--untracked-files=no")
        meta["commit"], meta["dirty"] = commit, bool(status)
    else:
        meta["commit"] = os.environ.get("CUPRIC_COMMIT", "unknown")
        dirty = os.environ.get("CUPRIC_DIRTY")
        meta["dirty"] = None if dirty is None else dirty == "1"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=60)
        first = smi.stdout.strip().splitlines()[0].split(", ")
        meta["device"], meta["driver"], meta["memory"] = first[0], first[1], first[2]
    except (OSError, subprocess.SubprocessError, IndexError):
        meta["driver"] = None
    try:
        child = subprocess.run([sys.executable, "-c", _ENVIRONMENT], capture_output=True,
                               text=True, timeout=120, env=_child_env())
        meta.update(json.loads(child.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        meta["versions_error"] = f"{type(exc).__name__}: {exc}"[:300]
    meta["host"] = {"cpus": os.cpu_count(), "platform": sys.platform}
    return meta


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def result_name(meta: dict) -> str:
    """`<date>-<device>-<commit>.json`, e.g. 2026-11-25T0130-nvidia-h100-80gb-hbm3-6894857."""
    date = meta["date"][:16].replace(":", "")
    device = re.sub(r"[^a-z0-9]+", "-", str(meta.get("device", "unknown")).lower()).strip("-")
    commit = str(meta.get("commit", "unknown"))[:7] + ("-dirty" if meta.get("dirty") else "")
    return f"{date}-{device}-{commit}.json"


def run_one(name: str, quick: bool, timeout: float) -> dict:
    """One benchmark in a process of its own: its results, or {"error": ...}."""
    path = os.path.join(HERE, f"{name}.py")
    if not os.path.exists(path):
        return {"error": f"no benchmark named {name!r}"}
    with tempfile.TemporaryDirectory() as tmp:
        result_file = os.path.join(tmp, "result.json")
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD.format(name=name), HERE, ROOT,
                                   result_file, "1" if quick else "0"], timeout=timeout,
                                  env=_child_env())
        except subprocess.TimeoutExpired:
            return {"error": f"stopped after its time limit of {timeout:.0f} s"}
        if proc.returncode != 0:
            return {"error": f"exit status {proc.returncode} (the traceback is in the log)"}
        try:
            with open(result_file) as fh:
                return json.load(fh)
        except (OSError, ValueError) as exc:
            return {"error": f"no readable results: {exc}"}


def failures(result: dict) -> list[str]:
    """The errors a benchmark's results record (top level, or in a table's row group)."""
    found = [f"{k}: {v}" for k, v in result.items() if k.endswith("error") and v]
    for key, value in result.items():
        if isinstance(value, dict) and value.get("error"):
            found.append(f"{key}: {value['error']}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats and cases where a benchmark offers it")
    parser.add_argument("--results-dir", default=os.path.join(HERE, "results"),
                        help="folder of the run's JSON file (default benchmarks/results)")
    parser.add_argument("--json", help="also write the run to this file")
    parser.add_argument("--timeout", type=float, help="seconds per benchmark")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else BENCHMARKS
    run: dict = {"meta": environment(), "benchmarks": {}, "seconds": {}}
    run["meta"]["quick"] = args.quick
    run["meta"]["command"] = "python3 benchmarks/run_all.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    print(json.dumps(run["meta"], indent=1), flush=True)
    failed = []
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, result_name(run["meta"]))
    targets = [path] + ([args.json] if args.json else [])
    for name in names:
        print(f"=== {name}", flush=True)
        started = time.perf_counter()
        result = run_one(name, args.quick, args.timeout or TIMEOUT.get(name, DEFAULT_TIMEOUT))
        run["seconds"][name] = round(time.perf_counter() - started, 1)
        run["benchmarks"][name] = result
        errors = failures(result)
        if errors:
            failed.append(name)
            print("\n".join(f"{name} ERROR {e}" for e in errors), flush=True)
        print(f"=== {name} took {run['seconds'][name]:.1f} s", flush=True)
        # Written after every benchmark: a run stopped from outside keeps what it measured.
        for target in targets:
            with open(target, "w") as fh:
                json.dump(run, fh, indent=1, default=str)
                fh.write("\n")
    print(f"\nwrote {path}")
    if failed:
        print(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
