"""How an NCCL communicator is made: `CommOptions` (turned into an ``ncclConfig_t``) and
the `UniqueId` that names one clique.

Every rank of a clique joins it with the same 128-byte id, made by one rank
(``ncclGetUniqueId``) and sent to the others over the launcher's own channel; the config
says whether the communicator blocks the host and how NCCL may use the GPU.
"""

from __future__ import annotations

import dataclasses

__all__ = ["CommOptions", "UniqueId"]

_UNDEF_INT = -2**31          # NCCL_CONFIG_UNDEF_INT (INT_MIN): "NCCL picks"
_CONFIG_MAGIC = 0xCAFEBEEF   # ncclConfig_t.magic, NCCL_CONFIG_INITIALIZER's value
_SPLIT_NOCOLOR = -1          # NCCL_SPLIT_NOCOLOR
_UNIQUE_ID_BYTES = 128       # NCCL_UNIQUE_ID_BYTES


@dataclasses.dataclass(frozen=True)
class CommOptions:
    """How a communicator is made (validated at construction; turned into an
    ``ncclConfig_t`` by `config`).

    Parameters
    ----------
    blocking : bool
        False makes a non-blocking communicator: no call blocks the host, and `timeout`
        bounds setup, every wait for queued work, and `close`.
    timeout : float or None
        Seconds that `Communicator.wait`, the setup of a non-blocking communicator and
        the waits of non-blocking calls allow before aborting the communicator and
        raising `NcclTimeoutError`. None waits forever.
    poll_interval : float
        Seconds between two polls of a waiting loop.
    cga_cluster_size, min_ctas, max_ctas : int, optional
        NCCL's cooperative-group cluster size and bounds on the thread blocks (channels)
        a collective uses; None lets NCCL pick.
    net_name : str, optional
        The network plugin to use (``"IB"``, ``"Socket"``); None lets NCCL pick.
    split_share : bool, optional
        Whether communicators split from this one share its resources.
    comm_name : str, optional
        A name NCCL prints in its logs.
    """

    blocking: bool = True
    timeout: float | None = 300.0
    poll_interval: float = 1e-4
    cga_cluster_size: int | None = None
    min_ctas: int | None = None
    max_ctas: int | None = None
    net_name: str | None = None
    split_share: bool | None = None
    comm_name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.blocking, bool):
            raise TypeError(f"blocking must be a bool, got {type(self.blocking).__name__}")
        if self.timeout is not None and not (isinstance(self.timeout, (int, float))
                                             and self.timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, got "
                             f"{self.timeout!r}")
        if not (isinstance(self.poll_interval, (int, float)) and
                0 < self.poll_interval <= 1):
            raise ValueError(f"poll_interval must be in (0, 1] seconds, got "
                             f"{self.poll_interval!r}")
        for name in ("cga_cluster_size", "min_ctas", "max_ctas"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ValueError(f"{name} must be a non-negative int or None, got "
                                 f"{value!r}")
        if self.min_ctas and self.max_ctas and self.min_ctas > self.max_ctas:
            raise ValueError(f"min_ctas {self.min_ctas} > max_ctas {self.max_ctas}")
        for name in ("net_name", "comm_name"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None")

    def config(self, lib, keep: list):
        """An ``ncclConfig_t *`` holding these options (``NCCL_CONFIG_INITIALIZER``
        first, then the fields set here); C strings it points at go into `keep`."""
        ffi = lib.ffi
        cfg = ffi.new("ncclConfig_t *")
        for name, field in ffi.typeof("ncclConfig_t").fields:
            if field.type.kind == "primitive" and field.type.cname == "int":
                setattr(cfg, name, _UNDEF_INT)
        cfg.size = ffi.sizeof("ncclConfig_t")
        # Headers before NCCL 2.23 write the magic as a literal in NCCL_CONFIG_INITIALIZER
        # instead of naming it NCCL_API_MAGIC; the value is the same.
        cfg.magic = getattr(lib, "NCCL_API_MAGIC", _CONFIG_MAGIC)
        cfg.version = lib.NCCL_VERSION_CODE
        cfg.blocking = 1 if self.blocking else 0
        for name, field in (("cga_cluster_size", "cgaClusterSize"),
                            ("min_ctas", "minCTAs"), ("max_ctas", "maxCTAs")):
            value = getattr(self, name)
            if value is not None:
                setattr(cfg, field, value)
        if self.split_share is not None:
            cfg.splitShare = int(self.split_share)
        for name, field in (("net_name", "netName"), ("comm_name", "commName")):
            value = getattr(self, name)
            if value is not None:
                text = ffi.new("char[]", value.encode())
                keep.append(text)
                setattr(cfg, field, text)
        return cfg


class UniqueId:
    """The 128 bytes that name one clique: made by one rank (`new`), sent to every other
    (`to_bytes` / `from_bytes`, or pickling), and passed to `Communicator.init`.

    Safety
    ------
    The bytes hold the address of the maker's bootstrap socket: anyone who has them can
    join the clique. Send them over the launcher's own channel, not a public one.
    """

    __slots__ = ("_bytes",)
    NBYTES = _UNIQUE_ID_BYTES

    def __init__(self, data: bytes) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"a unique id is {_UNIQUE_ID_BYTES} bytes, got "
                            f"{type(data).__name__}")
        data = bytes(data)
        if len(data) != _UNIQUE_ID_BYTES:
            raise ValueError(f"a unique id is {_UNIQUE_ID_BYTES} bytes, got {len(data)}")
        self._bytes = data

    @classmethod
    def new(cls) -> "UniqueId":
        """A new id (``ncclGetUniqueId``): starts this process's bootstrap listener, so
        exactly one rank (rank 0) makes it.

        Raises
        ------
        NcclError
            When NCCL cannot open its bootstrap socket (``NCCL_SOCKET_IFNAME`` names no
            usable interface, say).
        """
        from . import lib
        out = lib.ffi.new("ncclUniqueId *")
        lib.check(lib.lib.ncclGetUniqueId(out))
        return cls(bytes(lib.ffi.buffer(out)))

    from_bytes = classmethod(lambda cls, data: cls(data))

    def to_bytes(self) -> bytes:
        """The 128 bytes, to send to the other ranks."""
        return self._bytes

    __bytes__ = to_bytes

    def _c_value(self, lib):
        out = lib.ffi.new("ncclUniqueId *")
        lib.ffi.memmove(out, self._bytes, _UNIQUE_ID_BYTES)
        return out[0]

    def __eq__(self, other) -> bool:
        return isinstance(other, UniqueId) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __reduce__(self):
        return (UniqueId, (self._bytes,))

    def __repr__(self) -> str:
        import hashlib
        return f"<UniqueId {hashlib.sha256(self._bytes).hexdigest()[:12]}>"
