"""cupric's own libNVVM/nvJitLink bindings (`cupric.compiler._abi`), the generated cffi
module they use, the toolchain locations remembered in the cache
(`cupric.compiler._locations`), and the loader threads of a cold compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from cupric.compiler import _abi, _locations, toolchain
from cupric.compiler.errors import LinkError, NvvmError
from cupric.compiler.nvvm import ir_header, ir_version_metadata, kernel_annotation

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TINY = (ir_header() +
        "define void @twice(i32 addrspace(1)* %p) {\n"
        "  %v = load i32, i32 addrspace(1)* %p\n"
        "  %w = shl i32 %v, 1\n"
        "  store i32 %w, i32 addrspace(1)* %p\n"
        "  ret void\n}\n"
        "!nvvm.annotations = !{!0}\n" +
        kernel_annotation("twice", "void (i32 addrspace(1)*)", 0) + "\n" +
        ir_version_metadata(1))


@pytest.fixture(scope="module")
def nvvm_lib() -> _abi.Nvvm:
    try:
        return toolchain.nvvm_library()
    except ImportError as exc:
        pytest.skip(f"libNVVM not installed: {exc}")


@pytest.fixture(scope="module")
def jitlink_lib() -> _abi.NvJitLink:
    try:
        return toolchain.nvjitlink_library()
    except ImportError as exc:
        pytest.skip(f"nvJitLink not installed: {exc}")


def _ptx(nvvm_lib, arch="compute_90") -> str:
    with nvvm_lib.program() as program:
        program.add_module(TINY.encode(), "tiny")
        program.verify([f"-arch={arch}"])
        program.compile([f"-arch={arch}", "-opt=3"])
        return program.result()


# -- the generated module -----------------------------------------------------------------------

def test_generated_module_matches_the_declarations():
    from cupric import _toolchain_ffi

    assert _toolchain_ffi.DECLARATIONS_DIGEST == _abi.declarations_digest(), (
        "regenerate with `python -m cupric.compiler._abi`")
    pytest.importorskip("cffi")
    path = os.path.join(ROOT, "cupric", "_toolchain_ffi.py")
    with open(path, encoding="utf-8") as file:
        committed = file.read()

    def without_version(text: str) -> str:  # the header names the cffi that generated it
        return "\n".join(line for line in text.splitlines() if not line.startswith("# cffi "))

    assert without_version(_abi.generate()) == without_version(committed)


def test_every_declared_function_is_exported(nvvm_lib, jitlink_lib):
    import re

    names = re.findall(r"\b(nvvm\w+|nvJitLink\w+)\(", _abi.DECLARATIONS)
    assert len(names) == 26  # 12 libNVVM, 14 nvJitLink (runtime.linker)
    for name in names:
        lib = nvvm_lib.lib if name.startswith("nvvm") else jitlink_lib.lib
        assert callable(getattr(lib, name)), name


# -- libNVVM ------------------------------------------------------------------------------------

def test_versions(nvvm_lib, jitlink_lib):
    assert nvvm_lib.version() == (2, 0)
    assert nvvm_lib.ir_version()[:2] == (2, 0)
    major, minor = jitlink_lib.version()
    assert major >= 12 and minor >= 0
    assert toolchain.nvjitlink().version == (major, minor)


def test_tiny_module_to_ptx_and_cubin(nvvm_lib, jitlink_lib):
    ptx = _ptx(nvvm_lib)
    assert ".visible .entry twice(" in ptx and ".target sm_90" in ptx
    assert not ptx.endswith("\x00")
    with jitlink_lib.handle(["-arch=sm_90", "-O3", "-verbose"]) as handle:
        handle.add_data(_abi.NVJITLINK_INPUT_PTX, ptx.encode(), "tiny.ptx")
        handle.complete()
        cubin = handle.cubin()
        info = handle.info_log()
    assert cubin[:4] == b"\x7fELF" and len(cubin) > 1000
    assert "Compiling entry function 'twice' for 'sm_90'" in info
    # The cubin links again as an input of its own kind.
    with jitlink_lib.handle(["-arch=sm_90"]) as handle:
        handle.add_data(_abi.NVJITLINK_INPUT_CUBIN, cubin, "tiny.cubin")
        handle.complete()
        assert handle.cubin()[:4] == b"\x7fELF"


def test_bad_ir_gives_the_status_and_the_log(nvvm_lib):
    with nvvm_lib.program() as program:
        program.add_module(b"this is not IR", "broken")
        with pytest.raises(_abi.LibraryCallError) as info:
            program.compile(["-arch=compute_90"])
        assert info.value.function == "nvvmCompileProgram"
        assert info.value.status == 9 and info.value.name == "NVVM_ERROR_COMPILATION"
        assert str(info.value) == "NVVM_ERROR_COMPILATION (9)"
        assert "broken (1, 0)" in program.log()


def test_bad_ir_through_compile_ir_is_an_nvvm_error_with_the_log():
    from cupric.compiler import nvvm
    from cupric.compiler.options import CompileOptions

    broken = TINY.replace("ret void", "ret i32 0")
    with pytest.raises(NvvmError) as info:
        nvvm.compile_ir([broken], CompileOptions(arch="sm_90"), names=["tiny"])
    assert "NVVM_ERROR_" in str(info.value) and "-arch=compute_90" in str(info.value)
    assert "tiny" in info.value.log and info.value.log in str(info.value)
    assert info.value.code in (6, 9)


def test_a_refused_option_is_named(nvvm_lib, jitlink_lib):
    with nvvm_lib.program() as program:
        program.add_module(TINY.encode(), "tiny")
        with pytest.raises(_abi.LibraryCallError) as info:
            program.compile(["-arch=compute_90", "-no-such-option"])
        assert info.value.name == "NVVM_ERROR_INVALID_OPTION"
    with pytest.raises(_abi.LibraryCallError) as info:
        jitlink_lib.handle(["-arch=sm_90", "-no-such-option"])
    assert info.value.name == "NVJITLINK_ERROR_UNRECOGNIZED_OPTION"


def test_bad_ptx_is_a_link_error_with_the_assembler_log(nvvm_lib):
    from cupric.compiler.link import link_ptx
    from cupric.compiler.options import CompileOptions

    ptx = _ptx(nvvm_lib).replace("ret;", "no_such_instruction;")
    with pytest.raises(LinkError) as info:
        link_ptx(ptx, CompileOptions(arch="sm_90"), linker="nvjitlink")
    assert "NVJITLINK_ERROR_PTX_COMPILE" in str(info.value)
    assert "no_such_instruction" in info.value.log


def test_a_closed_program_or_handle_refuses_use(nvvm_lib, jitlink_lib):
    program = nvvm_lib.program()
    program.close()
    program.close()  # a second close does nothing
    with pytest.raises(ValueError, match="destroyed"):
        program.add_module(TINY.encode(), "tiny")
    handle = jitlink_lib.handle(["-arch=sm_90"])
    handle.close()
    handle.close()
    with pytest.raises(ValueError, match="destroyed"):
        handle.complete()


def test_a_file_that_is_no_library_is_an_os_error(tmp_path):
    fake = tmp_path / "libnvvm.so.4"
    fake.write_bytes(b"not a shared object")
    with pytest.raises(OSError):
        _abi.Nvvm(str(fake))


# -- remembered locations -------------------------------------------------------------------------

@pytest.fixture
def cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "cache"))
    _locations.forget()
    yield tmp_path / "cache"
    _locations.forget()


def test_a_location_is_remembered_until_the_file_changes(cache_root, tmp_path):
    library = tmp_path / "libnvvm.so.4"
    library.write_bytes(b"version 1")
    assert _locations.recall("libnvvm") is None
    _locations.remember("libnvvm", str(library), "test")
    assert _locations.recall("libnvvm") == (str(library), "test")
    record = _locations.record_path()
    assert record.parent == cache_root / "toolchain"
    assert json.loads(record.read_text())["pieces"]["libnvvm"]["path"] == str(library)
    _locations.forget()  # a new process reads the file
    assert _locations.recall("libnvvm") == (str(library), "test")
    library.write_bytes(b"version 2, longer")  # an upgrade in place
    assert _locations.recall("libnvvm") is None
    _locations.remember("libnvvm", str(library), "test")
    os.utime(library, ns=(1, 1))  # same size, other time
    assert _locations.recall("libnvvm") is None
    _locations.remember("libnvvm", str(library), "test")
    library.unlink()
    assert _locations.recall("libnvvm") is None


def test_a_changed_site_packages_forgets_every_location(cache_root, tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(_locations, "_watched_folders", lambda: [str(site)])
    library = tmp_path / "libnvJitLink.so.13"
    library.write_bytes(b"x")
    _locations.remember("nvjitlink", str(library), "test")
    assert _locations.recall("nvjitlink") == (str(library), "test")
    (site / "nvidia_nvjitlink-99.dist-info").mkdir()  # pip installed something
    os.utime(site, ns=(2, 2))  # (the mkdir's time may fall in the same tick)
    assert _locations.recall("nvjitlink") is None


def test_each_environment_has_its_own_record(cache_root, monkeypatch):
    first = _locations.record_path()
    monkeypatch.setenv("CUDA_HOME", "/opt/another-cuda")
    assert _locations.record_path() != first


def test_a_record_of_another_user_is_ignored(cache_root, tmp_path, monkeypatch):
    library = tmp_path / "libnvvm.so.4"
    library.write_bytes(b"x")
    _locations.remember("libnvvm", str(library), "test")
    _locations.forget()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(library).st_uid + 1)
    assert _locations.recall("libnvvm") is None


def test_an_unwritable_cache_root_only_costs_the_search(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache root should be")
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(blocker / "cache"))
    _locations.forget()
    library = tmp_path / "lib.so"
    library.write_bytes(b"x")
    _locations.remember("libnvvm", str(library), "test")  # no exception
    assert _locations.recall("libnvvm") is None
    _locations.forget()


CHILD = """
import json, sys
from cupric.compiler import toolchain, nvvm
from cupric.compiler.options import CompileOptions
path, found_via = toolchain.load_libnvvm()
out = nvvm.compile_ir([{tiny!r}], CompileOptions(arch="sm_90"))
print(json.dumps({{"path": path, "found_via": found_via, "ptx": ".entry twice(" in out.ptx,
                  "pathfinder": "cuda.pathfinder" in sys.modules}}))
"""


def _child(cache: str) -> dict:
    env = dict(os.environ, CUPRIC_CACHE_DIR=cache)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", CHILD.format(tiny=TINY)], capture_output=True,
                         text=True, env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fresh_processes_search_once_then_load_the_remembered_library(tmp_path, nvvm_lib):
    cache = str(tmp_path / "cache")
    first = _child(cache)
    assert first["ptx"] and first["pathfinder"] and first["found_via"] != "test"
    second = _child(cache)
    assert second["ptx"] and not second["pathfinder"]
    assert (second["path"], second["found_via"]) == (first["path"], first["found_via"])


def test_a_remembered_file_that_does_not_load_falls_back_to_the_search(tmp_path, nvvm_lib,
                                                                        monkeypatch):
    cache = str(tmp_path / "cache")
    real = _child(cache)["path"]
    # The record now names a file that is unchanged since it was recorded, yet no library.
    monkeypatch.setenv("CUPRIC_CACHE_DIR", cache)
    _locations.forget()
    fake = tmp_path / "libnvvm.so.4"
    fake.write_bytes(b"not a shared object")
    _locations.remember("libnvvm", str(fake), "test")
    _locations.forget()
    again = _child(cache)
    assert again["ptx"] and again["pathfinder"] and again["path"] == real
    assert _locations.recall("libnvvm") == (real, again["found_via"])  # remembered anew
    _locations.forget()


# -- the loader threads ---------------------------------------------------------------------------

def test_start_loading_loads_both_libraries_on_threads(nvvm_lib, jitlink_lib, monkeypatch):
    # As in a fresh process: nothing opened yet (the libraries stay mapped, so this is fast).
    monkeypatch.setattr(toolchain, "_OPENED", {})
    monkeypatch.setattr(toolchain, "_TOOLS", {})
    ready = toolchain.start_loading()
    assert ready.wait(60)
    threads = [t for t in threading.enumerate() if t.name.startswith("cupric-")]
    assert all(not t.daemon for t in threads)
    assert toolchain.nvjitlink().version == jitlink_lib.version()  # waits for its loader
    assert not any(t.is_alive() for t in threads if t.name == "cupric-nvjitlink-load")
    assert set(toolchain._OPENED) == {"libnvvm", "nvjitlink"}
    # Everything loaded: nothing more to start.
    assert toolchain.start_loading().is_set()


def test_preload_releases_the_gil_and_reports_a_bad_file(tmp_path, jitlink_lib):
    _abi.preload(jitlink_lib.path)  # loaded already: the loader only counts it
    bad = tmp_path / "libbad.so"
    bad.write_bytes(b"no ELF")
    with pytest.raises(OSError, match="libbad.so"):
        _abi.preload(str(bad))


def test_links_without_nvjitlink_cache_and_falls_back_when_refused(nvvm_lib, jitlink_lib,
                                                                      monkeypatch):
    from cupric.compiler import link
    from cupric.compiler.options import CompileOptions

    ptx = _ptx(nvvm_lib)
    seen = []
    real = jitlink_lib.handle

    def old_nvjitlink(options):  # an nvJitLink that does not know -no-cache
        seen.append(list(options))
        if "-no-cache" in options:
            raise _abi.LibraryCallError("nvJitLinkCreate", 1, _abi.NVJITLINK_RESULTS)
        return real(options)

    monkeypatch.setattr(link, "_NO_CACHE", ["-no-cache"])
    monkeypatch.setattr(jitlink_lib, "handle", old_nvjitlink)
    out = link.link_ptx(ptx, CompileOptions(arch="sm_90"), linker="nvjitlink")
    assert out.cubin[:4] == b"\x7fELF"
    assert "-no-cache" in seen[0] and "-no-cache" not in seen[1]
    assert link._NO_CACHE == []  # not asked again
    link.link_ptx(ptx, CompileOptions(arch="sm_90"), linker="nvjitlink")
    assert len(seen) == 3 and "-no-cache" not in seen[2]
    monkeypatch.undo()
    assert link._NO_CACHE == ["-no-cache"]
    # The installed nvJitLink takes it.
    assert link.link_ptx(ptx, CompileOptions(arch="sm_90")).cubin[:4] == b"\x7fELF"
