"""Collective bandwidth and latency: cupric.nccl beside torch.distributed (NCCL backend)
in the same job, on the same buffers and the same stream.

For all_reduce, all_gather and reduce_scatter over message sizes from 4 B to 1 GiB
(float32), each rank times a batch of back-to-back calls between CUDA events (the host's
enqueue cost included, as a training loop sees it), after a cross-rank alignment; the
slowest rank's time counts. Bus bandwidth follows NCCL's definition (nccl-tests):
algorithm bandwidth (bytes / time; for all_gather and reduce_scatter the larger
buffer's bytes) times 2(n-1)/n for all_reduce and (n-1)/n for all_gather and
reduce_scatter. Rows alternate cupric and PyTorch batch by batch, and the median of the
per-round ratios is reported (torch time / cupric time: above 1, cupric is faster).
Every collective is checked against NumPy on every rank (random inputs, poisoned
outputs) before anything is timed.

    torchrun --nproc-per-node N benchmarks/collectives.py [--json PATH] [--quick]
    python3 benchmarks/collectives.py                       (world size 1: latency only)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

from _common import error_text, paired_ratio, table

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
MIB = 1 << 20


def message_sizes(quick: bool) -> list[int]:
    """Bytes per message: 4 B .. 1 GiB by 4x (4 B .. 64 MiB with `quick`); 1 MiB is one
    of them."""
    top = 64 * MIB if quick else 1 << 30
    sizes, size = [], 4
    while size <= top:
        sizes.append(size)
        size *= 4
    return sizes


def _setup():
    """cupric's context, then torch.distributed on the same store (or its own)."""
    import torch
    import torch.distributed as tdist

    import cupric.distributed as dist
    ctx = dist.init()
    torch.cuda.set_device(ctx.device.ordinal)
    device = torch.device("cuda", ctx.device.ordinal)
    if ctx.store_kind == "tcp":
        store = ctx.store.store
    elif ctx.world_size == 1:
        store = tdist.HashStore()
    else:
        store = None        # env:// (torchrun's variables)
    tdist.init_process_group("nccl", store=store, rank=ctx.rank,
                             world_size=ctx.world_size, device_id=device)
    return ctx, torch, tdist, device


def _ops(name, ctx, torch, tdist, send, recv, stream):
    """(cupric call, torch call) of one collective on the same buffers and stream."""
    comm = ctx.communicator
    if name == "all_reduce":   # in place for both, as training loops call it
        return (lambda: comm.all_reduce(recv, stream=stream),
                lambda: tdist.all_reduce(recv))
    if name == "all_gather":
        return (lambda: comm.all_gather(send, recv, stream=stream),
                lambda: tdist.all_gather_into_tensor(recv, send))
    return (lambda: comm.reduce_scatter(send, recv, stream=stream),
            lambda: tdist.reduce_scatter_tensor(recv, send))


def _buffers(name, count, world, torch, device):
    """(send, recv) float32 tensors for a message of `count` elements (the larger
    buffer of all_gather / reduce_scatter holds `count`)."""
    per_rank = max(1, count // world)
    if name == "all_reduce":
        return (torch.empty(count, device=device), torch.empty(count, device=device))
    if name == "all_gather":
        return (torch.empty(per_rank, device=device),
                torch.empty(per_rank * world, device=device))
    return (torch.empty(per_rank * world, device=device),
            torch.empty(per_rank, device=device))


def check(ctx, torch, tdist, device, stream) -> dict:
    """Every collective of both libraries against NumPy on every rank; raises on a
    mismatch. Returns what was checked."""
    rank, world = ctx.rank, ctx.world_size
    n = 4096 * world
    everyone = np.stack([np.random.default_rng([7, r]).standard_normal(n)
                         .astype(np.float32) for r in range(world)])
    block = n // world
    want = {"all_reduce": everyone.sum(0),
            "all_gather": everyone[:, :block].reshape(-1),
            "reduce_scatter": everyone.sum(0)[rank * block:(rank + 1) * block]}
    checked = {}
    for name in COLLECTIVES:
        send, recv = _buffers(name, n, world, torch, device)
        mine = everyone[rank] if name != "all_gather" else everyone[rank, :block]
        for label in ("cupric", "torch"):
            send.copy_(torch.from_numpy(mine))
            if name == "all_reduce":
                recv.copy_(send)
            else:
                recv.fill_(float("nan"))
            ours, theirs = _ops(name, ctx, torch, tdist, send, recv, stream)
            with torch.cuda.stream(stream):
                (ours if label == "cupric" else theirs)()
            stream.synchronize()
            got = recv.cpu().numpy()
            np.testing.assert_allclose(got, want[name], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{label} {name} on rank {rank}")
            checked[f"{label} {name}"] = "ok"
    return checked


def _time_batch(torch, stream, fn, iters: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record(stream)
        for _ in range(iters):
            fn()
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def _slowest(ctx, torch, device, seconds: float) -> float:
    """The largest of every rank's `seconds` (a max all-reduce; it also aligns the
    ranks before the next batch)."""
    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    ctx.communicator.all_reduce(value, op="max", stream=torch.cuda.current_stream())
    torch.cuda.current_stream().synchronize()
    return float(value.item())


def measure(ctx, torch, tdist, device, stream, sizes, rounds: int) -> dict:
    from cupric.nccl import bus_bandwidth_factor
    world = ctx.world_size
    rows = {}
    for name in COLLECTIVES:
        factor = bus_bandwidth_factor(name, world)
        for size in sizes:
            count = max(world, size // 4)
            send, recv = _buffers(name, count, world, torch, device)
            send.normal_()
            recv.normal_()
            ours, theirs = _ops(name, ctx, torch, tdist, send, recv, stream)
            nbytes = max(send.numel(), recv.numel()) * 4
            iters = 50 if nbytes <= MIB else (10 if nbytes <= 64 * MIB else 3)
            for fn in (ours, theirs):       # warm-up: NCCL sets up channels on first use
                _time_batch(torch, stream, fn, 2)
            samples = {"cupric": [], "torch": []}
            for r in range(rounds):
                order = ("cupric", "torch") if r % 2 == 0 else ("torch", "cupric")
                for label in order:
                    _slowest(ctx, torch, device, 0.0)
                    t = _time_batch(torch, stream, ours if label == "cupric" else theirs,
                                    iters)
                    samples[label].append(_slowest(ctx, torch, device, t))
            t_ours = statistics.median(samples["cupric"])
            t_theirs = statistics.median(samples["torch"])
            row = {"collective": name, "bytes": nbytes, "world_size": world,
                   "cupric_us": t_ours * 1e6, "torch_us": t_theirs * 1e6,
                   "cupric_busbw_GBps": nbytes / t_ours * factor / 1e9,
                   "torch_busbw_GBps": nbytes / t_theirs * factor / 1e9,
                   "ratio": paired_ratio(samples["cupric"], samples["torch"])}
            rows[f"{name} {nbytes}"] = row
            del send, recv
    return rows


def _human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def run(json_path: str | None = None, quick: bool = False, rounds: int = 5) -> dict:
    ctx, torch, tdist, device = _setup()
    stream = torch.cuda.Stream(device=device)
    results: dict = {"world_size": ctx.world_size, "launcher": ctx.launcher,
                     "device": torch.cuda.get_device_name(device)}
    try:
        import cupric.nccl as nccl
        results["nccl_version"] = ".".join(map(str, nccl.version()))
        results["torch_nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        results["checked"] = check(ctx, torch, tdist, device, stream)
        results["rows"] = measure(ctx, torch, tdist, device, stream,
                                  message_sizes(quick), rounds)
    except Exception as exc:   # reported in the results and the exit status
        results["error"] = error_text(exc)
        if ctx.rank == 0:
            print(f"collectives: {results['error']}", file=sys.stderr)
    finally:
        tdist.destroy_process_group()
        ctx.close()
    if ctx.rank != 0:
        return results
    rows = [[r["collective"], _human(r["bytes"]), r["cupric_us"], r["torch_us"],
             r["cupric_busbw_GBps"], r["torch_busbw_GBps"], r["ratio"]["median"]]
            for r in results.get("rows", {}).values()]
    results["table"] = table(
        f"NCCL collectives, world size {ctx.world_size} ({results['device']})",
        [("collective", ""), ("message", ""), ("cupric us", ".1f"), ("torch us", ".1f"),
         ("cupric busbw GB/s", ".1f"), ("torch busbw GB/s", ".1f"),
         ("torch/cupric time", ".3f")], rows,
        "float32; slowest rank's time of back-to-back calls between events; busbw per "
        "nccl-tests (0 at world size 1, where only latency means anything)")
    print(f"world size {ctx.world_size}, NCCL {results.get('nccl_version')} (torch's "
          f"{results.get('torch_nccl_version')}), {results['device']}")
    print(f"{'collective':<15}{'message':>10}{'cupric us':>12}{'torch us':>12}"
          f"{'cupric GB/s':>13}{'torch GB/s':>12}{'torch/cupric':>14}")
    for row in rows:
        print(f"{row[0]:<15}{row[1]:>10}{row[2]:>12.1f}{row[3]:>12.1f}{row[4]:>13.1f}"
              f"{row[5]:>12.1f}{row[6]:>14.3f}")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
        print(f"wrote {json_path}")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results to this file (rank 0)")
    parser.add_argument("--quick", action="store_true", help="sizes up to 64 MiB")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating timed batches per contender (default 5)")
    args = parser.parse_args(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # keep NVLink multicast off
    results = run(args.json, args.quick, args.rounds)
    return 1 if "error" in results else 0


if __name__ == "__main__":
    sys.exit(main())
