"""The CPU simulator: runs cupric kernels, the same Python functions, on the CPU with GPU
semantics (grid and block indices, per-block shared memory, barriers, atomics, warps in
lock-step, print and assert).

`launch(func, grid, block, args)` runs one launch; `kernel(func)` gives a
`kern[grid, block](*args)` launcher. Compiled kernels fall back to it when there is no
GPU (see `notice_no_gpu`) or when `CUPRIC_SIMULATOR=1`. docs/device-library.md describes
what runs how, and the limits.
"""

from __future__ import annotations

import sys
import threading

from cupric import _config
from ._launch import MODES, launch
from .errors import (BarrierError, DeadlockError, KernelAssertionError, KernelError,
                     KernelIndexError, KernelTrapError, SimulatorError)

__all__ = ["launch", "kernel", "SimKernel", "MODES", "notice_no_gpu", "requested",
           "SimulatorError", "BarrierError", "DeadlockError", "KernelError",
           "KernelAssertionError", "KernelIndexError", "KernelTrapError"]


class SimKernel:
    """A kernel function bound for simulation: `k[grid, block](*args)` or
    `k[grid, block, shared_bytes](*args)` runs it with `launch`.

    Examples
    --------
    >>> @cupric.simulator.kernel
    ... def add_one(x):
    ...     i = grid(1)
    ...     if i < x.size:
    ...         x[i] += 1
    >>> add_one[4, 32](np.zeros(100, np.float32))
    """

    __slots__ = ("py_func",)

    def __init__(self, py_func) -> None:
        self.py_func = py_func

    def __getitem__(self, config):
        if not isinstance(config, tuple) or len(config) not in (2, 3):
            raise TypeError("use kern[grid, block] or kern[grid, block, shared_bytes]")
        grid, block = config[0], config[1]
        shared_bytes = config[2] if len(config) == 3 else 0

        def run(*args, mode: str | None = None):
            launch(self.py_func, grid, block, args, shared_bytes=shared_bytes, mode=mode)
        return run

    def __call__(self, *args):
        raise TypeError("launch a kernel with a configuration: kern[grid, block](*args)")

    def __repr__(self) -> str:
        return f"<simulated kernel {self.py_func.__qualname__}>"


def kernel(py_func) -> SimKernel:
    """Decorate a kernel function for the simulator (`kern[grid, block](*args)`)."""
    return SimKernel(py_func)


def requested() -> bool:
    """Whether the user asked for the simulator (`CUPRIC_SIMULATOR=1`)."""
    return _config.simulator_requested()


_notice_lock = threading.Lock()
_noticed = False


def notice_no_gpu(reason: str | None = None) -> None:
    """Say once per process, on stderr, that kernels run on the CPU simulator because no
    GPU or driver was found (`reason` adds what the probe saw)."""
    global _noticed
    with _notice_lock:
        if _noticed:
            return
        _noticed = True
    detail = f" ({reason})" if reason else ""
    print(f"cupric: no usable GPU or CUDA driver{detail}; kernels run on the CPU "
          f"simulator, which is much slower. Set CUPRIC_SIMULATOR=1 to choose it "
          f"explicitly and silence this notice.", file=sys.stderr)
