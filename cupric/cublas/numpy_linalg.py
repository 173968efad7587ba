"""NumPy- and SciPy-like linear algebra around `matmul`: dot, vdot, outer, norm,
solve_triangular, and `linear` (a fused cuBLASLt epilogue).

Each reads its operands through `numpy_api`'s intake (any device array kind) and maps
row-major arrays onto cuBLAS's column-major calls without copies, as `matmul` does.
"""

from __future__ import annotations

import numpy as np

from . import _validate as V
from .handle import resolve
from .numpy_api import _buffer, _layout, matmul

__all__ = ["dot", "vdot", "outer", "norm", "linear", "solve_triangular"]


def dot(a, b, out=None, *, handle=None):
    """`numpy.dot` for vectors and matrices.

    Two vectors give their (unconjugated) inner product as a Python number in host
    pointer mode (the call waits for the GPU), or in `out` in device pointer mode;
    anything with a matrix is `matmul`. Stacks (more than 2-d) are refused: NumPy's
    `dot` and `matmul` differ there, use `matmul`.
    """
    h = resolve(handle)
    ab, _ = _buffer(a, "a", h.stream)
    bb, _ = _buffer(b, "b", h.stream)
    if ab.ndim == 1 and bb.ndim == 1:
        from .level1 import dot as blas_dot
        return blas_dot(ab, bb, out=out, handle=h)
    if ab.ndim > 2 or bb.ndim > 2:
        raise ValueError("dot: operands of more than 2 dimensions have NumPy's dot "
                         "semantics, which differ from matmul's; use matmul")
    return matmul(ab, bb, out=out, handle=h)


def vdot(a, b, *, out=None, handle=None):
    """`numpy.vdot` of two vectors: ``sum(conj(a) * b)`` (``dotc``; ``dot`` for reals).
    Returns as `dot`."""
    h = resolve(handle)
    ab, _ = _buffer(a, "a", h.stream)
    bb, _ = _buffer(b, "b", h.stream)
    from .level1 import dot as blas_dot, dotc
    if ab.dtype.kind == "c":
        return dotc(ab, bb, out=out, handle=h)
    return blas_dot(ab, bb, out=out, handle=h)


def outer(a, b, out=None, *, handle=None):
    """`numpy.outer` of two vectors, ``out[i, j] = a[i] * b[j]``, as a GEMM with k = 1
    (strided vectors welcome)."""
    h = resolve(handle)
    ab, _ = _buffer(a, "a", h.stream)
    bb, _ = _buffer(b, "b", h.stream)
    for name, buf in (("a", ab), ("b", bb)):
        if buf.ndim != 1:
            raise ValueError(f"outer: {name} must be 1-d, got shape {buf.shape}")
    return matmul(ab[:, None], bb[None, :], out=out, handle=h)


def norm(x, *, handle=None) -> float:
    """Euclidean norm of a vector, or Frobenius norm of a contiguous array, as a Python
    float (``nrm2``; the call waits for the GPU)."""
    h = resolve(handle)
    xb, _ = _buffer(x, "x", h.stream)
    if xb.ndim != 1:
        if not (xb.is_c_contiguous or xb.is_f_contiguous):
            raise ValueError("norm: a multi-dimensional array must be contiguous")
        xb = xb.reshape(-1) if xb.is_c_contiguous else xb.T.reshape(-1)
    from .level1 import nrm2
    return nrm2(xb, handle=h)


def solve_triangular(a, b, *, lower=False, trans="N", unit_diagonal=False,
                     overwrite_b=False, handle=None):
    """Solve ``op(a) @ x = b`` for triangular `a` (``trsm``), as
    `scipy.linalg.solve_triangular`.

    Parameters
    ----------
    a : device array (n, n)
        C- or Fortran-ordered; only the `lower` (or upper) triangle is read.
    b : device array (n,) or (n, nrhs), C-contiguous
    trans : {"N", "T", "C"}
    unit_diagonal : bool
        Take a's diagonal as ones without reading it.
    overwrite_b : bool
        Solve in place in `b` (returned); otherwise into a new C-ordered array.

    Safety
    ------
    No singularity test: a zero on the diagonal gives inf/nan.
    """
    h = resolve(handle)
    ab, _ = _buffer(a, "a", h.stream)
    bb, _ = _buffer(b, "b", h.stream)
    op = V.trans_code(trans)
    if ab.ndim != 2 or ab.shape[0] != ab.shape[1]:
        raise ValueError(f"solve_triangular: a must be square, got shape {ab.shape}")
    n = ab.shape[0]
    if bb.ndim not in (1, 2) or bb.shape[0] != n:
        raise ValueError(f"solve_triangular: b must be ({n},) or ({n}, nrhs), got "
                         f"{bb.shape}")
    if not bb.is_c_contiguous:
        raise ValueError("solve_triangular: b must be C-contiguous")
    prefix = V.same_prefix("trsm", ("a", ab), ("b", bb))
    h.check_device(ab, "a")
    h.check_device(bb, "b")
    ra, lda = _layout(ab.shape, ab.strides, ab.itemsize, "a")
    # C-ordered b (n, nrhs) is the column-major B.T (nrhs x n): solve X.T op(A).T = B.T,
    # a right-side trsm. With a row-major, the stored matrix is A.T: the same op applies
    # and the triangle flips. With a column-major, A.T needs the opposite op.
    if ra:
        eff_op, uplo = op, ("U" if lower else "L")
    else:
        if op == 2:
            raise ValueError("solve_triangular: trans='C' needs a C-ordered a")
        eff_op, uplo = 1 - op, ("L" if lower else "U")
    if overwrite_b:
        if bb.readonly:
            raise ValueError("solve_triangular: b is read-only")
        xb = bb
    else:
        xb = bb.copy(stream=h.stream)
    nrhs = bb.shape[1] if bb.ndim == 2 else 1
    if n == 0 or nrhs == 0:
        return xb
    keep, pa = h.scalar(prefix, 1, "alpha")
    from .handle import invoke
    invoke(V.routine_name("trsm", prefix, V.needs_64(n, nrhs, lda)), h.ready(), 1,
           V.uplo_code(uplo), eff_op, 1 if unit_diagonal else 0, nrhs, n, pa, ab.ptr, lda,
           xb.ptr, nrhs)
    xb.ordering_stream = h.stream
    return xb


def linear(x, weight, bias=None, *, activation=None, out=None, save_aux=False,
           handle=None):
    """``activation(x @ weight + bias)`` in one cuBLASLt call (fused epilogue).

    Parameters
    ----------
    x : device array (..., K), C-contiguous over its leading axes
    weight : device array (K, N), any addressable layout (``w.T`` of a PyTorch-style
        (N, K) weight needs no copy)
    bias : device array (N,), optional
    activation : {None, "relu", "gelu"}
    out : device array (..., N), optional
    save_aux : bool
        Also return what the backward pass needs (the ReLU bit mask or GELU's input),
        for `lt_matmul` with the "drelu"/"dgelu" epilogues.

    Returns
    -------
    out, or (out, aux) with `save_aux`
    """
    from .ltmatmul import aux_layout, lt_matmul
    h = resolve(handle)
    xb, x_type = _buffer(x, "x", h.stream)
    wb, w_type = _buffer(weight, "weight", h.stream)
    if activation not in (None, "relu", "gelu"):
        raise ValueError(f"activation must be None, 'relu' or 'gelu', got {activation!r}")
    if xb.ndim < 1 or wb.ndim != 2:
        raise ValueError(f"linear: x must be (..., K) and weight (K, N), got {xb.shape} "
                         f"and {wb.shape}")
    k, n = wb.shape
    if xb.shape[-1] != k:
        raise ValueError(f"linear: x has {xb.shape[-1]} features but weight has {k} rows")
    lead = xb.shape[:-1]
    x2 = xb.reshape(-1, k) if xb.ndim != 2 else xb
    rows = x2.shape[0]
    if save_aux and activation is None:
        raise ValueError("linear: save_aux needs an activation")
    name = "default" if activation is None else activation
    if save_aux:
        name += "_aux"
    if bias is not None:
        name = "bias" if name == "default" else name + "_bias"
    if out is None:
        from cupric.runtime.memory import empty
        ob = empty(lead + (n,), xb.dtype, stream=h.stream)
    else:
        ob, _ = _buffer(out, "out", h.stream)
        if ob.shape != lead + (n,):
            raise ValueError(f"linear: out must have shape {lead + (n,)}, got {ob.shape}")
    o2 = ob.reshape(-1, n) if ob.ndim != 2 else ob
    # Row-major out (rows, N) is the column-major D (N x rows) = op(W) @ op(X).
    rw, _ = _layout(wb.shape, wb.strides, wb.itemsize, "weight")
    rx, _ = _layout(x2.shape, x2.strides, x2.itemsize, "x")
    ro, _ = _layout(o2.shape, o2.strides, o2.itemsize, "out")
    if not ro:
        raise ValueError("linear: out must be row-major (C-ordered rows)")
    a_cm = wb.T   # (N, K) view: column-major when weight is row-major
    b_cm = x2.T   # (K, rows)
    d_cm = o2.T   # (N, rows)
    aux = None
    if save_aux:
        from cupric.runtime.memory import empty
        from .gemm_ex import data_type_of
        t_d = x_type or data_type_of(ob, None, "out")
        ld, nbytes = aux_layout(name, n, rows, t_d)
        aux = empty(max(nbytes, 1), np.uint8, stream=h.stream)
    ta = "N" if rw else "T"
    tb = "N" if rx else "T"
    lt_matmul(ta, tb, 1.0, a_cm if rw else wb, b_cm if rx else x2, 0.0, None, d_cm,
              epilogue=name, bias=bias, aux=aux, a_type=w_type, b_type=x_type,
              d_type=x_type, handle=h)
    ob.ordering_stream = h.stream
    return (ob, aux) if save_aux else ob
