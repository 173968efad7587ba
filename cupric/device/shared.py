"""Shared memory: per-block scratch memory (PTX `.shared`), visible to every thread of a
block and gone when the block ends. Static arrays have a size known at compile time;
dynamic shared memory is sized by the launch (`shared_bytes`) and read through typed views.
"""

from ._intrinsic import Intrinsic, Namespace

__all__ = ["shared"]

shared = Namespace(
    "shared",
    array=Intrinsic(
        "shared.array",
        "shared.array(shape, dtype) -> array: a statically sized shared-memory array, one "
        "per block and per declaration site; every thread of the block gets the same "
        "array. `shape` is an int or a tuple of compile-time constant ints; `dtype` a "
        "cupric scalar type (f32, i32, ...), a NumPy scalar type or a structured dtype "
        "(a struct). Contents start undefined. The static total of a kernel is limited "
        "to 48 KiB."),
    dynamic=Intrinsic(
        "shared.dynamic",
        "shared.dynamic(dtype, offset=0, count=None) -> 1-D array: a typed view of the "
        "block's dynamic shared memory, whose size in bytes the launch gives "
        "(shared_bytes). The view starts `offset` bytes in (a multiple of the item size) "
        "and holds `count` items, or as many as fit. Views of different types may "
        "overlap: they alias the same bytes, as `extern __shared__` arrays do."),
)
