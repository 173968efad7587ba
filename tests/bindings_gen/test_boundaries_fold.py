"""Constant folding at the edges of C's integer rules: literal types at each width
boundary, the usual arithmetic conversions with mixed signedness (both operand orders,
both widths), integer promotion, wrap-around, truncating division, shifts, casts through
every integer type name the folder knows, and short-circuit logic.

A wrong answer here is silent: it becomes an array bound or an enum value in a generated
binding. Expected values are C's (LP64), worked out by hand from the standard's rules.
"""

from __future__ import annotations

import pytest
from pycparser import c_parser

from cupric.bindings_gen.fold import FoldError, Folder, Int

_TYPEDEFS = "".join(f"typedef int {t};" for t in (
    "myenum_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
    "uint64_t", "size_t", "ssize_t", "intptr_t", "uintptr_t"))


def fold_node(expr: str, names=None, resolve=None):
    ast = c_parser.CParser().parse(f"{_TYPEDEFS} void *x = ({expr});")
    return Folder(dict(names or {}), lambda t: {"int": 4, "long": 8}[t], resolve), \
        ast.ext[-1].init


def value(expr: str, **kw):
    folder, node = fold_node(expr, **kw)
    return folder.fold(node)


def typed(expr: str) -> tuple[int, int, bool]:
    v = value(expr)
    assert isinstance(v, Int), v
    return v.value, v.bits, v.unsigned


# -- literal types -------------------------------------------------------------------------

@pytest.mark.parametrize("literal, expected", [
    ("0", (0, 32, False)),
    ("2147483647", (2**31 - 1, 32, False)),
    ("2147483648", (2**31, 64, False)),            # decimal: next signed type
    ("0x7FFFFFFF", (2**31 - 1, 32, False)),
    ("0x80000000", (2**31, 32, True)),             # hex: unsigned int before long
    ("0xFFFFFFFF", (2**32 - 1, 32, True)),
    ("0x100000000", (2**32, 64, False)),
    ("017777777777", (2**31 - 1, 32, False)),      # octal like hex
    ("020000000000", (2**31, 32, True)),
    ("4294967295U", (2**32 - 1, 32, True)),
    ("4294967296U", (2**32, 64, True)),
    ("9223372036854775807", (2**63 - 1, 64, False)),
    ("9223372036854775808", (2**63, 64, True)),
    ("0x7FFFFFFFFFFFFFFF", (2**63 - 1, 64, False)),
    ("0x8000000000000000", (2**63, 64, True)),
    ("1L", (1, 64, False)), ("1l", (1, 64, False)), ("1LL", (1, 64, False)),
    ("1UL", (1, 64, True)), ("1lu", (1, 64, True)), ("1ULL", (1, 64, True)),
    ("1u", (1, 32, True)), ("7U", (7, 32, True)),
    ("0x10", (16, 32, False)), ("0X1f", (31, 32, False)), ("017", (15, 32, False)),
    ("0b101", (5, 32, False)), ("0B11", (3, 32, False)),
])
def test_literal_types_at_each_width_boundary(literal, expected):
    assert typed(literal) == expected


# -- usual arithmetic conversions: mixed signedness ----------------------------------------

@pytest.mark.parametrize("expr, expected", [
    # Same width: unsigned wins, either order.
    ("-1 < 0U", 0), ("0U > -1", 0), ("-1 < 0", 1),
    ("-1L < 0UL", 0), ("0UL > -1L", 0), ("-1L < 0L", 1),
    # Signed long against unsigned int: long holds every unsigned int, so signed.
    ("-1L < 0U", 1), ("0U > -1L", 1),
    # Unsigned long against int: unsigned long.
    ("-1 < 0UL", 0), ("0UL > -1", 0),
])
def test_comparisons_convert_like_c(expr, expected):
    assert typed(expr) == (expected, 32, False)


@pytest.mark.parametrize("expr, expected", [
    ("0U - 1", (2**32 - 1, 32, True)), ("0 - 1U", (2**32 - 1, 32, True)),
    ("0UL - 1", (2**64 - 1, 64, True)), ("0 - 1UL", (2**64 - 1, 64, True)),
    ("0U - 1L", (-1, 64, False)), ("0L - 1U", (-1, 64, False)),
    ("0UL - 1L", (2**64 - 1, 64, True)), ("0L - 1UL", (2**64 - 1, 64, True)),
    ("-1 / 2U", (2**31 - 1, 32, True)), ("2U * -1", (2**32 - 2, 32, True)),
    ("-1 % 3U", (0, 32, True)), ("3U % -1", (3, 32, True)),
    ("-1 & 0xFFU", (255, 32, True)), ("0xFFU | -256", (2**32 - 1, 32, True)),
    ("-1 ^ 1U", (2**32 - 2, 32, True)), ("1 + 1", (2, 32, False)),
    ("2147483647 + 1", (-(2**31), 32, False)), ("0xFFFFFFFF + 1", (0, 32, True)),
    ("0x7FFFFFFFFFFFFFFF + 1", (-(2**63), 64, False)),
])
def test_arithmetic_converts_and_wraps_like_c(expr, expected):
    assert typed(expr) == expected


@pytest.mark.parametrize("expr, expected", [
    # Types narrower than int promote to (signed) int before any arithmetic.
    ("(unsigned char)1 - (unsigned char)2", (-1, 32, False)),
    ("(unsigned short)1 - (unsigned char)2", (-1, 32, False)),
    ("(unsigned char)200 + (unsigned short)100", (300, 32, False)),
    ("(unsigned char)1 - 2U", (2**32 - 1, 32, True)),
    ("-(unsigned char)1", (-1, 32, False)),
    ("~(unsigned char)0", (-1, 32, False)),
    ("~(unsigned short)0 < 0", (1, 32, False)),
    ("(unsigned char)1 << 31", (-(2**31), 32, False)),
    ("(signed char)-1 < (unsigned char)0", (1, 32, False)),
])
def test_narrow_types_promote_to_int(expr, expected):
    assert typed(expr) == expected


# -- division, shifts, comparisons, logic ---------------------------------------------------

@pytest.mark.parametrize("expr, expected", [
    ("7 / 2", 3), ("-7 / 2", -3), ("7 / -2", -3), ("-7 / -2", 3), ("0 / 5", 0),
    ("7 % 2", 1), ("-7 % 2", -1), ("7 % -2", 1), ("-7 % -2", -1), ("6 / 3", 2), ("6 % 3", 0),
    ("0xFFFFFFFF / 2", 2**31 - 1),
])
def test_division_truncates_toward_zero(expr, expected):
    assert typed(expr)[0] == expected


@pytest.mark.parametrize("expr", ["5 / 0", "5 % 0", "1 / (2 - 2)", "5U % 0U"])
def test_division_by_zero_is_an_error(expr):
    with pytest.raises(FoldError, match="division by zero"):
        value(expr)


@pytest.mark.parametrize("expr, expected", [
    ("1 << 31", (-(2**31), 32, False)), ("1L << 31", (2**31, 64, False)),
    ("1ULL << 63", (2**63, 64, True)), ("1LL << 63", (-(2**63), 64, False)),
    ("1 << 2UL", (4, 32, False)),                  # the left operand decides the type
    ("-8 >> 1", (-4, 32, False)), ("-1 >> 28", (-1, 32, False)),
    ("0x80000000 >> 31", (1, 32, True)), ("(0U - 1) >> 31", (1, 32, True)),
    ("0x7fffffff >> (32 - 8*sizeof(int))", (2**31 - 1, 32, False)),
])
def test_shifts_keep_the_left_operands_type(expr, expected):
    assert typed(expr) == expected


@pytest.mark.parametrize("expr, expected", [
    ("1 < 1", 0), ("1 <= 1", 1), ("1 > 1", 0), ("1 >= 1", 1), ("1 == 1", 1), ("1 != 1", 0),
    ("1 < 2", 1), ("2 <= 1", 0), ("2 > 1", 1), ("1 >= 2", 0), ("1 == 2", 0), ("1 != 2", 1),
    ("6 & 3", 2), ("6 | 3", 7), ("6 ^ 3", 5), ("!0", 1), ("!5", 0), ("!0U", 1),
    ("0 ? 1 : 2", 2), ("3 ? 1 : 2", 1), ("0.0 ? 1 : 2", 2), ("0.5 ? 1 : 2", 1),
    ("1 && 2", 1), ("2 && 0", 0), ("0 || 0", 0), ("0 || 3", 1), ("0.0 || 0.5", 1),
    ("0.5 && 0.0", 0),
])
def test_comparisons_bit_operations_and_logic(expr, expected):
    assert typed(expr) == (expected, 32, False)


def test_logic_short_circuits_past_names_it_cannot_fold():
    assert typed("0 && UNKNOWN") == (0, 32, False)
    assert typed("1 || UNKNOWN") == (1, 32, False)
    assert typed("0.0 && UNKNOWN") == (0, 32, False)
    with pytest.raises(FoldError, match="unknown identifier UNKNOWN"):
        value("1 && UNKNOWN")
    with pytest.raises(FoldError, match="unknown identifier UNKNOWN"):
        value("0 || UNKNOWN")


@pytest.mark.parametrize("expr, expected", [
    ("-0x80000000", (2**31, 32, True)), ("+3U", (3, 32, True)), ("+3", (3, 32, False)),
    ("-(-2147483647 - 1)", (-(2**31), 32, False)), ("~0UL", (2**64 - 1, 64, True)),
    ("-1L", (-1, 64, False)), ("~5", (-6, 32, False)),
])
def test_unary_operators(expr, expected):
    assert typed(expr) == expected


# -- casts through every integer type name --------------------------------------------------

_TYPES = {  # name: (bits, unsigned), from the C standard and LP64
    "char": (8, False), "signed char": (8, False), "unsigned char": (8, True),
    "short": (16, False), "short int": (16, False), "unsigned short": (16, True),
    "int": (32, False), "signed": (32, False), "signed int": (32, False),
    "unsigned": (32, True), "unsigned int": (32, True),
    "long": (64, False), "long int": (64, False), "unsigned long": (64, True),
    "unsigned long int": (64, True), "long long": (64, False), "long long int": (64, False),
    "unsigned long long": (64, True), "unsigned long long int": (64, True),
    "int8_t": (8, False), "int16_t": (16, False), "int32_t": (32, False),
    "int64_t": (64, False), "uint8_t": (8, True), "uint16_t": (16, True),
    "uint32_t": (32, True), "uint64_t": (64, True), "size_t": (64, True),
    "ssize_t": (64, False), "intptr_t": (64, False), "uintptr_t": (64, True),
}


@pytest.mark.parametrize("name", sorted(_TYPES))
def test_casts_wrap_to_each_types_width_and_signedness(name):
    bits, unsigned = _TYPES[name]
    top = 1 << (bits - 1)
    assert typed(f"({name})-1") == ((1 << bits) - 1 if unsigned else -1, bits, unsigned)
    # The first value past the signed range, and one below it.
    assert typed(f"({name}){top}LL")[0] == (top if unsigned else -top)
    assert typed(f"({name}){top - 1}LL")[0] == top - 1
    assert typed(f"({name})0x1{'0' * (bits // 4)}ULL")[0] == 0


@pytest.mark.parametrize("expr, expected", [
    ("(double)3", 3.0), ("(float)1", 1.0), ("(long double)2", 2.0), ("(double)1.5", 1.5),
    ("(int)2.9", Int(2, 32, False)), ("(unsigned char)-1.0", Int(255, 8, True)),
    ("(myenum_t)3", Int(3, 32, False)), ("(myenum_t)0xFFFFFFFFU", Int(2**32 - 1, 32, False)),
    ("(myenum_t)3.7", Int(3, 32, False)),
])
def test_casts_to_floats_and_typedefs(expr, expected):
    got = value(expr)
    assert got == expected and type(got) is type(expected)


def test_pointer_casts_are_not_constants():
    with pytest.raises(FoldError, match="pointer cast"):
        value("(void *)0")


# -- floats, chars, strings, names ----------------------------------------------------------

@pytest.mark.parametrize("expr, expected", [
    ("1.0 + 2", 3.0), ("2 - 0.5", 1.5), ("2.0 * 3", 6.0), ("3 / 2.0", 1.5), ("1 / 4.0", 0.25),
    ("1.5e3", 1500.0), (".5", 0.5), ("2.f", 2.0), ("1e-2", 0.01), ("1E2", 100.0),
    ("-1.5", -1.5), ("+1.5", 1.5), ("0x10 + 0.5", 16.5), ("1.5F", 1.5), ("2.5L", 2.5),
    ("2.5l", 2.5), ("1e3F", 1000.0), ("1E-1L", 0.1),
])
def test_float_arithmetic(expr, expected):
    got = value(expr)
    assert isinstance(got, float) and got == expected


@pytest.mark.parametrize("expr, expected", [
    ("1.5 < 2", 1), ("2 < 1.5", 0), ("1.5 == 1.5", 1), ("1.0 != 1", 0), ("2.5 >= 2.5", 1),
    ("2.5 <= 2", 0), ("2.5 > 2", 1),
])
def test_float_comparisons_give_ints(expr, expected):
    assert typed(expr) == (expected, 32, False)


@pytest.mark.parametrize("expr, match", [
    ("1.0 & 1", "operator & on floats"), ("1.0 % 2", "operator % on floats"),
    ("~1.0", "operator ~ on a float"), ("!1.0", "operator ! on a float"),
    ('-"a"', "operator - on 'a'"), ('"a" + 1', "operator \\+ on non-integers"),
    ("sizeof(x)", "sizeof of an expression"), ("x[1]", "not a constant expression: ArrayRef"),
])
def test_what_does_not_fold(expr, match):
    with pytest.raises(FoldError, match=match):
        value(expr)


@pytest.mark.parametrize("literal, expected", [
    (r"'A'", 65), (r"'\n'", 10), (r"'\t'", 9), (r"'\r'", 13), (r"'\0'", 0), (r"'\\'", 92),
    (r"'\''", 39), (r"'\"'", 34), (r"'\a'", 7), (r"'\b'", 8), (r"'\f'", 12), (r"'\v'", 11),
    (r"'\x41'", 65), (r"'\101'", 65), (r"'\7'", 7),
])
def test_character_constants(literal, expected):
    assert typed(literal) == (expected, 32, False)


@pytest.mark.parametrize("literal, expected", [
    (r'"a\nb"', "a\nb"), (r'"\t\r"', "\t\r"), (r'"q\\"', "q\\"), (r'"\"x\""', '"x"'),
    (r'"it\'s"', "it's"), (r'"nul\0"', "nul\0"), (r'"\q"', "\\q"), ('""', ""),
])
def test_string_constants(literal, expected):
    assert value(literal) == expected


def test_sizeof_is_an_unsigned_long():
    assert typed("sizeof(int)") == (4, 64, True)
    assert typed("sizeof(int) - 5") == (2**64 - 1, 64, True)
    assert typed("(int)sizeof(long) - 9") == (-1, 32, False)


def test_names_come_from_the_table_then_the_resolver():
    assert value("A * 2", names={"A": Int(21)}) == Int(42, 32, False)
    assert value("A", names={"A": 1.5}) == 1.5
    asked = []

    def resolve(name):
        asked.append(name)
        if name == "B":
            return Int(7, 64, True)
        raise FoldError(f"no {name}")

    assert value("B - 8", resolve=resolve) == Int(2**64 - 1, 64, True)
    with pytest.raises(FoldError, match="no C"):
        value("C", resolve=resolve)
    assert asked == ["B", "C"]


def test_fold_int_wants_an_integer():
    folder, node = fold_node("3U * 5")
    assert folder.fold_int(node) == 15
    folder, node = fold_node("1.5")
    with pytest.raises(FoldError, match="not an integer: 1.5"):
        folder.fold_int(node)


@pytest.mark.parametrize("before, after", [
    (Int(2**31, 32, False), Int(-(2**31), 32, False)),
    (Int(2**31 - 1, 32, False), Int(2**31 - 1, 32, False)),
    (Int(-1, 32, True), Int(2**32 - 1, 32, True)),
    (Int(2**32, 32, True), Int(0, 32, True)),
    (Int(2**64, 64, True), Int(0, 64, True)),
    (Int(2**63, 64, False), Int(-(2**63), 64, False)),
    (Int(-(2**63) - 1, 64, False), Int(2**63 - 1, 64, False)),
    (Int(128, 8, False), Int(-128, 8, False)), (Int(-129, 8, False), Int(127, 8, False)),
])
def test_wrap_at_the_edges_of_each_width(before, after):
    assert before.wrap() == after
    assert Int(5).bits == 32 and Int(5).unsigned is False


def test_a_trailing_backslash_in_a_string_body_is_kept():
    from cupric.bindings_gen.fold import _unquote_string
    assert _unquote_string('"a\\"') == "a\\"
    assert _unquote_string('"\\n"') == "\n"
