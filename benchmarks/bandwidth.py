"""Copy bandwidth of cupric.runtime beside CuPy, in one process run.

Host-to-device and device-to-host from/to pinned memory (256 MiB) and device-to-device
(1 GiB), queued on one non-blocking stream and timed with CUDA events: 3 warm-up copies,
then 20 timed repeats of 4 back-to-back copies, alternating cupric and CuPy, median
reported. CuPy's side is the raw `cudaMemcpyAsync` it exposes.
D2D counts read + write bytes (as the peer baseline does); H2D/D2H count the bytes moved.

    python3 benchmarks/bandwidth.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from _common import assert_on_device, table

MIB = 1 << 20
WARMUP = 3
REPEATS = 20
BATCH = 4


def _timed(cp, stream, fn) -> float:
    """Seconds per copy of BATCH back-to-back copies between two events (the host cost
    of queuing copies 2..BATCH overlaps with the device running the earlier ones)."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    for _ in range(BATCH):
        fn()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3 / BATCH


def _compare(cp, stream, ours, theirs, nbytes) -> dict:
    for _ in range(WARMUP):
        ours()
        theirs()
    stream.synchronize()
    mine, peer = [], []
    for _ in range(REPEATS):
        mine.append(_timed(cp, stream, ours))
        peer.append(_timed(cp, stream, theirs))
    ours_gbps = nbytes / statistics.median(mine) / 1e9
    cupy_gbps = nbytes / statistics.median(peer) / 1e9
    return {"cupric_GBps": ours_gbps, "cupy_GBps": cupy_gbps, "ratio": ours_gbps / cupy_gbps}


def run(json_path: str | None = None) -> dict:
    """Measure and return {"h2d_pinned": {...}, "d2h_pinned": {...}, "d2d": {...}}.

    Each entry has ``cupric_GBps``, ``cupy_GBps`` and ``ratio`` (cupric / CuPy; goal
    >= 0.98). Writes the dict as JSON to `json_path` when given.
    """
    import cupy as cp
    import cupyx

    from cupric import runtime as rt
    from cupric.runtime import host, memory

    rt.Device(0).make_current()
    stream = cp.cuda.Stream(non_blocking=True)
    handle = stream.ptr  # cupric takes raw stream handles: both sides share one stream
    results: dict = {"device": rt.Device(0).name}

    # Host <-> device, pinned, 256 MiB.
    n = 256 * MIB
    data = np.random.default_rng().integers(0, 255, n, dtype=np.uint8)
    ours_host = host.pinned_array(data)
    ours_dev = memory.empty(n, np.uint8)
    cupy_host = cupyx.empty_pinned(n, np.uint8)
    cupy_host[...] = data
    cupy_dev = cp.empty(n, np.uint8)
    runtime_api = cp.cuda.runtime
    cupy_host_ptr = cupy_host.ctypes.data
    expect = cp.asarray(data)
    ours_view = cp.asarray(ours_dev)  # the same memory, through the CUDA Array Interface

    def copy_checked(label, copy, read, poisoned):
        # Poison the destination, copy once, compare every byte before any timing.
        assert_on_device(f"{label} copy", copy, read, reset=poisoned)
        results.setdefault("checked", []).append(label)

    h2d_ours = lambda: ours_dev.copy_from(ours_host, stream=handle)  # noqa: E731
    h2d_cupy = lambda: runtime_api.memcpyAsync(  # noqa: E731
        cupy_dev.data.ptr, cupy_host_ptr, n, runtime_api.memcpyHostToDevice, handle)
    copy_checked("h2d cupric", h2d_ours, lambda: cp.array_equal(ours_view, expect),
                 lambda: ours_view.fill(0))
    copy_checked("h2d CuPy", h2d_cupy, lambda: cp.array_equal(cupy_dev, expect),
                 lambda: cupy_dev.fill(0))
    d2h_ours = lambda: ours_dev.copy_to(ours_host, stream=handle)  # noqa: E731
    d2h_cupy = lambda: runtime_api.memcpyAsync(  # noqa: E731
        cupy_host_ptr, cupy_dev.data.ptr, n, runtime_api.memcpyDeviceToHost, handle)
    copy_checked("d2h cupric", d2h_ours, lambda: np.array_equal(ours_host.array, data),
                 lambda: ours_host.array.fill(0))
    copy_checked("d2h CuPy", d2h_cupy, lambda: np.array_equal(cupy_host, data),
                 lambda: cupy_host.fill(0))
    del expect, ours_view
    results["h2d_pinned"] = _compare(
        cp, stream,
        lambda: ours_dev.copy_from(ours_host, stream=handle),
        lambda: runtime_api.memcpyAsync(cupy_dev.data.ptr, cupy_host_ptr, n,
                                        runtime_api.memcpyHostToDevice, handle), n)
    results["d2h_pinned"] = _compare(
        cp, stream,
        lambda: ours_dev.copy_to(ours_host, stream=handle),
        lambda: runtime_api.memcpyAsync(cupy_host_ptr, cupy_dev.data.ptr, n,
                                        runtime_api.memcpyDeviceToHost, handle), n)
    stream.synchronize()
    ours_dev.close()
    ours_host.close()
    cupy_dev = cupy_host = None  # free before the 1 GiB buffers

    # Device -> device, 1 GiB.
    n = 1024 * MIB
    src = memory.empty(n, np.uint8)
    dst = memory.empty(n, np.uint8)
    src_view, dst_view = cp.asarray(src), cp.asarray(dst)
    src_view[...] = cp.random.default_rng(5).integers(0, 255, n, dtype=np.uint8)
    csrc = src_view.copy()
    cdst = cp.empty(n, np.uint8)
    kind = cp.cuda.runtime.memcpyDeviceToDevice
    copy_checked("d2d cupric", lambda: dst.copy_from(src, stream=handle),
                 lambda: cp.array_equal(dst_view, csrc), lambda: dst_view.fill(0))
    copy_checked("d2d CuPy", lambda: cp.cuda.runtime.memcpyAsync(
        cdst.data.ptr, csrc.data.ptr, n, kind, handle),
        lambda: cp.array_equal(cdst, csrc), lambda: cdst.fill(0))
    del src_view, dst_view
    results["d2d"] = _compare(
        cp, stream,
        lambda: dst.copy_from(src, stream=handle),
        lambda: cp.cuda.runtime.memcpyAsync(cdst.data.ptr, csrc.data.ptr, n, kind, handle),
        2 * n)
    stream.synchronize()
    src.close()
    dst.close()

    results["title"] = "Copies through cupric.runtime"
    results["method"] = ("Pinned host to device and back (256 MiB) and device to device "
                         "(1 GiB, read + write counted), cupric and CuPy's raw "
                         "cudaMemcpyAsync on one stream; every copy checked byte for byte "
                         f"before timing; {REPEATS} samples of {BATCH} back-to-back copies "
                         "between events, alternating, medians.")
    results["tables"] = [table("GB/s", [("copy", ""), ("cupric", ".2f"), ("CuPy", ".2f"),
                                         ("cupric / CuPy", ".3f")],
                               [[k, results[k]["cupric_GBps"], results[k]["cupy_GBps"],
                                 results[k]["ratio"]]
                                for k in ("h2d_pinned", "d2h_pinned", "d2d")])]
    _print(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


def _print(results: dict) -> None:
    print(f"bandwidth on {results['device']} (median of {REPEATS}, GB/s)")
    print(f"{'copy':14s} {'cupric':>10s} {'cupy':>10s} {'ratio':>7s}")
    for key in ("h2d_pinned", "d2h_pinned", "d2d"):
        r = results[key]
        print(f"{key:14s} {r['cupric_GBps']:10.1f} {r['cupy_GBps']:10.1f} {r['ratio']:7.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    run(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
