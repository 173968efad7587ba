"""cupric.nccl: NVIDIA's collective communication library (multi-GPU all-reduce and kin).

NCCL moves and reduces data between GPUs of one host (NVLink, PCIe) and of many hosts
(InfiniBand, sockets) through communicators, one per rank. This package wraps it:
`Communicator` (from a `UniqueId`, by `split`, or for all local GPUs), the collectives
on any device array and stream, `group()`, non-blocking communicators with a timeout and
`abort()`. `cupric.distributed.init()` makes a communicator from a launcher's
environment. `cupric.nccl.lib` holds the low-level bindings generated from the installed
headers; nothing loads until it is first used.
"""

from __future__ import annotations

import importlib

from .._lazy import attach

_LAZY = {
    "Communicator": ("cupric.nccl.communicator", "Communicator"),
    **{name: ("cupric.nccl.options", name) for name in ("CommOptions", "UniqueId")},
    **{name: ("cupric.nccl.waiting", name) for name in (
        "group", "poll_until", "join_aborts")},
    **{name: ("cupric.nccl.collectives", name) for name in (
        "ShapeMismatchError", "DtypeMismatchError", "OverlapError", "RankError")},
    **{name: ("cupric.nccl.tables", name) for name in (
        "DTYPES", "EXTRA_DTYPES", "OPS", "UnsupportedDtypeError", "nccl_dtype",
        "bus_bandwidth_factor")},
    **{name: ("cupric.nccl.lib", name) for name in (
        "NcclError", "NcclCudaError", "NcclSystemError", "NcclInternalError",
        "NcclInvalidArgumentError", "NcclInvalidUsageError", "NcclRemoteError",
        "NcclTimeoutError", "check")},
}

__all__ = ["lib", "is_available", "version", *sorted(_LAZY)]


def is_available() -> bool:
    """Whether NCCL can be loaded (``pip install nvidia-nccl-cu13`` otherwise)."""
    return importlib.import_module("cupric.nccl.lib").is_available()


def version() -> tuple[int, int, int]:
    """The loaded library's version (``ncclGetVersion``), e.g. ``(2, 28, 3)``."""
    lib = importlib.import_module("cupric.nccl.lib")
    out = lib.ffi.new("int *")
    lib.check(lib.lib.ncclGetVersion(out))
    code = out[0]
    return code // 10000, code // 100 % 100, code % 100


__getattr__, __dir__ = attach(__name__, globals(), {**_LAZY, "lib": ("cupric.nccl.lib", None)})
