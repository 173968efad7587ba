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


# -- the pieces every benchmark shares (benchmarks/_common.py, benchmarks/run_all.py) -----

def _load(name):
    spec = importlib.util.spec_from_file_location(
        f"bench_{name}", os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load("_common")
run_all = _load("run_all")


def test_assert_correct_compares_every_element(monkeypatch):
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(common, "_synchronize", lambda: None)  # no GPU here
    expected = np.linspace(1.0, 2.0, 1000)
    calls = []
    check = common.assert_correct("ok", lambda: calls.append(1), expected * (1 + 1e-7),
                                  expected, rtol=1e-6)
    assert calls == [1] and check["compared"] == 1000 and check["max_rel_diff"] < 2e-7
    wrong = expected.copy()
    wrong[617] = 5.0
    with pytest.raises(common.CheckError, match="1 of 1000 .* first at 617"):
        common.assert_correct("one off", lambda: None, wrong, expected, rtol=1e-6)
    poisoned = expected.copy()
    poisoned[3] = np.nan  # a value the run never wrote
    with pytest.raises(common.CheckError, match="ok2: 1 of 1000"):
        common.assert_correct("ok2", lambda: None, poisoned, expected, atol=1e9)
    ints = np.arange(10)
    with pytest.raises(common.CheckError, match="2 of 10 elements differ"):
        common.assert_correct("exact", lambda: None, ints[::-1] * 0 + ints + (ints > 7),
                              ints, exact=True)
    with pytest.raises(common.CheckError, match="expected 10"):
        common.assert_correct("size", lambda: None, ints[:5], ints, exact=True)


def test_assert_correct_samples_large_outputs(monkeypatch):
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(common, "_synchronize", lambda: None)
    expected = np.arange(100000, dtype=np.float64)
    got = expected.copy()
    got[-1] = -1.0  # the last 4096 are always compared
    with pytest.raises(common.CheckError):
        common.assert_correct("tail", lambda: None, got, expected, sample=1000)
    check = common.assert_correct("sampled", lambda: None, expected, expected, sample=1000)
    assert check["compared"] == 1000 + 2 * 4096


def test_poison_refuses_what_it_cannot_fill():
    with pytest.raises(TypeError, match="cannot fill a list"):
        common.poison([1.0])


def test_ratio_and_table():
    assert common.ratio(3.0, 2.0) == 1.5
    assert common.ratio(None, 2.0) is None and common.ratio(1.0, 0.0) is None
    t = common.table("T", [("a", ""), ("b", ".1f")], [("x", 1.25)], "n")
    assert t == {"title": "T", "columns": [["a", ""], ["b", ".1f"]], "rows": [["x", 1.25]],
                 "notes": "n"}


def test_run_file_name_and_failures():
    meta = {"date": "2026-11-25T01:02:03Z", "device": "NVIDIA H100 80GB HBM3",
            "commit": "0123456789abcdef", "dirty": True}
    assert run_all.result_name(meta) == "2026-11-25T0102-nvidia-h100-80gb-hbm3-0123456-dirty.json"
    assert run_all.result_name(dict(meta, dirty=False)).endswith("-0123456.json")
    assert run_all.failures({"a": 1, "rates_error": "boom", "row": {"error": "bad"},
                             "fine": {"us": 1.0}, "empty_error": ""}) == [
        "rates_error: boom", "row: bad"]


def test_run_all_records_a_failing_benchmark_and_goes_on(tmp_path, monkeypatch):
    # No GPU here: the unknown benchmark is recorded, the run file still written, with
    # the commit and dirty flag given by the environment (a copy without .git).
    monkeypatch.setenv("CUPRIC_COMMIT", "feedbeef00")
    monkeypatch.setenv("CUPRIC_DIRTY", "0")
    monkeypatch.setattr(run_all, "environment", lambda: dict(
        {"date": "2026-01-01T00:00:00Z", "device": "cpu"}, commit="feedbeef00", dirty=False))
    status = run_all.main(["--only", "no_such_benchmark", "--results-dir", str(tmp_path)])
    assert status == 1
    (path,) = tmp_path.iterdir()
    assert path.name == "2026-01-01T0000-cpu-feedbee.json"
    run = json.loads(path.read_text())
    assert run["benchmarks"]["no_such_benchmark"] == {
        "error": "no benchmark named 'no_such_benchmark'"}
    assert run["meta"]["command"].endswith("--only no_such_benchmark --results-dir "
                                           + str(tmp_path))


def test_environment_takes_the_commit_given(monkeypatch):
    monkeypatch.setenv("CUPRIC_COMMIT", "cafe123456")
    monkeypatch.setenv("CUPRIC_DIRTY", "1")
    meta = run_all.environment()
    assert meta["commit"] == "cafe123456" and meta["dirty"] is True
    assert meta["date"].endswith("Z") and meta["python"] and "numpy" in meta


def test_assert_on_device_resets_runs_then_checks(monkeypatch):
    monkeypatch.setattr(common, "_synchronize", lambda: None)
    order = []
    common.assert_on_device("fine", lambda: order.append("run"), lambda: order.append("ok")
                            or True, reset=lambda: order.append("reset"))
    assert order == ["reset", "run", "ok"]
    with pytest.raises(common.CheckError, match="vecadd: cuda_c gave a wrong result"):
        common.assert_on_device("vecadd: cuda_c", lambda: None, lambda: False)


def test_a_single_table_is_rendered(tmp_path):
    _run(tmp_path, "run.json", "2026-01-01T00:00:00Z",
         {"collectives": {"table": _table(4.0), "world_size": 2}})
    text = md.render(md.load_runs(str(tmp_path)))
    assert "(`benchmarks/collectives.py`)" in text and "| a | 4.00 | 2.000 |" in text
