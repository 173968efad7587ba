"""cupric.cudnn: NVIDIA's deep-learning primitives.

`cupric.cudnn.lib` holds the low-level bindings of ``cudnn.h``, generated from the
installed headers by `cupric.bindings_gen` on first use; importing this package loads
nothing.
"""

from __future__ import annotations

import importlib

__all__ = ["lib", "is_available"]


def is_available() -> bool:
    """Whether cuDNN can be loaded (``pip install nvidia-cudnn-cu13`` otherwise)."""
    return importlib.import_module("cupric.cudnn.lib").is_available()


def __getattr__(name: str):
    if name == "lib":
        return importlib.import_module("cupric.cudnn.lib")
    raise AttributeError(f"module 'cupric.cudnn' has no attribute {name!r}")
