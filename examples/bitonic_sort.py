"""The same bitonic sort, the same Python kernels, run twice: on the GPU (compiled
through libNVVM) and on the CPU simulator (the Python functions themselves, with GPU
semantics). Both results are checked against NumPy. Without a GPU only the simulator
runs, on --n keys when given (at most 16384 there), else on --sim-n.

    python3 examples/bitonic_sort.py [--n 1000000] [--sim-n 3000] [--dtype float32]
                                     [--descending]
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from _common import on_gpu, parser, simulator_size

#: Keys the CPU simulator sorts in a few seconds.
SIMULATOR_MAX_KEYS = 16384


@contextlib.contextmanager
def simulator():
    """Run cupric kernels on the CPU simulator inside the block."""
    old = os.environ.get("CUPRIC_SIMULATOR")
    os.environ["CUPRIC_SIMULATOR"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["CUPRIC_SIMULATOR"]
        else:
            os.environ["CUPRIC_SIMULATOR"] = old


def reference(x: np.ndarray, descending: bool) -> np.ndarray:
    ref = np.sort(x)
    if not descending:
        return ref
    nan = np.isnan(ref) if ref.dtype.kind == "f" else np.zeros(ref.shape, bool)
    return np.concatenate([ref[nan], ref[~nan][::-1]])


def random_keys(rng, n: int, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--n", type=int, default=None,
                             help="keys sorted on the GPU (default 1000000); without a GPU, "
                             f"on the simulator (at most {SIMULATOR_MAX_KEYS})")
    args_parser.add_argument("--sim-n", type=int, default=None,
                             help="keys sorted on the simulator (default 3000)")
    args_parser.add_argument("--dtype", default="float32",
                             choices=["float32", "int32", "uint32"])
    args_parser.add_argument("--descending", action="store_true")
    args = args_parser.parse_args()
    for flag in ("n", "sim_n"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            args_parser.error(f"--{flag.replace('_', '-')} must be positive")
    from cupric.kernels import sort
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng()
    ok = True
    gpu = on_gpu("the bitonic sort")
    if gpu:
        sim_n = simulator_size("--sim-n", args.sim_n, 3000, SIMULATOR_MAX_KEYS,
                               script="bitonic_sort.py")
    else:
        flag = "--n" if args.n is not None else "--sim-n"
        sim_n = simulator_size(flag, args.n if args.n is not None else args.sim_n, 3000,
                               SIMULATOR_MAX_KEYS, script="bitonic_sort.py")
    if gpu:
        from cupric.runtime import synchronize, to_device
        n = args.n or 1_000_000
        x = random_keys(rng, n, dtype)
        d = to_device(x)
        sort.bitonic_sort(d, descending=args.descending)  # compile or load from the cache
        synchronize()
        t0 = time.perf_counter()
        out = sort.bitonic_sort(d, descending=args.descending)
        synchronize()
        t = time.perf_counter() - t0
        good = np.array_equal(out.to_numpy(), reference(x, args.descending))
        ok &= good
        print(f"GPU:       {n} {dtype} keys in {t * 1e3:.2f} ms "
              f"({n / t / 1e9:.2f} Gkeys/s); matches NumPy: {good}")
    x = random_keys(rng, sim_n, dtype)
    with simulator():
        t0 = time.perf_counter()
        out = sort.bitonic_sort(x, descending=args.descending)
        t = time.perf_counter() - t0
    good = np.array_equal(out, reference(x, args.descending))
    ok &= good
    print(f"simulator: {sim_n} {dtype} keys in {t:.2f} s; matches NumPy: {good}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
