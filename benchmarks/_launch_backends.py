"""Ways of reaching cuLaunchKernel that cupric does not use, kept to compare with the ones
it does (`benchmarks/launch_overhead.py`): a cffi API-mode trampoline compiled into a
temporary folder (``"api"``) and ctypes (``"ctypes"``). Each is a `PreparedLaunch` whose
call is that path, so it packs and checks exactly as cupric's own Python path does.
"""

from __future__ import annotations

import shutil
import tempfile

from cupric.runtime.launch import PreparedLaunch, _libcuda_path

__all__ = ["comparison_prepared", "BACKENDS"]

#: The comparison backends this module adds.
BACKENDS = ("api", "ctypes")

# A two-line C trampoline: calling a compiled cffi function costs a fraction of a libffi
# (ABI mode) call.
_CDEF = """
void cupric_set_launch(uintptr_t address);
int cupric_launch(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                  uintptr_t stream, void **params, void **extra);
"""
_SOURCE = """
#include <stdint.h>
typedef int (*cupric_launch_fn)(uintptr_t, unsigned int, unsigned int, unsigned int,
                                unsigned int, unsigned int, unsigned int, unsigned int,
                                uintptr_t, void **, void **);
static cupric_launch_fn cupric_real_launch;
static void cupric_set_launch(uintptr_t address) {
    cupric_real_launch = (cupric_launch_fn)address;
}
static int cupric_launch(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                         unsigned int bx, unsigned int by, unsigned int bz,
                         unsigned int shared, uintptr_t stream, void **params,
                         void **extra) {
    return cupric_real_launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
}
"""
_trampoline = []  # the loaded module, once built


def build_trampoline(directory: str | None = None):
    """Compile the trampoline (into `directory`, else a temporary folder removed after
    loading) and point it at the cuLaunchKernel that `native()` calls; returns the
    module (cached for the process)."""
    if _trampoline:
        return _trampoline[0]
    import importlib.machinery
    import importlib.util

    import cffi

    from cupric.runtime.launch import native
    builder = cffi.FFI()
    builder.cdef(_CDEF)
    builder.set_source("_cupric_bench_trampoline", _SOURCE)
    folder = directory or tempfile.mkdtemp(prefix="cupric-bench-")
    try:
        built = builder.compile(tmpdir=folder, verbose=False)
        loader = importlib.machinery.ExtensionFileLoader("_cupric_bench_trampoline", built)
        spec = importlib.util.spec_from_file_location("_cupric_bench_trampoline", built,
                                                      loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    finally:
        if directory is None:
            shutil.rmtree(folder, ignore_errors=True)  # the loaded library stays mapped
    n = native()
    module.lib.cupric_set_launch(int(n.ffi.cast("uintptr_t", n.launch)))
    _trampoline.append(module)
    return module


def _ctypes_launch():
    import ctypes
    lib = ctypes.CDLL(_libcuda_path())
    fn = lib.cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = ([ctypes.c_void_p] + [ctypes.c_uint] * 7
                   + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])
    return fn


class ComparisonPreparedLaunch(PreparedLaunch):
    """`PreparedLaunch` through the trampoline (``"api"``) or ctypes (``"ctypes"``)."""

    __slots__ = ()
    _BACKENDS = BACKENDS
    _ARGV_BY_ADDRESS = True

    def _bind_call(self, n) -> None:
        if self._backend == "api":
            trampoline = build_trampoline()
            self._call = trampoline.lib.cupric_launch
            self._null = trampoline.ffi.NULL
        else:
            self._call = _ctypes_launch()
            self._null = None

    def _new_buffers(self):
        buf, view, address = super()._new_buffers()
        if self._backend == "api":  # cdata of the trampoline's FFI: the array by address
            return buf, view, _trampoline[0].ffi.cast("void **", address)
        return buf, view, address


def comparison_prepared(function, param_types, backend: str) -> PreparedLaunch:
    """A prepared launch of `function` through comparison `backend` ("api", "ctypes")."""
    return ComparisonPreparedLaunch(function, param_types, backend=backend)
