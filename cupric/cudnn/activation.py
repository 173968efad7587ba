"""Activation functions and their gradients: ReLU, sigmoid, tanh, ELU, swish, GELU.

An activation is applied elementwise, ``y = f(x)``; its backward pass gives
``dx = f'(x) * dy``. cuDNN's legacy ``cudnnActivationForward/Backward`` cover ReLU,
sigmoid, tanh, clipped ReLU, ELU and swish; GELU exists only as a pointwise operation of
the graph API, used here as a one-operation graph, with a cupric kernel as the fallback
when no cuDNN engine takes a standalone pointwise graph (see docs/cudnn.md).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from . import _replay
from . import _validate as V
from .descriptors import LegacyDescriptor, describe, legacy_dims, publish, scalars

__all__ = ["activation_forward", "activation_backward", "relu", "sigmoid", "tanh", "elu",
           "swish", "gelu", "largest_below", "LEGACY_MODES", "MODES"]

# cudnnActivationMode_t values (fixed by the C API; a CPU test compares them).
LEGACY_MODES = {"sigmoid": 0, "relu": 1, "tanh": 2, "clipped_relu": 3, "elu": 4,
                "identity": 5, "swish": 6}
# Modes served by the graph API (pointwise forward/backward mode names).
GRAPH_MODES = {"gelu": ("gelu_fwd", "gelu_bwd"),
               "gelu_tanh": ("gelu_approx_tanh_fwd", "gelu_approx_tanh_bwd")}
MODES = tuple(m for m in LEGACY_MODES if m != "identity") + tuple(GRAPH_MODES)
_PROPAGATE_NAN = 1  # cudnnNanPropagation_t: a NaN input gives NaN, as PyTorch does
_ANY_NDIM = (1, 2, 3, 4, 5, 6, 7, 8)


def _coef(mode: str, alpha: float | None, clip: float | None, op: str) -> float:
    if mode == "clipped_relu":
        if clip is None:
            raise ValueError(f"{op}: clipped_relu needs clip= (the upper bound)")
        if math.isnan(float(clip)):
            raise ValueError(f"{op}: clip must be a number, got {clip!r}")
        return float(clip)
    if mode == "elu":
        return 1.0 if alpha is None else float(alpha)
    return 0.0


def largest_below(value: float, etype: str) -> float:
    """The largest number of element type `etype` strictly below `value`.

    Every element of an `etype` tensor is such a number, so ``v <= largest_below(c)``
    holds exactly when ``v < c``; the result is exact in float32 (float64 for "f64"),
    whatever precision cuDNN compares in.

    Examples
    --------
    >>> largest_below(1.5, "f16")
    1.4990234375
    """
    value = float(value)
    if etype == "f64":
        return math.nextafter(value, -math.inf)
    # bfloat16 numbers are the float32 numbers whose low 16 bits are zero: find the
    # float32 answer first, then round it down onto bfloat16.
    dtype = np.float16 if etype == "f16" else np.float32
    with np.errstate(over="ignore"):
        v = dtype(value)
    if float(v) >= value:
        v = np.nextafter(v, dtype(-np.inf))
    if etype != "bf16":
        return float(v)
    bits = int(np.array(v, np.float32).view(np.uint32))
    high = bits >> 16
    if bits & 0xFFFF and bits >> 31:
        # Dropping the low bits of a negative number moves it up, toward zero: one
        # bfloat16 step further down (larger magnitude) is the floor.
        high += 1
    return float(np.array(high << 16, np.uint32).view(np.float32))


_descriptors: dict[tuple, LegacyDescriptor] = {}
_descriptors_lock = threading.Lock()


def _activation_descriptor(mode: str, coef: float, beta: float) -> LegacyDescriptor:
    key = (mode, coef, beta)
    d = _descriptors.get(key)
    if d is not None:
        return d
    from . import lib
    d = LegacyDescriptor.create("Activation")
    lib.check(lib.lib.cudnnSetActivationDescriptor(d.raw, LEGACY_MODES[mode],
                                                   _PROPAGATE_NAN, coef))
    if mode == "swish":
        lib.check(lib.lib.cudnnSetActivationDescriptorSwishBeta(d.raw, beta))
    return publish(_descriptors, _descriptors_lock, key, d)


def _check_mode(mode: str, op: str) -> None:
    if mode not in MODES:
        raise ValueError(f"{op}: mode must be one of {', '.join(MODES)}; got {mode!r}")


def _same_layout(a: V.Tensor, b: V.Tensor, names, op: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{op}: {names[1]} has shape {b.shape} but {names[0]} has "
                         f"{a.shape}")


def activation_forward(x, mode: str = "relu", *, out=None, alpha: float | None = None,
                       clip: float | None = None, beta: float = 1.0, handle=None,
                       stream=None):
    """``y = f(x)`` elementwise.

    Parameters
    ----------
    x : device array (1 to 8 dimensions; float32, float16, bfloat16 or float64)
    mode : {"relu", "sigmoid", "tanh", "elu", "swish", "clipped_relu", "gelu", "gelu_tanh"}
        "gelu" is the exact (erf) GELU; "gelu_tanh" its tanh approximation.
    out : device array, optional
        Same shape and element type as `x` (may be `x` itself: in place).
    alpha : float, optional
        ELU's alpha (default 1).
    clip : float, optional
        Upper bound of clipped ReLU: ``min(max(x, 0), clip)``, as PyTorch's
        ``hardtanh(x, 0, clip)`` (``relu6`` for clip = 6).
    beta : float
        Swish's beta: ``x * sigmoid(beta * x)`` (1 gives SiLU).
    handle : Handle, optional
        Defaults to the shared handle of `stream`.
    stream : stream-like, optional

    Returns
    -------
    The output array (`out`, or a new `DeviceBuffer` laid out as `x`).

    Raises
    ------
    TypeError, ValueError
        Naming the argument and the mismatch.

    Examples
    --------
    >>> y = cupric.cudnn.activation_forward(x, "gelu")               # doctest: +SKIP
    """
    head = ("act_fwd", mode, alpha, clip, beta)
    done = _replay.run(head, (x,), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = f"activation_forward({mode!r})"
    _check_mode(mode, op)
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tx = V.tensor(x, "x", op, stream=s, ndims=_ANY_NDIM, layouts=False)
    coef = _coef(mode, alpha, clip, op)
    ty = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    V.check_overlap(op, ("out", ty), ("x", tx), inplace=("x",))
    h = resolve(handle, stream)
    h.check_device(tx.buf, "x", op)
    call = _forward(h, tx, ty, mode, coef, float(beta), op)
    if call is not None:
        fn, template, extra = call
        _replay.remember_legacy(h, head, (x,), (out,), (tx, ty), "p8", fn, template,
                                inplace=(1,), **extra)
    return V.result(out, ty)


def _forward(h, tx: V.Tensor, ty: V.Tensor, mode: str, coef: float, beta: float, op: str):
    """Run y = f(x); returns (entry point, arguments, guards, keep) of the legacy call
    for `_replay`, or None (the graph or kernel modes)."""
    if mode in GRAPH_MODES:
        _gelu_forward(h, tx, ty, mode, op)
        return None
    from . import lib
    d = _activation_descriptor(mode, coef, beta)
    one, zero = scalars(tx.etype)
    xd, yd = describe(tx), describe(ty)
    fn = lib.lib.cudnnActivationForward
    lib.check(fn(h.ready(), d.raw, one, xd.raw, _ptr(tx), zero, yd.raw, _ptr(ty)))
    A = _replay.address
    return (fn, (h.ptr, d._ptr, A(one), xd._ptr, ("t", 0), A(zero), yd._ptr, ("t", 1)),
            {"guards": (d, xd, yd), "keep": (one, zero)})


def activation_backward(dy, x, y=None, mode: str = "relu", *, out=None,
                        alpha: float | None = None, clip: float | None = None,
                        beta: float = 1.0, handle=None, stream=None):
    """``dx = f'(x) * dy``.

    At the kinks of ReLU and clipped ReLU the derivative taken is 0 (no gradient where
    ``x <= 0`` or ``x >= clip``), as PyTorch and TensorFlow take it; cuDNN alone would
    pass the gradient at ``x == clip``, so cupric narrows the bound it hands cuDNN (see
    `largest_below`).

    Parameters
    ----------
    dy : device array
        Gradient of the output.
    x : device array
        The forward input.
    y : device array, optional
        The forward output (computed again when None; cuDNN's legacy routines read it).
    mode, alpha, clip, beta, handle, stream
        As in `activation_forward`.
    out : device array, optional
        Receives dx.

    Returns
    -------
    dx
    """
    head = ("act_bwd", mode, alpha, clip, beta)
    done = _replay.run(head, (dy, x, y), (out,), handle, stream)
    if done is not None:
        return done[0]
    op = f"activation_backward({mode!r})"
    _check_mode(mode, op)
    from .handle import resolve, stream_of
    s = stream_of(handle, stream)
    tdy = V.tensor(dy, "dy", op, stream=s, ndims=_ANY_NDIM, layouts=False)
    tx = V.tensor(x, "x", op, stream=s, ndims=_ANY_NDIM, layouts=False)
    _same_layout(tdy, tx, ("dy", "x"), op)
    V.same_type(op, ("dy", tdy), ("x", tx))
    coef = _coef(mode, alpha, clip, op)
    tdx = V.output(out, tx.shape, tx.etype, tx.layout, "out", op, s, ndims=(tx.ndim,))
    # dx may take dy's place (the gradient is consumed elementwise).
    V.check_overlap(op, ("out", tdx), ("dy", tdy), ("x", tx), inplace=("dy",))
    h = resolve(handle, stream)
    if mode in GRAPH_MODES:
        _gelu_backward(h, tx, tdy, tdx, mode, op)
        return V.result(out, tdx)
    if y is None:
        ty = V.output(None, tx.shape, tx.etype, tx.layout, "y", op, s, ndims=(tx.ndim,))
        _forward(h, tx, ty, mode, coef, float(beta), op)
    else:
        ty = V.tensor(y, "y", op, stream=s, ndims=_ANY_NDIM, layouts=False)
        _same_layout(tx, ty, ("x", "y"), op)
        V.same_type(op, ("x", tx), ("y", ty))
        V.check_overlap(op, ("out", tdx), ("y", ty))
    if mode == "clipped_relu":
        # cuDNN passes the gradient where x == clip (0 < x <= clip); PyTorch's hardtanh
        # and relu6 and TensorFlow's relu6 give 0 there (0 < x < clip), and so does
        # cupric. Lowering the bound to the largest element below clip makes cuDNN's
        # test "<= bound" the same as "< clip" for every element of the tensor, whether
        # cuDNN compares x or y (y == clip exactly where x >= clip).
        coef = largest_below(coef, tx.etype)
    from . import lib
    d = _activation_descriptor(mode, coef, float(beta))
    one, zero = scalars(tx.etype)
    yd, dyd, xd, dxd = describe(ty), describe(tdy), describe(tx), describe(tdx)
    fn = lib.lib.cudnnActivationBackward
    lib.check(fn(h.ready(), d.raw, one, yd.raw, _ptr(ty), dyd.raw, _ptr(tdy), xd.raw,
                 _ptr(tx), zero, dxd.raw, _ptr(tdx)))
    if y is not None:
        A = _replay.address
        _replay.remember_legacy(
            h, head, (dy, x, y), (out,), (tdy, tx, ty, tdx), "p12", fn,
            (h.ptr, d._ptr, A(one), yd._ptr, ("t", 2), dyd._ptr, ("t", 0), xd._ptr,
             ("t", 1), A(zero), dxd._ptr, ("t", 3)),
            guards=(d, yd, dyd, xd, dxd), keep=(one, zero), inplace=(1,))
    return V.result(out, tdx)


def _ptr(t: V.Tensor):
    from . import lib
    return lib.ffi.cast("void *", t.ptr)


# --------------------------------------------------------------------------------------
# GELU through the graph API, with a kernel fallback


# Graph keys that no engine accepted: asked once per shape, then the fallback runs.
_unsupported: set = set()


def _gelu_spec(mode_name: str, tensors, roles, op: str):
    from .graph import GraphSpec
    spec = GraphSpec(op)
    uids = {}
    for role, t in zip(roles, tensors):
        dims, strides = legacy_dims(t.shape, t.strides)
        uids[role] = spec.tensor(dims, strides, t.etype, alignment=V.alignment_of(t.ptr))
    compute = "f64" if tensors[0].etype == "f64" else "f32"
    spec.pointwise(mode_name, compute=compute, **uids)
    return spec, {uids[r]: t.ptr for r, t in zip(roles, tensors)}


def _run_graph(h, spec, pointers) -> bool:
    from .engine_choice import execute
    from .graph import NoEngineError
    key = spec.key()
    if key in _unsupported:
        return False
    try:
        execute(h, spec, pointers)
    except NoEngineError:
        _unsupported.add(key)
        return False
    return True


def _gelu_forward(h, tx, ty, mode, op) -> None:
    spec, pointers = _gelu_spec(GRAPH_MODES[mode][0], (tx, ty), ("x", "y"), op)
    if not _run_graph(h, spec, pointers):
        _gelu_kernel(h, mode, op, ty, tx)


def _gelu_backward(h, tx, tdy, tdx, mode, op) -> None:
    spec, pointers = _gelu_spec(GRAPH_MODES[mode][1], (tx, tdy, tdx), ("x", "dy", "dx"), op)
    if not _run_graph(h, spec, pointers):
        _gelu_kernel(h, mode, op, tdx, tx, tdy)


def _physical(t: V.Tensor):
    """A 1-d view of a dense tensor's memory in storage order, or None."""
    order = sorted(range(t.ndim), key=lambda a: -t.strides[a])
    view = t.buf.transpose(*order) if t.ndim > 1 else t.buf
    if not view.is_c_contiguous:
        return None, order
    return view.reshape(view.size), order


_device_functions: dict = {}


def _gelu_functions():
    """Device functions of GELU and its derivative (exact and tanh forms), computed in
    float32 (float64 for float64 data)."""
    if _device_functions:
        return _device_functions
    from cupric.compiler.kernel import device_function
    from cupric.types import f32, f64

    def gelu32(x):
        v = f32(x)
        return f32(0.5) * v * (f32(1.0) + math.erf(v * f32(0.7071067811865476)))

    def gelu_grad32(x, dy):
        v = f32(x)
        cdf = f32(0.5) * (f32(1.0) + math.erf(v * f32(0.7071067811865476)))
        pdf = f32(0.3989422804014327) * math.exp(f32(-0.5) * v * v)
        return f32(dy) * (cdf + v * pdf)

    def gelu_tanh32(x):
        v = f32(x)
        u = f32(0.7978845608028654) * (v + f32(0.044715) * v * v * v)
        return f32(0.5) * v * (f32(1.0) + math.tanh(u))

    def gelu_tanh_grad32(x, dy):
        v = f32(x)
        u = f32(0.7978845608028654) * (v + f32(0.044715) * v * v * v)
        t = math.tanh(u)
        du = f32(0.7978845608028654) * (f32(1.0) + f32(0.134145) * v * v)
        return f32(dy) * (f32(0.5) * (f32(1.0) + t) + f32(0.5) * v * (f32(1.0) - t * t) * du)

    def gelu64(x):
        v = f64(x)
        return 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))

    def gelu_grad64(x, dy):
        v = f64(x)
        cdf = 0.5 * (1.0 + math.erf(v * 0.7071067811865476))
        pdf = 0.3989422804014327 * math.exp(-0.5 * v * v)
        return f64(dy) * (cdf + v * pdf)

    def gelu_tanh64(x):
        v = f64(x)
        u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
        return 0.5 * v * (1.0 + math.tanh(u))

    def gelu_tanh_grad64(x, dy):
        v = f64(x)
        u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
        t = math.tanh(u)
        du = 0.7978845608028654 * (1.0 + 0.134145 * v * v)
        return f64(dy) * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du)

    table = {
        ("gelu", False, 32): gelu32, ("gelu", True, 32): gelu_grad32,
        ("gelu_tanh", False, 32): gelu_tanh32, ("gelu_tanh", True, 32): gelu_tanh_grad32,
        ("gelu", False, 64): gelu64, ("gelu", True, 64): gelu_grad64,
        ("gelu_tanh", False, 64): gelu_tanh64, ("gelu_tanh", True, 64): gelu_tanh_grad64,
    }
    compiled = {key: device_function(fn) for key, fn in table.items()}
    # bfloat16 data travels as its 16-bit patterns: widen to f32, compute, round back.
    from cupric.device import half

    def bits_forward(fn32):
        def on_bits(x):
            return half.bf16_bits(fn32(half.bf16_from_bits(x)))
        return device_function(on_bits)

    def bits_backward(fn32):
        def on_bits(x, dy):
            return half.bf16_bits(fn32(half.bf16_from_bits(x), half.bf16_from_bits(dy)))
        return device_function(on_bits)

    for mode in ("gelu", "gelu_tanh"):
        compiled[(mode, False, 16)] = bits_forward(compiled[(mode, False, 32)])
        compiled[(mode, True, 16)] = bits_backward(compiled[(mode, True, 32)])
    _device_functions.update(compiled)
    return _device_functions


def _gelu_kernel(h, mode: str, op: str, out: V.Tensor, x: V.Tensor, dy: V.Tensor | None = None):
    """GELU (or its gradient when `dy` is given) with a cupric elementwise kernel."""
    arrays = [x] + ([dy] if dy is not None else [])
    flat_out, order = _physical(out)
    flats = []
    for t in arrays:
        flat, t_order = _physical(t)
        if flat is None or t_order != order:
            flat = None
        flats.append(flat)
    if flat_out is None or any(f is None for f in flats):
        raise ValueError(f"{op}: the fallback kernel needs x, dy and the output dense and "
                         f"in one layout")
    from cupric.kernels.elementwise import map as elementwise_map
    width = {"f64": 64, "bf16": 16}.get(x.etype, 32)
    if width == 16:
        flats = [f.view(np.uint16) for f in flats]
        flat_out = flat_out.view(np.uint16)
    fn = _gelu_functions()[(mode, dy is not None, width)]
    elementwise_map(fn, *flats, out=flat_out, stream=h.stream)


# --------------------------------------------------------------------------------------
# Shorthands


def relu(x, *, out=None, handle=None, stream=None):
    """``max(x, 0)`` (see `activation_forward`)."""
    return activation_forward(x, "relu", out=out, handle=handle, stream=stream)


def sigmoid(x, *, out=None, handle=None, stream=None):
    """``1 / (1 + exp(-x))`` (see `activation_forward`)."""
    return activation_forward(x, "sigmoid", out=out, handle=handle, stream=stream)


def tanh(x, *, out=None, handle=None, stream=None):
    """Hyperbolic tangent (see `activation_forward`)."""
    return activation_forward(x, "tanh", out=out, handle=handle, stream=stream)


def elu(x, alpha: float = 1.0, *, out=None, handle=None, stream=None):
    """``x if x > 0 else alpha * (exp(x) - 1)`` (see `activation_forward`)."""
    return activation_forward(x, "elu", alpha=alpha, out=out, handle=handle, stream=stream)


def swish(x, beta: float = 1.0, *, out=None, handle=None, stream=None):
    """``x * sigmoid(beta * x)``; SiLU for beta = 1 (see `activation_forward`)."""
    return activation_forward(x, "swish", beta=beta, out=out, handle=handle, stream=stream)


def gelu(x, approximate: str = "none", *, out=None, handle=None, stream=None):
    """GELU: ``x * Phi(x)`` (``approximate="tanh"`` for the tanh form), as PyTorch's
    ``torch.nn.functional.gelu``."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    mode = "gelu" if approximate == "none" else "gelu_tanh"
    return activation_forward(x, mode, out=out, handle=handle, stream=stream)
