"""Engine choices of cuDNN graphs remembered on disk, across processes.

The heuristics query (and an autotuning round) costs each process milliseconds per
graph and shape. The configuration that won - engine global index and knob choices,
from which cuDNN rebuilds the same configuration - is recorded per (graph, options,
device, cuDNN version) in ``<cache root>/cudnn-engines`` as a checked blob
(`cupric._cache`: ours, private, SHA-256 matching); the next process finalizes that
configuration first and asks the heuristics only when it is refused or unreadable.
"""

from __future__ import annotations

import dataclasses

from .backend import Descriptor
from .graph import GraphSpec, _engine_refused
from .plans import Plan, PlanOptions

__all__ = ["ENGINE_RECORD_FORMAT", "engine_stats", "engine_records_enabled",
           "engine_record_key", "read_engine_record", "write_engine_record",
           "write_refusal_record"]


ENGINE_RECORD_FORMAT = 1
_ENGINE_FOLDER = "cudnn-engines"

#: Counters (diagnostics and tests): heuristics queries made, plans rebuilt from a
#: record, records written, records refused by cuDNN. Updated under a handle's lock,
#: so only approximately exact when several handles build plans at once.
engine_stats = {"heuristics": 0, "reused": 0, "recorded": 0, "refused": 0}

_device_tags: dict[int, str] = {}
_cudnn_version: list = []


def engine_records_enabled() -> bool:
    """Whether engine choices are read from and written to disk
    (``CUPRIC_CUDNN_ENGINE_CACHE=0`` turns it off)."""
    from cupric import _config
    return _config.CUDNN_ENGINE_CACHE.get()


def _device_tag(ordinal: int) -> str:
    """The product name and architecture of device `ordinal` (engine choices are only
    valid on the GPU model they were made for)."""
    tag = _device_tags.get(ordinal)
    if tag is None:
        from cupric.runtime.device import Device
        dev = Device(ordinal)
        tag = _device_tags[ordinal] = f"{dev.name}/{dev.arch}"
    return tag


def _library_version() -> int:
    if not _cudnn_version:
        from . import lib
        _cudnn_version.append(int(lib.lib.cudnnGetVersion()))
    return _cudnn_version[0]


def engine_record_key(spec: GraphSpec, options: PlanOptions, device: str,
                      version: int) -> tuple[str, str]:
    """``(name, text)`` of a graph's engine record: `text` describes everything the
    choice depends on (graph, shapes, strides, types, alignment, options, `device`,
    cuDNN `version`) and `name` is its digest, the record's file name."""
    import hashlib
    text = repr((ENGINE_RECORD_FORMAT, version, device, spec.key().value,
                 dataclasses.astuple(options)))
    return "e" + hashlib.sha256(text.encode()).hexdigest()[:40], text


def read_engine_record(name: str, text: str):
    """``(engine, ((knob type, value), ...))`` recorded under `name` for `text`;
    ``(None, ((engine or None, reason), ...))`` where no engine accepted the graph (see
    `write_refusal_record`); None when there is no record or it is not to be trusted
    (foreign, altered, another key, malformed)."""
    import json

    from cupric import _cache
    directory = _cache.folder(_ENGINE_FOLDER, create=False)
    if directory is None:
        return None
    found = _cache.load_blob(directory, name)
    if found is None:
        return None
    try:
        record = json.loads(found[1])
        if record.get("format") != ENGINE_RECORD_FORMAT or record.get("graph") != text:
            return None
        engine = record["engine"]
        if engine is None:
            tried = tuple((i if type(i) is int else None, str(r)) for i, r in record["tried"])
            return None, tried
        knobs = tuple((int(t), int(v)) for t, v in record["knobs"])
        if type(engine) is not int:
            return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return engine, knobs


def write_engine_record(name: str, text: str, engine: int, knobs) -> bool:
    """Record the engine configuration chosen for the graph `text`; False when the
    cache cannot be written (warned once by `cupric._cache`)."""
    import json

    from cupric import _cache
    directory = _cache.folder(_ENGINE_FOLDER)
    if directory is None:
        return False
    data = json.dumps({"format": ENGINE_RECORD_FORMAT, "graph": text, "engine": engine,
                       "knobs": [list(k) for k in knobs]}, sort_keys=True).encode()
    return _cache.store_blob(directory, name, data, ".json") is not None


def write_refusal_record(name: str, text: str, tried) -> bool:
    """Record that no engine accepts the graph `text` (`tried`: the (engine, reason)
    pairs of its `NoEngineError`), so that later processes raise it without asking the
    heuristics; False when the cache cannot be written."""
    import json

    from cupric import _cache
    directory = _cache.folder(_ENGINE_FOLDER)
    if directory is None:
        return False
    data = json.dumps({"format": ENGINE_RECORD_FORMAT, "graph": text, "engine": None,
                       "tried": [[i, r] for i, r in tried]}, sort_keys=True).encode()
    return _cache.store_blob(directory, name, data, ".json") is not None


def _lasting_refusal(tried) -> bool:
    """Whether every reason a graph found no engine holds as long as the key does: an
    engine excluded by the options, or cuDNN answering NOT_SUPPORTED. A bad parameter,
    an internal failure (a runtime compilation) or a sub-library that did not load may
    be the machine's state, and is asked again next time."""
    return all(not reason.startswith("CUDNN_STATUS_")
               or reason.startswith("CUDNN_STATUS_NOT_SUPPORTED") for _i, reason in tried)


def _knob_choices(config: Descriptor) -> tuple:
    """((knob type, value), ...) of an engine configuration."""
    from . import lib
    choices = config.get_descriptors("ENGINECFG_KNOB_CHOICES", "KNOB_CHOICE",
                                     int(lib.lib.CUDNN_KNOB_TYPE_COUNTS))
    try:
        return tuple((c.get_enums("KNOB_CHOICE_KNOB_TYPE", 1)[0],
                      c.get_int64("KNOB_CHOICE_KNOB_VALUE")[0]) for c in choices)
    finally:
        for c in choices:
            c.close()


def _recorded_plan(handle, spec: GraphSpec, graph: Descriptor, options: PlanOptions,
                   engine: int, knobs) -> Plan | None:
    """The plan of a recorded engine configuration, or None when cuDNN refuses it (a
    driver or library change the key does not see) or the options now exclude it."""
    from . import lib
    made: list[Descriptor] = []
    plan = None
    try:
        e = Descriptor.create("ENGINE")
        made.append(e)
        e.set("ENGINE_OPERATION_GRAPH", graph)
        e.set("ENGINE_GLOBAL_INDEX", engine)
        e.finalize()
        data_types = {t.etype for t in spec.tensors.values() if not t.virtual}
        if options.rejects(e.get_enums("ENGINE_NUMERICAL_NOTE", 16), data_types):
            return None
        choices = []
        for knob, value in knobs:
            c = Descriptor.create("KNOB_CHOICE")
            made.append(c)
            c.set("KNOB_CHOICE_KNOB_TYPE", knob)
            c.set("KNOB_CHOICE_KNOB_VALUE", value)
            c.finalize()
            choices.append(c)
        config = Descriptor.create("ENGINECFG")
        made.append(config)
        config.set("ENGINECFG_ENGINE", e)
        if choices:
            config.set("ENGINECFG_KNOB_CHOICES", choices)
        config.finalize()
        plan_d = Descriptor.create("EXECUTION_PLAN")
        made.append(plan_d)
        plan_d.set("EXECUTION_PLAN_HANDLE", handle.ptr)
        plan_d.set("EXECUTION_PLAN_ENGINE_CONFIG", config)
        plan_d.finalize()
        plan = Plan(plan_d, spec.io_uids(), engine)
    except lib.CudnnError as exc:
        if not _engine_refused(exc):
            raise
        return None
    finally:
        # On success the plan keeps the configuration, engine and knob choices alive
        # (Descriptor.set holds them); on a refusal or an error they all go now.
        if plan is None:
            for d in reversed(made):
                d.close()
    if options.workspace_limit is not None and plan.workspace_size > options.workspace_limit:
        plan.close()
        return None
    return plan


def _engine_record(handle, spec: GraphSpec, options: PlanOptions) -> tuple | None:
    """``(name, text)`` of the graph's engine record on this handle's device, or None
    when records are turned off or the device cannot be named (a handle borrowed
    without a driver to ask: nothing to key a record by)."""
    if not engine_records_enabled():
        return None
    from cupric.runtime.errors import CudaError
    try:
        device = _device_tag(handle.device)
    except CudaError:
        return None
    return engine_record_key(spec, options, device, _library_version())


def _reuse_record(handle, spec, graph, options, found) -> tuple[list, list]:
    """([plan], []) from the recorded configuration `found` (`read_engine_record`), or
    ([], []) when there is none or cuDNN refuses it."""
    if found is None:
        return [], []
    plan = _recorded_plan(handle, spec, graph, options, *found)
    if plan is None:
        engine_stats["refused"] += 1
        return [], []
    engine_stats["reused"] += 1
    return [plan], []


def _record_choice(record: tuple, plan: Plan) -> None:
    """Write the configuration of a plan the heuristics (or autotuning) chose."""
    from . import lib
    config = plan._config
    if plan.engine is None:
        return
    try:
        knobs = _knob_choices(config)
    except lib.CudnnError:
        return  # a configuration whose knobs cannot be read is simply not remembered
    if write_engine_record(*record, plan.engine, knobs):
        engine_stats["recorded"] += 1
