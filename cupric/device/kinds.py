"""Which intrinsics synchronize threads: block barriers, warp collectives and the grid
barrier. All threads they name must reach them together, so the compiler marks their
calls `convergent` (no code motion across control flow), and the simulator runs kernels
that can reach one with the threads of a block (or grid) live at once.
"""

from .wgmma import N_SIZES, TYPES

__all__ = ["BLOCK_COLLECTIVES", "WARP_COLLECTIVES", "GRID_COLLECTIVES", "CONVERGENT"]

BLOCK_COLLECTIVES = frozenset({"syncthreads", "syncthreads_count", "syncthreads_and",
                               "syncthreads_or",
                               # waits for other threads' arrivals and copies (sm_90)
                               "mbarrier.wait"})
WARP_COLLECTIVES = frozenset({
    "syncwarp", "warp.activemask", "warp.shfl_idx", "warp.shfl_up", "warp.shfl_down",
    "warp.shfl_xor", "warp.any", "warp.all", "warp.ballot", "warp.match_any",
    "warp.match_all", "warp.reduce_add", "warp.reduce_min", "warp.reduce_max",
    "warp.reduce_and", "warp.reduce_or", "warp.reduce_xor",
    # tensor cores (cupric.device.mma): the whole warp exchanges fragments
    "mma.m16n8k16_f16", "mma.m16n8k16_bf16", "mma.m16n8k8_tf32", "mma.m16n8k32_s8",
    "mma.m16n8k32_u8", "mma.ldmatrix", "mma.stmatrix"}
    # warpgroup tensor cores (cupric.device.wgmma): A in registers comes from the warp's lanes
    | {f"wgmma.m64n{n}k16_{t}" for n in N_SIZES for t in TYPES})
# cluster.sync: the simulator runs every block live for it (the cluster's blocks).
GRID_COLLECTIVES = frozenset({"grid_sync", "cluster.sync"})
CONVERGENT = BLOCK_COLLECTIVES | WARP_COLLECTIVES | GRID_COLLECTIVES
