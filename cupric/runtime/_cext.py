"""Small CPython extensions built on first use into the per-user cache: the launch,
allocation and small-GEMM fast paths each keep their C source as a string and open it
with `open_extension`. A missing compiler makes it raise; callers record the message and
run their Python paths.
"""

from __future__ import annotations

import os

__all__ = ["open_extension", "module_name", "find", "load_file", "build"]


def open_extension(prefix: str, subdir: str, source: str, what: str,
                   build_missing: bool | None = None):
    """The extension module of C `source`, from ``<cache root>/<subdir>`` (built there
    first when missing and `build_missing`; None follows ``CUPRIC_BUILD_LAUNCHER``,
    anything but "0" builds), or None when it is missing and not to be built.

    Raises whatever the build or the import raised (`what` names the extension).
    """
    from cupric._paths import cache_root
    if build_missing is None:
        build_missing = os.environ.get("CUPRIC_BUILD_LAUNCHER", "1") != "0"
    name = module_name(prefix, source)
    directory = str(cache_root() / subdir)
    path = find(directory, name)
    if path is None:
        if not build_missing:
            return None
        path = build(directory, name, source, what)
    return load_file(name, path)


def module_name(prefix: str, source: str) -> str:
    """`prefix`, this Python's tag and a digest of `source`: a file name that changes
    whenever the source or the interpreter does."""
    import hashlib
    import sys
    tag = sys.implementation.cache_tag.replace("-", "_")
    return f"{prefix}_{tag}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"


def find(directory: str, name: str) -> str | None:
    """The built extension `name` in `directory` (any suffix this Python imports), or None."""
    import importlib.machinery
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(directory, name + suffix)
        if os.path.exists(path):
            return path
    return None


def load_file(name: str, path: str):
    """Import the extension module `name` from the file at `path`."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build(directory: str, name: str, source: str, what: str) -> str:
    """Compile C `source` (which reads MODULE_NAME and INIT_NAME) as extension `name` into
    `directory`; returns the file's path.

    Raises
    ------
    RuntimeError
        The build failed (`what` names the extension in the message, with the tail of
        the compiler's output).

    Cost
    ----
    One C compiler run, about a second; once per machine and Python version.
    """
    import contextlib
    import io
    import shutil
    import tempfile
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
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
        built = cmd.get_ext_fullpath(name)
        target = os.path.join(directory, os.path.basename(built))
        # Atomic: a concurrent build in another process leaves one complete file.
        shutil.copyfile(built, target + f".{os.getpid()}.partial")
        os.replace(target + f".{os.getpid()}.partial", target)
    return target
