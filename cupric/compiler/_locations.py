"""Where the toolchain libraries were found, remembered in cupric's cache root.

Finding libNVVM, nvJitLink and libdevice through `cuda.pathfinder` costs about 30 ms of
imports per process. The first process finds them that way and writes what it found to
``<cache root>/toolchain/locations-<environment>.json``; later processes load the remembered
files directly. A record belongs to one environment (interpreter, prefix, site-packages
folders and the variables the search reads: CUDA_HOME, CUDA_PATH, CONDA_PREFIX,
LD_LIBRARY_PATH), and is used only while every remembered file is unchanged (size,
modification time, inode) and no site-packages folder or conda environment has changed
since (installing or removing a package changes their modification time): anything else
is a miss, and the search runs again.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

__all__ = ["recall", "remember", "forget", "record_path"]

#: Bumped when the record's layout changes.
RECORD_VERSION = 1
#: What the library search reads besides the interpreter's own folders.
_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "LD_LIBRARY_PATH")

_lock = threading.Lock()
_records: dict[str, dict] = {}  # record path -> its content, read once per process


def _site_folders() -> list[str]:
    import site

    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return folders


def _environment() -> dict:
    return {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
            "site": _site_folders(), "env": {v: os.environ.get(v) for v in _VARIABLES}}


def record_path() -> Path:
    """The record of this environment (it need not exist)."""
    import hashlib

    from cupric._paths import cache_root

    text = json.dumps(_environment(), sort_keys=True).encode("utf-8")
    digest = hashlib.blake2b(text, digest_size=10).hexdigest()
    return cache_root() / "toolchain" / f"locations-{digest}.json"


def _identity(path: str) -> list[int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_size, info.st_mtime_ns, info.st_ino]


def _watched_folders() -> list[str]:
    """Folders whose change may change what the search finds."""
    folders = _site_folders()
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        folders.append(os.path.join(conda, "conda-meta"))
    return folders


def _folder_stamps() -> list[list]:
    stamps = []
    for folder in _watched_folders():
        try:
            stamps.append([folder, os.stat(folder).st_mtime_ns])
        except OSError:
            stamps.append([folder, None])
    return stamps


def _load(path: Path) -> dict:
    key = str(path)
    record = _records.get(key)
    if record is None:
        from cupric import _cache
        try:
            # Remembered paths get loaded into this process: trust only a private record
            # of this user in a folder of this user (`cupric._cache`).
            text = None
            if _cache.secure_folder(path.parent, path.parent.parent, create=False):
                text = _cache.read_trusted(path, limit=1 << 20)
            record = json.loads(text) if text is not None else {}
            if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
                record = {}
        except (OSError, ValueError):
            record = {}
        _records[key] = record
    return record


def recall(piece: str) -> tuple[str, str] | None:
    """``(path, found_via)`` remembered for `piece` (``"libnvvm"``, ``"nvjitlink"``,
    ``"libdevice"``) in this environment, or None when there is no valid record.

    Cost
    ----
    First call per process: reads one small JSON file and stats the remembered file and
    the site-packages folders (tens of microseconds); later calls: the stats.
    """
    with _lock:
        record = _load(record_path())
        entry = record.get("pieces", {}).get(piece)
        if not entry or record.get("folders") != _folder_stamps():
            return None
        if _identity(entry["path"]) != entry["identity"]:
            return None
        return entry["path"], entry["found_via"]


def remember(piece: str, path: str, found_via: str) -> None:
    """Record where `piece` was found, for the next process. Best effort: a cache root
    that cannot be written only means the next process searches again."""
    identity = _identity(path)
    if identity is None:
        return
    with _lock:
        target = record_path()
        record = dict(_load(target))
        stamps = _folder_stamps()
        if record.get("folders") != stamps:
            record = {}  # the environment changed: what else was remembered may be stale
        pieces = dict(record.get("pieces", {}))
        pieces[piece] = {"path": path, "found_via": found_via, "identity": identity}
        record = {"version": RECORD_VERSION, "environment": _environment(), "folders": stamps,
                  "pieces": pieces}
        try:
            _write(target, record)
        except OSError:
            return
        _records[str(target)] = record


def forget() -> None:
    """Drop what this process read (the next `recall` reads the file again)."""
    with _lock:
        _records.clear()


def _write(target: Path, record: dict) -> None:
    from cupric import _cache

    if _cache.secure_folder(target.parent, target.parent.parent) is None:
        raise OSError(f"cannot write {target.parent}")
    text = json.dumps(record, indent=1, sort_keys=True).encode("utf-8")
    if not _cache.write_atomic(target, text):
        raise OSError(f"cannot write {target}")
