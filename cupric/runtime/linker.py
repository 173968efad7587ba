"""The JIT linker: PTX, cubin, fatbin and LTO-IR inputs -> one cubin, through nvJitLink.

nvJitLink (a CPU library shipped as the `nvidia-nvjitlink` wheel) compiles PTX with its
own ptxas and links device objects, including link-time optimization of LTO-IR. Using
the nvJitLink of the toolkit that wrote the PTX avoids handing the driver a PTX version
newer than it understands. Runs without a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import weakref

__all__ = ["Linker", "LinkerOptions", "LinkerError", "link", "INPUT_KINDS", "is_available"]

# Input kind -> nvjitlink.InputType member name.
INPUT_KINDS = {
    "ptx": "PTX",
    "cubin": "CUBIN",
    "fatbin": "FATBIN",
    "ltoir": "LTOIR",
    "object": "OBJECT",
    "library": "LIBRARY",
}
_SUFFIXES = {".ptx": "ptx", ".cubin": "cubin", ".fatbin": "fatbin", ".ltoir": "ltoir",
             ".o": "object", ".a": "library"}


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


def _nvjitlink():
    try:
        from cuda.bindings import nvjitlink
    except ImportError as exc:
        raise LinkerNotFoundError(f"cuda.bindings.nvjitlink is not importable ({exc}); "
                                  f"install cuda-python") from exc
    return nvjitlink


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


def _destroy(handle: int) -> None:
    _nvjitlink().destroy(handle)


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

    def __init__(self, options: LinkerOptions) -> None:
        if not isinstance(options, LinkerOptions):
            raise TypeError(f"options must be a LinkerOptions, got {type(options).__name__}")
        nvj = _nvjitlink()
        flags = options.to_flags()
        try:
            handle = nvj.create(len(flags), flags)
        except nvj.nvJitLinkError as exc:
            raise LinkerError(f"nvJitLink rejected the options {' '.join(flags)}",
                              result=str(exc)) from exc
        self.options = options
        self._handle = handle
        # nvJitLink is a CPU library with no GPU state, so its handle may be destroyed
        # from a finalizer directly (no deferred queue needed).
        self._finalizer = weakref.finalize(self, _destroy, handle)
        self._linked = False
        self.info_log = ""

    def _require_open(self) -> int:
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
        nvj = _nvjitlink()
        try:
            nvj.add_data(handle, int(getattr(nvj.InputType, INPUT_KINDS[kind])), data, len(data), name)
        except nvj.nvJitLinkError as exc:
            raise LinkerError(f"nvJitLink could not add {kind} input {name!r}",
                              self._error_log(), str(exc)) from exc

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
        nvj = _nvjitlink()
        if not self._linked:
            try:
                nvj.complete(handle)
            except nvj.nvJitLinkError as exc:
                raise LinkerError("nvJitLink failed to link", self._error_log(),
                                  str(exc)) from exc
            self._linked = True
            self.info_log = self._info_log()
        size = nvj.get_linked_cubin_size(handle)
        out = bytearray(size)
        nvj.get_linked_cubin(handle, out)
        return bytes(out)

    def linked_ptx(self) -> str:
        """The PTX an LTO link produced (``lto=True`` only), after `link()`."""
        handle = self._require_open()
        if not self._linked:
            self.link()
        nvj = _nvjitlink()
        size = nvj.get_linked_ptx_size(handle)
        out = bytearray(size)
        nvj.get_linked_ptx(handle, out)
        return bytes(out).rstrip(b"\0").decode()

    def _error_log(self) -> str:
        return self._log("error")

    def _info_log(self) -> str:
        return self._log("info")

    def _log(self, which: str) -> str:
        nvj = _nvjitlink()
        size = getattr(nvj, f"get_{which}_log_size")(self._handle)
        if size <= 1:
            return ""
        buf = bytearray(size)
        getattr(nvj, f"get_{which}_log")(self._handle, buf)
        return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()

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
