"""Public names of the lazily-attached library packages are never shadowed by submodules.

`cupric.cudnn.softmax`, `.conv` and `.dropout`, `cupric.cublas.gemm_ex` and
`cupric.optix.launch` / `.program` are both public functions and submodule names; a
submodule imported first used to replace the function on the package ("'module' object
is not callable"). Each check runs in a fresh interpreter so the import order is the one
the test sets.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_CHECK = r"""
import importlib, pkgutil, sys, types
package = importlib.import_module(sys.argv[1])
first = sys.argv[2]
submodules = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
if first == "submodules":
    for name in submodules:
        importlib.import_module(f"{package.__name__}.{name}")
modules_by_design = {"lib", "lt"}
shadowed = []
for name in package.__all__:
    value = getattr(package, name)
    if name not in modules_by_design and isinstance(value, types.ModuleType):
        shadowed.append(name)
if first == "public":
    for name in submodules:
        importlib.import_module(f"{package.__name__}.{name}")
    shadowed += [n for n in package.__all__ if n not in modules_by_design
                 and isinstance(getattr(package, n), types.ModuleType)]
clashes = sorted(set(package.__all__) & set(submodules) - modules_by_design)
# the submodules stay importable by name
for name in clashes:
    assert isinstance(sys.modules[f"{package.__name__}.{name}"], types.ModuleType)
print("clashes", clashes)
print("shadowed", sorted(set(shadowed)))
"""


@pytest.mark.parametrize("first", ["submodules", "public"])
@pytest.mark.parametrize("package", ["cupric.cudnn", "cupric.cublas", "cupric.optix"])
def test_public_functions_win_over_submodules(package, first):
    done = subprocess.run([sys.executable, "-c", _CHECK, package, first],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["shadowed"] == "[]", f"{package}: {lines['shadowed']} are modules"


def test_the_clashing_names_are_known():
    """The names this guards exist (so the test above tests something)."""
    done = subprocess.run([sys.executable, "-c", _CHECK, "cupric.cudnn", "submodules"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "'softmax'" in done.stdout and "'dropout'" in done.stdout


def test_softmax_is_callable_after_its_module_is_imported():
    import importlib

    import cupric.cudnn
    module = importlib.import_module("cupric.cudnn.softmax")
    assert isinstance(module, type(sys))
    assert callable(cupric.cudnn.softmax)
    assert cupric.cudnn.softmax is module.softmax
