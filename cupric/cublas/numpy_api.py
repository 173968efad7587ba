"""NumPy's `matmul` on device arrays of any kind, computed by cuBLAS.

NumPy arrays are row-major (C order) and cuBLAS is column-major. A row-major matrix is,
byte for byte, the column-major matrix of its transpose, so ``C = A @ B`` in C order is
computed as ``C.T = B.T @ A.T`` in column-major order: the operands swap places and no
data is copied. Strided views, Fortran-ordered operands, vectors and broadcast batches
(``(..., m, k) @ (..., k, n)``) map onto the right cuBLAS call the same way.
"""

from __future__ import annotations

import numpy as np

from cupric.runtime import intake
from cupric.runtime.memory import DeviceBuffer, extent

from . import _fastgemm
from . import _validate as V
from .gemm_ex import DATA_TYPES
from .handle import _FAST, fast_function, host_scalar, resolve

__all__ = ["matmul"]

_F32 = np.dtype(np.float32)
_ONE, _ZERO = 1, 0  # matmul's default scalars, recognized by identity on the hot path
# dtype -> (precision letter of the classic routines) for the direct path.
_DIRECT = V.PREFIX
# dtype -> (A/B type, C type, result dtype, compute type, scale letter) for the Ex path.
_EX = {
    np.dtype(np.float16): ("f16", "f16", np.dtype(np.float16), 68, "S"),
    np.dtype(np.int8): ("i8", "i32", np.dtype(np.int32), 72, "I"),
}
_PRECISIONS = {None: None, "default": None, "highest": None, "tf32": 77,
               "fast_bf16": 75, "fast_f16": 74}
# cudaDataType_t by short name.
_CUDA_TYPE = {name: code for name, (code, _size) in DATA_TYPES.items()}


def _ex_route(dtype):
    route = _EX.get(dtype)
    if route is None and dtype.name == "bfloat16":  # ml_dtypes, recognized by name
        route = ("bf16", "bf16", dtype, 68, "S")
    return route


# Element types NumPy lacks, by the dtype name a PyTorch tensor reports. PyTorch
# exports such tensors with a raw "V" typestr (or not at all); the name says what the
# bytes are.
_FOREIGN = {"torch.bfloat16": ("bf16", "int16"), "torch.float8_e4m3fn": ("f8e4m3", "uint8"),
            "torch.float8_e5m2": ("f8e5m2", "uint8")}


def _operand(obj, name, stream, multi=True):
    """(layout, element type override or None) of an argument, read through the runtime's
    intake layer (`cupric.runtime.intake`): the DeviceBuffer itself, or an `ArrayInfo`
    (pointer, shape, strides, dtype, device, read-only) of any other device array, with
    the handle's stream ordered after the producer's. Both answer the same attributes.

    A PyTorch bfloat16/fp8 tensor arrives as a raw 2- or 1-byte buffer: its element type
    ("bf16", ...) comes from the tensor's dtype name; a CuPy bfloat16 array (``"<V2"``)
    is bfloat16 by its ml_dtypes dtype or its DLPack export (`_validate.says_bfloat16`).
    """
    if obj.__class__ is DeviceBuffer:
        if obj.allocation.closed:
            intake.check_open(obj, name)
        return obj, None
    try:
        info = intake.array_info(obj, stream, name=name, with_device=multi)
    except TypeError:
        foreign = _FOREIGN.get(str(getattr(obj, "dtype", "")))
        if foreign is None or not hasattr(obj, "view"):
            raise
        # The exporter refused the dtype: view the same bytes as an integer type.
        import sys
        torch = sys.modules["torch"]
        return intake.array_info(obj.view(getattr(torch, foreign[1])), stream,
                                 name=name, with_device=multi), foreign[0]
    if info.dtype.kind != "V":
        return info, None
    foreign = _FOREIGN.get(info.torch_dtype)
    if foreign is not None and info.itemsize == (2 if foreign[0] == "bf16" else 1):
        return info, foreign[0]
    if info.itemsize == 2 and V.says_bfloat16(obj, stream):  # CuPy's bfloat16, DLPack's
        return info, "bf16"
    return info, None


def _buffer(obj, name, stream):
    """`_operand` as a DeviceBuffer, for the functions that take views of it."""
    buf, element = _operand(obj, name, stream)
    return (buf if buf.__class__ is DeviceBuffer else buf.as_buffer()), element


def _layout(shape, strides, item, name):
    """(row_major, ld) of a 2-d (rows, cols) layout that cuBLAS can address.

    Row-major means unit stride along a row: the column-major matrix of the transpose.
    """
    r, c = shape
    s0, s1 = strides
    if c <= 1 or s1 == item:
        if r <= 1:
            return True, c if c > 1 else 1
        ld, rest = divmod(s0, item)
        if not rest and ld >= c and ld > 0:
            return True, ld
    if r <= 1 or s0 == item:
        if c <= 1:
            return False, r if r > 1 else 1
        ld, rest = divmod(s1, item)
        if not rest and ld >= r and ld > 0:
            return False, ld
    raise ValueError(f"{name}: a {r}x{c} matrix with byte strides {strides} has no unit "
                     f"stride along rows or columns (or overlapping ones); cuBLAS cannot "
                     f"address it - make it contiguous first")


def _span(buf):
    low, high = extent(buf.shape, buf.strides, buf.itemsize)
    return buf.ptr + low, buf.ptr + high


def _check_alias(out, *inputs):
    o_low, o_high = _span(out)
    if o_low == o_high:
        return
    for name, buf in inputs:
        low, high = _span(buf)
        if low < o_high and o_low < high:
            raise ValueError(f"out overlaps {name}; cuBLAS reads the inputs while writing "
                             f"out - use a separate output array")


def _uniform(shape, strides):
    """The single stride (bytes) that walks a batch in C order, or None if none does."""
    stride = None
    expected = None
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if stride is None:
            stride, expected = s, s * n
        elif s != expected:
            return None
        else:
            expected = s * n
    return 0 if stride is None else stride


def _batch_strides(buf, batch_shape, name):
    """Byte strides of `buf`'s batch axes broadcast to `batch_shape` (0 where broadcast)."""
    own = buf.shape[:-2]
    own_strides = buf.strides[:-2]
    pad = len(batch_shape) - len(own)
    out = [0] * pad
    for n, s, want in zip(own, own_strides, batch_shape[pad:]):
        if n == want:
            out.append(s if n != 1 else 0)
        elif n == 1:
            out.append(0)
        else:
            raise ValueError(f"matmul: batch shapes do not broadcast ({name} has "
                             f"{buf.shape[:-2]}, result {batch_shape})")
    return tuple(out)


def matmul(a, b, out=None, alpha=_ONE, beta=_ZERO, *, precision=None, handle=None):
    """Matrix product of two device arrays with NumPy's `matmul` semantics.

    ``out = alpha * (a @ b) + beta * out``, computed by one cuBLAS call without copies.

    Parameters
    ----------
    a, b : device arrays (DeviceBuffer, PyTorch, CuPy, any CAI/DLPack array)
        1-d (a vector), 2-d, or N-d stacks of matrices whose batch axes broadcast.
        Any layout with unit stride along rows or columns: C-order, Fortran-order,
        transposed views, slices with a leading dimension.
        dtypes: float32, float64, complex64, complex128 (classic routines), float16,
        bfloat16 (float32 accumulation, same-type result) and int8 (int32 result).
    out : device array, optional
        Of the result's shape and dtype; allocated C-ordered (in stream order on the
        handle's stream) when not given. Must not overlap a or b.
    alpha, beta : numbers
        Scalars of the product; `beta` scales `out`'s previous contents (0 does not
        read them). In device pointer mode, one-element device arrays.
    precision : {None, "tf32", "fast_bf16", "fast_f16"}, optional
        For float32: let tensor cores use TF32 (or bf16/f16 splits) with float32
        accumulation. None keeps the handle's math mode.
    handle : Handle, optional
        Its stream and device; the calling thread's default handle when None.

    Returns
    -------
    DeviceBuffer or `out`
        The result; its ``stream`` is the handle's stream.

    Raises
    ------
    TypeError
        Host arrays, different or unsupported dtypes.
    ValueError
        Shapes that do not match or broadcast, layouts cuBLAS cannot address, a
        wrong-shaped or overlapping `out`, a read-only `out`.

    Cost
    ----
    A repeated 2-d call on cupric buffers replays its checked plan in one C call
    (`cupric.cublas._fastgemm`). Small float32 problems go to ``cublasLtMatmul`` with
    a cached algorithm, and the call adds little host time to cuBLASLt's own. Without
    `out`, the call adds the runtime's stream-ordered allocation. Host costs beside
    cuBLAS's floors, PyTorch and CuPy: BENCHMARKS.md (benchmarks/gemm.py, host_cost.py).
    Batches whose axes do not collapse to one stride per operand use
    ``cublasGemmBatched`` with pointer arrays uploaded per call.

    Examples
    --------
    >>> c = cublas.matmul(a, b)                                # doctest: +SKIP
    >>> cublas.matmul(a, b.T, out=c, beta=1.0)   # c += a @ b.T, no transpose copy
    """
    if precision is None:
        fast = _c_matmul  # the compiled replay of a checked plan; None: take this path
        if fast is not None:
            done = fast(a, b, out, alpha, beta, handle)
            if done is not None:
                return done
    h = resolve(handle)
    if (precision is None and type(out) is DeviceBuffer and type(a) is DeviceBuffer
            and type(b) is DeviceBuffer):
        key = (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, out.dtype,
               out.shape, out.strides)
        plan = _plans.get(key)
        if plan is not None and not h._device_scalars and not h.multi_device:
            return _replay(plan, h, a, b, out, alpha, beta, key)
    stream = h.stream
    multi = h.multi_device
    ab, a_type = _operand(a, "a", stream, multi)
    bb, b_type = _operand(b, "b", stream, multi)
    out_read = None if out is None else _operand(out, "out", stream, multi)
    if (precision is None and a_type is None and b_type is None and _c_matmul is not None
            and (out is None or out_read[1] is None)):
        # Other kinds of arrays, read once by the intake layer: the compiled replay too.
        o_info = None if out is None else out_read[0]
        done = _c_matmul(ab, bb, o_info, alpha, beta, h)
        if done is not None:
            if ab.__class__ is not DeviceBuffer:  # PyTorch, CuPy: next time read in C
                _fastgemm.file_foreign(h, ab, bb, o_info, (a, b, out))
            return done if out is None else out
    if out is not None:
        if (precision is None and a_type is None and out_read[1] is None
                and not h._device_scalars and not h.multi_device):
            # Any array kind replays a plan checked before for the same layouts.
            ob = out_read[0]
            key = (ab.dtype, ab.shape, ab.strides, bb.dtype, bb.shape, bb.strides,
                   ob.dtype, ob.shape, ob.strides)
            plan = _plans.get(key)
            if plan is not None and b_type is None:
                _replay(plan, h, ab, bb, ob, alpha, beta, key)
                return out
    dtype = ab.dtype
    if bb.dtype != dtype or a_type != b_type:
        raise TypeError(f"matmul: a is {a_type or dtype} but b is {b_type or bb.dtype}; "
                        f"convert one of them first")
    a_nd, b_nd = ab.ndim, bb.ndim
    if a_nd == 0 or b_nd == 0:
        raise ValueError("matmul: operands must be at least 1-d (use scal/axpy for "
                         "scalars)")
    prefix = _DIRECT.get(dtype) if a_type is None else None
    if a_type is not None and a_type != "bf16":
        raise TypeError(f"matmul: {a_type} operands go through cupric.cublas.lt_matmul or "
                        f"gemm_ex (fp8 needs op(a) transposed, scales and a wider output)")
    if prefix is None:
        route = _ex_route(dtype) if a_type is None else ("bf16", "bf16", dtype, 68, "S")
        if route is None:
            raise TypeError(f"matmul: dtype {dtype} is not supported (float16, bfloat16, "
                            f"float32, float64, complex64, complex128, int8)")
        result_dtype = route[2]
    else:
        route = None
        result_dtype = dtype
    compute = _PRECISIONS.get(precision, -1) if precision is not None else None
    if compute == -1:
        raise ValueError(f"precision must be one of None, 'tf32', 'fast_bf16', "
                         f"'fast_f16', got {precision!r}")
    if compute is not None:
        if dtype != _F32:
            raise ValueError(f"precision={precision!r} applies to float32, not {dtype}")
        route = ("f32", "f32", _F32, compute, "S")
        prefix = None

    item = ab.itemsize
    # Vectors become 1-row / 1-column matrices (NumPy's promotion), removed at the end.
    if a_nd == 1:
        (k,), (s,) = ab.shape, ab.strides
        a_shape, a_strides = (1, k), (s * k if s else item, s)
    else:
        a_shape, a_strides = ab.shape[-2:], ab.strides[-2:]
    if b_nd == 1:
        (k,), (s,) = bb.shape, bb.strides
        b_shape, b_strides = (k, 1), (s, s * k if s else item)
    else:
        b_shape, b_strides = bb.shape[-2:], bb.strides[-2:]
    m, k = a_shape
    k2, n = b_shape
    if k != k2:
        raise ValueError(f"matmul: a is {ab.shape} and b is {bb.shape}; the contracted "
                         f"dimensions differ ({k} != {k2})")
    if a_nd <= 2 and b_nd <= 2:
        batch_shape = ()
    else:
        try:
            batch_shape = tuple(np.broadcast_shapes(ab.shape[:-2], bb.shape[:-2]))
        except ValueError:
            raise ValueError(f"matmul: batch shapes {ab.shape[:-2]} and {bb.shape[:-2]} "
                             f"do not broadcast") from None
    result_shape = batch_shape + ((m,) if a_nd > 1 else ()) + ((n,) if b_nd > 1 else ())

    if out is None:
        from cupric.runtime.memory import empty
        ob = empty(result_shape, result_dtype, stream=stream)
    else:
        ob, o_type = out_read
        if ob.readonly:
            raise ValueError("matmul: out is read-only")
        if ob.shape != result_shape or (ob.dtype != result_dtype if o_type is None
                                        else o_type != a_type):
            raise ValueError(f"matmul: out must have shape {result_shape} and dtype "
                             f"{a_type or result_dtype}, got {ob.shape} "
                             f"{o_type or ob.dtype}")
        h.check_device(ob, "out")
        _check_alias(ob, ("a", ab), ("b", bb))
    h.check_device(ab, "a")
    h.check_device(bb, "b")

    # The output as a (batch..., m, n) layout.
    o_item = ob.itemsize
    if a_nd == 1 and b_nd == 1:
        c_shape, c_strides = (1, 1), (o_item, o_item)
    elif a_nd == 1:
        s = ob.strides[-1]
        c_shape, c_strides = (1, n), (s * n if s else o_item, s)
    elif b_nd == 1:
        s = ob.strides[-1]
        c_shape, c_strides = (m, 1), (s, s * m if s else o_item)
    else:
        c_shape, c_strides = (m, n), ob.strides[-2:]

    ra, lda = _layout(a_shape, a_strides, item, "a")
    rb, ldb = _layout(b_shape, b_strides, item, "b")
    rc, ldc = _layout(c_shape, c_strides, o_item, "out")
    if ob.size == 0:
        return _finish(ob, out, h)

    if h._device_scalars:
        letter = prefix if prefix is not None else route[4]
        keep_a, pa = h.scalar(letter, alpha, "alpha")
        keep_b, pb = h.scalar(letter, beta, "beta")
    else:
        letter = prefix if prefix is not None else route[4]
        keep_a, pa = host_scalar(letter, alpha, "alpha")
        keep_b, pb = host_scalar(letter, beta, "beta")

    # Column-major call: C = op(A) op(B) if out is column-major, else C.T = B.T A.T.
    if rc:
        first, second = (bb, rb, ldb, n), (ab, ra, lda, m)
        mm, nn = n, m
    else:
        first, second = (ab, not ra, lda, m), (bb, not rb, ldb, n)
        mm, nn = m, n
    # For the C.T form an operand stored row-major is used as is (N), else transposed.
    op1 = 0 if first[1] else 1
    op2 = 0 if second[1] else 1
    p1, ld1 = first[0].ptr, first[2]
    p2, ld2 = second[0].ptr, second[2]
    raw = h.ready()

    if not batch_shape:
        if prefix is not None:
            name = V.routine_name("gemm", prefix, V.needs_64(mm, nn, k, ld1, ld2, ldc))
            fn = _FAST.get(name) or fast_function(name)
            status = fn(raw, op1, op2, mm, nn, k, pa, p1, ld1, p2, ld2, pb, ob.ptr, ldc)
            ex = None
        else:
            t_in, t_out = _CUDA_TYPE[route[0]], _CUDA_TYPE[route[1]]
            name = "cublasGemmEx_64" if V.needs_64(mm, nn, k, ld1, ld2, ldc) else "cublasGemmEx"
            fn = _FAST.get(name) or fast_function(name)
            status = fn(raw, op1, op2, mm, nn, k, pa, p1, t_in, ld1, p2, t_in, ld2, pb,
                        ob.ptr, t_out, ldc, route[3], -1)
            ex = (t_in, t_out, route[3])
        if status:
            from . import lib
            lib.check(status)
        if (out is not None and a_type is None and compute is None
                and len(_plans) < _PLAN_LIMIT):
            _remember(ab, bb, ob, fn, rc, op1, op2, mm, nn, k, ld1, ld2, ldc, letter, ex)
        if compute is None:  # DeviceBuffers and intake-read arrays alike
            _remember_compiled(h, ab, bb, None if out is None else ob, ob, fn, rc, op1, op2,
                               mm, nn, k, ld1, ld2, ldc, letter, p1, p2, ex,
                               None if a_type is None else (a, b, out))
        return _finish(ob, out, h)

    # Batches: one stride per operand when the batch axes collapse, else pointer arrays.
    sa_b = _batch_strides(ab, batch_shape, "a") if a_nd > 2 else (0,) * len(batch_shape)
    sb_b = _batch_strides(bb, batch_shape, "b") if b_nd > 2 else (0,) * len(batch_shape)
    so_b = ob.strides[:len(batch_shape)]
    batch = 1
    for size in batch_shape:
        batch *= size
    ua, ub, uo = (_uniform(batch_shape, sa_b), _uniform(batch_shape, sb_b),
                  _uniform(batch_shape, so_b))
    s_first, s_second = (ub, ua) if rc else (ua, ub)
    big = V.needs_64(mm, nn, k, ld1, ld2, ldc, batch)
    if None not in (ua, ub, uo):
        if batch > 1 and uo == 0:
            raise ValueError("matmul: out repeats one matrix over the batch (stride 0); "
                             "it must hold every result")
        st1, st2, sto = s_first // item, s_second // item, uo // o_item
        if prefix is not None:
            name = V.routine_name("gemmStridedBatched", prefix, big)
            fn = _FAST.get(name) or fast_function(name)
            status = fn(raw, op1, op2, mm, nn, k, pa, p1, ld1, st1, p2, ld2, st2, pb,
                        ob.ptr, ldc, sto, batch)
        else:
            t_in, t_out = _CUDA_TYPE[route[0]], _CUDA_TYPE[route[1]]
            name = "cublasGemmStridedBatchedEx_64" if big else "cublasGemmStridedBatchedEx"
            fn = _FAST.get(name) or fast_function(name)
            status = fn(raw, op1, op2, mm, nn, k, pa, p1, t_in, ld1, st1, p2, t_in, ld2,
                        st2, pb, ob.ptr, t_out, ldc, sto, batch, route[3], -1)
        if status:
            from . import lib
            lib.check(status)
        return _finish(ob, out, h)
    _pointer_batched(h, prefix, route, big, op1, op2, mm, nn, k, pa, pb, ld1, ld2, ldc,
                     (first[0], sb_b if rc else sa_b), (second[0], sa_b if rc else sb_b),
                     ob, so_b, batch_shape)
    return _finish(ob, out, h)


# Decisions of 2-d matmuls on cupric buffers, by (dtype, shapes, strides) of the three
# operands: a repeated call skips every check that depends only on those (layouts,
# leading dimensions, dispatch) and replays the C call.
_plans: dict[tuple, tuple] = {}
_PLAN_LIMIT = 4096


# The compiled path (cupric.cublas._fastgemm): its matmul, or `_first_call`, which loads
# it on the first matmul and rebinds this name (None when it cannot be built).
_c_matmul = _fastgemm._first_call


def _remember_compiled(h, a, b, out, ob, fn, swap, op1, op2, mm, nn, k, ld1, ld2, ldc,
                       letter, p1, p2, ex=None, foreign=None):
    """Record the compiled plan of a checked 2-d call; allocating calls (out None) keep
    the result's shape and dtype, and need no alias check. `ex`: the GemmEx types of a
    float16/bfloat16 call. `foreign`: the caller's (a, b, out) when their element type
    came from the arrays themselves (PyTorch's or CuPy's bfloat16, whose interface says
    only "<V2"): the plan is then filed under the arrays' own key only."""
    if out is None:
        key = (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, None, None, None)
        result = (ob.shape, ob.dtype)
    else:
        key = (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, out.dtype,
               out.shape, out.strides)
        result = None
    spans = _relative_span(a) + _relative_span(b) + _relative_span(ob)
    plan = _fastgemm.remember(h, None if foreign else key, fn, swap=swap,
                              alias=out is not None, op1=op1, op2=op2, m=mm, n=nn, k=k,
                              ld1=ld1, ld2=ld2, ldc=ldc, letter=letter,
                              ptrs=(p1, p2, ob.ptr), spans=spans, result=result, ex=ex)
    if foreign and plan is not None and a.__class__ is not DeviceBuffer:
        _fastgemm.file_foreign(h, a, b, out, foreign, plan)


def _relative_span(buf):
    low, high = extent(buf.shape, buf.strides, buf.itemsize)
    return low, high


def _remember(a, b, out, fn, swap, op1, op2, mm, nn, k, ld1, ld2, ldc, letter, ex):
    key = (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, out.dtype, out.shape,
           out.strides)
    spans = _relative_span(a) + _relative_span(b) + _relative_span(out)
    # alpha=1, beta=0 (the defaults) resolved once; the tuple keeps the buffers alive.
    defaults = (host_scalar(letter, _ONE, "alpha"), host_scalar(letter, _ZERO, "beta"))
    _plans[key] = (fn, swap, op1, op2, mm, nn, k, ld1, ld2, ldc, letter, ex, spans,
                   defaults)


def _replay(plan, h, a, b, out, alpha, beta, key):
    """The Python replay of a repeated 2-d matmul: open/writable/alias checks, scalars,
    call. (The compiled path runs first; this one serves the calls it leaves, and makes
    its plan on a handle that has none for `key` yet.)"""
    fn, swap, op1, op2, mm, nn, k, ld1, ld2, ldc, letter, ex, spans, defaults = plan
    own = out.__class__ is DeviceBuffer  # else: layouts the intake layer read and checked
    if own and (a.allocation.closed or b.allocation.closed or out.allocation.closed):
        V.device_array(a, "a"), V.device_array(b, "b"), V.device_array(out, "out")
    if out.readonly:
        raise ValueError("matmul: out is read-only")
    pa_, pb_, po = a.ptr, b.ptr, out.ptr
    a_lo, a_hi, b_lo, b_hi, o_lo, o_hi = spans
    if o_lo != o_hi and ((pa_ + a_lo < po + o_hi and po + o_lo < pa_ + a_hi)
                         or (pb_ + b_lo < po + o_hi and po + o_lo < pb_ + b_hi)):
        _check_alias(out, ("a", a), ("b", b))
    if alpha is _ONE and beta is _ZERO:  # the default arguments themselves
        pa, pb = defaults[0][1], defaults[1][1]
    else:
        keep_a, pa = host_scalar(letter, alpha, "alpha")
        keep_b, pb = host_scalar(letter, beta, "beta")
    p1, p2 = (pb_, pa_) if swap else (pa_, pb_)
    if ex is None:
        status = fn(h.ready(), op1, op2, mm, nn, k, pa, p1, ld1, p2, ld2, pb, po, ldc)
    else:
        t_in, t_out, compute = ex
        status = fn(h.ready(), op1, op2, mm, nn, k, pa, p1, t_in, ld1, p2, t_in, ld2, pb,
                    po, t_out, ldc, compute, -1)
    if status:
        from . import lib
        lib.check(status)
    if own:
        out.ordering_stream = h.stream
    if ex is None and _c_matmul is not None and key not in h._fast_plans:
        _fastgemm.remember(h, key, fn, swap=swap, alias=True, op1=op1, op2=op2, m=mm, n=nn,
                           k=k, ld1=ld1, ld2=ld2, ldc=ldc, letter=letter, ptrs=(p1, p2, po),
                           spans=spans)
    return out


def _pointer_batched(h, prefix, route, big, op1, op2, mm, nn, k, pa, pb, ld1, ld2, ldc,
                     first, second, ob, so_b, batch_shape):
    from cupric.runtime.memory import to_device
    index = np.indices(batch_shape).reshape(len(batch_shape), -1)
    arrays = []
    for buf, strides in (first, second, (ob, so_b)):
        offsets = np.zeros(index.shape[1], np.int64)
        for axis, stride in enumerate(strides):
            offsets += index[axis] * stride
        arrays.append(to_device((offsets + buf.ptr).astype(np.uint64),
                                stream=h.stream))
    batch = index.shape[1]
    try:
        raw = h.ready()
        if prefix is not None:
            name = V.routine_name("gemmBatched", prefix, big)
            status = fast_function(name)(raw, op1, op2, mm, nn, k, pa, arrays[0].ptr, ld1,
                                         arrays[1].ptr, ld2, pb, arrays[2].ptr, ldc, batch)
        else:
            t_in, t_out = _CUDA_TYPE[route[0]], _CUDA_TYPE[route[1]]
            name = "cublasGemmBatchedEx_64" if big else "cublasGemmBatchedEx"
            status = fast_function(name)(raw, op1, op2, mm, nn, k, pa, arrays[0].ptr, t_in,
                                         ld1, arrays[1].ptr, t_in, ld2, pb, arrays[2].ptr,
                                         t_out, ldc, batch, route[3], -1)
        if status:
            from . import lib
            lib.check(status)
    finally:
        for arr in arrays:
            arr.close(stream=h.stream)


def _finish(ob, out, h):
    # Consumers of the result (CAI, DLPack) must order their reads after our stream.
    if type(ob) is DeviceBuffer:
        ob.ordering_stream = h.stream
    return ob if out is None or type(out) is DeviceBuffer else out
