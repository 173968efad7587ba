"""Importing the simulator and the device library is quick and touches no GPU layer."""

import subprocess
import sys

CODE = """
import sys, time
t = time.perf_counter()
import cupric.device, cupric.simulator
elapsed = time.perf_counter() - t
loaded = [m for m in sys.modules if m.startswith(("cuda", "cupric.compiler", "cupric.runtime"))]
print(elapsed, loaded)
"""


def test_import_is_light():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         check=True).stdout.split(" ", 1)
    elapsed, loaded = float(out[0]), out[1].strip()
    print(f"import cupric.device + cupric.simulator: {elapsed * 1e3:.0f} ms")
    assert loaded == "[]", f"the simulator must not import {loaded}"
    assert elapsed < 2.0
