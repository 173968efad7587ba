"""The host half: every xoshiro/xoroshiro generator, vectorized over many states in NumPy.

A `BitGenerator` holds n states as one array of shape (words, n) (word-major, the layout
the device half reads and writes too), and each call advances all n generators by one
output. Outputs match rand_xoshiro's `next_u64`/`next_u32` bit for bit.
"""

from __future__ import annotations

import numpy as np

from . import algorithms as _alg
from .splitmix import seed_words, state_from_seed_bytes

__all__ = ["BitGenerator", "apply_polynomial", "draw_u32", "draw_u64", "GENERATORS"]


def _poly_from_words(words, word_bits: int) -> int:
    return sum(int(w) << (word_bits * i) for i, w in enumerate(words))


def apply_polynomial(alg: _alg.Algorithm, state: np.ndarray, poly: int) -> np.ndarray:
    """p(T) applied to every state: the state `d` steps ahead when p = x^d mod P.

    This is how the crate's `jump` works, generalized to any polynomial: walk the
    coefficients from x^0 upward, XOR the current state into an accumulator where the
    coefficient is 1, and step the engine after each coefficient.

    Parameters
    ----------
    alg : Algorithm
    state : numpy.ndarray
        Shape (words, n); not modified.
    poly : int
        The polynomial, bit i = coefficient of x^i (degree below the state size).

    Returns
    -------
    numpy.ndarray
        The new states, shape (words, n).

    Cost
    ----
    ``poly.bit_length()`` engine steps over all n states.
    """
    cur = np.array(state, dtype=alg.dtype, copy=True)
    acc = np.zeros_like(cur)
    for i in range(poly.bit_length()):
        if poly >> i & 1:
            acc ^= cur
        _alg.engine_step(alg, cur)
    return acc


def _draw_native(alg: _alg.Algorithm, state: np.ndarray) -> np.ndarray:
    out = _alg.scramble(alg, state)
    _alg.engine_step(alg, state)
    return out


def draw_u64(alg: _alg.Algorithm, state: np.ndarray) -> np.ndarray:
    """rand_xoshiro's ``next_u64`` for every state of `state` (shape (words, n)), in place.

    64-bit generators return their native output; 32-bit ones combine two native outputs
    as ``lo | hi << 32`` (the first call gives the low half). `state` may be a view: only
    the generators it covers advance.
    """
    if alg.word_bits == 64:
        return _draw_native(alg, state)
    lo = _draw_native(alg, state).astype(np.uint64)
    hi = _draw_native(alg, state).astype(np.uint64)
    return lo | (hi << np.uint64(32))


def draw_u32(alg: _alg.Algorithm, state: np.ndarray) -> np.ndarray:
    """rand_xoshiro's ``next_u32`` for every state of `state`, in place.

    32-bit generators return their native output; 64-bit ones take the upper or lower half
    of their output (``alg.u32_from_u64`` says which, following the crate).
    """
    if alg.word_bits == 32:
        return _draw_native(alg, state)
    x = _draw_native(alg, state)
    if alg.u32_from_u64 == "high":
        x = x >> np.uint64(32)
    return x.astype(np.uint32)


class BitGenerator:
    """n independent generators of one algorithm, advanced together.

    Construct with `seed_from_u64`, `from_seed` or `from_state`; the class of each
    algorithm is also exported under its rand_xoshiro name (`Xoshiro256PlusPlus`, ...).

    Parameters
    ----------
    algorithm : str or Algorithm
        ``"xoshiro256++"``, ``"Xoshiro256PlusPlus"``, ...
    state : array_like
        Shape (words, n) or (words,) for one generator; copied. Must not be all zero.

    Examples
    --------
    >>> g = BitGenerator.seed_from_u64("xoshiro256++", 0)
    >>> int(g.next_u64()[0])
    5987356902031041503
    """

    algorithm: _alg.Algorithm

    def __init__(self, algorithm, state) -> None:
        self.algorithm = _alg.get(algorithm)
        arr = np.array(state, dtype=self.algorithm.dtype, copy=True)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[0] != self.algorithm.words:
            raise ValueError(f"{self.algorithm.class_name} state must have shape "
                             f"({self.algorithm.words}, n), got {arr.shape}")
        if not arr.any(axis=0).all():
            raise ValueError("an all-zero state never leaves zero; seed it instead")
        self.state = np.ascontiguousarray(arr)

    # ---- construction ----
    @classmethod
    def seed_from_u64(cls, algorithm, seed) -> "BitGenerator":
        """Seeded as rand_xoshiro's ``seed_from_u64``: SplitMix64 output bytes as the seed.

        Parameters
        ----------
        seed : int or array_like of int
            One seed, or one per generator (taken modulo 2^64).
        """
        alg = _alg.get(algorithm)
        return cls(alg, seed_words(alg, seed))

    @classmethod
    def from_seed(cls, algorithm, seed) -> "BitGenerator":
        """Seeded as rand_xoshiro's ``from_seed``: the bytes are the state, little-endian.

        Parameters
        ----------
        seed : bytes or array_like of uint8
            ``seed_bytes`` bytes, or shape (n, seed_bytes) for n generators. An all-zero
            seed becomes ``seed_from_u64(0)``, as in the crate.
        """
        alg = _alg.get(algorithm)
        if isinstance(seed, (bytes, bytearray, memoryview)):
            arr = np.frombuffer(bytes(seed), dtype=np.uint8)[None, :]
        else:
            arr = np.asarray(seed, dtype=np.uint8)
            if arr.ndim == 1:
                arr = arr[None, :]
        return cls(alg, state_from_seed_bytes(alg, arr))

    @classmethod
    def from_state(cls, algorithm, state) -> "BitGenerator":
        """From raw state words (shape (words, n)), e.g. a copy of a device state array."""
        return cls(algorithm, state)

    def copy(self) -> "BitGenerator":
        return type(self)(self.algorithm, self.state)

    def __len__(self) -> int:
        return self.state.shape[1]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, BitGenerator) and other.algorithm == self.algorithm
                and np.array_equal(other.state, self.state))

    __hash__ = None

    def __repr__(self) -> str:
        return f"<{self.algorithm.class_name} x{len(self)}>"

    def __getitem__(self, index) -> "BitGenerator":
        """The generators selected by `index` (an int, slice or index array), copied."""
        sel = self.state[:, index]
        return type(self)(self.algorithm, sel if sel.ndim == 2 else sel[:, None])

    # ---- output ----
    def next_u64(self, size: int | None = None) -> np.ndarray:
        """The next 64-bit output of every generator (see `draw_u64`).

        Parameters
        ----------
        size : int, optional
            Return that many successive outputs, shape (size, n); else shape (n,).
        """
        if size is None:
            return draw_u64(self.algorithm, self.state)
        out = np.empty((size, len(self)), np.uint64)
        for k in range(size):
            out[k] = draw_u64(self.algorithm, self.state)
        return out

    def next_u32(self, size: int | None = None) -> np.ndarray:
        """The next 32-bit output of every generator (see `draw_u32`)."""
        if size is None:
            return draw_u32(self.algorithm, self.state)
        out = np.empty((size, len(self)), np.uint32)
        for k in range(size):
            out[k] = draw_u32(self.algorithm, self.state)
        return out

    # ---- jumps ----
    def _jump_with(self, words, what: str) -> None:
        if words is None:
            raise NotImplementedError(
                f"{self.algorithm.class_name} has no {what}: neither rand_xoshiro nor the "
                f"reference code defines one; use cupric.gpu_rand.streams.jump_polynomial "
                f"to make one of any length")
        self.state = apply_polynomial(self.algorithm, self.state,
                                      _poly_from_words(words, self.algorithm.word_bits))

    def jump(self) -> None:
        """Advance every generator by 2^(state_bits/2) steps (the crate's ``jump``), in place."""
        self._jump_with(self.algorithm.jump, "jump")

    def long_jump(self) -> None:
        """Advance every generator by 2^(3*state_bits/4) steps (``long_jump``), in place."""
        self._jump_with(self.algorithm.long_jump, "long_jump")

    def advance(self, poly: int) -> None:
        """Apply a jump polynomial (see `cupric.gpu_rand.streams`) to every generator."""
        self.state = apply_polynomial(self.algorithm, self.state, poly)


def _make_class(alg: _alg.Algorithm) -> type:
    """A subclass fixing the algorithm, so `Xoshiro256PlusPlus.seed_from_u64(0)` reads as in Rust."""

    def __init__(self, state, algorithm=None):
        if algorithm is not None and _alg.get(algorithm) != alg:
            raise ValueError(f"{alg.class_name} cannot hold {algorithm!r} states")
        BitGenerator.__init__(self, alg, state)

    def seed_from_u64(cls, seed):
        return cls(seed_words(alg, seed))

    def from_seed(cls, seed):
        return cls(BitGenerator.from_seed(alg, seed).state)

    def from_state(cls, state):
        return cls(state)

    def copy(self):
        return type(self)(self.state)

    def getitem(self, index):
        sel = self.state[:, index]
        return type(self)(sel if sel.ndim == 2 else sel[:, None])

    namespace = {
        "__init__": __init__,
        "__doc__": f"{alg.name}: {alg.words} x {alg.word_bits}-bit state, vectorized "
                   f"(see `BitGenerator`).",
        "seed_from_u64": classmethod(seed_from_u64),
        "from_seed": classmethod(from_seed),
        "from_state": classmethod(from_state),
        "copy": copy,
        "__getitem__": getitem,
        "__module__": __name__,
    }
    return type(alg.class_name, (BitGenerator,), namespace)


GENERATORS: dict[str, type] = {a.name: _make_class(a) for a in _alg.ALGORITHMS.values()}
globals().update({cls.__name__: cls for cls in GENERATORS.values()})
__all__ += [cls.__name__ for cls in GENERATORS.values()]
