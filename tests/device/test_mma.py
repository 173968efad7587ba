"""Tensor cores (`cupric.device.mma`, `cupric.device.cp_async`): the fragment tables
against the PTX ISA's formulas, the simulator's whole-warp semantics against NumPy for
every shape and type (loading through ldmatrix, whose layout is defined separately, so
the two tables check each other), the PTX each operation lowers to, and on the GPU the
same kernels against the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import cupric
from cupric.device import cp_async, mma, shared, syncthreads, threadIdx
from cupric.device.mma import FRAGMENTS, SHAPES, fragment_coords
from cupric.simulator import launch
from cupric.simulator._impl_mma import mma_reference
from cupric.types import f32, u16, u32



def bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, round to nearest even (finite inputs)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def test_bf16_helpers_agree_with_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is the reference")
    x = rng.standard_normal(10_000).astype(np.float32) * np.float32(1e3)
    assert np.array_equal(bf16_bits(x), x.astype(ml_dtypes.bfloat16).view(np.uint16))


# -- the tables ----------------------------------------------------------------------------

def test_tables_follow_the_ptx_isa_formulas():
    # m16n8k16 .bf16/.f16 A: row = g for a0 a1 a4 a5, g + 8 otherwise; col = 2t + (i & 1),
    # + 8 for i >= 4. Lane 5: g = 1, t = 1.
    assert fragment_coords("m16n8k16_bf16", "a", 5) == [
        (1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    # B: row = 2t + (i & 1), + 8 for i >= 2; col = g.
    assert fragment_coords("m16n8k16_f16", "b", 5) == [(2, 1), (3, 1), (10, 1), (11, 1)]
    # C/D: row g for c0 c1, g + 8 for c2 c3; col = 2t + (i & 1). Lane 31: g = 7, t = 3.
    assert fragment_coords("m16n8k16_f16", "c", 31) == [(7, 6), (7, 7), (15, 6), (15, 7)]
    # m16n8k8 .tf32 A: row g for a0 a2, g + 8 for a1 a3; col t for a0 a1, t + 4 for a2 a3.
    assert fragment_coords("m16n8k8_tf32", "a", 6) == [(1, 2), (9, 2), (1, 6), (9, 6)]
    assert fragment_coords("m16n8k8_tf32", "b", 6) == [(2, 1), (6, 1)]
    # m16n8k32 .s8 A: row g for a0..a3 and a8..a11; col 4t + (i & 3), + 16 for i >= 8.
    a = fragment_coords("m16n8k32_s8", "a", 7)  # g = 1, t = 3
    assert a[:4] == [(1, 12), (1, 13), (1, 14), (1, 15)]
    assert a[4:8] == [(9, 12), (9, 13), (9, 14), (9, 15)]
    assert a[8] == (1, 28) and a[15] == (9, 31)
    assert fragment_coords("m16n8k32_s8", "b", 7)[4:] == [(28, 1), (29, 1), (30, 1), (31, 1)]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_each_element_held_by_exactly_one_lane(shape, operand):
    m, n, k = SHAPES[shape][:3]
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[operand]
    seen = [rc for lane in range(32) for rc in fragment_coords(shape, operand, lane)]
    assert sorted(seen) == [(r, c) for r in range(rows) for c in range(cols)]


# -- kernels -------------------------------------------------------------------------------

def mma_16bit(kind):
    """One 16x8x16 tile: A (16x16, row-major bits) and B^T (8x16, n-major) staged in shared
    memory and loaded with ldmatrix, or B (16x8, k-major) with ldmatrix.trans; D = A B + C,
    then D rounded to bf16 and written back through stmatrix."""
    op = mma.m16n8k16_bf16 if kind == "bf16" else mma.m16n8k16_f16

    def kernel(a, bt, bk, c, d, d_from_trans, d16):
        lane = threadIdx.x
        sa = shared.array((16, 16), u16)
        sbt = shared.array((8, 16), u16)
        sbk = shared.array((16, 8), u16)
        sd = shared.array((16, 8), u16)
        for i in range(lane, 256, 32):
            sa[i // 16, i % 16] = a[i // 16, i % 16]
        for i in range(lane, 128, 32):
            sbt[i // 16, i % 16] = bt[i // 16, i % 16]
            sbk[i // 8, i % 8] = bk[i // 8, i % 8]
        syncthreads()
        a0, a1, a2, a3 = mma.ldmatrix(sa, (lane % 16, (lane // 16) * 8))
        b0, b1 = mma.ldmatrix(sbt, (lane % 8, ((lane // 8) % 2) * 8), count=2)
        t0, t1 = mma.ldmatrix(sbk, (lane % 16, 0), count=2, trans=True)
        g = lane // 4
        t = lane % 4
        cc = (c[g, 2 * t], c[g, 2 * t + 1], c[g + 8, 2 * t], c[g + 8, 2 * t + 1])
        d0, d1, d2, d3 = op((a0, a1, a2, a3), (b0, b1), cc)
        e0, e1, e2, e3 = op((a0, a1, a2, a3), (t0, t1), cc)
        d[g, 2 * t] = d0
        d[g, 2 * t + 1] = d1
        d[g + 8, 2 * t] = d2
        d[g + 8, 2 * t + 1] = d3
        d_from_trans[g, 2 * t] = e0
        d_from_trans[g, 2 * t + 1] = e1
        d_from_trans[g + 8, 2 * t] = e2
        d_from_trans[g + 8, 2 * t + 1] = e3
        mma.stmatrix(sd, (lane % 16, 0), (mma.pack_bf16x2(d0, d1), mma.pack_bf16x2(d2, d3)))
        syncthreads()
        for i in range(lane, 128, 32):
            d16[i // 8, i % 8] = sd[i // 8, i % 8]

    return kernel


def _bits16(values, kind):
    if kind == "bf16":
        return bf16_bits(values.astype(np.float32))
    return values.astype(np.float16).view(np.uint16)


def _values16(bits, kind):
    if kind == "bf16":
        return bf16_values(bits).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def _inputs_16bit(kind, rng):
    a = _bits16(rng.standard_normal((16, 16)), kind)
    b = _bits16(rng.standard_normal((16, 8)), kind)  # k x n
    c = rng.standard_normal((16, 8)).astype(np.float32)
    return a, b, c


def _outputs():
    return (np.full((16, 8), np.nan, np.float32), np.full((16, 8), np.nan, np.float32),
            np.full((16, 8), 0xFFFF, np.uint16))


@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_simulated_mma_16bit_matches_numpy(kind, rng):
    a, b, c = _inputs_16bit(kind, rng)
    d, d_trans, d16 = _outputs()
    launch(mma_16bit(kind), (1,), (32,),
           (a, np.ascontiguousarray(b.T), b, c, d, d_trans, d16))
    want = mma_reference(f"m16n8k16_{kind}", _values16(a, kind), _values16(b, kind), c)
    assert np.array_equal(d, want)
    assert np.array_equal(d_trans, want)
    np.testing.assert_allclose(want, _values16(a, kind) @ _values16(b, kind) + c,
                               rtol=1e-6, atol=1e-5)
    assert np.array_equal(d16, bf16_bits(want))


def host_fragments(shape, a, b, c, pack):
    """Per-lane registers of A, B, C built from the ISA formulas in the test (not the
    simulator): pack(values) -> one register."""
    regs_a, per_a = FRAGMENTS[shape]["a"][:2]
    regs_b, per_b = FRAGMENTS[shape]["b"][:2]
    fa, fb, fc = [], [], []
    for lane in range(32):
        ca = fragment_coords(shape, "a", lane)
        cb = fragment_coords(shape, "b", lane)
        cc = fragment_coords(shape, "c", lane)
        fa.append([pack([a[ca[r * per_a + e]] for e in range(per_a)]) for r in range(regs_a)])
        fb.append([pack([b[cb[r * per_b + e]] for e in range(per_b)]) for r in range(regs_b)])
        fc.append([c[rc] for rc in cc])
    return np.array(fa), np.array(fb), np.array(fc)


def mma_from_registers(shape):
    op = getattr(mma, shape)

    def kernel(fa, fb, fc, out):
        lane = threadIdx.x
        d0, d1, d2, d3 = op((fa[lane, 0], fa[lane, 1], fa[lane, 2], fa[lane, 3]),
                            (fb[lane, 0], fb[lane, 1]),
                            (fc[lane, 0], fc[lane, 1], fc[lane, 2], fc[lane, 3]))
        out[lane, 0] = d0
        out[lane, 1] = d1
        out[lane, 2] = d2
        out[lane, 3] = d3

    return kernel


def _int8_case(shape, rng):
    lo, hi = (-128, 128) if shape.endswith("s8") else (0, 256)
    a = rng.integers(lo, hi, (16, 32))
    b = rng.integers(lo, hi, (32, 8))
    c = rng.integers(-2**20, 2**20, (16, 8)).astype(np.int32)

    def pack(vals):
        return np.uint32(sum((int(v) & 0xFF) << (8 * k) for k, v in enumerate(vals)))

    return a, b, c, pack, np.int32


def _tf32_case(shape, rng):
    # Values with at most 11 significant bits: tf32 holds them exactly.
    a = (rng.integers(-1024, 1024, (16, 8)) / 64.0).astype(np.float32)
    b = (rng.integers(-1024, 1024, (8, 8)) / 32.0).astype(np.float32)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    return a, b, c, (lambda vals: np.float32(vals[0])), np.float32


@pytest.mark.parametrize("shape", ["m16n8k8_tf32", "m16n8k32_s8", "m16n8k32_u8"])
def test_simulated_mma_from_registers_matches_numpy(shape, rng):
    a, b, c, pack, dtype = (_tf32_case if "tf32" in shape else _int8_case)(shape, rng)
    fa, fb, fc = host_fragments(shape, a, b, c, pack)
    out = np.full((32, 4), -1, dtype)
    launch(mma_from_registers(shape), (1,), (32,), (fa, fb, fc.astype(dtype), out))
    want = mma_reference(shape, a, b, c)
    got = np.zeros_like(want)
    for lane in range(32):
        for i, rc in enumerate(fragment_coords(shape, "c", lane)):
            got[rc] = out[lane, i]
    assert np.array_equal(got, want)
    if dtype == np.int32:
        assert np.array_equal(want.astype(np.int64), a @ b + c)  # no wrap at these sizes


def test_tf32_operands_are_truncated_and_to_tf32_rounds():
    from cupric.simulator._impl_mma import _to_tf32
    x = np.float32(1.0) + np.float32(2.0 ** -11)  # the first bit below tf32's mantissa
    assert _to_tf32(None, x) == np.float32(1.0 + 2.0 ** -10)  # ties away from zero
    assert _to_tf32(None, np.float32(1.0 + 2.0 ** -12)) == np.float32(1.0)
    assert _to_tf32(None, -x) == -np.float32(1.0 + 2.0 ** -10)


def cp_async_kernel(src, out, n):
    """Two groups of 16-byte copies (the second zero-filling past n), waited one by one:
    after wait(1) only the first group has landed."""
    lane = threadIdx.x
    tile = shared.array(64, f32)
    early = shared.array(64, f32)
    cp_async.copy(tile, lane * 4 % 32, src, lane * 4 % 32, 16)
    cp_async.commit()
    off = 32 + lane * 4 % 32
    cp_async.copy(tile, off, src, off if off < n else 0, 16, 16 if off < n else 0)
    cp_async.commit()
    cp_async.wait(1)
    early[lane] = tile[lane]
    cp_async.wait(0)
    syncthreads()
    out[0, lane] = early[lane]
    out[1, lane] = tile[lane]
    out[1, lane + 32] = tile[lane + 32]


def test_simulated_cp_async_groups_and_zero_fill(rng):
    src = rng.standard_normal(64).astype(np.float32)
    out = np.full((2, 64), np.nan, np.float32)
    launch(cp_async_kernel, (1,), (32,), (src, out, 48))
    assert np.array_equal(out[0, :32], src[:32])      # the first group, waited for
    assert np.array_equal(out[1, :48], src[:48])
    assert np.array_equal(out[1, 48:], np.zeros(16, np.float32))  # src_size 0: zeros


def test_mma_needs_the_whole_warp(rng):
    from cupric.simulator.errors import SimulatorError
    a, b, c = _inputs_16bit("bf16", rng)
    d, d_trans, d16 = _outputs()
    with pytest.raises(SimulatorError, match="32 lanes"):
        launch(mma_16bit("bf16"), (1,), (16,),
               (a, np.ascontiguousarray(b.T), b, c, d, d_trans, d16))


# -- PTX -------------------------------------------------------------------------------------

A16 = "Array[u16, 2, 'C']"
F32_2 = "Array[f32, 2, 'C']"


@pytest.fixture(scope="module")
def nvvm():
    pytest.importorskip("cuda.bindings.nvvm", reason="libNVVM bindings are not installed")


@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_ptx_of_16bit_mma_ldmatrix_stmatrix(kind, nvvm):
    ptx = cupric.kernel(mma_16bit(kind), arch="sm_90").inspect_ptx(
        f"{A16}, {A16}, {A16}, {F32_2}, {F32_2}, {F32_2}, {A16}")
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
    assert "stmatrix.sync.aligned.m8n8.x2.shared.b16" in ptx
    assert "cvt.rn.bf16x2.f32" in ptx


@pytest.mark.parametrize("shape, sig, instruction", [
    ("m16n8k8_tf32", "Array[f32, 2, 'C'], Array[f32, 2, 'C'], Array[f32, 2, 'C'], "
     "Array[f32, 2, 'C']", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
    ("m16n8k32_s8", "Array[u32, 2, 'C'], Array[u32, 2, 'C'], Array[i32, 2, 'C'], "
     "Array[i32, 2, 'C']", "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
    ("m16n8k32_u8", "Array[u32, 2, 'C'], Array[u32, 2, 'C'], Array[i32, 2, 'C'], "
     "Array[i32, 2, 'C']", "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32"),
])
def test_ptx_of_tf32_and_int8_mma(shape, sig, instruction, nvvm):
    ptx = cupric.kernel(mma_from_registers(shape)).inspect_ptx(sig)
    assert instruction in ptx


def test_ptx_of_cp_async(nvvm):
    ptx = cupric.kernel(cp_async_kernel).inspect_ptx("Array[f32, 1, 'C'], Array[f32, 2, 'C'], i64")
    assert "cp.async.cg.shared.global" in ptx
    assert "cp.async.commit_group" in ptx
    assert "cp.async.wait_group 1" in ptx and "cp.async.wait_group 0" in ptx


def test_type_errors_are_clear():
    from cupric.compiler.errors import CompileError

    def bad(a, out):
        lane = threadIdx.x
        out[lane] = mma.ldmatrix(a, lane)[0]

    with pytest.raises(CompileError, match="shared-memory array"):
        cupric.kernel(bad).inspect_ir("Array[u16, 1, 'C'], Array[u32, 1, 'C']")

    def wrong_count(fa, out):
        d = mma.m16n8k16_bf16((fa[0], fa[1]), (fa[2], fa[3]), (f32(0), f32(0), f32(0), f32(0)))
        out[0] = d[0]

    with pytest.raises(CompileError, match="tuple of 4"):
        cupric.kernel(wrong_count).inspect_ir("Array[u32, 1, 'C'], Array[f32, 1, 'C']")


# -- GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bf16", "f16"])
def test_gpu_mma_16bit(kind, rng):
    from cupric.runtime.memory import to_device
    a, b, c = _inputs_16bit(kind, rng)
    outs = [to_device(o) for o in _outputs()]
    cupric.kernel(mma_16bit(kind))[1, 32](
        to_device(a), to_device(np.ascontiguousarray(b.T)), to_device(b), to_device(c), *outs)
    d, d_trans, d16 = (o.to_numpy() for o in outs)
    exact = _values16(a, kind) @ _values16(b, kind) + c
    np.testing.assert_allclose(d, exact, rtol=1e-5, atol=1e-5)
    assert np.array_equal(d, d_trans)
    np.testing.assert_allclose(_values16(d16, "bf16"), exact, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["m16n8k8_tf32", "m16n8k32_s8", "m16n8k32_u8"])
def test_gpu_mma_from_registers(shape, rng):
    from cupric.runtime.memory import to_device
    a, b, c, pack, dtype = (_tf32_case if "tf32" in shape else _int8_case)(shape, rng)
    fa, fb, fc = host_fragments(shape, a, b, c, pack)
    out = to_device(np.full((32, 4), -1, dtype))
    cupric.kernel(mma_from_registers(shape))[1, 32](to_device(fa), to_device(fb),
                                                   to_device(fc.astype(dtype)), out)
    got = out.to_numpy()
    want = mma_reference(shape, a, b, c)
    flat = np.array([[want[rc] for rc in fragment_coords(shape, "c", lane)]
                     for lane in range(32)])
    if dtype == np.int32:
        assert np.array_equal(got, flat)
    else:
        np.testing.assert_allclose(got, flat, rtol=1e-6, atol=1e-5)


@pytest.mark.gpu
def test_gpu_cp_async(rng):
    from cupric.runtime.memory import to_device
    src = rng.standard_normal(64).astype(np.float32)
    out = to_device(np.full((2, 64), np.nan, np.float32))
    cupric.kernel(cp_async_kernel)[1, 32](to_device(src), out, 48)
    got = out.to_numpy()
    assert np.array_equal(got[0, :32], src[:32])
    assert np.array_equal(got[1, :48], src[:48])
    assert np.array_equal(got[1, 48:], np.zeros(16, np.float32))
