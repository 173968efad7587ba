"""The per-user cache of generated modules, and loading a module from it.

Layout: ``<bindings dir>/<library>-<key>/_cupric_<library>.py`` plus ``manifest.json``.
The key hashes what shapes the output besides header contents (generator identity,
cffi version, platform, where the headers live); the manifest lists the headers read,
with size and modification time, so a cache hit costs a few ``stat`` calls and one
import, and an updated wheel is noticed and regenerated. The bindings directory is
``$CUPRIC_BINDINGS_DIR``, else ``$CUPRIC_CACHE_DIR/bindings``, else
``$XDG_CACHE_HOME/cupric/bindings``, else ``~/.cache/cupric/bindings``.

Trust: the entry folder and every file read from it must belong to the user and be
writable by no one else, and the module's text must match the SHA-256 its manifest
recorded at generation (`cupric._cache`); its code is executed from the verified bytes
(compiled once, kept as a verified code blob beside it, never through a ``.pyc`` an
import could pick up). Anything that fails is generated again. A cache that cannot be
written costs a generation in memory and one warning.

Thread safety: writes go to unique temporary files renamed into place, manifest last,
so concurrent processes at worst generate the same bytes twice.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import platform
import sys
import threading
import types

from cupric import _config
from .. import _cache
from .errors import BindingsError
from .generate import GeneratedModule, generate, generator_identity
from .headers import HeaderSet, find_headers
from .libraries import LibrarySpec

_MANIFEST = "manifest.json"
_lock = threading.Lock()


def bindings_dir() -> str:
    """Where generated modules live (see the module docstring for the order)."""
    explicit = _config.BINDINGS_DIR.get()
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


def _secure_entry(directory: str, create: bool) -> str | None:
    """`directory` checked (and created) from the bindings folder down; None when missing
    or not writable. Raises PermissionError for a folder of another user."""
    from .._paths import cache_root

    parent = os.path.dirname(directory)
    root = str(cache_root())
    # Whoever owns a folder can rename what is in it: check from the cache root down.
    top = root if parent == os.path.join(root, "bindings") else parent
    found = _cache.secure_folder(directory, top, create=create)
    return None if found is None else str(found)


def _manifest(directory: str) -> dict | None:
    text = _cache.read_trusted(os.path.join(directory, _MANIFEST), limit=1 << 24)
    if text is None:
        return None
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


def _fresh(directory: str, spec: LibrarySpec) -> dict | None:
    """The manifest when the entry exists and its headers are unchanged, else None."""
    try:
        if _secure_entry(directory, create=False) is None:
            return None
        manifest = _manifest(directory)
        if manifest is None or not isinstance(manifest.get("sha256"), str):
            return None
        for path, size, mtime in manifest["files"]:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return None
        if not os.path.isfile(os.path.join(directory, module_filename(spec))):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        # Missing, half-written or foreign entry: regenerate rather than trust it (a
        # folder of another user then raises PermissionError from `write_entry`).
        return None
    return manifest


def write_entry(directory: str, spec: LibrarySpec, generated: GeneratedModule) -> str:
    """Write a generated module and its manifest (best effort: an unwritable cache only
    warns); return the module's path."""
    path = os.path.join(directory, module_filename(spec))
    if _secure_entry(directory, create=True) is None:
        return path
    data = generated.text.encode("utf-8")
    if not _cache.write_atomic(path, data):
        return path
    manifest = {
        "library": spec.name,
        "library_version": list(generated.info.library_version),
        "header_hash": generated.info.header_hash,
        "generator": generated.info.generator_version,
        "backend": generated.backend,
        "functions": len(generated.functions),
        "files": _stat_list(generated.files),
        "sha256": _cache.sha256(data),
    }
    _cache.write_atomic(os.path.join(directory, _MANIFEST),
                        json.dumps(manifest, indent=1).encode("utf-8"))
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


def _module_object(path: str, library: str) -> types.ModuleType:
    name = f"cupric.bindings_gen._generated.{library}"
    module_spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    module = importlib.util.module_from_spec(module_spec)
    module.__file__ = path
    return module


def _run(code, path: str, library: str) -> types.ModuleType:
    module = _module_object(path, library)
    exec(code, module.__dict__)
    sys.modules.setdefault(module.__name__, module)
    return module


def _code_name(spec_name: str) -> str:
    return f"_cupric_{spec_name}.{sys.implementation.cache_tag}"


def import_module(path: str, library: str) -> types.ModuleType:
    """Run a generated module. One of the cache (in the bindings folder, or beside a
    manifest) must match the SHA-256 its manifest recorded, and come from files of this
    user that no one else can write; a file elsewhere without a manifest is the caller's
    own and is run as it is.

    Raises
    ------
    BindingsError
        The entry is missing, foreign or corrupt (`load_module` then generates it again),
        or its text does not compile.
    """
    directory = os.path.dirname(path)
    manifest = _manifest(directory)
    digest = manifest.get("sha256") if manifest else None
    if not isinstance(digest, str):
        inside = os.path.realpath(directory).startswith(os.path.realpath(bindings_dir()) + os.sep)
        if inside or os.path.exists(os.path.join(directory, _MANIFEST)):
            raise BindingsError(f"no trusted manifest for {path}; generate it again")
        with open(path, "rb") as f:
            return _run(compile(f.read(), path, "exec", dont_inherit=True), path, library)
    # The compiled code of the verified text, when an earlier load kept it.
    blob = _cache.load_blob(directory, _code_name(library))
    if blob is not None and blob[2].get("source_sha256") == digest:
        try:
            code = marshal.loads(blob[1])
        except (ValueError, EOFError, TypeError):
            code = None
        if code is not None:
            return _run(code, path, library)
    source = _cache.read_trusted(path, digest)
    if source is None:
        raise BindingsError(f"{path} does not match its manifest (changed, truncated or "
                            "not this user's); generate it again")
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise BindingsError(f"{path} does not compile: {exc}") from exc
    _cache.store_blob(directory, _code_name(library), marshal.dumps(code), ".code",
                      {"source_sha256": digest})
    return _run(code, path, library)


def load_module(spec: LibrarySpec, headers: str | None = None) -> types.ModuleType:
    """The generated module of a library, generating it on first use, and again when the
    cached copy fails verification.

    Raises
    ------
    HeadersNotFoundError, PreprocessorNotFoundError, BindingsError
    PermissionError
        The bindings folder belongs to another user.
    """
    path, generated = ensure(spec, headers)
    if generated is None:
        try:
            return import_module(path, spec.name)
        except BindingsError:
            path, generated = ensure(spec, headers, force=True)
    try:
        return import_module(path, spec.name)
    except BindingsError:
        # The cache could not keep it (read-only, full): run what was just generated.
        code = compile(generated.text, path, "exec", dont_inherit=True)
        return _run(code, path, spec.name)
