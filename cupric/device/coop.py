"""Whole-grid cooperation: the grid-wide barrier of a cooperative launch, and the
grid-stride loop that lets a fixed-size grid cover an array of any length.
"""

from ._intrinsic import Intrinsic

__all__ = ["grid_sync", "grid_stride"]

grid_sync = Intrinsic(
    "grid_sync",
    "grid_sync(): wait until every thread of every block of the grid has reached this "
    "point (cooperative_groups::this_grid().sync()). Valid only in a cooperative launch, "
    "whose blocks must all be resident on the device at once; the launcher checks that.")
grid_stride = Intrinsic(
    "grid_stride",
    "grid_stride(n) -> range: the indices this thread handles in a grid-stride loop over "
    "0..n-1, i.e. range(grid(1), n, gridsize(1)). Use as `for i in grid_stride(n):`.")
