"""First epoch of examples/train_digits.py in a fresh process: what a user waits for on
the first run, cupric beside PyTorch.

Every measurement is a new Python process that trains one epoch and reports its time
(from the first step to the epoch's last result on the host; context creation and the
upload of the data set come before it on both sides):

* cupric, warm: the cache root (compiled kernels, C fast-path extensions, generated
  library bindings, remembered cuDNN engine choices) filled by an earlier process;
* cupric, empty: a new, empty cache root (``CUPRIC_CACHE_DIR``) and an empty CUDA JIT
  cache (``CUDA_CACHE_PATH``), as on a machine that has never run cupric: extensions are
  built, bindings generated, kernels compiled and cuDNN heuristics asked in that epoch
  or just before it;
* PyTorch: the same network, batches and initial weights (the example's `train_torch`),
  in a process of its own.

Two more rows show what two parts of the cold-start work give: the warm cache with the
remembered cuDNN engine choices turned off (``CUPRIC_CUDNN_ENGINE_CACHE=0``: every graph
asks the heuristics again), and the empty cache with the C extensions built one after
the other in the calling thread (``CUPRIC_BUILD_SYNC=1``, as before background builds).

Each is run `REPEATS` times (a new empty cache root each time) and the median kept;
the ratios are cupric over PyTorch (below 1: cupric faster). Each cupric process runs
the example with ``--check`` skipped (one epoch does not reach its accuracy bar), so the
benchmark checks instead that the epoch's loss is finite and that the warm run's test
accuracy after one epoch is at least 0.5 (a broken step stays near 0.1).

    python3 benchmarks/first_epoch.py [--json PATH]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from _common import error_text, finish, script_main, table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPEATS = 3

# One epoch in this process; prints one JSON line. argv: "cupric" or "torch".
_CHILD = """
import json, sys, time
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import numpy as np
import train_digits as T
args = T.parse_args(["--epochs", "1", "--no-progress"])
images, labels = T.load_digits_arrays()
split = T.split_data(images, labels, args.test_fraction, args.seed)
orders = T.batch_orders(len(split.train_y), args.batch_size, args.epochs, args.seed)
if sys.argv[1] == "cupric":
    net = T.CupricNet(args, stream=T.training_stream())
    records = T.train_cupric(net, split, orders, lambda r: None)
else:
    rng = np.random.default_rng(args.seed)
    layout, _total = T.parameter_layout()
    initial = {name: (rng.standard_normal(shape) * T.init_std(name)).astype(np.float32)
               for name, (_offset, shape) in layout.items()}
    records = T.train_torch(args, split, orders, initial, lambda r: None)
r = records[0]
print(json.dumps({"first_ms": r.seconds * 1e3, "loss": r.train_loss,
                  "test_accuracy": r.test_accuracy}))
"""


def _epoch(kind: str, env_extra: dict) -> dict:
    env = dict(os.environ, **env_extra)
    env.pop("CUPRIC_SIMULATOR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, kind, os.path.join(ROOT, "examples"),
                           ROOT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} epoch exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout)[-600:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result["loss"] == result["loss"] or result["loss"] > 10:
        raise AssertionError(f"{kind}: first epoch's loss is {result['loss']}")
    return result


def _median(samples: list[dict]) -> dict:
    times = [s["first_ms"] for s in samples]
    return {"first_ms": statistics.median(times), "samples_ms": times,
            "test_accuracy": samples[-1]["test_accuracy"]}


def run(json_path=None, quick: bool = False) -> dict:
    repeats = 1 if quick else REPEATS
    results: dict = {"repeats": repeats}
    rows = []
    with tempfile.TemporaryDirectory(prefix="cupric-first-epoch-") as tmp:
        warm_root = os.path.join(tmp, "warm")
        def empty(tag):
            return lambda i: {"CUPRIC_CACHE_DIR": os.path.join(tmp, f"{tag}{i}", "cupric"),
                              "CUDA_CACHE_PATH": os.path.join(tmp, f"{tag}{i}", "nv")}
        contenders = {
            "PyTorch": ("torch", lambda i: {}),
            "cupric, warm cache": ("cupric", lambda i: {"CUPRIC_CACHE_DIR": warm_root}),
            "cupric, warm cache, engine records off": ("cupric", lambda i: {
                "CUPRIC_CACHE_DIR": warm_root, "CUPRIC_CUDNN_ENGINE_CACHE": "0"}),
            "cupric, empty cache": ("cupric", empty("empty")),
            "cupric, empty cache, builds in the caller": ("cupric", lambda i: {
                **empty("sync")(i), "CUPRIC_BUILD_SYNC": "1"}),
        }
        try:
            _epoch("cupric", {"CUPRIC_CACHE_DIR": warm_root})  # fills the warm cache
        except Exception as exc:  # recorded: the warm row then says so
            results["warm_fill_error"] = error_text(exc)
        for label, (kind, env) in contenders.items():
            try:
                r = results[label] = _median([_epoch(kind, env(i)) for i in range(repeats)])
            except Exception as exc:  # recorded; the other contenders still run
                results[f"{label} error"] = error_text(exc)
                rows.append([label, None, None, error_text(exc)[:80]])
                continue
            rows.append([label, r["first_ms"], None,
                         ", ".join(f"{t:.0f}" for t in r["samples_ms"])])
    peer = results.get("PyTorch", {}).get("first_ms")
    for row in rows:
        if peer and row[1] is not None:
            row[2] = row[1] / peer
    warm = results.get("cupric, warm cache")
    if warm is not None and warm["test_accuracy"] < 0.5:
        results["check_error"] = (f"cupric's test accuracy after one epoch is "
                                  f"{warm['test_accuracy']:.3f}")
    for label, key in (("cupric, warm cache", "warm_ratio"),
                       ("cupric, empty cache", "empty_ratio")):
        if label in results and peer:
            results[key] = results[label]["first_ms"] / peer
    columns = [("run", ""), ("first epoch ms (median)", ".1f"), ("over PyTorch", ".2f"),
               ("samples ms", "")]
    notes = ("One epoch (1438 images, batches of 32) in a fresh process each; goals: "
             "warm cache <= 1.5x PyTorch, empty cache <= 3x.")
    return finish(results, json_path, __doc__.split("\n\n")[1],
                  [table("train_digits: first epoch in a fresh process", columns, rows,
                         notes)])


main = script_main(run, "train_digits' first epoch in a fresh process", "first_epoch")

if __name__ == "__main__":
    sys.exit(main())
