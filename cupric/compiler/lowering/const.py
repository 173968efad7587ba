"""Module-level NumPy arrays read by kernels: compiled into the module as data, in the
64 KiB constant bank (`addrspace(4)`, PTX `.const`, broadcast to a warp) while they fit.

Placement is decided once per compiled module, over every array the kernel and its
device functions name, by the kernel's `cupric.device.const.ConstantPolicy`: arrays
marked `constant()` go to the bank (past it: a compile error), arrays marked
`global_memory()` to global memory, and unmarked arrays, under automatic placement, are
offered to the bank in the policy's packing order (default: smallest first, so the
largest spill to global memory, read through the non-coherent cache); under
explicit-only placement they all go to global memory. A warning comes when the bank's
fill is inside the policy's warning range. `placement_report` says what went where.
Either way the array is reached through a generic pointer cast from its global, which
libNVVM's address-space inference turns back into ld.const / ld.global.nc.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from cupric.compiler.ir import types as ll
from cupric.compiler.ir.module import symbol
from cupric.compiler.ir.values import Value
from cupric.compiler.lowering.memory import ConstGlobal, array_value, module_state
from cupric.compiler.typing.ktypes import SpaceArrayType
from cupric.device.const import (CONSTANT_MEMORY_BYTES, ConstantArray, ConstantCandidate,
                                 GlobalArray, policy_of)
from cupric.types import scalar_from_dtype

__all__ = ["type_global_array", "ConstantMemoryWarning", "ConstantPlacement",
           "PlacementReport", "placement_report"]


class ConstantMemoryWarning(UserWarning):
    """A module's constant data is near (or past, for unmarked arrays) the 64 KiB bank."""


class _ArrayRef:
    """The custom lowering of one use of a module-level array (callable by codegen)."""

    __slots__ = ("array", "name", "module")

    def __init__(self, array: np.ndarray, name: str, module: str = "") -> None:
        self.array = array
        self.name = name
        self.module = module

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
    module = getattr(getattr(typer.fn, "py_func", None), "__module__", "") or ""
    typer.fn.targets[node] = ("custom", _ArrayRef(value, name, module))
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


@dataclasses.dataclass(frozen=True)
class ConstantPlacement:
    """Where one module-level array went.

    Attributes
    ----------
    name, module : str
        The Python name kernel code used, and the module whose code named it.
    nbytes : int
    space : str
        ``"constant"`` or ``"global"``.
    reason : str
        ``"marked constant()"``, ``"marked global_memory()"``, ``"automatic"`` (placed
        by the policy), ``"spilled"`` (did not fit in the bank) or ``"explicit-only
        policy"``.
    """

    name: str
    module: str
    nbytes: int
    space: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PlacementReport:
    """Which module-level arrays a kernel's module holds where, and how many bytes
    (`Kernel.inspect_constants`, ``python -m cupric compile --report``)."""

    kernel: str
    policy: object
    entries: tuple
    limit: int = CONSTANT_MEMORY_BYTES
    warnings: tuple = ()

    @property
    def constant_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries if e.space == "constant")

    @property
    def global_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries if e.space == "global")

    def as_dict(self) -> dict:
        """JSON-able form."""
        return {"kernel": self.kernel, "limit": self.limit,
                "constant_bytes": self.constant_bytes, "global_bytes": self.global_bytes,
                "policy": self.policy.cache_key(), "warnings": list(self.warnings),
                "arrays": [dataclasses.asdict(e) for e in self.entries]}

    def __str__(self) -> str:
        used = self.constant_bytes
        lines = [f"kernel {self.kernel}: {used} of {self.limit} constant bytes "
                 f"({100 * used / self.limit:.1f} %), {self.global_bytes} bytes of "
                 f"module data in global memory"]
        if self.entries:
            width = max(len(e.name) for e in self.entries)
            mod = max(len(e.module) for e in self.entries)
            lines.append(f"  {'array':<{width}}  {'module':<{mod}}  {'bytes':>8}  "
                         f"{'space':<8}  why")
            for e in self.entries:
                lines.append(f"  {e.name:<{width}}  {e.module:<{mod}}  {e.nbytes:>8}  "
                             f"{e.space:<8}  {e.reason}")
        else:
            lines.append("  (no module-level arrays)")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _ranked(policy, plain: list, kernel_module: str) -> list:
    """`plain` (_ArrayRefs in order of first use) in the order the policy offers them
    to the bank."""
    packing = policy.packing
    if packing == "small_first":
        # Ties: the later-used first, so that a full bank spills what the largest-first
        # spill of earlier releases spilled.
        return sorted(reversed(plain), key=lambda r: r.array.nbytes)
    if packing == "large_first":
        return sorted(plain, key=lambda r: -r.array.nbytes)
    if packing == "by_module":
        return sorted(plain, key=lambda r: (r.module != kernel_module, r.module))
    candidates = [ConstantCandidate(r.name, r.module, int(r.array.nbytes),
                                    tuple(r.array.shape), r.array.dtype, i)
                  for i, r in enumerate(plain)]
    ranked = list(packing(list(candidates)))
    if sorted(c.order for c in ranked) != list(range(len(plain))) or \
            not all(isinstance(c, ConstantCandidate) for c in ranked):
        raise ValueError(f"the packing function {getattr(packing, '__name__', packing)!r} "
                         f"must return each of the {len(plain)} candidates it was given "
                         f"exactly once")
    return [plain[c.order] for c in ranked]


def _decide(arrays: list, policy, kernel_name: str, kernel_module: str, error):
    """Place every array: returns (ref -> (space, reason) in input order, warnings).
    `error(message, hint)` makes the exception raised for an overfull bank."""
    placed = {}
    marked = [r for r in arrays if isinstance(r.array, ConstantArray)]
    total = sum(r.array.nbytes for r in marked)
    if total > CONSTANT_MEMORY_BYTES:
        names = ", ".join(f"{r.name} ({r.array.nbytes} bytes)" for r in marked)
        raise error(f"constant memory overflow: arrays marked constant() need {total} "
                    f"bytes, past the {CONSTANT_MEMORY_BYTES}-byte constant bank: {names}",
                    "leave the largest unmarked (plain NumPy arrays spill to global "
                    "memory), mark it global_memory(), or pass it as a kernel argument")
    for r in marked:
        placed[id(r)] = ("constant", "marked constant()")
    plain = []
    for r in arrays:
        if isinstance(r.array, GlobalArray):
            placed[id(r)] = ("global", "marked global_memory()")
        elif not isinstance(r.array, ConstantArray):
            plain.append(r)
    spilled = []
    if policy.placement == "explicit":
        for r in plain:
            placed[id(r)] = ("global", "explicit-only policy")
    else:
        for r in _ranked(policy, plain, kernel_module):
            if total + r.array.nbytes <= CONSTANT_MEMORY_BYTES:
                total += r.array.nbytes
                placed[id(r)] = ("constant", "automatic")
            else:
                placed[id(r)] = ("global", "spilled")
                spilled.append(r)
    messages = []
    # Named largest first (ties in order of use), the order a full bank gives them up.
    position = {id(r): i for i, r in enumerate(arrays)}
    spilled.sort(key=lambda r: (-r.array.nbytes, position[id(r)]))
    if spilled and policy.spill_warning:
        messages.append(f"kernel {kernel_name}: module-level arrays "
                        f"{', '.join(r.name for r in spilled)} do not fit in the "
                        f"{CONSTANT_MEMORY_BYTES}-byte constant bank and are read from "
                        f"global memory")
    elif not spilled and policy.warn_range is not None:
        low, high = policy.warn_range
        if total and low * CONSTANT_MEMORY_BYTES < total <= high * CONSTANT_MEMORY_BYTES:
            messages.append(f"kernel {kernel_name}: {total} bytes of constant data, near "
                            f"the {CONSTANT_MEMORY_BYTES}-byte constant bank")
    return [(r, *placed[id(r)]) for r in arrays], messages


def _unique(refs) -> list:
    arrays = {}
    for ref in refs:
        arrays.setdefault(id(ref.array), ref)
    return list(arrays.values())


def placement_report(kernel_typed) -> PlacementReport:
    """Where the module of the kernel typed as `kernel_typed` places its module-level
    arrays (the same decision compiling makes; warnings are listed, not emitted).

    Raises
    ------
    CompileError
        The arrays marked `constant()` do not fit in the bank.
    """
    from cupric.compiler.frontend.source import get_source
    py_func = kernel_typed.py_func
    policy = policy_of(py_func)

    def error(message, hint):
        src = get_source(py_func)
        return src.error(src.tree, message, hint=hint)
    decided, messages = _decide(_unique(_reachable(kernel_typed)), policy,
                                kernel_typed.name, py_func.__module__ or "", error)
    entries = tuple(ConstantPlacement(r.name, r.module, int(r.array.nbytes), space, why)
                    for r, space, why in decided)
    return PlacementReport(kernel_typed.name, policy, entries, warnings=tuple(messages))


def _placement(cg, kernel_typed) -> dict:
    """id(array) -> (global name, address space), deciding for the whole module."""
    py_func = getattr(kernel_typed, "py_func", None)
    policy = policy_of(py_func) if py_func is not None else policy_of(None)
    module_name = getattr(py_func, "__module__", "") or ""
    decided, messages = _decide(
        _unique(_reachable(kernel_typed)), policy, kernel_typed.name, module_name,
        lambda message, hint: cg.error(cg.src.tree, message, hint=hint))
    for message in messages:
        warnings.warn(message, ConstantMemoryWarning, stacklevel=2)
    placement = {}
    module = cg.mcg.module
    for ref, space_name, _ in decided:
        space = ll.CONSTANT if space_name == "constant" else ll.GLOBAL
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
