"""Small GPU workloads for the sanitizer lane (`tools/sanitizer_lane.sh`): each runs every
ready kernel, the gpu_rand fills or the examples once, at sizes small enough for
compute-sanitizer's instrumentation (10-100x slower), with odd sizes that reach the
kernels' edge handling, and checks results against NumPy so that a kernel that stops
working under the tool is seen too.

    python3 tools/sanitizer_workload.py kernels|rand|examples|all
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np


def _host(x) -> np.ndarray:
    return x.to_numpy() if hasattr(x, "to_numpy") else np.asarray(x)


def _close(got, want, what, tol=1e-5):
    got, want = np.asarray(_host(got), np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30) if want.size else 0.0
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3g}")


def kernels(rng) -> None:
    """Every host function of `cupric.kernels`, once each, on device arrays."""
    import cupric
    import cupric.kernels as K
    from cupric import runtime as rt

    n = 4099  # not a multiple of any block size: the tails run
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx, dy = rt.to_device(x), rt.to_device(y)
    _close(K.vecadd(dx, dy).to_numpy(), x + y, "vecadd")
    _close(K.saxpy(2.0, dx, dy).to_numpy(), 2 * x + y, "saxpy")
    _close(K.memcpy(dx).to_numpy(), x, "memcpy", 0)
    filled = rt.empty(n, np.float32)
    K.fill(filled, 3.5)
    _close(filled.to_numpy(), np.full(n, 3.5), "fill", 0)

    @cupric.device_function
    def mad(a, b):
        return a * b + 1.0

    _close(K.map(mad, dx, dy).to_numpy(), x * y + 1, "map")
    for name, ref in (("sum", x.astype(np.float64).sum()), ("min", x.min()), ("max", x.max()),
                      ("argmin", x.argmin()), ("argmax", x.argmax())):
        _close(getattr(K, name)(dx), ref, name, 1e-4)
    _close(K.dot(dx, dy), x.astype(np.float64) @ y, "dot", 1e-4)
    _close(K.inclusive_scan(dx).to_numpy(), np.cumsum(x, dtype=np.float64), "scan", 1e-3)
    _close(K.exclusive_scan(dx).to_numpy(),
           np.concatenate([[0], np.cumsum(x, dtype=np.float64)[:-1]]), "exclusive scan", 1e-3)
    a = rng.standard_normal((67, 45)).astype(np.float32)
    b = rng.standard_normal((45, 33)).astype(np.float32)
    _close(K.transpose(rt.to_device(a)).to_numpy(), a.T, "transpose", 0)
    for algorithm in ("blocked", "tiled"):
        _close(K.gemm(rt.to_device(a), rt.to_device(b), algorithm=algorithm).to_numpy(),
               a.astype(np.float64) @ b, f"gemm {algorithm}", 1e-4)
    _close(K.dgemm(rt.to_device(a.astype(np.float64)), rt.to_device(b.astype(np.float64)))
           .to_numpy(), a.astype(np.float64) @ b, "dgemm", 1e-12)
    keys = rng.integers(0, 1 << 30, 3001).astype(np.uint32)
    _close(K.bitonic_sort(rt.to_device(keys)).to_numpy(), np.sort(keys), "bitonic sort", 0)
    _close(K.radix_sort(rt.to_device(keys)).to_numpy(), np.sort(keys), "radix sort", 0)
    _close(K.radix_sort(dx).to_numpy(), np.sort(x), "radix sort f32", 0)
    counts, _edges = K.histogram(dx, 17, (-2.0, 2.0))
    _close(counts, np.histogram(x, 17, (-2.0, 2.0))[0], "histogram", 0)
    rgba = rng.integers(0, 256, (31, 45, 4), dtype=np.uint8)
    gray = K.rgba2gray(rt.to_device(rgba)).to_numpy()
    want = rgba[..., :3].astype(np.float64) @ [0.299, 0.587, 0.114]
    assert np.abs(gray.astype(np.float64) - want).max() <= 1, "rgba2gray"
    image = K.mandelbrot(64, 48, max_iter=64)
    assert _host(image).shape == (48, 64) and _host(image).max() > 0, "mandelbrot"
    rt.synchronize()


def rand(rng) -> None:
    """Every gpu_rand algorithm's uniform, normal and bits fills, against the host half."""
    from cupric import runtime as rt
    from cupric.gpu_rand import ALGORITHMS, Generator

    for name in sorted(ALGORITHMS):
        seed = int(rng.integers(0, 2**63))
        dev, host = Generator(seed, algorithm=name, streams=257), \
            Generator(seed, algorithm=name, streams=257)
        out = rt.to_device(np.full(5003, np.nan, np.float32))
        dev.random(out=out)
        assert np.array_equal(out.to_numpy(), host.random(5003, dtype=np.float32)), name
        out = rt.to_device(np.full(2001, np.nan, np.float64))
        dev.standard_normal(out=out)
        _close(out.to_numpy(), host.standard_normal(2001), f"{name} normal", 1e-12)
        bits = rt.to_device(np.zeros(1001, np.uint64))
        dev.bits(out=bits)
        assert np.array_equal(bits.to_numpy(), host.bits(1001)), f"{name} bits"
    rt.synchronize()


EXAMPLES = [
    ["add.py", "--n", "10007"],
    ["bitonic_sort.py", "--n", "4096"],
    ["gemm.py", "--size", "96"],
    ["mandelbrot.py", "--width", "96", "--height", "64", "--max-iter", "64"],
    ["memcpy.py", "--mib", "1"],
    ["monte_carlo.py", "--threads", "512", "--paths", "4096"],
    ["rgba2gray.py"],
    ["path_tracer.py", "--backend", "cuda", "--width", "48", "--height", "32", "--spp", "2"],
]


def examples(rng) -> None:
    """The examples at small sizes, each in this process's sanitizer session (children are
    followed by compute-sanitizer's default --target-processes all)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
    failed = []
    for argv in EXAMPLES:
        proc = subprocess.run([sys.executable, os.path.join(root, argv[0]), *argv[1:]],
                              capture_output=True, text=True, cwd=os.environ.get("TMPDIR",
                                                                                   "/tmp"))
        print(f"example {' '.join(argv)}: rc {proc.returncode}")
        if proc.returncode:
            failed.append(f"{argv[0]}: {proc.stderr[-800:]}")
    if failed:
        raise AssertionError("examples failed:\n" + "\n".join(failed))


WORKLOADS = {"kernels": kernels, "rand": rand, "examples": examples}


def main(argv) -> int:
    names = list(WORKLOADS) if not argv or argv == ["all"] else argv
    rng = np.random.default_rng(int(os.environ.get("SEED", "20")))
    for name in names:
        WORKLOADS[name](rng)
        print(f"workload {name}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
