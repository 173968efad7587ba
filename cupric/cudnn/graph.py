"""Operation graphs of the cuDNN graph API: what a graph is, as plain data.

A graph describes work as operations (convolution forward/backward, matmul, pointwise)
on tensors named by unique ids; tensors passed between operations are *virtual* (never
in memory, which is what makes fusion possible). A `GraphSpec` is pure Python (tested on
the CPU); `GraphSpec.build` turns it into cuDNN's finalized operation graph. Choosing an
engine for it and running it: `cupric.cudnn.engine_choice`; the execution plans and the
options of that choice: `cupric.cudnn.plans`.
"""

from __future__ import annotations

import dataclasses

from .backend import Descriptor, double

__all__ = ["GraphSpec", "TensorSpec", "ConvParams", "OpSpec", "GraphKey", "HEUR_MODES",
           "POINTWISE_MODES", "NoEngineError"]

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
