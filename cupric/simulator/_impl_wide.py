"""Simulator implementations of `cupric.device.wide`: `unroll` is a plain loop over the
constants (the compiler expands it), `vload`/`vstore` are element accesses, bounds-checked
as any other."""

from __future__ import annotations

from ._state import implements

__all__ = []


@implements("unroll")
def _unroll(s, n):
    return range(int(n))


@implements("vload")
def _vload(s, a, j, width):
    j = int(j)
    return tuple(a[j + k] for k in range(int(width)))


@implements("vstore")
def _vstore(s, a, j, values):
    j = int(j)
    for k, v in enumerate(values):
        a[j + k] = v
