"""What a call costs the caller: cupric's library calls and kernels beside PyTorch and CuPy,
with PyTorch tensors, CuPy arrays and cupric DeviceBuffers, in one process.

Three figures per contender, all on the legacy default stream (PyTorch's, CuPy's and
cupric's default), microseconds:

* ``latency``: one call between two events, the GPU idle before it (a synchronize, the
  start event, the call, the end event): what a user waiting on each call sees, the
  host's work before the first kernel included;
* ``host``: back-to-back host cost, batches of calls queued with no synchronize inside
  (a synchronize between batches, outside the timed region; batches small enough that
  the launch queue never fills), median batch;
* ``b2b``: device time per call of a batch of back-to-back calls after a lead-in call
  (two events around the batch): the throughput once the host keeps ahead, or the host's
  pace where it does not.

cupric takes the same data in each of its three kinds: the DeviceBuffers are DLPack views
of the PyTorch tensors, the CuPy arrays copies that CuPy allocated (in the same layout),
so every contender reads the same random inputs. The cudnn-frontend Python package, where
it is installed, is a peer of the convolution forward rows (its graph built once, heuristics
A then fallback, writing the given output). Every contender's result is checked before it
is timed (outputs poisoned first; references computed in float64 or float32 by PyTorch).

Then the ResNet-50 convolution layers (forward, batch 32 and 64, float16 and bfloat16
NHWC and float32 NCHW with TF32 allowed, each library's default; cuDNN heuristics and
autotuned on both sides), PyTorch tensors in, each library allocating its output: one
call between events each, the ratio PyTorch time / cupric time per layer, its geometric
mean per configuration and the worst layer. And fresh processes: `import`, the first kernel
launch with the kernel cache warm and empty beside CuPy's RawKernel (its cache warm and
empty) and PyTorch's first operation, and the first cuDNN convolution beside PyTorch's.

    python3 benchmarks/host_cost.py [--json PATH] [--quick] [--parts ops,resnet,fresh]
                                    [--ops WORD,WORD]
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from cupric.device import grid
from cupric.types import Array, f32, i32

from _common import (CheckError, assert_correct, error_text, finish, poison, print_tables,
                     ratio, table, to_host)

KINDS = ("torch", "cupy", "buffer")
ALLOCATING = "cupric, PyTorch tensors, allocating"
KIND_LABEL = {"torch": "PyTorch tensors", "cupy": "CuPy arrays", "buffer": "DeviceBuffers"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Timing:
    """The three figures of the module docstring, contenders interleaved round by round."""

    def __init__(self, torch, quick: bool) -> None:
        self.torch = torch
        self.samples = 7 if quick else 25
        self.batches = 3 if quick else 9
        self.per_batch = 50 if quick else 100
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def latency(self, fn) -> float:
        sync = self.torch.cuda.synchronize
        sync()
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3

    def host(self, fn, calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        self.torch.cuda.synchronize()
        return (t1 - t0) / calls * 1e6

    def b2b(self, fn, calls: int) -> float:
        fn()
        self.start.record()
        for _ in range(calls):
            fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3 / calls

    def measure(self, contenders: dict, per_batch: int | None = None) -> dict:
        """{name: {"latency": us, "host": us, "b2b": us}} for callables `contenders`."""
        per_batch = per_batch or self.per_batch
        for fn in contenders.values():
            for _ in range(3):
                fn()
        self.torch.cuda.synchronize()
        names = list(contenders)
        lat = {n: [] for n in names}
        host = {n: [] for n in names}
        b2b = {n: [] for n in names}
        for r in range(self.samples):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                lat[n].append(self.latency(contenders[n]))
        for r in range(self.batches):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                host[n].append(self.host(contenders[n], per_batch))
                b2b[n].append(self.b2b(contenders[n], per_batch))
        return {n: {"latency": statistics.median(lat[n]), "host": statistics.median(host[n]),
                    "b2b": statistics.median(b2b[n])} for n in names}


def _views(t, kinds=KINDS) -> dict:
    """The tensor `t` as each kind, or the reason it cannot be: DeviceBuffers are DLPack
    views of the tensor (the same memory); CuPy arrays are copies that CuPy allocated and
    owns (in the same layout), as a CuPy user's arrays are."""
    import cupy as cp

    from cupric import runtime as rt
    out = {}
    for kind in kinds:
        try:
            out[kind] = t if kind == "torch" else (
                cp.from_dlpack(t).copy(order="K") if kind == "cupy" else rt.from_dlpack(t))
        except Exception as exc:  # a kind that cannot carry this dtype: reported per row
            out[kind] = exc
    return out


class Op:
    """One operation at one size: its inputs (PyTorch tensors), cupric's call given the
    arguments in one kind, the peers' calls, the output and the reference."""

    def __init__(self, name: str, size: str, tensors: dict, ours, peers: dict, out: str,
                 reference, tol: tuple, kinds=KINDS) -> None:
        self.name, self.size, self.tensors, self.ours = name, size, tensors, ours
        self.peers, self.out, self.reference, self.tol = peers, out, reference, tol
        self.kinds = kinds
        #: Called with the contender's arguments (None for a peer) before its check,
        #: instead of poisoning the output, for operations that update their output in
        #: place (y = a*x + y).
        self.reset = None
        #: (make, extract): cupric's allocating form of the call, given the arguments as
        #: PyTorch tensors, and how to find the output in what it returns; timed beside
        #: the peers that allocate too (`allocating_peers`).
        self.alloc = None
        self.allocating_peers: frozenset = frozenset()


def _contenders(op: Op, results: dict) -> dict:
    """Checked callables of `op`: cupric with each kind, then the peers. A contender that
    fails its check or cannot run is recorded in `results` and left out of the timing."""
    torch_out = op.tensors[op.out]
    views = {name: _views(t, op.kinds) for name, t in op.tensors.items()}
    expected = op.reference()
    rtol, atol = op.tol
    ready = {}
    candidates = []
    for kind in op.kinds:
        bad = [v[kind] for v in views.values() if isinstance(v[kind], Exception)]
        if bad:
            results[f"cupric, {KIND_LABEL[kind]}"] = {"unsupported": error_text(bad[0])}
            continue
        args = {name: v[kind] for name, v in views.items()}
        # The output in this kind: the tensor's memory, or CuPy's own copy.
        out = args[op.out] if kind == "cupy" else torch_out
        candidates.append((f"cupric, {KIND_LABEL[kind]}", op.ours(args), args, out))
    if op.alloc is not None and not any(isinstance(v["torch"], Exception)
                                        for v in views.values()):
        make, _ = op.alloc
        candidates.append((ALLOCATING, make({n: v["torch"] for n, v in views.items()}),
                           "alloc", None))
    candidates += [(label, fn, None, torch_out) for label, fn in op.peers.items()]
    for label, fn, args, out in candidates:
        box = {}

        def run(fn=fn, box=box, args=args):
            if op.reset is not None:
                op.reset(args)
            box["r"] = fn()

        def got(box=box, out=out, args=args):
            r = box["r"]
            if args == "alloc":  # cupric's allocating form: its returned output
                import torch
                return _as_torch(torch, op.alloc[1](r), torch_out.dtype)
            if args is not None:  # cupric writes the given output
                return out
            return r if hasattr(r, "shape") else out  # a peer that allocates returns it
        allocates = args == "alloc" or label in op.allocating_peers
        try:
            # An allocated output cannot be poisoned beforehand: the same call into a
            # given output was checked poisoned just before (the form with `out`).
            check = assert_correct(f"{op.name} {op.size}: {label}", run, got, expected,
                                   outputs=[] if op.reset is not None or out is None
                                   else [out], rtol=rtol, atol=atol)
            ready[label] = fn
            results[label] = {"check": check, "allocates": allocates}
        except CheckError as exc:
            results[label] = {"error": str(exc)[:400]}
        except Exception as exc:  # a contender that cannot run: recorded, others go on
            results[label] = {"error": error_text(exc)}
    return ready


# -- the operations ----------------------------------------------------------------------

def _randn(torch, shape, dtype, channels_last=False, scale=1.0):
    t = torch.randn(shape, device="cuda", dtype=torch.float32) * scale
    t = t.to(dtype)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


def _conv_ops(torch, F, dnn, size: str, n, c, k, hw, dtype) -> list:
    nhwc = dtype != torch.float32
    x = _randn(torch, (n, c, hw, hw), dtype, nhwc)
    w = _randn(torch, (k, c, 3, 3), dtype, nhwc, 0.05)
    b = _randn(torch, (k,), dtype)
    dy = _randn(torch, (n, k, hw, hw), dtype, nhwc)
    y = torch.empty_like(dy)
    dx = torch.empty_like(x)
    dw = torch.empty_like(w)
    f64 = lambda t: t.double()  # noqa: E731
    # float32 convolutions may use TF32 on both sides (each library's default).
    tol = (2e-2, 2e-2) if nhwc else (5e-3, 5e-3)
    bwd = torch.ops.aten.convolution_backward
    tag = (f"{size}: {n}x{c}x{hw}x{hw}, {k} filters 3x3, {str(dtype)[6:]} "
           f"{'NHWC' if nhwc else 'NCHW'}")

    def tgrad(which, dy_, x_, w_):
        mask = [which == "data", which == "filter", False]
        g = bwd(dy_, x_, w_, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
        return g[0] if which == "data" else g[1]

    ops = [
        Op("conv forward", tag, {"x": x, "w": w, "y": y},
           lambda a: lambda: dnn.conv_forward(a["x"], a["w"], padding=1, out=a["y"]),
           {"PyTorch conv2d": lambda: F.conv2d(x, w, padding=1),
            "cudnn-frontend conv_fprop(out=)": _frontend_conv(torch, x, w, y, 1)}, "y",
           lambda: F.conv2d(f64(x), f64(w), padding=1), tol),
        Op("conv backward data", tag, {"dy": dy, "w": w, "dx": dx},
           lambda a: lambda: dnn.conv_backward_data(a["dy"], a["w"], tuple(x.shape), padding=1,
                                                    out=a["dx"]),
           {"PyTorch convolution_backward": lambda: tgrad("data", dy, x, w)}, "dx",
           lambda: tgrad("data", f64(dy), f64(x), f64(w)), tol),
        Op("conv backward filter", tag, {"x": x, "dy": dy, "dw": dw},
           lambda a: lambda: dnn.conv_backward_filter(a["x"], a["dy"], tuple(w.shape), padding=1,
                                                      out=a["dw"]),
           {"PyTorch convolution_backward": lambda: tgrad("filter", dy, x, w)}, "dw",
           lambda: tgrad("filter", f64(dy), f64(x), f64(w)),
           (tol[0] * 5, tol[1] * 5 * math.sqrt(n * hw * hw / 64))),
        Op("conv + bias + ReLU", tag, {"x": x, "w": w, "b": b, "y": y},
           lambda a: lambda: dnn.conv_bias_activation(a["x"], a["w"], a["b"], "relu", padding=1,
                                                      out=a["y"]),
           {"PyTorch relu(conv2d(bias))": lambda: F.relu(F.conv2d(x, w, b, padding=1))}, "y",
           lambda: F.relu(F.conv2d(f64(x), f64(w), f64(b), padding=1)), tol),
    ]
    same = lambda r: r  # noqa: E731 (the call returns its output)
    allocating = (
        lambda a: lambda: dnn.conv_forward(a["x"], a["w"], padding=1),
        lambda a: lambda: dnn.conv_backward_data(a["dy"], a["w"], tuple(x.shape), padding=1),
        lambda a: lambda: dnn.conv_backward_filter(a["x"], a["dy"], tuple(w.shape), padding=1),
        lambda a: lambda: dnn.conv_bias_activation(a["x"], a["w"], a["b"], "relu", padding=1))
    for op, make in zip(ops, allocating):
        _allocating(op, make, same)
    return ops


def _frontend_conv(torch, x, w, y, padding: int):
    """The cudnn-frontend Python package's convolution forward into `y` (its graph built
    once, heuristics A then fallback, a workspace allocated once, PyTorch's current
    stream), or a callable raising why it cannot run here (recorded in its row)."""
    try:
        import cudnn
        types = {torch.float16: cudnn.data_type.HALF, torch.bfloat16: cudnn.data_type.BFLOAT16,
                 torch.float32: cudnn.data_type.FLOAT}
        handle = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        graph = cudnn.pygraph(io_data_type=types[x.dtype],
                              intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        gx = graph.tensor(name="X", dim=list(x.shape), stride=list(x.stride()),
                          data_type=types[x.dtype])
        gw = graph.tensor(name="W", dim=list(w.shape), stride=list(w.stride()),
                          data_type=types[w.dtype])
        gy = graph.conv_fprop(image=gx, weight=gw, padding=[padding] * 2, stride=[1, 1],
                              dilation=[1, 1])
        gy.set_output(True).set_dim(list(y.shape)).set_stride(list(y.stride()))
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
        workspace = torch.empty(max(graph.get_workspace_size(), 1), device="cuda",
                                dtype=torch.uint8)
        pack = {gx: x, gw: w, gy: y}

        def run():
            graph.execute(pack, workspace, handle=handle)
        return run
    except Exception as exc:  # not installed or refused here: the row says why
        reason = error_text(exc)

        def unavailable():
            raise RuntimeError(f"cudnn-frontend: {reason}")
        return unavailable


def _allocating(op: Op, make, extract) -> Op:
    """Give `op` cupric's allocating form, for an operation whose peers all allocate."""
    op.alloc = (make, extract)
    op.allocating_peers = frozenset(op.peers)
    return op


def _library_ops(torch, cp, quick: bool) -> list:
    import torch.nn.functional as F

    import cupric.cublas as cublas
    import cupric.cudnn as dnn
    ops = []
    layers = [("small", 8, 64, 64, 14, torch.float16)]
    if not quick:
        layers += [("large", 64, 64, 64, 56, torch.float16),
                   ("small", 8, 64, 64, 14, torch.float32)]
    for size, n, c, k, hw, dtype in layers:
        ops += _conv_ops(torch, F, dnn, size, n, c, k, hw, dtype)

    for size, m, dtype in ((("small", 64, torch.float32),) if quick else
                           (("small", 64, torch.float32), ("large", 4096, torch.bfloat16))):
        a, b = _randn(torch, (m, m), dtype), _randn(torch, (m, m), dtype)
        c_ = torch.empty(m, m, device="cuda", dtype=dtype)
        ca, cb_, cc = (cp.from_dlpack(t) for t in (a, b, c_)) if dtype != torch.bfloat16 else (
            None, None, None)
        peers = {"PyTorch matmul(out=)": lambda a=a, b=b, c_=c_: torch.matmul(a, b, out=c_)}
        if ca is not None:
            peers["CuPy matmul(out=)"] = lambda ca=ca, cb_=cb_, cc=cc: cp.matmul(ca, cb_, out=cc)
        # Products of m terms of unit variance: the result's scale is sqrt(m).
        tol = (1e-4, 1e-4) if dtype == torch.float32 else (2e-2, 1e-2 * math.sqrt(m))
        ops.append(Op("matmul", f"{size}: {m}x{m} {str(dtype)[6:]}", {"a": a, "b": b, "c": c_},
                      lambda v: lambda: cublas.matmul(v["a"], v["b"], out=v["c"]), peers, "c",
                      lambda a=a, b=b: a.double() @ b.double(), tol))

    for size, n, c, hw in ((("small", 8, 64, 14),) if quick else
                           (("small", 8, 64, 14), ("large", 32, 64, 56))):
        x = _randn(torch, (n, c, hw, hw), torch.float16, True)
        gamma, beta = _randn(torch, (c,), torch.float32), _randn(torch, (c,), torch.float32)
        rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
        y = torch.empty_like(x)
        tag = f"{size}: {n}x{c}x{hw}x{hw} float16 NHWC"
        ops.append(_allocating(Op("batch norm training forward", tag,
                      {"x": x, "g": gamma, "b": beta, "rm": rm, "rv": rv, "y": y},
                      lambda v: lambda: dnn.batch_norm_training(v["x"], v["g"], v["b"], v["rm"],
                                                                v["rv"], out=v["y"]),
                      {"PyTorch batch_norm(training=True)": lambda x=x, g=gamma, b=beta, rm=rm,
                       rv=rv: F.batch_norm(x, rm, rv, g, b, training=True)}, "y",
                      lambda x=x, g=gamma, b=beta: F.batch_norm(
                          x.double(), None, None, g.double(), b.double(), training=True),
                      (2e-2, 2e-2)),
            lambda v: lambda: dnn.batch_norm_training(v["x"], v["g"], v["b"], v["rm"], v["rv"]),
            lambda r: r.y))
        dy = _randn(torch, (n, c, hw, hw), torch.float16, True)
        mean = x.float().mean(dim=(0, 2, 3))
        inv = 1.0 / torch.sqrt(x.float().var(dim=(0, 2, 3), unbiased=False) + 1e-5)
        dx = torch.empty_like(x)
        nbb = torch.ops.aten.native_batch_norm_backward
        # cupric's backward takes its own forward's saved statistics and, on channels-last
        # data, the persistent kernels' reserve space (without it the spatial kernels run),
        # as PyTorch's cuDNN path hands its forward's reserve to the backward.
        fwd = dnn.batch_norm_training(x, gamma, beta, rm.clone(), rv.clone())
        saved = {"cmean": torch.from_dlpack(fwd.save_mean),
                 "cinv": torch.from_dlpack(fwd.save_inv_std)}
        if fwd.reserve is not None:
            saved["reserve"] = torch.from_dlpack(fwd.reserve)

        def reference(x=x, dy=dy, g=gamma, mean=mean, inv=inv):
            return nbb(dy.double(), x.double(), g.double(), None, None, mean.double(),
                       inv.double(), True, 1e-5, [True, False, False])[0]
        ops.append(_allocating(Op("batch norm training backward", tag,
                      {"x": x, "dy": dy, "g": gamma, "dx": dx, **saved},
                      lambda v: lambda: dnn.batch_norm_backward(
                          v["dy"], v["x"], v["g"], v["cmean"], v["cinv"], out=v["dx"],
                          reserve=v.get("reserve")),
                      {"PyTorch native_batch_norm_backward": lambda x=x, dy=dy, g=gamma, m=mean,
                       i=inv: nbb(dy, x, g, None, None, m, i, True, 1e-5,
                                  [True, True, True])[0]}, "dx", reference, (3e-2, 3e-2)),
            lambda v: lambda: dnn.batch_norm_backward(v["dy"], v["x"], v["g"], v["cmean"],
                                                      v["cinv"], reserve=v.get("reserve")),
            lambda r: r[0]))

    for size, n, c, hw in ((("small", 8, 64, 28),) if quick else
                           (("small", 8, 64, 28), ("large", 32, 64, 112))):
        x = _randn(torch, (n, c, hw, hw), torch.float16, True)
        y = torch.empty((n, c, hw // 2, hw // 2), device="cuda", dtype=torch.float16).contiguous(
            memory_format=torch.channels_last)
        ops.append(_allocating(Op("max pool 3x3 stride 2",
                                  f"{size}: {n}x{c}x{hw}x{hw} float16 NHWC",
                      {"x": x, "y": y},
                      lambda v: lambda: dnn.max_pool2d(v["x"], 3, 2, 1, out=v["y"]),
                      {"PyTorch max_pool2d": lambda x=x: F.max_pool2d(x, 3, 2, 1)}, "y",
                      lambda x=x: F.max_pool2d(x.double(), 3, 2, 1), (0, 0)),
            lambda v: lambda: dnn.max_pool2d(v["x"], 3, 2, 1), lambda r: r))

    for size, rows, cols in ((("small", 64, 1000),) if quick else
                             (("small", 64, 1000), ("large", 4096, 4096))):
        x = _randn(torch, (rows, cols), torch.float32)
        y = torch.empty_like(x)
        ops.append(_allocating(Op("softmax", f"{size}: {rows}x{cols} float32", {"x": x, "y": y},
                      # softmax_forward: the name `softmax` is also a submodule of
                      # cupric.cudnn, which shadows the function once imported.
                      lambda v: lambda: dnn.softmax_forward(v["x"], -1, out=v["y"]),
                      {"PyTorch softmax": lambda x=x: torch.softmax(x, -1)}, "y",
                      lambda x=x: torch.softmax(x.double(), -1), (1e-5, 1e-7)),
            lambda v: lambda: dnn.softmax_forward(v["x"], -1), lambda r: r))
    return ops


_AXPY_C = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _axpy(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"], a: f32, n: i32):
    """y = a * x + y, one element per thread (the C kernel above)."""
    i = grid(1)
    if i < n:
        y[i] = a * x[i] + y[i]


def _launch_op(torch, cp) -> Op:
    """A kernel launch: y = a*x + y. Every contender runs the kernel once per call, so y
    grows; each check runs one call from y0 (`Op.reset`)."""
    import cupric
    n = 1 << 12
    x = torch.rand(n, device="cuda")
    y0 = torch.rand(n, device="cuda")
    y = y0.clone()
    a = np.float32(0.5)
    raw = cp.RawKernel(_AXPY_C, "axpy")

    def launch_for(v):
        # A kernel object per kind (each keeps its own fast launcher), bound once.
        kern = cupric.kernel(_axpy)
        bound = kern[(n + 255) // 256, 256]
        xs, ys, nn = v["x"], v["y"], np.int32(n)
        return lambda: bound(xs, ys, a, nn)

    def reset(v):
        if v is not None and isinstance(v["y"], cp.ndarray):
            v["y"][...] = cp.from_dlpack(y0)  # CuPy's own copy of y
        else:
            y.copy_(y0)

    cx, cy = cp.from_dlpack(x), cp.from_dlpack(y)
    op = Op("kernel launch (axpy)", f"{n} float32", {"x": x, "y": y}, launch_for,
            {"CuPy RawKernel": lambda: raw(((n + 255) // 256,), (256,),
                                           (cx, cy, a, np.int32(n))),
             "PyTorch add_(alpha=), one kernel": lambda: y.add_(x, alpha=0.5)}, "y",
            lambda: y0.double() + 0.5 * x.double(), (1e-6, 1e-6))
    op.reset = reset
    return op


def _kernel_ops(torch, cp, quick: bool) -> list:
    """A kernel launch, a gpu_rand fill, and the ready kernels."""
    import cupric.kernels as K
    from cupric.gpu_rand import Generator
    ops = []
    sizes = (("small", 1 << 12),) if quick else (("small", 1 << 12), ("large", 1 << 24))

    ops.append(_launch_op(torch, cp))
    a = np.float32(0.5)

    for size, n in sizes:
        out = torch.empty(n, device="cuda")
        gen = Generator(1234)
        cgen = cp.random.default_rng(1234)
        fill = (Op("gpu_rand uniform fill", f"{size}: {n} float32", {"out": out},
                      lambda v, gen=gen: lambda: gen.random(dtype=np.float32, out=v["out"]),
                      {"PyTorch uniform_": lambda out=out: out.uniform_(),
                       "CuPy Generator.random (allocating)": lambda cgen=cgen, n=n:
                       cgen.random(n, dtype=cp.float32)}, "out",
                      None, (0, 0)))
        fill.allocating_peers = frozenset({"CuPy Generator.random (allocating)"})
        ops.append(fill)

        x = torch.rand(n, device="cuda")
        y = torch.rand(n, device="cuda")
        o = torch.empty(n, device="cuda")
        cx, cy, co = (cp.from_dlpack(t) for t in (x, y, o))
        saxpy_cp = cp.ElementwiseKernel("float32 a, float32 x, float32 y", "float32 o",
                                        "o = a * x + y", "bench_saxpy")
        ops.append(Op("vecadd", f"{size}: {n} float32", {"x": x, "y": y, "o": o},
                      lambda v: lambda: K.vecadd(v["x"], v["y"], out=v["o"]),
                      {"PyTorch add(out=)": lambda x=x, y=y, o=o: torch.add(x, y, out=o),
                       "CuPy add(out=)": lambda cx=cx, cy=cy, co=co: cp.add(cx, cy, out=co)},
                      "o", lambda x=x, y=y: x.double() + y.double(), (1e-7, 0)))
        ops.append(Op("saxpy", f"{size}: {n} float32", {"x": x, "y": y, "o": o},
                      lambda v: lambda: K.saxpy(a, v["x"], v["y"], out=v["o"]),
                      {"PyTorch add(alpha=, out=)": lambda x=x, y=y, o=o:
                       torch.add(y, x, alpha=0.5, out=o),
                       "CuPy ElementwiseKernel": lambda cx=cx, cy=cy, co=co:
                       saxpy_cp(a, cx, cy, co)},
                      "o", lambda x=x, y=y: 0.5 * x.double() + y.double(), (1e-6, 1e-7)))
        total = torch.empty((), device="cuda")
        ctotal = cp.from_dlpack(total)
        ops.append(Op("sum", f"{size}: {n} float32", {"x": x, "total": total},
                      lambda v: lambda: K.sum(v["x"], out=v["total"]),
                      {"PyTorch sum(out=)": lambda x=x, t=total: torch.sum(x, 0, out=t),
                       "CuPy sum(out=)": lambda cx=cx, t=ctotal: cp.sum(cx, out=t)},
                      "total", lambda x=x: x.double().sum(), (1e-5, 0)))
        ops.append(Op("cumsum", f"{size}: {n} float32", {"x": x, "o": o},
                      lambda v: lambda: K.inclusive_scan(v["x"], out=v["o"]),
                      {"PyTorch cumsum(out=)": lambda x=x, o=o: torch.cumsum(x, 0, out=o),
                       "CuPy cumsum(out=)": lambda cx=cx, co=co: cp.cumsum(cx, out=co)},
                      "o", lambda x=x: torch.cumsum(x.double(), 0), (1e-4, 1e-3)))
        ops.append(_allocating(Op("sort (float32 keys)", f"{size}: {n} float32", {"x": x, "o": o},
                      lambda v: lambda: K.radix_sort(v["x"], v["o"]),
                      {"PyTorch sort (values and indices)": lambda x=x: torch.sort(x)[0],
                       "CuPy sort": lambda cx=cx: cp.sort(cx)},
                      "o", lambda x=x: torch.sort(x)[0], (0, 0)),
            lambda v: lambda: K.radix_sort(v["x"]), lambda r: r))
        scaled = x * 256
        counts = torch.empty(256, device="cuda", dtype=torch.int64)
        cs = cp.from_dlpack(scaled)
        ops.append(_allocating(Op("histogram, 256 bins", f"{size}: {n} float32",
                      {"x": scaled, "counts": counts},
                      lambda v: lambda: K.histogram(v["x"], 256, (0, 256), out=v["counts"]),
                      {"PyTorch histc": lambda s=scaled: torch.histc(s, 256, 0, 256),
                       "CuPy histogram": lambda cs=cs: cp.histogram(cs, 256, (0, 256))[0]},
                      "counts", lambda s=scaled: torch.histc(s.double(), 256, 0, 256), (0, 0)),
            lambda v: lambda: K.histogram(v["x"], 256, (0, 256)), lambda r: r[0]))
        side = int(math.isqrt(n))
        m = x.view(side, side)
        t = torch.empty(side, side, device="cuda")
        cm, ct = cp.from_dlpack(m), cp.from_dlpack(t)
        ops.append(Op("transpose", f"{size}: {side}x{side} float32", {"m": m, "t": t},
                      lambda v: lambda: K.transpose(v["m"], out=v["t"]),
                      {"PyTorch copy_(a.t())": lambda m=m, t=t: t.copy_(m.t()),
                       "CuPy copyto(out, a.T)": lambda cm=cm, ct=ct: cp.copyto(ct, cm.T)},
                      "t", lambda m=m: m.t(), (0, 0)))
    return ops


def _check_uniform(name: str, out) -> dict:
    """A fill has no reference; every value must be in [0, 1) (the poison, NaN, is not)
    with the moments of a uniform distribution (within 6 standard errors)."""
    v = to_host(out).astype(np.float64).reshape(-1)
    lo, hi = float(v.min()), float(v.max())
    mean, var = float(v.mean()), float(v.var())
    tol = 6.0 * 0.3 / math.sqrt(v.size)
    if not (lo >= 0.0 and hi < 1.0 and abs(mean - 0.5) < tol and abs(var - 1 / 12) < tol):
        raise CheckError(f"{name}: not uniform in [0, 1): min {lo}, max {hi}, mean {mean}, "
                         f"variance {var}")
    return {"compared": int(v.size), "mean": mean, "variance": var}


def _measure_op(timing: Timing, op: Op) -> dict:
    results: dict = {}
    if op.reference is None:  # a random fill: checked by its distribution
        torch = timing.torch
        out = op.tensors[op.out]
        views = _views(out, op.kinds)
        ready = {}
        targets = {}
        for kind in op.kinds:
            label = f"cupric, {KIND_LABEL[kind]}"
            if isinstance(views[kind], Exception):
                results[label] = {"unsupported": error_text(views[kind])}
                continue
            ready[label] = op.ours({op.out: views[kind]})
            targets[label] = views[kind] if kind == "cupy" else out
        ready.update(op.peers)
        for label, fn in list(ready.items()):
            try:
                target = targets.get(label, out)
                poison(target)
                torch.cuda.synchronize()
                r = fn()
                torch.cuda.synchronize()
                if label not in targets and hasattr(r, "shape"):
                    target = r  # a peer that allocates its result
                results[label] = {"check": _check_uniform(f"{op.name} {op.size}: {label}",
                                                          target),
                                  "allocates": label in op.allocating_peers}
            except Exception as exc:
                results[label] = {"error": error_text(exc)}
                del ready[label]
    else:
        ready = _contenders(op, results)
    if ready:
        # Large operations queue few calls per batch: the launch queue must not fill.
        per_batch = 20 if op.size.startswith("large") else None
        for label, figures in timing.measure(ready, per_batch).items():
            results[label].update(figures)
    return results


# -- ResNet-50 layers ----------------------------------------------------------------------

#: (name, input H=W, C, K, kernel, stride) of every distinct convolution of ResNet-50.
RESNET50 = (
    ("conv1 7x7/2", 224, 3, 64, 7, 2),
    ("l1 1x1 64-64", 56, 64, 64, 1, 1), ("l1 3x3 64-64", 56, 64, 64, 3, 1),
    ("l1 1x1 64-256", 56, 64, 256, 1, 1), ("l1 1x1 256-64", 56, 256, 64, 1, 1),
    ("l2 1x1 256-128", 56, 256, 128, 1, 1), ("l2 3x3/2 128-128", 56, 128, 128, 3, 2),
    ("l2 1x1 128-512", 28, 128, 512, 1, 1), ("l2 1x1/2 256-512", 56, 256, 512, 1, 2),
    ("l2 1x1 512-128", 28, 512, 128, 1, 1), ("l2 3x3 128-128", 28, 128, 128, 3, 1),
    ("l3 1x1 512-256", 28, 512, 256, 1, 1), ("l3 3x3/2 256-256", 28, 256, 256, 3, 2),
    ("l3 1x1 256-1024", 14, 256, 1024, 1, 1), ("l3 1x1/2 512-1024", 28, 512, 1024, 1, 2),
    ("l3 1x1 1024-256", 14, 1024, 256, 1, 1), ("l3 3x3 256-256", 14, 256, 256, 3, 1),
    ("l4 1x1 1024-512", 14, 1024, 512, 1, 1), ("l4 3x3/2 512-512", 14, 512, 512, 3, 2),
    ("l4 1x1 512-2048", 7, 512, 2048, 1, 1), ("l4 1x1/2 1024-2048", 14, 1024, 2048, 1, 2),
    ("l4 1x1 2048-512", 7, 2048, 512, 1, 1), ("l4 3x3 512-512", 7, 512, 512, 3, 1),
)


def _as_torch(torch, buf, dtype):
    """A DeviceBuffer result as a PyTorch tensor of `dtype` (bfloat16 may come back as
    16-bit integers where NumPy has no bfloat16)."""
    t = torch.from_dlpack(buf)
    return t if t.dtype == dtype else t.view(dtype)


def _resnet(torch, quick: bool) -> dict:
    import torch.nn.functional as F

    import cupric.cudnn as dnn
    timing = Timing(torch, quick)
    samples = 5 if quick else 11
    configs = []
    for batch in ((32,) if quick else (32, 64)):
        for dtype, nhwc in ((torch.float16, True),) + (() if quick else (
                (torch.bfloat16, True), (torch.float32, False))):
            for autotune in ((False,) if quick else (False, True)):
                configs.append((batch, dtype, nhwc, autotune))
    layers = RESNET50[::4] if quick else RESNET50
    out: dict = {}
    for batch, dtype, nhwc, autotune in configs:
        key = (f"batch {batch}, {str(dtype)[6:]} {'NHWC' if nhwc else 'NCHW'}, "
               f"{'autotuned' if autotune else 'heuristics'}")
        rows = {}
        # TF32 allowed for float32 on both sides: each library's default.
        options = dnn.PlanOptions(autotune=autotune, allow_tf32=True)
        torch.backends.cudnn.benchmark = autotune
        torch.backends.cudnn.allow_tf32 = True
        for name, hw, c, k, r, stride in layers:
            try:
                x = _randn(torch, (batch, c, hw, hw), dtype, nhwc)
                w = _randn(torch, (k, c, r, r), dtype, nhwc, 1.0 / math.sqrt(c * r * r))
                pad = r // 2
                ho = (hw + 2 * pad - r) // stride + 1
                y = torch.empty((batch, k, ho, ho), device="cuda", dtype=dtype)
                if nhwc:
                    y = y.contiguous(memory_format=torch.channels_last)

                def into_y(x=x, w=w, y=y, pad=pad, stride=stride):
                    return dnn.conv_forward(x, w, padding=pad, stride=stride, out=y,
                                            options=options)

                def ours(x=x, w=w, pad=pad, stride=stride):
                    # Allocating its output, as PyTorch's conv2d does: the timed call.
                    return dnn.conv_forward(x, w, padding=pad, stride=stride,
                                            options=options)

                def theirs(x=x, w=w, pad=pad, stride=stride):
                    return F.conv2d(x, w, padding=pad, stride=stride)
                for _ in range(2):  # plans built (and tuned) outside the timing
                    ours()
                    theirs()
                expected = theirs()
                tol = 5e-3 if dtype == torch.float32 else 3e-2
                # Into a poisoned output, then the timed allocating form (a fresh block of
                # the pool may hold an earlier result: it is checked, not trusted alone).
                check = assert_correct(f"resnet {key} {name}", into_y, y, expected,
                                       outputs=[y], rtol=tol, atol=tol)
                box = {}
                assert_correct(f"resnet {key} {name}, allocating",
                               lambda box=box, ours=ours: box.setdefault("r", ours()),
                               lambda box=box: _as_torch(torch, box["r"], dtype), expected,
                               rtol=tol, atol=tol)
                del box
                t_ours, t_torch = [], []
                for i in range(samples):
                    pair = ((t_ours, ours), (t_torch, theirs))
                    for sink, fn in (pair if i % 2 == 0 else pair[::-1]):
                        sink.append(timing.latency(fn))
                rows[name] = {"cupric_us": statistics.median(t_ours),
                              "torch_us": statistics.median(t_torch),
                              "max_abs_diff": check["max_abs_diff"]}
                rows[name]["ratio"] = rows[name]["torch_us"] / rows[name]["cupric_us"]
                del x, w, y
            except Exception as exc:  # recorded per layer; the others go on
                rows[name] = {"error": error_text(exc)}
        ratios = [r["ratio"] for r in rows.values() if "ratio" in r]
        summary = {"layers": rows}
        if ratios:
            worst = min((r["ratio"], n) for n, r in rows.items() if "ratio" in r)
            summary.update(geomean=math.exp(sum(map(math.log, ratios)) / len(ratios)),
                           worst=worst[0], worst_layer=worst[1], measured=len(ratios))
        out[key] = summary
        torch.cuda.empty_cache()
    torch.backends.cudnn.benchmark = False
    return out


# -- fresh processes -------------------------------------------------------------------------

_FRESH = {
    "cupric kernel": """
import time; t0 = time.perf_counter()
import numpy as np, cupric
from cupric import runtime as rt
from cupric.device import grid
from cupric.types import Array, f32
t1 = time.perf_counter()
@cupric.kernel
def scale(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"]):
    i = grid(1)
    if i < len(x):
        y[i] = 2.0 * x[i]
x = rt.to_device(np.arange(1 << 20, dtype=np.float32)); y = rt.empty(1 << 20, np.float32)
t_ready = time.perf_counter()
scale[(1 << 20) // 256, 256](x, y)
rt.synchronize()
t2 = time.perf_counter()
assert (y.to_numpy() == 2 * np.arange(1 << 20, dtype=np.float32)).all()
""",
    "CuPy RawKernel": """
import time; t0 = time.perf_counter()
import numpy as np, cupy as cp
t1 = time.perf_counter()
k = cp.RawKernel(r'''extern "C" __global__ void scale(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }''', "scale")
x = cp.asarray(np.arange(1 << 20, dtype=np.float32)); y = cp.empty(1 << 20, cp.float32)
t_ready = time.perf_counter()
k(((1 << 20) // 256,), (256,), (x, y, np.int32(1 << 20)))
cp.cuda.Device().synchronize()
t2 = time.perf_counter()
assert (y.get() == 2 * np.arange(1 << 20, dtype=np.float32)).all()
""",
    "PyTorch mul": """
import time; t0 = time.perf_counter()
import numpy as np, torch
t1 = time.perf_counter()
x = torch.from_numpy(np.arange(1 << 20, dtype=np.float32)).cuda(); y = torch.empty_like(x)
t_ready = time.perf_counter()
torch.mul(x, 2.0, out=y)
torch.cuda.synchronize()
t2 = time.perf_counter()
assert (y.cpu().numpy() == 2 * np.arange(1 << 20, dtype=np.float32)).all()
""",
    "cupric.cudnn conv2d": """
import time; t0 = time.perf_counter()
import torch, cupric.cudnn as dnn
t1 = time.perf_counter()
nhwc = torch.channels_last
x = torch.randn(8, 64, 14, 14, device="cuda", dtype=torch.float16).contiguous(memory_format=nhwc)
w = (0.05 * torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16)).contiguous(
    memory_format=nhwc)
torch.cuda.synchronize(); t_ready = time.perf_counter()
y = dnn.conv2d(x, w, padding=1)
torch.cuda.synchronize()
t2 = time.perf_counter()
ref = torch.nn.functional.conv2d(x.float(), w.float(), padding=1)
assert (torch.as_tensor(y, device="cuda").float() - ref).abs().max().item() < 5e-2
""",
    "PyTorch conv2d": """
import time; t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
nhwc = torch.channels_last
x = torch.randn(8, 64, 14, 14, device="cuda", dtype=torch.float16).contiguous(memory_format=nhwc)
w = (0.05 * torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16)).contiguous(
    memory_format=nhwc)
torch.cuda.synchronize(); t_ready = time.perf_counter()
y = torch.nn.functional.conv2d(x, w, padding=1)
torch.cuda.synchronize()
t2 = time.perf_counter()
ref = torch.nn.functional.conv2d(x.float(), w.float(), padding=1)
assert (y.float() - ref).abs().max().item() < 5e-2
""",
}
# After the script: its figures, and for cupric how long the caller waited for C builds
# (`cupric.runtime._cext.build_log`; 0 where nothing was built).
_FRESH_TAIL = """
import json, sys
waited = 0.0
if "cupric.runtime._cext" in sys.modules:
    log = sys.modules["cupric.runtime._cext"].build_log()
    waited = sum(e["seconds"] for e in log if e["event"] == "waited")
print(json.dumps({'import_s': t1 - t0, 'first_s': t2 - t1, 'ready_s': t_ready - t1,
                  'waited_s': waited}))
"""


def _ms(runs: list, key: str, minus: str | None = None) -> float:
    """The median over `runs` of ``run[key] - run[minus]``, in ms."""
    return 1e3 * statistics.median(r[key] - (r[minus] if minus else 0.0) for r in runs)


def _fresh(quick: bool) -> dict:
    """Each script in new processes: import time, and the time from the import to the
    first result on the device (CUDA initialization, compile or cache read, load, launch,
    synchronize), of which what came after the inputs were on the device (CUDA
    initialized) and, for cupric, the time the caller waited for its C extensions to
    build. "warm": a cache a previous process filled; "empty": a new cache folder
    (cupric: CUPRIC_CACHE_DIR, which also holds the generated bindings and where the
    toolchain was found; CuPy: CUPY_CACHE_DIR; both: CUDA_CACHE_PATH). Bytecode is
    compiled before the first process, as `pip install` does."""
    runs = 1 if quick else 2
    out: dict = {}
    # A machine that has never run cupric still has its bytecode (pip compiles it).
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "cupric")],
                   capture_output=True)
    with tempfile.TemporaryDirectory(prefix="cupric-host-cost-") as work:
        def child(script: str, cache: str) -> dict:
            env = dict(os.environ)
            env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
            env.update(CUPRIC_CACHE_DIR=os.path.join(cache, "cupric"),
                       CUPY_CACHE_DIR=os.path.join(cache, "cupy"),
                       CUDA_CACHE_PATH=os.path.join(cache, "nv"))
            # A file, not `-c`: a kernel's source must be readable.
            path = os.path.join(work, "fresh_script.py")
            with open(path, "w") as fh:
                fh.write(script + _FRESH_TAIL)
            proc = subprocess.run([sys.executable, path], capture_output=True, text=True,
                                  timeout=180, env=env, cwd=work)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.strip()[-400:])
            return json.loads(proc.stdout.strip().splitlines()[-1])

        for name, script in _FRESH.items():
            try:
                cached = name in ("cupric kernel", "CuPy RawKernel", "cupric.cudnn conv2d")
                empty, warm = [], []
                for i in range(runs):
                    cache = os.path.join(work, f"{name.replace(' ', '_')}-{i}")
                    empty.append(child(script, cache))
                    if cached:
                        warm.append(child(script, cache))
                row = {"import_ms": _ms(empty + warm, "import_s"),
                       "first_empty_cache_ms": _ms(empty, "first_s"),
                       "after_init_empty_cache_ms": _ms(empty, "first_s", "ready_s"),
                       "build_wait_empty_cache_ms": _ms(empty, "waited_s")}
                if warm:
                    row["first_warm_cache_ms"] = _ms(warm, "first_s")
                    row["after_init_warm_cache_ms"] = _ms(warm, "first_s", "ready_s")
                out[name] = row
            except Exception as exc:  # recorded; the other scripts go on
                out[name] = {"error": error_text(exc)}
    return out


# -- the run -----------------------------------------------------------------------------------

def _frontend() -> str:
    """Whether the cudnn-frontend Python package is importable here (a peer of the
    convolution forward rows when it is)."""
    try:
        import cudnn
        return f"importable ({getattr(cudnn, '__version__', '?')}): a conv forward peer"
    except Exception as exc:
        return f"not importable ({type(exc).__name__})"


PARTS = ("ops", "resnet", "fresh")


def run(json_path: str | None = None, quick: bool = False, parts=PARTS,
        ops_matching=None) -> dict:
    """Measure everything in this process (and the fresh ones); return the results.

    `parts` selects among "ops" (the per-call table), "resnet" (the ResNet-50 suite) and
    "fresh" (fresh processes); `ops_matching`, a list of words, keeps the operations
    whose name or size contains one of them."""
    import cupy as cp
    import torch
    results: dict = {"title": "Host cost per call, from any array kind", "quick": quick,
                     "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                     "cupy": cp.__version__, "cudnn_frontend": _frontend()}
    torch.manual_seed(0)
    timing = Timing(torch, quick)
    ops: dict = {}
    for build in (_library_ops, _kernel_ops) if "ops" in parts else ():
        try:
            built = build(torch, cp, quick)
        except Exception as exc:
            results[f"{build.__name__.strip('_')}_error"] = error_text(exc)
            continue
        for op in built:
            key = f"{op.name} | {op.size}"
            if ops_matching and not any(word in key for word in ops_matching):
                continue
            try:
                ops[key] = _measure_op(timing, op)
            except Exception as exc:  # recorded per operation; the others go on
                ops[key] = {"error": error_text(exc)}
            print(f"{key}: " + ", ".join(
                f"{k} {v['latency']:.1f}/{v['host']:.1f}/{v['b2b']:.1f}" if "latency" in v
                else f"{k} {v}" for k, v in ops[key].items()), flush=True)
    results["ops"] = ops
    for name, part in (("resnet50", lambda: _resnet(torch, quick)),
                       ("fresh_process", lambda: _fresh(quick))):
        if {"resnet50": "resnet", "fresh_process": "fresh"}[name] not in parts:
            continue
        try:
            results[name] = part()
        except Exception as exc:
            results[f"{name}_error"] = error_text(exc)
    return finish(results, json_path, " ".join(__doc__.split("\n\n")[1:5]), tables(results))


def tables(results: dict) -> list:
    out = []
    rows = []
    for key, contenders in results.get("ops", {}).items():
        op, size = key.split(" | ")
        if "error" in contenders and not isinstance(contenders["error"], dict):
            rows.append([op, size, "", None, None, None, "", None, contenders["error"]])
            continue
        peers = {k: v for k, v in contenders.items()
                 if not k.startswith("cupric") and "latency" in v}
        for label, v in contenders.items():
            if "latency" not in v:
                rows.append([op, size, label, None, None, None, "", None,
                             v.get("error") or v.get("unsupported") or ""])
                continue
            peer = ""
            vs = None
            if label.startswith("cupric"):
                # The fastest peer doing the same work: allocating its output or not.
                same = [(p["latency"], k) for k, p in peers.items()
                        if bool(p.get("allocates")) == bool(v.get("allocates"))]
                if same:
                    fastest, peer = min(same)
                    vs = ratio(fastest, v["latency"])
            rows.append([op, size, label, v["latency"], v["host"], v["b2b"], peer, vs, ""])
    out.append(table(
        "Per call: latency (one call, GPU idle before) / host cost (back to back) / "
        "device time back to back, us",
        [("operation", ""), ("size", ""), ("contender", ""), ("latency", ".1f"),
         ("host", ".1f"), ("b2b", ".1f"), ("fastest peer doing the same work", ""),
         ("peer / cupric, latency", ".2f"), ("note", "")], rows,
        "Each cupric row is compared with the fastest peer doing the same work: cupric's "
        "calls with `out=` beside peers writing a given output, cupric's allocating form "
        "(PyTorch tensors) beside peers that allocate their result (PyTorch's "
        "convolutions, batch norm, pooling, softmax, sort and histogram; CuPy's sort, "
        "histogram and random fill). A ratio above 1: cupric's latency is lower."))
    rn = results.get("resnet50") or {}
    if rn:
        rows = []
        for key, summary in rn.items():
            rows.append([key, summary.get("geomean"), summary.get("worst"),
                         summary.get("worst_layer"), summary.get("measured"),
                         "; ".join(f"{n}: {r['error']}" for n, r in summary["layers"].items()
                                   if "error" in r)[:300]])
        out.append(table("ResNet-50 convolutions (forward): PyTorch time / cupric time, one "
                         "call between events",
                         [("configuration", ""), ("geometric mean", ".3f"), ("worst", ".3f"),
                          ("worst layer", ""), ("layers", "d"), ("errors", "")], rows))
        first = next(iter(rn.values()))["layers"]
        rows = [[name] + [rn[k]["layers"].get(name, {}).get("ratio") for k in rn]
                for name in first]
        out.append(table("ResNet-50 convolutions, per layer (PyTorch time / cupric time)",
                         [("layer", "")] + [(k, ".2f") for k in rn], rows))
    fresh = results.get("fresh_process") or {}
    if fresh:
        rows = [[name, v.get("import_ms"), v.get("first_warm_cache_ms"),
                 v.get("first_empty_cache_ms"), v.get("after_init_warm_cache_ms"),
                 v.get("after_init_empty_cache_ms"), v.get("build_wait_empty_cache_ms"),
                 v.get("error", "")] for name, v in fresh.items()]
        out.append(table("Fresh process (ms): import, then the first result on the device",
                         [("script", ""), ("import", ".0f"), ("first, warm cache", ".0f"),
                          ("first, empty cache", ".0f"), ("after CUDA init, warm", ".0f"),
                          ("after CUDA init, empty", ".0f"),
                          ("waiting for C builds, empty", ".0f"), ("error", "")], rows,
                         "First = CUDA initialization, compile or cache read, load, launch, "
                         "synchronize; after CUDA init = the same from the moment the inputs "
                         "were on the device. PyTorch keeps no kernel cache of its own here."))
    return out


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and samples")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run, among {', '.join(PARTS)}")
    parser.add_argument("--ops", default="",
                        help="comma-separated words: only the operations whose name or "
                             "size contains one (e.g. 'matmul,conv forward')")
    args = parser.parse_args(argv)
    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose among {', '.join(PARTS)}")
    words = [w.strip() for w in args.ops.split(",") if w.strip()] or None
    results = run(args.json, quick=args.quick, parts=parts, ops_matching=words)
    print_tables(results)
    failed = [k for k in results if k.endswith("error")] + [
        f"{op}: {label}" for op, rows in results.get("ops", {}).items()
        for label, row in (rows.items() if isinstance(rows, dict) else ())
        if isinstance(row, dict) and "error" in row]
    print("\n".join(f"FAILED {f}" for f in failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
