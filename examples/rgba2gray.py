"""RGBA to grayscale on a real photograph: cupric's kernel on the GPU against NumPy on
the CPU, with timings of both (and the kernel's bandwidth).

The image comes from a package that ships one: matplotlib's sample data (Grace Hopper,
read with Pillow) or scikit-image's astronaut; without either, a generated test card is
used. Without a GPU the kernel runs on the CPU simulator on a small crop.

    python3 examples/rgba2gray.py [--out gray.png] [--tile N]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from _common import cpu_seconds, gpu_seconds, on_gpu

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
            print("neither matplotlib+Pillow nor scikit-image is installed (pip install "
                  "cupric[examples]); using a generated test card", file=sys.stderr)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the gray image here (PNG, needs Pillow)")
    parser.add_argument("--tile", type=int, default=8,
                        help="also time the photo tiled N x N times (GPU only)")
    args = parser.parse_args()
    from cupric.kernels import image
    img, source = load_image()
    print(f"image: {source}, {img.shape[1]}x{img.shape[0]} RGBA")
    if on_gpu("rgba2gray"):
        from cupric.runtime import empty, to_device
        d_img = to_device(img)
        d_gray = empty(img.shape[:2], np.uint8)
        gray = image.rgba2gray(d_img, out=d_gray)
        gray = gray.to_numpy()
        t_gpu = gpu_seconds(lambda: image.rgba2gray(d_img, out=d_gray))
        t_cpu = cpu_seconds(lambda: gray_numpy(img))
        mb = 5 * img.shape[0] * img.shape[1] / 1e6
        print(f"GPU (cupric): {t_gpu * 1e6:9.1f} us  ({mb / 1e3 / t_gpu:7.1f} GB/s)")
        print(f"CPU (NumPy):  {t_cpu * 1e6:9.1f} us  -> {t_cpu / t_gpu:.0f}x")
        if args.tile > 1:
            big = np.tile(img, (args.tile, args.tile, 1))
            d_big = to_device(big)
            d_out = empty(big.shape[:2], np.uint8)
            t_gpu = gpu_seconds(lambda: image.rgba2gray(d_big, out=d_out))
            t_cpu = cpu_seconds(lambda: gray_numpy(big), repeats=1)
            mb = 5 * big.shape[0] * big.shape[1] / 1e6
            print(f"tiled {args.tile}x{args.tile} ({big.shape[1]}x{big.shape[0]}): GPU "
                  f"{t_gpu * 1e3:.3f} ms ({mb / 1e3 / t_gpu:.0f} GB/s), CPU "
                  f"{t_cpu * 1e3:.1f} ms -> {t_cpu / t_gpu:.0f}x")
    else:
        img = np.ascontiguousarray(img[:48, :64])
        t_sim = cpu_seconds(lambda: image.rgba2gray(img), repeats=1)
        gray = image.rgba2gray(img)
        t_cpu = cpu_seconds(lambda: gray_numpy(img))
        print(f"simulator: {t_sim * 1e3:.1f} ms for a 64x48 crop (NumPy: "
              f"{t_cpu * 1e6:.0f} us); the simulator is for testing, not speed")
    diff = np.abs(gray.astype(int) - gray_numpy(img).astype(int)).max()
    print(f"largest difference from NumPy: {diff} gray level(s)")
    if args.out:
        try:
            from PIL import Image
        except ImportError:
            print("writing a PNG needs Pillow: pip install pillow", file=sys.stderr)
            return 1
        Image.fromarray(gray).save(args.out)
        print(f"wrote {args.out}")
    return 0 if diff <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
