"""The same bitonic sort, the same Python kernels, run twice: on the GPU (compiled
through libNVVM) and on the CPU simulator (the Python functions themselves, with GPU
semantics). Both results are checked against NumPy. Without a GPU only the simulator
runs.

    python3 examples/bitonic_sort.py [--n 1000000] [--dtype float32] [--descending]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np

from _common import on_gpu


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="keys sorted on the GPU")
    parser.add_argument("--sim-n", type=int, default=3000, help="keys on the simulator")
    parser.add_argument("--dtype", default="float32", choices=["float32", "int32", "uint32"])
    parser.add_argument("--descending", action="store_true")
    args = parser.parse_args()
    from cupric.kernels import sort
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng()
    ok = True
    if on_gpu("the bitonic sort"):
        from cupric.runtime import synchronize, to_device
        x = random_keys(rng, args.n, dtype)
        d = to_device(x)
        sort.bitonic_sort(d, descending=args.descending)  # compile or load from the cache
        synchronize()
        t0 = time.perf_counter()
        out = sort.bitonic_sort(d, descending=args.descending)
        synchronize()
        t = time.perf_counter() - t0
        good = np.array_equal(out.to_numpy(), reference(x, args.descending))
        ok &= good
        print(f"GPU:       {args.n} {dtype} keys in {t * 1e3:.2f} ms "
              f"({args.n / t / 1e9:.2f} Gkeys/s); matches NumPy: {good}")
    x = random_keys(rng, args.sim_n, dtype)
    with simulator():
        t0 = time.perf_counter()
        out = sort.bitonic_sort(x, descending=args.descending)
        t = time.perf_counter() - t0
    good = np.array_equal(out, reference(x, args.descending))
    ok &= good
    print(f"simulator: {args.sim_n} {dtype} keys in {t:.2f} s; matches NumPy: {good}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
