"""BLAS level 3 on the GPU: matrix-matrix products, rank-k updates, triangular solves,
plus cuBLAS's extensions geam (matrix add/transpose) and dgmm (diagonal scaling).

Matrices are column-major (see `cupric.cublas.level2`); batched forms take 3-d arrays
whose first axis is the batch (`gemm_strided_batched`) or lists of matrices
(`gemm_batched`, which uploads the pointer arrays cuBLAS needs).
"""

from __future__ import annotations

import numpy as np

from cupric.runtime.memory import DeviceBuffer, extent

from . import _fastgemm
from . import _validate as V
from . import handle as _handle
from .handle import host_scalar, invoke, resolve

__all__ = ["gemm", "gemm_batched", "gemm_strided_batched", "symm", "syrk", "herk", "trmm",
           "trsm", "geam", "dgmm"]


def _mat(h, obj, name, writable=False):
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    rows, cols, ld = V.matrix(buf, name)
    return buf, rows, cols, ld


def _shape(routine, name, got, want):
    if tuple(got) != tuple(want):
        raise ValueError(f"{routine}: {name} must be {want[0]}x{want[1]}, got "
                         f"{got[0]}x{got[1]}")


def gemm(transa, transb, alpha, a, b, beta, c, *, handle=None) -> None:
    """``C = alpha * op(A) @ op(B) + beta * C`` (``cublas<t>gemm``).

    Parameters
    ----------
    transa, transb : {"N", "T", "C"}
    alpha, beta : numbers (one-element device arrays in device pointer mode)
    a, b, c : device arrays, 2-d, column-major
        op(A) is (m, k), op(B) is (k, n) and C is (m, n). C is not read when beta is 0.
    handle : Handle, optional

    Raises
    ------
    TypeError
        Host arrays, unsupported or mixed dtypes, complex scalars for real matrices.
    ValueError
        Mismatched shapes, layouts cuBLAS cannot address (row-major, bad leading
        dimension), read-only C, C overlapping A or B (cuBLAS reads them while it writes
        C), operands on another device.
    ClosedError
        Closed handle, stream or buffer.
    CublasError
        If cuBLAS refuses the call.

    Examples
    --------
    >>> a = rt.to_device(np.asfortranarray(A))          # doctest: +SKIP
    >>> cublas.gemm("N", "T", 1.0, a, b, 0.0, c)
    """
    fast = _c_gemm  # the compiled replay of a checked plan; None: take this path
    if fast is not None:
        done = fast(transa, transb, alpha, a, b, beta, c, handle)
        if done is not None:
            return None
    h = resolve(handle)
    cacheable = (type(a) is DeviceBuffer and type(b) is DeviceBuffer and type(c) is DeviceBuffer
                 and not h._device_scalars and not h.multi_device)
    if cacheable:
        key = (transa, transb, a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides,
               c.dtype, c.shape, c.strides)
        plan = _gemm_plans.get(key)
        if plan is not None and not (a.allocation.closed or b.allocation.closed
                                     or c.allocation.closed or c.readonly
                                     or _overlap(a.ptr, b.ptr, c.ptr, plan[10])):
            name, prefix, ta, tb, m, n, k, lda, ldb, ldc, spans = plan
            ka, pa = host_scalar(prefix, alpha, "alpha")
            kb, pb = host_scalar(prefix, beta, "beta")
            invoke(name, h.ready(), ta, tb, m, n, k, pa, a.ptr, lda, b.ptr, ldb, pb, c.ptr,
                   ldc)
            if _c_gemm is not None and key not in h._fast_plans:  # a handle without it
                _remember_compiled(h, key, name, prefix, ta, tb, m, n, k, lda, ldb, ldc, a, b, c,
                                   spans)
            return
    ta, tb, ab, bb, cb, m, n, k, lda, ldb, ldc = gemm_geometry(h, "gemm", transa, transb,
                                                                a, b, c)
    prefix = V.same_prefix("gemm", ("a", ab), ("b", bb), ("c", cb))
    spans = _spans(ab, bb, cb)
    which = _overlap(ab.ptr, bb.ptr, cb.ptr, spans)
    if which is not None:
        raise ValueError(f"gemm: c overlaps {which}; cuBLAS reads a and b while it writes c "
                         f"- use a separate output array")
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    name = V.routine_name("gemm", prefix, V.needs_64(m, n, k, lda, ldb, ldc))
    invoke(name, h.ready(), ta, tb, m, n, k, pa, ab.ptr, lda, bb.ptr, ldb, pb, cb.ptr, ldc)
    if cacheable:
        if len(_gemm_plans) < 4096:
            _gemm_plans[key] = (name, prefix, ta, tb, m, n, k, lda, ldb, ldc, spans)
        _remember_compiled(h, key, name, prefix, ta, tb, m, n, k, lda, ldb, ldc, ab, bb, cb,
                           spans)


def _remember_compiled(h, key, name, prefix, ta, tb, m, n, k, lda, ldb, ldc, a, b, c,
                       spans):
    fn = _handle._FAST.get(name)  # the table `invoke` called through
    if fn is not None:
        # The compiled replay checks the overlap of C with A and B on every call (alias).
        _fastgemm.remember(h, key, fn, swap=False, alias=True, op1=ta, op2=tb, m=m, n=n, k=k,
                           ld1=lda, ld2=ldb, ldc=ldc, letter=prefix,
                           ptrs=(a.ptr, b.ptr, c.ptr), spans=spans)


def _spans(a, b, c) -> tuple:
    """The (low, high) byte extents of a, b and c relative to their pointers."""
    return (*extent(a.shape, a.strides, a.itemsize), *extent(b.shape, b.strides, b.itemsize),
            *extent(c.shape, c.strides, c.itemsize))


def _overlap(pa: int, pb: int, pc: int, spans: tuple) -> str | None:
    """Which of "a" and "b" the output c overlaps (by byte extents), or None."""
    a_lo, a_hi, b_lo, b_hi, c_lo, c_hi = spans
    if c_lo == c_hi:
        return None
    if pa + a_lo < pc + c_hi and pc + c_lo < pa + a_hi:
        return "a"
    if pb + b_lo < pc + c_hi and pc + c_lo < pb + b_hi:
        return "b"
    return None


# The compiled path (cupric.cublas._fastgemm): its gemm, or `_first_call`, which loads it
# on the first gemm and rebinds this name (None when it cannot be built).
_c_gemm = _fastgemm._first_call


# Checked GEMM problems on cupric buffers by (trans, dtypes, shapes, strides): a repeated
# call only re-checks what can change between calls (open, writable) and passes the
# current pointers.
_gemm_plans: dict[tuple, tuple] = {}


def gemm_geometry(h, routine, transa, transb, a, b, c):
    """Check a GEMM's operands: (transa, transb, a, b, c buffers, m, n, k, lda, ldb, ldc).

    Shared by `gemm` and `cupric.cublas.gemm_ex`; dtypes are the caller's to check.
    """
    ta, tb = V.trans_code(transa, "transa"), V.trans_code(transb, "transb")
    ab, ar, ac, lda = _mat(h, a, "a")
    bb, br, bc, ldb = _mat(h, b, "b")
    cb, m, n, ldc = _mat(h, c, "c", writable=True)
    m_a, k = V.op_shape(ar, ac, ta)
    k_b, n_b = V.op_shape(br, bc, tb)
    if k != k_b:
        raise ValueError(f"{routine}: op(a) is {m_a}x{k} but op(b) is {k_b}x{n_b}; inner "
                         f"dimensions differ")
    _shape(routine, "c", (m, n), (m_a, n_b))
    return ta, tb, ab, bb, cb, m, n, k, lda, ldb, ldc


def strided_geometry(h, routine, transa, transb, a, b, c):
    """As `gemm_geometry` for 3-d batches; adds the batch and the three batch strides:
    (ta, tb, a, b, c, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch)."""
    ta, tb = V.trans_code(transa, "transa"), V.trans_code(transb, "transb")
    ab, na, ar, ac, lda, sa = _batch3(h, a, "a")
    bb, nb, br, bc, ldb, sb = _batch3(h, b, "b")
    cb, batch, m, n, ldc, sc = _batch3(h, c, "c", writable=True)
    for name, count in (("a", na), ("b", nb)):
        if count not in (batch, 1):
            raise ValueError(f"{routine}: {name} has a batch of {count}, c of {batch} (only "
                             f"1 broadcasts)")
    if batch > 1 and m * n > 0 and sc < ldc * (n - 1) + m:
        raise ValueError(f"{routine}: c's matrices overlap (batch stride {sc} elements < "
                         f"{ldc * (n - 1) + m})")
    m_a, k = V.op_shape(ar, ac, ta)
    k_b, n_b = V.op_shape(br, bc, tb)
    if k != k_b:
        raise ValueError(f"{routine}: op(a) is {m_a}x{k} but op(b) is {k_b}x{n_b}")
    _shape(routine, "c[i]", (m, n), (m_a, n_b))
    return ta, tb, ab, bb, cb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch


def _batch3(h, obj, name, writable=False):
    """(buffer, batch, rows, cols, ld, batch stride in elements) of a 3-d batch."""
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    if buf.ndim != 3:
        raise ValueError(f"{name} must be a 3-d batch (batch, rows, cols), got shape "
                         f"{buf.shape}")
    batch = buf.shape[0]
    inner = buf[0] if batch else None
    if inner is None:
        rows, cols = buf.shape[1:]
        return buf, 0, rows, cols, max(1, rows), 0
    rows, cols, ld = V.matrix(inner, f"{name}[i]")
    stride, rest = divmod(buf.strides[0], buf.itemsize)
    if rest or stride < 0:
        raise ValueError(f"{name} has a batch stride of {buf.strides[0]} bytes; it must be "
                         f"a non-negative multiple of the item size")
    if batch == 1:
        stride = 0
    return buf, batch, rows, cols, ld, stride


def gemm_strided_batched(transa, transb, alpha, a, b, beta, c, *, handle=None) -> None:
    """A batch of GEMMs at a fixed stride (``cublas<t>gemmStridedBatched``):
    ``C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i]``.

    Parameters
    ----------
    a, b, c : device arrays, 3-d (batch, rows, cols)
        Each matrix column-major. A batch axis of length 1 in `a` or `b` is broadcast
        (stride 0). C's matrices must not overlap.
    """
    h = resolve(handle)
    (ta, tb, ab, bb, cb, m, n, k, lda, ldb, ldc, sa, sb, sc,
     batch) = strided_geometry(h, "gemm_strided_batched", transa, transb, a, b, c)
    prefix = V.same_prefix("gemmStridedBatched", ("a", ab), ("b", bb), ("c", cb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    invoke(V.routine_name("gemmStridedBatched", prefix,
                          V.needs_64(m, n, k, lda, ldb, ldc, batch)),
           h.ready(), ta, tb, m, n, k, pa, ab.ptr, lda, sa, bb.ptr, ldb, sb, pb, cb.ptr,
           ldc, sc, batch)


def pointer_array(h, buffers):
    """A device array of the buffers' addresses, on the handle's stream.

    Returned as a DeviceBuffer: close it with ``close(stream=h.stream)`` after the call
    that reads it (stream-ordered free; the host never waits).
    """
    from cupric.runtime.memory import to_device
    ptrs = np.fromiter((b.ptr for b in buffers), dtype=np.uint64, count=len(buffers))
    return to_device(ptrs, stream=h.stream)


def _matrix_list(h, objs, name, writable=False):
    if isinstance(objs, (str, bytes)) or not hasattr(objs, "__len__"):
        raise TypeError(f"{name} must be a sequence of device matrices")
    bufs, shape, ld = [], None, None
    for i, obj in enumerate(objs):
        buf, rows, cols, this_ld = _mat(h, obj, f"{name}[{i}]", writable)
        if shape is None:
            shape, ld = (rows, cols), this_ld
        elif (rows, cols) != shape or this_ld != ld:
            raise ValueError(f"{name}[{i}] is {rows}x{cols} with leading dimension "
                             f"{this_ld}, {name}[0] is {shape[0]}x{shape[1]} with {ld}: "
                             f"a batch shares one shape and leading dimension")
        bufs.append(buf)
    return bufs, shape, ld


def gemm_batched(transa, transb, alpha, a, b, beta, c, *, handle=None) -> None:
    """A batch of GEMMs on matrices anywhere in memory (``cublas<t>gemmBatched``).

    Parameters
    ----------
    a, b, c : sequences of 2-d column-major device arrays
        One shape and leading dimension per list; equal lengths.

    Cost
    ----
    Three small host-to-device copies of the pointer arrays, queued on the handle's
    stream (and three stream-ordered frees).
    """
    h = resolve(handle)
    (ta, tb, abufs, bbufs, cbufs, m, n, k, lda, ldb, ldc,
     batch) = batched_geometry(h, "gemm_batched", transa, transb, a, b, c)
    prefix = V.same_prefix("gemmBatched", ("a", abufs[0]), ("b", bbufs[0]),
                           ("c", cbufs[0]))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    arrays = [pointer_array(h, bufs) for bufs in (abufs, bbufs, cbufs)]
    try:
        invoke(V.routine_name("gemmBatched", prefix, V.needs_64(m, n, k, lda, ldb, ldc)),
               h.ready(), ta, tb, m, n, k, pa, arrays[0].ptr, lda, arrays[1].ptr, ldb, pb,
               arrays[2].ptr, ldc, batch)
    finally:
        for arr in arrays:
            arr.close(stream=h.stream)


def batched_geometry(h, routine, transa, transb, a, b, c):
    """As `gemm_geometry` for lists of matrices: (ta, tb, a list, b list, c list, m, n,
    k, lda, ldb, ldc, batch). Every matrix of a list shares the dtype of the first."""
    ta, tb = V.trans_code(transa, "transa"), V.trans_code(transb, "transb")
    abufs, (ar, ac), lda = _nonempty(_matrix_list(h, a, "a"), "a")
    bbufs, (br, bc), ldb = _nonempty(_matrix_list(h, b, "b"), "b")
    cbufs, (m, n), ldc = _nonempty(_matrix_list(h, c, "c", writable=True), "c")
    batch = len(cbufs)
    if not len(abufs) == len(bbufs) == batch:
        raise ValueError(f"{routine}: batches of {len(abufs)}, {len(bbufs)} and {batch} "
                         f"matrices; they must be equal")
    m_a, k = V.op_shape(ar, ac, ta)
    k_b, n_b = V.op_shape(br, bc, tb)
    if k != k_b:
        raise ValueError(f"{routine}: op(a) is {m_a}x{k} but op(b) is {k_b}x{n_b}")
    _shape(routine, "c[i]", (m, n), (m_a, n_b))
    for name, bufs in (("a", abufs), ("b", bbufs), ("c", cbufs)):
        for i, buf in enumerate(bufs):
            if buf.dtype != bufs[0].dtype:
                raise TypeError(f"{routine}: {name}[{i}] has dtype {buf.dtype}, {name}[0] "
                                f"{bufs[0].dtype}")
    return ta, tb, abufs, bbufs, cbufs, m, n, k, lda, ldb, ldc, batch


def _nonempty(result, name):
    bufs, shape, ld = result
    if not bufs:
        raise ValueError(f"batched GEMM: {name} is empty")
    return bufs, shape, ld


def symm(side, uplo, alpha, a, b, beta, c, *, handle=None) -> None:
    """``C = alpha * A @ B + beta * C`` (side "L") or ``alpha * B @ A + beta * C``
    (side "R") for symmetric A, of which only the `uplo` triangle is read
    (``cublas<t>symm``)."""
    h = resolve(handle)
    sd, fill = V.side_code(side), V.uplo_code(uplo)
    ab, ar, ac, lda = _mat(h, a, "a")
    bb, br, bc, ldb = _mat(h, b, "b")
    cb, m, n, ldc = _mat(h, c, "c", writable=True)
    order = m if sd == 0 else n
    _shape("symm", "a", (ar, ac), (order, order))
    _shape("symm", "b", (br, bc), (m, n))
    prefix = V.same_prefix("symm", ("a", ab), ("b", bb), ("c", cb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    invoke(V.routine_name("symm", prefix, V.needs_64(m, n, lda, ldb, ldc)), h.ready(), sd,
           fill, m, n, pa, ab.ptr, lda, bb.ptr, ldb, pb, cb.ptr, ldc)


def _rank_k(routine, uplo, trans, alpha, a, beta, c, handle):
    h = resolve(handle)
    fill, op = V.uplo_code(uplo), V.trans_code(trans)
    ab, ar, ac, lda = _mat(h, a, "a")
    cb, n, n2, ldc = _mat(h, c, "c", writable=True)
    if n != n2:
        raise ValueError(f"{routine}: c must be square, got {n}x{n2}")
    prefix = V.same_prefix(routine, ("a", ab), ("c", cb))
    if routine == "syrk" and prefix in ("C", "Z") and op == 2:
        raise ValueError("syrk: trans 'C' is not defined for complex matrices (use herk)")
    if routine == "herk" and op == 1:
        raise ValueError("herk: trans must be 'N' or 'C'")
    rows, k = V.op_shape(ar, ac, op)
    if rows != n:
        raise ValueError(f"{routine}: op(a) is {rows}x{k} but c is {n}x{n}")
    scalar_prefix = V.REAL_PREFIX[prefix] if routine == "herk" else prefix
    ka, pa = h.scalar(scalar_prefix, alpha, "alpha")
    kb, pb = h.scalar(scalar_prefix, beta, "beta")
    invoke(V.routine_name(routine, prefix, V.needs_64(n, k, lda, ldc)), h.ready(), fill, op,
           n, k, pa, ab.ptr, lda, pb, cb.ptr, ldc)


def syrk(uplo, trans, alpha, a, beta, c, *, handle=None) -> None:
    """Symmetric rank-k update of the `uplo` triangle of C:
    ``C = alpha * op(A) @ op(A).T + beta * C`` (``cublas<t>syrk``)."""
    _rank_k("syrk", uplo, trans, alpha, a, beta, c, handle)


def herk(uplo, trans, alpha, a, beta, c, *, handle=None) -> None:
    """Hermitian rank-k update of the `uplo` triangle of C:
    ``C = alpha * op(A) @ op(A).conj().T + beta * C``, alpha and beta real
    (``cublas<c|z>herk``)."""
    _rank_k("herk", uplo, trans, alpha, a, beta, c, handle)


def _tri_m(h, routine, side, uplo, trans, diag, a, b):
    sd, fill = V.side_code(side), V.uplo_code(uplo)
    op, unit = V.trans_code(trans), V.diag_code(diag)
    ab, ar, ac, lda = _mat(h, a, "a")
    bb, m, n, ldb = _mat(h, b, "b", writable=routine == "trsm")
    order = m if sd == 0 else n
    _shape(routine, "a", (ar, ac), (order, order))
    return sd, fill, op, unit, ab, lda, bb, m, n, ldb


def trmm(side, uplo, trans, diag, alpha, a, b, c, *, handle=None) -> None:
    """Triangular matrix product ``C = alpha * op(A) @ B`` (side "L") or
    ``alpha * B @ op(A)`` (side "R") (``cublas<t>trmm``; out of place, and C may be B).
    """
    h = resolve(handle)
    sd, fill, op, unit, ab, lda, bb, m, n, ldb = _tri_m(h, "trmm", side, uplo, trans, diag,
                                                        a, b)
    cb, cm, cn, ldc = _mat(h, c, "c", writable=True)
    _shape("trmm", "c", (cm, cn), (m, n))
    prefix = V.same_prefix("trmm", ("a", ab), ("b", bb), ("c", cb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    invoke(V.routine_name("trmm", prefix, V.needs_64(m, n, lda, ldb, ldc)), h.ready(), sd,
           fill, op, unit, m, n, pa, ab.ptr, lda, bb.ptr, ldb, cb.ptr, ldc)


def trsm(side, uplo, trans, diag, alpha, a, b, *, handle=None) -> None:
    """Solve ``op(A) @ X = alpha * B`` (side "L") or ``X @ op(A) = alpha * B`` (side
    "R") for triangular A; X overwrites B (``cublas<t>trsm``).

    Safety
    ------
    No singularity test: a zero diagonal gives inf/nan.
    """
    h = resolve(handle)
    sd, fill, op, unit, ab, lda, bb, m, n, ldb = _tri_m(h, "trsm", side, uplo, trans, diag,
                                                        a, b)
    prefix = V.same_prefix("trsm", ("a", ab), ("b", bb))
    ka, pa = h.scalar(prefix, alpha, "alpha")
    invoke(V.routine_name("trsm", prefix, V.needs_64(m, n, lda, ldb)), h.ready(), sd, fill,
           op, unit, m, n, pa, ab.ptr, lda, bb.ptr, ldb)


def geam(transa, transb, alpha, a, beta, b, c, *, handle=None) -> None:
    """``C = alpha * op(A) + beta * op(B)`` (``cublas<t>geam``): matrix addition,
    scaling and out-of-place transposition.

    `b` may be None when beta is 0 (host pointer mode), which makes geam a transposing
    copy: ``geam("T", "N", 1, a, 0, None, c)`` writes ``a.T`` to c. C may be A (with
    transa "N") or B (with transb "N") for in-place updates.
    """
    h = resolve(handle)
    ta, tb = V.trans_code(transa, "transa"), V.trans_code(transb, "transb")
    ab, ar, ac, lda = _mat(h, a, "a")
    cb, m, n, ldc = _mat(h, c, "c", writable=True)
    _shape("geam", "op(a)", V.op_shape(ar, ac, ta), (m, n))
    if b is None:
        if h._device_scalars or beta != 0:
            raise ValueError("geam: b may be None only when beta is 0 in host pointer mode")
        prefix = V.same_prefix("geam", ("a", ab), ("c", cb))
        b_ptr, ldb = 0, max(1, m) if tb == 0 else max(1, n)
    else:
        bb, br, bc, ldb = _mat(h, b, "b")
        _shape("geam", "op(b)", V.op_shape(br, bc, tb), (m, n))
        prefix = V.same_prefix("geam", ("a", ab), ("b", bb), ("c", cb))
        b_ptr = bb.ptr
    ka, pa = h.scalar(prefix, alpha, "alpha")
    kb, pb = h.scalar(prefix, beta, "beta")
    invoke(V.routine_name("geam", prefix, V.needs_64(m, n, lda, ldb, ldc)), h.ready(), ta,
           tb, m, n, pa, ab.ptr, lda, pb, b_ptr, ldb, cb.ptr, ldc)


def dgmm(side, a, x, c, *, handle=None) -> None:
    """``C = A @ diag(x)`` (side "R") or ``diag(x) @ A`` (side "L") (``cublas<t>dgmm``).
    C may be A."""
    h = resolve(handle)
    sd = V.side_code(side)
    ab, m, n, lda = _mat(h, a, "a")
    cb, cm, cn, ldc = _mat(h, c, "c", writable=True)
    _shape("dgmm", "c", (cm, cn), (m, n))
    xb = V.device_array(x, "x", h.stream)
    h.check_device(xb, "x")
    length, incx = V.vector(xb, "x")
    want = m if sd == 0 else n
    if length != want:
        raise ValueError(f"dgmm: x must have {want} elements for side "
                         f"{'L' if sd == 0 else 'R'}, got {length}")
    prefix = V.same_prefix("dgmm", ("a", ab), ("x", xb), ("c", cb))
    invoke(V.routine_name("dgmm", prefix, V.needs_64(m, n, lda, incx, ldc)), h.ready(), sd,
           m, n, ab.ptr, lda, xb.ptr, incx, cb.ptr, ldc)
