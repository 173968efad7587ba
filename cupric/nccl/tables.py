"""NCCL's element types and reduction operators, as tables keyed by what Python code holds.

A collective names its element type (``ncclDataType_t``) and, for reductions, its
operator (``ncclRedOp_t``); both are small integers fixed by the C API. These tables map
NumPy dtypes (and PyTorch's bfloat16/float8 types, which NumPy lacks) and operator names
to them without loading NCCL; a CPU test compares every value with the installed header.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DTYPES", "EXTRA_DTYPES", "OPS", "UnsupportedDtypeError", "nccl_dtype",
           "reduction_op", "wire_type"]


class UnsupportedDtypeError(TypeError):
    """An element type NCCL cannot reduce (bool, complex products, structured types)."""


#: NumPy dtype -> ncclDataType_t (``ncclInt8`` ... ``ncclFloat64``).
DTYPES = {
    np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2,
    np.dtype(np.uint32): 3, np.dtype(np.int64): 4, np.dtype(np.uint64): 5,
    np.dtype(np.float16): 6, np.dtype(np.float32): 7, np.dtype(np.float64): 8,
}

#: Types NumPy lacks, by the name ml_dtypes gives them and by PyTorch's dtype name (an
#: array reads as raw bytes there: ``ArrayInfo.torch_dtype`` names it). The float8
#: types need NCCL 2.24 or newer; `nccl_dtype` checks the library has them.
EXTRA_DTYPES = {
    "bfloat16": 9, "torch.bfloat16": 9,
    "float8_e4m3fn": 10, "torch.float8_e4m3fn": 10,
    "float8_e5m2": 11, "torch.float8_e5m2": 11,
}

#: Operator name -> ncclRedOp_t. ``avg`` divides the sum by the number of ranks.
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}

# Complex numbers reduce as pairs of their real type, for the operators that act on
# each component alone (sum, and avg which is sum / n).
_COMPLEX = {np.dtype(np.complex64): np.dtype(np.float32),
            np.dtype(np.complex128): np.dtype(np.float64)}
_COMPONENTWISE = frozenset({0, 4})


def nccl_dtype(dtype, torch_dtype: str | None = None) -> int | None:
    """The ncclDataType_t of an element type, or None when NCCL has no such type.

    `torch_dtype` is the owner's PyTorch dtype name (``"torch.bfloat16"``), which wins
    over `dtype` (PyTorch exports bfloat16 as 2 raw bytes).
    """
    if torch_dtype is not None:
        code = EXTRA_DTYPES.get(torch_dtype)
        if code is not None:
            return code
        torch_name = torch_dtype[len("torch."):]
        try:
            dtype = np.dtype(torch_name)
        except TypeError:
            return None
    dtype = np.dtype(dtype)
    code = DTYPES.get(dtype)
    if code is not None:
        return code
    return EXTRA_DTYPES.get(dtype.name)


def reduction_op(op) -> int:
    """The ncclRedOp_t of an operator name (``"sum"``, ``"prod"``, ``"max"``, ``"min"``,
    ``"avg"``).

    Raises
    ------
    ValueError
        For any other name.
    """
    code = OPS.get(op) if isinstance(op, str) else None
    if code is None:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    return code


def wire_type(dtype, torch_dtype: str | None, count: int, op: int | None) -> tuple[int, int]:
    """(ncclDataType_t, element count) that moves `count` items of `dtype`.

    Collectives that only move data (broadcast, all-gather, all-to-all, send/recv: `op`
    None) take any type as bytes. Reductions need a type NCCL reduces; complex numbers
    reduce as pairs of reals under sum and avg.

    Raises
    ------
    UnsupportedDtypeError
        For a reduction of a type NCCL cannot reduce.
    """
    code = nccl_dtype(dtype, torch_dtype)
    if code is not None:
        return code, count
    dtype = np.dtype(dtype)
    if op is None:
        return DTYPES[np.dtype(np.uint8)], count * dtype.itemsize
    real = _COMPLEX.get(dtype)
    if real is not None and op in _COMPONENTWISE:
        return DTYPES[real], count * 2
    name = torch_dtype or str(dtype)
    ops = [k for k, v in OPS.items() if v == op]
    raise UnsupportedDtypeError(
        f"NCCL cannot reduce {name} with {ops[0] if ops else op!r}: reductions take "
        f"int8/uint8/int32/uint32/int64/uint64, float16/bfloat16/float32/float64 (and "
        f"float8 on NCCL >= 2.24), complex64/complex128 under sum and avg")


def bus_bandwidth_factor(collective: str, world_size: int) -> float:
    """NCCL's bus-bandwidth factor (nccl-tests' definition): bus bandwidth = algorithm
    bandwidth (bytes / time) times this. all_reduce 2(n-1)/n; all_gather and
    reduce_scatter (n-1)/n (of the larger buffer's bytes); broadcast, reduce 1;
    all_to_all (n-1)/n.

    Raises
    ------
    ValueError
        For an unknown collective or a world size below 1.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    n = world_size
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
               "reduce_scatter": (n - 1) / n, "all_to_all": (n - 1) / n,
               "broadcast": 1.0, "reduce": 1.0}
    try:
        return factors[collective]
    except KeyError:
        raise ValueError(f"unknown collective {collective!r}; one of "
                         f"{', '.join(factors)}") from None
