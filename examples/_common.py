"""Shared bits of the example scripts: where the kernels run, and timing with CUDA events.
(Not an example itself.)"""

from __future__ import annotations

import os
import sys
import time


def on_gpu(what: str) -> bool:
    """True when a GPU runs the kernels; otherwise print the simulator notice once."""
    from cupric.runtime import driver_available
    forced = os.environ.get("CUPRIC_SIMULATOR", "") not in ("", "0")
    if forced or not driver_available():
        reason = "CUPRIC_SIMULATOR is set" if forced else "no CUDA driver on this machine"
        print(f"notice: {reason}; running {what} on the cupric CPU simulator, at a small "
              f"size (the same kernels run on a GPU when there is one)", file=sys.stderr)
        return False
    return True


def gpu_seconds(fn, repeats: int = 10) -> float:
    """Median seconds of `fn()` on the device, from CUDA events on the legacy stream."""
    from cupric.runtime import current_device
    device = current_device()
    fn()  # compile (or load from the cache) and warm up
    times = []
    for _ in range(repeats):
        start, end = device.create_event(timing=True), device.create_event(timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def cpu_seconds(fn, repeats: int = 3) -> float:
    """Median wall-clock seconds of `fn()` on the host."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]
