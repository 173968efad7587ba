"""GPU lane: a process with an empty cache root runs cuDNN and cuBLAS calls correctly on
their Python paths while the C fast paths build in the background, then switches to the
compiled paths once they are ready, with the same results (checked against float64
NumPy). Runs in a fresh interpreter so that nothing is loaded yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = """
import json, sys
import numpy as np
from cupric import runtime as rt
from cupric.runtime import _cext
from cupric.cudnn import _replay, api as dnn
from cupric.cublas import _fastgemm, numpy_api
from cupric import cublas
rng = np.random.default_rng(int(sys.argv[1]))
x = rng.standard_normal((2, 4, 10, 10)).astype(np.float32)
w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
a = rng.standard_normal((48, 40)).astype(np.float64)
b = rng.standard_normal((40, 24)).astype(np.float64)
opts = dnn.PlanOptions(allow_tf32=False)
X, W, A, B = (rt.to_device(v) for v in (x, w, a, b))
def step():
    y = dnn.conv_forward(X, W, padding=1, options=opts).to_numpy()
    c = cublas.matmul(A, B).to_numpy()
    return y, c
first = step()
state = {"replay_pending_first": _replay.run is _replay._first_call,
         "gemm_pending_first": numpy_api._c_matmul is _fastgemm._first_call,
         "builds": sorted(_cext._builds)}
for build in list(_cext._builds.values()):
    assert build.done.wait(300), "a build did not finish"
state["errors"] = [repr(b.error) for b in _cext._builds.values() if b.error is not None]
second = step()        # installs the compiled paths, records entries
third = step()         # runs them
state["replay_installed"] = _replay.run is not _replay._first_call and _replay.EXTENSION.module is not None
state["gemm_installed"] = numpy_api._c_matmul is not _fastgemm._first_call and \\
    _fastgemm.EXTENSION.module is not None
np.savez(sys.argv[2], y1=first[0], c1=first[1], y2=second[0], c2=second[1], y3=third[0],
         c3=third[1])
print(json.dumps(state))
"""


def test_cold_process_runs_on_python_paths_then_switches(tmp_path):
    from cupric._paths import cache_root
    seed = int(np.random.SeedSequence().entropy % (2**31))
    print(f"seed {seed}")
    env = dict(os.environ, CUPRIC_CACHE_DIR=str(tmp_path / "cache"),
               # The generated bindings of this machine's cache: only extensions are cold.
               CUPRIC_BINDINGS_DIR=os.environ.get("CUPRIC_BINDINGS_DIR")
               or str(cache_root() / "bindings"))
    for name in ("CUPRIC_BUILD_SYNC", "CUPRIC_BUILD_LAUNCHER", "CUPRIC_CUDNN_FASTPATH",
                 "CUPRIC_CUBLAS_FASTPATH"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    out = tmp_path / "out.npz"
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(seed), str(out)], env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    print(state)
    assert state["errors"] == [] and len(state["builds"]) >= 4
    assert state["replay_installed"] and state["gemm_installed"]
    r = np.load(out)
    for k in ("y", "c"):
        np.testing.assert_array_equal(r[f"{k}1"], r[f"{k}2"])
        np.testing.assert_array_equal(r[f"{k}1"], r[f"{k}3"])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4, 10, 10))
    w = rng.standard_normal((8, 4, 3, 3))
    a = rng.standard_normal((48, 40))
    b = rng.standard_normal((40, 24))
    xp = np.pad(x.astype(np.float32).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    y = np.einsum("nchwrs,kcrs->nkhw", cols, w.astype(np.float32).astype(np.float64))
    assert np.abs(r["y1"] - y).max() <= 2e-5 * np.abs(y).max()
    np.testing.assert_allclose(r["c1"], a @ b, rtol=1e-12, atol=1e-12)
