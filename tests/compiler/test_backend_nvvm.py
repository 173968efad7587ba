"""libNVVM on the CPU: hand-written NVVM IR to PTX, libdevice, errors with logs, and the
checks that keep malformed text away from libNVVM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _backend_samples import F32_GLOBAL, exp_kernel, module, shared_kernel
from cupric.compiler import nvvm
from cupric.compiler.errors import NvvmError
from cupric.compiler.options import CompileOptions


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_exp_kernel_compiles_for_each_arch_with_libdevice_inlined(arch):
    out = nvvm.compile_ir([exp_kernel()], CompileOptions(arch=arch))
    assert f".target {arch}" in out.ptx
    assert ".visible .entry exp_kernel(" in out.ptx
    # libdevice was linked lazily and inlined: no call to __nv_expf remains, the
    # hardware exp2 approximation it is built on does.
    assert "__nv_expf" not in out.ptx
    assert "ex2.approx" in out.ptx
    assert out.ptx.lstrip().startswith("//")
    assert "\x00" not in out.ptx


def test_ir_header_is_what_libnvvm_accepts():
    out = nvvm.compile_ir([nvvm.ir_header() + nvvm.ir_version_metadata(0)],
                          CompileOptions(arch="sm_90"))
    assert ".version" in out.ptx
    assert nvvm.IR_DATALAYOUT in nvvm.ir_header()
    assert 'target triple = "nvptx64-nvidia-cuda"' in nvvm.ir_header()


def test_kernel_annotation_quotes_unusual_names():
    assert '@"k-1"' in nvvm.kernel_annotation("k-1", "void ()", 0)
    assert "@k_1" in nvvm.kernel_annotation("k_1", "void ()", 0)
    assert '@"a\\22b"' in nvvm.kernel_annotation('a"b', "void ()", 0)


def test_fast_math_switches_reach_the_ptx():
    precise = nvvm.compile_ir([shared_kernel()], CompileOptions(arch="sm_90")).ptx
    fast = nvvm.compile_ir([shared_kernel()], CompileOptions(arch="sm_90", fast_math=True)).ptx
    assert "div.rn.f32" in precise
    assert "div.rn.f32" not in fast and ".ftz" in fast


def test_two_modules_link_together():
    helper = module("""
define float @twice(float %x) {
  %y = fmul float %x, 2.0
  ret float %y
}
""", [])
    caller = module(f"""
declare float @twice(float)
define void @k({F32_GLOBAL} %p) {{
  %x = load float, {F32_GLOBAL} %p, align 4
  %y = call float @twice(float %x)
  store float %y, {F32_GLOBAL} %p, align 4
  ret void
}}
""", [("k", f"void ({F32_GLOBAL})")])
    out = nvvm.compile_ir([caller, helper], CompileOptions(arch="sm_90"),
                          names=["caller", "helper"])
    assert ".entry k(" in out.ptx


def test_bad_ir_raises_nvvm_error_with_the_log():
    bad = exp_kernel().replace("ret void", "ret i32 0")
    with pytest.raises(NvvmError) as info:
        nvvm.compile_ir([bad], CompileOptions(arch="sm_90"), names=["mykernel"])
    assert "mykernel" in info.value.log  # libNVVM's message names the module and line
    assert "function result type" in info.value.log
    assert info.value.code is not None
    assert info.value.log in str(info.value)


def test_verify_ir_alone():
    assert nvvm.verify_ir([exp_kernel()], CompileOptions(arch="sm_80")) == ""
    with pytest.raises(NvvmError):
        nvvm.verify_ir([exp_kernel().replace("ret void", "ret i32 0")],
                       CompileOptions(arch="sm_80"))


def test_opaque_pointers_get_a_hint():
    text = exp_kernel().replace("float addrspace(1)*", "ptr addrspace(1)")
    with pytest.raises(NvvmError) as info:
        nvvm.compile_ir([text], CompileOptions(arch="sm_90"))
    assert "typed pointers" in str(info.value)


def test_unsupported_arch_is_an_nvvm_error():
    with pytest.raises(NvvmError) as info:
        nvvm.compile_ir([exp_kernel()], CompileOptions(arch="sm_52"))
    assert "compute_52" in str(info.value)


@pytest.fixture
def libnvvm_forbidden(monkeypatch):
    """Makes any libNVVM program creation fail loudly: the checks must come first."""
    from cupric.compiler import toolchain

    def refuse(*args):
        raise AssertionError("libNVVM was reached")

    monkeypatch.setattr(toolchain, "nvvm_library", refuse)


@pytest.mark.parametrize("mutation, message", [
    (lambda t: "\n".join(l for l in t.splitlines() if "datalayout" not in l), "datalayout"),
    (lambda t: t.replace(nvvm.IR_DATALAYOUT, "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"),
     "datalayout"),
    (lambda t: "\n".join(l for l in t.splitlines() if "triple" not in l), "triple"),
    (lambda t: t.replace("nvptx64-nvidia-cuda", "x86_64-unknown-linux-gnu"), "triple"),
    (lambda t: "\n".join(l for l in t.splitlines() if "nvvmir.version" not in l),
     "nvvmir.version"),
    (lambda t: t + "\x00", "NUL"),
    (lambda t: "  \n", "empty"),
])
def test_malformed_text_is_refused_before_libnvvm(libnvvm_forbidden, mutation, message):
    with pytest.raises(NvvmError) as info:
        nvvm.compile_ir([mutation(exp_kernel())], CompileOptions(arch="sm_100"))
    assert message in str(info.value)


def test_missing_datalayout_on_sm100_does_not_kill_the_process():
    # Passed on, this module makes libNVVM 13 abort the process on the sm_100+ path; run
    # it in a child so that a regression shows up as a failed test, not a dead run.
    code = (
        "from cupric.compiler import nvvm\n"
        "from cupric.compiler.options import CompileOptions\n"
        "from cupric.compiler.errors import NvvmError\n"
        f"text = {exp_kernel()!r}\n"
        "text = '\\n'.join(l for l in text.splitlines() if 'datalayout' not in l)\n"
        "try:\n"
        "    nvvm.compile_ir([text], CompileOptions(arch='sm_100'))\n"
        "except NvvmError as exc:\n"
        "    print('refused:', str(exc).splitlines()[0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout


def test_modules_argument_shapes():
    with pytest.raises(TypeError):
        nvvm.compile_ir(exp_kernel(), CompileOptions(arch="sm_90"))
    with pytest.raises(NvvmError):
        nvvm.compile_ir([], CompileOptions(arch="sm_90"))
    with pytest.raises(ValueError):
        nvvm.compile_ir([exp_kernel()], CompileOptions(arch="sm_90"), names=["a", "b"])
    out = nvvm.compile_ir([exp_kernel().encode()], CompileOptions(arch="sm_90"))
    assert ".entry exp_kernel(" in out.ptx


def test_bitcode_module_passes_the_text_checks():
    from cupric.compiler.toolchain import libdevice

    data = open(libdevice().path, "rb").read()
    assert nvvm.is_bitcode(data)
    assert nvvm.check_module(data) == data


def test_import_loads_nothing():
    code = ("import sys, cupric.compiler.nvvm, cupric.compiler.options, cupric.compiler.link, "
            "cupric.compiler.target, cupric.compiler.cache, cupric.compiler.backend, "
            "cupric.compiler.toolchain\n"
            "loaded = [m for m in sys.modules if m.startswith(('cuda.bindings', 'cuda.pathfinder', "
            "'_cffi_backend', 'cupric._toolchain_ffi'))]\n"
            "print(loaded)\nassert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compiles_on_several_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor

    archs = ["sm_80", "sm_90", "sm_100", "sm_90"] * 2
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda a: nvvm.compile_ir([exp_kernel()], CompileOptions(arch=a)),
                                archs))
    for arch, out in zip(archs, outputs):
        assert f".target {arch}" in out.ptx
