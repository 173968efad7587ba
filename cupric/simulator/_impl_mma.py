"""Simulator implementations of `cupric.device.mma` and `cupric.device.cp_async`.

`mma.*`, `ldmatrix` and `stmatrix` are whole-warp collectives of the lock-step warp
engine: the 32 lanes' fragments are gathered into matrices with the PTX fragment layouts
of `cupric.device.mma.FRAGMENTS`, computed in NumPy, and handed back lane by lane.
Products and sums of an `mma` are taken in float64 and rounded once to float32 (int64
then wrapped to int32): the tensor core's own accumulation order is not specified, so a
GPU may differ in the last bits. tf32 operands keep their top 19 bits (truncation, as
the tensor core reads them). `cp.async` copies run when the thread's `cp_async.wait`
releases their group, so a kernel that reads a tile before waiting reads stale data here
too.
"""

from __future__ import annotations

import numpy as np

from ..device.mma import FRAGMENTS, SHAPES
from ._array import unwrap
from ._impl import _collective, _user_site, _warp_op
from ._live import FULL, WARP_OPS
from ._state import implements
from .errors import SimulatorError

__all__ = ["mma_reference"]


# -- fragments <-> matrices --------------------------------------------------------------

def _elements(word, per: int, bits: int, kind: str) -> list:
    """The `per` elements packed in a 32-bit register, low bits first, as floats/ints."""
    if kind == "tf32":
        raw = np.float32(word).view(np.uint32) if isinstance(word, (float, np.floating)) \
            else np.uint32(int(word) & 0xFFFFFFFF)
        return [float((raw & np.uint32(0xFFFFE000)).view(np.float32))]
    w = int(word) & 0xFFFFFFFF
    mask = (1 << bits) - 1
    out = []
    for k in range(per):
        e = (w >> (bits * k)) & mask
        if kind == "f16":
            out.append(float(np.uint16(e).view(np.float16)))
        elif kind == "bf16":
            out.append(float(np.uint32(e << 16).view(np.float32)))
        elif kind == "s8":
            out.append(e - 256 if e & 0x80 else e)
        else:  # u8
            out.append(e)
    return out


def _gather(shape: str, operand: str, rows: int, cols: int, fragments: dict, kind: str):
    regs, per, bits, coords = FRAGMENTS[shape][operand]
    dtype = np.int64 if kind in ("s8", "u8", "s32") else np.float64
    matrix = np.zeros((rows, cols), dtype)
    for lane, fragment in fragments.items():
        if len(fragment) != regs:
            raise SimulatorError(f"mma.{shape}: operand {operand} takes {regs} registers "
                                 f"per lane, lane {lane} gave {len(fragment)}")
        i = 0
        for word in fragment:
            values = [word] if operand == "c" else _elements(word, per, bits, kind)
            for v in values:
                matrix[coords(lane, i)] = v
                i += 1
    return matrix


def mma_reference(shape: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A @ B + C as the simulator computes it: float64 (int64) sums, one rounding to
    float32 (wrap to int32). `a` (m x k) and `b` (k x n) hold the operand values (already
    f16/bf16/tf32/int8-valued), `c` (m x n) float32 or int32."""
    if SHAPES[shape][4] == "s32":
        d = a.astype(np.int64) @ b.astype(np.int64) + c.astype(np.int64)
        return d.astype(np.int32)  # wraps: mma without .satfinite
    return (a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)) \
        .astype(np.float32)


def _mma_compute(shape: str):
    m, n, k, ab, cd = SHAPES[shape]

    def compute(group: int, args: dict) -> dict:
        if group != FULL:
            raise SimulatorError(f"mma.{shape} needs all 32 lanes of the warp, got mask "
                                 f"{group:#010x}")
        a = _gather(shape, "a", m, k, {lane: args[lane][0] for lane in args}, ab)
        b = _gather(shape, "b", k, n, {lane: args[lane][1] for lane in args}, ab)
        c = _gather(shape, "c", m, n, {lane: args[lane][2] for lane in args}, cd)
        d = mma_reference(shape, a, b, c.astype(np.int32 if cd == "s32" else np.float32))
        coords = FRAGMENTS[shape]["c"][3]
        return {lane: tuple(d[coords(lane, i)] for i in range(4)) for lane in args}

    return compute


def _mma_intrinsic(shape: str) -> None:
    name = f"mma.{shape}"
    WARP_OPS[name] = _mma_compute(shape)

    def core(s, site, a, b, c):
        return _warp_op(s, site, name, FULL, (tuple(a), tuple(b), tuple(c)))

    core.__name__ = f"_mma_{shape}"
    _collective(name)(core)


for _shape in SHAPES:
    _mma_intrinsic(_shape)


# -- ldmatrix / stmatrix -----------------------------------------------------------------

def _row_view(s_array, index, what: str, site):
    """The 8 contiguous 16-bit elements (as uint16) at `index` of a shared array."""
    arr = unwrap(s_array)
    if not isinstance(arr, np.ndarray) or arr.dtype.itemsize != 2:
        raise SimulatorError(f"{what} takes a shared array of 16-bit elements",
                             filename=site[0], line=site[1])
    idx = tuple(int(i) for i in index) if isinstance(index, tuple) else (int(index),)
    try:
        flat = int(np.ravel_multi_index(idx, arr.shape))
    except ValueError:
        raise SimulatorError(f"{what}: index {idx} is outside the array of shape "
                             f"{arr.shape}", filename=site[0], line=site[1]) from None
    data = arr.reshape(-1).view(np.uint16)
    if flat % 8 or flat + 8 > data.size:
        raise SimulatorError(f"{what}: a row of 8 elements at flat index {flat} must be "
                             f"16-byte aligned and inside the array ({data.size} elements)",
                             filename=site[0], line=site[1])
    return data[flat:flat + 8]


def _matrices(count: int, args: dict, what: str) -> list:
    """For each of `count` 8x8 matrices, its 8 row views (lane 8j + r names row r)."""
    return [[args[8 * j + r][0] for r in range(8)] for j in range(count)]


def _ldmatrix_compute(group: int, args: dict) -> dict:
    if group != FULL:
        raise SimulatorError(f"mma.ldmatrix needs all 32 lanes of the warp, got mask "
                             f"{group:#010x}")
    count, trans = args[0][1], args[0][2]
    mats = [np.array(rows, dtype=np.uint16) for rows in _matrices(count, args, "ldmatrix")]
    if trans:
        mats = [m.T for m in mats]
    out = {}
    for lane in range(32):
        r, c = lane >> 2, 2 * (lane & 3)
        out[lane] = tuple(np.uint32(int(m[r, c]) | int(m[r, c + 1]) << 16) for m in mats)
    return out


def _stmatrix_compute(group: int, args: dict) -> dict:
    if group != FULL:
        raise SimulatorError(f"mma.stmatrix needs all 32 lanes of the warp, got mask "
                             f"{group:#010x}")
    count, trans = len(args[0][1]), args[0][2]
    mats = [np.zeros((8, 8), np.uint16) for _ in range(count)]
    for lane in range(32):
        r, c = lane >> 2, 2 * (lane & 3)
        for j, word in enumerate(args[lane][1]):
            w = int(word) & 0xFFFFFFFF
            mats[j][r, c], mats[j][r, c + 1] = w & 0xFFFF, w >> 16
    for j, m in enumerate(mats):
        m = m.T if trans else m
        for r in range(8):
            args[8 * j + r][0][:] = m[r]
    return dict.fromkeys(range(32))


WARP_OPS["mma.ldmatrix"] = _ldmatrix_compute
WARP_OPS["mma.stmatrix"] = _stmatrix_compute


@_collective("mma.ldmatrix")
def _ldmatrix(s, site, smem, index, count=4, trans=False):
    count = int(count)
    if count not in (1, 2, 4):
        raise SimulatorError(f"mma.ldmatrix: count must be 1, 2 or 4, got {count}",
                             filename=site[0], line=site[1])
    row = _row_view(smem, index, "mma.ldmatrix", site) if (s.lin & 31) < 8 * count \
        else None
    return _warp_op(s, site, "mma.ldmatrix", FULL, (row, count, bool(trans)))


@_collective("mma.stmatrix")
def _stmatrix(s, site, smem, index, regs, trans=False):
    regs = tuple(regs)
    if len(regs) not in (1, 2, 4):
        raise SimulatorError(f"mma.stmatrix: 1, 2 or 4 registers, got {len(regs)}",
                             filename=site[0], line=site[1])
    row = _row_view(smem, index, "mma.stmatrix", site) if (s.lin & 31) < 8 * len(regs) \
        else None
    return _warp_op(s, site, "mma.stmatrix", FULL, (row, regs, bool(trans)))


# -- conversions -------------------------------------------------------------------------

@implements("mma.to_tf32")
def _to_tf32(s, x):
    bits = int(np.float32(x).view(np.uint32))
    if (bits & 0x7F800000) != 0x7F800000:  # finite: round half away from zero at bit 13
        bits = (bits + 0x1000) & 0xFFFFE000
    else:
        bits &= 0xFFFFE000 if bits & 0x007FFFFF == 0 else 0xFFFFFFFF
    return np.uint32(bits).view(np.float32)


def _bf16_bits(x) -> int:
    bits = int(np.float32(x).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it quiet
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


@implements("mma.pack_bf16x2")
def _pack_bf16x2(s, lo, hi):
    return np.uint32(_bf16_bits(lo) | _bf16_bits(hi) << 16)


@implements("mma.pack_f16x2")
def _pack_f16x2(s, lo, hi):
    with np.errstate(over="ignore"):
        a = int(np.float16(np.float32(lo)).view(np.uint16))
        b = int(np.float16(np.float32(hi)).view(np.uint16))
    return np.uint32(a | b << 16)


# -- cp.async ----------------------------------------------------------------------------
# Per simulated thread: the copies started since the last commit, and the committed groups
# in order. A copy reads its source when its group completes (at a wait), as late as a GPU
# may read it.

_PENDING: dict = {}


def _queue(s) -> tuple[list, list]:
    key = (id(s.launch), s.bid, s.tid)
    entry = _PENDING.get(key)
    if entry is None:
        entry = _PENDING[key] = ([], [])
    return entry


@implements("cp_async.copy")
def _cp_async_copy(s, dst, dst_index, src, src_index, size=16, src_size=None):
    site = _user_site()
    size = int(size)
    d, sr = unwrap(dst), unwrap(src)
    if size not in (4, 8, 16) or size % d.itemsize:
        raise SimulatorError(f"cp_async.copy: size must be 4, 8 or 16 bytes and a multiple "
                             f"of the element size, got {size}", filename=site[0],
                             line=site[1])
    src_size = size if src_size is None else int(src_size)
    if not 0 <= src_size <= size:
        raise SimulatorError(f"cp_async.copy: src_size {src_size} outside 0..{size}",
                             filename=site[0], line=site[1])
    count = size // d.itemsize

    def flat(arr, index, what):
        idx = tuple(int(i) for i in index) if isinstance(index, tuple) else (int(index),)
        try:
            f = int(np.ravel_multi_index(idx, arr.shape))
        except ValueError:
            raise SimulatorError(f"cp_async.copy: {what} index {idx} is outside the array "
                                 f"of shape {arr.shape}", filename=site[0],
                                 line=site[1]) from None
        if (f * arr.itemsize) % size:
            raise SimulatorError(f"cp_async.copy: the {what} address must be aligned to "
                                 f"{size} bytes", filename=site[0], line=site[1])
        if src_size and f + count > arr.size:
            raise SimulatorError(f"cp_async.copy: {size} bytes at {what} index {idx} run "
                                 f"past the array", filename=site[0], line=site[1])
        return f

    fd = flat(d, dst_index, "destination")
    fs = flat(sr, src_index, "source") if src_size else 0
    _queue(s)[0].append((d.reshape(-1), fd, sr.reshape(-1), fs, count,
                         src_size // d.itemsize))


@implements("cp_async.commit")
def _cp_async_commit(s):
    open_copies, groups = _queue(s)
    groups.append(list(open_copies))
    open_copies.clear()


@implements("cp_async.wait")
def _cp_async_wait(s, n):
    key = (id(s.launch), s.bid, s.tid)
    entry = _PENDING.get(key)
    if entry is None:
        return
    open_copies, groups = entry
    keep = max(int(n), 0)
    while len(groups) > keep:
        for dst, fd, src, fs, count, take in groups.pop(0):
            dst[fd:fd + count] = 0
            if take:
                dst[fd:fd + take] = src[fs:fs + take]
    if not groups and not open_copies:
        del _PENDING[key]
