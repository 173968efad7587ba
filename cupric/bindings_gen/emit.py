"""Emitting a cffi out-of-line ABI module from the selected declarations.

Folds what cffi cannot compute (array bounds, enum values, ``#define`` constants),
prints the declarations back to C with pycparser's generator, lets cffi's recompiler
turn them into a Python module (no C compiler involved), and adds a header and a few
tables of its own: functions, versioned aliases, non-integer constants.
"""

from __future__ import annotations

import copy
import io
import re
from dataclasses import dataclass, field

from pycparser import c_ast, c_generator, c_parser

from .attributes import aligned_definitions, wrap_aligned
from .errors import BindingsError
from .fold import FoldError, Folder, Int
from .preprocess import MacroDef

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass
class Folded:
    """Declarations ready for cffi.

    Attributes
    ----------
    cdef : str
        C declarations, literal bounds and enum values only.
    enum_values : dict
        Every enumerator of the kept declarations and its value.
    integer_constants : dict
        Integer ``#define`` constants of the own headers.
    other_constants : dict
        Float and string ``#define`` constants of the own headers.
    aliases : dict
        ``#define`` names that stand for a declared function, and that function.
    """

    cdef: str
    enum_values: dict[str, int] = field(default_factory=dict)
    integer_constants: dict[str, int] = field(default_factory=dict)
    other_constants: dict[str, object] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)


class _Sizes:
    """``sizeof`` of the types declared so far, through a scratch cffi FFI."""

    def __init__(self):
        self.texts: list[str] = []
        self.ffi = None
        self.count = 0

    def add(self, text: str) -> None:
        self.texts.append(text)

    def replace_last(self, text: str) -> None:
        self.texts[-1] = text
        self.ffi = None  # the scratch FFI saw the old text

    def _current(self):
        import cffi

        if self.ffi is None or self.count != len(self.texts):
            self.ffi = cffi.FFI()
            self.ffi.cdef("\n".join(self.texts))
            self.count = len(self.texts)
        return self.ffi

    def __call__(self, type_text: str) -> int:
        import cffi

        try:
            return self._current().sizeof(type_text)
        except (cffi.CDefError, TypeError) as exc:
            raise FoldError(f"sizeof({type_text}): {exc}") from exc

    def alignof(self, type_text: str) -> int:
        return self._current().alignof(type_text)


def _fold_node(node: c_ast.Node, folder: Folder, enum_values: dict[str, int]) -> None:
    """Replace array bounds and enum values under `node` by decimal literals, in place."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, c_ast.Enum) and current.values is not None:
            following = 0
            for enumerator in current.values.enumerators:
                if enumerator.value is not None:
                    following = folder.fold_int(enumerator.value)
                enum_values[enumerator.name] = following
                folder.names[enumerator.name] = Int(following)
                enumerator.value = c_ast.Constant("int", str(following))
                following += 1
            continue
        if isinstance(current, c_ast.ArrayDecl) and current.dim is not None:
            current.dim = c_ast.Constant("int", str(folder.fold_int(current.dim)))
        for _, child in current.children():
            stack.append(child)


def _clean_function(node: c_ast.Decl) -> c_ast.Decl:
    # cffi wants bare prototypes: no `extern`, no `inline`.
    node = copy.copy(node)
    node.storage = []
    node.funcspec = []
    return node


class _MacroFolder:
    """Folds ``#define`` bodies on demand, following references between macros."""

    def __init__(self, macros: dict[str, MacroDef], typenames: set[str], names: dict, sizes):
        self.macros = macros
        self.typenames = typenames
        self.names = names
        self.sizes = sizes
        self.values: dict[str, object] = {}
        self.active: set[str] = set()

    def _expression(self, macro: MacroDef) -> c_ast.Node:
        return _parse_expression(macro.value, self.typenames)

    def __call__(self, name: str) -> object:
        if name in self.values:
            return self.values[name]
        macro = self.macros.get(name)
        if macro is None or not macro.value:
            raise FoldError(f"unknown identifier {name}")
        if name in self.active:
            raise FoldError(f"recursive macro {name}")
        self.active.add(name)
        try:
            folder = Folder(self.names, self.sizes, self)
            value = folder.fold(self._expression(macro))
        finally:
            self.active.discard(name)
        self.values[name] = value
        return value


def _parse_expression(text: str, typenames: set[str]) -> c_ast.Node:
    words = set(_WORD.findall(text))
    prelude = "".join(f"typedef int {w};\n" for w in sorted(words & typenames))
    try:
        ast = c_parser.CParser().parse(f"{prelude}void *__cupric_value = ({text});\n", "<expr>")
    except Exception as exc:  # pycparser's ParseError
        raise FoldError(f"not an expression: {text}") from exc
    return ast.ext[-1].init


def fold_declarations(nodes, functions, macros, typenames, owns, alignments=None) -> Folded:
    """Fold the selection and the own headers' macros.

    Parameters
    ----------
    nodes : list of c_ast.Node
        Selected declarations; folded in place (the AST is the caller's to discard).
    alignments : dict, optional
        ``{struct tag: alignment expression}`` from `attributes.strip_attributes`.
    functions : list of str
        Names of the declared functions.
    macros : sequence of MacroDef
        Every object-like macro of the unit.
    typenames : set of str
        Every typedef name of the unit.
    owns : callable
        Whether a header label is the library's own.
    """
    sizes = _Sizes()
    names: dict[str, object] = {}
    enum_values: dict[str, int] = {}
    by_name = {m.name: m for m in macros}
    macro_folder = _MacroFolder(by_name, typenames, names, sizes)
    folder = Folder(names, sizes, macro_folder)
    generator = c_generator.CGenerator()
    texts = []
    for node in nodes:
        # In place: copying the AST cost more than the rest of the folding.
        try:
            _fold_node(node, folder, enum_values)
        except FoldError as exc:
            raise BindingsError(f"cannot fold a constant at {node.coord}: {exc}") from exc
        if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
            node = _clean_function(node)
        text = generator.visit(node) + ";"
        sizes.add(text)
        for record in aligned_definitions(node, alignments or {}):
            wanted = folder.fold_int(_parse_expression(alignments[record.name], typenames))
            kind = "struct" if isinstance(record, c_ast.Struct) else "union"
            if sizes.alignof(f"{kind} {record.name}") < wanted:
                wrap_aligned(record, wanted)
                text = generator.visit(node) + ";"
                sizes.replace_last(text)
        texts.append(text)

    declared = set(functions) | set(enum_values) | typenames
    folded = Folded(cdef="", enum_values=enum_values)
    function_set = set(functions)
    for macro in sorted(macros, key=lambda m: m.name):
        if not owns(macro.header) or not macro.value or macro.name in declared:
            continue
        if _IDENTIFIER.match(macro.value) and macro.value in function_set:
            folded.aliases[macro.name] = macro.value
            continue
        try:
            value = macro_folder(macro.name)
        except FoldError:
            continue  # attribute and export macros (CUBLASAPI, CUDNN_DEPRECATED, ...)
        if isinstance(value, Int):
            folded.integer_constants[macro.name] = value.value
        else:
            folded.other_constants[macro.name] = value
    defines = [f"#define {name} {value}" for name, value in folded.integer_constants.items()]
    folded.cdef = "\n".join(texts + defines) + "\n"
    return folded


@dataclass(frozen=True)
class ModuleInfo:
    """What the header of a generated module records."""

    library: str
    library_version: tuple[int, ...]
    package: str
    header_hash: str
    generator_version: str
    top_header: str


def _python_literal(value) -> str:
    # repr of str/int/float/tuple/dict of those is stable across runs and Python versions.
    return repr(value)


def render_module(folded: Folded, functions, inline_functions, info: ModuleInfo) -> str:
    """The text of the generated module.

    Raises
    ------
    BindingsError
        When cffi rejects the declarations.
    """
    import cffi
    from cffi import recompiler

    ffi = cffi.FFI()
    try:
        ffi.cdef(folded.cdef)
    except Exception as exc:  # cffi raises CDefError, and pycparser errors through it
        raise BindingsError(f"cffi rejected the declarations of {info.library}: {exc}") from exc
    buffer = io.StringIO()
    recompiler.make_py_source(ffi, f"_cupric_{info.library}", buffer)
    version = ".".join(str(v) for v in info.library_version) or "unknown"
    lines = [
        f"# Generated by cupric.bindings_gen {info.generator_version} from the headers of",
        f"# {info.library} {version} ({info.package}, {info.top_header}). Do not edit:",
        "# regenerate with `python -m cupric.bindings_gen`.",
        f"# header hash: sha256:{info.header_hash}",
        "",
        buffer.getvalue().rstrip("\n"),
        "",
        f"LIBRARY = {info.library!r}",
        f"LIBRARY_VERSION = {tuple(info.library_version)!r}",
        f"PACKAGE = {info.package!r}",
        f"HEADER_HASH = {info.header_hash!r}",
        f"GENERATOR_VERSION = {info.generator_version!r}",
        "",
        "# Functions declared by the headers, in header order.",
        "FUNCTIONS = (",
        *(f"    {name!r}," for name in functions),
        ")",
        "",
        "# Integer #define constants (also attributes of the opened library).",
        "DEFINES = {",
        *(f"    {k!r}: {v!r}," for k, v in folded.integer_constants.items()),
        "}",
        "",
        "# Versioned aliases (`#define cublasSgemm cublasSgemm_v2`): old name -> symbol.",
        "ALIASES = {",
        *(f"    {k!r}: {v!r}," for k, v in sorted(folded.aliases.items())),
        "}",
        "",
        "# #define constants that are not integers (integers are attributes of the library).",
        "CONSTANTS = {",
        *(f"    {k!r}: {_python_literal(v)}," for k, v in sorted(folded.other_constants.items())),
        "}",
        "",
        "# static inline helpers of the headers: not exported, so not bound.",
        "INLINE_FUNCTIONS = (",
        *(f"    {name!r}," for name in inline_functions),
        ")",
        "",
    ]
    return "\n".join(lines)
