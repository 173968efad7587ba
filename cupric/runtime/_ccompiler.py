"""Compiling one CPython extension from C source: the command line and the compiler run.

On Linux that is one run of the C compiler Python was built with (``sysconfig``'s
``LDSHARED``), compiling and linking in one step, without setuptools or a child Python;
elsewhere setuptools' ``build_ext`` drives the platform's compiler. Where the build goes
and when it runs is `cupric.runtime._cext`'s business.
"""

from __future__ import annotations

import os

__all__ = ["compile_extension", "compile_in_child", "compiler_command"]

_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from cupric.runtime._ccompiler import compile_extension
source = open(sys.argv[3], encoding="utf-8").read()
print(compile_extension(sys.argv[2], sys.argv[4], source, sys.argv[5]))
"""


def compile_in_child(tmp: str, name: str, source: str, what: str) -> str:
    """`compile_extension` in a child Python process; returns the built file's path."""
    import subprocess
    import sys

    import cupric
    source_path = os.path.join(tmp, name + ".src")
    with open(source_path, "w", encoding="utf-8") as f:
        f.write(source)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(cupric.__file__)))
    done = subprocess.run([sys.executable, "-c", _CHILD, package_parent, tmp, source_path,
                           name, what], capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not os.path.isfile(lines[-1]):
        raise RuntimeError(f"building the {what} failed (exit status {done.returncode}):\n"
                           f"{(done.stdout + done.stderr)[-2000:]}")
    return lines[-1]


#: Optimization flags of every build: -O2 as before; -g0 cancels a -g that the
#: interpreter's own LDSHARED or CFLAGS carry (debug info only slows the compiler down);
#: -fwrapv and NDEBUG as CPython builds its own extensions.
_FLAGS = ("-O2", "-g0", "-fwrapv", "-DNDEBUG")


def compiler_command(source_path: str, output_path: str) -> list[str] | None:
    """The one command that compiles and links C file `source_path` into the extension
    module `output_path` on this machine, or None where cupric leaves it to setuptools
    (not Linux, or an interpreter that records no compiler).

    The compiler and linker flags are those Python was built with (``sysconfig``'s
    ``LDSHARED`` and ``CCSHARED``), with the environment's ``CC``, ``LDSHARED``,
    ``CFLAGS``, ``CPPFLAGS`` and ``LDFLAGS`` taking effect as they do for setuptools.
    """
    import shlex
    import sys
    import sysconfig
    if not sys.platform.startswith("linux"):
        return None
    config = sysconfig.get_config_vars()
    cc = os.environ.get("CC") or config.get("CC")
    ldshared = os.environ.get("LDSHARED") or config.get("LDSHARED")
    if not cc or not ldshared:
        return None
    link = shlex.split(ldshared)
    if "LDSHARED" not in os.environ and "CC" in os.environ and config.get("CC"):
        # setuptools' rule: a CC of the environment replaces the compiler of LDSHARED.
        configured = shlex.split(config["CC"])
        if link[:len(configured)] == configured:
            link = shlex.split(cc) + link[len(configured):]
    paths = sysconfig.get_paths()
    includes = []
    for key in ("include", "platinclude"):
        if paths.get(key) and paths[key] not in includes:
            includes.append(paths[key])
    def environ(name: str) -> list[str]:
        return shlex.split(os.environ.get(name, ""))
    return (link + shlex.split(config.get("CCSHARED") or "-fPIC") + list(_FLAGS)
            + environ("CFLAGS") + environ("CPPFLAGS") + [f"-I{d}" for d in includes]
            + [source_path, "-o", output_path] + environ("LDFLAGS"))


def _write_source(tmp: str, name: str, source: str) -> str:
    path = os.path.join(tmp, name + ".c")
    with open(path, "w") as f:
        f.write(f'#define MODULE_NAME "{name}"\n#define INIT_NAME PyInit_{name}\n')
        f.write(source)
    return path


def compile_extension(tmp: str, name: str, source: str, what: str) -> str:
    """Build C `source` (which reads MODULE_NAME and INIT_NAME) as extension `name` in the
    folder `tmp`; returns the built file's path.

    Raises
    ------
    RuntimeError
        The compiler failed or could not be run (with the tail of its output).
    """
    import importlib.machinery
    import subprocess

    path = _write_source(tmp, name, source)
    output = os.path.join(tmp, name + importlib.machinery.EXTENSION_SUFFIXES[0])
    command = compiler_command(path, output)
    if command is None:
        return _compile_with_setuptools(tmp, name, path, what)
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, cwd=tmp)
    except OSError as exc:  # no such compiler: the message names it
        raise RuntimeError(f"building the {what} failed: cannot run the C compiler "
                           f"{command[0]!r} ({exc}); install one (gcc) or set CC") from exc
    if done.returncode != 0 or not os.path.isfile(output):
        raise RuntimeError(f"building the {what} failed (exit status {done.returncode}): "
                           f"{' '.join(command[:2])} ...\n"
                           f"{(done.stdout + done.stderr)[-2000:]}")
    return output


def _compile_with_setuptools(tmp: str, name: str, path: str, what: str) -> str:
    import contextlib
    import io

    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

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
