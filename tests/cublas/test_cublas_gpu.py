"""cupric.cublas on a GPU: every routine against NumPy in float64 (complex128), with fresh
random inputs and outputs poisoned with NaN wherever the routine must not read them."""

from __future__ import annotations

import math
import threading
import types

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
TOL = {np.dtype(np.float32): 2e-4, np.dtype(np.float64): 1e-11,
       np.dtype(np.complex64): 2e-4, np.dtype(np.complex128): 1e-11}


@pytest.fixture(scope="module")
def rt():
    """cupric.runtime's names the tests use, plus the allocation helpers of its memory
    module (which the package does not re-export)."""
    from cupric import runtime
    from cupric.runtime import memory
    runtime.Device(0).make_current()
    return types.SimpleNamespace(Device=runtime.Device, ClosedError=runtime.ClosedError,
                                 synchronize=runtime.synchronize, to_device=memory.to_device,
                                 empty=memory.empty)


@pytest.fixture(scope="module")
def cb(rt):
    from cupric.cublas import api
    return api


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def scalar(rng, dtype):
    return complex(*rng.standard_normal(2)) if np.dtype(dtype).kind == "c" else \
        float(rng.standard_normal())


def _fortran(rt, x):
    axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return rt.to_device(np.ascontiguousarray(x.transpose(axes))).transpose(axes)


def F(rt, x):
    return _fortran(rt, x)


def host(buf):
    return buf.to_numpy()


def check(got, ref, dtype, factor=1.0):
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert not np.isnan(got).any(), "NaN in the result: a poisoned output was read"
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    assert err <= TOL[np.dtype(dtype)] * factor * scale * 10, (err, scale)


def poison(shape, dtype):
    return np.full(shape, np.nan, dtype)


def op(a, t):
    return a if t == "N" else (a.T if t == "T" else a.conj().T)


# ---------------------------------------------------------------------------------------
# Level 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_axpy_scal_copy_swap(rt, cb, rng, dtype):
    n = 257
    x, y = rand(rng, 2 * n, dtype), rand(rng, n, dtype)
    alpha = scalar(rng, dtype)
    xd = rt.to_device(x)[::2]  # stride 2
    yd = rt.to_device(y)
    cb.axpy(alpha, xd, yd)
    check(host(yd), alpha * x[::2].astype(np.complex128) + y, dtype)
    z = rand(rng, n, dtype)
    zd = rt.to_device(z)
    cb.scal(alpha, zd)
    check(host(zd), alpha * z.astype(np.complex128), dtype)
    if np.dtype(dtype).kind == "c":
        z2 = rand(rng, n, dtype)
        zd2 = rt.to_device(z2)
        cb.scal(2.5, zd2)  # real alpha on complex vector: Csscal/Zdscal
        check(host(zd2), 2.5 * z2, dtype)
    out = rt.to_device(poison(n, dtype))
    cb.copy(xd, out)
    check(host(out), x[::2], dtype)
    a, b = rand(rng, n, dtype), rand(rng, n, dtype)
    ad, bd = rt.to_device(a), rt.to_device(b)
    cb.swap(ad, bd)
    check(host(ad), b, dtype)
    check(host(bd), a, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_nrm2_asum_iamax(rt, cb, rng, dtype):
    n = 1000
    x, y = rand(rng, n, dtype), rand(rng, n, dtype)
    xd, yd = rt.to_device(x), rt.to_device(y)
    x64, y64 = x.astype(np.complex128), y.astype(np.complex128)
    factor = 30  # sums of 1000 products
    if np.dtype(dtype).kind == "c":
        check(cb.dotu(xd, yd), np.sum(x64 * y64), dtype, factor)
        check(cb.dotc(xd, yd), np.sum(x64.conj() * y64), dtype, factor)
        check(cb.vdot(xd, yd), np.vdot(x64, y64), dtype, factor)
        check(cb.asum(xd), np.sum(np.abs(x64.real) + np.abs(x64.imag)), dtype, factor)
        mags = np.abs(x.real) + np.abs(x.imag)
    else:
        check(cb.blas_dot(xd, yd), np.dot(x64, y64), dtype, factor)
        check(cb.asum(xd), np.sum(np.abs(x64)), dtype, factor)
        mags = np.abs(x)
    check(cb.dot(xd, yd), np.dot(x64, y64), dtype, factor)
    check(cb.nrm2(xd), np.linalg.norm(x64), dtype, factor)
    check(cb.norm(xd), np.linalg.norm(x64), dtype, factor)
    assert cb.iamax(xd) == int(np.argmax(mags))
    assert cb.iamin(xd) == int(np.argmin(mags))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rot(rt, cb, rng, dtype):
    n = 100
    x, y = rand(rng, n, dtype), rand(rng, n, dtype)
    c = float(rng.uniform(-1, 1))
    for s in ([float(rng.standard_normal())] + ([complex(*rng.standard_normal(2))]
                                                 if np.dtype(dtype).kind == "c" else [])):
        xd, yd = rt.to_device(x), rt.to_device(y)
        cb.rot(xd, yd, c, s)
        check(host(xd), c * x + s * y, dtype)
        check(host(yd), -np.conj(s) * x + c * y, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotg(cb, rng, dtype):
    a, b = scalar(rng, dtype), scalar(rng, dtype)
    r, z, c, s = cb.rotg(a, b, dtype=dtype)
    tol = TOL[np.dtype(dtype)] * 10
    assert abs(c * a + s * b - r) <= tol * max(1, abs(r))
    assert abs(-np.conj(s) * a + c * b) <= tol * max(1, abs(r))
    assert abs(c * c + abs(s) ** 2 - 1) <= tol


def _rotm_matrix(param):
    flag, h11, h21, h12, h22 = param
    if flag == -1:
        return np.array([[h11, h12], [h21, h22]])
    if flag == 0:
        return np.array([[1.0, h12], [h21, 1.0]])
    if flag == 1:
        return np.array([[h11, 1.0], [-1.0, h22]])
    return np.eye(2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotmg_rotm(rt, cb, rng, dtype):
    d1, d2 = float(rng.uniform(0.5, 2)), float(rng.uniform(0.5, 2))
    x1, y1 = float(rng.standard_normal()), float(rng.standard_normal())
    d1o, d2o, x1o, param = cb.rotmg(d1, d2, x1, y1, dtype=dtype)
    H = _rotm_matrix(param)
    second = (H @ np.array([x1, y1]))[1]
    assert abs(second) <= TOL[np.dtype(dtype)] * 100 * max(1, abs(x1), abs(y1))
    n = 64
    x, y = rand(rng, n, dtype), rand(rng, n, dtype)
    full = np.array([-1.0, *rng.standard_normal(4)])
    xd, yd = rt.to_device(x), rt.to_device(y)
    cb.rotm(xd, yd, full.astype(dtype))
    Hf = _rotm_matrix(full)
    check(host(xd), Hf[0, 0] * x + Hf[0, 1] * y, dtype)
    check(host(yd), Hf[1, 0] * x + Hf[1, 1] * y, dtype)


def test_device_pointer_mode(rt, cb, rng):
    with cb.Handle.create(options=cb.HandleOptions(pointer_mode="device")) as h:
        assert h.pointer_mode == "device"
        x, y = rand(rng, 50, np.float64), rand(rng, 50, np.float64)
        xd, yd = rt.to_device(x), rt.to_device(y)
        alpha = rt.to_device(np.array(1.5))
        cb.axpy(alpha, xd, yd, handle=h)
        out = rt.to_device(np.array(np.nan))
        cb.nrm2(xd, out=out, handle=h)
        idx = rt.to_device(np.array(-7, np.int32))
        cb.iamax(xd, out=idx, handle=h)
        h.synchronize()
        check(host(yd), 1.5 * x + y, np.float64)
        check(host(out), np.linalg.norm(x), np.float64)
        assert int(host(idx)) == int(np.argmax(np.abs(x))) + 1  # cuBLAS's 1-based index
        # beta lives on the device: the host cannot skip reading C, so C holds zeros.
        c = rt.to_device(np.zeros((4, 4)))
        a, b = rand(rng, (4, 4), np.float64), rand(rng, (4, 4), np.float64)
        cb.matmul(rt.to_device(a), rt.to_device(b), out=c, alpha=rt.to_device(np.array(2.0)),
                  beta=rt.to_device(np.array(0.0)), handle=h)
        h.synchronize()
        check(host(c), 2 * a @ b, np.float64)


# ---------------------------------------------------------------------------------------
# Level 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", ["N", "T", "C"])
def test_gemv(rt, cb, rng, dtype, trans):
    m, n = 37, 23
    a = rand(rng, (m, n), dtype)
    rows, cols = op(a, trans).shape
    x, y = rand(rng, cols, dtype), rand(rng, rows, dtype)
    alpha, beta = scalar(rng, dtype), scalar(rng, dtype)
    yd = rt.to_device(y)
    cb.gemv(trans, alpha, F(rt, a), rt.to_device(x), beta, yd)
    check(host(yd), alpha * op(a.astype(np.complex128), trans) @ x + beta * y, dtype)
    y0 = rt.to_device(poison(rows, dtype))
    cb.gemv(trans, alpha, F(rt, a), rt.to_device(x), 0, y0)
    check(host(y0), alpha * op(a.astype(np.complex128), trans) @ x, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", ["N", "T"])
def test_gbmv(rt, cb, rng, dtype, trans):
    m, n, kl, ku = 20, 15, 2, 3
    dense = np.zeros((m, n), dtype)
    band = np.zeros((kl + ku + 1, n), dtype)
    for j in range(n):
        for i in range(max(0, j - ku), min(m, j + kl + 1)):
            v = scalar(rng, dtype)
            dense[i, j] = v
            band[ku + i - j, j] = v
    rows, cols = op(dense, trans).shape
    x = rand(rng, cols, dtype)
    yd = rt.to_device(poison(rows, dtype))
    cb.gbmv(trans, m, kl, ku, 1.0, F(rt, band), rt.to_device(x), 0.0, yd)
    check(host(yd), op(dense.astype(np.complex128), trans) @ x, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ger(rt, cb, rng, dtype):
    m, n = 11, 7
    a = rand(rng, (m, n), dtype)
    x, y = rand(rng, m, dtype), rand(rng, n, dtype)
    alpha = scalar(rng, dtype)
    ad = F(rt, a)
    cb.ger(alpha, rt.to_device(x), rt.to_device(y), ad)
    check(host(ad), a + alpha * np.outer(x, y), dtype)
    if np.dtype(dtype).kind == "c":
        ad = F(rt, a)
        cb.gerc(alpha, rt.to_device(x), rt.to_device(y), ad)
        check(host(ad), a + alpha * np.outer(x, y.conj()), dtype)
        ad = F(rt, a)
        cb.geru(alpha, rt.to_device(x), rt.to_device(y), ad)
        check(host(ad), a + alpha * np.outer(x, y), dtype)


def _sym(rng, n, dtype, hermitian=False):
    a = rand(rng, (n, n), dtype)
    a = a + (a.conj().T if hermitian else a.T)
    if hermitian:
        a[np.diag_indices(n)] = a.diagonal().real
    return a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_symv_hemv_syr_her(rt, cb, rng, dtype, uplo):
    n = 19
    a = _sym(rng, n, dtype)
    # Garbage in the unreferenced triangle proves cuBLAS reads only `uplo`.
    stored = np.tril(a) if uplo == "L" else np.triu(a)
    garbage = stored + (np.triu(rand(rng, (n, n), dtype), 1) if uplo == "L"
                        else np.tril(rand(rng, (n, n), dtype), -1))
    x = rand(rng, n, dtype)
    yd = rt.to_device(poison(n, dtype))
    cb.symv(uplo, 1.0, F(rt, garbage), rt.to_device(x), 0.0, yd)
    check(host(yd), a.astype(np.complex128) @ x, dtype)
    ad = F(rt, stored)
    alpha = scalar(rng, dtype)
    cb.syr(uplo, alpha, rt.to_device(x), ad)
    upd = a + alpha * np.outer(x, x)
    tri = np.tril if uplo == "L" else np.triu
    check(tri(host(ad)), tri(upd), dtype)
    if np.dtype(dtype).kind == "c":
        hm = _sym(rng, n, dtype, hermitian=True)
        hs = np.tril(hm) if uplo == "L" else np.triu(hm)
        yd = rt.to_device(poison(n, dtype))
        cb.hemv(uplo, 1.0, F(rt, hs), rt.to_device(x), 0.0, yd)
        check(host(yd), hm.astype(np.complex128) @ x, dtype)
        hd = F(rt, hs)
        cb.her(uplo, 0.75, rt.to_device(x), hd)
        check(tri(host(hd)), tri(hm + 0.75 * np.outer(x, x.conj())), dtype)


def _tri(rng, n, dtype, uplo):
    a = rand(rng, (n, n), dtype) * 0.1
    a[np.diag_indices(n)] = 1.0 + rng.uniform(0, 1, n)  # well conditioned
    return np.tril(a) if uplo == "L" else np.triu(a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo,trans,diag", [("L", "N", "N"), ("U", "T", "N"),
                                             ("L", "C", "U"), ("U", "N", "U")])
def test_trmv_trsv(rt, cb, rng, dtype, uplo, trans, diag):
    n = 17
    a = _tri(rng, n, dtype, uplo)
    eff = a.copy()
    if diag == "U":
        eff[np.diag_indices(n)] = 1.0
        a[np.diag_indices(n)] = np.nan  # unit diagonal: must not be read
    x = rand(rng, n, dtype)
    xd = rt.to_device(x)
    cb.trmv(uplo, trans, diag, F(rt, a), xd)
    check(host(xd), op(eff.astype(np.complex128), trans) @ x, dtype)
    xd = rt.to_device(x)
    cb.trsv(uplo, trans, diag, F(rt, a), xd)
    check(op(eff.astype(np.complex128), trans) @ host(xd), x, dtype, 10)


# ---------------------------------------------------------------------------------------
# Level 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta,tb", [("N", "N"), ("T", "N"), ("N", "C"), ("C", "T")])
def test_gemm(rt, cb, rng, dtype, ta, tb):
    m, n, k = 33, 21, 45
    a = rand(rng, (m, k) if ta == "N" else (k, m), dtype)
    b = rand(rng, (k, n) if tb == "N" else (n, k), dtype)
    c = rand(rng, (m, n), dtype)
    alpha, beta = scalar(rng, dtype), scalar(rng, dtype)
    cd = F(rt, c)
    cb.gemm(ta, tb, alpha, F(rt, a), F(rt, b), beta, cd)
    ref = alpha * op(a.astype(np.complex128), ta) @ op(b, tb) + beta * c
    check(host(cd), ref, dtype, 5)
    cd = F(rt, poison((m, n), dtype))
    cb.gemm(ta, tb, alpha, F(rt, a), F(rt, b), 0, cd)
    check(host(cd), alpha * op(a.astype(np.complex128), ta) @ op(b, tb), dtype, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_batched_and_strided(rt, cb, rng, dtype):
    batch, m, n, k = 5, 12, 9, 14
    a, b = rand(rng, (batch, m, k), dtype), rand(rng, (batch, k, n), dtype)
    ref = a.astype(np.complex128) @ b
    cd = F(rt, poison((batch, m, n), dtype))
    cb.gemm_strided_batched("N", "N", 1.0, F(rt, a), F(rt, b), 0.0, cd)
    check(host(cd), ref, dtype, 5)
    outs = [F(rt, poison((m, n), dtype)) for _ in range(batch)]
    cb.gemm_batched("N", "N", 1.0, [F(rt, x) for x in a], [F(rt, x) for x in b], 0.0, outs)
    for i, o in enumerate(outs):
        check(host(o), ref[i], dtype, 5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side,uplo", [("L", "L"), ("R", "U")])
def test_symm_syrk_herk(rt, cb, rng, dtype, side, uplo):
    m, n = 13, 8
    order = m if side == "L" else n
    s = _sym(rng, order, dtype)
    stored = np.tril(s) if uplo == "L" else np.triu(s)
    b = rand(rng, (m, n), dtype)
    cd = F(rt, poison((m, n), dtype))
    cb.symm(side, uplo, 1.0, F(rt, stored), F(rt, b), 0.0, cd)
    ref = s.astype(np.complex128) @ b if side == "L" else b.astype(np.complex128) @ s
    check(host(cd), ref, dtype, 5)
    a = rand(rng, (m, n), dtype)
    tri = np.tril if uplo == "L" else np.triu
    cd = F(rt, poison((m, m), dtype))
    cb.syrk(uplo, "N", 1.0, F(rt, a), 0.0, cd)
    check(tri(np.nan_to_num(host(cd))), tri(a.astype(np.complex128) @ a.T), dtype, 5)
    if np.dtype(dtype).kind == "c":
        cd = F(rt, np.zeros((n, n), dtype))
        cb.herk(uplo, "C", 1.0, F(rt, a), 0.0, cd)
        check(tri(host(cd)), tri(a.conj().T.astype(np.complex128) @ a), dtype, 5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side,uplo,trans,diag", [("L", "L", "N", "N"), ("R", "U", "T", "N"),
                                                  ("L", "U", "C", "U")])
def test_trmm_trsm(rt, cb, rng, dtype, side, uplo, trans, diag):
    m, n = 14, 9
    order = m if side == "L" else n
    a = _tri(rng, order, dtype, uplo)
    eff = a.copy()
    if diag == "U":
        eff[np.diag_indices(order)] = 1.0
    b = rand(rng, (m, n), dtype)
    alpha = scalar(rng, dtype)
    A = op(eff.astype(np.complex128), trans)
    cd = F(rt, poison((m, n), dtype))
    cb.trmm(side, uplo, trans, diag, alpha, F(rt, a), F(rt, b), cd)
    check(host(cd), alpha * (A @ b if side == "L" else b @ A), dtype, 5)
    bd = F(rt, b)
    cb.trsm(side, uplo, trans, diag, alpha, F(rt, a), bd)
    x = host(bd)
    check(A @ x if side == "L" else x @ A, alpha * b, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_geam_dgmm(rt, cb, rng, dtype):
    m, n = 10, 7
    a, b = rand(rng, (n, m), dtype), rand(rng, (m, n), dtype)
    alpha, beta = scalar(rng, dtype), scalar(rng, dtype)
    cd = F(rt, poison((m, n), dtype))
    cb.geam("T", "N", alpha, F(rt, a), beta, F(rt, b), cd)
    check(host(cd), alpha * a.T + beta * b, dtype)
    cd = F(rt, poison((m, n), dtype))
    cb.geam("C", "N", 1.0, F(rt, a), 0.0, None, cd)
    check(host(cd), a.conj().T, dtype)
    x = rand(rng, n, dtype)
    cd = F(rt, poison((m, n), dtype))
    cb.dgmm("R", F(rt, b), rt.to_device(x), cd)
    check(host(cd), b @ np.diag(x), dtype)
    y = rand(rng, m, dtype)
    cd = F(rt, poison((m, n), dtype))
    cb.dgmm("L", F(rt, b), rt.to_device(y), cd)
    check(host(cd), np.diag(y) @ b, dtype)


# ---------------------------------------------------------------------------------------
# Mixed precision


def to_bf16_bits(x):
    """float32 -> bfloat16 bit patterns (round to nearest even) as uint16."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bf16_bits(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_e4m3(x):
    """Encode small integers (exactly representable in fp8 e4m3) as bytes."""
    out = np.zeros(x.shape, np.uint8)
    for idx, v in np.ndenumerate(x):
        if v == 0:
            continue
        sign = 0x80 if v < 0 else 0
        e = int(math.floor(math.log2(abs(v))))
        mant = int(round((abs(v) / 2.0 ** e - 1) * 8))
        out[idx] = sign | ((e + 7) << 3) | mant
    return out


def test_gemm_ex_fp16_bf16_int8_tf32(rt, cb, rng):
    m, n, k = 64, 48, 96
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    # fp16 inputs, fp32 accumulation into fp32 and into fp16
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    ref16 = a16.astype(np.float64) @ b16
    c = F(rt, poison((m, n), np.float32))
    cb.gemm_ex("N", "N", 1.0, F(rt, a16), F(rt, b16), 0.0, c)
    assert np.abs(host(c) - ref16).max() < 1e-3 * np.abs(ref16).max()
    c16 = F(rt, poison((m, n), np.float16))
    cb.gemm_ex("N", "N", 1.0, F(rt, a16), F(rt, b16), 0.0, c16)
    assert np.abs(host(c16) - ref16).max() < 3e-3 * np.abs(ref16).max()
    # bf16 through explicit element types (NumPy has no bfloat16)
    abf, bbf = to_bf16_bits(a), to_bf16_bits(b)
    refbf = from_bf16_bits(abf).astype(np.float64) @ from_bf16_bits(bbf)
    c = F(rt, poison((m, n), np.float32))
    cb.gemm_ex("N", "N", 1.0, F(rt, abf), F(rt, bbf), 0.0, c, a_type="bf16", b_type="bf16")
    assert np.abs(host(c) - refbf).max() < 1e-3 * np.abs(refbf).max()
    # float32 through TF32 tensor cores: ~1e-3 relative
    c = F(rt, poison((m, n), np.float32))
    cb.gemm_ex("N", "N", 1.0, F(rt, a), F(rt, b), 0.0, c, compute="tf32")
    ref = a.astype(np.float64) @ b
    assert np.abs(host(c) - ref).max() < 1e-2 * np.abs(ref).max()


def test_gemm_ex_int8(rt, cb, rng):
    # int8 -> int32 is exact. cuBLAS 13.1 on an H200 answered NOT_SUPPORTED for a
    # 64x48x96 N,N problem and ran this 8x16x32 one (the call matmul makes for a
    # (16, 32) @ (32, 8) product): its int8 kernels cover some shapes only.
    m, n, k = 8, 16, 32
    ai = rng.integers(-128, 128, (m, k)).astype(np.int8)
    bi = rng.integers(-128, 128, (k, n)).astype(np.int8)
    ci = F(rt, np.full((m, n), -1, np.int32))
    cb.gemm_ex("N", "N", 1, F(rt, ai), F(rt, bi), 0, ci)
    np.testing.assert_array_equal(host(ci), ai.astype(np.int64) @ bi)


def test_gemm_ex_batched_forms(rt, cb, rng):
    batch, m, n, k = 4, 32, 16, 24
    a = rng.standard_normal((batch, m, k)).astype(np.float16)
    b = rng.standard_normal((batch, k, n)).astype(np.float16)
    ref = a.astype(np.float64) @ b
    c = F(rt, poison((batch, m, n), np.float32))
    cb.gemm_strided_batched_ex("N", "N", 1.0, F(rt, a), F(rt, b), 0.0, c)
    assert np.abs(host(c) - ref).max() < 1e-3 * np.abs(ref).max()
    outs = [F(rt, poison((m, n), np.float32)) for _ in range(batch)]
    cb.gemm_batched_ex("N", "N", 1.0, [F(rt, x) for x in a], [F(rt, x) for x in b], 0.0, outs)
    for i, o in enumerate(outs):
        assert np.abs(host(o) - ref[i]).max() < 1e-3 * np.abs(ref).max()


def test_gemm_ex_fp8(rt, cb, rng):
    dev0 = rt.Device(0)
    if dev0.compute_capability < (8, 9):
        pytest.skip("fp8 GEMM needs sm_89 or newer")
    m, n, k = 64, 32, 64
    a = rng.integers(-8, 9, (m, k)).astype(np.float64)
    b = rng.integers(-8, 9, (k, n)).astype(np.float64)
    # fp8 wants op(A) = A.T stored: pass A as the column-major (k, m) matrix with "T".
    at = F(rt, to_e4m3(a.T))
    bd = F(rt, to_e4m3(b))
    c = F(rt, np.full((m, n), 0xFFFF, np.uint16))
    cb.gemm_ex("T", "N", 1.0, at, bd, 0.0, c, a_type="f8e4m3", b_type="f8e4m3",
               c_type="bf16")
    got = from_bf16_bits(host(c)).astype(np.float64)
    ref = a @ b
    assert np.abs(got - ref).max() <= 0.01 * np.abs(ref).max()


# ---------------------------------------------------------------------------------------
# cuBLASLt epilogues


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def dgelu(x):
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * math.sqrt(2 / math.pi) * (
        1 + 3 * 0.044715 * x * x)


def test_lt_forward_epilogues(rt, cb, rng):
    m, n, k = 64, 40, 32
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    pre = a.astype(np.float64) @ b + bias[:, None]
    for epi, ref in (("default", pre - bias[:, None]), ("bias", pre),
                     ("relu_bias", np.maximum(pre, 0)), ("gelu_bias", gelu(pre)),
                     ("relu", np.maximum(pre - bias[:, None], 0))):
        d = F(rt, poison((m, n), np.float32))
        kwargs = {"bias": rt.to_device(bias)} if "bias" in epi else {}
        cb.lt_matmul("N", "N", 1.0, F(rt, a), F(rt, b), 0.0, None, d, epilogue=epi, **kwargs)
        got = host(d)
        assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max() + 1e-4, epi
    assert cb.plan_cache_info()["plans"] >= 5


def test_lt_relu_aux_then_drelu_bgrad(rt, cb, rng):
    m, n, k = 128, 64, 32
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    pre = a.astype(np.float64) @ b + bias[:, None]
    ld, nbytes = cb.aux_layout("relu_aux_bias", m, n, "f32")
    aux = rt.to_device(np.zeros(nbytes, np.uint8))
    d = F(rt, poison((m, n), np.float32))
    cb.lt_matmul("N", "N", 1.0, F(rt, a), F(rt, b), 0.0, None, d, epilogue="relu_aux_bias",
                 bias=rt.to_device(bias), aux=aux)
    assert np.abs(host(d) - np.maximum(pre, 0)).max() < 1e-3 * np.abs(pre).max()
    # Backward: gradient G = A2 @ B2 through the ReLU mask saved above.
    a2 = rng.standard_normal((m, k)).astype(np.float32)
    b2 = rng.standard_normal((k, n)).astype(np.float32)
    g = (a2.astype(np.float64) @ b2) * (pre > 0)
    d2 = F(rt, poison((m, n), np.float32))
    cb.lt_matmul("N", "N", 1.0, F(rt, a2), F(rt, b2), 0.0, None, d2, epilogue="drelu",
                 aux=aux)
    assert np.abs(host(d2) - g).max() < 1e-3 * np.abs(g).max()
    grad_bias = rt.to_device(np.full(m, np.nan, np.float32))
    d3 = F(rt, poison((m, n), np.float32))
    cb.lt_matmul("N", "N", 1.0, F(rt, a2), F(rt, b2), 0.0, None, d3, epilogue="drelu_bgrad",
                 aux=aux, bias=grad_bias)
    assert np.abs(host(d3) - g).max() < 1e-3 * np.abs(g).max()
    assert np.abs(host(grad_bias) - g.sum(axis=1)).max() < 1e-3 * np.abs(g).sum(axis=1).max()


def test_lt_gelu_aux_then_dgelu(rt, cb, rng):
    m, n, k = 64, 48, 32
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    pre = a.astype(np.float64) @ b
    ld, nbytes = cb.aux_layout("gelu_aux", m, n, "f32")
    aux = rt.to_device(np.zeros(nbytes, np.uint8))
    d = F(rt, poison((m, n), np.float32))
    cb.lt_matmul("N", "N", 1.0, F(rt, a), F(rt, b), 0.0, None, d, epilogue="gelu_aux",
                 aux=aux)
    assert np.abs(host(d) - gelu(pre)).max() < 1e-3 * np.abs(pre).max()
    saved = host(aux).view(np.float32)[:ld * n].reshape(n, ld).T[:m]
    assert np.abs(saved - pre).max() < 1e-3 * np.abs(pre).max()
    a2 = rng.standard_normal((m, k)).astype(np.float32)
    b2 = rng.standard_normal((k, n)).astype(np.float32)
    g = (a2.astype(np.float64) @ b2) * dgelu(pre)
    d2 = F(rt, poison((m, n), np.float32))
    cb.lt_matmul("N", "N", 1.0, F(rt, a2), F(rt, b2), 0.0, None, d2, epilogue="dgelu",
                 aux=aux)
    assert np.abs(host(d2) - g).max() < 2e-3 * np.abs(g).max()


def test_lt_bias_gradients(rt, cb, rng):
    from cupric.cublas.lt import CublasLtError
    m, n, k = 64, 32, 48
    worked = []
    for epi in ("bgrada", "bgradb"):
        for ta, tb in (("N", "N"), ("T", "N"), ("N", "T")):
            a = rng.standard_normal((m, k) if ta == "N" else (k, m)).astype(np.float32)
            b = rng.standard_normal((k, n) if tb == "N" else (n, k)).astype(np.float32)
            opa, opb = op(a.astype(np.float64), ta), op(b.astype(np.float64), tb)
            size = m if epi == "bgrada" else n
            grad = rt.to_device(np.full(size, np.nan, np.float32))
            d = F(rt, poison((m, n), np.float32))
            try:
                cb.lt_matmul(ta, tb, 1.0, F(rt, a), F(rt, b), 0.0, None, d, epilogue=epi,
                             bias=grad)
            except CublasLtError as exc:
                assert exc.name == "CUBLAS_STATUS_NOT_SUPPORTED"
                continue
            ref = opa.sum(axis=1) if epi == "bgrada" else opb.sum(axis=0)
            assert np.abs(host(d) - opa @ opb).max() < 1e-3 * np.abs(opa @ opb).max()
            assert np.abs(host(grad) - ref).max() < 1e-3 * np.abs(ref).max() + 1e-4, (epi, ta, tb)
            worked.append((epi, ta, tb))
    assert {w[0] for w in worked} == {"bgrada", "bgradb"}, worked


# ---------------------------------------------------------------------------------------
# NumPy-like layer


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("la,lb", [("C", "C"), ("F", "C"), ("C", "F"), ("F", "F")])
def test_matmul_2d(rt, cb, rng, dtype, la, lb):
    a, b = rand(rng, (31, 17), dtype), rand(rng, (17, 23), dtype)
    ad = rt.to_device(a) if la == "C" else F(rt, a)
    bd = rt.to_device(b) if lb == "C" else F(rt, b)
    out = cb.matmul(ad, bd)
    assert out.shape == (31, 23) and out.dtype == np.dtype(dtype)
    check(host(out), a.astype(np.complex128) @ b, dtype, 5)
    c0 = rand(rng, (31, 23), dtype)
    od = rt.to_device(c0)
    for _ in range(2):  # the second call replays the cached plan
        od.copy_from(c0)
        cb.matmul(ad, bd, out=od, alpha=2.0, beta=-1.0)
        check(host(od), 2 * (a.astype(np.complex128) @ b) - c0, dtype, 5)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_matmul_batches_vectors_views(rt, cb, rng, dtype):
    cases = [((4, 6, 5), (4, 5, 3)), ((4, 6, 5), (5, 3)), ((6, 5), (2, 5, 3)),
             ((2, 1, 6, 5), (1, 3, 5, 3)), ((5,), (5, 3)), ((6, 5), (5,)), ((5,), (5,)),
             ((3, 6, 5), (5,))]
    for sa, sb in cases:
        a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
        out = cb.matmul(rt.to_device(a), rt.to_device(b))
        ref = np.matmul(a.astype(np.complex128), b)
        assert out.shape == ref.shape, (sa, sb)
        check(host(out), ref, dtype, 5)
    a = rand(rng, (8, 10), dtype)
    ad = rt.to_device(a)
    out = cb.matmul(ad[1:7, ::1].T, ad[:6, 2:9])  # transposed and sliced views, no copies
    check(host(out), a[1:7].T.astype(np.complex128) @ a[:6, 2:9], dtype, 5)


def test_matmul_half_and_int8(rt, cb, rng):
    a = rng.standard_normal((40, 24)).astype(np.float16)
    b = rng.standard_normal((24, 16)).astype(np.float16)
    out = cb.matmul(rt.to_device(a), rt.to_device(b))
    ref = a.astype(np.float64) @ b
    assert out.dtype == np.float16
    assert np.abs(host(out) - ref).max() < 3e-3 * np.abs(ref).max()
    ai = rng.integers(-100, 100, (16, 32)).astype(np.int8)
    bi = rng.integers(-100, 100, (32, 8)).astype(np.int8)
    oi = cb.matmul(rt.to_device(ai), rt.to_device(bi))
    assert oi.dtype == np.int32
    np.testing.assert_array_equal(host(oi), ai.astype(np.int64) @ bi)
    a32 = rng.standard_normal((64, 64)).astype(np.float32)
    o = cb.matmul(rt.to_device(a32), rt.to_device(a32), precision="tf32")
    ref = a32.astype(np.float64) @ a32
    assert np.abs(host(o) - ref).max() < 1e-2 * np.abs(ref).max()


def test_numpy_friends(rt, cb, rng):
    x, y = rand(rng, 7, np.complex128), rand(rng, 5, np.complex128)
    check(host(cb.outer(rt.to_device(x), rt.to_device(y))), np.outer(x, y), np.complex128)
    a = _tri(rng, 9, np.float64, "L")
    b = rand(rng, (9, 4), np.float64)
    for lower, arr, trans in ((True, a, "N"), (False, a.T.copy(), "T"), (True, a, "T")):
        xd = cb.solve_triangular(rt.to_device(arr), rt.to_device(b), lower=lower, trans=trans)
        check(op(arr, trans) @ host(xd), b, np.float64, 10)
    xd = cb.solve_triangular(F(rt, a), rt.to_device(b[:, 0]), lower=True)
    check(a @ host(xd), b[:, 0], np.float64, 10)
    m = rand(rng, (6, 4), np.float32)
    check(cb.norm(rt.to_device(m)), np.linalg.norm(m.astype(np.float64)), np.float32, 10)


def test_linear(rt, cb, rng):
    x = rng.standard_normal((3, 10, 32)).astype(np.float32)
    w = rng.standard_normal((48, 32)).astype(np.float32)  # PyTorch layout (out, in)
    bias = rng.standard_normal(48).astype(np.float32)
    wd = rt.to_device(w).T                                # (in, out) view, no copy
    pre = x.astype(np.float64) @ w.T + bias
    out = cb.linear(rt.to_device(x), wd, rt.to_device(bias))
    assert out.shape == (3, 10, 48)
    assert np.abs(host(out) - pre).max() < 1e-3 * np.abs(pre).max()
    out, aux = cb.linear(rt.to_device(x), rt.to_device(np.ascontiguousarray(w.T)),
                         rt.to_device(bias), activation="relu", save_aux=True)
    assert np.abs(host(out) - np.maximum(pre, 0)).max() < 1e-3 * np.abs(pre).max()
    out = cb.linear(rt.to_device(x), wd, activation="gelu")
    assert np.abs(host(out) - gelu(pre - bias)).max() < 1e-3 * np.abs(pre).max()


# ---------------------------------------------------------------------------------------
# Handles and interop


def test_handles(rt, cb, rng):
    dev0 = rt.Device(0)
    s = dev0.create_stream(non_blocking=True)
    h1 = cb.Handle.get(stream=s)
    assert cb.Handle.get(stream=s) is h1 and h1.stream == s.ptr
    assert cb.Handle.get() is not h1
    assert h1.workspace_bytes >= 4 << 20
    h1.math_mode = "tf32"
    assert h1.math_mode == "tf32"
    h1.math_mode = "pedantic"
    h1.math_mode = "default"
    h1.atomics = True
    assert h1.atomics
    a, b = rand(rng, (16, 16), np.float32), rand(rng, (16, 16), np.float32)
    out = cb.matmul(rt.to_device(a), rt.to_device(b), handle=h1)
    s.synchronize()
    check(host(out), a.astype(np.float64) @ b, np.float32, 5)
    h1.close()
    with pytest.raises(rt.ClosedError):
        cb.matmul(rt.to_device(a), rt.to_device(b), handle=h1)
    h2 = cb.Handle.get(stream=s)
    assert h2 is not h1 and not h2.closed
    h2.close()
    with cb.Handle.create(options=cb.HandleOptions(math_mode="tf32", workspace_bytes=0)) as h3:
        assert h3.math_mode == "tf32" and h3.workspace_bytes == 0
        out = cb.matmul(rt.to_device(a), rt.to_device(b), handle=h3)
        h3.synchronize()
        assert np.abs(host(out) - a.astype(np.float64) @ b).max() < 1e-2 * 16
    assert h3.closed
    s.close()


def test_threads_share_default_handles(rt, cb, rng):
    a, b = rand(rng, (32, 32), np.float64), rand(rng, (32, 32), np.float64)
    ref = a @ b
    errors = []

    def work():
        try:
            rt.Device(0).make_current()
            for _ in range(20):
                out = cb.matmul(rt.to_device(a), rt.to_device(b))
                check(host(out), ref, np.float64, 5)
        except Exception as exc:  # collected and re-raised by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_torch_and_cupy_interop(rt, cb, rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(24, 16, device="cuda", dtype=torch.float64)
    b = torch.randn(16, 8, device="cuda", dtype=torch.float64)
    out = torch.full((24, 8), float("nan"), device="cuda", dtype=torch.float64)
    stream = torch.cuda.current_stream()
    h = cb.Handle.get(stream=stream.cuda_stream)
    res = cb.matmul(a, b.T.contiguous().T, out=out, handle=h)
    assert res is out
    torch.cuda.synchronize()
    assert torch.allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    # bfloat16 tensors go through the int16 view with the bf16 element type.
    abf, bbf = a.to(torch.bfloat16), b.to(torch.bfloat16)
    obf = cb.matmul(abf, bbf, out=torch.empty(24, 8, device="cuda", dtype=torch.bfloat16),
                    handle=h)
    torch.cuda.synchronize()
    ref = abf.double() @ bbf.double()
    assert (obf.double() - ref).abs().max().item() < 2e-2 * ref.abs().max().item()
    # PyTorch's own cuBLAS handle, borrowed.
    borrowed = cb.Handle.from_handle(torch.cuda.current_blas_handle(), device=0,
                                     stream=stream.cuda_stream)
    out2 = torch.full((24, 8), float("nan"), device="cuda", dtype=torch.float64)
    cb.gemm("N", "N", 1.0, b.T, a.T, 0.0, out2.T, handle=borrowed)  # C.T = B.T A.T
    torch.cuda.synchronize()
    assert torch.allclose(out2, a @ b, rtol=1e-12, atol=1e-12)
    borrowed.close()
    cp = pytest.importorskip("cupy")
    ca = cp.asarray(rand(rng, (12, 9), np.complex64))
    cbm = cp.asarray(rand(rng, (9, 5), np.complex64))
    co = cb.matmul(ca, cbm)
    rt.synchronize()
    ref = cp.asnumpy(ca).astype(np.complex128) @ cp.asnumpy(cbm)
    check(host(co), ref, np.complex64, 5)
