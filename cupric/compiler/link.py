"""PTX -> cubin: assemble PTX into SASS for one real architecture, ahead of the driver.

nvJitLink (a library, no subprocess; through `cupric.runtime.linker`, cupric's one
binding of it, opened on the library the toolchain search found) is preferred; the
``ptxas`` executable is the fallback. Loading a cubin skips the driver's JIT, and so its PTX ISA limit. Both tools
report per-kernel resources (registers, spills, shared memory), which are parsed here.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field

from cupric.compiler.errors import LinkError, ToolchainNotFoundError
from cupric.compiler.options import CompileOptions, normalize_arch

__all__ = [
    "NoLinkerError", "ResourceUsage", "LinkOutput", "link_ptx", "ptx_to_cubin", "ptx_to_cubin_with_release",
    "parse_resource_usage",
]


class NoLinkerError(LinkError):
    """Linkers are installed but none reads this PTX (each is older than its ISA version)."""


@dataclass(frozen=True)
class ResourceUsage:
    """What one kernel uses per thread / per block, as the assembler reports it.

    Attributes
    ----------
    registers : int
        Registers per thread (bounds occupancy).
    stack_bytes, spill_stores, spill_loads : int
        Stack frame size and bytes spilled to local memory (non-zero spills cost bandwidth).
    shared_bytes : int
        Static shared memory per block.
    const_bytes : int
        Constant bank 0 (kernel parameters and constants).
    barriers : int
        Named barriers used.
    """

    registers: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_bytes: int = 0
    const_bytes: int = 0
    barriers: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LinkOutput:
    """A cubin and how it was made."""

    cubin: bytes
    log: str
    linker: str  # "nvjitlink" or "ptxas"
    linker_release: tuple[int, ...]
    arch: str
    resource_usage: dict[str, ResourceUsage] = field(default_factory=dict)


# ptxas -v / nvJitLink -verbose lines (the same assembler writes both):
#   ptxas info    : Compiling entry function 'kexp' for 'sm_90'
#   ptxas info    : Function properties for kexp
#   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 12 registers, used 0 barriers, 1024 bytes smem, 368 bytes cmem[0]
_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES_RE = re.compile(r"Function properties for '?([^'\s:]+)'?")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(.*)")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[0\]")


def parse_resource_usage(log: str) -> dict[str, ResourceUsage]:
    """Per-kernel resources from a ``ptxas -v`` or nvJitLink ``-verbose`` log.

    Returns
    -------
    dict
        Kernel name -> `ResourceUsage`; empty when the log has no such lines.
    """
    usage: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        # nvJitLink repeats a summary as "info    : ..." lines; the "ptxas" ones suffice.
        if line.startswith("info"):
            continue
        if match := _ENTRY_RE.search(line):
            current = match.group(1)
            usage.setdefault(current, {})
        elif match := _PROPERTIES_RE.search(line):
            current = match.group(1)
            usage.setdefault(current, {})
        elif current is not None and (match := _FRAME_RE.search(line)):
            usage[current].update(stack_bytes=int(match.group(1)), spill_stores=int(match.group(2)),
                                  spill_loads=int(match.group(3)))
        elif current is not None and (match := _USED_RE.search(line)):
            entry = usage[current]
            entry["registers"] = int(match.group(1))
            entry["barriers"] = int(match.group(2) or 0)
            if smem := _SMEM_RE.search(match.group(3)):
                entry["shared_bytes"] = int(smem.group(1))
            if cmem := _CMEM_RE.search(match.group(3)):
                entry["const_bytes"] = int(cmem.group(1))
    return {name: ResourceUsage(**values) for name, values in usage.items()}


def _isa_fits(ptx: str, release: tuple[int, ...] | None) -> bool:
    """Whether a tool of CUDA `release` reads the PTX (its ISA is not newer than the tool)."""
    from cupric.compiler.target import ptx_isa, ptx_isa_of_release

    if release is None:
        return True  # unknown version: let the tool itself decide
    return ptx_isa(ptx) <= ptx_isa_of_release(release)


#: nvJitLink option that turns off its cache of intermediate steps. That cache only helps
#: a process that links the same input twice (the kernel cache answers those first), and
#: setting it up made the first link of a process several times slower (nvJitLink 13.0;
#: the same cubin with the option). Emptied when an nvJitLink
#: refuses the option.
_NO_CACHE = ["-no-cache"]


def _nvjitlink_handle(flags: list[str]):
    """A new nvJitLink handle for `flags` plus `_NO_CACHE` (dropped for good when this
    nvJitLink refuses it but takes `flags` alone)."""
    from cupric.compiler import toolchain
    from cupric.runtime.linker import LibraryCallError

    library = toolchain.nvjitlink_library()
    extra = list(_NO_CACHE)
    try:
        return library.handle(flags + extra)
    except LibraryCallError as exc:
        if not extra or exc.name != "NVJITLINK_ERROR_UNRECOGNIZED_OPTION":
            raise
    handle = library.handle(flags)  # raises again when `flags` themselves are refused
    _NO_CACHE.clear()
    return handle


def _via_nvjitlink(ptx: str, options: CompileOptions, release: tuple[int, ...],
                   extra: tuple = ()) -> LinkOutput:
    """`extra`: further inputs, (nvJitLink input kind, data, name) each (the code of
    external device functions); LTO-IR among them turns on link-time optimization."""
    from cupric.compiler.external import INPUT_LTOIR
    from cupric.runtime.linker import NVJITLINK_INPUT_PTX, LibraryCallError

    flags = options.nvjitlink_flags()
    if any(kind == INPUT_LTOIR for kind, _, _ in extra):
        flags.append("-lto")
    data = ptx.encode("utf-8")
    try:
        handle = _nvjitlink_handle(flags)
    except LibraryCallError as exc:  # refused options: there is no handle to ask
        raise LinkError(f"nvJitLink refused the options {' '.join(flags)} ({exc})") from None
    with handle:
        try:
            handle.add_data(NVJITLINK_INPUT_PTX, data, "cupric.ptx")
            for kind, blob, name in extra:
                handle.add_data(kind, blob, name)
            handle.complete()
        except LibraryCallError as exc:
            raise LinkError(f"nvJitLink {'.'.join(map(str, release))} failed ({exc}) with "
                            f"options {' '.join(flags)}", handle.error_log()) from None
        cubin = handle.cubin()
        info = handle.info_log()
    return LinkOutput(cubin, info, "nvjitlink", release, options.arch,
                      parse_resource_usage(info))


def _via_ptxas(ptx: str, options: CompileOptions, path: str,
               release: tuple[int, ...] | None) -> LinkOutput:
    flags = options.ptxas_flags()
    with tempfile.TemporaryDirectory(prefix="cupric-ptxas-") as folder:
        source = os.path.join(folder, "kernel.ptx")
        target = os.path.join(folder, "kernel.cubin")
        with open(source, "w", encoding="utf-8") as file:
            file.write(ptx)
        result = subprocess.run([path, *flags, source, "-o", target], capture_output=True,
                                text=True, timeout=600, check=False)
        log = (result.stdout + result.stderr).strip()
        if result.returncode != 0:
            raise LinkError(f"ptxas ({path}) failed with exit status {result.returncode}, "
                            f"options {' '.join(flags)}", log)
        with open(target, "rb") as file:
            cubin = file.read()
    return LinkOutput(cubin, log, "ptxas", release or (), options.arch,
                      parse_resource_usage(log))


def link_ptx(ptx: str, options: CompileOptions | None = None, *,
             linker: str = "auto") -> LinkOutput:
    """Assemble PTX into a cubin for ``options.arch``.

    Parameters
    ----------
    ptx : str
        PTX text, e.g. from `cupric.compiler.nvvm.compile_ir`.
    options : CompileOptions, optional
        Arch (resolved if unset), optimization level, debug/lineinfo, register limit.
    linker : {"auto", "nvjitlink", "ptxas"}
        ``"auto"`` uses nvJitLink, falling back to ptxas when nvJitLink is not installed or
        is older than the PTX's ISA version; a real assembly error is not retried.

    Returns
    -------
    LinkOutput
        The cubin, the tool's log, which tool and release made it, and per-kernel
        `ResourceUsage`.

    Raises
    ------
    LinkError
        The assembler refused the PTX (``.log`` has its messages).
    NoLinkerError
        Every installed linker is older than the PTX's ISA version (a `LinkError`).
    ToolchainNotFoundError
        Neither nvJitLink nor ptxas is installed.

    Cost
    ----
    Tens of ms for a small kernel (nvJitLink in process; ptxas adds a process start).

    Thread safety
    -------------
    Safe: each call owns its nvJitLink handle or temporary folder.
    """
    from cupric.compiler import toolchain

    options = (options or CompileOptions()).resolve()
    if linker not in ("auto", "nvjitlink", "ptxas"):
        raise ValueError(f"linker must be 'auto', 'nvjitlink' or 'ptxas', got {linker!r}")
    if ".extern .func" in ptx:
        from cupric.compiler.external import external_for_ptx
        externals = external_for_ptx(ptx)
        if externals:
            return _link_externals(ptx, options, linker, externals)
    skipped: list[str] = []  # why a linker was passed over, for the final error
    nvjitlink_missing = False
    if linker in ("auto", "nvjitlink"):
        try:
            tool = toolchain.nvjitlink()
        except ToolchainNotFoundError as exc:
            if linker == "nvjitlink":
                raise
            nvjitlink_missing = True
            skipped.append(str(exc).splitlines()[0])
        else:
            if _isa_fits(ptx, tool.version):
                return _via_nvjitlink(ptx, options, tool.version)
            skipped.append(_too_old("nvJitLink", tool, ptx))
    if linker in ("auto", "ptxas"):
        try:
            tool = toolchain.ptxas()
        except ToolchainNotFoundError as exc:
            if linker == "ptxas":
                raise
            if nvjitlink_missing:
                raise ToolchainNotFoundError(
                    "neither nvJitLink nor ptxas is installed; `pip install nvidia-nvjitlink` "
                    "(or nvidia-cuda-nvcc, which provides ptxas)") from exc
            skipped.append(str(exc).splitlines()[0])
        else:
            if _isa_fits(ptx, tool.version):
                return _via_ptxas(ptx, options, tool.path, tool.version)
            skipped.append(_too_old("ptxas", tool, ptx))
    raise NoLinkerError("no installed linker can read this PTX", "\n".join(skipped))


def _link_externals(ptx: str, options: CompileOptions, linker: str, externals) -> LinkOutput:
    """Link PTX that calls external device functions together with their code: only
    nvJitLink links several inputs in process (CUDA C++ enters as LTO-IR)."""
    from cupric.compiler import toolchain

    names = ", ".join(fn.symbol for fn in externals)
    if linker == "ptxas":
        raise LinkError(f"the kernel calls external device functions ({names}); linking "
                        f"them needs nvJitLink, not ptxas")
    try:
        tool = toolchain.nvjitlink()
    except ToolchainNotFoundError as exc:
        raise ToolchainNotFoundError(f"the kernel calls external device functions "
                                     f"({names}), which nvJitLink links: {exc}") from None
    if not _isa_fits(ptx, tool.version):
        raise NoLinkerError(f"the kernel calls external device functions ({names})",
                            _too_old("nvJitLink", tool, ptx))
    inputs = tuple(fn.link_input(options.arch, lto=True) for fn in externals)
    return _via_nvjitlink(ptx, options, tool.version, inputs)


def _too_old(what: str, tool, ptx: str) -> str:
    from cupric.compiler.target import ptx_isa, ptx_isa_of_release

    isa = ptx_isa(ptx)
    reads = ptx_isa_of_release(tool.version)
    return (f"{what} {tool.version_text} ({tool.path}) reads PTX ISA up to "
            f"{reads[0]}.{reads[1]}, the PTX is {isa[0]}.{isa[1]}")


def ptx_to_cubin(ptx: str, arch: str | int | None = None,
                 options: CompileOptions | None = None, *, linker: str = "auto") -> bytes:
    """Assemble PTX into cubin bytes for `arch` (see `link_ptx`, which also gives the log
    and resource usage)."""
    options = (options or CompileOptions()).resolve(arch)
    return link_ptx(ptx, options, linker=linker).cubin


def ptx_to_cubin_with_release(ptx: str, arch: str) -> tuple[bytes, tuple[int, ...]]:
    """`ptx_to_cubin` with default options, also returning the linker's CUDA release
    (what `target.choose_image` needs to apply minor version compatibility)."""
    output = link_ptx(ptx, CompileOptions(arch=normalize_arch(arch)))
    return output.cubin, output.linker_release
