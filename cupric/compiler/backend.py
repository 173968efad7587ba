"""The backend in one call: NVVM IR -> PTX (libNVVM) -> cubin (nvJitLink/ptxas), cached.

This is what the frontend calls once it has IR text. `build` looks the result up in the
kernel cache first, compiles on a miss, and stores PTX, cubin and the assembler's resource
report for the next process. `Artifact.image()` then picks what the driver should load.
"""

from __future__ import annotations

import os

from dataclasses import dataclass, field
from typing import Sequence

from cupric.compiler.errors import ToolchainNotFoundError
from cupric.compiler.options import CompileOptions

__all__ = ["Artifact", "build", "lookup", "storage_key"]

#: Bumped when what `build` stores changes meaning; part of every storage key.
BACKEND_VERSION = 1
_WANTS = ("ptx", "cubin")


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel module.

    Attributes
    ----------
    ptx : str or None
        The PTX libNVVM wrote.
    cubin : bytes or None
        SASS for `arch` when a linker could make it (see `build`'s `want`).
    arch : str
        The architecture it was compiled for (``"sm_90"``).
    log : str
        libNVVM's and the linker's messages (warnings, ``-v`` report).
    resource_usage : dict
        Kernel name -> `cupric.compiler.link.ResourceUsage` (registers, spills, shared
        memory); empty without a cubin.
    key : str
        The storage key in the kernel cache ("" when built without a cache).
    from_cache : bool
        Whether this came from the cache rather than a fresh compile.
    nvvm_release, linker, linker_release :
        Which libNVVM and which linker (``"nvjitlink"``/``"ptxas"``) of which CUDA release
        produced it; `image` uses `linker_release` for minor version compatibility.
    """

    ptx: str | None
    cubin: bytes | None
    arch: str
    log: str = ""
    resource_usage: dict = field(default_factory=dict)
    key: str = ""
    from_cache: bool = False
    nvvm_release: tuple[int, ...] | None = None
    linker: str | None = None
    linker_release: tuple[int, ...] | None = None

    def image(self, device_arch: str | None = None, *,
              driver: tuple[int, int] | None = None) -> tuple[str, bytes | str]:
        """What to load on a device: ``("cubin", bytes)`` or ``("ptx", str)``.

        See `cupric.compiler.target.choose_image`; `device_arch` defaults to `arch`.

        Raises
        ------
        VersionSkewError
            Neither the cubin nor the PTX can be loaded by the installed driver.
        """
        from cupric.compiler.target import choose_image

        if self.ptx is None:
            if self.cubin is None:
                raise ValueError("artifact holds neither PTX nor cubin")
            return "cubin", self.cubin
        return choose_image(self.ptx, device_arch or self.arch, cubin=self.cubin,
                            cubin_release=self.linker_release, cubin_arch=self.arch,
                            driver=driver)


def _normalize_want(want: Sequence[str]) -> tuple[str, ...]:
    if isinstance(want, str):
        want = (want,)
    chosen = tuple(sorted(set(want)))
    if not chosen or any(w not in _WANTS for w in chosen):
        raise ValueError(f"want must name some of {_WANTS}, got {want!r}")
    return chosen


def _modules(ir: str | bytes | Sequence[str | bytes]) -> list[str | bytes]:
    return [ir] if isinstance(ir, (str, bytes, bytearray)) else list(ir)


def storage_key(key: str | None, options: CompileOptions, want: Sequence[str],
                ir: str | bytes | Sequence[str | bytes] | None = None) -> str:
    """The cache key `build` stores under.

    With a caller `key` (the frontend's hash of source, types, options, arch and libNVVM
    version), it is combined with the resolved options and `want`, so one frontend key can
    never fetch code built for another arch or with other flags. Without one, the IR text
    and the toolchain releases (libNVVM, nvJitLink) are hashed instead.

    Cost
    ----
    With `key`: microseconds. Without: hashes the IR, and the first call per process
    loads libNVVM to read its release (about 10 ms).
    """
    from cupric.compiler.cache import make_key

    options = options.resolve()
    want = _normalize_want(want)
    if key is not None:
        # Where libNVVM comes from can change with these; see `_same_libnvvm` for upgrades.
        origin: tuple = ("key", key, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"))
    else:
        if ir is None:
            raise ValueError("storage_key needs the caller's key or the IR")
        from cupric.compiler import toolchain

        try:
            linker_release = toolchain.nvjitlink().version
        except ToolchainNotFoundError:
            linker_release = None  # ptxas or no cubin: recorded in the entry's metadata
        origin = ("ir", [m if isinstance(m, str) else bytes(m) for m in _modules(ir)],
                  toolchain.libnvvm().version, linker_release)
    return make_key("cupric.backend", BACKEND_VERSION, origin, options.cache_key(), want)


def _from_entry(entry, from_cache: bool) -> Artifact:
    from cupric.compiler.link import ResourceUsage

    meta = entry.meta
    usage = {name: ResourceUsage(**values) for name, values in meta.get("resource_usage", {}).items()}
    as_tuple = (lambda v: tuple(v) if v is not None else None)
    return Artifact(ptx=entry.ptx, cubin=entry.cubin, arch=meta["arch"], log=meta.get("log", ""),
                    resource_usage=usage, key=entry.key, from_cache=from_cache,
                    nvvm_release=as_tuple(meta.get("nvvm_release")), linker=meta.get("linker"),
                    linker_release=as_tuple(meta.get("linker_release")))


def _resolve_cache(cache):
    if cache is False:
        return None
    if cache is None or cache is True:
        from cupric.compiler.cache import default_cache

        return default_cache()
    return cache


def lookup(key: str, *, options: CompileOptions | None = None,
           want: Sequence[str] = _WANTS, cache=None) -> Artifact | None:
    """The cached artifact for a frontend `key`, or None: lets the frontend skip IR
    generation entirely on a hit.

    Cost
    ----
    Memory hit: a few microseconds; disk hit: well under a millisecond for small kernels.
    """
    store = _resolve_cache(cache)
    if store is None:
        return None
    options = (options or CompileOptions()).resolve()
    entry = store.get(storage_key(key, options, want))
    if entry is None or not _same_libnvvm(entry.meta.get("nvvm_file")):
        return None
    return _from_entry(entry, True)


def _file_identity(path: str) -> list:
    st = os.stat(path)
    return [path, st.st_size, st.st_mtime_ns]


def _same_libnvvm(recorded) -> bool:
    """Whether the libNVVM that built an entry is still installed, unchanged.

    The frontend's key leaves out the libNVVM version so that a hit never loads libNVVM;
    instead each entry records the library file it came from, and one `stat` here (a few
    microseconds) turns an upgraded or removed libNVVM into a miss and a rebuild.
    """
    if not recorded:
        return True  # entries of `build` calls keyed by IR hash the release instead
    path, size, mtime_ns = recorded
    try:
        return _file_identity(path) == [path, size, mtime_ns]
    except OSError:
        return False


def build(ir: str | bytes | Sequence[str | bytes], *, options: CompileOptions | None = None,
          key: str | None = None, want: Sequence[str] = _WANTS, cache=None,
          linker: str = "auto") -> Artifact:
    """Compile NVVM IR to PTX and cubin, through the kernel cache.

    Parameters
    ----------
    ir : str, bytes or list of them
        NVVM IR module(s), starting with `cupric.compiler.nvvm.ir_header()`.
    options : CompileOptions, optional
        Default ``CompileOptions()``; an unset arch becomes the current device's.
    key : str, optional
        The frontend's hex digest of everything the IR depends on (see `storage_key`);
        when None the IR text itself is hashed.
    want : sequence of {"ptx", "cubin"}
        ``("ptx", "cubin")`` (default): PTX, plus a cubin when an installed linker can read
        the PTX (else ``cubin`` is None and `Artifact.image` decides). ``("cubin",)``: a
        cubin is required. ``("ptx",)``: no linking.
    cache : KernelCache, None or False
        None/True: the default per-user cache; False: no cache.
    linker : {"auto", "nvjitlink", "ptxas"}
        Passed to `cupric.compiler.link.link_ptx`.

    Returns
    -------
    Artifact

    Raises
    ------
    NvvmError
        libNVVM refused the IR (``.log`` has the program log).
    LinkError
        The assembler refused the PTX; with ``want=("cubin",)`` also when no linker can.
    ToolchainNotFoundError
        libNVVM is missing, or a required linker is.

    Cost
    ----
    Hit: well under 2 ms (measured in tests/compiler/test_backend_cache.py). Miss: libNVVM
    plus the linker, tens of ms for a small kernel.

    Thread safety
    -------------
    Safe; two threads or processes building the same key at once both compile and store
    identical entries.
    """
    from cupric.compiler.link import NoLinkerError, link_ptx
    from cupric.compiler.nvvm import compile_ir

    options = (options or CompileOptions()).resolve()
    want = _normalize_want(want)
    modules = _modules(ir)
    if any(b"cupric:sm_90" in m if isinstance(m, (bytes, bytearray)) else "cupric:sm_90" in m
           for m in modules):
        # sm_90 instructions (wgmma, TMA, clusters): an older target is a CompileError
        # naming it; sm_90 becomes sm_90a where wgmma needs it.
        from cupric.compiler.lowering.hopper import check_target
        options = check_target(modules, options)
    store = _resolve_cache(cache)
    stored_key = ""
    if store is not None:
        stored_key = storage_key(key, options, want, modules)
        entry = store.get(stored_key)
        if entry is not None:
            return _from_entry(entry, True)

    from cupric.compiler.toolchain import libnvvm

    nvvm_output = compile_ir(modules, options)
    logs = [f"libNVVM: {nvvm_output.log}"] if nvvm_output.log else []
    cubin = linked = None
    if "cubin" in want:
        try:
            linked = link_ptx(nvvm_output.ptx, options, linker=linker)
        except (NoLinkerError, ToolchainNotFoundError) as exc:
            if "ptx" not in want:
                raise
            logs.append(f"no cubin: {exc}")  # Artifact.image() will judge the PTX alone
        else:
            cubin = linked.cubin
            if linked.log:
                logs.append(f"{linked.linker}: {linked.log}")
    artifact = Artifact(
        ptx=nvvm_output.ptx, cubin=cubin, arch=options.arch, log="\n".join(logs),
        resource_usage=linked.resource_usage if linked else {}, key=stored_key,
        nvvm_release=libnvvm().version, linker=linked.linker if linked else None,
        linker_release=linked.linker_release if linked else None)
    if store is not None:
        payloads: dict[str, str | bytes] = {"ptx": artifact.ptx}
        if cubin is not None:
            payloads["cubin"] = cubin
        store.put(stored_key, payloads, {
            "arch": artifact.arch, "options": options.cache_key(), "log": artifact.log,
            "resource_usage": {k: v.to_dict() for k, v in artifact.resource_usage.items()},
            "nvvm_release": artifact.nvvm_release, "linker": artifact.linker,
            "linker_release": artifact.linker_release,
            "nvvm_file": _file_identity(libnvvm().path),
        })
    return artifact
