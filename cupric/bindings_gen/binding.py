"""Runtime side of a generated module: find the shared library, open it, resolve names.

Each low-level module (`cupric.cublas.lib`, `cupric.curand.lib`, ...) holds one
`Binding`. Nothing happens at import: the first attribute use generates (or loads from
the cache) the cffi module and opens the shared library with ``ffi.dlopen``.

Shared library search order, first hit wins: the ``lib`` directory beside the headers
that were used (the wheel layout, so headers and library always match), then
`cuda.pathfinder.load_nvidia_dynamic_lib`, then ``ctypes.util.find_library`` (the
system's loader path).
"""

from __future__ import annotations

import os
import threading
import types

from . import libraries
from .errors import BindingsError, LibraryNotFoundError


def _candidates_beside(header_dir: str, name: str) -> list[str]:
    import glob

    found = []
    for lib_dir in ("lib", "lib64"):  # wheels use lib/, toolkits lib64/
        found += glob.glob(os.path.join(os.path.dirname(header_dir), lib_dir, f"lib{name}.so*"))
    # Prefer the SONAME form (libcublas.so.13) over a development link or a full version.
    found.sort(key=lambda p: (os.path.basename(p).count("."), p))
    return found


def find_shared_library(name: str, header_dir: str | None) -> str:
    """Path (or loader name) of ``lib<name>``.

    Raises
    ------
    OSError
        When no candidate is found.
    """
    if header_dir:
        beside = _candidates_beside(header_dir, name)
        if beside:
            return beside[0]
    try:
        from cuda import pathfinder

        if name in pathfinder.SUPPORTED_NVIDIA_LIBNAMES:
            return pathfinder.load_nvidia_dynamic_lib(name).abs_path
    except ImportError:
        pass
    except Exception:
        # pathfinder raises its own DynamicLibNotFoundError; try the system loader next.
        pass
    import ctypes.util  # costs a few ms at import; only needed on this fallback

    system = ctypes.util.find_library(name)
    if system:
        return system
    raise OSError(f"lib{name} not found beside the headers, by cuda.pathfinder or on the loader path")


class _Functions:
    """Attribute access to the library's names, versioned aliases included.

    The first access of a name resolves it (through `ALIASES` when it is an old name
    such as ``cublasSgemm``) and stores it on the instance, so later accesses are plain
    attribute lookups.
    """

    def __init__(self, lib, ffi, aliases: dict[str, str], library: str):
        self.__dict__["_lib"] = lib
        self.__dict__["_missing"] = (AttributeError, ffi.error)
        self.__dict__["_aliases"] = aliases
        self.__dict__["_library"] = library

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        target = self._aliases.get(name, name)
        try:
            value = getattr(self._lib, target)
        except self._missing:  # ffi.error: declared but not exported
            raise AttributeError(
                f"{self._library} has no {name!r}: not declared in its headers, "
                "or declared but not exported by the installed shared library"
            ) from None
        self.__dict__[name] = value
        return value

    def __dir__(self):
        return sorted(set(dir(self._lib)) | set(self._aliases))


class Binding:
    """A lazily loaded generated module plus its opened shared library.

    Parameters
    ----------
    library : str
        Short name in `libraries.LIBRARIES`.
    pretty : str
        The library's usual spelling for messages (``"cuBLAS"``).

    Thread safety
    -------------
    Loading is serialized by a lock; after that every attribute is read-only.
    """

    def __init__(self, library: str, pretty: str):
        self.spec = libraries.get(library)
        self.pretty = pretty
        self._lock = threading.Lock()
        self._module: types.ModuleType | None = None
        self._lib = None
        self._functions: _Functions | None = None
        self.path: str | None = None
        self.unavailable_reason: str | None = None

    def _load(self) -> None:
        from . import cache, prefetch
        from .headers import find_headers

        try:
            header_set = find_headers(self.spec)
        except BindingsError as exc:
            raise LibraryNotFoundError(self.pretty, self.spec.package, str(exc)) from exc
        try:
            path = find_shared_library(self.spec.shared_library, header_set.include_dirs[0])
        except OSError as exc:
            raise LibraryNotFoundError(self.pretty, self.spec.package, str(exc)) from exc
        # A child process may be generating this module already (`prefetch`).
        prefetch.wait(self.spec.name)
        module = cache.load_module(self.spec)
        try:
            lib = module.ffi.dlopen(path)
        except OSError as exc:
            raise LibraryNotFoundError(self.pretty, self.spec.package, f"dlopen {path}: {exc}") from exc
        self.path = path
        self._lib = lib
        self._functions = _Functions(lib, module.ffi, dict(module.ALIASES), self.pretty)
        self._module = module

    def load(self) -> None:
        """Generate or load the module and open the library, once.

        Raises
        ------
        LibraryNotFoundError
            An ImportError naming the pip package, when headers or library are missing.
        BindingsError
            When generation fails.
        """
        if self._module is not None:
            return
        with self._lock:
            if self._module is None:
                self._load()

    @property
    def module(self) -> types.ModuleType:
        """The generated module (``ffi``, ``FUNCTIONS``, ``ALIASES``, ``CONSTANTS``...)."""
        self.load()
        return self._module

    @property
    def ffi(self):
        """The cffi ``FFI`` of the generated module."""
        return self.module.ffi

    @property
    def lib(self) -> _Functions:
        """The library's functions, enum values and integer constants by C name."""
        self.load()
        return self._functions

    @property
    def raw_lib(self):
        """The ``ffi.dlopen`` handle itself (no aliases)."""
        self.load()
        return self._lib

    def is_available(self) -> bool:
        """Whether the library loads (headers, generator and shared library all present).

        Never raises. When it returns False, `unavailable_reason` says what is missing
        and which package to install (the message `load` raises).
        """
        try:
            self.load()
        except (ImportError, BindingsError) as exc:
            self.unavailable_reason = str(exc)
            return False
        self.unavailable_reason = None
        return True

    def module_getattr(self, namespace: dict, name: str):
        """The body of a loader module's ``__getattr__``: ffi, lib, or any C name.

        A resolved C name is stored in the loader module's namespace, so the next
        access costs a dictionary lookup.
        """
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "ffi":
            value = self.ffi
        elif name == "lib":
            value = self.lib
        else:
            value = getattr(self.lib, name)
        namespace[name] = value
        return value

    # Status checking ---------------------------------------------------------------

    def status_name(self, status: int) -> str:
        """The enumerator name of a status value of `spec.status_type`."""
        elements = self.ffi.typeof(self.spec.status_type).elements
        return elements.get(int(status), f"UNKNOWN({int(status)})")

    def status_string(self, function: str, status: int) -> str:
        """The library's own text for `status`, from its C function `function` (one that
        maps a status to a ``const char *``, e.g. ``cublasGetStatusString``); "no
        description" when it returns NULL."""
        text = getattr(self.lib, function)(status)
        return self.ffi.string(text).decode() if text != self.ffi.NULL else "no description"
