"""The xoshiro/xoroshiro family as data: engine, scrambler, widths and jump constants.

Each generator is a linear engine (a GF(2)-linear map on 2, 4 or 8 words) followed by a
nonlinear scrambler that turns the state into one output word. `ALGORITHMS` describes all
fourteen of them as in the rand_xoshiro crate (0.7) and the authors' reference C code; the
host half (NumPy) and the device half (kernel code) both read these tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Algorithm", "ALGORITHMS", "get", "rotl", "engine_step", "scramble"]


@dataclass(frozen=True)
class Algorithm:
    """One generator of the family.

    Attributes
    ----------
    name : str
        Short name, e.g. ``"xoshiro256++"``.
    class_name : str
        The rand_xoshiro type name, e.g. ``"Xoshiro256PlusPlus"``.
    word_bits : int
        32 or 64: the width of a state word and of the native output.
    words : int
        State words (2, 4 or 8); the state has ``words * word_bits`` bits.
    engine : str
        ``"xoroshiro"`` (2 words), ``"xoshiro"`` (4 words) or ``"xoshiro8"`` (8 words).
    engine_params : tuple of int
        xoroshiro: rotation a, shift b, rotation c. xoshiro: shift, rotation.
    scrambler : str
        ``"+"``, ``"++"``, ``"*"`` or ``"**"``.
    scrambler_params : tuple of int
        ``"+"``: word indices (i, j) giving s[i] + s[j]. ``"++"``: (i, j, r) giving
        rotl(s[i] + s[j], r) + s[i]. ``"*"``: (i, m) giving s[i] * m. ``"**"``:
        (i, m1, r, m2) giving rotl(s[i] * m1, r) * m2.
    u32_from_u64 : str or None
        For 64-bit generators, how rand_xoshiro's ``next_u32`` takes 32 bits of
        ``next_u64``: ``"high"`` (upper half) or ``"low"`` (truncation). None for 32-bit
        generators, whose ``next_u64`` is ``lo | hi << 32`` from two ``next_u32`` calls.
    jump, long_jump : tuple of int or None
        The published jump polynomials (word i bit b = coefficient of x^(word_bits*i+b)).
    jump_log2, long_jump_log2 : int or None
        The jump distances as powers of two, in engine steps.
    """

    name: str
    class_name: str
    word_bits: int
    words: int
    engine: str
    engine_params: tuple
    scrambler: str
    scrambler_params: tuple
    u32_from_u64: str | None
    jump: tuple | None = None
    jump_log2: int | None = None
    long_jump: tuple | None = None
    long_jump_log2: int | None = None

    @property
    def state_bits(self) -> int:
        return self.word_bits * self.words

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint64 if self.word_bits == 64 else np.uint32)

    @property
    def seed_bytes(self) -> int:
        """Length of the byte seed `from_seed` takes (the state size)."""
        return self.state_bits // 8


_XORO128_JUMP = (0xDF900294D8F554A5, 0x170865DF4B3201FC)
_XORO128_LONG = (0xD2A98B26625EEE7B, 0xDDDF9B1090AA7AC1)
_XORO128PP_JUMP = (0x2BD7A6A6E99C2DDC, 0x0992CCAF6A6FCA05)
_XORO128PP_LONG = (0x360FD5F2CF8D5D99, 0x9C6E6877736C46E3)
_XO128_JUMP = (0x8764000B, 0xF542D2D3, 0x6FA035C3, 0x77F2DB5B)
_XO128_LONG = (0xB523952E, 0x0B6F099F, 0xCCF5A0EF, 0x1C580662)
_XO256_JUMP = (0x180EC6D33CFD0ABA, 0xD5A61266F0C9392C, 0xA9582618E03FC9AA, 0x39ABDC4529B1661C)
_XO256_LONG = (0x76E15D3EFEFDCBBF, 0xC5004E441C522FB3, 0x77710069854EE241, 0x39109BB02ACBE635)
_XO512_JUMP = (0x33ED89B6E7A353F9, 0x760083D7955323BE, 0x2837F2FBB5F22FAE, 0x4B8C5674D309511C,
               0xB11AC47A7BA28C25, 0xF1BE7667092BCC1C, 0x53851EFDB6DF0AAF, 0x1EBBC8B23EAF25DB)
_XO512_LONG = (0x11467FEF8F921D28, 0xA2A819F2E79C8EA8, 0xA8299FC284B3959A, 0xB4D347340CA63EE1,
               0x1CB0940BEDBFF6CE, 0xD956C5C4FA1F8E17, 0x915E38FD4EDA93BC, 0x5B3CCDFA5D7DACA5)

_PHI32 = 0x9E3779BB  # the multiplier of xoroshiro64* and xoroshiro64**

_LIST = [
    Algorithm("xoroshiro128+", "Xoroshiro128Plus", 64, 2, "xoroshiro", (24, 16, 37),
              "+", (0, 1), "high", _XORO128_JUMP, 64, _XORO128_LONG, 96),
    Algorithm("xoroshiro128++", "Xoroshiro128PlusPlus", 64, 2, "xoroshiro", (49, 21, 28),
              "++", (0, 1, 17), "low", _XORO128PP_JUMP, 64, _XORO128PP_LONG, 96),
    Algorithm("xoroshiro128**", "Xoroshiro128StarStar", 64, 2, "xoroshiro", (24, 16, 37),
              "**", (0, 5, 7, 9), "low", _XORO128_JUMP, 64, _XORO128_LONG, 96),
    Algorithm("xoroshiro64*", "Xoroshiro64Star", 32, 2, "xoroshiro", (26, 9, 13),
              "*", (0, _PHI32), None),
    Algorithm("xoroshiro64**", "Xoroshiro64StarStar", 32, 2, "xoroshiro", (26, 9, 13),
              "**", (0, _PHI32, 5, 5), None),
    Algorithm("xoshiro128+", "Xoshiro128Plus", 32, 4, "xoshiro", (9, 11),
              "+", (0, 3), None, _XO128_JUMP, 64, _XO128_LONG, 96),
    Algorithm("xoshiro128++", "Xoshiro128PlusPlus", 32, 4, "xoshiro", (9, 11),
              "++", (0, 3, 7), None, _XO128_JUMP, 64, _XO128_LONG, 96),
    Algorithm("xoshiro128**", "Xoshiro128StarStar", 32, 4, "xoshiro", (9, 11),
              "**", (1, 5, 7, 9), None, _XO128_JUMP, 64, _XO128_LONG, 96),
    Algorithm("xoshiro256+", "Xoshiro256Plus", 64, 4, "xoshiro", (17, 45),
              "+", (0, 3), "high", _XO256_JUMP, 128, _XO256_LONG, 192),
    Algorithm("xoshiro256++", "Xoshiro256PlusPlus", 64, 4, "xoshiro", (17, 45),
              "++", (0, 3, 23), "high", _XO256_JUMP, 128, _XO256_LONG, 192),
    Algorithm("xoshiro256**", "Xoshiro256StarStar", 64, 4, "xoshiro", (17, 45),
              "**", (1, 5, 7, 9), "high", _XO256_JUMP, 128, _XO256_LONG, 192),
    Algorithm("xoshiro512+", "Xoshiro512Plus", 64, 8, "xoshiro8", (11, 21),
              "+", (0, 2), "high", _XO512_JUMP, 256, _XO512_LONG, 384),
    Algorithm("xoshiro512++", "Xoshiro512PlusPlus", 64, 8, "xoshiro8", (11, 21),
              "++", (2, 0, 17), "high", _XO512_JUMP, 256, _XO512_LONG, 384),
    Algorithm("xoshiro512**", "Xoshiro512StarStar", 64, 8, "xoshiro8", (11, 21),
              "**", (1, 5, 7, 9), "high", _XO512_JUMP, 256, _XO512_LONG, 384),
]

ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in _LIST}
_BY_CLASS = {a.class_name.lower(): a for a in _LIST}


def get(name: str | Algorithm) -> Algorithm:
    """The `Algorithm` called `name` (``"xoshiro256++"`` or ``"Xoshiro256PlusPlus"``).

    Raises
    ------
    KeyError
        If no generator has that name; the message lists the known ones.
    """
    if isinstance(name, Algorithm):
        return name
    found = ALGORITHMS.get(name.lower()) or _BY_CLASS.get(name.lower())
    if found is None:
        raise KeyError(f"unknown generator {name!r}; known: {', '.join(ALGORITHMS)}")
    return found


# ---- vectorized host arithmetic ------------------------------------------------------
# States are arrays of shape (words, n): row w holds word w of every state, so each step
# is a handful of whole-row NumPy operations. Unsigned array arithmetic wraps silently.

def rotl(x: np.ndarray, k: int, bits: int) -> np.ndarray:
    """Rotate each element of an unsigned array left by k (0 < k < bits)."""
    return (x << x.dtype.type(k)) | (x >> x.dtype.type(bits - k))


def engine_step(alg: Algorithm, s: np.ndarray) -> None:
    """Advance every state in `s` (shape (words, n)) by one step of the linear engine, in place."""
    bits = alg.word_bits
    t = s.dtype.type
    if alg.engine == "xoroshiro":
        a, b, c = alg.engine_params
        s0 = s[0].copy()
        s1 = s[1] ^ s0
        s[0] = rotl(s0, a, bits) ^ s1 ^ (s1 << t(b))
        s[1] = rotl(s1, c, bits)
    elif alg.engine == "xoshiro":
        shift, rot = alg.engine_params
        tmp = s[1] << t(shift)
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= tmp
        s[3] = rotl(s[3], rot, bits)
    elif alg.engine == "xoshiro8":
        shift, rot = alg.engine_params
        tmp = s[1] << t(shift)
        s[2] ^= s[0]
        s[5] ^= s[1]
        s[1] ^= s[2]
        s[7] ^= s[3]
        s[3] ^= s[4]
        s[4] ^= s[5]
        s[0] ^= s[6]
        s[6] ^= s[7]
        s[6] ^= tmp
        s[7] = rotl(s[7], rot, bits)
    else:
        raise ValueError(f"unknown engine {alg.engine!r}")


def scramble(alg: Algorithm, s: np.ndarray) -> np.ndarray:
    """The output word of every state in `s`, computed before the engine step."""
    bits = alg.word_bits
    t = s.dtype.type
    p = alg.scrambler_params
    if alg.scrambler == "+":
        return s[p[0]] + s[p[1]]
    if alg.scrambler == "++":
        i, j, r = p
        return rotl(s[i] + s[j], r, bits) + s[i]
    if alg.scrambler == "*":
        return s[p[0]] * t(p[1])
    if alg.scrambler == "**":
        i, m1, r, m2 = p
        return rotl(s[i] * t(m1), r, bits) * t(m2)
    raise ValueError(f"unknown scrambler {alg.scrambler!r}")
