"""cupric.distributed.init on the GPU lane with one GPU: each store kind that one
process can exercise (none, PyTorch's TCP store served by this rank, the shared-file
store), the bound device, a barrier and a collective through the context."""

from __future__ import annotations

import socket

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_context(ctx, rng):
    from cupric.runtime import to_device
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.device.ordinal) == (0, 1, 0, 0)
    stream = ctx.device.create_stream()
    x = rng.standard_normal(1000).astype(np.float32)
    buf = to_device(x, stream)
    ctx.communicator.all_reduce(buf, op="avg", stream=stream)
    ctx.communicator.wait(stream)
    np.testing.assert_array_equal(buf.to_numpy(), x)
    ctx.barrier()
    stream.close()


def test_single_process_needs_no_store(rng):
    import cupric.distributed as dist
    with dist.init(environ={}) as ctx:
        assert ctx.store_kind is None and ctx.launcher == "none"
        _check_context(ctx, rng)
    assert ctx.communicator.closed


def test_tcp_store_served_by_rank_zero(rng):
    pytest.importorskip("torch", reason="the TCP store is PyTorch's")
    import cupric.distributed as dist
    environ = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
               "CUPRIC_STORE": "tcp", "TORCHELASTIC_RUN_ID": "gpu-lane"}
    with dist.init(environ=environ, timeout=60) as ctx:
        assert ctx.store_kind == "tcp" and ctx.launcher == "torchrun"
        # the store stays usable (torch.distributed.init_process_group(store=...))
        ctx.store.set("k", b"v")
        assert ctx.store.get("k") == b"v"
        _check_context(ctx, rng)


def test_file_store(rng, tmp_path):
    import cupric.distributed as dist
    with dist.init(environ={"CUPRIC_STORE": "file"}, store_path=tmp_path) as ctx:
        assert ctx.store_kind == "file"
        _check_context(ctx, rng)
    assert list(tmp_path.iterdir()) == []      # the id was removed once read
