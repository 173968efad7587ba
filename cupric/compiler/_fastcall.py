"""The compiled kernel launcher: ``kern[grid, block](*args)`` to the prepared launch in C.

A generated launcher (`cupric.compiler.launcher`) re-checks, per call, what can differ
between launches of one signature (the argument classes, dtypes, rank, contiguity,
liveness, alignment and overlap of written arrays) and hands the values to the runtime's
prepared launch. This CPython extension makes the same checks in C, reading DeviceBuffer
slots at offsets taken once from the class (as `cupric.cudnn._replay_c` does) and CuPy
arrays and PyTorch tensors through their attributes, orders the launch after CuPy's
current stream where CUDA does not already, and packs the values into a small stack
buffer by the prepared launch's layout (`PreparedLaunch.c_layout`) and calls
cuLaunchKernel itself, so no Python frame runs between the subscript and the driver.
Without that layout (another backend, a parameter space too large for its buffer) it
calls the prepared launch with a stack of values instead.

Anything it does not accept goes, untouched, to the launcher's fallback (the launcher
made before it, else `Kernel._launch`), which raises the typed errors of the Python
path; an error in C is never reported as anything else. Called as an attempt (one more
argument, the item count every array must have: `launcher.attempt`), it answers
``NotImplemented`` instead, with nothing launched or ordered, and the caller takes its
own general path. ``CUPRIC_KERNEL_FASTCALL=0``
(read once) keeps the generated Python launchers.
"""

from __future__ import annotations

from cupric import _config
from cupric.compiler._fastcall_c import (BUFFER, CUPY, CUPY_FIELDS, MAX_ARGS, SCALAR, SOURCE,
                                         TORCH)
from cupric.runtime.native import Extension

__all__ = ["load", "build_error", "enabled", "SOURCE", "SCALAR", "BUFFER", "CUPY",
           "CUPY_FIELDS", "TORCH",
           "MAX_ARGS"]


_enabled: bool | None = None


def _configure(module) -> None:
    from cupric.runtime.memory import DeviceBuffer
    from cupric.runtime.native import Allocation
    from cupric.runtime.stream import Stream
    module.configure(DeviceBuffer, Allocation, Stream)
    module.raw_scalars(_numpy_samples())


def _numpy_samples() -> tuple:
    """(class, format code, sample, the sample's value packed as the parameter) for each
    NumPy scalar class a kernel parameter takes as it is: the extension copies such a
    value straight from the object where the sample shows it lies right after the object
    header (NumPy's scalar layout), and converts it otherwise."""
    import struct

    import numpy as np
    samples = ((np.int8, "b", -7), (np.int16, "h", -1234), (np.int32, "i", -123456),
               (np.int64, "q", -(2**40) - 3), (np.uint8, "B", 201), (np.uint16, "H", 54321),
               (np.uint32, "I", 3_000_000_001), (np.uint64, "Q", 2**63 + 5),
               (np.float16, "e", -1.5), (np.float32, "f", 1.2345), (np.float64, "d", -2.5e-300),
               (np.bool_, "?", True))
    out = []
    for cls, code, value in samples:
        sample = cls(value)
        out.append((cls, code, sample, struct.pack("<" + code, sample.item())))
    return tuple(out)


#: The extension, loaded through the one cached loader (`cupric.runtime.native.Extension`).
EXTENSION = Extension("_cupric_fastcall", "launch", "kernel launch extension", SOURCE,
                      switch="KERNEL_FASTCALL", configure=_configure)


def enabled() -> bool:
    """Whether compiled launchers are wanted (``CUPRIC_KERNEL_FASTCALL``, read once)."""
    global _enabled
    if _enabled is None:
        _enabled = bool(_config.KERNEL_FASTCALL.get())
    return _enabled


def build_error() -> str | None:
    """Why the extension could not be built, configured or loaded, or None."""
    return EXTENSION.error


def load(build: bool = True):
    """The configured extension module (built into the cache if needed and `build`), or
    None when it is switched off or cannot be had (the reason: `build_error`)."""
    if not enabled():
        return None
    return EXTENSION.load(build)
