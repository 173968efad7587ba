"""cupric.compiler: Python kernels -> typed IR -> NVVM IR -> libNVVM -> PTX/cubin.

Frontend: `kernel`/`device_function` (kernel.py), parsing and name resolution
(frontend/), type inference (typing/), the pure-Python IR builder (ir/), codegen
(codegen/), intrinsic and math lowering tables (lowering/), the command line (cli.py).
Backend: toolchain discovery, options, libNVVM, linking, targets and the kernel cache.
Names here load lazily so importing the package stays cheap. (`cupric.kernel` is the
decorator; `cupric.compiler.kernel` is the module that defines it.)
"""

from __future__ import annotations

from .._lazy import attach

_LAZY = {
    "device_function": ("cupric.compiler.kernel", "device_function"),
    "Kernel": ("cupric.compiler.kernel", "Kernel"),
    "DeviceFunction": ("cupric.compiler.kernel", "DeviceFunction"),
    "CompileOptions": ("cupric.compiler.options", "CompileOptions"),
    "CompileError": ("cupric.compiler.errors", "CompileError"),
    "CompilerError": ("cupric.compiler.errors", "CompilerError"),
    "NvvmError": ("cupric.compiler.errors", "NvvmError"),
    "LinkError": ("cupric.compiler.errors", "LinkError"),
    "ToolchainNotFoundError": ("cupric.compiler.errors", "ToolchainNotFoundError"),
    "register_intrinsic": ("cupric.compiler.lowering.registry", "register"),
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = attach(__name__, globals(), _LAZY)
