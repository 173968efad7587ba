"""libNVVM: NVVM IR (LLVM 7 textual IR with typed pointers) -> PTX, on the CPU.

A libNVVM *program* collects IR modules (ours, plus libdevice added lazily so only the
`__nv_*` functions a kernel calls get linked in), verifies them and compiles them to PTX
for one virtual architecture. Text is checked here first, because some malformed modules
make libNVVM abort the whole process instead of returning an error.

Contract with the frontend: emit ``ir_header()`` at the top of every text module and
``ir_version_metadata(n)`` among its named metadata; mark kernels with
``kernel_annotation(...)``. Those strings are exactly what libNVVM 12.x/13.x accepts for
every architecture (see docs/compiler-backend.md).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Sequence

from cupric.compiler.errors import NvvmError
from cupric.compiler.options import CompileOptions

__all__ = [
    "IR_DATALAYOUT", "IR_TRIPLE", "IR_VERSION", "ir_header", "ir_version_metadata",
    "kernel_annotation", "check_module", "verify_ir", "compile_ir", "NvvmOutput",
]

#: The NVPTX 64-bit datalayout. The long, fully spelled form is the one that libNVVM's
#: LLVM 7 path (sm_75..sm_90) and its newer path (sm_100+) both accept; the short form
#: that clang writes fails on sm_100+ ("Target-incompatible DataLayout").
IR_DATALAYOUT = ("e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
                 "f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")
IR_TRIPLE = "nvptx64-nvidia-cuda"
#: NVVM IR version the emitted text conforms to (`!nvvmir.version`); without it libNVVM
#: assumes 1.0 and refuses the module.
IR_VERSION = (2, 0)

_BITCODE_MAGIC = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")  # raw bitcode, bitcode wrapper
_DATALAYOUT_RE = re.compile(rb'^\s*target\s+datalayout\s*=\s*"([^"]*)"', re.MULTILINE)
_TRIPLE_RE = re.compile(rb'^\s*target\s+triple\s*=\s*"([^"]*)"', re.MULTILINE)
_VERSION_RE = re.compile(rb"^\s*!nvvmir\.version\s*=", re.MULTILINE)


def ir_header() -> str:
    """The two lines every text module must start with (datalayout and triple).

    Examples
    --------
    >>> print(ir_header())  # doctest: +ELLIPSIS
    target datalayout = "e-p:64:64:64-...-n16:32:64"
    target triple = "nvptx64-nvidia-cuda"
    <BLANKLINE>
    """
    return f'target datalayout = "{IR_DATALAYOUT}"\ntarget triple = "{IR_TRIPLE}"\n'


def ir_version_metadata(node: int) -> str:
    """The `!nvvmir.version` named metadata, using metadata node number `node`.

    The frontend picks a `node` number no other metadata of the module uses.

    >>> print(ir_version_metadata(7), end="")
    !nvvmir.version = !{!7}
    !7 = !{i32 2, i32 0}
    """
    major, minor = IR_VERSION
    return f"!nvvmir.version = !{{!{node}}}\n!{node} = !{{i32 {major}, i32 {minor}}}\n"


def kernel_annotation(name: str, function_type: str, node: int) -> str:
    """One `!nvvm.annotations` operand marking `@name` as a kernel entry point.

    Parameters
    ----------
    name : str
        The LLVM function name without ``@`` (quoted automatically when needed).
    function_type : str
        Its LLVM function type, e.g. ``"void (float addrspace(1)*, i64)"``.
    node : int
        Metadata node number to define.

    Returns
    -------
    str
        The node definition line; list ``!node`` in
        ``!nvvm.annotations = !{!a, !b, ...}`` yourself (one named metadata per module).

    >>> kernel_annotation("saxpy", "void (float, float addrspace(1)*)", 3)
    '!3 = !{void (float, float addrspace(1)*)* @saxpy, !"kernel", i32 1}'
    """
    if re.fullmatch(r"[A-Za-z_.$][\w.$]*", name):
        symbol = name
    else:  # LLVM quoted identifier; a quote inside is written as the escape \22
        symbol = '"' + name.replace('"', "\\22") + '"'
    return f'!{node} = !{{{function_type}* @{symbol}, !"kernel", i32 1}}'


@dataclass(frozen=True)
class NvvmOutput:
    """What libNVVM produced: PTX text and the program log (warnings; often empty)."""

    ptx: str
    log: str


def _as_bytes(module: str | bytes | bytearray | memoryview) -> bytes:
    if isinstance(module, str):
        return module.encode("utf-8")
    if isinstance(module, (bytes, bytearray, memoryview)):
        return bytes(module)
    raise TypeError(f"an NVVM module is text (str) or bytes, got {type(module).__name__}")


def is_bitcode(data: bytes) -> bool:
    """True when `data` is LLVM bitcode rather than IR text."""
    return data[:4] in _BITCODE_MAGIC


def check_module(module: str | bytes, name: str = "module") -> bytes:
    """Refuse, before libNVVM sees it, a text module that could abort the process.

    Checks that the text is not empty and has no NUL byte, that it declares exactly the
    datalayout `IR_DATALAYOUT` (a module without one makes libNVVM 13's sm_100+ path abort
    the process; other layouts fail there too) and the triple `IR_TRIPLE`, and that it
    carries `!nvvmir.version`. Bitcode passes through unchecked (libdevice is bitcode).

    Returns
    -------
    bytes
        The module as bytes, ready for libNVVM.

    Raises
    ------
    NvvmError
        Naming the module and what is missing, with the line to emit.

    Cost
    ----
    Three regex scans of the text: microseconds for a kernel-sized module.
    """
    data = _as_bytes(module)
    if not data.strip():
        raise NvvmError(f"NVVM module {name!r} is empty")
    if is_bitcode(data):
        return data
    if b"\x00" in data:
        raise NvvmError(f"NVVM module {name!r} contains a NUL byte; IR text must not")
    layout = _DATALAYOUT_RE.search(data)
    if layout is None:
        raise NvvmError(
            f"NVVM module {name!r} has no `target datalayout` line; libNVVM can abort the "
            f"process on such a module, so it was not passed on. Start the module with "
            f"cupric.compiler.nvvm.ir_header():\n{ir_header()}")
    if layout.group(1).decode("utf-8", "replace") != IR_DATALAYOUT:
        raise NvvmError(
            f"NVVM module {name!r} declares datalayout {layout.group(1).decode('utf-8', 'replace')!r}; "
            f"libNVVM needs the NVPTX 64-bit layout on every architecture:\n"
            f'target datalayout = "{IR_DATALAYOUT}"')
    triple = _TRIPLE_RE.search(data)
    if triple is None or triple.group(1).decode("utf-8", "replace") != IR_TRIPLE:
        found = "none" if triple is None else repr(triple.group(1).decode("utf-8", "replace"))
        raise NvvmError(f"NVVM module {name!r} must declare target triple {IR_TRIPLE!r} "
                        f"(found {found})")
    if _VERSION_RE.search(data) is None:
        raise NvvmError(
            f"NVVM module {name!r} lacks `!nvvmir.version` metadata (libNVVM would read it as "
            f"IR 1.0 and refuse it); append cupric.compiler.nvvm.ir_version_metadata(n):\n"
            f"{ir_version_metadata(0)}")
    return data


@functools.cache
def _libdevice_bytes() -> bytes:
    from cupric.compiler.toolchain import libdevice

    with open(libdevice().path, "rb") as file:
        return file.read()


def _hint(log: str, modules: list[bytes]) -> str:
    """Extra advice for the libNVVM failures whose log alone misleads."""
    if "expected type" in log and any(re.search(rb"\bptr\b", m) for m in modules if not is_bitcode(m)):
        return ("hint: the IR uses opaque pointers (`ptr`); libNVVM parses only typed pointers "
                "(`float addrspace(1)*`) for sm_75..sm_90")
    return ""


def _program(modules: Sequence[str | bytes], names: Sequence[str] | None, libdevice):
    """Check modules, create a libNVVM program and add them; returns (program, data).

    The caller owns the program (a `cupric.compiler._abi.NvvmProgram`): close it."""
    if isinstance(modules, (str, bytes, bytearray)):
        raise TypeError("modules must be a list of modules (str or bytes), not one module")
    modules = list(modules)
    if not modules:
        raise NvvmError("no NVVM module to compile")
    if names is None:
        names = [f"cupric_module_{i}" for i in range(len(modules))]
    elif len(names) != len(modules):
        raise ValueError(f"{len(names)} names for {len(modules)} modules")
    data = [check_module(module, name) for module, name in zip(modules, names)]
    if libdevice == "auto":
        libdevice = any(b"@__nv_" in m for m in data if not is_bitcode(m))
    libdevice_data = _libdevice_bytes() if libdevice else None

    from cupric.compiler._abi import LibraryCallError
    from cupric.compiler.toolchain import nvvm_library

    # Raises ToolchainNotFoundError with the package name if libNVVM is missing.
    program = nvvm_library().program()
    try:
        for module, name in zip(data, names):
            program.add_module(module, name)
        if libdevice_data is not None:
            program.add_module(libdevice_data, "libdevice", lazy=True)
    except LibraryCallError as exc:
        log = program.log()
        program.close()
        raise NvvmError(f"libNVVM refused a module ({exc})", log, exc.status) from None
    except BaseException:
        program.close()
        raise
    return program, data


def _fail(program, stage: str, exc, flags: list[str], data: list[bytes]) -> NvvmError:
    log = program.log()
    hint = _hint(log, data)
    message = f"libNVVM {stage} failed ({exc}) with options {' '.join(flags)}"
    return NvvmError(message, f"{log}\n{hint}".strip(), exc.status)


def verify_ir(modules: Sequence[str | bytes], options: CompileOptions | None = None, *,
              names: Sequence[str] | None = None, libdevice: bool | str = "auto") -> str:
    """Check modules with libNVVM's verifier without generating PTX.

    Parameters are those of :func:`compile_ir`.

    Returns
    -------
    str
        The verifier's log (warnings), usually empty.

    Raises
    ------
    NvvmError
        The IR is refused; ``.log`` holds libNVVM's messages (``module (line, col): ...``).
    ToolchainNotFoundError
        libNVVM (or libdevice, when needed) is not installed.
    """
    from cupric.compiler._abi import LibraryCallError

    options = (options or CompileOptions()).resolve()
    flags = options.nvvm_flags()
    program, data = _program(modules, names, libdevice)
    with program:
        try:
            program.verify(flags)
        except LibraryCallError as exc:
            raise _fail(program, "verification", exc, flags, data) from None
        return program.log()


def compile_ir(modules: Sequence[str | bytes], options: CompileOptions | None = None, *,
               names: Sequence[str] | None = None, libdevice: bool | str = "auto",
               verify: bool = True) -> NvvmOutput:
    """Compile NVVM IR modules to PTX with libNVVM.

    Parameters
    ----------
    modules : list of str or bytes
        IR text (checked by :func:`check_module` first) or bitcode. Linked together.
    options : CompileOptions, optional
        Defaults to ``CompileOptions()``; an unset arch is resolved (current device, else
        ``options.DEFAULT_ARCH``).
    names : list of str, optional
        Module names used in libNVVM's messages (default ``cupric_module_<i>``).
    libdevice : bool or "auto"
        Add libdevice lazily. ``"auto"`` (default) adds it when a text module mentions an
        ``@__nv_`` function.
    verify : bool
        Run libNVVM's verifier first (default). Its messages are clearer than the
        compiler's for malformed IR.

    Returns
    -------
    NvvmOutput
        ``ptx`` (text, starts with libNVVM's header and ``.version``) and ``log``.

    Raises
    ------
    NvvmError
        Refused before libNVVM (missing datalayout, triple or version metadata) or by
        libNVVM; ``.log`` holds the program log and ``.code`` the nvvmResult.
    ToolchainNotFoundError
        libNVVM or libdevice is not installed (names the pip package).

    Examples
    --------
    >>> from cupric.compiler.options import CompileOptions
    >>> out = compile_ir([ir_header() + ir_version_metadata(0)], CompileOptions(arch="sm_80"))
    >>> ".target sm_80" in out.ptx
    True

    Cost
    ----
    A few ms for a small kernel; the first call also loads libNVVM (and reads libdevice,
    about 500 kB, once per process when needed).

    Thread safety
    -------------
    Safe: each call owns its libNVVM program, and libNVVM is thread-safe across programs
    (compile several kernels on several threads at once).
    """
    from cupric.compiler._abi import LibraryCallError

    options = (options or CompileOptions()).resolve()
    flags = options.nvvm_flags()
    program, data = _program(modules, names, libdevice)
    with program:
        try:
            if verify:
                program.verify(flags)
        except LibraryCallError as exc:
            raise _fail(program, "verification", exc, flags, data) from None
        try:
            program.compile(flags)
        except LibraryCallError as exc:
            raise _fail(program, "compilation", exc, flags, data) from None
        ptx = program.result()
        from cupric.compiler.toolchain import note_ptx

        note_ptx(ptx)  # the release is in the header: spares `nvvm_release` its probe
        return NvvmOutput(ptx=ptx, log=program.log())
