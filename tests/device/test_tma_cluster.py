"""TMA copies, mbarriers and clusters (`cupric.device.tma`, `mbarrier`, `cluster`): on the
simulator against NumPy (swizzled boxes, edges that read as zero, stores clipped at the
edges, barrier phases across threads, cluster registers and distributed shared memory),
the host-side tensor-map checks, and on the GPU the same kernels."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.device import (cluster, mbarrier, shared, syncthreads, threadIdx, tma)
from cupric.kernels.clusters import launch_cluster
from cupric.runtime.tensor_map import check_box
from cupric.simulator import launch
from cupric.simulator._impl_hopper import swizzled
from cupric.simulator.tma import tensor_map as sim_map
from cupric.types import i32, u16, u32, u64

gpu = pytest.mark.gpu
def box_of(swizzle):
    """Boxes of 16 rows as wide as the swizzle (64 u16 = 128 bytes without one)."""
    return ((swizzle or 128) // 2, 16)


def copy_kernel(src_map, dst_map, out, x, y, x2, y2, bx):
    """Thread 0 loads the box at (x, y) of src through TMA; every thread copies the shared
    bytes out (swizzled as they landed); thread 0 stores the box to (x2, y2) of dst."""
    sm = shared.dynamic(u16)
    bars = shared.array(1, u64)
    pad = ((1024 - (tma.shared_address(sm, 0) & 1023)) & 1023) >> 1
    tid = threadIdx.x
    if tid == 0:
        mbarrier.init(bars, 0, 1)
        mbarrier.fence_init()
    syncthreads()
    if tid == 0:
        tma.acquire(src_map)
        tma.acquire(dst_map)
        mbarrier.arrive_expect_tx(bars, 0, bx * 16 * 2)
        tma.load_2d(sm, pad, src_map, x, y, bars, 0)
    mbarrier.wait(bars, 0, 0)
    i = tid
    while i < bx * 16:
        out[i] = sm[pad + i]
        i += 128
    syncthreads()
    if tid == 0:
        tma.store_2d(dst_map, x2, y2, sm, pad)
        tma.commit()
        tma.wait(0)


def expected_box(src, x, y, swizzle):
    bx = box_of(swizzle)[0]
    rows, cols = src.shape
    box = np.zeros((16, bx), src.dtype)
    for r in range(16):
        for c in range(bx):
            if 0 <= y + r < rows and 0 <= x + c < cols:
                box[r, c] = src[y + r, x + c]
    flat = np.zeros(bx * 16, src.dtype)
    addresses = swizzled(np.arange(bx * 16) * 2, swizzle) // 2
    flat[addresses] = box.reshape(-1)
    return box, flat


def expected_store(dst_before, box, x2, y2):
    dst = dst_before.copy()
    for r in range(box.shape[0]):
        for c in range(box.shape[1]):
            if 0 <= y2 + r < dst.shape[0] and 0 <= x2 + c < dst.shape[1]:
                dst[y2 + r, x2 + c] = box[r, c]
    return dst


# What the copy engine accepts (cupric.device.tma; test_tma_coordinates.py): x a multiple of
# 16 bytes (8 u16), loads anywhere past the edges, stores at non-negative coordinates,
# clipped at the far edges. The 64-byte case reads past the right and bottom edges and
# stores past them; the last one reads at negative coordinates.
CASES = [(128, 0, 0, 64, 8), (64, 120, 40, 104, 40), (32, 8, 40, 96, 40), (0, 72, 3, 0, 0),
         (128, -8, -3, 40, 0)]


@pytest.mark.parametrize("swizzle, x, y, x2, y2", CASES)
def test_simulator_tma_load_and_store(swizzle, x, y, x2, y2, rng):
    src = rng.integers(0, 2 ** 16, (48, 136), dtype=np.uint16)
    dst = rng.integers(0, 2 ** 16, (50, 120), dtype=np.uint16)
    box = box_of(swizzle)
    maps = (sim_map(src, box, swizzle=swizzle), sim_map(dst, box, swizzle=swizzle))
    out = np.full(box[0] * 16, 0xBEEF, np.uint16)
    before = dst.copy()
    launch(copy_kernel, (1, 1, 1), (128, 1, 1),
           (maps[0].array, maps[1].array, out, np.int32(x), np.int32(y), np.int32(x2),
            np.int32(y2), np.int32(box[0])), shared_bytes=2048 + 1024)
    box, flat = expected_box(src, x, y, swizzle)
    assert np.array_equal(out, flat)
    assert np.array_equal(dst, expected_store(before, box, x2, y2))


def test_tensor_map_box_rules():
    assert check_box((100, 50), 208, 2, (64, 16), 128) == (64, 16)
    with pytest.raises(ValueError, match="wider than the 64-byte swizzle"):
        check_box((100, 50), 208, 2, (64, 16), 64)
    with pytest.raises(ValueError, match="multiple of 16"):
        check_box((100, 50), 208, 2, (4, 16), 0)
    with pytest.raises(ValueError, match="1..256"):
        check_box((100, 50), 208, 2, (64, 300), 128)
    with pytest.raises(ValueError, match="rows 202 bytes apart"):
        check_box((101, 50), 202, 2, (64, 16), 128)
    with pytest.raises(TypeError, match="2-D C-contiguous"):
        sim_map(np.zeros((4, 8, 8), np.uint16), (8, 4))


def test_device_tensor_map_refuses_numpy():
    from cupric.runtime.tensor_map import TensorMap, tensor_map
    with pytest.raises(TypeError, match="simulator"):
        tensor_map(np.zeros((8, 64), np.uint16), (64, 8))
    with pytest.raises(TypeError, match="no public constructor"):
        TensorMap()


def handoff(out, rounds):
    """Threads 32..63 produce a value per round and arrive; threads 0..31 wait for the
    phase and read it; then they arrive on a second barrier the producers wait for."""
    bars = shared.array(2, u64)
    vals = shared.array(32, i32)
    tid = threadIdx.x
    if tid == 0:
        mbarrier.init(bars, 0, 32)
        mbarrier.init(bars, 1, 32)
        mbarrier.fence_init()
    syncthreads()
    for r in range(rounds):
        if tid >= 32:
            if r > 0:
                mbarrier.wait(bars, 1, (r - 1) & 1)
            vals[tid - 32] = r * 100 + tid
            mbarrier.arrive(bars, 0)
        else:
            mbarrier.wait(bars, 0, r & 1)
            out[r, tid] = vals[(tid + 1) % 32]
            mbarrier.arrive(bars, 1)
    if tid == 0:
        out[rounds, 0] = 1 if mbarrier.try_wait(bars, 0, (rounds - 1) & 1) else 0
        out[rounds, 1] = 1 if mbarrier.try_wait(bars, 0, rounds & 1) else 0


def expected_handoff(rounds):
    want = np.full((rounds + 1, 32), -1, np.int32)  # the poison stays where nothing writes
    for r in range(rounds):
        want[r] = [r * 100 + 32 + (t + 1) % 32 for t in range(32)]
    want[rounds, :2] = (1, 0)
    return want


def test_simulator_mbarrier_phases():
    out = np.full((6, 32), -1, np.int32)
    launch(handoff, (1, 1, 1), (64, 1, 1), (out, np.int32(5)))
    assert np.array_equal(out, expected_handoff(5))


def neighbours(out):
    """Each block writes its index to shared memory; after a cluster barrier it reads its
    neighbour's through distributed shared memory."""
    mine = shared.array(4, u32)
    tid = threadIdx.x
    b = cupric.device.blockIdx.x
    if tid == 0:
        mine[0] = u32(b * 10 + 7)
    cluster.sync()
    rank = cluster.rank()
    size = cluster.size()
    other = cluster.load_u32(cluster.map_shared(mine, 0, (rank + 1) % size))
    cluster.sync()   # no block leaves while another still reads its shared memory
    if tid == 0:
        c = cluster.ctaid()
        nc = cluster.nctaid()
        cid = cluster.id()
        cnt = cluster.count()
        out[b, 0] = rank
        out[b, 1] = size
        out[b, 2] = c[0]
        out[b, 3] = nc[0]
        out[b, 4] = cid[0]
        out[b, 5] = cnt[0]
        out[b, 6] = i32(other)


def expected_neighbours(blocks, size):
    want = np.zeros((blocks, 7), np.int32)
    for b in range(blocks):
        rank = b % size
        nb = b - rank + (rank + 1) % size
        want[b] = (rank, size, rank, size, b // size, blocks // size, nb * 10 + 7)
    return want


def test_simulator_clusters(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    out = np.zeros((8, 7), np.int32)
    kern = cupric.kernel(neighbours)
    launch_cluster(kern, "Array[i32, 2, 'C']", 8, 64, 4, out)
    assert np.array_equal(out, expected_neighbours(8, 4))
    with pytest.raises(ValueError, match="must divide the grid"):
        launch_cluster(kern, "Array[i32, 2, 'C']", 6, 64, 4, out)


# -- GPU -------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("swizzle, x, y, x2, y2", CASES)
def test_gpu_tma_load_and_store(swizzle, x, y, x2, y2, rng):
    from cupric.runtime import to_device
    from cupric.runtime.tensor_map import tensor_map
    src = rng.integers(0, 2 ** 16, (48, 136), dtype=np.uint16)
    dst = rng.integers(0, 2 ** 16, (50, 120), dtype=np.uint16)
    dsrc, ddst = to_device(src), to_device(dst)
    box = box_of(swizzle)
    out = to_device(np.full(box[0] * 16, 0xBEEF, np.uint16))
    with tensor_map(dsrc, box, swizzle=swizzle) as ms, tensor_map(ddst, box,
                                                                  swizzle=swizzle) as md:
        kern = cupric.kernel(copy_kernel)
        kern[1, 128, None, 3072](ms.array, md.array, out, np.int32(x), np.int32(y),
                                 np.int32(x2), np.int32(y2), np.int32(box[0]))
        box, flat = expected_box(src, x, y, swizzle)
        assert np.array_equal(out.to_numpy(), flat)
        assert np.array_equal(ddst.to_numpy(), expected_store(dst, box, x2, y2))


@gpu
def test_gpu_mbarrier_phases():
    from cupric.runtime import to_device
    out = to_device(np.full((8, 32), -1, np.int32))
    cupric.kernel(handoff)[1, 64](out, np.int32(7))
    assert np.array_equal(out.to_numpy(), expected_handoff(7))


@gpu
@pytest.mark.parametrize("size", [2, 4])
def test_gpu_clusters(size):
    from cupric.runtime import to_device
    out = to_device(np.full((16, 7), -1, np.int32))
    launch_cluster(cupric.kernel(neighbours), "Array[i32, 2, 'C']", 16, 64, size, out)
    assert np.array_equal(out.to_numpy(), expected_neighbours(16, size))


def test_encode_tiled_passes_the_driver_its_types(monkeypatch):
    """The host encoding with a stand-in for cuTensorMapEncodeTiled that checks the
    argument types cuda.bindings wants (cuuint64_t dims and strides, cuuint32_t box and
    element strides), and the words coming back."""
    d = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings holds the types")
    import cupric.runtime.native as native
    from cupric.runtime.tensor_map import encode_tiled
    seen = {}

    class Encoded:
        opaque = [d.cuuint64_t(7 * i) for i in range(16)]

    class FakeDriver:
        def __getattr__(self, name):
            return getattr(d, name)

        def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box,
                                   element_strides, interleave, swizzle, promotion, fill):
            assert all(isinstance(x, d.cuuint64_t) for x in dims + strides)
            assert all(isinstance(x, d.cuuint32_t) for x in box + element_strides)
            seen.update(dtype=dtype, rank=rank, address=address, swizzle=swizzle,
                        dims=[int(x) for x in dims], strides=[int(x) for x in strides],
                        box=[int(x) for x in box])
            return (d.CUresult.CUDA_SUCCESS, Encoded())

    monkeypatch.setattr(native, "driver", lambda: FakeDriver())
    words = encode_tiled(0x7000, (136, 48), 272, "bf16", (64, 16), 128)
    assert words.dtype == np.uint64 and list(words) == [7 * i for i in range(16)]
    assert seen["dtype"] == d.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert seen["swizzle"] == d.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert (seen["rank"], seen["address"], seen["dims"], seen["strides"], seen["box"]) == (
        2, 0x7000, [136, 48], [272], [64, 16])
