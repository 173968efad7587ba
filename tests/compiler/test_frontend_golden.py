"""Golden NVVM IR for the kernels of golden/lang_kernels.py, and every one of them through
libNVVM and the linker (nvJitLink or ptxas) for sm_80, sm_90 and sm_100.

Re-bless the golden files after an intended codegen change with
`CUPRIC_BLESS=1 python3 -m pytest tests/compiler/test_frontend_golden.py`.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
sys.path.insert(0, str(GOLDEN))

import lang_kernels  # noqa: E402

BLESS = os.environ.get("CUPRIC_BLESS", "") not in ("", "0")
CASES = lang_kernels.SIGNATURES


@pytest.mark.parametrize("name,kern,sig", CASES, ids=[c[0] for c in CASES])
def test_golden_ir(name, kern, sig):
    ir = kern.inspect_ir(sig)
    path = GOLDEN / f"{name}.ll"
    if BLESS or not path.exists():
        if not BLESS:
            pytest.fail(f"no golden file {path.name}; run with CUPRIC_BLESS=1 to create it")
        path.write_text(ir)
        return
    expected = path.read_text()
    if ir != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), ir.splitlines(True),
                                            f"golden/{name}.ll", "generated"))
        pytest.fail(f"IR of {name} changed (CUPRIC_BLESS=1 re-blesses):\n{diff}")


def test_no_stale_golden_files():
    names = {c[0] for c in CASES}
    stale = [p.name for p in GOLDEN.glob("*.ll") if p.stem not in names]
    assert not stale, f"golden files without a kernel: {stale}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_every_kernel_compiles_and_links(arch):
    from cupric.compiler import backend
    from cupric.compiler.options import CompileOptions

    options = CompileOptions(arch=arch)
    for name, kern, sig in CASES:
        artifact = backend.build(kern.inspect_ir(sig), options=options, cache=False)
        assert f".target {arch}" in artifact.ptx, name
        assert f".entry {kern.symbol}" in artifact.ptx, name
        assert artifact.cubin, f"{name}: no cubin for {arch}: {artifact.log}"


def build_everywhere(kern, sig):
    """Every kernel of the tests goes through libNVVM and the linker for each arch."""
    from cupric.compiler import backend
    from cupric.compiler.options import CompileOptions

    for arch in ("sm_80", "sm_90", "sm_100"):
        options = kern.options.resolve(arch)
        artifact = backend.build(kern.inspect_ir(sig), options=options, cache=False)
        assert artifact.cubin, (arch, artifact.log)


def test_lineinfo_maps_ptx_to_python_lines():
    import cupric
    from cupric.device import grid
    from cupric.types import Array, f32

    @cupric.kernel(lineinfo=True)
    def scaled(x: Array[f32, 1], out: Array[f32, 1]):
        i = grid(1)
        if i < len(x):
            out[i] = x[i] * 2.0

    ir = scaled.inspect_ir("Array[f32, 1, 'C'], Array[f32, 1, 'C']")
    assert "!DICompileUnit(" in ir and "DW_LANG_Python" in ir
    assert f'!DIFile(filename: "{Path(__file__).name}"' in ir
    assert "!DISubprogram(" in ir and "!DILocation(line:" in ir
    ptx = scaled.inspect_ptx("Array[f32, 1, 'C'], Array[f32, 1, 'C']", arch="sm_90")
    first = scaled.py_func.__code__.co_firstlineno
    assert f'.file\t1 "{Path(__file__)}"' in ptx or Path(__file__).name in ptx
    store_line = first + 4
    assert f".loc\t1 {store_line} " in ptx
    build_everywhere(scaled, "Array[f32, 1, 'C'], Array[f32, 1, 'C']")


def test_debug_build_compiles():
    import cupric
    from cupric.device import grid
    from cupric.types import Array, f32

    @cupric.kernel(debug=True, opt_level=0)
    def dbg(x: Array[f32, 1]):
        i = grid(1)
        if i < len(x):
            x[i] += 1.0

    ptx = dbg.inspect_ptx("Array[f32, 1, 'C']", arch="sm_90")
    assert ".section\t.debug_info" in ptx
    build_everywhere(dbg, "Array[f32, 1, 'C']")


def test_read_only_arrays_use_the_non_coherent_path_only_without_aliasing():
    ptx = lang_kernels.saxpy.inspect_ptx(CASES[0][2], arch="sm_90")
    assert ptx.count("ld.global.nc.f32") == 2
    ir_alias = lang_kernels.saxpy.inspect_ir(CASES[0][2], noalias=False)
    assert "noalias" not in ir_alias and "!invariant.load" not in ir_alias
    ir = lang_kernels.saxpy.inspect_ir(CASES[0][2])
    assert ir.count("noalias") == 3 and ir.count("!invariant.load") == 2


def test_fast_math_tags_float_ops():
    import cupric
    from cupric.device import grid
    from cupric.types import Array, f32

    @cupric.kernel(fast_math=True)
    def fm(x: Array[f32, 1]):
        i = grid(1)
        if i < len(x):
            x[i] = x[i] * 3.0 + 1.0

    assert "fmul fast float" in fm.inspect_ir("Array[f32, 1, 'C']")
    ptx = fm.inspect_ptx("Array[f32, 1, 'C']", arch="sm_90")
    assert ".ftz" in ptx or "fma.rn" in ptx
    build_everywhere(fm, "Array[f32, 1, 'C']")
