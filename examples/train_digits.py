"""Train a small CNN on scikit-learn's digits with cupric alone: cuDNN convolutions,
pooling, ReLU and log-softmax, a cuBLAS(Lt) fully connected layer, gpu_rand for weight
initialization and dropout, and kernels compiled by cupric for the loss gradient,
dropout masks and the optimizer (Adam or SGD with momentum).

    python3 examples/train_digits.py [--epochs 30] [--optimizer adam] [--check]
                                     [--plot digits_training.png] [--compare-torch]

The network (NCHW, float32):

    x (B, 1, 8, 8)
    -> conv 3x3 pad 1 (1 -> 16) + bias + ReLU -> max-pool 2   (B, 16, 4, 4)
    -> conv 3x3 pad 1 (16 -> 32) + bias + ReLU -> max-pool 2  (B, 32, 2, 2)
    -> flatten (B, 128) -> dropout -> fully connected 128 -> 10
    -> log-softmax -> negative log-likelihood

It needs an NVIDIA GPU (cuDNN and cuBLAS do not run on cupric's CPU simulator); without
one it says so and exits 0. Optional packages: scikit-learn (the data set ships inside
it: no download), tqdm (progress bar), matplotlib (the plot), torch (--compare-torch).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time

import numpy as np

import cupric
from cupric.device import atomic, grid
from cupric.types import Array, f32, f64, i32, i64

CLASSES = 10
IMAGE = 8            # digits are 8x8 grayscale images with values 0..16
PIXEL_MAX = 16.0
BLOCK = 256          # threads per block of the cupric kernels below
# Each parameter starts on a 64-element (256-byte) boundary of the one flat buffer that
# holds them all, so every view handed to cuDNN/cuBLAS is as aligned as an allocation.
PARAMETER_ALIGNMENT = 64


# --------------------------------------------------------------------------------------
# Command line


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (`argv` None reads ``sys.argv``).

    Returns
    -------
    argparse.Namespace
        epochs, batch_size, optimizer, lr, schedule, momentum, weight_decay, dropout,
        test_fraction, seed, deterministic, graph, plot, check, compare_torch, progress.

    Raises
    ------
    SystemExit
        For an unknown option or a value out of range (argparse's usage message).
    """
    parser = argparse.ArgumentParser(
        description="Train a small CNN on scikit-learn's digits with cupric (cuDNN, "
                    "cuBLAS, gpu_rand and cupric kernels).")
    parser.add_argument("--epochs", type=_positive_int, default=30,
                        help="passes over the training set (default 30)")
    parser.add_argument("--batch-size", type=_positive_int, default=32,
                        help="images per optimizer step (default 32)")
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                        help="Adam, or SGD with momentum")
    parser.add_argument("--lr", type=_positive_float, default=None,
                        help="peak learning rate (default 5e-3 for Adam, 0.05 for SGD)")
    parser.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                        help="learning rate over the run: cosine decay to 0 by the last "
                             "step (default), or constant")
    parser.add_argument("--momentum", type=_unit_float, default=0.9,
                        help="SGD momentum (default 0.9)")
    parser.add_argument("--weight-decay", type=_non_negative_float, default=0.0,
                        help="L2 penalty added to the gradients (default 0)")
    parser.add_argument("--dropout", type=_unit_float, default=0.1,
                        help="dropout probability before the fully connected layer "
                             "(default 0.1; 0 turns it off)")
    parser.add_argument("--test-fraction", type=_fraction, default=0.2,
                        help="share of the images held out for testing (default 0.2)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the split, the batch order, the initial weights and "
                             "the dropout masks (default 0)")
    parser.add_argument("--deterministic", action="store_true",
                        help="ask cuDNN for deterministic convolution engines")
    parser.add_argument("--graph", action="store_true",
                        help="capture one training step (forward, backward, optimizer, "
                             "dropout draws, loss) into a CUDA graph and replay it each "
                             "step; with --compare-torch, PyTorch runs under "
                             "torch.cuda.CUDAGraph too")
    parser.add_argument("--plot", default=os.path.join("out", "digits_training.png"),
                        help="where the loss/accuracy plot goes (PNG; default "
                             "out/digits_training.png, its folder made when missing)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the final test accuracy is below 0.97")
    parser.add_argument("--compare-torch", action="store_true",
                        help="also train the same network (same initial weights, same "
                             "batches) in PyTorch and compare accuracies and epoch times")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no tqdm progress bar")
    args = parser.parse_args(argv)
    if args.lr is None:
        args.lr = 5e-3 if args.optimizer == "adam" else 0.05
    return args


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _unit_float(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


# --------------------------------------------------------------------------------------
# Data


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 digits as ``(images (N, 1, 8, 8) float32 in [0, 1], labels (N,) int32)``.

    Raises
    ------
    ImportError
        When scikit-learn is not installed (the data set ships inside it).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise ImportError("this example reads scikit-learn's digits data set, which ships "
                          "inside the package: pip install scikit-learn") from exc
    digits = load_digits()
    images = (digits.images.astype(np.float32) / PIXEL_MAX).reshape(-1, 1, IMAGE, IMAGE)
    return np.ascontiguousarray(images), digits.target.astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Split:
    """A fixed train/test split of images (N, 1, 8, 8) and labels (N,)."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def split_data(images: np.ndarray, labels: np.ndarray, test_fraction: float,
               seed: int) -> Split:
    """Shuffle with `seed`, then hold out ``round(N * test_fraction)`` images for testing.

    The same seed always gives the same split, whatever else the run does (the split has
    a generator of its own).

    Raises
    ------
    ValueError
        When images and labels differ in length, or either part would be empty.
    """
    n = len(images)
    if len(labels) != n:
        raise ValueError(f"{n} images but {len(labels)} labels")
    n_test = int(round(n * test_fraction))
    if not 0 < n_test < n:
        raise ValueError(f"a test fraction of {test_fraction} leaves {n_test} of {n} "
                         f"images for testing; both parts must be non-empty")
    order = np.random.default_rng([seed, 0]).permutation(n)
    test, train = order[:n_test], order[n_test:]
    return Split(np.ascontiguousarray(images[train]), np.ascontiguousarray(labels[train]),
                 np.ascontiguousarray(images[test]), np.ascontiguousarray(labels[test]))


def batch_orders(n: int, batch_size: int, epochs: int, seed: int) -> list[list[np.ndarray]]:
    """For each epoch, the indices of each minibatch (a fresh permutation per epoch; the
    last batch of an epoch may be smaller). Both the cupric and the PyTorch runs take
    these, so that they see the same batches in the same order."""
    rng = np.random.default_rng([seed, 1])
    orders = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        orders.append([perm[i:i + batch_size] for i in range(0, n, batch_size)])
    return orders


# --------------------------------------------------------------------------------------
# The network plan: shapes only, no GPU


FEATURES = 32 * 2 * 2  # flattened output of the second block

# name -> (shape, fan_in of the He/Kaiming initialization; None: zeros)
PARAMETERS = {
    "conv1.w": ((16, 1, 3, 3), 1 * 3 * 3),
    "conv1.b": ((16,), None),
    "conv2.w": ((32, 16, 3, 3), 16 * 3 * 3),
    "conv2.b": ((32,), None),
    "fc.w": ((FEATURES, CLASSES), FEATURES),   # (K, N): cuBLAS's linear computes x @ w
    "fc.b": ((CLASSES,), None),
}


def init_std(name: str) -> float:
    """Standard deviation of a weight's normal initialization: He/Kaiming,
    sqrt(2 / fan_in), for the ReLU convolutions; sqrt(1 / fan_in) for the last layer,
    which no ReLU follows (the gain of a linear layer is 1)."""
    _shape, fan_in = PARAMETERS[name]
    if fan_in is None:
        return 0.0
    gain = 1.0 if name.startswith("fc.") else 2.0
    return math.sqrt(gain / fan_in)


def parameter_layout() -> tuple[dict[str, tuple[int, tuple[int, ...]]], int]:
    """Offsets of the parameters in one flat float32 buffer, and its length.

    Returns
    -------
    (layout, total)
        layout maps a name to (offset, shape); offsets are multiples of
        `PARAMETER_ALIGNMENT`, and the gaps stay zero (so an optimizer step over the
        whole buffer leaves them zero).
    """
    layout, offset = {}, 0
    for name, (shape, _fan_in) in PARAMETERS.items():
        layout[name] = (offset, shape)
        size = math.prod(shape)
        offset += -(-size // PARAMETER_ALIGNMENT) * PARAMETER_ALIGNMENT
    return layout, offset


def network_plan(batch: int) -> list[tuple[str, tuple[int, ...]]]:
    """(step, output shape) of each step of the forward pass for a batch, computed with
    cuDNN's own shape arithmetic (pure Python: no GPU).

    Examples
    --------
    >>> network_plan(4)[-1]
    ('log-softmax', (4, 10))
    """
    from cupric.cudnn import conv_output_shape, pool_output_shape
    x = (batch, 1, IMAGE, IMAGE)
    plan = [("input", x)]
    for block, w_name in ((1, "conv1.w"), (2, "conv2.w")):
        w = PARAMETERS[w_name][0]
        x = conv_output_shape(x, w, padding=1)
        plan.append((f"conv{block} + bias + ReLU", x))
        x = pool_output_shape(x, 2)
        plan.append((f"max-pool{block}", x))
    features = math.prod(x[1:])
    if features != FEATURES:
        raise AssertionError(f"the second block gives {features} features per image, "
                             f"but the fully connected layer takes {FEATURES}")
    plan.append(("flatten", (batch, features)))
    plan.append(("fully connected", (batch, CLASSES)))
    plan.append(("log-softmax", (batch, CLASSES)))
    return plan


# --------------------------------------------------------------------------------------
# Kernels compiled by cupric (they also run on the simulator: the CPU test checks them)


@cupric.kernel
def nll_loss_grad(logp: Array[f32, 2], labels: Array[i32, 1], scale: f32,
                  dlogp: Array[f32, 2], stats: Array[f32, 1]):
    """Negative log-likelihood of log-probabilities, one thread per row.

    Writes ``dlogp = d(scale * sum_i -logp[i, labels[i]]) / d logp`` (``-scale`` at the
    label, 0 elsewhere) and adds the row's loss to ``stats[0]`` and 1 to ``stats[1]``
    when the row's largest log-probability is at its label (first maximum, as argmax).
    """
    i = grid(1)
    if i < logp.shape[0]:
        label = labels[i]
        best = 0
        for c in range(logp.shape[1]):
            dlogp[i, c] = f32(0.0)
            if logp[i, c] > logp[i, best]:
                best = c
        dlogp[i, label] = -scale
        atomic.add(stats, 0, -logp[i, label])
        if best == label:
            atomic.add(stats, 1, f32(1.0))


@cupric.kernel
def dropout_apply(x: Array[f32, 1], u: Array[f32, 1], p: f32, scale: f32,
                  out: Array[f32, 1]):
    """``out = x * scale`` where ``u >= p``, else 0: inverted dropout with the uniform
    draws `u` in [0, 1) (scale = 1 / (1 - p)). The backward pass applies the same `u`
    to the gradient."""
    i = grid(1)
    if i < len(x):
        out[i] = x[i] * scale if u[i] >= p else f32(0.0)


@cupric.kernel
def gather_batch(images: Array[f32, 2], labels: Array[i32, 1], order: Array[i32, 1],
                 counters: Array[i64, 1], x: Array[f32, 2], y: Array[i32, 1]):
    """Copy the next minibatch out of the training set on the device: row ``r`` of `x`
    (and `y`) is image ``order[counters[1] + r]``. ``counters[1]``, the position in the
    run's order, is advanced by `advance_schedule` after the step, so the same launch
    (and a graph holding it) takes a new batch each time."""
    i = grid(1)
    width = x.shape[1]
    if i < x.shape[0] * width:
        row = i // width
        col = i - row * width
        source = order[counters[1] + row]
        x[row, col] = images[source, col]
        if col == 0:
            y[row] = labels[source]


@cupric.kernel
def advance_schedule(counters: Array[i64, 1], hyper: Array[f32, 1], batch: i64,
                     base_lr: f64, total_steps: f64, cosine: i32, beta1: f64, beta2: f64):
    """One thread: the optimizer's per-step numbers for the step ``counters[0]`` (0-based),
    computed on the device so that a replayed graph needs no host value per step.

    Writes ``hyper = [lr, 1 - beta1^t, 1 - beta2^t]`` (t = step + 1; the learning rate of
    `learning_rate`'s schedule), then counts the step and moves the batch position on by
    `batch`.
    """
    if grid(1) == 0:
        step = counters[0]
        lr = base_lr
        if cosine != 0:
            lr = base_lr * 0.5 * (1.0 + math.cos(math.pi * f64(step) / total_steps))
        t = f64(step + 1)
        hyper[0] = f32(lr)
        hyper[1] = f32(1.0 - math.pow(beta1, t))
        hyper[2] = f32(1.0 - math.pow(beta2, t))
        counters[0] = step + 1
        counters[1] = counters[1] + batch


@cupric.kernel
def adam_update(param: Array[f32, 1], grad: Array[f32, 1], m: Array[f32, 1],
                v: Array[f32, 1], hyper: Array[f32, 1], beta1: f32, beta2: f32, eps: f32,
                weight_decay: f32):
    """One Adam step in place, as ``torch.optim.Adam``: with ``g = grad + wd * param``,
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``param -= lr * (m / c1) / (sqrt(v / c2) + eps)`` where ``c = 1 - b^t``; ``lr, c1,
    c2`` are read from ``hyper`` (written by `advance_schedule`)."""
    i = grid(1)
    if i < len(param):
        lr = hyper[0]
        g = grad[i] + weight_decay * param[i]
        mi = beta1 * m[i] + (f32(1.0) - beta1) * g
        vi = beta2 * v[i] + (f32(1.0) - beta2) * g * g
        m[i] = mi
        v[i] = vi
        param[i] = param[i] - lr * (mi / hyper[1]) / (math.sqrt(vi / hyper[2]) + eps)


@cupric.kernel
def sgd_momentum_update(param: Array[f32, 1], grad: Array[f32, 1],
                        velocity: Array[f32, 1], hyper: Array[f32, 1], momentum: f32,
                        weight_decay: f32):
    """One SGD step with momentum in place, as ``torch.optim.SGD``: with
    ``g = grad + wd * param``, ``velocity = momentum * velocity + g``,
    ``param -= lr * velocity``; ``lr`` is ``hyper[0]`` (written by `advance_schedule`)."""
    i = grid(1)
    if i < len(param):
        g = grad[i] + weight_decay * param[i]
        vel = momentum * velocity[i] + g
        velocity[i] = vel
        param[i] = param[i] - hyper[0] * vel


def learning_rate(args: argparse.Namespace, step: int, total_steps: int) -> float:
    """The learning rate of optimizer step `step` (0-based) of `total_steps`.

    With the cosine schedule it falls from ``args.lr`` towards 0 along half a cosine:
    the late steps are small, so the final weights do not jump between minibatches and
    the last epoch's accuracy is as good as the run's best.
    """
    if args.schedule == "constant":
        return args.lr
    return args.lr * 0.5 * (1.0 + math.cos(math.pi * step / total_steps))


def blocks_for(n: int) -> int:
    """Blocks of `BLOCK` threads that cover `n` elements."""
    return max(1, -(-n // BLOCK))


# --------------------------------------------------------------------------------------
# Where it can run, and with what

def missing_packages(args: argparse.Namespace) -> list[str]:
    """The optional packages this run needs but cannot import, as "pip-name (why)".

    Checked before training, so that a missing plot library does not surface only after
    the run (`importlib.util.find_spec` finds them without importing them).
    """
    import importlib.util
    wanted = [("sklearn", "scikit-learn", "the digits data set", True),
              ("matplotlib", "matplotlib", "the plot", True),
              ("tqdm", "tqdm", "the progress bar (or pass --no-progress)", args.progress),
              ("torch", "torch", "--compare-torch", args.compare_torch)]
    return [f"{pip_name} ({why})" for module, pip_name, why, needed in wanted
            if needed and importlib.util.find_spec(module) is None]



def training_stream():
    """A new stream of the current GPU for the cupric run: a training step is captured
    into a CUDA graph on a stream of its own (the legacy default stream cannot be)."""
    from cupric.runtime import Device
    return Device.current().create_stream()


def gpu_unavailable_reason() -> str | None:
    """None when a CUDA GPU can run this example, else why not (no driver, no device,
    or ``CUPRIC_SIMULATOR`` set: cuDNN and cuBLAS do not run on the simulator)."""
    if os.environ.get("CUPRIC_SIMULATOR", "") not in ("", "0"):
        return "CUPRIC_SIMULATOR is set, and cuDNN/cuBLAS do not run on the CPU simulator"
    from cupric.runtime import driver_available
    if not driver_available():
        return "no CUDA driver was found on this machine"
    from cupric.runtime import device_count
    if device_count() == 0:
        return "the CUDA driver sees no GPU"
    return None


# --------------------------------------------------------------------------------------
# Training with cupric


@dataclasses.dataclass
class EpochRecord:
    """What one epoch measured."""

    epoch: int
    train_loss: float      # mean over the epoch's minibatches, dropout on
    train_accuracy: float  # of the whole training set after the epoch, dropout off
    test_loss: float
    test_accuracy: float
    seconds: float         # training steps only (evaluation not counted)


class StepBuffers:
    """Every tensor a forward and backward pass of one batch size writes, allocated once.

    A training step then allocates nothing, which is what lets it be captured into a
    CUDA graph and replayed: the graph holds these addresses.
    """

    def __init__(self, batch: int, train: bool, stream=None) -> None:
        from cupric.runtime import empty
        plan = dict(network_plan(batch))

        def new(shape, dtype=np.float32):
            return empty(shape, dtype, stream=stream)

        self.batch = batch
        self.x = new(plan["input"])
        self.y = new((batch,), np.int32)
        self.a1 = new(plan["conv1 + bias + ReLU"])
        self.p1 = new(plan["max-pool1"])
        self.a2 = new(plan["conv2 + bias + ReLU"])
        self.p2 = new(plan["max-pool2"])
        self.logits = new(plan["fully connected"])
        self.logp = new(plan["log-softmax"])
        self.dlogp = new(plan["log-softmax"])
        if not train:
            return
        self.u = new((batch, FEATURES))
        self.dropped = new((batch, FEATURES))
        self.dlogits = new(plan["log-softmax"])
        self.dh = new((batch, FEATURES))
        self.dmasked = new((batch, FEATURES))
        self.da2 = new(plan["conv2 + bias + ReLU"])
        self.dz2 = new(plan["conv2 + bias + ReLU"])
        self.dp1 = new(plan["max-pool1"])
        self.da1 = new(plan["conv1 + bias + ReLU"])
        self.dz1 = new(plan["conv1 + bias + ReLU"])


class CupricNet:
    """The CNN's parameters, optimizer state and forward/backward passes on the GPU.

    All parameters live in one flat float32 buffer (views per layer), and so do their
    gradients and the optimizer's moments, so one optimizer launch updates them all.
    Every call is queued on `stream` (None: the legacy default stream); the step's
    intermediate tensors are allocated once per batch size (`StepBuffers`), and the
    optimizer's per-step numbers are computed on the device, so a whole training step
    (`step`) can be captured into one CUDA graph.
    """

    def __init__(self, args: argparse.Namespace, stream=None) -> None:
        from cupric import cudnn
        from cupric.gpu_rand import Generator
        from cupric.runtime import zeros
        self.args = args
        self.stream = stream
        self.layout, self.total = parameter_layout()
        self.flat = zeros(self.total, np.float32, stream=stream)
        self.grad_flat = zeros(self.total, np.float32, stream=stream)
        self.m_flat = zeros(self.total, np.float32, stream=stream)
        self.v_flat = zeros(self.total, np.float32, stream=stream)   # unused by SGD
        self.params = self._views(self.flat)
        self.grads = self._views(self.grad_flat)
        # [steps taken, position in the run's batch order] and [lr, 1 - b1^t, 1 - b2^t]
        self.counters = zeros(2, np.int64, stream=stream)
        self.hyper = zeros(3, np.float32, stream=stream)
        self.stats = zeros(2, np.float32, stream=stream)
        self.data = None
        # Streams of the generators are fixed so that a seed reproduces the same numbers.
        init_rng = Generator(args.seed, streams=4096)
        for name in PARAMETERS:
            std = init_std(name)
            if std > 0:
                init_rng.normal(0.0, std, dtype=np.float32, out=self.params[name],
                                **self._rng_backend())
        self.dropout_rng = Generator(args.seed + 1, streams=4096)
        self.options = cudnn.PlanOptions(deterministic=True) if args.deterministic else None
        self._ones: dict[int, object] = {}
        self._buffers: dict[tuple[int, bool], StepBuffers] = {}
        self._blas = None
        if stream is not None:
            from cupric import cublas
            self._blas = cublas.Handle.get(stream=stream)

    def _views(self, flat) -> dict:
        return {name: flat[offset:offset + math.prod(shape)].reshape(shape)
                for name, (offset, shape) in self.layout.items()}

    def _rng_backend(self) -> dict:
        if self.stream is None:
            return {}
        from cupric.gpu_rand.backends import CudaBackend
        return {"backend": CudaBackend(self.stream)}

    def _launch(self, kernel, n: int):
        return kernel[blocks_for(n), BLOCK, self.stream]

    def buffers(self, batch: int, train: bool) -> StepBuffers:
        """The step's tensors for a batch size (made on first use, then reused)."""
        key = (batch, train)
        bufs = self._buffers.get(key)
        if bufs is None:
            bufs = self._buffers[key] = StepBuffers(batch, train, self.stream)
        return bufs

    def host_parameters(self) -> dict[str, np.ndarray]:
        """A NumPy copy of every parameter (for PyTorch's identical start)."""
        return {name: view.to_numpy() for name, view in self.params.items()}

    def load_data(self, split: Split, orders) -> None:
        """Put the training set and the run's whole batch order on the device once, so
        that `step` gathers each batch there (no host copy per step)."""
        from cupric.runtime import to_device
        flat_order = np.concatenate([idx for batches in orders for idx in batches])
        images = split.train_x.reshape(len(split.train_x), -1)
        self.data = (to_device(images, stream=self.stream),
                     to_device(split.train_y, stream=self.stream),
                     to_device(flat_order.astype(np.int32), stream=self.stream))

    def forward(self, x, train: bool, bufs: StepBuffers | None = None):
        """Forward pass of a batch (device array (B, 1, 8, 8)); returns what backward
        needs, the log-probabilities last."""
        from cupric import cublas, cudnn
        p, opts, s = self.params, self.options, self.stream
        batch = x.shape[0]
        if bufs is None:
            bufs = self.buffers(batch, train)
        # conv -> bias -> ReLU as one cuDNN graph (cupric falls back to three steps when
        # no engine fuses the combination).
        a1 = cudnn.conv2d(x, p["conv1.w"], p["conv1.b"], padding=1, activation="relu",
                          out=bufs.a1, stream=s, options=opts)
        p1 = cudnn.max_pool2d(a1, 2, out=bufs.p1, stream=s)
        a2 = cudnn.conv2d(p1, p["conv2.w"], p["conv2.b"], padding=1, activation="relu",
                          out=bufs.a2, stream=s, options=opts)
        p2 = cudnn.max_pool2d(a2, 2, out=bufs.p2, stream=s)
        h = p2.reshape(batch, FEATURES)       # NCHW contiguous: a view, no copy
        u = None
        if train and self.args.dropout > 0:
            u = bufs.u
            self.dropout_rng.random(dtype=np.float32, out=u, **self._rng_backend())
            self._launch(dropout_apply, u.size)(
                h.reshape(-1), u.reshape(-1), self.args.dropout,
                1.0 / (1.0 - self.args.dropout), bufs.dropped.reshape(-1))
            h = bufs.dropped
        logits = cublas.linear(h, p["fc.w"], p["fc.b"], out=bufs.logits, handle=self._blas)
        logp = cudnn.log_softmax(logits, axis=-1, out=bufs.logp, stream=s)
        return (x, a1, p1, a2, p2, h, u), logp

    def loss(self, logp, labels, stats, bufs: StepBuffers | None = None):
        """Launch the NLL kernel: gradient of the batch's mean loss w.r.t. `logp`, and the
        loss sum and correct count added to `stats`."""
        batch = logp.shape[0]
        if bufs is None:
            bufs = self.buffers(batch, True)
        self._launch(nll_loss_grad, batch)(logp, labels, self.loss_scale(batch),
                                           bufs.dlogp, stats)
        return bufs.dlogp

    def loss_scale(self, batch: int) -> float:
        """The factor on the batch's summed loss whose gradient a step takes: 1 / batch,
        the batch mean (a data-parallel run divides by the global batch instead)."""
        return 1.0 / batch

    def gradients_ready(self, layer: str) -> None:
        """Called by `backward` as soon as the gradients of `layer` ("fc", "conv2",
        "conv1", in that order) are queued; nothing to do here (a data-parallel run
        starts that layer's all-reduce)."""

    def backward_done(self) -> None:
        """Called at the end of `backward`; nothing to do here (a data-parallel run makes
        the stream wait for its all-reduces before the optimizer reads the gradients)."""

    def backward(self, saved, logp, dlogp, bufs: StepBuffers | None = None) -> None:
        """Gradients of every parameter into `self.grads`."""
        from cupric import cublas, cudnn
        x, a1, p1, a2, p2, h, u = saved
        g, p, opts, s, blas = self.grads, self.params, self.options, self.stream, self._blas
        batch = x.shape[0]
        if bufs is None:
            bufs = self.buffers(batch, True)
        dlogits = cudnn.softmax_backward(logp, dlogp, axis=-1, log=True, out=bufs.dlogits,
                                         stream=s)
        # fc: logits = h @ w + b
        cublas.matmul(h.T, dlogits, out=g["fc.w"], handle=blas)
        cublas.matmul(self._ones_of(batch), dlogits, out=g["fc.b"], handle=blas)
        self.gradients_ready("fc")
        dh = cublas.matmul(dlogits, p["fc.w"].T, out=bufs.dh, handle=blas)
        if u is not None:
            self._launch(dropout_apply, u.size)(
                dh.reshape(-1), u.reshape(-1), self.args.dropout,
                1.0 / (1.0 - self.args.dropout), bufs.dmasked.reshape(-1))
            dh = bufs.dmasked
        dp2 = dh.reshape(p2.shape)
        da2 = cudnn.pool_backward(dp2, a2, p2, "max", window=2, out=bufs.da2, stream=s)
        # ReLU's output stands in for its input: y > 0 exactly where x > 0, which is all
        # the ReLU gradient reads (the fused forward keeps no pre-activation tensor).
        dz2 = cudnn.activation_backward(da2, a2, a2, "relu", out=bufs.dz2, stream=s)
        cudnn.conv_backward_filter(p1, dz2, PARAMETERS["conv2.w"][0], padding=1,
                                   out=g["conv2.w"], stream=s, options=opts)
        cudnn.conv_backward_bias(dz2, out=g["conv2.b"], stream=s)
        self.gradients_ready("conv2")
        dp1 = cudnn.conv_backward_data(dz2, p["conv2.w"], p1.shape, padding=1,
                                       out=bufs.dp1, stream=s, options=opts)
        da1 = cudnn.pool_backward(dp1, a1, p1, "max", window=2, out=bufs.da1, stream=s)
        dz1 = cudnn.activation_backward(da1, a1, a1, "relu", out=bufs.dz1, stream=s)
        cudnn.conv_backward_filter(x, dz1, PARAMETERS["conv1.w"][0], padding=1,
                                   out=g["conv1.w"], stream=s, options=opts)
        cudnn.conv_backward_bias(dz1, out=g["conv1.b"], stream=s)
        self.gradients_ready("conv1")
        self.backward_done()

    def _ones_of(self, batch: int):
        # (B,) of ones: ones @ dlogits sums the bias gradient over the batch in cuBLAS.
        ones = self._ones.get(batch)
        if ones is None:
            from cupric.runtime import to_device
            ones = self._ones[batch] = to_device(np.ones(batch, np.float32),
                                                 stream=self.stream)
        return ones

    def update(self, batch: int, total_steps: int) -> None:
        """One optimizer step over the flat parameter buffer, its learning rate and bias
        corrections computed on the device for the step the counters name; the batch
        position moves on by `batch`."""
        a = self.args
        beta1, beta2 = 0.9, 0.999
        self._launch(advance_schedule, 1)(
            self.counters, self.hyper, batch, a.lr, float(total_steps),
            1 if a.schedule == "cosine" else 0, beta1, beta2)
        n = self.total
        if a.optimizer == "adam":
            self._launch(adam_update, n)(
                self.flat, self.grad_flat, self.m_flat, self.v_flat, self.hyper, beta1,
                beta2, 1e-8, a.weight_decay)
        else:
            self._launch(sgd_momentum_update, n)(
                self.flat, self.grad_flat, self.m_flat, self.hyper, a.momentum,
                a.weight_decay)

    def step(self, bufs: StepBuffers, total_steps: int) -> None:
        """One whole training step of a batch of ``bufs.batch`` images, all on the device:
        gather the batch, forward, loss (summed into `self.stats`), backward, optimizer.

        It reads no host value and allocates nothing, so it can be captured into a CUDA
        graph (`capture_step`) whose replays each train on the next batch.
        """
        images, labels, order = self.data
        self._launch(gather_batch, bufs.x.size)(
            images, labels, order, self.counters, bufs.x.reshape(bufs.batch, -1), bufs.y)
        saved, logp = self.forward(bufs.x, True, bufs)
        dlogp = self.loss(logp, bufs.y, self.stats, bufs)
        self.backward(saved, logp, dlogp, bufs)
        self.update(bufs.batch, total_steps)

    def capture_step(self, bufs: StepBuffers, total_steps: int):
        """`step` captured into a CUDA graph on `self.stream`, instantiated: launching it
        runs one training step. Take it after one eager step of the same batch size (so
        that kernels are compiled and cuDNN plans built outside the capture)."""
        if self.stream is None:
            raise ValueError("a training step is captured on a stream of its own: make "
                             "the net with stream=Device.current().create_stream()")
        with self.stream.capture() as cap:
            self.step(bufs, total_steps)
        try:
            return cap.graph.instantiate()
        finally:
            cap.graph.close()

    def evaluate(self, images: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
        """(mean loss, accuracy) of a whole set in one batch, dropout off."""
        from cupric.runtime import to_device, zeros
        stats = zeros(2, np.float32, stream=self.stream)
        bufs = self.buffers(len(labels), False)
        _saved, logp = self.forward(to_device(images, stream=self.stream), False, bufs)
        self.loss(logp, to_device(labels, stream=self.stream), stats, bufs)
        loss_sum, correct = stats.to_numpy(stream=self.stream)
        return float(loss_sum) / len(labels), float(correct) / len(labels)


def train_cupric(net: CupricNet, split: Split, orders, progress,
                 graph: bool = False) -> list[EpochRecord]:
    """Train `net` on the batches of `orders`; returns one `EpochRecord` per epoch.

    With `graph`, the first step of each batch size runs eagerly (compiling kernels and
    building cuDNN plans), the second is captured into a CUDA graph, and every step from
    then on is one replay of it: the host launches one graph per step.
    """
    records = []
    total_steps = sum(len(batches) for batches in orders)
    net.load_data(split, orders)
    graphs: dict[int, object] = {}
    seen: set[int] = set()
    try:
        for epoch, batches in enumerate(orders, 1):
            net.stats.zero(stream=net.stream)
            start = time.perf_counter()
            for idx in batches:
                batch = len(idx)
                bufs = net.buffers(batch, True)
                if not graph or batch not in seen:
                    net.step(bufs, total_steps)
                    seen.add(batch)
                    continue
                if batch not in graphs:
                    graphs[batch] = net.capture_step(bufs, total_steps)
                graphs[batch].launch(net.stream)
            # Reading the sums waits for the epoch's last step: the time covers the GPU
            # work.
            loss_sum, _correct = net.stats.to_numpy(stream=net.stream)
            seconds = time.perf_counter() - start
            _train_loss, train_acc = net.evaluate(split.train_x, split.train_y)
            test_loss, test_acc = net.evaluate(split.test_x, split.test_y)
            # The record keeps the running loss with dropout, as is usual.
            record = EpochRecord(epoch, float(loss_sum) / len(split.train_y), train_acc,
                                 test_loss, test_acc, seconds)
            records.append(record)
            progress(record)
    finally:
        for exe in graphs.values():
            exe.close()
    return records


# --------------------------------------------------------------------------------------
# The same network in PyTorch (--compare-torch)


def train_torch(args, split: Split, orders, initial: dict[str, np.ndarray], progress,
                graph: bool = False):
    """Train the same network in PyTorch from the same initial weights on the same
    batches; returns one `EpochRecord` per epoch. With `graph`, each step after the
    first of its batch size is a replay of a `torch.cuda.CUDAGraph` (Adam with
    ``capturable=True`` and a tensor learning rate, as PyTorch's graph recipe asks)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as exc:
        raise ImportError("--compare-torch needs PyTorch: pip install torch") from exc
    torch.manual_seed(args.seed)
    if args.deterministic:
        torch.backends.cudnn.deterministic = True
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(args.dropout),
        torch.nn.Linear(FEATURES, CLASSES)).to(dev)
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(initial["conv1.w"]))
        model[0].bias.copy_(torch.from_numpy(initial["conv1.b"]))
        model[3].weight.copy_(torch.from_numpy(initial["conv2.w"]))
        model[3].bias.copy_(torch.from_numpy(initial["conv2.b"]))
        # cupric keeps fc.w as (in, out) for x @ w; torch.nn.Linear keeps (out, in).
        model[8].weight.copy_(torch.from_numpy(initial["fc.w"].T.copy()))
        model[8].bias.copy_(torch.from_numpy(initial["fc.b"]))
    if graph and args.optimizer != "adam":
        raise ValueError("the PyTorch CUDA-graph comparison runs Adam (capturable); "
                         "pass --optimizer adam with --graph --compare-torch")
    if args.optimizer == "adam":
        lr0 = torch.tensor(args.lr, device=dev) if graph else args.lr
        opt = torch.optim.Adam(model.parameters(), lr=lr0, weight_decay=args.weight_decay,
                               capturable=graph)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                              weight_decay=args.weight_decay)
    train_x = torch.from_numpy(split.train_x).to(dev)
    train_y = torch.from_numpy(split.train_y).long().to(dev)
    test_x = torch.from_numpy(split.test_x).to(dev)
    test_y = torch.from_numpy(split.test_y).long().to(dev)
    # The batch order goes to the device once, as the cupric run's does; each step
    # gathers its batch there.
    order = [[torch.from_numpy(idx.astype(np.int64)).to(dev) for idx in batches]
             for batches in orders]

    def evaluate(images, labels):
        model.eval()
        with torch.no_grad():
            logits = model(images)
            loss = F.cross_entropy(logits, labels).item()
            acc = (logits.argmax(1) == labels).float().mean().item()
        model.train()
        return loss, acc

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=not graph)
        loss.backward()
        opt.step()
        return loss.detach()

    records = []
    total_steps = sum(len(batches) for batches in orders)
    step = 0
    # With --graph: per batch size, static inputs, a graph of one whole step, and the
    # loss it writes; the first step of a size runs eagerly on a side stream (PyTorch's
    # recipe for warming up before capture), the second is captured, later ones replay.
    graphs: dict[int, tuple] = {}
    side = torch.cuda.Stream() if graph else None
    for epoch, batches in enumerate(orders, 1):
        model.train()
        loss_sum = torch.zeros((), device=dev)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for idx in order[epoch - 1]:
            for group in opt.param_groups:
                lr = learning_rate(args, step, total_steps)
                if graph:
                    group["lr"].fill_(lr)
                else:
                    group["lr"] = lr
            step += 1
            batch = len(idx)
            if not graph:
                loss = train_step(train_x.index_select(0, idx), train_y.index_select(0, idx))
                loss_sum += loss * batch
                continue
            if batch not in graphs:
                static_x = train_x.index_select(0, idx)
                static_y = train_y.index_select(0, idx)
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    loss = train_step(static_x, static_y)
                torch.cuda.current_stream().wait_stream(side)
                loss_sum += loss * batch
                graphs[batch] = (static_x, static_y, None, None)
                continue
            static_x, static_y, cuda_graph, static_loss = graphs[batch]
            torch.index_select(train_x, 0, idx, out=static_x)
            torch.index_select(train_y, 0, idx, out=static_y)
            if cuda_graph is None:
                cuda_graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(cuda_graph):
                    static_loss = train_step(static_x, static_y)
                graphs[batch] = (static_x, static_y, cuda_graph, static_loss)
            cuda_graph.replay()
            loss_sum += static_loss * batch
        total = loss_sum.item()    # waits for the epoch's last step
        seconds = time.perf_counter() - start
        _train_loss, train_acc = evaluate(train_x, train_y)
        test_loss, test_acc = evaluate(test_x, test_y)
        record = EpochRecord(epoch, total / len(split.train_y), train_acc, test_loss,
                             test_acc, seconds)
        records.append(record)
        progress(record)
    return records


# --------------------------------------------------------------------------------------
# Reporting


def make_progress(args, label: str):
    """A callback printing each epoch's line, through a tqdm bar over the epochs (or
    plain prints with --no-progress); returns (callback, close)."""
    def line(r: EpochRecord) -> str:
        return (f"[{label}] epoch {r.epoch:3d}/{args.epochs}: loss {r.train_loss:.4f}  "
                f"train acc {r.train_accuracy:.4f}  test loss {r.test_loss:.4f}  "
                f"test acc {r.test_accuracy:.4f}  {r.seconds * 1e3:8.1f} ms")
    if not args.progress:
        return (lambda r: print(line(r), flush=True)), (lambda: None)
    try:
        from tqdm import tqdm
    except ImportError as exc:
        raise ImportError("the progress bar needs tqdm: pip install tqdm (or pass "
                          "--no-progress)") from exc
    bar = tqdm(total=args.epochs, desc=label, unit="epoch", file=sys.stderr)

    def callback(r: EpochRecord) -> None:
        bar.write(line(r))
        bar.set_postfix(loss=f"{r.train_loss:.3f}", test_acc=f"{r.test_accuracy:.3f}")
        bar.update(1)
    return callback, bar.close


def write_plot(path: str, runs: dict[str, list[EpochRecord]]) -> None:
    """Loss and accuracy per epoch of each run, as a PNG at `path`."""
    try:
        import matplotlib
        matplotlib.use("Agg")   # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("the plot needs matplotlib: pip install matplotlib") from exc
    from matplotlib.ticker import MaxNLocator
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (label, records) in enumerate(runs.items()):
        color = f"C{index}"    # one colour per run: solid for train, dashed for test
        epochs = [r.epoch for r in records]
        ax_loss.plot(epochs, [r.train_loss for r in records], color=color,
                     label=f"{label} train")
        ax_loss.plot(epochs, [r.test_loss for r in records], "--", color=color,
                     label=f"{label} test")
        ax_acc.plot(epochs, [r.train_accuracy for r in records], color=color,
                    label=f"{label} train")
        ax_acc.plot(epochs, [r.test_accuracy for r in records], "--", color=color,
                    label=f"{label} test")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss", yscale="log")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    ax_acc.axhline(0.97, color="grey", linewidth=0.8, linestyle=":")
    for ax in (ax_loss, ax_acc):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("digits CNN trained with cupric (cuDNN + cuBLAS + cupric kernels)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(label: str, records: list[EpochRecord]) -> str:
    """One line: final accuracies, best test accuracy, and epoch times (the first epoch,
    which compiles kernels and builds cuDNN plans, apart from the median of the rest)."""
    last = records[-1]
    best = max(r.test_accuracy for r in records)
    rest = [r.seconds for r in records[1:]] or [records[0].seconds]
    return (f"{label}: final test accuracy {last.test_accuracy:.4f} (best "
            f"{best:.4f}), train accuracy {last.train_accuracy:.4f}; first epoch "
            f"{records[0].seconds * 1e3:.1f} ms, median epoch after it "
            f"{statistics.median(rest) * 1e3:.1f} ms")


def main(argv=None) -> int:
    """Run the example; returns the exit status."""
    args = parse_args(argv)
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"notice: {reason}. This example trains with cuDNN and cuBLAS and needs an "
              f"NVIDIA GPU; nothing was trained.", file=sys.stderr)
        return 0
    from cupric import cublas, cudnn
    missing = [name for name, lib in (("cuDNN (pip install nvidia-cudnn-cu13)", cudnn),
                                      ("cuBLAS (pip install nvidia-cublas)", cublas))
               if not lib.is_available()]
    if missing:
        print(f"error: a GPU is present but {' and '.join(missing)} cannot be loaded",
              file=sys.stderr)
        return 1
    missing = missing_packages(args)
    if missing:
        print(f"error: this run needs {', '.join(missing)}: pip install "
              f"{' '.join(m.split()[0] for m in missing)}", file=sys.stderr)
        return 2
    images, labels = load_digits_arrays()
    split = split_data(images, labels, args.test_fraction, args.seed)
    orders = batch_orders(len(split.train_y), args.batch_size, args.epochs, args.seed)
    print(f"digits: {len(split.train_y)} training and {len(split.test_y)} test images; "
          f"{args.epochs} epochs of batches of {args.batch_size}, {args.optimizer} "
          f"lr {args.lr:g} ({args.schedule}), dropout {args.dropout:g}, seed {args.seed}")
    for step, shape in network_plan(args.batch_size):
        print(f"  {step:<24} {shape}")

    if args.graph and args.compare_torch and args.optimizer != "adam":
        print("error: --graph --compare-torch runs PyTorch's capturable Adam: pass "
              "--optimizer adam", file=sys.stderr)
        return 2
    net = CupricNet(args, stream=training_stream())
    # PyTorch starts from these very weights (copied before any step changes them).
    initial = net.host_parameters() if args.compare_torch else None
    label = "cupric graph" if args.graph else "cupric"
    callback, close = make_progress(args, label)
    try:
        records = train_cupric(net, split, orders, callback, graph=args.graph)
    finally:
        close()
    runs = {label: records}
    if args.compare_torch:
        torch_label = "torch graph" if args.graph else "torch"
        callback, close = make_progress(args, torch_label)
        try:
            runs[torch_label] = train_torch(args, split, orders, initial, callback,
                                            graph=args.graph)
        finally:
            close()
    folder = os.path.dirname(args.plot)
    if folder:
        os.makedirs(folder, exist_ok=True)
    write_plot(args.plot, runs)
    print()
    for label, recs in runs.items():
        print(summarize(label, recs))
    print(f"plot written to {args.plot}")
    final = records[-1].test_accuracy
    if args.check and final < 0.97:
        print(f"check failed: final test accuracy {final:.4f} < 0.97", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
