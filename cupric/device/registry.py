"""The intrinsic contract, public for the compiler and the simulator.

Every kernel-side name is an `Intrinsic` kept in `REGISTRY` by its dotted name: the
compiler lowers it by that name, the simulator runs it through the thread state it
`install`s (`current` reads it back). The declarations live in `cupric.device._intrinsic`;
the packages above cupric.device use these names.
"""

from __future__ import annotations

from ._intrinsic import (REGISTRY, Dim3, Intrinsic, Namespace, OutsideKernelError, current,
                         install)

__all__ = ["Intrinsic", "Dim3", "Namespace", "OutsideKernelError", "current", "install",
           "REGISTRY"]
