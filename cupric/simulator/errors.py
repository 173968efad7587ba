"""Errors of the CPU simulator: misuse of barriers and warp collectives that would hang or
misbehave on a GPU, deadlocks, and launches the simulator cannot run.

Kernel failures (assert, trap, out-of-bounds) are the same classes the compiled path
raises, from `cupric.device.errors`; they are re-exported here.
"""

from __future__ import annotations

from ..device.errors import KernelAssertionError, KernelError, KernelIndexError, KernelTrapError

__all__ = ["SimulatorError", "BarrierError", "DeadlockError", "KernelError",
           "KernelAssertionError", "KernelIndexError", "KernelTrapError"]


class SimulatorError(KernelError):
    """The simulator cannot run this launch as asked (bad configuration, limits)."""


class BarrierError(KernelError):
    """A barrier or warp collective that not every thread it names reaches: divergent
    `syncthreads`, a thread exiting while others wait, mismatched warp operations.
    On a GPU this hangs or is undefined; the simulator reports it."""


class DeadlockError(BarrierError):
    """Every live simulated thread waits, and none of the waits can complete."""
