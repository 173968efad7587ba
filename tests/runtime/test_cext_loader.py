"""The one cached loader of the compiled fast paths (`cupric.runtime._cext.Extension`):
load once, remember a failure, honour the switch, configure before anyone sees the
module, and report a background build as pending."""

from __future__ import annotations

import types

import pytest

from cupric.runtime import _cext


class Opener:
    """A stand-in for open_extension returning (or raising) what it is given, counting."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def __call__(self, prefix, subdir, source, what, build=None, *, wait=True):
        self.calls.append((prefix, subdir, build, wait))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def make(monkeypatch, *answers, **options):
    opener = Opener(*answers)
    monkeypatch.setattr(_cext, "open_extension", opener)
    ext = _cext.Extension("_cupric_unit", "unit", "unit extension", "/* c */", **options)
    return ext, opener


def test_loads_once_and_configures_first(monkeypatch):
    module = types.SimpleNamespace(configured=False)

    def configure(m):
        assert ext.module is None  # nobody sees the module before it is configured
        m.configured = True
    ext, opener = make(monkeypatch, module, configure=configure)
    assert ext.load() is module and module.configured
    assert ext.load(build=True) is module and len(opener.calls) == 1
    assert ext.error is None and not ext.pending() and "loaded" in repr(ext)


def test_a_failure_is_remembered_and_not_retried(monkeypatch):
    ext, opener = make(monkeypatch, RuntimeError("no compiler"), types.SimpleNamespace())
    assert ext.load() is None
    assert ext.error == "RuntimeError: no compiler"
    assert ext.load() is None and len(opener.calls) == 1
    ext.forget()
    assert ext.load() is not None and ext.error is None


def test_a_failed_configure_is_recorded(monkeypatch):
    def configure(m):
        raise TypeError("slot layout changed")
    ext, _ = make(monkeypatch, types.SimpleNamespace(), configure=configure)
    assert ext.load() is None and ext.module is None
    assert ext.error == "TypeError: slot layout changed"


def test_not_built_records_nothing(monkeypatch):
    ext, opener = make(monkeypatch, None, types.SimpleNamespace())
    assert ext.load(build=False) is None and ext.error is None
    assert ext.load(build=True) is not None            # a later caller may still build
    assert [c[2] for c in opener.calls] == [False, True]


def test_pending_is_raised_not_recorded(monkeypatch):
    ext, opener = make(monkeypatch, _cext.Pending("building"), types.SimpleNamespace())
    with pytest.raises(_cext.Pending):
        ext.load(wait=False)
    assert ext.error is None and opener.calls[0][3] is False
    assert ext.load(wait=False) is not None


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("CUPRIC_CUBLAS_FASTPATH", "0")
    ext, opener = make(monkeypatch, types.SimpleNamespace(), switch="CUBLAS_FASTPATH")
    assert not ext.enabled()
    assert ext.load() is None and opener.calls == []
    assert ext.error == "disabled by CUPRIC_CUBLAS_FASTPATH=0"


def test_pending_follows_the_background_builds(monkeypatch):
    monkeypatch.setattr(_cext, "_builds", {})
    ext = _cext.Extension("_cupric_unit", "unit", "unit extension", "/* c */")
    assert not ext.pending()
    monkeypatch.setitem(_cext._builds, _cext.module_name(ext.prefix, ext.source),
                        _cext._Build())
    assert ext.pending()
    ext.error = "failed"
    assert not ext.pending()


def test_every_fast_path_module_loads_through_its_extension():
    import importlib
    for path in _cext.FAST_PATHS:
        module = importlib.import_module(path)
        ext = module.EXTENSION
        assert ext.source is module.SOURCE
        assert module.build_error() is ext.error


def test_the_shared_init_builds(monkeypatch, tmp_path):
    import shutil
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    pytest.importorskip("setuptools")
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUPRIC_BUILD_SYNC", "1")
    source = r"""
#include <Python.h>
static PyMethodDef methods[] = {{NULL, NULL, 0, NULL}};
#define MODULE_READY module_ready
static int module_ready(PyObject *m) { return PyModule_AddIntConstant(m, "READY", 42); }
""" + _cext.MODULE_INIT
    ext = _cext.Extension("_cupric_unit_init", "unit", "unit extension", source)
    module = ext.load(build=True)
    assert module is not None, ext.error
    assert module.READY == 42
