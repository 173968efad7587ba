"""Small CPython extensions built on first use into the per-user cache: the launch,
allocation and small-GEMM fast paths each keep their C source as a string and open it
with `open_extension`, which imports a cached build only after checking its owner, mode
and SHA-256 (`cupric._cache`). A missing compiler makes it raise; callers record the
message and run their Python paths.

A machine that has never run cupric has none of them built. The first request for a
missing one starts building every fast path of `FAST_PATHS` that is missing, each in a
background thread that runs the compiler in a child process (so the builds overlap each
other and the caller's own work), at most ``CUPRIC_BUILD_JOBS`` compilers at once (one
fewer than the CPUs by default), a build that a caller blocks on first; a caller that
can switch later (``wait=False``) gets `Pending` and keeps its Python path until the
module is ready. ``CUPRIC_BUILD_SYNC=1`` builds only what is asked for, in the calling
thread, as before.

Each fast-path module declares its extension once, beside its C source, as an
`Extension` named ``EXTENSION`` (cache folder, description, the `_config` switch that
turns it off, the function that configures a freshly loaded module); `Extension.load` is
the one loader every fast path uses, and its error is remembered for the process. Every
C source ends with `MODULE_INIT`, the shared module-init boilerplate.

On Linux a build is one run of the C compiler Python was built with, compiling and
linking in one step (`cupric.runtime._ccompiler`); elsewhere setuptools' ``build_ext``
drives it. Every build and every wait for one is
recorded (`build_log`, and the ``cupric.build`` logger at DEBUG level), so that a first
call that took a Python path or waited for a compiler says so.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from cupric import _config

from ._ccompiler import compile_extension, compile_in_child, compiler_command

__all__ = ["Extension", "open_extension", "module_name", "load_file", "build_and_load",
           "compile_extension", "Pending", "FAST_PATHS", "BINDINGS", "prefetch", "started",
           "SLOT_OFFSET", "MODULE_INIT", "build_log", "compiler_command", "jobs",
           "build_all"]

_logger = logging.getLogger("cupric.build")

#: Every C fast path: the module that declares it (its ``EXTENSION``). The first missing
#: one requested starts the builds of all the others that are missing too.
FAST_PATHS = (
    "cupric.runtime._fastlaunch",
    "cupric.compiler._fastcall",
    "cupric.runtime._fastalloc",
    "cupric.cublas._fastgemm",
    "cupric.cudnn._replay",
)


#: Libraries whose generated bindings the fast paths above need: a cold start generates
#: them in child processes at the same time (`cupric.bindings_gen.prefetch`).
BINDINGS = ("cudnn", "cublas", "cublaslt")


class Pending(Exception):
    """The extension is being built in the background; use the Python path meanwhile."""


class _Build:
    """One extension's build in this process: started once, read by every caller."""

    __slots__ = ("done", "module", "error", "thread", "wanted", "order")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.module = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.wanted = False  # a caller blocks on it: it takes the next free compiler
        self.order = 0       # when it was started, among builds equally wanted

    def result(self):
        if self.error is not None:
            raise RuntimeError(str(self.error)) from self.error
        return self.module


# Builds by module name: one per extension per process, whoever asks first starts it.
_builds: dict[str, _Build] = {}
_builds_lock = threading.Lock()

class _Compilers:
    """The compiler runs of background builds: at most `jobs()` at once; a queued build
    that a caller blocks on goes first, the others in the order they were started. On a
    machine with few cores this keeps the build a caller waits for from sharing them with
    builds nobody needs yet."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0
        self._queue: list[_Build] = []
        self._active = 0              # builds started and not finished
        self._when_idle: list = []    # called once no build is active

    def started(self) -> None:
        with self._cond:
            self._active += 1

    def finished(self) -> None:
        with self._cond:
            self._active -= 1
            due = []
            if self._active == 0:
                due, self._when_idle = self._when_idle, []
        for call in due:
            call()

    def when_idle(self, call) -> None:
        """Call `call` once no build is active (now, when none is)."""
        with self._cond:
            if self._active:
                self._when_idle.append(call)
                return
        call()

    def acquire(self, build: _Build) -> float:
        """Block until `build` may run its compiler; returns the seconds it queued."""
        began = time.perf_counter()
        with self._cond:
            self._queue.append(build)
            while self._running >= jobs() or \
                    min(self._queue, key=lambda b: (not b.wanted, b.order)) is not build:
                self._cond.wait()
            self._queue.remove(build)
            self._running += 1
        return time.perf_counter() - began

    def release(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def want(self, build: _Build) -> None:
        """A caller is about to block on `build`: it runs next."""
        if not build.wanted:
            with self._cond:
                build.wanted = True
                self._cond.notify_all()


_compilers = _Compilers()
_started = [0]  # builds started by this process (their `order`)


def jobs() -> int:
    """How many compilers background builds run at once (``CUPRIC_BUILD_JOBS``, else one
    fewer than the CPUs this process may use, at least one)."""
    chosen = _config.BUILD_JOBS.get()
    return max(1, chosen if chosen is not None else _cpus() - 1)


# What this process built, failed to build, waited for or ran without (`build_log`).
_log: list[dict] = []
_log_lock = threading.Lock()
_pending_noted: set[str] = set()


def _record(event: str, what: str, name: str, seconds: float = 0.0, **detail) -> None:
    entry = {"event": event, "what": what, "module": name, "seconds": seconds,
             "at": time.perf_counter(), "thread": threading.current_thread().name,
             **detail}
    with _log_lock:
        _log.append(entry)
    if _logger.isEnabledFor(logging.DEBUG):
        extra = "".join(f", {k}={v}" for k, v in detail.items())
        _logger.debug("%s %s (%s): %.1f ms%s", event, what, name, 1e3 * seconds, extra)


def build_log() -> list[dict]:
    """What this process did about its compiled extensions, oldest first.

    Each entry is a dict with ``event``, ``what`` (the extension, in words), ``module``
    (its file's module name), ``seconds``, ``at`` (`time.perf_counter` when it was
    recorded) and ``thread`` (the thread that recorded it), and per event:

    - ``"built"``: compiled and published; ``how`` (``"cc"``: the C compiler run
      directly, ``"setuptools"``), ``background`` (whether off the caller's thread);
      ``seconds`` is the build's wall time.
    - ``"failed"``: the build failed; ``error`` (the first line of the reason).
    - ``"waited"``: a caller blocked for a build running in the background.
    - ``"queued"``: a background build waited this long for a free compiler
      (``CUPRIC_BUILD_JOBS``) before it started.
    - ``"pending"``: a caller ran its Python path because the build was not done (noted
      once per extension).
    - ``"unavailable"``: loading gave no module (``error`` says why: no compiler, the
      switch turned off...); the Python path runs for the rest of the process.

    The same lines go to the ``cupric.build`` logger at DEBUG level as they happen.

    Thread safety
    -------------
    Safe: returns a copy.
    """
    with _log_lock:
        return [dict(entry) for entry in _log]


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

#: The module-init boilerplate every fast-path source ends with. The source defines its
#: ``methods`` table and, when the new module needs more than creating (types to ready,
#: constants to add), ``static int module_ready(PyObject *m)`` returning -1 with an
#: exception set on failure, announced by ``#define MODULE_READY module_ready``.
MODULE_INIT = r"""
static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, MODULE_NAME, NULL, -1, methods};

PyMODINIT_FUNC INIT_NAME(void) {
    PyObject *m = PyModule_Create(&moduledef);
#ifdef MODULE_READY
    if (m != NULL && MODULE_READY(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
"""


class Extension:
    """One compiled fast path and its state in this process: the C source, where its
    build is cached, and the loaded (and configured) module or why there is none.

    Parameters
    ----------
    prefix : str
        The module-name prefix (`module_name` adds the Python tag and a source digest).
    subdir : str
        The folder under the cache root holding the build.
    what : str
        What it is, for messages ("allocation extension").
    source : str
        The C source (ending with `MODULE_INIT`).
    switch : str, optional
        The name of the `cupric._config` setting whose "0" turns the fast path off: `load`
        then records "disabled by ..." and gives None, and `prefetch` skips it.
    configure : callable, optional
        Called with a freshly loaded module before anyone gets it (hands it the Python
        types and entry points it reads); what it raises is recorded like a failed build.

    Thread safety
    -------------
    `load` is safe from any thread: the first caller loads, the others wait for it.
    """

    __slots__ = ("prefix", "subdir", "what", "source", "switch", "configure", "module",
                 "error", "_lock")

    def __init__(self, prefix: str, subdir: str, what: str, source: str, *,
                 switch: str | None = None, configure=None) -> None:
        self.prefix, self.subdir, self.what, self.source = prefix, subdir, what, source
        self.switch, self.configure = switch, configure
        self.module = None              # the loaded and configured module
        self.error: str | None = None   # why there is none; a failure is not retried
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "loaded" if self.module is not None else (self.error or "not loaded")
        return f"<Extension {self.prefix} ({state})>"

    def enabled(self) -> bool:
        """Whether the switch (if any) leaves the fast path on (read now)."""
        return self.switch is None or bool(getattr(_config, self.switch).get())

    def load(self, build: bool | None = None, wait: bool = True):
        """The configured module (built into the cache if needed), or None.

        `build` None follows ``CUPRIC_BUILD_LAUNCHER`` (anything but "0" builds); a
        module that is missing and not to be built gives None and records nothing, so a
        later call may still build it. A failure (build, load, `configure`, or the
        switch turned off) is recorded in `error` and not retried within the process.

        Raises
        ------
        Pending
            `wait` is False and the build is still running in the background.
        """
        module = self.module
        if module is not None:
            return module
        with self._lock:
            if self.module is not None:
                return self.module
            if self.error is not None:
                return None
            if not self.enabled():
                self.error = f"disabled by {getattr(_config, self.switch).name}=0"
                _record("unavailable", self.what, self.prefix, error=self.error)
                return None
            try:
                module = open_extension(self.prefix, self.subdir, self.source, self.what,
                                        build, wait=wait)
                if module is None:
                    return None
                if self.configure is not None:
                    self.configure(module)
            except Pending:
                raise
            except Exception as exc:  # no compiler, headers, a stale file, another user's
                # cache folder: recorded, and the Python paths run
                self.error = f"{type(exc).__name__}: {exc}"[:500]
                _record("unavailable", self.what, self.prefix,
                        error=self.error.splitlines()[0])
                return None
            self.module = module
            return module

    def pending(self) -> bool:
        """Whether a background build was started and its result not yet taken (the
        Python path runs meanwhile)."""
        return self.module is None and self.error is None and started(self.prefix, self.source)

    def forget(self) -> None:
        """Drop the loaded module and the remembered error: the next `load` starts over
        (tests, and a process that just installed a compiler)."""
        with self._lock:
            self.module = None
            self.error = None

    def start(self) -> None:
        """Start the background build unless the module is cached, built or being built,
        or the switch turns it off (what `prefetch` does for each fast path)."""
        if not self.enabled():
            return
        name = module_name(self.prefix, self.source)
        if name in _builds:
            return
        from cupric import _cache
        directory = _cache.folder(self.subdir)
        if directory is not None and _cache.load_blob(directory, name) is not None:
            return  # cached: its own first use loads it
        _start(name, directory, self.source, self.what)


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
            if name not in _pending_noted:
                _pending_noted.add(name)
                _record("pending", what, name)
            raise Pending(f"the {what} is being built")
        _compilers.want(build)
        began = time.perf_counter()
        build.done.wait()
        _record("waited", what, name, time.perf_counter() - began)
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
        _started[0] += 1
        build.order = _started[0]

    def run() -> None:
        try:
            queued = _compilers.acquire(build)
            try:
                if queued > 1e-3:
                    _record("queued", what, name, queued)
                build.module = build_and_load(directory, name, source, what, isolated=True)
            finally:
                _compilers.release()
        except BaseException as exc:  # handed to every caller through result()
            build.error = exc
        finally:
            build.done.set()
            _compilers.finished()

    # Not a daemon: a process that ends while a build runs waits for it, so the next
    # process finds the extension in the cache.
    build.thread = threading.Thread(target=run, name=f"cupric-build-{name}")
    _compilers.started()
    try:
        build.thread.start()
    except BaseException as exc:  # no thread to be had: every caller gets this error
        build.error = exc
        build.done.set()
        _compilers.finished()
    return build


def prefetch() -> None:
    """Start building, in background threads, every fast path of `FAST_PATHS` that is
    neither cached, nor being built, nor turned off, and (with four cores or more) the
    generated bindings of `BINDINGS` in child processes. Called by the first build (a
    cold start).

    The binding generations start at once where there is a core for each of them beside
    the caller and every compiler; with fewer cores they start when the last build is
    done, so that the build a caller waits for keeps its core (a library called before
    then generates its own bindings, as without prefetching).

    Cost
    ----
    One cache lookup per fast path; the builds and generation run in child processes.
    """
    import importlib
    if not _config.BUILD_LAUNCHER.get() or synchronous():
        return
    for module_path in FAST_PATHS:
        importlib.import_module(module_path).EXTENSION.start()
    cpus = _cpus()
    if BINDINGS and cpus >= 4:
        # With fewer cores the children would slow the caller, which waits for them.
        if cpus >= 1 + len(FAST_PATHS) + len(BINDINGS):
            _start_bindings()
        else:
            _compilers.when_idle(_start_bindings)


def _start_bindings() -> None:
    from cupric.bindings_gen import prefetch as bindings
    try:
        bindings.start(BINDINGS)
    except Exception as exc:  # no process to be had: each library generates on first use
        _record("unavailable", "bindings prefetch", ",".join(BINDINGS),
                error=f"{type(exc).__name__}: {exc}"[:300])


def build_all() -> dict[str, str | None]:
    """Build every fast path of `FAST_PATHS` that the cache lacks, now, and wait for them.

    What an image build or a CI set-up step runs so that a program's first process finds
    them cached: needs the C compiler, no GPU. Switched-off fast paths are skipped.

    Returns
    -------
    dict
        Each extension's description (``"launch extension"``...) -> None when it is in
        the cache, else why it could not be built.

    Examples
    --------
    ``python -c "from cupric.runtime import _cext; print(_cext.build_all())"``
    """
    import importlib
    extensions = [importlib.import_module(path).EXTENSION for path in FAST_PATHS]
    for ext in extensions:
        ext.start()  # all at once (CUPRIC_BUILD_JOBS compilers), before waiting for one
    out: dict[str, str | None] = {}
    for ext in extensions:
        if not ext.enabled():
            continue
        try:
            open_extension(ext.prefix, ext.subdir, ext.source, ext.what, True, wait=True)
            out[ext.what] = None
        except Exception as exc:  # reported per extension; the others still build
            out[ext.what] = f"{type(exc).__name__}: {exc}"[:500]
    return out


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

    `isolated` keeps the build's Python side out of this interpreter (what background
    builds ask): the direct compiler run (`compiler_command`) is a child process
    already; setuptools then runs in a child Python process, so that its output never
    touches this process's ``sys.stdout`` and it holds no lock of this interpreter.

    Raises
    ------
    RuntimeError
        The build failed (`what` names the extension in the message, with the tail of
        the compiler's output).

    Cost
    ----
    One C compiler run, a fraction of a second to a second; once per machine and
    Python version.
    """
    import importlib.machinery
    import tempfile

    from cupric import _cache
    began = time.perf_counter()
    how = "cc" if compiler_command("x.c", "x.so") is not None else "setuptools"
    try:
        with tempfile.TemporaryDirectory(prefix="cupric-build-") as tmp:
            if isolated and how == "setuptools":
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
            module = load_file(name, str(stored) if stored is not None else built)
    except BaseException as exc:
        _record("failed", what, name, time.perf_counter() - began, how=how,
                error=(str(exc).strip().splitlines() or [type(exc).__name__])[0][:300])
        raise
    _record("built", what, name, time.perf_counter() - began, how=how,
            background=threading.current_thread() is not threading.main_thread())
    return module
