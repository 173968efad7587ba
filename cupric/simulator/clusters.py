"""The cluster shape of simulated launches: thread-block clusters (sm_90) are a property
of a launch, so `cupric.kernels.clusters.launch_cluster` sets the shape here for the
duration of a simulated launch and the simulator's cluster registers read it.
"""

from __future__ import annotations

import threading

__all__ = ["cluster_shape", "use_cluster_shape"]

_local = threading.local()


def cluster_shape() -> tuple:
    """The cluster shape (x, y, z) of the simulated launch running on this OS thread."""
    return getattr(_local, "shape", (1, 1, 1))


class use_cluster_shape:
    """Context manager: simulated launches inside it run with clusters of `shape`."""

    def __init__(self, shape: tuple) -> None:
        self.shape = tuple(shape)
        self.previous = None

    def __enter__(self):
        self.previous = cluster_shape()
        _local.shape = self.shape
        return self

    def __exit__(self, *exc) -> None:
        _local.shape = self.previous
