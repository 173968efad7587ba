"""SGEMM and DGEMM with cupric's register-blocked kernel against cuBLAS (through
cupric.cublas, or CuPy when cupric's cuBLAS bindings cannot be generated here): rate in
TFLOP/s, ratio and largest relative difference. Without a GPU the kernel runs on the
CPU simulator on small matrices against NumPy (70x33 @ 33x50, or --size up to 128).

    python3 examples/gemm.py [--size 4096]
"""

from __future__ import annotations

import sys

import numpy as np

from _common import gpu_seconds, on_gpu, parser, simulator_size

#: Largest n the CPU simulator multiplies (n = 128 takes a few seconds there).
SIMULATOR_MAX_SIZE = 128


def cublas_matmul():
    """(name, matmul(a, b, out)) for cuBLAS on device arrays, FP32 without TF32."""
    try:
        import cupric.cublas as cublas
        from cupric.cublas import numpy_api
        if not cublas.is_available():
            raise ImportError("cuBLAS library not found")
        return "cupric.cublas", lambda a, b, out: numpy_api.matmul(a, b, out,
                                                                   precision="highest")
    except ImportError as exc:
        print(f"cupric.cublas unavailable ({exc}); using CuPy's cuBLAS", file=sys.stderr)
    try:
        import cupy as cp
    except ImportError:
        return None, None

    def cupy_matmul(a, b, out):
        cp.matmul(cp.asarray(a), cp.asarray(b), out=cp.asarray(out))
    return "cupy (cuBLAS)", cupy_matmul


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--size", type=int, default=None,
                             help="n for n x n matrices (default 4096 on a GPU; the "
                             "simulator takes at most %d)" % SIMULATOR_MAX_SIZE)
    args = args_parser.parse_args()
    if args.size is not None and args.size < 1:
        args_parser.error("--size must be positive")
    from cupric.kernels import gemm
    rng = np.random.default_rng()
    if not on_gpu("gemm"):
        n = simulator_size("--size", args.size, None, SIMULATOR_MAX_SIZE,
                           script="gemm.py")
        m, k, cols = (70, 33, 50) if n is None else (n, n, n)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, cols)).astype(np.float32)
        c = gemm.sgemm(a, b)
        err = np.abs(c - a @ b).max() / np.abs(a @ b).max()
        print(f"simulator: {m}x{k} @ {k}x{cols} float32, largest relative difference "
              f"from NumPy {err:.1e}")
        return 0 if err < 1e-5 else 1
    from cupric.runtime import empty, to_device
    name, matmul = cublas_matmul()
    n = args.size or 4096
    status = 0
    for dtype in (np.float32, np.float64):
        a = to_device(rng.standard_normal((n, n)).astype(dtype))
        b = to_device(rng.standard_normal((n, n)).astype(dtype))
        ours = empty((n, n), dtype)
        t_ours = gpu_seconds(lambda: gemm.gemm(a, b, ours), repeats=5)
        flops = 2 * n ** 3
        line = f"{np.dtype(dtype).name} {n}^3: cupric {flops / t_ours / 1e12:6.2f} TFLOP/s"
        if matmul is not None:
            theirs = empty((n, n), dtype)
            t_lib = gpu_seconds(lambda: matmul(a, b, theirs), repeats=5)
            x, y = ours.to_numpy(), theirs.to_numpy()
            err = float(np.abs(x - y).max() / np.abs(y).max())
            line += (f", {name} {flops / t_lib / 1e12:6.2f} TFLOP/s -> "
                     f"{t_lib / t_ours:.2f}x; largest relative difference {err:.1e}")
            status |= err > (1e-4 if dtype == np.float32 else 1e-12)
        print(line)
    return status


if __name__ == "__main__":
    sys.exit(main())
