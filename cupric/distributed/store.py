"""Stores: how rank 0 hands the NCCL unique id to every other rank before NCCL can talk.

NCCL bootstraps from 128 bytes that one rank makes and all others must receive through
some channel the job already has: MPI (mpi4py's broadcast), PyTorch's TCP key-value
store (rank 0 serves it at ``MASTER_ADDR:MASTER_PORT``), or a folder every rank can see
(a shared file system). Each store offers ``set(key, bytes)`` and ``get(key) -> bytes``;
`get` waits for the key, within a timeout.
"""

from __future__ import annotations

import os
import re
import time

__all__ = ["FileStore", "TcpStore", "MpiStore", "StoreTimeoutError"]


class StoreTimeoutError(TimeoutError):
    """A key did not appear within the store's timeout (a rank died, never started, or
    looks at another folder or port)."""


_KEY = re.compile(r"^[A-Za-z0-9._-]+$")


class FileStore:
    """A key-value store in a folder that every rank can read and write (a shared file
    system across hosts, or any local folder within one host).

    Writes are atomic (a temporary file in the same folder, then ``os.replace``), so a
    reader never sees half a value; `get` polls until the key's file exists.

    Parameters
    ----------
    path : str or os.PathLike
        The folder (made if missing).
    timeout : float
        Seconds `get` waits for a key.
    poll_interval : float
        Seconds between two looks (doubling up to 50 ms).

    Safety
    ------
    Values left by an earlier job in the same folder are read as if new: give each job
    its own folder or keys (cupric's `init` puts the launcher's run id in its keys, and
    rank 0 removes them once every rank has read them).
    """

    def __init__(self, path, timeout: float = 300.0, poll_interval: float = 1e-3) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.path = os.fspath(path)
        self.timeout = float(timeout)
        self.poll_interval = poll_interval
        os.makedirs(self.path, exist_ok=True)

    def _file(self, key: str) -> str:
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"a store key is letters, digits, '.', '_' and '-', got "
                             f"{key!r}")
        return os.path.join(self.path, key)

    def set(self, key: str, value: bytes) -> None:
        """Write `value` under `key` atomically (replacing an older value)."""
        target = self._file(key)
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"a store value is bytes, got {type(value).__name__}")
        temporary = f"{target}.tmp-{os.getpid()}-{time.monotonic_ns()}"
        with open(temporary, "wb") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of `key`, waiting for it to be written.

        Raises
        ------
        StoreTimeoutError
            When it did not appear within `timeout` (default: the store's).
        """
        target = self._file(key)
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        pause = self.poll_interval
        while True:
            try:
                with open(target, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                pass
            if time.monotonic() >= deadline:
                raise StoreTimeoutError(f"key {key!r} did not appear in {self.path} within "
                                        f"{limit:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def delete(self, key: str) -> bool:
        """Remove `key`; False when it was not there."""
        try:
            os.remove(self._file(key))
        except FileNotFoundError:
            return False
        return True

    def __repr__(self) -> str:
        return f"<FileStore {self.path}>"


class TcpStore:
    """PyTorch's ``torch.distributed.TCPStore``: rank 0 serves it at
    ``MASTER_ADDR:MASTER_PORT`` (or torchrun's agent does, when it says so), every other
    rank connects to it. `store` is the PyTorch object, for reuse
    (``torch.distributed.init_process_group(store=...)``).

    Raises
    ------
    ImportError
        Without PyTorch.
    """

    def __init__(self, host: str, port: int, world_size: int, is_server: bool,
                 timeout: float = 300.0) -> None:
        import datetime

        from torch.distributed import TCPStore
        self.timeout = float(timeout)
        self.store = TCPStore(host, port, world_size, is_server,
                              timeout=datetime.timedelta(seconds=timeout))

    def set(self, key: str, value: bytes) -> None:
        """Write `value` under `key` on the server."""
        self.store.set(key, value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of `key`, waiting for it (PyTorch's store timeout applies).

        Raises
        ------
        StoreTimeoutError
            When PyTorch's store gives up waiting.
        """
        try:
            return bytes(self.store.get(key))
        except RuntimeError as exc:  # PyTorch raises DistStoreError (a RuntimeError)
            if "timeout" in str(exc).lower() or "timed out" in str(exc).lower():
                raise StoreTimeoutError(f"key {key!r} did not appear in the TCP store "
                                        f"within {self.timeout:g} s") from exc
            raise

    def delete(self, key: str) -> bool:
        """Remove `key`; False when it was not there."""
        return bool(self.store.delete_key(key))


class MpiStore:
    """MPI's world communicator as a store: `set` on rank 0 and `get` everywhere make one
    ``MPI_Bcast`` (mpi4py), so every rank must call `get` for each key rank 0 sets."""

    def __init__(self) -> None:
        from mpi4py import MPI
        self.comm = MPI.COMM_WORLD
        self._pending: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        """Keep `value` for the broadcast that the next `get` of `key` makes (rank 0)."""
        self._pending[key] = bytes(value)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """Rank 0's value of `key` (``MPI_Bcast``; every rank calls it). MPI has no
        timeout: a rank that never calls it blocks the others until the launcher ends
        the job."""
        return self.comm.bcast(self._pending.pop(key, None), root=0)

    def delete(self, key: str) -> bool:
        """Drop a value not yet broadcast; False when there was none."""
        return self._pending.pop(key, None) is not None
