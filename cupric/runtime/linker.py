"""The JIT linker: PTX, cubin, fatbin and LTO-IR inputs -> one cubin, through nvJitLink.

nvJitLink (a CPU library shipped as the `nvidia-nvjitlink` wheel) compiles PTX with its
own ptxas and links device objects, including link-time optimization of LTO-IR. Using
the nvJitLink of the toolkit that wrote the PTX avoids handing the driver a PTX version
newer than it understands. Runs without a GPU.

This module is cupric's one binding of nvJitLink: `NvJitLink` (the library opened from
a file) and `NvJitLinkHandle` (one link) over the pre-generated cffi module
`cupric._toolchain_ffi` (declared in `NVJITLINK_DECLARATIONS`; importing it costs about
a millisecond), `Linker` the public session on top. The compiler's PTX -> cubin step
(`cupric.compiler.link`) links through the same classes, with the library its toolchain
search found.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from typing import Sequence

__all__ = ["Linker", "LinkerOptions", "LinkerError", "link", "INPUT_KINDS", "is_available",
           "NvJitLink", "NvJitLinkHandle", "BoxedHandle", "LibraryCallError", "NVJITLINK_DECLARATIONS",
           "NVJITLINK_RESULTS", "NVJITLINK_INPUT_CUBIN", "NVJITLINK_INPUT_PTX"]

# nvJitLink's header maps each name to a versioned symbol (`__nvJitLinkCreate_13_5`) through
# inline functions; the library also exports the plain names, which are what is bound here.
NVJITLINK_DECLARATIONS = """
typedef int nvJitLinkResult;
typedef int nvJitLinkInputType;
typedef struct nvJitLink *nvJitLinkHandle;
nvJitLinkResult nvJitLinkVersion(unsigned int *major, unsigned int *minor);
nvJitLinkResult nvJitLinkCreate(nvJitLinkHandle *handle, uint32_t numOptions,
                                const char **options);
nvJitLinkResult nvJitLinkDestroy(nvJitLinkHandle *handle);
nvJitLinkResult nvJitLinkAddData(nvJitLinkHandle handle, nvJitLinkInputType inputType,
                                 const void *data, size_t size, const char *name);
nvJitLinkResult nvJitLinkComplete(nvJitLinkHandle handle);
nvJitLinkResult nvJitLinkGetLinkedCubinSize(nvJitLinkHandle handle, size_t *size);
nvJitLinkResult nvJitLinkGetLinkedCubin(nvJitLinkHandle handle, void *cubin);
nvJitLinkResult nvJitLinkGetLinkedPtxSize(nvJitLinkHandle handle, size_t *size);
nvJitLinkResult nvJitLinkGetLinkedPtx(nvJitLinkHandle handle, char *ptx);
nvJitLinkResult nvJitLinkGetErrorLogSize(nvJitLinkHandle handle, size_t *size);
nvJitLinkResult nvJitLinkGetErrorLog(nvJitLinkHandle handle, char *log);
nvJitLinkResult nvJitLinkGetInfoLogSize(nvJitLinkHandle handle, size_t *size);
nvJitLinkResult nvJitLinkGetInfoLog(nvJitLinkHandle handle, char *log);
"""

#: nvJitLinkResult codes, in order (nvJitLink.h).
NVJITLINK_RESULTS = (
    "NVJITLINK_SUCCESS", "NVJITLINK_ERROR_UNRECOGNIZED_OPTION", "NVJITLINK_ERROR_MISSING_ARCH",
    "NVJITLINK_ERROR_INVALID_INPUT", "NVJITLINK_ERROR_PTX_COMPILE",
    "NVJITLINK_ERROR_NVVM_COMPILE", "NVJITLINK_ERROR_INTERNAL", "NVJITLINK_ERROR_THREADPOOL",
    "NVJITLINK_ERROR_UNRECOGNIZED_INPUT", "NVJITLINK_ERROR_FINALIZE",
    "NVJITLINK_ERROR_NULL_INPUT", "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
    "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE", "NVJITLINK_ERROR_ARCH_MISMATCH",
    "NVJITLINK_ERROR_OUTDATED_LIBRARY", "NVJITLINK_ERROR_MISSING_FATBIN",
    "NVJITLINK_ERROR_UNRECOGNIZED_ARCH", "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
    "NVJITLINK_ERROR_LTO_NOT_ENABLED",
)

#: Input kind -> nvJitLinkInputType (nvJitLink.h).
INPUT_KINDS = {"cubin": 1, "ptx": 2, "ltoir": 3, "fatbin": 4, "object": 5, "library": 6}
NVJITLINK_INPUT_CUBIN = INPUT_KINDS["cubin"]
NVJITLINK_INPUT_PTX = INPUT_KINDS["ptx"]

_SUFFIXES = {".ptx": "ptx", ".cubin": "cubin", ".fatbin": "fatbin", ".ltoir": "ltoir",
             ".o": "object", ".a": "library"}


class LibraryCallError(RuntimeError):
    """A libNVVM or nvJitLink call returned an error status.

    The compile path turns it into `NvvmError` / `LinkError` with the program's log, and
    `Linker` into `LinkerError`; this class only carries what the call said.

    Attributes
    ----------
    function : str
        The C function, e.g. ``"nvJitLinkComplete"``.
    status : int
        The ``nvvmResult`` / ``nvJitLinkResult`` code.
    name : str
        The code's enumerator name, e.g. ``"NVJITLINK_ERROR_PTX_COMPILE"``.
    """

    def __init__(self, function: str, status: int, names: Sequence[str]) -> None:
        self.function = function
        self.status = status
        self.name = names[status] if 0 <= status < len(names) else "unknown status"
        super().__init__(f"{self.name} ({status})")


def _ffi():
    from cupric._toolchain_ffi import ffi

    return ffi


def _check(status: int, function: str) -> None:
    if status != 0:
        raise LibraryCallError(function, status, NVJITLINK_RESULTS)


class NvJitLink:
    """nvJitLink opened from a file.

    Parameters
    ----------
    path : str
        The shared library (``libnvJitLink.so.13``).

    Raises
    ------
    OSError
        The file cannot be loaded.

    Thread safety
    -------------
    Safe across handles; each `NvJitLinkHandle` is used by one thread.
    """

    def __init__(self, path: str) -> None:
        self.ffi = _ffi()
        self.path = path
        self.lib = self.ffi.dlopen(path)

    def version(self) -> tuple[int, int]:
        """The library's CUDA release, e.g. ``(13, 0)``."""
        major, minor = self.ffi.new("unsigned int *"), self.ffi.new("unsigned int *")
        _check(self.lib.nvJitLinkVersion(major, minor), "nvJitLinkVersion")
        return major[0], minor[0]

    def handle(self, options: Sequence[str]) -> NvJitLinkHandle:
        """A new link with these options (``-arch=sm_90`` is required); use it in a
        ``with`` block. Refused options raise `LibraryCallError` (there is no handle to
        ask for a log then)."""
        return NvJitLinkHandle(self, options)


class BoxedHandle:
    """A C library's handle kept in a one-element cffi box (``self._box``), as libNVVM's
    and nvJitLink's create and destroy functions take it: `_handle` reads it (raising
    once destroyed); subclasses destroy it in `close()`, also run at the end of a
    ``with`` block."""

    __slots__ = ("_ffi", "_lib", "_box")
    _what = "handle"  # named in the error after destruction

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def _handle(self):
        if self._box[0] == self._ffi.NULL:
            raise ValueError(f"the {self._what} is destroyed")
        return self._box[0]

    def close(self) -> None:
        raise NotImplementedError


class NvJitLinkHandle(BoxedHandle):
    """One nvJitLink link: inputs in, a cubin and logs out. Destroyed by `close()` or at
    the end of a ``with`` block."""

    __slots__ = ()
    _what = "nvJitLink handle"

    def __init__(self, linker: NvJitLink, options: Sequence[str]) -> None:
        self._ffi, self._lib = linker.ffi, linker.lib
        box = self._ffi.new("nvJitLinkHandle *")
        if options:
            keep = [self._ffi.new("char[]", option.encode("utf-8")) for option in options]
            array = self._ffi.new("const char *[]", keep)
        else:
            keep, array = [], self._ffi.NULL
        _check(self._lib.nvJitLinkCreate(box, len(options), array), "nvJitLinkCreate")
        del keep
        self._box = box

    def add_data(self, kind: int, data: bytes, name: str) -> None:
        """Add one input (`NVJITLINK_INPUT_PTX`, `NVJITLINK_INPUT_CUBIN`, ...). PTX is
        assembled here, so assembly errors surface from this call."""
        _check(self._lib.nvJitLinkAddData(self._handle, kind, data, len(data),
                                          name.encode("utf-8")), "nvJitLinkAddData")

    def complete(self) -> None:
        _check(self._lib.nvJitLinkComplete(self._handle), "nvJitLinkComplete")

    def cubin(self) -> bytes:
        size = self._ffi.new("size_t *")
        _check(self._lib.nvJitLinkGetLinkedCubinSize(self._handle, size),
               "nvJitLinkGetLinkedCubinSize")
        buffer = self._ffi.new("char[]", size[0])
        _check(self._lib.nvJitLinkGetLinkedCubin(self._handle, buffer),
               "nvJitLinkGetLinkedCubin")
        return self._ffi.buffer(buffer, size[0])[:]

    def ptx(self) -> str:
        """The PTX an LTO link produced."""
        return self._text("nvJitLinkGetLinkedPtxSize", "nvJitLinkGetLinkedPtx")

    def error_log(self) -> str:
        return self._text("nvJitLinkGetErrorLogSize", "nvJitLinkGetErrorLog")

    def info_log(self) -> str:
        """Warnings, and with ``-verbose`` the assembler's per-kernel resource report."""
        return self._text("nvJitLinkGetInfoLogSize", "nvJitLinkGetInfoLog")

    def _text(self, size_function: str, function: str) -> str:
        """A NUL-terminated text the library sizes (the size includes the NUL) and fills."""
        size = self._ffi.new("size_t *")
        _check(getattr(self._lib, size_function)(self._handle, size), size_function)
        if size[0] <= 0:
            return ""
        buffer = self._ffi.new("char[]", size[0])
        _check(getattr(self._lib, function)(self._handle, buffer), function)
        return self._ffi.string(buffer, size[0]).decode("utf-8", "replace")

    def close(self) -> None:
        """Destroy the handle (again: nothing)."""
        if self._box[0] != self._ffi.NULL:
            _check(self._lib.nvJitLinkDestroy(self._box), "nvJitLinkDestroy")


class LinkerError(RuntimeError):
    """nvJitLink failed. `log` is its error log; `result` its result name, when known."""

    def __init__(self, message: str, log: str = "", result: str | None = None) -> None:
        self.log = log
        self.result = result
        text = message if result is None else f"{message} ({result})"
        super().__init__(f"{text}\n{log}".rstrip())


class LinkerNotFoundError(ImportError, LinkerError):
    """nvJitLink is not installed (``pip install nvidia-nvjitlink``)."""

    def __init__(self, message: str) -> None:
        ImportError.__init__(self, message)
        self.log = ""
        self.result = None


_library: list = []  # the NvJitLink that `Linker` uses by default, opened once


def _nvjitlink() -> NvJitLink:
    """nvJitLink as `cuda.pathfinder` finds it (the wheel first, then the CUDA toolkit)."""
    if _library:
        return _library[0]
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError as exc:
        raise LinkerNotFoundError(f"cuda.pathfinder is not importable ({exc}); install "
                                  f"cuda-python") from exc
    try:
        path = load_nvidia_dynamic_lib("nvJitLink").abs_path
        library = NvJitLink(path)
    except Exception as exc:  # pathfinder's not-found error, or a file that does not load
        raise LinkerNotFoundError(f"nvJitLink could not be loaded ({exc}); "
                                  f"`pip install nvidia-nvjitlink`") from exc
    _library[:] = [library]
    return library


def is_available() -> bool:
    """True if nvJitLink loads. Never raises."""
    try:
        _nvjitlink().version()
    except Exception:  # missing library in any form means "not available"
        return False
    return True


@dataclasses.dataclass(frozen=True)
class LinkerOptions:
    """nvJitLink options.

    Parameters
    ----------
    arch : str
        Target, ``"sm_90"`` (or ``"sm_90a"``).
    lto : bool
        Link-time optimization (needed when an input is LTO-IR).
    optimization_level : int, optional
        ptxas optimization level 0..3.
    max_registers : int, optional
        Cap on registers per thread.
    debug, line_info, verbose : bool
        Device debug info, line info, verbose info log.
    ftz, prec_div, prec_sqrt, fma : bool, optional
        Floating-point modes for LTO code generation.
    extra : tuple of str
        Further raw nvJitLink options, passed last.
    """

    arch: str
    lto: bool = False
    optimization_level: int | None = None
    max_registers: int | None = None
    debug: bool = False
    line_info: bool = False
    verbose: bool = False
    ftz: bool | None = None
    prec_div: bool | None = None
    prec_sqrt: bool | None = None
    fma: bool | None = None
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        a = self.arch
        if not (isinstance(a, str) and a.startswith("sm_") and a[3:].rstrip("af").isdigit()):
            raise ValueError(f"LinkerOptions.arch must look like 'sm_90', got {a!r}")
        level = self.optimization_level
        if level is not None and (not isinstance(level, int) or not 0 <= level <= 3):
            raise ValueError(f"LinkerOptions.optimization_level must be 0..3, got {level!r}")
        regs = self.max_registers
        if regs is not None and (not isinstance(regs, int) or regs <= 0):
            raise ValueError(f"LinkerOptions.max_registers must be a positive int, got {regs!r}")
        if not isinstance(self.extra, tuple) or not all(isinstance(x, str) for x in self.extra):
            raise TypeError("LinkerOptions.extra must be a tuple of str")

    def to_flags(self) -> list[str]:
        """The nvJitLink option strings."""
        flags = [f"-arch={self.arch}"]
        if self.lto:
            flags.append("-lto")
        if self.optimization_level is not None:
            flags.append(f"-O{self.optimization_level}")
        if self.max_registers is not None:
            flags.append(f"-maxrregcount={self.max_registers}")
        if self.debug:
            flags.append("-g")
        if self.line_info:
            flags.append("-lineinfo")
        if self.verbose:
            flags.append("-verbose")
        for name, flag in (("ftz", "-ftz"), ("prec_div", "-prec-div"),
                           ("prec_sqrt", "-prec-sqrt"), ("fma", "-fma")):
            value = getattr(self, name)
            if value is not None:
                flags.append(f"{flag}={int(value)}")
        flags.extend(self.extra)
        return flags


def _detect_kind(data: bytes, name: str) -> str:
    suffix = os.path.splitext(name)[1]
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    if data[:4] == b"\x7fELF":
        return "cubin"
    if data[:4] == b"\x50\xed\x55\xba":
        return "fatbin"
    head = data[:4096]
    if b".version" in head or b".target" in head:
        return "ptx"
    raise ValueError(f"cannot tell what kind of input {name!r} is; pass kind= one of "
                     f"{', '.join(INPUT_KINDS)}")


class Linker:
    """One nvJitLink session: add inputs, then `link()` once.

    Examples
    --------
    >>> with Linker(LinkerOptions(arch="sm_90")) as linker:      # doctest: +SKIP
    ...     linker.add(ptx_text, name="kernel.ptx")
    ...     cubin = linker.link()

    Thread safety
    -------------
    A `Linker` is used by one thread at a time; separate linkers are independent.

    Cost
    ----
    Compiling PTX with nvJitLink costs what ptxas costs (milliseconds to seconds).
    """

    __slots__ = ("options", "_handle", "_finalizer", "_linked", "info_log", "__weakref__")

    def __init__(self, options: LinkerOptions, *, library: NvJitLink | None = None) -> None:
        if not isinstance(options, LinkerOptions):
            raise TypeError(f"options must be a LinkerOptions, got {type(options).__name__}")
        library = _nvjitlink() if library is None else library
        flags = options.to_flags()
        try:
            handle = library.handle(flags)
        except LibraryCallError as exc:
            raise LinkerError(f"nvJitLink rejected the options {' '.join(flags)}",
                              result=exc.name) from exc
        self.options = options
        self._handle = handle
        # nvJitLink is a CPU library with no GPU state, so its handle may be destroyed
        # from a finalizer directly (no deferred queue needed).
        self._finalizer = weakref.finalize(self, handle.close)
        self._linked = False
        self.info_log = ""

    def _require_open(self) -> NvJitLinkHandle:
        if not self._finalizer.alive:
            from .errors import ClosedError
            raise ClosedError("this Linker is closed")
        return self._handle

    def add(self, data, kind: str | None = None, name: str = "input") -> None:
        """Add one input (PTX as str or bytes; cubin, fatbin, LTO-IR, object as bytes).

        Raises
        ------
        LinkerError
            nvJitLink refused the input (for PTX: a ptxas error), with its log.
        """
        handle = self._require_open()
        if self._linked:
            raise LinkerError("inputs cannot be added after link()")
        if isinstance(data, str):
            data = data.encode()
        data = bytes(data)
        kind = kind or _detect_kind(data, name)
        if kind not in INPUT_KINDS:
            raise ValueError(f"unknown input kind {kind!r}; one of {', '.join(INPUT_KINDS)}")
        if kind == "ptx" and not data.endswith(b"\0"):
            data += b"\0"
        try:
            handle.add_data(INPUT_KINDS[kind], data, name)
        except LibraryCallError as exc:
            raise LinkerError(f"nvJitLink could not add {kind} input {name!r}",
                              handle.error_log().strip(), exc.name) from exc

    def add_file(self, path, kind: str | None = None) -> None:
        """Add an input file; the kind comes from its suffix or contents."""
        path = os.fspath(path)
        with open(path, "rb") as f:
            data = f.read()
        self.add(data, kind=kind, name=os.path.basename(path))

    def link(self) -> bytes:
        """Complete the link and return the cubin.

        Raises
        ------
        LinkerError
            Undefined symbols, ptxas errors, LTO failures; the message includes the log.
        """
        handle = self._require_open()
        if not self._linked:
            try:
                handle.complete()
            except LibraryCallError as exc:
                raise LinkerError("nvJitLink failed to link", handle.error_log().strip(),
                                  exc.name) from exc
            self._linked = True
            self.info_log = handle.info_log().strip()
        return handle.cubin()

    def linked_ptx(self) -> str:
        """The PTX an LTO link produced (``lto=True`` only), after `link()`."""
        handle = self._require_open()
        if not self._linked:
            self.link()
        return handle.ptx().rstrip("\0")

    def close(self) -> None:
        """Destroy the nvJitLink session (a second call does nothing)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Linker:
        self._require_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


def link(inputs, arch: str, **options) -> bytes:
    """Link inputs into a cubin in one call.

    Parameters
    ----------
    inputs : sequence
        Each a str/bytes (kind detected), or a ``(data, kind)`` or ``(data, kind, name)``
        tuple, or an `os.PathLike` file.
    arch : str
        ``"sm_90"`` etc.
    **options
        Further `LinkerOptions` fields.

    Returns
    -------
    bytes
        The cubin.
    """
    with Linker(LinkerOptions(arch=arch, **options)) as linker:
        for i, item in enumerate(inputs):
            if isinstance(item, os.PathLike):
                linker.add_file(item)
            elif isinstance(item, tuple):
                data, kind, *rest = item
                linker.add(data, kind=kind, name=rest[0] if rest else f"input{i}")
            else:
                linker.add(item, name=f"input{i}")
        return linker.link()
