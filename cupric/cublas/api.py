"""The public surface of cupric.cublas: handles, BLAS levels 1-3, mixed-precision GEMM,
cuBLASLt matmul with epilogues, and the NumPy-like layer.

Everything here is importable without loading libcublas or touching the GPU; the
library loads on the first call. `cupric.cublas` re-exports these names lazily.
"""

from __future__ import annotations

from .gemm_ex import gemm_batched_ex, gemm_ex, gemm_strided_batched_ex
from .handle import Handle, HandleOptions, default_handle
from .level1 import (asum, axpy, copy, dot as blas_dot, dotc, dotu, iamax, iamin, nrm2,
                     rot, rotg, rotm, rotmg, scal, swap)
from .level2 import gbmv, gemv, ger, gerc, geru, hemv, her, symv, syr, trmv, trsv
from .level3 import (dgmm, geam, gemm, gemm_batched, gemm_strided_batched, herk, symm,
                     syrk, trmm, trsm)
from .ltmatmul import EPILOGUES, aux_layout, lt_matmul, plan_cache_info
from .numpy_api import matmul
from .numpy_linalg import dot, linear, norm, outer, solve_triangular, vdot

__all__ = [
    # handles
    "Handle", "HandleOptions", "default_handle",
    # level 1 (`blas_dot` is BLAS dot; `dot` is NumPy's)
    "axpy", "blas_dot", "dotu", "dotc", "nrm2", "asum", "iamax", "iamin", "scal", "copy",
    "swap", "rot", "rotg", "rotm", "rotmg",
    # level 2
    "gemv", "gbmv", "ger", "geru", "gerc", "symv", "hemv", "trmv", "trsv", "syr", "her",
    # level 3
    "gemm", "gemm_batched", "gemm_strided_batched", "symm", "syrk", "herk", "trmm", "trsm",
    "geam", "dgmm",
    # mixed precision and cuBLASLt
    "gemm_ex", "gemm_batched_ex", "gemm_strided_batched_ex", "lt_matmul", "EPILOGUES",
    "aux_layout", "plan_cache_info",
    # NumPy-like
    "matmul", "dot", "vdot", "outer", "norm", "solve_triangular", "linear",
]
