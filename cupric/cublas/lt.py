"""cuBLASLt low-level bindings: the lightweight GEMM API of ``cublasLt.h``.

cuBLASLt exposes matrix multiplication with explicit layouts, epilogues and algorithm
selection (``cublasLtMatmul``); it shares ``cublasStatus_t`` with cuBLAS but is a
separate shared library (``libcublasLt``). Generated on first use, C names kept.

Examples
--------
>>> from cupric.cublas import lt
>>> handle = lt.ffi.new("cublasLtHandle_t *")          # doctest: +SKIP
>>> lt.check(lt.cublasLtCreate(handle))                # doctest: +SKIP
"""

from __future__ import annotations

from cupric.bindings_gen.binding import Binding
from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError

__all__ = ["CublasLtError", "LibraryNotFoundError", "check", "is_available", "binding"]

binding = Binding("cublaslt", "cuBLASLt")


class CublasLtError(LibraryStatusError):
    """A cuBLASLt call returned a status other than ``CUBLAS_STATUS_SUCCESS``."""

    library = "cuBLASLt"


def is_available() -> bool:
    """Whether cuBLASLt can be loaded; if not, `binding.unavailable_reason` names the pip package."""
    return binding.is_available()


def check(status: int) -> None:
    """Raise `CublasLtError` unless `status` is ``CUBLAS_STATUS_SUCCESS``.

    Raises
    ------
    CublasLtError
        With ``.code``, ``.name`` and ``.description`` (from ``cublasLtGetStatusString``).
    """
    if status != 0:
        raise CublasLtError(status, binding.status_name(status),
                           binding.status_string("cublasLtGetStatusString", status))


def __getattr__(name: str):
    return binding.module_getattr(globals(), name)
