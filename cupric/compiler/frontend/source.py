"""The Python source of a kernel: where it lives (file, first line), its AST with line
numbers of the real file, and `CompileError`s that point at a node of it with a caret."""

from __future__ import annotations

import ast
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
            lines, first, module = _source_lines(py_func)
        except (OSError, TypeError, IndexError):
            raise CompileError(
                f"cannot read the source of {py_func.__qualname__}: kernels must be defined "
                "in a file (or a cell) whose source Python can read",
                filename=self.filename, line=code.co_firstlineno) from None
        self.first_line = first
        text = "".join(lines)
        # Columns shift by the indentation that dedent removed.
        self.col_offset = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        if module is None:
            try:
                module = ast.parse(textwrap.dedent(text), filename=self.filename)
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
        # `for k in unroll(n)` becomes n copies of its body before anything reads the tree.
        from cupric.compiler.frontend.unroll import expand_unroll
        self.tree = expand_unroll(tree, self)

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


def _source_lines(py_func) -> tuple[list[str], int, ast.Module | None]:
    """The source lines of a function, its first line number and, when already parsed,
    the `ast.Module` of those lines (dedented; line numbers start at 1).

    Reads the file through `linecache` from the code object's first line (its first
    decorator); unlike `inspect.getsourcelines` this never scans `sys.modules`, which
    costs milliseconds in a process with many modules loaded. The end of the function
    is found by `_parse_block` (indentation, checked by parsing), else by
    `inspect.getblock`, whose tokenizer costs milliseconds in a fresh process.
    """
    code = py_func.__code__
    all_lines = linecache.getlines(code.co_filename, py_func.__globals__)
    if not all_lines:
        import inspect

        lines, first = inspect.getsourcelines(py_func)  # raises OSError when there is none
        return lines, first, None
    start = code.co_firstlineno - 1
    if not 0 <= start < len(all_lines):
        raise OSError("source lines out of range")
    found = _parse_block(all_lines, start, code.co_filename)
    if found is not None:
        return found[0], start + 1, found[1]
    import inspect

    return inspect.getblock(all_lines[start:]), start + 1, None


#: How many candidate ends `_parse_block` tries before leaving the search to the tokenizer.
_BLOCK_TRIES = 4


def _parse_block(all_lines: list[str], start: int, filename: str):
    """The lines of the `def` (with its decorators) that starts at `all_lines[start]`, and
    their parsed module; None when this quick search is unsure (the caller then asks
    `inspect.getblock`).

    A candidate end is the first later line that is neither blank nor a comment and is
    indented no deeper than the first line. Cutting there can only be wrong when that
    line continues a bracket, string or backslash of the function -- and then the cut
    text does not parse, so the next candidate is tried. The first cut that parses into
    one decorated `def` is exactly the block `inspect.getblock` finds.
    """
    first = all_lines[start]
    base = len(first) - len(first.lstrip())
    tries = 0
    i = start + 1
    n = len(all_lines)
    while tries < _BLOCK_TRIES:
        while i < n:
            line = all_lines[i]
            stripped = line.lstrip()
            if stripped and not stripped.startswith("#") and len(line) - len(stripped) <= base:
                break
            i += 1
        end = i
        # Trailing blank and comment lines belong to what follows, as for getblock.
        while end > start + 1 and (not all_lines[end - 1].strip()
                                   or all_lines[end - 1].lstrip().startswith("#")):
            end -= 1
        lines = all_lines[start:end]
        tries += 1
        try:
            module = ast.parse(textwrap.dedent("".join(lines)), filename=filename)
        except SyntaxError:
            if i >= n:
                return None
            i += 1
            continue
        if len(module.body) != 1 or not isinstance(module.body[0],
                                                   (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        # getblock also keeps trailing comments indented at least as deep as the body's
        # first line (they come before the tokenizer's DEDENT); do the same.
        body = module.body[0].body[0]
        body_line = all_lines[start + body.lineno - 1]
        body_col = len(body_line) - len(body_line.lstrip())
        margin = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        if body.col_offset + margin == body_col:  # the body starts its own line
            for j in range(end, i):
                stripped = all_lines[j].lstrip()
                if stripped.startswith("#") and len(all_lines[j]) - len(stripped) >= body_col:
                    end = j + 1
            lines = all_lines[start:end]
        return lines, module
    return None


# For callables that take no attributes (bound methods, builtins): kept for the process.
_CACHE: dict[object, FunctionSource] = {}
_ATTRIBUTE = "__cupric_source__"


def get_source(py_func) -> FunctionSource:
    """The parsed source of `py_func`, parsed once per function object.

    The result is kept on the function itself, not in a process-wide table keyed by it:
    what hangs off the parse (typed functions, specializations, the kernel, its loaded
    modules) then goes with the function, so a program that makes kernels on the fly
    does not keep every one it ever made.
    """
    src = getattr(py_func, _ATTRIBUTE, None)
    # functools.update_wrapper copies a function's __dict__ onto its wrappers (kernels,
    # OptiX programs): only the function's own parse counts.
    if src is not None and src.py_func is py_func:
        return src
    src = _CACHE.get(py_func)
    if src is None:
        src = FunctionSource(py_func)
        try:
            setattr(py_func, _ATTRIBUTE, src)
        except (AttributeError, TypeError):
            _CACHE[py_func] = src
    return src
