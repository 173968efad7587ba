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


def test_ratio_beside_the_peers_cancels_the_machines_drift():
    # The second round's machine is 1.5x slower for everyone: new/base alone swings, the
    # figure against the peer beside it in the same process does not.
    base = [_run(4.0, 6.0), _run(4.0, 6.0)]
    new = [_run(3.6, 6.0), _run(5.4, 9.0)]
    rows = {(r[2], r[3]): r for r in compare.summarize(base, new)}
    assert rows[("cupric", "us")][7] == pytest.approx(0.9)
    assert rows[("CuPy", "us")][7] is None                    # a peer is not scaled by itself


def test_host_cost_rows_meet_only_the_peers_of_their_operation():
    def run(conv_cupric, conv_peer, mm_peer):
        table = {"title": "ops", "columns": [["op", ""], ["size", ""], ["who", ""],
                                             ["host", ".1f"]],
                 "rows": [["conv", "small", "cupric, DeviceBuffers", conv_cupric],
                          ["conv", "small", "PyTorch conv2d", conv_peer],
                          ["matmul", "small", "PyTorch matmul", mm_peer]]}
        return {"meta": {}, "benchmarks": {"host_cost": {"tables": [table]}}}
    rows = compare.summarize([run(10.0, 20.0, 5.0)], [run(10.0, 20.0, 50.0)])
    (cupric,) = [r for r in rows if "cupric" in r[2]]
    assert cupric[7] == pytest.approx(1.0)
