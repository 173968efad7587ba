"""Data-parallel training of examples/train_digits.py's CNN over several GPUs with NCCL.

Every rank holds the whole model and trains on its share of each global batch; after
the backward pass the gradients (one flat buffer) are summed over the ranks by NCCL
all-reduces, so every rank takes the same optimizer step. The all-reduces run on a
second stream, one bucket per layer, each started as soon as the backward pass has
queued that layer's gradients (events order the two streams), so communication overlaps
the rest of the backward pass.

    torchrun --nproc-per-node N examples/train_digits_ddp.py [--epochs 30] [--check]
    mpirun -n N python3 examples/train_digits_ddp.py [...]
    python3 examples/train_digits_ddp.py [...]              (one process: world size 1)

--batch-size is the global batch, split over the ranks: each rank scales its loss by
1 / global batch and the gradients are summed, so N GPUs compute the one-GPU gradient
of the same batches and reach the same accuracy. All other options are train_digits'
(--graph aside); --no-overlap reduces the whole buffer after the backward pass instead,
and --compare-single trains train_digits' one-GPU loop afterwards on rank 0 (world size
1 only) to compare epoch times.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import statistics
import sys
import time

import numpy as np


def _load_train_digits():
    # train_digits is a script beside this one, not a package module: load it by path
    # under a name that cannot clash with anything on sys.path.
    path = pathlib.Path(__file__).resolve().with_name("train_digits.py")
    spec = importlib.util.spec_from_file_location("cupric_example_train_digits", path)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module     # dataclasses look their module up here
        spec.loader.exec_module(module)
    return module


td = _load_train_digits()


def parse_args(argv=None) -> argparse.Namespace:
    """train_digits' options plus --no-overlap and --compare-single (--graph refused).

    Raises
    ------
    SystemExit
        For an unknown option or a bad value (argparse's usage message).
    """
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--no-overlap", dest="overlap", action="store_false",
                     help="all-reduce the whole gradient after the backward pass on the "
                          "training stream (no buckets, no overlap)")
    own.add_argument("--compare-single", action="store_true",
                     help="with world size 1: also train with train_digits' one-GPU loop "
                          "and compare epoch times")
    ours, rest = own.parse_known_args(argv)
    if "-h" in rest or "--help" in rest:
        own.print_help()
    args = td.parse_args(rest)
    if args.graph:
        argparse.ArgumentParser(prog="train_digits_ddp.py").error(
            "--graph is not supported by the data-parallel example")
    args.overlap = ours.overlap
    args.compare_single = ours.compare_single
    return args


# --------------------------------------------------------------------------------------
# Buckets and the reducer


def layer_buckets() -> list[tuple[str, int, int]]:
    """(layer, start, stop) spans of the flat gradient buffer, one per layer, in the order
    the backward pass completes them (last layer first). Together they cover the buffer
    (alignment gaps included, which stay zero)."""
    layout, total = td.parameter_layout()
    layers: dict[str, int] = {}
    for name, (offset, _shape) in layout.items():
        layer = name.split(".")[0]
        layers[layer] = min(offset, layers.get(layer, offset))
    starts = sorted(layers.items(), key=lambda kv: kv[1])
    spans = [(layer, start, starts[i + 1][1] if i + 1 < len(starts) else total)
             for i, (layer, start) in enumerate(starts)]
    return spans[::-1]


class GradientReducer:
    """Sums gradient buckets over the ranks on a stream of its own.

    `ready(k)` records an event on the training stream (bucket k's gradients are queued)
    and has the communication stream wait for it, then queues bucket k's all-reduce
    there; `finish()` makes the training stream wait for every queued all-reduce, before
    the optimizer reads the gradients.
    """

    def __init__(self, comm, grad_flat, buckets, stream, overlap: bool = True) -> None:
        self.comm = comm
        self.stream = stream
        self.overlap = overlap
        device = comm.device
        self.views = [grad_flat[start:stop] for _layer, start, stop in buckets]
        self.whole = grad_flat
        self.comm_stream = device.create_stream(non_blocking=True) if overlap else None
        self.ready_events = [device.create_event(timing=False) for _ in buckets]
        self.done = device.create_event(timing=False)

    def ready(self, k: int) -> None:
        if not self.overlap:
            return
        self.ready_events[k].record(self.stream)
        self.comm_stream.wait_event(self.ready_events[k])
        self.comm.all_reduce(self.views[k], op="sum", stream=self.comm_stream)

    def finish(self) -> None:
        if not self.overlap:
            self.comm.all_reduce(self.whole, op="sum", stream=self.stream)
            return
        self.done.record(self.comm_stream)
        self.stream.wait_event(self.done)

    def close(self) -> None:
        if self.comm_stream is not None:
            self.comm_stream.synchronize()
            self.comm_stream.close()
        for event in (*self.ready_events, self.done):
            event.close()


class DataParallelNet(td.CupricNet):
    """train_digits' CupricNet whose loss is scaled by the global batch and whose backward
    pass hands each layer's gradients to a `GradientReducer` as soon as they are queued.

    Every rank starts from the same weights (the same seed), and the summed gradients
    are bitwise the same on every rank (NCCL's all-reduce gives every rank one result),
    so the ranks' parameters never drift apart.
    """

    def __init__(self, args, comm, stream) -> None:
        super().__init__(args, stream=stream)
        self.comm = comm
        self.global_batch = args.batch_size
        self.buckets = layer_buckets()
        self.reducer = GradientReducer(comm, self.grad_flat, self.buckets, stream,
                                       args.overlap)
        self._bucket_of = {layer: k for k, (layer, _a, _b) in enumerate(self.buckets)}

    def loss_scale(self, batch: int) -> float:
        """1 / global batch (not the local batch): the all-reduce's sum of the ranks'
        gradients is then the gradient of the global batch's mean loss."""
        return 1.0 / self.global_batch

    def gradients_ready(self, layer: str) -> None:
        """Start the all-reduce of `layer`'s bucket (its gradients are queued)."""
        self.reducer.ready(self._bucket_of[layer])

    def backward_done(self) -> None:
        """The training stream waits for the all-reduces: `step`'s optimizer update then
        reads the summed gradients."""
        self.reducer.finish()

    def empty_step(self, total_steps: int) -> None:
        """A step in which this rank has no images (a global batch smaller than the
        world): zero gradients join the all-reduces, then the same optimizer step."""
        self.grad_flat.zero(stream=self.stream)
        for k in range(len(self.buckets)):
            self.reducer.ready(k)
        self.reducer.finish()
        self.update(0, total_steps)


# --------------------------------------------------------------------------------------
# Sharding and the training loop


def shard_orders(orders, rank: int, world_size: int):
    """Each global batch's share of rank `rank`: every `world_size`-th index from
    `rank` (shares differ in size by at most one image)."""
    return [[idx[rank::world_size] for idx in batches] for batches in orders]


def train_data_parallel(net: DataParallelNet, split, orders, progress, comm):
    """Train on this rank's shares of `orders` (global batches); returns one
    `td.EpochRecord` per epoch with the loss summed over the ranks."""
    records = []
    rank, size = comm.rank, comm.world_size
    local = shard_orders(orders, rank, size)
    total_steps = sum(len(batches) for batches in orders)
    net.load_data(split, local)
    for epoch, (batches, mine) in enumerate(zip(orders, local), 1):
        net.stats.zero(stream=net.stream)
        start = time.perf_counter()
        for idx, own in zip(batches, mine):
            net.global_batch = len(idx)
            if len(own) == 0:
                net.empty_step(total_steps)
                continue
            net.step(net.buffers(len(own), True), total_steps)
        comm.all_reduce(net.stats, op="sum", stream=net.stream)
        loss_sum, _correct = net.stats.to_numpy(stream=net.stream)
        seconds = time.perf_counter() - start
        _train_loss, train_acc = net.evaluate(split.train_x, split.train_y)
        test_loss, test_acc = net.evaluate(split.test_x, split.test_y)
        record = td.EpochRecord(epoch, float(loss_sum) / len(split.train_y), train_acc,
                                test_loss, test_acc, seconds)
        records.append(record)
        progress(record)
    return records


def parameters_agree(net: DataParallelNet, comm) -> bool:
    """Whether every rank holds bitwise the same parameters (max and min of each value
    over the ranks are equal)."""
    from cupric.runtime import empty
    stream = net.stream
    high = empty(net.total, np.float32, stream=stream)
    low = empty(net.total, np.float32, stream=stream)
    comm.all_reduce(net.flat, high, op="max", stream=stream)
    comm.all_reduce(net.flat, low, op="min", stream=stream)
    return bool(np.array_equal(high.to_numpy(stream=stream), low.to_numpy(stream=stream)))


def main(argv=None) -> int:
    """Run the example; returns the exit status."""
    args = parse_args(argv)
    reason = td.gpu_unavailable_reason()
    if reason is not None:
        print(f"notice: {reason}. This example trains with cuDNN, cuBLAS and NCCL and "
              f"needs NVIDIA GPUs; nothing was trained.", file=sys.stderr)
        return 0
    from cupric import nccl
    if not nccl.is_available():
        print(f"error: NCCL cannot be loaded: {nccl.lib.binding.unavailable_reason}",
              file=sys.stderr)
        return 1
    import cupric.distributed as dist
    ctx = dist.init()
    try:
        return _run(args, ctx)
    except BaseException:
        ctx.communicator.abort()    # peers waiting on this rank raise instead of hanging
        raise


def _run(args, ctx) -> int:
    main_rank = ctx.is_main
    missing = td.missing_packages(args)
    if missing:
        # Every rank sees the same packages, so every rank stops here.
        print(f"error: this run needs {', '.join(missing)}", file=sys.stderr)
        ctx.communicator.abort()
        return 2
    images, labels = td.load_digits_arrays()
    split = td.split_data(images, labels, args.test_fraction, args.seed)
    orders = td.batch_orders(len(split.train_y), args.batch_size, args.epochs, args.seed)
    stream = ctx.device.create_stream()
    net = DataParallelNet(args, ctx.communicator, stream)
    if main_rank:
        print(f"digits, data parallel over world size {ctx.world_size} "
              f"({ctx.launcher}, store {ctx.store_kind}): {len(split.train_y)} training "
              f"images, global batch {args.batch_size}, {args.epochs} epochs, "
              f"{args.optimizer} lr {args.lr:g}; gradient buckets "
              f"{[(layer, stop - start) for layer, start, stop in net.buckets]}, "
              f"{'overlapped' if args.overlap else 'not overlapped'}")
        callback, close = td.make_progress(args, f"ddp x{ctx.world_size}")
    else:
        callback, close = (lambda record: None), (lambda: None)
    try:
        records = train_data_parallel(net, split, orders, callback, ctx.communicator)
    finally:
        close()
    agree = parameters_agree(net, ctx.communicator)
    net.reducer.close()
    stream.synchronize()
    ctx.close()
    if not main_rank:
        return 0
    runs = {f"ddp x{ctx.world_size}": records}
    if args.compare_single and ctx.world_size == 1:
        single = td.CupricNet(args, stream=td.training_stream())
        callback, close = td.make_progress(args, "single")
        try:
            runs["single"] = td.train_cupric(single, split, orders, callback)
        finally:
            close()
    folder = os.path.dirname(args.plot)
    if folder:
        os.makedirs(folder, exist_ok=True)
    td.write_plot(args.plot, runs)
    print()
    for label, recs in runs.items():
        print(td.summarize(label, recs))
    rest = [r.seconds for r in records[1:]] or [records[0].seconds]
    images_per_s = len(split.train_y) / statistics.median(rest)
    print(f"ddp: world size {ctx.world_size}, {images_per_s:,.0f} training images/s "
          f"(median epoch), parameters identical on every rank: {agree}")
    if "single" in runs:
        single_rest = [r.seconds for r in runs["single"][1:]] or [runs["single"][0].seconds]
        print(f"ddp x1 median epoch / single-GPU loop median epoch: "
              f"{statistics.median(rest) / statistics.median(single_rest):.3f}")
    print(f"plot written to {args.plot}")
    final = records[-1].test_accuracy
    if args.check and (final < 0.97 or not agree):
        print(f"check failed: final test accuracy {final:.4f} (>= 0.97 wanted), "
              f"parameters identical: {agree}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
