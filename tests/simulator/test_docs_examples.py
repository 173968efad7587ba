"""The Python examples of README.md and of every docs/*.md page, checked on a machine
without a GPU (issue 17: a fresh machine runs every snippet without surprise).

Each ```python block is one of two kinds:

- an example that runs as it stands: it runs here, in a fresh namespace, with
  CUPRIC_SIMULATOR=1 (compiled launches fall back to the CPU simulator). Without a
  driver, cupric.runtime's allocations (to_device, empty) are host-memory stand-ins the
  simulator reads (cupric.runtime.simulated); with one, they are device memory, which
  the forced simulator cannot read, so these run where there is no driver (CI);
- a snippet that needs a GPU by nature (cuBLAS, cuDNN, NCCL, OptiX, CUDA graphs), whose
  first line says so: ``# Needs an NVIDIA GPU (...)`` or ``# Needs NVIDIA GPUs (...)``.
  Without a driver it must fail only in the expected way: cupric's `NoDriverError`, an
  `ImportError` naming a missing optional package (torch) or library wheel
  (`LibraryNotFoundError`), or the library's own "not initialized" status (cuBLAS
  without a device) -- never a NameError, AttributeError or internal error.

Every block, of either kind, is also checked statically: each name it reads is bound in
the block (imported, assigned, defined) or a builtin, so no snippet is a fragment that
leans on names the reader has to guess.

A block whose first line is ``# PKG/__init__.py`` is a package's ``__init__``: it runs
as one, imported from a temporary folder, next to an empty kernel bundle for each
``*.cubundle`` it names (what step 1 of docs/packaging.md builds; the test compiles
nothing).
"""

from __future__ import annotations

import builtins
import importlib
import re
import runpy
import symtable
import sys
import traceback
from pathlib import Path

import pytest

from cupric.runtime import driver_available

ROOT = Path(__file__).resolve().parents[2]
FILES = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NEEDS_GPU = re.compile(r"# Needs (an NVIDIA GPU|NVIDIA GPUs)\b")
PACKAGE_INIT = re.compile(r"# (\w+)/__init__\.py$")
NO_DRIVER = pytest.mark.skipif(
    driver_available(),
    reason="a CUDA driver is here: the examples' device memory would be real, and they "
           "are checked on a machine without one")


def _blocks():
    for name in FILES:
        text = (ROOT / name).read_text()
        for k, m in enumerate(BLOCK.finditer(text)):
            yield name, k, m.group(1)


def _params(needs_gpu: bool | None = None):
    return [pytest.param(name, k, code, id=f"{name}#{k}") for name, k, code in _blocks()
            if needs_gpu is None or bool(NEEDS_GPU.match(code)) == needs_gpu]


def test_every_docs_page_is_collected():
    assert "docs/graphs.md" in FILES and "docs/packaging.md" in FILES
    assert len(_params(needs_gpu=False)) >= 10 and len(_params(needs_gpu=True)) >= 5


# --- static: no undefined names ---------------------------------------------------------

def _undefined_names(code: str) -> set[str]:
    """Names `code` reads at module level, or as globals inside its functions, that it
    never binds there (by assignment, import, def or class) and that are no builtins."""
    top = symtable.symtable(code, "<block>", "exec")
    if any(s.get_name() == "*" for s in top.get_symbols()):       # a star import
        return set()
    bound = {s.get_name() for s in top.get_symbols()
             if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set[str] = set()

    def visit(table) -> None:
        for s in table.get_symbols():
            if s.is_referenced() and (table is top or s.is_global()):
                read.add(s.get_name())
        for child in table.get_children():
            visit(child)

    visit(top)
    return read - bound - set(dir(builtins)) - {"__file__", "__name__", "__package__"}


@pytest.mark.parametrize("name,index,code", _params())
def test_example_binds_every_name_it_uses(name, index, code):
    assert not _undefined_names(code), (
        f"{name}#{index} reads names it never defines: {sorted(_undefined_names(code))}")


# --- running them -------------------------------------------------------------------------

def _run(name, index, code, tmp_path, monkeypatch):
    from cupric.compiler import kernel as kmod
    monkeypatch.setenv("CUPRIC_SIMULATOR", "1")
    monkeypatch.setattr(kmod, "_SIMULATOR", [True])
    package = PACKAGE_INIT.match(code.splitlines()[0])
    if package is None:
        # As a user runs it: a script file (kernels need their source).
        script = tmp_path / f"{Path(name).stem}_{index}.py"
        script.write_text(code)
        runpy.run_path(str(script), run_name="__main__")
        return
    from cupric.compiler import bundle
    pkg = package.group(1)
    (tmp_path / pkg).mkdir()
    for member in re.findall(r"[\"'](\w+\.cubundle)[\"']", code):
        bundle.write_bundle(tmp_path / pkg / member, [], archs=["sm_90"])
    (tmp_path / pkg / "__init__.py").write_text(code)
    before = list(bundle.registered_bundles())
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module(pkg)
    finally:
        sys.modules.pop(pkg, None)
        for b in bundle.registered_bundles():
            if b not in before:
                bundle.unregister_bundle(b)


@NO_DRIVER
@pytest.mark.parametrize("name,index,code", _params(needs_gpu=False))
def test_example_runs_without_a_gpu(name, index, code, monkeypatch, tmp_path):
    _run(name, index, code, tmp_path, monkeypatch)


def _expected_without_a_gpu(exc: BaseException) -> bool:
    from cupric.bindings_gen.errors import LibraryNotFoundError, LibraryStatusError
    from cupric.runtime.errors import NoDeviceError, NoDriverError
    if isinstance(exc, (NoDriverError, NoDeviceError, LibraryNotFoundError)):
        return True
    if isinstance(exc, ImportError):
        # An optional package that is not installed (torch), not a broken cupric import.
        return bool(exc.name) and exc.name.split(".")[0] not in ("cupric", "numpy")
    if isinstance(exc, LibraryStatusError):
        # cuBLAS without a device: cublasCreate's own "not initialized" status.
        return exc.name.endswith("_NOT_INITIALIZED")
    if isinstance(exc, (RuntimeError, AssertionError)):
        # PyTorch installed without CUDA or without a driver: raised by its CUDA init.
        frames = traceback.extract_tb(exc.__traceback__)
        return bool(frames) and "/torch/cuda/" in frames[-1].filename.replace("\\", "/")
    return False


@NO_DRIVER
@pytest.mark.parametrize("name,index,code", _params(needs_gpu=True))
def test_gpu_example_fails_only_for_want_of_a_gpu(name, index, code, monkeypatch, tmp_path):
    try:
        _run(name, index, code, tmp_path, monkeypatch)
    except Exception as exc:  # noqa: BLE001 - the kind of failure is the point
        assert _expected_without_a_gpu(exc), (
            f"{name}#{index} needs a GPU, but without one it fails with a surprise:\n"
            + "".join(traceback.format_exception(exc)))
    else:
        pytest.fail(f"{name}#{index} is marked as needing a GPU but runs without one: "
                    "drop its '# Needs ...' line")
