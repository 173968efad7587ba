"""Engine choice, plan caching and execution of cupric.cudnn.engine_choice through their real code
paths on the CPU lane, with the GPU-only backend calls answered by a scripted stand-in
(see _cudnn_fake): heuristics order, refusing engines, numerical-note filters, variant
pack reuse, and that every descriptor made is destroyed again."""

from __future__ import annotations

import gc

import pytest

from cupric.cudnn import graph as G
from cupric.cudnn import engine_choice as C
from cupric.cudnn import plans as P
from cupric.cudnn import handle as handle_mod
from cupric.runtime import _lifetime

from _cudnn_fake import FakeBackend

libmod = pytest.importorskip("cupric.cudnn.lib")
if not libmod.is_available():
    pytest.skip("cuDNN bindings cannot be loaded here", allow_module_level=True)

A, FALLBACK = G.HEUR_MODES["a"], G.HEUR_MODES["fallback"]


@pytest.fixture
def fake(monkeypatch):
    settle()  # real descriptors other tests left to the garbage collector go first
    # Made-up engines must not be remembered on disk for the real library (on a GPU
    # machine the device has a name to key them by); test_cudnn_engine_records covers it.
    monkeypatch.setenv("CUPRIC_CUDNN_ENGINE_CACHE", "0")
    real = libmod.lib
    backend = FakeBackend(real, libmod.ffi)
    monkeypatch.setattr(libmod, "lib", backend)
    monkeypatch.setattr(handle_mod.Handle, "workspace",
                        lambda self, n: 0xABC000 if n else 0)
    yield backend
    # Descriptors made here must be released while the stand-in answers for them: the
    # real library must never see these made-up addresses.
    settle()
    assert backend.live() == 0, "a descriptor outlived its owners"


@pytest.fixture
def h(fake):
    handle = handle_mod.Handle.from_handle(0xDEAD0, device=0)
    yield handle
    handle.close()


def conv_spec(etype="f32"):
    g = G.GraphSpec("conv_forward")
    x = g.tensor((2, 4, 8, 8), (256, 64, 8, 1), etype)
    w = g.tensor((4, 4, 3, 3), (36, 9, 3, 1), etype)
    y = g.tensor((2, 4, 8, 8), (256, 64, 8, 1), etype)
    g.conv_fwd(x, w, y, G.ConvParams((1, 1), (1, 1), (1, 1), (1, 1)))
    return g


def settle():
    gc.collect()
    _lifetime.drain()


def test_first_engine_that_finalizes_and_passes_the_filters(fake, h):
    fake.heuristics = {A: [5, 7, 9, 11]}
    fake.refused = {5}
    fake.notes = {7: [G._NOTE_TENSOR_CORE]}
    fake.workspace = {9: 4096}
    plan = C.plan_for(h, conv_spec(), P.PlanOptions(allow_tf32=False))
    assert plan.engine == 9 and plan.workspace_size == 4096
    # The plan handle attribute carries the cuDNN handle.
    plan_rec = fake.records[plan.descriptor._ptr]
    assert plan_rec.attrs[int(libmod.lib.CUDNN_ATTR_EXECUTION_PLAN_HANDLE)] == [0xDEAD0]
    # With TF32 allowed, engine 7 (tensor cores) is the first that finalizes.
    assert C.plan_for(h, conv_spec(), P.PlanOptions()).engine == 7
    assert len(h.plans) == 2


def test_fallback_mode_and_no_engine(fake, h):
    fake.heuristics = {FALLBACK: [3, 4]}          # mode A proposes nothing here
    fake.refused = {3}
    assert C.plan_for(h, conv_spec()).engine == 4
    fake.refused = {3, 4}
    with pytest.raises(G.NoEngineError) as info:
        C.plan_for(h, conv_spec("f16"))
    assert [i for i, _ in info.value.tried] == [3, 4]
    assert "CUDNN_STATUS_NOT_SUPPORTED_SHAPE" in str(info.value)


def test_graph_refusal(fake, h):
    fake.graph_refused = True
    fake.heuristics = {A: [1]}
    with pytest.raises(G.NoEngineError, match="graph refused"):
        C.plan_for(h, conv_spec())


def test_execute_reuses_the_variant_pack(fake, h):
    fake.heuristics = {A: [2]}
    fake.workspace = {2: 100}
    spec = conv_spec()
    uids = spec.io_uids()
    ptrs = {uids[0]: 0x10000, uids[1]: 0x20000, uids[2]: 0x30000}
    C.execute(h, spec, ptrs)
    C.execute(h, spec, ptrs)
    assert fake.live("VARIANT_PACK") == 1
    C.execute(h, spec, {**ptrs, uids[2]: 0x40000})
    assert fake.live("VARIANT_PACK") == 1              # the old pack was destroyed
    assert fake.executed == [
        (2, uids, (0x10000, 0x20000, 0x30000), 0xABC000),
        (2, uids, (0x10000, 0x20000, 0x30000), 0xABC000),
        (2, uids, (0x10000, 0x20000, 0x40000), 0xABC000),
    ]


def test_autotune_keeps_the_fastest(fake, h, monkeypatch):
    fake.heuristics = {A: [1, 2, 3], FALLBACK: [3, 4]}
    times = {1: 5.0, 2: 2.0, 3: 9.0, 4: 1.5}
    monkeypatch.setattr(C, "_time", lambda handle, plan, pointers: times[plan.engine])
    options = P.PlanOptions(autotune=True, candidates=8)
    spec = conv_spec()
    plan = C.execute(h, spec, dict(zip(spec.io_uids(), (1, 2, 3))), options)
    assert plan.engine == 4 and plan.time_ms == 1.5    # fallback's engine 4 was timed too
    assert fake.live("EXECUTION_PLAN") == 1             # the losers were destroyed
    limited = P.PlanOptions(autotune=True, candidates=2)
    assert C.plan_for(h, conv_spec("f16"), limited, [1, 2, 3]).engine == 2


def test_every_descriptor_is_released(fake, h):
    fake.heuristics = {A: [1, 2]}
    fake.refused = {1}
    spec = conv_spec()
    C.execute(h, spec, dict(zip(spec.io_uids(), (1, 2, 3))))
    assert fake.live() > 0
    h.clear_plans()
    del spec
    settle()
    assert fake.live() == 0, {hex(k): r for k, r in fake.records.items() if not r.destroyed}
