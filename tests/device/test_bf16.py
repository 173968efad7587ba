"""bf16 as a scalar kernel type (`cupric.types.bf16`): arrays of it (ml_dtypes' bfloat16 on
the host, PyTorch's bfloat16 on the GPU), arithmetic, fma, comparisons, min/max, negation,
conversions from f32, f64 and integers rounded once, atomics. On the simulator bit for bit
against ml_dtypes (which computes in f32 and rounds to nearest even, the same numbers as
correctly rounded bfloat16 arithmetic) and against exact rational rounding where ml_dtypes
rounds twice (from float64); the PTX holds the native instructions of each target; on the
GPU the same bits as the simulator."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import cupric
from cupric.device import atomic, grid, half
from cupric.device import math as dmath
from cupric.types import bf16, bf16_round_bits, f16, f32, f64, i16, i32, i64, u8

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is the bfloat16 reference")
BF16 = ml_dtypes.bfloat16


def bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def same(got, want) -> bool:
    """Bit for bit, except that any NaN matches any NaN (the GPU's NaN results are the
    canonical 0x7FFF, ml_dtypes' 0x7FC0)."""
    got, want = np.asarray(got), np.asarray(want)
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    return bool(np.all(nan | (bits(got) == bits(want))))


def edge_bits() -> np.ndarray:
    """+-0, +-inf, NaNs, the smallest and largest subnormals, the smallest normal, the
    largest finite, 1 and its neighbours, and values whose sums and products tie."""
    e = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0001, 0x8001, 0x007F, 0x807F,
         0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x3F80, 0x3F81, 0x3F7F, 0xBF80, 0x3B80, 0x3C00,
         0x0002, 0x00FF, 0x4000, 0x4040, 0x7F00, 0x3F00]
    return np.array(e, np.uint16)


def operands(rng, n: int):
    """Random bit patterns (every class of value, NaNs included), normal values, and the
    edge values against each other."""
    e = edge_bits()
    ea, eb = np.meshgrid(e, e)
    a = np.concatenate([rng.integers(0, 1 << 16, n), (rng.standard_normal(n) * 4).astype(
        BF16).view(np.uint16), ea.ravel()]).astype(np.uint16)
    b = np.concatenate([rng.integers(0, 1 << 16, n), (rng.standard_normal(n) * 4).astype(
        BF16).view(np.uint16), eb.ravel()]).astype(np.uint16)
    c = rng.permutation(a)
    return a.view(BF16), b.view(BF16), c.view(BF16)


def exact_fma(a, b, c) -> np.ndarray:
    """a*b + c of bf16 arrays, rounded once (rationals; signed zeros and specials from
    float64, which is exact for them)."""
    from cupric.simulator._impl_half import BF16 as FMT
    from cupric.simulator._impl_half import _fma_bits
    out = [_fma_bits(int(x), int(y), int(z), FMT) for x, y, z in zip(bits(a), bits(b), bits(c))]
    return np.array(out, np.uint16).view(BF16)


def wide_sources(rng, n: int):
    """f32 with ties at bfloat16's last place, f64 just off a tie (which rounding twice
    gets wrong), and 64-bit integers past f32's 24 bits."""
    f = np.concatenate([rng.standard_normal(n).astype(np.float32),
                        ((rng.integers(0, 1 << 15, n) << 16) | 0x8000).astype(np.uint32).view(
                            np.float32),
                        np.array([np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-40], np.float32)])
    ties = (1.0 + (2 * rng.integers(0, 128, n) + 1) * 2.0 ** -8) * 2.0 ** rng.integers(-20, 20, n)
    d = np.concatenate([rng.standard_normal(n) * 1e3, ties + ties * 2.0 ** -40,
                        ties - ties * 2.0 ** -40, [1e300, -1e300, 3.3961e38, np.nan]])
    k = np.concatenate([rng.integers(-2**62, 2**62, n), (rng.integers(1, 1 << 7, n) * 2 + 1)
                        << rng.integers(8, 50, n), [2**63 - 1, -2**63, 0, 255, -257]])
    return f, d, k.astype(np.int64)


def exact_bits(values, mode="rn") -> np.ndarray:
    """Correct rounding by rationals (the simulator's `round_bits`), from f64 or ints."""
    from cupric.simulator._impl_half import BF16 as FMT
    from cupric.simulator._impl_half import round_bits
    out = []
    for v in values:
        if isinstance(v, (int, np.integer)):
            out.append(round_bits(Fraction(int(v)), FMT, mode) if v else 0)
        elif v != v:
            out.append(0x7FC0)
        else:
            x = float(v)
            out.append(round_bits(x if x in (0.0, np.inf, -np.inf) else Fraction(x), FMT, mode))
    return np.array(out, np.uint16).view(BF16)


# -- the kernels ------------------------------------------------------------------------------

def ops(a, b, c, out, cmp):
    i = grid(1)
    if i < a.shape[0]:
        x = a[i]
        y = b[i]
        out[0, i] = x + y
        out[1, i] = x - y
        out[2, i] = x * y
        out[3, i] = x / y
        out[4, i] = half.fma(x, y, c[i])
        out[5, i] = -x
        out[6, i] = abs(x)
        out[7, i] = min(x, y)
        out[8, i] = max(x, y)
        out[9, i] = x * bf16(0.1) + y   # the constant rounded once, two roundings after
        out[10, i] = dmath.sqrt(x)      # device math in f32, rounded to nearest even
        out[11, i] = x + 1              # a Python number takes the bf16 side
        cmp[0, i] = x < y
        cmp[1, i] = x == y
        cmp[2, i] = x >= y


def conversions(f, d, k, out, back):
    i = grid(1)
    if i < f.shape[0]:
        out[0, i] = bf16(f[i])
        out[1, i] = bf16(d[i])
        out[2, i] = bf16(k[i])
        x = out[0, i]
        back[0, i] = f64(x)
        back[1, i] = f32(x) * f32(3.0)  # f32 arithmetic on the exact value
        back[2, i] = f64(i32(x)) if abs(x) < 1e9 else f64(-1)
        back[3, i] = f64(f16(x))


def directed(d, k, out):
    i = grid(1)
    if i < d.shape[0]:
        out[0, i] = bf16(half.to_bf16(d[i], rounding="rz"))
        out[1, i] = bf16(half.to_bf16(d[i], rounding="rd"))
        out[2, i] = bf16(half.to_bf16(d[i], rounding="ru"))
        out[3, i] = bf16(half.to_bf16(k[i], rounding="ru"))


def accumulate(vals, total):
    i = grid(1)
    if i < vals.shape[0]:
        atomic.add(total, i % total.shape[0], vals[i])


def run(fn, n, *args):
    """The kernel's typed twin on the simulator: compiled code's semantics (a Python
    float meeting a bf16 value is rounded to bf16 first, as the compiler does)."""
    cupric.kernel(fn).simulate[(n + 127) // 128, 128](*args)


def reference_ops(a, b, c):
    af, bf = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(all="ignore"):
        want = [a + b, a - b, a * b, a / b, exact_fma(a, b, c), -a, np.abs(a),
                np.where(bf < af, b, a), np.where(bf > af, b, a),
                (a * BF16(0.1)) + b, np.sqrt(af).astype(BF16), a + BF16(1)]
    return want, [af < bf, af == bf, af >= bf]


# -- CPU lane ---------------------------------------------------------------------------------

def test_cast_rounds_once_like_ml_dtypes_from_f32_and_exactly_from_f64(rng):
    f, d, k = wide_sources(rng, 2000)
    assert same(np.array([bf16(x) for x in f]), f.astype(BF16))
    assert same(np.array([bf16(x) for x in d]), exact_bits(d))
    assert same(np.array([bf16(int(x)) for x in k]), exact_bits(k))
    # ml_dtypes rounds float64 through float32: off by one where that makes a tie
    x = 1.0 + 2.0 ** -8 + 2.0 ** -40
    assert float(np.float64(x).astype(BF16)) == 1.0 and float(bf16(x)) == 1.0 + 2.0 ** -7


@pytest.mark.parametrize("mode", ["rz", "rd", "ru"])
def test_directed_rounding_of_wide_sources(mode, rng):
    _, d, k = wide_sources(rng, 500)
    got = np.array([bf16_round_bits(x, mode) for x in d[:-1]], np.uint16)
    assert np.array_equal(got, bits(exact_bits(d[:-1], mode)))
    got = np.array([bf16_round_bits(int(x), mode) for x in k], np.uint16)
    assert np.array_equal(got, bits(exact_bits(k, mode)))


def test_simulator_arithmetic_bit_for_bit(rng):
    a, b, c = operands(rng, 600)
    n = a.size
    out = np.zeros((12, n), BF16)
    cmp = np.zeros((3, n), bool)
    run(ops, n, a, b, c, out, cmp)
    want, want_cmp = reference_ops(a, b, c)
    for row, w in enumerate(want):
        assert same(out[row], w), row
    for row, w in enumerate(want_cmp):
        assert np.array_equal(cmp[row], w), row


def test_simulator_conversions(rng):
    f, d, k = wide_sources(rng, 400)
    n = min(f.size, d.size, k.size)
    f, d, k = f[:n], d[:n], k[:n]
    out = np.zeros((3, n), BF16)
    back = np.zeros((4, n), np.float64)
    run(conversions, n, f, d, k, out, back)
    assert same(out[0], f.astype(BF16))
    assert same(out[1], exact_bits(d))
    assert same(out[2], exact_bits(k))
    x = out[0].astype(np.float64)
    assert np.array_equal(back[0], x, equal_nan=True)
    with np.errstate(all="ignore"):
        assert np.array_equal(back[1], (x.astype(np.float32) * np.float32(3)).astype(
            np.float64), equal_nan=True)
        assert np.array_equal(back[3], x.astype(np.float16).astype(np.float64), equal_nan=True)
    assert np.array_equal(back[2], np.where(np.abs(x) < float(bf16(1e9)), np.trunc(x), -1))


def test_directed_conversions_from_f64_and_i64_round_once(rng, nvvm):
    _, d, k = wide_sources(rng, 300)
    n = min(d.size, k.size) - 1  # no NaN
    d, k = d[:n], k[:n]
    out = np.zeros((4, n), BF16)
    run(directed, n, d, k, out)
    for row, mode in enumerate(("rz", "rd", "ru")):
        assert same(out[row], exact_bits(d, mode)), mode
    assert same(out[3], exact_bits(k, "ru"))
    ptx = cupric.kernel(directed).inspect_ptx(
        "Array[f64, 1, 'C'], Array[i64, 1, 'C'], Array[bf16, 2, 'C']", arch="sm_90")
    assert "cvt.rz.f32.f64" in ptx and "cvt.rz.f32.s64" in ptx


def test_simulator_atomic_add():
    vals = (np.arange(256) % 7 - 3).astype(BF16)
    total = np.zeros(4, BF16)
    run(accumulate, 256, vals, total)
    want = np.array([vals[j::4].astype(np.float64).sum() for j in range(4)])
    assert np.array_equal(total.astype(np.float64), want)


def test_promotion():
    from cupric.compiler.typing.promote import promote
    from cupric.compiler.typing.ktypes import WEAK_FLOAT, WEAK_INT
    assert promote(bf16, bf16) == bf16
    assert promote(bf16, WEAK_FLOAT) == bf16 and promote(bf16, WEAK_INT) == bf16
    assert promote(bf16, f16) == f32 and promote(f16, bf16) == f32
    assert promote(bf16, f32) == f32 and promote(bf16, f64) == f64
    assert promote(bf16, u8) == bf16 and promote(bf16, i16) == f32
    assert promote(i32, bf16) == f64


def test_host_type():
    from cupric.types import scalar_from_dtype, typeof
    assert scalar_from_dtype(BF16) is bf16 and bf16.itemsize == 2
    assert typeof(np.zeros((2, 3), BF16)).dtype is bf16
    assert typeof(BF16(1.5)) is bf16
    with pytest.raises(TypeError, match="ml_dtypes"):
        scalar_from_dtype(np.dtype("V2"))
    assert bits(bf16(np.nan)) & 0x7FC0 == 0x7FC0 and float(bf16(1e39)) == np.inf
    assert float(bf16.max_value()) == float(ml_dtypes.finfo(BF16).max)


# -- PTX --------------------------------------------------------------------------------------

SIG = "Array[bf16, 1, 'C'], Array[bf16, 1, 'C'], Array[bf16, 1, 'C'], Array[bf16, 2, 'C'], " \
      "Array[bool, 2, 'C']"


@pytest.fixture(scope="module")
def nvvm():
    pytest.importorskip("cuda.bindings.nvvm", reason="libNVVM bindings are not installed")


@pytest.mark.parametrize("arch, present, absent", [
    ("sm_90", ["add.rn.bf16", "sub.rn.bf16", "mul.rn.bf16", "fma.rn.bf16", "cvt.rn.bf16.f32"],
     []),
    ("sm_80", ["fma.rn.bf16", "cvt.rn.bf16.f32"], ["add.rn.bf16", "mul.rn.bf16"]),
    ("sm_75", [], ["fma.rn.bf16", "add.rn.bf16", "cvt.rn.bf16"]),
])
def test_ptx_native_instructions_per_target(arch, present, absent, nvvm):
    ptx = cupric.kernel(ops).inspect_ptx(SIG, arch=arch)
    for instruction in present:
        assert instruction in ptx, (arch, instruction)
    for instruction in absent:
        assert instruction not in ptx, (arch, instruction)
    assert "div.rn.f32" in ptx  # division in f32, then rounded once
    from cupric.compiler import link
    try:
        assert link.ptx_to_cubin(ptx, arch)  # ptxas accepts each target's instructions
    except Exception as exc:  # noqa: BLE001 - no assembler in this environment
        if "not found" not in str(exc).lower():
            raise


def test_ptx_conversions_and_atomics(nvvm):
    ptx = cupric.kernel(conversions).inspect_ptx(
        "Array[f32, 1, 'C'], Array[f64, 1, 'C'], Array[i64, 1, 'C'], Array[bf16, 2, 'C'], "
        "Array[f64, 2, 'C']", arch="sm_90")
    assert "cvt.rz.f32.f64" in ptx and "cvt.rz.f32.s64" in ptx  # rounded to odd, then once
    sig = "Array[bf16, 1, 'C'], Array[bf16, 1, 'C']"
    assert "atom.add.noftz.bf16" in cupric.kernel(accumulate).inspect_ptx(sig, arch="sm_90")
    assert "atom.global.cas.b32" in cupric.kernel(accumulate).inspect_ptx(sig, arch="sm_80")


# -- GPU lane ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_matches_simulator_bit_for_bit(rng):
    torch = pytest.importorskip("torch", reason="PyTorch's bfloat16 tensors are the GPU arrays")
    a, b, c = operands(rng, 20000)
    n = a.size
    want = np.zeros((12, n), BF16)
    want_cmp = np.zeros((3, n), bool)
    run(ops, n, a, b, c, want, want_cmp)

    def dev(x):
        return torch.from_numpy(bits(x).astype(np.int16)).cuda().view(torch.bfloat16)
    out = torch.full((12, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    cmp = torch.ones((3, n), device="cuda", dtype=torch.bool)
    # fma=False: no contraction anywhere, so each operation rounds as the simulator's
    cupric.kernel(ops, fma=False)[(n + 127) // 128, 128](dev(a), dev(b), dev(c), out, cmp)
    got = out.view(torch.int16).cpu().numpy().view(np.uint16).view(BF16)
    for row in range(12):
        assert same(got[row], want[row]), row
    assert np.array_equal(cmp.cpu().numpy(), want_cmp)

    f, d, k = wide_sources(rng, 5000)
    m = min(f.size, d.size, k.size)
    f, d, k = f[:m], d[:m], k[:m]
    want_c = np.zeros((3, m), BF16)
    run(conversions, m, f, d, k, want_c, np.zeros((4, m)))
    out_c = torch.zeros((3, m), device="cuda", dtype=torch.bfloat16)
    back = torch.zeros((4, m), device="cuda", dtype=torch.float64)
    cupric.kernel(conversions)[(m + 127) // 128, 128](
        torch.from_numpy(f).cuda(), torch.from_numpy(d).cuda(), torch.from_numpy(k).cuda(),
        out_c, back)
    assert same(out_c.view(torch.int16).cpu().numpy().view(np.uint16).view(BF16), want_c)
    want_d = np.zeros((4, m), BF16)
    run(directed, m, d, k, want_d)
    out_d = torch.zeros((4, m), device="cuda", dtype=torch.bfloat16)
    cupric.kernel(directed)[(m + 127) // 128, 128](
        torch.from_numpy(d).cuda(), torch.from_numpy(k).cuda(), out_d)
    assert same(out_d.view(torch.int16).cpu().numpy().view(np.uint16).view(BF16), want_d)


@pytest.mark.gpu
def test_gpu_atomic_add_exact_sums(rng):
    torch = pytest.importorskip("torch", reason="PyTorch's bfloat16 tensors are the GPU arrays")
    vals = torch.from_numpy(rng.integers(-3, 4, 1 << 12).astype(np.float32)).cuda()
    total = torch.zeros(64, device="cuda", dtype=torch.bfloat16)
    cupric.kernel(accumulate)[(1 << 12) // 256, 256](vals.to(torch.bfloat16), total)
    # 64 small integers per slot: every partial sum is exact in bf16, in any order
    want = vals.view(-1, 64).sum(0)
    assert torch.equal(total.float(), want)
