"""Choosing the engine of a cuDNN graph: heuristics, autotuning, the per-handle plan cache.

`plan_for` finds a graph's plan on a handle: from the handle's cache, else from the
engine recorded on disk by an earlier process (`cupric.cudnn.engine_records`), else by
asking cuDNN's heuristics (modes in `PlanOptions.heuristics` order) and keeping the
first configuration that finalizes - or, when autotuning, timing up to
`PlanOptions.candidates` of them on the caller's data and keeping the fastest.
`execute` runs a graph through its plan.
"""

from __future__ import annotations

import math

from . import engine_records as _records
from .backend import Descriptor
from .engine_records import (_engine_record, _lasting_refusal, _record_choice,
                             _reuse_record, read_engine_record, write_refusal_record)
from .graph import HEUR_MODES, GraphSpec, NoEngineError, _engine_refused, _not_supported
from .plans import DEFAULT_OPTIONS, Plan, PlanOptions

__all__ = ["plan_for", "execute", "ieee_matmul_refusal"]


def _count(descriptor: Descriptor, attribute: str) -> int:
    from . import lib
    from .backend import check
    n = lib.ffi.new("int64_t *")
    check(lib.lib.cudnnBackendGetAttribute(
        descriptor.raw, getattr(lib.lib, f"CUDNN_ATTR_{attribute}"),
        lib.lib.CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, n, lib.ffi.NULL),
        f"count CUDNN_ATTR_{attribute}")
    return int(n[0])


def _configs(graph: Descriptor, mode: str) -> list[Descriptor]:
    """Engine configurations the heuristics propose for a graph, best first."""
    from . import lib
    _records.engine_stats["heuristics"] += 1
    heur = Descriptor.create("ENGINEHEUR")
    try:
        heur.set("ENGINEHEUR_OPERATION_GRAPH", graph)
        heur.set("ENGINEHEUR_MODE", HEUR_MODES[mode])
        try:
            heur.finalize()
        except lib.CudnnError as exc:
            if _not_supported(exc):
                return []
            raise
        n = _count(heur, "ENGINEHEUR_RESULTS")
        if n == 0:
            return []
        return heur.get_descriptors("ENGINEHEUR_RESULTS", "ENGINECFG", n)
    finally:
        heur.close()


def _engine_facts(config: Descriptor) -> tuple[int | None, list[int]]:
    """(global engine index, numerical notes) of an engine configuration."""
    engines = config.get_descriptors("ENGINECFG_ENGINE", "ENGINE", 1)
    if not engines:
        return None, []
    engine = engines[0]
    try:
        index = engine.get_int64("ENGINE_GLOBAL_INDEX")[0]
        notes = engine.get_enums("ENGINE_NUMERICAL_NOTE", 16)
    finally:
        engine.close()
    return index, notes


def _candidate_plans(handle, spec: GraphSpec, graph: Descriptor, options: PlanOptions,
                     limit: int) -> tuple[list[Plan], list]:
    """Up to `limit` plans that finalize, in heuristics order; and the rejections."""
    from . import lib
    data_types = {t.etype for t in spec.tensors.values() if not t.virtual}
    plans: list[Plan] = []
    tried: list = []
    seen: set = set()
    for mode in options.heuristics:
        for config in _configs(graph, mode):
            if len(plans) >= limit:
                config.close()
                continue
            used = False
            try:
                index, notes = _engine_facts(config)
                if index is not None and index in seen:
                    continue
                reason = options.rejects(notes, data_types)
                if reason is not None:
                    tried.append((index, reason))
                    continue
                plan_d = Descriptor.create("EXECUTION_PLAN")
                plan_d.set("EXECUTION_PLAN_HANDLE", handle.ptr)
                plan_d.set("EXECUTION_PLAN_ENGINE_CONFIG", config)
                try:
                    plan_d.finalize()
                except lib.CudnnError as exc:
                    plan_d.close()
                    if _engine_refused(exc):
                        tried.append((index, exc.name))
                        continue
                    raise
                plan = Plan(plan_d, spec.io_uids(), index)
                if options.workspace_limit is not None and \
                        plan.workspace_size > options.workspace_limit:
                    tried.append((index, f"needs {plan.workspace_size} bytes of workspace"))
                    plan.close()
                    continue
                if index is not None:
                    seen.add(index)
                plan._config = config
                plans.append(plan)
                # The plan keeps its configuration alive (Descriptor.set holds it).
                used = True
            finally:
                if not used:
                    config.close()
        if plans and not options.autotune:
            break
    return plans, tried


#: Autotuning samples per candidate: at least `_SAMPLES[0]`, at most `_SAMPLES[1]`; a
#: run no faster than `_STABLE` times the best so far ends the sampling.
_SAMPLES = (3, 20)
_STABLE = 0.95


def _time(handle, plan: Plan, pointers) -> float:
    """Milliseconds of one execution of `plan`, as a caller waiting on each call sees
    it: after a warm-up (which loads kernels and compiles runtime fusion), one execution
    between two events on an idle stream, repeated until stable; the best run."""
    from cupric.runtime.device import Device
    dev = Device(handle.device)
    start = dev.create_event(timing=True)
    end = dev.create_event(timing=True)
    try:
        plan.execute(handle, pointers)
        end.record(handle.stream)
        end.synchronize()
        best = math.inf
        for i in range(_SAMPLES[1]):
            start.record(handle.stream)
            plan.execute(handle, pointers)
            end.record(handle.stream)
            end.synchronize()
            t = start.elapsed_time(end)
            faster = t < best * _STABLE
            best = min(best, t)
            if not faster and i + 1 >= _SAMPLES[0]:
                break
        return best
    finally:
        start.close()
        end.close()


_MAX_CACHED_PLANS = 1024


def ieee_matmul_refusal(spec: GraphSpec, options: PlanOptions) -> str | None:
    """Why a graph with a float32 matmul cannot honor ``allow_tf32=False``, or None.

    The float32 matmul engine cuDNN 9.19 proposes (global index 0, finalize mode
    ``BLAS_MATMUL``) computes at TF32 precision (errors up to 2.8e-4 of the largest
    result of a K = 32 product, measured against float64) while its
    numerical notes carry neither ``TENSOR_CORE`` nor ``DOWN_CONVERT_INPUTS``, the notes
    `PlanOptions.rejects` (and PyTorch) filter TF32 engines by. No engine is therefore
    known to compute a float32 matmul in IEEE float32: such a graph is refused up front
    rather than run at a precision the caller turned down. Float32 convolutions are not
    affected (the GPU lane checks them without TF32 at 2e-5).
    """
    if options.allow_tf32:
        return None
    for op in spec.ops:
        if op.kind != "matmul":
            continue
        operands = [spec.tensors[op.tensor(role)].etype for role in ("a", "b")]
        if "f32" in operands:
            return _IEEE_MATMUL_REFUSAL
    return None


_IEEE_MATMUL_REFUSAL = ("float32 matmul with allow_tf32=False: cuDNN's float32 matmul "
                        "engines run at TF32 precision without saying so in their "
                        "numerical notes, so none is known to give IEEE float32 results; "
                        "allow TF32 (PlanOptions(allow_tf32=True)) or use cuBLAS")


def plan_for(handle, spec: GraphSpec, options: PlanOptions | None = None,
             pointers=None) -> Plan:
    """The cached plan of a graph on a handle, built (and autotuned) on first use.

    Parameters
    ----------
    handle : Handle
    spec : GraphSpec
    options : PlanOptions, optional
    pointers : sequence of int, optional
        Device pointers in `spec.io_uids()` order; needed to autotune (the candidates run
        on the caller's data, which is why graphs here never accumulate into outputs).

    Raises
    ------
    NoEngineError
        When no configuration finalizes, or for a float32 matmul with
        ``allow_tf32=False`` (see `ieee_matmul_refusal`), before any cuDNN call.

    Cost
    ----
    A cache hit is a dictionary lookup. A miss builds the graph, runs the heuristics and
    finalizes plans (milliseconds; runtime-compiled fusion engines compile kernels, which
    can take a second); autotuning adds a few executions of each candidate. The choice
    is recorded on disk (`engine_records_enabled`): a later process finalizes the
    recorded configuration directly, without heuristics or autotuning, and falls back to
    them only when cuDNN refuses it.

    Thread safety
    -------------
    Safe: misses of one handle are serialized by its lock.
    """
    if options is None:
        options = DEFAULT_OPTIONS
    key = (spec.key(), options)
    cache = handle.plans
    plan = cache.get(key)
    if plan is not None:
        return plan
    with handle.lock:
        plan = cache.get(key)
        if plan is not None:
            return plan
        refusal = ieee_matmul_refusal(spec, options)
        if refusal is not None:
            raise NoEngineError(spec.name, [(None, refusal)])
        from . import lib
        record = _engine_record(handle, spec, options)
        found = read_engine_record(*record) if record is not None else None
        if found is not None and found[0] is None:
            _records.engine_stats["reused"] += 1
            raise NoEngineError(spec.name, list(found[1]) + [
                (None, "recorded by an earlier process for this device and cuDNN; "
                       "CUPRIC_CUDNN_ENGINE_CACHE=0 asks again")])
        try:
            graph = spec.build(handle)
        except lib.CudnnError as exc:
            # Finalizing an operation or the graph answers NOT_SUPPORTED for a
            # combination no engine family takes (a standalone pointwise graph, say).
            if not _not_supported(exc):
                raise
            raise NoEngineError(spec.name, [(None, f"graph refused: {exc.name}")]) from exc
        try:
            plans, tried = _reuse_record(handle, spec, graph, options, found)
            if not plans:
                limit = options.candidates if options.autotune and pointers is not None else 1
                plans, tried = _candidate_plans(handle, spec, graph, options, limit)
        except BaseException:
            graph.close()
            raise
        if not plans:
            graph.close()
            if record is not None and _lasting_refusal(tried) and \
                    write_refusal_record(*record, tried):
                _records.engine_stats["recorded"] += 1
            raise NoEngineError(spec.name, tried)
        if len(plans) > 1:
            timed = []
            for p in plans:
                try:
                    timed.append((_time(handle, p, pointers), p))
                except Exception as exc:  # a candidate failing to run is just skipped
                    from . import lib
                    if not isinstance(exc, lib.CudnnError):
                        raise
                    p.close()
            if not timed:
                graph.close()
                raise NoEngineError(spec.name, tried + [(None, "every candidate failed "
                                                        "to execute")])
            timed.sort(key=lambda pair: pair[0])
            best_time, best = timed[0]
            best.time_ms = best_time
            for _t, p in timed[1:]:
                p.close()
        else:
            best = plans[0]
        best._graph = graph
        if record is not None and best._config is not None:
            _record_choice(record, best)
        best._config = None
        if len(cache) >= _MAX_CACHED_PLANS:
            # Oldest first (dicts keep insertion order).
            oldest = next(iter(cache))
            cache.pop(oldest).close()
        cache[key] = best
        return best


def execute(handle, spec: GraphSpec, pointers: dict, options: PlanOptions | None = None) -> Plan:
    """Run a graph: find (or build) its plan and queue it on the handle's stream.

    Parameters
    ----------
    pointers : dict uid -> int
        A device address for every in-memory tensor of the graph.

    Returns
    -------
    Plan
        The plan that ran.
    """
    uids = spec.io_uids()
    try:
        ordered = [pointers[uid] for uid in uids]
    except KeyError as exc:
        raise ValueError(f"{spec.name}: no device pointer for tensor uid {exc}") from None
    plan = plan_for(handle, spec, options, ordered)
    plan.execute(handle, ordered)
    return plan
