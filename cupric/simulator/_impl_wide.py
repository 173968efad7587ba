"""Simulator implementations of `cupric.device.wide`: the plain Python meaning the
intrinsics have outside kernels too (`unroll` a loop over the constants, which the
compiler expands; `vload`/`vstore` element accesses, bounds-checked as any other)."""

from __future__ import annotations

from ..device import wide
from ._state import implements

__all__ = []

for _intrinsic in (wide.unroll, wide.vload, wide.vstore):
    implements(_intrinsic.name)(lambda s, *args, _python=_intrinsic.python: _python(*args))
