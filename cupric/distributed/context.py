"""`init()`: from a launcher's environment to an NCCL communicator, in one call.

Each process reads its rank, world size and local rank (`cupric.distributed.env`),
binds the GPU of its local rank, has rank 0 make the NCCL unique id and every other rank
receive it through a store the job already has (MPI, PyTorch's TCP store, or a shared
folder: `cupric.distributed.store`), and joins the communicator.
"""

from __future__ import annotations

import itertools

from .env import LaunchEnv, read_environment
from .store import FileStore, MpiStore, TcpStore

__all__ = ["init", "DistributedContext", "choose_store", "StoreUnavailableError"]


class StoreUnavailableError(RuntimeError):
    """No way to hand the unique id to the other ranks: not under MPI (or no mpi4py), no
    PyTorch or no ``MASTER_ADDR``/``MASTER_PORT``, and no store folder."""


# Every init() of a process takes the next number: ranks call init the same number of
# times, so the n-th calls of all ranks meet under one key.
_counter = itertools.count()


def _mpi4py_importable() -> bool:
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def _torch_importable() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def choose_store(env: LaunchEnv, *, kind: str | None = None, path=None,
                 timeout: float = 300.0):
    """The store that carries the unique id for this job: ``(kind, store)``.

    Order unless `kind` (or ``CUPRIC_STORE``) names one: MPI when an MPI launcher
    started the job and mpi4py is importable; PyTorch's TCP store when PyTorch is
    importable and ``MASTER_ADDR``/``MASTER_PORT`` are set; a `FileStore` in `path` (or
    ``CUPRIC_STORE_PATH``).

    Raises
    ------
    StoreUnavailableError
        When the named or any store cannot be made, saying what to set.
    """
    kind = kind or env.store_kind
    path = path if path is not None else env.store_path
    if kind not in (None, "mpi", "tcp", "file"):
        raise ValueError(f"store kind must be 'mpi', 'tcp' or 'file', got {kind!r}")
    tcp_ready = env.master_addr is not None and env.master_port is not None
    if kind == "mpi" or (kind is None and env.under_mpi and _mpi4py_importable()):
        if not _mpi4py_importable():
            raise StoreUnavailableError("the MPI store needs mpi4py: pip install mpi4py")
        return "mpi", MpiStore()
    if kind == "tcp" or (kind is None and tcp_ready and _torch_importable()):
        if not tcp_ready:
            raise StoreUnavailableError("the TCP store needs MASTER_ADDR and MASTER_PORT")
        if not _torch_importable():
            raise StoreUnavailableError("the TCP store is PyTorch's: pip install torch, "
                                        "or set CUPRIC_STORE_PATH to a shared folder")
        is_server = env.rank == 0 and not env.agent_store
        return "tcp", TcpStore(env.master_addr, env.master_port, env.world_size, is_server,
                               timeout)
    if kind == "file" or (kind is None and path is not None):
        if path is None:
            raise StoreUnavailableError("the file store needs a folder: pass store_path= "
                                        "or set CUPRIC_STORE_PATH")
        return "file", FileStore(path, timeout)
    raise StoreUnavailableError(
        f"rank {env.rank} of {env.world_size} ({env.launcher}) has no way to receive the "
        f"NCCL unique id: run under mpirun with mpi4py installed, set MASTER_ADDR and "
        f"MASTER_PORT with PyTorch installed, or set CUPRIC_STORE_PATH to a folder every "
        f"rank can read")


def _exchange(env: LaunchEnv, store, kind: str):
    """Rank 0 makes the unique id and publishes it; every rank returns it."""
    from cupric.nccl import UniqueId
    tag = f"{env.run_id or 'job'}-{next(_counter)}"
    tag = "".join(c if c.isalnum() or c in "._-" else "_" for c in tag)
    key = f"cupric-nccl-id-{tag}"
    if env.rank == 0:
        uid = UniqueId.new()
        store.set(key, uid.to_bytes())
    data = store.get(key)
    if data is None:
        raise StoreUnavailableError(f"rank 0 published no unique id under {key!r}")
    uid = UniqueId.from_bytes(data)
    if kind == "file":
        # Each rank acknowledges; rank 0 removes the id once all have read it, so a
        # later job in the same folder cannot pick up a stale one.
        store.set(f"{key}.read-{env.rank}", b"1")
        if env.rank == 0:
            for peer in range(env.world_size):
                store.get(f"{key}.read-{peer}")
            for peer in range(env.world_size):
                store.delete(f"{key}.read-{peer}")
            store.delete(key)
    return uid


class DistributedContext:
    """This process's place in a distributed job and its NCCL communicator.

    Attributes
    ----------
    rank, world_size, local_rank : int
    local_world_size : int or None
    launcher : str
        Which launcher's variables were read ("none" for a single plain process).
    device : cupric.runtime.Device
        The GPU this rank drives (made current by `init`).
    communicator : cupric.nccl.Communicator
    store_kind : str or None
        "mpi", "tcp", "file", or None (one rank needs no exchange).
    store : object or None
        The store used (`TcpStore.store` is PyTorch's, for
        ``torch.distributed.init_process_group(store=...)``).

    `close()` (or leaving a ``with`` block) closes the communicator.
    """

    def __init__(self, env: LaunchEnv, device, communicator, store_kind, store) -> None:
        self.env = env
        self.rank = env.rank
        self.world_size = env.world_size
        self.local_rank = env.local_rank
        self.local_world_size = env.local_world_size
        self.launcher = env.launcher
        self.device = device
        self.communicator = communicator
        self.store_kind = store_kind
        self.store = store

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0 (the one that prints and writes files)."""
        return self.rank == 0

    def barrier(self, stream=None) -> None:
        """Wait until every rank has reached this call (a one-element all-reduce on
        `stream`, waited for within the communicator's timeout)."""
        import numpy as np

        from cupric.runtime.memory import zeros
        self.device.make_current()
        token = zeros(1, np.int32)
        try:
            self.communicator.all_reduce(token, stream=stream)
            self.communicator.wait(stream)
        finally:
            token.close()

    def close(self) -> None:
        """Close the communicator (`Communicator.close`)."""
        self.communicator.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            # A failing rank must not wait in ncclCommFinalize for peers that may be
            # waiting for it: abort.
            self.communicator.abort()
        else:
            self.close()

    def __repr__(self) -> str:
        return (f"<DistributedContext rank {self.rank} of {self.world_size} "
                f"(local {self.local_rank}, {self.launcher}) on device "
                f"{self.device.ordinal}, store {self.store_kind}>")


def init(*, store=None, store_kind: str | None = None, store_path=None,
         timeout: float = 300.0, device=None, options=None,
         environ=None) -> DistributedContext:
    """Join the job the launcher started: read its environment, bind this rank's GPU,
    share the NCCL unique id, and make the communicator.

    Parameters
    ----------
    store : object, optional
        A store of your own (``set(key, bytes)``, ``get(key) -> bytes``, e.g. an existing
        ``torch.distributed`` store); else one is chosen by `choose_store`.
    store_kind : {"mpi", "tcp", "file"}, optional
        Force a store (also ``CUPRIC_STORE``).
    store_path : str, optional
        The file store's shared folder (also ``CUPRIC_STORE_PATH``).
    timeout : float
        Seconds to wait for the unique id, and the communicator's timeout.
    device : Device or int, optional
        Override the GPU; default: local rank modulo the visible GPUs (each process
        sees one GPU when the launcher sets ``CUDA_VISIBLE_DEVICES`` per rank).
    options : cupric.nccl.CommOptions, optional
        Defaults to a blocking communicator with `timeout`.
    environ : mapping, optional
        Read instead of ``os.environ`` (tests).

    Returns
    -------
    DistributedContext

    Raises
    ------
    LaunchEnvironmentError
        Malformed launcher variables.
    StoreUnavailableError, StoreTimeoutError
        No store, or rank 0's id did not arrive in time.
    NcclError
        When NCCL cannot make the communicator.

    Examples
    --------
    >>> import cupric.distributed as dist                          # doctest: +SKIP
    >>> with dist.init() as ctx:          # torchrun --nproc-per-node 8 train.py
    ...     ctx.communicator.all_reduce(grads, op="avg", stream=stream)
    """
    from cupric.nccl import CommOptions, Communicator
    from cupric.runtime.device import Device, device_count
    env = read_environment(environ)
    if device is None:
        count = device_count()
        if count == 0:
            raise RuntimeError("cupric.distributed.init: the CUDA driver sees no GPU")
        device = env.local_rank % count
    dev = Device(device)
    dev.make_current()
    if options is None:
        options = CommOptions(timeout=timeout)
    kind = None
    if env.world_size == 1 and store is None and (store_kind or env.store_kind) is None:
        from cupric.nccl import UniqueId
        uid = UniqueId.new()   # nobody to tell
    else:
        if store is None:
            kind, store = choose_store(env, kind=store_kind, path=store_path,
                                       timeout=timeout)
        else:
            kind = "custom"
        uid = _exchange(env, store, kind)
    comm = Communicator.init(uid, env.rank, env.world_size, device=dev, options=options)
    return DistributedContext(env, dev, comm, kind, store)

