"""The table of intrinsic lowering rules, keyed by `Intrinsic.name`.

A rule says how to type a call (`infer`: argument types -> result type, raising
`TypeError` with a user-facing message) and how to emit it (`lower`: codegen context,
argument values -> result value). Adding an intrinsic is one `register(...)` call; an
intrinsic with no rule is a CompileError at its call site.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Rule", "RULES", "Call", "register", "register_iterable", "rule_for"]


@dataclass(frozen=True)
class Rule:
    """How one intrinsic compiles.

    Parameters
    ----------
    name : str
        The intrinsic's dotted name (`"threadIdx.x"`, `"syncthreads"`).
    infer : callable
        `infer(call) -> Type` where `call` (a `Call`) holds `arg_types`, `consts` (the
        Python value of each argument that is a compile-time constant, else None) and
        `keywords` (name -> constant value; keyword arguments of intrinsics must be
        constants). Raises `TypeError` with a message for the user when the arguments
        do not fit.
    lower : callable
        `lower(cg, call, args: list[KValue]) -> KValue` where `cg` is the function
        codegen (`cupric.compiler.codegen.function.FunctionCodegen`) and `call` also
        carries `result_type`.
    writes : frozenset of int
        Indices of array arguments the intrinsic writes through (atomics, stores). Arrays
        passed anywhere else stay eligible for the read-only data path.
    """

    name: str
    infer: Callable
    lower: Callable
    writes: frozenset = field(default_factory=frozenset)


class Call:
    """One call site of an intrinsic, as rules see it."""

    __slots__ = ("arg_types", "consts", "keywords", "result_type", "node")

    def __init__(self, arg_types, consts, keywords, node=None) -> None:
        self.arg_types = list(arg_types)
        self.consts = list(consts)
        self.keywords = dict(keywords)
        self.result_type = None
        self.node = node

    def keyword(self, name: str, default, allowed=None):
        """The constant value of keyword `name` (or `default`), checked against
        `allowed`."""
        value = self.keywords.get(name, default)
        if allowed is not None and value not in allowed:
            raise TypeError(f"{name}= must be one of {', '.join(map(repr, allowed))}, got "
                            f"{value!r}")
        return value


RULES: dict[str, Rule] = {}


def register(name: str, infer: Callable, lower: Callable, writes=()) -> Rule:
    """Add (or replace) the lowering rule of intrinsic `name`."""
    rule = Rule(name, infer, lower, frozenset(writes))
    RULES[name] = rule
    return rule


def register_iterable(name: str, usage: str) -> Rule:
    """The rule of an intrinsic that is only the iterable of a for loop (`usage` shows
    how), which the typer or the frontend handles there: any other use is an error."""
    message = f"{name}(n) is used only as the iterable of a for loop: {usage}"

    def infer(call):
        raise TypeError(message)

    def lower(cg, call, args):
        # Unreachable: the typer refuses every use outside a for statement.
        raise cg.error(call.node, message)

    return register(name, infer, lower)


def rule_for(name: str) -> Rule | None:
    """The rule of intrinsic `name`, loading the built-in tables on first use: the module
    that holds it first (a kernel that only reads thread indices imports one small
    module, which keeps a cold compile short), all of them when that does not tell."""
    rule = RULES.get(name)
    if rule is not None or _loaded:
        return rule
    home = _HOME.get(name.split(".", 1)[0])
    if home is not None:
        import importlib
        importlib.import_module(f"cupric.compiler.lowering.{home}")
        rule = RULES.get(name)
        if rule is not None:
            return rule
    _load_builtin_rules()
    return RULES.get(name)


_loaded = False

# First component of an intrinsic's name -> the lowering module that registers it.
_HOME = {
    **dict.fromkeys(("threadIdx", "blockIdx", "blockDim", "gridDim", "grid", "gridsize",
                     "warpsize", "laneid", "syncthreads"), "indices"),
    **dict.fromkeys(("syncthreads_and", "syncthreads_or", "syncthreads_count", "syncwarp",
                     "threadfence", "threadfence_block", "threadfence_system",
                     "nanosleep"), "sync"),
    **dict.fromkeys(("trap", "clock", "clock64", "globaltimer"), "io"),
    **dict.fromkeys(("grid_sync", "grid_stride"), "coop"),
    **dict.fromkeys(("shared", "local"), "memory"),
    "atomic": "atomic", "warp": "warp", "bits": "bits", "math": "mathx", "half": "half",
    "vector": "vector", "mma": "mma", "cp_async": "mma",
    **dict.fromkeys(("wgmma", "mbarrier", "tma", "cluster"), "hopper"),
    **dict.fromkeys(("unroll", "vload", "vstore"), "wide"),
}


def _load_builtin_rules() -> None:
    global _loaded
    _loaded = True
    from cupric.compiler.lowering import indices  # noqa: F401  (registers its rules)
    # The GPU-side standard library (cupric.device); each module registers its rules.
    from cupric.compiler.lowering import (atomic, bits, coop, half, io, mathx,  # noqa: F401
                                          memory, mma, sync, vector, warp, wide)
    # OptiX device functions: registered here too, so that using one in a plain kernel
    # gets OptiX's own "only in OptiX programs" error rather than "no lowering".
    from cupric.compiler.lowering import optix  # noqa: F401
    # sm_90: wgmma, mbarrier, TMA, clusters.
    from cupric.compiler.lowering import hopper  # noqa: F401
