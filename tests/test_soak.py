"""benchmarks/soak.py's measuring logic on the CPU: the per-phase growth, the verdict
against the goals, rounds, the settled reading's order of operations, and the command
line, with fake workloads and fake readings (the workloads themselves need a GPU)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
soak = importlib.util.module_from_spec(spec)
sys.modules["soak"] = soak   # dataclasses look their module up
spec.loader.exec_module(soak)

MiB = 1 << 20


class FakeDevice:
    """Device memory and RSS that the fake phases move: `leaks` maps a phase to (device
    bytes, RSS bytes) added per call; `cache` to what its first call adds only."""

    def __init__(self, leaks=None, cache=None):
        self.device, self.rss = 500 * MiB, 1000 * MiB
        self.leaks, self.cache = leaks or {}, dict(cache or {})
        self.calls = []

    def workloads(self, folder, rng):
        device = self

        class Work:
            pass

        work = Work()
        for phase in soak.PHASES:
            def run(count, phase=phase):
                device.calls.append((phase, count))
                d, r = device.leaks.get(phase, (0, 0))
                c = device.cache.pop(phase, (0, 0))
                device.device += d + c[0]
                device.rss += r + c[1]
            setattr(work, phase, run)
        return work

    def measure(self, census=False):
        return soak.Reading(self.device, self.rss, objects={"cupric.x.Y": 3} if census
                            else {})


def _run(fake, plan=None, **kw):
    lines = []
    results = soak.run(plan or dict(soak.SHORT), workloads=fake.workloads,
                       measure=fake.measure, out=lines.append, **kw)
    return results, "\n".join(lines)


def test_a_clean_run_passes_and_reports_every_phase():
    fake = FakeDevice()
    results, text = _run(fake)
    assert results["ok"] and "soak: PASS" in text
    assert [row["phase"] for row in results["phases"]] == list(soak.PHASES)
    # The warm-up runs every phase once before the baseline, then the plan's counts.
    assert fake.calls == [(p, soak.WARM_UP[p]) for p in soak.PHASES] + [
        (p, soak.SHORT[p]) for p in soak.PHASES]


def test_growth_is_charged_to_the_phase_that_made_it():
    fake = FakeDevice(leaks={"handles": (3 * MiB, 0), "compilations": (0, 80 * MiB)})
    results, text = _run(fake)
    steps = {row["phase"]: (row["device_step_bytes"], row["rss_step_fraction"])
             for row in results["phases"]}
    assert steps["cycles"] == (0, 0)
    # The warm-up leaked too: the baseline RSS is 1080 MiB.
    assert steps["compilations"] == (0, pytest.approx(80 / 1080))
    assert steps["handles"] == (3 * MiB, 0)
    assert results["device_growth_bytes"] == 3 * MiB
    assert results["rss_growth_fraction"] == pytest.approx(80 / 1080)
    assert not results["ok"] and "soak: FAIL" in text


@pytest.mark.parametrize("device,rss,ok", [
    (MiB, 0, True), (MiB + 1, 0, False),                  # the device goal is <= 1 MiB
    (0, 50 * MiB, True), (0, 50 * MiB + 4096, False),      # RSS <= 5 % of 1000 MiB
    (-4 * MiB, -100 * MiB, True),                          # shrinking is fine
])
def test_verdict_limits(device, rss, ok):
    base = soak.Reading(500 * MiB, 1000 * MiB)
    after = soak.Reading(500 * MiB + device, 1000 * MiB + rss)
    assert soak.judge(base, [("cycles", after)])["ok"] is ok


def test_rounds_tell_a_leak_from_a_cache_that_fills_once():
    fake = FakeDevice(leaks={"cycles": (2 * MiB, 0)}, cache={"handles": (2 * MiB, 0)})
    # The cache entry is consumed by the warm-up, as a real cache would be.
    results, text = _run(fake, rounds=3)
    rows = {row["phase"]: row["device_step_bytes"] for row in results["phases"]}
    assert rows == {"cycles#1": 2 * MiB, "cycles#2": 2 * MiB, "cycles#3": 2 * MiB,
                    "compilations#1": 0, "compilations#2": 0, "compilations#3": 0,
                    "handles#1": 0, "handles#2": 0, "handles#3": 0}
    assert "cycles#3" in text


def test_census_rows_show_objects_that_grew():
    base = soak.Reading(0, MiB, objects={"cupric.a.Buf": 2, "cupric.b.Ev": 1})
    after = soak.Reading(0, MiB, objects={"cupric.a.Buf": 9, "cupric.b.Ev": 1})
    row = soak.judge(base, [("cycles", after)])["phases"][0]
    assert row["objects_step"] == {"cupric.a.Buf": 7}
    text = soak.table(soak.judge(base, [("cycles", after)]), {"cycles": 5}, {})
    assert "Buf +7" in text


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one reading"):
        soak.judge(soak.Reading(0, MiB), [])
    with pytest.raises(ValueError, match="RSS must be positive"):
        soak.judge(soak.Reading(0, 0), [("cycles", soak.Reading(0, 0))])
    with pytest.raises(ValueError, match="rounds"):
        soak.run(dict(soak.SHORT), rounds=0)


def test_json_and_command_line(tmp_path, monkeypatch):
    fake = FakeDevice(leaks={"cycles": (2 * MiB, 0)})
    path = tmp_path / "soak.json"
    seen, real_run = {}, soak.run

    def fake_run(plan, json_path=None, **kw):
        seen.update(plan=plan, json_path=json_path, **kw)
        return real_run(plan, json_path, workloads=fake.workloads, measure=fake.measure,
                        out=lambda line: None, **kw)

    monkeypatch.setattr(soak, "run", fake_run)
    assert soak.main(["--short", "--handles", "7", "--rounds", "2", "--json",
                      str(path)]) == 1      # 2 MiB per cycles round: FAIL
    assert seen["plan"] == {"cycles": 2000, "compilations": 50, "handles": 7}
    assert seen["rounds"] == 2
    data = json.loads(path.read_text())
    assert data["device_growth_bytes"] == 4 * MiB and data["ok"] is False
    assert [row["phase"] for row in data["phases"]][:2] == ["cycles#1", "cycles#2"]


def test_settle_synchronizes_collects_drains_and_releases_before_reading(monkeypatch):
    from cupric.runtime import resource
    log = []
    free = [640 * MiB]

    class Runtime:
        def synchronize(self):
            log.append("sync")

        def memory_info(self):
            log.append("read")
            return free[0], 1000 * MiB

    def release(synchronize, free_bytes):
        log.append("release")
        before = free_bytes()
        free[0] += 60 * MiB        # the caches gave 60 MiB back
        synchronize()
        return {"a cache": free_bytes() - before, "another": None}

    monkeypatch.setattr(soak.gc, "collect", lambda: log.append("gc"))
    monkeypatch.setattr(resource, "drain", lambda: log.append("drain"))
    monkeypatch.setattr(soak, "release_caches", release)
    reading = soak.settle(Runtime())
    assert reading.device_bytes == 300 * MiB and reading.rss_bytes > 0
    assert reading.released == {"a cache": 60 * MiB, "another": None}
    assert reading.released_bytes == 60 * MiB
    assert log == ["sync"] + ["gc", "drain"] * 3 + ["sync", "release", "read", "sync",
                                                     "read", "sync", "read"]


def test_release_caches_uses_every_public_release_and_measures_each(monkeypatch):
    import cupric.kernels
    from cupric import cudnn
    from cupric.compiler.cache import default_cache
    from cupric.runtime import memory, pool
    log, free = [], [0]

    class Pool:
        def trim(self, keep):
            log.append(("trim", keep))
            free[0] += 1    # each trim returns a page

    def gives(name, nbytes):
        def release():
            log.append(name)
            free[0] += nbytes
        return release

    monkeypatch.setattr(memory, "release_cached", gives("cached", 100))
    monkeypatch.setattr(cupric.kernels, "release_workspaces", gives("ws", 20))
    monkeypatch.setattr(cudnn, "is_available", lambda: True)
    monkeypatch.setattr(cudnn, "release_idle_handles", gives("dnn", 3))
    monkeypatch.setattr(pool, "default_pool", lambda device: Pool())
    monkeypatch.setattr(pool, "current_pool", lambda device: Pool())
    monkeypatch.setattr(type(default_cache()), "clear_memory",
                        lambda self: log.append("kernels"))
    released = soak.release_caches(lambda: log.append("sync"), free_bytes=lambda: free[0])
    # Each device release, then the wait, then the trim that returns the pages; the
    # allocation cache last among them, since the others free into it.
    trimmed = ["sync", ("trim", 0), ("trim", 0)]
    assert log == ["ws", *trimmed, "dnn", *trimmed, "cached", *trimmed, "kernels"]
    assert released == {"kernels.release_workspaces()": 22,
                        "cudnn.release_idle_handles()": 5, "memory.release_cached()": 102,
                        "kernel_cache.clear_memory()": 0, "linecache.clearcache()": 0}
    assert set(soak.release_caches(lambda: None).values()) == {None}  # not measured
