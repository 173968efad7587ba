"""cupric.kernels: ready GPU kernels written in cupric itself (elementwise, image,
reductions, scans, transpose, GEMM, sorts, histogram), each behind a host function that
takes device arrays, picks the launch geometry and runs on the CPU simulator without a GPU.

Submodules and their public functions load on first use, so importing this package costs
nothing until a kernel is needed.
"""

from __future__ import annotations

import importlib

#: submodule -> its public host functions, re-exported here.
_MODULES = {
    "elementwise": ("vecadd", "saxpy", "memcpy", "fill", "map"),
    "image": ("rgba2gray", "mandelbrot"),
    "reduce": ("sum", "min", "max", "argmin", "argmax", "dot"),
    "scan": ("inclusive_scan", "exclusive_scan"),
    "transpose": ("transpose",),
    "gemm": ("gemm", "sgemm", "dgemm"),
    "sort": ("bitonic_sort", "radix_sort"),
    "histogram": ("histogram",),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_LAZY) + sorted(_MODULES)


def __getattr__(name: str):
    if name in _MODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
