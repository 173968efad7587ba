"""Access to the CUDA Driver API (`cuda.bindings.driver`), initialized once.

`driver()` imports cuda.bindings and runs `cuInit` on first use (thread-safe), so that
importing cupric never loads libcuda. `check(result)` unpacks the tuple every cuda.bindings
call returns and raises the typed `CudaError` for a failing `CUresult`.
"""

from __future__ import annotations

import threading

from . import _lifetime
from .errors import CudaError, NoDriverError, error_from_code

__all__ = ["driver", "bindings", "check", "driver_available", "driver_version"]

_driver_module = None
_init_error: CudaError | None = None
_init_lock = threading.Lock()
_pending = _lifetime._pending  # the deque itself: its truthiness is the cheap test in check()


def driver():
    """The `cuda.bindings.driver` module, with `cuInit(0)` done.

    Returns
    -------
    module

    Raises
    ------
    NoDriverError
        If cuda-python is not installed or no NVIDIA driver (libcuda) can be loaded.
    CudaError
        If `cuInit` fails otherwise (e.g. `NoDeviceError`).

    Thread safety
    -------------
    Safe: the first callers serialize on a lock; later calls read one global.

    Cost
    ----
    One global read after the first call.
    """
    module = _driver_module
    if module is not None:
        return module
    return _initialize()


def _initialize():
    global _driver_module, _init_error
    with _init_lock:
        if _driver_module is not None:
            return _driver_module
        if _init_error is not None:
            # Failing again with the same error is cheaper and clearer than a second
            # library search; the driver does not appear during a process's life. The
            # traceback of the earlier raise is dropped: raising the same object again
            # would otherwise chain every caller's frames (and their locals) onto it.
            raise _init_error.with_traceback(None)
        try:
            from cuda.bindings import driver as module
        except ImportError as exc:
            _init_error = NoDriverError(
                f"cuda-python is not importable ({exc}); install it with "
                f"`pip install cuda-python`")
            raise _init_error from exc
        try:
            (err,) = module.cuInit(0)
        except Exception as exc:
            # cuda.pathfinder raises DynamicLibNotFoundError when libcuda.so is absent;
            # match by name so that this module does not import cuda.pathfinder itself.
            if type(exc).__name__ != "DynamicLibNotFoundError" and not isinstance(exc, OSError):
                raise
            _init_error = NoDriverError(
                "no NVIDIA driver found: libcuda.so could not be loaded; cupric.runtime "
                "needs an NVIDIA GPU with its display driver installed (the CPU simulator, "
                "cupric.simulator, runs kernels without one)")
            raise _init_error from exc
        if err != 0:
            _init_error = error_from_code(err, "cuInit failed")
            raise _init_error
        _driver_module = module
        return module


def bindings():
    """The `cuda.bindings.driver` module without initializing the driver.

    For enums and struct types only (option tables, flags), which need no driver: this
    works on machines without a GPU.

    Raises
    ------
    NoDriverError
        If cuda-python is not installed.
    """
    module = _driver_module
    if module is not None:
        return module
    try:
        from cuda.bindings import driver as module
    except ImportError as exc:
        raise NoDriverError(f"cuda-python is not importable ({exc}); install it with "
                            f"`pip install cuda-python`") from exc
    return module


def driver_available() -> bool:
    """True when a CUDA driver loads and `cuInit` succeeds. Never raises."""
    try:
        driver()
    except Exception:  # any failure means "not available"; that is the whole answer
        return False
    return True


def driver_version() -> tuple[int, int]:
    """The CUDA version the installed driver supports, as (major, minor), e.g. (13, 0)."""
    version = check(driver().cuDriverGetVersion())
    return version // 1000, (version % 1000) // 10


def check(result, requested: int | None = None):
    """Unpack the result tuple of a cuda.bindings call, raising on failure.

    Parameters
    ----------
    result : tuple
        ``(err,)`` or ``(err, value, ...)`` as cuda.bindings returns.
    requested : int, optional
        Bytes the call asked for; an out-of-memory error states it.

    Returns
    -------
    None, the single value, or the tuple of values.

    Raises
    ------
    CudaError
        The subclass for the failing code (see `cupric.runtime.errors`).

    Cost
    ----
    On success, one comparison, one deque test and a tuple unpack. Releases queued by
    finalizers run here (`_lifetime.drain`), at most once per queued object.
    """
    err = result[0]
    if err == 0:
        if _pending:
            _lifetime.drain()
        n = len(result)
        if n == 1:
            return None
        if n == 2:
            return result[1]
        return result[1:]
    raise error_from_code(err, requested=requested)
