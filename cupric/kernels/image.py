"""Image kernels: RGBA to grayscale (pixels read as 32-bit words, four at a time) and the Mandelbrot
set (one thread per pixel on a 2-D grid). Images are row-major (height, width[, 4])."""

from __future__ import annotations

import numpy as np

import cupric
from cupric.device import grid, gridsize
from cupric.kernels._common import Call
from cupric.types import Array, f32, f64, i32, u8, u32

__all__ = ["rgba2gray", "mandelbrot", "rgba2gray_kernel", "rgba2gray_float_kernel",
           "mandelbrot_kernel", "GRAY_WEIGHTS"]

#: ITU-R BT.601 luma weights of R, G and B (alpha is ignored).
GRAY_WEIGHTS = (0.299, 0.587, 0.114)
BLOCK = 256
MANDELBROT_BLOCK = (32, 8)


@cupric.kernel
def rgba2gray_kernel(pixels: Array[u32, 1], out: Array[u8, 1]):
    """Gray levels of packed RGBA8 pixels (R in the low byte, as little-endian memory
    holds an (h, w, 4) uint8 image), rounded to nearest."""
    n = len(out)
    quads = n >> 2
    i = grid(1)
    step = gridsize(1)
    # Four neighbouring pixels per thread and trip: one 128-bit load, one 32-bit store
    # when the arrays are 16-byte aligned (the launch checks).
    while i + step < quads:
        # Two groups a grid apart per trip: two 128-bit loads in flight per thread.
        j = i * 4
        h = (i + step) * 4
        p0 = pixels[j]
        p1 = pixels[j + 1]
        p2 = pixels[j + 2]
        p3 = pixels[j + 3]
        q0 = pixels[h]
        q1 = pixels[h + 1]
        q2 = pixels[h + 2]
        q3 = pixels[h + 3]
        out[j] = _gray8(p0)
        out[j + 1] = _gray8(p1)
        out[j + 2] = _gray8(p2)
        out[j + 3] = _gray8(p3)
        out[h] = _gray8(q0)
        out[h + 1] = _gray8(q1)
        out[h + 2] = _gray8(q2)
        out[h + 3] = _gray8(q3)
        i += 2 * step
    if i < quads:
        j = i * 4
        p0 = pixels[j]
        p1 = pixels[j + 1]
        p2 = pixels[j + 2]
        p3 = pixels[j + 3]
        out[j] = _gray8(p0)
        out[j + 1] = _gray8(p1)
        out[j + 2] = _gray8(p2)
        out[j + 3] = _gray8(p3)
    k = quads * 4 + grid(1)
    if k < n:
        out[k] = _gray8(pixels[k])


@cupric.device_function
def _gray8(p: u32):
    r = f32(p & 0xFF)
    g = f32((p >> 8) & 0xFF)
    b = f32((p >> 16) & 0xFF)
    # The weights sum to 1, so the result stays within 0..255 and + 0.5 rounds it.
    return u8(f32(0.299) * r + f32(0.587) * g + f32(0.114) * b + f32(0.5))


@cupric.kernel
def rgba2gray_float_kernel(rgba, out):
    """Gray levels of float RGBA pixels, `rgba` of shape (n, 4), `out` of shape (n,)."""
    n = len(out)
    i = grid(1)
    step = gridsize(1)
    while i < n:
        out[i] = 0.299 * rgba[i, 0] + 0.587 * rgba[i, 1] + 0.114 * rgba[i, 2]
        i += step


@cupric.kernel
def mandelbrot_kernel(out: Array[u8, 2], x0: f64, y0: f64, dx: f64, dy: f64, max_iter: i32):
    """out[row, col]: 0 for points of the set (no escape within `max_iter` iterations),
    else 1 + 254 * k // max_iter for a point escaping (|z| > 2) after k iterations.
    Pixel (row, col) is the point x0 + col*dx + i*(y0 + row*dy)."""
    col, row = grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        cx = x0 + col * dx
        cy = y0 + row * dy
        zx = 0.0
        zy = 0.0
        k: i32 = 0
        while k < max_iter:
            zx2 = zx * zx
            zy2 = zy * zy
            if zx2 + zy2 > 4.0:
                break
            zy = 2.0 * zx * zy + cy
            zx = zx2 - zy2 + cx
            k += 1
        if k >= max_iter:
            out[row, col] = 0
        else:
            out[row, col] = u8(1 + (254 * k) // max_iter)


def rgba2gray(rgba, out=None, stream=None):
    """Grayscale of an RGBA image: ``0.299 R + 0.587 G + 0.114 B`` (alpha ignored).

    Parameters
    ----------
    rgba : device array (NumPy array on the simulator), shape (height, width, 4)
        uint8 (C-contiguous; gray levels rounded to nearest) or float32/float64 (any
        strides; no rounding).
    out : device array, optional
        Shape (height, width), uint8 for uint8 images, else the image's dtype.
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new (height, width) array of gray levels.

    Raises
    ------
    TypeError
        Another dtype, or host arrays on a GPU machine.
    ValueError
        Not (h, w, 4); a non-contiguous uint8 image.

    Cost
    ----
    One launch; uint8 images move 5 bytes per pixel (one 32-bit load, one byte store):
    bandwidth-bound.

    Examples
    --------
    >>> gray = rgba2gray(to_device(photo)).to_numpy()   # photo: (h, w, 4) uint8  # doctest: +SKIP
    """
    call = Call("rgba2gray", stream)
    img = call.array(rgba, "rgba", dtypes=(np.dtype("u1"), np.dtype("f4"), np.dtype("f8")),
                     ndim=3)
    if img.shape[2] != 4:
        raise ValueError(f"rgba2gray: rgba must have shape (height, width, 4), got "
                         f"{tuple(img.shape)}")
    h, w = int(img.shape[0]), int(img.shape[1])
    dst, result = call.output(out, "out", (h, w), img.dtype)
    flat_out = call.flat(dst, "out")
    if img.dtype == np.dtype("u1"):
        pixels = call.flat(img, "rgba").view(np.uint32)
        # A grid bounded per SM, not one covering the image: each thread moves only 20
        # bytes per group, and a covering grid measured slower for it (benchmarks/
        # kernels.py times the library's kernel beside its CUDA C twin).
        call.launch(rgba2gray_kernel, call.blocks(h * w, BLOCK, 4), BLOCK, pixels, flat_out)
    else:
        rows = img.reshape(h * w, 4) if h * w else img.reshape(0, 4)
        call.launch(rgba2gray_float_kernel, call.blocks(h * w, BLOCK), BLOCK, rows,
                    flat_out)
    return result


def mandelbrot(width, height, *, center=(-0.5, 0.0), scale=3.0, max_iter=256, out=None,
               stream=None):
    """Render the Mandelbrot set into a uint8 image of shape (height, width).

    Parameters
    ----------
    width, height : int
        Image size in pixels.
    center : (float, float)
        The complex point at the image's center (real, imaginary).
    scale : float
        Width of the view on the real axis; pixels are square, row 0 at the top.
    max_iter : int
        Iterations before a point counts as inside the set.
    out : device array, optional
        uint8, shape (height, width).
    stream : Stream or stream-like, optional

    Returns
    -------
    out, or a new array: 0 inside the set, 1..255 growing with the escape time.

    Cost
    ----
    One launch; up to `max_iter` iterations of 5 float64 operations per pixel
    (compute-bound; H100/H200-class GPUs run float64 at half the float32 rate).

    Examples
    --------
    >>> img = mandelbrot(1920, 1080, center=(-0.743, 0.131), scale=0.01)  # doctest: +SKIP
    """
    width, height, max_iter = int(width), int(height), int(max_iter)
    if width <= 0 or height <= 0 or max_iter <= 0:
        raise ValueError("mandelbrot: width, height and max_iter must be positive")
    call = Call("mandelbrot", stream)
    dst, result = call.output(out, "out", (height, width), np.uint8)
    dx = float(scale) / width
    x0 = float(center[0]) - dx * (width - 1) / 2
    y0 = float(center[1]) + dx * (height - 1) / 2
    bx, by = MANDELBROT_BLOCK
    grid2 = ((width + bx - 1) // bx, (height + by - 1) // by)
    call.launch(mandelbrot_kernel, grid2, MANDELBROT_BLOCK, dst, x0, y0, dx, -dx,
                np.int32(max_iter))
    return result
