"""Thread, block and grid coordinates, and the block-wide barrier.

CUDA runs a kernel as a grid of blocks of threads; these names read the calling thread's
place in that grid (PTX special registers %tid, %ctaid, %ntid, %nctaid) and synchronize
the threads of a block (bar.sync 0).
"""

from ._intrinsic import Dim3, Intrinsic

threadIdx = Dim3("threadIdx", "Index of the thread within its block.")
blockIdx = Dim3("blockIdx", "Index of the block within the grid.")
blockDim = Dim3("blockDim", "Threads per block, per axis.")
gridDim = Dim3("gridDim", "Blocks per grid, per axis.")

warpsize = Intrinsic("warpsize", "Threads per warp (32 on every NVIDIA GPU so far).")
laneid = Intrinsic("laneid", "Index of the thread within its warp, 0..31.")

grid = Intrinsic(
    "grid",
    "grid(ndim): the thread's absolute index, blockIdx*blockDim+threadIdx, as an int "
    "(ndim=1) or a tuple of ndim ints (x first).")
gridsize = Intrinsic(
    "gridsize",
    "gridsize(ndim): total threads in the grid along each axis, blockDim*gridDim, as an "
    "int (ndim=1) or a tuple (x first).")

syncthreads = Intrinsic(
    "syncthreads",
    "Wait until every thread of the block has reached this point, and make their earlier "
    "shared- and global-memory writes visible to each other.")
