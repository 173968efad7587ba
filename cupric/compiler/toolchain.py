"""Where the compile toolchain lives: libNVVM, libdevice, ptxas and nvJitLink.

Pieces are looked up in the pip wheels first (through `cuda.pathfinder`, which also
honours CUDA_HOME/CUDA_PATH), then in CUDA_HOME, CUDA_PATH and /usr/local/cuda. Each
lookup runs once per process; a missing piece raises `ToolchainNotFoundError` naming the
pip package that provides it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from cupric.compiler.errors import ToolchainNotFoundError

__all__ = [
    "Tool", "load_libnvvm", "libnvvm", "libdevice", "ptxas", "nvjitlink", "nvvm_release",
    "cuda_home_candidates", "report", "PACKAGES",
]

#: The pip package that provides each piece (what a ToolchainNotFoundError tells to install).
PACKAGES = {
    "libnvvm": "nvidia-nvvm",
    "libdevice": "nvidia-nvvm",
    "ptxas": "nvidia-cuda-nvcc",
    "nvjitlink": "nvidia-nvjitlink",
}

# "Cuda compilation tools, release 13.5, V13.5.37": printed by ptxas --version and
# written by libNVVM at the top of every PTX file.
_RELEASE_RE = re.compile(r"release (\d+)\.(\d+), V(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Tool:
    """One located toolchain piece.

    Attributes
    ----------
    name : str
        ``"libnvvm"``, ``"libdevice"``, ``"ptxas"`` or ``"nvjitlink"``.
    path : str
        Absolute path of the library, bitcode file or executable.
    version : tuple of int or None
        CUDA release of the piece, e.g. ``(13, 5, 37)`` or ``(13, 5)``; None for libdevice,
        which carries no version of its own.
    found_via : str
        How it was found: ``"site-packages"``, ``"CUDA_HOME"``, ``"PATH"``, ...
    """

    name: str
    path: str
    version: tuple[int, ...] | None
    found_via: str

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) if self.version else "unknown"


def _missing(piece: str, what: str, detail: str = "") -> ToolchainNotFoundError:
    package = PACKAGES[piece]
    message = (f"{what} was not found; install it with `pip install {package}` "
               f"(or install the CUDA Toolkit and set CUDA_HOME)")
    if detail:
        message += f"\n  ({detail})"
    return ToolchainNotFoundError(message)


def cuda_home_candidates() -> list[tuple[str, Path]]:
    """Toolkit roots to search after the wheels, in order: CUDA_HOME, CUDA_PATH, /usr/local/cuda."""
    roots: list[tuple[str, Path]] = []
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(variable)
        if value:
            roots.append((variable, Path(value)))
    roots.append(("/usr/local/cuda", Path("/usr/local/cuda")))
    return roots


def _wheel_roots() -> list[Path]:
    """`site-packages/nvidia/cu13`-style roots of the installed NVIDIA wheels, newest CUDA first."""
    try:
        import nvidia  # namespace package provided by the nvidia-* wheels
    except ImportError:
        return []
    roots: list[Path] = []
    for base in getattr(nvidia, "__path__", []):
        for sub in sorted(Path(base).glob("cu[0-9]*"), reverse=True):
            roots.append(sub)
        # Older (CUDA 12) wheels put each component in its own folder.
        for name in ("cuda_nvcc", "nvjitlink", "cuda_nvrtc"):
            if (Path(base) / name).is_dir():
                roots.append(Path(base) / name)
    return roots


@functools.cache
def load_libnvvm() -> tuple[str, str]:
    """Load libNVVM into the process (once); return its path and how it was found.

    `cuda.bindings.nvvm` finds the library through `cuda.pathfinder` too; loading it here
    first turns "not found" into a `ToolchainNotFoundError` that names the package.

    Raises
    ------
    ToolchainNotFoundError
        libNVVM is neither in a wheel nor in a CUDA toolkit (install ``nvidia-nvvm``).
    """
    try:
        import cuda.pathfinder as pathfinder
    except ImportError as exc:
        raise _missing("libnvvm", "libNVVM", f"cuda.pathfinder is not importable: {exc}") from exc
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib("nvvm")
    except pathfinder.DynamicLibNotFoundError as exc:
        raise _missing("libnvvm", "libNVVM (libnvvm.so)", str(exc)) from exc
    return loaded.abs_path, loaded.found_via


@functools.cache
def libnvvm() -> Tool:
    """Locate and load libNVVM (``libnvvm.so``), and read its CUDA release.

    Raises
    ------
    ToolchainNotFoundError
        libNVVM is neither in a wheel nor in a CUDA toolkit (install ``nvidia-nvvm``).

    Cost
    ----
    First call: loads the library and, unless a kernel was compiled already (see
    `nvvm_release`), compiles an empty module (about 10 ms); cached.
    """
    path, found_via = load_libnvvm()
    return Tool("libnvvm", path, nvvm_release(), found_via)


#: The loaded libNVVM's release once known, from the probe or from any PTX it wrote
#: (`note_ptx`): the header of every output names it, so a process that compiles a kernel
#: never needs the probe's extra compile.
_RELEASE: list[tuple[int, int, int]] = []


def note_ptx(ptx: str) -> None:
    """Record the release named in the header of PTX that the loaded libNVVM wrote.

    Cost
    ----
    One regex search of the header: microseconds.
    """
    if not _RELEASE:
        match = _RELEASE_RE.search(ptx, 0, 400)
        if match is not None:
            _RELEASE.append(tuple(int(g) for g in match.groups()[2:]))


def nvvm_release() -> tuple[int, int, int]:
    """The CUDA release of the loaded libNVVM, e.g. ``(13, 5, 37)``.

    `nvvmVersion` reports the API version (2.0) that does not change between releases,
    while the PTX ISA libNVVM writes does; the release is read from the header libNVVM
    puts at the top of its output: of the first kernel compiled in this process, else
    of an empty module compiled for the purpose (about 5 ms, once).
    """
    if _RELEASE:
        return _RELEASE[0]
    from cupric.compiler import nvvm as nvvm_module

    output = nvvm_module.compile_ir([nvvm_module.ir_header() + nvvm_module.ir_version_metadata(0)],
                                    _probe_options(), libdevice=False)
    if not _RELEASE:  # compile_ir notes every header; this one had none
        raise ToolchainNotFoundError(
            "could not read the CUDA release of libNVVM from its output header:\n"
            + output.ptx[:300])
    return _RELEASE[0]


# Like the functools.cache'd finders around it: tests that fake the system forget it.
nvvm_release.cache_clear = _RELEASE.clear


def _probe_options():
    from cupric.compiler.options import CompileOptions

    # The oldest arch every CUDA 12/13 libNVVM accepts; the PTX itself is thrown away.
    return CompileOptions(arch="sm_75", opt_level=0)


@functools.cache
def libdevice() -> Tool:
    """Locate libdevice (``libdevice.10.bc``), the bitcode of the `__nv_*` math functions.

    Looked up through `cuda.pathfinder` when it knows bitcode libraries, else next to
    the libNVVM that is loaded, then in the toolkit roots.

    Raises
    ------
    ToolchainNotFoundError
        Not found (install ``nvidia-nvvm``).
    """
    import cuda.pathfinder as pathfinder

    locate = getattr(pathfinder, "locate_bitcode_lib", None)  # cuda-pathfinder >= 1.9
    if locate is not None:
        try:
            located = locate("device")
            return Tool("libdevice", located.abs_path, None, located.found_via)
        except pathfinder.BitcodeLibNotFoundError:
            pass  # fall through to the searches below, which know toolkit layouts too
    candidates: list[tuple[str, Path]] = []
    try:
        nvvm_dir = Path(libnvvm().path).parent
        # wheel: nvidia/cu13/lib/libnvvm.so.4 -> nvidia/cu13/nvvm/libdevice;
        # toolkit: cuda/nvvm/lib64/libnvvm.so.4 -> cuda/nvvm/libdevice.
        candidates += [("next to libNVVM", nvvm_dir.parent / "nvvm" / "libdevice"),
                       ("next to libNVVM", nvvm_dir.parent / "libdevice")]
    except ToolchainNotFoundError:
        pass  # no libNVVM: libdevice alone is still worth finding for the report
    candidates += [(via, root / "nvvm" / "libdevice") for via, root in cuda_home_candidates()]
    for via, folder in candidates:
        path = folder / "libdevice.10.bc"
        if path.is_file():
            return Tool("libdevice", str(path.resolve()), None, via)
    searched = ", ".join(str(folder) for _, folder in candidates)
    raise _missing("libdevice", "libdevice (libdevice.10.bc)", f"searched {searched}")


def _tool_version(executable: str) -> tuple[int, ...] | None:
    result = subprocess.run([executable, "--version"], capture_output=True, text=True,
                            timeout=60, check=False)
    match = _RELEASE_RE.search(result.stdout + result.stderr)
    return tuple(int(g) for g in match.groups()[2:]) if match else None


@functools.cache
def ptxas() -> Tool:
    """Locate the ``ptxas`` executable and read its version (``ptxas --version``).

    Order: the nvidia-cuda-nvcc wheel (through `cuda.pathfinder` when it knows binary
    utilities, else `nvidia/cu*/bin`), then CUDA_HOME, CUDA_PATH, /usr/local/cuda, PATH.

    Raises
    ------
    ToolchainNotFoundError
        Not found (install ``nvidia-cuda-nvcc``).

    Cost
    ----
    First call runs ``ptxas --version`` (tens of ms); cached.
    """
    candidates: list[tuple[str, Path]] = []
    try:
        import cuda.pathfinder as pathfinder

        find = getattr(pathfinder, "find_nvidia_binary_utility", None)  # pathfinder >= 1.9
        found = find("ptxas") if find is not None else None
        if found:
            via = "site-packages" if "site-packages" in found else "cuda.pathfinder"
            candidates.append((via, Path(found)))
    except ImportError:
        pass  # plain directory search below still works without cuda.pathfinder
    candidates += [("site-packages", root / "bin" / "ptxas") for root in _wheel_roots()]
    candidates += [(via, root / "bin" / "ptxas") for via, root in cuda_home_candidates()]
    on_path = shutil.which("ptxas")
    if on_path:
        candidates.append(("PATH", Path(on_path)))
    for via, path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return Tool("ptxas", str(path), _tool_version(str(path)), via)
    searched = ", ".join(str(path) for _, path in candidates)
    raise _missing("ptxas", "ptxas", f"searched {searched or 'nothing'}")


@functools.cache
def nvjitlink() -> Tool:
    """Locate and load nvJitLink and read its version (`nvJitLinkVersion`).

    Raises
    ------
    ToolchainNotFoundError
        Not found (install ``nvidia-nvjitlink``).
    """
    # A cold kernel compile loads nvJitLink on a background thread while libNVVM runs on
    # the main thread, which may then ask for it too: the lock makes that caller wait for
    # the load under way (and then find it in cuda.pathfinder's cache) instead of
    # loading the library a second time beside it.
    with _NVJITLINK_LOCK:
        try:
            import cuda.pathfinder as pathfinder
            from cuda.bindings import nvjitlink as binding
        except ImportError as exc:
            raise _missing("nvjitlink", "nvJitLink", f"cuda-python is not importable: {exc}") from exc
        try:
            loaded = pathfinder.load_nvidia_dynamic_lib("nvJitLink")
        except pathfinder.DynamicLibNotFoundError as exc:
            raise _missing("nvjitlink", "nvJitLink (libnvJitLink.so)", str(exc)) from exc
        return Tool("nvjitlink", loaded.abs_path, tuple(binding.version()), loaded.found_via)


_NVJITLINK_LOCK = threading.Lock()


def report() -> dict:
    """What `python -m cupric info` prints about the compile toolchain.

    Returns
    -------
    dict
        One entry per piece (``libnvvm``, ``libdevice``, ``ptxas``, ``nvjitlink``) with
        ``path``, ``version``, ``found_via`` -- or ``error`` with the install hint when it
        is missing -- plus ``driver`` (CUDA version and newest PTX ISA, or why unknown).
        Never raises for a missing piece: the report is how users find out what is missing.
    """
    result: dict = {}
    for name, finder in (("libnvvm", libnvvm), ("libdevice", libdevice), ("ptxas", ptxas),
                         ("nvjitlink", nvjitlink)):
        try:
            tool = finder()
        except ToolchainNotFoundError as exc:
            result[name] = {"error": str(exc)}
        else:
            result[name] = {"path": tool.path, "version": tool.version_text,
                            "found_via": tool.found_via}
    if "error" not in result["libnvvm"]:
        from cuda.bindings import nvvm as binding

        major, minor, debug_major, debug_minor = binding.ir_version()
        result["libnvvm"]["ir_version"] = f"{major}.{minor}"
        result["libnvvm"]["debug_version"] = f"{debug_major}.{debug_minor}"
        from cupric.compiler.target import ptx_isa_of_release

        result["libnvvm"]["ptx_isa"] = ".".join(map(str, ptx_isa_of_release(libnvvm().version[:2])))
    from cupric.compiler.target import driver_report

    result["driver"] = driver_report()
    return result
