"""A small, typed, pure-Python builder of NVVM IR text (LLVM 7 dialect, typed pointers).

Types (`ir.types`), values and constants (`ir.values`), modules, functions and metadata
(`ir.module`) and the instruction builder (`ir.builder`). No libNVVM dependency: the
text it renders is checked by unit tests and handed to libNVVM by the backend.
"""

from cupric.compiler.ir import types
from cupric.compiler.ir.builder import Builder, IRTypeError
from cupric.compiler.ir.module import Block, Function, GlobalVariable, Module
from cupric.compiler.ir.values import (Constant, Value, const_bool, const_float, const_int,
                                       undef, zero)

__all__ = ["types", "Builder", "IRTypeError", "Block", "Function", "GlobalVariable",
           "Module", "Constant", "Value", "const_bool", "const_float", "const_int", "undef",
           "zero"]
