"""Fakes for the CPU lane of cupric.nccl: device arrays that only describe themselves
(``__cuda_array_interface__`` with made-up addresses), and an NCCL function table that
records calls instead of making them."""

from __future__ import annotations

import numpy as np


class FakeDeviceArray:
    """Anything with ``__cuda_array_interface__`` v3: nothing is ever dereferenced."""

    def __init__(self, ptr, shape, dtype=np.float32, strides=None, readonly=False,
                 stream=None):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": np.dtype(dtype).str,
            "data": (ptr, readonly), "strides": strides, "stream": stream}


class RecordingLib:
    """Stands in for ``cupric.nccl.lib.lib``: each NCCL call is recorded and answers
    `status` (ncclSuccess unless told otherwise)."""

    def __init__(self, status=0):
        self.calls = []
        self.status = status

    def __getattr__(self, name):
        if not name.startswith("nccl"):
            raise AttributeError(name)

        def call(*args):
            self.calls.append((name, args))
            return self.status
        return call


def fake_communicator(rank=0, size=4, blocking=True, timeout=5.0):
    """A Communicator over a made-up handle that is never destroyed (borrowed)."""
    from cupric.nccl import CommOptions, Communicator
    return Communicator._blank(0x1000, rank, size, 0,
                               CommOptions(blocking=blocking, timeout=timeout),
                               owned=False, multi=False)


def pointer(lib, cdata) -> int:
    return int(lib.ffi.cast("uintptr_t", cdata))
