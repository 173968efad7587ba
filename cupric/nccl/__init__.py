"""cupric.nccl: NVIDIA's collective communication library (multi-GPU all-reduce and kin).

`cupric.nccl.lib` holds the low-level bindings generated from the installed headers;
nothing loads until it is first used.
"""

from __future__ import annotations

import importlib

__all__ = ["lib", "is_available"]


def is_available() -> bool:
    """Whether NCCL can be loaded (``pip install nvidia-nccl-cu13`` otherwise)."""
    return importlib.import_module("cupric.nccl.lib").is_available()


def __getattr__(name: str):
    if name == "lib":
        return importlib.import_module("cupric.nccl.lib")
    raise AttributeError(f"module 'cupric.nccl' has no attribute {name!r}")
