"""The command line as a newcomer meets it: `compile FILE::KERNEL` imports the file with
its own argv and names it when importing fails; every `--help` is whole; `info` prints
tables (JSON with --json); the demo calls a warm-cache compile a cache hit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from cupric.compiler import cli


def cupric(*args: str, env=None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cupric", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


KERNEL_FILE = textwrap.dedent('''
    import sys
    import cupric
    from cupric.types import Array, f32

    SCALE = int(sys.argv[1]) if len(sys.argv) > 1 else 3   # a script reading its argv
    ARGV0 = sys.argv[0]

    @cupric.kernel
    def scale(x: Array[f32, 1, 'C']):
        x[0] = x[0] * SCALE
''')


def test_compile_runs_the_file_with_its_own_argv(tmp_path, capsys):
    path = tmp_path / "kfile.py"
    path.write_text(KERNEL_FILE)
    saved = list(sys.argv)
    kern = cli.load_kernel(f"{path}::scale")
    assert sys.argv == saved  # restored
    module = sys.modules["_cupric_cli_kfile"]
    assert module.ARGV0 == str(path) and module.SCALE == 3
    assert kern.__name__ == "scale"
    assert cli.main([f"{path}::scale", "--emit", "nvvm-ir"]) == 0
    assert "define" in capsys.readouterr().out


def test_compile_names_the_kernel_file_that_failed_to_import(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import cupric\nimport no_such_module_for_cupric_tests\n")
    proc = cupric("compile", f"{path}::k")
    assert proc.returncode == 1
    assert f"importing the kernel file {path} failed" in proc.stderr
    assert "ModuleNotFoundError" in proc.stderr
    exiting = tmp_path / "exits.py"
    exiting.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(cli.KernelFileError, match="exited with status 3"):
        cli.load_kernel(f"{exiting}::k")


@pytest.mark.parametrize("command, tail", [
    (("compile", "--help"), "--emit nvvm-ir|ptx|cubin"),
    (("info", "--help"), "the rest is still shown"),
    (("demo", "--help"), "when a result is wrong"),
])
def test_help_texts_are_whole(command, tail):
    proc = cupric(*command)
    assert proc.returncode == 0, proc.stderr
    assert " ".join(tail.split()) in " ".join(proc.stdout.split())


def test_info_prints_tables():
    proc = cupric("info")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "{" not in out and "'" not in out.split("driver:")[0]  # no raw dicts
    assert "component" in out and "found" in out and "version" in out
    for name in ("libnvvm", "nvjitlink", "cuBLAS", "cuDNN", "OptiX"):
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name


def test_demo_labels_a_warm_cache_as_cache_hits(tmp_path):
    env = dict(os.environ, CUPRIC_CACHE_DIR=str(tmp_path))
    first = cupric("demo", "--simulator", env=env, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "compile saxpy_kernel" in first.stdout and "cache hit" not in first.stdout
    second = cupric("demo", "--simulator", env=env, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "cache hit saxpy_kernel" in second.stdout
    assert "cache hit mandelbrot_kernel" in second.stdout
    assert "compile saxpy_kernel" not in second.stdout
