"""The runtime's native entry points, public for the other cupric packages.

The libraries (cuBLAS, cuDNN, NCCL, OptiX) and the ready kernels talk to the CUDA driver
and to the runtime's compiled fast paths through these names, never through the
runtime's private modules: `driver()` is the `cuda.bindings.driver` module with
``cuInit`` done, `check(result)` unpacks a cuda.bindings result and raises the typed
`CudaError`, and `Allocation` is the owner object every `DeviceBuffer` view holds (its
``_closed`` slot is what compiled fast paths read to refuse freed memory);
`current_context_key()` names the calling thread's current context (0 for none), for
tables kept per context, and `current_device_ordinal()` makes a context current (device
0's primary one when none is) and names its device; `SLOT_OFFSET` is the C helper every
compiled fast path includes to find a ``__slots__`` member's offset, `MODULE_INIT` the
module-init boilerplate every one ends with, and `Extension` the one cached loader of a
compiled fast path (`Pending` while it is built in the background).
"""

from __future__ import annotations

from ._cext import MODULE_INIT, SLOT_OFFSET, Extension, Pending
from ._driver import check, driver, driver_available, driver_version
from .allocation import current_device_ordinal
from .errors import _current_context_key as current_context_key
from .memory import _Allocation as Allocation

__all__ = ["driver", "check", "driver_available", "driver_version", "Allocation",
           "current_context_key", "current_device_ordinal", "SLOT_OFFSET", "MODULE_INIT",
           "Extension", "Pending"]
