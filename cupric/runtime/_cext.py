"""Small CPython extensions built on first use into the per-user cache: the launch,
allocation and small-GEMM fast paths each keep their C source as a string and open it
with `open_extension`, which imports a cached build only after checking its owner, mode
and SHA-256 (`cupric._cache`). A missing compiler makes it raise; callers record the
message and run their Python paths.
"""

from __future__ import annotations

import os

from cupric import _config

__all__ = ["open_extension", "module_name", "load_file", "build_and_load", "compile_extension"]


def open_extension(prefix: str, subdir: str, source: str, what: str,
                   build_missing: bool | None = None):
    """The extension module of C `source`, from ``<cache root>/<subdir>`` (built there
    first when missing, corrupt or not loadable, and `build_missing`; None follows
    ``CUPRIC_BUILD_LAUNCHER``, anything but "0" builds), or None when it is missing and
    not to be built.

    A cached file is imported only when the user owns it, nobody else can write it and
    its SHA-256 is the one recorded at build time (`cupric._cache`). A cache that cannot
    be written costs a build in a private temporary folder and one warning.

    Raises
    ------
    PermissionError
        The cache folder belongs to another user (it could hold planted code).
    RuntimeError
        The build failed (`what` names the extension).
    """
    from cupric import _cache
    if build_missing is None:
        build_missing = _config.BUILD_LAUNCHER.get()
    name = module_name(prefix, source)
    directory = _cache.folder(subdir)
    if directory is not None:
        found = _cache.load_blob(directory, name)
        if found is not None:
            try:
                return load_file(name, str(found[0]))
            except ImportError:
                pass  # verified but unloadable here (another libc, say): built again below
    if not build_missing:
        return None
    return build_and_load(directory, name, source, what)


def module_name(prefix: str, source: str) -> str:
    """`prefix`, this Python's tag and a digest of `source`: a file name that changes
    whenever the source or the interpreter does."""
    import hashlib
    import sys
    tag = sys.implementation.cache_tag.replace("-", "_")
    return f"{prefix}_{tag}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def load_file(name: str, path: str):
    """Import the extension module `name` from the file at `path`."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build_and_load(directory, name: str, source: str, what: str):
    """Compile C `source` as extension `name` in a private temporary folder, publish it
    in `directory` (a checked cache folder, or None when the cache cannot be written)
    and import it.

    Raises
    ------
    RuntimeError
        The build failed (`what` names the extension in the message, with the tail of
        the compiler's output).

    Cost
    ----
    One C compiler run, about a second; once per machine and Python version.
    """
    import importlib.machinery
    import tempfile

    from cupric import _cache
    with tempfile.TemporaryDirectory(prefix="cupric-build-") as tmp:
        built = compile_extension(tmp, name, source, what)
        with open(built, "rb") as f:
            data = f.read()
        stored = None
        if directory is not None:
            suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
            stored = _cache.store_blob(directory, name, data, suffix)
        # dlopen maps the file: removing the temporary copy afterwards is harmless.
        return load_file(name, str(stored) if stored is not None else built)


def compile_extension(tmp: str, name: str, source: str, what: str) -> str:
    """Build C `source` (which reads MODULE_NAME and INIT_NAME) as extension `name` in the
    folder `tmp`; returns the built file's path."""
    import contextlib
    import io

    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    path = os.path.join(tmp, name + ".c")
    with open(path, "w") as f:
        f.write(f'#define MODULE_NAME "{name}"\n#define INIT_NAME PyInit_{name}\n')
        f.write(source)
    ext = Extension(name, [path], extra_compile_args=["-O2"])
    dist = Distribution({"name": name, "ext_modules": [ext]})
    cmd = build_ext(dist)
    cmd.build_lib = tmp
    cmd.build_temp = tmp
    cmd.ensure_finalized()
    log = io.StringIO()
    # The compiler's chatter goes to the error message on failure, not the terminal.
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            cmd.run()
        except BaseException as exc:
            raise RuntimeError(f"building the {what} failed: {exc}\n"
                               f"{log.getvalue()[-2000:]}") from exc
    return cmd.get_ext_fullpath(name)
