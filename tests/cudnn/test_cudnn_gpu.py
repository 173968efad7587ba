"""cupric.cudnn on the GPU lane: every operation against PyTorch (forward and gradients,
references in float64 where PyTorch has them), fresh random inputs, poisoned outputs,
and finite-difference gradient checks on small float64 cases.

Run on a GPU machine with ``python3 -m pytest -q -m gpu tests/cudnn``.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


class _NoTorch:
    """Stands in for PyTorch where it is not installed: its names still resolve, so the
    module's tables and parameter lists build and every test is collected; the first use
    of PyTorch inside a test skips that test with the reason (tests that do not use
    PyTorch run)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        pytest.skip(self.reason)

    def __instancecheck__(self, obj):
        pytest.skip(self.reason)


try:
    import torch
except ImportError as exc:
    torch = _NoTorch(f"PyTorch is not installed ({exc}): the references come from it")
F = torch.nn.functional

from cupric import runtime as rt  # noqa: E402
from cupric.cudnn import api as dnn  # noqa: E402

EXACT = dnn.PlanOptions(allow_tf32=False)
TYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
         "f64": torch.float64}
# Relative tolerances against a float64 reference, scaled by the reference's magnitude.
TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2, "f64": 1e-12}


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    from cupric.cudnn import lib
    if not lib.is_available():
        pytest.skip(f"cuDNN not loadable: {lib.binding.unavailable_reason}")
    if isinstance(torch, _NoTorch):
        yield
        return
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    # PyTorch's own TF32 switches would make the references less exact than cupric's
    # allow_tf32=False runs.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield


@pytest.fixture
def gen(rng):
    g = torch.Generator(device="cuda")
    g.manual_seed(int(rng.integers(2**31)))
    return g


def randn(shape, etype="f32", gen=None, channels_last=False, scale=1.0):
    x = torch.randn(shape, device="cuda", dtype=torch.float64, generator=gen) * scale
    x = x.to(TYPES[etype])
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4
                         else torch.channels_last_3d)
    return x


def leaf(x):
    """A float64 autograd leaf holding `x`'s values, for the PyTorch reference.

    Always a copy: ``x.double()`` of a float64 `x` is `x` itself, and ``requires_grad_()``
    on it would make the input that cupric is then given a tensor PyTorch refuses to
    export.
    """
    return x.detach().to(torch.float64, copy=True).requires_grad_()


def poisoned(shape, etype="f32", channels_last=False):
    """An output buffer full of NaN: any element an operation forgets to write shows."""
    y = torch.full(shape, float("nan"), device="cuda", dtype=TYPES[etype])
    if channels_last:
        y = y.contiguous(memory_format=torch.channels_last if y.dim() == 4
                         else torch.channels_last_3d)
    return y


def as_torch(buf, etype=None):
    """A torch view of what a cupric call returned (a DeviceBuffer or the `out` tensor)."""
    if isinstance(buf, torch.Tensor):
        return buf
    t = torch.from_dlpack(buf)
    if etype == "bf16" and t.dtype == torch.uint16:
        t = t.view(torch.bfloat16)
    return t


def check_close(actual, reference, etype, what=""):
    actual = as_torch(actual, etype).double()
    reference = reference.double()
    assert actual.shape == reference.shape, what
    assert torch.isfinite(actual).all(), f"{what}: non-finite values (unwritten output?)"
    scale = max(reference.abs().max().item(), 1e-30)
    diff = (actual - reference).abs()
    err = diff.max().item() / scale
    if err > TOL[etype]:
        at = np.unravel_index(int(diff.argmax()), tuple(diff.shape))
        at = tuple(int(i) for i in at)
        raise AssertionError(f"{what}: max error {err:.3g} x max|ref| > {TOL[etype]} at "
                             f"{at}: got {actual[at].item()!r}, expected "
                             f"{reference[at].item()!r}; {int((diff > TOL[etype] * scale).sum())} "
                             f"of {diff.numel()} elements off")


# --------------------------------------------------------------------------------------
# Handles


def test_handle_lifetime_and_workspace():
    stream = rt.Device(0).create_stream()
    h = dnn.Handle.create(stream=stream)
    from cupric.runtime.memory import stream_handle
    assert h.stream == stream_handle(stream) != 0
    p1 = h.workspace(1000)
    assert p1 and h.workspace_bytes >= 1000
    assert h.workspace(10) == p1                    # large enough: no reallocation
    h.workspace(5 << 20)
    assert h.workspace_bytes >= 5 << 20
    x = randn((2, 3, 8, 8))
    w = randn((4, 3, 3, 3))
    torch.cuda.synchronize()
    y = dnn.conv_forward(x, w, padding=1, handle=h, options=EXACT)
    assert len(h.plans) == 1
    h.synchronize()
    check_close(y, F.conv2d(x.double(), w.double(), padding=1), "f32", "conv on own stream")
    h.close()
    h.close()
    with pytest.raises(rt.ClosedError):
        h.ready()
    stream.close()
    shared = dnn.Handle.get()
    assert dnn.Handle.get() is shared


# --------------------------------------------------------------------------------------
# Convolution


CONV_CASES = [
    # x shape, w shape, stride, padding, dilation, groups
    ((2, 8, 12, 12), (16, 8, 3, 3), 1, 1, 1, 1),
    ((3, 6, 11, 9), (4, 3, 3, 5), (2, 1), (1, 2), 1, 2),
    ((2, 8, 10, 10), (8, 1, 3, 3), 1, 1, 1, 8),              # depthwise
    ((1, 4, 16, 16), (8, 4, 3, 3), 2, 2, 2, 1),              # dilated, strided
    ((4, 16, 7, 7), (32, 16, 1, 1), 1, 0, 1, 1),             # 1x1
]


@pytest.mark.parametrize("etype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_forward_and_gradients(case, etype, channels_last, gen):
    x_shape, w_shape, stride, padding, dilation, groups = case
    x = randn(x_shape, etype, gen, channels_last)
    w = randn(w_shape, etype, gen, channels_last, scale=0.3)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    xd = leaf(x)
    wd = leaf(w)
    ref = F.conv2d(xd, wd, **args)
    out = poisoned(ref.shape, etype, channels_last)
    y = dnn.conv_forward(x, w, out=out, options=EXACT, **args)
    assert y is out  # the caller's own output array comes back
    check_close(out, ref, etype, "forward")
    # Allocated output keeps x's layout.
    y2 = dnn.conv_forward(x, w, options=EXACT, **args)
    check_close(y2, ref, etype, "forward, allocated output")
    dy = randn(ref.shape, etype, gen, channels_last)
    ref.backward(dy.double())
    dx = poisoned(x_shape, etype, channels_last)
    dnn.conv_backward_data(dy, w, x_shape, out=dx, options=EXACT, **args)
    check_close(dx, xd.grad, etype, "backward data")
    dw = poisoned(w_shape, etype, channels_last)
    dnn.conv_backward_filter(x, dy, w_shape, out=dw, options=EXACT, **args)
    # The filter gradient sums over N*H*W products: half precision loses more there.
    tol = {"f32": 1e-4, "f16": 1e-2, "bf16": 5e-2}[etype]
    err = (dw.double() - wd.grad).abs().max().item() / wd.grad.abs().max().item()
    assert err < tol, f"backward filter error {err}"


@pytest.mark.parametrize("dims", [1, 3])
def test_conv_1d_and_3d(dims, gen):
    if dims == 1:
        x, w, fn = randn((2, 4, 20), gen=gen), randn((6, 4, 5), gen=gen), F.conv1d
    else:
        x, w, fn = randn((2, 4, 6, 7, 8), gen=gen), randn((6, 4, 3, 3, 3), gen=gen), F.conv3d
    ref = fn(x.double(), w.double(), padding=1, stride=2)
    y = dnn.conv_forward(x, w, padding=1, stride=2, options=EXACT)
    check_close(y, ref, "f32", f"conv{dims}d")


def test_conv_float64_and_numerical_gradients(gen):
    """Finite differences of the float64 forward against both backward passes."""
    x = randn((1, 2, 5, 5), "f64", gen)
    w = randn((3, 2, 3, 3), "f64", gen)
    y = as_torch(dnn.conv_forward(x, w, padding=1))
    check_close(y, F.conv2d(x, w, padding=1), "f64", "float64 forward")
    dy = randn(y.shape, "f64", gen)
    dx = as_torch(dnn.conv_backward_data(dy, w, x.shape, padding=1))
    dw = as_torch(dnn.conv_backward_filter(x, dy, w.shape, padding=1))

    def loss(xv, wv):
        return float((as_torch(dnn.conv_forward(xv, wv, padding=1)) * dy).sum())

    eps = 1e-6
    for tensor, grad in ((x, dx), (w, dw)):
        flat = tensor.view(-1)
        for i in torch.randint(0, flat.numel(), (6,), generator=torch.Generator().manual_seed(0)):
            i = int(i)
            keep = flat[i].item()
            flat[i] = keep + eps
            up = loss(x, w)
            flat[i] = keep - eps
            down = loss(x, w)
            flat[i] = keep
            numeric = (up - down) / (2 * eps)
            assert abs(numeric - grad.view(-1)[i].item()) < 1e-6 * max(1.0, abs(numeric))


def test_conv_backward_bias(gen):
    dy = randn((4, 16, 7, 7), gen=gen)
    db = dnn.conv_backward_bias(dy)
    check_close(db, dy.double().sum(dim=(0, 2, 3)), "f32", "bias gradient")


ACTS = {None: lambda t: t, "relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
        "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "swish": F.silu,
        "elu": F.elu}


@pytest.mark.parametrize("activation", list(ACTS))
@pytest.mark.parametrize("etype,channels_last", [("f16", True), ("bf16", True),
                                                  ("f32", False)])
def test_conv_bias_activation(activation, etype, channels_last, gen):
    x = randn((2, 16, 10, 10), etype, gen, channels_last)
    w = randn((32, 16, 3, 3), etype, gen, channels_last, scale=0.2)
    b = randn((32,), etype, gen)
    ref = ACTS[activation](F.conv2d(x.double(), w.double(), b.double(), padding=1))
    out = poisoned(ref.shape, etype, channels_last)
    dnn.conv2d(x, w, b, padding=1, activation=activation, out=out, options=EXACT)
    check_close(out, ref, etype, f"fused conv+bias+{activation}")
    unfused = poisoned(ref.shape, etype, channels_last)
    if activation is not None:
        dnn.conv_bias_activation(x, w, b, activation, padding=1, out=unfused, options=EXACT,
                                 fuse=False)
        check_close(unfused, ref, etype, f"unfused conv+bias+{activation}")


def test_autotune(gen, monkeypatch):
    # A choice remembered on disk by an earlier process is reused untimed: ask afresh.
    monkeypatch.setenv("CUPRIC_CUDNN_ENGINE_CACHE", "0")
    x = randn((8, 32, 28, 28), "f16", gen, channels_last=True)
    w = randn((32, 32, 3, 3), "f16", gen, channels_last=True, scale=0.2)
    h = dnn.Handle.create()
    options = dnn.PlanOptions(autotune=True, candidates=4)
    y = dnn.conv_forward(x, w, padding=1, handle=h, options=options)
    (plan,) = h.plans.values()
    assert plan.time_ms is not None and plan.time_ms > 0
    h.synchronize()
    check_close(y, F.conv2d(x.double(), w.double(), padding=1), "f16", "autotuned")
    h.close()


def test_inputs_from_cupric_buffers(rng):
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    y = dnn.conv_forward(rt.to_device(x), rt.to_device(w), options=EXACT)
    ref = F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double())
    got = torch.from_numpy(y.to_numpy()).double()
    assert (got - ref).abs().max() / ref.abs().max() < TOL["f32"]


def test_bfloat16_results_chain(gen):
    x = randn((2, 8, 6, 6), "bf16", gen)
    w = randn((8, 8, 3, 3), "bf16", gen, scale=0.3)
    y = dnn.conv_forward(x, w, padding=1)
    z = dnn.relu(y)      # a cupric bf16 result is recognized as bf16 when passed back
    ref = F.relu(F.conv2d(x.double(), w.double(), padding=1))
    check_close(z, ref, "bf16", "bf16 chain")


# --------------------------------------------------------------------------------------
# Matmul


@pytest.mark.parametrize("etype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("activation,with_bias", [(None, False), (None, True),
                                                  ("relu", True), ("gelu", True)])
def test_matmul(etype, activation, with_bias, gen):
    a = randn((3, 64, 32), etype, gen)
    b = randn((3, 32, 48), etype, gen)
    bias = randn((48,), etype, gen) if with_bias else None
    ref = a.double() @ b.double()
    ref = ACTS[activation](ref + bias.double() if with_bias else ref)
    out = poisoned(ref.shape, etype)
    options, tolerance = EXACT, etype
    if etype == "f32":
        # cuDNN's float32 matmul engine runs at TF32 precision without saying so (the
        # first GPU runs measured 2.8e-4 here): without TF32 the graph is refused, typed
        # and before anything runs.
        with pytest.raises(dnn.NoEngineError, match="float32 matmul with allow_tf32=False"):
            dnn.matmul(a, b, bias=bias, activation=activation, out=out, options=EXACT)
        assert torch.isnan(out).all()
        # With TF32 allowed it runs, to TF32's precision: float16's 10-bit mantissa.
        options, tolerance = dnn.PlanOptions(allow_tf32=True), "f16"
    h = dnn.Handle.create()
    try:
        dnn.matmul(a, b, bias=bias, activation=activation, out=out, options=options,
                   handle=h)
    except dnn.NoEngineError as exc:
        h.close()
        if etype == "f32" and with_bias:
            pytest.xfail(f"no float32 matmul engine with this epilogue here: {exc}")
        raise
    h.synchronize()
    with _plans_on_failure(h):
        check_close(out, ref, tolerance, "matmul")
    h.close()


@contextlib.contextmanager
def _plans_on_failure(handle):
    """Add the engines (cuDNN's JSON of each cached plan) to a failing check's message:
    which engine computed a wrong result is what the next step needs."""
    try:
        yield
    except AssertionError as exc:
        described = []
        for plan in handle.plans.values():
            try:
                text = plan.json()
            except Exception as json_exc:  # the description is extra; say why it is missing
                text = f"(no JSON: {type(json_exc).__name__}: {json_exc})"
            described.append(f"engine {plan.engine}: {text[:600]}")
        raise AssertionError(f"{exc}\nplans: {'; '.join(described) or 'none'}") from exc


# --------------------------------------------------------------------------------------
# Pooling


@pytest.mark.parametrize("mode", ["max", "avg_include_pad", "avg_exclude_pad"])
@pytest.mark.parametrize("etype,channels_last", [("f32", False), ("f32", True), ("f16", True)])
def test_pooling(mode, etype, channels_last, gen):
    x = randn((2, 6, 11, 13), etype, gen, channels_last)
    # The reference runs on the CPU in NCHW: PyTorch's CUDA channels-last avg_pool2d
    # backward ignores the padding offset (pytorch/pytorch#188344), which made the first
    # GPU run compare cupric's correct NHWC average-pooling gradients with wrong ones.
    xd = x.detach().cpu().to(torch.float64).contiguous().requires_grad_()
    if mode == "max":
        ref = F.max_pool2d(xd, 3, 2, 1)
    else:
        ref = F.avg_pool2d(xd, 3, 2, 1, count_include_pad=mode == "avg_include_pad")
    out = poisoned(ref.shape, etype, channels_last)
    dnn.pool_forward(x, mode, window=3, stride=2, padding=1, out=out)
    check_close(out, ref.detach().cuda(), etype, f"{mode} forward")
    dy = randn(ref.shape, etype, gen, channels_last)
    ref.backward(dy.double().cpu())
    dx = poisoned(x.shape, etype, channels_last)
    dnn.pool_backward(dy, x, out, mode, window=3, stride=2, padding=1, out=dx)
    check_close(dx, xd.grad.cuda(), etype, f"{mode} backward")


def test_avg_pool_backward_by_hand():
    """Average pooling's gradient counted out on a tiny case, in both layouts: every input
    element gets dy / 9 from each window covering it (padding counted in the 9)."""
    n, c, h, w, oh, ow = 1, 2, 4, 5, 2, 3
    x = torch.randn((n, c, h, w), device="cuda")
    dy = torch.arange(1.0, 1.0 + n * c * oh * ow, device="cuda").reshape(n, c, oh, ow)
    expected = torch.zeros((n, c, h, w), dtype=torch.float64)
    for ch in range(c):
        for oy in range(oh):
            for ox in range(ow):
                for ky in range(3):
                    for kx in range(3):
                        iy, ix = 2 * oy - 1 + ky, 2 * ox - 1 + kx
                        if 0 <= iy < h and 0 <= ix < w:
                            expected[0, ch, iy, ix] += dy[0, ch, oy, ox].item() / 9
    for channels_last in (False, True):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        xs, dys = x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
        y = dnn.pool_forward(xs, "avg_include_pad", window=3, stride=2, padding=1)
        dx = poisoned(x.shape, "f32", channels_last)
        dnn.pool_backward(dys, xs, y, "avg_include_pad", window=3, stride=2, padding=1,
                          out=dx)
        check_close(dx, expected.cuda(), "f32", f"by hand, channels_last={channels_last}")


def test_pool_shorthands(gen):
    x = randn((2, 3, 8, 8), gen=gen)
    check_close(dnn.max_pool2d(x, 2), F.max_pool2d(x.double(), 2), "f32", "max_pool2d")
    check_close(dnn.avg_pool2d(x, 2), F.avg_pool2d(x.double(), 2), "f32", "avg_pool2d")


# --------------------------------------------------------------------------------------
# Activations


ACT_CASES = {
    "relu": (F.relu, {}), "sigmoid": (torch.sigmoid, {}), "tanh": (torch.tanh, {}),
    "elu": (lambda t: F.elu(t, alpha=0.7), {"alpha": 0.7}),
    "swish": (F.silu, {}), "gelu": (F.gelu, {}),
    "gelu_tanh": (lambda t: F.gelu(t, approximate="tanh"), {}),
    "clipped_relu": (lambda t: F.hardtanh(t, 0.0, 1.5), {"clip": 1.5}),
}


@pytest.mark.parametrize("mode", list(ACT_CASES))
@pytest.mark.parametrize("etype,shape,channels_last",
                         [("f32", (3, 5, 7, 9), False), ("f16", (4, 8, 6, 6), True),
                          ("bf16", (1000,), False), ("f64", (17, 3), False)])
def test_activation(mode, etype, shape, channels_last, gen):
    fn, kw = ACT_CASES[mode]
    x = randn(shape, etype, gen, channels_last, scale=2.0)
    xd = leaf(x)
    ref = fn(xd)
    out = poisoned(shape, etype, channels_last)
    dnn.activation_forward(x, mode, out=out, **kw)
    check_close(out, ref, etype, f"{mode} forward")
    dy = randn(shape, etype, gen, channels_last)
    ref.backward(dy.double())
    dx = poisoned(shape, etype, channels_last)
    dnn.activation_backward(dy, x, out, mode, out=dx, **kw)
    check_close(dx, xd.grad, etype, f"{mode} backward")
    dx2 = dnn.activation_backward(dy, x, mode=mode, **kw)       # y recomputed
    check_close(dx2, xd.grad, etype, f"{mode} backward without y")


@pytest.mark.parametrize("etype", ["f32", "f16", "bf16", "f64"])
def test_relu_gradients_at_the_kinks(etype):
    """Elements exactly at 0 and at clip get no gradient, as PyTorch's relu and hardtanh
    (cuDNN by itself passes it at x == clip)."""
    values = [-1.0, 0.0, 0.5, 1.5, 2.0, 1.0, 0.0, 1.5]
    x = torch.tensor(values, device="cuda", dtype=TYPES[etype])
    dy = torch.ones_like(x)
    for mode, kw, fn in (("clipped_relu", {"clip": 1.5}, lambda t: F.hardtanh(t, 0.0, 1.5)),
                         ("relu", {}, F.relu)):
        xd = leaf(x)
        fn(xd).backward(dy.double())
        for y in (None, dnn.activation_forward(x, mode, **kw)):
            dx = dnn.activation_backward(dy, x, y, mode, **kw)
            got = as_torch(dx, etype).double()
            assert torch.equal(got, xd.grad), f"{mode}: {got.tolist()} != {xd.grad.tolist()}"


def test_requires_grad_input_is_a_clear_error(gen):
    x = randn((2, 3, 8, 8), gen=gen).requires_grad_()
    with pytest.raises(TypeError, match=r"relu.*x is a PyTorch tensor that requires grad.*"
                                        r"\.detach\(\)"):
        dnn.relu(x)
    y = dnn.relu(x.detach())        # what the message says to do
    check_close(y, F.relu(x.detach().double()), "f32", "relu of the detached tensor")


def test_activation_in_place_and_shorthands(gen):
    x = randn((4, 100), gen=gen)
    ref = F.gelu(x.double())
    check_close(dnn.gelu(x), ref, "f32", "gelu shorthand")
    check_close(dnn.swish(x, 1.0), F.silu(x.double()), "f32", "swish shorthand")
    dnn.relu(x, out=x)
    assert (x >= 0).all()


def test_activation_numerical_gradient(gen):
    x = randn((64,), "f64", gen, scale=2.0)
    dy = randn((64,), "f64", gen)
    eps = 1e-6
    for mode in ("gelu", "swish", "tanh", "sigmoid", "elu"):
        dx = as_torch(dnn.activation_backward(dy, x, mode=mode))
        up = as_torch(dnn.activation_forward(x + eps, mode))
        down = as_torch(dnn.activation_forward(x - eps, mode))
        numeric = (up - down) / (2 * eps) * dy
        assert (numeric - dx).abs().max() < 1e-6, mode


# --------------------------------------------------------------------------------------
# Softmax


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("etype", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("shape,axis,channels_last",
                         [((8, 100), -1, False), ((4, 10, 5, 6), 1, False),
                          ((4, 10, 5, 6), 1, True), ((2, 3, 4, 33), -1, False),
                          ((6, 7, 9), 1, False)])
def test_softmax(shape, axis, channels_last, etype, log, gen):
    x = randn(shape, etype, gen, channels_last, scale=3.0)
    xd = leaf(x)
    ref = (F.log_softmax if log else F.softmax)(xd, dim=axis)
    out = poisoned(shape, etype, channels_last)
    dnn.softmax_forward(x, axis, log=log, out=out)
    check_close(out, ref, etype, "softmax forward")
    dy = randn(shape, etype, gen, channels_last)
    ref.backward(dy.double())
    dx = poisoned(shape, etype, channels_last)
    # The reference gradient is taken at the exact output; feed cuDNN the same. PyTorch's
    # softmax returns a contiguous (NCHW) tensor whatever its input's layout, and cuDNN
    # takes y and dy only laid out alike: put y in dy's layout.
    y = ref.detach().to(TYPES[etype])
    if channels_last:
        with pytest.raises(ValueError, match="y and dy must be laid out alike"):
            dnn.softmax_backward(y.contiguous(), dy, axis, log=log, out=dx)
        y = y.contiguous(memory_format=torch.channels_last)
    dnn.softmax_backward(y, dy, axis, log=log, out=dx)
    check_close(dx, xd.grad, etype, "softmax backward")


def test_softmax_numerical_gradient(gen):
    x = randn((3, 7), "f64", gen)
    dy = randn((3, 7), "f64", gen)
    y = as_torch(dnn.softmax(x))
    dx = as_torch(dnn.softmax_backward(y, dy))
    eps = 1e-6
    numeric = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros_like(x).view(-1)
        e[i] = eps
        e = e.view_as(x)
        up = (as_torch(dnn.softmax(x + e)) * dy).sum()
        down = (as_torch(dnn.softmax(x - e)) * dy).sum()
        numeric.view(-1)[i] = (up - down) / (2 * eps)
    assert (numeric - dx).abs().max() < 1e-7


# --------------------------------------------------------------------------------------
# Batch normalization


@pytest.mark.parametrize("etype,channels_last", [("f32", False), ("f32", True),
                                                  ("f16", True), ("bf16", False)])
def test_batch_norm_training_and_backward(etype, channels_last, gen):
    n, c, h, w = 8, 12, 7, 5
    x = randn((n, c, h, w), etype, gen, channels_last, scale=2.0) + 0.5
    weight = randn((c,), "f32", gen)
    bias = randn((c,), "f32", gen)
    rm = randn((c,), "f32", gen)
    rv = torch.rand(c, device="cuda", generator=gen) + 0.5
    rm_ref, rv_ref = rm.double().clone(), rv.double().clone()
    xd = leaf(x)
    wd = leaf(weight)
    bd = leaf(bias)
    ref = F.batch_norm(xd, rm_ref, rv_ref, wd, bd, training=True, momentum=0.1, eps=1e-5)
    out = poisoned((n, c, h, w), etype, channels_last)
    res = dnn.batch_norm_training(x, weight, bias, rm, rv, momentum=0.1, eps=1e-5, out=out)
    check_close(out, ref, etype, "batch norm forward")
    check_close(rm, rm_ref, "f32" if etype == "f32" else etype, "running mean")
    check_close(rv, rv_ref, "f32" if etype == "f32" else etype, "running var")
    mean = xd.detach().mean(dim=(0, 2, 3))
    inv = 1.0 / torch.sqrt(xd.detach().var(dim=(0, 2, 3), unbiased=False) + 1e-5)
    check_close(res.save_mean, mean, "f32" if etype == "f32" else etype, "saved mean")
    check_close(res.save_inv_std, inv, "f32" if etype == "f32" else etype, "saved inv std")
    dy = randn((n, c, h, w), etype, gen, channels_last)
    ref.backward(dy.double())
    dx = poisoned((n, c, h, w), etype, channels_last)
    got_dx, dweight, dbias = dnn.batch_norm_backward(dy, x, weight, res.save_mean,
                                                     res.save_inv_std, eps=1e-5, out=dx)
    check_close(dx, xd.grad, etype, "batch norm dx")
    check_close(dweight, wd.grad, "f32" if etype == "f32" else etype, "dweight")
    check_close(dbias, bd.grad, "f32" if etype == "f32" else etype, "dbias")


@pytest.mark.parametrize("etype,shape", [("f16", (32, 64, 56, 56)), ("bf16", (16, 128, 28, 28)),
                                         ("f16", (4, 32, 4, 6, 6))])
def test_batch_norm_persistent_on_channels_last_data(etype, shape, gen, monkeypatch):
    """Training on channels-last data runs the persistent kernels (the Ex entry points,
    PyTorch's choice, at the layer sizes it is slow without them): forward and backward
    against a float64 reference, against PyTorch's own half-precision result, and
    against the spatial kernels (persistent=False)."""
    from cupric.cudnn import batchnorm
    ran = []
    for name in ("_training_ex", "_backward_ex"):
        real = getattr(batchnorm, name)
        monkeypatch.setattr(batchnorm, name,
                            lambda *a, _real=real, _name=name: ran.append(_name) or _real(*a))
    c = shape[1]
    x = randn(shape, etype, gen, channels_last=True, scale=2.0) + 0.5
    weight, bias = randn((c,), "f32", gen), randn((c,), "f32", gen)
    rm, rv = randn((c,), "f32", gen), torch.rand(c, device="cuda", generator=gen) + 0.5
    rm_ref, rv_ref = rm.double().clone(), rv.double().clone()
    rm_half, rv_half = rm.clone(), rv.clone()
    xd, wd, bd = leaf(x), leaf(weight), leaf(bias)
    ref = F.batch_norm(xd, rm_ref, rv_ref, wd, bd, training=True, momentum=0.1, eps=1e-5)
    out = poisoned(shape, etype, True)
    res = dnn.batch_norm_training(x, weight, bias, rm, rv, momentum=0.1, eps=1e-5, out=out)
    assert ran == ["_training_ex"], "the persistent forward did not run"
    check_close(out, ref, etype, "persistent forward")
    check_close(rm, rm_ref, etype, "running mean")
    check_close(rv, rv_ref, etype, "running var")
    # PyTorch on the same half-precision tensor (its cuDNN persistent path).
    theirs = F.batch_norm(x, rm_half, rv_half, weight, bias, training=True, momentum=0.1,
                          eps=1e-5)
    check_close(out, theirs.double(), etype, "against PyTorch's own")
    spatial = dnn.batch_norm_training(x, weight, bias, persistent=False)
    check_close(out, as_torch(spatial.y, etype).double(), etype, "against spatial")
    check_close(res.save_mean, as_torch(spatial.save_mean).double(), etype, "saved mean")
    check_close(res.save_inv_std, as_torch(spatial.save_inv_std).double(), etype,
                "saved inv std")
    dy = randn(shape, etype, gen, channels_last=True)
    ref.backward(dy.double())
    dx = poisoned(shape, etype, True)
    got_dx, dweight, dbias = dnn.batch_norm_backward(dy, x, weight, res.save_mean,
                                                     res.save_inv_std, eps=1e-5, out=dx,
                                                     reserve=res.reserve)
    assert ran[-1] == "_backward_ex"
    check_close(dx, xd.grad, etype, "persistent dx")
    check_close(dweight, wd.grad, etype, "persistent dweight")
    check_close(dbias, bd.grad, etype, "persistent dbias")
    sx, sw, sb = dnn.batch_norm_backward(dy, x, weight, spatial.save_mean,
                                         spatial.save_inv_std, eps=1e-5, persistent=False)
    check_close(dx, as_torch(sx, etype).double(), etype, "dx against spatial")
    check_close(dweight, as_torch(sw).double(), etype, "dweight against spatial")
    # Replayed (the compiled path, same entry points): the same bytes again.
    again = poisoned(shape, etype, True)
    rm2, rv2 = rm_half.clone(), rv_half.clone()
    dnn.batch_norm_training(x, weight, bias, rm2, rv2, momentum=0.1, eps=1e-5, out=again)
    dnn.batch_norm_training(x, weight, bias, rm2, rv2, momentum=0.1, eps=1e-5, out=again)
    assert torch.equal(again, out)
    dx2 = poisoned(shape, etype, True)
    for _ in range(2):
        dnn.batch_norm_backward(dy, x, weight, res.save_mean, res.save_inv_std, eps=1e-5,
                                out=dx2, reserve=res.reserve)
    assert torch.equal(dx2, dx)


def test_batch_norm_inference(gen):
    x = randn((4, 6, 5, 5), gen=gen)
    weight, bias, rm = (randn((6,), gen=gen) for _ in range(3))
    rv = torch.rand(6, device="cuda", generator=gen) + 0.5
    ref = F.batch_norm(x.double(), rm.double(), rv.double(), weight.double(), bias.double(),
                       training=False, eps=1e-3)
    out = poisoned(x.shape)
    dnn.batch_norm(x, rm, rv, weight, bias, training=False, eps=1e-3, out=out)
    check_close(out, ref, "f32", "batch norm inference")


def test_batch_norm_numerical_gradient(gen):
    x = randn((3, 2, 2, 2), "f64", gen)
    weight = randn((2,), "f64", gen)
    bias = randn((2,), "f64", gen)
    dy = randn(x.shape, "f64", gen)
    res = dnn.batch_norm_training(x, weight, bias)
    dx, dw, db = dnn.batch_norm_backward(dy, x, weight, res.save_mean, res.save_inv_std)
    dx = as_torch(dx)

    def loss(xv):
        return float((as_torch(dnn.batch_norm_training(xv, weight, bias).y) * dy).sum())

    eps = 1e-6
    flat = x.view(-1)
    for i in range(0, flat.numel(), 3):
        keep = flat[i].item()
        flat[i] = keep + eps
        up = loss(x)
        flat[i] = keep - eps
        down = loss(x)
        flat[i] = keep
        assert abs((up - down) / (2 * eps) - dx.view(-1)[i].item()) < 1e-5


# --------------------------------------------------------------------------------------
# Dropout


@pytest.mark.parametrize("etype", ["f32", "f16"])
def test_dropout(etype, gen):
    p = 0.3
    # Strictly positive, so an exact zero in the output can only be a dropped element
    # (randn + 3 can round to exactly 0 in f16, about once per 65536 elements).
    x = randn((64, 1024), etype, gen).abs() + 1.0
    with dnn.Dropout.create(p, seed=1234) as layer:
        out = poisoned(x.shape, etype)
        y, reserve = layer.forward(x, out=out)
        dropped = out == 0
        fraction = dropped.double().mean().item()
        assert abs(fraction - p) < 0.02
        kept = ~dropped
        check_close(out[kept], x.double()[kept] / (1 - p), etype, "kept elements")
        dy = randn(x.shape, etype, gen)
        dx = poisoned(x.shape, etype)
        layer.backward(dy, reserve, out=dx)
        assert (dx[dropped] == 0).all()
        check_close(dx[kept], dy.double()[kept] / (1 - p), etype, "dropout backward")
        _, reserve2 = layer.forward(x)      # the states advance: another mask
    with dnn.Dropout.create(p, seed=1234) as again:
        y3, _ = again.forward(x)
        assert torch.equal(as_torch(y3), out)      # same seed: same first mask


# --------------------------------------------------------------------------------------
# A small network, forward and backward, against autograd


def _matmul(a, b, handle=None, paths=None):
    """cupric's graph matmul; PyTorch's where cuDNN has no engine without TF32 (float32:
    see `test_matmul`; the network test is about chaining the other operations). `paths`
    records which ran."""
    try:
        result = as_torch(dnn.matmul(a, b, options=EXACT, handle=handle))
        path = "cupric"
    except dnn.NoEngineError:
        result = a @ b
        path = "torch"
    if paths is not None:
        paths.append(path)
    return result


def test_small_network_step(gen):
    n = 8
    x = randn((n, 3, 16, 16), gen=gen)
    w1 = randn((16, 3, 3, 3), gen=gen, scale=0.3)
    b1 = randn((16,), gen=gen)
    gamma = randn((16,), gen=gen)
    beta = randn((16,), gen=gen)
    w2 = randn((16 * 8 * 8, 10), gen=gen, scale=0.05)
    labels = torch.randint(0, 10, (n,), device="cuda", generator=gen)

    params = [leaf(t) for t in (w1, b1, gamma, beta, w2)]
    rw1, rb1, rg, rbeta, rw2 = params
    h1 = F.relu(F.conv2d(x.double(), rw1, rb1, padding=1))
    h2 = F.batch_norm(h1, None, None, rg, rbeta, training=True, eps=1e-5)
    h3 = F.max_pool2d(h2, 2)
    logits = h3.reshape(n, -1) @ rw2
    loss = F.nll_loss(F.log_softmax(logits, -1), labels)
    loss.backward()

    # cupric: the same step, every intermediate allocated by cupric, each checked against
    # its float64 counterpart so that a failure names the step that went wrong.
    c1 = dnn.conv2d(x, w1, b1, padding=1, activation="relu", options=EXACT)
    check_close(c1, h1.detach(), "f32", "network conv+bias+relu")
    bn = dnn.batch_norm_training(c1, gamma, beta, eps=1e-5)
    check_close(bn.y, h2.detach(), "f32", "network batch norm")
    p = dnn.max_pool2d(bn.y, 2)
    check_close(p, h3.detach(), "f32", "network max pool")
    flat = as_torch(p).reshape(n, -1)
    paths = []
    h = dnn.Handle.create()
    out = _matmul(flat, w2, h, paths)
    h.synchronize()
    # The product of the very same float32 operands in float64: what the matmul alone
    # should give, whatever the error upstream.
    exact = flat.double() @ w2.double()
    with _plans_on_failure(h):
        check_close(out, exact, "f32", f"network matmul ({paths[-1]}) against its own "
                                       f"operands in float64")
    h.close()
    check_close(out, logits.detach(), "f32", f"network logits ({paths[-1]} matmul)")
    lsm = as_torch(dnn.log_softmax(out, -1))
    check_close(lsm, F.log_softmax(logits, -1).detach(), "f32", "network output")
    d_lsm = torch.zeros_like(lsm)
    d_lsm[torch.arange(n, device="cuda"), labels] = -1.0 / n
    d_out = as_torch(dnn.softmax_backward(lsm, d_lsm, -1, log=True))
    d_w2 = _matmul(flat.t(), d_out)
    d_flat = _matmul(d_out, w2.t().contiguous())
    d_p = d_flat.reshape(as_torch(p).shape)
    d_bn = dnn.pool_backward(d_p, bn.y, p, "max", window=2)
    d_c1, d_gamma, d_beta = dnn.batch_norm_backward(d_bn, c1, gamma, bn.save_mean,
                                                    bn.save_inv_std, eps=1e-5)
    # ReLU's gradient mask is where its output is positive: the output serves as x and y.
    d_pre = dnn.activation_backward(d_c1, c1, c1, "relu")
    d_b1 = dnn.conv_backward_bias(d_pre)
    d_w1 = dnn.conv_backward_filter(x, d_pre, w1.shape, padding=1, options=EXACT)
    torch.cuda.synchronize()
    for got, ref, what in ((d_w1, rw1.grad, "dw1"), (d_b1, rb1.grad, "db1"),
                           (d_gamma, rg.grad, "dgamma"), (d_beta, rbeta.grad, "dbeta"),
                           (d_w2, rw2.grad, "dw2")):
        got = as_torch(got).double()
        err = (got - ref).abs().max().item() / ref.abs().max().item()
        assert err < 1e-4, f"{what}: relative error {err}"
