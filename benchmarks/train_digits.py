"""Training-step time of examples/train_digits.py: cupric beside PyTorch, eager and as one
CUDA graph per step.

Two runs of the example, each in a fresh process and each training cupric and then
PyTorch from the same initial weights on the same batches (``--compare-torch``):

* eager: every library call and kernel launched from Python each step, against PyTorch
  eager (autograd, ``torch.optim.Adam``);
* graph (``--graph``): cupric replays one captured CUDA graph per step (gather the batch,
  forward, loss, backward, Adam, dropout draws), against the same model under
  ``torch.cuda.CUDAGraph`` (capturable Adam, static inputs copied in before each replay).

Each run passes ``--check``: it fails unless cupric's final test accuracy is at least
0.97, and the benchmark also requires PyTorch's to be at least 0.95, so a wrong step
cannot be timed as a fast one. Reported per run: the median epoch after the first (the
steady state, in ms) and the first epoch (kernels compiled or loaded from the cache, cuDNN
plans built, graphs captured), with PyTorch's beside them and the ratios.

    python3 benchmarks/train_digits.py [--json PATH]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from _common import error_text, finish, script_main, table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, "examples", "train_digits.py")
EPOCHS = 15
SUMMARY = re.compile(r"^(?P<label>[a-z ]+): final test accuracy (?P<acc>[0-9.]+) .*first "
                     r"epoch (?P<first>[0-9.]+) ms, median epoch after it "
                     r"(?P<median>[0-9.]+) ms", re.M)


def _train(graph: bool, epochs: int) -> dict:
    args = [sys.executable, SCRIPT, "--epochs", str(epochs), "--compare-torch", "--check",
            "--no-progress", "--plot", os.path.join(ROOT, "out", "bench_digits.png")]
    if graph:
        args.append("--graph")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH", "")])))
    env.pop("CUPRIC_SIMULATOR", None)
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    if proc.returncode != 0:
        raise RuntimeError(f"train_digits exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout)[-600:]}")
    found = {m["label"]: {"accuracy": float(m["acc"]), "first_ms": float(m["first"]),
                          "median_ms": float(m["median"])}
             for m in SUMMARY.finditer(proc.stdout)}
    ours, peer = ("cupric graph", "torch graph") if graph else ("cupric", "torch")
    if ours not in found or peer not in found:
        raise RuntimeError(f"no summary lines for {ours!r} and {peer!r} in the output")
    if found[peer]["accuracy"] < 0.95:
        raise AssertionError(f"PyTorch reached only {found[peer]['accuracy']:.4f}")
    return {"cupric": found[ours], "torch": found[peer]}


def run(json_path=None, quick: bool = False) -> dict:
    epochs = 12 if quick else EPOCHS
    results = {"epochs": epochs}
    rows = []
    for mode, graph in (("eager", False), ("graph", True)):
        try:
            r = results[mode] = _train(graph, epochs)
        except Exception as exc:  # recorded; the other mode still runs
            results[f"{mode}_error"] = error_text(exc)
            rows.append([mode, None, None, None, None, None, None, error_text(exc)[:80]])
            continue
        c, t = r["cupric"], r["torch"]
        r["median_ratio"] = c["median_ms"] / t["median_ms"]
        r["first_ratio"] = c["first_ms"] / t["first_ms"]
        rows.append([mode, c["median_ms"], t["median_ms"], r["median_ratio"],
                     c["first_ms"], t["first_ms"], r["first_ratio"],
                     f"{c['accuracy']:.4f} / {t['accuracy']:.4f}"])
    if "eager" in results and "graph" in results:
        results["graph_vs_torch_eager"] = (results["graph"]["cupric"]["median_ms"]
                                           / results["eager"]["torch"]["median_ms"])
    columns = [("mode", ""), ("cupric epoch ms", ".2f"), ("PyTorch epoch ms", ".2f"),
               ("cupric / PyTorch", ".3f"), ("cupric first epoch ms", ".1f"),
               ("PyTorch first epoch ms", ".1f"), ("first: cupric / PyTorch", ".2f"),
               ("test accuracy cupric / PyTorch", "")]
    notes = ("Epoch times in ms (1438 images, batches of 32: 45 steps); ratios are cupric "
             "over PyTorch (below 1: cupric faster). The first epoch runs in a fresh "
             "process with the caches the run found.")
    if results.get("graph_vs_torch_eager") is not None:
        notes += (f" cupric's graph epoch over PyTorch's eager epoch: "
                  f"{results['graph_vs_torch_eager']:.3f}.")
    return finish(results, json_path, __doc__.split("\n\n")[1],
                  [table("train_digits: epoch time, cupric beside PyTorch", columns, rows,
                         notes)])


main = script_main(run, "train_digits epochs, cupric beside PyTorch", "eager")

if __name__ == "__main__":
    status = main()
    sys.exit(status)
