"""cuBLAS low-level bindings: every function, enum and constant of ``cublas_v2.h``.

cuBLAS is NVIDIA's BLAS on the GPU; calls take a handle (``cublasHandle_t``) bound to a
stream and return a ``cublasStatus_t``. The cffi module is generated from the installed
headers on first use (see `cupric.bindings_gen`); C names are kept exactly, and the
unversioned names of the ``_v2`` API (``cublasSgemm`` for ``cublasSgemm_v2``) work too.

Examples
--------
>>> from cupric.cublas import lib
>>> handle = lib.ffi.new("cublasHandle_t *")          # doctest: +SKIP
>>> lib.check(lib.cublasCreate(handle))               # doctest: +SKIP
>>> lib.check(lib.cublasDestroy(handle[0]))           # doctest: +SKIP
"""

from __future__ import annotations

from cupric.bindings_gen.binding import Binding
from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError

__all__ = ["CublasError", "LibraryNotFoundError", "check", "is_available", "binding"]

binding = Binding("cublas", "cuBLAS")


class CublasError(LibraryStatusError):
    """A cuBLAS call returned a status other than ``CUBLAS_STATUS_SUCCESS``."""

    library = "cuBLAS"


def is_available() -> bool:
    """Whether cuBLAS can be loaded; if not, `binding.unavailable_reason` names the pip package."""
    return binding.is_available()


def check(status: int) -> None:
    """Raise `CublasError` unless `status` is ``CUBLAS_STATUS_SUCCESS``.

    Parameters
    ----------
    status : int
        A ``cublasStatus_t`` returned by a cuBLAS function.

    Raises
    ------
    CublasError
        With ``.code``, ``.name`` (``"CUBLAS_STATUS_INVALID_VALUE"``) and
        ``.description`` (from ``cublasGetStatusString``).
    """
    if status != 0:
        raise CublasError(status, binding.status_name(status),
                         binding.status_string("cublasGetStatusString", status))


def __getattr__(name: str):
    # `ffi`, `lib` and every C name load the library on first use.
    return binding.module_getattr(globals(), name)
