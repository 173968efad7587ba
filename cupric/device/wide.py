"""Compile-time loop unrolling and wide memory access, the building blocks of the
elementwise templates (`cupric.kernels.templates`): a CUDA thread that moves several
neighbouring elements per access keeps more bytes in flight than one moving one.

`for k in unroll(4):` is expanded by the compiler into four copies of its body with `k`
the constant 0, 1, 2, 3 (so `values[k]` may index a tuple); on the simulator it is a
plain loop. `vload(a, j, 4)` reads a[j], ..., a[j+3] as a tuple and `vstore(a, j, values)`
writes a tuple back; when the launch finds the arrays 16-byte aligned and `j` is a
multiple of the width, the compiler merges the accesses into one `ld.global.v4` /
`st.global.v4` (as CUDA C's float4 loads), else they stay single-element accesses.

None of them needs a thread: called from ordinary Python (a device function run as plain
Python, as gpu_rand's fills are in tests) they are `range(n)` and element accesses.
"""

from ._intrinsic import Intrinsic, current

__all__ = ["unroll", "vload", "vstore", "WIDTHS", "MAX_UNROLL"]

#: Widths `vload` takes (1 is the scalar access, so templates may pick the width).
WIDTHS = (1, 2, 4, 8)
#: The largest trip count `unroll` expands (beyond it the code only grows).
MAX_UNROLL = 64

def _range(n):
    return range(int(n))


def _load(a, j, width):
    j = int(j)
    return tuple(a[j + k] for k in range(int(width)))


def _store(a, j, values):
    j = int(j)
    for k, v in enumerate(values):
        a[j + k] = v


class _Pure(Intrinsic):
    """An intrinsic with the same meaning inside and outside a kernel: outside, `python`
    runs (inside the simulator, its implementation, which calls the same function)."""

    __slots__ = ("python",)

    def __init__(self, name: str, doc: str, python) -> None:
        super().__init__(name, doc)
        self.python = python

    def __call__(self, *args, **kwargs):
        if current() is None:
            return self.python(*args, **kwargs)
        return super().__call__(*args, **kwargs)


unroll = _Pure(
    "unroll",
    "unroll(n) -> range: `for k in unroll(n):` repeats the body n times at compile time "
    "with k the constants 0 .. n-1; n must be a compile-time constant integer (a literal, "
    "or a module or closure constant), the body may not assign k, break or continue.",
    _range)
vload = _Pure(
    "vload",
    "vload(a, j, width) -> tuple: the `width` (1, 2, 4 or 8, a constant) elements "
    "a[j], ..., a[j + width - 1] of a 1-D array; one vector load where alignment allows.",
    _load)
vstore = _Pure(
    "vstore",
    "vstore(a, j, values): a[j + k] = values[k] for each element of the tuple `values` "
    "(length 1, 2, 4 or 8); one vector store where alignment allows.",
    _store)
