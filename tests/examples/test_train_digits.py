"""examples/train_digits.py: a CNN on scikit-learn's digits with cuDNN, cuBLAS, gpu_rand
and cupric kernels.

CPU lane: argument parsing, the seeded split and batch orders, the network plan (from
cuDNN's shape arithmetic) and parameter layout, the script's own kernels (loss gradient,
dropout, Adam, SGD with momentum) on the simulator against NumPy and compiled to PTX,
the plot and summary, and the no-GPU notice. GPU lane: the script trains to >= 97% test
accuracy with --check and writes its plot; --compare-torch trains PyTorch beside it.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_digits.py"


def _load_example():
    # The example is a script, not a package module: load it from its path under a name
    # that cannot clash with anything on sys.path.
    spec = importlib.util.spec_from_file_location("cupric_example_train_digits", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # Registered first: dataclasses look their module up in sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


td = _load_example()

F32 = np.float32


# --------------------------------------------------------------------------------------
# Command line


def test_defaults():
    args = td.parse_args([])
    assert (args.epochs, args.batch_size, args.optimizer) == (30, 32, "adam")
    assert args.lr == pytest.approx(5e-3) and args.schedule == "cosine"
    assert args.plot == os.path.join("out", "digits_training.png") and not args.graph
    assert args.progress and not args.check and not args.compare_torch
    assert 0 < args.dropout < 1 and args.test_fraction == pytest.approx(0.2)


def test_sgd_takes_its_own_default_rate_and_explicit_values_win():
    assert td.parse_args(["--optimizer", "sgd"]).lr == pytest.approx(0.05)
    args = td.parse_args(["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.5",
                          "--epochs", "3", "--batch-size", "16", "--dropout", "0",
                          "--seed", "7", "--plot", "x.png", "--check", "--compare-torch",
                          "--no-progress", "--deterministic"])
    assert (args.lr, args.momentum, args.epochs, args.batch_size) == (0.1, 0.5, 3, 16)
    assert (args.dropout, args.seed, args.plot) == (0.0, 7, "x.png")
    assert args.check and args.compare_torch and not args.progress and args.deterministic


def test_learning_rate_schedules():
    cosine = td.parse_args(["--lr", "0.01"])
    assert td.learning_rate(cosine, 0, 100) == pytest.approx(0.01)
    assert td.learning_rate(cosine, 50, 100) == pytest.approx(0.005)
    assert 0 < td.learning_rate(cosine, 99, 100) < 1e-5
    rates = [td.learning_rate(cosine, k, 100) for k in range(100)]
    assert all(a > b for a, b in zip(rates, rates[1:]))
    constant = td.parse_args(["--lr", "0.01", "--schedule", "constant"])
    assert {td.learning_rate(constant, k, 100) for k in range(100)} == {0.01}


@pytest.mark.parametrize("bad", [["--epochs", "0"], ["--batch-size", "-1"],
                                 ["--lr", "0"], ["--dropout", "1"],
                                 ["--test-fraction", "1.0"], ["--optimizer", "rmsprop"],
                                 ["--momentum", "-0.1"], ["--schedule", "step"]])
def test_bad_values_are_refused(bad, capsys):
    with pytest.raises(SystemExit) as info:
        td.parse_args(bad)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# Data


def _fake_digits(n=101):
    images = np.arange(n * 64, dtype=F32).reshape(n, 1, 8, 8)
    labels = (np.arange(n) % 10).astype(np.int32)
    return images, labels


def test_split_is_disjoint_complete_and_seeded():
    images, labels = _fake_digits()
    s = td.split_data(images, labels, 0.2, seed=3)
    assert s.test_x.shape == (20, 1, 8, 8) and s.train_x.shape == (81, 1, 8, 8)
    # Image k holds the numbers 64k..64k+63: its first pixel names it.
    train_ids = (s.train_x[:, 0, 0, 0] // 64).astype(int)
    test_ids = (s.test_x[:, 0, 0, 0] // 64).astype(int)
    assert sorted(np.concatenate([train_ids, test_ids])) == list(range(101))
    assert not set(train_ids) & set(test_ids)
    assert np.array_equal(s.train_y, labels[train_ids])
    assert np.array_equal(s.test_y, labels[test_ids])
    again = td.split_data(images, labels, 0.2, seed=3)
    assert np.array_equal(again.test_x, s.test_x)
    other = td.split_data(images, labels, 0.2, seed=4)
    assert not np.array_equal(other.test_x, s.test_x)
    assert all(a.flags.c_contiguous for a in (s.train_x, s.train_y, s.test_x, s.test_y))


def test_split_refuses_mismatch_and_empty_parts():
    images, labels = _fake_digits(10)
    with pytest.raises(ValueError, match="labels"):
        td.split_data(images, labels[:9], 0.2, 0)
    with pytest.raises(ValueError, match="non-empty"):
        td.split_data(images, labels, 0.01, 0)


def test_batch_orders_cover_each_epoch_once():
    orders = td.batch_orders(70, 32, epochs=3, seed=1)
    assert len(orders) == 3
    for batches in orders:
        assert [len(b) for b in batches] == [32, 32, 6]
        assert sorted(np.concatenate(batches)) == list(range(70))
    assert not np.array_equal(orders[0][0], orders[1][0])      # reshuffled per epoch
    again = td.batch_orders(70, 32, epochs=3, seed=1)
    assert all(np.array_equal(a, b) for x, y in zip(orders, again) for a, b in zip(x, y))


def test_real_digits_when_scikit_learn_is_installed():
    pytest.importorskip("sklearn", reason="scikit-learn (the data set's package) is not "
                                          "installed")
    images, labels = td.load_digits_arrays()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == F32
    assert labels.shape == (1797,) and labels.dtype == np.int32
    assert images.min() == 0.0 and images.max() == 1.0
    assert set(np.unique(labels)) == set(range(10))
    s = td.split_data(images, labels, 0.2, 0)
    assert (len(s.train_y), len(s.test_y)) == (1438, 359)
    assert set(np.unique(s.test_y)) == set(range(10))


# --------------------------------------------------------------------------------------
# The network plan


def test_network_plan_shapes():
    plan = dict(td.network_plan(5))
    assert plan["input"] == (5, 1, 8, 8)
    assert plan["conv1 + bias + ReLU"] == (5, 16, 8, 8)
    assert plan["max-pool1"] == (5, 16, 4, 4)
    assert plan["conv2 + bias + ReLU"] == (5, 32, 4, 4)
    assert plan["max-pool2"] == (5, 32, 2, 2)
    assert plan["flatten"] == (5, td.FEATURES) == (5, 128)
    assert plan["fully connected"] == plan["log-softmax"] == (5, 10)


def test_parameter_layout_is_aligned_and_disjoint():
    layout, total = td.parameter_layout()
    assert set(layout) == set(td.PARAMETERS)
    spans = []
    for name, (offset, shape) in layout.items():
        assert shape == td.PARAMETERS[name][0]
        assert offset % td.PARAMETER_ALIGNMENT == 0
        spans.append((offset, offset + int(np.prod(shape))))
    spans.sort()
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    assert spans[-1][1] <= total and total % td.PARAMETER_ALIGNMENT == 0
    # The fully connected weight is (in, out) for x @ w, fed by the flattened features.
    assert td.PARAMETERS["fc.w"][0] == (td.FEATURES, td.CLASSES)


def test_initialization_scales():
    assert td.init_std("conv1.w") == pytest.approx(np.sqrt(2 / 9))
    assert td.init_std("conv2.w") == pytest.approx(np.sqrt(2 / 144))
    assert td.init_std("fc.w") == pytest.approx(np.sqrt(1 / 128))
    assert td.init_std("conv1.b") == td.init_std("fc.b") == 0.0


# --------------------------------------------------------------------------------------
# The script's kernels on the simulator, against NumPy


def test_nll_loss_grad_matches_numpy(rng):
    b = 37
    logits = rng.standard_normal((b, 10)).astype(F32) * 3
    logp = (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(F32)
    labels = rng.integers(0, 10, b).astype(np.int32)
    dlogp = np.full((b, 10), np.nan, F32)          # poisoned: every element is written
    stats = np.array([0.5, 2.0], F32)              # accumulates onto what is there
    td.nll_loss_grad.simulate[td.blocks_for(b), td.BLOCK](logp, labels, F32(1 / b), dlogp,
                                                          stats)
    want = np.zeros((b, 10), F32)
    want[np.arange(b), labels] = -1 / b
    np.testing.assert_allclose(dlogp, want, rtol=1e-6)
    loss = -logp[np.arange(b), labels].sum(dtype=np.float64)
    correct = (logp.argmax(1) == labels).sum()
    np.testing.assert_allclose(stats[0], 0.5 + loss, rtol=1e-5)
    assert stats[1] == 2.0 + correct


def test_nll_then_log_softmax_backward_is_the_cross_entropy_gradient(rng):
    # cuDNN's log-softmax backward computes dx = dy - exp(y) * sum(dy); with the kernel's
    # dy this must be (softmax - onehot) / B, the textbook gradient.
    b = 9
    logits = rng.standard_normal((b, 10))
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    labels = rng.integers(0, 10, b).astype(np.int32)
    dlogp = np.zeros((b, 10), F32)
    stats = np.zeros(2, F32)
    td.nll_loss_grad.simulate[1, td.BLOCK](logp.astype(F32), labels, F32(1 / b), dlogp,
                                           stats)
    dx = dlogp - np.exp(logp) * dlogp.sum(1, keepdims=True)
    onehot = np.eye(10)[labels]
    np.testing.assert_allclose(dx, (np.exp(logp) - onehot) / b, atol=1e-7)


def test_dropout_apply_matches_numpy(rng):
    n, p = 1000, 0.3
    x = rng.standard_normal(n).astype(F32)
    u = rng.random(n, dtype=F32)
    out = np.full(n, np.nan, F32)
    td.dropout_apply.simulate[td.blocks_for(n), td.BLOCK](x, u, F32(p), F32(1 / (1 - p)),
                                                          out)
    want = np.where(u >= F32(p), x * F32(1 / (1 - p)), F32(0))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert 0.2 < np.mean(out == 0) < 0.4


def _schedule(step, total, args):
    """(counters, hyper) after `advance_schedule` ran on the simulator for `step`."""
    counters = np.array([step, 7], np.int64)
    hyper = np.full(3, np.nan, F32)
    td.advance_schedule.simulate[1, 32](counters, hyper, np.int64(5), np.float64(args.lr),
                                        np.float64(total),
                                        np.int32(args.schedule == "cosine"),
                                        np.float64(0.9), np.float64(0.999))
    return counters, hyper


@pytest.mark.parametrize("schedule", ["cosine", "constant"])
def test_advance_schedule_matches_the_host_schedule(schedule):
    args = td.parse_args(["--lr", "0.01", "--schedule", schedule])
    total = 400
    for step in (0, 1, 199, 399):
        counters, hyper = _schedule(step, total, args)
        assert counters.tolist() == [step + 1, 12]     # one step counted, 5 images on
        np.testing.assert_allclose(hyper[0], td.learning_rate(args, step, total),
                                   rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(hyper[1], 1 - 0.9 ** (step + 1), rtol=1e-6)
        np.testing.assert_allclose(hyper[2], 1 - 0.999 ** (step + 1), rtol=1e-5)


def test_gather_batch_takes_the_rows_the_order_names(rng):
    n, b = 50, 7
    images = rng.random((n, 64), dtype=F32)
    labels = rng.integers(0, 10, n).astype(np.int32)
    order = rng.permutation(n).astype(np.int32)
    counters = np.array([3, 11], np.int64)
    x = np.full((b, 64), np.nan, F32)               # poisoned: every element is written
    y = np.full(b, -1, np.int32)
    td.gather_batch.simulate[td.blocks_for(b * 64), td.BLOCK](images, labels, order,
                                                              counters, x, y)
    rows = order[11:11 + b]
    np.testing.assert_array_equal(x, images[rows])
    np.testing.assert_array_equal(y, labels[rows])
    assert counters.tolist() == [3, 11]             # advance_schedule moves it, not this


def test_adam_update_matches_numpy_over_steps(rng):
    n, lr, b1, b2, eps, wd = 300, 2e-3, 0.9, 0.999, 1e-8, 1e-2
    param = rng.standard_normal(n).astype(F32)
    m = np.zeros(n, F32)
    v = np.zeros(n, F32)
    ref_p, ref_m, ref_v = param.astype(np.float64), np.zeros(n), np.zeros(n)
    # The kernel takes its constants as float32 (0.999 is not a float32 number, and
    # 1 - b2 is its most sensitive term): the reference uses the same constants.
    b1, b2 = float(F32(b1)), float(F32(b2))
    for step in range(1, 4):
        grad = rng.standard_normal(n).astype(F32)
        hyper = np.array([lr, 1 - b1 ** step, 1 - b2 ** step], F32)
        td.adam_update.simulate[td.blocks_for(n), td.BLOCK](
            param, grad, m, v, hyper, F32(b1), F32(b2), F32(eps), F32(wd))
        g = grad + wd * ref_p
        ref_m = b1 * ref_m + (1 - b1) * g
        ref_v = b2 * ref_v + (1 - b2) * g * g
        ref_p = ref_p - lr * (ref_m / (1 - b1 ** step)) / (
            np.sqrt(ref_v / (1 - b2 ** step)) + eps)
    np.testing.assert_allclose(m, ref_m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, ref_v, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(param, ref_p, rtol=1e-5, atol=1e-6)


def test_adam_leaves_zero_padding_zero():
    # Gaps between parameters in the flat buffer have zero value and gradient.
    n = 64
    param, grad, m, v = (np.zeros(n, F32) for _ in range(4))
    hyper = np.array([1e-3, 0.1, 0.001], F32)
    td.adam_update.simulate[1, td.BLOCK](param, grad, m, v, hyper, F32(0.9), F32(0.999),
                                         F32(1e-8), F32(0.0))
    assert not param.any() and not m.any() and not v.any()


def test_sgd_momentum_update_matches_numpy(rng):
    n, lr, mu, wd = 257, 0.05, 0.9, 1e-3
    param = rng.standard_normal(n).astype(F32)
    vel = np.zeros(n, F32)
    ref_p, ref_v = param.astype(np.float64), np.zeros(n)
    hyper = np.array([lr, np.nan, np.nan], F32)     # SGD reads the rate alone
    for _ in range(3):
        grad = rng.standard_normal(n).astype(F32)
        td.sgd_momentum_update.simulate[td.blocks_for(n), td.BLOCK](
            param, grad, vel, hyper, F32(mu), F32(wd))
        ref_v = mu * ref_v + grad + wd * ref_p
        ref_p = ref_p - lr * ref_v
    np.testing.assert_allclose(vel, ref_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(param, ref_p, rtol=1e-5, atol=1e-6)


A1 = "Array[{}, 1, 'C']"
A2 = "Array[{}, 2, 'C']"


@pytest.mark.parametrize("name,signature", [
    ("nll_loss_grad", f"{A2.format('f32')}, {A1.format('i32')}, f32, {A2.format('f32')}, "
                      f"{A1.format('f32')}"),
    ("dropout_apply", f"{A1.format('f32')}, {A1.format('f32')}, f32, f32, "
                      f"{A1.format('f32')}"),
    ("adam_update", ", ".join([A1.format("f32")] * 5 + ["f32"] * 4)),
    ("sgd_momentum_update", ", ".join([A1.format("f32")] * 4 + ["f32"] * 2)),
    ("gather_batch", f"{A2.format('f32')}, {A1.format('i32')}, {A1.format('i32')}, "
                     f"{A1.format('i64')}, {A2.format('f32')}, {A1.format('i32')}"),
    ("advance_schedule", f"{A1.format('i64')}, {A1.format('f32')}, i64, f64, f64, i32, "
                         f"f64, f64"),
])
def test_kernels_compile_to_ptx(name, signature):
    from cupric.compiler.toolchain import ToolchainNotFoundError
    try:
        ptx = getattr(td, name).inspect_ptx(signature, arch="sm_90")
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no libNVVM here: {exc}")
    assert ".entry" in ptx
    if name == "advance_schedule":
        # One thread: libdevice's double cos keeps its slow-path argument reduction in
        # local memory, and the pow and cos calls are inlined.
        assert ".extern" not in ptx
    else:
        assert ".local" not in ptx
    if name == "nll_loss_grad":
        assert "atom.global.add.f32" in ptx or "red.global.add.f32" in ptx


# --------------------------------------------------------------------------------------
# Reporting and the no-GPU path


def _records(n=4):
    return [td.EpochRecord(e, 1.0 / e, 0.8 + 0.04 * e, 1.2 / e, 0.78 + 0.045 * e,
                           0.5 if e == 1 else 0.01 * e) for e in range(1, n + 1)]


def test_summary_separates_the_first_epoch():
    line = td.summarize("cupric", _records())
    assert "final test accuracy 0.9600" in line and "best 0.9600" in line
    assert "first epoch 500.0 ms" in line and "median epoch after it 30.0 ms" in line


def test_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    path = tmp_path / "digits.png"
    td.write_plot(str(path), {"cupric": _records(), "torch": _records()})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_without_tqdm_prints_lines(capsys):
    callback, close = td.make_progress(td.parse_args(["--no-progress", "--epochs", "4"]),
                                       "cupric")
    callback(_records()[0])
    close()
    out = capsys.readouterr().out
    assert "[cupric] epoch   1/4" in out and "test acc 0.8250" in out


def test_without_a_gpu_it_says_so_and_exits_0(capsys, tmp_path):
    if td.gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: the script would train")
    plot = tmp_path / "p.png"
    assert td.main(["--no-progress", "--plot", str(plot)]) == 0
    err = capsys.readouterr().err
    assert "needs an NVIDIA GPU" in err and "nothing was trained" in err
    assert not plot.exists()


def test_missing_optional_packages_are_named_before_training(monkeypatch):
    import importlib.util
    absent = set()
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in absent else object())
    assert td.missing_packages(td.parse_args(["--compare-torch"])) == []
    absent |= {"tqdm", "torch"}
    missing = td.missing_packages(td.parse_args(["--compare-torch"]))
    assert [m.split()[0] for m in missing] == ["tqdm", "torch"]
    assert td.missing_packages(td.parse_args(["--no-progress"])) == []
    absent.add("sklearn")
    assert td.missing_packages(td.parse_args(["--no-progress"])) == [
        "scikit-learn (the digits data set)"]


def test_simulator_setting_is_a_no_gpu_notice(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    assert "simulator" in td.gpu_unavailable_reason()


# --------------------------------------------------------------------------------------
# The training code itself, with NumPy standing in for the GPU libraries
#
# cuDNN and cuBLAS do not run without a GPU, but the code that calls them can: each
# library function the script uses is replaced by a NumPy implementation that first
# binds its arguments to the real function's signature (so a misspelt keyword or a
# missing argument fails here as it would on the GPU), checks dtypes and shapes, and
# computes in float64. The script's own kernels run on cupric's simulator
# (CUPRIC_SIMULATOR=1) and gpu_rand fills the NumPy arrays with its host half. This
# checks the wiring of the forward and backward passes (gradients against finite
# differences), the optimizer step and the training loop; the GPU lane checks the
# libraries themselves.


class HostBuffer(np.ndarray):
    """A NumPy array with the DeviceBuffer methods the script calls (`to_numpy`,
    `zero`)."""

    def to_numpy(self, stream=None):
        return np.array(self)

    def zero(self, stream=None):
        self[...] = 0


def _host(a, dtype=F32):
    return np.ascontiguousarray(a, dtype=dtype).view(HostBuffer)


def _store(result, out):
    if out is None:
        return _host(result)
    assert out.shape == result.shape and out.dtype == F32, (out.shape, result.shape)
    out[...] = result
    return out


def _f32(*arrays):
    for a in arrays:
        assert isinstance(a, HostBuffer), type(a)
        assert a.dtype == F32, a.dtype


def _dense(*arrays):
    # cuDNN takes dense NCHW (or NHWC); the script's tensors are all NCHW.
    for a in arrays:
        assert a.flags.c_contiguous, a.strides


def _patches(x):
    """(B, C*9, H*W) of 3x3 windows of x padded by 1."""
    b, c, h, w = x.shape
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((b, c, 3, 3, h, w))
    for r in range(3):
        for s in range(3):
            cols[:, :, r, s] = xp[:, :, r:r + h, s:s + w]
    return cols.reshape(b, c * 9, h * w)


def _conv_geometry(stride, padding, dilation, groups, w_shape):
    assert (stride, padding, dilation, groups) == (1, 1, 1, 1)
    assert tuple(w_shape[2:]) == (3, 3)


def conv2d(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
           activation=None, out=None, handle=None, stream=None, options=None):
    _f32(x, w)
    _dense(x, w)
    _conv_geometry(stride, padding, dilation, groups, w.shape)
    k = w.shape[0]
    y = np.einsum("kc,bcp->bkp", np.asarray(w, np.float64).reshape(k, -1), _patches(x))
    if bias is not None:
        _f32(bias)
        y = y + np.asarray(bias, np.float64)[None, :, None]
    assert activation in (None, "relu")
    if activation == "relu":
        y = np.maximum(y, 0)
    return _store(y.reshape(x.shape[0], k, *x.shape[2:]), out)


def max_pool2d(x, kernel_size, stride=None, padding=0, *, out=None, handle=None,
               stream=None):
    _f32(x)
    _dense(x)
    assert (kernel_size, stride, padding) == (2, None, 0)
    b, c, h, w = x.shape
    return _store(np.asarray(x).reshape(b, c, h // 2, 2, w // 2, 2).max(axis=(3, 5)), out)


def pool_backward(dy, x, y, mode="max", *, window, stride=None, padding=0, out=None,
                  handle=None, stream=None):
    _f32(dy, x, y)
    _dense(dy, x, y)
    assert (mode, window, stride, padding) == ("max", 2, None, 0)
    b, c, h, w = x.shape
    assert y.shape == dy.shape == (b, c, h // 2, w // 2)
    windows = np.asarray(x).reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    windows = windows.reshape(b, c, h // 2, w // 2, 4)
    # The whole gradient goes to one maximum of each window (the first), as cuDNN's.
    first = windows.argmax(-1)
    dx = np.zeros(windows.shape)
    np.put_along_axis(dx, first[..., None], np.asarray(dy, np.float64)[..., None], -1)
    dx = dx.reshape(b, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return _store(dx.reshape(b, c, h, w), out)


def activation_backward(dy, x, y=None, mode="relu", *, out=None, alpha=None, clip=None,
                        beta=1.0, handle=None, stream=None):
    _f32(dy, x)
    assert mode == "relu" and dy.shape == x.shape
    return _store(np.where(np.asarray(x) > 0, np.asarray(dy, np.float64), 0.0), out)


def conv_backward_filter(x, dy, filter_shape, *, stride=1, padding=0, dilation=1,
                         groups=1, out=None, handle=None, stream=None, options=None):
    _f32(x, dy)
    _dense(x, dy)
    _conv_geometry(stride, padding, dilation, groups, filter_shape)
    b, k = dy.shape[:2]
    dw = np.einsum("bkp,bcp->kc", np.asarray(dy, np.float64).reshape(b, k, -1),
                   _patches(x))
    return _store(dw.reshape(filter_shape), out)


def conv_backward_bias(dy, *, out=None, handle=None, stream=None):
    _f32(dy)
    return _store(np.asarray(dy, np.float64).sum(axis=(0, 2, 3)), out)


def conv_backward_data(dy, w, input_shape, *, stride=1, padding=0, dilation=1, groups=1,
                       out=None, handle=None, stream=None, options=None):
    _f32(dy, w)
    _dense(dy, w)
    _conv_geometry(stride, padding, dilation, groups, w.shape)
    b, c, h, wd = input_shape
    k = w.shape[0]
    cols = np.einsum("kc,bkp->bcp", np.asarray(w, np.float64).reshape(k, -1),
                     np.asarray(dy, np.float64).reshape(b, k, -1))
    cols = cols.reshape(b, c, 3, 3, h, wd)
    dx = np.zeros((b, c, h + 2, wd + 2))
    for r in range(3):
        for s in range(3):
            dx[:, :, r:r + h, s:s + wd] += cols[:, :, r, s]
    return _store(dx[:, :, 1:-1, 1:-1], out)


def log_softmax(x, axis=-1, *, out=None, handle=None, stream=None):
    _f32(x)
    z = np.asarray(x, np.float64)
    z = z - z.max(axis, keepdims=True)
    return _store(z - np.log(np.exp(z).sum(axis, keepdims=True)), out)


def softmax_backward(y, dy, axis=-1, *, log=False, out=None, handle=None, stream=None):
    _f32(y, dy)
    assert log and y.strides == dy.strides
    y64, dy64 = np.asarray(y, np.float64), np.asarray(dy, np.float64)
    return _store(dy64 - np.exp(y64) * dy64.sum(axis, keepdims=True), out)


def linear(x, weight, bias=None, *, activation=None, out=None, save_aux=False,
           handle=None):
    _f32(x, weight)
    assert activation is None and not save_aux
    y = np.asarray(x, np.float64) @ np.asarray(weight, np.float64)
    if bias is not None:
        _f32(bias)
        y = y + np.asarray(bias, np.float64)
    return _store(y, out)


def matmul(a, b, out=None, alpha=1.0, beta=0.0, *, precision=None, handle=None):
    _f32(a, b)
    assert alpha == 1.0 and beta == 0.0
    return _store(np.asarray(a, np.float64) @ np.asarray(b, np.float64), out)


def _bound_to(real, impl):
    signature = inspect.signature(real)

    def fake(*args, **kwargs):
        signature.bind(*args, **kwargs)    # a TypeError here is one on the GPU too
        return impl(*args, **kwargs)
    return fake


@pytest.fixture
def numpy_gpu(monkeypatch):
    """Run the script's GPU code with the NumPy stand-ins above (see the section note)."""
    import cupric.cublas
    import cupric.cudnn
    import cupric.runtime
    from cupric.cublas import api as cublas_api
    from cupric.cudnn import api as cudnn_api
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    for name in ("conv2d", "max_pool2d", "pool_backward", "activation_backward",
                 "conv_backward_filter", "conv_backward_bias", "conv_backward_data",
                 "log_softmax", "softmax_backward"):
        monkeypatch.setattr(cupric.cudnn, name,
                            _bound_to(getattr(cudnn_api, name), globals()[name]))
    for name in ("linear", "matmul"):
        monkeypatch.setattr(cupric.cublas, name,
                            _bound_to(getattr(cublas_api, name), globals()[name]))

    def empty(shape, dtype=np.float64, stream=None):
        # Poisoned: an unwritten element shows (NaN, or -1 for integers).
        poison = np.nan if np.dtype(dtype).kind == "f" else -1
        return _host(np.full(shape, poison), dtype)

    def zeros(shape, dtype=np.float64, stream=None):
        return _host(np.zeros(shape), dtype)

    def to_device(array, stream=None):
        return _host(array, np.asarray(array).dtype)

    for name, impl in (("empty", empty), ("zeros", zeros), ("to_device", to_device)):
        monkeypatch.setattr(cupric.runtime, name,
                            _bound_to(getattr(cupric.runtime, name), impl))


def _net(args_list):
    net = td.CupricNet(td.parse_args(args_list))
    assert all(isinstance(v, HostBuffer) for v in net.params.values())
    return net


def test_initial_weights_come_from_gpu_rand_with_he_scales(numpy_gpu):
    net = _net(["--seed", "5"])
    flat = net.flat.to_numpy()
    for name, view in net.params.items():
        values = view.to_numpy()
        assert np.shares_memory(view, net.flat)
        if td.init_std(name) == 0:
            assert not values.any()
        else:
            assert abs(values.std() / td.init_std(name) - 1) < 0.25, name
    used = np.zeros(flat.size, bool)
    for offset, shape in net.layout.values():
        used[offset:offset + int(np.prod(shape))] = True
    assert not flat[~used].any()        # the alignment gaps stay zero
    # The same seed gives the same weights (PyTorch's run starts from a copy of them).
    again = _net(["--seed", "5"]).flat.to_numpy()
    assert np.array_equal(flat, again)
    assert not np.array_equal(flat, _net(["--seed", "6"]).flat.to_numpy())


def _loss(net, x, labels, train=False):
    from cupric.runtime import to_device, zeros
    stats = zeros(2, F32)
    saved, logp = net.forward(to_device(x), train=train)
    dlogp = net.loss(logp, to_device(labels), stats)
    return saved, logp, dlogp, stats


class _FixedDraws:
    """Stands in for the dropout generator: the same uniform draws every call, so that
    a forward pass with dropout is a fixed function of the weights."""

    def __init__(self, u):
        self.u = u

    def random(self, size=None, dtype=np.float64, out=None):
        out[...] = self.u
        return out


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_backward_matches_finite_differences(numpy_gpu, dropout):
    net = _net(["--dropout", str(dropout), "--seed", "3"])
    gen = np.random.default_rng(11)
    train = dropout > 0
    # Nonzero biases and continuous inputs keep every ReLU and pooling window away from
    # ties, where a finite difference is not a derivative.
    for name in ("conv1.b", "conv2.b", "fc.b"):
        net.params[name][...] = gen.standard_normal(net.params[name].shape) * 0.1
    b = 5
    x = gen.standard_normal((b, 1, 8, 8)).astype(F32)
    labels = gen.integers(0, 10, b).astype(np.int32)
    net.dropout_rng = _FixedDraws(gen.random((b, td.FEATURES), dtype=F32))
    saved, logp, dlogp, stats = _loss(net, x, labels, train)
    assert (saved[6] is not None) == train
    mean_loss = -logp.to_numpy()[np.arange(b), labels].astype(np.float64).mean()
    assert stats.to_numpy()[0] / b == pytest.approx(mean_loss, rel=1e-5)
    for view in net.grads.values():
        view[...] = np.nan                      # poisoned: backward writes every one
    net.backward(saved, logp, dlogp)

    def loss_at():
        _s, lp, _d, _st = _loss(net, x, labels, train)
        return -lp.to_numpy()[np.arange(b), labels].astype(np.float64).mean()

    base = loss_at()

    def differences(flat_view, i, eps):
        old = float(flat_view[i])
        flat_view[i] = old + eps
        up = loss_at()
        flat_view[i] = old - eps
        down = loss_at()
        flat_view[i] = old
        # Central, right and left differences: a step may cross a ReLU or pooling kink
        # on one side, where the derivative is the other side's.
        return [(up - down) / (2 * eps), (up - base) / eps, (base - down) / eps]

    for name, view in net.params.items():
        grad = net.grads[name].to_numpy().ravel()
        assert np.isfinite(grad).all(), name
        flat_view = view.reshape(-1)
        picks = gen.choice(flat_view.size, min(12, flat_view.size), replace=False)
        for i in picks:
            numeric = differences(flat_view, i, 1e-3)
            if not any(grad[i] == pytest.approx(d, rel=5e-2, abs=2e-3) for d in numeric):
                # A kink on both sides within 1e-3: closer steps (float32 losses allow
                # about 2e-4 before rounding dominates).
                numeric += differences(flat_view, i, 2e-4)
            assert any(grad[i] == pytest.approx(d, rel=5e-2, abs=2e-3) for d in numeric), \
                (name, i, grad[i], numeric)


def test_dropout_scales_kept_features_and_zeroes_the_rest(numpy_gpu):
    net = _net(["--dropout", "0.5", "--seed", "2"])
    x = np.random.default_rng(0).standard_normal((6, 1, 8, 8)).astype(F32)
    from cupric.runtime import to_device
    saved, _logp = net.forward(to_device(x), train=True)
    h, u = saved[5].to_numpy(), saved[6].to_numpy()
    kept = u >= F32(0.5)
    features = saved[4].to_numpy().reshape(6, -1)
    np.testing.assert_allclose(h, np.where(kept, features * 2, 0), rtol=1e-6)
    assert 0.3 < kept.mean() < 0.7
    # Evaluation draws no mask.
    saved, _ = net.forward(to_device(x), train=False)
    assert saved[6] is None


def test_training_loop_learns_on_the_stand_ins(numpy_gpu):
    gen = np.random.default_rng(4)
    # Two separable classes of blobs: a few steps must already separate them.
    n = 96
    labels = (np.arange(n) % 2).astype(np.int32)
    images = gen.random((n, 1, 8, 8)).astype(F32) * 0.3
    images[labels == 1, :, :4] += 0.7
    split = td.split_data(images, labels, 0.25, seed=0)
    args = td.parse_args(["--epochs", "3", "--batch-size", "24", "--no-progress", "--lr",
                          "0.01", "--schedule", "constant"])
    orders = td.batch_orders(len(split.train_y), args.batch_size, args.epochs, args.seed)
    seen = []
    records = td.train_cupric(td.CupricNet(args), split, orders, seen.append)
    assert seen == records and [r.epoch for r in records] == [1, 2, 3]
    assert records[-1].train_loss < records[0].train_loss
    assert records[-1].test_accuracy >= 0.9
    assert all(r.seconds > 0 for r in records)


def test_main_runs_end_to_end_on_the_stand_ins(numpy_gpu, monkeypatch, tmp_path, capsys):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    import cupric.cublas
    import cupric.cudnn
    monkeypatch.setattr(td, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(td, "training_stream", lambda: None)   # the stand-ins take none
    monkeypatch.setattr(cupric.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(cupric.cublas, "is_available", lambda: True)
    plot = tmp_path / "digits.png"
    status = td.main(["--epochs", "2", "--batch-size", "64", "--no-progress", "--plot",
                      str(plot), "--lr", "0.01"])
    out = capsys.readouterr().out
    assert status == 0
    assert "1438 training and 359 test images" in out
    assert re.search(r"^cupric: final test accuracy 0\.[0-9]{4}", out, re.M)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    accuracy = float(re.search(r"final test accuracy ([0-9.]+)", out).group(1))
    print(out)
    assert accuracy > 0.9      # two short epochs already get most digits right


# --------------------------------------------------------------------------------------
# GPU lane


def _run_script(*args, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                      env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("CUPRIC_SIMULATOR", None)
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _final_accuracy(stdout: str, label: str) -> float:
    match = re.search(rf"^{label}: final test accuracy ([0-9.]+)", stdout, re.M)
    assert match, f"no {label} summary in:\n{stdout}"
    return float(match.group(1))


@pytest.mark.gpu
def test_trains_to_97_percent_and_writes_the_plot(tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    plot = tmp_path / "digits.png"
    proc = _run_script("--epochs", "20", "--check", "--no-progress", "--plot", str(plot))
    print(proc.stdout[-6000:])
    print(proc.stderr[-6000:], file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _final_accuracy(proc.stdout, "cupric") >= 0.97
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.gpu
def test_compare_torch(tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    pytest.importorskip("torch", reason="PyTorch is not installed")
    pytest.importorskip("tqdm", reason="tqdm is not installed")
    plot = tmp_path / "compare.png"
    # With the progress bar on, as a person runs it (tqdm draws on stderr).
    proc = _run_script("--epochs", "20", "--compare-torch", "--check", "--plot",
                       str(plot))
    print(proc.stdout[-6000:])
    print(proc.stderr[-6000:], file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _final_accuracy(proc.stdout, "cupric") >= 0.97
    # Same network, same start, same batches: PyTorch lands in the same place.
    assert _final_accuracy(proc.stdout, "torch") >= 0.95
    assert re.search(r"^torch: .*median epoch after it [0-9.]+ ms", proc.stdout, re.M)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _digits_or_skip():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    images, labels = td.load_digits_arrays()
    return td.split_data(images, labels, 0.2, seed=0)


@pytest.mark.gpu
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_replayed_graph_steps_equal_eager_steps(optimizer):
    # Two epochs of batches of 64: every step after the first of each batch size (64,
    # and the epoch's last, 30) is a graph replay. Deterministic cuDNN engines, the same
    # seeds and the same dropout draws: the parameters and the optimizer state must be
    # bitwise those of the eager run.
    from cupric.runtime import Device
    split = _digits_or_skip()
    args = td.parse_args(["--epochs", "2", "--batch-size", "64", "--deterministic",
                          "--dropout", "0.3", "--optimizer", optimizer, "--no-progress"])
    orders = td.batch_orders(len(split.train_y), args.batch_size, args.epochs, args.seed)
    runs = {}
    for graph in (False, True):
        net = td.CupricNet(args, stream=Device.current().create_stream())
        records = td.train_cupric(net, split, orders, lambda r: None, graph=graph)
        runs[graph] = (net.flat.to_numpy(), net.m_flat.to_numpy(), net.v_flat.to_numpy(),
                       net.counters.to_numpy(), records)
    eager, replayed = runs[False], runs[True]
    steps = sum(len(batches) for batches in orders)
    assert eager[3].tolist() == replayed[3].tolist() == [steps, len(split.train_y) * 2]
    for a, b in zip(eager[:3], replayed[:3]):
        assert np.isfinite(a).all()
        assert np.array_equal(a, b), np.abs(a - b).max()
    assert not np.array_equal(eager[0], td.CupricNet(args).flat.to_numpy())  # it trained
    for r_eager, r_graph in zip(eager[4], replayed[4]):
        assert r_eager.train_loss == pytest.approx(r_graph.train_loss, rel=1e-5)
        assert r_eager.test_accuracy == r_graph.test_accuracy


@pytest.mark.gpu
def test_graph_run_beside_torch_graphs(tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    pytest.importorskip("torch", reason="PyTorch is not installed")
    plot = tmp_path / "graph.png"
    proc = _run_script("--epochs", "20", "--graph", "--compare-torch", "--check",
                       "--no-progress", "--plot", str(plot))
    print(proc.stdout[-6000:])
    print(proc.stderr[-6000:], file=sys.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _final_accuracy(proc.stdout, "cupric graph") >= 0.97
    assert _final_accuracy(proc.stdout, "torch graph") >= 0.95
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
