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

__all__ = ["NcclError", "LibraryNotFoundError", "check", "is_available", "binding"]

binding = Binding("nccl", "NCCL")


class NcclError(LibraryStatusError):
    """An NCCL call returned a result other than ``ncclSuccess``."""

    library = "NCCL"


def is_available() -> bool:
    """Whether NCCL can be loaded; if not, `binding.unavailable_reason` names the pip package."""
    return binding.is_available()


def check(status: int) -> None:
    """Raise `NcclError` unless `status` is ``ncclSuccess``.

    Raises
    ------
    NcclError
        With ``.code``, ``.name`` and ``.description`` (from ``ncclGetErrorString``).
    """
    if status != 0:
        raise NcclError(status, binding.status_name(status), _describe(status))


def _describe(status: int) -> str:
    text = binding.lib.ncclGetErrorString(status)
    return binding.ffi.string(text).decode() if text != binding.ffi.NULL else "no description"


def __getattr__(name: str):
    return binding.module_getattr(globals(), name)
