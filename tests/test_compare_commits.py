"""tools/compare_commits.summarize: per-cell medians of both trees and of new / base."""
import importlib.util
import pathlib

import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "tools" / "compare_commits.py"
_spec = importlib.util.spec_from_file_location("compare_commits", _PATH)
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def _run(us_cupric, us_peer):
    table = {"title": "launch", "columns": [["launch", ""], ["us", ".2f"], ["ok", ""]],
             "rows": [["cupric", us_cupric, True], ["CuPy", us_peer, True]]}
    return {"meta": {}, "benchmarks": {"launch_overhead": {"tables": [table]}}}


def test_medians_and_ratios_per_cell():
    base = [_run(4.0, 6.0), _run(5.0, 7.5), _run(4.4, 6.6)]
    new = [_run(3.6, 6.0), _run(4.5, 7.5), _run(4.0, 6.6)]
    rows = {(r[2], r[3]): r for r in compare.summarize(base, new)}
    assert set(rows) == {("cupric", "us"), ("CuPy", "us")}   # booleans are not figures
    cupric = rows[("cupric", "us")]
    assert cupric[4] == pytest.approx(4.4) and cupric[5] == pytest.approx(4.0)
    assert cupric[6] == pytest.approx(0.9, rel=0.02)         # paired per round
    assert rows[("CuPy", "us")][6] == pytest.approx(1.0)


def test_cells_missing_from_a_run_are_left_out():
    base = [_run(4.0, 6.0)]
    new = [{"meta": {}, "benchmarks": {"launch_overhead": {"error": "stopped"}}}]
    assert compare.summarize(base, new) == []
    assert compare.summarize([], new) == []
