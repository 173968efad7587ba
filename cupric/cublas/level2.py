"""BLAS level 2 on the GPU: matrix-vector products, rank-1 updates, triangular solves.

Matrices are column-major, as cuBLAS sees them: 2-d device arrays with unit stride
down each column and a leading dimension (column stride) of at least the row count,
i.e. Fortran-ordered arrays or slices of them. A C-ordered ``a`` is the column-major
``a.T``; pass that with the opposite ``trans`` (or use `cupric.cublas.matmul`).
"""

from __future__ import annotations

import numpy as np

from . import _validate as V
from .handle import invoke, resolve

__all__ = ["gemv", "gbmv", "ger", "geru", "gerc", "symv", "hemv", "trmv", "trsv", "syr",
           "her"]


def _mat(h, obj, name, writable=False):
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    rows, cols, ld = V.matrix(buf, name)
    return buf, rows, cols, ld


def _vec(h, obj, name, length, routine, writable=False):
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    n, inc = V.vector(buf, name)
    if n != length:
        raise ValueError(f"{routine}: {name} must have {length} elements, got {n}")
    return buf, inc


def _square(routine, name, rows, cols):
    if rows != cols:
        raise ValueError(f"{routine}: {name} must be square, got {rows}x{cols}")


def gemv(trans, alpha, a, x, beta, y, *, handle=None) -> None:
    """``y = alpha * op(A) @ x + beta * y`` (``cublas<t>gemv``).

    Parameters
    ----------
    trans : {"N", "T", "C"}
        op(A) is A, A.T or A.conj().T.
    alpha, beta : numbers (device arrays in device pointer mode)
    a : device array (m, n), column-major
    x : device array of op(A)'s column count
    y : device array of op(A)'s row count, updated (not read when beta is 0)

    Raises
    ------
    TypeError, ValueError, ClosedError
        As every routine: dtypes, shapes, layouts, devices, closed objects, all checked
        before cuBLAS is called.
    """
    h = resolve(handle)
    op = V.trans_code(trans)
    ab, m, n, lda = _mat(h, a, "a")
    rows, cols = V.op_shape(m, n, op)
    xb, incx = _vec(h, x, "x", cols, "gemv")
    yb, incy = _vec(h, y, "y", rows, "gemv", writable=True)
    prefix = V.same_prefix("gemv", ("a", ab), ("x", xb), ("y", yb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    invoke(V.routine_name("gemv", prefix, V.needs_64(m, n, lda, incx, incy)), h.ready(),
           op, m, n, pa, ab.ptr, lda, xb.ptr, incx, pb, yb.ptr, incy)


def gbmv(trans, m, kl, ku, alpha, a, x, beta, y, *, handle=None) -> None:
    """Banded ``y = alpha * op(A) @ x + beta * y`` (``cublas<t>gbmv``).

    Parameters
    ----------
    m : int
        Rows of the (m, n) band matrix A; n is the column count of `a`.
    kl, ku : int
        Sub- and super-diagonals.
    a : device array (kl + ku + 1, n), column-major
        BLAS band storage: ``A[i, j]`` is ``a[ku + i - j, j]``.
    """
    h = resolve(handle)
    op = V.trans_code(trans)
    for name, value in (("m", m), ("kl", kl), ("ku", ku)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"gbmv: {name} must be a non-negative int, got {value!r}")
    m, kl, ku = int(m), int(kl), int(ku)
    ab, band, n, lda = _mat(h, a, "a")
    if band != kl + ku + 1:
        raise ValueError(f"gbmv: a must have kl + ku + 1 = {kl + ku + 1} rows (band "
                         f"storage), got {band}")
    if (m and kl >= m) or (n and ku >= n):
        raise ValueError(f"gbmv: kl ({kl}) must be < m ({m}) and ku ({ku}) < n ({n})")
    rows, cols = V.op_shape(m, n, op)
    xb, incx = _vec(h, x, "x", cols, "gbmv")
    yb, incy = _vec(h, y, "y", rows, "gbmv", writable=True)
    prefix = V.same_prefix("gbmv", ("a", ab), ("x", xb), ("y", yb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    invoke(V.routine_name("gbmv", prefix, V.needs_64(m, n, lda, incx, incy)), h.ready(),
           op, m, n, kl, ku, pa, ab.ptr, lda, xb.ptr, incx, pb, yb.ptr, incy)


def _rank1(routine, alpha, x, y, a, handle):
    h = resolve(handle)
    ab, m, n, lda = _mat(h, a, "a", writable=True)
    xb, incx = _vec(h, x, "x", m, routine)
    yb, incy = _vec(h, y, "y", n, routine)
    if routine == "ger" and ab.dtype.kind == "c":
        routine = "geru"
    prefix = V.same_prefix(routine, ("a", ab), ("x", xb), ("y", yb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    invoke(V.routine_name(routine, prefix, V.needs_64(m, n, lda, incx, incy)), h.ready(),
           m, n, pa, xb.ptr, incx, yb.ptr, incy, ab.ptr, lda)


def ger(alpha, x, y, a, *, handle=None) -> None:
    """Rank-1 update ``A += alpha * outer(x, y)`` (``cublas<s|d>ger``; ``geru`` for
    complex). `a` is (len(x), len(y)), column-major."""
    _rank1("ger", alpha, x, y, a, handle)


def geru(alpha, x, y, a, *, handle=None) -> None:
    """Complex rank-1 update ``A += alpha * outer(x, y)`` (``cublas<c|z>geru``)."""
    _rank1("geru", alpha, x, y, a, handle)


def gerc(alpha, x, y, a, *, handle=None) -> None:
    """Complex rank-1 update ``A += alpha * outer(x, conj(y))`` (``cublas<c|z>gerc``)."""
    _rank1("gerc", alpha, x, y, a, handle)


def _sym_mv(routine, uplo, alpha, a, x, beta, y, handle):
    h = resolve(handle)
    fill = V.uplo_code(uplo)
    ab, n, n2, lda = _mat(h, a, "a")
    _square(routine, "a", n, n2)
    xb, incx = _vec(h, x, "x", n, routine)
    yb, incy = _vec(h, y, "y", n, routine, writable=True)
    prefix = V.same_prefix(routine, ("a", ab), ("x", xb), ("y", yb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    invoke(V.routine_name(routine, prefix, V.needs_64(n, lda, incx, incy)), h.ready(),
           fill, n, pa, ab.ptr, lda, xb.ptr, incx, pb, yb.ptr, incy)


def symv(uplo, alpha, a, x, beta, y, *, handle=None) -> None:
    """``y = alpha * A @ x + beta * y`` for symmetric A (``cublas<t>symv``); only the
    `uplo` ("L" or "U") triangle of `a` is read."""
    _sym_mv("symv", uplo, alpha, a, x, beta, y, handle)


def hemv(uplo, alpha, a, x, beta, y, *, handle=None) -> None:
    """``y = alpha * A @ x + beta * y`` for Hermitian A (``cublas<c|z>hemv``); only the
    `uplo` triangle is read and the diagonal's imaginary parts are taken as zero."""
    _sym_mv("hemv", uplo, alpha, a, x, beta, y, handle)


def _tri_v(routine, uplo, trans, diag, a, x, handle):
    h = resolve(handle)
    fill, op, unit = V.uplo_code(uplo), V.trans_code(trans), V.diag_code(diag)
    ab, n, n2, lda = _mat(h, a, "a")
    _square(routine, "a", n, n2)
    xb, incx = _vec(h, x, "x", n, routine, writable=True)
    prefix = V.same_prefix(routine, ("a", ab), ("x", xb))
    invoke(V.routine_name(routine, prefix, V.needs_64(n, lda, incx)), h.ready(), fill, op,
           unit, n, ab.ptr, lda, xb.ptr, incx)


def trmv(uplo, trans, diag, a, x, *, handle=None) -> None:
    """``x = op(A) @ x`` for triangular A, in place (``cublas<t>trmv``).

    `diag` "U" takes A's diagonal as ones without reading it.
    """
    _tri_v("trmv", uplo, trans, diag, a, x, handle)


def trsv(uplo, trans, diag, a, x, *, handle=None) -> None:
    """Solve ``op(A) @ z = x`` for triangular A, z overwriting x (``cublas<t>trsv``).

    Safety
    ------
    cuBLAS does not test for singularity: a zero on the diagonal gives inf/nan.
    """
    _tri_v("trsv", uplo, trans, diag, a, x, handle)


def syr(uplo, alpha, x, a, *, handle=None) -> None:
    """Symmetric rank-1 update ``A += alpha * outer(x, x)`` of the `uplo` triangle
    (``cublas<t>syr``)."""
    h = resolve(handle)
    fill = V.uplo_code(uplo)
    ab, n, n2, lda = _mat(h, a, "a", writable=True)
    _square("syr", "a", n, n2)
    xb, incx = _vec(h, x, "x", n, "syr")
    prefix = V.same_prefix("syr", ("a", ab), ("x", xb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    invoke(V.routine_name("syr", prefix, V.needs_64(n, lda, incx)), h.ready(), fill, n, pa,
           xb.ptr, incx, ab.ptr, lda)


def her(uplo, alpha, x, a, *, handle=None) -> None:
    """Hermitian rank-1 update ``A += alpha * outer(x, conj(x))`` of the `uplo` triangle,
    alpha real (``cublas<c|z>her``)."""
    h = resolve(handle)
    fill = V.uplo_code(uplo)
    ab, n, n2, lda = _mat(h, a, "a", writable=True)
    _square("her", "a", n, n2)
    xb, incx = _vec(h, x, "x", n, "her")
    prefix = V.same_prefix("her", ("a", ab), ("x", xb))
    ka, pa = h.scalar(V.REAL_PREFIX[prefix], alpha, "alpha")
    invoke(V.routine_name("her", prefix, V.needs_64(n, lda, incx)), h.ready(), fill, n, pa,
           xb.ptr, incx, ab.ptr, lda)
