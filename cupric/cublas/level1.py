"""BLAS level 1 on the GPU: vector-vector operations (axpy, dot, norms, rotations...).

Vectors are 1-d device arrays with a positive stride (the BLAS increment). Each routine
is written once and picks its C symbol (``cublasSaxpy``, ``cublasZaxpy``...) from the
operands' dtype. Scalar results come back as Python numbers in host pointer mode (the
call then waits for the GPU), or are written to a device array ``out`` in device mode.
"""

from __future__ import annotations

import numpy as np

from . import _validate as V
from .handle import invoke, resolve

__all__ = ["axpy", "dot", "dotu", "dotc", "nrm2", "asum", "iamax", "iamin", "scal", "copy",
           "swap", "rot", "rotg", "rotm", "rotmg"]

# Arrays, not pointers, so that a list initializer and cell[0] work for every precision.
_RESULT_CTYPE = {"S": "float[1]", "D": "double[1]", "C": "float[2]", "Z": "double[2]"}


def _vec(h, obj, name, writable=False):
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    n, inc = V.vector(buf, name)
    return buf, n, inc


def _pair(h, routine, x, y, y_writable=True, x_writable=False):
    xb, n, incx = _vec(h, x, "x", x_writable)
    yb, ny, incy = _vec(h, y, "y", y_writable)
    if n != ny:
        raise ValueError(f"{routine}: x has {n} elements but y has {ny}")
    prefix = V.same_prefix(routine, ("x", xb), ("y", yb))
    return prefix, xb, yb, n, incx, incy


def _result(h, prefix, out, name):
    """(keep-alive, address, reader) for a scalar result in the handle's pointer mode."""
    if h._device_scalars:
        if out is None:
            raise ValueError(f"{name}: in device pointer mode the result goes to a device "
                             f"array; pass out=")
        buf = V.device_array(out, "out", h.stream, writable=True)
        want = V.SCALAR_DTYPE[prefix]
        if buf.size != 1 or buf.dtype != want:
            raise TypeError(f"{name}: out must be a device array of one {want}, got shape "
                            f"{buf.shape} dtype {buf.dtype}")
        h.check_device(buf, "out")
        return buf, buf.ptr, None
    if out is not None:
        raise ValueError(f"{name}: out= is for device pointer mode; in host mode the "
                         f"result is returned")
    from . import lib
    ffi = lib.ffi
    cell = ffi.new(_RESULT_CTYPE[prefix])
    if prefix in "SD":
        return cell, int(ffi.cast("uintptr_t", cell)), lambda: float(cell[0])
    return cell, int(ffi.cast("uintptr_t", cell)), lambda: complex(cell[0], cell[1])


def axpy(alpha, x, y, *, handle=None) -> None:
    """``y += alpha * x`` (``cublas<t>axpy``).

    Parameters
    ----------
    alpha : number, or a one-element device array in device pointer mode
    x : device array, 1-d
    y : device array, 1-d, same length and dtype; updated in place
    handle : Handle, optional
        Defaults to the calling thread's default handle.

    Raises
    ------
    TypeError
        Host arrays, unsupported or mixed dtypes, a complex alpha for real vectors.
    ValueError
        Lengths differ, non-1-d operands, zero or negative strides, read-only y.
    ClosedError
        A closed handle or buffer.
    """
    h = resolve(handle)
    prefix, xb, yb, n, incx, incy = _pair(h, "axpy", x, y)
    keep, a = h.scalar(prefix, alpha, "alpha")
    invoke(V.routine_name("axpy", prefix, V.needs_64(n, incx, incy)),
           h.ready(), n, a, xb.ptr, incx, yb.ptr, incy)


def _dot(routine, x, y, out, handle):
    h = resolve(handle)
    prefix, xb, yb, n, incx, incy = _pair(h, routine, x, y, y_writable=False)
    keep, res, read = _result(h, prefix, out, routine)
    invoke(V.routine_name(routine, prefix, V.needs_64(n, incx, incy)),
           h.ready(), n, xb.ptr, incx, yb.ptr, incy, res)
    return keep if read is None else read()


def dot(x, y, *, out=None, handle=None):
    """Dot product ``sum(x * y)`` without conjugation (``cublas<t>dot``, ``dotu``
    for complex vectors), as `numpy.dot` of two vectors.

    Returns
    -------
    float or complex
        In host pointer mode (the call waits for the GPU).
    DeviceBuffer
        `out`, in device pointer mode (a one-element device array of x's dtype).
    """
    prefix = V.PREFIX.get(getattr(x, "dtype", None))
    return _dot("dotu" if prefix in ("C", "Z") else "dot", x, y, out, handle)


def dotu(x, y, *, out=None, handle=None):
    """Unconjugated complex dot product ``sum(x * y)`` (``cublas<c|z>dotu``)."""
    return _dot("dotu", x, y, out, handle)


def dotc(x, y, *, out=None, handle=None):
    """Conjugated complex dot product ``sum(conj(x) * y)`` (``cublas<c|z>dotc``),
    as `numpy.vdot`."""
    return _dot("dotc", x, y, out, handle)


def _reduce(routine, x, out, handle):
    h = resolve(handle)
    xb, n, incx = _vec(h, x, "x")
    prefix = V.same_prefix(routine, ("x", xb))
    keep, res, read = _result(h, V.REAL_PREFIX[prefix], out, routine)
    invoke(V.routine_name(routine, prefix, V.needs_64(n, incx)), h.ready(), n, xb.ptr,
           incx, res)
    return keep if read is None else read()


def nrm2(x, *, out=None, handle=None):
    """Euclidean norm ``sqrt(sum(|x|**2))`` (``cublas<t>nrm2``, ``Scnrm2``/``Dznrm2``).

    The result is real (float32 for float32 and complex64 vectors). Returns as `dot`.
    """
    return _reduce("nrm2", x, out, handle)


def asum(x, *, out=None, handle=None):
    """Sum of magnitudes ``sum(|x|)``; for complex vectors ``sum(|re| + |im|)`` as BLAS
    defines it (``cublas<t>asum``). Returns as `nrm2`."""
    return _reduce("asum", x, out, handle)


def _index(routine, x, out, handle):
    h = resolve(handle)
    xb, n, incx = _vec(h, x, "x")
    prefix = V.same_prefix(routine, ("x", xb))
    big = V.needs_64(n, incx)
    if h._device_scalars:
        if out is None:
            raise ValueError(f"{routine}: in device pointer mode the index goes to a device "
                             f"array; pass out=")
        buf = V.device_array(out, "out", h.stream, writable=True)
        want = np.dtype(np.int64 if big else np.int32)
        if buf.size != 1 or buf.dtype != want:
            raise TypeError(f"{routine}: out must be a device array of one {want}, got "
                            f"shape {buf.shape} dtype {buf.dtype}")
        h.check_device(buf, "out")
        invoke(V.routine_name(routine, prefix, big), h.ready(), n, xb.ptr, incx, buf.ptr)
        return buf
    if out is not None:
        raise ValueError(f"{routine}: out= is for device pointer mode; in host mode the "
                         f"index is returned")
    from . import lib
    ffi = lib.ffi
    cell = ffi.new("int64_t[1]" if big else "int[1]")
    invoke(V.routine_name(routine, prefix, big), h.ready(), n, xb.ptr, incx,
           int(ffi.cast("uintptr_t", cell)))
    return int(cell[0]) - 1


def iamax(x, *, out=None, handle=None):
    """Index of the element of largest magnitude (``cublasI<t>amax``; for complex,
    largest ``|re| + |im|``).

    Returns
    -------
    int
        0-based, in host pointer mode; -1 for an empty vector.
    DeviceBuffer
        `out` in device pointer mode, holding cuBLAS's **1-based** index (int32, or
        int64 for vectors beyond 2**31 - 1 elements).
    """
    return _index("iamax", x, out, handle)


def iamin(x, *, out=None, handle=None):
    """Index of the element of smallest magnitude; see `iamax`."""
    return _index("iamin", x, out, handle)


def scal(alpha, x, *, handle=None) -> None:
    """``x *= alpha`` in place (``cublas<t>scal``; ``Csscal``/``Zdscal`` when x is
    complex and alpha real, which is cheaper)."""
    h = resolve(handle)
    xb, n, incx = _vec(h, x, "x", writable=True)
    prefix = V.same_prefix("scal", ("x", xb))
    routine = "scal"
    if prefix in ("C", "Z"):
        if h._device_scalars:
            real = getattr(alpha, "dtype", None) == V.SCALAR_DTYPE[V.REAL_PREFIX[prefix]]
        else:
            real = not isinstance(alpha, (complex, np.complexfloating))
        if real:
            routine = "scal_real"
    keep, a = h.scalar(V.REAL_PREFIX[prefix] if routine == "scal_real" else prefix,
                       alpha, "alpha")
    invoke(V.routine_name(routine, prefix, V.needs_64(n, incx)), h.ready(), n, a, xb.ptr,
           incx)


def copy(x, y, *, handle=None) -> None:
    """``y[:] = x`` (``cublas<t>copy``); strided vectors welcome."""
    h = resolve(handle)
    prefix, xb, yb, n, incx, incy = _pair(h, "copy", x, y)
    invoke(V.routine_name("copy", prefix, V.needs_64(n, incx, incy)), h.ready(), n,
           xb.ptr, incx, yb.ptr, incy)


def swap(x, y, *, handle=None) -> None:
    """Exchange the contents of x and y (``cublas<t>swap``)."""
    h = resolve(handle)
    prefix, xb, yb, n, incx, incy = _pair(h, "swap", x, y, x_writable=True)
    invoke(V.routine_name("swap", prefix, V.needs_64(n, incx, incy)), h.ready(), n,
           xb.ptr, incx, yb.ptr, incy)


def rot(x, y, c, s, *, handle=None) -> None:
    """Apply a plane rotation in place: ``x, y = c*x + s*y, -conj(s)*x + c*y``
    (``cublas<t>rot``; ``Csrot``/``Zdrot`` for complex vectors with a real s).

    Parameters
    ----------
    c : real number (or one-element device array of the real dtype, device mode)
    s : number; complex allowed for complex vectors
    """
    h = resolve(handle)
    prefix, xb, yb, n, incx, incy = _pair(h, "rot", x, y, x_writable=True)
    real = V.REAL_PREFIX[prefix]
    routine = "rot"
    if prefix in ("C", "Z"):
        if h._device_scalars:
            s_real = getattr(s, "dtype", None) == V.SCALAR_DTYPE[real]
        else:
            s_real = not isinstance(s, (complex, np.complexfloating))
        if s_real:
            routine = "rot_real"
    keep_c, cp = h.scalar(real, c, "c")
    keep_s, sp = h.scalar(real if routine == "rot_real" or prefix in "SD" else prefix,
                          s, "s")
    invoke(V.routine_name(routine, prefix, V.needs_64(n, incx, incy)), h.ready(), n,
           xb.ptr, incx, yb.ptr, incy, cp, sp)


def _host_cells(ffi, ctype, values):
    cells = [ffi.new(ctype, v) for v in values]
    return cells, [int(ffi.cast("uintptr_t", c)) for c in cells]


def rotg(a, b, *, dtype=np.float64, handle=None):
    """Construct a Givens rotation that zeroes b: ``[c s; -conj(s) c] @ [a; b] = [r; 0]``
    (``cublas<t>rotg``).

    Parameters
    ----------
    a, b : numbers (host mode) or one-element device arrays (device mode)
    dtype : float32, float64, complex64 or complex128
        Precision in host mode (in device mode, a's dtype).

    Returns
    -------
    (r, z, c, s)
        Host mode: Python numbers (z is the BLAS reconstruction value; for complex
        inputs cuBLAS leaves b unchanged and z is b). Device mode: `a` holds r, `b` z,
        and c, s are returned as new one-element device arrays.
    """
    h = resolve(handle)
    if h._device_scalars:
        from cupric.runtime.memory import empty
        ab = V.device_array(a, "a", h.stream, writable=True)
        bb = V.device_array(b, "b", h.stream, writable=True)
        prefix = V.same_prefix("rotg", ("a", ab), ("b", bb))
        for name, buf in (("a", ab), ("b", bb)):
            if buf.size != 1:
                raise ValueError(f"rotg: {name} must hold one element, got shape {buf.shape}")
            h.check_device(buf, name)
        c = empty((), V.SCALAR_DTYPE[V.REAL_PREFIX[prefix]], stream=h.stream or None)
        s = empty((), V.SCALAR_DTYPE[prefix], stream=h.stream or None)
        invoke(V.routine_name("rotg", prefix), h.ready(), ab.ptr, bb.ptr, c.ptr, s.ptr)
        return ab, bb, c, s
    prefix = V.PREFIX.get(np.dtype(dtype))
    if prefix is None:
        raise TypeError(f"rotg: dtype must be float32, float64, complex64 or complex128, "
                        f"got {np.dtype(dtype)}")
    from . import lib
    ffi = lib.ffi
    va = _num(a, prefix, "a")
    vb = _num(b, prefix, "b")
    full, real = _RESULT_CTYPE[prefix], _RESULT_CTYPE[V.REAL_PREFIX[prefix]]
    cells, ptrs = _host_cells(ffi, full, [_init(va, prefix), _init(vb, prefix)])
    more, more_ptrs = _host_cells(ffi, real, [None])
    s_cells, s_ptrs = _host_cells(ffi, full, [None])
    invoke(V.routine_name("rotg", prefix), h.ready(), ptrs[0], ptrs[1], more_ptrs[0],
           s_ptrs[0])
    read = _reader(prefix)
    return read(cells[0]), read(cells[1]), float(more[0][0]), read(s_cells[0])


def _num(value, prefix, name):
    from .handle import _number
    return _number(value, prefix, name)


def _init(value, prefix):
    return [value] if prefix in "SD" else [value.real, value.imag]


def _reader(prefix):
    if prefix in "SD":
        return lambda cell: float(cell[0])
    return lambda cell: complex(cell[0], cell[1])


def _param(h, param, prefix, writable):
    """(keep-alive, address) of rotm/rotmg's 5-element parameter array."""
    if h._device_scalars:
        buf = V.device_array(param, "param", h.stream, writable=writable)
        if buf.shape != (5,) or buf.dtype != V.SCALAR_DTYPE[prefix] or (
                buf.strides[0] != buf.itemsize):
            raise ValueError(f"param must be a contiguous device array of 5 "
                             f"{V.SCALAR_DTYPE[prefix]}, got shape {buf.shape} dtype "
                             f"{buf.dtype}")
        h.check_device(buf, "param")
        return buf, buf.ptr
    host = np.ascontiguousarray(param, dtype=V.SCALAR_DTYPE[prefix])
    if host.shape != (5,):
        raise ValueError(f"param must hold 5 values (flag, h11, h21, h12, h22), got shape "
                         f"{host.shape}")
    return host, host.ctypes.data


def rotm(x, y, param, *, handle=None) -> None:
    """Apply a modified Givens rotation H to (x, y) in place (``cublas<s|d>rotm``).

    Parameters
    ----------
    param : 5 numbers (host mode) or a 5-element device array (device mode)
        ``(flag, h11, h21, h12, h22)`` as produced by `rotmg`; flag -1, 0, 1 or -2
        selects which entries of H are used, as in reference BLAS.
    """
    h = resolve(handle)
    prefix, xb, yb, n, incx, incy = _pair(h, "rotm", x, y, x_writable=True)
    keep, p = _param(h, param, prefix, writable=False)
    invoke(V.routine_name("rotm", prefix, V.needs_64(n, incx, incy)), h.ready(), n,
           xb.ptr, incx, yb.ptr, incy, p)


def rotmg(d1, d2, x1, y1, *, dtype=np.float64, param=None, handle=None):
    """Construct a modified Givens rotation (``cublas<s|d>rotmg``).

    Host mode: numbers in, ``(d1, d2, x1, param)`` out, `param` a NumPy array of 5.
    Device mode: d1, d2, x1, y1 are one-element device arrays (d1, d2, x1 updated in
    place) and `param` a 5-element device array that receives the result.
    """
    h = resolve(handle)
    if h._device_scalars:
        bufs = []
        for name, value in (("d1", d1), ("d2", d2), ("x1", x1), ("y1", y1)):
            buf = V.device_array(value, name, h.stream, writable=name != "y1")
            if buf.size != 1:
                raise ValueError(f"rotmg: {name} must hold one element, got {buf.shape}")
            h.check_device(buf, name)
            bufs.append((name, buf))
        prefix = V.same_prefix("rotmg", *bufs)
        if param is None:
            raise ValueError("rotmg: in device pointer mode pass param=, a 5-element "
                             "device array for the result")
        keep, p = _param(h, param, prefix, writable=True)
        invoke(V.routine_name("rotmg", prefix), h.ready(), *(b.ptr for _, b in bufs), p)
        return param
    prefix = V.PREFIX.get(np.dtype(dtype))
    if prefix not in ("S", "D"):
        raise TypeError(f"rotmg is defined for float32 and float64, got {np.dtype(dtype)}")
    from . import lib
    ffi = lib.ffi
    values = [_num(v, prefix, n) for v, n in ((d1, "d1"), (d2, "d2"), (x1, "x1"),
                                                  (y1, "y1"))]
    cells, ptrs = _host_cells(ffi, _RESULT_CTYPE[prefix], [[v] for v in values])
    out = np.zeros(5, V.SCALAR_DTYPE[prefix])
    invoke(V.routine_name("rotmg", prefix), h.ready(), *ptrs, out.ctypes.data)
    return float(cells[0][0]), float(cells[1][0]), float(cells[2][0]), out
