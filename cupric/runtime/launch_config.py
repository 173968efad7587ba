"""Launch configurations: grid and block shapes, dynamic shared memory, and the limits a
device puts on them. A configuration is checked here before anything reaches the driver
(and on the simulator against an sm_90 device's limits), so a refused launch names the
limit it exceeded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import LaunchError

__all__ = ["LaunchConfigError", "DeviceLimits", "SM90_LIMITS", "dim3", "check_config",
           "validate_launch", "LaunchConfig"]


class LaunchConfigError(LaunchError, ValueError):
    """A launch configuration that no launch can have, or one over the device's limits
    (grid, block, threads per block, shared memory): refused before anything runs, on a
    GPU and on the simulator alike. Also a `ValueError`."""


@dataclass(frozen=True)
class DeviceLimits:
    """The launch limits of a device, as `cuDeviceGetAttribute` reports them.

    `SM90_LIMITS` holds an sm_90 device's (H100, H200): the simulator checks launches
    against it, so that a configuration it accepts also launches on such a GPU.
    """

    max_threads_per_block: int = 1024
    max_block_dims: tuple = (1024, 1024, 64)
    max_grid_dims: tuple = (2**31 - 1, 65535, 65535)
    #: Static plus dynamic shared memory of a block without opting in.
    max_shared_memory_per_block: int = 48 * 1024
    #: ... after raising a function's `max_dynamic_shared_size_bytes`.
    max_shared_memory_per_block_optin: int = 227 * 1024


SM90_LIMITS = DeviceLimits()
# Only the shape of a configuration (the driver checks the device's limits itself).
_UNCHECKED = DeviceLimits(2**32, (2**32,) * 3, (2**32,) * 3, 2**32, 2**32)


def dim3(value, what: str) -> tuple[int, int, int]:
    """An int or a 1-3 tuple of ints as (x, y, z), each in 1..2^32-1 (what the driver's
    unsigned parameters hold; the device limits are checked separately)."""
    if isinstance(value, (int, np.integer)):
        dims = (value, 1, 1)
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise LaunchConfigError(None, f"{what} must be an int or a tuple of 1 to 3 ints, "
                                          f"got {type(value).__name__}") from None
        if not 1 <= len(items) <= 3:
            raise LaunchConfigError(None, f"{what} must have 1 to 3 dimensions, got "
                                          f"{len(items)}")
        dims = tuple(items) + (1,) * (3 - len(items))
    for axis, d in zip("xyz", dims):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise LaunchConfigError(None, f"{what} dimensions must be ints, got {value!r}")
        if d < 1:
            raise LaunchConfigError(None, f"{what}.{axis} = {d}: {what} dimensions must be "
                                          f">= 1, got {value!r}")
        if d > 0xFFFFFFFF:
            raise LaunchConfigError(None, f"{what}.{axis} = {d} is outside 1..{0xFFFFFFFF}")
    return int(dims[0]), int(dims[1]), int(dims[2])


def check_config(name: str, grid, block, shared_bytes, limits: DeviceLimits = SM90_LIMITS,
                 max_threads: int | None = None, max_dynamic_shared: int | None = None):
    """A launch configuration checked against `limits`: ((gx, gy, gz), (bx, by, bz),
    shared_bytes). The one check of a configuration's shape, used by `validate_launch`
    (a real device's limits) and by the simulator (`SM90_LIMITS`).

    Parameters
    ----------
    max_threads : int, optional
        The kernel's own limit on threads per block (registers may lower it).
    max_dynamic_shared : int, optional
        The dynamic shared memory the kernel may use (its
        `max_dynamic_shared_size_bytes`); default: the opt-in maximum of `limits`.

    Raises
    ------
    LaunchConfigError
        Naming the kernel, the dimension and the limit.
    """
    gx, gy, gz = dim3(grid, "grid")
    bx, by, bz = dim3(block, "block")
    if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, (int, np.integer)) \
            or shared_bytes < 0:
        raise LaunchConfigError(None, f"kernel {name!r}: shared_bytes must be a "
                                      f"non-negative int, got {shared_bytes!r}")
    threads = bx * by * bz
    limit = limits.max_threads_per_block if max_threads is None else max_threads
    if threads > limit:
        raise LaunchConfigError(None, f"kernel {name!r}: a block of {bx}x{by}x{bz} = "
                                      f"{threads} threads exceeds the maximum of {limit} "
                                      f"(a block holds at most {limit} threads)")
    for axis, n, top in zip("xyz", (bx, by, bz), limits.max_block_dims):
        if n > top:
            raise LaunchConfigError(None, f"kernel {name!r}: block.{axis} = {n} exceeds the "
                                          f"device limit of {top}")
    for axis, n, top in zip("xyz", (gx, gy, gz), limits.max_grid_dims):
        if n > top:
            raise LaunchConfigError(None, f"kernel {name!r}: grid.{axis} = {n} exceeds the "
                                          f"device limit of {top}")
    allowed = limits.max_shared_memory_per_block_optin if max_dynamic_shared is None \
        else max_dynamic_shared
    if shared_bytes > allowed:
        raise LaunchConfigError(None, f"kernel {name!r}: {shared_bytes} bytes of dynamic "
                                      f"shared memory requested, {allowed} allowed")
    return (gx, gy, gz), (bx, by, bz), int(shared_bytes)


def validate_launch(function, grid, block, shared_bytes: int) -> None:
    """Check a launch configuration against the kernel's and the device's limits.

    Raises
    ------
    LaunchConfigError
        Naming the limit exceeded and how to change it where it can be changed.
    """
    name = function.name
    device = function.device
    bx, by, bz = dim3(block, "block")
    threads = bx * by * bz
    max_threads = function.max_threads_per_block
    if threads > max_threads:
        regs = function.num_regs
        why = (f" (its {regs} registers per thread limit it below the device's "
               f"{device.max_threads_per_block})" if max_threads < device.max_threads_per_block
               else "")
        raise LaunchConfigError(None, f"kernel {name!r}: a block of {bx}x{by}x{bz} = "
                                      f"{threads} threads exceeds its maximum of "
                                      f"{max_threads}{why}")
    shared_bytes = check_config(name, grid, block, shared_bytes, device,
                                max_threads=max_threads, max_dynamic_shared=2**62)[2]
    allowed = function.max_dynamic_shared_size_bytes
    if shared_bytes > allowed:
        optin = device.max_shared_memory_per_block_optin - function.shared_size_bytes
        if shared_bytes <= optin:
            hint = (f"; raise the limit with `function.max_dynamic_shared_size_bytes = "
                    f"{shared_bytes}` (this device allows up to {optin} for this kernel)")
        else:
            hint = (f"; this device allows at most {optin} for this kernel even after "
                    f"raising function.max_dynamic_shared_size_bytes")
        raise LaunchConfigError(None, f"kernel {name!r}: {shared_bytes} bytes of dynamic "
                                      f"shared memory requested, {allowed} allowed{hint}")


class LaunchConfig:
    """A reusable launch shape: ``LaunchConfig(grid, block, shared_bytes=0, stream=None)``.

    `Function.launch(config, *args)` accepts one in place of grid and block.
    """

    __slots__ = ("grid", "block", "shared_bytes", "stream", "cluster", "cooperative")

    def __init__(self, grid, block, shared_bytes: int = 0, stream=None, *, cluster=None,
                 cooperative: bool = False) -> None:
        self.grid = dim3(grid, "grid")
        self.block = dim3(block, "block")
        if not isinstance(shared_bytes, int) or shared_bytes < 0:
            raise LaunchError(None, f"shared_bytes must be a non-negative int, got "
                                    f"{shared_bytes!r}")
        self.shared_bytes = shared_bytes
        self.stream = stream
        self.cluster = dim3(cluster, "cluster") if cluster is not None else None
        self.cooperative = bool(cooperative)

    def __repr__(self) -> str:
        return (f"LaunchConfig(grid={self.grid}, block={self.block}, "
                f"shared_bytes={self.shared_bytes})")
