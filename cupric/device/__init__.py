"""What kernel code imports: indices, barriers, shared and local memory, atomics, warp
operations, tensor cores (mma, ldmatrix, cp.async), math, half precision, vector types,
clocks and constant memory.

Each callable is an intrinsic whose dotted name equals its path under `cupric.device`
(`atomic.add` is `cupric.device.atomic.add`): `@cupric.kernel` lowers it to NVVM IR by
that name, `cupric.simulator` runs it on the CPU with GPU semantics, and called from
ordinary Python it raises `OutsideKernelError`. docs/device-library.md lists them all.
"""

from . import math
from ._intrinsic import REGISTRY, OutsideKernelError
from .atomic import atomic
from .bits import bits
from .const import CONSTANT_MEMORY_BYTES, ConstantArray, constant, global_memory
from .coop import grid_stride, grid_sync
from .errors import KernelAssertionError, KernelError, KernelIndexError, KernelTrapError
from .half import half
from .indices import (blockDim, blockIdx, grid, gridDim, gridsize, laneid, syncthreads,
                      threadIdx, warpsize)
from .io import clock, clock64, globaltimer, trap
from .kinds import CONVERGENT
from .local import local
from .mma import cp_async, mma
from .cluster import cluster
from .mbarrier import mbarrier
from .tma import tma
from .wgmma import wgmma
from .shared import shared
from .sync import (FULL_MASK, nanosleep, syncthreads_and, syncthreads_count, syncthreads_or,
                   syncwarp, threadfence, threadfence_block, threadfence_system)
from .vector import VECTOR_TYPES, Vector, vector
from .vector import (double2, double3, double4, float2, float3, float4, half2, int2, int3,
                     int4, long2, long3, long4, uint2, uint3, uint4, ulong2, ulong3, ulong4)
from .warp import warp
from .wide import unroll, vload, vstore

__all__ = [
    "OutsideKernelError", "REGISTRY",
    # indices and the block barrier (indices.py)
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpsize", "laneid", "grid", "gridsize",
    "syncthreads",
    # barriers, fences, sleep
    "FULL_MASK", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp",
    "threadfence_block", "threadfence", "threadfence_system", "nanosleep",
    # cooperative grids
    "grid_sync", "grid_stride",
    # compile-time unrolling and wide memory access (wide.py)
    "unroll", "vload", "vstore",
    # memory
    "shared", "local", "atomic", "constant", "ConstantArray", "CONSTANT_MEMORY_BYTES",
    "global_memory",
    # tensor cores and asynchronous copies (mma.py)
    "mma", "cp_async",
    # sm_90: warpgroup MMA, mbarriers, TMA copies, clusters (wgmma.py, mbarrier.py, tma.py,
    # cluster.py)
    "wgmma", "mbarrier", "tma", "cluster",
    # warp, math, bits, half precision, vectors
    "warp", "math", "bits", "half", "vector", "Vector", "VECTOR_TYPES",
    "float2", "float3", "float4", "double2", "double3", "double4", "int2", "int3", "int4",
    "uint2", "uint3", "uint4", "long2", "long3", "long4", "ulong2", "ulong3", "ulong4", "half2",
    # host communication and clocks
    "trap", "clock", "clock64", "globaltimer", "CONVERGENT",
    "KernelError", "KernelAssertionError", "KernelIndexError", "KernelTrapError",
]
