"""cuDNN low-level bindings: the functions, enums and constants of ``cudnn.h``.

cuDNN provides deep-learning primitives (convolutions, normalization, attention) and
the graph/backend API; calls take a ``cudnnHandle_t`` and return a ``cudnnStatus_t``.
Generated from the installed ``nvidia-cudnn-cu13`` headers on first use, C names kept.

Examples
--------
>>> from cupric.cudnn import lib
>>> lib.cudnnGetVersion()                               # doctest: +SKIP
92800
"""

from __future__ import annotations

from cupric.bindings_gen.binding import Binding
from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError

__all__ = ["CudnnError", "LibraryNotFoundError", "check", "is_available", "binding"]

binding = Binding("cudnn", "cuDNN")


class CudnnError(LibraryStatusError):
    """A cuDNN call returned a status other than ``CUDNN_STATUS_SUCCESS``."""

    library = "cuDNN"


def is_available() -> bool:
    """Whether cuDNN can be loaded; if not, `binding.unavailable_reason` names the pip package."""
    return binding.is_available()


def check(status: int) -> None:
    """Raise `CudnnError` unless `status` is ``CUDNN_STATUS_SUCCESS``.

    Raises
    ------
    CudnnError
        With ``.code``, ``.name`` and ``.description`` (from ``cudnnGetErrorString``).
    """
    if status != 0:
        raise CudnnError(status, binding.status_name(status),
                        binding.status_string("cudnnGetErrorString", status))


def __getattr__(name: str):
    return binding.module_getattr(globals(), name)
