"""NCCL low-level bindings: the collective communication API of ``nccl.h``.

NCCL runs all-reduce, broadcast, all-gather and point-to-point transfers between GPUs
through communicators (``ncclComm_t``); calls return an ``ncclResult_t``. Generated
from the installed ``nvidia-nccl-cu13`` headers on first use, C names kept.

Examples
--------
>>> from cupric.nccl import lib
>>> version = lib.ffi.new("int *")                     # doctest: +SKIP
>>> lib.check(lib.ncclGetVersion(version))             # doctest: +SKIP
"""

from __future__ import annotations

from cupric.bindings_gen.binding import Binding
from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError

__all__ = ["NcclError", "NcclCudaError", "NcclSystemError", "NcclInternalError",
           "NcclInvalidArgumentError", "NcclInvalidUsageError", "NcclRemoteError",
           "NcclTimeoutError", "LibraryNotFoundError", "check", "last_error",
           "is_available", "binding", "SUCCESS", "IN_PROGRESS"]

binding = Binding("nccl", "NCCL")

#: ncclResult_t values the wrappers branch on (fixed by the C API; a CPU test compares
#: them with the headers).
SUCCESS = 0
IN_PROGRESS = 7


class NcclError(LibraryStatusError):
    """An NCCL call returned a result other than ``ncclSuccess``.

    Attributes
    ----------
    code, name, description
        As every library status error; `description` ends with NCCL's own account of
        the failure (``ncclGetLastError``) where it gave one.
    last_error : str
        ``ncclGetLastError`` text at the time of the failure ("" when NCCL had none).
    """

    library = "NCCL"

    def __init__(self, code: int, name: str, description: str, last_error: str = ""):
        self.last_error = last_error
        if last_error and last_error not in description:
            description = f"{description}: {last_error}"
        super().__init__(code, name, description)

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.description, self.last_error))


class NcclCudaError(NcclError):
    """``ncclUnhandledCudaError``: a CUDA call inside NCCL failed."""


class NcclSystemError(NcclError):
    """``ncclSystemError``: a system call (sockets, shared memory, allocation) failed."""


class NcclInternalError(NcclError):
    """``ncclInternalError``: an NCCL bug or corrupted state."""


class NcclInvalidArgumentError(NcclError, ValueError):
    """``ncclInvalidArgument``: NCCL refused an argument (also a `ValueError`)."""


class NcclInvalidUsageError(NcclError):
    """``ncclInvalidUsage``: a call out of order (a group mismatch, an unfinished
    non-blocking communicator, a rank used twice)."""


class NcclRemoteError(NcclError):
    """``ncclRemoteError``: a peer failed or went away (network error, killed rank)."""


class NcclTimeoutError(NcclError, TimeoutError):
    """A collective, group or communicator setup did not finish within its timeout;
    the communicator was aborted (also a `TimeoutError`). NCCL's own ``ncclTimeout``
    result raises it too."""


_BY_CODE = {1: NcclCudaError, 2: NcclSystemError, 3: NcclInternalError,
            4: NcclInvalidArgumentError, 5: NcclInvalidUsageError, 6: NcclRemoteError,
            8: NcclTimeoutError}


def is_available() -> bool:
    """Whether NCCL can be loaded; if not, `binding.unavailable_reason` names the pip package."""
    return binding.is_available()


def check(status: int, comm=None) -> None:
    """Raise the `NcclError` subclass of `status` unless it is ``ncclSuccess``: the one
    status check of cupric.nccl.

    Parameters
    ----------
    status : int
        An ``ncclResult_t``.
    comm : cdata ``ncclComm_t``, optional
        The communicator of the failed call: its ``ncclGetLastError`` text goes into the
        error (NULL/None asks for the calling thread's last error).

    Raises
    ------
    NcclError
        With ``.code``, ``.name``, ``.description`` (from ``ncclGetErrorString``) and
        ``.last_error``; the subclass names the kind (`NcclRemoteError`: a peer failed).
    """
    if status != 0:
        raise error_of(status, comm)


def error_of(status: int, comm=None, prefix: str = "") -> NcclError:
    """The typed error of a failing `status` (not raised), see `check`."""
    cls = _BY_CODE.get(int(status), NcclError)
    description = binding.status_string("ncclGetErrorString", status)
    if prefix:
        description = f"{prefix}: {description}"
    return cls(status, binding.status_name(status), description, last_error(comm))


def last_error(comm=None) -> str:
    """NCCL's text on the last error (``ncclGetLastError``), "" when it has none."""
    ffi = binding.ffi
    text = binding.lib.ncclGetLastError(ffi.NULL if comm is None else comm)
    return ffi.string(text).decode(errors="replace").strip() if text != ffi.NULL else ""


def __getattr__(name: str):
    return binding.module_getattr(globals(), name)
