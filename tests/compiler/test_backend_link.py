"""PTX -> cubin on the CPU through nvJitLink and through ptxas, resource reports, and the
choice between linkers when one is missing or too old."""

from __future__ import annotations

import pytest

from _backend_samples import exp_kernel, shared_kernel
from cupric.compiler import link, toolchain
from cupric.compiler.errors import LinkError, ToolchainNotFoundError
from cupric.compiler.nvvm import compile_ir
from cupric.compiler.options import CompileOptions

ELF_MAGIC = b"\x7fELF"


@pytest.fixture(scope="module")
def ptx_by_arch():
    return {arch: compile_ir([shared_kernel()], CompileOptions(arch=arch)).ptx
            for arch in ("sm_80", "sm_90", "sm_100")}


@pytest.mark.parametrize("linker", ["nvjitlink", "ptxas"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_cubin_for_each_arch_and_linker(ptx_by_arch, arch, linker):
    out = link.link_ptx(ptx_by_arch[arch], CompileOptions(arch=arch), linker=linker)
    assert out.cubin.startswith(ELF_MAGIC)
    assert out.linker == linker and out.arch == arch
    usage = out.resource_usage["reverse_div"]
    assert usage.registers > 0
    assert usage.shared_bytes == 256 * 4  # the static tile
    assert usage.spill_stores == 0


def test_exp_kernel_cubin_and_plain_bytes_api():
    ptx = compile_ir([exp_kernel()], CompileOptions(arch="sm_90")).ptx
    cubin = link.ptx_to_cubin(ptx, "sm_90")
    assert cubin.startswith(ELF_MAGIC)
    data, release = link.ptx_to_cubin_with_release(ptx, "sm_90")
    assert data.startswith(ELF_MAGIC) and release[0] >= 12


def test_register_limit_and_debug_options_are_accepted(ptx_by_arch):
    for linker in ("nvjitlink", "ptxas"):
        for options in (CompileOptions(arch="sm_90", max_registers=16),
                        CompileOptions(arch="sm_90", debug=True),
                        CompileOptions(arch="sm_90", lineinfo=True, opt_level=0)):
            assert link.link_ptx(ptx_by_arch["sm_90"], options, linker=linker).cubin


@pytest.mark.parametrize("linker", ["nvjitlink", "ptxas"])
def test_bad_ptx_raises_link_error_with_the_log(ptx_by_arch, linker):
    bad = ptx_by_arch["sm_90"].replace("ret;", "retx;")
    with pytest.raises(LinkError) as info:
        link.link_ptx(bad, CompileOptions(arch="sm_90"), linker=linker)
    assert "retx" in info.value.log
    assert not isinstance(info.value, link.NoLinkerError)


def test_parse_resource_usage_of_both_log_styles():
    ptxas_log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 368 bytes cmem[0]
info    : Function properties for 'k1':
info    : used 40 registers, used 5 barriers, 16 stack, 2048 bytes smem
"""
    usage = link.parse_resource_usage(ptxas_log)
    assert usage["k1"] == link.ResourceUsage(registers=40, stack_bytes=16, spill_stores=8,
                                             spill_loads=4, shared_bytes=2048,
                                             const_bytes=400, barriers=1)
    assert usage["k2"].registers == 8 and usage["k2"].shared_bytes == 0
    assert link.parse_resource_usage("") == {}


def _fake_tool(name, version, path="/nonexistent/tool"):
    return toolchain.Tool(name, path, version, "test")


def test_falls_back_to_ptxas_without_nvjitlink(monkeypatch, ptx_by_arch):
    def missing():
        raise ToolchainNotFoundError("nvJitLink was not found; pip install nvidia-nvjitlink")

    monkeypatch.setattr(toolchain, "nvjitlink", missing)
    out = link.link_ptx(ptx_by_arch["sm_90"], CompileOptions(arch="sm_90"))
    assert out.linker == "ptxas"


def test_too_old_linkers_give_no_linker_error(monkeypatch, ptx_by_arch):
    # libNVVM 13.5 writes ISA 9.5; a 13.0 nvJitLink and ptxas read up to 9.0 (the skew of
    # the GPU machines here). Nothing may be run: the versions decide.
    monkeypatch.setattr(toolchain, "nvjitlink", lambda: _fake_tool("nvjitlink", (13, 0)))
    monkeypatch.setattr(toolchain, "ptxas", lambda: _fake_tool("ptxas", (13, 0, 88)))
    ptx = ptx_by_arch["sm_90"]
    if ptx.find(".version 9.") < 0 or ".version 9.0" in ptx:
        pytest.skip("installed libNVVM writes PTX a 13.0 linker reads")
    with pytest.raises(link.NoLinkerError) as info:
        link.link_ptx(ptx, CompileOptions(arch="sm_90"))
    assert "nvJitLink 13.0" in info.value.log and "ptxas 13.0.88" in info.value.log


def test_no_linker_at_all(monkeypatch, ptx_by_arch):
    def missing(what):
        def finder():
            raise ToolchainNotFoundError(f"{what} was not found")
        return finder

    monkeypatch.setattr(toolchain, "nvjitlink", missing("nvJitLink"))
    monkeypatch.setattr(toolchain, "ptxas", missing("ptxas"))
    with pytest.raises(ToolchainNotFoundError, match="nvidia-nvjitlink"):
        link.link_ptx(ptx_by_arch["sm_90"], CompileOptions(arch="sm_90"))


def test_refused_options_are_a_link_error(ptx_by_arch, monkeypatch):
    monkeypatch.setattr(CompileOptions, "nvjitlink_flags", lambda self: ["-arch=sm_90", "-bogus"])
    with pytest.raises(LinkError, match="refused the options"):
        link.link_ptx(ptx_by_arch["sm_90"], CompileOptions(arch="sm_90"), linker="nvjitlink")


def test_unknown_linker_name(ptx_by_arch):
    with pytest.raises(ValueError):
        link.link_ptx(ptx_by_arch["sm_90"], CompileOptions(arch="sm_90"), linker="nvlink")


def test_an_older_real_ptxas_is_passed_over_by_version(monkeypatch, tmp_path, ptx_by_arch):
    # Where a CUDA 13.0 toolkit sits beside the 13.5 wheels (this CI image), check the fact
    # the ISA table encodes against the real tool, then that link_ptx never runs it.
    import subprocess

    old = "/usr/local/cuda/bin/ptxas"
    ptx = ptx_by_arch["sm_90"]
    try:
        version = toolchain._tool_version(old)
    except OSError:
        pytest.skip("no toolkit ptxas at /usr/local/cuda")
    from cupric.compiler.target import ptx_isa, ptx_isa_of_release

    if version is None or ptx_isa(ptx) <= ptx_isa_of_release(version):
        pytest.skip("the toolkit ptxas reads this PTX; no skew to show")
    source = tmp_path / "k.ptx"
    source.write_text(ptx)
    proc = subprocess.run([old, "-arch=sm_90", str(source), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Unsupported .version" in proc.stderr + proc.stdout
    monkeypatch.setattr(toolchain, "ptxas", lambda: toolchain.Tool("ptxas", old, version, "test"))
    with pytest.raises(link.NoLinkerError, match="ptxas 13"):
        link.link_ptx(ptx, CompileOptions(arch="sm_90"), linker="ptxas")
