"""Execution plans of cuDNN graphs, and the options that choose their engine.

cuDNN's heuristics rank engine configurations for a finalized graph; one configuration
finalized on a handle is an *execution plan*, run with a *variant pack* (device
pointers by tensor id, and a workspace). `PlanOptions` says which engines may be chosen
and how (heuristics modes, autotuning, numerical notes); `Plan` is one finalized plan
and its cached variant pack. The choice itself: `cupric.cudnn.engine_choice`.
"""

from __future__ import annotations

import dataclasses
import threading

from .backend import Descriptor
from .graph import (_NOTE_DOWN_CONVERT_INPUTS, _NOTE_NONDETERMINISTIC,
                    _NOTE_REDUCED_PRECISION_REDUCTION, _NOTE_TENSOR_CORE, HEUR_MODES)

__all__ = ["PlanOptions", "DEFAULT_OPTIONS", "Plan"]


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """How an engine is chosen for a graph (validated at construction).

    Parameters
    ----------
    heuristics : tuple of {"a", "b", "fallback", "instant"}
        Heuristic modes asked in order until one proposes a configuration that
        finalizes. Mode A is cuDNN's fast default; "fallback" lists engines that support
        the most graphs, not the fastest.
    autotune : bool
        Time up to `candidates` configurations on the actual data once per shape and keep
        the fastest (as ``torch.backends.cudnn.benchmark``); otherwise take the first
        that finalizes. Each candidate is timed as the caller who waits for one call
        sees it: one execution between two events, after a warm-up, repeated until a run
        is no longer clearly faster than the best (the cuDNN frontend's "sample till
        stable", which PyTorch's benchmark mode uses); the best run counts.
    candidates : int
        Configurations timed when autotuning (PyTorch's ``benchmark_limit`` is 10).
    allow_tf32 : bool
        Let float32 convolutions use TF32 tensor cores (10-bit mantissa inputs, float32
        accumulation); PyTorch's default for convolutions too. A float32 matmul needs
        it: cuDNN's float32 matmul engines run at TF32 precision without saying so, and
        ``allow_tf32=False`` makes such a graph raise `NoEngineError` (see
        `ieee_matmul_refusal`).
    deterministic : bool
        Skip engines whose results may differ from run to run (atomics).
    allow_reduced_precision_reduction : bool
        Allow engines that reduce partial sums in half precision.
    allow_down_convert : bool
        Allow engines that first convert the inputs to a narrower type (cuDNN's
        ``DOWN_CONVERT_INPUTS`` note: float32 data computed in half precision, say).
        Off by default, as in PyTorch, which never runs them: results keep the precision
        the data types promise, and both libraries choose among the same engines.
    workspace_limit : int, optional
        Skip configurations needing more workspace bytes than this.
    """

    heuristics: tuple = ("a", "fallback")
    autotune: bool = False
    candidates: int = 10
    allow_tf32: bool = True
    deterministic: bool = False
    allow_reduced_precision_reduction: bool = True
    workspace_limit: int | None = None
    allow_down_convert: bool = False

    def __post_init__(self) -> None:
        modes = (self.heuristics,) if isinstance(self.heuristics, str) else \
            tuple(self.heuristics)
        object.__setattr__(self, "heuristics", modes)
        for mode in self.heuristics:
            if mode not in HEUR_MODES:
                raise ValueError(f"heuristics must name modes among {', '.join(HEUR_MODES)}, "
                                 f"got {mode!r}")
        if not self.heuristics:
            raise ValueError("heuristics must name at least one mode")
        if not isinstance(self.candidates, int) or self.candidates < 1:
            raise ValueError(f"candidates must be a positive int, got {self.candidates!r}")
        if self.workspace_limit is not None and (
                not isinstance(self.workspace_limit, int) or self.workspace_limit < 0):
            raise ValueError(f"workspace_limit must be a non-negative int or None, got "
                             f"{self.workspace_limit!r}")
        # Options are part of every plan-cache key: hash the fields once.
        object.__setattr__(self, "_hash", hash(dataclasses.astuple(self)))

    def __hash__(self) -> int:
        return self._hash

    def rejects(self, notes, data_types) -> str | None:
        """Why an engine with these numerical notes is excluded, or None."""
        if not self.allow_down_convert and _NOTE_DOWN_CONVERT_INPUTS in notes:
            return "converts its inputs to a narrower type (allow_down_convert=False)"
        if not self.allow_tf32 and "f32" in data_types and (
                _NOTE_TENSOR_CORE in notes or _NOTE_DOWN_CONVERT_INPUTS in notes):
            return "uses TF32 tensor cores (allow_tf32=False)"
        if self.deterministic and _NOTE_NONDETERMINISTIC in notes:
            return "non-deterministic (deterministic=True)"
        if not self.allow_reduced_precision_reduction and \
                _NOTE_REDUCED_PRECISION_REDUCTION in notes:
            return "reduced-precision reduction"
        return None


DEFAULT_OPTIONS = PlanOptions()


class Plan:
    """A finalized execution plan and what executing it needs.

    Attributes
    ----------
    workspace_size : int
        Bytes of workspace per execution.
    uids : tuple of int
        Ids of the in-memory tensors, in the order `execute` takes pointers.
    engine : int or None
        The engine's global index (for diagnostics).
    time_ms : float or None
        Measured time when the plan won an autotuning round.

    Thread safety
    -------------
    Executions from several threads on one stream are safe; the cached variant pack is
    swapped under a lock.
    """

    __slots__ = ("descriptor", "workspace_size", "uids", "engine", "time_ms", "_pack",
                 "_pack_key", "_lock", "_graph", "_config")

    def __init__(self, descriptor: Descriptor, uids, engine, graph=None):
        self.descriptor = descriptor
        self.workspace_size = descriptor.get_int64("EXECUTION_PLAN_WORKSPACE_SIZE")[0]
        self.uids = tuple(uids)
        self.engine = engine
        self.time_ms = None
        self._pack = None
        self._pack_key = None
        self._lock = threading.Lock()
        self._graph = graph  # the plan's graph descriptor stays alive with it
        self._config = None  # the heuristics' configuration, while it may be recorded

    def __repr__(self) -> str:
        return (f"<cupric.cudnn.plans.Plan engine={self.engine} "
                f"workspace={self.workspace_size}>")

    def json(self) -> str:
        """cuDNN's own description of the plan (engine, knobs)."""
        return self.descriptor.get_text("EXECUTION_PLAN_JSON_REPRESENTATION")

    def execute(self, handle, pointers, workspace: int | None = None) -> None:
        """Queue the plan on the handle's stream with device pointers in `uids` order.

        Safety
        ------
        The pointers must stay valid until the work completes; cuDNN checks nothing.

        Cost
        ----
        With the same pointers as the previous call: one ``cudnnBackendExecute``.
        Otherwise a variant pack is built first (five cuDNN calls, a few microseconds).
        """
        from . import lib
        raw = handle.ready()
        if workspace is None:
            workspace = handle.workspace(self.workspace_size)
        key = (tuple(pointers), workspace)
        with self._lock:
            if key != self._pack_key:
                pack = Descriptor.create("VARIANT_PACK")
                pack.set("VARIANT_PACK_UNIQUE_IDS", self.uids)
                pack.set("VARIANT_PACK_DATA_POINTERS", key[0])
                pack.set("VARIANT_PACK_WORKSPACE", workspace)
                pack.finalize()
                old, self._pack, self._pack_key = self._pack, pack, key
                if old is not None:
                    old.close()
            pack = self._pack
            status = lib.lib.cudnnBackendExecute(raw, self.descriptor.raw, pack.raw)
        if status:
            from .backend import check
            check(status, "cudnnBackendExecute")

    def close(self) -> None:
        """Destroy the plan (and its cached variant pack)."""
        with self._lock:
            pack, self._pack, self._pack_key = self._pack, None, None
        self._config = None
        if pack is not None:
            pack.close()
        self.descriptor.close()
        if self._graph is not None:
            self._graph.close()
            self._graph = None
