"""Kernel bundles: compiled kernels shipped with a package, so that its users need neither
libNVVM nor nvJitLink at run time (the role of a fatbinary in a CUDA C++ library).

A bundle is one zip file: ``manifest.json`` plus one cubin per (kernel variant, real
architecture) and the PTX of each variant for the lowest architecture (the driver JITs it
on GPUs newer than every cubin). ``python -m cupric compile --fatbin --arch
sm_80,sm_90,sm_100 FILE::KERNEL ... -o kernels.cubundle`` writes one; a package registers
it at import with `register_bundle`, and a launch then finds its variant there before
anything is compiled: matched on the kernel's portable identity (its qualified name and
a hash of its source, of the device functions it calls and of the module values it
reads), the parameter types, the launch variant (noalias, aligned) and the options.
"""

from __future__ import annotations

import dataclasses
import os
import threading

# json, zipfile, hashlib and inspect load on first use: every kernel's first compile asks
# this module (`lookup`), which must cost nothing when no bundle is registered.

__all__ = ["BUNDLE_FORMAT", "Bundle", "BundleEntry", "BundleMissError", "kernel_identity",
           "register_bundle", "unregister_bundle", "registered_bundles", "write_bundle",
           "lookup", "missing_error"]

#: Version of the manifest layout; a reader refuses a newer one.
BUNDLE_FORMAT = 1


class BundleMissError(LookupError):
    """No registered bundle holds the variant a launch needs, and no compiler is installed
    to build it. The message names the kernel, the architecture, the signature and what
    the bundles do hold."""


class BundleEntry:
    """One compiled variant in a bundle (a manifest row).

    A plain class, not a dataclass: this module is imported by every first compile,
    and generating a dataclass costs a millisecond.
    """

    FIELDS = ("kernel", "identity", "signature", "noalias", "aligned", "options", "symbol",
              "cubins", "ptx", "ptx_arch", "linker_release")
    __slots__ = FIELDS

    def __init__(self, *, kernel: str, identity: str, signature: str, noalias: bool,
                 aligned: bool, options: str, symbol: str, cubins: dict, ptx: str | None,
                 ptx_arch: str | None, linker_release: tuple | None) -> None:
        self.kernel = kernel            # qualified name
        self.identity = identity        # `kernel_identity` digest
        self.signature = signature      # repr of the parameter types
        self.noalias = noalias
        self.aligned = aligned
        self.options = options          # CompileOptions.cache_key() with arch=auto
        self.symbol = symbol
        self.cubins = cubins            # arch -> member name
        self.ptx = ptx                  # member name of the PTX (lowest arch), or None
        self.ptx_arch = ptx_arch
        self.linker_release = linker_release

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}

    def describe(self) -> str:
        return f"{self.kernel}({self.signature}) for {', '.join(sorted(self.cubins))}"


def _source_text(func) -> str:
    import inspect
    import textwrap
    try:
        return textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return repr(getattr(func, "__code__", func))


def kernel_identity(py_func) -> str:
    """A digest of what a kernel compiles from that holds across machines and Python
    versions (unlike the kernel cache's bytecode fingerprint): the source of the kernel
    and of the device functions it reaches, and the values of the module constants and
    arrays they name."""
    import hashlib

    from cupric.compiler.frontend.resolve import MISSING, is_constant_value, lookup
    h = hashlib.blake2b(digest_size=16)
    seen: set = set()

    def feed(func) -> None:
        if func in seen:
            return
        seen.add(func)
        h.update(func.__qualname__.encode())
        h.update(_source_text(func).encode())
        code = func.__code__
        names = set(code.co_names + code.co_freevars)
        for const in code.co_consts:  # nested code (comprehensions) names globals too
            if hasattr(const, "co_names"):
                names.update(const.co_names)
        for name in sorted(names):
            value = lookup(func, name)
            if value is MISSING:
                continue
            if is_constant_value(value):
                h.update(f"{name}={value!r};".encode())
            elif getattr(value, "_cupric_device_function", False):
                feed(value.py_func)
            elif hasattr(value, "__array_interface__") and hasattr(value, "tobytes"):
                h.update(f"{name}={value.dtype}{value.shape}{type(value).__name__};".encode())
                h.update(value.tobytes())
            elif hasattr(value, "bundle_identity"):  # external device functions
                h.update(f"{name}={value.bundle_identity()};".encode())
    feed(py_func)
    return h.hexdigest()


def _options_key(options) -> str:
    return dataclasses.replace(options, arch=None).cache_key()


class Bundle:
    """A bundle file opened for lookups (members are read on first use)."""

    def __init__(self, data: bytes, origin: str) -> None:
        import io
        import json
        import zipfile
        self.origin = origin
        self._zip = zipfile.ZipFile(io.BytesIO(data))
        try:
            manifest = json.loads(self._zip.read("manifest.json"))
        except KeyError:
            raise ValueError(f"{origin} is not a cupric kernel bundle (no manifest.json)") \
                from None
        if manifest.get("format", 0) > BUNDLE_FORMAT:
            raise ValueError(f"{origin} has bundle format {manifest.get('format')}; this "
                             f"cupric reads format {BUNDLE_FORMAT} (upgrade cupric)")
        self.entries = [BundleEntry(**{**e, "linker_release": tuple(e["linker_release"])
                                       if e.get("linker_release") else None})
                        for e in manifest["entries"]]
        self._lock = threading.Lock()

    @classmethod
    def open(cls, source) -> "Bundle":
        """A bundle from a path, a `importlib.resources` traversable or bytes."""
        if isinstance(source, (bytes, bytearray)):
            return cls(bytes(source), "<bytes>")
        if hasattr(source, "read_bytes"):
            return cls(source.read_bytes(), str(source))
        with open(os.fspath(source), "rb") as fh:
            return cls(fh.read(), os.fspath(source))

    def read(self, member: str) -> bytes:
        with self._lock:
            return self._zip.read(member)

    def find(self, identity: str, signature: str, noalias: bool, aligned: bool,
             options_key: str) -> BundleEntry | None:
        for e in self.entries:
            if (e.identity, e.signature, e.noalias, e.aligned, e.options) == \
                    (identity, signature, noalias, aligned, options_key):
                return e
        return None


_REGISTERED: list[Bundle] = []
_registry_lock = threading.Lock()


def register_bundle(source) -> Bundle:
    """Make the kernels of a bundle available to every launch in this process.

    Parameters
    ----------
    source : path, importlib.resources traversable, or bytes
        A file written by ``python -m cupric compile --fatbin``. A package usually calls
        ``register_bundle(importlib.resources.files(__package__) / "kernels.cubundle")``
        in its ``__init__``.

    Returns
    -------
    Bundle

    Raises
    ------
    ValueError
        Not a bundle, or one of a newer format.

    Thread safety
    -------------
    Safe; launches already under way keep the code they found.
    """
    bundle = Bundle.open(source)
    with _registry_lock:
        _REGISTERED.append(bundle)
    return bundle


def unregister_bundle(bundle: Bundle) -> None:
    """Forget a registered bundle (kernels already loaded from it stay loaded)."""
    with _registry_lock:
        _REGISTERED.remove(bundle)


def registered_bundles() -> list[Bundle]:
    return list(_REGISTERED)


def _arch_number(arch: str) -> int:
    return int("".join(ch for ch in arch if ch.isdigit()))


def _best_cubin(entry: BundleEntry, arch: str) -> str | None:
    """The cubin arch that runs on `arch`: the same one, else the newest of the same
    major version not above it (SASS runs within a major version, upwards)."""
    if arch in entry.cubins:
        return arch
    want = _arch_number(arch)
    fits = [a for a in entry.cubins if _arch_number(a) // 10 == want // 10
            and _arch_number(a) <= want and not a.endswith(("a", "f"))]
    return max(fits, key=_arch_number) if fits else None


def lookup(spec, options):
    """The `Artifact` of specialization `spec` for the resolved `options` from a
    registered bundle, or None (at once when no bundle is registered)."""
    if not _REGISTERED:
        return None
    from cupric.compiler.backend import Artifact
    kern = spec.kernel
    identity = kernel_identity(kern.py_func)
    signature = repr(spec.arg_types)
    options_key = _options_key(options)
    for bundle in list(_REGISTERED):
        entry = bundle.find(identity, signature, spec.noalias, spec.aligned, options_key)
        if entry is None:
            continue
        arch = _best_cubin(entry, options.arch)
        ptx = bundle.read(entry.ptx).decode() if entry.ptx else None
        if arch is None and (ptx is None or
                             _arch_number(entry.ptx_arch) > _arch_number(options.arch)):
            continue
        cubin = bundle.read(entry.cubins[arch]) if arch else None
        return Artifact(ptx=ptx, cubin=cubin, arch=arch or options.arch,
                        log=f"from bundle {bundle.origin}", key=f"bundle:{identity}",
                        from_cache=True, linker_release=entry.linker_release,
                        linker="bundle")
    return None


def missing_error(spec, options, cause: Exception) -> Exception:
    """What to raise when compiling `spec` failed for want of a toolchain (`cause`): a
    `BundleMissError` naming what is missing when a registered bundle holds this kernel
    in other variants, else `cause` itself."""
    kern = spec.kernel
    name = kern.py_func.__qualname__
    held = [(b, e) for b in _REGISTERED for e in b.entries if e.kernel == name]
    if not held:
        return cause
    identity = kernel_identity(kern.py_func)
    same_code = [(b, e) for b, e in held if e.identity == identity]
    lines = [f"kernel {name}: no registered bundle holds its variant for arch "
             f"{options.arch}, signature ({repr(spec.arg_types)[1:-1]}), noalias="
             f"{spec.noalias}, aligned={spec.aligned}, options {_options_key(options)}; "
             f"and no compiler is installed to build it ({str(cause).splitlines()[0]})"]
    if not same_code:
        lines.append("the bundles hold this kernel's name but for other source code "
                     "(rebuild the bundle from this version)")
    lines += [f"  {b.origin}: {e.describe()}" for b, e in (same_code or held)]
    return BundleMissError("\n".join(lines))


def write_bundle(path, variants, *, archs, ptx_arch=None) -> list[BundleEntry]:
    """Compile `variants` for every arch in `archs` and write them as one bundle.

    Parameters
    ----------
    path : path
        The bundle file to write.
    variants : iterable of Specialization
        From `Kernel.specialize(signature, noalias=..., aligned=...)`.
    archs : sequence of str
        Real architectures to build cubins for (``sm_80``...).
    ptx_arch : str, optional
        Architecture of the PTX kept for newer GPUs (default: the lowest of `archs`).

    Raises
    ------
    CompileError, ToolchainNotFoundError, LinkError
        As compiling the kernels does.
    """
    import json
    import zipfile

    from cupric.compiler import backend
    from cupric.compiler.options import normalize_arch
    archs = [normalize_arch(a) for a in archs]
    if not archs:
        raise ValueError("write_bundle needs at least one architecture")
    ptx_arch = normalize_arch(ptx_arch) if ptx_arch else min(archs, key=_arch_number)
    entries, members = [], {}
    for spec in variants:
        kern = spec.kernel
        identity = kernel_identity(kern.py_func)
        stem = f"{kern.py_func.__qualname__}-{identity[:12]}-{len(entries)}"
        cubins, release = {}, None
        base = kern.options
        for arch in archs:
            options = base.resolve(arch)
            art = backend.build(spec.ir, options=options, want=("cubin",), cache=False)
            cubins[arch] = f"cubin/{stem}.{arch}.cubin"
            members[cubins[arch]] = art.cubin
            release = art.linker_release
        art = backend.build(spec.ir, options=base.resolve(ptx_arch), want=("ptx",),
                            cache=False)
        ptx_member = f"ptx/{stem}.{ptx_arch}.ptx"
        members[ptx_member] = art.ptx.encode()
        entries.append(BundleEntry(
            kernel=kern.py_func.__qualname__, identity=identity,
            signature=repr(spec.arg_types), noalias=spec.noalias, aligned=spec.aligned,
            options=_options_key(base.resolve(ptx_arch)), symbol=kern.symbol,
            cubins=cubins, ptx=ptx_member, ptx_arch=ptx_arch,
            linker_release=tuple(release) if release else None))
    manifest = {"format": BUNDLE_FORMAT, "archs": archs, "ptx_arch": ptx_arch,
                "entries": [e.as_dict() for e in entries]}
    tmp = f"{os.fspath(path)}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest, indent=1))
        for member, data in members.items():
            zf.writestr(member, data)
    os.replace(tmp, path)
    return entries
