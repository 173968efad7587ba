"""cupric's one nvJitLink binding (`cupric.runtime.linker`): the public `Linker` over
`NvJitLink`/`NvJitLinkHandle`, the library the compiler's PTX -> cubin step uses too."""

from __future__ import annotations

import gc

import pytest

from cupric.runtime import linker

PTX = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry store(.param .u64 p)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [p];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], 7;
  ret;
}
"""


@pytest.fixture(scope="module")
def library():
    if not linker.is_available():
        pytest.skip("nvJitLink not installed")
    return linker._nvjitlink()


def test_one_binding_serves_the_runtime_and_the_compiler(library):
    from cupric.compiler import _abi, link
    assert _abi.NvJitLink is linker.NvJitLink and _abi.LibraryCallError is linker.LibraryCallError
    assert link.ptx_to_cubin(PTX, "sm_80")[:4] == b"\x7fELF"
    major, minor = library.version()
    assert major >= 12 and minor >= 0


def test_a_given_library_links(library):
    with linker.Linker(linker.LinkerOptions(arch="sm_80", verbose=True),
                       library=linker.NvJitLink(library.path)) as lk:
        lk.add(PTX, name="store.ptx")
        cubin = lk.link()
        assert cubin[:4] == b"\x7fELF" and lk.link() == cubin  # asked again: same cubin
        assert "store" in lk.info_log                           # -verbose resource report


def test_errors_carry_the_result_name_and_the_log(library):
    with pytest.raises(linker.LinkerError) as info:
        linker.link([PTX.replace("ret;", "bogus;")], arch="sm_80")
    assert info.value.result == "NVJITLINK_ERROR_PTX_COMPILE" and "bogus" in info.value.log
    with pytest.raises(linker.LinkerError) as info:
        linker.Linker(linker.LinkerOptions(arch="sm_80", extra=("-no-such-option",)))
    assert info.value.result == "NVJITLINK_ERROR_UNRECOGNIZED_OPTION"


def test_closed_linkers_refuse_and_finalizers_destroy(library):
    from cupric.runtime.errors import ClosedError
    lk = linker.Linker(linker.LinkerOptions(arch="sm_80"))
    lk.close()
    lk.close()  # a second close does nothing
    with pytest.raises(ClosedError):
        lk.add(PTX)
    handle = linker.Linker(linker.LinkerOptions(arch="sm_80"))._handle
    gc.collect()
    with pytest.raises(ValueError, match="destroyed"):
        handle.add_data(linker.NVJITLINK_INPUT_PTX, PTX.encode(), "x")


def test_missing_library_is_reported(monkeypatch):
    import cuda.pathfinder

    def not_found(name):
        raise RuntimeError(f"{name} not found")
    monkeypatch.setattr(linker, "_library", [])
    monkeypatch.setattr(cuda.pathfinder, "load_nvidia_dynamic_lib", not_found)
    assert linker.is_available() is False
    with pytest.raises(linker.LinkerNotFoundError, match="nvidia-nvjitlink"):
        linker.Linker(linker.LinkerOptions(arch="sm_80"))
