"""Copy memory with a kernel written right here (the nvptx how-to's memcpy), beside the
driver's own device-to-device copy: both results checked, both timed on the GPU (GB/s
counts the bytes read plus the bytes written). Without a GPU the kernel runs on the CPU
simulator (at most 1 MiB there).

    python3 examples/memcpy.py [--mib 256]
"""

from __future__ import annotations

import sys

import numpy as np

import cupric
from cupric.device import grid, gridsize
from cupric.types import Array, u32

from _common import gpu_seconds, on_gpu, parser, simulator_size

#: MiB the CPU simulator copies in about a second.
SIMULATOR_MAX_MIB = 1


@cupric.kernel
def copy(src: Array[u32, 1], dst: Array[u32, 1]):
    # A grid-stride loop: any grid covers any length, each thread a word per trip.
    i = grid(1)
    step = gridsize(1)
    while i < len(dst):
        dst[i] = src[i]
        i += step


def main() -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--mib", type=float, default=None,
                             help="MiB to copy (default 256 on a GPU, 0.25 on the "
                             f"simulator, which takes at most {SIMULATOR_MAX_MIB})")
    args = args_parser.parse_args()
    if args.mib is not None and args.mib <= 0:
        args_parser.error("--mib must be positive")
    gpu = on_gpu("memcpy")
    mib = (args.mib or 256) if gpu else simulator_size(
        "--mib", args.mib, 0.25, SIMULATOR_MAX_MIB, script="memcpy.py")
    n = max(1, int(mib * 2**20) // 4)
    src = np.random.default_rng().integers(0, 2**32, n, dtype=np.uint32)
    if not gpu:
        dst = np.zeros(n, np.uint32)
        copy[min(64, (n + 255) // 256), 256](src, dst)
        good = np.array_equal(dst, src)
        print(f"simulator: {n * 4} bytes copied by the kernel; matches the source: {good}")
        return 0 if good else 1
    from cupric.runtime import current_device, empty, to_device
    d_src = to_device(src)
    d_kernel, d_driver = empty(n, np.uint32), empty(n, np.uint32)
    d_kernel.fill(0xDEADBEEF)  # poisoned, so a word the copy misses shows
    d_driver.fill(0xDEADBEEF)
    sms = current_device().multiprocessor_count
    blocks = min(32 * sms, (n + 255) // 256)
    t_kernel = gpu_seconds(lambda: copy[blocks, 256](d_src, d_kernel))
    t_driver = gpu_seconds(lambda: d_driver.copy_from(d_src))
    good = np.array_equal(d_kernel.to_numpy(), src) and \
        np.array_equal(d_driver.to_numpy(), src)
    moved = 2 * n * 4
    print(f"{n * 4 / 2**20:.0f} MiB: kernel {moved / t_kernel / 1e9:7.1f} GB/s, driver copy "
          f"(cuMemcpyDtoD) {moved / t_driver / 1e9:7.1f} GB/s -> kernel at "
          f"{t_driver / t_kernel:.2f}x the driver; both match the source: {good}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
