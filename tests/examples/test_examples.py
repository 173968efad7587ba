"""examples/ as a newcomer runs them: without a GPU (CUPRIC_SIMULATOR=1) every script
honours its size flags or refuses them with the simulator's limit, writes its image under
out/ (or --out), and its --help shows the whole docstring; add.py and memcpy.py check
their results. GPU lane (``-m gpu``): the scripts at small sizes on the GPU, their checks
against NumPy passing, and rgba2gray's per-phase table.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run(script: str, *args: str, simulator: bool = True, timeout: int = 300,
        cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if simulator:
        env["CUPRIC_SIMULATOR"] = "1"
    else:
        env.pop("CUPRIC_SIMULATOR", None)
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd or ROOT)


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_gemm_honours_size_on_the_simulator():
    out = ok(run("gemm.py", "--size", "24"))
    assert "24x24 @ 24x24" in out


def test_gemm_refuses_a_size_past_the_simulator_limit():
    proc = run("gemm.py", "--size", "4096")
    assert proc.returncode == 2
    assert "--size 4096 is past the CPU simulator's limit of 128" in proc.stderr


def test_mandelbrot_honours_size_and_writes_under_out(tmp_path):
    target = tmp_path / "m" / "img.png"
    out = ok(run("mandelbrot.py", "--width", "40", "--height", "30", "--out", str(target)))
    assert "40x30, 64 iterations on the simulator" in out
    written = [p for p in target.parent.iterdir()]
    assert written and written[0].stat().st_size > 0
    proc = run("mandelbrot.py", "--width", "4000", "--height", "3000")
    assert proc.returncode == 2 and "limit of 230400" in proc.stderr


def test_mandelbrot_default_output_is_the_checkouts_out_folder(tmp_path):
    # Run from elsewhere: the image still lands in <checkout>/out, never in the cwd.
    out = ok(run("mandelbrot.py", "--width", "16", "--height", "12", cwd=tmp_path))
    match = re.search(r"wrote (.+)", out)
    written = pathlib.Path(match.group(1))
    assert written.parent == ROOT / "out" and written.is_file()
    assert not list(tmp_path.iterdir())


def test_bitonic_sort_honours_n_on_the_simulator():
    out = ok(run("bitonic_sort.py", "--n", "100"))
    assert "simulator: 100 float32 keys" in out and "matches NumPy: True" in out
    proc = run("bitonic_sort.py", "--n", "1000000")
    assert proc.returncode == 2 and "limit of 16384" in proc.stderr


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_add_matches_numpy_on_the_simulator(dtype):
    out = ok(run("add.py", "--n", "1000", "--dtype", dtype))
    assert f"1000 {dtype} elements, 4 blocks of 256 threads" in out
    assert "matches NumPy: True" in out


def test_memcpy_matches_on_the_simulator():
    out = ok(run("memcpy.py", "--mib", "0.0625"))
    assert "65536 bytes copied by the kernel; matches the source: True" in out
    proc = run("memcpy.py", "--mib", "64")
    assert proc.returncode == 2 and "limit of 1" in proc.stderr


def test_rgba2gray_on_the_simulator(tmp_path):
    target = tmp_path / "gray.png"
    out = ok(run("rgba2gray.py", "--out", str(target)))
    assert "largest difference from NumPy: 0 gray level(s)" in out
    pytest.importorskip("PIL")
    assert target.stat().st_size > 0


@pytest.mark.parametrize("script", ["add.py", "memcpy.py", "gemm.py", "mandelbrot.py",
                                    "bitonic_sort.py", "rgba2gray.py", "path_tracer.py"])
def test_help_shows_the_whole_docstring(script):
    out = ok(run(script, "--help", timeout=120))
    text = (EXAMPLES / script).read_text()
    doc = text.split('"""')[1].strip()
    last = [line for line in doc.splitlines() if line.strip()][-1].strip()
    assert last in out, f"--help of {script} stops before: {last!r}"


def test_no_install_hint_names_an_unpublished_package():
    for script in EXAMPLES.glob("*.py"):
        assert "pip install cupric[" not in script.read_text(), script.name


@pytest.mark.gpu
def test_examples_on_the_gpu(tmp_path):
    out = ok(run("add.py", "--n", "100003", simulator=False))
    assert "matches NumPy: True" in out
    out = ok(run("memcpy.py", "--mib", "64", simulator=False))
    assert "both match the source: True" in out
    out = ok(run("gemm.py", "--size", "512", simulator=False))
    assert "float32 512^3" in out and "float64 512^3" in out
    out = ok(run("mandelbrot.py", "--width", "640", "--height", "360", "--out",
                 str(tmp_path / "m.png"), simulator=False))
    assert "640x360, 512 iterations: first call" in out
    out = ok(run("bitonic_sort.py", "--n", "65536", simulator=False))
    assert out.count("matches NumPy: True") == 2
    out = ok(run("rgba2gray.py", "--tile", "4", "--out", str(tmp_path / "g.png"),
                 simulator=False))
    for phase in ("allocate", "copy in", "kernel", "copy out", "free", "total",
                  "CPU (NumPy)"):
        assert phase in out
    assert re.search(r"largest difference from NumPy: [01] gray", out)
    print(out)


def test_path_tracer_refuses_a_simulator_render_past_the_limit():
    proc = run("path_tracer.py", "--backend", "cpu", "--cpu-size", "640x360")
    assert proc.returncode == 2
    assert "921600 paths, past the CPU simulator's limit of 65536" in proc.stderr
