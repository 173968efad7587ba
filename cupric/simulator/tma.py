"""Tensor maps for the simulator: the CPU twin of `cupric.runtime.tensor_map`, describing a
2-D NumPy array to `cupric.device.tma` copies run by the simulator.

The kernel receives a 16 x u64 array as it would on a GPU (its first word a tag, its
second the map's key); the simulator finds the described array through the key while the
`SimTensorMap` object is alive.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from ..device.tma import check_box, check_copy

__all__ = ["SimTensorMap", "tensor_map", "lookup", "TAG"]

#: The first word of a simulated tensor map ("cupricTM" in ASCII).
TAG = 0x4D54636972707563

_MAPS: "weakref.WeakValueDictionary[int, SimTensorMap]" = weakref.WeakValueDictionary()
_KEYS = itertools.count(1)


class SimTensorMap:
    """A tensor map over a 2-D NumPy array for simulated TMA copies (`tensor_map` makes
    one). `array` is what the kernel takes; `source`, `box` (x then y, elements) and
    `swizzle` (bytes) describe the copies."""

    __slots__ = ("source", "box", "swizzle", "array", "__weakref__")

    def __init__(self, source: np.ndarray, box: tuple, swizzle: int) -> None:
        self.source = source
        self.box = box
        self.swizzle = swizzle
        key = next(_KEYS)
        self.array = np.zeros(16, np.uint64)
        self.array[0], self.array[1] = TAG, key
        _MAPS[key] = self

    def check_copy(self, x, y, shared_address: int, what: str, *, store: bool = False,
                   site: tuple | None = None) -> tuple:
        """(x, y) as ints when the copy engine accepts this map's copy at (x, y) with its
        box at byte `shared_address` of shared memory, else `CopyError` at `site` (the
        kernel's file and line): what faults on a GPU (`cupric.device.tma.check_copy`)."""
        filename, line = site if site is not None else (None, None)
        return check_copy(x, y, self.source.itemsize, shared_address, store=store, what=what,
                          filename=filename, line=line)

    def close(self) -> None:
        """Forget the map (kernels given it afterwards fail to find it)."""
        _MAPS.pop(int(self.array[1]), None)


def tensor_map(source, box, *, swizzle: int = 128) -> SimTensorMap:
    """A simulated tensor map of the 2-D C-contiguous NumPy array `source` with boxes of
    `box` = (x, y) elements (x along the contiguous axis), checked like the driver's.

    Raises
    ------
    TypeError
        `source` is not a 2-D C-contiguous NumPy array of 1, 2, 4 or 8-byte items.
    ValueError
        A box the copy engine refuses (see `cupric.device.tma.check_box`).
    """
    if not isinstance(source, np.ndarray) or source.ndim != 2 or \
            not source.flags.c_contiguous or source.itemsize not in (1, 2, 4, 8):
        raise TypeError("simulator tensor_map: source must be a 2-D C-contiguous NumPy array "
                        "of 1, 2, 4 or 8-byte items")
    box = check_box(tuple(source.shape[::-1]), source.shape[1] * source.itemsize,
                    source.itemsize, box, swizzle)
    return SimTensorMap(source, box, swizzle)


def lookup(words) -> SimTensorMap:
    """The live map whose kernel-side words are `words`; KeyError when there is none."""
    words = np.asarray(words)
    if words.size < 2 or int(words[0]) != TAG:
        raise KeyError("not a simulated tensor map (make one with "
                       "cupric.simulator.tma.tensor_map)")
    found = _MAPS.get(int(words[1]))
    if found is None:
        raise KeyError("the simulated tensor map was closed or collected before the launch")
    return found
