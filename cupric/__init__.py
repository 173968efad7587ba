"""cupric: fast GPU code fully in Python.

Kernels written as Python functions compile through libNVVM to PTX and cubin
(`cupric.kernel`), run on a Pythonic host runtime over the CUDA Driver API
(`cupric.runtime`), or on the CPU simulator (`cupric.simulator`) where no GPU is present.

Importing cupric never touches the GPU and loads submodules only when first used.
"""

from __future__ import annotations

from ._lazy import attach

__version__ = "0.1.0"

# Public names resolved lazily so that `import cupric` stays fast (goal: < 150 ms).
_LAZY = {
    "kernel": ("cupric.compiler.kernel", "kernel"),
    "device_function": ("cupric.compiler.kernel", "device_function"),
    "types": ("cupric.types", None),
    "runtime": ("cupric.runtime", None),
    "device": ("cupric.device", None),
    "compiler": ("cupric.compiler", None),
    "simulator": ("cupric.simulator", None),
    "kernels": ("cupric.kernels", None),
    "gpu_rand": ("cupric.gpu_rand", None),
    "cublas": ("cupric.cublas", None),
    "cudnn": ("cupric.cudnn", None),
    "optix": ("cupric.optix", None),
    "bindings_gen": ("cupric.bindings_gen", None),
}

__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = attach(__name__, globals(), _LAZY)
