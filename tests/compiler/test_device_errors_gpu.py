"""GPU lane: a bounds-check failure and an `assert` failure in compiled kernels raise
`DeviceAssertionError` carrying the kernel, file:line, index and extent read back from
the device-side error record (cupric.compiler.device_errors), not only the driver's
CUDA_ERROR_ASSERT. Each fault runs in its own process: a faulted context is unusable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import cupric
    from cupric import runtime as rt
    from cupric.device import grid
    from cupric.runtime.errors import ContextLostError, DeviceAssertionError
    from cupric.types import Array, f32, i64

    @cupric.kernel(bounds_check=True)
    def gather(x: Array[f32, 2], out: Array[f32, 1], col: i64):
        i = grid(1)
        if i < out.size:
            out[i] = x[i, col]          # LINE bounds

    @cupric.kernel
    def checked(x: Array[f32, 1], limit: f32):
        i = grid(1)
        if i < x.size:
            assert x[i] < limit, "value over the limit"   # LINE assert

    x = rt.to_device(np.random.default_rng(5).random((6, 3)).astype(np.float32))
    out = rt.to_device(np.full(6, np.nan, np.float32))
    values = rt.to_device(np.arange(8, dtype=np.float32))
    case = sys.argv[1]
    try:
        if case == "bounds":
            gather[1, 32](x, out, 7)
        else:
            checked[1, 32](values, 5.0)
        rt.synchronize()
    except (DeviceAssertionError, ContextLostError) as caught:
        # the first call to see the fault raises it; a later one names it as `original`
        exc = getattr(caught, "original", caught)
        assert isinstance(exc, DeviceAssertionError), repr(caught)
        print(json.dumps({"message": str(exc), "kernel": exc.kernel, "line": exc.line,
                          "filename": exc.filename, "index": exc.index,
                          "extent": exc.extent, "block": exc.block, "thread": exc.thread}))
    else:
        print(json.dumps({"message": "no error"}))
''')


def _run(case, tmp_path):
    path = tmp_path / "fault.py"
    path.write_text(SCRIPT)
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, str(path), case], capture_output=True, text=True,
                          timeout=240, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    line_of = {tag: n for n, text in enumerate(SCRIPT.splitlines(), 1)
               for tag in ("LINE bounds", "LINE assert") if tag in text}
    return json.loads(lines[-1]), line_of, proc.stdout


def test_bounds_failure_names_kernel_line_index_and_extent(tmp_path):
    got, line_of, stdout = _run("bounds", tmp_path)
    assert got["kernel"] == "gather"
    assert got["line"] == line_of["LINE bounds"]
    assert got["filename"].endswith("fault.py")
    assert got["index"][1] == 7 and got["extent"] == [6, 3]
    assert 0 <= got["index"][0] < 6
    assert "index (" in got["message"] and "out of bounds for array 'x'" in got["message"]
    assert f"fault.py:{line_of['LINE bounds']}" in got["message"]
    # The printf fallback still printed the same facts.
    assert "out of bounds for array 'x'" in stdout


def test_assert_failure_names_kernel_line_and_thread(tmp_path):
    got, line_of, _ = _run("assert", tmp_path)
    assert got["kernel"] == "checked"
    assert got["line"] == line_of["LINE assert"]
    assert "value over the limit" in got["message"]
    assert got["thread"][0] >= 5  # only threads holding 5.0 .. 7.0 fail
