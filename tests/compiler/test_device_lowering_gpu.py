"""GPU lane: every kernel of device_lowering_kernels.py compiled and launched on the
device, compared with NumPy on fresh random inputs (outputs poisoned first); print
output from the device; and, each in its own process (a failed kernel leaves the CUDA
context unusable), an assert, a trap and a bounds-check failure reaching the host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import device_lowering_kernels as dk  # noqa: E402

pytestmark = pytest.mark.gpu


def on_gpu(kern, grid, block, *args, shared=0):
    from cupric import runtime as rt
    from cupric.runtime.memory import to_device
    dev = [to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    kern.launch(*dev, grid=grid, block=block, shared_bytes=shared)
    rt.synchronize()
    return [d.to_numpy() for a, d in zip(args, dev) if isinstance(a, np.ndarray)]


@pytest.mark.parametrize("case", dk.CASES, ids=repr)
def test_on_gpu(case, rng):
    case.check(on_gpu, rng)


def test_print_from_the_device(capfd):
    x = np.array([1.5, -2.25, 3.0], np.float32)
    on_gpu(dk.printer, 1, 4, x)
    out = capfd.readouterr().out
    assert "thread 0 value 1.5 True fmt=1.50|  0!" in out
    assert "thread 1 value -2.25 True fmt=-2.25|  1!" in out


def _run_failing(launch: str) -> tuple[int, str]:
    """Run a failing launch in a fresh process; (exit status, stdout + stderr)."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        sys.path.insert(0, {str(HERE)!r})
        import device_lowering_kernels as dk
        from cupric import runtime as rt
        from cupric.runtime.memory import to_device
        try:
            {launch}
            rt.synchronize()
        except Exception as exc:
            print("RAISED", type(exc).__name__, getattr(exc, "code", None), exc, flush=True)
            sys.exit(3)
        print("NO ERROR", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    return proc.returncode, proc.stdout + proc.stderr


def test_failed_assert_reaches_the_host_with_file_and_line():
    line = dk.asserter.py_func.__code__.co_firstlineno + 3
    status, out = _run_failing(
        "dk.asserter[1, 4](to_device(np.array([1, 2, -1, 3], np.float32)))")
    assert status == 3, out
    assert "RAISED" in out and ("710" in out or "ASSERT" in out.upper()), out
    assert f"device_lowering_kernels.py:{line}: assertion failed: x must be non-negative" \
        in out, out


def test_trap_fails_the_launch():
    status, out = _run_failing("dk.trapper[1, 2](to_device(np.array([1, -1], np.float32)))")
    assert status == 3 and "RAISED" in out, out


def test_bounds_check_reports_array_index_and_line():
    line = dk.out_of_bounds.py_func.__code__.co_firstlineno + 3
    status, out = _run_failing("dk.out_of_bounds[1, 4](to_device(np.zeros(4, np.float32)), 2)")
    assert status == 3 and "RAISED" in out, out
    assert re.search(rf"device_lowering_kernels\.py:{line}: index [45] out of bounds for "
                     rf"array 'x' of shape \(4,\) \(block \(0, 0, 0\), thread \([23], 0, 0\)\)",
                     out), out
