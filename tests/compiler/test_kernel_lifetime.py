"""A kernel made on the fly goes away with its last reference: nothing process-wide (the
parsed source, the simulator's twins, the kernel cache's memory layer) keeps every kernel
a long-running program ever made (the soak test compiles 1,000 of them)."""

from __future__ import annotations

import gc
import importlib.util
import weakref

import numpy as np



def _make(folder, k: int):
    # From a file, as a user's kernel: its source must be readable.
    path = folder / f"lifetime_{k}.py"
    path.write_text("import cupric\nfrom cupric.device import grid\n"
                    "from cupric.types import Array, f32\n\n\n@cupric.kernel\n"
                    "def scaled(x: Array[f32, 1]):\n    i = grid(1)\n"
                    f"    if i < len(x):\n        x[i] = x[i] * {1.0 + k}\n")
    spec = importlib.util.spec_from_file_location(f"lifetime_{k}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.scaled


def test_simulated_and_typed_kernels_are_collected(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPRIC_CACHE_DIR", str(tmp_path))
    refs = []
    for k in range(5):
        kern = _make(tmp_path, k)
        x = np.ones(40, np.float32)
        kern.simulate[1, 64](x)
        assert (x == 1.0 + k).all()
        kern.inspect_types("Array[f32, 1, 'C']")
        refs.append(weakref.ref(kern))
        del kern
    gc.collect()
    assert [r() for r in refs] == [None] * 5


def test_a_wrapper_does_not_take_its_functions_parse(tmp_path):
    # functools.update_wrapper copies __dict__ (and so the cached parse) onto wrappers:
    # a wrapper asked for its own source must not get the wrapped function's.
    import functools

    from cupric.compiler.frontend.source import get_source

    kern = _make(tmp_path, 0)
    inner = kern.py_func
    src = get_source(inner)
    assert get_source(inner) is src and src.py_func is inner

    def other(x):
        return x

    functools.update_wrapper(other, inner)      # copies inner.__dict__ onto other
    assert get_source(other).py_func is other
