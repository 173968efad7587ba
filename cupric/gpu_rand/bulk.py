"""Bulk fills as library calls: `uniform(out)`, `normal(out)`, ... on any array.

Each call fills `out` in place through a `Generator`: the one passed as `rng`, or a
process-wide default seeded from the operating system. NumPy arrays are filled by the host
half, device arrays (`DeviceBuffer`, CUDA Array Interface, DLPack) by the device kernels.
"""

from __future__ import annotations

import threading

import numpy as np

from .generator import Generator

__all__ = ["uniform", "normal", "exponential", "integers", "random_bits", "default_generator"]

_default: Generator | None = None
_default_lock = threading.Lock()


def default_generator() -> Generator:
    """The Generator the fills use when given no `rng` (created on first use).

    Thread safety
    -------------
    Creation is locked; draws from several threads at once interleave unpredictably, so
    pass each thread its own Generator (`Generator.spawn`) for reproducible results.
    """
    global _default
    made = _default
    if made is not None:  # made once, never replaced: no lock on every fill
        return made
    with _default_lock:
        if _default is None:
            _default = Generator()
        return _default


def _rng(rng: Generator | None) -> Generator:
    return default_generator() if rng is None else rng


def uniform(out, low: float = 0.0, high: float = 1.0, *, rng: Generator | None = None,
            backend=None):
    """Fill float32/float64 `out` with uniform values in [low, high); return `out`.

    Examples
    --------
    >>> import numpy as np
    >>> x = uniform(np.empty(4, np.float32), rng=Generator(1, streams=2))
    >>> bool(((0 <= x) & (x < 1)).all())
    True
    """
    return _rng(rng).uniform(low, high, out=out, backend=backend)


def normal(out, loc: float = 0.0, scale: float = 1.0, *, rng: Generator | None = None,
           backend=None):
    """Fill float32/float64 `out` with normal values (Box–Muller); return `out`."""
    return _rng(rng).normal(loc, scale, out=out, backend=backend)


def exponential(out, scale: float = 1.0, *, rng: Generator | None = None, backend=None):
    """Fill float32/float64 `out` with exponential values of mean `scale`; return `out`."""
    return _rng(rng).exponential(scale, out=out, backend=backend)


def integers(out, low: int, high: int, *, endpoint: bool = False,
             rng: Generator | None = None, backend=None):
    """Fill integer `out` with uniform integers in [low, high) without modulo bias."""
    return _rng(rng).integers(low, high, out=out, endpoint=endpoint, backend=backend)


def random_bits(out, *, rng: Generator | None = None, backend=None):
    """Fill uint32/uint64 `out` with raw ``next_u32``/``next_u64`` outputs."""
    dt = np.dtype(out.dtype)
    if dt not in (np.dtype(np.uint32), np.dtype(np.uint64)):
        raise TypeError(f"out must be uint32 or uint64, got {dt}")
    return _rng(rng).bits(out=out, backend=backend)
