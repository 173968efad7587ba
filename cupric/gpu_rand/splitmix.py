"""SplitMix64, and seeding the xoshiro family from a 64-bit seed the way rand_xoshiro does.

SplitMix64 adds a Weyl constant to a 64-bit counter and hashes it. rand_xoshiro's
`seed_from_u64(seed)` fills the generator's byte seed with SplitMix64(seed)'s `next_u64`
outputs in little-endian order and calls `from_seed` on it; an all-zero seed maps to
`seed_from_u64(0)`. Everything here is vectorized over many seeds at once.
"""

from __future__ import annotations

import numpy as np

from . import algorithms as _alg

__all__ = ["SplitMix64", "splitmix64_mix", "seed_words", "state_from_seed_bytes"]

PHI = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
# next_u32 uses a different finalizer (Stafford's "Mix4" variant, as in dsiutils).
_M3, _M4 = 0x62A9D9ED799705F5, 0xCB24D0A5C88C35B3

_U64 = np.uint64


def splitmix64_mix(z: np.ndarray) -> np.ndarray:
    """The SplitMix64 output function (a bijection of uint64) applied elementwise."""
    z = np.asarray(z, dtype=_U64)
    z = (z ^ (z >> _U64(30))) * _U64(_M1)
    z = (z ^ (z >> _U64(27))) * _U64(_M2)
    return z ^ (z >> _U64(31))


def _as_u64_array(seed) -> np.ndarray:
    """Seeds as a 1-D uint64 array; Python ints are taken modulo 2^64 (negatives wrap)."""
    if isinstance(seed, (int, np.integer)):
        return np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=_U64)
    arr = np.asarray(seed)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"seeds must be integers, got dtype {arr.dtype}")
    return arr.astype(_U64).reshape(-1)


class SplitMix64:
    """Vectorized SplitMix64: `n` independent 64-bit counters.

    Parameters
    ----------
    state : int or array_like of int
        Initial counters (the seed, as rand_xoshiro's ``SplitMix64::seed_from_u64``).

    Examples
    --------
    >>> SplitMix64(1477776061723855037).next_u64()[0]
    np.uint64(1985237415132408290)
    """

    def __init__(self, state) -> None:
        self.state = _as_u64_array(state).copy()

    def __len__(self) -> int:
        return self.state.shape[0]

    def next_u64(self) -> np.ndarray:
        """Advance every counter and return one 64-bit output per generator."""
        self.state += _U64(PHI)
        return splitmix64_mix(self.state)

    def next_u32(self) -> np.ndarray:
        """Advance every counter and return one 32-bit output (the Mix4 finalizer's top half)."""
        self.state += _U64(PHI)
        z = self.state
        z = (z ^ (z >> _U64(33))) * _U64(_M3)
        z = (z ^ (z >> _U64(28))) * _U64(_M4)
        return (z >> _U64(32)).astype(np.uint32)


def state_from_seed_bytes(alg: _alg.Algorithm, seed_bytes: np.ndarray) -> np.ndarray:
    """States (shape (words, n)) from byte seeds (shape (n, seed_bytes)), little-endian.

    Rows that are all zero are replaced by `seed_from_u64(0)`'s state, as the crate does.
    """
    seed_bytes = np.ascontiguousarray(seed_bytes, dtype=np.uint8)
    if seed_bytes.ndim != 2 or seed_bytes.shape[1] != alg.seed_bytes:
        raise ValueError(f"{alg.class_name} takes {alg.seed_bytes}-byte seeds, "
                         f"got an array of shape {seed_bytes.shape}")
    words = seed_bytes.view(alg.dtype.newbyteorder("<")).astype(alg.dtype)
    state = np.ascontiguousarray(words.T)
    zero = ~state.any(axis=0)
    if zero.any():
        state[:, zero] = seed_words(alg, 0)[:, :1]
    return state


def seed_words(alg: _alg.Algorithm, seed) -> np.ndarray:
    """The states `seed_from_u64(seed)` gives, for one seed or an array of seeds.

    Returns
    -------
    numpy.ndarray
        Shape (words, n), dtype uint32 or uint64 as the generator's words.
    """
    sm = SplitMix64(seed)
    n64 = alg.seed_bytes // 8  # how many SplitMix64 outputs fill the byte seed
    outputs = np.stack([sm.next_u64() for _ in range(n64)], axis=1)  # (n, n64)
    seed_bytes = outputs.astype("<u8").view(np.uint8).reshape(len(sm), alg.seed_bytes)
    return state_from_seed_bytes(alg, seed_bytes)
