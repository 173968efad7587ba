"""Targets: the GPU architecture to compile for, and what the installed driver can load.

A driver JIT-compiles PTX only up to the PTX ISA version of its own CUDA release, while a
cubin (SASS) built by a linker of the same CUDA major version loads on any driver of that
major (minor version compatibility). `choose_image` uses these facts so that the
libNVVM/driver version skew never surfaces as a bare CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

from cupric.compiler.errors import CompilerError
from cupric.compiler.options import normalize_arch

__all__ = [
    "VersionSkewError", "PTX_ISA_OF_RELEASE", "ptx_isa_of_release", "ptx_isa", "ptx_target",
    "driver_version", "driver_max_ptx_isa", "current_arch", "cubin_runs_on", "choose_image",
    "driver_report",
]


class VersionSkewError(CompilerError):
    """The compiled kernel cannot be loaded by the installed driver (toolchain too new)."""


#: CUDA release -> the PTX ISA version it introduced (what its driver JIT accepts at most and
#: what its libNVVM writes). From the PTX ISA release history. CUDA 12.6 kept ISA 8.5; 12.7
#: (ISA 8.6) shipped no driver of its own but the entry keeps the table monotonic.
PTX_ISA_OF_RELEASE: dict[tuple[int, int], tuple[int, int]] = {
    (11, 0): (7, 0), (11, 1): (7, 1), (11, 2): (7, 2), (11, 3): (7, 3), (11, 4): (7, 4),
    (11, 5): (7, 5), (11, 6): (7, 6), (11, 7): (7, 7), (11, 8): (7, 8),
    (12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4),
    (12, 5): (8, 5), (12, 6): (8, 5), (12, 7): (8, 6), (12, 8): (8, 7), (12, 9): (8, 8),
    (13, 0): (9, 0), (13, 1): (9, 1), (13, 2): (9, 2), (13, 3): (9, 3), (13, 4): (9, 4),
    (13, 5): (9, 5),
}


def ptx_isa_of_release(release: tuple[int, ...]) -> tuple[int, int]:
    """The newest PTX ISA a CUDA release (driver or toolchain) understands.

    Parameters
    ----------
    release : tuple of int
        ``(major, minor)`` (more items are ignored), e.g. ``(13, 0)``.

    Returns
    -------
    tuple of int
        ``(isa_major, isa_minor)``. A release newer than the table within CUDA 13 is
        extrapolated (13.x -> 9.x, the pattern every 13.x release followed); beyond the
        table otherwise, the newest known ISA is returned, a safe lower bound.

    Raises
    ------
    ValueError
        For a release older than CUDA 11.0.
    """
    key = (int(release[0]), int(release[1]))
    if key in PTX_ISA_OF_RELEASE:
        return PTX_ISA_OF_RELEASE[key]
    newest = max(PTX_ISA_OF_RELEASE)
    if key > newest:
        if key[0] == 13:
            return (9, key[1])
        return PTX_ISA_OF_RELEASE[newest]
    raise ValueError(f"CUDA {key[0]}.{key[1]} is older than cupric supports (11.0)")


_VERSION_RE = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)
_TARGET_RE = re.compile(r"^\s*\.target\s+(sm_\d+[af]?)", re.MULTILINE)


def ptx_isa(ptx: str | bytes) -> tuple[int, int]:
    """The PTX ISA version a PTX text declares (its ``.version`` directive).

    Raises
    ------
    ValueError
        If the text has no ``.version`` directive (not PTX).
    """
    text = ptx.decode("utf-8", "replace") if isinstance(ptx, (bytes, bytearray)) else ptx
    match = _VERSION_RE.search(text)
    if match is None:
        raise ValueError("not PTX: no `.version` directive found")
    return int(match.group(1)), int(match.group(2))


def ptx_target(ptx: str | bytes) -> str:
    """The architecture a PTX text targets (its ``.target`` directive), e.g. ``"sm_90"``."""
    text = ptx.decode("utf-8", "replace") if isinstance(ptx, (bytes, bytearray)) else ptx
    match = _TARGET_RE.search(text)
    if match is None:
        raise ValueError("not PTX: no `.target sm_XX` directive found")
    return match.group(1)


def _driver():
    """`cuda.bindings.driver` with ``cuInit`` done, or None without a usable driver.

    The runtime's probe (`cupric.runtime.native.driver`), the one cupric has: it caches
    its answer, a failure included, for the life of the process.
    """
    from cupric.runtime import native
    return native.driver() if native.driver_available() else None


@functools.cache
def driver_version() -> tuple[int, int] | None:
    """The CUDA version of the installed driver, e.g. ``(13, 0)``; None without a driver.

    Cost
    ----
    First call loads libcuda and initializes it (no context is created); cached.
    """
    if _driver() is None:
        return None
    from cupric.runtime import native
    return native.driver_version()


def driver_max_ptx_isa() -> tuple[int, int] | None:
    """The newest PTX ISA the installed driver JIT-compiles; None without a driver."""
    version = driver_version()
    return None if version is None else ptx_isa_of_release(version)


@functools.cache
def _device_arch(ordinal: int) -> str | None:
    from cupric.runtime.device import Device
    from cupric.runtime.errors import CudaError
    try:
        return Device(ordinal).arch  # the runtime's compute-capability query
    except CudaError:
        return None


def current_arch() -> str | None:
    """The architecture of the current context's device (device 0 if none is current).

    Returns None when there is no driver or no device, so callers fall back to a default.
    Never creates a context.

    Cost
    ----
    First call per device initializes the driver (``cuInit``); cached per device.
    """
    driver = _driver()
    if driver is None:
        return None
    err, device = driver.cuCtxGetDevice()
    ordinal = int(device) if err == driver.CUresult.CUDA_SUCCESS else 0
    return _device_arch(ordinal)


def cubin_runs_on(cubin_arch: str, device_arch: str) -> bool:
    """Whether SASS built for `cubin_arch` runs on a device of `device_arch`.

    SASS is compatible forward within one major compute capability (sm_80 code runs on
    sm_86) but not across majors; arch-specific targets (``sm_90a``) run only on exactly
    that device; family targets (``sm_100f``) run on the later members of the family.
    """
    built = normalize_arch(cubin_arch)
    device = normalize_arch(device_arch)
    if built.endswith("a"):
        return built[:-1] == device.rstrip("af")
    built_cc = int(built[3:].rstrip("af"))
    device_cc = int(device[3:].rstrip("af"))
    return built_cc // 10 == device_cc // 10 and built_cc <= device_cc


def choose_image(ptx: str, arch: str, *, cubin: bytes | None = None,
                 cubin_release: tuple[int, ...] | None = None,
                 cubin_arch: str | None = None,
                 link: Callable[[str, str], tuple[bytes, tuple[int, ...]]] | None = None,
                 driver: tuple[int, int] | None = None) -> tuple[str, bytes | str]:
    """Pick what to hand to ``cuModuleLoadData``: a cubin when one is usable, else PTX.

    Order of preference:

    1. `cubin` when given, built for an arch that runs on `arch`, by a linker whose CUDA
       major version is not newer than the driver's (minor version compatibility lets a
       13.5 cubin load on a 13.0 driver, not on a 12.x one);
    2. a cubin made now by `link` (default: nvJitLink, else ptxas; see
       `cupric.compiler.link.ptx_to_cubin`) under the same rule -- no driver JIT, no skew;
    3. the PTX itself when the driver's JIT accepts its ISA version;
    4. otherwise `VersionSkewError`, explaining the mismatch and what to install.

    Parameters
    ----------
    ptx : str
        PTX text (its ``.version`` decides whether the driver can JIT it).
    arch : str
        The device's architecture.
    cubin, cubin_release, cubin_arch : optional
        An already built cubin, the CUDA release of the linker that built it and the arch it
        was built for (default `arch`).
    link : callable, optional
        ``link(ptx, arch) -> (cubin, linker_release)``; None uses the installed linkers.
        Raising `ToolchainNotFoundError` or `LinkError` means "no cubin this way".
    driver : tuple of int, optional
        The driver's CUDA version; default: detected (tests pass a fake one).

    Returns
    -------
    tuple
        ``("cubin", bytes)`` or ``("ptx", str)``.

    Raises
    ------
    VersionSkewError
        Neither a usable cubin nor PTX the driver accepts.
    """
    from cupric.compiler.errors import LinkError, ToolchainNotFoundError

    arch = normalize_arch(arch)
    if driver is None:
        driver = driver_version()
    isa = ptx_isa(ptx)
    reasons: list[str] = []

    def usable(release: tuple[int, ...] | None, built_for: str) -> bool:
        if not cubin_runs_on(built_for, arch):
            reasons.append(f"the cubin was built for {built_for}, which does not run on {arch}")
            return False
        if driver is not None and release is not None and release[0] > driver[0]:
            reasons.append(f"the cubin comes from CUDA {release[0]}.{release[1]} tools, a newer "
                           f"major version than the driver's CUDA {driver[0]}.{driver[1]}")
            return False
        return True

    if cubin is not None and usable(cubin_release, normalize_arch(cubin_arch or arch)):
        return "cubin", cubin
    if link is None:
        from cupric.compiler.link import ptx_to_cubin_with_release as link
    try:
        linked, release = link(ptx, arch)
    except (ToolchainNotFoundError, LinkError) as exc:
        reasons.append(f"no cubin could be made: {str(exc).splitlines()[0]}")
    else:
        if usable(release, arch):
            return "cubin", linked
    if driver is None:
        # Nothing to ask: hand over the PTX and let the loader report what it finds.
        return "ptx", ptx
    accepted = ptx_isa_of_release(driver)
    if isa <= accepted:
        return "ptx", ptx
    raise VersionSkewError(_skew_message(isa, accepted, driver, reasons))


def _skew_message(isa, accepted, driver, reasons) -> str:
    release = next((r for r, i in sorted(PTX_ISA_OF_RELEASE.items()) if i >= isa), None)
    made_by = f"CUDA {release[0]}.{release[1]}" if release else "a newer CUDA"
    lines = [
        f"the kernel's PTX is ISA {isa[0]}.{isa[1]} (written by {made_by}'s libNVVM), but the "
        f"installed driver (CUDA {driver[0]}.{driver[1]}) JIT-compiles PTX up to ISA "
        f"{accepted[0]}.{accepted[1]} only, and no usable cubin was available:",
        *(f"  - {reason}" for reason in reasons),
        "fix one of:",
        f"  - install nvJitLink of CUDA {driver[0]}.x no older than the libNVVM "
        f"(`pip install 'nvidia-nvjitlink>={release[0] if release else driver[0]}."
        f"{release[1] if release else 0}'`) so cupric loads cubin (minor version compatibility);",
        f"  - or use a libNVVM the driver accepts: `pip install 'nvidia-nvvm=="
        f"{driver[0]}.{driver[1]}.*'`;",
        "  - or update the GPU driver.",
    ]
    return "\n".join(lines)


def driver_report() -> dict:
    """The driver's CUDA version and newest PTX ISA, for `toolchain.report()`."""
    version = driver_version()
    if version is None:
        return {"error": "no CUDA driver on this machine"}
    isa = ptx_isa_of_release(version)
    result = {"cuda_version": f"{version[0]}.{version[1]}", "max_ptx_isa": f"{isa[0]}.{isa[1]}"}
    arch = current_arch()
    if arch is not None:
        result["device_arch"] = arch
    return result
