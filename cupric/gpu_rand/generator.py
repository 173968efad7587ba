"""`Generator`: a numpy.random.Generator-like front end over many parallel streams.

A Generator owns S streams of one xoshiro-family algorithm (stream i starts i jumps after
the seed's state) and fills every output in the round order of `distributions`, so a
device fill with the same seed, algorithm and stream count yields the same values.
"""

from __future__ import annotations

import operator
import secrets

import numpy as np

from . import algorithms as _alg
from . import distributions as _dist
from .host import BitGenerator
from .splitmix import seed_words
from .streams import max_streams, stream_log2, stream_states

__all__ = ["Generator", "default_rng", "DEFAULT_ALGORITHM", "DEFAULT_STREAMS"]

# 32-bit words are the GPU's native width and four of them sit in four registers, so
# xoshiro128++ is the fastest generator there with a published jump; see docs/gpu_rand.md.
DEFAULT_ALGORITHM = "xoshiro128++"
# Enough threads to keep an H100/H200 busy in a fill, few enough that the host builds
# every stream start in a fraction of a second.
DEFAULT_STREAMS = 1 << 16

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _shape(size) -> tuple[int, ...] | None:
    if size is None:
        return None
    if isinstance(size, (int, np.integer)):
        size = (int(size),)
    shape = tuple(operator.index(n) for n in size)
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return shape


def _float_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in _FLOATS:
        raise TypeError(f"dtype must be float32 or float64, got {dt}")
    return dt


class Generator:
    """Random numbers from S parallel xoshiro streams, with numpy.random.Generator's methods.

    Parameters
    ----------
    seed : int, optional
        64-bit seed, expanded by SplitMix64 exactly as rand_xoshiro's ``seed_from_u64``.
        None draws one from the operating system (`secrets`).
    algorithm : str, optional
        Any name in `cupric.gpu_rand.ALGORITHMS`; default ``"xoshiro128++"``.
    streams : int, optional
        Number of streams S (GPU threads of a device fill); default 65536. The values a
        call returns depend on S, so keep it fixed to reproduce results.

    Notes
    -----
    Stream i starts at the seed's state advanced by i * 2^j steps, where 2^j is the
    generator's ``jump`` distance (2^64 for xoshiro128++), so streams never overlap; see
    docs/gpu_rand.md. A call of size M hands element k*S + t to stream t; a scalar call
    draws from stream 0 alone.

    Examples
    --------
    >>> rng = Generator(42, streams=4)
    >>> rng.random(3).shape
    (3,)
    """

    def __init__(self, seed: int | None = None, *, algorithm: str = DEFAULT_ALGORITHM,
                 streams: int = DEFAULT_STREAMS) -> None:
        self._alg = _alg.get(algorithm)
        if seed is None:
            seed = secrets.randbits(64)
        self._seed = operator.index(seed) & 0xFFFFFFFFFFFFFFFF
        streams = operator.index(streams)
        if not 1 <= streams <= max_streams(self._alg):
            raise ValueError(f"streams must be in 1..{max_streams(self._alg)}, got {streams}")
        self._streams = streams
        self._base = seed_words(self._alg, self._seed)[:, 0]
        self._state: np.ndarray | None = None  # built on first use: (words, streams)

    @classmethod
    def _from_base(cls, alg, seed: int, base: np.ndarray, streams: int) -> "Generator":
        g = cls.__new__(cls)
        g._alg, g._seed, g._streams = alg, seed, streams
        g._base = np.array(base, dtype=alg.dtype)
        g._state = None
        return g

    # ---- state ----
    @property
    def algorithm(self) -> str:
        return self._alg.name

    @property
    def streams(self) -> int:
        return self._streams

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def stream_states(self) -> np.ndarray:
        """The current states of all streams, shape (words, streams) (built on first use).

        Cost
        ----
        The first access runs `cupric.gpu_rand.streams.stream_states` (about S * state_bits
        engine steps of NumPy work).
        """
        if self._state is None:
            self._state = stream_states(self._alg, self._base, self._streams)
        return self._state

    @property
    def bit_generator(self) -> BitGenerator:
        """A copy of the streams as a `BitGenerator` (advancing it leaves this one alone)."""
        return BitGenerator(self._alg, self.stream_states)

    def __repr__(self) -> str:
        return f"Generator({self._alg.name}, seed={self._seed}, streams={self._streams})"

    def jumped(self, jumps: int = 1) -> "Generator":
        """A new Generator whose stream 0 starts `jumps` long jumps after this one's.

        A long jump (2^96 steps for xoshiro128++) spans more than all the streams of this
        Generator, so the two never share a state while S * jump <= long jump.

        Raises
        ------
        NotImplementedError
            For the xoroshiro64 pair, which have no published long jump.
        ValueError
            If this Generator's streams are longer than one long jump.
        """
        alg = self._alg
        if alg.long_jump is None:
            raise NotImplementedError(f"{alg.class_name} has no long_jump to separate Generators")
        if self._streams << stream_log2(alg) > 1 << alg.long_jump_log2:
            raise ValueError("the streams of this Generator span more than one long jump")
        bits = BitGenerator(alg, self._base)
        for _ in range(operator.index(jumps)):
            bits.long_jump()
        return Generator._from_base(alg, self._seed, bits.state[:, 0], self._streams)

    def spawn(self, n_children: int) -> list["Generator"]:
        """`n_children` independent Generators: ``jumped(1)`` ... ``jumped(n_children)``."""
        return [self.jumped(i + 1) for i in range(n_children)]

    # ---- draws ----
    def _run(self, fill, shape, dtype, out, *extra):
        if out is not None:
            if shape is not None and tuple(out.shape) != shape:
                raise ValueError(f"size {shape} does not match out.shape {out.shape}")
            if not isinstance(out, np.ndarray):
                raise TypeError("out must be a NumPy array: device fills need the compiled "
                                "device half (cupric.gpu_rand.device), not yet wired here")
            fill(self._alg, self.stream_states, out, *extra)
            return out
        result = np.empty(shape if shape is not None else (1,), dtype=dtype)
        fill(self._alg, self.stream_states, result, *extra)
        return result if shape is not None else result[0]

    def random(self, size=None, dtype=np.float64, out=None):
        """Uniform floats in [0, 1): top 24 (float32) or 53 (float64) bits times 2^-bits.

        Parameters
        ----------
        size : int or tuple of int, optional
        dtype : {float64, float32}
        out : numpy.ndarray, optional
            Filled in place (C-contiguous), and returned.
        """
        dt = _float_dtype(out.dtype if out is not None else dtype)
        return self._run(_dist.fill_uniform, _shape(size), dt, out)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        """Uniform floats in [low, high): ``low + (high - low) * random()`` in `dtype`."""
        dt = _float_dtype(dtype)
        u = self.random(size, dt)
        return (dt.type(low) + (dt.type(high) - dt.type(low)) * u).astype(dt, copy=False)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        """Uniform integers in [low, high) ([low, high] with endpoint), free of modulo bias.

        Lemire's multiply-and-reject method: one ``next_u32`` per try for spans up to
        2^32, one ``next_u64`` beyond (see `distributions.fill_integers`).

        Raises
        ------
        ValueError
            If the range is empty or does not fit `dtype`.
        """
        if high is None:
            low, high = 0, low
        low, high = operator.index(low), operator.index(high)
        if endpoint:
            high += 1
        dt = np.dtype(dtype)
        if dt.kind not in "iu" or dt.itemsize > 8:
            raise TypeError(f"dtype must be an integer type of at most 64 bits, got {dt}")
        info = np.iinfo(dt)
        if high <= low:
            raise ValueError(f"empty range: low={low} >= high={high}")
        if low < info.min or high - 1 > info.max:
            raise ValueError(f"[{low}, {high}) does not fit {dt}")
        return self._run(_dist.fill_integers, _shape(size), dt, None, low, high - low)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        """Standard normal variates (Box–Muller, both values of each pair used)."""
        dt = _float_dtype(out.dtype if out is not None else dtype)
        return self._run(_dist.fill_normal, _shape(size), dt, out)

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
        """Normal variates with mean `loc` and standard deviation `scale` (scalars)."""
        if scale < 0:
            raise ValueError(f"scale must be non-negative, got {scale}")
        dt = _float_dtype(dtype)
        z = self.standard_normal(size, dt)
        return (dt.type(loc) + dt.type(scale) * z).astype(dt, copy=False)

    def standard_exponential(self, size=None, dtype=np.float64, out=None):
        """Standard exponential variates by inversion, -ln(1 - U)."""
        dt = _float_dtype(out.dtype if out is not None else dtype)
        return self._run(_dist.fill_exponential, _shape(size), dt, out)

    def exponential(self, scale=1.0, size=None, dtype=np.float64):
        """Exponential variates with mean `scale`."""
        if scale < 0:
            raise ValueError(f"scale must be non-negative, got {scale}")
        dt = _float_dtype(dtype)
        e = self.standard_exponential(size, dt)
        return (dt.type(scale) * e).astype(dt, copy=False)

    def bits(self, size=None, dtype=np.uint64, out=None):
        """Raw generator output: ``next_u32`` (uint32) or ``next_u64`` (uint64) per element."""
        dt = np.dtype(out.dtype if out is not None else dtype)
        if dt not in (np.dtype(np.uint32), np.dtype(np.uint64)):
            raise TypeError(f"dtype must be uint32 or uint64, got {dt}")
        return self._run(_dist.fill_bits, _shape(size), dt, out)


def default_rng(seed: int | None = None, *, algorithm: str = DEFAULT_ALGORITHM,
                streams: int = DEFAULT_STREAMS) -> Generator:
    """A new `Generator` (named after numpy.random.default_rng)."""
    return Generator(seed, algorithm=algorithm, streams=streams)
