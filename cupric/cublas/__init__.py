"""cupric.cublas: NVIDIA's BLAS on the GPU.

`cupric.cublas.lib` holds the low-level bindings of ``cublas_v2.h`` and
`cupric.cublas.lt` those of cuBLASLt, both generated from the installed headers by
`cupric.bindings_gen` on first use; importing this package loads nothing.
"""

from __future__ import annotations

import importlib

__all__ = ["lib", "lt", "is_available"]


def is_available() -> bool:
    """Whether cuBLAS can be loaded (``pip install nvidia-cublas`` otherwise)."""
    return importlib.import_module("cupric.cublas.lib").is_available()


def __getattr__(name: str):
    if name in ("lib", "lt"):
        return importlib.import_module(f"cupric.cublas.{name}")
    raise AttributeError(f"module 'cupric.cublas' has no attribute {name!r}")
