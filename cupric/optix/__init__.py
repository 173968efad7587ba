"""cupric.optix: NVIDIA OptiX ray tracing, through the driver's OptiX runtime.

`cupric.optix.lib` holds the low-level bindings: the types and the function table that
``optixQueryFunctionTable`` fills, declared from the OptiX SDK headers when
``OPTIX_ROOT`` is set and from cupric's own declarations otherwise. Importing this
package loads nothing.
"""

from __future__ import annotations

import importlib

__all__ = ["lib", "is_available"]


def is_available() -> bool:
    """Whether the driver's OptiX runtime loads (it ships with the NVIDIA driver)."""
    return importlib.import_module("cupric.optix.lib").is_available()


def __getattr__(name: str):
    if name == "lib":
        return importlib.import_module("cupric.optix.lib")
    raise AttributeError(f"module 'cupric.optix' has no attribute {name!r}")
