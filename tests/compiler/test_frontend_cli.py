"""`python -m cupric compile FILE::KERNEL ...` writes NVVM IR, PTX or cubin; errors are
one CompileError message on stderr, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = Path(__file__).parent / "golden" / "lang_kernels.py"
SIG = "f32, Array[f32, 1, 'C'], Array[f32, 1, 'C'], Array[f32, 1, 'C']"


def run(*args):
    return subprocess.run([sys.executable, "-m", "cupric", "compile", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_emit_nvvm_ir_and_ptx(tmp_path):
    ir = run(f"{KERNELS}::saxpy", "--signature", SIG, "--emit", "nvvm-ir")
    assert ir.returncode == 0, ir.stderr
    assert "define void @saxpy(" in ir.stdout and "!nvvmir.version" in ir.stdout
    out = tmp_path / "saxpy.ptx"
    ptx = run(f"{KERNELS}::saxpy", "-s", SIG, "--arch", "sm_80", "--emit", "ptx", "-o", str(out))
    assert ptx.returncode == 0, ptx.stderr
    assert ".target sm_80" in out.read_text()


def test_emit_cubin(tmp_path):
    out = tmp_path / "saxpy.cubin"
    r = run(f"{KERNELS}::saxpy", "-s", SIG, "--arch", "sm_90", "--emit", "cubin", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_compile_error_is_one_message():
    bad = Path(__file__).parent / "bad_kernels" / "cases.py"
    r = run(f"{bad}::list_literal", "-s", "Array[f32, 1, 'C']", "--emit", "nvvm-ir")
    assert r.returncode == 1
    assert "cases.py:" in r.stderr and "lists are not supported" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_target():
    r = run("nofile.py::k")
    assert r.returncode == 1 and "no such file" in r.stderr
