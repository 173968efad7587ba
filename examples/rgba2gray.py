"""RGBA to grayscale on a real photograph: cupric's kernel on the GPU against NumPy on
the CPU, with the GPU's time broken down by phase (allocate, copy in, kernel, copy out,
free, total) beside NumPy's.

The image comes from a package that ships one: matplotlib's sample data (Grace Hopper,
read with Pillow) or scikit-image's astronaut; without either, a generated test card is
used. Without a GPU the kernel runs on the CPU simulator on a small crop. The gray image
goes to out/rgba2gray.png in the checkout unless --out names another file.

    python3 examples/rgba2gray.py [--out gray.png] [--tile N]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from _common import INSTALL_HINT, cpu_seconds, on_gpu, output_path, parser

WEIGHTS = np.array([0.299, 0.587, 0.114], np.float32)


def load_image() -> tuple[np.ndarray, str]:
    """An (h, w, 4) uint8 RGBA photograph, and where it came from."""
    try:
        import matplotlib.cbook
        from PIL import Image
        with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as fh:
            rgb = np.asarray(Image.open(fh).convert("RGB"))
        source = "matplotlib sample data: grace_hopper.jpg"
    except (ImportError, OSError, ValueError):
        try:
            from skimage import data
            rgb = data.astronaut()
            source = "scikit-image: data.astronaut()"
        except ImportError:
            print(f"neither matplotlib+Pillow nor scikit-image is installed "
                  f"({INSTALL_HINT}); using a generated test card", file=sys.stderr)
            return test_card(768, 1024), "generated test card"
    alpha = np.full(rgb.shape[:2] + (1,), 255, np.uint8)
    return np.ascontiguousarray(np.concatenate([rgb, alpha], axis=2)), source


def test_card(h: int, w: int) -> np.ndarray:
    """Colour gradients with noise: an RGBA image with every channel varying."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rng = np.random.default_rng(0)
    r = 255 * x / w
    g = 255 * y / h
    b = 127.5 * (1 + np.sin(x / 37) * np.cos(y / 23))
    img = np.stack([r, g, b, np.full_like(r, 255)], axis=2) + rng.normal(0, 8, (h, w, 4))
    return np.clip(img, 0, 255).astype(np.uint8)


def gray_numpy(img: np.ndarray) -> np.ndarray:
    return np.floor(img[..., :3].astype(np.float32) @ WEIGHTS + np.float32(0.5)) \
        .astype(np.uint8)


PHASES = ("allocate", "copy in", "kernel", "copy out", "free")


def gpu_phases(img: np.ndarray, repeats: int = 5) -> tuple[dict, np.ndarray]:
    """Median seconds of each phase of one GPU conversion, as the nvptx how-to breaks it
    down (allocate, copy in, kernel, copy out, free; the total is their sum), and the
    gray image. Each phase ends with the device synchronized, so each is the host-visible
    time of that step alone; the first (compiling or cache-loading) run is not counted."""
    from cupric.kernels import image
    from cupric.runtime import empty, synchronize
    times: dict = {phase: [] for phase in PHASES}
    gray = None
    for attempt in range(repeats + 1):
        clock = [time.perf_counter()]

        def mark():
            synchronize()
            clock.append(time.perf_counter())
        d_img = empty(img.shape, np.uint8)
        d_gray = empty(img.shape[:2], np.uint8)
        mark()
        d_img.copy_from(img)
        mark()
        image.rgba2gray(d_img, out=d_gray)
        mark()
        gray = d_gray.to_numpy()
        mark()
        d_img.close()
        d_gray.close()
        mark()
        if attempt:  # the first run compiles or loads the kernel
            for phase, t0, t1 in zip(PHASES, clock, clock[1:]):
                times[phase].append(t1 - t0)
    medians = {phase: sorted(ts)[len(ts) // 2] for phase, ts in times.items()}
    medians["total"] = sum(medians.values())
    return medians, gray


def print_phases(label: str, phases: dict, t_cpu: float, pixels: int) -> None:
    """The per-phase table of one image size, the GPU beside NumPy on the CPU."""
    print(f"{label}: GPU (cupric) phases, median of 5, in ms")
    for phase, seconds in phases.items():
        note = ""
        if phase == "kernel":
            note = f"   {5 * pixels / seconds / 1e9:7.1f} GB/s read+write"
        print(f"  {phase:<9} {seconds * 1e3:10.3f}{note}")
    print(f"  CPU (NumPy) {t_cpu * 1e3:8.3f}   -> GPU total {t_cpu / phases['total']:.2f}x, "
          f"kernel alone {t_cpu / phases['kernel']:.0f}x")


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--out", default=None,
                             help="gray image file (PNG, needs Pillow; default: "
                             "out/rgba2gray.png)")
    args_parser.add_argument("--tile", type=int, default=8,
                             help="also time the photo tiled N x N times (GPU only)")
    args = args_parser.parse_args()
    from cupric.kernels import image
    img, source = load_image()
    print(f"image: {source}, {img.shape[1]}x{img.shape[0]} RGBA")
    if on_gpu("rgba2gray"):
        phases, gray = gpu_phases(img)
        t_cpu = cpu_seconds(lambda: gray_numpy(img))
        print_phases(f"{img.shape[1]}x{img.shape[0]}", phases, t_cpu,
                     img.shape[0] * img.shape[1])
        if args.tile > 1:
            big = np.tile(img, (args.tile, args.tile, 1))
            big_phases, big_gray = gpu_phases(big)
            t_big = cpu_seconds(lambda: gray_numpy(big), repeats=1)
            print_phases(f"tiled {args.tile}x{args.tile} ({big.shape[1]}x{big.shape[0]})",
                         big_phases, t_big, big.shape[0] * big.shape[1])
            if not np.array_equal(big_gray, np.tile(gray, (args.tile, args.tile))):
                print("the tiled image's gray levels differ from the photo's", file=sys.stderr)
                return 1
    else:
        img = np.ascontiguousarray(img[:48, :64])
        t_sim = cpu_seconds(lambda: image.rgba2gray(img), repeats=1)
        gray = image.rgba2gray(img)
        t_cpu = cpu_seconds(lambda: gray_numpy(img))
        print(f"simulator: {t_sim * 1e3:.1f} ms for a 64x48 crop (NumPy: "
              f"{t_cpu * 1e6:.0f} us); the simulator is for testing, not speed")
    diff = np.abs(gray.astype(int) - gray_numpy(img).astype(int)).max()
    print(f"largest difference from NumPy: {diff} gray level(s)")
    try:
        from PIL import Image
    except ImportError:
        print(f"writing a PNG needs Pillow ({INSTALL_HINT}); no image written",
              file=sys.stderr)
        return 1 if args.out else (0 if diff <= 1 else 1)
    path = output_path(args.out, "rgba2gray.png")
    Image.fromarray(gray).save(path)
    print(f"wrote {path}")
    return 0 if diff <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
