"""External device code: device functions written in CUDA C++ or PTX (or shipped as cubin or
LTO-IR) that cupric kernels call, the way `extern __device__` functions link into a CUDA
C++ program with relocatable device code.

`declare_device` states the function's C signature in cupric types and hands over its
code. Kernel code calls the returned object like any device function: the compiler
declares the symbol in the kernel's NVVM IR (PTX then holds an `.extern .func`), and the
link step (`cupric.compiler.link`, through nvJitLink) adds the function's code to the
kernel's: CUDA C++ is compiled with NVRTC (cuda-python's `cuda.bindings.nvrtc`) to LTO-IR
when nvJitLink links it (so nvJitLink optimizes the external code across its inputs, with
`-lto`), else to PTX. The simulator calls the function's Python twin, when one is given.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading

from cupric.device.registry import Intrinsic, OutsideKernelError, current

__all__ = ["ExternalFunction", "declare_device", "external_for_ptx", "NvrtcError",
           "compile_cuda"]

#: nvJitLink input kinds (nvJitLinkInputType) of the external code.
INPUT_CUBIN, INPUT_PTX, INPUT_LTOIR = 1, 2, 3
_KINDS = ("cuda", "ptx", "cubin", "ltoir")


class NvrtcError(RuntimeError):
    """NVRTC refused the CUDA C++ source; `log` is its compile log."""

    def __init__(self, message: str, log: str = "") -> None:
        self.log = log
        super().__init__(f"{message}\n{log}".rstrip())


# symbol -> ExternalFunction: what the link step adds for an `.extern .func` of the PTX.
_BY_SYMBOL: dict[str, "ExternalFunction"] = {}
_registry_lock = threading.Lock()


class ExternalFunction(Intrinsic):
    """A device function defined outside cupric (made by `declare_device`).

    Kernel code calls it with arguments of its declared parameter types (scalars are
    converted as in a C call; array arguments pass their data pointer); outside the
    compiler, the simulator calls `twin`.
    """

    __slots__ = ("symbol", "returns", "params", "kind", "code", "arch", "twin",
                 "nvrtc_options", "digest", "_compiled", "_lock")

    def __init__(self, symbol, returns, params, kind, code, arch, twin, nvrtc_options):
        # Not entered in cupric.device's REGISTRY: that table lists the library's own
        # intrinsics; this one is the user's, with its lowering rule registered here.
        self.symbol = symbol
        self.returns = returns
        self.params = tuple(params)
        self.kind = kind
        self.code = code
        self.arch = arch
        self.twin = twin
        self.nvrtc_options = tuple(nvrtc_options)
        h = hashlib.blake2b(digest_size=16)
        for part in (symbol, repr(returns), repr(self.params), kind, arch or "",
                     repr(self.nvrtc_options)):
            h.update(part.encode() + b"\0")
        h.update(code)
        self.digest = h.hexdigest()
        self.name = f"external.{symbol}.{self.digest[:12]}"
        self.doc = f"external device function {symbol} ({kind})"
        self._compiled: dict = {}
        self._lock = threading.Lock()

    def __call__(self, *args):
        if current() is None:
            raise OutsideKernelError(f"{self.symbol}() is an external device function: it "
                                     f"runs inside a kernel (compiled, or on the simulator "
                                     f"through its twin)")
        if self.twin is None:
            raise OutsideKernelError(
                f"the external device function {self.symbol} has no Python twin, so the "
                f"simulator cannot run it; pass twin= to declare_device")
        return self.twin(*args)

    def __repr__(self) -> str:
        params = ", ".join(map(repr, self.params))
        return f"<external device function {self.returns!r} {self.symbol}({params})>"

    def bundle_identity(self) -> str:
        """What a kernel bundle's identity includes for a kernel calling this function."""
        return self.digest

    # -- link inputs ------------------------------------------------------------------------

    def link_input(self, arch: str, *, lto: bool) -> tuple[int, bytes, str]:
        """(nvJitLink input kind, data, name) of this function's code for `arch`.

        Raises
        ------
        LinkError
            A cubin or LTO-IR built for another arch.
        NvrtcError, ToolchainNotFoundError
            CUDA C++ that NVRTC refuses, or no NVRTC.
        """
        from cupric.compiler.errors import LinkError
        name = f"{self.symbol}.{self.kind}"
        if self.kind == "ptx":
            return INPUT_PTX, self.code, name
        if self.kind in ("cubin", "ltoir"):
            if self.arch is not None and self.arch != arch:
                raise LinkError(f"the external device function {self.symbol} was given as "
                                f"{self.kind} for {self.arch}; the kernel links for {arch} "
                                f"(declare it with code for {arch}, or as PTX or CUDA C++)")
            return (INPUT_CUBIN if self.kind == "cubin" else INPUT_LTOIR), self.code, name
        key = (arch, lto)
        with self._lock:
            found = self._compiled.get(key)
            if found is None:
                found = self._compiled[key] = compile_cuda(
                    self.code, arch, lto=lto, options=self.nvrtc_options,
                    name=f"{self.symbol}.cu")
        return (INPUT_LTOIR if lto else INPUT_PTX), found, name


def _read(value) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, os.PathLike):
        with open(value, "rb") as fh:
            return fh.read()
    raise TypeError(f"device code must be str, bytes or a path, got {type(value).__name__}")


def declare_device(symbol: str, returns, params, *, cuda=None, ptx=None, cubin=None,
                   ltoir=None, arch: str | None = None, twin=None,
                   nvrtc_options=()) -> ExternalFunction:
    """Declare a device function written outside cupric, for kernels to call.

    Parameters
    ----------
    symbol : str
        The function's link name: C linkage (``extern "C" __device__ float f(...)``) in
        CUDA C++, its `.visible .func` name in PTX.
    returns : cupric scalar type or None
        The return type (None: void).
    params : sequence of cupric types
        Scalar types (`f32`, `i32`, ...) pass by value; `Array[T, N]` passes the array's
        data pointer (``T*`` on the C side, generic address space).
    cuda, ptx, cubin, ltoir : str, bytes or path
        Exactly one: CUDA C++ source (compiled with NVRTC for each arch a kernel links
        for: LTO-IR, linked with ``-lto``), PTX text (assembled by nvJitLink for any arch
        it allows), or a cubin / LTO-IR built for `arch`. The code must be relocatable
        (``-rdc=true``): the function is linked into the kernel's module.
    arch : str, optional
        The architecture a cubin or LTO-IR was built for (required for those).
    twin : callable, optional
        A Python function computing the same result, which the simulator calls.
    nvrtc_options : sequence of str
        Extra NVRTC options for CUDA C++ (``-DNAME=1``, ``-I...``).

    Returns
    -------
    ExternalFunction

    Raises
    ------
    ValueError
        Not exactly one code argument, a bad symbol, or cubin/LTO-IR without `arch`.
    TypeError
        A parameter or return type that is not a cupric scalar or array type.

    Examples
    --------
    >>> fma3 = declare_device("fma3", f32, (f32, f32, f32), cuda='''
    ...     extern "C" __device__ float fma3(float a, float b, float c) {
    ...         return a * b + c; }''', twin=lambda a, b, c: a * b + c)
    >>> @cupric.kernel
    ... def k(x: Array[f32, 1]):
    ...     i = grid(1)
    ...     x[i] = fma3(x[i], 2.0, 1.0)
    """
    from cupric.compiler.options import normalize_arch
    from cupric.types import ArrayType, ScalarType
    if not isinstance(symbol, str) or not re.fullmatch(r"[A-Za-z_$][\w$]*", symbol):
        raise ValueError(f"symbol must be a C identifier, got {symbol!r}")
    given = {k: v for k, v in (("cuda", cuda), ("ptx", ptx), ("cubin", cubin),
                               ("ltoir", ltoir)) if v is not None}
    if len(given) != 1:
        raise ValueError(f"declare_device({symbol!r}) needs exactly one of cuda=, ptx=, "
                         f"cubin=, ltoir= (got {', '.join(given) or 'none'})")
    (kind, value), = given.items()
    if kind in ("cubin", "ltoir") and arch is None:
        raise ValueError(f"{kind} code is built for one architecture: pass arch=")
    if returns is not None and not isinstance(returns, ScalarType):
        raise TypeError(f"{symbol}: the return type must be a cupric scalar type or None, "
                        f"got {returns!r}")
    for i, p in enumerate(params):
        if not isinstance(p, (ScalarType, ArrayType)):
            raise TypeError(f"{symbol}: parameter {i} must be a cupric scalar or Array type, "
                            f"got {p!r}")
    fn = ExternalFunction(symbol, returns, params, kind, _read(value),
                          normalize_arch(arch) if arch else None, twin, nvrtc_options)
    _register_rule(fn)
    with _registry_lock:
        _BY_SYMBOL[symbol] = fn
    return fn


def _register_rule(fn: ExternalFunction) -> None:
    from cupric.compiler.lowering.registry import register
    from cupric.compiler.typing.ktypes import NONE, WeakType
    from cupric.types import ArrayType, ScalarType

    def infer(call):
        if len(call.arg_types) != len(fn.params):
            raise TypeError(f"takes {len(fn.params)} arguments, got {len(call.arg_types)}")
        for i, (want, got) in enumerate(zip(fn.params, call.arg_types)):
            if isinstance(want, ScalarType):
                if not isinstance(got, (ScalarType, WeakType)):
                    raise TypeError(f"argument {i + 1} must be a number ({want!r}), got "
                                    f"{got!r}")
            elif not (isinstance(got, ArrayType) and got.dtype == want.dtype):
                raise TypeError(f"argument {i + 1} must be an array of {want.dtype!r}, got "
                                f"{got!r}")
        return fn.returns if fn.returns is not None else NONE

    def lower(cg, call, args):
        from cupric.compiler.codegen.values import KValue, scalar_lltype
        from cupric.compiler.ir import types as ll
        values = []
        for want, arg in zip(fn.params, args):
            if isinstance(want, ScalarType):
                if isinstance(arg.type, WeakType):
                    arg = cg.convert(arg, arg.type.default, call.node)
                values.append(cg.convert(arg, want, call.node).value)
            else:
                ptr = arg.data
                if getattr(ptr.type, "addrspace", 0):
                    ptr = cg.b.cast("addrspacecast", ptr, ll.PointerType(ptr.type.pointee))
                values.append(ptr)
        ret = scalar_lltype(fn.returns) if fn.returns is not None else ll.void
        result = cg.mcg.call_external(cg.b, fn.symbol, ret, values)
        if fn.returns is None:
            return KValue(NONE, [])
        return KValue(fn.returns, [result])

    register(fn.name, infer, lower)


_EXTERN_RE = re.compile(r"\.extern\s+\.func\s*(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")


def external_for_ptx(ptx: str) -> list[ExternalFunction]:
    """The declared external functions that `ptx` calls (its `.extern .func` names)."""
    if not _BY_SYMBOL or ".extern" not in ptx:
        return []
    names = dict.fromkeys(_EXTERN_RE.findall(ptx))
    return [_BY_SYMBOL[n] for n in names if n in _BY_SYMBOL]


def compile_cuda(source: bytes, arch: str, *, lto: bool, options=(),
                 name: str = "external.cu") -> bytes:
    """CUDA C++ `source` compiled by NVRTC for `arch` as relocatable device code: LTO-IR
    with `lto`, else PTX.

    Raises
    ------
    ToolchainNotFoundError
        cuda-python's NVRTC binding or libnvrtc is missing.
    NvrtcError
        The source does not compile (with NVRTC's log).
    """
    from cupric.compiler.errors import ToolchainNotFoundError
    try:
        from cuda.bindings import nvrtc
        err, prog = nvrtc.nvrtcCreateProgram(source, name.encode(), 0, [], [])
    except Exception as exc:  # ImportError, or libnvrtc not found by cuda.pathfinder
        raise ToolchainNotFoundError(f"compiling CUDA C++ device code needs NVRTC "
                                     f"(pip install nvidia-cuda-nvrtc): {exc}") from None
    _nvrtc_check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}", "-rdc=true", *(["-dlto"] if lto else []),
                *options]
        encoded = [o.encode() for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise NvrtcError(f"NVRTC could not compile {name} for {arch} "
                             f"({' '.join(opts)})", log.rstrip(b"\0 ").decode(errors="replace"))
        if lto:
            err, size = nvrtc.nvrtcGetLTOIRSize(prog)
            _nvrtc_check(nvrtc, err, "nvrtcGetLTOIRSize")
            out = b" " * size
            _nvrtc_check(nvrtc, nvrtc.nvrtcGetLTOIR(prog, out)[0], "nvrtcGetLTOIR")
            return out
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _nvrtc_check(nvrtc, err, "nvrtcGetPTXSize")
        out = b" " * size
        _nvrtc_check(nvrtc, nvrtc.nvrtcGetPTX(prog, out)[0], "nvrtcGetPTX")
        return out.rstrip(b"\0")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc_check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise NvrtcError(f"{what} failed: {err.name}")
