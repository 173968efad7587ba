"""Where the compile toolchain lives: libNVVM, libdevice, ptxas and nvJitLink.

Pieces are looked up in the pip wheels first (through `cuda.pathfinder`, which also
honours CUDA_HOME/CUDA_PATH), then in CUDA_HOME, CUDA_PATH and /usr/local/cuda. Each
lookup runs once per process, and where libNVVM, nvJitLink and libdevice were found is
remembered in cupric's cache for the next process (`cupric.compiler._locations`), which
then loads them without importing `cuda.pathfinder`. The libraries are driven through
cupric's own bindings (`cupric.compiler._abi`). A missing piece raises
`ToolchainNotFoundError` naming the pip package that provides it.
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


class _Opened:
    """A library loaded through cupric's own bindings (`cupric.compiler._abi`)."""

    __slots__ = ("library", "path", "found_via")

    def __init__(self, library, path: str, found_via: str) -> None:
        self.library, self.path, self.found_via = library, path, found_via


#: Loaded libraries by piece ("libnvvm", "nvjitlink"); each is opened once per process.
_OPENED: dict[str, _Opened] = {}
_NVVM_LOCK = threading.Lock()

#: What `cuda.pathfinder` calls each library, and the file names to load when it found one
#: that is loaded already but could not say from where.
_PATHFINDER_NAMES = {"libnvvm": "nvvm", "nvjitlink": "nvJitLink"}
_SONAMES = {"libnvvm": ("libnvvm.so.4", "libnvvm.so"),
            "nvjitlink": ("libnvJitLink.so.13", "libnvJitLink.so.12")}


def _open(piece: str, what: str, opener) -> _Opened:
    """Open `piece` with `opener` (an `_abi` class): from the location remembered in the
    cache when it is still valid, else found through `cuda.pathfinder` (and remembered)."""
    from cupric.compiler import _locations

    remembered = _locations.recall(piece)
    if remembered is not None:
        path, found_via = remembered
        try:
            return _Opened(opener(path), path, found_via)
        except OSError:
            pass  # changed in a way its size and time did not show: search again
    try:
        import cuda.pathfinder as pathfinder
    except ImportError as exc:
        raise _missing(piece, what, f"cuda.pathfinder is not importable: {exc}") from exc
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib(_PATHFINDER_NAMES[piece])
    except pathfinder.DynamicLibNotFoundError as exc:
        raise _missing(piece, f"{what} ({_SONAMES[piece][0]})", str(exc)) from exc
    candidates = [loaded.abs_path] if loaded.abs_path else list(_SONAMES[piece])
    errors = []
    for path in candidates:
        try:
            opened = _Opened(opener(path), path, loaded.found_via)
        except OSError as exc:
            errors.append(str(exc))
            continue
        if loaded.abs_path:
            _locations.remember(piece, path, loaded.found_via)
        return opened
    raise _missing(piece, what, "; ".join(errors))


def load_libnvvm() -> tuple[str, str]:
    """Load libNVVM into the process (once); return its path and how it was found.

    The path remembered in cupric's cache (see `cupric.compiler._locations`) is loaded
    directly; the first process of an environment finds the library through
    `cuda.pathfinder` (wheels, conda, system, CUDA_HOME) and remembers it.

    Raises
    ------
    ToolchainNotFoundError
        libNVVM is neither in a wheel nor in a CUDA toolkit (install ``nvidia-nvvm``).

    Thread safety
    -------------
    Safe: a second caller waits for the load under way.
    """
    opened = _OPENED.get("libnvvm")
    if opened is None:
        with _NVVM_LOCK:
            opened = _OPENED.get("libnvvm")
            if opened is None:
                from cupric.compiler._abi import Nvvm

                opened = _OPENED["libnvvm"] = _open("libnvvm", "libNVVM", Nvvm)
    return opened.path, opened.found_via


load_libnvvm.cache_clear = lambda: _OPENED.pop("libnvvm", None)


def nvvm_library():
    """The loaded libNVVM (`cupric.compiler._abi.Nvvm`), loading it first if needed.

    Raises
    ------
    ToolchainNotFoundError
        As `load_libnvvm`.
    """
    load_libnvvm()
    return _OPENED["libnvvm"].library


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

    The location remembered in cupric's cache is used while the file is unchanged; else
    it is looked up through `cuda.pathfinder` when it knows bitcode libraries, else next
    to the libNVVM that is loaded, then in the toolkit roots (and remembered).

    Raises
    ------
    ToolchainNotFoundError
        Not found (install ``nvidia-nvvm``).
    """
    from cupric.compiler import _locations

    remembered = _locations.recall("libdevice")
    if remembered is not None:
        return Tool("libdevice", remembered[0], None, remembered[1])
    tool = _find_libdevice()
    _locations.remember("libdevice", tool.path, tool.found_via)
    return tool


def _find_libdevice() -> Tool:
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


def nvjitlink() -> Tool:
    """Locate and load nvJitLink and read its version (`nvJitLinkVersion`).

    Loaded from the location remembered in cupric's cache, else found through
    `cuda.pathfinder` (as `load_libnvvm`). Waits for a load that `start_loading` began.

    Raises
    ------
    ToolchainNotFoundError
        Not found (install ``nvidia-nvjitlink``).

    Thread safety
    -------------
    Safe: a second caller waits for the load under way.
    """
    _wait_for_loader()
    opened = _OPENED.get("nvjitlink")
    if opened is None:
        with _NVJITLINK_LOCK:
            opened = _OPENED.get("nvjitlink")
            if opened is None:
                from cupric.compiler._abi import NvJitLink

                opened = _open("nvjitlink", "nvJitLink", NvJitLink)
                tool = Tool("nvjitlink", opened.path, tuple(opened.library.version()),
                            opened.found_via)
                _TOOLS["nvjitlink"] = tool
                _OPENED["nvjitlink"] = opened
    return _TOOLS["nvjitlink"]


def _forget_nvjitlink() -> None:
    _OPENED.pop("nvjitlink", None)
    _TOOLS.pop("nvjitlink", None)


nvjitlink.cache_clear = _forget_nvjitlink
_NVJITLINK_LOCK = threading.Lock()
_TOOLS: dict[str, Tool] = {}


def nvjitlink_library():
    """The loaded nvJitLink (`cupric.compiler._abi.NvJitLink`), loading it if needed.

    Raises
    ------
    ToolchainNotFoundError
        As `nvjitlink`.
    """
    nvjitlink()
    return _OPENED["nvjitlink"].library


# -- loading ahead of a cold compile ----------------------------------------------------------

_LOADERS: list[threading.Thread] = []  # the nvJitLink loader under way, if any


def start_loading() -> threading.Event:
    """Start loading libNVVM and nvJitLink on threads, ahead of a compile.

    The caller types and lowers its kernel meanwhile: the dynamic loader's work for the
    two libraries (70 and 120 MB: milliseconds of loading) is then over when the
    IR is ready. Errors are not reported here: the compile and the link meet them again
    and raise them with their full message.

    The Python part (imports, the remembered locations) runs here, on the calling thread;
    the threads then spend their time in the dynamic loader with the GIL released
    (`_abi.preload`): a thread holding the GIL would stall the typing beside it. Warming
    the libraries up as well (an empty compile, a one-instruction link) was measured and
    left out: with the kernel typed in a few ms it only moved work around, and a link
    running beside libNVVM's compile slowed that compile down.

    The threads are not daemons: a process that ends right after starting them waits for
    them (milliseconds) instead of unloading the libraries under the loader, and
    `nvjitlink()` waits for the nvJitLink thread rather than loading beside it.

    Returns
    -------
    threading.Event
        Set once libNVVM is loaded, or failed to load.
    """
    ready = threading.Event()
    need_nvvm, need_nvjitlink = "libnvvm" not in _OPENED, "nvjitlink" not in _OPENED
    if not need_nvvm:
        ready.set()  # a compile of this process loaded it already
    if not (need_nvvm or need_nvjitlink):
        return ready
    try:
        from cupric.compiler import _abi, _locations
        # What the compile and the link import anyway, imported before the threads run.
        from cupric.compiler import nvvm as _nvvm, options as _options, target as _target  # noqa: F401

        _abi._ffi()
        nvvm_path = _locations.recall("libnvvm") if need_nvvm else None
        nvjitlink_path = _locations.recall("nvjitlink") if need_nvjitlink else None
    except Exception:  # noqa: BLE001 - e.g. cffi missing: the compile itself reports it
        ready.set()
        return ready
    if need_nvvm:
        threading.Thread(target=_load_libnvvm, args=(ready, nvvm_path and nvvm_path[0]),
                         name="cupric-libnvvm-load").start()
    if need_nvjitlink:
        thread = threading.Thread(target=_load_nvjitlink,
                                  args=(nvjitlink_path and nvjitlink_path[0],),
                                  name="cupric-nvjitlink-load")
        _LOADERS[:] = [thread]
        thread.start()
    return ready


def _wait_for_loader() -> None:
    for thread in list(_LOADERS):
        if thread is not threading.current_thread():
            thread.join()


def _preload(path: str | None) -> None:
    if path:
        from cupric.compiler._abi import preload

        try:
            preload(path)
        except OSError:
            pass  # the load proper searches again and reports what it finds


def _load_libnvvm(ready: threading.Event, path: str | None) -> None:
    try:
        _preload(path)
        load_libnvvm()
    except Exception:  # noqa: BLE001 - compile_ir raises it again on the main thread
        return
    finally:
        ready.set()


def _load_nvjitlink(path: str | None) -> None:
    try:
        _preload(path)
        nvjitlink()
    except Exception:  # noqa: BLE001 - link_ptx falls back to ptxas or reports it
        return


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
        major, minor, debug_major, debug_minor = nvvm_library().ir_version()
        result["libnvvm"]["ir_version"] = f"{major}.{minor}"
        result["libnvvm"]["debug_version"] = f"{debug_major}.{debug_minor}"
        from cupric.compiler.target import ptx_isa_of_release

        result["libnvvm"]["ptx_isa"] = ".".join(map(str, ptx_isa_of_release(libnvvm().version[:2])))
    from cupric.compiler.target import driver_report

    result["driver"] = driver_report()
    return result
