"""Render the Mandelbrot set with cupric's kernel (one GPU thread per pixel) and write it
as a PNG with a colour map (Pillow), or as a grayscale PGM when Pillow is missing.
Without a GPU the kernel runs on the CPU simulator at a small size.

    python3 examples/mandelbrot.py [--width 1920 --height 1080] [--center -0.743 0.131]
                                   [--scale 0.02] [--max-iter 1024] [--out mandelbrot.png]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from _common import on_gpu


def colorize(levels: np.ndarray) -> np.ndarray:
    """RGB from escape levels (0 = inside the set: black), a smooth blue-gold ramp."""
    t = levels.astype(np.float32) / 255.0
    rgb = np.stack([9 * (1 - t) * t ** 3, 15 * (1 - t) ** 2 * t ** 2,
                    8.5 * (1 - t) ** 3 * t], axis=-1)
    rgb = (np.clip(rgb, 0, 1) * 255).astype(np.uint8)
    rgb[levels == 0] = 0
    return rgb


def save(levels: np.ndarray, path: str) -> str:
    try:
        from PIL import Image
    except ImportError:
        pgm = path.rsplit(".", 1)[0] + ".pgm"
        h, w = levels.shape
        with open(pgm, "wb") as fh:
            fh.write(f"P5\n{w} {h}\n255\n".encode())
            fh.write(np.ascontiguousarray(levels).tobytes())
        print("Pillow is not installed (pip install pillow): wrote a grayscale PGM instead",
              file=sys.stderr)
        return pgm
    Image.fromarray(colorize(levels)).save(path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--center", type=float, nargs=2, default=(-0.5, 0.0))
    parser.add_argument("--scale", type=float, default=3.2)
    parser.add_argument("--max-iter", type=int, default=512)
    parser.add_argument("--out", default="mandelbrot.png")
    args = parser.parse_args()
    from cupric.kernels import image
    width, height, max_iter = args.width, args.height, args.max_iter
    gpu = on_gpu("mandelbrot")
    if not gpu:
        width, height, max_iter = 96, 54, min(max_iter, 64)
    t0 = time.perf_counter()
    levels = image.mandelbrot(width, height, center=tuple(args.center), scale=args.scale,
                              max_iter=max_iter)
    if gpu:
        from cupric.runtime import synchronize
        synchronize()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        image.mandelbrot(width, height, center=tuple(args.center), scale=args.scale,
                         max_iter=max_iter, out=levels)
        synchronize()
        again = time.perf_counter() - t0
        print(f"{width}x{height}, {max_iter} iterations: first call {first * 1e3:.1f} ms "
              f"(compiles or loads from the cache), then {again * 1e3:.2f} ms")
        levels = levels.to_numpy()
    else:
        print(f"{width}x{height}, {max_iter} iterations on the simulator: "
              f"{time.perf_counter() - t0:.2f} s")
    inside = float(np.mean(levels == 0))
    print(f"{100 * inside:.1f}% of the pixels are in the set")
    print(f"wrote {save(levels, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
