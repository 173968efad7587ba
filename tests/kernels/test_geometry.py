"""CPU lane: launch geometry of the ready kernels. Elementwise kernels get a grid that
covers the array once (capped only by CUDA's grid limit, and on the simulator); kernels
that need a bounded grid keep at most WAVES_PER_SM blocks per SM."""

from __future__ import annotations

import pytest

from cupric.kernels import _common
from cupric.kernels._common import (MAX_GRID_X, SIMULATOR_MAX_BLOCKS, WAVES_PER_SM,
                                    blocks_for, covering_blocks)


@pytest.mark.parametrize("n, per_thread, expect", [
    (0, 4, 1), (1, 4, 1), (1024, 4, 1), (1025, 4, 2), (1 << 28, 4, 1 << 18),
    ((1 << 28) + 3, 4, (1 << 18) + 1), (1 << 28, 1, 1 << 20), (257, 1, 2)])
def test_covering_blocks(n, per_thread, expect):
    assert covering_blocks(n, 256, per_thread, simulator=False) == expect


def test_covering_blocks_limits():
    # Past CUDA's 2^31-1 blocks the kernels' grid-stride loops take the rest.
    assert covering_blocks(1 << 45, 256, 4, simulator=False) == MAX_GRID_X
    assert covering_blocks(1 << 28, 256, 4, simulator=True) == SIMULATOR_MAX_BLOCKS
    assert covering_blocks(100, 256, 4, simulator=True) == 1


def test_blocks_for_stays_bounded(monkeypatch):
    monkeypatch.setattr(_common, "_sm_count", lambda ordinal: 132)
    monkeypatch.setattr(_common, "device_ordinal", lambda: 0)
    assert blocks_for(1 << 28, 256, 4, simulator=False) == WAVES_PER_SM * 132
    assert blocks_for(5000, 256, 4, simulator=False) == 5
    assert blocks_for(1 << 28, 256, 4, simulator=True) == SIMULATOR_MAX_BLOCKS


def test_call_geometry_follows_its_simulator_decision(monkeypatch):
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    call = _common.Call("test")
    assert call.covering_blocks(1 << 28, 256, 4) == SIMULATOR_MAX_BLOCKS
    call.simulator = False
    assert call.covering_blocks(1 << 28, 256, 4) == 1 << 18


@pytest.mark.parametrize("dtype, covering", [("f4", True), ("i4", True), ("f8", True),
                                             ("u8", True), ("i2", False), ("u1", False),
                                             ("?", False)])
def test_quad_geometry(monkeypatch, dtype, covering):
    # Four-elements-a-thread kernels: a covering grid for items of 4 bytes or more (vecadd
    # and saxpy with STREAM_BLOCK threads a block), the bounded grid of BLOCK threads for
    # smaller items.
    import numpy as np

    from cupric.kernels import elementwise as ew
    monkeypatch.setattr(_common, "_sm_count", lambda ordinal: 132)
    monkeypatch.setattr(_common, "device_ordinal", lambda: 0)
    call = _common.Call("test")
    call.simulator = False
    out = np.empty((1 << 22) + 3, dtype)
    for block in (ew.STREAM_BLOCK, ew.BLOCK):
        got = ew.quad_geometry(call, out, block)
        if covering:
            assert got == (-(-out.size // (4 * block)), block)
        else:
            assert got == (WAVES_PER_SM * 132, ew.BLOCK)
    call.simulator = True
    assert ew.quad_geometry(call, out, ew.STREAM_BLOCK)[0] == SIMULATOR_MAX_BLOCKS
