"""Finding a library's headers: a given directory, the installed wheels, CUDA_HOME.

Order, first hit wins:

1. the directory passed explicitly (``--headers DIR`` or ``headers=``);
2. `cuda.pathfinder` (the NVIDIA wheels in site-packages, then what pathfinder itself
   checks: conda environments and CUDA_HOME/CUDA_PATH);
3. the NVIDIA wheels' ``nvidia/*/include`` directories on ``sys.path``, for libraries an
   older pathfinder has no entry for;
4. ``$CUDA_HOME/include`` and ``$CUDA_PATH/include``;
5. ``/usr/local/cuda/include`` and ``/usr/include`` (distribution packages of cuDNN and NCCL).
"""

from __future__ import annotations

import glob
import hashlib
import os
import sys
from dataclasses import dataclass

from .errors import HeadersNotFoundError
from .libraries import LibrarySpec


@dataclass(frozen=True)
class HeaderSet:
    """Where one library's headers live.

    Attributes
    ----------
    top_header : str
        Absolute path of the header a C program includes.
    include_dirs : tuple of str
        Search path in order: the library's directory, then others it needs (cudart).
    """

    top_header: str
    include_dirs: tuple[str, ...]

    def label(self, path: str) -> str | None:
        """Path relative to the first include directory containing it, or None."""
        real = os.path.realpath(path)
        for directory in self.include_dirs:
            root = os.path.realpath(directory) + os.sep
            if real.startswith(root):
                return real[len(root):].replace(os.sep, "/")
        return None


def _pathfinder_dir(key: str) -> str | None:
    try:
        from cuda import pathfinder
    except ImportError:
        return None
    try:
        if hasattr(pathfinder, "locate_nvidia_header_directory"):
            located = pathfinder.locate_nvidia_header_directory(key)
            return None if located is None else located.abs_path
        # Older cuda-pathfinder releases only have the path-returning form.
        return pathfinder.find_nvidia_header_directory(key)
    except Exception:
        # Unknown name (RuntimeError) or lookup failure: fall through to the next source.
        return None


def _wheel_dirs(header: str) -> list[str]:
    found = []
    for entry in sys.path:
        found += sorted(glob.glob(os.path.join(entry, "nvidia", "*", "include", header)))
    return [os.path.dirname(path) for path in found]


def _environment_dirs() -> list[str]:
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            dirs.append(os.path.join(root, "include"))
    dirs += ["/usr/local/cuda/include", "/usr/include"]
    return dirs


def _find_dir(
    key: str, header: str, explicit: str | None, root_variable: str = ""
) -> tuple[str | None, list[str]]:
    tried = []
    candidates = []
    if explicit:
        candidates.append(explicit)
    elif root_variable:
        # An SDK that is not in the wheels (OptiX): only its own root counts.
        root = os.environ.get(root_variable)
        if root:
            candidates.append(os.path.join(root, "include"))
    else:
        found = _pathfinder_dir(key) if key else None
        if found:
            candidates.append(found)
        candidates += _wheel_dirs(header)
        candidates += _environment_dirs()
    for directory in candidates:
        tried.append(directory)
        if os.path.isfile(os.path.join(directory, header)):
            return os.path.abspath(directory), tried
    return None, tried


def _crt_dirs() -> list[str]:
    """Include directories holding the toolkit's crt/host_defines.h, best first."""
    dirs = [os.path.dirname(os.path.dirname(p)) for p in
            (path for entry in sys.path for path in
             sorted(glob.glob(os.path.join(entry, "nvidia", "*", "include", "crt", "host_defines.h"))))]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            dirs.append(os.path.join(root, "include"))
    dirs.append("/usr/local/cuda/include")
    dirs += sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True)
    return [d for d in dirs if os.path.isfile(os.path.join(d, "crt", "host_defines.h"))]


def _with_crt(include_dirs: list[str]) -> list[str]:
    """Add a directory with crt/host_defines.h when none of `include_dirs` has one.

    Since CUDA 13 the crt headers come in their own wheel (nvidia-cuda-crt); without
    it, a toolkit's copy is used, and failing that cupric's stand-in (`fakelibc`).
    """
    if any(os.path.isfile(os.path.join(d, "crt", "host_defines.h")) for d in include_dirs):
        return include_dirs
    found = _crt_dirs()
    if found:
        return include_dirs + [found[0]]
    from . import fakelibc

    return include_dirs + [fakelibc.materialize("crt")]


def find_headers(spec: LibrarySpec, headers: str | None = None) -> HeaderSet:
    """Locate a library's headers and the include directories they need.

    Parameters
    ----------
    spec : LibrarySpec
        The library.
    headers : str, optional
        A directory to use instead of searching. The CUDA runtime headers some
        libraries need are still searched for when they are not in it.

    Raises
    ------
    HeadersNotFoundError
        Naming the package to install.
    """
    directory, tried = _find_dir(spec.header_key, spec.top_header, headers, spec.root_variable)
    if directory is None:
        detail = f"no {spec.top_header} in {tried}" if tried else f"${spec.root_variable} is not set"
        raise HeadersNotFoundError(spec.name, spec.package, detail)
    include_dirs = [directory]
    # cuComplex.h, driver_types.h, cuda_runtime_api.h come with the CUDA runtime headers.
    needs = "cuda_runtime_api.h" if spec.needs_cudart_headers else "driver_types.h"
    if spec.root_variable:
        needs = "cuda.h"  # an SDK may include the driver API header; add it when found
    if not os.path.isfile(os.path.join(directory, needs)):
        cudart, tried = _find_dir("cudart", needs, None)
        if cudart is None and spec.root_variable:
            return HeaderSet(os.path.join(directory, spec.top_header), (directory,))
        if cudart is None:
            raise HeadersNotFoundError(
                spec.name, "nvidia-cuda-runtime", f"{spec.top_header} needs {needs}; tried {tried}"
            )
        include_dirs.append(cudart)
    return HeaderSet(os.path.join(directory, spec.top_header), tuple(_with_crt(include_dirs)))


def content_hash(paths: list[str], header_set: HeaderSet) -> str:
    """SHA-256 over the labels and contents of the headers a translation unit read.

    Labels (paths relative to their include directory), not absolute paths, go in, so
    the same headers installed elsewhere hash the same.
    """
    h = hashlib.sha256()
    for label, path in sorted((header_set.label(p) or os.path.basename(p), p) for p in paths):
        with open(path, "rb") as f:
            data = f.read()
        h.update(label.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()
