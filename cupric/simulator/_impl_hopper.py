"""Simulator implementations of the sm_90 device API: `wgmma`, `mbarrier`, `tma` and
`cluster`.

Shared memory gets addresses here: each block's dynamic shared memory starts at 0 and its
static arrays follow, 1024-byte aligned, in declaration order, so that descriptors, TMA
swizzles (XOR of address bits 4-6 with bits 7-9) and `tma.shared_address` agree as on a
GPU. A wgmma is computed when it is issued, each thread its own part of D from the
operands the descriptors name (products summed in float64, rounded once to float32), so
it needs no exchange between threads (with A in registers the lanes of each warp exchange
their fragments, a warp collective); `wgmma.wait` only hands the accumulator back. TMA
copies land when issued and count their bytes on the barrier at once; `mbarrier.wait`
blocks the thread until the phase completes (the block's threads run at once).
Clusters take their shape from `cupric.simulator.clusters` (set by
`cupric.kernels.clusters.launch_cluster`).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..device.wgmma import SWIZZLE_MODES, accumulator_coords, descriptor_bits, operand_offset
from ._array import SimArray, unwrap
from ._impl import _collective, _user_site, _warp_op
from ._live import FULL, WARP_OPS
from ._state import implements
from .errors import DeadlockError, SimulatorError
from .clusters import cluster_shape, use_cluster_shape  # noqa: F401  (simulator.hooks)
from .tma import lookup

__all__ = ["read_operand", "swizzled"]

_KEY = "cupric.hopper"  # this module's per-block state, kept in BlockState.shared
_SWIZZLE_OF_MODE = {mode: width for width, mode in SWIZZLE_MODES.items()}


def _fail(message: str, site=None):
    site = site or _user_site(4)
    return SimulatorError(message, filename=site[0], line=site[1])


# -- shared-memory addresses ---------------------------------------------------------------

def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class _Space:
    """A block's shared memory as one address space, and its mbarriers."""

    __slots__ = ("block", "barriers")

    def __init__(self, block) -> None:
        self.block = block
        self.barriers: dict = {}

    def roots(self) -> list:
        """(base address, root byte array) of the dynamic memory and each static array."""
        out = [(0, self.block.dynamic)]
        at = -(-self.block.dynamic.size // 1024) * 1024
        for value in self.block.shared.values():
            if type(value) is SimArray:
                root = _root(value._a)
                out.append((at, root))
                at += -(-root.nbytes // 1024) * 1024
        return out

    def address(self, arr, index) -> int:
        a = unwrap(arr)
        idx = tuple(int(i) for i in index) if isinstance(index, tuple) else (int(index),)
        try:
            flat = int(np.ravel_multi_index(idx, a.shape))
        except ValueError:
            raise _fail(f"index {idx} is outside the shared array of shape {a.shape}") \
                from None
        root = _root(a)
        for base, r in self.roots():
            if r is root:
                return base + _ptr(a) - _ptr(r) + flat * a.itemsize
        raise _fail("the array is not in this block's shared memory")

    def bytes_at(self, address: int, nbytes: int) -> tuple[np.ndarray, int]:
        """The root byte array holding [address, address + nbytes) and the offset in it."""
        for base, r in self.roots():
            if base <= address and address + nbytes <= base + r.nbytes:
                return r.reshape(-1).view(np.uint8), address - base
        raise _fail(f"shared address range {address:#x}..{address + nbytes:#x} is outside "
                    f"every shared array of the block")


def _space(s) -> _Space:
    space = s.block.shared.get(_KEY)
    if space is None:
        space = s.block.shared[_KEY] = _Space(s.block)
    return space


def swizzled(address, swizzle: int):
    """Shared address(es) after a swizzle of `swizzle` bytes: bits 4.. XOR bits 7.."""
    if not swizzle:
        return address
    return address ^ (((address >> 7) & (swizzle // 16 - 1)) << 4)


def _gather(space: _Space, addresses: np.ndarray, dtype: np.dtype) -> np.ndarray:
    lo, hi = int(addresses.min()), int(addresses.max()) + dtype.itemsize
    data, offset = space.bytes_at(lo, hi - lo)
    if offset % dtype.itemsize or lo % dtype.itemsize:
        raise _fail("misaligned shared-memory operand")
    words = data[offset:offset + (hi - lo)].view(dtype)
    return words[(addresses - lo) // dtype.itemsize]


# -- wgmma ---------------------------------------------------------------------------------

def read_operand(space: _Space, desc: int, rows: int, k_major: bool, kind: str) -> np.ndarray:
    """The rows x 16 operand a descriptor names, as float64 values."""
    desc = int(desc) & (2 ** 64 - 1)
    start = (desc & 0x3FFF) << 4
    leading = ((desc >> 16) & 0x3FFF) << 4
    stride = ((desc >> 32) & 0x3FFF) << 4
    swizzle = _SWIZZLE_OF_MODE[desc >> 62]
    r = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(16, dtype=np.int64)[None, :]
    offsets = operand_offset(r, k, k_major=k_major, swizzle=swizzle, leading=leading,
                             stride=stride)
    bits = _gather(space, swizzled(start + offsets, swizzle), np.dtype(np.uint16))
    if kind == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _product(a_rows: np.ndarray, b: np.ndarray, coords: np.ndarray, acc, scale_d):
    """One thread's D values: rows of A (indexed by coords[:, 0]) times rows of B^T."""
    d = (a_rows[coords[:, 0]] * b[coords[:, 1]]).sum(axis=1)
    if scale_d:
        d = d + np.asarray(acc, np.float32).astype(np.float64)
    return tuple(np.float32(v) for v in d.astype(np.float32))


def _warp_compute(n: int, kind: str):
    """The warp-level step of a wgmma with A in registers: the 32 lanes' fragments make the
    warp's 16 rows of A (the mma.m16n8k16 A layout)."""
    from ._impl_mma import _gather

    def compute(group: int, args: dict) -> dict:
        if group != FULL:
            raise SimulatorError(f"wgmma.m64n{n}k16_{kind} needs all 32 lanes of each warp, "
                                 f"got mask {group:#010x}")
        a = _gather(f"m16n8k16_{kind}", "a", 16, 16, {lane: args[lane][1] for lane in args},
                    kind)
        first = args[0]
        b = read_operand(first[5], first[2], n, not first[4], kind)
        out = {}
        for lane, (acc, _, _, scale, _, _, lin) in args.items():
            coords = np.array(accumulator_coords(n, lin & 127))
            coords[:, 0] -= 16 * ((lin & 127) >> 5)
            out[lane] = _product(a, b, coords, acc, scale)
        return out

    return compute


def _mma_core(n: int, kind: str):
    name = f"wgmma.m64n{n}k16_{kind}"
    WARP_OPS[name] = _warp_compute(n, kind)

    def core(s, site, acc, a, b_desc, scale_d=1, trans_a=0, trans_b=0):
        acc = tuple(acc)
        if len(acc) != n // 2:
            raise SimulatorError(f"{name}: acc holds {len(acc)} values, not {n // 2}",
                                 filename=site[0], line=site[1])
        space = _space(s)
        if isinstance(a, tuple):  # A in registers: the warp exchanges its fragments
            if trans_a:
                raise SimulatorError(f"{name}: A in registers cannot be transposed",
                                     filename=site[0], line=site[1])
            return _warp_op(s, site, name, FULL, (acc, a, b_desc, int(scale_d),
                                                  int(trans_b), space, s.lin))
        a_rows = read_operand(space, a, 64, not trans_a, kind)
        b = read_operand(space, b_desc, n, not trans_b, kind)
        return _product(a_rows, b, np.array(accumulator_coords(n, s.lin & 127)), acc,
                        scale_d)

    core.__name__ = f"_wgmma_m64n{n}k16_{kind}"
    return core


def _register_mmas() -> None:
    from ..device.wgmma import N_SIZES, TYPES
    for n in N_SIZES:
        for kind in TYPES:
            _collective(f"wgmma.m64n{n}k16_{kind}")(_mma_core(n, kind))


_register_mmas()


@implements("wgmma.descriptor")
def _descriptor(s, smem, index, swizzle=128, leading=16, stride=1024):
    address = _space(s).address(smem, index)
    return np.uint64(descriptor_bits(address, int(leading), int(stride), int(swizzle)))


@implements("wgmma.accumulator")
def _accumulator(s, n):
    return (np.float32(0),) * (int(n) // 2)


@implements("wgmma.fence", "wgmma.commit")
def _nothing(s):
    return None


@implements("wgmma.wait")
def _wgmma_wait(s, n, acc=None):
    return acc


@implements("wgmma.raise_registers", "wgmma.lower_registers")
def _registers(s, n):
    if int(n) % 8 or not 24 <= int(n) <= 256:
        raise _fail(f"setmaxnreg takes a multiple of 8 in 24..256, got {n}")


# -- mbarrier ------------------------------------------------------------------------------

class _Barrier:
    __slots__ = ("count", "pending", "tx", "phase", "waiters")

    def __init__(self, count: int) -> None:
        self.count = count
        self.pending = count
        self.tx = 0
        self.phase = 0
        self.waiters: list = []


def _barrier(s, bar, index, what: str) -> _Barrier:
    space = _space(s)
    found = space.barriers.get(space.address(bar, index))
    if found is None:
        raise _fail(f"{what}: the barrier was not initialized (mbarrier.init)")
    return found


def _advance(s, b: _Barrier) -> None:
    if b.pending == 0 and b.tx == 0:
        b.phase += 1
        b.pending = b.count
        waiters, b.waiters = b.waiters, []
        if waiters:
            s.live._release(waiters, [None] * len(waiters))


@implements("mbarrier.init")
def _mbarrier_init(s, bar, index, count):
    if unwrap(bar).itemsize != 8:
        raise _fail("mbarrier.init: barriers are 8-byte (u64) shared elements")
    count = int(count)
    if not 1 <= count < 2 ** 20:
        raise _fail(f"mbarrier.init: count must lie in 1..2^20-1, got {count}")
    space = _space(s)
    space.barriers[space.address(bar, index)] = _Barrier(count)


@implements("mbarrier.fence_init")
def _fence_init(s):
    return None


def _arrive(s, b: _Barrier, what: str) -> None:
    if b.pending <= 0:
        raise _fail(f"{what}: more arrivals than the barrier's count in one phase")
    b.pending -= 1
    _advance(s, b)


@implements("mbarrier.arrive")
def _mbarrier_arrive(s, bar, index):
    _arrive(s, _barrier(s, bar, index, "mbarrier.arrive"), "mbarrier.arrive")


@implements("mbarrier.arrive_expect_tx")
def _mbarrier_arrive_expect_tx(s, bar, index, nbytes):
    b = _barrier(s, bar, index, "mbarrier.arrive_expect_tx")
    b.tx += int(nbytes)
    _arrive(s, b, "mbarrier.arrive_expect_tx")


@implements("mbarrier.try_wait")
def _mbarrier_try_wait(s, bar, index, parity):
    done = (_barrier(s, bar, index, "mbarrier.try_wait").phase & 1) != (int(parity) & 1)
    if not done and s.live is not None:
        s.live.pause(s)  # a spin loop: let the thread that completes the phase run
    return bool(done)


@_collective("mbarrier.wait")
def _mbarrier_wait(s, site, bar, index, parity):
    b = _barrier(s, bar, index, "mbarrier.wait")
    if (b.phase & 1) != (int(parity) & 1):
        return None
    if s.live is None:
        raise DeadlockError(f"mbarrier.wait: the phase of parity {int(parity)} is not "
                            f"complete and no other thread runs (serial mode)",
                            filename=site[0], line=site[1])
    b.waiters.append(s)
    return s.live._block(s, ("mbarrier.wait", site))


# -- tma -----------------------------------------------------------------------------------

def _box_addresses(space: _Space, smem, index, m) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shared addresses of the box's elements (swizzled) and their global row/col."""
    bx, by = m.box
    base = space.address(smem, index)
    item = m.source.itemsize
    yy, xx = np.meshgrid(np.arange(by), np.arange(bx), indexing="ij")
    addresses = swizzled(base + (yy * bx + xx) * item, m.swizzle)
    return addresses, yy, xx


def _tensor(tmap, what: str):
    try:
        return lookup(unwrap(tmap))
    except KeyError as exc:
        raise _fail(f"{what}: {exc.args[0]}") from None


def _shared_words(space: _Space, addresses: np.ndarray, dtype) -> tuple[np.ndarray, int]:
    lo = int(addresses.min())
    hi = int(addresses.max()) + dtype.itemsize
    data, offset = space.bytes_at(lo, hi - lo)
    return data[offset:offset + hi - lo].view(dtype), lo


@implements("tma.load_2d")
def _tma_load(s, dst, dst_index, tmap, x, y, bar, bar_index):
    m = _tensor(tmap, "tma.load_2d")
    space = _space(s)
    # what faults on a GPU (an x off 16 bytes, a box off 128 bytes) is refused here too
    m.check_copy(x, y, space.address(dst, dst_index), "tma.load_2d", site=_user_site(3))
    b = _barrier(s, bar, bar_index, "tma.load_2d")
    addresses, yy, xx = _box_addresses(space, dst, dst_index, m)
    src = m.source
    gy, gx = yy + int(y), xx + int(x)
    inside = (gy >= 0) & (gy < src.shape[0]) & (gx >= 0) & (gx < src.shape[1])
    values = np.zeros(addresses.shape, src.dtype)
    values[inside] = src[gy[inside], gx[inside]]
    words, lo = _shared_words(space, addresses, src.dtype)
    words[(addresses - lo) // src.itemsize] = values
    b.tx -= addresses.size * src.itemsize  # the whole box counts, edges included
    _advance(s, b)


@implements("tma.store_2d")
def _tma_store(s, tmap, x, y, src, src_index):
    m = _tensor(tmap, "tma.store_2d")
    space = _space(s)
    m.check_copy(x, y, space.address(src, src_index), "tma.store_2d", store=True,
                 site=_user_site(3))  # stores also fault at negative coordinates
    addresses, yy, xx = _box_addresses(space, src, src_index, m)
    out = m.source
    words, lo = _shared_words(space, addresses, out.dtype)
    values = words[(addresses - lo) // out.itemsize]
    gy, gx = yy + int(y), xx + int(x)
    inside = (gy >= 0) & (gy < out.shape[0]) & (gx >= 0) & (gx < out.shape[1])
    out[gy[inside], gx[inside]] = values[inside]


@implements("tma.commit", "tma.fence_proxy_async")
def _tma_nothing(s):
    return None


@implements("tma.wait")
def _tma_wait(s, n):
    return None


@implements("tma.prefetch", "tma.acquire")
def _tma_prefetch(s, tmap):
    _tensor(tmap, "tma.prefetch")


@implements("tma.shared_address")
def _shared_address(s, smem, index):
    return np.uint32(_space(s).address(smem, index))


# -- clusters ------------------------------------------------------------------------------

def _i32(v) -> np.int32:
    return np.int32(v)


@implements("cluster.ctaid")
def _cluster_ctaid(s):
    shape = cluster_shape()
    return tuple(_i32(s.bid[k] % shape[k]) for k in range(3))


@implements("cluster.nctaid")
def _cluster_nctaid(s):
    return tuple(_i32(c) for c in cluster_shape())


@implements("cluster.id")
def _cluster_id(s):
    shape = cluster_shape()
    return tuple(_i32(s.bid[k] // shape[k]) for k in range(3))


@implements("cluster.count")
def _cluster_count(s):
    shape = cluster_shape()
    return tuple(_i32(s.launch.grid[k] // shape[k]) for k in range(3))


def _rank_of(bid: tuple, shape: tuple) -> int:
    x, y, z = (bid[k] % shape[k] for k in range(3))
    return x + shape[0] * (y + shape[1] * z)


@implements("cluster.rank")
def _cluster_rank(s):
    return _i32(_rank_of(s.bid, cluster_shape()))


@implements("cluster.size")
def _cluster_size(s):
    shape = cluster_shape()
    return _i32(shape[0] * shape[1] * shape[2])


def _cluster_block(s, rank: int):
    """The BlockState of the block of `rank` in the caller's cluster."""
    shape = cluster_shape()
    size = shape[0] * shape[1] * shape[2]
    if not 0 <= rank < size:
        raise _fail(f"cluster rank {rank} outside the cluster of {size} blocks")
    origin = tuple(s.bid[k] - s.bid[k] % shape[k] for k in range(3))
    target = (origin[0] + rank % shape[0], origin[1] + (rank // shape[0]) % shape[1],
              origin[2] + rank // (shape[0] * shape[1]))
    if target == s.bid:
        return s.block
    if s.live is None:
        raise _fail("distributed shared memory needs the cluster's blocks live: launch "
                    "with launch_cluster (mode='grid')")
    for other in s.live.states:
        if other.block is not None and other.block.bid == target:
            return other.block
    raise _fail(f"block {target} of the cluster is not running")


class _ThreadOf:
    """Stands for a thread of another block when only its block matters."""

    __slots__ = ("block",)

    def __init__(self, block) -> None:
        self.block = block


# A shared::cluster address: the block's rank above bit 24, its shared address below.
@implements("cluster.map_shared")
def _map_shared(s, smem, index, rank):
    return np.uint32((int(rank) << 24) | _space(s).address(smem, index))


def _remote(s, address: int, nbytes: int):
    block = _cluster_block(s, int(address) >> 24)
    space = _space(_ThreadOf(block))
    return space.bytes_at(int(address) & 0xFFFFFF, nbytes)


@implements("cluster.load_u32")
def _load_u32(s, address):
    data, offset = _remote(s, address, 4)
    return data[offset:offset + 4].view(np.uint32)[0]


@implements("cluster.store_u32")
def _store_u32(s, address, value):
    data, offset = _remote(s, address, 4)
    data[offset:offset + 4].view(np.uint32)[0] = np.uint32(int(value) & 0xFFFFFFFF)


@implements("mbarrier.arrive_cluster")
def _arrive_cluster(s, bar, index, rank):
    address = _space(s).address(bar, index)
    block = _cluster_block(s, int(rank))
    b = _space(_ThreadOf(block)).barriers.get(address)
    if b is None:
        raise _fail("mbarrier.arrive_cluster: the barrier was not initialized in the block "
                    f"of rank {int(rank)}")
    _arrive(s, b, "mbarrier.arrive_cluster")


# Per set of live threads (one launch): cluster index -> the threads waiting at its
# barrier. Weak keys: a launch that fails leaves nothing behind.
_CLUSTER_BARRIERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@_collective("cluster.sync")
def _cluster_sync(s, site):
    shape = cluster_shape()
    size = shape[0] * shape[1] * shape[2]
    if size == 1:
        return s.live.barrier(s, "syncthreads", None, site) if s.live is not None else None
    if s.live is None:
        raise DeadlockError("cluster.sync with clusters of several blocks needs them live: "
                            "launch with launch_cluster", filename=site[0], line=site[1])
    cid = tuple(s.bid[k] // shape[k] for k in range(3))
    clusters = _CLUSTER_BARRIERS.setdefault(s.live, {})
    waiting = clusters.setdefault(cid, [])
    waiting.append(s)
    if len(waiting) < size * s.launch.nthreads:
        return s.live._block(s, ("cluster.sync", site))
    del clusters[cid]
    others = [w for w in waiting if w is not s]
    s.live._release(others, [None] * len(others))
    return None
