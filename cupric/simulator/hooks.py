"""What the compiler and the ready kernels ask of the simulator, under public names.

A compiled kernel falls back to the simulator with its typed twin (`twin_of`: the kernel
recomputed with compiled code's integer and float semantics) and runs it through `run`;
a launch decides whether it must be cooperative from the collectives the kernel may
reach (`needs`); a kernel written for thread-block clusters sets the simulated cluster
shape (`use_cluster_shape`).
"""

from __future__ import annotations

from ._launch import run
from ._scan import needs
from ._twin import twin_of

__all__ = ["run", "twin_of", "needs", "use_cluster_shape"]


def use_cluster_shape(shape):
    """A context manager: the simulated thread-block cluster shape while it is open
    (`cupric.simulator._impl_hopper`)."""
    from ._impl_hopper import use_cluster_shape as use
    return use(shape)
