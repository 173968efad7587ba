"""Constant folding with C semantics."""

from __future__ import annotations

import pytest
from pycparser import c_parser

from cupric.bindings_gen.fold import FoldError, Folder, Int


def fold(expr: str, names=None, sizes=None):
    ast = c_parser.CParser().parse(f"typedef int myenum_t; void *x = ({expr});")
    folder = Folder(dict(names or {}), lambda t: (sizes or {})[t])
    value = folder.fold(ast.ext[-1].init)
    return value.value if isinstance(value, Int) else value


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("1 + 2 * 3", 7),
        ("~0U", 0xFFFFFFFF),
        ("~0", -1),
        ("1u << 31", 0x80000000),
        ("0x7fffffff >> (32 - 8*4)", 0x7FFFFFFF),
        ("-7 / 2", -3),
        ("-7 % 2", -1),
        ("0xFFFFFFFF", 0xFFFFFFFF),
        ("(-2147483647 - 1)", -(2**31)),
        ("18446744073709551615ULL", 2**64 - 1),
        ("1 ? 5 : 6", 5),
        ("'A'", 65),
        ("(myenum_t)3", 3),
        ("(unsigned char)300", 44),
        ("(1 < 2) && (3 > 4)", 0),
        ("010", 8),
    ],
)
def test_integer_expressions(expr, expected):
    assert fold(expr) == expected


def test_floats_strings_and_names():
    assert fold("1e-5") == 1e-5
    assert fold("0.01f") == 0.01
    assert fold("-1.0") == -1.0
    assert fold('"abc"') == "abc"
    assert fold("A + 1", {"A": Int(41)}) == 42


def test_sizeof_asks_the_callback():
    assert fold("8 - sizeof(int)", sizes={"int": 4}) == 4
    assert fold("2*sizeof(long int)", sizes={"long int": 8}) == 16


def test_unknown_names_are_errors():
    with pytest.raises(FoldError):
        fold("UNDEFINED_THING + 1")
