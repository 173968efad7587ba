"""Private cache folders: code cupric writes for itself and later runs (compiled kernels,
C extensions, generated bindings) must be code nobody else could have written.

Every folder from the cache root down is the user's own, mode 0700, checked each time
it is opened, for reading as well as writing: a folder of another user is refused with a
`PermissionError` naming it. Each file is read only if the user owns it and no one else
can write it, and code (a ``.so``, a generated ``.py``, PTX/cubin) is used only when its
SHA-256 matches the one recorded when it was built; anything else is a miss and is built
again. Files are written under unique names made with exclusive creation in the same
folder (`tempfile.mkstemp`) and renamed into place atomically. Writing is best effort: a
read-only or full cache costs a rebuild in memory and one warning, never an error.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import threading
import warnings
from pathlib import Path

from ._paths import cache_root

__all__ = ["secure_folder", "folder", "read_trusted", "write_atomic", "sha256",
           "store_blob", "load_blob", "warn_unwritable", "private_tempdir"]

_FOLDER_MODE = 0o700
_FILE_MODE = 0o600
_warned: set[str] = set()
_warn_lock = threading.Lock()


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def sha256(data: bytes) -> str:
    """The SHA-256 hex digest of `data`."""
    return hashlib.sha256(data).hexdigest()


def _check_folder(path: Path) -> None:
    """Refuse a folder another user owns or can write into; tighten our own to 0700."""
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "cupric cache path is not a folder", str(path))
    uid = _uid()
    if uid is not None and info.st_uid != uid:
        raise PermissionError(
            errno.EACCES,
            f"cupric cache folder belongs to uid {info.st_uid}, not to this user (uid "
            f"{uid}): another user could have planted code in it. Remove it, or set "
            f"CUPRIC_CACHE_DIR to a folder of your own", str(path))
    if info.st_mode & 0o077:
        try:
            os.chmod(path, _FOLDER_MODE)
        except OSError:
            # A read-only file system: the folder cannot change, so nobody can write into
            # it either, unless its mode already lets them.
            if info.st_mode & 0o022:
                raise PermissionError(
                    errno.EACCES, "cupric cache folder is writable by other users and its "
                    "mode cannot be changed", str(path)) from None


def secure_folder(path: str | os.PathLike, root: str | os.PathLike | None = None, *,
                  create: bool = True) -> Path | None:
    """The folder `path`, each folder from `root` (default: `path` itself) down to it
    created with mode 0700 when missing and checked.

    Returns
    -------
    Path or None
        None when a folder is missing and cannot be created (read-only or full disk,
        or `create` False); callers then work in memory.

    Raises
    ------
    PermissionError
        A folder on the way belongs to another user or is writable by others.
    """
    path = Path(path).expanduser()
    top = Path(root).expanduser() if root is not None else path
    try:
        parts = path.relative_to(top).parts
    except ValueError:
        top, parts = path, ()
    current = top
    for step in (None, *parts):
        if step is not None:
            current = current / step
        try:
            _check_folder(current)
            continue
        except FileNotFoundError:
            if not create:
                return None
        try:
            if step is None:
                current.parent.mkdir(parents=True, exist_ok=True)
            current.mkdir(mode=_FOLDER_MODE)
        except FileExistsError:
            pass  # made by a concurrent process: checked below like any other
        except OSError as exc:
            warn_unwritable(current, exc)
            return None
        _check_folder(current)
    return path


def folder(kind: str, *, create: bool = True) -> Path | None:
    """``<cache root>/<kind>``, checked from the cache root down (see `secure_folder`)."""
    root = cache_root()
    return secure_folder(root / kind, root, create=create)


def read_trusted(path: str | os.PathLike, digest: str | None = None,
                 limit: int = 1 << 30) -> bytes | None:
    """The bytes of a cache file, or None when it is missing or not to be trusted: not a
    regular file (a symbolic link included), owned by another user, writable by others,
    larger than `limit`, or (with `digest`) not matching its recorded SHA-256.

    A file refused for its owner or mode gives one `RuntimeWarning`: something other than
    cupric wrote it.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        # ELOOP: a symbolic link where a file should be; anything else (EACCES, EIO):
        # unreadable. Either way the cached copy is not used and is built again.
        _warn_once(f"untrusted:{path}", f"cupric: ignored {path} in the cache "
                   f"({exc.strerror or exc}); rebuilding it")
        return None
    try:
        info = os.fstat(fd)
        uid = _uid()
        if not stat.S_ISREG(info.st_mode) or (uid is not None and info.st_uid != uid) \
                or info.st_mode & 0o022:
            _warn_once(f"untrusted:{path}",
                       f"cupric: ignored {path}: not a private file of this user "
                       f"(uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); "
                       "rebuilding it")
            return None
        if info.st_size > limit:
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if digest is not None and sha256(data) != digest:
        return None
    return data


def write_atomic(path: str | os.PathLike, data: bytes, *, mode: int = _FILE_MODE) -> bool:
    """Replace `path` with `data` atomically: written to a unique name made with exclusive
    creation in the same folder, then renamed over it. Readers in other processes see the
    old file or the new one, never a part.

    Returns False (with one warning per folder, and no temporary file left) when the
    folder cannot be written: read-only, full, or over quota.
    """
    path = Path(path)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                             dir=path.parent)
    except OSError as exc:
        warn_unwritable(path.parent, exc)
        return False
    try:
        with os.fdopen(handle, "wb") as file:
            if mode != _FILE_MODE:
                os.fchmod(file.fileno(), mode)
            file.write(data)
        os.replace(temporary, path)
    except OSError as exc:
        _unlink(temporary)
        warn_unwritable(path.parent, exc)
        return False
    except BaseException:
        _unlink(temporary)
        raise
    return True


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # already renamed, removed, or on a file system that refuses: nothing to do


def _warn_once(key: str, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def warn_unwritable(where: str | os.PathLike, exc: OSError) -> None:
    """One `RuntimeWarning` per folder: the cache there cannot be written, so what would
    be stored is built in memory instead (each process pays the build)."""
    reason = exc.strerror or str(exc)
    _warn_once(f"unwritable:{where}",
               f"cupric: cannot write the cache at {where} ({reason}); building in memory "
               "instead (set CUPRIC_CACHE_DIR to a writable folder to keep the results)")


# -- content-addressed blobs ---------------------------------------------------------------
# A blob (a C extension, a generated module) is stored as `<name>.<digest16><suffix>` next
# to `<name>.json`, which records its file name and SHA-256. The JSON is written last and
# commits the blob; two processes publishing at once each write a complete pair, so the
# record always names a file that matches it.


def store_blob(directory: str | os.PathLike, name: str, data: bytes, suffix: str,
               meta: dict | None = None) -> Path | None:
    """Publish `data` as blob `name` in `directory` (already checked with `secure_folder`);
    returns its path, or None when the cache cannot be written."""
    directory = Path(directory)
    digest = sha256(data)
    target = directory / f"{name}.{digest[:16]}{suffix}"
    if not write_atomic(target, data):
        return None
    record = {"format": 1, "file": target.name, "sha256": digest, "meta": meta or {}}
    text = json.dumps(record, indent=1, sort_keys=True).encode("utf-8")
    if not write_atomic(directory / f"{name}.json", text):
        return None
    return target


def load_blob(directory: str | os.PathLike, name: str) -> tuple[Path, bytes, dict] | None:
    """``(path, data, meta)`` of blob `name` when its record and file are both trusted
    and the SHA-256 matches; None otherwise (missing, foreign, corrupt: build it again)."""
    directory = Path(directory)
    text = read_trusted(directory / f"{name}.json", limit=1 << 20)
    if text is None:
        return None
    try:
        record = json.loads(text)
        file_name, digest = record["file"], record["sha256"]
        meta = record.get("meta", {})
        if (record.get("format") != 1 or not isinstance(file_name, str)
                or os.path.basename(file_name) != file_name
                or not file_name.startswith(name + ".") or not isinstance(meta, dict)):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    path = directory / file_name
    data = read_trusted(path, digest)
    if data is None:
        return None
    return path, data, meta


def private_tempdir(prefix: str = "cupric-") -> str:
    """A new private temporary folder (`tempfile.mkdtemp`: unpredictable name, mode
    0700); the caller removes it."""
    return tempfile.mkdtemp(prefix=prefix)
