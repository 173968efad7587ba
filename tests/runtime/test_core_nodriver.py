"""CPU lane: import cost and behaviour without a driver, factories, option tables, linker."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cupric.runtime as rt
from cupric.runtime._driver import driver_available


def test_import_touches_nothing():
    code = ("import sys, cupric.runtime as rt; "
            "assert 'cuda.bindings' not in sys.modules, 'cuda.bindings imported'; "
            "import cupric.runtime.device, cupric.runtime.stream, cupric.runtime.module, "
            "cupric.runtime.launch, cupric.runtime.graph, cupric.runtime.linker; "
            "assert 'cuda.bindings.driver' not in sys.modules, 'driver imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lazy_names_resolve():
    assert rt.CudaError is rt.errors.CudaError if hasattr(rt, "errors") else rt.CudaError
    for name in ("Device", "Stream", "Event", "Module", "Function", "PreparedLaunch",
                 "Graph", "GraphExec", "JitOptions", "Linker", "LinkerOptions",
                 "ContextFlags", "IllegalAddressError", "ContextLostError", "NoDriverError"):
        assert getattr(rt, name).__name__ == name
    with pytest.raises(AttributeError):
        rt.NoSuchThing


@pytest.mark.skipif(driver_available(), reason="a CUDA driver is present on this machine")
def test_no_driver_is_a_clear_error():
    assert rt.driver_available() is False
    with pytest.raises(rt.NoDriverError, match="no NVIDIA driver"):
        rt.Device(0)
    with pytest.raises(rt.NoDriverError):
        rt.Device.count()
    # Also a CudaError, so one `except CudaError` covers everything.
    with pytest.raises(rt.CudaError):
        rt.devices()


@pytest.mark.parametrize("cls, factory", [
    ("Stream", "create_stream"), ("Event", "create_event"), ("Module", "from_data"),
    ("Context", "primary_context"), ("Function", "get_function"), ("Graph", "capture"),
    ("GraphExec", "instantiate"),
])
def test_context_bound_objects_have_no_constructor(cls, factory):
    with pytest.raises(TypeError, match=factory):
        getattr(rt, cls)()


def test_jit_options_validate_and_map():
    from cupric.runtime.module import JIT_OPTIONS, JitOptions
    with pytest.raises(ValueError):
        JitOptions(optimization_level=7)
    with pytest.raises(ValueError):
        JitOptions(target="gfx90a")
    with pytest.raises(ValueError):
        JitOptions(max_registers=0)
    with pytest.raises(TypeError):
        JitOptions(line_info=1)
    pytest.importorskip("cuda.bindings.driver")
    opts = JitOptions(max_registers=64, optimization_level=3, target="sm_90",
                      fallback="prefer_binary", line_info=True, cache_mode="cg", log_size=512)
    options, values, info, error = opts.to_driver()
    names = [o.name for o in options]
    assert names[:6] == ["CU_JIT_MAX_REGISTERS", "CU_JIT_OPTIMIZATION_LEVEL", "CU_JIT_TARGET",
                         "CU_JIT_FALLBACK_STRATEGY", "CU_JIT_GENERATE_LINE_INFO",
                         "CU_JIT_CACHE_MODE"]
    assert values[0] == 64 and values[1] == 3 and int(values[2]) == 90 and values[4] == 1
    assert names[-4:] == ["CU_JIT_INFO_LOG_BUFFER", "CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES",
                          "CU_JIT_ERROR_LOG_BUFFER", "CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES"]
    assert len(info) == len(error) == 512 and values[-1] == 512
    assert set(JIT_OPTIONS) <= {f for f in JitOptions.__dataclass_fields__}


def test_context_flags_round_trip():
    pytest.importorskip("cuda.bindings.driver")
    from cupric.runtime.context import ContextFlags, _limit_enum, cache_config_enum
    for sched in ("auto", "spin", "yield", "blocking_sync"):
        f = ContextFlags(scheduling=sched, map_host=True, lmem_resize_to_max=sched == "spin")
        assert ContextFlags.from_flags(f.to_flags()) == f
    with pytest.raises(ValueError):
        ContextFlags(scheduling="busy")
    assert _limit_enum("printf_fifo_size").name == "CU_LIMIT_PRINTF_FIFO_SIZE"
    assert cache_config_enum("l1").name == "CU_FUNC_CACHE_PREFER_L1"
    with pytest.raises(ValueError, match="stack_size"):
        _limit_enum("stack")


def test_capture_mode_is_validated():
    from cupric.runtime.graph import StreamCapture
    with pytest.raises(ValueError, match="thread_local"):
        StreamCapture(object(), "local")


def test_image_kind_detection():
    from cupric.runtime.module import detect_image_kind
    assert detect_image_kind(".version 8.0") == "ptx"
    assert detect_image_kind(b"\x7fELF....") == "cubin"
    assert detect_image_kind(b"\x50\xed\x55\xba....") == "fatbin"


def test_linker_options_to_flags():
    from cupric.runtime.linker import LinkerOptions
    o = LinkerOptions(arch="sm_90", lto=True, optimization_level=3, max_registers=64,
                      line_info=True, ftz=True, prec_div=False, extra=("-Xptxas=-v",))
    assert o.to_flags() == ["-arch=sm_90", "-lto", "-O3", "-maxrregcount=64", "-lineinfo",
                            "-ftz=1", "-prec-div=0", "-Xptxas=-v"]
    with pytest.raises(ValueError):
        LinkerOptions(arch="90")


PTX = """.version 7.8
.target sm_80
.address_size 64
.visible .entry fill(.param .u64 p, .param .u32 v)
{
  .reg .b64 %rd<3>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [v];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
"""


def test_linker_makes_cubin_and_reports_errors():
    from cupric.runtime import linker
    if not linker.is_available():
        pytest.skip("nvJitLink not installed")
    cubin = linker.link([PTX], arch="sm_80")
    assert cubin[:4] == b"\x7fELF"
    with pytest.raises(linker.LinkerError, match="bogus") as info:
        linker.link([PTX.replace("ret;", "bogus;")], arch="sm_80")
    assert info.value.log
    with linker.Linker(linker.LinkerOptions(arch="sm_80")) as lk:
        lk.add(PTX, name="fill.ptx")
        assert lk.link()[:4] == b"\x7fELF"
    assert lk.closed
    with pytest.raises(ValueError, match="kind"):
        linker.link([b"\x00\x01garbage"], arch="sm_80")


def test_linker_links_lto_ir_from_libnvvm():
    """LTO-IR made by libNVVM (`-gen-lto`) and a PTX module link into one cubin."""
    from cupric.runtime import linker
    if not linker.is_available():
        pytest.skip("nvJitLink not installed")
    nvvm = pytest.importorskip("cuda.bindings.nvvm")
    from cupric.compiler.nvvm import ir_header, ir_version_metadata, kernel_annotation

    try:
        from cupric.compiler import toolchain
        toolchain.libnvvm()
    except ImportError as exc:
        pytest.skip(f"libNVVM not installed: {exc}")
    ir = (ir_header() + "\n"
          "define void @twice(i32 addrspace(1)* %p) {\n"
          "  %v = load i32, i32 addrspace(1)* %p\n"
          "  %w = shl i32 %v, 1\n"
          "  store i32 %w, i32 addrspace(1)* %p\n"
          "  ret void\n}\n"
          + "!nvvm.annotations = !{!0}\n"
          + kernel_annotation("twice", "void (i32 addrspace(1)*)", 0) + "\n"
          + ir_version_metadata(1) + "\n")
    prog = nvvm.create_program()
    try:
        data = ir.encode()
        nvvm.add_module_to_program(prog, data, len(data), "twice")
        options = ["-arch=compute_90", "-gen-lto"]
        nvvm.compile_program(prog, len(options), options)
        size = nvvm.get_compiled_result_size(prog)
        lto = bytearray(size)
        nvvm.get_compiled_result(prog, lto)
    finally:
        nvvm.destroy_program(prog)
    with linker.Linker(linker.LinkerOptions(arch="sm_90", lto=True)) as lk:
        lk.add(bytes(lto), kind="ltoir", name="twice.ltoir")
        lk.add(PTX.replace("sm_80", "sm_90"), name="fill.ptx")
        cubin = lk.link()
    # nvJitLink accepted the LTO-IR input and produced the cubin holding the PTX kernel.
    assert cubin[:4] == b"\x7fELF" and b"fill" in cubin
