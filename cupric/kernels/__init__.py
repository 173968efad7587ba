"""cupric.kernels: ready GPU kernels written in cupric itself (elementwise, image,
reductions, scans, transpose, GEMM, sorts, histogram), each behind a host function that
takes device arrays, picks the launch geometry and runs on the CPU simulator without a GPU.

Submodules and their public functions load on first use, so importing this package costs
nothing until a kernel is needed. Three submodules share their name with their main host
function (`transpose`, `gemm`, `histogram`): ``cupric.kernels.gemm`` is the submodule,
and calling it calls ``cupric.kernels.gemm.gemm``, so both spellings work.
"""

from __future__ import annotations

import importlib
import sys
import types

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
    # Kernel templates (elementwise and reduction builders); their names stay qualified.
    "templates": (),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_LAZY) + sorted(_MODULES) + ["release_workspaces"]


def release_workspaces() -> None:
    """Free the device memory the ready kernels keep from call to call (reductions' and
    scans' partial results, the radix sort's scratch), in stream order; calls after it
    allocate what they need again. See `cupric.kernels._common.release_workspaces`."""
    from cupric.kernels._common import release_workspaces as release
    release()



class _HostFunctionModule(types.ModuleType):
    """A submodule named after its main host function: calling it calls that function."""

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


def _callable(module):
    if type(module) is types.ModuleType and module.__name__.rpartition(".")[2] in _LAZY:
        module.__class__ = _HostFunctionModule
    return module


class _Package(types.ModuleType):
    # The import system binds a submodule to its package with setattr, whichever way it
    # was first imported (`from cupric.kernels.gemm import tiled_kernel` included).
    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType):
            _callable(value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in _MODULES:
        value = _callable(importlib.import_module(f"{__name__}.{name}"))
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return __all__
