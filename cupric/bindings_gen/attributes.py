"""GCC attributes: removed before parsing, alignment requests kept.

pycparser cannot parse ``__attribute__((...))``, and cffi has no way to spell it. Most
attributes (visibility, deprecation) do not matter to a binding, but the CUDA vector
types (``float2``, ``double2``, hence ``cuComplex``) are declared
``struct __align__(8) float2 {...}``, and their alignment changes the offsets of every
struct that holds one. So the preprocessor leaves attributes in the text, this module
cuts them out, and remembers ``aligned(N)`` requests per struct tag; `wrap_aligned`
then gives those structs their alignment in a form cffi understands (`emit` calls it
where the members' own alignment falls short).
"""

from __future__ import annotations

import re

from pycparser import c_ast

from .errors import BindingsError

_ATTRIBUTE = re.compile(r"\b__attribute__\s*\(")
_ALIGNED = re.compile(r"^\(\s*(?:aligned|__aligned__)\s*\((.*)\)\s*\)$", re.S)
_TAG_AFTER = re.compile(r"\s*([A-Za-z_]\w*)\s*\{")
_KEYWORD_BEFORE = re.compile(r"\b(struct|union)\s*$")


def _balanced_end(text: str, start: int) -> int:
    """Index just past the parenthesis that closes the one at `start`."""
    depth = 0
    i = start
    quote = None
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced parentheses in __attribute__")


def strip_attributes(text: str) -> tuple[str, dict[str, str]]:
    """Remove every ``__attribute__((...))``.

    Returns
    -------
    text : str
        The text without attributes (line structure kept).
    alignments : dict
        ``{struct or union tag: alignment expression}`` for ``struct __attribute__((aligned(N))) tag {``.
    """
    out = []
    alignments: dict[str, str] = {}
    position = 0
    for match in _ATTRIBUTE.finditer(text):
        if match.start() < position:
            continue  # nested inside an attribute already removed
        open_paren = match.end() - 1
        end = _balanced_end(text, open_paren)
        body = " ".join(text[open_paren + 1 : end - 1].split())
        aligned = _ALIGNED.match(body)
        if aligned and _KEYWORD_BEFORE.search(text[max(0, match.start() - 64) : match.start()]
                                              .replace("\n", " ")):
            tag = _TAG_AFTER.match(text, end)
            if tag:
                alignments[tag.group(1)] = aligned.group(1).strip()
        out.append(text[position : match.start()])
        # Keep newlines so that line numbers in later error messages stay right.
        out.append("\n" * text.count("\n", match.start(), end))
        position = end
    out.append(text[position:])
    return "".join(out), alignments


# Members that give a struct the alignment its `aligned(N)` attribute asks for: each has
# size N and alignment N on LP64 platforms (x86-64 and aarch64 alike).
_ALIGNERS = {2: ["short"], 4: ["int"], 8: ["long", "long"], 16: ["long", "double"]}
ALIGNER_FIELD = "__cupric_align"


def aligned_definitions(node: c_ast.Node, alignments: dict[str, str]):
    """Struct/union definitions under `node` whose tag asked for an alignment."""
    stack = [node]
    while stack:
        current = stack.pop()
        if (isinstance(current, (c_ast.Struct, c_ast.Union)) and current.decls is not None
                and current.name in alignments):
            yield current
        for _, child in current.children():
            stack.append(child)


def _decl(name, type_node):
    return c_ast.Decl(name, [], [], [], [], type_node, None, None)


def wrap_aligned(record: c_ast.Node, alignment: int) -> None:
    """Give a struct/union `alignment` by overlaying its members with an aligner member.

    ``struct float2 { float x, y; }`` becomes
    ``struct float2 { union { struct { float x, y; }; long long __cupric_align; }; }``:
    the members keep their names (anonymous members are transparent in C and cffi),
    the size stays a multiple of the alignment, as it is for the C compiler.
    """
    names = _ALIGNERS.get(alignment)
    if names is None:
        raise BindingsError(f"cannot express alignment {alignment} of {record.name} in cffi")
    inner = type(record)(None, record.decls)
    aligner = _decl(ALIGNER_FIELD, c_ast.TypeDecl(ALIGNER_FIELD, [], None, c_ast.IdentifierType(names)))
    record.decls = [_decl(None, c_ast.Union(None, [_decl(None, inner), aligner]))]
