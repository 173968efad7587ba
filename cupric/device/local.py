"""Per-thread local arrays: fixed-size scratch arrays private to one GPU thread (PTX
`.local`, or registers when the compiler can keep them there).
"""

from ._intrinsic import Intrinsic, Namespace

__all__ = ["local"]

local = Namespace(
    "local",
    array=Intrinsic(
        "local.array",
        "local.array(shape, dtype) -> array: a new array private to the calling thread. "
        "`shape` is an int or a tuple of compile-time constant ints; `dtype` a cupric "
        "scalar type, NumPy scalar type or structured dtype. Contents start undefined."),
)
