"""Engine choices remembered on disk (cupric.cudnn.engine_records): the configuration the
heuristics chose is written to the checked cache and finalized directly by the next
plan of the same graph, options, device and cuDNN version; refused, corrupt, foreign or
stale records fall back to the heuristics. CPU lane: the backend calls that need a GPU
are answered by the scripted stand-in of _cudnn_fake, extended here with engines built
by index, knob choices and configurations made by the caller."""

from __future__ import annotations

import gc
import json
import os

import pytest

from cupric import _cache
from cupric.cudnn import graph as G
from cupric.cudnn import engine_choice as C
from cupric.cudnn import plans as P
from cupric.cudnn import engine_records as R
from cupric.cudnn import handle as handle_mod
from cupric.runtime import _lifetime

from _cudnn_fake import FakeBackend

libmod = pytest.importorskip("cupric.cudnn.lib")
if not libmod.is_available():
    pytest.skip("cuDNN bindings cannot be loaded here", allow_module_level=True)

A = G.HEUR_MODES["a"]


class KnobBackend(FakeBackend):
    """The stand-in, plus: ENGINE descriptors finalized from a global index, knob
    choices read from heuristics configurations (`knobs`, per engine) and set on
    configurations the caller builds, and the knobs each plan was finalized with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.knobs: dict[int, list[tuple[int, int]]] = {}
        self.plan_knobs: dict[int, list[tuple[int, int]]] = {}   # plan id -> knobs
        self.internal: set[int] = set()   # engines whose plans fail with INTERNAL_ERROR

    def _attr(self, rec, name):
        return rec.attrs.get(int(getattr(self._real, f"CUDNN_ATTR_{name}")))

    def created(self, kind_name: str) -> int:
        code = getattr(self._real, f"CUDNN_BACKEND_{kind_name}_DESCRIPTOR")
        return sum(1 for r in self.records.values() if r.kind == code)

    def cudnnBackendFinalize(self, desc):
        rec = self._rec(desc)
        lib = self._real
        if rec.kind == lib.CUDNN_BACKEND_ENGINE_DESCRIPTOR:
            rec.engine = self._attr(rec, "ENGINE_GLOBAL_INDEX")[0]
            assert self._attr(rec, "ENGINE_OPERATION_GRAPH"), "engine without its graph"
        elif rec.kind == lib.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
            rec.engine = self.records[self._attr(rec, "ENGINECFG_ENGINE")[0]].engine
            rec.knobs = [(self.records[c].attrs[int(lib.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE)][0],
                          self.records[c].attrs[int(lib.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)][0])
                         for c in self._attr(rec, "ENGINECFG_KNOB_CHOICES") or []]
        if rec.kind == lib.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
            cfg = self.records[self._attr(rec, "EXECUTION_PLAN_ENGINE_CONFIG")[0]]
            if cfg.engine in self.internal:
                return int(lib.CUDNN_STATUS_INTERNAL_ERROR)
        status = super().cudnnBackendFinalize(desc)
        if rec.kind == lib.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR and status == 0:
            cfg = self.records[self._attr(rec, "EXECUTION_PLAN_ENGINE_CONFIG")[0]]
            self.plan_knobs[self._id(desc)] = getattr(
                cfg, "knobs", self.knobs.get(cfg.engine, []))
        return status

    def cudnnBackendGetAttribute(self, desc, name, vtype, requested, count, array):
        lib = self._real
        rec = self._rec(desc)
        if int(name) == int(lib.CUDNN_ATTR_ENGINECFG_KNOB_CHOICES):
            knobs = self.knobs.get(rec.engine, [])
            for i, (t, v) in enumerate(knobs[:requested]):
                choice = self.records[self._id(array[i])]
                choice.attrs[int(lib.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE)] = [t]
                choice.attrs[int(lib.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)] = [v]
            count[0] = len(knobs)
            return 0
        if int(name) in (int(lib.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE),
                         int(lib.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)):
            array[0] = rec.attrs[int(name)][0]
            count[0] = 1
            return 0
        return super().cudnnBackendGetAttribute(desc, name, vtype, requested, count, array)


def settle():
    gc.collect()
    _lifetime.drain()


@pytest.fixture
def fake(monkeypatch, tmp_path):
    settle()
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUPRIC_CUDNN_ENGINE_CACHE", raising=False)
    monkeypatch.setattr(R, "_device_tag", lambda ordinal: f"Fake GPU {ordinal}/sm_90")
    backend = KnobBackend(libmod.lib, libmod.ffi)
    monkeypatch.setattr(libmod, "lib", backend)
    monkeypatch.setattr(handle_mod.Handle, "workspace", lambda self, n: 0xABC000 if n else 0)
    monkeypatch.setattr(R, "engine_stats", dict.fromkeys(R.engine_stats, 0))
    yield backend
    settle()
    assert backend.live() == 0, "a descriptor outlived its owners"


def new_handle():
    return handle_mod.Handle.from_handle(0xDEAD0, device=0)


def conv_spec(etype="f32", batch=2):
    g = G.GraphSpec("conv_forward")
    x = g.tensor((batch, 4, 8, 8), (256, 64, 8, 1), etype)
    w = g.tensor((4, 4, 3, 3), (36, 9, 3, 1), etype)
    y = g.tensor((batch, 4, 8, 8), (256, 64, 8, 1), etype)
    g.conv_fwd(x, w, y, G.ConvParams((1, 1), (1, 1), (1, 1), (1, 1)))
    return g


def plan_in_new_process(fake, spec, options=None):
    """A plan made as a new process would make it: a fresh handle (no plans in memory)."""
    h = new_handle()
    try:
        plan = C.plan_for(h, spec, options)
        return plan.engine, fake.plan_knobs[plan.descriptor._ptr]
    finally:
        h.close()


def record_files(root):
    folder = root / "cache" / "cudnn-engines"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_second_process_finalizes_the_recorded_configuration(fake, tmp_path):
    fake.heuristics = {A: [5, 7, 9]}
    fake.refused = {5}
    fake.knobs = {7: [(3, 1), (11, 64)], 9: [(2, 0)]}
    assert plan_in_new_process(fake, conv_spec()) == (7, [(3, 1), (11, 64)])
    assert R.engine_stats == {"heuristics": 1, "reused": 0, "recorded": 1, "refused": 0}
    assert len(record_files(tmp_path)) == 2        # the record and its blob
    heur_before = fake.created("ENGINEHEUR")
    # The next "process": no heuristics query, the same engine with the same knobs.
    assert plan_in_new_process(fake, conv_spec()) == (7, [(3, 1), (11, 64)])
    assert fake.created("ENGINEHEUR") == heur_before
    assert R.engine_stats["heuristics"] == 1 and R.engine_stats["reused"] == 1
    assert R.engine_stats["recorded"] == 1         # a reused choice is not written again
    # Another shape is another record.
    assert plan_in_new_process(fake, conv_spec(batch=4))[0] == 7
    assert R.engine_stats["heuristics"] == 2 and len(record_files(tmp_path)) == 4


def test_autotuned_choice_is_reused_without_timing(fake, monkeypatch):
    fake.heuristics = {A: [1, 2, 3]}
    fake.knobs = {2: [(4, 8)]}
    timed = []
    monkeypatch.setattr(C, "_time", lambda handle, plan, pointers: (
        timed.append(plan.engine), {1: 5.0, 2: 1.0, 3: 9.0}[plan.engine])[1])
    options = P.PlanOptions(autotune=True)
    spec = conv_spec()
    h = new_handle()
    try:
        assert C.plan_for(h, spec, options, [1, 2, 3]).engine == 2
    finally:
        h.close()
    assert sorted(timed) == [1, 2, 3]
    h = new_handle()
    try:
        plan = C.plan_for(h, conv_spec(), options, [1, 2, 3])
        assert plan.engine == 2 and fake.plan_knobs[plan.descriptor._ptr] == [(4, 8)]
    finally:
        h.close()
    assert sorted(timed) == [1, 2, 3]              # nothing timed the second time
    # Other options are another record: the heuristics' first choice, untimed.
    assert plan_in_new_process(fake, conv_spec())[0] == 1


def test_refused_record_falls_back_to_the_heuristics(fake):
    fake.heuristics = {A: [5, 7]}
    fake.knobs = {5: [(1, 2)], 7: [(1, 3)]}
    assert plan_in_new_process(fake, conv_spec())[0] == 5
    fake.refused = {5}                              # a library update, say
    assert plan_in_new_process(fake, conv_spec()) == (7, [(1, 3)])
    assert R.engine_stats["refused"] == 1 and R.engine_stats["heuristics"] == 2
    # ...and the new choice replaced the record.
    assert plan_in_new_process(fake, conv_spec()) == (7, [(1, 3)])
    assert R.engine_stats["reused"] == 1 and R.engine_stats["heuristics"] == 2


def test_corrupt_foreign_and_stale_records_are_ignored(fake, tmp_path):
    fake.heuristics = {A: [5]}
    plan_in_new_process(fake, conv_spec())
    folder = tmp_path / "cache" / "cudnn-engines"
    name, text = R.engine_record_key(conv_spec(), P.DEFAULT_OPTIONS, "Fake GPU 0/sm_90",
                                     R._library_version())
    assert R.read_engine_record(name, text) == (5, ())
    meta = json.loads((folder / f"{name}.json").read_text())
    blob = folder / meta["file"]
    # Altered bytes: the SHA-256 no longer matches.
    good = blob.read_bytes()
    blob.write_bytes(good.replace(b'"engine": 5', b'"engine": 6'))
    assert R.read_engine_record(name, text) is None
    assert plan_in_new_process(fake, conv_spec())[0] == 5
    assert R.engine_stats["heuristics"] == 2
    # Writable by others: refused with a warning, rebuilt by the heuristics.
    os.chmod(blob, 0o666)
    with pytest.warns(RuntimeWarning, match="not a private file"):
        assert R.read_engine_record(name, text) is None
    os.chmod(blob, 0o600)
    # A record under this name for another graph (a stale format, a digest clash).
    assert R.write_engine_record(name, text + " (another graph)", 9, [])
    assert R.read_engine_record(name, text) is None
    assert plan_in_new_process(fake, conv_spec())[0] == 5
    # Malformed content with a valid digest.
    _cache.store_blob(folder, name, b'{"format": 1, "graph": %s, "engine": "5", "knobs": []}'
                      % json.dumps(text).encode(), ".json")
    assert R.read_engine_record(name, text) is None


def test_a_graph_no_engine_accepts_is_refused_at_once_next_time(fake, tmp_path):
    fake.heuristics = {A: [5, 7]}
    fake.refused = {5, 7}                           # NOT_SUPPORTED: lasts with the key
    with pytest.raises(G.NoEngineError):
        plan_in_new_process(fake, conv_spec())
    assert R.engine_stats["recorded"] == 1
    graphs, heuristics = fake.created("OPERATIONGRAPH"), fake.created("ENGINEHEUR")
    with pytest.raises(G.NoEngineError, match="engine 5: CUDNN_STATUS_NOT_SUPPORTED") as info:
        plan_in_new_process(fake, conv_spec())
    assert "earlier process" in str(info.value.tried[-1][1])
    # Neither the graph nor the heuristics were built again.
    assert (fake.created("OPERATIONGRAPH"), fake.created("ENGINEHEUR")) == (graphs, heuristics)
    assert R.engine_stats["reused"] == 1


def test_a_refusal_that_may_be_the_machines_state_is_asked_again(fake):
    fake.heuristics = {A: [5, 7]}
    fake.refused = {5}
    fake.internal = {7}                             # a runtime compilation failing, say
    for _ in range(2):
        with pytest.raises(G.NoEngineError, match="INTERNAL"):
            plan_in_new_process(fake, conv_spec())
    # Both processes asked both modes of the default options (A, then fallback).
    assert R.engine_stats["recorded"] == 0 and R.engine_stats["heuristics"] == 4
    fake.internal = set()                           # fixed: the engine is found
    assert plan_in_new_process(fake, conv_spec())[0] == 7


def test_key_follows_the_library_version_device_options_and_graph():
    spec, options = conv_spec(), P.PlanOptions()
    base = R.engine_record_key(spec, options, "NVIDIA H100/sm_90", 92801)
    assert base == R.engine_record_key(conv_spec(), P.PlanOptions(), "NVIDIA H100/sm_90",
                                       92801)
    others = [R.engine_record_key(spec, options, "NVIDIA H100/sm_90", 92900),
              R.engine_record_key(spec, options, "NVIDIA H200/sm_90", 92801),
              R.engine_record_key(spec, P.PlanOptions(deterministic=True),
                                  "NVIDIA H100/sm_90", 92801),
              R.engine_record_key(conv_spec("f16"), options, "NVIDIA H100/sm_90", 92801),
              R.engine_record_key(conv_spec(batch=3), options, "NVIDIA H100/sm_90", 92801)]
    names = {base[0]} | {name for name, _ in others}
    assert len(names) == 6
    assert all(name.startswith("e") and len(name) == 41 for name in names)


def test_records_turned_off(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("CUPRIC_CUDNN_ENGINE_CACHE", "0")
    fake.heuristics = {A: [5]}
    plan_in_new_process(fake, conv_spec())
    plan_in_new_process(fake, conv_spec())
    assert R.engine_stats["heuristics"] == 2 and record_files(tmp_path) == []


def test_no_record_without_a_device_name(fake, tmp_path, monkeypatch):
    from cupric.runtime.errors import NoDriverError

    def no_driver(ordinal):
        raise NoDriverError("no driver here")
    monkeypatch.setattr(R, "_device_tag", no_driver)
    fake.heuristics = {A: [5]}
    assert plan_in_new_process(fake, conv_spec())[0] == 5
    assert record_files(tmp_path) == []


def test_unwritable_cache_still_plans(fake, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / "cudnn-engines").mkdir(mode=0o700)
    os.chmod(root / "cudnn-engines", 0o500)
    try:
        if os.access(root / "cudnn-engines", os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        fake.heuristics = {A: [5]}
        with pytest.warns(RuntimeWarning, match="cannot write the cache"):
            assert plan_in_new_process(fake, conv_spec())[0] == 5
        assert R.engine_stats["recorded"] == 0
    finally:
        os.chmod(root / "cudnn-engines", 0o700)
