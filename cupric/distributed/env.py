"""The launcher's environment, read in one place: who am I, how many are we, which GPU.

Cluster launchers start one process per GPU and tell each its place through environment
variables, each launcher its own: torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``), Open MPI's mpirun (``OMPI_COMM_WORLD_*``), MPICH and
Intel MPI through PMI (``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``), and SLURM's srun
(``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``). Every variable cupric reads for
distributed runs is named in this module and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os

from cupric import _config

__all__ = ["LaunchEnv", "LaunchEnvironmentError", "read_environment", "LAUNCHERS",
           "STORE_PATH", "STORE_KIND"]

#: cupric's own variables: the shared-file store's folder, and which store to use
#: ("mpi", "tcp", "file"; unset: the first that works, in that order).
STORE_PATH = "CUPRIC_STORE_PATH"
STORE_KIND = "CUPRIC_STORE"


class LaunchEnvironmentError(ValueError):
    """The launcher's variables are missing a value, not integers, or inconsistent
    (a rank not below the world size)."""


# launcher -> (rank, world size, local rank, local world size, run id) variable names,
# in the order `read_environment` tries them: torchrun first (it may run under SLURM),
# then the MPI launchers (mpirun may run inside a SLURM allocation), SLURM last.
LAUNCHERS = {
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "TORCHELASTIC_RUN_ID"),
    "openmpi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                "PMIX_NAMESPACE"),
    "mpich": ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
              "PMI_KVSNAME"),
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
              "SLURM_JOB_ID"),
}
_MPI = frozenset({"openmpi", "mpich"})


@dataclasses.dataclass(frozen=True)
class LaunchEnv:
    """One process's place in the job, as its launcher told it.

    Attributes
    ----------
    launcher : str
        "torchrun", "openmpi", "mpich", "slurm", or "none" (a plain single process).
    rank, world_size : int
    local_rank : int
        This process's index among the processes of its host: the GPU it binds.
    local_world_size : int or None
        Processes on this host, where the launcher says.
    master_addr, master_port : str or None, int or None
        Where rank 0's TCP store listens (torchrun; any launcher when set).
    run_id : str or None
        The launcher's job id, which keeps two jobs' store keys apart.
    agent_store : bool
        torchrun's agent already serves the TCP store at the master port
        (``TORCHELASTIC_USE_AGENT_STORE``): every rank connects as a client.
    store_path : str or None
        ``CUPRIC_STORE_PATH``: a folder every rank can read and write.
    store_kind : str or None
        ``CUPRIC_STORE``: "mpi", "tcp" or "file" to force one.
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    run_id: str | None = None
    agent_store: bool = False
    store_path: str | None = None
    store_kind: str | None = None

    @property
    def under_mpi(self) -> bool:
        """Whether an MPI launcher started this process (mpi4py can then talk to the
        other ranks)."""
        return self.launcher in _MPI


def _integer(environ, name: str, launcher: str) -> int:
    text = environ.get(name)
    if text is None or text.strip() == "":
        raise LaunchEnvironmentError(f"{launcher} is detected but {name} is not set")
    try:
        value = int(text.strip())
    except ValueError:
        raise LaunchEnvironmentError(f"{name}={text!r} is not an integer") from None
    if value < 0:
        raise LaunchEnvironmentError(f"{name}={value} is negative")
    return value


def _optional_integer(environ, name: str) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    # SLURM writes per-node task counts like "4(x2)" or "4,2": the first node's count.
    head = text.split(",")[0].split("(")[0]
    try:
        return int(head)
    except ValueError:
        raise LaunchEnvironmentError(f"{name}={text!r} is not an integer") from None


def detect_launcher(environ=None) -> str:
    """The launcher whose rank and size variables are both set ("none" if no one's)."""
    environ = os.environ if environ is None else environ
    for launcher, (rank, size, *_rest) in LAUNCHERS.items():
        if rank in environ and size in environ:
            return launcher
    return "none"


def read_environment(environ=None) -> LaunchEnv:
    """This process's `LaunchEnv`, read from `environ` (default: ``os.environ``).

    Raises
    ------
    LaunchEnvironmentError
        When a launcher's variables are malformed, the rank is not below the world size,
        or the local rank is not below the local world size.

    Examples
    --------
    >>> read_environment({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}).launcher
    'torchrun'
    >>> read_environment({}).world_size
    1
    """
    environ = os.environ if environ is None else environ
    launcher = detect_launcher(environ)
    if launcher == "none":
        rank, size, local_rank, local_size, run_id = 0, 1, 0, 1, None
    else:
        rank_v, size_v, local_v, local_size_v, run_v = LAUNCHERS[launcher]
        rank = _integer(environ, rank_v, launcher)
        size = _integer(environ, size_v, launcher)
        if size < 1:
            raise LaunchEnvironmentError(f"{size_v}={size}: the world size must be >= 1")
        if rank >= size:
            raise LaunchEnvironmentError(f"{rank_v}={rank} is not below {size_v}={size}")
        if local_v in environ:
            local_rank = _integer(environ, local_v, launcher)
        elif size == 1:
            local_rank = 0
        else:
            raise LaunchEnvironmentError(f"{launcher} is detected but {local_v} (which GPU "
                                         f"this process binds) is not set")
        local_size = _optional_integer(environ, local_size_v)
        if local_size is not None and local_rank >= local_size:
            raise LaunchEnvironmentError(f"{local_v}={local_rank} is not below "
                                         f"{local_size_v}={local_size}")
        run_id = environ.get(run_v) or None
        if launcher == "slurm" and run_id and environ.get("SLURM_STEP_ID"):
            run_id = f"{run_id}.{environ['SLURM_STEP_ID']}"
    port_text = environ.get("MASTER_PORT", "").strip()
    if port_text:
        try:
            port = int(port_text)
        except ValueError:
            raise LaunchEnvironmentError(f"MASTER_PORT={port_text!r} is not an "
                                         f"integer") from None
        if not 0 < port < 65536:
            raise LaunchEnvironmentError(f"MASTER_PORT={port} is not a TCP port")
    else:
        port = None
    kind = _config.STORE.get(environ)
    if kind not in (None, "mpi", "tcp", "file"):
        raise LaunchEnvironmentError(f"{STORE_KIND}={kind!r}: use mpi, tcp or file")
    return LaunchEnv(
        launcher=launcher, rank=rank, world_size=size, local_rank=local_rank,
        local_world_size=local_size, master_addr=environ.get("MASTER_ADDR") or None,
        master_port=port, run_id=run_id,
        agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
        store_path=_config.STORE_PATH.get(environ), store_kind=kind)
