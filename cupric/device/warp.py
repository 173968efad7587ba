"""Warp-level operations: the 32 lanes of a warp exchanging registers (shfl.sync),
voting (vote.sync), matching values (match.sync) and reducing (redux.sync).

Each takes `mask` first, naming the lanes that take part, as CUDA's `__*_sync`
functions do: every non-exited lane named in `mask` must execute the same operation
with the same mask, and the calling lane must be in it. Lane i is `1 << i`.
"""

from ._intrinsic import Intrinsic, Namespace

__all__ = ["warp"]

_SHFL = ("Values of 32 or 64 bits (ints, floats). `width` (a power of two up to 32) splits "
         "the warp into segments; a lane reading outside its segment, or from a lane not "
         "taking part, gets its own value back.")


def _redux(op: str, what: str) -> Intrinsic:
    return Intrinsic(
        f"warp.reduce_{op}",
        f"warp.reduce_{op}(mask, value) -> result: the {what} of `value` over the lanes in "
        f"`mask`, returned to each of them (redux.sync on sm_80+ for 32-bit integers, "
        f"shuffles otherwise).")


warp = Namespace(
    "warp",
    activemask=Intrinsic(
        "warp.activemask",
        "warp.activemask() -> u32: the mask of lanes of the warp currently executing "
        "together with the caller (activemask.b32)."),
    shfl_idx=Intrinsic(
        "warp.shfl_idx",
        f"warp.shfl_idx(mask, value, src_lane, width=32) -> value of lane src_lane (modulo "
        f"width, within the caller's segment). {_SHFL}"),
    shfl_up=Intrinsic(
        "warp.shfl_up",
        f"warp.shfl_up(mask, value, delta, width=32) -> value of lane (lane - delta); "
        f"lanes below delta in their segment keep their own. {_SHFL}"),
    shfl_down=Intrinsic(
        "warp.shfl_down",
        f"warp.shfl_down(mask, value, delta, width=32) -> value of lane (lane + delta); "
        f"lanes whose source falls past their segment keep their own. {_SHFL}"),
    shfl_xor=Intrinsic(
        "warp.shfl_xor",
        f"warp.shfl_xor(mask, value, lane_mask, width=32) -> value of lane "
        f"(lane ^ lane_mask): the butterfly exchange. {_SHFL}"),
    any=Intrinsic(
        "warp.any",
        "warp.any(mask, pred) -> bool: true if `pred` is true on any lane in `mask`."),
    all=Intrinsic(
        "warp.all",
        "warp.all(mask, pred) -> bool: true if `pred` is true on every lane in `mask`."),
    ballot=Intrinsic(
        "warp.ballot",
        "warp.ballot(mask, pred) -> u32: bit i set when lane i is in `mask` and its `pred` "
        "is true."),
    match_any=Intrinsic(
        "warp.match_any",
        "warp.match_any(mask, value) -> u32: the lanes in `mask` whose `value` equals the "
        "caller's (match.any.sync, sm_70+; 32- or 64-bit values)."),
    match_all=Intrinsic(
        "warp.match_all",
        "warp.match_all(mask, value) -> (u32, bool): (mask, True) when every lane in "
        "`mask` has the same `value`, else (0, False) (match.all.sync, sm_70+)."),
    reduce_add=_redux("add", "sum (wrapping at the value's width)"),
    reduce_min=_redux("min", "minimum"),
    reduce_max=_redux("max", "maximum"),
    reduce_and=_redux("and", "bitwise and"),
    reduce_or=_redux("or", "bitwise or"),
    reduce_xor=_redux("xor", "bitwise xor"),
)
