"""Batched matmul with a fused bias and activation, as one cuDNN graph.

``act(a @ b + bias)`` becomes a matmul operation whose result stays virtual, a
pointwise add and a pointwise activation: one engine runs the three. The activation
names and their pointwise modes are shared with the fused convolution.
"""

from __future__ import annotations

from . import engine_choice
from .graph import GraphSpec, NoEngineError
from .plans import DEFAULT_OPTIONS, PlanOptions

__all__ = ["matmul", "ACTIVATIONS"]


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
        raise NoEngineError(op, [(None, engine_choice._IEEE_MATMUL_REFUSAL)])
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
    plan = engine_choice.execute(h, spec, pointers, options)
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
