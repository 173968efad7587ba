"""CPU lane of the device-side error record (cupric.compiler.device_errors): the IR a
bounds check and an assert emit, and the host's decoding of a record into the raised
DeviceAssertionError (the GPU lane, test_device_errors_gpu.py, faults for real)."""

from __future__ import annotations

import numpy as np

import cupric
from cupric.compiler import device_errors as de
from cupric.device import grid
from cupric.runtime.errors import DeviceAssertionError
from cupric.types import Array, f32, i64


@cupric.kernel(bounds_check=True)
def _gather(x: Array[f32, 2], out: Array[f32, 1], col: i64):
    i = grid(1)
    if i < out.size:
        out[i] = x[i, col]
    assert col >= 0, "negative column"


def _ir():
    return _gather.inspect_ir("Array[f32, 2, 'C'], Array[f32, 1, 'C'], i64")


def test_kernels_with_checks_carry_a_record_and_write_it_first():
    ir = _ir()
    assert f"@{de.RECORD_GLOBAL} = addrspace(1) externally_initialized global i64 0" in ir
    assert "atomicrmw xchg i32 addrspace(1)* @cupric_error_claim" in ir
    assert ir.count("call void @llvm.nvvm.membar.sys()") >= 4  # two per failure site
    # the record is written before the printf fallback and __assertfail
    body = ir[ir.index("error.store:"):]
    assert body.index("membar.sys") < body.index("@vprintf") < body.index("@__assertfail")


def test_kernels_without_checks_carry_none():
    @cupric.kernel
    def plain(x: Array[f32, 1]):
        x[grid(1)] = 1.0
    assert de.RECORD_GLOBAL not in plain.inspect_ir("Array[f32, 1, 'C']")


def _record(kind, line, index, extent, text):
    words = np.zeros(de.WORDS, np.int64)
    words[0] = de.MAGIC
    words[1], words[2], words[3] = kind, line, len(index)
    words[4:4 + len(index)] = index
    words[8:8 + len(extent)] = extent
    words[12:18] = [2, 0, 0, 5, 0, 0]
    raw = text.encode()
    words[18] = len(raw)
    padded = raw + b"\0" * (-len(raw) % 8)
    words[19:19 + len(padded) // 8] = np.frombuffer(padded, np.int64)
    return words


def test_a_written_record_reaches_the_exception(monkeypatch):
    words = _record(de.KIND_BOUNDS, 21, [3, 7], [6, 3], "_gather\0/src/k.py\0x")

    class Buf:
        array = words
    monkeypatch.setattr(de, "_records", {1: (0, Buf())})
    err = DeviceAssertionError(710, "synchronizing")
    de._explain(710, err)
    assert (err.kernel, err.filename, err.line) == ("_gather", "/src/k.py", 21)
    assert err.index == (3, 7) and err.extent == (6, 3)
    assert err.block == (2, 0, 0) and err.thread == (5, 0, 0)
    text = str(err)
    assert "kernel _gather: /src/k.py:21: index (3, 7) out of bounds for array 'x' of " \
           "shape (6, 3) (block (2, 0, 0), thread (5, 0, 0))" in text
    assert "synchronizing" in text
    assert not words.any(), "a record is read once"
    # An empty record leaves the error as it was.
    other = DeviceAssertionError(710, "again")
    de._explain(710, other)
    assert not hasattr(other, "kernel") and str(other).startswith("again")


def test_an_assert_record_reads_as_the_message(monkeypatch):
    words = _record(de.KIND_ASSERT, 9, [], [], "k\0/a.py\0assertion failed: too big")

    class Buf:
        array = words
    monkeypatch.setattr(de, "_records", {1: (0, Buf())})
    err = DeviceAssertionError(710, None)
    de._explain(710, err)
    assert str(err).startswith("kernel k: /a.py:9: assertion failed: too big")


def test_long_paths_are_shortened_from_the_left():
    text = de._text("kern", "/very/long/" * 60 + "file.py", "arr")
    assert len(text) <= (de.WORDS - 19) * 8
    assert text.startswith(b"kern\0...") and b"file.py\0arr" in text
