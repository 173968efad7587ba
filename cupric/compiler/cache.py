"""The kernel cache: compiled PTX/cubin kept on disk per user, keyed by a hex digest.

An entry is a few files in a private folder: payloads (``<key>.ptx``, ``<key>.cubin``)
and ``<key>.json`` with metadata and the SHA-256 of every payload. Each file is written to
a unique temporary name and renamed into place, the JSON last, so readers in other
processes see either a whole entry or none; anything that fails its checksum is deleted
and rebuilt. Folders and files are checked on every read as on every write (owned by
this user, writable by no one else: `cupric._cache`), so code planted by another user is
never served. Nothing is ever unpickled. An in-memory layer answers repeated lookups in
one process; it is all that remains when the disk cannot be written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = ["KernelCache", "CacheEntry", "CacheStats", "make_key", "default_cache_dir",
           "default_cache"]

#: Bumped when the on-disk layout changes; older entries are then ignored and replaced.
#: (Entries that recorded BLAKE2b sums instead of SHA-256 read as corrupt: rebuilt once.)
FORMAT_VERSION = 1
#: Entries the in-memory layer keeps (the least recently used go first).
MEMORY_ENTRIES = 256

_KEY_RE = re.compile(r"^[0-9a-f]{16,128}$")
_KIND_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}$")


def _feed(hasher, part: Any) -> None:
    # Type tag + length prefix per part: ("ab", "c") and ("a", "bc") hash differently,
    # and so do 1 and "1".
    if isinstance(part, bytes | bytearray | memoryview):
        data = bytes(part)
        hasher.update(b"B%d:" % len(data) + data)
    elif isinstance(part, str):
        data = part.encode("utf-8")
        hasher.update(b"S%d:" % len(data) + data)
    elif isinstance(part, bool) or part is None:
        hasher.update(b"K" + repr(part).encode())
    elif isinstance(part, int | float):
        hasher.update(b"N" + repr(part).encode() + b";")
    elif isinstance(part, tuple | list):
        hasher.update(b"T%d:" % len(part))
        for item in part:
            _feed(hasher, item)
    elif isinstance(part, Mapping):
        hasher.update(b"M%d:" % len(part))
        for name in sorted(part, key=str):
            _feed(hasher, str(name))
            _feed(hasher, part[name])
    else:
        raise TypeError(f"make_key: cannot hash a {type(part).__name__} stably; pass str, "
                        "bytes, numbers, None, or tuples/lists/dicts of them")


def make_key(*parts: Any) -> str:
    """A cache key: the BLAKE2b-256 hex digest of `parts`, hashed unambiguously.

    Parameters
    ----------
    *parts : str, bytes, int, float, bool, None, or tuples/lists/dicts of these
        Everything that changes the compiled code: source, argument types,
        ``options.cache_key()``, arch, toolchain versions.

    Examples
    --------
    >>> len(make_key("source", ("f32", 1), "arch=sm_90"))
    64
    """
    hasher = hashlib.blake2b(digest_size=32)
    for part in parts:
        _feed(hasher, part)
    return hasher.hexdigest()


def _checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def default_cache_dir() -> Path:
    """The `kernels/` folder of cupric's cache root (see `cupric._paths.cache_root`)."""
    from .._paths import cache_root

    return cache_root() / "kernels"


@dataclass(frozen=True)
class CacheEntry:
    """One cached compilation: payloads by kind (``"ptx"`` as str, others bytes) and metadata."""

    key: str
    payloads: dict[str, str | bytes]
    meta: dict[str, Any]

    @property
    def ptx(self) -> str | None:
        return self.payloads.get("ptx")

    @property
    def cubin(self) -> bytes | None:
        return self.payloads.get("cubin")


@dataclass
class CacheStats:
    """Counters of one `KernelCache` (this process) and the disk footprint."""

    entries: int = 0
    bytes: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    corrupt: int = 0
    writes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class KernelCache:
    """Compiled kernels on disk, keyed by a hex digest, with an in-memory layer.

    Parameters
    ----------
    root : str or Path, optional
        Folder of the cache (default `default_cache_dir()`); created with mode 0700.
    memory : bool
        Keep entries read or written by this process in memory (default True).

    Raises
    ------
    PermissionError
        From `get` and `put`: `root` (or a folder in it) belongs to another user or is
        writable by others; it could hold planted code.

    Examples
    --------
    >>> import tempfile
    >>> cache = KernelCache(tempfile.mkdtemp())
    >>> key = make_key("kernel source", "arch=sm_90")
    >>> _ = cache.put(key, {"ptx": ".version 9.0"}, {"arch": "sm_90"})
    >>> cache.get(key).ptx
    '.version 9.0'

    Cost
    ----
    A memory hit is a dict lookup; a disk hit checks the folders' owners, reads the JSON
    and payloads and checks their SHA-256 (well under a millisecond for kernel-sized
    files).

    Thread safety
    -------------
    Safe across threads and processes: the memory layer is locked, files are replaced
    atomically, and a reader that meets a half-removed entry treats it as a miss.
    """

    def __init__(self, root: str | os.PathLike | None = None, *, memory: bool = True) -> None:
        self._root = Path(root).expanduser() if root is not None else default_cache_dir()
        # Whoever owns a folder can replace what is in it: the default root is checked
        # from cupric's cache root down.
        self._top = self._root if root is not None else self._root.parent
        self._folder = self._root / f"v{FORMAT_VERSION}"
        # The newest MEMORY_ENTRIES entries, oldest first: a process that makes kernels on
        # the fly must not keep every artifact it ever loaded.
        self._memory: OrderedDict[str, CacheEntry] | None = OrderedDict() if memory else None
        self._lock = threading.Lock()
        self._stats = CacheStats()

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"KernelCache({str(self._root)!r})"

    # -- layout ---------------------------------------------------------------------------

    def _shard_folder(self, key: str, create: bool) -> Path | None:
        """The entry's folder, checked from the root down (created when `create`); None
        when it is missing, or cannot be made. Cached cubins are code this process will
        run: a folder of another user raises PermissionError."""
        from .._cache import secure_folder

        return secure_folder(self._shard(key), self._top, create=create)

    @staticmethod
    def _check_key(key: str) -> str:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"cache key must be 16..128 lowercase hex digits (see make_key), "
                             f"got {key!r}")
        return key

    def _shard(self, key: str) -> Path:
        return self._folder / key[:2]

    def _path(self, key: str, suffix: str) -> Path:
        return self._shard(key) / f"{key}.{suffix}"

    # -- reading --------------------------------------------------------------------------

    def get(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None on a miss (a corrupt entry is removed: a miss).

        Raises
        ------
        ValueError
            If `key` is not a hex digest.
        """
        self._check_key(key)
        if self._memory is not None:
            with self._lock:
                entry = self._memory.get(key)
                if entry is not None:
                    self._memory.move_to_end(key)
                    self._stats.memory_hits += 1
                    return entry
        entry = self._read(key)
        with self._lock:
            if entry is None:
                self._stats.misses += 1
                return None
            self._stats.disk_hits += 1
            self._remember(key, entry)
        return entry

    def _remember(self, key: str, entry: CacheEntry) -> None:
        # Under self._lock.
        if self._memory is None:
            return
        self._memory[key] = entry
        self._memory.move_to_end(key)
        while len(self._memory) > MEMORY_ENTRIES:
            self._memory.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def _read(self, key: str) -> CacheEntry | None:
        from .._cache import read_trusted

        if self._shard_folder(key, create=False) is None:
            return None
        text = read_trusted(self._path(key, "json"), limit=1 << 24)
        if text is None:
            return None
        try:
            meta = json.loads(text)
            if meta.get("format") != FORMAT_VERSION or meta.get("key") != key:
                raise ValueError("entry of another format or key")
            payloads: dict[str, str | bytes] = {}
            for kind, record in meta["payloads"].items():
                if not _KIND_RE.match(kind) or kind == "json":
                    raise ValueError(f"bad payload kind {kind!r}")
                data = read_trusted(self._path(key, kind), record["sha256"])
                if data is None or len(data) != record["size"]:
                    raise ValueError(f"{kind} payload is missing or fails its checksum")
                payloads[kind] = data.decode("utf-8") if record["text"] else data
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            # Truncated, tampered with, half written by a crashed process, or a payload
            # removed under us: drop it so the caller rebuilds it. (json.JSONDecodeError is a
            # ValueError.)
            with self._lock:
                self._stats.corrupt += 1
            self._remove_files(key)
            return None
        return CacheEntry(key, payloads, meta.get("meta", {}))

    # -- writing --------------------------------------------------------------------------

    def put(self, key: str, payloads: Mapping[str, str | bytes],
            meta: Mapping[str, Any] | None = None) -> CacheEntry:
        """Store payloads (``{"ptx": str, "cubin": bytes, ...}``) and JSON-able metadata.

        Returns
        -------
        CacheEntry
            What a later `get` returns.

        Raises
        ------
        ValueError, TypeError
            Bad key, payload kind, payload type, or metadata that JSON cannot hold.
        PermissionError
            The cache folder belongs to another user.

        A disk that cannot be written (read-only, full) is not an error: the entry is
        kept in memory only, with one `RuntimeWarning` per process.
        """
        self._check_key(key)
        if not payloads:
            raise ValueError("an entry needs at least one payload")
        meta = dict(meta or {})
        records: dict[str, dict[str, Any]] = {}
        encoded: dict[str, bytes] = {}
        for kind, value in payloads.items():
            if not _KIND_RE.match(kind) or kind == "json":
                raise ValueError(f"payload kind must be a short lowercase name, got {kind!r}")
            if isinstance(value, str):
                data, text = value.encode("utf-8"), True
            elif isinstance(value, bytes | bytearray | memoryview):
                data, text = bytes(value), False
            else:
                raise TypeError(f"payload {kind!r} must be str or bytes, got {type(value).__name__}")
            encoded[kind] = data
            records[kind] = {"size": len(data), "sha256": _checksum(data), "text": text}
        document = json.dumps({"format": FORMAT_VERSION, "key": key, "payloads": records,
                               "meta": meta}, sort_keys=True, indent=1).encode("utf-8")
        from .._cache import write_atomic

        written = self._shard_folder(key, create=True) is not None
        for kind, data in encoded.items():
            written = written and write_atomic(self._path(key, kind), data)
        if written:  # last: it commits the entry
            written = write_atomic(self._path(key, "json"), document)
        entry = CacheEntry(key, {k: (v.decode("utf-8") if records[k]["text"] else v)
                                 for k, v in encoded.items()}, json.loads(json.dumps(meta)))
        with self._lock:
            self._stats.writes += written
            self._remember(key, entry)
        return entry

    # -- maintenance ----------------------------------------------------------------------

    def _remove_files(self, key: str) -> None:
        shard = self._shard(key)
        try:
            names = [p for p in shard.iterdir() if p.name.startswith(key + ".")]
        except FileNotFoundError:
            return
        json_first = sorted(names, key=lambda p: p.suffix != ".json")  # uncommit, then delete
        for path in json_first:
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # another process removed it first

    def invalidate(self, key: str) -> None:
        """Forget `key` in memory and on disk."""
        self._check_key(key)
        with self._lock:
            if self._memory is not None:
                self._memory.pop(key, None)
        self._remove_files(key)

    def clear_memory(self) -> None:
        """Drop the in-memory layer only (the next `get` reads the disk)."""
        with self._lock:
            if self._memory is not None:
                self._memory.clear()

    def _files(self):
        if not self._folder.is_dir():
            return
        for shard in self._folder.iterdir():
            if shard.is_dir():
                yield from (p for p in shard.iterdir() if p.is_file())

    def clear(self) -> int:
        """Remove every entry (memory and disk); returns the number of entries removed."""
        self.clear_memory()
        removed = 0
        for path in list(self._files()):
            if path.suffix == ".json":
                removed += 1
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # removed concurrently
        return removed

    def stats(self) -> CacheStats:
        """Counters of this process plus entries and bytes on disk now.

        Cost
        ----
        Walks the cache folder (one `stat` per file).
        """
        entries = total = 0
        for path in self._files():
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
            entries += path.suffix == ".json"
        with self._lock:
            stats = CacheStats(**{**self._stats.__dict__, "entries": entries, "bytes": total})
        stats.extra = {"root": str(self._root)}
        return stats

    def trim(self, max_bytes: int) -> int:
        """Remove the least recently written entries until the disk use is <= `max_bytes`.

        Returns the number of entries removed.
        """
        groups: dict[str, list[os.stat_result]] = {}
        for path in self._files():
            try:
                groups.setdefault(path.name.split(".")[0], []).append(path.stat())
            except FileNotFoundError:
                continue
        total = sum(s.st_size for stats in groups.values() for s in stats)
        removed = 0
        for key, stats in sorted(groups.items(), key=lambda kv: max(s.st_mtime for s in kv[1])):
            if total <= max_bytes:
                break
            if not _KEY_RE.match(key):
                continue  # a temporary file of a writer in progress
            self.invalidate(key)
            total -= sum(s.st_size for s in stats)
            removed += 1
        return removed


_default_lock = threading.Lock()
_default: KernelCache | None = None


def default_cache() -> KernelCache:
    """The process-wide cache at `default_cache_dir()` (created on first use)."""
    global _default
    with _default_lock:
        if _default is None or _default.root != default_cache_dir():
            _default = KernelCache()
        return _default
