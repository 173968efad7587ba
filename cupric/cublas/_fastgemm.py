"""The compiled hot path of a repeated GEMM: plan lookup, checks and the cuBLAS call in C.

A repeated 64x64 sgemm spends most of its host time inside cuBLAS and, in pure Python,
a good part again around it: building the plan key, reading a dozen attributes, the
open/writable/alias checks, the scalars, and the cffi call (libffi, 14 arguments). This
small CPython extension does the same work in one C call, for the calls a plan made
earlier by the Python path already validated:

* `matmul(a, b, out, alpha, beta, handle)` for 2-d (and vector) products of cupric
  `DeviceBuffer` operands, or of any other arrays as the runtime's intake layer read them
  (`cupric.runtime.intake.ArrayInfo`: PyTorch, CuPy, ...), `out` given or None (then
  allocated through `cupric.runtime.memory.empty`); PyTorch tensors and CuPy arrays
  themselves once a call through the intake layer filed its plan under their own key
  (`file_foreign`): C reads them as the intake layer's adapters do (PyTorch:
  ``requires_grad``, ``is_cuda``, ``layout``, ``dtype``, ``shape``, ``stride()``,
  ``data_ptr()``; CuPy: ``dtype``, ``shape``, ``strides``, ``data.ptr``, and CuPy's
  current stream, which must be ordered before the handle's without an event), so a
  repeated call on them never runs the intake layer's Python;
* `gemm(transa, transb, alpha, a, b, beta, c, handle)`, the BLAS-level call.

Each returns None whenever anything differs from the plan's assumptions (another array
type, no plan for this key, a closed handle, stream or buffer, a read-only or
overlapping output, a scalar that is not a Python int or float, a handle in device
pointer mode or spanning several GPUs): the Python path then runs, and raises the typed
error where there is one. Only a failing cuBLAS status raises here (through
`lib.check`/`lt.check`).

Plans live on the handle (``Handle._fast_plans``, key -> capsule). A plan holds the
classic entry point (``cublasSgemm``/``cublasDgemm``; ``cublasGemmEx`` computing in 32F
for float16 and bfloat16 operands) and, for small float32 problems on
handles cupric owns, a cuBLASLt plan (descriptors and heuristic algorithm cached once):
``cublasLtMatmul`` with a cached algorithm costs less host time per call than
``cublasSgemm``, which runs its own heuristic each time (both floors are measured by
benchmarks/gemm.py). The Lt route is used when
the call's pointers are as aligned as those the algorithm was chosen for, else the
classic one.

The extension is built once per machine and Python version into the cupric cache with
the compiler setuptools finds (as `cupric.runtime._fastlaunch`); without one, everything
runs through the Python paths. ``CUPRIC_CUBLAS_FASTPATH=0`` turns it off;
``CUPRIC_BUILD_LAUNCHER=0`` stops cupric from compiling it.
"""

from __future__ import annotations

from cupric.runtime.native import Extension, Pending

from ._fastgemm_c import FIELDS, SOURCE

__all__ = ["load", "build_error", "info", "remember", "file_foreign", "FIELDS", "SOURCE"]


def build_error() -> str | None:
    """Why the extension could not be built, loaded or configured, or None."""
    return EXTENSION.error


def load(build: bool | None = None, wait: bool = True):
    """The configured extension module (built into the cache if needed), or None.

    `build` None follows ``CUPRIC_BUILD_LAUNCHER`` (anything but "0" builds). A failure
    is recorded in `build_error` and not retried within the process. With `wait` False
    a build still running in the background raises `cupric.runtime.native.Pending`.
    """
    return EXTENSION.load(build, wait)


def _configure(module) -> None:
    if module.FIELDS != " ".join(FIELDS):
        raise RuntimeError("the extension's plan fields differ from FIELDS")
    from cupric.runtime.memory import DeviceBuffer, empty
    from cupric.runtime.native import Allocation

    from . import lib, lt
    from .handle import Handle, _tls
    from cupric.runtime.intake import ArrayInfo
    module.configure(DeviceBuffer, Allocation, Handle, _tls, empty, lib.check, lt.check,
                     ArrayInfo)


#: The extension, loaded through the one cached loader (`cupric.runtime.native.Extension`).
EXTENSION = Extension("_cupric_fastgemm", "cublas", "cuBLAS fast-path extension", SOURCE,
                      switch="CUBLAS_FASTPATH", configure=_configure)


def info(plan) -> dict:
    """The routes a plan capsule holds: ``{"lt": bool, "m", "n", "k", ...}``."""
    module = load(build=False)
    if module is None:
        raise RuntimeError(f"the cuBLAS fast path is not loaded: {EXTENSION.error}")
    return module.plan_info(plan)


# --------------------------------------------------------------------------------------
# Plans (made by the Python paths after a successful, fully checked call)

# Largest m * n * k routed to cuBLASLt: up to 256^3 a float32 GEMM takes a few
# microseconds on the GPU, so the call's host cost is what the caller waits for. Larger
# problems keep cublasSgemm's kernels (the ones PyTorch runs, bit for bit).
LT_MAX_WORK = 1 << 24
COMPUTE_32F = 68  # cublasComputeType_t of the GemmEx plans made here
PLAN_LIMIT = 4096  # per handle


def remember(h, key, fn, *, swap: bool, alias: bool, op1: int, op2: int, m: int, n: int,
             k: int, ld1: int, ld2: int, ldc: int, letter: str, ptrs: tuple, spans: tuple,
             result=None, ex=None):
    """Record the compiled plan of a checked GEMM call on handle `h` under `key` (None:
    make it without filing it); returns the plan capsule, or None where none is made.

    `fn` is the entry point the Python path called (a cffi function; anything else,
    such as a test's emulator, records nothing): ``cublas<S|D>gemm``, or with `ex` =
    (A/B type, C type, compute type) ``cublasGemmEx`` computing in 32F (float16 and
    bfloat16 operands; float scalars). `ptrs` are the call's (first, second, output)
    addresses, whose alignment the cuBLASLt algorithm may assume; `spans` the (low,
    high) byte extents of a, b and out relative to their pointers; `result` the (shape,
    dtype) of an output the plan allocates, or None.
    """
    module = EXTENSION.module
    if module is None or letter not in ("S", "D") or len(h._fast_plans) >= PLAN_LIMIT:
        return None
    if h._device_scalars or h.multi_device or max(m, n, k, ld1, ld2, ldc) > 2**31 - 1:
        return None
    if ex is not None and (letter != "S" or ex[2] != COMPUTE_32F):
        return None
    from . import lib
    if not isinstance(fn, lib.ffi.CData):
        return None
    fields = dict.fromkeys(FIELDS, 0)
    fields.update(dbl=int(letter == "D"), swap=int(swap), alias=int(alias),
                  classic=int(lib.ffi.cast("uintptr_t", fn)), handle=h.ptr, op1=op1,
                  op2=op2, m=m, n=n, k=k, ld1=ld1, ld2=ld2, ldc=ldc, align1=1, align2=1,
                  align_o=1)
    (fields["a_lo"], fields["a_hi"], fields["b_lo"], fields["b_hi"], fields["o_lo"],
     fields["o_hi"]) = spans
    keep = None
    if ex is not None:
        fields.update(ex=1, t_in=ex[0], t_out=ex[1], compute=ex[2])
    elif letter == "S":
        route = _lt_route(h, op1, op2, m, n, k, ld1, ld2, ldc, ptrs)
        if route is not None:
            lt_fields, keep = route
            fields.update(lt_fields)
    shape, dtype = (None, None) if result is None else result
    plan = module.make_plan(tuple(fields[f] for f in FIELDS), keep, shape, dtype)
    if key is not None:
        h._fast_plans[key] = plan
    return plan


def file_foreign(h, a, b, out, arrays, plan=None) -> None:
    """File the plan of a call on PyTorch tensors or CuPy arrays (read by the intake
    layer into `a`, `b`, `out`: ArrayInfo, out None when allocating) under the key the
    extension reads from the arrays themselves - ``("torch", dtype, shape, stride())``
    or ``("cupy", dtype, shape, strides)`` per operand - so that the next such call
    skips the intake layer. `arrays` are the caller's (a, b, out) arguments; `plan`, the
    capsule to file, else the one filed under the intake-read layouts (for element types
    whose interface dtype is ambiguous, such as bfloat16's "<V2", only the arrays' own
    key names the plan)."""
    module = EXTENSION.module
    if module is None or len(h._fast_plans) >= PLAN_LIMIT or a.kind not in ("torch", "cupy"):
        return
    if plan is None:
        key = (a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides) + (
            (None, None, None) if out is None else (out.dtype, out.shape, out.strides))
        plan = h._fast_plans.get(key)
        if plan is None:
            return
    ta, tb, to = arrays
    cls = ta.__class__
    if tb.__class__ is not cls or (to is not None and to.__class__ is not cls):
        return
    from cupric.runtime.array_adapters import adapter_for
    adapter = adapter_for(cls)
    if adapter is None or adapter.kind != a.kind:
        return
    if a.kind == "torch":
        import sys
        module.watch_torch(cls, sys.modules["torch"].strided)
        parts = ("torch",)
        for t in (ta, tb, to):
            parts += (None, None, None) if t is None else (t.dtype, t.shape, t.stride())
    else:
        module.watch_cupy(cls, adapter.current_stream)
        parts = ("cupy",)
        for t in (ta, tb, to):
            parts += (None, None, None) if t is None else (t.dtype, t.shape, t.strides)
    h._fast_plans[parts] = plan


def _lt_route(h, op1, op2, m, n, k, ld1, ld2, ldc, ptrs):
    """(plan fields, keep-alive) of a float32 cuBLASLt route, or None where the classic
    call stays: a large problem, a borrowed handle (its owner may move it to another
    stream), a math mode other than the default, or no algorithm."""
    if (not h.owns_handle or h._math != 0 or op1 > 1 or op2 > 1 or min(m, n, k) < 1
            or m * n * k > LT_MAX_WORK):
        return None
    from cupric.bindings_gen.errors import BindingsError, LibraryNotFoundError

    from . import lt
    from .gemm_ex import DATA_TYPES
    from .ltmatmul import EPILOGUES, Plan, _alignment
    f32 = DATA_TYPES["f32"][0]
    codes = (op1, op2, 68, f32, f32, f32, f32, f32)  # 68: CUBLAS_COMPUTE_32F
    dims = ((1,) + ((m, k) if op1 == 0 else (k, m)) + (ld1, 0),
            (1,) + ((k, n) if op2 == 0 else (n, k)) + (ld2, 0),
            (1, m, n, ldc, 0), (1, m, n, ldc, 0))
    p1, p2, po = ptrs
    aligns = (_alignment(p1), _alignment(p2), _alignment(po), _alignment(po))
    try:
        plan = Plan(lt, h, ("gemm",) + codes, EPILOGUES["default"], codes, dims, None, 0, 0,
                    aligns)
    except (lt.CublasLtError, LibraryNotFoundError, BindingsError):
        return None  # no algorithm (or no cuBLASLt): the classic call is always there
    needs = int(plan.result[0].workspaceSize)
    ws_ptr, ws_bytes = h.lt_workspace() if needs else (0, 0)
    la, lb, lc, ld = plan.layout_addrs
    return ({"lt": int(lt.ffi.cast("uintptr_t", lt.lib.cublasLtMatmul)),
             "lt_handle": h.lt_handle(), "desc": plan.desc_addr, "la": la, "lb": lb,
             "lc": lc, "ld": ld, "algo": plan.algo, "ws": ws_ptr, "wsb": ws_bytes,
             "stream": h.stream, "align1": aligns[0], "align2": aligns[1],
             "align_o": aligns[2]}, plan)


def _first_call(*args):
    """The entry points' value before the first call: load, install, take the Python path."""
    install()
    return None


def install() -> None:
    """Point `numpy_api.matmul` and `level3.gemm` at the compiled paths (None without).

    While the extension is built in the background they stay `_first_call` (each call
    asks again and takes the Python path).
    """
    try:
        module = load(wait=False)
    except Pending:
        return
    from . import level3, numpy_api
    numpy_api._c_matmul = None if module is None else module.matmul
    level3._c_gemm = None if module is None else module.gemm
