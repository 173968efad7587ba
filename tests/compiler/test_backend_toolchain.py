"""Toolchain discovery: what is found where, versions, and the install hint when a piece
is missing."""

from __future__ import annotations

import os
import stat

import pytest

from cupric.compiler import toolchain
from cupric.compiler.errors import CompilerError, ToolchainNotFoundError


@pytest.fixture
def fresh_lookups(monkeypatch, tmp_path):
    """Clear the per-process lookup caches before and after a test that fakes the system,
    with an empty cache root, so that no remembered location stands in for the search."""
    from cupric.compiler import _locations

    finders = (toolchain.load_libnvvm, toolchain.libnvvm, toolchain.nvvm_release,
               toolchain.libdevice, toolchain.ptxas, toolchain.nvjitlink)
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path / "cache"))
    for finder in finders:
        finder.cache_clear()
    _locations.forget()
    yield
    for finder in finders:
        finder.cache_clear()
    _locations.forget()


def test_everything_is_found_here():
    nvvm = toolchain.libnvvm()
    assert os.path.isfile(nvvm.path) and "nvvm" in os.path.basename(nvvm.path)
    assert nvvm.version[0] >= 12 and len(nvvm.version) == 3
    assert toolchain.libdevice().path.endswith("libdevice.10.bc")
    ptxas = toolchain.ptxas()
    assert os.access(ptxas.path, os.X_OK) and ptxas.version[0] >= 12
    assert toolchain.nvjitlink().version[0] >= 12


def test_report_is_json_ready():
    import json

    report = toolchain.report()
    assert set(report) >= {"libnvvm", "libdevice", "ptxas", "nvjitlink", "driver"}
    assert report["libnvvm"]["ir_version"] == "2.0"
    assert report["libnvvm"]["ptx_isa"].startswith(("8.", "9."))
    json.dumps(report)
    print(json.dumps(report, indent=1))


def test_missing_libnvvm_names_the_package(monkeypatch, fresh_lookups):
    import cuda.pathfinder as pathfinder

    def not_found(name):
        raise pathfinder.DynamicLibNotFoundError(f"Failure finding {name}")

    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib", not_found)
    with pytest.raises(ToolchainNotFoundError) as info:
        toolchain.libnvvm()
    assert isinstance(info.value, ImportError) and isinstance(info.value, CompilerError)
    assert "pip install nvidia-nvvm" in str(info.value)
    with pytest.raises(ToolchainNotFoundError, match="nvidia-nvjitlink"):
        toolchain.nvjitlink()
    # The report says so instead of raising.
    report = toolchain.report()
    assert "nvidia-nvvm" in report["libnvvm"]["error"]


def test_missing_libdevice_names_the_package(monkeypatch, tmp_path, fresh_lookups):
    import cuda.pathfinder as pathfinder

    def not_found(name):
        raise pathfinder.BitcodeLibNotFoundError(name)

    monkeypatch.setattr(pathfinder, "locate_bitcode_lib", not_found, raising=False)
    monkeypatch.setattr(toolchain, "libnvvm",
                        lambda: toolchain.Tool("libnvvm", str(tmp_path / "lib" / "libnvvm.so"),
                                               (13, 0, 0), "test"))
    monkeypatch.setattr(toolchain, "cuda_home_candidates", lambda: [("CUDA_HOME", tmp_path)])
    with pytest.raises(ToolchainNotFoundError, match="pip install nvidia-nvvm"):
        toolchain.libdevice()
    # A toolkit layout next to libNVVM is found without cuda.pathfinder's help.
    folder = tmp_path / "nvvm" / "libdevice"
    folder.mkdir(parents=True)
    (folder / "libdevice.10.bc").write_bytes(b"BC\xc0\xde")
    toolchain.libdevice.cache_clear()
    assert toolchain.libdevice().path == str((folder / "libdevice.10.bc").resolve())


def test_missing_ptxas_names_the_package(monkeypatch, fresh_lookups, tmp_path):
    import cuda.pathfinder as pathfinder

    monkeypatch.setattr(pathfinder, "find_nvidia_binary_utility", lambda name: None, raising=False)
    monkeypatch.setattr(toolchain, "_wheel_roots", lambda: [])
    monkeypatch.setattr(toolchain, "cuda_home_candidates", lambda: [("CUDA_HOME", tmp_path)])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolchainNotFoundError, match="pip install nvidia-cuda-nvcc"):
        toolchain.ptxas()


def test_ptxas_from_cuda_home_with_its_version(monkeypatch, fresh_lookups, tmp_path):
    import cuda.pathfinder as pathfinder

    fake = tmp_path / "bin" / "ptxas"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(pathfinder, "find_nvidia_binary_utility", lambda name: None, raising=False)
    monkeypatch.setattr(toolchain, "_wheel_roots", lambda: [])
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    tool = toolchain.ptxas()
    assert tool.path == str(fake) and tool.found_via == "CUDA_HOME"
    assert tool.version == (13, 0, 88) and tool.version_text == "13.0.88"


def test_cuda_home_order(monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/opt/a")
    monkeypatch.setenv("CUDA_PATH", "/opt/b")
    assert [str(p) for _, p in toolchain.cuda_home_candidates()] == ["/opt/a", "/opt/b",
                                                                    "/usr/local/cuda"]


def test_nvvm_release_matches_the_ptx_header():
    from cupric.compiler.nvvm import compile_ir, ir_header, ir_version_metadata
    from cupric.compiler.options import CompileOptions

    ptx = compile_ir([ir_header() + ir_version_metadata(0)], CompileOptions(arch="sm_80")).ptx
    major, minor, patch = toolchain.nvvm_release()
    assert f"release {major}.{minor}, V{major}.{minor}.{patch}" in ptx
