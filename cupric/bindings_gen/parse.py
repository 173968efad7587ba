"""Parsing a preprocessed unit and keeping the library's own declarations.

The unit holds the library's headers and everything they include (the CUDA runtime's
types, the fake libc). Kept: every function, typedef, struct, union and enum declared
in the library's own headers, then, transitively, each declaration from another header
that a kept one names (``cudaStream_t``, ``cudaDataType``, ``cuComplex``...), in source
order. Dropped: declarations from the fake libc (cffi has those types built in) and
``static inline`` function bodies (they are not exported symbols).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pycparser import c_ast, c_parser

from . import fakelibc
from .errors import BindingsError

_BASIC = frozenset(
    "void char short int long float double signed unsigned _Bool __int128 _Complex".split()
)


@dataclass
class Selection:
    """What `select_declarations` keeps.

    Attributes
    ----------
    nodes : list of c_ast.Node
        Top-level declarations to emit, in source order.
    functions : list of str
        Names of the kept function declarations, in source order.
    inline_functions : list of str
        ``static inline`` functions of the own headers (not exported, not bound).
    typenames : set of str
        Every typedef name in the unit (to parse macro bodies with casts).
    """

    nodes: list[c_ast.Node]
    functions: list[str]
    inline_functions: list[str] = field(default_factory=list)
    typenames: set[str] = field(default_factory=set)


def parse(text: str) -> c_ast.FileAST:
    """Parse preprocessed C text with pycparser.

    Raises
    ------
    BindingsError
        With pycparser's message (file label and line).
    """
    try:
        return c_parser.CParser().parse(text, "<unit>")
    except Exception as exc:  # pycparser raises ParseError and, on some input, AssertionError
        raise BindingsError(f"pycparser could not parse the headers: {exc}") from exc


def _defined_keys(node: c_ast.Node) -> list[tuple[str, str]]:
    """Keys (kind, name) a top-level declaration defines."""
    keys = []
    if isinstance(node, c_ast.Typedef):
        keys.append(("type", node.name))
    elif isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
        keys.append(("func", node.name))
    inner = node.type
    while isinstance(inner, (c_ast.TypeDecl, c_ast.PtrDecl, c_ast.ArrayDecl)):
        inner = inner.type
    for tagged in _tagged_types(node):
        if isinstance(tagged, c_ast.Enum) and tagged.values is not None:
            if tagged.name:
                keys.append(("enum", tagged.name))
            for enumerator in tagged.values.enumerators:
                keys.append(("const", enumerator.name))
        elif isinstance(tagged, (c_ast.Struct, c_ast.Union)) and tagged.name:
            kind = "struct" if isinstance(tagged, c_ast.Struct) else "union"
            keys.append((kind, tagged.name))
    return keys


def _tagged_types(node: c_ast.Node):
    """Struct/union/enum nodes reachable from a declaration, nested ones included."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
            yield current
        for _, child in current.children():
            stack.append(child)


def _references(node: c_ast.Node) -> set[tuple[str, str]]:
    """Keys (kind, name) a declaration refers to."""
    refs: set[tuple[str, str]] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, c_ast.IdentifierType):
            for name in current.names:
                if name not in _BASIC:
                    refs.add(("type", name))
        elif isinstance(current, c_ast.Struct) and current.name:
            refs.add(("struct", current.name))
        elif isinstance(current, c_ast.Union) and current.name:
            refs.add(("union", current.name))
        elif isinstance(current, c_ast.Enum) and current.name:
            refs.add(("enum", current.name))
        elif isinstance(current, c_ast.ID):
            refs.add(("const", current.name))
        for _, child in current.children():
            stack.append(child)
    return refs


def _header_of(node: c_ast.Node) -> str:
    coord = node.coord
    return coord.file if coord is not None and coord.file else ""


def select_declarations(ast: c_ast.FileAST, owns) -> Selection:
    """Keep a library's own declarations and what they need.

    Parameters
    ----------
    ast : c_ast.FileAST
        The parsed unit.
    owns : callable
        ``owns(header_label) -> bool``: whether a header is the library's own.

    Raises
    ------
    BindingsError
        When a kept declaration needs a libc type cffi does not know.
    """
    nodes = [n for n in ast.ext if isinstance(n, (c_ast.Decl, c_ast.Typedef))]
    inline = [
        n.decl.name for n in ast.ext if isinstance(n, c_ast.FuncDef) and owns(_header_of(n))
    ]
    index: dict[tuple[str, str], list[int]] = {}
    typenames = set()
    for i, node in enumerate(nodes):
        for key in _defined_keys(node):
            index.setdefault(key, []).append(i)
            if key[0] == "type":
                typenames.add(key[1])

    keep: set[int] = set()
    work = []
    seen_functions: set[str] = set()
    for i, node in enumerate(nodes):
        if not owns(_header_of(node)):
            continue
        if isinstance(node, c_ast.Decl) and not isinstance(node.type, c_ast.FuncDecl):
            has_type = isinstance(node.type, (c_ast.Struct, c_ast.Union, c_ast.Enum))
            if not has_type:
                continue  # a global variable: the libraries export none worth binding
        if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
            if node.name in seen_functions:
                continue  # redeclaration (cuDNN repeats some)
            seen_functions.add(node.name)
        work.append(i)
    while work:
        i = work.pop()
        if i in keep:
            continue
        keep.add(i)
        for key in _references(nodes[i]):
            for j in index.get(key, ()):
                if j not in keep:
                    work.append(j)

    kept = []
    functions = []
    for i in sorted(keep):
        node = nodes[i]
        header = _header_of(node)
        if header.startswith("<libc>"):
            names = [name for kind, name in _defined_keys(node) if kind == "type"]
            unknown = [name for name in names if name not in fakelibc.CFFI_BUILTIN_TYPES]
            if unknown:
                raise BindingsError(f"declarations need libc types cffi lacks: {unknown}")
            continue
        kept.append(node)
        if isinstance(node, c_ast.Decl) and isinstance(node.type, c_ast.FuncDecl):
            functions.append(node.name)
    return Selection(kept, functions, inline, typenames)
