"""Thread-block clusters (sm_90): blocks launched in groups of up to 8 (16 with an
opt-in) that run at once on one GPU processing cluster, can wait for each other
(`barrier.cluster`) and read and write each other's shared memory (distributed shared
memory, addresses from `mapa`).

A kernel gets clusters from its launch (`cupric.kernels.clusters.launch_cluster`, or
any launch with a cluster dimension). `ctaid()` is the block's place in its cluster,
`nctaid()` the cluster's shape, `rank()` the block's linear rank in it, `id()` and
`count()` the cluster's place in the grid and the clusters per grid axis.
"""

from __future__ import annotations

from ._intrinsic import Intrinsic, Namespace

__all__ = ["cluster"]

cluster = Namespace(
    "cluster",
    ctaid=Intrinsic("cluster.ctaid",
                    "cluster.ctaid() -> (x, y, z) i32: the block's index within its cluster "
                    "(%cluster_ctaid)."),
    nctaid=Intrinsic("cluster.nctaid",
                     "cluster.nctaid() -> (x, y, z) i32: blocks per cluster, per axis "
                     "(%cluster_nctaid)."),
    id=Intrinsic("cluster.id",
                 "cluster.id() -> (x, y, z) i32: the cluster's index within the grid "
                 "(%clusterid)."),
    count=Intrinsic("cluster.count",
                    "cluster.count() -> (x, y, z) i32: clusters per grid, per axis "
                    "(%nclusterid)."),
    rank=Intrinsic("cluster.rank",
                   "cluster.rank() -> i32: the block's linear rank in its cluster "
                   "(%cluster_ctarank)."),
    size=Intrinsic("cluster.size",
                   "cluster.size() -> i32: blocks in the cluster (%cluster_nctarank)."),
    sync=Intrinsic(
        "cluster.sync",
        "cluster.sync(): waits until every thread of every block of the cluster has "
        "reached it; orders their shared-memory accesses (barrier.cluster.arrive.release "
        "+ barrier.cluster.wait.acquire). Every thread of the cluster must call it."),
    map_shared=Intrinsic(
        "cluster.map_shared",
        "cluster.map_shared(smem, index, rank) -> u32: the shared::cluster address of "
        "smem[index] in the block of rank `rank` of the cluster (mapa.shared::cluster)."),
    load_u32=Intrinsic(
        "cluster.load_u32",
        "cluster.load_u32(address) -> u32: reads 4 bytes of distributed shared memory at a "
        "map_shared address (ld.shared::cluster.u32)."),
    store_u32=Intrinsic(
        "cluster.store_u32",
        "cluster.store_u32(address, value): writes 4 bytes of distributed shared memory "
        "(st.shared::cluster.u32)."),
)
