"""CPU lane: benchmarks/launch_overhead.py's floor probe (`_launch_backends.floor_probe`)
launches through whatever cuLaunchKernel address the prepared launch's ``c_layout`` names
(here a recorder), with the parameters packed once by that layout, from a C loop and
from one call per launch."""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import cffi
import pytest

SIGNATURE = ("int(uintptr_t, unsigned int, unsigned int, unsigned int, unsigned int, "
             "unsigned int, unsigned int, unsigned int, uintptr_t, void **, void **)")


class _Prepared:
    """What the probe reads of a compiled prepared launch: its ``c_layout``."""

    def __init__(self, address, codes, offsets, sizes):
        self.c_layout = (address, 0x1234, codes, offsets, sizes)


@pytest.fixture
def backends(monkeypatch):
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the floor probe")
    pytest.importorskip("setuptools")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    monkeypatch.delitem(sys.modules, "_launch_backends", raising=False)
    import _launch_backends
    return _launch_backends


def test_the_floor_probe_launches_its_packed_parameters(backends):
    ffi = cffi.FFI()
    calls, answer = [], [0]
    sizes = (8, 8, 4, 4)

    def record(f, gx, gy, gz, bx, by, bz, shared, stream, argv, extra):
        calls.append((f, (gx, gy, gz), (bx, by, bz), shared, stream,
                      [bytes(ffi.buffer(argv[i], n)) for i, n in enumerate(sizes)],
                      extra == ffi.NULL))
        return answer[0]

    callback = ffi.callback(SIGNATURE, record)
    address = int(ffi.cast("uintptr_t", callback))
    prepared = _Prepared(address, "QQfi", (0, 8, 16, 20), sizes)
    probe = backends.floor_probe(prepared, 4, 256, 0x99, (0xABC000, 0xDEF000, 0.5, 1024))
    expect = (0x1234, (4, 1, 1), (256, 1, 1), 0, 0x99,
              [struct.pack("<Q", 0xABC000), struct.pack("<Q", 0xDEF000),
               struct.pack("<f", 0.5), struct.pack("<i", 1024)], True)
    assert probe.once() is None and probe.once_holding_gil() is None
    seconds = probe.loop(3)
    assert isinstance(seconds, float) and seconds >= 0
    assert calls == [expect] * 5
    answer[0] = 700  # a failed launch is an error, not a silent zero
    with pytest.raises(RuntimeError, match="CUresult 700"):
        probe.once()
    with pytest.raises(RuntimeError, match="CUresult 700"):
        probe.loop(2)
    with pytest.raises(ValueError):
        probe.loop(0)
    with pytest.raises(ValueError, match="4 parameters"):
        backends.floor_probe(prepared, 4, 256, 0x99, (1, 2))
    with pytest.raises(RuntimeError, match="c_layout"):
        backends.floor_probe(object(), 4, 256, 0x99, ())
