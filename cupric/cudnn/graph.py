"""Operation graphs of the cuDNN graph API: build, pick an engine, cache the plan, run.

A graph describes work as operations (convolution forward/backward, matmul, pointwise)
on tensors named by unique ids; tensors passed between operations are *virtual* (never
in memory, which is what makes fusion possible). cuDNN's heuristics rank engine
configurations for a finalized graph; the first that finalizes into an *execution plan*
- or the fastest when autotuning - is kept per (graph, shapes, strides, alignment) on
the handle and executed with a *variant pack* (device pointers by id, workspace).

Building a `GraphSpec` is pure Python (tested on the CPU); `GraphSpec.build` and
everything after need a GPU.
"""

from __future__ import annotations

import dataclasses
import math
import threading

from .backend import Descriptor, double

__all__ = ["GraphSpec", "PlanOptions", "Plan", "plan_for", "execute", "matmul",
           "HEUR_MODES", "POINTWISE_MODES", "NoEngineError"]

# cudnnBackendHeurMode_t values.
HEUR_MODES = {"instant": 0, "b": 1, "fallback": 2, "a": 3}
# cudnnPointwiseMode_t values of the modes cupric builds (fixed by the C API; a CPU test
# compares them with the headers).
POINTWISE_MODES = {
    "add": 0, "mul": 1, "min": 2, "max": 3, "sqrt": 4, "identity": 21,
    "relu_fwd": 100, "tanh_fwd": 101, "sigmoid_fwd": 102, "elu_fwd": 103,
    "gelu_fwd": 104, "softplus_fwd": 105, "swish_fwd": 106, "gelu_approx_tanh_fwd": 107,
    "relu_bwd": 200, "tanh_bwd": 201, "sigmoid_bwd": 202, "elu_bwd": 203,
    "gelu_bwd": 204, "softplus_bwd": 205, "swish_bwd": 206, "gelu_approx_tanh_bwd": 207,
}
# cudnnBackendNumericalNote_t values used to filter engines.
_NOTE_TENSOR_CORE = 0
_NOTE_DOWN_CONVERT_INPUTS = 1
_NOTE_REDUCED_PRECISION_REDUCTION = 2
_NOTE_NONDETERMINISTIC = 4
_CROSS_CORRELATION = 1  # cudnnConvolutionMode_t: what deep-learning frameworks call conv


def _not_supported(exc) -> bool:
    # CUDNN_STATUS_NOT_SUPPORTED and its refinements (3000-3999).
    return 3000 <= exc.code < 4000


def _engine_refused(exc) -> bool:
    # What finalizing one engine's plan may answer for a graph it cannot run: a bad
    # parameter for that engine (2xxx), not supported (3xxx), an internal failure such
    # as a runtime compilation that failed (4xxx), or the sub-library holding that
    # engine family failing to load (1008, e.g. without NVRTC). Another engine may
    # still work; NoEngineError lists every answer when none does.
    return 2000 <= exc.code < 5000 or exc.code == 1008


class NoEngineError(RuntimeError):
    """No cuDNN engine can run a graph with these shapes, types, layouts and options.

    Raised after every configuration the heuristics proposed failed to finalize; `.tried`
    lists (engine index or None, reason) pairs.
    """

    def __init__(self, what: str, tried: list):
        self.tried = tried
        reasons = "; ".join(f"engine {i}: {r}" for i, r in tried[:4]) or \
            "the heuristics proposed none"
        super().__init__(f"{what}: no cuDNN engine supports this graph ({reasons})")


# --------------------------------------------------------------------------------------
# Graph specifications (pure Python)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor of a graph: dims and strides in elements, element type, unique id."""

    uid: int
    dims: tuple
    strides: tuple
    etype: str
    virtual: bool = False
    alignment: int = 16


@dataclasses.dataclass(frozen=True)
class ConvParams:
    """Geometry of a convolution: per spatial axis pre/post padding, stride, dilation,
    and the compute (accumulation) type."""

    pre_padding: tuple
    post_padding: tuple
    stride: tuple
    dilation: tuple
    compute: str = "f32"

    @property
    def spatial_dims(self) -> int:
        return len(self.stride)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One operation: its kind, the tensors it reads/writes by role, and parameters."""

    kind: str            # "conv_fwd", "conv_bwd_data", "conv_bwd_filter", "matmul", "pointwise"
    tensors: tuple       # ((role, uid), ...)
    params: tuple = ()   # hashable parameters ((name, value), ...)

    def tensor(self, role: str) -> int:
        for r, uid in self.tensors:
            if r == role:
                return uid
        raise KeyError(role)

    def param(self, name: str, default=None):
        for n, v in self.params:
            if n == name:
                return v
        return default


# Per operation kind: (descriptor kind, attribute prefix, {role: attribute suffix}).
_OP_LAYOUT = {
    "conv_fwd": ("OPERATION_CONVOLUTION_FORWARD", "OPERATION_CONVOLUTION_FORWARD_",
                 {"x": "X", "w": "W", "y": "Y"}),
    "conv_bwd_data": ("OPERATION_CONVOLUTION_BACKWARD_DATA",
                      "OPERATION_CONVOLUTION_BWD_DATA_", {"dx": "DX", "w": "W", "dy": "DY"}),
    "conv_bwd_filter": ("OPERATION_CONVOLUTION_BACKWARD_FILTER",
                        "OPERATION_CONVOLUTION_BWD_FILTER_",
                        {"x": "X", "dw": "DW", "dy": "DY"}),
    "matmul": ("OPERATION_MATMUL", "OPERATION_MATMUL_", {"a": "ADESC", "b": "BDESC",
                                                         "c": "CDESC"}),
    "pointwise": ("OPERATION_POINTWISE", "OPERATION_POINTWISE_",
                  {"x": "XDESC", "b": "BDESC", "y": "YDESC", "dx": "DXDESC",
                   "dy": "DYDESC"}),
}


class GraphKey:
    """A graph's description as a dictionary key whose hash is computed once."""

    __slots__ = ("value", "_hash")

    def __init__(self, value: tuple):
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, GraphKey) and self._hash == other._hash
                                 and self.value == other.value)

    def __repr__(self) -> str:
        return f"GraphKey({self.value[0]!r}, {len(self.value[1])} tensors, " \
               f"{len(self.value[2])} ops)"


class GraphSpec:
    """A graph under construction: tensors and operations, with a hashable `key()`.

    Examples
    --------
    >>> g = GraphSpec("conv2d")
    >>> x = g.tensor((8, 64, 56, 56), (200704, 3136, 56, 1), "f32")
    >>> w = g.tensor((64, 64, 3, 3), (576, 9, 3, 1), "f32")
    >>> y = g.tensor((8, 64, 56, 56), (200704, 3136, 56, 1), "f32")
    >>> g.conv_fwd(x, w, y, ConvParams((1, 1), (1, 1), (1, 1), (1, 1)))
    >>> len(g.key()) > 0
    True
    """

    def __init__(self, name: str):
        self.name = name
        self.tensors: dict[int, TensorSpec] = {}
        self.ops: list[OpSpec] = []
        self._next_uid = 1
        self._key = None

    # -- tensors -----------------------------------------------------------------------

    def tensor(self, dims, strides, etype: str, *, virtual: bool = False,
               alignment: int = 16) -> int:
        """Add a tensor; returns its unique id."""
        dims = tuple(int(d) for d in dims)
        strides = tuple(int(s) for s in strides)
        if len(dims) != len(strides):
            raise ValueError(f"{self.name}: a tensor has {len(dims)} dims but "
                             f"{len(strides)} strides")
        if any(d <= 0 for d in dims):
            raise ValueError(f"{self.name}: tensor dims {dims} must all be positive")
        from ._validate import DATA_TYPES
        if etype not in DATA_TYPES:
            raise ValueError(f"{self.name}: unknown element type {etype!r}")
        uid = self._next_uid
        self._next_uid += 1
        self._key = None
        self.tensors[uid] = TensorSpec(uid, dims, strides, etype, virtual, int(alignment))
        return uid

    def virtual_like(self, uid: int, etype: str = "f32") -> int:
        """A virtual tensor with the dims and strides of `uid` (an intermediate)."""
        t = self.tensors[uid]
        return self.tensor(t.dims, t.strides, etype, virtual=True)

    def _real(self, *uids: int) -> None:
        for uid in uids:
            if uid not in self.tensors:
                raise KeyError(f"{self.name}: no tensor with uid {uid}")

    # -- operations ----------------------------------------------------------------------

    def _check_conv(self, x: int, w: int, y: int, conv: ConvParams, roles) -> None:
        self._real(x, w, y)
        nd = conv.spatial_dims
        for uid, role in zip((x, w, y), roles):
            if len(self.tensors[uid].dims) != nd + 2:
                raise ValueError(f"{self.name}: {role} has {len(self.tensors[uid].dims)} "
                                 f"dims but the convolution has {nd} spatial dims")

    def conv_fwd(self, x: int, w: int, y: int, conv: ConvParams) -> None:
        """y = conv(x, w) (cross-correlation, as deep-learning frameworks define it)."""
        self._check_conv(x, w, y, conv, ("x", "w", "y"))
        self._key = None
        self.ops.append(OpSpec("conv_fwd", (("x", x), ("w", w), ("y", y)),
                               (("conv", conv),)))

    def conv_bwd_data(self, dy: int, w: int, dx: int, conv: ConvParams) -> None:
        """dx = gradient of conv_fwd with respect to its input."""
        self._check_conv(dx, w, dy, conv, ("dx", "w", "dy"))
        self._key = None
        self.ops.append(OpSpec("conv_bwd_data", (("dx", dx), ("w", w), ("dy", dy)),
                               (("conv", conv),)))

    def conv_bwd_filter(self, x: int, dy: int, dw: int, conv: ConvParams) -> None:
        """dw = gradient of conv_fwd with respect to its filter."""
        self._check_conv(x, dw, dy, conv, ("x", "dw", "dy"))
        self._key = None
        self.ops.append(OpSpec("conv_bwd_filter", (("x", x), ("dw", dw), ("dy", dy)),
                               (("conv", conv),)))

    def matmul(self, a: int, b: int, c: int, compute: str = "f32") -> None:
        """c[batch] = a[batch] @ b[batch] on 3-d tensors (batch, rows, cols)."""
        self._real(a, b, c)
        da, db, dc = (self.tensors[u].dims for u in (a, b, c))
        if not (len(da) == len(db) == len(dc) == 3):
            raise ValueError(f"{self.name}: matmul takes 3-d tensors, got {da}, {db}, {dc}")
        if da[2] != db[1] or dc[1] != da[1] or dc[2] != db[2]:
            raise ValueError(f"{self.name}: matmul shapes {da} @ {db} -> {dc} do not fit")
        self._key = None
        self.ops.append(OpSpec("matmul", (("a", a), ("b", b), ("c", c)),
                               (("compute", compute),)))

    def pointwise(self, mode: str, *, x: int, y: int | None = None, b: int | None = None,
                  dy: int | None = None, dx: int | None = None, compute: str = "f32",
                  **params) -> None:
        """A pointwise operation: ``y = mode(x[, b])`` (forward modes, arithmetic) or
        ``dx = mode(x, dy)`` (the activation backward modes)."""
        if mode not in POINTWISE_MODES:
            raise ValueError(f"{self.name}: unknown pointwise mode {mode!r}")
        roles = [("x", x)]
        if mode.endswith("_bwd"):
            if dy is None or dx is None or y is not None:
                raise ValueError(f"{self.name}: pointwise {mode} takes x, dy and dx")
            roles += [("dy", dy), ("dx", dx)]
        else:
            if y is None or dx is not None or dy is not None:
                raise ValueError(f"{self.name}: pointwise {mode} takes x (and b) and y")
            if b is not None:
                roles.append(("b", b))
            roles.append(("y", y))
        self._real(*(uid for _, uid in roles))
        self._key = None
        self.ops.append(OpSpec("pointwise", tuple(roles),
                               (("mode", mode), ("compute", compute))
                               + tuple(sorted(params.items()))))

    # -- identity --------------------------------------------------------------------------

    def io_uids(self) -> tuple[int, ...]:
        """The ids of tensors that live in memory (the variant pack's entries)."""
        return tuple(uid for uid, t in self.tensors.items() if not t.virtual)

    def key(self) -> "GraphKey":
        """Everything a plan depends on, hashable: plans are cached under it.

        Computed once per state of the spec; a spec reused for every call of one shape
        then costs one identity comparison per plan-cache lookup.
        """
        key = self._key
        if key is None:
            key = self._key = GraphKey((self.name, tuple(self.tensors.values()),
                                        tuple(self.ops)))
        return key

    # -- descriptors -----------------------------------------------------------------------

    def build_descriptors(self, finalize: bool = True):
        """Create the tensor and operation descriptors with every attribute set.

        With ``finalize=False`` nothing is finalized: that much runs without a GPU and
        checks every attribute name, type and value against the installed cuDNN.

        Returns
        -------
        (dict uid -> Descriptor, list of Descriptor)
        """
        tensors = {}
        for uid, t in self.tensors.items():
            d = Descriptor.create("TENSOR")
            d.set("TENSOR_DATA_TYPE", t.etype)
            d.set("TENSOR_DIMENSIONS", t.dims)
            d.set("TENSOR_STRIDES", t.strides)
            d.set("TENSOR_UNIQUE_ID", uid)
            d.set("TENSOR_BYTE_ALIGNMENT", t.alignment)
            d.set("TENSOR_IS_VIRTUAL", t.virtual)
            if finalize:
                d.finalize()
            tensors[uid] = d
        ops = [self._op_descriptor(op, tensors, finalize) for op in self.ops]
        return tensors, ops

    def _op_descriptor(self, op: OpSpec, tensors: dict, finalize: bool) -> Descriptor:
        kind, prefix, roles = _OP_LAYOUT[op.kind]
        d = Descriptor.create(kind)
        if op.kind.startswith("conv"):
            conv: ConvParams = op.param("conv")
            cd = Descriptor.create("CONVOLUTION")
            cd.set("CONVOLUTION_COMP_TYPE", conv.compute)
            cd.set("CONVOLUTION_CONV_MODE", _CROSS_CORRELATION)
            cd.set("CONVOLUTION_SPATIAL_DIMS", conv.spatial_dims)
            cd.set("CONVOLUTION_DILATIONS", conv.dilation)
            cd.set("CONVOLUTION_FILTER_STRIDES", conv.stride)
            cd.set("CONVOLUTION_PRE_PADDINGS", conv.pre_padding)
            cd.set("CONVOLUTION_POST_PADDINGS", conv.post_padding)
            if finalize:
                cd.finalize()
            scale = double if conv.compute == "f64" else float
            d.set(prefix + "ALPHA", scale(1.0))
            d.set(prefix + "BETA", scale(0.0))
            d.set(prefix + "CONV_DESC", cd)
        elif op.kind == "matmul":
            md = Descriptor.create("MATMUL")
            md.set("MATMUL_COMP_TYPE", op.param("compute"))
            if finalize:
                md.finalize()
            d.set(prefix + "DESC", md)
        else:
            pd = Descriptor.create("POINTWISE")
            pd.set("POINTWISE_MODE", POINTWISE_MODES[op.param("mode")])
            pd.set("POINTWISE_MATH_PREC", op.param("compute"))
            for name, value in op.params:
                if name not in ("mode", "compute"):
                    pd.set(f"POINTWISE_{name.upper()}", value)
            if finalize:
                pd.finalize()
            d.set(prefix + "PW_DESCRIPTOR", pd)
        for role, uid in op.tensors:
            d.set(prefix + roles[role], tensors[uid])
        if finalize:
            d.finalize()
        return d

    def build(self, handle) -> Descriptor:
        """The finalized operation graph on a handle (needs a GPU)."""
        _tensors, ops = self.build_descriptors(finalize=True)
        g = Descriptor.create("OPERATIONGRAPH")
        g.set("OPERATIONGRAPH_HANDLE", handle.ptr)
        g.set("OPERATIONGRAPH_OPS", ops)
        g.finalize()
        return g


# --------------------------------------------------------------------------------------
# Engine choice


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
        return (f"<cupric.cudnn.graph.Plan engine={self.engine} "
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
    engine_stats["heuristics"] += 1
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
#: run that is not `_STABLE` times the best so far (5 % faster) ends the sampling.
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


# --------------------------------------------------------------------------------------
# Engine choices remembered on disk
#
# The heuristics query (and an autotuning round) costs each process milliseconds per
# graph and shape. The configuration that won - engine global index and knob choices,
# from which cuDNN rebuilds the same configuration - is recorded per (graph, options,
# device, cuDNN version) in ``<cache root>/cudnn-engines`` as a checked blob
# (`cupric._cache`: ours, private, SHA-256 matching); the next process finalizes that
# configuration first and asks the heuristics only when it is refused or unreadable.

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
            engine_stats["reused"] += 1
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
                engine_stats["recorded"] += 1
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


# --------------------------------------------------------------------------------------
# Matmul with a fused epilogue (built directly on a graph)


def matmul(a, b, *, bias=None, activation: str | None = None, out=None, handle=None,
           stream=None, options: PlanOptions | None = None):
    """Batched matrix product with an optional fused bias and activation (graph API).

    ``out[i] = act(a[i] @ b[i] + bias)`` over 3-d tensors (batch, rows, cols); 2-d
    operands are taken as one batch.

    Parameters
    ----------
    a : device array (B, M, K) or (M, K)
    b : device array (B, K, N) or (K, N)
    bias : device array (N,), optional
        Added to every row.
    activation : {None, "relu", "sigmoid", "tanh", "gelu", "gelu_tanh", "swish"}
    out : device array (B, M, N), optional
    handle, stream, options
        As for `cupric.cudnn.conv2d`.

    Raises
    ------
    TypeError, ValueError
        For mismatched element types or shapes, naming the operand.
    NoEngineError
        When no engine fuses this combination of types and shapes; and for float32
        operands with ``options.allow_tf32`` False, before any cuDNN call (cuDNN's
        float32 matmul engines run at TF32 precision, see `ieee_matmul_refusal`).
    """
    from . import _replay
    from . import _validate as V
    from .handle import resolve, stream_of
    head = ("matmul", activation, options)
    done = _replay.run(head, (a, b, bias), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = "matmul"
    s = stream_of(handle, stream)
    ta = V.tensor(a, "a", op, stream=s, ndims=(2, 3), layouts=False)
    tb = V.tensor(b, "b", op, stream=s, ndims=(2, 3), layouts=False)
    etype = V.same_type(op, ("a", ta), ("b", tb))
    if etype == "f32" and not (options or DEFAULT_OPTIONS).allow_tf32:
        # Refused before anything is allocated or built (see ieee_matmul_refusal).
        raise NoEngineError(op, [(None, _IEEE_MATMUL_REFUSAL)])
    if ta.ndim != tb.ndim:
        raise ValueError(f"{op}: a has {ta.ndim} dimensions but b has {tb.ndim}")
    a_dims, a_strides = _as_batched(ta)
    b_dims, b_strides = _as_batched(tb)
    if a_dims[0] != b_dims[0]:
        raise ValueError(f"{op}: batch sizes differ: a {a_dims[0]}, b {b_dims[0]}")
    if a_dims[2] != b_dims[1]:
        raise ValueError(f"{op}: inner dimensions differ: a is {ta.shape}, b is {tb.shape}")
    c_shape = (a_dims[0], a_dims[1], b_dims[2])
    shape = c_shape if ta.ndim == 3 else c_shape[1:]
    act = _activation_mode(activation, op)
    tbias = None
    if bias is not None:
        tbias = V.tensor(bias, "bias", op, stream=s, ndims=(1,), layouts=False)
        V.expect(tbias, (c_shape[2],), etype, "bias", op)
    tc = V.output(out, shape, etype, None, "out", op, s, ndims=(ta.ndim,))
    V.check_overlap(op, ("out", tc), ("a", ta), ("b", tb), ("bias", tbias))
    c_dims, c_strides = _as_batched(tc)
    spec = GraphSpec(op)
    ua = spec.tensor(a_dims, a_strides, etype, alignment=V.alignment_of(ta.ptr))
    ub = spec.tensor(b_dims, b_strides, etype, alignment=V.alignment_of(tb.ptr))
    uc = spec.tensor(c_dims, c_strides, etype, alignment=V.alignment_of(tc.ptr))
    pointers = {ua: ta.ptr, ub: tb.ptr, uc: tc.ptr}
    compute = "f64" if etype == "f64" else "f32"
    if bias is None and act is None:
        spec.matmul(ua, ub, uc, compute)
    else:
        tmp = spec.virtual_like(uc, compute)
        spec.matmul(ua, ub, tmp, compute)
        if tbias is not None:
            ubias = spec.tensor((1, 1, c_dims[2]), (c_dims[2], c_dims[2], tbias.strides[0]),
                                etype, alignment=V.alignment_of(tbias.ptr))
            pointers[ubias] = tbias.ptr
            nxt = spec.virtual_like(uc, compute) if act is not None else uc
            spec.pointwise("add", x=tmp, b=ubias, y=nxt, compute=compute)
            tmp = nxt
        if act is not None:
            spec.pointwise(act, x=tmp, y=uc, compute=compute)
    h = resolve(handle, stream)
    plan = execute(h, spec, pointers, options)
    slots = {ua: 0, ub: 1, uc: 3}
    if tbias is not None:
        slots[ubias] = 2
    _replay.remember_graph(h, head, (a, b, bias), (out,), (ta, tb, tbias, tc), plan, slots)
    return V.result(out, tc)


def _as_batched(t):
    if t.ndim == 3:
        return t.shape, t.strides
    rows, cols = t.shape
    # The batch stride of a single batch is never stepped over: past the data.
    return (1,) + t.shape, (max(rows * t.strides[0], cols * t.strides[1], 1),) + t.strides


# Activation names of the public API -> forward pointwise mode.
ACTIVATIONS = {"relu": "relu_fwd", "sigmoid": "sigmoid_fwd", "tanh": "tanh_fwd",
               "gelu": "gelu_fwd", "gelu_tanh": "gelu_approx_tanh_fwd",
               "swish": "swish_fwd", "elu": "elu_fwd"}


def _activation_mode(activation, op: str) -> str | None:
    if activation is None or activation == "identity":
        return None
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        raise ValueError(f"{op}: activation must be one of None, "
                         f"{', '.join(ACTIVATIONS)}; got {activation!r}") from None
