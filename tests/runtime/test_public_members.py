"""The public names other packages read instead of the runtime's private members (issue
16): each is the very slot (or method) of the private name, so reads and writes through
either agree and cost the same."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.compiler import launcher
from cupric.kernels import _common
from cupric.runtime.buffer import DeviceBox, DeviceBuffer
from cupric.runtime.errors import ClosedError
from cupric.runtime.memory import borrow_validated
from cupric.runtime.resource import Resource, StreamBoundHandle
from cupric.runtime.stream import Stream

F32 = np.dtype(np.float32)


def record(device=0):
    """The allocation record of a borrow (frees nothing) on `device`."""
    alloc = borrow_validated(0, (0,), (1,), F32, False, None, None).allocation
    alloc.device = device
    return alloc


def test_allocation_ordering_stream_and_view_base_are_the_private_slots():
    for public, private in (("allocation", "_alloc"), ("ordering_stream", "_stream"),
                            ("view_base", "_base")):
        assert DeviceBuffer.__dict__[public] is DeviceBuffer.__dict__[private]
    alloc = record()
    buf = DeviceBuffer.view_of(alloc, 0x1000, (8,), (4,), F32, False, 7)
    assert buf.allocation is buf._alloc is alloc
    assert buf.ordering_stream == buf._stream == buf.stream == 7
    buf.ordering_stream = 9
    assert buf._stream == buf.stream == 9
    other = record()
    buf.allocation = other
    assert buf._alloc is other


def test_view_of_is_what_make_was():
    assert DeviceBuffer.view_of.__func__ is DeviceBuffer._make.__func__
    alloc = record(1)
    owner = DeviceBuffer.view_of(alloc, 0x2000, (4, 6), (24, 4), F32, True, None)
    view = DeviceBuffer.view_of(alloc, 0x2008, (6,), (4,), F32, True, 3, base=owner)
    assert (view.ptr, view.shape, view.strides, view.dtype) == (0x2008, (6,), (4,), F32)
    assert (view.size, view.nbytes, view.ndim, view.itemsize) == (6, 24, 1, 4)
    assert view.readonly and view.stream == 3 and view.device == 1
    assert view.base is view.view_base is view._base is owner
    assert owner.base is None and owner.size == 24 and owner.nbytes == 96
    box = DeviceBuffer.view_of(alloc, 0x3000, (), (), F32, False, None, cls=DeviceBox)
    assert type(box) is DeviceBox and box.size == 1 and box.ndim == 0


def test_check_open_and_closed_read_the_allocation_flag():
    alloc = record()
    buf = DeviceBuffer.view_of(alloc, 0x1000, (8,), (4,), F32, False, None)
    buf.check_open()
    assert buf.allocation.closed is False and not buf.closed
    alloc.close()  # borrowed: frees nothing, marks the record closed
    assert buf.allocation.closed is alloc._closed is True and buf.closed
    with pytest.raises(ClosedError, match="closed"):
        buf.check_open()
    assert DeviceBuffer._check_open is DeviceBuffer.check_open


def test_resource_closed_and_ptr_are_slots():
    assert Resource.closed is Resource.__dict__["_closed"]
    stream = Stream.__new__(Stream)
    stream._ptr, stream._closed = 0x5000, False
    assert stream.ptr == 0x5000 and stream.closed is False
    stream._closed = True
    assert stream.closed is True


def test_stream_bound_handle_slots():
    for public, private in (("stream", "_stream_ptr"), ("multi_device", "_multi"),
                            ("owned", "_owned")):
        assert StreamBoundHandle.__dict__[public] is StreamBoundHandle.__dict__[private]


class FakeKernel:
    """What `launch_now` reads of a kernel: its launcher chain and its general path."""

    def __init__(self, fast):
        self._fast = fast
        self.general = []

    def _launch(self, *call):
        self.general.append(call)


def test_launch_now_takes_the_launcher_else_the_general_path():
    assert _common.launch_now is launcher.launch_now
    calls = []

    def fast(*call):
        calls.append(("first", call))

    def other(*call):
        calls.append(("other", call))

    fast.dispatch = None
    kern = FakeKernel(fast)
    launcher.launch_now(kern, 1, 32, None, 0, (1.0,))
    assert calls == [("first", (1, 32, None, 0, (1.0,)))] and not kern.general
    fast.dispatch = (0, {int: other})  # several array kinds: the first argument's class
    launcher.launch_now(kern, 2, 64, 5, 8, (3, 4))
    assert calls[-1] == ("other", (2, 64, 5, 8, (3, 4)))
    bare = FakeKernel(None)
    launcher.launch_now(bare, 1, 1, None, 0, ())
    assert bare.general == [(1, 1, None, 0, ())]
