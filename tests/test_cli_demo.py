import os
import subprocess
import sys


def test_demo_compiles_runs_and_checks_against_numpy(tmp_path):
    env = dict(os.environ, CUPRIC_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "cupric", "demo", "--simulator"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU simulator" in proc.stdout
    assert "all results match NumPy" in proc.stdout
    for row in ("compile saxpy_kernel", "saxpy n=", "vecadd i32", "mandelbrot"):
        assert row in proc.stdout
    assert "WRONG" not in proc.stdout
