"""C preprocessing of a library's headers, with no C compiler required.

Backends, in the order `preprocess` tries them (``CUPRIC_CPP`` overrides):

1. A C preprocessor on PATH (``cpp``, ``gcc -E``, ``clang -E``, ``cc -E``): the default
   where one is installed. It runs in a fraction of pcpp's time, which a process that
   generates cuDNN's bindings on its first call waits for.
2. ``pcpp``, a pure-Python C99 preprocessor (pip package ``pcpp``), where no C
   preprocessor is installed: it needs nothing else. A test checks that both backends
   give the same module byte for byte.

``CUPRIC_CPP=pcpp`` forces pcpp; ``CUPRIC_CPP="gcc -E"`` (any command) forces that
command. Both backends see the same fake libc (`fakelibc`) and the same predefined
macros, never the system's headers or the compiler's own predefined macros, so their
results agree. Object-like ``#define``s are collected with the header each came from:
constants and versioned aliases such as ``cublasSgemm -> cublasSgemm_v2`` exist only
there, never in the preprocessed text.
"""

from __future__ import annotations

import io
import os
import platform
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from cupric import _config
from . import fakelibc
from .errors import BindingsError, PreprocessorNotFoundError
from .headers import HeaderSet

# Macros both backends define, instead of any compiler's predefined set. The FP16/BF16/
# FP8 guards skip C++-only headers of the CUDA toolkit. __GNUC__ makes
# crt/host_defines.h spell alignment as __attribute__((aligned(n))), which stays in the
# text for `attributes.strip_attributes` to read and remove.
_PREDEFINED: tuple[tuple[str, str], ...] = (
    ("__declspec(x)", ""),
    ("__asm__(x)", ""),
    ("__extension__", ""),
    ("__inline__", "inline"),
    ("__inline", "inline"),
    ("__restrict", "restrict"),
    ("__restrict__", "restrict"),
    ("__const", "const"),
    ("__signed__", "signed"),
    ("__CUDA_FP16_H__", ""),
    ("__CUDA_BF16_H__", ""),
    ("__CUDA_FP8_H__", ""),
    ("__GNUC__", "4"),
    ("__GNUC_MINOR__", "2"),
    ("__linux__", "1"),
    ("__unix__", "1"),
    ("__LP64__", "1"),
    ("_LP64", "1"),
    ("__CHAR_BIT__", "8"),
)

# Standard macros a C99 preprocessor defines itself; pcpp needs them spelled out.
_STANDARD: tuple[tuple[str, str], ...] = (
    ("__STDC__", "1"),
    ("__STDC_VERSION__", "199901L"),
    ("__STDC_HOSTED__", "1"),
)

# Limits that turn a header including itself, or macros that expand exponentially (a
# "macro bomb"), into a clear error instead of endless recursion or a hang. The CUDA
# headers nest includes a few levels deep and no macro of theirs expands to more than a
# few hundred tokens; GCC's own include limit is 200.
MAX_INCLUDE_DEPTH = 200
MAX_EXPANSION_TOKENS = 100_000
MAX_OUTPUT_BYTES = 256 << 20
#: Seconds a preprocessor command may run.
CPP_TIMEOUT = 300

_LINE_MARKER = re.compile(r'^#(?:line)?\s+(\d+)\s+"((?:[^"\\]|\\.)*)"(.*)$')
_DEFINE = re.compile(r"^#\s*define\s+([A-Za-z_]\w*)(\()?")
_UNDEF = re.compile(r"^#\s*undef\s+([A-Za-z_]\w*)")


@dataclass(frozen=True)
class MacroDef:
    """An object-like ``#define``: name, replacement text (whitespace collapsed), header label."""

    name: str
    value: str
    header: str


@dataclass(frozen=True)
class Preprocessed:
    """One translation unit after preprocessing.

    Attributes
    ----------
    text : str
        C source with ``# N "label"`` line markers; labels are header paths relative to
        their include directory, ``<libc>/...`` for the fake libc.
    macros : tuple of MacroDef
        Object-like macros defined at the end of the unit, sorted by name.
    files : tuple of str
        Real paths of every non-libc header read, sorted.
    backend : str
        Which preprocessor ran.
    """

    text: str
    macros: tuple[MacroDef, ...]
    files: tuple[str, ...]
    backend: str


def _arch_macros() -> tuple[tuple[str, str], ...]:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return (("__x86_64__", "1"), ("__x86_64", "1"))
    if machine in ("aarch64", "arm64"):
        return (("__aarch64__", "1"),)
    return ()


def predefined() -> tuple[tuple[str, str], ...]:
    """The macros both backends define, in order."""
    return _PREDEFINED + _arch_macros()


def _collapse(value: str) -> str:
    return " ".join(value.split())


class _Labeler:
    """Maps real header paths to the labels used in line markers and macro records."""

    def __init__(self, header_set: HeaderSet, libc_dir: str):
        self.header_set = header_set
        self.libc_root = os.path.realpath(libc_dir) + os.sep
        self.cache: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        label = self.cache.get(path)
        if label is None:
            real = os.path.realpath(path)
            if real.startswith(self.libc_root):
                label = "<libc>/" + real[len(self.libc_root):]
            else:
                label = self.header_set.label(real) or ("<other>/" + os.path.basename(real))
            self.cache[path] = label
        return label


def _relabel(text: str, labeler: _Labeler, cwd: str) -> tuple[str, set[str]]:
    """Rewrite line markers to labels; return the text and the real paths seen."""
    out = []
    seen: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#"):
            marker = _LINE_MARKER.match(line)
            if marker:
                number, path, _flags = marker.groups()
                if path.startswith("<"):  # <stdin>, <built-in>, <command-line>
                    out.append(f'# {number} "{path}"')
                    continue
                full = os.path.normpath(os.path.join(cwd, path))
                label = labeler(full)
                if not label.startswith("<libc>"):
                    seen.add(os.path.realpath(full))
                out.append(f'# {number} "{label}"')
                continue
            if line.startswith(("#pragma", "# pragma")):
                out.append("")
                continue
        out.append(line)
    return "\n".join(out) + "\n", seen


def _run_pcpp(header_set: HeaderSet, libc_dir: str) -> Preprocessed:
    try:
        from pcpp import Preprocessor
    except ImportError as exc:
        raise PreprocessorNotFoundError("pcpp is not installed") from exc

    errors: list[str] = []
    opened: list[str] = []

    class _Strict(Preprocessor):
        # pcpp is built to pass unknown constructs through; a C compiler would instead
        # treat unknown identifiers in #if as 0 and stop at a missing include.
        def on_unknown_macro_in_expr(self, ident):
            return 0

        def on_unknown_macro_in_defined_expr(self, tok):
            return False

        def on_unknown_macro_function_in_expr(self, ident):
            return lambda *args: 0

        def on_include_not_found(self, is_malformed, is_system_include, curdir, includepath):
            errors.append(f"include not found: {includepath} (from {curdir})")
            raise BindingsError(f"pcpp: include not found: {includepath}")

        def on_error(self, file, line, msg):
            errors.append(f"{file}:{line}: {msg}")

        def on_file_open(self, is_system_include, includepath):
            if self.include_depth >= MAX_INCLUDE_DEPTH:
                raise BindingsError(
                    f"pcpp: #include nested more than {MAX_INCLUDE_DEPTH} deep at "
                    f"{includepath} (a header that includes itself without a guard?)")
            # pcpp probes each include directory by trying to open; record only successes.
            handle = super().on_file_open(is_system_include, includepath)
            opened.append(includepath)
            return handle

        def on_comment(self, tok):
            return False

        def expand_macros(self, tokens, expanding_from=[]):  # noqa: B006 (pcpp's signature)
            # Nested expansions come through here too, so the limit stops a macro bomb
            # after about MAX_EXPANSION_TOKENS tokens of work, long before it explodes.
            result = super().expand_macros(tokens, expanding_from)
            if len(result) > MAX_EXPANSION_TOKENS:
                name = expanding_from[-1] if expanding_from else "a line"
                raise BindingsError(
                    f"pcpp: the expansion of {name} exceeds {MAX_EXPANSION_TOKENS} tokens "
                    "(macros that expand exponentially?)")
            return result

    pre = _Strict()
    pre.line_directive = "#"
    pre.compress = 0
    pre.add_path(libc_dir)
    for directory in header_set.include_dirs:
        pre.add_path(directory)
    for name, value in _STANDARD + predefined():
        pre.define(f"{name} {value}")
    source = f'#include "{header_set.top_header}"\n'
    pre.parse(source, "<stdin>")
    buffer = io.StringIO()
    pre.write(buffer)
    if errors or pre.return_code:
        raise BindingsError("pcpp failed:\n" + "\n".join(errors[:20]))

    labeler = _Labeler(header_set, libc_dir)
    cwd = os.getcwd()
    text, _seen = _relabel(buffer.getvalue(), labeler, cwd)
    macros = []
    for name, macro in pre.macros.items():
        if macro.arglist is not None or not getattr(macro, "source", None):
            continue
        value = "".join(str(tok.value) for tok in macro.value)
        label = labeler(os.path.normpath(os.path.join(cwd, macro.source)))
        macros.append(MacroDef(name, _collapse(value), label))
    files = {os.path.realpath(p) for p in opened if not labeler(p).startswith("<libc>")}
    return Preprocessed(text, tuple(sorted(macros, key=lambda m: m.name)),
                        tuple(sorted(files)), "pcpp")


def _find_cpp() -> list[str] | None:
    for candidate in (["cpp"], ["gcc", "-E"], ["clang", "-E"], ["cc", "-E"]):
        if shutil.which(candidate[0]):
            return candidate
    return None


def _run_cpp(command: list[str], header_set: HeaderSet, libc_dir: str) -> Preprocessed:
    args = [*command, "-E", "-undef", "-nostdinc", "-dD", "-std=c99", "-x", "c"]
    for directory in (libc_dir, *header_set.include_dirs):
        args += ["-I", directory]
    for name, value in predefined():
        args.append(f"-D{name}={value}")
    args.append("-")
    try:
        proc = subprocess.run(
            args,
            input=f'#include "{header_set.top_header}"\n',
            capture_output=True,
            text=True,
            check=False,
            timeout=CPP_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise BindingsError(f"{' '.join(command)} ran over {CPP_TIMEOUT} s (macros that "
                            "expand exponentially?)") from None
    if len(proc.stdout) > MAX_OUTPUT_BYTES:
        raise BindingsError(f"{' '.join(command)} wrote more than {MAX_OUTPUT_BYTES >> 20} "
                            "MiB (macros that expand exponentially?)")
    if proc.returncode != 0:
        raise BindingsError(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")

    labeler = _Labeler(header_set, libc_dir)
    cwd = os.getcwd()
    # With -dD the #define and #undef lines stay in the output, where the line markers
    # around them say which header they belong to; take them out of the C text.
    current = "<stdin>"
    macros: dict[str, MacroDef] = {}
    kept = []
    for line in proc.stdout.splitlines():
        if line.startswith("#"):
            marker = _LINE_MARKER.match(line)
            if marker:
                current = marker.group(2)
                kept.append(line)
                continue
            define = _DEFINE.match(line)
            if define:
                name, is_function = define.groups()
                if is_function:
                    macros.pop(name, None)
                elif not current.startswith("<"):
                    value = line[define.end():]
                    label = labeler(os.path.normpath(os.path.join(cwd, current)))
                    macros[name] = MacroDef(name, _collapse(value), label)
                kept.append("")
                continue
            undef = _UNDEF.match(line)
            if undef:
                macros.pop(undef.group(1), None)
                kept.append("")
                continue
        kept.append(line)
    text, seen = _relabel("\n".join(kept), labeler, cwd)
    return Preprocessed(text, tuple(sorted(macros.values(), key=lambda m: m.name)),
                        tuple(sorted(seen)), " ".join(command))


def available_backends() -> list[str]:
    """Backends usable here, in the default order."""
    import importlib.util

    names = []
    if importlib.util.find_spec("pcpp") is not None:
        names.append("pcpp")
    command = _find_cpp()
    if command:
        names.append(" ".join(command))
    return names


def preprocess(header_set: HeaderSet, backend: str | None = None) -> Preprocessed:
    """Preprocess a library's top header.

    Parameters
    ----------
    header_set : HeaderSet
        Top header and include directories.
    backend : str, optional
        ``"pcpp"``, or a preprocessor command such as ``"gcc -E"``. Default: the
        ``CUPRIC_CPP`` environment variable, else a preprocessor on PATH, else pcpp.

    Raises
    ------
    PreprocessorNotFoundError
        When no backend is available (says to ``pip install pcpp``).
    BindingsError
        When preprocessing fails.
    """
    backend = backend or _config.CPP.get()
    libc_dir = fakelibc.materialize()
    if backend == "pcpp":
        return _run_pcpp(header_set, libc_dir)
    if backend:
        return _run_cpp(shlex.split(backend), header_set, libc_dir)
    command = _find_cpp()
    if command is not None:
        try:
            return _run_cpp(command, header_set, libc_dir)
        except BindingsError as exc:
            raise BindingsError(f"{exc}\n(CUPRIC_CPP=pcpp uses the pure-Python preprocessor "
                                "instead)") from None
    try:
        return _run_pcpp(header_set, libc_dir)
    except PreprocessorNotFoundError:
        raise PreprocessorNotFoundError(
            "no C preprocessor: install the pure-Python one with `pip install pcpp`"
        ) from None
