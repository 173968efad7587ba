"""GPU lane: the compiled replay of cuDNN calls (`cupric.cudnn._replay`).

Every operation gives, through the replay path, the result it gives through the full
Python path (bit for bit: same plan, same data), for PyTorch tensors, CuPy arrays and
DeviceBuffers;
the per-call checks still refuse what the full path refuses; and a replayed call can be
captured into a CUDA graph and relaunched.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from cupric import runtime as rt  # noqa: E402
from cupric.cudnn import _replay  # noqa: E402
from cupric.cudnn import _validate as V  # noqa: E402
from cupric.cudnn import api as dnn  # noqa: E402
from cupric.runtime.errors import ClosedError  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    from cupric.cudnn import lib
    if not lib.is_available():
        pytest.skip(f"cuDNN not loadable: {lib.binding.unavailable_reason}")
    if _replay.load() is None:
        pytest.skip(f"replay extension unavailable: {_replay.build_error()}")
    yield


@pytest.fixture
def full_path_calls(monkeypatch):
    """Counts the full path's array checks (the replay path makes none in Python)."""
    calls = []
    real = V.tensor

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(V, "tensor", counting)
    return calls


@pytest.fixture
def gen(rng):
    g = torch.Generator(device="cuda")
    g.manual_seed(int(rng.integers(2**31)))
    return g


def randn(shape, dtype=torch.float16, gen=None, channels_last=False, scale=1.0):
    x = (torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen) * scale)
    x = x.to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


def nan_like(x):
    return torch.full_like(x, float("nan"))


def as_buffer(t):
    """The same memory as a DeviceBuffer borrow."""
    return rt.as_device_array(t)


def wrapper(kind):
    """How a case hands its PyTorch tensors to cupric: as they are, as DeviceBuffer
    borrows, or as CuPy arrays over the same memory (skipped without CuPy)."""
    if kind == "torch":
        return lambda t: t
    if kind == "buffer":
        return as_buffer
    cupy = pytest.importorskip("cupy")
    return cupy.from_dlpack


def torch_of(result):
    if isinstance(result, torch.Tensor):
        return result
    return torch.from_dlpack(result)


# Each case: name -> function(gen, kind) giving (call, outputs): `call(out)` runs the
# operation writing into `out` (a tuple of fresh NaN-filled output tensors); the
# outputs' shapes come from `outputs`.

def _conv_case(gen, wrap, dtype=torch.float16):
    x = randn((8, 64, 14, 14), dtype, gen, channels_last=True)
    w = randn((64, 64, 3, 3), dtype, gen, channels_last=True, scale=0.1)
    y = nan_like(torch.empty((8, 64, 14, 14), device="cuda", dtype=dtype)
                 .contiguous(memory_format=torch.channels_last))
    return (lambda out: dnn.conv_forward(wrap(x), wrap(w), padding=1, out=wrap(out[0]))), (y,)


def _conv_bwd_data_case(gen, wrap):
    dy = randn((8, 32, 7, 7), torch.float16, gen, channels_last=True)
    w = randn((32, 16, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
    dx = nan_like(torch.empty((8, 16, 14, 14), device="cuda", dtype=torch.float16)
                  .contiguous(memory_format=torch.channels_last))
    return (lambda out: dnn.conv_backward_data(wrap(dy), wrap(w), (8, 16, 14, 14), stride=2,
                                               padding=1, out=wrap(out[0]))), (dx,)


def _conv_bwd_filter_case(gen, wrap):
    x = randn((8, 16, 14, 14), torch.float32, gen)
    dy = randn((8, 32, 14, 14), torch.float32, gen)
    dw = nan_like(torch.empty((32, 16, 3, 3), device="cuda"))
    return (lambda out: dnn.conv_backward_filter(wrap(x), wrap(dy), (32, 16, 3, 3),
                                                 padding=1, out=wrap(out[0]))), (dw,)


def _conv_bias_relu_case(gen, wrap):
    x = randn((8, 64, 14, 14), torch.float16, gen, channels_last=True)
    w = randn((64, 64, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
    b = randn((64,), torch.float16, gen)
    y = nan_like(x)
    return (lambda out: dnn.conv2d(wrap(x), wrap(w), wrap(b), padding=1, activation="relu",
                                   out=wrap(out[0]))), (y,)


def _matmul_case(gen, wrap):
    a = randn((4, 64, 32), torch.float16, gen)
    b = randn((4, 32, 48), torch.float16, gen)
    c = nan_like(torch.empty((4, 64, 48), device="cuda", dtype=torch.float16))
    return (lambda out: dnn.matmul(wrap(a), wrap(b), out=wrap(out[0]))), (c,)


def _pool_case(gen, wrap):
    x = randn((8, 32, 28, 28), torch.float16, gen, channels_last=True)
    y = nan_like(torch.empty((8, 32, 14, 14), device="cuda", dtype=torch.float16)
                 .contiguous(memory_format=torch.channels_last))
    return (lambda out: dnn.max_pool2d(wrap(x), 3, 2, 1, out=wrap(out[0]))), (y,)


def _pool_bwd_case(gen, wrap):
    x = randn((8, 32, 28, 28), torch.float32, gen)
    y = dnn.max_pool2d(x, 2)
    y = torch_of(y).clone()
    dy = randn(tuple(y.shape), torch.float32, gen)
    dx = nan_like(x)
    return (lambda out: dnn.pool_backward(wrap(dy), wrap(x), wrap(y), "max", window=2,
                                          out=wrap(out[0]))), (dx,)


def _relu_case(gen, wrap):
    x = randn((8, 64, 14, 14), torch.float16, gen)
    return (lambda out: dnn.relu(wrap(x), out=wrap(out[0]))), (nan_like(x),)


def _sigmoid_bwd_case(gen, wrap):
    x = randn((8, 64, 14, 14), torch.float32, gen)
    y = torch.sigmoid(x)
    dy = randn((8, 64, 14, 14), torch.float32, gen)
    return (lambda out: dnn.activation_backward(wrap(dy), wrap(x), wrap(y), "sigmoid",
                                                out=wrap(out[0]))), (nan_like(x),)


def _softmax_case(gen, wrap):
    x = randn((64, 1000), torch.float32, gen)
    return (lambda out: dnn.softmax(wrap(x), -1, out=wrap(out[0]))), (nan_like(x),)


def _softmax_bwd_case(gen, wrap):
    y = torch.softmax(randn((64, 100), torch.float32, gen), -1)
    dy = randn((64, 100), torch.float32, gen)
    return (lambda out: dnn.softmax_backward(wrap(y), wrap(dy), -1, out=wrap(out[0]))), \
        (nan_like(y),)


def _bn_infer_case(gen, wrap):
    x = randn((8, 32, 14, 14), torch.float16, gen, channels_last=True)
    w, b = randn((32,), torch.float32, gen), randn((32,), torch.float32, gen)
    m, v = randn((32,), torch.float32, gen), torch.rand(32, device="cuda") + 0.5
    return (lambda out: dnn.batch_norm_inference(wrap(x), wrap(w), wrap(b), wrap(m), wrap(v),
                                                 out=wrap(out[0]))), (nan_like(x),)


def _conv_bwd_bias_case(gen, wrap):
    dy = randn((8, 32, 14, 14), torch.float32, gen, channels_last=True)
    db = nan_like(torch.empty(32, device="cuda"))
    return (lambda out: dnn.conv_backward_bias(wrap(dy), out=wrap(out[0]))), (db,)


CASES = {"conv_bwd_bias": _conv_bwd_bias_case, "conv_fwd": _conv_case, "conv_bwd_data": _conv_bwd_data_case,
         "conv_bwd_filter": _conv_bwd_filter_case, "conv_bias_relu": _conv_bias_relu_case,
         "matmul": _matmul_case, "max_pool": _pool_case, "pool_bwd": _pool_bwd_case,
         "relu": _relu_case, "sigmoid_bwd": _sigmoid_bwd_case, "softmax": _softmax_case,
         "softmax_bwd": _softmax_bwd_case, "bn_inference": _bn_infer_case}


# Reductions cuDNN may sum in any order (atomics): equal up to rounding, run to run.
SUMMED_WITH_ATOMICS = {"conv_bwd_bias"}


@pytest.mark.parametrize("kind", ["torch", "buffer", "cupy"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_equals_full_path(name, kind, gen, full_path_calls):
    wrap = wrapper(kind)
    call, outs = CASES[name](gen, wrap)
    h = dnn.default_handle()
    h._replays.clear()  # earlier tests may have recorded the same keys
    full_path_calls.clear()
    first = tuple(nan_like(o) for o in outs)
    call(first)                      # the full path, which records the entry
    assert full_path_calls, "the first call must take the full path"
    assert h._replays, "the full path recorded no replay entry"
    full_path_calls.clear()
    second = tuple(nan_like(o) for o in outs)
    result = call(second)            # replayed
    assert full_path_calls == [], f"replay fell back to the full path: {full_path_calls}"
    if kind == "torch":
        assert result is second[0]
    torch.cuda.synchronize()
    for a, b in zip(first, second):
        assert torch.isfinite(b.float()).all(), "replay left outputs unwritten"
        if name in SUMMED_WITH_ATOMICS:
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), "replay and full path differ"
        else:
            assert torch.equal(a, b), "replay and full path differ"


def test_cupy_arrays_on_another_cupy_stream_take_the_full_path(gen, full_path_calls):
    """CuPy's arrays name its current stream as their producer's: while that is not the
    handle's, the full path orders the two streams; back on it, the call replays."""
    cupy = pytest.importorskip("cupy")
    x = randn((8, 64, 14, 14), torch.float16, gen, channels_last=True)
    w = randn((64, 64, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
    cx, cw = cupy.from_dlpack(x), cupy.from_dlpack(w)
    outs = [nan_like(x) for _ in range(3)]
    h = dnn.default_handle()
    h._replays.clear()
    dnn.conv_forward(cx, cw, padding=1, out=cupy.from_dlpack(outs[0]))
    assert h._replays
    torch.cuda.synchronize()
    with cupy.cuda.Stream(non_blocking=True):
        full_path_calls.clear()
        dnn.conv_forward(cx, cw, padding=1, out=cupy.from_dlpack(outs[1]))
        assert full_path_calls, "a CuPy stream other than the handle's was replayed"
    y = dnn.conv_forward(cx, cw, padding=1)      # allocated (another key)
    full_path_calls.clear()
    dnn.conv_forward(cx, cw, padding=1, out=cupy.from_dlpack(outs[2]))
    assert full_path_calls == [], "back on the handle's stream the call was not replayed"
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert torch.equal(torch_of(y), outs[0])
    ref = torch.nn.functional.conv2d(x.float(), w.float(), padding=1)
    assert (outs[0].float() - ref).abs().max().item() < 2e-2 * ref.abs().max().item()


def test_replay_allocates_outputs_in_the_callers_layout(gen, full_path_calls):
    x = randn((8, 64, 14, 14), torch.float16, gen, channels_last=True)
    w = randn((64, 64, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
    y1 = dnn.conv_forward(x, w, padding=1)
    full_path_calls.clear()
    y2 = dnn.conv_forward(x, w, padding=1)
    assert full_path_calls == []
    assert y2.shape == y1.shape and y2.strides == y1.strides and y2.ptr != y1.ptr
    assert torch.equal(torch_of(y1), torch_of(y2))
    ref = torch.nn.functional.conv2d(x.float(), w.float(), padding=1)
    assert (torch_of(y2).float() - ref).abs().max().item() < 2e-2 * ref.abs().max().item()


def test_batch_norm_training_and_backward_replay(gen, full_path_calls):
    x = randn((8, 32, 14, 14), torch.float16, gen, channels_last=True)
    w, b = randn((32,), torch.float32, gen), randn((32,), torch.float32, gen)
    results = []
    for _ in range(2):
        rm, rv = torch.zeros(32, device="cuda"), torch.ones(32, device="cuda")
        full_path_calls.clear()
        y, mean, inv = dnn.batch_norm_training(x, w, b, rm, rv, momentum=0.1)
        dy = torch.ones_like(x)
        dx, dw, db = dnn.batch_norm_backward(dy, x, w, mean, inv)
        results.append((torch_of(y).clone(), torch_of(mean).clone(), torch_of(inv).clone(),
                        rm.clone(), rv.clone(), torch_of(dx).clone(), torch_of(dw).clone(),
                        torch_of(db).clone()))
    assert full_path_calls == [], "the second step was not replayed"
    for a, b_ in zip(*results):
        assert torch.equal(a, b_)
    ref = torch.nn.functional.batch_norm(x.float(), None, None, w, b, training=True)
    assert (results[1][0].float() - ref).abs().max().item() < 1e-2


def test_dropout_replay(gen, full_path_calls):
    x = randn((64, 256), torch.float32, gen) + 3.0
    with dnn.Dropout.create(0.5, seed=7) as layer:
        y1, r1 = layer.forward(x)
        full_path_calls.clear()
        y2, r2 = layer.forward(x)
        dx = layer.backward(x, r2)
        dx2 = layer.backward(x, r2)
        assert full_path_calls == [] or full_path_calls == ["dy", "reserve"]
        y2 = torch_of(y2)
        kept = y2 != 0
        assert 0.3 < kept.float().mean().item() < 0.7
        assert torch.allclose(y2[kept], x[kept] * 2.0)
        assert torch.equal(torch_of(dx), y2) and torch.equal(torch_of(dx2), y2)
        assert not torch.equal(torch_of(y1), y2), "the mask did not change between calls"
        table = dnn.default_handle()._replays
        assert any(k[0][0] == "dropout_fwd" for k in table)
    # The layer's entries (which hold its descriptor and states) go with it.
    assert not any(k[0][0] in ("dropout_fwd", "dropout_bwd") for k in table)


def test_checks_still_made_on_the_replay_path(gen):
    x = randn((8, 64, 14, 14), torch.float16, gen, channels_last=True)
    w = randn((64, 64, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
    y = nan_like(x)
    h = dnn.Handle.create()
    try:
        dnn.conv_forward(x, w, padding=1, out=y, handle=h)
        assert h._replays
        # An output overlapping an input.
        with pytest.raises(ValueError, match="overlaps"):
            dnn.conv_forward(x, w, padding=1, out=x, handle=h)
        # Another element type, shape or layout: the full path's errors.
        with pytest.raises(TypeError):
            dnn.conv_forward(x.float(), w, padding=1, out=y, handle=h)
        with pytest.raises(ValueError):
            dnn.conv_forward(x, w, padding=1, out=y[:, :32], handle=h)
        with pytest.raises(TypeError, match="requires grad"):
            dnn.conv_forward(x.detach().requires_grad_(), w, padding=1, out=y, handle=h)
        buf = rt.empty((8, 14, 14, 64), "f2", stream=h.stream).transpose(0, 3, 1, 2)
        dnn.conv_forward(x, w, padding=1, out=buf, handle=h)
        dnn.conv_forward(x, w, padding=1, out=buf, handle=h)
        buf.close()
        with pytest.raises(ClosedError):
            dnn.conv_forward(x, w, padding=1, out=buf, handle=h)
    finally:
        h.close()
    with pytest.raises(ClosedError):
        dnn.conv_forward(x, w, padding=1, out=y, handle=h)


def test_replayed_calls_capture_into_a_graph(gen):
    dev = rt.Device(0)
    stream = dev.create_stream()
    h = dnn.Handle.create(stream=stream)
    try:
        x = randn((8, 64, 14, 14), torch.float16, gen, channels_last=True)
        w = randn((64, 64, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
        b = randn((64,), torch.float16, gen)
        bw, bb = randn((64,), torch.float32, gen), randn((64,), torch.float32, gen)
        rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
        outs = [nan_like(x) for _ in range(4)]
        pooled = nan_like(torch.empty((8, 64, 7, 7), device="cuda", dtype=torch.float16)
                          .contiguous(memory_format=torch.channels_last))

        def step(o, p):
            dnn.conv_forward(x, w, padding=1, out=o[0], handle=h)
            dnn.conv2d(o[0], w, b, padding=1, activation="relu", out=o[1], handle=h)
            dnn.batch_norm_inference(o[1], bw, bb, rm, rv, out=o[2], handle=h)
            dnn.relu(o[2], out=o[3], handle=h)
            dnn.max_pool2d(o[3], 2, out=p, handle=h)

        torch.cuda.synchronize()
        step(outs, pooled)            # full path: plans, workspace, entries
        h.synchronize()
        expected = [o.clone() for o in outs] + [pooled.clone()]
        for o in outs + [pooled]:
            o.fill_(float("nan"))
        torch.cuda.synchronize()
        with stream.capture() as cap:
            step(outs, pooled)
        exe = cap.graph.instantiate()
        try:
            # Nothing ran during capture.
            assert torch.isnan(outs[0].float()).all()
            for _ in range(2):
                exe.launch(stream)
            stream.synchronize()
        finally:
            exe.close()
            cap.graph.close()
        for got, want in zip(outs + [pooled], expected):
            assert torch.equal(got, want)
    finally:
        h.close()
        stream.close()


def test_replay_on_a_handle_spanning_several_gpus(gen, full_path_calls):
    """What a machine with several GPUs checks per call (the current context, each
    array's device), exercised on one GPU by marking the handle so."""
    x = randn((8, 64, 14, 14), torch.float16, gen, channels_last=True)
    w = randn((64, 64, 3, 3), torch.float16, gen, channels_last=True, scale=0.1)
    h = dnn.Handle.create()
    h._multi = True
    try:
        out = rt.empty((8, 14, 14, 64), "f2", stream=h.stream).transpose(0, 3, 1, 2)
        dnn.conv_forward(x, w, padding=1, out=out, handle=h)
        first = torch_of(out).clone()
        full_path_calls.clear()
        torch_of(out).fill_(float("nan"))
        assert dnn.conv_forward(x, w, padding=1, out=out, handle=h) is out
        assert full_path_calls == []
        torch.cuda.synchronize()
        assert torch.equal(torch_of(out), first)
    finally:
        h.close()
