"""BENCHMARKS.md is what tools/benchmarks_md.py makes of the committed run files, and the
generator picks, formats and reports runs as documented (CPU only)."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _generator():
    spec = importlib.util.spec_from_file_location(
        "benchmarks_md", os.path.join(ROOT, "tools", "benchmarks_md.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


md = _generator()


def test_benchmarks_md_is_generated_from_the_committed_runs():
    with open(os.path.join(ROOT, "BENCHMARKS.md")) as fh:
        current = fh.read()
    expected = md.render(md.load_runs(os.path.join(ROOT, "benchmarks", "results")))
    assert current == expected, (
        "BENCHMARKS.md differs from what benchmarks/results/ gives: run "
        "python3 tools/benchmarks_md.py (tables are never edited by hand)")


def test_every_committed_run_names_its_machine_and_code():
    runs = md.load_runs(os.path.join(ROOT, "benchmarks", "results"))
    for name, run in runs:
        meta = run["meta"]
        for key in ("date", "device", "driver", "commit", "python"):
            assert meta.get(key), f"{name}: no {key} in meta"
        assert name.endswith(".json") and str(meta["commit"])[:7] in name


def _table(value):
    return {"title": "t", "columns": [["row", ""], ["us", ".2f"], ["ratio", ".3f"]],
            "rows": [["a", value, value / 2], ["b", None, "n/a | x"]], "notes": "note"}


def _run(tmp_path, name, date, benchmarks, quick=False):
    meta = {"date": date, "device": "GPU X", "driver": "580", "cuda_driver_api": "13.0",
            "commit": "abcdef1234", "dirty": True, "python": "3.12", "quick": quick}
    with open(tmp_path / name, "w") as fh:
        json.dump({"meta": meta, "benchmarks": benchmarks, "seconds": {}}, fh)


def test_newest_usable_run_per_benchmark(tmp_path):
    _run(tmp_path, "old.json", "2026-01-01T00:00:00Z",
         {"gemm": {"title": "GEMM", "tables": [_table(1.0)]},
          "conv": {"tables": [_table(2.0)]}})
    _run(tmp_path, "new.json", "2026-01-02T00:00:00Z",
         {"gemm": {"tables": [_table(3.0)]}, "conv": {"error": "exit status 1"}})
    _run(tmp_path, "quick.json", "2026-01-03T00:00:00Z",
         {"gemm": {"tables": [_table(5.0)]}}, quick=True)
    text = md.render(md.load_runs(str(tmp_path)))
    gemm = text[text.index("(`benchmarks/gemm.py`)"):text.index("(`benchmarks/conv.py`)")]
    # The newest full run for gemm (a quick run never hides a full one) ...
    assert "`benchmarks/results/new.json`" in gemm and "| a | 3.00 | 1.500 |" in gemm
    # ... and the older run for conv, which failed in the newer one.
    conv = text[text.index("(`benchmarks/conv.py`)"):]
    assert "`benchmarks/results/old.json`" in conv and "| a | 2.00 | 1.000 |" in conv
    # Empty cells, escaped text, the machine and code of the run.
    assert "| b |  | n/a \\| x |" in text
    flat = " ".join(text.split())  # prose is wrapped
    assert "GPU X, driver 580, CUDA 13.0, commit `abcdef1234`, with uncommitted changes" in flat
    # The newest run's failures are listed.
    assert "## Failed in the newest run" not in text  # the newest (quick) run has none
    _run(tmp_path, "newest.json", "2026-01-04T00:00:00Z", {"gemm": {"error": "boom"}})
    text = md.render(md.load_runs(str(tmp_path)))
    assert "`benchmarks/results/newest.json`" in text and "- `gemm`: boom" in text
    # A quick run is used where no full run measured the benchmark.
    _run(tmp_path, "quick2.json", "2026-01-05T00:00:00Z",
         {"rng": {"tables": [_table(7.0)]}}, quick=True)
    text = md.render(md.load_runs(str(tmp_path)))
    assert "`benchmarks/results/quick2.json` (`--quick`)" in " ".join(text.split())


def test_check_fails_on_a_hand_edited_table(tmp_path):
    _run(tmp_path, "run.json", "2026-01-01T00:00:00Z", {"gemm": {"tables": [_table(1.0)]}})
    out = tmp_path / "BENCHMARKS.md"
    args = ["--results", str(tmp_path), "--output", str(out)]
    assert md.main(args) == 0
    assert md.main(args + ["--check"]) == 0
    out.write_text(out.read_text().replace("| a | 1.00 |", "| a | 0.90 |"))
    assert md.main(args + ["--check"]) == 1


@pytest.mark.parametrize("value, fmt, text", [
    (None, ".2f", ""), (True, "", "yes"), (float("nan"), ".2f", "nan"), (1234.5, ".0f", "1234"),
    (3, "d", "3"), ("a|b", "", "a\\|b")])
def test_cells(value, fmt, text):
    assert md.cell(value, fmt) == text
