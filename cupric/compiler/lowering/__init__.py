"""Lowering tables: how `cupric.device` intrinsics, the `math` module and builtins become
NVVM IR (PTX special registers, `llvm.nvvm.*` intrinsics, libdevice `__nv_*` calls)."""

from cupric.compiler.lowering.registry import RULES, Rule, register, rule_for

__all__ = ["RULES", "Rule", "register", "rule_for"]
