"""Polynomials over GF(2), held as Python ints (bit i = coefficient of x^i).

The xoshiro family are linear maps T on GF(2)^n; everything about jumping rests on
arithmetic modulo their characteristic polynomial P: the state after d steps is p(T)s with
p = x^d mod P. This module holds that arithmetic and Berlekamp–Massey, nothing else.
"""

from __future__ import annotations

__all__ = ["degree", "mul", "square", "mod", "mulmod", "powmod_x", "x_pow2_mod",
           "gcd", "berlekamp_massey", "is_irreducible"]

# _SPREAD[b] spreads the 8 bits of b to the even bit positions of a 16-bit value:
# squaring over GF(2) maps sum c_i x^i to sum c_i x^(2i), so a byte table does it.
_SPREAD = []
for _b in range(256):
    _v = 0
    for _i in range(8):
        if _b >> _i & 1:
            _v |= 1 << (2 * _i)
    _SPREAD.append(_v)
del _b, _v, _i


def degree(a: int) -> int:
    """Degree of `a` (-1 for the zero polynomial)."""
    return a.bit_length() - 1


def mul(a: int, b: int) -> int:
    """Carry-less product a*b over GF(2)."""
    if a.bit_count() > b.bit_count():
        a, b = b, a
    result = 0
    while a:
        low = a & -a  # lowest set bit of a
        result ^= b << (low.bit_length() - 1)
        a ^= low
    return result


def square(a: int) -> int:
    """a*a over GF(2), by spreading each byte (no cross terms survive in characteristic 2)."""
    if a == 0:
        return 0
    data = a.to_bytes((a.bit_length() + 7) // 8, "little")
    spread = b"".join(_SPREAD[byte].to_bytes(2, "little") for byte in data)
    return int.from_bytes(spread, "little")


def mod(a: int, p: int) -> int:
    """Remainder of a modulo p (p nonzero)."""
    if p == 0:
        raise ZeroDivisionError("polynomial modulo the zero polynomial")
    dp = p.bit_length()
    while a.bit_length() >= dp:
        a ^= p << (a.bit_length() - dp)
    return a


def mulmod(a: int, b: int, p: int) -> int:
    """(a*b) mod p."""
    return mod(mul(a, b), p)


def x_pow2_mod(k: int, p: int) -> int:
    """x^(2^k) mod p, by k squarings of x."""
    r = mod(2, p)
    for _ in range(k):
        r = mod(square(r), p)
    return r


def powmod_x(e: int, p: int) -> int:
    """x^e mod p for any e >= 0 (left-to-right square and multiply-by-x)."""
    if e < 0:
        raise ValueError("exponent must be non-negative")
    r = mod(1, p)
    for bit in bin(e)[2:]:
        r = mod(square(r), p)
        if bit == "1":
            r = mod(r << 1, p)
    return r


def gcd(a: int, b: int) -> int:
    """Greatest common divisor over GF(2)."""
    while b:
        a, b = b, mod(a, b)
    return a


def berlekamp_massey(bits: list[int]) -> int:
    """Minimal polynomial of a binary sequence, as its characteristic polynomial.

    Returns the polynomial P(x) = x^L + c_1 x^(L-1) + ... + c_L such that
    s[i] = c_1 s[i-1] + ... + c_L s[i-L] for every i >= L; this is the convention in which
    P(T) = 0 for the linear map T that produced the sequence.

    Parameters
    ----------
    bits : list of int
        The sequence, each element 0 or 1; at least twice the expected degree long.
    """
    # c and b hold connection polynomials C(x) = 1 + c_1 x + ... (bit i = c_i); bit i-1
    # of `recent` is s[n-i], so the discrepancy is one AND and a parity.
    c, b = 1, 1
    length, shift = 0, 1
    recent = 0
    for n, s in enumerate(bits):
        d = (s ^ ((c >> 1) & recent).bit_count()) & 1
        recent = (recent << 1) | s
        if d == 0:
            shift += 1
        elif 2 * length <= n:
            t = c
            c ^= b << shift
            length = n + 1 - length
            b = t
            shift = 1
        else:
            c ^= b << shift
            shift += 1
    # Reverse C (degree <= L) into the characteristic polynomial x^L C(1/x).
    poly = 0
    for i in range(length + 1):
        if c >> i & 1:
            poly |= 1 << (length - i)
    return poly


def is_irreducible(p: int) -> bool:
    """Rabin's test, for polynomials whose degree n is a power of two.

    P of degree n is irreducible iff x^(2^n) = x (mod P) and gcd(x^(2^(n/q)) - x, P) = 1 for
    every prime q dividing n; for n = 2^m the only such prime is 2.

    Raises
    ------
    ValueError
        If the degree is not a power of two (the general test needs n's factors).
    """
    n = degree(p)
    if n < 1 or n & (n - 1):
        raise ValueError(f"degree {n} is not a power of two")
    if x_pow2_mod(n, p) != mod(2, p):
        return False
    if n == 1:
        return True
    return gcd(p, x_pow2_mod(n // 2, p) ^ 2) == 1
