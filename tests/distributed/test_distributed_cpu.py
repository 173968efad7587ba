"""cupric.distributed on the CPU lane: each launcher's environment, the shared-file
store across processes, the choice of store, and init() against a fake communicator."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from cupric.distributed import context as ctx_mod
from cupric.distributed import env as env_mod
from cupric.distributed.env import LaunchEnvironmentError, read_environment
from cupric.distributed.store import FileStore, StoreTimeoutError

# --------------------------------------------------------------------------------------
# Launcher environments


@pytest.mark.parametrize("environ,want", [
    ({}, ("none", 0, 1, 0, 1)),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
      "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "abc"},
     ("torchrun", 3, 8, 1, 4)),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6",
      "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
     ("openmpi", 5, 6, 2, 3)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
     ("mpich", 1, 2, 1, 2)),
    ({"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1",
      "SLURM_NTASKS_PER_NODE": "8(x2)", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"},
     ("slurm", 9, 16, 1, 8)),
    # torchrun inside a SLURM allocation: torchrun's variables win.
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "1",
      "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}, ("torchrun", 0, 2, 0, None)),
    # mpirun inside SLURM: Open MPI's variables win.
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
      "SLURM_LOCALID": "0"}, ("openmpi", 1, 2, 1, None)),
    # One process needs no local rank.
    ({"PMI_RANK": "0", "PMI_SIZE": "1"}, ("mpich", 0, 1, 0, None)),
])
def test_each_launcher_is_read(environ, want):
    env = read_environment(environ)
    assert (env.launcher, env.rank, env.world_size, env.local_rank,
            env.local_world_size) == want
    assert env.under_mpi == (want[0] in ("openmpi", "mpich"))


def test_torchrun_details():
    env = read_environment({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
                            "TORCHELASTIC_RUN_ID": "job-1",
                            "TORCHELASTIC_USE_AGENT_STORE": "True",
                            "CUPRIC_STORE_PATH": "/shared/x", "CUPRIC_STORE": "TCP"})
    assert (env.master_addr, env.master_port, env.run_id) == ("10.0.0.1", 29400, "job-1")
    assert env.agent_store and env.store_path == "/shared/x" and env.store_kind == "tcp"
    slurm = read_environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                              "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"})
    assert slurm.run_id == "77.3"


@pytest.mark.parametrize("environ,match", [
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "not below WORLD_SIZE"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "0", "LOCAL_RANK": "0"}, "must be >= 1"),
    ({"RANK": "-1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "negative"),
    ({"RANK": "1", "WORLD_SIZE": "2"}, "LOCAL_RANK"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
      "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
     "not below OMPI_COMM_WORLD_LOCAL_SIZE"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "http"}, "MASTER_PORT"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, "not a TCP port"),
    ({"CUPRIC_STORE": "redis"}, "use mpi, tcp or file"),
])
def test_malformed_environments_raise_typed_errors(environ, match):
    with pytest.raises(LaunchEnvironmentError, match=match):
        read_environment(environ)
    assert issubclass(LaunchEnvironmentError, ValueError)


def test_every_variable_is_named_in_the_env_module():
    # The one place: no other module of cupric.distributed reads os.environ.
    import inspect
    import re

    from cupric.distributed import context, store
    for module in (context, store):
        source = inspect.getsource(module)
        assert not re.search(r"os\.environ\b(?!`)|getenv", source), module.__name__
    assert set(env_mod.LAUNCHERS) == {"torchrun", "openmpi", "mpich", "slurm"}


# --------------------------------------------------------------------------------------
# The shared-file store


def test_file_store_set_get_delete(tmp_path):
    store = FileStore(tmp_path / "s", timeout=1.0)
    store.set("a-1", b"\x00hello")
    assert store.get("a-1") == b"\x00hello"
    store.set("a-1", b"again")
    assert store.get("a-1") == b"again"
    assert store.delete("a-1") and not store.delete("a-1")
    assert not [p for p in os.listdir(tmp_path / "s")]   # no temporary files left
    with pytest.raises(ValueError, match="store key"):
        store.set("../escape", b"x")
    with pytest.raises(TypeError):
        store.set("k", "text")
    with pytest.raises(ValueError):
        FileStore(tmp_path, timeout=0)


def test_file_store_times_out(tmp_path):
    store = FileStore(tmp_path, timeout=0.2)
    start = time.monotonic()
    with pytest.raises(StoreTimeoutError, match="did not appear"):
        store.get("never")
    assert 0.2 <= time.monotonic() - start < 2.0
    assert isinstance(StoreTimeoutError("x"), TimeoutError)


def _late_writer(path, delay):
    time.sleep(delay)
    FileStore(path).set("late", b"x" * 100_000)


def test_file_store_waits_for_a_late_writer(tmp_path):
    proc = multiprocessing.get_context("spawn").Process(target=_late_writer,
                                                         args=(str(tmp_path), 0.3))
    proc.start()
    try:
        assert FileStore(tmp_path, timeout=30).get("late") == b"x" * 100_000
    finally:
        proc.join(30)
    assert proc.exitcode == 0


def _exchange_rank(path, rank, size, queue):
    env = read_environment({"RANK": str(rank), "WORLD_SIZE": str(size),
                            "LOCAL_RANK": str(rank), "TORCHELASTIC_RUN_ID": "t/1"})
    store = FileStore(path, timeout=60)
    queue.put((rank, ctx_mod._exchange(env, store, "file").to_bytes()))


def test_unique_id_exchange_through_the_file_store_across_processes(tmp_path):
    import cupric.nccl
    if not cupric.nccl.is_available():
        pytest.skip("NCCL is not loadable (rank 0 makes a real unique id)")
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    size = 4
    # Ranks start out of order: the readers wait for rank 0's file.
    procs = [spawn.Process(target=_exchange_rank, args=(str(tmp_path), r, size, queue))
             for r in (3, 1, 2, 0)]
    for p in procs:
        p.start()
    try:
        results = dict(queue.get(timeout=120) for _ in range(size))
    finally:
        for p in procs:
            p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    ids = set(results.values())
    assert len(ids) == 1 and len(ids.pop()) == 128 and sorted(results) == [0, 1, 2, 3]
    assert os.listdir(tmp_path) == []     # rank 0 removed the id and the read marks


# --------------------------------------------------------------------------------------
# Choosing a store


def _env(**environ):
    base = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    base.update(environ)
    return read_environment(base)


def test_store_choice_order(monkeypatch, tmp_path):
    monkeypatch.setattr(ctx_mod, "_mpi4py_importable", lambda: False)
    monkeypatch.setattr(ctx_mod, "_torch_importable", lambda: False)
    kind, store = ctx_mod.choose_store(_env(CUPRIC_STORE_PATH=str(tmp_path)))
    assert kind == "file" and isinstance(store, FileStore)
    with pytest.raises(ctx_mod.StoreUnavailableError, match="CUPRIC_STORE_PATH"):
        ctx_mod.choose_store(_env(MASTER_ADDR="h", MASTER_PORT="1"))
    with pytest.raises(ctx_mod.StoreUnavailableError, match="mpi4py"):
        ctx_mod.choose_store(_env(), kind="mpi")
    with pytest.raises(ctx_mod.StoreUnavailableError, match="pip install torch"):
        ctx_mod.choose_store(_env(MASTER_ADDR="h", MASTER_PORT="1"), kind="tcp")
    with pytest.raises(ctx_mod.StoreUnavailableError, match="MASTER_ADDR"):
        ctx_mod.choose_store(_env(), kind="tcp")
    with pytest.raises(ValueError):
        ctx_mod.choose_store(_env(), kind="etcd")

    made = []

    class FakeTcp:
        def __init__(self, *args):
            made.append(args)
    monkeypatch.setattr(ctx_mod, "TcpStore", FakeTcp)
    monkeypatch.setattr(ctx_mod, "_torch_importable", lambda: True)
    kind, _ = ctx_mod.choose_store(_env(MASTER_ADDR="h", MASTER_PORT="29500",
                                        CUPRIC_STORE_PATH=str(tmp_path)), timeout=9.0)
    assert kind == "tcp" and made[-1] == ("h", 29500, 2, False, 9.0)
    env0 = read_environment({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                             "MASTER_ADDR": "h", "MASTER_PORT": "29500"})
    ctx_mod.choose_store(env0)
    assert made[-1][3] is True                  # rank 0 serves the store
    agent = read_environment({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                              "MASTER_ADDR": "h", "MASTER_PORT": "29500",
                              "TORCHELASTIC_USE_AGENT_STORE": "True"})
    ctx_mod.choose_store(agent)
    assert made[-1][3] is False                 # torchrun's agent serves it already

    class FakeMpi:
        pass
    monkeypatch.setattr(ctx_mod, "MpiStore", FakeMpi)
    monkeypatch.setattr(ctx_mod, "_mpi4py_importable", lambda: True)
    mpi = read_environment({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                            "OMPI_COMM_WORLD_LOCAL_RANK": "0", "MASTER_ADDR": "h",
                            "MASTER_PORT": "1"})
    assert ctx_mod.choose_store(mpi)[0] == "mpi"


# --------------------------------------------------------------------------------------
# init() against a fake communicator and fake devices


class _FakeDevice:
    def __init__(self, ordinal):
        self.ordinal = int(ordinal)
        self.current = False

    def make_current(self):
        self.current = True


def _fake_runtime(monkeypatch, count):
    import cupric.nccl
    import cupric.runtime.device as device_mod
    made = []
    monkeypatch.setattr(device_mod, "device_count", lambda: count)
    monkeypatch.setattr(device_mod, "Device",
                        lambda ordinal: made.append(_FakeDevice(ordinal)) or made[-1])

    class FakeComm:
        closed = aborted = False

        @classmethod
        def init(cls, uid, rank, size, device, options):
            comm = cls()
            comm.args = (uid, rank, size, device, options)
            return comm

        def close(self):
            self.closed = True

        def abort(self):
            self.aborted = True

    monkeypatch.setattr(cupric.nccl, "Communicator", FakeComm, raising=False)
    return made


class _DictStore:
    def __init__(self):
        self.data = {}

    def set(self, key, value):
        self.data[key] = value

    def get(self, key):
        return self.data[key]


def test_init_binds_the_local_gpu_and_shares_the_id(monkeypatch):
    import cupric.nccl
    if not cupric.nccl.is_available():
        pytest.skip("NCCL is not loadable (rank 0 makes a real unique id)")
    made = _fake_runtime(monkeypatch, count=4)
    store = _DictStore()
    environ = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "6"}
    with ctx_mod.init(store=store, environ=environ, timeout=12.0) as ctx:
        uid, rank, size, device, options = ctx.communicator.args
        assert (rank, size, device.ordinal) == (0, 2, 6 % 4) and device.current
        assert options.timeout == 12.0 and options.blocking
        assert ctx.store_kind == "custom" and ctx.is_main
        assert list(store.data.values()) == [uid.to_bytes()]
        assert "rank 0 of 2" in repr(ctx)
        comm = ctx.communicator
    assert comm.closed and not comm.aborted
    assert made[0].ordinal == 2
    # A failing body aborts instead of finalizing (peers may be stuck waiting).
    with pytest.raises(RuntimeError, match="boom"):
        with ctx_mod.init(store=_DictStore(), environ={}) as ctx:
            raise RuntimeError("boom")
    assert ctx.communicator.aborted and not ctx.communicator.closed


def test_init_of_a_single_process_needs_no_store(monkeypatch):
    import cupric.nccl
    if not cupric.nccl.is_available():
        pytest.skip("NCCL is not loadable")
    _fake_runtime(monkeypatch, count=1)
    ctx = ctx_mod.init(environ={})
    assert (ctx.rank, ctx.world_size, ctx.launcher, ctx.store_kind) == (0, 1, "none", None)


def test_init_without_a_store_says_what_to_set(monkeypatch):
    _fake_runtime(monkeypatch, count=1)
    monkeypatch.setattr(ctx_mod, "_mpi4py_importable", lambda: False)
    monkeypatch.setattr(ctx_mod, "_torch_importable", lambda: False)
    with pytest.raises(ctx_mod.StoreUnavailableError, match="CUPRIC_STORE_PATH"):
        ctx_mod.init(environ={"SLURM_PROCID": "1", "SLURM_NTASKS": "2",
                              "SLURM_LOCALID": "1"})



# --------------------------------------------------------------------------------------
# The MPI and TCP stores against stand-ins of mpi4py and PyTorch


def test_mpi_store_broadcasts_rank_zeros_value(monkeypatch):
    import sys
    import types

    from cupric.distributed.store import MpiStore
    sent = []

    class World:
        def bcast(self, value, root):
            sent.append((value, root))
            return b"id-bytes" if value is None else value

    fake = types.ModuleType("mpi4py")
    fake.MPI = types.SimpleNamespace(COMM_WORLD=World())
    monkeypatch.setitem(sys.modules, "mpi4py", fake)
    root = MpiStore()
    root.set("k", b"id-bytes")
    assert root.get("k") == b"id-bytes" and sent[-1] == (b"id-bytes", 0)
    other = MpiStore()
    assert other.get("k") == b"id-bytes" and sent[-1] == (None, 0)


def test_tcp_store_wraps_pytorchs(monkeypatch):
    import datetime
    import sys
    import types

    from cupric.distributed.store import StoreTimeoutError, TcpStore
    made = []

    class FakeTCPStore:
        def __init__(self, host, port, world_size, is_master, timeout):
            made.append((host, port, world_size, is_master, timeout))
            self.data = {}

        def set(self, key, value):
            self.data[key] = value

        def get(self, key):
            if key not in self.data:
                raise RuntimeError("Socket Timeout: wait timed out after 1000ms")
            return self.data[key]

        def delete_key(self, key):
            return self.data.pop(key, None) is not None

    torch = types.ModuleType("torch")
    distributed = types.ModuleType("torch.distributed")
    distributed.TCPStore = FakeTCPStore
    torch.distributed = distributed
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", distributed)
    store = TcpStore("node0", 29500, 4, True, timeout=7.5)
    assert made == [("node0", 29500, 4, True, datetime.timedelta(seconds=7.5))]
    store.set("k", b"v")
    assert store.get("k") == b"v" and store.delete("k") and not store.delete("k")
    with pytest.raises(StoreTimeoutError, match="within 7.5 s"):
        store.get("missing")
