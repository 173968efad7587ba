"""The table of intrinsic lowering rules, keyed by `Intrinsic.name`.

A rule says how to type a call (`infer`: argument types -> result type, raising
`TypeError` with a user-facing message) and how to emit it (`lower`: codegen context,
argument values -> result value). Adding an intrinsic is one `register(...)` call; an
intrinsic with no rule is a CompileError at its call site.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Rule", "RULES", "register", "rule_for"]


@dataclass(frozen=True)
class Rule:
    """How one intrinsic compiles.

    Parameters
    ----------
    name : str
        The intrinsic's dotted name (`"threadIdx.x"`, `"syncthreads"`).
    infer : callable
        `infer(arg_types: list[Type], const_args: list) -> Type`; `const_args[i]` is the
        Python value of argument i when it is a compile-time constant, else None. Raises
        `TypeError` with a message for the user when the arguments do not fit.
    lower : callable
        `lower(cg, args: list[KValue], arg_types, result_type, const_args) -> KValue`
        where `cg` is the function codegen (`cupric.compiler.codegen.function`).
    writes : frozenset of int
        Indices of array arguments the intrinsic writes through (atomics, stores). Arrays
        passed anywhere else stay eligible for the read-only data path.
    """

    name: str
    infer: Callable
    lower: Callable
    writes: frozenset = field(default_factory=frozenset)


RULES: dict[str, Rule] = {}


def register(name: str, infer: Callable, lower: Callable, writes=()) -> Rule:
    """Add (or replace) the lowering rule of intrinsic `name`."""
    rule = Rule(name, infer, lower, frozenset(writes))
    RULES[name] = rule
    return rule


def rule_for(name: str) -> Rule | None:
    """The rule of intrinsic `name`, loading the built-in tables on first use."""
    if not _loaded:
        _load_builtin_rules()
    return RULES.get(name)


_loaded = False


def _load_builtin_rules() -> None:
    global _loaded
    _loaded = True
    from cupric.compiler.lowering import indices  # noqa: F401  (registers its rules)
