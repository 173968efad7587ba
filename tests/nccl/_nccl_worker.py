"""One rank of the multi-GPU tests (started once per GPU by tests/nccl/test_nccl_gpu.py
with torchrun-style variables and a shared-file store).

    _nccl_worker.py collectives     every collective against NumPy, every dtype
    _nccl_worker.py abort SECONDS   rank 1 dies before the all-reduce; rank 0 must raise
                                    within SECONDS
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import cupric.distributed as dist
from cupric import nccl
from cupric.runtime import to_device

DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
          np.float32, np.float64]
# In the arrays' own type, as NCCL computes (integers wrap; NumPy would widen them).
OPS = {"sum": lambda a: a.sum(0, dtype=a.dtype), "prod": lambda a: a.prod(0, dtype=a.dtype),
       "max": lambda a: a.max(0), "min": lambda a: a.min(0)}


def inputs(size, n, dtype, seed):
    """Every rank's input (each rank can compute all of them: the references)."""
    out = []
    for r in range(size):
        rng = np.random.default_rng([seed, r])
        if np.dtype(dtype).kind in "iu":
            out.append(rng.integers(1, 4, n).astype(dtype))   # products stay small
        else:
            out.append((rng.random(n) + 0.5).astype(dtype))
    return np.stack(out)


def close(got, want, dtype):
    if np.dtype(dtype).kind == "f":
        tol = 2e-2 if np.dtype(dtype).itemsize == 2 else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol)
    else:
        np.testing.assert_array_equal(got, want)


def collectives(ctx):
    comm, rank, size = ctx.communicator, ctx.rank, ctx.world_size
    stream = ctx.device.create_stream()
    n = 1024 * size
    for k, dtype in enumerate(DTYPES):
        every = inputs(size, n, dtype, k)
        mine = every[rank]
        for op, ref in OPS.items():
            send = to_device(mine, stream)
            out = to_device(np.zeros(n, dtype), stream)
            comm.all_reduce(send, out, op=op, stream=stream)
            comm.all_reduce(send, op=op, stream=stream)               # in place
            comm.wait(stream)
            close(out.to_numpy(), ref(every), dtype)
            close(send.to_numpy(), ref(every), dtype)
        root = k % size
        send = to_device(mine, stream)
        out = to_device(np.zeros(n, dtype), stream)
        comm.reduce(send, out, root=root, op="sum", stream=stream)
        comm.broadcast(send, root=root, stream=stream)
        gathered = comm.all_gather(to_device(mine, stream), stream=stream)
        scattered = comm.reduce_scatter(to_device(mine, stream), op="max", stream=stream)
        swapped = comm.all_to_all(to_device(mine, stream), stream=stream)
        comm.wait(stream)
        if rank == root:
            close(out.to_numpy(), OPS["sum"](every), dtype)
        close(send.to_numpy(), every[root], dtype)
        close(gathered.to_numpy(), every.reshape(-1), dtype)
        block = n // size
        close(scattered.to_numpy(), every.max(0)[rank * block:(rank + 1) * block], dtype)
        close(swapped.to_numpy(), every[:, rank * block:(rank + 1) * block].reshape(-1),
              dtype)
    # A ring of sends and receives in one group.
    x = to_device(np.full(100, rank, np.float32), stream)
    y = to_device(np.full(100, -1, np.float32), stream)
    with nccl.group():
        comm.send(x, (rank + 1) % size, stream=stream)
        comm.recv(y, (rank - 1) % size, stream=stream)
    comm.wait(stream)
    close(y.to_numpy(), np.full(100, (rank - 1) % size, np.float32), np.float32)
    # Split into even and odd ranks.
    child = comm.split(rank % 2)
    z = to_device(np.ones(10, np.float32), stream)
    child.all_reduce(z, stream=stream)
    child.wait(stream)
    close(z.to_numpy(), np.full(10, child.world_size, np.float32), np.float32)
    child.close()
    print(f"rank {rank}: collectives ok", flush=True)


def abort(ctx, seconds):
    comm = ctx.communicator
    stream = ctx.device.create_stream()
    buf = to_device(np.ones(1 << 20, np.float32), stream)
    comm.all_reduce(buf, stream=stream)
    comm.wait(stream)                      # both ranks are up and talking
    if ctx.rank == 1:
        os._exit(3)                         # dies without a word
    time.sleep(0.5)
    start = time.monotonic()
    try:
        comm.all_reduce(buf, stream=stream)
        comm.wait(stream, timeout=seconds)
    except nccl.NcclError as exc:
        comm.abort()      # already aborted by the wait loop; not when the call itself failed
        print(f"rank 0 raised {type(exc).__name__} after "
              f"{time.monotonic() - start:.2f} s: {exc}", flush=True)
        return
    print("rank 0: the all-reduce finished without its peer?!", flush=True)
    sys.exit(1)


def main():
    mode = sys.argv[1]
    ctx = dist.init(timeout=120)
    print(ctx, flush=True)
    if mode == "collectives":
        collectives(ctx)
        ctx.close()
    else:
        abort(ctx, float(sys.argv[2]))
        # the communicator was aborted by the timeout path; nothing to close


if __name__ == "__main__":
    main()
