"""Before/after host-cost figures of two trees of cupric, measured in alternating processes.

The lent GPU machines' host speed drifts by up to 2x between processes minutes apart, so a
"before" run followed by an "after" run can show a 50 % change that is only the machine.
This runs the chosen benchmarks of both trees in turns (base, new, new, base, ...) for a
number of rounds, each in a fresh process through `benchmarks/run_all.py`, and reports
per table cell the median over rounds of new / base, next to each tree's median, and the
same ratio taken against the peers measured beside it in each process (PyTorch, CuPy),
which cancels most of the machine's own movement; the peers' cells show how much that was.

    python3 tools/compare_commits.py --base-tree scratch/base --only launch_overhead,alloc \
        --rounds 3 --json $OUT/compare.json

`--base-tree` is an exported tree of the earlier commit (`git archive REV | tar -x -C DIR`;
the GPU machine's copy of .git is stale, so export it before sending).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cells(run: dict):
    """((benchmark, table title, row label), column name) -> number, for every numeric cell
    of a run file's tables; the row label is the row's text cells joined."""
    cells = {}
    for bench, result in run.get("benchmarks", {}).items():
        if not isinstance(result, dict):
            continue
        tables = result.get("tables") or ([result["table"]] if result.get("table") else [])
        for t in tables:
            names = [c[0] for c in t.get("columns", [])]
            for row in t.get("rows", []):
                label = " / ".join(v for v in row if isinstance(v, str) and v)
                for name, value in zip(names, row):
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        cells[((bench, t.get("title", ""), label), name)] = float(value)
    return cells


def _is_peer(label: str) -> bool:
    low = label.lower()
    return "cupric" not in low and "floor" not in low


def _group(key) -> tuple:
    """Cells that one peer can stand beside: same benchmark, table and column, and where a
    row names an operation and a size before its contender (host_cost), the same ones."""
    (bench, title, label), column = key
    parts = label.split(" / ")
    return (bench, title, column) + (tuple(parts[:2]) if len(parts) >= 3 else ())


def _geomean(values) -> float:
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else 0.0


def summarize(base_runs: list, new_runs: list) -> list:
    """Rows (benchmark, table, row, column, base median, new median, median new/base,
    median new/base against the peers) for the cells present in every run of both trees;
    rounds are paired in order. The last figure divides each cupric cell by the geometric
    mean of the peer rows beside it in the same process (PyTorch, CuPy, cuda.core), so the
    machine's drift between processes cancels; None where no peer stands beside it."""
    base = [_cells(r) for r in base_runs]
    new = [_cells(r) for r in new_runs]
    if not base or not new:
        return []
    keys = set(base[0])
    for cells in base[1:] + new:
        keys &= set(cells)
    peers = {}
    for key in keys:
        if _is_peer(key[0][2]):
            peers.setdefault(_group(key), []).append(key)
    rows = []
    for key in sorted(keys, key=str):
        (bench, title, label), column = key
        ratios = [n[key] / b[key] for b, n in zip(base, new) if b[key]]
        beside = None
        group = peers.get(_group(key))
        if group and not _is_peer(label):
            scaled = []
            for b, n in zip(base, new):
                pb, pn = _geomean(b[p] for p in group), _geomean(n[p] for p in group)
                if b[key] and pb and pn:
                    scaled.append((n[key] / pn) / (b[key] / pb))
            beside = statistics.median(scaled) if scaled else None
        rows.append((bench, title, label, column,
                     statistics.median(b[key] for b in base),
                     statistics.median(n[key] for n in new),
                     statistics.median(ratios) if ratios else None, beside))
    return rows


def _run(tree: str, only: str, folder: str, env: dict, quick: bool = False) -> dict:
    subprocess.run([sys.executable, "benchmarks/run_all.py", "--only", only,
                    "--results-dir", folder] + (["--quick"] if quick else []),
                   cwd=tree, env=env, check=False)
    files = sorted(f for f in os.listdir(folder) if f.endswith(".json"))
    if not files:
        raise RuntimeError(f"no results from {tree} for {only}")
    with open(os.path.join(folder, files[-1])) as fh:
        return json.load(fh)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-tree", required=True, help="exported tree of the base commit")
    parser.add_argument("--new-tree", default=ROOT, help="the tree to compare (default: this)")
    parser.add_argument("--only", required=True, help="comma-separated benchmark names")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="the benchmarks' quick mode (fewer sizes and samples)")
    parser.add_argument("--json", help="write the runs and the summary to this file")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    base_runs, new_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [("base", args.base_tree), ("new", args.new_tree)]
            if r % 2:
                order.reverse()
            for label, tree in order:
                folder = os.path.join(tmp, f"{label}{r}")
                os.makedirs(folder)
                run = _run(tree, args.only, folder, env, args.quick)
                (base_runs if label == "base" else new_runs).append(run)
    rows = summarize(base_runs, new_runs)
    print(f"{'benchmark':16} {'row':60} {'column':14} {'base':>9} {'new':>9} {'new/base':>9}"
          f" {'vs peers':>9}")
    for bench, title, label, column, b, n, ratio, beside in rows:
        shown = "".join("" if v is None else f" {v:9.3f}" for v in (ratio, beside))
        print(f"{bench[:16]:16} {label[:60]:60} {column[:14]:14} {b:9.2f} {n:9.2f}{shown}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"base_runs": base_runs, "new_runs": new_runs, "summary": rows}, fh,
                      indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
