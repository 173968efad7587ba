"""cupric.curand: NVIDIA's cuRAND random number library.

`cupric.curand.lib` holds the low-level bindings of the host API generated from the
installed headers; nothing loads until it is first used. (cupric's own GPU random
numbers, callable from kernels, are in `cupric.gpu_rand`.)
"""

from __future__ import annotations

import importlib

from .._lazy import attach

__all__ = ["lib", "is_available"]


def is_available() -> bool:
    """Whether cuRAND can be loaded (``pip install nvidia-curand`` otherwise)."""
    return importlib.import_module("cupric.curand.lib").is_available()


__getattr__, __dir__ = attach(__name__, globals(), {"lib": ("cupric.curand.lib", None)})
