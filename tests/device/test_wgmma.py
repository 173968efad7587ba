"""The sm_90 device API (`cupric.device.wgmma`, `mbarrier`, `tma`, `cluster`): the layout
tables against the PTX ISA's formulas, the PTX each operation lowers to, the error on
older targets, the simulator's semantics against NumPy (wgmma on every swizzle mode and
major-ness, TMA copies with swizzles and edges, mbarrier phases, clusters), and on the
GPU the same kernels against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.compiler.errors import CompileError
from cupric.device import (cluster, mbarrier, shared, syncthreads, threadIdx, tma, unroll,
                           wgmma)
from cupric.device.wgmma import (N_SIZES, accumulator_coords, descriptor_bits,
                                 operand_offset)
from cupric.simulator import launch
from cupric.simulator._impl_hopper import swizzled
from cupric.types import f32, u16, u32, u64

gpu = pytest.mark.gpu


def bf16_bits(x) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


# -- the tables ----------------------------------------------------------------------------

def test_accumulator_layout_follows_the_ptx_isa():
    # Thread 37: warp 1 (rows 16..31), lane 5: g = 1, t = 1.
    assert accumulator_coords(16, 37) == [(17, 2), (17, 3), (25, 2), (25, 3),
                                          (17, 10), (17, 11), (25, 10), (25, 11)]
    # Thread 127: warp 3 (rows 48..63), lane 31: g = 7, t = 3.
    assert accumulator_coords(8, 127) == [(55, 6), (55, 7), (63, 6), (63, 7)]


@pytest.mark.parametrize("n", N_SIZES)
def test_each_accumulator_element_held_once(n):
    seen = [rc for t in range(128) for rc in accumulator_coords(n, t)]
    assert sorted(seen) == [(r, c) for r in range(64) for c in range(n)]


def test_descriptor_fields():
    d = descriptor_bits(0x12340, 2048, 1024, 128)
    assert d & 0x3FFF == 0x1234
    assert (d >> 16) & 0x3FFF == 2048 >> 4 and (d >> 32) & 0x3FFF == 1024 >> 4
    assert d >> 62 == 1
    assert descriptor_bits(0x400, 16, 256, 0) >> 62 == 0
    assert descriptor_bits(0x400, 16, 256, 64) >> 62 == 2
    assert descriptor_bits(0x400, 16, 256, 32) >> 62 == 3
    # The address wraps at the 256 KiB shared window (18 bits).
    assert descriptor_bits(0x40010, 16, 16, 0) & 0x3FFF == 1


def layout(rows: int, k_major: bool, swizzle: int) -> tuple[int, int]:
    """Dense (leading, stride) byte offsets for a rows x 16 operand of 2-byte elements."""
    if k_major:
        return (128, 256) if swizzle == 0 else (16, 8 * swizzle)
    if swizzle == 0:
        return (rows // 8) * 128, 128
    return 16 * swizzle, 8 * swizzle


MODES = [(kmaj, sw) for kmaj in (True, False) for sw in (0, 32, 64, 128)]


@pytest.mark.parametrize("k_major, swizzle", MODES)
def test_canonical_layouts_are_one_to_one(k_major, swizzle):
    for rows in (64, 256):
        lead, stride = layout(rows, k_major, swizzle)
        r, k = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
        off = operand_offset(r, k, k_major=k_major, swizzle=swizzle, leading=lead,
                             stride=stride)
        assert len(np.unique(off)) == rows * 16 and off.min() == 0
        assert off.max() < rows * 16 * 2 * (2 if swizzle > 32 else 1) * 4
        assert np.all(off % 2 == 0)
    # Swizzling permutes 16-byte chunks within 8 x swizzle-byte atoms.
    a = np.arange(0, 4096, 2)
    assert sorted(swizzled(a, 128)) == list(a)
    assert swizzled(128 + 16, 128) == 128 + 0 and swizzled(7 * 128, 128) == 7 * 128 + 112


# -- operand images and the wgmma test kernel ----------------------------------------------

B_AT = 16384  # byte offset of B in the shared image (A: 64 rows, at most 8 KiB)


def image_of(a, b, a_kmajor, b_kmajor, swizzle):
    """Shared-memory bytes (as u32 words) holding A (64 x 16) and B^T (n x 16) in the
    canonical layouts, and their (leading, stride) offsets."""
    n = b.shape[1]
    lay_a = layout(64, a_kmajor, swizzle)
    lay_b = layout(n, b_kmajor, swizzle)
    placed = []
    for mat, base, kmaj, (lead, stride) in ((a, 0, a_kmajor, lay_a),
                                            (b.T, B_AT, b_kmajor, lay_b)):
        r, k = np.meshgrid(np.arange(mat.shape[0]), np.arange(16), indexing="ij")
        off = operand_offset(r, k, k_major=kmaj, swizzle=swizzle, leading=lead,
                             stride=stride)
        placed.append((swizzled(base + off, swizzle) // 2, mat))
    # Only as many bytes as the layouts reach (below 48 KiB of shared memory).
    words = np.zeros(-(-(int(placed[1][0].max()) + 1) // 512) * 512, np.uint16)
    for where, mat in placed:
        words[where] = mat
    return words.view(np.uint32), lay_a, lay_b


_KERNELS: dict = {}


@cupric.device_function
def stage_image(sm, image, pad):
    """The block's 128 threads copy the operand image into shared memory from word `pad`
    on, and make it visible to the tensor cores (ordinary stores, then the async proxy)."""
    i = threadIdx.x
    while i < image.shape[0]:
        sm[pad + i] = image[i]
        i += 128
    tma.fence_proxy_async()
    syncthreads()


def wgmma_kernel(n, kind, swizzle, a_kmajor, b_kmajor, lay_a, lay_b):
    key = (n, kind, swizzle, a_kmajor, b_kmajor, lay_a, lay_b)
    if key in _KERNELS:
        return _KERNELS[key]
    op = getattr(wgmma, f"m64n{n}k16_{kind}")
    ta, tb = int(not a_kmajor), int(not b_kmajor)
    a_lead, a_stride = lay_a
    b_lead, b_stride = lay_b

    def kern(image, out, scale):
        sm = shared.dynamic(u32)
        pad = ((1024 - (tma.shared_address(sm, 0) & 1023)) & 1023) >> 2
        tid = threadIdx.x
        stage_image(sm, image, pad)
        da = wgmma.descriptor(sm, pad, swizzle=swizzle, leading=a_lead, stride=a_stride)
        db = wgmma.descriptor(sm, pad + B_AT // 4, swizzle=swizzle, leading=b_lead,
                              stride=b_stride)
        acc = wgmma.accumulator(n)
        wgmma.fence()
        # D = A B, then D = A B + scale D: a run-time scale_d of 0 drops the first product.
        acc = op(acc, da, db, trans_a=ta, trans_b=tb)
        acc = op(acc, da, db, scale, trans_a=ta, trans_b=tb)
        wgmma.commit()
        acc = wgmma.wait(0, acc)
        for j in unroll(n // 8):   # unroll takes at most 64
            for q in unroll(4):
                out[tid, 4 * j + q] = acc[4 * j + q]

    _KERNELS[key] = kern
    return kern


def run_wgmma(n, kind, swizzle, a_kmajor, b_kmajor, rng, on_gpu=False, scale=1):
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((16, n)).astype(np.float32)
    if kind == "bf16":
        abits, bbits = bf16_bits(a), bf16_bits(b)
        av, bv = bf16_values(abits), bf16_values(bbits)
    else:
        abits, bbits = a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(
            np.uint16)
        av, bv = abits.view(np.float16).astype(np.float32), bbits.view(
            np.float16).astype(np.float32)
    image, lay_a, lay_b = image_of(abits, bbits, a_kmajor, b_kmajor, swizzle)
    kern = wgmma_kernel(n, kind, swizzle, a_kmajor, b_kmajor, lay_a, lay_b)
    out = np.full((128, n // 2), np.nan, np.float32)
    shared_bytes = image.nbytes + 1024
    if on_gpu:
        from cupric.runtime import to_device
        dev = [to_device(x) for x in (image, out)]
        k = cupric.kernel(kern, arch="sm_90a")
        k[1, 128, None, shared_bytes](dev[0], dev[1], np.int32(scale))
        out = dev[1].to_numpy()
    else:
        launch(kern, (1, 1, 1), (128, 1, 1), (image, out, np.int32(scale)),
               shared_bytes=shared_bytes)
    exact = (1 + scale) * (av.astype(np.float64) @ bv.astype(np.float64))
    want = np.empty_like(out)
    for t in range(128):
        for i, (r, col) in enumerate(accumulator_coords(n, t)):
            want[t, i] = exact[r, col]
    return out, want


def a_fragments(abits: np.ndarray) -> np.ndarray:
    """(128, 4) u32: thread t's A registers, warp t // 32 holding rows 16w..16w+15 as the
    A fragment of mma.m16n8k16 (two 16-bit values a word, the first in the low half)."""
    from cupric.device.mma import fragment_coords
    out = np.zeros((128, 4), np.uint32)
    for t in range(128):
        w, lane = t >> 5, t & 31
        vals = [int(abits[16 * w + r, c]) for r, c in fragment_coords("m16n8k16_bf16", "a",
                                                                        lane)]
        out[t] = [vals[2 * j] | vals[2 * j + 1] << 16 for j in range(4)]
    return out


def registers_kernel(n, kind, swizzle, b_kmajor, lay_b):
    op = getattr(wgmma, f"m64n{n}k16_{kind}")
    tb = int(not b_kmajor)
    b_lead, b_stride = lay_b

    def kern(image, frags, out):
        sm = shared.dynamic(u32)
        pad = ((1024 - (tma.shared_address(sm, 0) & 1023)) & 1023) >> 2
        tid = threadIdx.x
        stage_image(sm, image, pad)
        db = wgmma.descriptor(sm, pad + B_AT // 4, swizzle=swizzle, leading=b_lead,
                              stride=b_stride)
        a = (frags[tid, 0], frags[tid, 1], frags[tid, 2], frags[tid, 3])
        acc = wgmma.accumulator(n)
        wgmma.fence()
        acc = op(acc, a, db, trans_b=tb)
        wgmma.commit()
        acc = wgmma.wait(0, acc)
        for j in unroll(n // 8):
            for q in unroll(4):
                out[tid, 4 * j + q] = acc[4 * j + q]

    return kern


def run_registers(n, kind, swizzle, b_kmajor, rng, on_gpu=False):
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((16, n)).astype(np.float32)
    if kind == "bf16":
        abits, bbits = bf16_bits(a), bf16_bits(b)
        av, bv = bf16_values(abits), bf16_values(bbits)
    else:
        abits = a.astype(np.float16).view(np.uint16)
        bbits = b.astype(np.float16).view(np.uint16)
        av, bv = (x.view(np.float16).astype(np.float32) for x in (abits, bbits))
    image, _, lay_b = image_of(abits, bbits, True, b_kmajor, swizzle)
    kern = registers_kernel(n, kind, swizzle, b_kmajor, lay_b)
    frags = a_fragments(abits)
    out = np.full((128, n // 2), np.nan, np.float32)
    if on_gpu:
        from cupric.runtime import to_device
        dev = [to_device(x) for x in (image, frags, out)]
        cupric.kernel(kern, arch="sm_90a")[1, 128, None, image.nbytes + 1024](*dev)
        out = dev[2].to_numpy()
    else:
        launch(kern, (1, 1, 1), (128, 1, 1), (image, frags, out),
               shared_bytes=image.nbytes + 1024)
    exact = av.astype(np.float64) @ bv.astype(np.float64)
    want = np.array([[exact[rc] for rc in accumulator_coords(n, t)] for t in range(128)])
    return out, want


@pytest.mark.parametrize("n, kind, swizzle, b_kmajor", [
    (64, "bf16", 128, True), (32, "f16", 64, False), (256, "bf16", 32, True),
    (8, "bf16", 0, False)])
def test_simulator_wgmma_a_in_registers(n, kind, swizzle, b_kmajor, rng):
    out, want = run_registers(n, kind, swizzle, b_kmajor, rng)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@gpu
@pytest.mark.parametrize("n, kind, swizzle, b_kmajor", [
    (64, "bf16", 128, True), (32, "f16", 64, False), (96, "bf16", 32, True),
    (8, "bf16", 0, False)])
def test_gpu_wgmma_a_in_registers(n, kind, swizzle, b_kmajor, rng):
    out, want = run_registers(n, kind, swizzle, b_kmajor, rng, on_gpu=True)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_a_in_registers_ptx():
    kern = registers_kernel(64, "bf16", 128, True, (16, 1024))
    ptx = cupric.kernel(kern).inspect_ptx(
        "Array[u32, 1, 'C'], Array[u32, 2, 'C'], Array[f32, 2, 'C']", arch="sm_90a")
    line = next(x for x in ptx.splitlines() if "wgmma.mma_async" in x)
    # d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b
    assert line.count("{") == 3 and line.rstrip(" ;}").endswith("1, 1, 0")


@pytest.mark.parametrize("a_kmajor", [True, False])
@pytest.mark.parametrize("k_major, swizzle", MODES)
def test_simulator_wgmma_every_layout(a_kmajor, k_major, swizzle, rng):
    out, want = run_wgmma(64, "bf16", swizzle, a_kmajor, k_major, rng)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", N_SIZES)
@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_simulator_wgmma_every_shape(n, kind, rng):
    out, want = run_wgmma(n, kind, 128, True, False, rng)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_simulator_wgmma_scale_d_zero_drops_the_accumulator(rng):
    out, want = run_wgmma(32, "bf16", 32, True, True, rng, scale=0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@gpu
@pytest.mark.parametrize("a_kmajor", [True, False])
@pytest.mark.parametrize("k_major, swizzle", MODES)
def test_gpu_wgmma_every_layout(a_kmajor, k_major, swizzle, rng):
    out, want = run_wgmma(64, "bf16", swizzle, a_kmajor, k_major, rng, on_gpu=True)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@gpu
@pytest.mark.parametrize("n", [8, 96, 256])
@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_gpu_wgmma_shapes(n, kind, rng):
    out, want = run_wgmma(n, kind, 64, True, True, rng, on_gpu=True, scale=(n // 8) % 2)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


# -- PTX and targets -----------------------------------------------------------------------

def everything(out, words, tmap):
    """One of each sm_90 operation, for the PTX checks."""
    sm = shared.dynamic(u16)
    bars = shared.array(2, u64)
    tid = threadIdx.x
    if tid == 0:
        mbarrier.init(bars, 0, 1)
        mbarrier.init(bars, 1, 1)
        mbarrier.fence_init()
        tma.acquire(tmap)
        tma.prefetch(tmap)
        mbarrier.arrive_expect_tx(bars, 0, 2048)
        tma.load_2d(sm, 0, tmap, 0, 0, bars, 0)
    syncthreads()
    mbarrier.wait(bars, 0, 0)
    done = mbarrier.try_wait(bars, 1, 1)
    wgmma.lower_registers(40)
    wgmma.raise_registers(232)
    acc = wgmma.accumulator(16)
    wgmma.fence()
    d = wgmma.descriptor(sm, 0, swizzle=64, leading=16, stride=512)
    acc = wgmma.m64n16k16_f16(acc, d, d + 2)
    wgmma.commit()
    acc = wgmma.wait(0, acc)
    tma.fence_proxy_async()
    if tid == 0:
        tma.store_2d(tmap, 0, 0, sm, 0)
        tma.commit()
        tma.wait(0)
        mbarrier.arrive(bars, 1)
        mbarrier.arrive_cluster(bars, 1, 0)
    remote = cluster.map_shared(sm, 0, cluster.rank())
    cluster.store_u32(remote, cluster.load_u32(remote) + cluster.size())
    cluster.sync()
    out[tid] = acc[0] + acc[7] + cluster.ctaid()[0] + cluster.nctaid()[1] + cluster.id()[2] + \
        cluster.count()[0] + tma.shared_address(sm, 0) + (1 if done else 0)
    words[tid] = u32(d >> 32)


SIGNATURE = "Array[f32, 1, 'C'], Array[u32, 1, 'C'], Array[u64, 1, 'C']"


@pytest.fixture(scope="module")
def everything_ptx():
    return cupric.kernel(everything).inspect_ptx(SIGNATURE, arch="sm_90a")


@pytest.mark.parametrize("text", [
    "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16", "wgmma.fence.sync.aligned",
    "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
    "setmaxnreg.inc.sync.aligned.u32 232", "setmaxnreg.dec.sync.aligned.u32 40",
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
    "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
    "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0", "prefetch.tensormap",
    "fence.proxy.tensormap::generic.acquire.sys",
    "mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster",
    "mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64",
    "mbarrier.arrive.shared::cta.b64", "mbarrier.arrive.release.cluster.shared::cluster.b64",
    "fence.proxy.async.shared::cta", "%cluster_ctarank", "%cluster_nctarank",
    "%cluster_ctaid.x", "%cluster_nctaid.y", "%clusterid.z", "%nclusterid.x",
    "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned",
    "mapa.shared::cluster.u32", "ld.shared::cluster.u32", "st.shared::cluster.u32"])
def test_ptx_holds_each_instruction(everything_ptx, text):
    assert text in everything_ptx


def test_ptx_assembles_for_sm_90a():
    art = cupric.kernel(everything).compile(SIGNATURE, arch="sm_90a")
    if art.cubin is None:
        pytest.skip(f"no linker installed: {art.log}")
    assert art.arch == "sm_90a" and art.resource_usage["everything"].stack_bytes == 0


def test_sm_90_becomes_sm_90a_for_wgmma():
    art = cupric.kernel(everything).compile(SIGNATURE, arch="sm_90")
    assert art.arch == "sm_90a" and ".target sm_90a" in art.ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_older_targets_are_a_compile_error_naming_them(arch):
    with pytest.raises(CompileError, match=f"needs sm_90a.*target is {arch}"):
        cupric.kernel(everything).inspect_ptx(SIGNATURE, arch=arch)


def only_clusters(out):
    out[threadIdx.x] = cluster.rank()


def test_sm_90_instructions_without_wgmma_stay_sm_90():
    k = cupric.kernel(only_clusters)
    assert ".target sm_90\n" in k.inspect_ptx("Array[i32, 1, 'C']", arch="sm_90")
    with pytest.raises(CompileError, match="needs sm_90 .*target is sm_86"):
        k.inspect_ptx("Array[i32, 1, 'C']", arch="sm_86")


def bad_acc(out):
    wgmma.m64n64k16_bf16((0.0, 1.0, 2.0), u64(0), u64(0))


def bad_wait(out):
    wgmma.wait(9)


def bad_registers(out):
    wgmma.raise_registers(20)


def bad_barrier(out):
    mbarrier.init(shared.array(2, u32), 0, 1)


def bad_descriptor(out):
    out[0] = f32(wgmma.descriptor(out, 0))


@pytest.mark.parametrize("bad, message", [
    (bad_acc, "tuple of 32 f32"), (bad_wait, "constant in"),
    (bad_registers, "constant in"), (bad_barrier, "8-byte elements"),
    (bad_descriptor, "shared-memory array")])
def test_bad_calls_are_type_errors(bad, message):
    with pytest.raises(CompileError, match=message):
        cupric.kernel(bad).inspect_ptx("Array[f32, 1, 'C']", arch="sm_90a")
