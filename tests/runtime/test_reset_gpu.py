"""GPU lane: the primary context is reset, and cuBLAS, cuDNN, gpu_rand, ready kernels and a
kernel launched before the reset all give correct results again in the same process. A
kernel that faults on purpose (illegal address, trap, device assert) makes the reset
either recover or raise ContextLostError (CUDA keeps such faults for the process's
lifetime); either way the process exits without freeing anything through a destroyed
context and without printing a warning.

Each fault runs in its own process: a fault that a reset did not cure must not take the
rest of the GPU lane down with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent(r'''
    import sys
    import numpy as np

    import cupric
    import cupric.kernels as K
    from cupric import cublas, cudnn
    from cupric import runtime as rt
    from cupric.device import grid, trap
    from cupric.gpu_rand import Generator
    from cupric.runtime.context import current_context
    from cupric.runtime.errors import STICKY_CODES
    from cupric.types import Array, f32

    FAULT = sys.argv[1]
    rng = np.random.default_rng(int(sys.argv[2]))

    @cupric.kernel
    def saxpy(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
        i = grid(1)
        if i < len(x):
            y[i] = a * x[i] + y[i]

    @cupric.kernel
    def bad_address(x: Array[f32, 1]):
        i = grid(1)
        if i == 0:
            x[i + 1099511627776] = 1.0  # 2^40 elements past the buffer

    @cupric.kernel
    def bad_trap(x: Array[f32, 1]):
        if grid(1) == 0:
            trap()

    @cupric.kernel
    def bad_assert(x: Array[f32, 1]):
        i = grid(1)
        if i == 0:
            assert x[0] == 12345.0

    def conv_reference(x, w, pad):
        n, c, h, wd = x.shape
        k, _, r, s = w.shape
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((n, k, h, wd))
        for i in range(r):
            for j in range(s):
                out += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
        return out

    def close(got, want, what, tol):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
        assert err <= tol, f"{what}: relative error {err:.3g}"

    def everything(round_name):
        n = 100_003
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        dx, dy = rt.to_device(x), rt.to_device(y)
        saxpy[(n + 255) // 256, 256](2.0, dx, dy)
        close(dy.to_numpy(), 2 * x.astype(np.float64) + y, f"{round_name}: saxpy", 1e-6)
        close(K.sum(dx).to_numpy(), x.astype(np.float64).sum(), f"{round_name}: kernels.sum",
              1e-4)
        scanned = K.inclusive_scan(dx)
        close(np.asarray(scanned.to_numpy()), np.cumsum(x.astype(np.float64)),
              f"{round_name}: kernels.inclusive_scan", 1e-3)
        a = rng.standard_normal((64, 48))
        b = rng.standard_normal((48, 32))
        c = cublas.matmul(rt.to_device(a), rt.to_device(b))
        close(c.to_numpy(), a @ b, f"{round_name}: cublas.matmul", 1e-12)
        xc = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
        wc = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        yc = cudnn.conv_forward(rt.to_device(xc), rt.to_device(wc), padding=1,
                                options=cudnn.PlanOptions(allow_tf32=False))
        close(yc.to_numpy(), conv_reference(xc, wc, 1), f"{round_name}: cudnn.conv", 1e-5)
        seed = int(rng.integers(0, 2**63))
        out = rt.to_device(np.full(10_007, np.nan, np.float32))
        Generator(seed).random(out=out)
        assert np.array_equal(out.to_numpy(), Generator(seed).random(10_007, np.float32)), \
            f"{round_name}: gpu_rand"
        rt.synchronize()

    faults = {"illegal_address": (bad_address, rt.IllegalAddressError),
              "trap": (bad_trap, rt.CudaError),
              "assert": (bad_assert, rt.CudaError)}
    everything("before")
    if FAULT == "none":
        # A reset with no fault: every cache that held the old context's objects must
        # let go of them, and every library must work in the new context.
        held = rt.to_device(np.zeros(1000, np.float32))
        current_context().reset()
        everything("after reset")
        del held
        print("OK")
        sys.exit(0)
    kernel, expected = faults[FAULT]
    held = rt.to_device(np.zeros(1000, np.float32))  # a buffer that outlives the context
    for attempt in range(2):
        victim = rt.to_device(np.zeros(16, np.float32))
        try:
            kernel[1, 32](victim)
            rt.synchronize()
        except rt.CudaError as exc:
            assert isinstance(exc, expected) and exc.code in STICKY_CODES, \
                f"{FAULT}: {type(exc).__name__}: {exc}"
            print(f"fault {attempt}: {type(exc).__name__}")
        else:
            raise AssertionError(f"{FAULT}: the kernel did not fault")
        try:
            current_context().reset()
        except rt.ContextLostError as exc:
            # The driver keeps the sticky fault for the rest of the process, as CUDA
            # documents for these errors: the reset says so, typed, and the process
            # still shuts down cleanly (checked by the caller).
            assert "restarted" in str(exc), str(exc)
            print(f"reset refused: {type(exc).__name__}")
            break
        everything(f"after reset {attempt}")
    del held  # its free was dropped with the old context: nothing is freed at its address
    print("OK")
''')


def _run(tmp_path, fault, rng):
    from cupric import cudnn
    if not cudnn.is_available():
        pytest.skip("cuDNN is not installed")
    script = tmp_path / "fault.py"
    script.write_text(SCRIPT)
    seed = int(rng.integers(0, 2**31))
    proc = subprocess.run([sys.executable, str(script), fault, str(seed)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONWARNINGS="default"))
    print(proc.stdout[-4000:])
    print(proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "OK" in proc.stdout
    return proc


def test_reset_lets_every_library_work_again(tmp_path, rng):
    _run(tmp_path, "none", rng)


@pytest.mark.parametrize("fault", ["illegal_address", "trap", "assert"])
def test_fault_then_reset_recovers_or_says_restart(tmp_path, fault, rng):
    # CUDA documents these faults as leaving the process unable to use CUDA again; where
    # the driver does (the H100/H200 machines' 580 driver refuses the new context with
    # the same error), the reset raises ContextLostError and the process exits cleanly;
    # where a driver recovers, every library must work after each of two faults.
    proc = _run(tmp_path, fault, rng)
    if "reset refused" in proc.stdout:
        assert proc.stdout.count("fault ") == 1
        # A new process uses the GPU normally.
        _run(tmp_path, "none", rng)
    else:
        assert proc.stdout.count("fault ") == 2
    # Shutdown frees nothing through the destroyed context and prints nothing of cupric's.
    noise = [line for line in proc.stderr.splitlines()
             if "cupric" in line or "Warning" in line or "CUDA_ERROR" in line]
    assert noise == []
