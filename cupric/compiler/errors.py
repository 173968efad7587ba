"""Errors of the compile path: user-code errors with a source location, libNVVM and
linker failures with their logs, and missing toolchain pieces."""

from __future__ import annotations

__all__ = ["CompilerError", "CompileError", "NvvmError", "LinkError", "ToolchainNotFoundError",
           "internal_error", "each_statement"]


class CompilerError(Exception):
    """Base of every error the compile path raises."""


class CompileError(CompilerError):
    """The kernel's Python source is outside the kernel language, or mistyped.

    Carries `filename`, `line` and `col` (1-based line, 0-based column, as `ast`) and the
    offending `source_line`; `str()` shows `file:line:col`, the line and a caret.
    """

    def __init__(self, message: str, *, filename: str | None = None, line: int | None = None,
                 col: int | None = None, source_line: str | None = None,
                 hint: str | None = None) -> None:
        self.message = message
        self.filename = filename
        self.line = line
        self.col = col
        self.source_line = source_line
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.filename is not None and self.line is not None:
            where = f"{self.filename}:{self.line}:{(self.col or 0) + 1}: "
        text = f"{where}{self.message}"
        if self.source_line is not None:
            stripped = self.source_line.rstrip("\n")
            text += f"\n    {stripped}"
            if self.col is not None:
                text += "\n    " + " " * self.col + "^"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class NvvmError(CompilerError):
    """libNVVM refused the IR (verify or compile); `log` is libNVVM's program log."""

    def __init__(self, message: str, log: str = "", code: int | None = None) -> None:
        self.log = log
        self.code = code
        super().__init__(f"{message}\n{log}".rstrip())


class LinkError(CompilerError):
    """nvJitLink or ptxas failed to turn PTX into cubin; `log` is the tool's error log."""

    def __init__(self, message: str, log: str = "") -> None:
        self.log = log
        super().__init__(f"{message}\n{log}".rstrip())


class ToolchainNotFoundError(ImportError, CompilerError):
    """A compile-path component (libNVVM, libdevice, ptxas, nvJitLink) is not installed.

    The message names the pip package that provides it.
    """


def internal_error(src, node, exc: BaseException, doing: str) -> CompileError:
    """The CompileError for an internal failure (a bug) of the compiler while `doing`
    (typing, compiling) the statement `node` of `src` (a FunctionSource): located at the
    user's line, never a bare internal exception."""
    return src.error(node, f"internal compiler error while {doing} this statement "
                     f"({type(exc).__name__}: {exc})",
                     hint="this is a bug in cupric; please report it with this kernel")


def each_statement(src, stmts, handle, doing: str) -> None:
    """`handle(s)` for each statement of `stmts`; an exception other than a CompileError
    (a bug of the compiler) becomes `internal_error` at that statement."""
    for s in stmts:
        try:
            handle(s)
        except CompileError:
            raise
        except Exception as exc:  # an internal error still names the user's line
            raise internal_error(src, s, exc, doing) from None
