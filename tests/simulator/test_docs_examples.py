"""The Python examples of README.md and of the kernel-language and device-library docs run
as they stand on a machine without a GPU (the compiled launches fall back to the CPU
simulator). Each ```python block runs in a fresh namespace, in order, with
CUPRIC_SIMULATOR=1. Without a driver, cupric.runtime's allocations (to_device, empty)
are host-memory stand-ins the simulator reads (cupric.runtime.simulated); with one, they
are device memory, which the forced simulator cannot read, so these run where there is
no driver (CI)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from cupric.runtime import driver_available

ROOT = Path(__file__).resolve().parents[2]
FILES = ["README.md", "docs/kernel-language.md", "docs/device-library.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

def _blocks():
    for name in FILES:
        text = (ROOT / name).read_text()
        for k, m in enumerate(BLOCK.finditer(text)):
            yield pytest.param(name, k, m.group(1), id=f"{name}#{k}")


@pytest.mark.skipif(driver_available(),
                    reason="a CUDA driver is here: the examples' device memory would be "
                           "real, and they are checked on a machine without one")
@pytest.mark.parametrize("name,index,code", list(_blocks()))
def test_example_runs_without_a_gpu(name, index, code, monkeypatch, tmp_path):
    from cupric.compiler import kernel as kmod
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    monkeypatch.setattr(kmod, "_SIMULATOR", [True])
    # As a user runs it: a script file (kernels need their source).
    script = tmp_path / f"{Path(name).stem}_{index}.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")
