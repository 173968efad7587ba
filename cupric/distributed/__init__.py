"""cupric.distributed: start a multi-GPU job the way clusters launch jobs.

`init()` reads the launcher's environment (torchrun, Open MPI, MPICH/PMI, SLURM), binds
this rank's GPU, shares the NCCL unique id through MPI, PyTorch's TCP store or a shared
folder, and returns a `DistributedContext` holding the `cupric.nccl.Communicator`.
Nothing here touches the GPU or imports MPI or PyTorch until `init()` runs.
"""

from __future__ import annotations

from .._lazy import attach

_LAZY = {
    **{name: ("cupric.distributed.context", name) for name in (
        "init", "DistributedContext", "choose_store", "StoreUnavailableError")},
    **{name: ("cupric.distributed.env", name) for name in (
        "LaunchEnv", "LaunchEnvironmentError", "read_environment", "detect_launcher")},
    **{name: ("cupric.distributed.store", name) for name in (
        "FileStore", "TcpStore", "MpiStore", "StoreTimeoutError")},
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = attach(__name__, globals(), _LAZY)
