"""The per-user cache of generated modules, and loading a module from it.

Layout: ``<bindings dir>/<library>-<key>/_cupric_<library>.py`` plus ``manifest.json``.
The key hashes what shapes the output besides header contents (generator identity,
cffi version, platform, where the headers live); the manifest lists the headers read,
with size and modification time, so a cache hit costs a few ``stat`` calls and one
import, and an updated wheel is noticed and regenerated. The bindings directory is
``$CUPRIC_BINDINGS_DIR``, else ``$CUPRIC_CACHE_DIR/bindings``, else
``$XDG_CACHE_HOME/cupric/bindings``, else ``~/.cache/cupric/bindings``.

Thread safety: writes go to a temporary file renamed into place, manifest last, so
concurrent processes at worst generate the same bytes twice.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import sys
import threading
import types

from .generate import GeneratedModule, generate, generator_identity
from .headers import HeaderSet, find_headers
from .libraries import LibrarySpec

_MANIFEST = "manifest.json"
_lock = threading.Lock()


def bindings_dir() -> str:
    """Where generated modules live (see the module docstring for the order)."""
    explicit = os.environ.get("CUPRIC_BINDINGS_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    from .._paths import cache_root

    return str(cache_root() / "bindings")


def _cffi_version() -> str:
    import cffi

    return cffi.__version__


def entry_dir(spec: LibrarySpec, header_set: HeaderSet, root: str | None = None) -> str:
    """The cache directory of one library for one set of header directories."""
    h = hashlib.sha256()
    for part in (generator_identity(), _cffi_version(), platform.machine(), spec.name,
                 *header_set.include_dirs):
        h.update(part.encode() + b"\0")
    return os.path.join(root or bindings_dir(), f"{spec.name}-{h.hexdigest()[:16]}")


def module_filename(spec: LibrarySpec) -> str:
    return f"_cupric_{spec.name}.py"


def _stat_list(paths) -> list[list]:
    out = []
    for path in paths:
        st = os.stat(path)
        out.append([path, st.st_size, st.st_mtime_ns])
    return out


def _fresh(directory: str, spec: LibrarySpec) -> dict | None:
    """The manifest when the entry exists and its headers are unchanged, else None."""
    try:
        with open(os.path.join(directory, _MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        for path, size, mtime in manifest["files"]:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return None
        if not os.path.isfile(os.path.join(directory, module_filename(spec))):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        # Missing, half-written or foreign entry: regenerate rather than trust it.
        return None
    return manifest


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(tmp, path)


def write_entry(directory: str, spec: LibrarySpec, generated: GeneratedModule) -> str:
    """Write a generated module and its manifest; return the module's path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, module_filename(spec))
    _write_atomic(path, generated.text)
    manifest = {
        "library": spec.name,
        "library_version": list(generated.info.library_version),
        "header_hash": generated.info.header_hash,
        "generator": generated.info.generator_version,
        "backend": generated.backend,
        "functions": len(generated.functions),
        "files": _stat_list(generated.files),
    }
    _write_atomic(os.path.join(directory, _MANIFEST), json.dumps(manifest, indent=1))
    return path


def ensure(
    spec: LibrarySpec,
    headers: str | None = None,
    root: str | None = None,
    force: bool = False,
    backend: str | None = None,
) -> tuple[str, GeneratedModule | None]:
    """Make sure a library's module exists in the cache; generate it when missing or stale.

    Returns
    -------
    path : str
        The module file.
    generated : GeneratedModule or None
        What was generated, or None on a cache hit.
    """
    header_set = find_headers(spec, headers)
    directory = entry_dir(spec, header_set, root)
    with _lock:
        if not force and _fresh(directory, spec) is not None:
            return os.path.join(directory, module_filename(spec)), None
        generated = generate(spec, header_set=header_set, backend=backend)
        return write_entry(directory, spec, generated), generated


def _ensure_one(args):
    spec, headers, root, force, backend = args
    try:
        return spec.name, ensure(spec, headers, root, force, backend), None
    except Exception as exc:  # returned, not swallowed: ensure_many re-raises or reports it
        return spec.name, None, exc


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1  # native threads too
    except OSError:
        return threading.active_count() == 1


def ensure_many(
    specs,
    headers: str | None = None,
    root: str | None = None,
    force: bool = False,
    backend: str | None = None,
    jobs: int | None = None,
) -> dict[str, tuple]:
    """`ensure` for several libraries, in parallel processes where there are cores.

    Returns
    -------
    dict
        ``{name: ((path, generated) or None, exception or None)}`` in the order given.

    Cost
    ----
    Each library takes about a second of one core (pcpp and pycparser are pure Python),
    so generation is spread over ``min(len(specs), cpu_count)`` processes.
    """
    specs = list(specs)
    work = [(spec, headers, root, force, backend) for spec in specs]
    jobs = jobs or min(len(specs), os.cpu_count() or 1)
    # fork() is the only start method that does not re-run the caller's __main__, and it
    # is unsafe once a process has other threads (a CUDA driver starts some): then stay
    # in this process.
    if jobs <= 1 or not hasattr(os, "fork") or not _single_threaded():
        results = [_ensure_one(item) for item in work]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            results = list(pool.map(_ensure_one, work))
    return {name: (value, error) for name, value, error in results}


def import_module(path: str, library: str) -> types.ModuleType:
    """Import a generated module from its file (not through sys.path)."""
    name = f"cupric.bindings_gen._generated.{library}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    sys.modules.setdefault(name, module)
    return module


def load_module(spec: LibrarySpec, headers: str | None = None) -> types.ModuleType:
    """The generated module of a library, generating it on first use.

    Raises
    ------
    HeadersNotFoundError, PreprocessorNotFoundError, BindingsError
    """
    path, _ = ensure(spec, headers)
    return import_module(path, spec.name)
