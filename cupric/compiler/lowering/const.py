"""Module-level NumPy arrays read by kernels: compiled into the module as data, in the
64 KiB constant bank (`addrspace(4)`, PTX `.const`, broadcast to a warp) while they fit.

Placement is decided once per compiled module, over every array the kernel and its
device functions name: all go to constant memory if their total fits; otherwise the
largest arrays not marked with `cupric.device.constant()` move to global memory (read
through the non-coherent cache) until the rest fits. Arrays marked `constant()` that do
not fit are a compile error; a warning comes past `CONSTANT_WARN_FRACTION` of the bank.
Either way the array is reached through a generic pointer cast from its global, which
libNVVM's address-space inference turns back into ld.const / ld.global.nc.
"""

from __future__ import annotations

import warnings

import numpy as np

from cupric.compiler.ir import types as ll
from cupric.compiler.ir.module import symbol
from cupric.compiler.ir.values import Value
from cupric.compiler.lowering.memory import ConstGlobal, array_value, module_state
from cupric.compiler.typing.ktypes import SpaceArrayType
from cupric.device.const import CONSTANT_MEMORY_BYTES, CONSTANT_WARN_FRACTION, ConstantArray
from cupric.types import scalar_from_dtype

__all__ = ["type_global_array", "ConstantMemoryWarning"]


class ConstantMemoryWarning(UserWarning):
    """A module's constant data is near (or past, for unmarked arrays) the 64 KiB bank."""


class _ArrayRef:
    """The custom lowering of one use of a module-level array (callable by codegen)."""

    __slots__ = ("array", "name")

    def __init__(self, array: np.ndarray, name: str) -> None:
        self.array = array
        self.name = name

    def __call__(self, cg, node):
        return _lower(cg, self, node)


def type_global_array(typer, node, value: np.ndarray, name: str):
    """Type a module-level array named in kernel code (the typer's hook)."""
    try:
        dtype = scalar_from_dtype(value.dtype)
    except TypeError:
        raise typer.error(node, f"'{name}' is an array of {value.dtype}; module-level arrays "
                          f"in kernels must have a numeric or bool dtype") from None
    if value.ndim == 0 or value.size == 0:
        raise typer.error(node, f"'{name}' is an empty or 0-d array; module-level arrays in "
                          "kernels need at least one element")
    typer.fn.targets[node] = ("custom", _ArrayRef(value, name))
    return SpaceArrayType(dtype, value.ndim, ll.GENERIC, readonly=True)


def _reachable(typed, seen=None):
    """Every _ArrayRef named by `typed` and the device functions it calls."""
    seen = set() if seen is None else seen
    if id(typed) in seen:
        return []
    seen.add(id(typed))
    found = []
    for target in typed.targets.values():
        if target[0] == "custom" and isinstance(target[1], _ArrayRef):
            found.append(target[1])
        elif target[0] == "device":
            found += _reachable(target[1], seen)
    return found


def _placement(cg, kernel_typed) -> dict:
    """id(array) -> (global name, address space), deciding for the whole module."""
    arrays = {}
    for ref in _reachable(kernel_typed):
        arrays.setdefault(id(ref.array), ref)
    marked = [r for r in arrays.values() if isinstance(r.array, ConstantArray)]
    plain = sorted((r for r in arrays.values() if not isinstance(r.array, ConstantArray)),
                   key=lambda r: r.array.nbytes, reverse=True)
    total = sum(r.array.nbytes for r in arrays.values())
    spilled = []
    while total > CONSTANT_MEMORY_BYTES and plain:
        big = plain.pop(0)
        spilled.append(big)
        total -= big.array.nbytes
    if total > CONSTANT_MEMORY_BYTES:
        names = ", ".join(f"{r.name} ({r.array.nbytes} bytes)" for r in marked)
        raise cg.error(cg.src.tree, f"constant memory overflow: arrays marked constant() need "
                       f"{total} bytes, past the {CONSTANT_MEMORY_BYTES}-byte constant bank: "
                       f"{names}", hint="leave the largest unmarked (plain NumPy arrays spill "
                       "to global memory) or pass it as a kernel argument")
    if spilled:
        warnings.warn(f"kernel {kernel_typed.name}: module-level arrays "
                      f"{', '.join(r.name for r in spilled)} do not fit in the "
                      f"{CONSTANT_MEMORY_BYTES}-byte constant bank and are read from global "
                      f"memory", ConstantMemoryWarning, stacklevel=2)
    elif total > CONSTANT_WARN_FRACTION * CONSTANT_MEMORY_BYTES:
        warnings.warn(f"kernel {kernel_typed.name}: {total} bytes of constant data, near the "
                      f"{CONSTANT_MEMORY_BYTES}-byte constant bank", ConstantMemoryWarning,
                      stacklevel=2)
    placement = {}
    module = cg.mcg.module
    for ref in arrays.values():
        space = ll.GLOBAL if ref in spilled else ll.CONSTANT
        arr = np.ascontiguousarray(ref.array)
        dtype = scalar_from_dtype(arr.dtype)
        elem = ll.i8 if dtype.kind == "b" else ll.IntType(dtype.bits)
        raw = arr.view(np.uint8 if dtype.kind == "b" else f"u{dtype.itemsize}").ravel()
        init = "[" + ", ".join(f"{elem} {int(v)}" for v in raw) + "]"
        gname = module.unique_symbol(f"cupric_const_{ref.name}")
        gtype = ll.ArrayType(elem, arr.size)
        module.add_global(ConstGlobal(gname, gtype, space, init, "internal",
                                      max(16, dtype.itemsize)))
        placement[id(ref.array)] = (gname, gtype, space)
    return placement


def _lower(cg, ref: _ArrayRef, node):
    from cupric.compiler.codegen.values import memory_lltype
    state = module_state(cg, "const_arrays", dict)
    if "placement" not in state:
        kernel = cg.mcg.lowering_state.get("kernel", cg.typed)
        state["placement"] = _placement(cg, kernel)
    placement = state["placement"]
    if id(ref.array) not in placement:  # reached in a way the walk did not see
        state["placement"] = placement = {**placement, **_placement_one(cg, ref)}
    gname, gtype, space = placement[id(ref.array)]
    at = SpaceArrayType(scalar_from_dtype(ref.array.dtype), ref.array.ndim, ll.GENERIC,
                        readonly=True)
    elem = memory_lltype(at.dtype)
    # Integer-typed data viewed as the element type, then made generic: the optimizer
    # sees through the constant casts to the global's address space.
    src = f"{gtype} addrspace({space})* {symbol(gname)}"
    data = Value(ll.PointerType(elem),
                 f"addrspacecast ({elem} addrspace({space})* bitcast ({src} to {elem} "
                 f"addrspace({space})*) to {elem}*)")
    return array_value(cg, at, data, list(ref.array.shape))


def _placement_one(cg, ref):
    class _One:
        name = "array"
        targets = {None: ("custom", ref)}
    return _placement(cg, _One)
