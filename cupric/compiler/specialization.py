"""One compiled variant of a kernel (`Specialization`): concrete parameter types, whether
its arrays may alias, its typed IR, NVVM IR, PTX/cubin (from a shipped bundle, the disk
cache or libNVVM) and the runtime's launch handle on each device it was loaded on.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cupric.compiler.errors import CompileError

if TYPE_CHECKING:
    from cupric.compiler.kernel import Kernel

__all__ = ["Specialization", "param_types"]


class Specialization:
    """One compiled variant of a kernel: concrete parameter types, whether array
    arguments are known not to alias, its NVVM IR, PTX/cubin and launch handle.

    With `noalias`, the arrays the kernel never writes are typed read-only (loaded
    through the non-coherent cache) and every array pointer is `noalias`; with
    `aligned`, array pointers are known 16-byte aligned.
    """

    def __init__(self, kern: Kernel, arg_types: tuple, noalias: bool,
                 aligned: bool = False) -> None:
        self.kernel = kern
        self.arg_types = arg_types
        self.noalias = noalias
        self.aligned = aligned
        self._typed = None
        self._ir = None
        self._artifact = None
        self._prepared = None        # the launch handle on the first device it was loaded
        self._on_device: dict = {}   # device ordinal -> launch handle (several GPUs)
        self._lock = threading.Lock()

    @property
    def typed(self):
        """The typed IR (`TypedFunction`)."""
        if self._typed is None:
            from cupric.compiler.specialize import type_kernel
            types = self.arg_types
            if self.noalias:
                types = _readonly_types(types, self.kernel.writes(types))
            self._typed = type_kernel(self.kernel.py_func, types)
        return self._typed

    @property
    def ir(self) -> str:
        """NVVM IR text."""
        if self._ir is None:
            from cupric.compiler.codegen.module import lower_kernel
            k = self.kernel
            self._ir = lower_kernel(self.typed, k.symbol, noalias=self.noalias,
                                    aligned=self.aligned,
                                    debug=k.options.debug, lineinfo=k.options.lineinfo,
                                    fast_math=k.fast_math, c_division=k.c_division,
                                    bounds_check=k.bounds_check)
        return self._ir

    def cache_key(self, options) -> str:
        """Key of the compiled code: the kernel's code fingerprint, the parameter types,
        the variant and the resolved options (no typing needed, so a new process finds
        cached code without compiling anything)."""
        from cupric.compiler.cache import make_key
        from cupric.device.const import policy_of
        k = self.kernel
        return make_key("cupric.frontend", k.fingerprint, repr(self.arg_types), self.noalias,
                        self.aligned,
                        k.fast_math, k.c_division, k.bounds_check, options.cache_key(),
                        policy_of(k.py_func).cache_key())

    def artifact(self, arch=None):
        """Compiled PTX/cubin (`cupric.compiler.backend.Artifact`) for `arch` (default:
        the kernel's arch, else the current device's, else sm_90)."""
        from cupric.compiler import backend
        options = self.kernel.options.resolve(arch)
        if self._artifact is not None and self._artifact.arch == options.arch:
            return self._artifact
        key = self.cache_key(options)
        # A registered kernel bundle (shipped, compiled code) comes before the cache.
        from cupric.compiler import bundle
        artifact = bundle.lookup(self, options) or backend.lookup(key, options=options)
        if artifact is None:
            nvvm_ready = _start_toolchain_load()
            try:
                ir = self.ir
            except CompileError as exc:
                raise exc.with_traceback(None) from None
            finally:
                nvvm_ready.wait()
            from cupric.compiler.errors import ToolchainNotFoundError
            try:
                artifact = backend.build(ir, options=options, key=key)
            except ToolchainNotFoundError as exc:
                raise bundle.missing_error(self, options, exc) from None
        self._artifact = artifact
        return artifact

    def prepared(self, device: int | None = None):
        """The runtime launch handle on the current device (loading the module there on
        first use). `device`, when given, is the current device's ordinal (the launch
        path knows it on machines with several GPUs): each device gets its own module."""
        if device is None:
            if self._prepared is not None:
                return self._prepared
        else:
            known = self._on_device.get(device)
            if known is not None:
                return known
        with self._lock:
            if device is None and self._prepared is not None:
                return self._prepared
            if device is not None and device in self._on_device:
                return self._on_device[device]
            from cupric.compiler.target import current_arch
            from cupric.runtime import Module
            device_arch = current_arch()
            artifact = self.artifact(None)
            kind, image = artifact.image(device_arch)
            module = Module.from_data(image)
            from cupric.compiler.device_errors import install
            install(module, image)  # bounds-check and assert failures report through it
            function = module.get_function(self.kernel.symbol)
            # A kernel that can reach grid_sync launches cooperatively: the driver
            # then guarantees (or refuses) that all its blocks are resident at once.
            from cupric.simulator.hooks import needs
            cooperative = "grid" in needs(self.kernel.py_func)
            prepared = function.prepare(param_types(self.arg_types),
                                        cooperative=cooperative)
            ordinal = module.device.ordinal
            if self._prepared is None:
                self._prepared = prepared
            self._on_device.setdefault(ordinal, prepared)
            return self._on_device[ordinal] if device is not None else prepared


def _start_toolchain_load() -> threading.Event:
    """Start loading libNVVM and nvJitLink for a cold compile (see
    `toolchain.start_loading`: threads load them while this thread types and lowers the
    kernel); the event is set once libNVVM is loaded (or failed to load). Libraries that
    fail to load are reported by `backend.build` itself, with the package to install."""
    from cupric.compiler import toolchain
    return toolchain.start_loading()


def param_types(arg_types) -> list:
    """The runtime's flattened parameter type names for kernel parameters (Kernel ABI)."""
    from cupric.compiler.typing.ktypes import StructType, TupleType
    from cupric.types import ArrayType, ScalarType
    out: list = []
    for t in arg_types:
        if isinstance(t, ScalarType):
            if t.name == "bf16":
                raise TypeError("a bf16 scalar cannot be a kernel parameter: pass it as f32 "
                                "and convert in the kernel with bf16(x) (arrays of bf16 "
                                "can be)")
            out.append(t.name)
        elif isinstance(t, ArrayType):
            out.append("ptr")
            out.extend(["i64"] * (2 * t.ndim))
        elif isinstance(t, TupleType):
            out.extend(param_types(t.elements))
        elif isinstance(t, StructType):
            out.append(("bytes", t.size, t.align))
        else:
            raise TypeError(f"{t!r} cannot be a kernel parameter")
    return out


def _readonly_types(arg_types, written) -> tuple:
    """`arg_types` with every array parameter not in `written` marked read-only (loaded
    through the non-coherent cache)."""
    from cupric.types import ArrayType
    out = []
    for i, t in enumerate(arg_types):
        if isinstance(t, ArrayType) and i not in written:
            t = ArrayType(t.dtype, t.ndim, t.layout, readonly=True)
        out.append(t)
    return tuple(out)
