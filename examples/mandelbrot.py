"""Render the Mandelbrot set with cupric's kernel (one GPU thread per pixel) and write it
as a PNG with a colour map (Pillow), or as a grayscale PGM when Pillow is missing.
Without a GPU the kernel runs on the CPU simulator at a small size (96x54 and at most
64 iterations unless the flags ask for another size, up to 640x360 pixels). The image goes
to out/mandelbrot.png in the checkout unless --out names another file.

    python3 examples/mandelbrot.py [--width 1920 --height 1080] [--center -0.743 0.131]
                                   [--scale 0.02] [--max-iter 1024] [--out FILE.png]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from _common import INSTALL_HINT, on_gpu, output_path, parser, simulator_size

#: Pixels and iterations the CPU simulator renders in a few seconds.
SIMULATOR_MAX_PIXELS = 640 * 360
SIMULATOR_MAX_ITER = 256


def colorize(levels: np.ndarray) -> np.ndarray:
    """RGB from escape levels (0 = inside the set: black), a smooth blue-gold ramp."""
    t = levels.astype(np.float32) / 255.0
    rgb = np.stack([9 * (1 - t) * t ** 3, 15 * (1 - t) ** 2 * t ** 2,
                    8.5 * (1 - t) ** 3 * t], axis=-1)
    rgb = (np.clip(rgb, 0, 1) * 255).astype(np.uint8)
    rgb[levels == 0] = 0
    return rgb


def save(levels: np.ndarray, path) -> str:
    path = str(path)
    try:
        from PIL import Image
    except ImportError:
        pgm = path.rsplit(".", 1)[0] + ".pgm"
        h, w = levels.shape
        with open(pgm, "wb") as fh:
            fh.write(f"P5\n{w} {h}\n255\n".encode())
            fh.write(np.ascontiguousarray(levels).tobytes())
        print(f"Pillow is not installed ({INSTALL_HINT}): wrote a grayscale PGM instead",
              file=sys.stderr)
        return pgm
    Image.fromarray(colorize(levels)).save(path)
    return path


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--width", type=int, default=None, help="default 1920 (GPU)")
    args_parser.add_argument("--height", type=int, default=None, help="default 1080 (GPU)")
    args_parser.add_argument("--center", type=float, nargs=2, default=(-0.5, 0.0))
    args_parser.add_argument("--scale", type=float, default=3.2,
                             help="width of the window in the complex plane")
    args_parser.add_argument("--max-iter", type=int, default=None,
                             help="default 512 (GPU), 64 (simulator)")
    args_parser.add_argument("--out", default=None,
                             help="image file (default: out/mandelbrot.png)")
    args = args_parser.parse_args()
    for flag in ("width", "height", "max_iter"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            args_parser.error(f"--{flag.replace('_', '-')} must be positive")
    from cupric.kernels import image
    gpu = on_gpu("mandelbrot")
    if gpu:
        width, height = args.width or 1920, args.height or 1080
        max_iter = args.max_iter or 512
    else:
        width, height = args.width or 96, args.height or 54
        simulator_size("--width x --height", None if args.width is None and
                       args.height is None else width * height, None, SIMULATOR_MAX_PIXELS,
                       script="mandelbrot.py")
        max_iter = simulator_size("--max-iter", args.max_iter, 64, SIMULATOR_MAX_ITER,
                                  script="mandelbrot.py")
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
    print(f"wrote {save(levels, output_path(args.out, 'mandelbrot.png'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
