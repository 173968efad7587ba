"""The compiled allocation path: current device, allocate and free in one C call each.

A small device allocation spends most of its host time outside the driver: cuda.bindings
costs about a microsecond of Python per call, and allocating needed three calls
(`cuCtxGetCurrent`, `cuCtxGetDevice`, `cuMemAllocAsync`) and freeing two. This small
CPython extension makes those calls straight into libcuda, with the addresses it is given
(resolved from the loaded libcuda through ctypes), so that one C call asks which device
is current and allocates, and one frees.

The extension decides nothing: every driver error comes back as its `CUresult` for the
Python side to raise typed (`cupric.runtime.errors`), and every case it does not handle
(no context current, a legacy/per-thread stream or a synchronous free while another
device's context is current, a handle that is not an int) comes back as `NEED_PYTHON`
for the cuda.bindings path. It is built once per machine and Python version into the
cupric cache with the compiler setuptools finds; without one, or with
``CUPRIC_BUILD_LAUNCHER=0`` (no building) or ``CUPRIC_FAST_ALLOC=0`` (not used), memory
goes through cuda.bindings as before.

``make(*addresses)`` returns three functions bound to the entry points given (`SYMBOLS`
order); `native()` holds the ones bound to the loaded libcuda as an `Entry`. None of them
raises for a driver failure:

* ``device()``: the ordinal of the current context's device, `NO_CONTEXT` when no context
  is current, `NEED_PYTHON` when the driver refuses the query;
* ``alloc(nbytes, stream, pool)``: ``(err, ptr, device)``. `stream` None allocates with
  `cuMemAlloc`; otherwise `pool` 0 uses `cuMemAllocAsync` on the stream handle and a
  nonzero `pool` `cuMemAllocFromPoolAsync`. `err` is 0, a `CUresult`, `NO_CONTEXT` or
  `NEED_PYTHON`;
* ``free(ptr, stream, device)``: `cuMemFree` (`stream` None) or `cuMemFreeAsync`; returns
  0, a `CUresult` or `NEED_PYTHON`. `device` is the allocation's ordinal: a synchronous free,
  or one on a stream handle that names the current context's stream (0, 1 legacy,
  2 per-thread), is only made from that device's context.
"""

from __future__ import annotations

import threading

from cupric import _config
from . import _cext

__all__ = ["Entry", "load", "native", "build_error", "SOURCE", "NO_CONTEXT", "NEED_PYTHON", "SYMBOLS"]

NO_CONTEXT = -1    # no context is current in the calling thread
NEED_PYTHON = -2   # a case the C path leaves to cuda.bindings

# The libcuda entry points `configure` takes, in its argument order (the ABI versions
# the CUDA headers map the plain names to).
SYMBOLS = ("cuCtxGetCurrent", "cuCtxGetDevice", "cuMemAlloc_v2", "cuMemAllocAsync",
           "cuMemAllocFromPoolAsync", "cuMemFree_v2", "cuMemFreeAsync")

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*ctx_get_current_fn)(void **);
typedef int (*ctx_get_device_fn)(int *);
typedef int (*mem_alloc_fn)(unsigned long long *, size_t);
typedef int (*mem_alloc_async_fn)(unsigned long long *, size_t, void *);
typedef int (*mem_alloc_pool_fn)(unsigned long long *, size_t, void *, void *);
typedef int (*mem_free_fn)(unsigned long long);
typedef int (*mem_free_async_fn)(unsigned long long, void *);

#define NO_CONTEXT (-1)
#define NEED_PYTHON (-2)

typedef struct {
    ctx_get_current_fn ctx_get_current;
    ctx_get_device_fn ctx_get_device;
    mem_alloc_fn mem_alloc;
    mem_alloc_async_fn mem_alloc_async;
    mem_alloc_pool_fn mem_alloc_pool;
    mem_free_fn mem_free;
    mem_free_async_fn mem_free_async;
} Entry;

static const char CAPSULE[] = "cupric.runtime.fastalloc";

static void entry_free(PyObject *capsule) {
    void *e = PyCapsule_GetPointer(capsule, CAPSULE);
    if (e == NULL) { PyErr_Clear(); return; }
    PyMem_Free(e);
}

/* The current context's device, NO_CONTEXT, or NEED_PYTHON. */
static int current_device(const Entry *e) {
    void *ctx = NULL;
    if (e->ctx_get_current(&ctx) != 0) return NEED_PYTHON;
    if (ctx == NULL) return NO_CONTEXT;
    int device = -1;
    if (e->ctx_get_device(&device) != 0 || device < 0) return NEED_PYTHON;
    return device;
}

/* An int handle as a pointer-sized value; 0 (no error set) when it is not one. */
static int as_handle(PyObject *o, uintptr_t *out) {
    if (!PyLong_CheckExact(o)) return 0;
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    *out = (uintptr_t)v;
    return 1;
}

static int as_size(PyObject *o, size_t *out) {
    if (!PyLong_CheckExact(o)) return 0;
    size_t v = PyLong_AsSize_t(o);
    if (v == (size_t)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    *out = v;
    return 1;
}

static PyObject *py_device(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const Entry *e = (const Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 0) { PyErr_SetString(PyExc_TypeError, "device() takes no arguments"); return NULL; }
    return PyLong_FromLong(current_device(e));
}

static PyObject *result3(int err, unsigned long long ptr, int device) {
    return Py_BuildValue("(iKi)", err, ptr, device);
}

/* alloc(nbytes, stream or None, pool) -> (err, ptr, device) */
static PyObject *py_alloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const Entry *e = (const Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "alloc(nbytes, stream, pool)"); return NULL; }
    size_t nbytes;
    uintptr_t stream = 0, pool = 0;
    int sync = args[1] == Py_None;
    if (!as_size(args[0], &nbytes) || (!sync && !as_handle(args[1], &stream))
        || !as_handle(args[2], &pool))
        return result3(NEED_PYTHON, 0, -1);
    int device = current_device(e);
    if (device < 0) return result3(device, 0, -1);
    unsigned long long ptr = 0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    if (sync)
        err = e->mem_alloc(&ptr, nbytes);
    else if (pool)
        err = e->mem_alloc_pool(&ptr, nbytes, (void *)pool, (void *)stream);
    else
        err = e->mem_alloc_async(&ptr, nbytes, (void *)stream);
    Py_END_ALLOW_THREADS
    return result3(err, err == 0 ? ptr : 0, device);
}

/* free(ptr, stream or None, device) -> err */
static PyObject *py_free(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const Entry *e = (const Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "free(ptr, stream, device)"); return NULL; }
    uintptr_t ptr, stream = 0;
    int sync = args[1] == Py_None;
    if (!as_handle(args[0], &ptr) || (!sync && !as_handle(args[1], &stream))
        || !PyLong_CheckExact(args[2]))
        return PyLong_FromLong(NEED_PYTHON);
    long owner = PyLong_AsLong(args[2]);
    if (owner == -1 && PyErr_Occurred()) { PyErr_Clear(); return PyLong_FromLong(NEED_PYTHON); }
    int device = current_device(e);
    if (device < 0) return PyLong_FromLong(NEED_PYTHON);
    /* The current context decides which stream 0/1/2 name and where cuMemFree runs. */
    if ((sync || stream <= 2) && owner >= 0 && owner != device)
        return PyLong_FromLong(NEED_PYTHON);
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = sync ? e->mem_free((unsigned long long)ptr)
               : e->mem_free_async((unsigned long long)ptr, (void *)stream);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

static PyMethodDef device_def = {"device", (PyCFunction)(void (*)(void))py_device,
                                 METH_FASTCALL, "device() -> ordinal, NO_CONTEXT or NEED_PYTHON"};
static PyMethodDef alloc_def = {"alloc", (PyCFunction)(void (*)(void))py_alloc,
                                METH_FASTCALL, "alloc(nbytes, stream, pool) -> (err, ptr, device)"};
static PyMethodDef free_def = {"free", (PyCFunction)(void (*)(void))py_free,
                               METH_FASTCALL, "free(ptr, stream, device) -> err"};

/* make(*addresses in SYMBOLS order) -> (device, alloc, free), bound to those addresses */
static PyObject *py_make(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t a[7];
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "make takes 7 addresses"); return NULL; }
    for (int i = 0; i < 7; i++) {
        if (!as_handle(args[i], &a[i]) || a[i] == 0) {
            PyErr_SetString(PyExc_ValueError, "make: every address must be a nonzero int");
            return NULL;
        }
    }
    Entry *e = (Entry *)PyMem_Calloc(1, sizeof(Entry));
    if (e == NULL) return PyErr_NoMemory();
    e->ctx_get_current = (ctx_get_current_fn)a[0];
    e->ctx_get_device = (ctx_get_device_fn)a[1];
    e->mem_alloc = (mem_alloc_fn)a[2];
    e->mem_alloc_async = (mem_alloc_async_fn)a[3];
    e->mem_alloc_pool = (mem_alloc_pool_fn)a[4];
    e->mem_free = (mem_free_fn)a[5];
    e->mem_free_async = (mem_free_async_fn)a[6];
    PyObject *capsule = PyCapsule_New(e, CAPSULE, entry_free);
    if (capsule == NULL) { PyMem_Free(e); return NULL; }
    PyObject *d = PyCFunction_NewEx(&device_def, capsule, NULL);
    PyObject *al = PyCFunction_NewEx(&alloc_def, capsule, NULL);
    PyObject *fr = PyCFunction_NewEx(&free_def, capsule, NULL);
    Py_DECREF(capsule);
    if (d == NULL || al == NULL || fr == NULL) {
        Py_XDECREF(d); Py_XDECREF(al); Py_XDECREF(fr);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(3, d, al, fr);
    Py_DECREF(d); Py_DECREF(al); Py_DECREF(fr);
    return r;
}

static PyMethodDef methods[] = {
    {"make", (PyCFunction)(void (*)(void))py_make, METH_FASTCALL,
     "make(*addresses) -> (device, alloc, free) bound to the libcuda entry points given"},
    {NULL, NULL, 0, NULL},
};

""" + _cext.MODULE_INIT

#: The extension, loaded through the one cached loader (`cupric.runtime._cext`).
EXTENSION = _cext.Extension("_cupric_fastalloc", "memory", "allocation extension", SOURCE,
                            switch="FAST_ALLOC")
_native = None          # its functions bound to the loaded libcuda
_lock = threading.Lock()


def build_error() -> str | None:
    """Why the extension could not be built, loaded or configured, or None."""
    return EXTENSION.error


def load(build: bool | None = None, wait: bool = True):
    """The extension module (built into the cache if needed), or None.

    `build` None follows ``CUPRIC_BUILD_LAUNCHER`` (anything but "0" builds). A failure is
    recorded in `build_error` and not retried within the process. With `wait` False a
    build still running in the background gives None (`pending` tells) instead of
    blocking.
    """
    try:
        return EXTENSION.load(build, wait)
    except _cext.Pending:
        return None


def pending() -> bool:
    """Whether a background build of the extension was started and its result not yet
    taken (the Python path runs meanwhile; `native` gives the compiled path once the
    build is done, and records the error if it failed)."""
    return EXTENSION.pending()


class Entry:
    """The extension's three functions bound to one set of libcuda entry points."""

    __slots__ = ("device", "alloc", "free")

    def __init__(self, module, addresses) -> None:
        self.device, self.alloc, self.free = module.make(*addresses)


def native() -> Entry | None:
    """The extension's functions bound to the loaded libcuda, or None.

    Needs the driver (`cuInit` done through `_driver.driver()`, which raises
    `NoDriverError` without one); None when the extension cannot be built,
    ``CUPRIC_FAST_ALLOC=0``, or while it is being built (`pending`).
    """
    global _native
    if _native is not None:
        return _native
    if not _config.FAST_ALLOC.get():
        return None
    from ._driver import driver
    driver()  # cuInit first: raises NoDriverError when there is no driver
    module = load(wait=False)
    if module is None:
        return None
    with _lock:
        if _native is None:
            try:
                _native = Entry(module, libcuda_addresses())
            except Exception as exc:  # a libcuda without these entry points: recorded
                EXTENSION.error = f"{type(exc).__name__}: {exc}"[:500]
                return None
    return _native


def libcuda_addresses(path: str | None = None) -> tuple[int, ...]:
    """The addresses of `SYMBOLS` in libcuda (the copy cuda.bindings loaded), or in the
    library at `path`."""
    import ctypes
    if path is None:
        from .launch import _libcuda_path
        path = _libcuda_path()
    lib = ctypes.CDLL(path)
    return tuple(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
                 for symbol in SYMBOLS)


