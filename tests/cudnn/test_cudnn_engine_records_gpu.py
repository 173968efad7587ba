"""GPU lane: a second process reuses the cuDNN engine choices the first one recorded on
disk (no heuristics queries for the same graphs), and computes the same results, which
match a float64 NumPy reference. Each process is a fresh interpreter with its own empty
(then filled) cache root."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Convolution forward, backward data, backward filter and conv+bias+ReLU on fresh random
# float32 inputs (seed from argv), without TF32; outputs saved to argv[2], the engine
# counters printed as JSON.
_CHILD = """
import json, sys
import numpy as np
from cupric import runtime as rt
from cupric.cudnn import api as dnn
from cupric.cudnn import graph as G
from cupric.cudnn import engine_records as R
rng = np.random.default_rng(int(sys.argv[1]))
x = rng.standard_normal((4, 8, 12, 12)).astype(np.float32)
w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
b = rng.standard_normal(16).astype(np.float32)
dy = rng.standard_normal((4, 16, 12, 12)).astype(np.float32)
opts = dnn.PlanOptions(allow_tf32=False)
X, W, B, DY = (rt.to_device(a) for a in (x, w, b, dy))
y = dnn.conv_forward(X, W, padding=1, options=opts).to_numpy()
dx = dnn.conv_backward_data(DY, W, x.shape, padding=1, options=opts).to_numpy()
dw = dnn.conv_backward_filter(X, DY, w.shape, padding=1, options=opts).to_numpy()
fused = dnn.conv_bias_activation(X, W, B, "relu", padding=1, options=opts).to_numpy()
rt.synchronize()
np.savez(sys.argv[2], y=y, dx=dx, dw=dw, fused=fused)
print(json.dumps(R.engine_stats))
"""


def _run(seed: int, out: str, cache: str) -> dict:
    env = dict(os.environ, CUPRIC_CACHE_DIR=cache)
    env.pop("CUPRIC_CUDNN_ENGINE_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(seed), out], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _conv_reference(x, w, pad):
    """float64 cross-correlation (N, C, H, W) * (K, C, R, S), stride 1."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    oh, ow = h - r + 1, wd - s + 1
    cols = np.lib.stride_tricks.sliding_window_view(x, (r, s), axis=(2, 3))
    return np.einsum("nchwrs,kcrs->nkhw", cols[:, :, :oh, :ow], w.astype(np.float64))


def test_second_process_reuses_recorded_engines(tmp_path):
    seed = int(np.random.SeedSequence().entropy % (2**31))
    print(f"seed {seed}")
    cache = str(tmp_path / "cache")
    first = _run(seed, str(tmp_path / "a.npz"), cache)
    second = _run(seed, str(tmp_path / "b.npz"), cache)
    # Forward, backward data and backward filter at least (the fused call is a graph
    # too where cuDNN has an engine for it).
    assert first["recorded"] >= 3 and first["reused"] == 0, first
    assert second["reused"] == first["recorded"], (first, second)
    assert second["recorded"] == 0 and second["refused"] == 0, second
    assert second["heuristics"] < first["heuristics"], (first, second)
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    for name in ("y", "dx", "dw", "fused"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # ...and both are right.
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 8, 12, 12)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    dy = rng.standard_normal((4, 16, 12, 12)).astype(np.float32)
    y = _conv_reference(x, w, 1)
    # dx: the full correlation of dy with the flipped, transposed filter.
    dx = _conv_reference(dy, np.flip(w, (2, 3)).transpose(1, 0, 2, 3), 1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, :12, :12]
    dw = np.einsum("nchwrs,nkhw->kcrs", cols, dy.astype(np.float64))
    fused = np.maximum(y + bias[None, :, None, None], 0)
    for name, ref in (("y", y), ("dx", dx), ("dw", dw), ("fused", fused)):
        scale = np.abs(ref).max()
        assert np.abs(b[name] - ref).max() <= 2e-5 * scale, name
