"""Shared bits of the example scripts: where the kernels run, the simulator's size limits,
where output files go, and timing with CUDA events. (Not an example itself.)"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

#: The command that installs what the examples use (Pillow, matplotlib, ...), run from a
#: cupric checkout (the README's install command with the `examples` extra).
INSTALL_HINT = "python3 -m pip install -e '.[examples]' (from the cupric checkout)"

#: Images and other files the examples write land here unless `--out` says otherwise
#: (git-ignored: `/out/` in the checkout's .gitignore).
OUTPUT_DIR = pathlib.Path(__file__).resolve().parent.parent / "out"


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser whose `--help` shows the script's whole docstring."""
    return argparse.ArgumentParser(description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def output_path(out: str | None, default_name: str) -> pathlib.Path:
    """Where to write: `out` when given, else `out/<default_name>` in the checkout; the
    folder is created."""
    path = pathlib.Path(out) if out else OUTPUT_DIR / default_name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class SimulatorLimitError(SystemExit):
    """A size flag past what the CPU simulator runs in seconds (exit status 2)."""


def simulator_size(flag: str, given, default, limit, *, script: str):
    """The size to run on the simulator: `given` when it is within `limit`, `default`
    when no flag was given; past the limit, exit with a message naming it."""
    if given is None:
        return default
    if given > limit:
        print(f"{script}: {flag} {given} is past the CPU simulator's limit of {limit} "
              f"(no GPU here; the simulator runs every GPU thread in Python): pass "
              f"{flag} {limit} or less, or run on a GPU", file=sys.stderr)
        raise SimulatorLimitError(2)
    return given


def on_gpu(what: str) -> bool:
    """True when a GPU runs the kernels; otherwise print the simulator notice once."""
    from cupric.runtime import driver_available
    forced = os.environ.get("CUPRIC_SIMULATOR", "") not in ("", "0")
    if forced or not driver_available():
        reason = "CUPRIC_SIMULATOR is set" if forced else "no CUDA driver on this machine"
        print(f"notice: {reason}; running {what} on the cupric CPU simulator, at small "
              f"sizes (the same kernels run on a GPU when there is one)", file=sys.stderr)
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
