"""C fast-path extensions built off the critical path (cupric.runtime._cext): the first
request for a missing extension starts every missing fast path in background threads
(the compiler in child processes), callers that can switch take their Python paths
until the module is ready, each extension is built once per process however many
threads ask, and CUPRIC_BUILD_SYNC=1 keeps the synchronous build. The compiles here
are real (tiny sources); the fast-path callers are checked with stand-in modules."""

from __future__ import annotations

import shutil
import sys
import sysconfig
import threading
import types

import pytest

from cext_helpers import TINY, tiny
from cupric.runtime import _cext

pytestmark = pytest.mark.skipif(
    shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC")
                 else "cc") is None, reason="no C compiler here")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache root, no builds of this process, and two stand-in fast paths."""
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUPRIC_BUILD_SYNC", raising=False)
    monkeypatch.delenv("CUPRIC_BUILD_LAUNCHER", raising=False)
    monkeypatch.setattr(_cext, "_builds", {})
    paths = []
    for i, answer in enumerate((7, 8)):
        module = types.ModuleType(f"_cupric_test_fastpath{i}")
        module.SOURCE = tiny(answer)
        module.EXTENSION = _cext.Extension(f"_cupric_t{i}", f"t{i}", f"test extension {i}",
                                           module.SOURCE)
        monkeypatch.setitem(sys.modules, module.__name__, module)
        paths.append(module.__name__)
    monkeypatch.setattr(_cext, "FAST_PATHS", tuple(paths))
    monkeypatch.setattr(_cext, "BINDINGS", ())
    yield
    for build in list(_cext._builds.values()):
        build.done.wait(120)


def wait_all():
    for build in list(_cext._builds.values()):
        assert build.done.wait(120), "a background build did not finish"


def test_background_build_pending_then_ready(fresh, tmp_path, capfd):
    source = tiny(42)
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_tq", "tq", source, "asked-for extension", wait=False)
    assert _cext.started("_cupric_tq", source)
    # The other fast paths started at the same time, each in its own thread.
    assert all(_cext.started(prefix, tiny(7 + i))
               for i, prefix in enumerate(("_cupric_t0", "_cupric_t1")))
    assert len({b.thread.name for b in _cext._builds.values()}) == 3
    wait_all()
    module = _cext.open_extension("_cupric_tq", "tq", source, "asked-for extension",
                                  wait=False)
    assert module.answer() == 42
    assert _cext.open_extension("_cupric_t1", "t1", tiny(8), "x", wait=False).answer() == 8
    # Published in the checked cache: a new process loads it without building.
    folder = tmp_path / "cache" / "tq"
    assert any(p.suffix == ".so" for p in folder.iterdir())
    from cupric import _cache
    assert _cache.load_blob(folder, _cext.module_name("_cupric_tq", source)) is not None
    # The compiler's output never reached this process's terminal.
    out, err = capfd.readouterr()
    assert "gcc" not in out + err and "building" not in out + err


def test_cached_extension_loads_without_a_build(fresh, monkeypatch):
    source = tiny(5)
    _cext.open_extension("_cupric_tc", "tc", source, "x", wait=True)
    wait_all()
    monkeypatch.setattr(_cext, "_builds", {})
    monkeypatch.setattr(_cext, "build_and_load", lambda *a, **k: pytest.fail("rebuilt"))
    assert _cext.open_extension("_cupric_tc", "tc", source, "x", wait=False).answer() == 5
    assert _cext._builds == {}


def test_one_build_per_extension_however_many_threads_ask(fresh, monkeypatch):
    calls = []
    real = _cext.build_and_load

    def counting(directory, name, source, what, **kw):
        calls.append(name)
        return real(directory, name, source, what, **kw)
    monkeypatch.setattr(_cext, "build_and_load", counting)
    source = tiny(3)
    results, errors = [], []
    start = threading.Barrier(6)

    def ask():
        start.wait()
        try:
            results.append(_cext.open_extension("_cupric_tm", "tm", source, "x").answer())
        except Exception as exc:  # collected: the assertion below names it
            errors.append(exc)
    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wait_all()
    assert errors == [] and results == [3] * 6
    name = _cext.module_name("_cupric_tm", source)
    assert calls.count(name) == 1
    assert sorted(calls) == sorted([name, _cext.module_name("_cupric_t0", tiny(7)),
                                    _cext.module_name("_cupric_t1", tiny(8))])


def test_synchronous_switch_builds_only_what_is_asked(fresh, monkeypatch):
    monkeypatch.setenv("CUPRIC_BUILD_SYNC", "1")
    module = _cext.open_extension("_cupric_ts", "ts", tiny(11), "x", wait=False)
    assert module.answer() == 11
    assert _cext._builds == {}                     # no thread, no prefetch


def test_failed_background_build_is_reported_to_every_caller(fresh):
    broken = TINY.replace("PyLong_FromLong(ANSWER)", "not C at all")
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_tf", "tf", broken, "broken extension", wait=False)
    wait_all()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="building the broken extension failed"):
            _cext.open_extension("_cupric_tf", "tf", broken, "broken extension", wait=False)


def test_not_building_when_told_not_to(fresh, monkeypatch):
    monkeypatch.setenv("CUPRIC_BUILD_LAUNCHER", "0")
    assert _cext.open_extension("_cupric_tn", "tn", tiny(1), "x", wait=False) is None
    assert _cext._builds == {}
    monkeypatch.delenv("CUPRIC_BUILD_LAUNCHER")
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_tn", "tn", tiny(1), "x", wait=False)
    # A pending build is not waited for by a caller that does not build.
    if not _cext._builds[_cext.module_name("_cupric_tn", tiny(1))].done.is_set():
        assert _cext.open_extension("_cupric_tn", "tn", tiny(1), "x", build_missing=False,
                                    wait=True) is None
    wait_all()


# -- the fast paths' callers: Python path while pending, then the compiled one ---------------


class Steps:
    """A stand-in for open_extension: Pending for the first `n` calls, then `module`."""

    def __init__(self, n, module):
        self.n, self.module, self.calls = n, module, 0

    def __call__(self, *args, wait=True, **kwargs):
        self.calls += 1
        if self.calls <= self.n:
            assert wait is False, "a caller that can switch later must not block"
            raise _cext.Pending("building")
        return self.module


def _unloaded(monkeypatch, fast_path, steps) -> None:
    """`fast_path` as before its first load, opening extensions through `steps`."""
    monkeypatch.setattr(_cext, "open_extension", steps)
    monkeypatch.setattr(fast_path.EXTENSION, "configure", lambda m: None)
    monkeypatch.setattr(fast_path.EXTENSION, "module", None)
    monkeypatch.setattr(fast_path.EXTENSION, "error", None)


def test_cudnn_replay_switches_when_ready(monkeypatch):
    from cupric.cudnn import _replay
    module = types.SimpleNamespace(run=lambda *a: ("compiled",))
    steps = Steps(2, module)
    _unloaded(monkeypatch, _replay, steps)
    monkeypatch.setattr(_replay, "run", _replay._first_call)
    assert _replay.run((), (), (), None, None) is None      # pending: the Python path
    assert _replay.run is _replay._first_call
    assert _replay.run((), (), (), None, None) is None
    assert _replay.build_error() is None                    # pending is not an error
    assert _replay.run((), (), (), None, None) is None      # ready: installed now
    assert _replay.run is module.run and steps.calls == 3


def test_cublas_fast_path_switches_when_ready(monkeypatch):
    from cupric.cublas import _fastgemm, level3, numpy_api
    module = types.SimpleNamespace(matmul=object(), gemm=object())
    _unloaded(monkeypatch, _fastgemm, Steps(1, module))
    monkeypatch.setattr(numpy_api, "_c_matmul", _fastgemm._first_call)
    monkeypatch.setattr(level3, "_c_gemm", _fastgemm._first_call)
    assert numpy_api._c_matmul() is None
    assert numpy_api._c_matmul is _fastgemm._first_call and _fastgemm.build_error() is None
    assert level3._c_gemm() is None
    assert numpy_api._c_matmul is module.matmul and level3._c_gemm is module.gemm


def test_allocation_path_asks_again_while_pending(monkeypatch):
    from cupric.runtime import _fastalloc, allocation
    entry = object()
    answers = iter([None, None, entry])
    pending = iter([True, True])
    monkeypatch.setattr(_fastalloc, "native", lambda: next(answers))
    monkeypatch.setattr(_fastalloc, "pending", lambda: next(pending))
    monkeypatch.setattr(allocation, "_fast", allocation._UNSET)
    assert allocation._load_fast() is None and allocation._fast is allocation._UNSET
    assert allocation._load_fast() is None and allocation._fast is allocation._UNSET
    assert allocation._load_fast() is entry and allocation._fast is entry


def test_allocation_pending_state(monkeypatch):
    from cupric.runtime import _fastalloc
    monkeypatch.setattr(_cext, "_builds", {})
    monkeypatch.setattr(_fastalloc.EXTENSION, "module", None)
    monkeypatch.setattr(_fastalloc.EXTENSION, "error", None)
    assert not _fastalloc.pending()
    monkeypatch.setitem(_cext._builds, _cext.module_name("_cupric_fastalloc",
                                                         _fastalloc.SOURCE), _cext._Build())
    assert _fastalloc.pending()
    monkeypatch.setattr(_fastalloc.EXTENSION, "error", "failed")
    assert not _fastalloc.pending()                # a failed build: the Python path stays


def test_every_fast_path_is_listed():
    import importlib
    import pathlib

    from cupric import _config
    listed = set()
    for module_path in _cext.FAST_PATHS:
        ext = importlib.import_module(module_path).EXTENSION
        assert isinstance(ext, _cext.Extension) and ext.source.endswith(_cext.MODULE_INIT)
        if ext.switch is not None:
            assert isinstance(getattr(_config, ext.switch), _config.Setting)
        listed.add(module_path)
    # Every module that opens an extension declares it and is listed (prefetch builds it).
    root = pathlib.Path(_cext.__file__).parents[1]
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        dotted = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        if dotted != "cupric.runtime._cext" and (
                "Extension(" in text and "MODULE_INIT" in text):
            assert dotted in listed, f"{dotted} declares an extension FAST_PATHS lacks"
        assert "PyModuleDef_HEAD_INIT" not in text or dotted == "cupric.runtime._cext", \
            f"{dotted} repeats the module-init boilerplate: end the source with MODULE_INIT"


# -- generated bindings prepared in child processes ----------------------------------------


def test_cold_start_prepares_the_bindings_too(fresh, monkeypatch):
    from cupric.bindings_gen import prefetch
    started = []
    monkeypatch.setattr(prefetch, "start", lambda names: started.append(tuple(names)))
    monkeypatch.setattr(_cext, "BINDINGS", ("cudnn", "cublas"))
    monkeypatch.setattr(_cext, "_cpus", lambda: 16)
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_tb", "tb", tiny(2), "x", wait=False)
    assert started == [("cudnn", "cublas")]
    # On two cores the children would compete with the caller that waits for them.
    monkeypatch.setattr(_cext, "_cpus", lambda: 2)
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_tb2", "tb2", tiny(3), "x", wait=False)
    assert started == [("cudnn", "cublas")]
    wait_all()


def test_binding_children_run_once_and_are_waited_for(monkeypatch, tmp_path):
    from cupric.bindings_gen import prefetch
    # A stand-in generator: writes <name>.done after a pause.
    child = ("import sys, time, pathlib; time.sleep(0.3); "
             f"pathlib.Path({str(tmp_path)!r}, sys.argv[2] + '.done').write_text('x')")
    monkeypatch.setattr(prefetch, "_CHILD", child)
    monkeypatch.setattr(prefetch, "_children", {})
    prefetch.start(["liba", "libb"])
    first = dict(prefetch._children)
    prefetch.start(["liba"])
    assert prefetch._children == first and len(first) == 2
    prefetch.wait("liba")
    assert (tmp_path / "liba.done").exists()
    prefetch.wait("libb")
    assert (tmp_path / "libb.done").exists()
    prefetch.wait("never-started")                 # nothing to wait for


def test_binding_load_waits_for_its_child(monkeypatch):
    from cupric.bindings_gen import binding, cache, prefetch
    order = []
    monkeypatch.setattr(prefetch, "wait", lambda name: order.append(("wait", name)))

    def load_module(spec):
        order.append(("load", spec.name))
        raise binding.BindingsError("stop here")
    monkeypatch.setattr(cache, "load_module", load_module)
    b = binding.Binding("cudnn", "cuDNN")
    if not b.is_available() and not order:
        pytest.skip(f"cuDNN headers or library missing here: {b.unavailable_reason}")
    assert order == [("wait", "cudnn"), ("load", "cudnn")]


def test_a_build_that_cannot_start_fails_every_caller(fresh, monkeypatch):
    class NoThread(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")
    monkeypatch.setattr(_cext.threading, "Thread", NoThread)
    for wait in (False, True, True):
        with pytest.raises(RuntimeError, match="can't start new thread"):
            _cext.open_extension("_cupric_tt", "tt", tiny(4), "x", wait=wait)


def test_no_executable_builds_in_the_caller(fresh, monkeypatch):
    monkeypatch.setattr(sys, "executable", "")
    assert _cext.open_extension("_cupric_te", "te", tiny(6), "x", wait=False).answer() == 6
    assert _cext._builds == {}


def test_a_build_publishes_where_it_was_asked_for(fresh, tmp_path, monkeypatch):
    with pytest.raises(_cext.Pending):
        _cext.open_extension("_cupric_tr", "tr", tiny(9), "x", wait=False)
    # A test (or a user) pointing the cache elsewhere meanwhile does not move it.
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "elsewhere"))
    wait_all()
    assert any(p.suffix == ".so" for p in (tmp_path / "cache" / "tr").iterdir())
    assert not (tmp_path / "elsewhere" / "tr").exists()
