"""What kernel code imports: indices, barriers, shared memory, atomics, warp operations.

Each name is an intrinsic: `@cupric.kernel` lowers it to NVVM IR, `cupric.simulator`
runs it on the CPU with GPU semantics. Called from ordinary Python it raises
`OutsideKernelError`.
"""

from ._intrinsic import OutsideKernelError
from .indices import (blockDim, blockIdx, grid, gridDim, gridsize, laneid, syncthreads,
                      threadIdx, warpsize)

__all__ = ["OutsideKernelError", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpsize",
           "laneid", "grid", "gridsize", "syncthreads"]
