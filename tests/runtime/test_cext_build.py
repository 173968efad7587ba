"""How cupric.runtime._cext (through _ccompiler) builds a C extension: one run of the interpreter's own C
compiler on Linux (no setuptools, no child Python), the environment's CC / LDSHARED /
CFLAGS honoured as setuptools honours them, setuptools elsewhere; and the build log
(`build_log`, the ``cupric.build`` logger) that says what a process built, waited for or
ran without. The compiles here are real (tiny sources)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import types

import numpy as np
import pytest

from cext_helpers import TINY, tiny
from cupric.runtime import _ccompiler, _cext

_CC = sysconfig.get_config_var("CC")
needs_cc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _CC or shutil.which(_CC.split()[0]) is None,
    reason="no C compiler of this interpreter here (or not Linux)")


@pytest.fixture
def clean(monkeypatch, tmp_path):
    """An empty cache root, no builds or log of this process, no compiler variables, no
    other fast paths to prefetch."""
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("CUPRIC_BUILD_SYNC", "CUPRIC_BUILD_LAUNCHER", "CUPRIC_BUILD_JOBS", "CC",
                 "LDSHARED", "CFLAGS", "CPPFLAGS", "LDFLAGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_cext, "_builds", {})
    monkeypatch.setattr(_cext, "_log", [])
    monkeypatch.setattr(_cext, "_pending_noted", set())
    monkeypatch.setattr(_cext, "FAST_PATHS", ())
    monkeypatch.setattr(_cext, "BINDINGS", ())
    yield
    for build in list(_cext._builds.values()):
        build.done.wait(120)


def _no_setuptools(*args, **kwargs):
    raise AssertionError("setuptools was used where the compiler runs directly")


# -- the command -----------------------------------------------------------------------------


def test_command_is_the_interpreters_compiler_in_one_step(clean, monkeypatch):
    if not sys.platform.startswith("linux") or not _CC:
        pytest.skip("not Linux, or no compiler recorded by this interpreter")
    command = _ccompiler.compiler_command("/src/x.c", "/out/x.so")
    ldshared = sysconfig.get_config_var("LDSHARED").split()
    assert command[:len(ldshared)] == ldshared            # compiler + its link flags
    assert command[-3:] == ["/src/x.c", "-o", "/out/x.so"]
    for flag in ("-O2", "-g0", "-fwrapv", "-DNDEBUG"):
        assert flag in command
    # -g0 comes after the interpreter's own flags (some carry -g in LDSHARED).
    assert command.index("-g0") > len(ldshared) - 1
    assert f"-I{sysconfig.get_paths()['include']}" in command


def test_command_follows_cc_ldshared_and_cflags(clean, monkeypatch):
    config = dict(sysconfig.get_config_vars(), CC="gcc", LDSHARED="gcc -shared -Wl,-O1",
                  CCSHARED="-fPIC")
    monkeypatch.setattr(sysconfig, "get_config_vars", lambda: config)
    monkeypatch.setattr(sys, "platform", "linux")
    assert _ccompiler.compiler_command("a.c", "a.so")[:3] == ["gcc", "-shared", "-Wl,-O1"]
    # CC replaces the compiler of LDSHARED, keeping its flags (setuptools' rule).
    monkeypatch.setenv("CC", "clang --target=x86_64-linux-gnu")
    command = _ccompiler.compiler_command("a.c", "a.so")
    assert command[:4] == ["clang", "--target=x86_64-linux-gnu", "-shared", "-Wl,-O1"]
    # LDSHARED of the environment wins over both.
    monkeypatch.setenv("LDSHARED", "cc -shared")
    assert _ccompiler.compiler_command("a.c", "a.so")[:2] == ["cc", "-shared"]
    # CFLAGS and CPPFLAGS come after cupric's own flags, so that they can override them;
    # LDFLAGS go to the link, after the source.
    monkeypatch.setenv("CFLAGS", "-O3 -march=native")
    monkeypatch.setenv("CPPFLAGS", "-DEXTRA=1")
    monkeypatch.setenv("LDFLAGS", "-L/opt/lib -Wl,-rpath,/opt/lib")
    command = _ccompiler.compiler_command("a.c", "a.so")
    assert command.index("-O3") > command.index("-O2")
    assert "-march=native" in command and "-DEXTRA=1" in command
    assert command[-2:] == ["-L/opt/lib", "-Wl,-rpath,/opt/lib"]
    assert command.index("a.c") < command.index("-L/opt/lib")


def test_no_direct_command_off_linux_or_without_a_recorded_compiler(clean, monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    assert _ccompiler.compiler_command("a.c", "a.pyd") is None
    monkeypatch.setattr(sys, "platform", "linux")
    config = dict(sysconfig.get_config_vars(), CC=None, LDSHARED=None)
    monkeypatch.setattr(sysconfig, "get_config_vars", lambda: config)
    assert _ccompiler.compiler_command("a.c", "a.so") is None


def test_setuptools_builds_where_there_is_no_direct_command(clean, monkeypatch, tmp_path):
    monkeypatch.setattr(_ccompiler, "compiler_command", lambda *a: None)
    seen = []

    def fake(tmp, name, path, what):
        seen.append((name, os.path.basename(path), what))
        with open(path) as f:
            assert f.read().startswith(f'#define MODULE_NAME "{name}"\n')
        return "built.so"
    monkeypatch.setattr(_ccompiler, "_compile_with_setuptools", fake)
    assert _ccompiler.compile_extension(str(tmp_path), "_cupric_x", tiny(1), "x") == "built.so"
    assert seen == [("_cupric_x", "_cupric_x.c", "x")]


# -- real builds -----------------------------------------------------------------------------


@needs_cc
def test_direct_build_loads_and_answers(clean, monkeypatch, tmp_path):
    monkeypatch.setattr(_ccompiler, "_compile_with_setuptools", _no_setuptools)
    path = _ccompiler.compile_extension(str(tmp_path), "_cupric_direct", tiny(17), "direct")
    assert _cext.load_file("_cupric_direct", path).answer() == 17
    # No debug sections: -g0 cancelled any -g of the interpreter's flags.
    if shutil.which("readelf"):
        sections = subprocess.run(["readelf", "-S", path], capture_output=True,
                                  text=True).stdout
        assert ".debug_info" not in sections


@needs_cc
def test_background_build_runs_no_child_python(clean, monkeypatch):
    monkeypatch.setattr(_cext, "compile_in_child",
                        lambda *a: pytest.fail("a child Python ran the compiler"))
    monkeypatch.setattr(_ccompiler, "_compile_with_setuptools", _no_setuptools)
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_bg", "bg", tiny(23), "bg extension", wait=False)
    module = _cext.open_extension("_cupric_bg", "bg", tiny(23), "bg extension", wait=True)
    assert module.answer() == 23


@needs_cc
def test_compiler_errors_and_a_missing_compiler_are_reported(clean, monkeypatch, tmp_path):
    broken = TINY.replace("PyLong_FromLong(ANSWER)", "not C at all")
    with pytest.raises(RuntimeError, match=r"building the broken extension failed "
                                           r"\(exit status [1-9]") as info:
        _ccompiler.compile_extension(str(tmp_path), "_cupric_broken", broken, "broken extension")
    assert "error" in str(info.value)                     # the compiler's own message
    monkeypatch.setenv("CC", "/nonexistent/cupric-cc")
    with pytest.raises(RuntimeError, match="cannot run the C compiler"):
        _ccompiler.compile_extension(str(tmp_path), "_cupric_nocc", tiny(1), "x")


# -- the build log ---------------------------------------------------------------------------


@needs_cc
def test_log_of_a_cold_start(clean, caplog):
    caplog.set_level(logging.DEBUG, logger="cupric.build")
    source = tiny(31)
    name = _cext.module_name("_cupric_lg", source)
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_lg", "lg", source, "logged extension", wait=False)
    try:                                   # asked again while building: noted once
        _cext.open_extension("_cupric_lg", "lg", source, "logged extension", wait=False)
    except _cext.Pending:
        pass
    assert _cext.open_extension("_cupric_lg", "lg", source, "logged extension").answer() == 31
    log = _cext.build_log()
    events = [e["event"] for e in log]
    assert events.count("pending") == 1 and events.count("built") == 1
    assert set(events) <= {"pending", "built", "waited"}
    built = next(e for e in log if e["event"] == "built")
    assert built["module"] == name and built["what"] == "logged extension"
    assert built["how"] == "cc" and built["background"] is True
    assert built["thread"].startswith("cupric-build-") and built["seconds"] > 0
    for entry in log:
        assert entry["seconds"] >= 0 and isinstance(entry["at"], float)
    assert any("built logged extension" in r.getMessage() for r in caplog.records)
    # A copy: the caller cannot change the record.
    log[0]["event"] = "changed"
    assert _cext.build_log()[0]["event"] == "pending"


def test_log_of_a_wait(clean, monkeypatch):
    import threading
    release = threading.Event()

    def slow_failure(directory, name, source, what, **kw):
        release.wait(30)
        raise RuntimeError("building the slow extension failed: no\nmore lines")
    # A stand-in for the build: only the caller's wait is recorded here (the real
    # build_and_load records the failure, see below).
    monkeypatch.setattr(_cext, "build_and_load", slow_failure)
    threading.Timer(0.2, release.set).start()
    with pytest.raises(RuntimeError, match="slow extension failed"):
        _cext.open_extension("_cupric_sl", "sl", tiny(5), "slow extension", wait=True)
    waited = [e for e in _cext.build_log() if e["event"] == "waited"]
    assert len(waited) == 1 and waited[0]["what"] == "slow extension"
    assert waited[0]["seconds"] >= 0.1 and waited[0]["thread"] == "MainThread"


def test_failed_build_is_logged_with_its_first_line(clean, monkeypatch, tmp_path):
    def failing(tmp, name, source, what):
        raise RuntimeError(f"building the {what} failed (exit status 1): cc ...\nx.c:1: error")
    monkeypatch.setattr(_cext, "compile_extension", failing)
    with pytest.raises(RuntimeError):
        _cext.build_and_load(None, "_cupric_f", tiny(1), "failing extension")
    (entry,) = _cext.build_log()
    assert entry["event"] == "failed" and entry["what"] == "failing extension"
    assert entry["error"] == "building the failing extension failed (exit status 1): cc ..."


def test_unavailable_fast_paths_are_logged(clean, monkeypatch):
    from cupric import _config
    ext = _cext.Extension("_cupric_off", "off", "switched extension", tiny(1),
                          switch="KERNEL_FASTCALL")
    monkeypatch.setenv(_config.KERNEL_FASTCALL.name, "0")
    assert ext.load() is None
    broken = _cext.Extension("_cupric_nope", "nope", "unloadable extension", tiny(2))
    monkeypatch.setattr(_cext, "open_extension", lambda *a, **k: (_ for _ in ()).throw(
        PermissionError("cache folder belongs to another user")))
    assert broken.load() is None
    entries = [(e["event"], e["what"], e["error"]) for e in _cext.build_log()]
    assert entries == [
        ("unavailable", "switched extension", "disabled by CUPRIC_KERNEL_FASTCALL=0"),
        ("unavailable", "unloadable extension",
         "PermissionError: cache folder belongs to another user")]


# -- GPU: a process with an empty cache --------------------------------------------------------

_COLD_KERNEL = textwrap.dedent("""
    import json, sys
    import numpy as np
    import cupric
    from cupric import runtime as rt
    from cupric.device import grid
    from cupric.runtime import _cext
    from cupric.types import Array, f32

    @cupric.kernel
    def axpb(x: Array[f32, 1, "C"], y: Array[f32, 1, "C"], a: f32):
        i = grid(1)
        if i < len(x):
            y[i] = a * x[i] + 1.0

    x = np.load(sys.argv[1])
    y = rt.to_device(np.full(x.size, np.nan, np.float32))
    axpb[(x.size + 127) // 128, 128](rt.to_device(x), y, np.float32(3.0))
    np.save(sys.argv[2], y.to_numpy())
    for build in list(_cext._builds.values()):
        build.done.wait(300)
    print(json.dumps(_cext.build_log()))
""")


@pytest.mark.gpu
def test_first_launch_with_an_empty_cache(tmp_path):
    """A fresh interpreter with an empty cache root: the first launch is right, and the
    build log names every fast path built there (by the compiler run directly)."""
    from cupric.runtime import driver_available
    if not driver_available():
        pytest.skip("no CUDA driver")
    rng = np.random.default_rng()
    x = rng.standard_normal(1000).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, CUPRIC_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    for name in ("CUPRIC_BUILD_SYNC", "CUPRIC_BUILD_LAUNCHER", "CUPRIC_KERNEL_FASTCALL"):
        env.pop(name, None)
    # A file: a kernel's source must be readable.
    (tmp_path / "cold.py").write_text(_COLD_KERNEL)
    proc = subprocess.run([sys.executable, str(tmp_path / "cold.py"), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], env=env, capture_output=True, text=True,
                          timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(y, 3.0 * x + 1.0, rtol=1e-6, atol=1e-6)
    log = json.loads(proc.stdout.strip().splitlines()[-1])
    built = {e["what"] for e in log if e["event"] == "built"}
    assert {"kernel launch extension", "launch extension"} <= built, log
    assert not [e for e in log if e["event"] in ("failed", "unavailable")], log
    assert all(e["how"] == (
        "cc" if sys.platform.startswith("linux") else "setuptools")
        for e in log if e["event"] == "built")


# -- how many compilers at once, and which goes first ------------------------------------------


def test_jobs_follow_the_setting_and_the_cpus(monkeypatch):
    monkeypatch.delenv("CUPRIC_BUILD_JOBS", raising=False)
    monkeypatch.setattr(_cext, "_cpus", lambda: 16)
    assert _cext.jobs() == 15
    monkeypatch.setattr(_cext, "_cpus", lambda: 1)
    assert _cext.jobs() == 1
    monkeypatch.setenv("CUPRIC_BUILD_JOBS", "3")
    assert _cext.jobs() == 3
    monkeypatch.setenv("CUPRIC_BUILD_JOBS", "0")
    assert _cext.jobs() == 1
    monkeypatch.setenv("CUPRIC_BUILD_JOBS", "many")
    with pytest.raises(ValueError, match="CUPRIC_BUILD_JOBS"):
        _cext.jobs()


def test_one_compiler_at_a_time_and_the_awaited_build_first(clean, monkeypatch):
    """With one compiler slot, three builds queue; the one a caller then blocks on runs
    before the two started earlier that nobody waits for."""
    import threading
    monkeypatch.setenv("CUPRIC_BUILD_JOBS", "1")
    monkeypatch.setattr(_cext, "_compilers", _cext._Compilers())
    gate = threading.Event()
    order, running, most = [], [0], [0]
    lock = threading.Lock()

    def fake_build(directory, name, source, what, **kw):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if what == "first":
            gate.wait(30)          # holds the only compiler until the others are queued
        order.append(what)
        with lock:
            running[0] -= 1
        return types.SimpleNamespace(what=what)
    monkeypatch.setattr(_cext, "build_and_load", fake_build)
    for what in ("first", "second", "third", "awaited"):
        with pytest.raises(_cext.Pending):
            _cext.open_extension(f"_cupric_q{what}", what, tiny(len(what)), what, wait=False)
    release = threading.Timer(0.3, gate.set)
    release.start()
    module = _cext.open_extension("_cupric_qawaited", "awaited", tiny(7), "awaited")
    assert module.what == "awaited"
    for build in list(_cext._builds.values()):
        assert build.done.wait(30)
    assert order == ["first", "awaited", "second", "third"] and most[0] == 1
    queued = {e["what"] for e in _cext.build_log() if e["event"] == "queued"}
    assert queued == {"awaited", "second", "third"}


@needs_cc
def test_queued_builds_all_finish_with_one_compiler(clean, monkeypatch):
    monkeypatch.setenv("CUPRIC_BUILD_JOBS", "1")
    sources = {f"_cupric_j{i}": tiny(40 + i) for i in range(3)}
    for prefix, source in sources.items():
        with pytest.raises(_cext.Pending):
            _cext.open_extension(prefix, prefix[8:], source, prefix, wait=False)
    answers = [_cext.open_extension(prefix, prefix[8:], source, prefix).answer()
               for prefix, source in sources.items()]
    assert answers == [40, 41, 42]
    assert _cext._compilers._running == 0 and _cext._compilers._queue == []


@needs_cc
def test_build_all_fills_the_cache_and_reports_each(clean, monkeypatch, tmp_path):
    from cupric import _cache, _config
    paths = []
    for i, (source, switch) in enumerate(((tiny(50), None), (TINY.replace(
            "PyLong_FromLong(ANSWER)", "not C"), None), (tiny(52), "KERNEL_FASTCALL"))):
        module = types.ModuleType(f"_cupric_test_all{i}")
        module.EXTENSION = _cext.Extension(f"_cupric_a{i}", f"a{i}", f"extension {i}", source,
                                           switch=switch)
        monkeypatch.setitem(sys.modules, module.__name__, module)
        paths.append(module.__name__)
    monkeypatch.setattr(_cext, "FAST_PATHS", tuple(paths))
    monkeypatch.setenv(_config.KERNEL_FASTCALL.name, "0")      # the third is switched off
    result = _cext.build_all()
    assert list(result) == ["extension 0", "extension 1"]
    assert result["extension 0"] is None
    assert "building the extension 1 failed" in result["extension 1"]
    folder = tmp_path / "cache" / "a0"
    assert _cache.load_blob(folder, _cext.module_name("_cupric_a0", tiny(50))) is not None
    assert not (tmp_path / "cache" / "a2").exists()


def test_binding_generation_waits_for_the_compilers_on_few_cores(clean, monkeypatch):
    """With a core for every compiler and every generation the bindings start at once;
    with fewer they start when the last build is done."""
    import threading
    from cupric.bindings_gen import prefetch as bindings
    started = []
    monkeypatch.setattr(bindings, "start", lambda names: started.append(tuple(names)))
    names = ("cudnn", "cublas", "cublaslt", "curand")  # 1 + 0 fast paths + 4 > 4 cores
    monkeypatch.setattr(_cext, "BINDINGS", names)
    monkeypatch.setattr(_cext, "_compilers", _cext._Compilers())
    gate = threading.Event()

    def held_build(directory, name, source, what, **kw):
        gate.wait(30)
        return types.SimpleNamespace()
    monkeypatch.setattr(_cext, "build_and_load", held_build)
    monkeypatch.setattr(_cext, "_cpus", lambda: 4)
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_few", "few", tiny(60), "few", wait=False)
    assert started == []                      # a compiler still runs
    gate.set()
    _cext.open_extension("_cupric_few", "few", tiny(60), "few")
    for _ in range(300):                       # the build thread starts them as it ends
        if started:
            break
        threading.Event().wait(0.01)
    assert started == [names]
    monkeypatch.setattr(_cext, "_cpus", lambda: 16)
    gate.clear()
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_many", "many", tiny(61), "many", wait=False)
    assert started[1:] == [names]             # at once, while the compiler runs
    gate.set()


def test_a_failed_binding_prefetch_is_logged(clean, monkeypatch):
    from cupric.bindings_gen import prefetch as bindings

    def no_process(names):
        raise OSError("fork failed")
    monkeypatch.setattr(bindings, "start", no_process)
    monkeypatch.setattr(_cext, "BINDINGS", ("cudnn",))
    _cext._start_bindings()
    (entry,) = _cext.build_log()
    assert entry["event"] == "unavailable" and entry["error"] == "OSError: fork failed"
