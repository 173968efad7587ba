"""cupric.cublas: NVIDIA's BLAS on the GPU.

Handles bound to a device and stream, BLAS levels 1-3 for s/d/c/z, mixed-precision GEMM
(`gemm_ex`), cuBLASLt matmul with epilogues, and a NumPy-like layer (`matmul`, `dot`, ...)
over any device array. `cupric.cublas.lib` and `cupric.cublas.lt` hold the low-level
bindings, generated from the installed headers by `cupric.bindings_gen` on first use.
Importing this package loads nothing.
"""

from __future__ import annotations

import importlib

from .._lazy import attach

_API = (
    "Handle", "HandleOptions", "default_handle",
    "axpy", "blas_dot", "dotu", "dotc", "nrm2", "asum", "iamax", "iamin", "scal", "copy",
    "swap", "rot", "rotg", "rotm", "rotmg",
    "gemv", "gbmv", "ger", "geru", "gerc", "symv", "hemv", "trmv", "trsv", "syr", "her",
    "gemm", "gemm_batched", "gemm_strided_batched", "symm", "syrk", "herk", "trmm", "trsm",
    "geam", "dgmm",
    "gemm_ex", "gemm_batched_ex", "gemm_strided_batched_ex", "lt_matmul", "EPILOGUES",
    "aux_layout", "plan_cache_info",
    "matmul", "dot", "vdot", "outer", "norm", "solve_triangular", "linear",
)

__all__ = ["lib", "lt", "is_available", "CublasError", *_API]

__getattr__, __dir__ = attach(__name__, globals(), {
    "lib": ("cupric.cublas.lib", None),
    "lt": ("cupric.cublas.lt", None),
    "CublasError": ("cupric.cublas.lib", "CublasError"),
    **{name: ("cupric.cublas.api", name) for name in _API},
})


def is_available() -> bool:
    """Whether cuBLAS can be loaded (``pip install nvidia-cublas`` otherwise)."""
    return importlib.import_module("cupric.cublas.lib").is_available()
