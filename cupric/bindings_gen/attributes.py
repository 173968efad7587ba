"""GCC attributes: removed before parsing, alignment requests kept.

pycparser cannot parse ``__attribute__((...))``, and cffi has no way to spell it. Most
attributes (visibility, deprecation) do not matter to a binding, but the CUDA vector
types (``float2``, ``double2``, hence ``cuComplex``) are declared
``struct __align__(8) float2 {...}``, and their alignment changes the offsets of every
struct that holds one. So the preprocessor leaves attributes in the text, this module
cuts them out, and remembers ``aligned(N)`` requests per struct tag; `emit` then gives
those structs their alignment in a form cffi understands.
"""

from __future__ import annotations

import re

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
