"""Ways of reaching cuLaunchKernel that cupric does not use, kept to compare with the ones
it does (`benchmarks/launch_overhead.py`): a cffi API-mode trampoline compiled into a
temporary folder (``"api"``) and ctypes (``"ctypes"``). Each is a `PreparedLaunch` whose
call is that path, so it packs and checks exactly as cupric's own Python path does.
`floor_probe` builds the floors of any launcher: cuLaunchKernel called N times from one C
loop (no Python), and once per call of a C function that takes no arguments (the least a
Python-level launch can cost), both with parameters packed beforehand.
"""

from __future__ import annotations

import shutil
import tempfile

from cupric.runtime.launch import PreparedLaunch, _libcuda_path

__all__ = ["comparison_prepared", "floor_probe", "BACKENDS"]

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


# The floor probe: what is left of a launch when no launcher runs at all.
_FLOOR_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
typedef int (*launch_fn)(uintptr_t, unsigned int, unsigned int, unsigned int, unsigned int,
                         unsigned int, unsigned int, unsigned int, uintptr_t, void **, void **);
static launch_fn launch;
static uintptr_t func, stream;
static unsigned int grid, block;
static char params[4096] __attribute__((aligned(16)));
static void *argv[256];

/* setup(cuLaunchKernel's address, CUfunction, grid, block, stream, packed parameters,
         their offsets) */
static PyObject *setup(PyObject *m, PyObject *args) {
    unsigned long long address, f, s;
    const char *bytes;
    Py_ssize_t size;
    PyObject *offsets;
    if (!PyArg_ParseTuple(args, "KKIIKy#O!", &address, &f, &grid, &block, &s, &bytes, &size,
                          &PyTuple_Type, &offsets))
        return NULL;
    if (size > (Py_ssize_t)sizeof(params) || PyTuple_GET_SIZE(offsets) > 256) {
        PyErr_SetString(PyExc_ValueError, "too many parameter bytes");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(offsets); i++) {
        Py_ssize_t off = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, i));
        if (off < 0 || off >= size) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad offset");
            return NULL;
        }
        argv[i] = params + off;
    }
    memcpy(params, bytes, (size_t)size);
    launch = (launch_fn)(uintptr_t)address;
    func = (uintptr_t)f;
    stream = (uintptr_t)s;
    Py_RETURN_NONE;
}

static PyObject *failed(int err) {
    PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel returned CUresult %d", err);
    return NULL;
}

/* loop(n): n launches from C; the seconds they took, timed in C. */
static PyObject *loop(PyObject *m, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "n >= 1");
        return NULL;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        int err = launch(func, grid, 1, 1, block, 1, 1, 0, stream, argv, NULL);
        if (err) return failed(err);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return PyFloat_FromDouble((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
}

/* once(): one launch, the GIL released around it as cupric's launchers release it. */
static PyObject *once(PyObject *m, PyObject *unused) {
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = launch(func, grid, 1, 1, block, 1, 1, 0, stream, argv, NULL);
    Py_END_ALLOW_THREADS
    return err ? failed(err) : Py_NewRef(Py_None);
}

/* once_holding_gil(): one launch with the GIL held throughout. */
static PyObject *once_holding_gil(PyObject *m, PyObject *unused) {
    int err = launch(func, grid, 1, 1, block, 1, 1, 0, stream, argv, NULL);
    return err ? failed(err) : Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, NULL},
    {"loop", loop, METH_O, NULL},
    {"once", once, METH_NOARGS, NULL},
    {"once_holding_gil", once_holding_gil, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};
"""


def floor_probe(prepared, grid: int, block: int, stream_handle: int, values: tuple):
    """The floor extension set up to launch `prepared`'s function (a compiled
    `PreparedLaunch`, whose ``c_layout`` gives cuLaunchKernel's address, the function
    and the parameter layout) with `values` packed once: ``loop(n)`` (seconds for n
    launches from C), ``once()`` (GIL released) and ``once_holding_gil()``.

    Safety
    ------
    The packed parameters hold raw pointers: the caller keeps the arrays alive while
    the probe launches."""
    import struct

    from cupric.runtime._cext import MODULE_INIT, build_and_load
    layout = getattr(prepared, "c_layout", None)
    if layout is None:
        raise RuntimeError("the floor probe needs cupric's compiled launch (no c_layout)")
    address, function, codes, offsets, sizes = layout
    if len(codes) != len(values):
        raise ValueError(f"{len(values)} values for {len(codes)} parameters")
    blob = bytearray(max((o + n for o, n in zip(offsets, sizes)), default=0))
    for code, offset, value in zip(codes, offsets, values):
        struct.pack_into("<" + code, blob, offset, value)
    module = build_and_load(None, "_cupric_bench_floor", _FLOOR_SOURCE + MODULE_INIT,
                            "launch floor probe")
    module.setup(address, function, grid, block, stream_handle, bytes(blob), tuple(offsets))
    return module
