"""Simulator implementations of the core intrinsics: indices, barriers, fences, shared
and local memory, atomics, warp operations, clocks, trap and cooperative grids.

Each function takes the calling thread's `ThreadState` first, then the intrinsic's own
arguments. Frames: user code -> `Intrinsic.__call__` -> implementation, so the user's
line is two frames up from an implementation (`_user_site`).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from .. import types as _t
from ..device import registry
from ..device.atomic import ORDERS, SCOPES
from ..device.errors import KernelIndexError, KernelTrapError
from ._array import SimArray, _has_negative, unwrap
from ._live import BLOCKED, FULL, WARP, barrier_result, warp_compute
from ._state import POISON, implements
from .errors import BarrierError, SimulatorError

# Shared memory limits of current GPUs: 48 KiB of static shared memory per kernel; up to
# 227 KiB per block in all (sm_90) once the kernel opts in to more dynamic memory.
STATIC_SHARED_LIMIT = 48 * 1024
SHARED_LIMIT = 227 * 1024


def _user_site(depth: int = 3) -> tuple[str, int]:
    """(file, line) of the kernel code that called the running intrinsic."""
    frame = sys._getframe(depth)
    return frame.f_code.co_filename, frame.f_lineno


# -- indices ---------------------------------------------------------------------------

# Coordinates come typed as compiled code types them (the PTX special registers are
# 32-bit; grid() and gridsize() widen to 64 bits), so that arithmetic on them promotes
# and wraps the same way in both.
_I32 = np.int32
_I64 = np.int64
for _axis, _i in (("x", 0), ("y", 1), ("z", 2)):
    implements(f"threadIdx.{_axis}")(lambda s, _i=_i: _I32(s.tid[_i]))
    implements(f"blockIdx.{_axis}")(lambda s, _i=_i: _I32(s.bid[_i]))
    implements(f"blockDim.{_axis}")(lambda s, _i=_i: _I32(s.launch.block[_i]))
    implements(f"gridDim.{_axis}")(lambda s, _i=_i: _I32(s.launch.grid[_i]))
del _axis, _i


@implements("warpsize")
def _warpsize(s):
    return _I32(WARP)


@implements("laneid")
def _laneid(s):
    return _I32(s.lin & 31)


@implements("grid")
def _grid(s, ndim=1):
    b, d, t = s.bid, s.launch.block, s.tid
    if ndim == 1:
        return _I64(b[0] * d[0] + t[0])
    if ndim == 2:
        return _I64(b[0] * d[0] + t[0]), _I64(b[1] * d[1] + t[1])
    if ndim == 3:
        return _I64(b[0] * d[0] + t[0]), _I64(b[1] * d[1] + t[1]), _I64(b[2] * d[2] + t[2])
    raise ValueError(f"grid(ndim) takes ndim 1, 2 or 3, got {ndim!r}")


@implements("gridsize")
def _gridsize(s, ndim=1):
    g, d = s.launch.grid, s.launch.block
    if ndim == 1:
        return _I64(g[0] * d[0])
    if ndim == 2:
        return _I64(g[0] * d[0]), _I64(g[1] * d[1])
    if ndim == 3:
        return _I64(g[0] * d[0]), _I64(g[1] * d[1]), _I64(g[2] * d[2])
    raise ValueError(f"gridsize(ndim) takes ndim 1, 2 or 3, got {ndim!r}")


@implements("grid_stride")
def _grid_stride(s, n):
    start, step = _grid(s), _gridsize(s)
    # Indices of a grid-stride loop are i64, like grid(1)'s.
    return (_I64(i) for i in range(int(start), int(n), int(step)))


# -- barriers and warp collectives ----------------------------------------------------
#
# Each collective has a core taking the call's (file, line) `site` explicitly: called
# through its intrinsic the site comes from the caller's frame; the generator engine
# (see _transform) passes the site recorded in the rewritten kernel. In the generator
# engine a core may return BLOCKED, and the result arrives later through the scheduler.

COLLECTIVES: dict = {}


def _collective(name: str):
    def register(core):
        COLLECTIVES[name] = core

        def through_intrinsic(s, *args, **kwargs):
            # user code -> Intrinsic.__call__ -> this function: the user is 2 frames up.
            frame = sys._getframe(2)
            result = core(s, (frame.f_code.co_filename, frame.f_lineno), *args, **kwargs)
            if result is BLOCKED:
                raise SimulatorError(
                    f"{name} was reached through a call the generator engine did not "
                    f"rewrite; set CUPRIC_SIMULATOR_ENGINE=threads",
                    filename=frame.f_code.co_filename, line=frame.f_lineno)
            return result
        through_intrinsic.__name__ = f"_{name.replace('.', '_')}"
        implements(name)(through_intrinsic)
        return core
    return register


def _serial_collective(s, op: str, site):
    raise SimulatorError(
        f"{op} reached while the block runs one thread after another: the simulator's "
        f"scan of the kernel did not see it (is it called through a variable?). Launch "
        f"with mode='threads' to run the block's threads at once",
        filename=site[0], line=site[1])


def _block_barrier(s, site, op: str, value):
    if s.live is None:
        if s.launch.nthreads == 1:
            return barrier_result(op, [value])
        _serial_collective(s, op, site)
    return s.live.barrier(s, op, value, site)


@_collective("syncthreads")
def _syncthreads(s, site):
    return _block_barrier(s, site, "syncthreads", None)


@_collective("syncthreads_count")
def _syncthreads_count(s, site, pred):
    return _block_barrier(s, site, "syncthreads_count", bool(pred))


@_collective("syncthreads_and")
def _syncthreads_and(s, site, pred):
    return _block_barrier(s, site, "syncthreads_and", bool(pred))


@_collective("syncthreads_or")
def _syncthreads_or(s, site, pred):
    return _block_barrier(s, site, "syncthreads_or", bool(pred))


@_collective("grid_sync")
def _grid_sync(s, site):
    if s.launch.mode != "grid":
        g = s.launch.grid
        if g[0] * g[1] * g[2] * s.launch.nthreads == 1:
            return None
        _serial_collective(s, "grid_sync", site)
    return s.live.grid_barrier(s, site)


@implements("threadfence_block", "threadfence", "threadfence_system")
def _fence(s):
    # Simulated threads share memory under the GIL, which already orders every access;
    # a fence has nothing left to order. It often sits in a spin loop, though, so it lets
    # the other live threads run.
    if s.live is not None:
        s.live.pause(s)


@implements("nanosleep")
def _nanosleep(s, ns):
    ns = int(ns)
    if ns < 0:
        raise ValueError(f"nanosleep takes a non-negative duration, got {ns}")
    if s.live is not None:
        # A sleeping thread usually waits for the others: let them run.
        s.live.pause(s)


def _existing_lanes(s) -> int:
    first = s.lin - (s.lin & 31)
    return (1 << min(WARP, s.launch.nthreads - first)) - 1


def _warp_op(s, site, op: str, mask, args: tuple):
    mask = int(mask) & FULL
    lane = s.lin & 31
    if not mask >> lane & 1:
        raise BarrierError(f"{op}: the calling lane {lane} is not in mask {mask:#010x}",
                           filename=site[0], line=site[1])
    if s.live is None:
        if mask & _existing_lanes(s) == 1 << lane:
            return warp_compute(op, 1 << lane, {lane: args})[lane]
        _serial_collective(s, op, site)
    return s.live.warp_op(s, op, mask, args, site)


_SHUFFLE_TYPES = (int, float, bool, np.integer, np.floating, np.bool_)


def _shuffled(value):
    if not isinstance(value, _SHUFFLE_TYPES):
        raise TypeError(f"warp shuffles move scalars (ints, floats) of up to 64 bits, got "
                        f"{type(value).__name__}; shuffle the components one by one")
    return value


def _width(width) -> int:
    width = int(width)
    if width < 1 or width > WARP or width & (width - 1):
        raise ValueError(f"shuffle width must be a power of two in 1..32, got {width}")
    return width


@_collective("syncwarp")
def _syncwarp(s, site, mask=FULL):
    return _warp_op(s, site, "syncwarp", mask, ())


@_collective("warp.activemask")
def _activemask(s, site):
    if s.live is None:
        # Running serially, the warp is converged: every lane that exists is active.
        return np.uint32(_existing_lanes(s))
    return s.live.activemask(s, site)


@_collective("warp.shfl_idx")
def _shfl_idx(s, site, mask, value, src_lane, width=WARP):
    return _warp_op(s, site, "warp.shfl_idx", mask,
                    (_shuffled(value), int(src_lane), _width(width)))


@_collective("warp.shfl_up")
def _shfl_up(s, site, mask, value, delta, width=WARP):
    return _warp_op(s, site, "warp.shfl_up", mask, (_shuffled(value), int(delta), _width(width)))


@_collective("warp.shfl_down")
def _shfl_down(s, site, mask, value, delta, width=WARP):
    return _warp_op(s, site, "warp.shfl_down", mask,
                    (_shuffled(value), int(delta), _width(width)))


@_collective("warp.shfl_xor")
def _shfl_xor(s, site, mask, value, lane_mask, width=WARP):
    return _warp_op(s, site, "warp.shfl_xor", mask,
                    (_shuffled(value), int(lane_mask), _width(width)))


@_collective("warp.any")
def _any(s, site, mask, pred):
    return _warp_op(s, site, "warp.any", mask, (bool(pred),))


@_collective("warp.all")
def _all(s, site, mask, pred):
    return _warp_op(s, site, "warp.all", mask, (bool(pred),))


@_collective("warp.ballot")
def _ballot(s, site, mask, pred):
    return _warp_op(s, site, "warp.ballot", mask, (bool(pred),))


@_collective("warp.match_any")
def _match_any(s, site, mask, value):
    return _warp_op(s, site, "warp.match_any", mask, (value,))


@_collective("warp.match_all")
def _match_all(s, site, mask, value):
    return _warp_op(s, site, "warp.match_all", mask, (value,))


def _reduction(op):
    def reduce(s, site, mask, value):
        return _warp_op(s, site, op, mask, (value,))
    reduce.__name__ = f"_{op.replace('.', '_')}"
    return reduce


for _op in ("add", "min", "max", "and", "or", "xor"):
    _collective(f"warp.reduce_{_op}")(_reduction(f"warp.reduce_{_op}"))
del _op


# -- shared and local memory -----------------------------------------------------------

def _dtype(dtype) -> np.dtype:
    if isinstance(dtype, _t.ScalarType):
        return dtype.dtype
    vector_dtype = getattr(dtype, "dtype", None)
    if isinstance(dtype, type) and isinstance(vector_dtype, np.dtype):
        return vector_dtype  # a vector type such as float4: its struct layout
    return np.dtype(dtype)


def _shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"array shape must not be negative, got {shape}")
    return shape


def _poisoned(shape: tuple, dtype: np.dtype) -> np.ndarray:
    count = 1
    for n in shape:
        count *= n
    return np.full(count * dtype.itemsize, POISON, dtype=np.uint8).view(dtype).reshape(shape)


@implements("shared.array")
def _shared_array(s, shape, dtype):
    frame = sys._getframe(2)
    key = (frame.f_code, frame.f_lasti)
    block = s.block
    with block.lock:
        arr = block.shared.get(key)
        shape = _shape(shape)
        dtype = _dtype(dtype)
        if arr is None:
            data = _poisoned(shape, dtype)
            block.static_bytes += data.nbytes
            where = dict(filename=frame.f_code.co_filename, line=frame.f_lineno)
            if block.static_bytes > STATIC_SHARED_LIMIT:
                raise SimulatorError(f"static shared memory of the kernel reaches "
                                     f"{block.static_bytes} bytes, past the "
                                     f"{STATIC_SHARED_LIMIT}-byte limit", **where)
            if block.static_bytes + s.launch.shared_bytes > SHARED_LIMIT:
                raise SimulatorError(f"shared memory (static {block.static_bytes} + dynamic "
                                     f"{s.launch.shared_bytes} bytes) exceeds the "
                                     f"{SHARED_LIMIT}-byte limit of a block", **where)
            arr = SimArray(data, f"shared.array (line {frame.f_lineno})")
            block.shared[key] = arr
        elif arr._a.shape != shape or arr._a.dtype != dtype:
            raise SimulatorError(f"shared.array declared here with shape {shape} and dtype "
                                 f"{dtype} was first made with shape {arr._a.shape} and "
                                 f"dtype {arr._a.dtype}", filename=frame.f_code.co_filename,
                                 line=frame.f_lineno)
        return arr


@implements("shared.dynamic")
def _shared_dynamic(s, dtype, offset=0, count=None):
    dtype = _dtype(dtype)
    buf = s.block.dynamic
    offset = int(offset)
    if offset < 0 or offset % dtype.itemsize:
        site = _user_site()
        raise SimulatorError(f"shared.dynamic offset {offset} is not a non-negative "
                             f"multiple of the item size {dtype.itemsize}",
                             filename=site[0], line=site[1])
    room = max(0, (buf.size - offset) // dtype.itemsize)
    count = room if count is None else int(count)
    if count > room or count < 0:
        site = _user_site()
        raise SimulatorError(f"shared.dynamic view of {count} x {dtype} at offset {offset} "
                             f"does not fit in the launch's {buf.size} bytes of dynamic "
                             f"shared memory", filename=site[0], line=site[1])
    view = buf[offset:offset + count * dtype.itemsize].view(dtype)
    return SimArray(view, "shared.dynamic")


@implements("local.array")
def _local_array(s, shape, dtype):
    return SimArray(_poisoned(_shape(shape), _dtype(dtype)), "local.array")


# -- atomics ---------------------------------------------------------------------------

# In threaded modes a thread lets the others run after this many atomics (or at once at
# atomic.load, the usual spin-wait read).
_ATOMICS_PER_PAUSE = 16
_INT = frozenset({"int32", "int64", "uint32", "uint64"})
_FLOAT = frozenset({"float32", "float64"})
_NUM = _INT | _FLOAT


def _target(op: str, arr, idx, allowed, scope, order, orders=ORDERS):
    s = registry.current()
    if s.live is not None:
        # Spin loops wait through atomics: now and then, let the other live threads run.
        s.atomics += 1
        if s.atomics % _ATOMICS_PER_PAUSE == 0:
            s.live.pause(s)
    a = unwrap(arr)
    if not isinstance(a, np.ndarray):
        raise TypeError(f"atomic.{op} needs an array, got {type(arr).__name__}")
    if a.dtype.name not in allowed:
        raise TypeError(f"atomic.{op} does not take {a.dtype} elements (takes "
                        f"{', '.join(sorted(allowed))})")
    if scope not in SCOPES:
        raise ValueError(f"atomic.{op}: scope must be one of {SCOPES}, got {scope!r}")
    if order not in orders:
        raise ValueError(f"atomic.{op}: order must be one of {orders}, got {order!r}")
    if _has_negative(idx) or not _in_bounds(a, idx):
        site = _user_site(4)
        name = arr._name if type(arr) is SimArray else "array"
        raise KernelIndexError(name, idx, a.shape, filename=site[0], line=site[1])
    return a


def _in_bounds(a: np.ndarray, idx) -> bool:
    idx = idx if type(idx) is tuple else (idx,)
    if len(idx) != a.ndim:
        raise IndexError(f"atomic access to a {a.ndim}-D array needs {a.ndim} indices, "
                         f"got {len(idx)}")
    return all(0 <= int(i) < n for i, n in zip(idx, a.shape))


def _rmw(op: str, allowed, int_fn, float_fn):
    def atomic_op(s, arr, idx, val, *, scope="device", order="relaxed"):
        a = _target(op, arr, idx, allowed, scope, order)
        with s.launch.atomic_lock:
            old = a[idx]
            if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
                if float_fn is None:
                    raise TypeError(f"atomic.{op} takes integer elements only")
                a[idx] = float_fn(old, _t.scalar_from_dtype(a.dtype)(val))
            else:
                a[idx] = _t.scalar_from_dtype(a.dtype)(int_fn(int(old), int(val)))
        return old
    atomic_op.__name__ = f"_atomic_{op}"
    return atomic_op


implements("atomic.add")(_rmw("add", _NUM | {"float16", "bfloat16"}, lambda o, v: o + v,
                              lambda o, v: o + v))
implements("atomic.sub")(_rmw("sub", _NUM, lambda o, v: o - v, lambda o, v: o - v))
implements("atomic.min")(_rmw("min", _NUM, min, lambda o, v: v if v < o else o))
implements("atomic.max")(_rmw("max", _NUM, max, lambda o, v: v if v > o else o))
implements("atomic.exch")(_rmw("exch", _NUM, lambda o, v: v, lambda o, v: v))
implements("atomic.and_")(_rmw("and_", _INT, lambda o, v: o & v, None))
implements("atomic.or_")(_rmw("or_", _INT, lambda o, v: o | v, None))
implements("atomic.xor")(_rmw("xor", _INT, lambda o, v: o ^ v, None))


def _unsigned(a: np.ndarray, v: int) -> int:
    return v & ((1 << (8 * a.dtype.itemsize)) - 1)


@implements("atomic.inc")
def _atomic_inc(s, arr, idx, limit, *, scope="device", order="relaxed"):
    a = _target("inc", arr, idx, _INT, scope, order)
    with s.launch.atomic_lock:
        old = a[idx]
        u, lim = _unsigned(a, int(old)), _unsigned(a, int(limit))
        a[idx] = _t.scalar_from_dtype(a.dtype)(0 if u >= lim else u + 1)
    return old


@implements("atomic.dec")
def _atomic_dec(s, arr, idx, limit, *, scope="device", order="relaxed"):
    a = _target("dec", arr, idx, _INT, scope, order)
    with s.launch.atomic_lock:
        old = a[idx]
        u, lim = _unsigned(a, int(old)), _unsigned(a, int(limit))
        a[idx] = _t.scalar_from_dtype(a.dtype)(lim if u == 0 or u > lim else u - 1)
    return old


@implements("atomic.cas")
def _atomic_cas(s, arr, idx, expected, desired, *, scope="device", order="relaxed"):
    a = _target("cas", arr, idx, _NUM, scope, order)
    with s.launch.atomic_lock:
        old = a[idx]
        if a.dtype.kind == "f":
            # Compare bit patterns, as atom.cas.b32/b64 does (NaN == NaN, -0.0 != 0.0).
            bits = np.dtype(f"u{a.dtype.itemsize}")
            same = np.array(old).view(bits) == np.array(a.dtype.type(expected)).view(bits)
            if same:
                a[idx] = a.dtype.type(desired)
        else:
            cast = _t.scalar_from_dtype(a.dtype)
            if int(old) == int(cast(expected)):
                a[idx] = cast(desired)
    return old


@implements("atomic.load")
def _atomic_load(s, arr, idx, *, scope="device", order="relaxed"):
    a = _target("load", arr, idx, _NUM, scope, order, orders=("relaxed", "acquire"))
    if s.live is not None:
        s.live.pause(s)
    with s.launch.atomic_lock:
        return a[idx]


@implements("atomic.store")
def _atomic_store(s, arr, idx, val, *, scope="device", order="relaxed"):
    a = _target("store", arr, idx, _NUM, scope, order, orders=("relaxed", "release"))
    with s.launch.atomic_lock:
        if a.dtype.kind == "f":
            a[idx] = a.dtype.type(val)
        else:
            a[idx] = _t.scalar_from_dtype(a.dtype)(val)


def _pair_index(op: str, a: np.ndarray, idx) -> int:
    if a.ndim != 1:
        raise TypeError(f"atomic.{op} takes a 1-D array")
    idx = int(idx)
    if idx % 2:
        raise ValueError(f"atomic.{op}: index {idx} is not even (the pair must be 4-byte "
                         f"aligned)")
    return idx


@implements("atomic.add_f16x2")
def _atomic_add_f16x2(s, arr, idx, lo, hi, *, scope="device", order="relaxed"):
    a = _target("add_f16x2", arr, idx, {"float16"}, scope, order)
    i = _pair_index("add_f16x2", a, idx)
    if i + 1 >= a.shape[0]:
        site = _user_site()
        raise KernelIndexError(getattr(arr, "_name", "array"), i + 1, a.shape,
                               filename=site[0], line=site[1])
    with s.launch.atomic_lock:
        old = (a[i], a[i + 1])
        a[i] = old[0] + np.float16(lo)
        a[i + 1] = old[1] + np.float16(hi)
    return old


@implements("atomic.add_bf16x2")
def _atomic_add_bf16x2(s, arr, idx, lo, hi, *, scope="device", order="relaxed"):
    from ._impl_math import bf16_bits, bf16_value

    a = _target("add_bf16x2", arr, idx, {"uint16", "bfloat16"}, scope, order)
    if a.dtype.name == "bfloat16":  # the same 16 bits
        a = a.view(np.uint16)
    i = _pair_index("add_bf16x2", a, idx)
    if i + 1 >= a.shape[0]:
        site = _user_site()
        raise KernelIndexError(getattr(arr, "_name", "array"), i + 1, a.shape,
                               filename=site[0], line=site[1])
    with s.launch.atomic_lock:
        old = (bf16_value(a[i]), bf16_value(a[i + 1]))
        a[i] = bf16_bits(old[0] + bf16_value(bf16_bits(lo)))
        a[i + 1] = bf16_bits(old[1] + bf16_value(bf16_bits(hi)))
    return old


# -- clocks, trap ----------------------------------------------------------------------

@implements("clock")
def _clock(s):
    return np.uint32((time.perf_counter_ns() - s.launch.t0) & 0xFFFFFFFF)


@implements("clock64")
def _clock64(s):
    return np.int64(time.perf_counter_ns() - s.launch.t0)


@implements("globaltimer")
def _globaltimer(s):
    return np.uint64(time.time_ns())


@implements("trap")
def _trap(s):
    site = _user_site()
    raise KernelTrapError("trap() aborted the kernel", filename=site[0], line=site[1])
