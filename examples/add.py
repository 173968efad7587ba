"""Add two vectors with a kernel written right here: the first program of the nvptx
how-to, in Python. One GPU thread per element; the result is checked against NumPy.
Without a GPU the same kernel runs on the CPU simulator (at most 100000 elements there).

    python3 examples/add.py [--n 1000000] [--dtype float32]
"""

from __future__ import annotations

import sys

import numpy as np

import cupric
from cupric.device import grid

from _common import gpu_seconds, on_gpu, parser, simulator_size

#: Elements the CPU simulator adds in about a second.
SIMULATOR_MAX_N = 100_000


@cupric.kernel
def add(a, b, out):
    # No annotations: the kernel is compiled once per set of argument types it meets.
    i = grid(1)  # this thread's element: blockIdx.x * blockDim.x + threadIdx.x
    if i < len(out):  # the last block may hang past the end
        out[i] = a[i] + b[i]


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--n", type=int, default=None,
                             help="elements (default 1000000 on a GPU, 10000 on the "
                             f"simulator, which takes at most {SIMULATOR_MAX_N})")
    args_parser.add_argument("--dtype", default="float32",
                             choices=["float32", "float64", "int32", "int64"])
    args = args_parser.parse_args()
    if args.n is not None and args.n < 1:
        args_parser.error("--n must be positive")
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng()
    gpu = on_gpu("add")
    n = (args.n or 1_000_000) if gpu else simulator_size(
        "--n", args.n, 10_000, SIMULATOR_MAX_N, script="add.py")
    a = (rng.standard_normal(n) * 100).astype(dtype)
    b = (rng.standard_normal(n) * 100).astype(dtype)
    block = 256
    blocks = (n + block - 1) // block
    if gpu:
        from cupric.runtime import empty, to_device
        d_a, d_b, d_out = to_device(a), to_device(b), empty(n, dtype)
        d_out.fill(-7)  # poisoned: an element the kernel misses cannot pass the check
        add[blocks, block](d_a, d_b, d_out)
        out = d_out.to_numpy()
        seconds = gpu_seconds(lambda: add[blocks, block](d_a, d_b, d_out))
        moved = 3 * n * dtype.itemsize
        timing = f" in {seconds * 1e6:.1f} us ({moved / seconds / 1e9:.0f} GB/s)"
    else:
        out = np.full(n, -7, dtype)
        add[blocks, block](a, b, out)
        timing = " on the simulator"
    good = np.array_equal(out, a + b)
    print(f"add: {n} {dtype} elements, {blocks} blocks of {block} threads{timing}; "
          f"matches NumPy: {good}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
