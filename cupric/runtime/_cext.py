"""Small CPython extensions built on first use into the per-user cache: the launch,
allocation and small-GEMM fast paths each keep their C source as a string and open it
with `open_extension`, which imports a cached build only after checking its owner, mode
and SHA-256 (`cupric._cache`). A missing compiler makes it raise; callers record the
message and run their Python paths.

A machine that has never run cupric has none of them built. The first request for a
missing one starts building every fast path of `FAST_PATHS` that is missing, each in a
background thread that runs the compiler in a child process (so the builds overlap each
other and the caller's own work); a caller that can switch later (``wait=False``) gets
`Pending` and keeps its Python path until the module is ready. ``CUPRIC_BUILD_SYNC=1``
builds only what is asked for, in the calling thread, as before.
"""

from __future__ import annotations

import os
import threading

from cupric import _config

__all__ = ["open_extension", "module_name", "load_file", "build_and_load", "compile_extension",
           "Pending", "FAST_PATHS", "BINDINGS", "prefetch", "started"]

#: Every C fast path: (module holding ``SOURCE``, module-name prefix, cache folder,
#: description, the `_config` switch that turns it off or None). The first missing one
#: requested starts the builds of all the others that are missing too.
FAST_PATHS = (
    ("cupric.runtime._fastlaunch", "_cupric_fastlaunch", "launch", "launch extension",
     None),
    ("cupric.compiler._fastcall", "_cupric_fastcall", "launch", "kernel launch extension",
     "KERNEL_FASTCALL"),
    ("cupric.runtime._fastalloc", "_cupric_fastalloc", "memory", "allocation extension",
     "FAST_ALLOC"),
    ("cupric.cublas._fastgemm", "_cupric_fastgemm", "cublas", "cuBLAS fast-path extension",
     "CUBLAS_FASTPATH"),
    ("cupric.cudnn._replay", "_cupric_dnnreplay", "cudnn", "cuDNN replay extension",
     "CUDNN_FASTPATH"),
)


#: Libraries whose generated bindings the fast paths above need: a cold start generates
#: them in child processes at the same time (`cupric.bindings_gen.prefetch`).
BINDINGS = ("cudnn", "cublas", "cublaslt")


class Pending(Exception):
    """The extension is being built in the background; use the Python path meanwhile."""


class _Build:
    """One extension's build in this process: started once, read by every caller."""

    __slots__ = ("done", "module", "error", "thread")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.module = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def result(self):
        if self.error is not None:
            raise RuntimeError(str(self.error)) from self.error
        return self.module


# Builds by module name: one per extension per process, whoever asks first starts it.
_builds: dict[str, _Build] = {}
_builds_lock = threading.Lock()


def synchronous() -> bool:
    """Whether extensions build in the calling thread, one at a time
    (``CUPRIC_BUILD_SYNC``, or an embedded interpreter with no executable to run the
    compiler's child process with)."""
    import sys
    return _config.BUILD_SYNC.get() or not sys.executable


#: C every fast-path extension shares (after ``#include <structmember.h>``): the byte
#: offset of a ``__slots__`` member, read once from the class so the hot path reads the
#: slot directly.
SLOT_OFFSET = r"""
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *off) {
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) return -1;
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)
        || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
        Py_DECREF(descr);
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, name);
        return -1;
    }
    *off = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    return 0;
}
"""


def open_extension(prefix: str, subdir: str, source: str, what: str,
                   build_missing: bool | None = None, *, wait: bool = True):
    """The extension module of C `source`, from ``<cache root>/<subdir>`` (built there
    first when missing, corrupt or not loadable, and `build_missing`; None follows
    ``CUPRIC_BUILD_LAUNCHER``, anything but "0" builds), or None when it is missing and
    not to be built.

    A cached file is imported only when the user owns it, nobody else can write it and
    its SHA-256 is the one recorded at build time (`cupric._cache`). A cache that cannot
    be written costs a build in a private temporary folder and one warning.

    A missing extension is built in a background thread (with the other missing fast
    paths, see `prefetch`), once per process however many threads ask; `wait` False
    raises `Pending` until it is ready instead of blocking. With ``CUPRIC_BUILD_SYNC=1``
    it is built here, now.

    Raises
    ------
    Pending
        `wait` is False and the build is still running.
    PermissionError
        The cache folder belongs to another user (it could hold planted code).
    RuntimeError
        The build failed (`what` names the extension).
    """
    if build_missing is None:
        build_missing = _config.BUILD_LAUNCHER.get()
    name = module_name(prefix, source)
    build = _builds.get(name)
    if build is None:
        module, directory = _open_cached(name, subdir)
        if module is not None:
            return module
        if not build_missing:
            return None
        if synchronous():
            return build_and_load(directory, name, source, what)
        build = _start(name, directory, source, what)
        prefetch()
    elif not build_missing and not build.done.is_set():
        return None
    if not build.done.is_set():
        if not wait:
            raise Pending(f"the {what} is being built")
        build.done.wait()
    return build.result()


def _open_cached(name: str, subdir: str):
    """``(module or None, checked cache folder or None)``."""
    from cupric import _cache
    directory = _cache.folder(subdir)
    if directory is not None:
        found = _cache.load_blob(directory, name)
        if found is not None:
            try:
                return load_file(name, str(found[0])), directory
            except ImportError:
                pass  # verified but unloadable here (another libc, say): built again
    return None, directory


def _start(name: str, directory, source: str, what: str) -> _Build:
    """The build of `name`, started in a background thread unless one already runs; it
    publishes into `directory` (checked by the caller, now: the thread does not read
    the environment again later), or nowhere when that is None."""
    with _builds_lock:
        build = _builds.get(name)
        if build is not None:
            return build
        build = _builds[name] = _Build()

    def run() -> None:
        try:
            build.module = build_and_load(directory, name, source, what, isolated=True)
        except BaseException as exc:  # handed to every caller through result()
            build.error = exc
        finally:
            build.done.set()

    # Not a daemon: a process that ends while a build runs waits for it, so the next
    # process finds the extension in the cache.
    build.thread = threading.Thread(target=run, name=f"cupric-build-{name}")
    try:
        build.thread.start()
    except BaseException as exc:  # no thread to be had: every caller gets this error
        build.error = exc
        build.done.set()
    return build


def prefetch() -> None:
    """Start building, in background threads, every fast path of `FAST_PATHS` that is
    neither cached, nor being built, nor turned off, and (with four cores or more) the
    generated bindings of `BINDINGS` in child processes. Called by the first build (a
    cold start).

    Cost
    ----
    One cache lookup per fast path; the builds and generation run in child processes.
    """
    import importlib
    if not _config.BUILD_LAUNCHER.get() or synchronous():
        return
    for module_path, prefix, subdir, what, switch in FAST_PATHS:
        if switch is not None and not getattr(_config, switch).get():
            continue
        source = importlib.import_module(module_path).SOURCE
        name = module_name(prefix, source)
        if name in _builds:
            continue
        from cupric import _cache
        directory = _cache.folder(subdir)
        if directory is not None and _cache.load_blob(directory, name) is not None:
            continue  # cached: its own first use loads it
        _start(name, directory, source, what)
    if BINDINGS and _cpus() >= 4:
        # With fewer cores the children would slow the caller, which waits for them.
        from cupric.bindings_gen import prefetch as bindings
        bindings.start(BINDINGS)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def started(prefix: str, source: str) -> bool:
    """Whether this process started building the extension of `source` in the
    background (running or finished)."""
    return module_name(prefix, source) in _builds


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


def build_and_load(directory, name: str, source: str, what: str, *, isolated: bool = False):
    """Compile C `source` as extension `name` in a private temporary folder, publish it
    in `directory` (a checked cache folder, or None when the cache cannot be written)
    and import it.

    `isolated` runs the compiler in a child Python process (what background builds do:
    the build's output never touches this process's ``sys.stdout``, and the compiler's
    Python side holds no lock of this interpreter).

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
        if isolated:
            built = compile_in_child(tmp, name, source, what)
        else:
            built = compile_extension(tmp, name, source, what)
        with open(built, "rb") as f:
            data = f.read()
        stored = None
        if directory is not None:
            suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
            stored = _cache.store_blob(directory, name, data, suffix)
        # dlopen maps the file: removing the temporary copy afterwards is harmless.
        return load_file(name, str(stored) if stored is not None else built)


_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from cupric.runtime._cext import compile_extension
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
