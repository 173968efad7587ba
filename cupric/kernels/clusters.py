"""Launching kernels in thread-block clusters (sm_90): groups of blocks that run at once on
one GPU processing cluster and share their shared memory (`cupric.device.cluster`).

A cluster shape is a property of a launch: `launch_cluster` sets the kernel function's
required cluster dimensions (`CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*`) and launches it; on
the simulator it runs every block live with the cluster registers of that shape.
"""

from __future__ import annotations

__all__ = ["launch_cluster"]


def launch_cluster(kern, signature: str, grid, block, cluster, *args, shared_bytes: int = 0,
                   stream=None) -> None:
    """Launch `kern` (a cupric kernel, specialized for `signature`) with thread-block
    clusters of shape `cluster` ((x, y, z) blocks; `grid` a multiple of it): on a GPU
    through the function's required cluster dimensions, on the simulator with the
    cluster registers and `cluster.sync` of that shape (every block live).

    Raises
    ------
    ValueError
        A cluster shape that does not divide the grid, or larger than 8 blocks without the
        device's opt-in (16 at most).
    """
    grid3 = tuple(grid) + (1,) * (3 - len(grid)) if isinstance(grid, tuple) else (grid, 1, 1)
    shape = tuple(cluster) + (1,) * (3 - len(cluster)) if isinstance(cluster, tuple) else \
        (int(cluster), 1, 1)
    size = shape[0] * shape[1] * shape[2]
    if any(g % c for g, c in zip(grid3, shape)) or not 1 <= size <= 16:
        raise ValueError(f"launch_cluster: cluster {shape} must divide the grid {grid3} and "
                         f"hold 1..16 blocks")
    from cupric.kernels._common import on_simulator
    if on_simulator():
        from cupric.simulator import launch as simulate
        from cupric.simulator.hooks import use_cluster_shape
        with use_cluster_shape(shape):
            simulate(kern.py_func, grid3, block, args, shared_bytes=shared_bytes,
                     mode="grid")
        return
    from cupric.runtime.native import check, driver
    spec = kern.specialize(signature)
    function = spec.prepared().function
    d = driver()
    attr = d.CUfunction_attribute
    if size > 8:
        function.set_attribute("non_portable_cluster_size_allowed", 1)
    for name, value in zip(("WIDTH", "HEIGHT", "DEPTH"), shape):
        check(d.cuFuncSetAttribute(function.handle,
                                   getattr(attr, f"CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_{name}"),
                                   int(value)))
    kern[grid3, block, stream, shared_bytes](*args)
