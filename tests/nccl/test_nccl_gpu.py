"""cupric.nccl on the GPU lane.

One GPU: a one-rank communicator (world size 1) runs every collective against NumPy for
every element type, in place and out of place, on DeviceBuffers, PyTorch tensors, CuPy
arrays and DLPack producers, on cupric and PyTorch streams; non-blocking communicators,
split, wait, abort and close. Several GPUs (skipped here with the reason when the
machine has one): one process per GPU through `cupric.distributed.init`, every
collective against NumPy, and a rank killed mid-collective making its peer raise.

Run on a GPU machine with ``python3 -m pytest -q -m gpu tests/nccl``.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _gpu_count() -> int:
    from cupric.runtime import device_count
    return device_count()


def needs_gpus(n: int):
    """Skip unless the machine has `n` GPUs, saying how many it has."""
    def decorate(fn):
        def check():
            have = _gpu_count()
            if have < n:
                pytest.skip(f"needs {n} GPUs, this machine has {have}")
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            check()
            return fn(*args, **kwargs)
        return wrapper
    return decorate


@pytest.fixture(scope="module")
def nccl():
    import cupric.nccl as nccl
    if not nccl.is_available():
        pytest.skip(f"NCCL is not loadable: {nccl.lib.binding.unavailable_reason}")
    return nccl


@pytest.fixture(scope="module")
def comm(nccl):
    from cupric.runtime import Device
    Device(0).make_current()
    with nccl.Communicator.init(nccl.UniqueId.new(), 0, 1, device=0) as c:
        yield c


@pytest.fixture
def stream():
    from cupric.runtime import Device
    s = Device(0).create_stream()
    yield s
    s.synchronize()
    s.close()


DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
          np.float32, np.float64]


def _random(rng, n, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), n).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


def _poison(dtype, n):
    dtype = np.dtype(dtype)
    fill = {"f": np.nan, "c": np.nan}.get(dtype.kind, 0x5A)
    return np.full(n, fill, dtype) if dtype.kind in "fc" else np.full(n, fill).astype(dtype)


def _to_device(a, stream=None):
    from cupric.runtime import to_device
    return to_device(a, stream=stream)


# --------------------------------------------------------------------------------------
# One rank: facts, every collective, every dtype


def test_facts_and_repr(comm):
    assert (comm.rank, comm.world_size, comm.device.ordinal) == (0, 1, 0)
    assert comm.async_error() == 0
    assert "rank 0 of 1" in repr(comm) and comm.ptr


@pytest.mark.parametrize("dtype", DTYPES + [np.complex64])
@pytest.mark.parametrize("collective", ["all_reduce", "reduce", "broadcast", "all_gather",
                                        "reduce_scatter", "all_to_all"])
def test_every_collective_every_dtype_out_of_place(comm, stream, rng, collective, dtype):
    if dtype is np.complex64 and collective in ("all_reduce", "reduce", "reduce_scatter"):
        op = "sum"
    else:
        op = {"all_reduce": "sum", "reduce": "max", "reduce_scatter": "min"}.get(
            collective, "sum")
    n = 1000
    x = _random(rng, n, dtype)
    send = _to_device(x, stream)
    out = _to_device(_poison(dtype, n), stream)
    kwargs = {"stream": stream}
    if collective in ("all_reduce", "reduce", "reduce_scatter"):
        kwargs["op"] = op
    result = getattr(comm, collective)(send, out, **kwargs)
    assert result is out
    comm.wait(stream)
    # With one rank every reduction is the identity and every gather or scatter a copy:
    # the poisoned output must be written whole, with the right elements.
    np.testing.assert_array_equal(out.to_numpy(), x)
    np.testing.assert_array_equal(send.to_numpy(), x)      # the input is untouched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg"])
def test_all_reduce_in_place_every_op(comm, stream, rng, dtype, op):
    x = _random(rng, 4097, dtype)
    buf = _to_device(x, stream)
    assert comm.all_reduce(buf, op=op, stream=stream) is buf
    comm.wait(stream)
    np.testing.assert_array_equal(buf.to_numpy(), x)


def test_in_place_layouts_of_gather_and_scatter(comm, stream, rng):
    x = rng.standard_normal((1, 300)).astype(np.float32)
    buf = _to_device(x, stream)
    # world size 1: this rank's slot is the whole buffer
    comm.all_gather(buf[0], buf, stream=stream)
    comm.reduce_scatter(buf, buf[0], op="sum", stream=stream)
    comm.broadcast(buf, root=0, stream=stream)
    comm.reduce(buf, root=0, op="prod", stream=stream)
    comm.wait(stream)
    np.testing.assert_array_equal(buf.to_numpy(), x)


def test_outputs_made_when_not_given(comm, stream, rng):
    x = rng.standard_normal((6, 5)).astype(np.float64)
    send = _to_device(x, stream)
    gathered = comm.all_gather(send, stream=stream)
    scattered = comm.reduce_scatter(send, stream=stream)
    swapped = comm.all_to_all(send, stream=stream)
    comm.wait(stream)
    for out in (gathered, scattered, swapped):
        assert out.shape == (6, 5)
        np.testing.assert_array_equal(out.to_numpy(), x)


def test_send_recv_to_self_in_a_group(comm, stream, rng):
    x = rng.standard_normal(2048).astype(np.float32)
    send = _to_device(x, stream)
    out = _to_device(_poison(np.float32, 2048), stream)
    from cupric.nccl import group
    with group():
        comm.send(send, peer=0, stream=stream)
        comm.recv(out, peer=0, stream=stream)
    comm.wait(stream)
    np.testing.assert_array_equal(out.to_numpy(), x)


def test_bfloat16_from_ml_dtypes(comm, stream, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = rng.standard_normal(999).astype(ml_dtypes.bfloat16)
    send = _to_device(x, stream)
    out = _to_device(np.zeros(999, ml_dtypes.bfloat16), stream)
    comm.all_reduce(send, out, op="avg", stream=stream)
    comm.wait(stream)
    np.testing.assert_array_equal(out.to_numpy().view(np.uint16), x.view(np.uint16))


# --------------------------------------------------------------------------------------
# Other array kinds and streams


def test_torch_tensors_and_torch_streams(comm, rng):
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.float16):
        x = torch.from_numpy(rng.standard_normal(3000)).to(dtype).cuda()
        out = torch.full_like(x, 7)
        torch.cuda.synchronize()     # x and out were written on the default stream
        with torch.cuda.stream(s):
            comm.all_reduce(x, out, op="sum", stream=s)
            gathered = torch.empty(3000, dtype=dtype, device="cuda")
            comm.all_gather(x, gathered, stream=s)
        s.synchronize()
        assert torch.equal(out, x) and torch.equal(gathered, x), dtype
    # bool moves as bytes
    flags = torch.from_numpy(rng.random(100) > 0.5).cuda()
    copy = torch.zeros_like(flags)
    torch.cuda.synchronize()
    comm.broadcast(flags, copy, stream=s)
    s.synchronize()
    assert torch.equal(copy, flags)
    with pytest.raises(TypeError, match="cannot reduce"):
        comm.all_reduce(flags, stream=s)


def test_cupy_arrays(comm, rng):
    cupy = pytest.importorskip("cupy")
    x = cupy.asarray(rng.standard_normal(5000).astype(np.float32))
    out = cupy.full(5000, cupy.nan, cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    comm.all_reduce(x, out, op="max", stream=s)
    comm.wait(s)
    assert bool((out == x).all())


def test_dlpack_producers(comm, stream, rng):
    torch = pytest.importorskip("torch")

    class OnlyDlpack:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    x = torch.from_numpy(rng.standard_normal(777).astype(np.float64)).cuda()
    out = torch.zeros_like(x)
    torch.cuda.synchronize()
    comm.all_reduce(OnlyDlpack(x), OnlyDlpack(out), stream=stream)
    comm.wait(stream)
    assert torch.equal(out, x)


def test_host_arrays_and_non_contiguous_views_are_refused(comm, stream):
    from cupric.runtime import intake
    with pytest.raises(intake.HostMemoryError):
        comm.all_reduce(np.zeros(4, np.float32), stream=stream)
    buf = _to_device(np.zeros((4, 4), np.float32))
    with pytest.raises(intake.StrideError, match="contiguous"):
        comm.all_reduce(buf[:, 1], stream=stream)
    closed = _to_device(np.zeros(4, np.float32))
    closed.close()
    with pytest.raises(intake.ClosedError):
        comm.all_reduce(closed, stream=stream)


# --------------------------------------------------------------------------------------
# Communicator kinds and lifetimes


def test_non_blocking_communicator(nccl, stream, rng):
    opts = nccl.CommOptions(blocking=False, timeout=60)
    with nccl.Communicator.init(nccl.UniqueId.new(), 0, 1, device=0, options=opts) as c:
        assert not c.options.blocking
        x = rng.standard_normal(1 << 16).astype(np.float32)
        buf = _to_device(x, stream)
        out = _to_device(_poison(np.float32, 1 << 16), stream)
        c.all_reduce(buf, out, stream=stream)
        with nccl.group():
            c.send(buf, 0, stream=stream)
            c.recv(out, 0, stream=stream)
        c.wait(stream)
        np.testing.assert_array_equal(out.to_numpy(), x)
    assert c.closed


def test_split_and_all_local(nccl, comm, stream, rng):
    child = comm.split(color=0)
    try:
        assert (child.rank, child.world_size) == (0, 1)
        x = rng.standard_normal(100).astype(np.float32)
        buf = _to_device(x, stream)
        child.all_reduce(buf, stream=stream)
        child.wait(stream)
        np.testing.assert_array_equal(buf.to_numpy(), x)
    finally:
        child.close()
    assert comm.split(color=None) is None
    comms = nccl.Communicator.all_local()
    try:
        assert [c.rank for c in comms] == list(range(_gpu_count()))
        assert all(c.world_size == len(comms) for c in comms)
    finally:
        for c in comms:
            c.close()


def test_abort_and_close(nccl, stream):
    c = nccl.Communicator.init(nccl.UniqueId.new(), 0, 1, device=0)
    c.abort()
    assert c.closed
    c.abort()       # a second abort does nothing
    c.close()       # nor does closing an aborted one
    from cupric.runtime.errors import ClosedError
    with pytest.raises(ClosedError):
        c.all_reduce(_to_device(np.zeros(4, np.float32)), stream=stream)


def test_garbage_collected_communicators_are_destroyed(nccl):
    import gc

    from cupric.runtime import _lifetime
    c = nccl.Communicator.init(nccl.UniqueId.new(), 0, 1, device=0)
    assert c.owns_handle
    del c
    gc.collect()
    _lifetime.drain()     # the deferred ncclCommDestroy runs here, not in the collector


def test_wait_times_out_on_a_stream_that_never_finishes(nccl):
    # A stream held back by a host callback that sleeps past the timeout stands in for a
    # collective whose peer never arrives: wait() must abort and raise, not hang.
    from cupric.runtime import Device
    c = nccl.Communicator.init(nccl.UniqueId.new(), 0, 1, device=0,
                               options=nccl.CommOptions(timeout=0.5))
    s = Device(0).create_stream()
    s.launch_host_func(time.sleep, 3.0)
    start = time.monotonic()
    with pytest.raises(nccl.NcclTimeoutError, match="did not finish within 0.5 s"):
        c.wait(s)
    assert time.monotonic() - start < 2.5
    assert c.closed                      # aborted, on a background thread: ncclCommAbort
    s.synchronize()                      # frees device memory, which waits for the stream
    assert nccl.join_aborts(30)          # and then finishes
    s.close()


# --------------------------------------------------------------------------------------
# Several GPUs: one process per GPU


def _launch_workers(n, script_args, tmp_path, timeout=240, kill_rank=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    procs = []
    for rank in range(n):
        e = dict(env, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank),
                 LOCAL_WORLD_SIZE=str(n), CUPRIC_STORE="file",
                 CUPRIC_STORE_PATH=str(tmp_path / "store"), PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "_nccl_worker.py"), *script_args], env=e,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n[killed: timeout]"
        outputs.append((p.returncode, out))
    return outputs


@needs_gpus(2)
def test_every_collective_against_numpy_on_every_gpu(tmp_path):
    n = min(_gpu_count(), 8)
    results = _launch_workers(n, ["collectives"], tmp_path)
    for rank, (code, out) in enumerate(results):
        print(f"--- rank {rank}\n{out}")
        assert code == 0 and "collectives ok" in out, out[-3000:]


@needs_gpus(2)
def test_a_killed_peer_makes_the_other_ranks_raise(tmp_path):
    results = _launch_workers(2, ["abort", "10"], tmp_path, timeout=120)
    (code0, out0), (code1, _out1) = results
    print(out0)
    assert code1 != 0                       # rank 1 killed itself mid-run
    assert code0 == 0 and "raised Nccl" in out0, out0[-3000:]
    seconds = float(out0.split("raised")[1].split("after")[1].split()[0])
    assert seconds < 10 + 5


@needs_gpus(2)
def test_data_parallel_example_on_two_gpus(tmp_path):
    torchrun = pytest.importorskip("torch.distributed.run")
    assert torchrun
    script = ROOT / "examples" / "train_digits_ddp.py"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone", str(script), "--epochs", "20", "--check", "--no-progress",
         "--plot", str(tmp_path / "ddp.png")], env=env, capture_output=True, text=True,
        timeout=600, cwd=ROOT)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0
    assert "world size 2" in proc.stdout
