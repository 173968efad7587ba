"""`python -m cupric demo`: the main job, end to end.

Compiles the ready kernels of `cupric.kernels` (saxpy, vecadd, mandelbrot) from Python to
PTX through libNVVM, runs them on the GPU (or, without one, on the CPU simulator, saying
so), checks every result against NumPy, and prints a short table. Exits non-zero when a
result is wrong.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _gpu_reason() -> str | None:
    """None when kernels can run on a GPU, else why they will run on the simulator."""
    from cupric.runtime import driver_available

    if not driver_available():
        return "no CUDA driver on this machine"
    from cupric.runtime.device import Device

    if Device.count() == 0:
        return "no CUDA device visible"
    return None


def _compile_report(rows: list, kern, signature: str, arch: str) -> None:
    """Compile `kern` for `signature` to PTX (and cubin when a linker is present)."""
    from cupric.compiler.errors import ToolchainNotFoundError

    started = time.perf_counter()
    try:
        artifact = kern.compile(signature, arch=arch)
    except ToolchainNotFoundError as exc:
        rows.append((f"compile {kern.__name__}", "skipped", str(exc).splitlines()[0]))
        return
    ms = (time.perf_counter() - started) * 1e3
    ptx_lines = artifact.ptx.count("\n")
    what = f"{ptx_lines} PTX lines" + (", cubin" if artifact.cubin else "")
    # A warm kernel cache hands back what an earlier run compiled: say so, since a
    # cache hit's milliseconds are not a compile time.
    if artifact.from_cache:
        label, what = "cache hit", what + " loaded from the kernel cache (not compiled)"
    else:
        label = "compile"
    rows.append((f"{label} {kern.__name__} ({arch})", f"{ms:.1f} ms", what))


def _to_host(array) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.to_numpy()


def _to_device(array: np.ndarray, on_gpu: bool):
    if not on_gpu:
        return array
    from cupric.runtime import memory

    return memory.to_device(array)


def _run_checks(rows: list, on_gpu: bool, n: int, size: tuple[int, int]) -> bool:
    from cupric.kernels import elementwise, image

    rng = np.random.default_rng()
    ok = True

    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    started = time.perf_counter()
    out = _to_host(elementwise.saxpy(np.float32(2.5), _to_device(x, on_gpu),
                                     _to_device(y, on_gpu)))
    seconds = time.perf_counter() - started
    error = float(np.max(np.abs(out - (np.float32(2.5) * x + y))))
    good = error <= 1e-5
    ok &= good
    rows.append((f"saxpy n={n}", "ok" if good else "WRONG",
                 f"max error {error:.1e}, {seconds * 1e3:.1f} ms incl. first launch"))

    a = rng.integers(-1000, 1000, n, dtype=np.int32)
    b = rng.integers(-1000, 1000, n, dtype=np.int32)
    out = _to_host(elementwise.vecadd(_to_device(a, on_gpu), _to_device(b, on_gpu)))
    good = bool(np.array_equal(out, a + b))
    ok &= good
    rows.append((f"vecadd i32 n={n}", "ok" if good else "WRONG", "exact"))

    width, height = size
    max_iter = 64
    started = time.perf_counter()
    img = _to_host(image.mandelbrot(width, height, max_iter=max_iter))
    seconds = time.perf_counter() - started
    reference = _mandelbrot_reference(width, height, max_iter)
    mismatch = float(np.mean(img != reference))
    # Points on the set's boundary may escape one iteration apart when the GPU contracts
    # multiply-adds into FMAs; anything beyond a sliver of pixels is a real error.
    good = img.shape == (height, width) and mismatch < 0.01
    ok &= good
    rows.append((f"mandelbrot {width}x{height}", "ok" if good else "WRONG",
                 f"{mismatch:.2%} pixels differ from NumPy, {seconds * 1e3:.1f} ms"))
    _ascii_preview(img)
    return ok


def _mandelbrot_reference(width: int, height: int, max_iter: int) -> np.ndarray:
    """NumPy escape-time image with the window and value mapping documented by
    `cupric.kernels.image.mandelbrot` (default center and scale)."""
    dx = 3.0 / width
    x0 = -0.5 - dx * (width - 1) / 2
    y0 = dx * (height - 1) / 2
    cr, ci = np.meshgrid(x0 + np.arange(width) * dx, y0 - np.arange(height) * dx)
    zr = np.zeros_like(cr)
    zi = np.zeros_like(ci)
    count = np.zeros(cr.shape, np.int64)
    alive = np.ones(cr.shape, bool)
    for _ in range(max_iter):
        zr2, zi2 = zr * zr, zi * zi
        alive &= (zr2 + zi2) <= 4.0
        zr, zi = (np.where(alive, zr2 - zi2 + cr, zr), np.where(alive, 2.0 * zr * zi + ci, zi))
        count += alive
    return np.where(count >= max_iter, 0, 1 + (254 * count) // max_iter).astype(np.uint8)


def _ascii_preview(img: np.ndarray) -> None:
    """A coarse text rendering: '#' inside the set, shades for slow escapes."""
    rows, cols = 16, 64
    h, w = img.shape
    ramp = " .:-=+*%"
    for r in range(rows):
        line = ""
        for c in range(cols):
            v = int(img[r * h // rows, c * w // cols])
            line += "#" if v == 0 else ramp[min(len(ramp) - 1, v * len(ramp) // 48)]
        print("    " + line)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m cupric demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulator", action="store_true",
                        help="run on the CPU simulator even when a GPU is present")
    args = parser.parse_args(argv)

    reason = "--simulator given" if args.simulator else _gpu_reason()
    on_gpu = reason is None
    if on_gpu:
        from cupric.compiler.target import current_arch

        arch = current_arch()
        print(f"cupric demo: running on the GPU ({arch})")
        n, size = 1 << 24, (1024, 768)
    else:
        import os

        os.environ["CUPRIC_SIMULATOR"] = "1"
        arch = "sm_90"
        print(f"cupric demo: NOTICE: {reason}; kernels are compiled to PTX for {arch} "
              f"but run on the CPU simulator, at small sizes")
        n, size = 4096, (96, 48)

    from cupric.kernels import elementwise, image

    rows: list = []
    _compile_report(rows, elementwise.saxpy_kernel,
                    "f32, Array[f32, 1, 'C'], Array[f32, 1, 'C'], Array[f32, 1, 'C']", arch)
    _compile_report(rows, image.mandelbrot_kernel,
                    "Array[u8, 2, 'C'], f64, f64, f64, f64, i32", arch)
    ok = _run_checks(rows, on_gpu, n, size)
    width = max(len(r[0]) for r in rows)
    print()
    for what, status, detail in rows:
        print(f"{what:<{width}}  {status:<8}  {detail}")
    print("\nall results match NumPy" if ok else "\nSOME RESULTS ARE WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
