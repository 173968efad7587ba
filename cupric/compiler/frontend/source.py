"""The Python source of a kernel: where it lives (file, first line), its AST with line
numbers of the real file, and `CompileError`s that point at a node of it with a caret."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap

from cupric.compiler.errors import CompileError

__all__ = ["FunctionSource", "get_source"]


class FunctionSource:
    """A parsed function: `tree` is its `ast.FunctionDef`, with line numbers and columns
    of the file it was read from (so errors and line info name real lines).

    Parameters
    ----------
    py_func : function
        The plain Python function.
    """

    def __init__(self, py_func) -> None:
        self.py_func = py_func
        self.name = py_func.__name__
        code = py_func.__code__
        self.filename = code.co_filename
        try:
            lines, first = _source_lines(py_func)
        except (OSError, TypeError, IndexError):
            raise CompileError(
                f"cannot read the source of {py_func.__qualname__}: kernels must be defined "
                "in a file (or a cell) whose source Python can read",
                filename=self.filename, line=code.co_firstlineno) from None
        self.first_line = first
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        # Columns shift by the indentation that dedent removed.
        self.col_offset = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        try:
            module = ast.parse(dedented, filename=self.filename)
        except SyntaxError as exc:
            raise CompileError(f"syntax error: {exc.msg}", filename=self.filename,
                               line=(exc.lineno or 1) + first - 1) from None
        ast.increment_lineno(module, first - 1)
        tree = module.body[0]
        if not isinstance(tree, ast.FunctionDef):
            raise CompileError(
                "@cupric.kernel and @cupric.device_function apply to plain `def` functions",
                filename=self.filename, line=first)
        self.tree = tree
        self.lines = text.splitlines()

    def source_line(self, line: int) -> str | None:
        text = linecache.getline(self.filename, line)
        if text:
            return text
        index = line - self.first_line
        if 0 <= index < len(self.lines):
            return self.lines[index]
        return None

    def error(self, node: ast.AST | None, message: str, hint: str | None = None) -> CompileError:
        """A `CompileError` located at `node` (or at the `def` line)."""
        node = node if node is not None else self.tree
        line = getattr(node, "lineno", self.first_line)
        col = getattr(node, "col_offset", 0) + self.col_offset
        return CompileError(message, filename=self.filename, line=line, col=col,
                            source_line=self.source_line(line), hint=hint)


def _source_lines(py_func) -> tuple[list[str], int]:
    """The source lines of a function and its first line number.

    Reads the file through `linecache` from the code object's first line (its first
    decorator) and lets `inspect.getblock` find the end; unlike
    `inspect.getsourcelines` this never scans `sys.modules`, which costs milliseconds in
    a process with many modules loaded.
    """
    code = py_func.__code__
    all_lines = linecache.getlines(code.co_filename, py_func.__globals__)
    if not all_lines:
        return inspect.getsourcelines(py_func)  # raises OSError when there is none
    start = code.co_firstlineno - 1
    if not 0 <= start < len(all_lines):
        raise OSError("source lines out of range")
    return inspect.getblock(all_lines[start:]), start + 1


_CACHE: dict[object, FunctionSource] = {}


def get_source(py_func) -> FunctionSource:
    """The parsed source of `py_func`, parsed once per function object."""
    src = _CACHE.get(py_func)
    if src is None:
        src = _CACHE[py_func] = FunctionSource(py_func)
    return src
