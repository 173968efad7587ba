"""`Generator`: a numpy.random.Generator-like front end over many parallel streams.

A Generator owns S streams of one xoshiro-family algorithm (stream i starts i jumps after
the seed's state) and fills every output in the round order of `distributions`. NumPy
outputs are filled by the host half, device arrays by the device half's kernels, and the
stream states live wherever the last fill ran, so the values never depend on where.
"""

from __future__ import annotations

import operator
import secrets

import numpy as np

from . import algorithms as _alg
from . import distributions as _dist
from . import plans as _plans
from .backends import CudaBackend, backend_for
from .host import BitGenerator
from .splitmix import seed_words
from .streams import jump_polynomial, jump_table, max_streams, stream_log2, stream_states

#: Up to this many long jumps are applied one by one (the published jump, bit for bit);
#: more go through one jump polynomial.
_LOOPED_JUMPS = 16

__all__ = ["Generator", "default_rng", "DEFAULT_ALGORITHM", "DEFAULT_STREAMS"]

# 32-bit words are the GPU's native width and four of them sit in four registers, so
# xoshiro128++ is the fastest generator there with a published jump; see docs/gpu_rand.md.
DEFAULT_ALGORITHM = "xoshiro128++"
# Enough threads to keep an H100/H200 busy in a fill, few enough that the host builds
# every stream start in a fraction of a second.
DEFAULT_STREAMS = 1 << 16
# Digits of the device initializer's jump tables: 2^16 streams take two levels, each
# thread at most two polynomial applications; the tables are 2 x 256 states.
DIGIT_BITS = 8

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: Distribution parameters a fill plan converts itself (anything else, an array say,
#: goes the general way and meets its checks).
_PARAMETERS = frozenset({float, int, np.float32, np.float64})


def _shape(size) -> tuple[int, ...] | None:
    if size is None:
        return None
    if isinstance(size, (int, np.integer)):
        size = (int(size),)
    shape = tuple(operator.index(n) for n in size)
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return shape


def _dtype_of(out, dtype) -> np.dtype:
    """The element type to draw: `dtype` without `out`, else `out`'s own, as the intake
    layer reads it for every array kind (PyTorch's ``torch.float32`` is no NumPy dtype;
    bfloat16 reads as ``V2`` and is refused by the callers' checks)."""
    if out is None:
        return np.dtype(dtype)
    if isinstance(out, np.ndarray):
        return out.dtype
    from cupric.runtime.intake import array_parts  # the device half: any device array

    return array_parts(out, with_device=False)[3]


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
    docs/gpu_rand.md. A call of size M hands stream t the groups of four neighbouring
    elements 4*(k*S + t) .. 4*(k*S + t) + 3, k = 0, 1, ... (one 16-byte store per group on
    the GPU); a scalar call
    draws from stream 0 alone.

    Thread safety
    -------------
    A Generator is not locked: give each host thread its own (`spawn`). Device fills are
    ordered on the backend's stream like any other launch.

    Cost
    ----
    A fill of a device array (``out=``) of a class and dtype this Generator filled before,
    by the same backend, takes that fill's plan (`cupric.gpu_rand.plans`): a few attribute
    reads and one compiled launch. The first such fill, and any the plan does not take,
    read `out` through the intake layer and launch through the general path.

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
        seed = operator.index(seed)
        if not 0 <= seed < 1 << 64:
            # Masking would make 2^64 + 5 the same generator as 5, and -1 as 2^64 - 1.
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        self._seed = seed
        streams = operator.index(streams)
        if not 1 <= streams <= max_streams(self._alg):
            raise ValueError(f"streams must be in 1..{max_streams(self._alg)}, got {streams}")
        self._streams = streams
        self._base = seed_words(self._alg, self._seed)[:, 0]
        self._reset_state()

    def _reset_state(self) -> None:
        # The stream states, (words, streams), live in one place at a time: nowhere yet
        # (built on first use), on the host (`_state`) or on a backend (`_device_state`).
        self._where = "none"
        self._state: np.ndarray | None = None
        self._device_state = None
        self._backend = None
        self._init_inputs: tuple = ()
        # (distribution, array class, array dtype) -> FillPlan (or None: never planned)
        # for fills on the device states of now; emptied whenever the states move.
        self._plans: dict = {}

    @classmethod
    def _from_base(cls, alg, seed: int, base: np.ndarray, streams: int) -> "Generator":
        g = cls.__new__(cls)
        g._alg, g._seed, g._streams = alg, seed, streams
        g._base = np.array(base, dtype=alg.dtype)
        g._reset_state()
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
        """The current states of all streams on the host, shape (words, streams).

        If the last fill ran on a device the states are copied back (and the device copy
        dropped); before any draw they are built here.

        Cost
        ----
        Building runs `cupric.gpu_rand.streams.stream_states` (about S * state_bits engine
        steps of NumPy work); a device fill builds them on the device instead.
        """
        if self._where == "device":
            self._state = self._backend.to_host(self._device_state)
            self._device_state, self._backend, self._init_inputs = None, None, ()
            self._plans = {}
        elif self._where == "none":
            self._state = stream_states(self._alg, self._base, self._streams)
        self._where = "host"
        return self._state

    def device_states(self, backend):
        """The stream states on `backend` (a `backends.CudaBackend` or `SimulatorBackend`).

        Host states are copied over; before any draw the device builds them in one launch,
        each thread i applying the jump-power tables (`streams.jump_table`) to the seed's
        state instead of jumping i times.
        """
        if self._where == "device" and self._backend == backend:
            return self._device_state
        if self._where == "device":
            self.stream_states  # bring them home first: one current copy at a time
        alg = self._alg
        if self._where == "host":
            states = backend.to_device(self._state)
            self._state = None
        else:
            table = backend.to_device(jump_table(alg, self._streams, digit_bits=DIGIT_BITS))
            states = backend.empty((alg.words, self._streams), alg.dtype)
            base = backend.to_device(self._base.reshape(alg.words, 1))
            backend.launch("init_streams", alg, self._streams, (states, base, table, DIGIT_BITS))
            # The launch is asynchronous: keep its inputs alive as long as the states.
            self._init_inputs = (base, table)
        self._device_state, self._backend, self._where = states, backend, "device"
        self._plans = {}
        return states

    @property
    def bit_generator(self) -> BitGenerator:
        """A copy of the streams as a `BitGenerator` (advancing it leaves this one alone)."""
        return BitGenerator(self._alg, self.stream_states)

    def __repr__(self) -> str:
        return f"Generator({self._alg.name}, seed={self._seed}, streams={self._streams})"

    def jumped(self, jumps: int = 1) -> "Generator":
        """A new Generator whose stream 0 starts `jumps` long jumps after this one's
        stream 0 started (whatever this one has drawn since).

        A long jump (2^96 steps for xoshiro128++) spans more than all the streams of this
        Generator, so the two never share a state while S * jump <= long jump.

        Any count is fast: beyond a few jumps, the state is advanced once by the
        polynomial x^(jumps * 2^L) mod P (reduced modulo the period), which costs a few
        hundred polynomial squarings however large `jumps` is.

        Raises
        ------
        NotImplementedError
            For the xoroshiro64 pair, which have no published long jump.
        ValueError
            If `jumps` is negative, or this Generator's streams are longer than one long
            jump.
        """
        alg = self._alg
        jumps = operator.index(jumps)
        if jumps < 0:
            raise ValueError(f"jumps must be >= 0, got {jumps}")
        if alg.long_jump is None:
            raise NotImplementedError(f"{alg.class_name} has no long_jump to separate Generators")
        if self._streams << stream_log2(alg) > 1 << alg.long_jump_log2:
            raise ValueError("the streams of this Generator span more than one long jump")
        bits = BitGenerator(alg, self._base)
        if jumps <= _LOOPED_JUMPS:
            for _ in range(jumps):
                bits.long_jump()
        else:
            period = (1 << alg.state_bits) - 1
            bits.advance(jump_polynomial(alg, (jumps << alg.long_jump_log2) % period))
        return Generator._from_base(alg, self._seed, bits.state[:, 0], self._streams)

    def spawn(self, n_children: int) -> list["Generator"]:
        """`n_children` independent Generators: ``jumped(1)`` ... ``jumped(n_children)``.

        Raises
        ------
        ValueError
            If `n_children` is negative.
        """
        n_children = operator.index(n_children)
        if n_children < 0:
            raise ValueError(f"n_children must be >= 0, got {n_children}")
        return [self.jumped(i + 1) for i in range(n_children)]

    # ---- draws ----
    def _fill(self, out, host_fill, kind: str, host_args: tuple, device_args: tuple,
              backend=None):
        """Fill `out` with the host half (NumPy) or the device kernel `kind`."""
        target = backend_for(out, backend)
        if target is None:
            host_fill(self._alg, self.stream_states, out, *host_args)
            return out
        flat = target.flat(out)
        dtype = flat.dtype
        if kind.startswith("integers") or kind == "bits64":
            flat = flat.view(np.uint64 if flat.dtype.itemsize == 8 else np.uint32)
        states = self.device_states(target)
        args = (states, flat, *device_args)
        target.launch(kind, self._alg, self._streams, args)
        self._remember(kind, out, target, args, dtype)
        return out

    def _remember(self, kind: str, out, target, args: tuple, dtype) -> None:
        """Make the plan of fills like this one (`plans.make_plan`), once per key."""
        family = _plans.FAMILIES.get(kind)
        try:
            key = (family, out.__class__, out.dtype)
            if family is None or key in self._plans:
                return
        except (AttributeError, TypeError):  # no dtype, or an unhashable one: no plan
            return
        plan = _plans.make_plan(kind, self._alg, self._streams, target, args, out, dtype)
        if plan is not _plans.RETRY:
            self._plans[key] = plan

    def _plan(self, family: str, out, backend):
        """This Generator's `plans.FillPlan` for a `family` fill of `out` by `backend`
        (None, or a `CudaBackend` on the stream the plan launches on), or None."""
        plans = self._plans
        if not plans:
            return None
        try:
            plan = plans.get((family, out.__class__, out.dtype))
        except (AttributeError, TypeError):
            return None
        if plan is None:
            return None
        if backend is None:
            return plan if plan.stream is None else None
        if backend.__class__ is CudaBackend and backend.stream is plan.stream:
            return plan
        return None

    def _run(self, host_fill, kind, shape, dtype, out, host_args=(), device_args=(),
             backend=None):
        if out is not None:
            if shape is not None and tuple(out.shape) != shape:
                raise ValueError(f"size {shape} does not match out.shape {tuple(out.shape)}")
            return self._fill(out, host_fill, kind, host_args, device_args, backend)
        result = np.empty(shape if shape is not None else (1,), dtype=dtype)
        host_fill(self._alg, self.stream_states, result, *host_args)
        return result if shape is not None else result[0]

    def _float_call(self, host_fill, family, size, dtype, out, shift, scale, backend):
        dt = _float_dtype(_dtype_of(out, dtype))
        kind = f"{family}_f{dt.itemsize * 8}"
        return self._run(host_fill, kind, _shape(size), dt, out, (shift, scale),
                         (dt.type(shift), dt.type(scale)), backend)

    def random(self, size=None, dtype=np.float64, out=None, *, backend=None):
        """Uniform floats in [0, 1): top 24 (float32) or 53 (float64) bits times 2^-bits.

        Parameters
        ----------
        size : int or tuple of int, optional
        dtype : {float64, float32}
        out : array, optional
            Filled in place and returned: a C-contiguous NumPy array (host half) or a
            device array (`DeviceBuffer`, CUDA Array Interface or DLPack; device half).
        backend : {None, "cuda", "simulator"}, optional
            Where a fill of `out` runs; None picks the host for NumPy arrays and the GPU
            otherwise. "simulator" runs the device kernels on the CPU over NumPy arrays.
        """
        if out is not None and size is None:
            plan = self._plan("uniform", out, backend)
            if plan is not None and plan.fill(out, plan.standard):
                return out
        return self._float_call(_dist.fill_uniform, "uniform", size, dtype, out, 0.0, 1.0,
                                backend)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64, out=None, *,
                backend=None):
        """Uniform floats in [low, high): ``low + (high - low) * U`` computed in `dtype`.

        Device fills may fuse that into one fma, so they can differ from the host in the
        last bit unless low = 0 and high = 1.
        """
        if out is not None and size is None and \
                low.__class__ in _PARAMETERS and high.__class__ in _PARAMETERS:
            plan = self._plan("uniform", out, backend)
            if plan is not None and plan.fill(out, plan.arguments(low, high, True)):
                return out
        dt = _float_dtype(_dtype_of(out, dtype))
        scale = float(dt.type(high) - dt.type(low))
        return self._float_call(_dist.fill_uniform, "uniform", size, dt, out, low, scale,
                                backend)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False, out=None,
                 *, backend=None):
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
        if out is not None and size is None:
            plan = self._plan("integers64" if high - low > 1 << 32 else "integers32", out,
                              backend)
            if plan is not None:
                args = plan.integer_arguments(low, high)
                if args is not None and plan.fill(out, args):
                    return out
        dt = _dtype_of(out, dtype)
        if dt.kind not in "iu" or dt.itemsize > 8:
            raise TypeError(f"dtype must be an integer type of at most 64 bits, got {dt}")
        info = np.iinfo(dt)
        if high <= low:
            raise ValueError(f"empty range: low={low} >= high={high}")
        if low < info.min or high - 1 > info.max:
            raise ValueError(f"[{low}, {high}) does not fit {dt}")
        span = high - low
        wide = span > 1 << 32
        if out is not None and backend_for(out, backend) is not None and dt.itemsize < 4:
            raise TypeError(f"device fills write 32- or 64-bit integers, not {dt}")
        if wide:
            kind = "integers64"
        else:
            kind = "integers32" if dt.itemsize <= 4 else "integers32_to64"
        device_args = (np.uint64(low % 2**64), np.uint64(span % 2**64),
                       np.uint64(_dist.lemire_threshold(span, 64 if wide else 32)))
        return self._run(_dist.fill_integers, kind, _shape(size), dt, out, (low, span),
                         device_args, backend)

    def standard_normal(self, size=None, dtype=np.float64, out=None, *, backend=None):
        """Standard normal variates (Box–Muller, both values of each pair used)."""
        if out is not None and size is None:
            plan = self._plan("normal", out, backend)
            if plan is not None and plan.fill(out, plan.standard):
                return out
        return self._float_call(_dist.fill_normal, "normal", size, dtype, out, 0.0, 1.0,
                                backend)

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64, out=None, *,
               backend=None):
        """Normal variates with mean `loc` and standard deviation `scale` (scalars)."""
        if scale < 0:
            raise ValueError(f"scale must be non-negative, got {scale}")
        if out is not None and size is None and \
                loc.__class__ in _PARAMETERS and scale.__class__ in _PARAMETERS:
            plan = self._plan("normal", out, backend)
            if plan is not None and plan.fill(out, plan.arguments(loc, scale, False)):
                return out
        return self._float_call(_dist.fill_normal, "normal", size, dtype, out, loc, scale,
                                backend)

    def standard_exponential(self, size=None, dtype=np.float64, out=None, *, backend=None):
        """Standard exponential variates by inversion, -ln(1 - U)."""
        if out is not None and size is None:
            plan = self._plan("exponential", out, backend)
            if plan is not None and plan.fill(out, plan.standard):
                return out
        return self._float_call(_dist.fill_exponential, "exponential", size, dtype, out,
                                0.0, 1.0, backend)

    def exponential(self, scale=1.0, size=None, dtype=np.float64, out=None, *,
                    backend=None):
        """Exponential variates with mean `scale`."""
        if scale < 0:
            raise ValueError(f"scale must be non-negative, got {scale}")
        if out is not None and size is None and \
                scale.__class__ in _PARAMETERS:
            plan = self._plan("exponential", out, backend)
            if plan is not None and plan.fill(out, plan.arguments(0.0, scale, False)):
                return out
        return self._float_call(_dist.fill_exponential, "exponential", size, dtype, out,
                                0.0, scale, backend)

    def bits(self, size=None, dtype=np.uint64, out=None, *, backend=None):
        """Raw generator output: ``next_u32`` (uint32) or ``next_u64`` (uint64) per element."""
        if out is not None and size is None:
            plan = self._plan("bits", out, backend)
            if plan is not None and plan.fill(out, ()):
                return out
        dt = _dtype_of(out, dtype)
        if dt not in (np.dtype(np.uint32), np.dtype(np.uint64)):
            raise TypeError(f"dtype must be uint32 or uint64, got {dt}")
        return self._run(_dist.fill_bits, f"bits{dt.itemsize * 8}", _shape(size), dt, out,
                         backend=backend)


def default_rng(seed: int | None = None, *, algorithm: str = DEFAULT_ALGORITHM,
                streams: int = DEFAULT_STREAMS) -> Generator:
    """A new `Generator` (named after numpy.random.default_rng)."""
    return Generator(seed, algorithm=algorithm, streams=streams)
