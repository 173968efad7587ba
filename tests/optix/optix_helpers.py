"""Helpers of the cupric.optix tests: stand-ins for device arrays and modules, so that
validation and struct packing run on the CPU lane without a driver."""

from __future__ import annotations

import numpy as np


class FakeDeviceArray:
    """What build inputs, launches and the denoiser read of a device array: a device
    address, shape, byte strides and dtype. Nothing is ever dereferenced on the CPU."""

    def __init__(self, shape, dtype, ptr=0x7F0000000000, strides=None) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        if strides is None:
            strides = []
            step = self.dtype.itemsize
            for n in reversed(self.shape):
                strides.append(step)
                step *= n
            strides = tuple(reversed(strides))
        self.strides = tuple(strides)
        self.ptr = ptr
        self.itemsize = self.dtype.itemsize


class FakeModule:
    """A module as program_group_desc sees it: a handle and entry-name resolution."""

    def __init__(self, address: int, entries=(), builtin=None) -> None:
        from cupric.optix import lib
        self.handle = lib.ffi.cast("OptixModule", address)
        self.entries = set(entries)
        self.builtin = builtin

    def entry_name(self, program, kind):
        from cupric.optix.program import PROGRAM_KINDS
        name = program if isinstance(program, str) else program.entry_name
        if not name.startswith(PROGRAM_KINDS[kind]):
            name = PROGRAM_KINDS[kind] + name
        if self.entries and name not in self.entries:
            raise ValueError(f"no program {name}")
        return name


class FakeGroup:
    """A program group as SBT packing sees it: 32 header bytes."""

    def __init__(self, fill: int) -> None:
        self.header = bytes([fill]) * 32

    def pack_header(self) -> bytes:
        return self.header


def struct_bytes(ffi, cdata) -> bytes:
    """The raw bytes of a struct (or array) cdata."""
    return bytes(ffi.buffer(cdata))
