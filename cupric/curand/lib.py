"""cuRAND low-level bindings: the host API of ``curand.h``.

cuRAND's host API creates generators (``curandGenerator_t``) that fill device memory,
or host memory with ``curandCreateGeneratorHost``, with pseudo- or quasi-random
numbers; calls return a ``curandStatus_t``. Generated from the installed
``nvidia-curand`` headers on first use, C names kept.

Examples
--------
>>> from cupric.curand import lib
>>> gen = lib.ffi.new("curandGenerator_t *")
>>> lib.check(lib.curandCreateGeneratorHost(gen, lib.CURAND_RNG_PSEUDO_PHILOX4_32_10))  # doctest: +SKIP
"""

from __future__ import annotations

from cupric.bindings_gen.binding import Binding
from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError

__all__ = ["CurandError", "LibraryNotFoundError", "check", "is_available", "binding", "DESCRIPTIONS"]

binding = Binding("curand", "cuRAND")

# cuRAND has no status-string function; these paraphrase the cuRAND documentation.
DESCRIPTIONS = {
    "CURAND_STATUS_SUCCESS": "no error",
    "CURAND_STATUS_VERSION_MISMATCH": "the header and the linked library versions differ",
    "CURAND_STATUS_NOT_INITIALIZED": "the generator was not initialized",
    "CURAND_STATUS_ALLOCATION_FAILED": "a memory allocation failed",
    "CURAND_STATUS_TYPE_ERROR": "the generator is of the wrong type for this call",
    "CURAND_STATUS_OUT_OF_RANGE": "an argument is out of range",
    "CURAND_STATUS_LENGTH_NOT_MULTIPLE": "the requested length is not a multiple of the dimension",
    "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED": "the GPU lacks the double precision this generator needs",
    "CURAND_STATUS_LAUNCH_FAILURE": "a kernel launch failed",
    "CURAND_STATUS_PREEXISTING_FAILURE": "an earlier failure was pending when the library was entered",
    "CURAND_STATUS_INITIALIZATION_FAILED": "initializing CUDA failed",
    "CURAND_STATUS_ARCH_MISMATCH": "the GPU's architecture does not support the requested feature",
    "CURAND_STATUS_INTERNAL_ERROR": "an internal library error",
}


class CurandError(LibraryStatusError):
    """A cuRAND call returned a status other than ``CURAND_STATUS_SUCCESS``."""

    library = "cuRAND"


def is_available() -> bool:
    """Whether cuRAND can be loaded; if not, `binding.unavailable_reason` names the pip package."""
    return binding.is_available()


def check(status: int) -> None:
    """Raise `CurandError` unless `status` is ``CURAND_STATUS_SUCCESS``.

    Raises
    ------
    CurandError
        With ``.code``, ``.name`` and ``.description`` (from `DESCRIPTIONS`).
    """
    if status != 0:
        name = binding.status_name(status)
        raise CurandError(status, name, DESCRIPTIONS.get(name, "status unknown to cupric"))


def __getattr__(name: str):
    return binding.module_getattr(globals(), name)
