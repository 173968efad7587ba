"""What the compiler and the ready kernels ask of the simulator, under public names.

A compiled kernel falls back to the simulator with its typed twin (`twin_of`: the kernel
recomputed with compiled code's integer and float semantics) and runs it through `run`;
a launch decides whether it must be cooperative from the collectives the kernel may
reach (`needs`); a kernel written for thread-block clusters sets the simulated cluster
shape (`use_cluster_shape`).

Each name is read from the simulator module that defines it whenever it is imported from
here (callers import it inside the function that needs it): a GPU launch that asks only
`needs` does not load the typed twin's machinery, and a replaced simulator function
(tests) is what callers get.
"""

from __future__ import annotations

import importlib

__all__ = ["run", "twin_of", "needs", "use_cluster_shape"]

_HOMES = {
    "run": "cupric.simulator._launch",
    "twin_of": "cupric.simulator._twin",
    "needs": "cupric.simulator._scan",
    # a context manager: the simulated thread-block cluster shape while it is open
    "use_cluster_shape": "cupric.simulator._impl_hopper",
}


def __getattr__(name: str):
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), name)


def __dir__():
    return sorted(set(globals()) | set(_HOMES))
