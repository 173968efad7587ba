"""cuBLASLt matrix multiplication with fused epilogues and cached algorithm choice.

``cublasLtMatmul`` computes ``D = epilogue(alpha * op(A) @ op(B) + beta * C)`` where the
epilogue may add a bias vector, apply ReLU or GELU (saving what the backward pass needs
in an *aux* buffer), apply their derivatives, or reduce a bias gradient - all in the
GEMM's kernel. Each call needs descriptors and a heuristic search for an algorithm;
both are made once per problem (shapes, types, layouts, alignment, epilogue) and cached
on the handle as a `Plan`.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref

import numpy as np

from . import _validate as V
from .gemm_ex import DATA_TYPES, data_type_of
from .handle import fast_function, resolve

__all__ = ["lt_matmul", "EPILOGUES", "Epilogue", "aux_layout", "Plan", "plan_cache_info"]


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What an epilogue needs: its cublasLtEpilogue_t value, whether it reads a bias
    (``"in"``) or writes a bias gradient (``"out"``), and whether it writes (``"out"``)
    or reads (``"in"``) an aux buffer, which is a bit mask (ReLU) or has D's type
    (GELU)."""

    code: int
    bias: str | None = None
    aux: str | None = None
    aux_bitmask: bool = False
    bias_of_b: bool = False  # BGRADB: the gradient has n entries, not m


EPILOGUES = {
    "default": Epilogue(1),
    "relu": Epilogue(2),
    "relu_aux": Epilogue(130, aux="out", aux_bitmask=True),
    "bias": Epilogue(4, bias="in"),
    "relu_bias": Epilogue(6, bias="in"),
    "relu_aux_bias": Epilogue(134, bias="in", aux="out", aux_bitmask=True),
    "drelu": Epilogue(136, aux="in", aux_bitmask=True),
    "drelu_bgrad": Epilogue(152, bias="out", aux="in", aux_bitmask=True),
    "gelu": Epilogue(32),
    "gelu_aux": Epilogue(160, aux="out"),
    "gelu_bias": Epilogue(36, bias="in"),
    "gelu_aux_bias": Epilogue(164, bias="in", aux="out"),
    "dgelu": Epilogue(192, aux="in"),
    "dgelu_bgrad": Epilogue(208, bias="out", aux="in"),
    "bgrada": Epilogue(256, bias="out"),
    "bgradb": Epilogue(512, bias="out", bias_of_b=True),
}

# cublasLtMatmulDescAttributes_t / cublasLtMatrixLayoutAttribute_t /
# cublasLtMatmulPreferenceAttributes_t values (fixed by the C API; tested on the CPU).
_DESC = {"TRANSA": 3, "TRANSB": 4, "EPILOGUE": 7, "BIAS_POINTER": 8,
         "EPILOGUE_AUX_POINTER": 11, "EPILOGUE_AUX_LD": 12,
         "EPILOGUE_AUX_BATCH_STRIDE": 13, "BIAS_BATCH_STRIDE": 10, "A_SCALE_POINTER": 17,
         "B_SCALE_POINTER": 18, "D_SCALE_POINTER": 20, "BIAS_DATA_TYPE": 26}
_LAYOUT = {"BATCH_COUNT": 5, "STRIDED_BATCH_OFFSET": 6}
_PREF = {"MAX_WORKSPACE_BYTES": 1, "MIN_ALIGNMENT_A_BYTES": 5, "MIN_ALIGNMENT_B_BYTES": 6,
         "MIN_ALIGNMENT_C_BYTES": 7, "MIN_ALIGNMENT_D_BYTES": 8}
_COMPUTE = {"32F": 68, "tf32": 77, "32F_fast_tf32": 77, "32F_fast_16F": 74,
            "32F_fast_16BF": 75, "64F": 70, "32F_pedantic": 69}
_FLOAT_TYPES = ("f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2")
_FP8 = ("f8e4m3", "f8e5m2")


def aux_layout(epilogue: str, m: int, n: int, d_type: str) -> tuple[int, int]:
    """(leading dimension in elements, bytes) of the aux buffer an epilogue needs for an
    m x n (column-major) result: a bit mask with a leading dimension padded to 128 bits
    for ReLU, D's type with a leading dimension padded to 8 for GELU."""
    spec = EPILOGUES[epilogue]
    if spec.aux is None:
        return 0, 0
    if spec.aux_bitmask:
        ld = -(-m // 128) * 128
        return ld, ld * n // 8
    ld = -(-m // 8) * 8
    return ld, ld * n * DATA_TYPES[d_type][1]


def _alignment(ptr: int) -> int:
    # Heuristics may pick kernels that assume 256-byte-aligned operands (the default
    # preference); an operand that is less aligned must say so, or the call fails.
    if ptr == 0:
        return 256
    return min(256, ptr & -ptr)


def _operand(h, obj, name, writable=False):
    """(buffer, batch, rows, cols, ld, batch stride) of a 2-d or 3-d column-major operand."""
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    if buf.ndim == 2:
        rows, cols, ld = V.matrix(buf, name)
        return buf, 1, rows, cols, ld, 0
    if buf.ndim != 3:
        raise ValueError(f"{name} must be a matrix (2-d) or a batch (3-d), got shape "
                         f"{buf.shape}")
    batch = buf.shape[0]
    if batch == 0:
        raise ValueError(f"{name} is an empty batch")
    rows, cols, ld = V.matrix(buf[0], f"{name}[i]")
    stride, rest = divmod(buf.strides[0], buf.itemsize)
    if rest or stride < 0:
        raise ValueError(f"{name}: batch stride {buf.strides[0]} bytes is not a "
                         f"non-negative multiple of the item size")
    return buf, batch, rows, cols, ld, (0 if batch == 1 else stride)


class Plan:
    """Descriptors and the chosen algorithm of one cuBLASLt problem.

    Made by `lt_matmul` on a cache miss and kept in its handle's cache. The descriptors
    are host objects freed by a finalizer (``cublasLt*Destroy`` makes no driver call, so
    it is safe from garbage collection).

    Thread safety
    -------------
    The per-call pointer attributes (bias, aux, scales) are written into the shared
    descriptor; `lock` serializes that with the call that reads them.
    """

    __slots__ = ("desc", "layouts", "algo", "result", "workspace", "lock", "desc_addr",
                 "layout_addrs", "__weakref__")

    def __init__(self, lt, handle, key, epi, codes, dims, bias_type, aux_ld, aux_stride,
                 aligns):
        ffi = lt.ffi
        lib = lt.lib
        (ta, tb, compute, scale_type, t_a, t_b, t_c, t_d) = codes
        desc = ffi.new("cublasLtMatmulDesc_t *")
        lt.check(lib.cublasLtMatmulDescCreate(desc, compute, scale_type))
        self.desc = desc[0]
        self.layouts = []
        pref = ffi.new("cublasLtMatmulPreference_t *")
        try:
            self._set_desc(lt, "TRANSA", "int32_t", ta)
            self._set_desc(lt, "TRANSB", "int32_t", tb)
            self._set_desc(lt, "EPILOGUE", "uint32_t", epi.code)
            if bias_type is not None:
                self._set_desc(lt, "BIAS_DATA_TYPE", "int32_t", bias_type)
            if aux_ld:
                self._set_desc(lt, "EPILOGUE_AUX_LD", "int64_t", aux_ld)
                if aux_stride:
                    self._set_desc(lt, "EPILOGUE_AUX_BATCH_STRIDE", "int64_t", aux_stride)
            for dtype_code, (batch, rows, cols, ld, stride) in zip(
                    (t_a, t_b, t_c, t_d), dims):
                layout = ffi.new("cublasLtMatrixLayout_t *")
                lt.check(lib.cublasLtMatrixLayoutCreate(layout, dtype_code, rows, cols, ld))
                self.layouts.append(layout[0])
                if batch > 1 or dims[3][0] > 1:
                    count = max(batch, dims[3][0])
                    self._set_layout(lt, layout[0], "BATCH_COUNT", "int32_t", count)
                    self._set_layout(lt, layout[0], "STRIDED_BATCH_OFFSET", "int64_t",
                                     stride)
            lt.check(lib.cublasLtMatmulPreferenceCreate(pref))
            ws_ptr, ws_bytes = handle.lt_workspace()
            self.workspace = ws_bytes
            self._set_pref(lt, pref[0], "MAX_WORKSPACE_BYTES", "uint64_t", ws_bytes)
            for name, align in zip("ABCD", aligns):
                self._set_pref(lt, pref[0], f"MIN_ALIGNMENT_{name}_BYTES", "uint32_t", align)
            result = ffi.new("cublasLtMatmulHeuristicResult_t *")
            count = ffi.new("int *")
            lt.check(lib.cublasLtMatmulAlgoGetHeuristic(
                ffi.cast("cublasLtHandle_t", handle.lt_handle()), self.desc,
                self.layouts[0], self.layouts[1], self.layouts[2], self.layouts[3],
                pref[0], 1, result, count))
            if count[0] == 0:
                from .lt import CublasLtError
                raise CublasLtError(15, "CUBLAS_STATUS_NOT_SUPPORTED",
                                    f"cuBLASLt has no algorithm for this problem "
                                    f"({key!r})")
            self.result = result
            self.algo = int(ffi.cast("uintptr_t", ffi.addressof(result[0], "algo")))
        except BaseException:
            _destroy_plan(lt, self.desc, list(self.layouts))
            raise
        finally:
            if pref[0] != ffi.NULL:
                lt.check(lib.cublasLtMatmulPreferenceDestroy(pref[0]))
        self.lock = threading.Lock()
        self.desc_addr = int(ffi.cast("uintptr_t", self.desc))
        self.layout_addrs = tuple(int(ffi.cast("uintptr_t", x)) for x in self.layouts)
        weakref.finalize(self, _destroy_plan, lt, self.desc, list(self.layouts))

    def _set_desc(self, lt, attr, ctype, value):
        cell = lt.ffi.new(f"{ctype} *", value)
        lt.check(lt.lib.cublasLtMatmulDescSetAttribute(self.desc, _DESC[attr], cell,
                                                       lt.ffi.sizeof(ctype)))

    @staticmethod
    def _set_layout(lt, layout, attr, ctype, value):
        cell = lt.ffi.new(f"{ctype} *", value)
        lt.check(lt.lib.cublasLtMatrixLayoutSetAttribute(layout, _LAYOUT[attr], cell,
                                                         lt.ffi.sizeof(ctype)))

    @staticmethod
    def _set_pref(lt, pref, attr, ctype, value):
        cell = lt.ffi.new(f"{ctype} *", value)
        lt.check(lt.lib.cublasLtMatmulPreferenceSetAttribute(pref, _PREF[attr], cell,
                                                             lt.ffi.sizeof(ctype)))

    def set_pointer(self, lt, attr: str, ptr: int) -> None:
        """Write a per-call device pointer (bias, aux, scale) into the descriptor."""
        cell = lt.ffi.new("uint64_t *", ptr)
        lt.check(lt.lib.cublasLtMatmulDescSetAttribute(self.desc, _DESC[attr], cell, 8))


def _destroy_plan(lt, desc, layouts) -> None:
    for layout in layouts:
        lt.check(lt.lib.cublasLtMatrixLayoutDestroy(layout))
    lt.check(lt.lib.cublasLtMatmulDescDestroy(desc))


def _float_type(buf, override, name):
    kind = data_type_of(buf, override, name)
    if kind not in _FLOAT_TYPES:
        raise TypeError(f"{name}: cuBLASLt matmul here takes float16, bfloat16, float32, "
                        f"float64 and fp8 operands, got {kind}")
    return kind


def _vector(h, obj, name, length, writable):
    buf = V.device_array(obj, name, h.stream, writable=writable)
    h.check_device(buf, name)
    if buf.ndim != 1 or buf.shape[0] != length:
        raise ValueError(f"{name} must be a 1-d vector of {length} elements, got shape "
                         f"{buf.shape}")
    if length > 1 and buf.strides[0] != buf.itemsize:
        raise ValueError(f"{name} must be contiguous")
    return buf


def _scale_pointer(h, obj, name):
    buf = V.device_array(obj, name, h.stream)
    h.check_device(buf, name)
    if buf.size != 1 or buf.dtype != np.float32:
        raise TypeError(f"{name} must be a device array of one float32, got shape "
                        f"{buf.shape} dtype {buf.dtype}")
    return buf


def lt_matmul(transa, transb, alpha, a, b, beta, c, d, *, epilogue="default", bias=None,
              aux=None, compute=None, a_type=None, b_type=None, c_type=None, d_type=None,
              bias_type=None, a_scale=None, b_scale=None, d_scale=None, handle=None):
    """``D = epilogue(alpha * op(A) @ op(B) + beta * C)`` through ``cublasLtMatmul``.

    Parameters
    ----------
    transa, transb : {"N", "T"}
    alpha, beta : float
        Host scalars in the scale type (float32 for 32F compute, float64 for 64F).
    a, b, c, d : device arrays, column-major, 2-d or 3-d batches (batch first)
        op(A) is (m, k), op(B) (k, n), C and D (m, n). `c` may be None (beta must then
        be 0) or D itself. A batch axis of 1 broadcasts.
    epilogue : str
        One of `EPILOGUES`: "default", "relu", "relu_aux", "bias", "relu_bias",
        "relu_aux_bias", "gelu", "gelu_aux", "gelu_bias", "gelu_aux_bias" (forward);
        "drelu", "drelu_bgrad", "dgelu", "dgelu_bgrad" (backward through the
        activation, reading the aux saved by the forward pass); "bgrada", "bgradb" (bias
        gradient reduced over A or B).
    bias : device array, optional
        1-d, m elements (n for "bgradb"): read by the bias epilogues, written by the
        gradient ones. Its type is D's unless `bias_type` says otherwise.
    aux : device array, optional
        Contiguous, at least `aux_layout(epilogue, m, n, d_type)[1]` bytes per batch
        item: written by the "_aux" epilogues, read by the backward ones.
    compute : {"32F", "tf32", "32F_fast_16F", "32F_fast_16BF", "32F_pedantic", "64F"}
        Default "32F" (float32 accumulation), "64F" for float64 operands.
    a_type, b_type, c_type, d_type, bias_type : str, optional
        Element types by name, as in `gemm_ex` (for bfloat16/fp8 data in int16/uint8
        arrays).
    a_scale, b_scale, d_scale : device arrays of one float32, optional
        fp8 scaling factors (D = d_scale * (a_scale * b_scale * alpha * A @ B + ...)).

    Returns
    -------
    Plan
        The cached plan used (algorithm, workspace), for inspection.

    Raises
    ------
    TypeError, ValueError
        Types, shapes, layouts, a missing bias or aux, before anything is called.
    CublasLtError
        ``CUBLAS_STATUS_NOT_SUPPORTED`` when no algorithm exists for the combination
        (e.g. fp8 on a GPU before sm_89, or fp8 without transa "T", transb "N").

    Cost
    ----
    First call of a problem: descriptor creation and a heuristic query (tens of
    microseconds to a millisecond). Later calls: a cache lookup, pointer attributes
    for the epilogue's buffers, and the launch.
    """
    h = resolve(handle)
    from . import lt
    spec = EPILOGUES.get(epilogue)
    if spec is None:
        raise ValueError(f"epilogue must be one of {', '.join(EPILOGUES)}, got {epilogue!r}")
    ta, tb = V.trans_code(transa, "transa"), V.trans_code(transb, "transb")
    ab, na, ar, ac, lda, sa = _operand(h, a, "a")
    bb, nb, br, bc, ldb, sb = _operand(h, b, "b")
    db, nd, m, n, ldd, sd = _operand(h, d, "d", writable=True)
    if c is None:
        if beta != 0:
            raise ValueError("lt_matmul: c is None, so beta must be 0")
        cb, nc, ldc, sc = db, nd, ldd, sd
    else:
        cb, nc, cm, cn, ldc, sc = _operand(h, c, "c")
        if (cm, cn) != (m, n):
            raise ValueError(f"lt_matmul: c is {cm}x{cn} but d is {m}x{n}")
    batch = max(na, nb, nc, nd)
    for name, count in (("a", na), ("b", nb), ("c", nc), ("d", nd)):
        if count not in (1, batch):
            raise ValueError(f"lt_matmul: {name} has a batch of {count}, others {batch}")
    if nd != batch:
        raise ValueError(f"lt_matmul: d must hold the whole batch of {batch}")
    m_a, k = V.op_shape(ar, ac, ta)
    k_b, n_b = V.op_shape(br, bc, tb)
    if k != k_b or (m_a, n_b) != (m, n):
        raise ValueError(f"lt_matmul: op(a) is {m_a}x{k}, op(b) {k_b}x{n_b}, d {m}x{n}")
    t_a = _float_type(ab, a_type, "a")
    t_b = _float_type(bb, b_type, "b")
    t_c = _float_type(cb, c_type if c is not None else d_type, "c")
    t_d = _float_type(db, d_type, "d")
    if t_a != t_b and not (t_a in _FP8 and t_b in _FP8):
        raise TypeError(f"lt_matmul: a is {t_a} but b is {t_b}")
    if compute is None:
        compute = "64F" if t_a == "f64" else "32F"
    if compute not in _COMPUTE:
        raise ValueError(f"compute must be one of {', '.join(_COMPUTE)}, got {compute!r}")
    code = _COMPUTE[compute]
    scale_type, letter = (DATA_TYPES["f64"][0], "D") if code == 70 else (
        DATA_TYPES["f32"][0], "S")

    bias_buf = None
    bias_code = None
    if spec.bias is not None:
        if bias is None:
            raise ValueError(f"epilogue {epilogue!r} needs bias= ({'read' if spec.bias == 'in' else 'written'})")
        bias_buf = _vector(h, bias, "bias", n if spec.bias_of_b else m,
                           writable=spec.bias == "out")
        kind = data_type_of(bias_buf, bias_type, "bias")
        if kind != t_d:
            bias_code = DATA_TYPES[kind][0]
    elif bias is not None:
        raise ValueError(f"epilogue {epilogue!r} takes no bias")
    aux_buf = None
    aux_ld = aux_stride = 0
    if spec.aux is not None:
        if aux is None:
            raise ValueError(f"epilogue {epilogue!r} needs aux= (see aux_layout)")
        aux_buf = V.device_array(aux, "aux", h.stream, writable=spec.aux == "out")
        h.check_device(aux_buf, "aux")
        aux_ld, per_item = aux_layout(epilogue, m, n, t_d)
        if not aux_buf.is_c_contiguous or aux_buf.nbytes < per_item * batch:
            raise ValueError(f"aux must be a contiguous device array of at least "
                             f"{per_item * batch} bytes for epilogue {epilogue!r}, got "
                             f"{aux_buf.nbytes}")
        if batch > 1:
            # In elements of the aux type: bits for the ReLU mask.
            aux_stride = aux_ld * n
    elif aux is not None:
        raise ValueError(f"epilogue {epilogue!r} takes no aux")
    scales = []
    for attr, obj, name in (("A_SCALE_POINTER", a_scale, "a_scale"),
                            ("B_SCALE_POINTER", b_scale, "b_scale"),
                            ("D_SCALE_POINTER", d_scale, "d_scale")):
        if obj is not None:
            scales.append((attr, _scale_pointer(h, obj, name)))

    if h._device_scalars:
        raise ValueError("lt_matmul takes host scalars; this handle is in device pointer "
                         "mode (set handle.pointer_mode = 'host')")
    keep_a, pa = h.scalar(letter, alpha, "alpha")
    keep_b, pb = h.scalar(letter, beta, "beta")
    aligns = (_alignment(ab.ptr), _alignment(bb.ptr), _alignment(cb.ptr), _alignment(db.ptr))
    codes = (ta, tb, code, scale_type, DATA_TYPES[t_a][0], DATA_TYPES[t_b][0],
             DATA_TYPES[t_c][0], DATA_TYPES[t_d][0])
    dims = ((na, ar, ac, lda, sa), (nb, br, bc, ldb, sb), (nc, m, n, ldc, sc),
            (nd, m, n, ldd, sd))
    key = (codes, dims, epilogue, bias_code, aux_ld, aux_stride, aligns)
    plans = h._lt_plans
    plan = plans.get(key)
    if plan is None:
        plan = Plan(lt, h, key, spec, codes, dims, bias_code, aux_ld, aux_stride, aligns)
        plans[key] = plan
    ws_ptr, ws_bytes = h.lt_workspace()
    fn = fast_function("cublasLtMatmul", lt)
    lt_handle = h.lt_handle()
    h.ready()
    la, lb, lc, ld_ = plan.layout_addrs
    with plan.lock:
        if bias_buf is not None:
            plan.set_pointer(lt, "BIAS_POINTER", bias_buf.ptr)
        if aux_buf is not None:
            plan.set_pointer(lt, "EPILOGUE_AUX_POINTER", aux_buf.ptr)
        for attr, buf in scales:
            plan.set_pointer(lt, attr, buf.ptr)
        status = fn(lt_handle, plan.desc_addr, pa, ab.ptr, la, bb.ptr, lb, pb, cb.ptr, lc,
                    db.ptr, ld_, plan.algo, ws_ptr, ws_bytes, h.stream)
    if status:
        lt.check(status)
    return plan


def plan_cache_info(handle=None) -> dict:
    """How many cuBLASLt plans the handle holds, by epilogue (for diagnostics)."""
    h = resolve(handle)
    counts: dict[str, int] = {}
    for key in h._lt_plans:
        counts[key[2]] = counts.get(key[2], 0) + 1
    return {"plans": len(h._lt_plans), "by_epilogue": counts}
