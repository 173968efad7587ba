"""Launch limits at exactly the limit and one past it, and the argument-buffer layout.

Every check in `validate_launch` compares a request with a limit; an off-by-one there
(`>` written `>=`) either refuses a legal launch or lets the driver fail it later with a
less useful error, so each limit is tried at the limit (accepted) and one past (refused,
naming the limit). The fakes carry the attributes `validate_launch` reads.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from cupric.runtime import launch as L
from cupric.runtime.errors import LaunchError


class Device:
    max_threads_per_block = 1024
    max_block_dims = (1024, 1024, 64)
    max_grid_dims = (2**31 - 1, 65535, 65535)
    max_shared_memory_per_block_optin = 227 * 1024


class Function:
    name = "k"
    num_regs = 80
    shared_size_bytes = 1024

    def __init__(self, max_threads=1024, dynamic=48 * 1024 - 1024):
        self.device = Device()
        self.max_threads_per_block = max_threads
        self.max_dynamic_shared_size_bytes = dynamic


def ok(fn, grid=1, block=1, shared=0):
    assert L.validate_launch(fn, grid, block, shared) is None


def refused(fn, grid=1, block=1, shared=0, match=""):
    with pytest.raises(LaunchError, match=match):
        L.validate_launch(fn, grid, block, shared)


@pytest.mark.parametrize("block", [768, (768,), (16, 16, 3), (3, 256), (1, 1, 48)])
def test_block_of_exactly_the_kernels_thread_limit_is_accepted(block):
    ok(Function(max_threads=768), block=block)


@pytest.mark.parametrize("block", [769, (16, 16, 4), (769, 1, 1), (1, 769)])
def test_block_one_thread_past_the_kernels_limit_is_refused(block):
    refused(Function(max_threads=768), block=block, match=r"threads exceeds its maximum of 768")


def test_thread_limit_names_registers_only_when_they_are_the_cause():
    # Below the device's 1024 because of registers: say so; at the device limit: do not.
    with pytest.raises(LaunchError, match=r"= 769 threads .*its 80 registers per thread limit "
                                          r"it below the device's 1024"):
        L.validate_launch(Function(max_threads=768), 1, 769, 0)
    with pytest.raises(LaunchError) as info:
        L.validate_launch(Function(max_threads=1024), 1, (1025, 1, 1), 0)
    assert "= 1025 threads exceeds its maximum of 1024" in str(info.value)
    assert "registers" not in str(info.value)
    with pytest.raises(LaunchError) as info:
        L.validate_launch(Function(max_threads=1023), 1, 1024, 0)
    assert "its 80 registers" in str(info.value)


@pytest.mark.parametrize("axis, limit", [(0, 1024), (1, 1024), (2, 64)])
def test_block_dimension_at_and_past_the_device_limit(axis, limit):
    fn = Function(max_threads=4096)  # the per-axis limit, not the thread count, decides
    block = [1, 1, 1]
    block[axis] = limit
    ok(fn, block=tuple(block))
    block[axis] = limit + 1
    refused(fn, block=tuple(block),
            match=rf"block\.{'xyz'[axis]} = {limit + 1} exceeds the device limit of {limit}")


@pytest.mark.parametrize("axis, limit", [(0, 2**31 - 1), (1, 65535), (2, 65535)])
def test_grid_dimension_at_and_past_the_device_limit(axis, limit):
    fn = Function()
    grid = [1, 1, 1]
    grid[axis] = limit
    ok(fn, grid=tuple(grid))
    grid[axis] = limit + 1
    refused(fn, grid=tuple(grid),
            match=rf"grid\.{'xyz'[axis]} = {limit + 1} exceeds the device limit of {limit}")


def test_dynamic_shared_memory_at_and_past_the_kernels_limit():
    fn = Function(dynamic=47 * 1024)
    ok(fn, shared=47 * 1024)
    ok(fn, shared=0)
    refused(fn, shared=47 * 1024 + 1, match=rf"{47 * 1024 + 1} bytes of dynamic shared memory "
                                             rf"requested, {47 * 1024} allowed")


def test_shared_memory_hint_at_and_past_the_opt_in_limit():
    fn = Function(dynamic=47 * 1024)
    optin = Device.max_shared_memory_per_block_optin - Function.shared_size_bytes
    # Exactly what opting in allows: the hint says how to raise the limit.
    with pytest.raises(LaunchError) as info:
        L.validate_launch(fn, 1, 1, optin)
    assert (f"raise the limit with `function.max_dynamic_shared_size_bytes = {optin}` "
            f"(this device allows up to {optin} for this kernel)") in str(info.value)
    # One byte more: even opting in cannot help.
    with pytest.raises(LaunchError) as info:
        L.validate_launch(fn, 1, 1, optin + 1)
    assert f"this device allows at most {optin} for this kernel even after" in str(info.value)
    assert "raise the limit with" not in str(info.value)


@pytest.mark.parametrize("shared", [-1, 1.0, "0", None])
def test_shared_bytes_must_be_a_non_negative_int(shared):
    refused(Function(), shared=shared, match="shared_bytes must be a non-negative int")


def test_numpy_integer_shared_bytes_are_accepted():
    ok(Function(), shared=np.int64(0))
    ok(Function(), shared=np.uint32(1024))


# -- dim3 --------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (1, (1, 1, 1)), (np.int32(7), (7, 1, 1)), ((5,), (5, 1, 1)), ((2, 3), (2, 3, 1)),
    ([2, 3, 4], (2, 3, 4)), ((np.int64(2), 1, np.uint8(9)), (2, 1, 9)),
])
def test_dim3_fills_missing_axes_with_one(value, expected):
    got = L.dim3(value, "grid")
    assert got == expected
    assert all(type(d) is int for d in got)


@pytest.mark.parametrize("value, match", [
    (0, "grid dimensions must be >= 1"), (-1, "grid dimensions must be >= 1"),
    ((1, 0), "grid dimensions must be >= 1"), ((), "grid must have 1 to 3 dimensions, got 0"),
    ((1, 1, 1, 1), "grid must have 1 to 3 dimensions, got 4"),
    (True, "grid dimensions must be ints"), ((1, 2.0), "grid dimensions must be ints"),
    ((1, False), "grid dimensions must be ints"),
    (2.0, "grid must be an int or a tuple of 1 to 3 ints, got float"),
])
def test_dim3_refuses(value, match):
    with pytest.raises(LaunchError, match=match):
        L.dim3(value, "grid")


# -- the argument buffer -----------------------------------------------------------------

def test_buffer_is_at_least_eight_bytes_and_exactly_the_packed_size_past_that():
    assert L.param_layout([])[1:] == ("<", [], 8)
    assert L.param_layout(["i8"])[1:] == ("<b", [0], 8)
    types, fmt, offsets, size = L.param_layout(["i32", "i32", "i32"])
    assert (fmt, offsets, size) == ("<iii", [0, 4, 8], 12)
    assert struct.calcsize(fmt) == size


def test_padding_goes_exactly_where_alignment_needs_it():
    types, fmt, offsets, size = L.param_layout(["u8", "u16", "u8", "f64", "bool", "f16"])
    assert types == ("u8", "u16", "u8", "f64", "bool", "f16")
    assert offsets == [0, 2, 4, 8, 16, 18]
    assert fmt == "<B1xHB3xd?1xe"
    assert size == 20 == struct.calcsize(fmt)


@pytest.mark.parametrize("size, align, offset_after_u8", [(1, 1, 1), (3, 2, 2), (16, 16, 16),
                                                          (12, 4, 4)])
def test_struct_parameters_at_the_smallest_legal_size_and_alignment(size, align,
                                                                     offset_after_u8):
    types, fmt, offsets, total = L.param_layout(["u8", ("bytes", size, align)])
    assert types[1] == ("bytes", size, align)
    assert offsets == [0, offset_after_u8]
    assert fmt.endswith(f"{size}s")
    assert total == max(offset_after_u8 + size, 8)


@pytest.mark.parametrize("bad, match", [
    (("bytes", 0, 4), "struct size must be a positive int, got 0"),
    (("bytes", -4, 4), "struct size must be a positive int"),
    (("bytes", 8.0, 4), "struct size must be a positive int"),
    (("bytes", 8, 0), "struct alignment must be a power of two, got 0"),
    (("bytes", 8, 3), "struct alignment must be a power of two, got 3"),
    (("bytes", 8, 6), "struct alignment must be a power of two"),
    (("bytes", 8, -2), "struct alignment must be a power of two"),
    (("bytes", 8, 4.0), "struct alignment must be a power of two"),
    (("bytes", 8), "a type is a name such as 'f32'"),
    (("struct", 8, 4), "a type is a name such as 'f32'"),
    ("int", "unknown type 'int'"),
])
def test_parameter_types_refused_with_their_position(bad, match):
    with pytest.raises(L.KernelArgumentError, match=match) as info:
        L.param_layout(["f32", bad])
    assert info.value.index == 1
    assert str(info.value).startswith("parameter 1: ")


# -- the device's own limits, and the sm_90 limits the simulator checks against ---------------

class SmallDevice:
    max_threads_per_block = 512
    max_block_dims = (512, 256, 16)
    max_grid_dims = (1000, 100, 10)
    max_shared_memory_per_block_optin = 64 * 1024


def test_the_devices_limits_not_sm90s_decide():
    fn = Function(max_threads=512)
    fn.device = SmallDevice()
    fn.name = "small"
    ok(fn, grid=(1000, 100, 10), block=(512, 1, 1))
    ok(fn, block=(2, 256, 1))
    ok(fn, block=(1, 1, 16))
    for grid, axis, n, top in (((1001, 1, 1), "x", 1001, 1000), ((1, 101, 1), "y", 101, 100),
                               ((1, 1, 11), "z", 11, 10)):
        refused(fn, grid=grid, match=rf"kernel 'small': grid\.{axis} = {n} exceeds the device "
                                     rf"limit of {top}")
    refused(fn, block=(1, 257, 1), match=r"kernel 'small': block\.y = 257 exceeds the device "
                                         r"limit of 256")
    refused(fn, block=(1, 1, 17), match=r"block\.z = 17 exceeds the device limit of 16")


def test_messages_name_the_kernel_and_the_axis():
    fn = Function()
    with pytest.raises(LaunchError) as info:
        L.validate_launch(fn, 1, 1025, 0)
    assert str(info.value).endswith("kernel 'k': a block of 1025x1x1 = 1025 threads exceeds "
                                    "its maximum of 1024")
    refused(fn, block=(4, 0), match=r"block\.y = 0: block dimensions must be >= 1, got \(4, 0\)")
    refused(fn, grid=(1, 1, 0), match=r"grid\.z = 0: grid dimensions must be >= 1")
    refused(fn, shared=-1, match=r"kernel 'k': shared_bytes must be a non-negative int, got -1")
    refused(fn, shared=True, match="shared_bytes must be a non-negative int, got True")


@pytest.mark.parametrize("what", ["grid", "block"])
def test_dims_fit_the_drivers_unsigned_ints_exactly(what):
    assert L.dim3((1, 0xFFFFFFFF), what) == (1, 0xFFFFFFFF, 1)
    with pytest.raises(LaunchError, match=rf"{what}\.y = 4294967296 is outside 1\.\.4294967295"):
        L.dim3((1, 0x100000000), what)
    with pytest.raises(LaunchError, match=rf"{what}\.x = 4294967296 is outside"):
        L.dim3(0x100000000, what)


def test_check_config_at_the_sm90_limits():
    lim = L.SM90_LIMITS
    assert (lim.max_threads_per_block, lim.max_block_dims, lim.max_grid_dims,
            lim.max_shared_memory_per_block_optin) == (1024, (1024, 1024, 64),
                                                       (2**31 - 1, 65535, 65535), 227 * 1024)
    assert L.check_config("s", (2**31 - 1, 65535, 65535), (1024, 1, 1), 227 * 1024) == (
        (2**31 - 1, 65535, 65535), (1024, 1, 1), 227 * 1024)
    assert L.check_config("s", 1, (16, 1, 64), np.int32(0)) == ((1, 1, 1), (16, 1, 64), 0)
    for kw, match in (
            (dict(grid=(2**31, 1, 1)), r"grid\.x = 2147483648 exceeds the device limit of "
                                       r"2147483647"),
            (dict(grid=(1, 65536)), r"grid\.y = 65536 exceeds"),
            (dict(grid=(1, 1, 65536)), r"grid\.z = 65536 exceeds"),
            (dict(block=(1025,)), r"a block of 1025x1x1 = 1025 threads exceeds the maximum of "
                                  r"1024 \(a block holds at most 1024 threads\)"),
            (dict(block=(1, 1, 65)), r"block\.z = 65 exceeds the device limit of 64"),
            (dict(shared=227 * 1024 + 1), r"232449 bytes of dynamic shared memory requested, "
                                          r"232448 allowed"),
            (dict(shared=-1), "shared_bytes must be a non-negative int, got -1"),
            (dict(shared=2.0), "shared_bytes must be a non-negative int, got 2.0")):
        args = dict(grid=1, block=1, shared=0)
        args.update(kw)
        with pytest.raises(LaunchError, match="kernel 's': " + match):
            L.check_config("s", args["grid"], args["block"], args["shared"])


def test_check_config_takes_the_kernels_own_limits():
    assert L.check_config("s", 1, 256, 100, max_threads=256, max_dynamic_shared=100)[1:] == (
        (256, 1, 1), 100)
    with pytest.raises(LaunchError, match="257 threads exceeds the maximum of 256"):
        L.check_config("s", 1, 257, 0, max_threads=256)
    with pytest.raises(LaunchError, match="101 bytes of dynamic shared memory requested, 100 "
                                          "allowed"):
        L.check_config("s", 1, 1, 101, max_dynamic_shared=100)
    small = L.DeviceLimits(64, (64, 8, 4), (10, 10, 10), 1024, 2048)
    assert L.check_config("s", (10, 10, 10), (64, 1, 1), 2048, small)[0] == (10, 10, 10)
    with pytest.raises(LaunchError, match=r"grid\.x = 11 exceeds the device limit of 10"):
        L.check_config("s", 11, 1, 0, small)
    with pytest.raises(LaunchError, match="2049 bytes of dynamic shared memory requested, "
                                          "2048 allowed"):
        L.check_config("s", 1, 1, 2049, small)
    with pytest.raises(LaunchError, match="65 threads exceeds the maximum of 64"):
        L.check_config("s", 1, 65, 0, small)


def test_check_config_names_the_bad_dimension():
    with pytest.raises(LaunchError, match=r"block\.z = 0: block dimensions must be >= 1"):
        L.check_config("s", 1, (1, 1, 0), 0)
    with pytest.raises(LaunchError, match=r"grid\.x = 0: grid dimensions must be >= 1"):
        L.check_config("s", 0, 1, 0)
