"""Atomic read-modify-write operations on global and shared memory (PTX `atom`/`red`).

Each takes an array, an index (an int, or a tuple for an n-D array) and operands, and
returns the element's old value. Keywords pick the PTX scope and memory order:
`scope` is "block" (.cta), "device" (.gpu, the default) or "system" (.sys); `order` is
"relaxed" (the default), "acquire", "release" or "acq_rel" (sm_70+).
"""

from ._intrinsic import Intrinsic, Namespace

__all__ = ["atomic", "SCOPES", "ORDERS", "INT_TYPES", "FLOAT_TYPES"]

SCOPES = ("block", "device", "system")
ORDERS = ("relaxed", "acquire", "release", "acq_rel")
#: Element types of the integer operations (dtype names).
INT_TYPES = ("int32", "int64", "uint32", "uint64")
#: Element types of the floating-point ones (add also takes float16).
FLOAT_TYPES = ("float32", "float64")

_KW = ", *, scope='device', order='relaxed'"
_INT = "i32, i64, u32, u64 elements"
_NUM = "i32, i64, u32, u64, f32, f64 elements"


def _rmw(op: str, what: str, types: str) -> Intrinsic:
    return Intrinsic(f"atomic.{op}", f"atomic.{op}(arr, idx, val{_KW}) -> old: atomically "
                     f"set arr[idx] = {what}; returns the old value ({types}).")


atomic = Namespace(
    "atomic",
    add=_rmw("add", "arr[idx] + val", f"{_NUM}; also f16"),
    sub=_rmw("sub", "arr[idx] - val", _NUM),
    min=_rmw("min", "min(arr[idx], val)", _NUM),
    max=_rmw("max", "max(arr[idx], val)", _NUM),
    exch=_rmw("exch", "val", _NUM),
    and_=_rmw("and_", "arr[idx] & val", _INT),
    or_=_rmw("or_", "arr[idx] | val", _INT),
    xor=_rmw("xor", "arr[idx] ^ val", _INT),
    inc=Intrinsic(
        "atomic.inc",
        f"atomic.inc(arr, idx, limit{_KW}) -> old: atomically set arr[idx] = 0 if "
        f"old >= limit else old + 1, comparing as unsigned (CUDA atomicInc; {_INT})."),
    dec=Intrinsic(
        "atomic.dec",
        f"atomic.dec(arr, idx, limit{_KW}) -> old: atomically set arr[idx] = limit if "
        f"old == 0 or old > limit else old - 1, comparing as unsigned (CUDA atomicDec; "
        f"{_INT})."),
    cas=Intrinsic(
        "atomic.cas",
        f"atomic.cas(arr, idx, expected, desired{_KW}) -> old: atomically set arr[idx] = "
        f"desired if arr[idx] == expected; returns the old value either way ({_INT}; "
        f"f32/f64 compare bit patterns)."),
    load=Intrinsic(
        "atomic.load",
        "atomic.load(arr, idx, *, scope='device', order='relaxed') -> value: a single-copy "
        "atomic load (ld.relaxed / ld.acquire); order is 'relaxed' or 'acquire'."),
    store=Intrinsic(
        "atomic.store",
        "atomic.store(arr, idx, val, *, scope='device', order='relaxed'): a single-copy "
        "atomic store (st.relaxed / st.release); order is 'relaxed' or 'release'."),
    add_f16x2=Intrinsic(
        "atomic.add_f16x2",
        f"atomic.add_f16x2(arr, idx, lo, hi{_KW}) -> (old_lo, old_hi): on an f16 array, "
        f"atomically add lo to arr[idx] and hi to arr[idx+1] as one packed 32-bit "
        f"operation (atom.add.noftz.f16x2, sm_60+). idx must be even."),
    add_bf16x2=Intrinsic(
        "atomic.add_bf16x2",
        f"atomic.add_bf16x2(arr, idx, lo, hi{_KW}) -> (old_lo, old_hi): on a u16 array "
        f"holding bf16 bit patterns, atomically add lo to element idx and hi to idx+1 as "
        f"one packed operation (atom.add.noftz.bf16x2, sm_90+). idx must be even; the old "
        f"values come back as f32."),
)
