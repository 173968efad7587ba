"""The cache root against planted and corrupted files: another user's folders are refused,
files that fail their owner, mode or SHA-256 check are never imported or served but built
again, concurrent first builds and read-only or full caches never fail."""

from __future__ import annotations

import errno
import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types

import pytest

from cupric import _cache
from cupric.runtime import _cext

OTHER_UID = 54321

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, MODULE_NAME, NULL, -1, methods};
PyMODINIT_FUNC INIT_NAME(void) { return PyModule_Create(&def); }
"""

needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="planting a file of another user needs chown (root)")


@pytest.fixture
def root(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(path))
    monkeypatch.delenv("CUPRIC_BINDINGS_DIR", raising=False)
    # Builds in the calling thread, as these tests count and substitute them
    # (test_cext_background covers the background builds).
    monkeypatch.setenv("CUPRIC_BUILD_SYNC", "1")
    monkeypatch.setattr(_cache, "_warned", set())
    return path


@pytest.fixture(scope="module")
def good_build(tmp_path_factory):
    """One real build of SOURCE: (module name, bytes of the .so)."""
    name = _cext.module_name("_cupric_test_ext", SOURCE)
    folder = tmp_path_factory.mktemp("build")
    try:
        path = _cext.compile_extension(str(folder), name, SOURCE, "test extension")
    except RuntimeError as exc:
        pytest.skip(f"no C compiler here: {exc}")
    with open(path, "rb") as f:
        return name, f.read()


@pytest.fixture
def quick_build(good_build, monkeypatch):
    """Builds that copy the good .so instead of running the compiler; counts them."""
    name, data = good_build
    builds = []

    def fake_compile(tmp, module_name, source, what):
        builds.append(module_name)
        path = os.path.join(tmp, module_name + importlib.machinery.EXTENSION_SUFFIXES[0])
        with open(path, "wb") as f:
            f.write(data)
        return path

    monkeypatch.setattr(_cext, "compile_extension", fake_compile)
    return builds


def _loaded_digests(monkeypatch):
    """Record the SHA-256 of every file `_cext` imports."""
    seen = []
    real = _cext.load_file

    def load_file(name, path):
        with open(path, "rb") as f:
            seen.append(hashlib.sha256(f.read()).hexdigest())
        return real(name, path)

    monkeypatch.setattr(_cext, "load_file", load_file)
    return seen


def _open():
    return _cext.open_extension("_cupric_test_ext", "launch", SOURCE, "test extension", True)


# -- folders -------------------------------------------------------------------------------


def test_folders_are_private_and_tightened(root):
    folder = _cache.folder("launch")
    assert folder == root / "launch"
    for path in (root, folder):
        assert os.stat(path).st_mode & 0o777 == 0o700
    os.chmod(folder, 0o775)  # an older cupric made 0775 folders under umask 002
    _cache.folder("launch")
    assert os.stat(folder).st_mode & 0o777 == 0o700


@needs_root
@pytest.mark.parametrize("which", ["root", "kind"])
def test_a_folder_of_another_user_is_refused_for_reading_and_writing(root, which):
    folder = _cache.folder("launch")
    os.chown(root if which == "root" else folder, OTHER_UID, -1)
    for create in (False, True):
        with pytest.raises(PermissionError, match="belongs to uid 54321") as info:
            _cache.folder("launch", create=create)
        assert str(root if which == "root" else folder) in str(info.value)


def test_a_folder_of_another_user_is_refused_without_root(root, monkeypatch):
    _cache.folder("kernels")
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        info = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(root):
            values = list(info)
            values[4] = OTHER_UID  # st_uid
            return os.stat_result(values)
        return info

    monkeypatch.setattr(_cache.os, "stat", stat)
    from cupric.compiler.cache import KernelCache, make_key
    cache = KernelCache()
    with pytest.raises(PermissionError, match=str(root)):
        cache.get(make_key("anything"))
    with pytest.raises(PermissionError, match=str(root)):
        cache.put(make_key("anything"), {"ptx": "x"})


# -- C extensions --------------------------------------------------------------------------


def test_extension_is_built_once_then_verified_and_reused(root, good_build, quick_build,
                                                          monkeypatch):
    seen = _loaded_digests(monkeypatch)
    assert _open().answer() == 42
    assert _open().answer() == 42
    assert len(quick_build) == 1  # the second open verified and reused the first build
    good = hashlib.sha256(good_build[1]).hexdigest()
    assert seen == [good, good]
    files = sorted(p.name for p in (root / "launch").iterdir())
    assert len(files) == 2 and files[1].endswith(".json")  # blob + record, no .tmp left
    assert all(os.stat(root / "launch" / f).st_mode & 0o077 == 0 for f in files)


def _damage(path, data: bytes) -> None:
    # A new file renamed over the old one: this process has the old one mapped (dlopen),
    # and rewriting a mapped file in place would crash it, not test the cache.
    temporary = f"{path}.damaged"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


def _corruptions(data: bytes):
    """117 damaged copies: truncations, zero fills and flipped bytes at spread offsets."""
    n = len(data)
    for k in range(39):
        cut = (n * k) // 39
        yield f"truncated at {cut}", data[:cut]
        start = (n * k) // 39
        yield f"zeroed from {start}", data[:start] + bytes(min(4096, n - start)) \
            + data[start + 4096:]
        pos = (n * k + 17) // 39
        yield f"flipped at {pos}", data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:]


def test_corrupted_extensions_are_rebuilt_never_imported(root, good_build, quick_build,
                                                        monkeypatch):
    seen = _loaded_digests(monkeypatch)
    good = hashlib.sha256(good_build[1]).hexdigest()
    _open()
    folder = root / "launch"
    blob = next(p for p in folder.iterdir() if not p.name.endswith(".json"))
    record = folder / f"{good_build[0]}.json"
    cases = list(_corruptions(good_build[1]))
    assert len(cases) == 117
    for what, damaged in cases:
        _damage(blob, damaged)
        module = _open()
        assert module.answer() == 42, what
        assert blob.read_bytes() == good_build[1], f"{what}: not rebuilt"
    for what, damaged in _corruptions(record.read_bytes()):
        _damage(record, damaged)
        assert _open().answer() == 42, what
    assert set(seen) == {good}  # nothing but the verified build was ever imported
    assert len(quick_build) == 1 + 117 + 117


@needs_root
def test_a_planted_extension_is_not_imported(root, good_build, quick_build, monkeypatch):
    seen = _loaded_digests(monkeypatch)
    _open()
    folder = root / "launch"
    # Another user's file with a record that matches it: owner check refuses both.
    for path in folder.iterdir():
        os.chown(path, OTHER_UID, -1)
    with pytest.warns(RuntimeWarning, match="not a private file"):
        assert _open().answer() == 42
    assert len(quick_build) == 2
    assert all(os.stat(p).st_uid == os.getuid() for p in folder.iterdir()
               if not p.name.startswith("."))


def test_a_world_writable_or_linked_extension_is_not_imported(root, good_build, quick_build,
                                                              tmp_path):
    _open()
    folder = root / "launch"
    blob = next(p for p in folder.iterdir() if not p.name.endswith(".json"))
    os.chmod(blob, 0o666)
    with pytest.warns(RuntimeWarning, match="not a private file"):
        _open()
    assert len(quick_build) == 2 and blob.stat().st_mode & 0o777 == 0o600
    elsewhere = tmp_path / "planted.so"
    elsewhere.write_bytes(good_build[1])
    blob.unlink()
    blob.symlink_to(elsewhere)
    _open()  # (the warning about this path was given once already)
    assert len(quick_build) == 3 and not blob.is_symlink()


def test_eight_processes_building_at_once_all_succeed(root, good_build):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_cache_security import _open
        assert _open().answer() == 42
    """)
    env = dict(os.environ, CUPRIC_CACHE_DIR=str(root))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(8)]
    failures = [p.communicate()[0].decode()[-2000:] for p in procs if p.wait() != 0]
    assert failures == []
    assert not [p for p in (root / "launch").iterdir() if p.name.endswith(".tmp")]
    assert _open().answer() == 42


def _fail_writes(monkeypatch, code):
    """Every cache write fails with `code` (EROFS: read-only; ENOSPC: full)."""
    real = _cache.os.fdopen

    class Failing:
        def __init__(self, handle, mode):
            self.file = real(handle, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def fileno(self):
            return self.file.fileno()

        def write(self, data):
            raise OSError(code, os.strerror(code))

    if code == errno.EROFS:
        def mkstemp(*args, **kwargs):
            raise OSError(code, os.strerror(code))
        monkeypatch.setattr(_cache.tempfile, "mkstemp", mkstemp)
    else:
        monkeypatch.setattr(_cache.os, "fdopen", Failing)


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_unwritable_cache_builds_in_memory_and_warns_once(root, quick_build, monkeypatch,
                                                          code):
    _cache.folder("launch")
    _fail_writes(monkeypatch, code)
    with pytest.warns(RuntimeWarning, match="cannot write the cache") as record:
        assert _open().answer() == 42
        assert _open().answer() == 42
    assert len([w for w in record if "cannot write" in str(w.message)]) == 1
    assert list((root / "launch").iterdir()) == []  # no .tmp left behind


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_unwritable_kernel_cache_keeps_entries_in_memory(root, monkeypatch, code):
    from cupric.compiler.cache import KernelCache, make_key
    cache = KernelCache()
    key = make_key("read-only")
    _cache.folder("kernels")
    _fail_writes(monkeypatch, code)
    with pytest.warns(RuntimeWarning, match="cannot write the cache"):
        entry = cache.put(key, {"ptx": ".version 9.0", "cubin": b"\x7fELF"})
    assert cache.get(key) is entry
    leftovers = [p for p in root.rglob("*") if p.is_file()]
    assert leftovers == []


# -- kernel cache --------------------------------------------------------------------------


def _kernel_entry(root):
    from cupric.compiler.cache import KernelCache, make_key
    cache = KernelCache()
    key = make_key("planted")
    cache.put(key, {"ptx": ".version 9.0 // genuine"}, {"arch": "sm_90"})
    return key, root / "kernels" / "v1" / key[:2]


@needs_root
def test_planted_ptx_is_not_served(root):
    from cupric.compiler.cache import KernelCache
    key, shard = _kernel_entry(root)
    # A consistent entry (checksums right) written by another user into our folder.
    ptx = shard / f"{key}.ptx"
    planted = b".version 9.0 // planted"
    document = json.loads((shard / f"{key}.json").read_text())
    document["payloads"]["ptx"].update(size=len(planted),
                                       sha256=hashlib.sha256(planted).hexdigest())
    ptx.write_bytes(planted)
    (shard / f"{key}.json").write_text(json.dumps(document))
    for path in shard.iterdir():
        os.chown(path, OTHER_UID, -1)
    with pytest.warns(RuntimeWarning, match="not a private file"):
        assert KernelCache().get(key) is None
    # And the same entry in a root that belongs to another user: refused outright.
    os.chown(root / "kernels", OTHER_UID, -1)
    with pytest.raises(PermissionError):
        KernelCache().get(key)


def test_corrupt_kernel_entries_are_misses(root):
    from cupric.compiler.cache import KernelCache
    key, shard = _kernel_entry(root)
    ptx = shard / f"{key}.ptx"
    good = ptx.read_bytes()
    for what, damaged in _corruptions(good):
        if damaged == good:
            continue
        ptx.write_bytes(damaged)
        assert KernelCache().get(key) is None, what
        KernelCache().put(key, {"ptx": good.decode()}, {"arch": "sm_90"})


# -- generated bindings --------------------------------------------------------------------


MODULE_TEXT = "MARK = 'genuine'\nLIBRARY_VERSION = (1, 0)\n"


@pytest.fixture
def fake_library(root, monkeypatch, tmp_path):
    """A library whose 'generation' is instant: load_module runs the real cache logic."""
    from cupric.bindings_gen import cache
    header = tmp_path / "fake.h"
    header.write_text("/* fake */\n")
    header_set = types.SimpleNamespace(include_dirs=(str(tmp_path),), top_header=str(header))
    spec = types.SimpleNamespace(name="fakelib")
    generations = []

    def generate(spec, header_set=None, backend=None):
        generations.append(spec.name)
        info = types.SimpleNamespace(library_version=(1, 0), header_hash="h",
                                     generator_version="g")
        return types.SimpleNamespace(text=MODULE_TEXT, info=info, backend="fake",
                                     functions=[], files=[str(header)])

    monkeypatch.setattr(cache, "find_headers", lambda spec, headers=None: header_set)
    monkeypatch.setattr(cache, "generate", generate)
    monkeypatch.setattr(cache, "generator_identity", lambda: "test")
    monkeypatch.setattr(cache, "_cffi_version", lambda: "0")
    monkeypatch.setitem(sys.modules, "cupric.bindings_gen._generated.fakelib", None)
    sys.modules.pop("cupric.bindings_gen._generated.fakelib")
    return cache, spec, generations, header_set


def test_bindings_are_verified_and_regenerated_when_corrupt(fake_library, root):
    cache, spec, generations, header_set = fake_library
    assert cache.load_module(spec).MARK == "genuine"
    assert cache.load_module(spec).MARK == "genuine"
    assert generations == ["fakelib"]
    path = os.path.join(cache.entry_dir(spec, header_set), cache.module_filename(spec))
    assert not os.path.exists(os.path.join(os.path.dirname(path), "__pycache__"))
    good = MODULE_TEXT.encode()
    planted = b"MARK = 'planted'\nLIBRARY_VERSION = (1, 0)\n"
    cases = [(w, d) for w, d in _corruptions(good) if d != good]
    cases.append(("replaced", planted))
    cases.append(("syntax error", b"def (:\n"))
    for n, (what, damaged) in enumerate(cases, 2):
        with open(path, "wb") as f:
            f.write(damaged)
        # Drop the compiled blob too, so that only the text could be used.
        for blob in os.listdir(os.path.dirname(path)):
            if ".code" in blob or blob.endswith(f".{sys.implementation.cache_tag}.json"):
                os.unlink(os.path.join(os.path.dirname(path), blob))
        assert cache.load_module(spec).MARK == "genuine", what
        assert len(generations) == n, what
        with open(path, "rb") as f:
            assert f.read() == good


@needs_root
def test_planted_bindings_are_not_run(fake_library, root):
    cache, spec, generations, header_set = fake_library
    cache.load_module(spec)
    directory = cache.entry_dir(spec, header_set)
    planted = "MARK = 'planted'\nLIBRARY_VERSION = (1, 0)\n"
    path = os.path.join(directory, cache.module_filename(spec))
    with open(path, "w") as f:
        f.write(planted)
    manifest = os.path.join(directory, "manifest.json")
    document = json.load(open(manifest))
    document["sha256"] = hashlib.sha256(planted.encode()).hexdigest()
    with open(manifest, "w") as f:
        json.dump(document, f)
    for name in os.listdir(directory):
        os.chown(os.path.join(directory, name), OTHER_UID, -1)
    with pytest.warns(RuntimeWarning, match="not a private file"):
        assert cache.load_module(spec).MARK == "genuine"
    os.chown(directory, OTHER_UID, -1)
    with pytest.raises(PermissionError, match="belongs to uid"):
        cache.load_module(spec)


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_bindings_in_an_unwritable_cache_are_generated_in_memory(fake_library, root,
                                                                 monkeypatch, code):
    cache, spec, generations, _ = fake_library
    _cache.folder("bindings")
    _fail_writes(monkeypatch, code)
    with pytest.warns(RuntimeWarning, match="cannot write the cache"):
        assert cache.load_module(spec).MARK == "genuine"
    assert [p for p in root.rglob("*") if p.is_file()] == []


# -- fake libc and the preprocessor --------------------------------------------------------


def test_fake_libc_lives_in_the_cache_and_is_rewritten_when_changed(root):
    from cupric.bindings_gen import fakelibc
    directory = fakelibc.materialize()
    assert directory.startswith(str(root / "fakelibc"))
    stddef = os.path.join(directory, "stddef.h")
    # The reviewer's attack: size_t changed so that parameters lose their upper half.
    with open(stddef, "w") as f:
        f.write("typedef unsigned int size_t;\n")
    assert fakelibc.materialize() == directory
    with open(stddef) as f:
        assert f.read() == fakelibc.FILES["stddef.h"]


@needs_root
def test_fake_libc_of_another_user_is_refused(root):
    from cupric.bindings_gen import fakelibc
    fakelibc.materialize()
    os.chown(root / "fakelibc", OTHER_UID, -1)
    with pytest.raises(PermissionError):
        fakelibc.materialize()


def test_fake_libc_in_an_unwritable_cache_uses_a_private_temporary_folder(root, monkeypatch):
    from cupric.bindings_gen import fakelibc
    monkeypatch.setattr(fakelibc, "_temporary", {})
    real_write = _cache.write_atomic
    monkeypatch.setattr(_cache, "write_atomic",
                        lambda path, data, **kw: False if str(root) in str(path)
                        else real_write(path, data, **kw))
    directory = fakelibc.materialize()
    assert not directory.startswith(str(root))
    assert os.stat(directory).st_mode & 0o777 == 0o700
    with open(os.path.join(directory, "stdint.h")) as f:
        assert f.read() == fakelibc.FILES["stdint.h"]


def _header_set(tmp_path, text):
    from cupric.bindings_gen.headers import HeaderSet
    top = tmp_path / "top.h"
    top.write_text(text)
    return HeaderSet(str(top), (str(tmp_path),))


def _backends():
    from cupric.bindings_gen.preprocess import available_backends
    return available_backends() or ["none"]


@pytest.mark.parametrize("backend", _backends())
def test_a_self_including_header_is_refused(root, tmp_path, backend):
    from cupric.bindings_gen.errors import BindingsError
    from cupric.bindings_gen.preprocess import preprocess
    if backend == "none":
        pytest.skip("no preprocessor")
    header_set = _header_set(tmp_path, '#include "top.h"\nint x;\n')
    with pytest.raises(BindingsError, match="nested|depth"):
        preprocess(header_set, backend)


@pytest.mark.parametrize("backend", _backends())
def test_a_macro_bomb_is_refused_quickly(root, tmp_path, backend):
    import time

    from cupric.bindings_gen import preprocess as pre
    from cupric.bindings_gen.errors import BindingsError
    if backend == "none":
        pytest.skip("no preprocessor")
    lines = ["#define A0 x x"] + [f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, 60)]
    header_set = _header_set(tmp_path, "\n".join(lines) + "\nint y = A59;\n")
    start = time.perf_counter()
    if backend != "pcpp":
        pre.CPP_TIMEOUT, old = 10, pre.CPP_TIMEOUT
    try:
        with pytest.raises(BindingsError, match="exponentially"):
            pre.preprocess(header_set, backend)
    finally:
        if backend != "pcpp":
            pre.CPP_TIMEOUT = old
    assert time.perf_counter() - start < 30


def test_a_cached_module_without_its_manifest_is_not_run(fake_library, root):
    from cupric.bindings_gen.errors import BindingsError
    cache, spec, generations, header_set = fake_library
    cache.load_module(spec)
    directory = cache.entry_dir(spec, header_set)
    path = os.path.join(directory, cache.module_filename(spec))
    os.unlink(os.path.join(directory, "manifest.json"))
    with pytest.raises(BindingsError, match="no trusted manifest"):
        cache.import_module(path, spec.name)
    assert cache.load_module(spec).MARK == "genuine" and len(generations) == 2
