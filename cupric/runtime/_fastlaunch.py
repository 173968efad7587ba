"""The compiled launch path: argument packing and cuLaunchKernel in one C call.

A kernel launch from Python spends most of its host time in the driver; what Python adds
(unpacking the call, converting each argument, the call into the driver) is what this
small CPython extension removes. It is built once per machine and Python version into
the user's cache with the compiler setuptools finds, and `PreparedLaunch` falls back to
the pure-Python paths when it cannot be built.

The extension handles the common case only: ints and tuples of ints for grid and block,
None / int / cupric `Stream` for the stream, Python or NumPy scalars and exact-size bytes
for the parameters. Anything else, and every failed launch, goes back to the Python
implementation (`PreparedLaunch._slow_launch` / `_c_failed`), which raises the typed
errors. Parameters are packed into a buffer on the C stack, so concurrent launches from
several threads never share one.
"""

from __future__ import annotations

from . import _cext
from .packing import PACK_C

__all__ = ["load", "build_error", "SOURCE"]

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef int (*cupric_launch_fn)(uintptr_t, unsigned int, unsigned int, unsigned int,
                                unsigned int, unsigned int, unsigned int, unsigned int,
                                uintptr_t, void **, void **);

#define MAX_PARAMS 512
#define MAX_BYTES 32768   /* the largest kernel parameter space CUDA allows (sm_70+) */

typedef struct {
    cupric_launch_fn launch;
    uintptr_t func;
    Py_ssize_t nparams;
    Py_ssize_t size;
    char codes[MAX_PARAMS];
    Py_ssize_t offsets[MAX_PARAMS];
    Py_ssize_t sizes[MAX_PARAMS];
    PyObject *stream_type;   /* strong reference: cupric.runtime.Stream */
    PyObject *owner;         /* weak reference to the PreparedLaunch */
    PyObject *ptr_name;
    PyObject *closed_name;
    PyObject *slow_name;
    PyObject *failed_name;
} State;

static void state_clear(State *s) {
    Py_XDECREF(s->stream_type);
    Py_XDECREF(s->owner);
    Py_XDECREF(s->ptr_name);
    Py_XDECREF(s->closed_name);
    Py_XDECREF(s->slow_name);
    Py_XDECREF(s->failed_name);
    PyMem_Free(s);
}

static void state_free(PyObject *capsule) {
    State *s = (State *)PyCapsule_GetPointer(capsule, NULL);
    if (s == NULL) { PyErr_Clear(); return; }
    state_clear(s);
}

""" + PACK_C + r"""
/* Pack every value at its offset; 0 sends the call down the slow path. */
static int pack(State *s, PyObject *const *values, char *buf) {
    for (Py_ssize_t i = 0; i < s->nparams; i++)
        if (!pack_value(s->codes[i], s->sizes[i], values[i], buf + s->offsets[i])) return 0;
    return 1;
}

static PyObject *call_owner(State *s, PyObject *name, PyObject *first,
                            PyObject *const *args, Py_ssize_t nargs) {
    PyObject *owner;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyWeakref_GetRef(s->owner, &owner) < 0) return NULL;
#else
    owner = PyWeakref_GetObject(s->owner);
    if (owner == NULL) return NULL;
    Py_INCREF(owner);
#endif
    if (owner == NULL || owner == Py_None) {
        Py_XDECREF(owner);
        PyErr_SetString(PyExc_ReferenceError, "the PreparedLaunch is gone");
        return NULL;
    }
    PyObject *method = PyObject_GetAttr(owner, name);
    Py_DECREF(owner);
    if (method == NULL) return NULL;
    PyObject *stack[MAX_PARAMS + 8];
    Py_ssize_t n = 0;
    if (first != NULL) stack[n++] = first;
    for (Py_ssize_t i = 0; i < nargs && n < MAX_PARAMS + 8; i++) stack[n++] = args[i];
    PyObject *result = PyObject_Vectorcall(method, stack, (size_t)n, NULL);
    Py_DECREF(method);
    return result;
}

static PyObject *fast_launch(PyObject *capsule, PyObject *const *args, Py_ssize_t nargs) {
    State *s = (State *)PyCapsule_GetPointer(capsule, NULL);
    if (s == NULL) return NULL;
    unsigned int grid[3], block[3];
    uintptr_t stream = 0;
    char buf[MAX_BYTES] __attribute__((aligned(16)));
    void *argv[MAX_PARAMS];
    if (nargs != 4 + s->nparams) goto slow;
    if (!get_dim3(args[0], grid) || !get_dim3(args[1], block)) goto slow;
    PyObject *so = args[2];
    if (so == Py_None) {
        stream = 0;
    } else if (PyLong_CheckExact(so)) {
        stream = (uintptr_t)PyLong_AsUnsignedLongLong(so);
        if (PyErr_Occurred()) { PyErr_Clear(); goto slow; }
    } else if ((PyObject *)Py_TYPE(so) == s->stream_type) {
        PyObject *closed = PyObject_GetAttr(so, s->closed_name);
        if (closed == NULL) { PyErr_Clear(); goto slow; }
        int is_closed = closed != Py_False;
        Py_DECREF(closed);
        if (is_closed) goto slow;
        PyObject *ptr = PyObject_GetAttr(so, s->ptr_name);
        if (ptr == NULL) { PyErr_Clear(); goto slow; }
        stream = (uintptr_t)PyLong_AsUnsignedLongLong(ptr);
        Py_DECREF(ptr);
        if (PyErr_Occurred()) { PyErr_Clear(); goto slow; }
    } else {
        goto slow;
    }
    if (!PyLong_CheckExact(args[3])) goto slow;
    long long shared = PyLong_AsLongLong(args[3]);
    if (shared < 0 || shared > UINT_MAX) { PyErr_Clear(); goto slow; }
    if (!pack(s, args + 4, buf)) goto slow;
    for (Py_ssize_t i = 0; i < s->nparams; i++) argv[i] = buf + s->offsets[i];
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = s->launch(s->func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                    (unsigned int)shared, stream, s->nparams ? argv : NULL, NULL);
    Py_END_ALLOW_THREADS
    if (err == 0) Py_RETURN_NONE;
    {
        PyObject *code = PyLong_FromLong(err);
        if (code == NULL) return NULL;
        PyObject *r = call_owner(s, s->failed_name, code, args, nargs);
        Py_DECREF(code);
        return r;
    }
slow:
    return call_owner(s, s->slow_name, NULL, args, nargs);
}

static PyMethodDef launch_def = {"launch", (PyCFunction)(void (*)(void))fast_launch,
                                 METH_FASTCALL,
                                 "launch(grid, block, stream, shared_bytes, *values)"};

/* make(launch_address, func, codes, offsets, sizes, stream_type, owner_weakref) */
static PyObject *make(PyObject *module, PyObject *args) {
    unsigned long long launch_address, func;
    const char *codes;
    Py_ssize_t ncodes;
    PyObject *offsets, *sizes, *stream_type, *owner;
    if (!PyArg_ParseTuple(args, "KKs#O!O!OO", &launch_address, &func, &codes, &ncodes,
                          &PyTuple_Type, &offsets, &PyTuple_Type, &sizes, &stream_type,
                          &owner))
        return NULL;
    if (ncodes > MAX_PARAMS || PyTuple_GET_SIZE(offsets) != ncodes
        || PyTuple_GET_SIZE(sizes) != ncodes) {
        PyErr_SetString(PyExc_ValueError, "too many parameters or mismatched layout");
        return NULL;
    }
    State *s = (State *)PyMem_Calloc(1, sizeof(State));
    if (s == NULL) return PyErr_NoMemory();
    s->launch = (cupric_launch_fn)(uintptr_t)launch_address;
    s->func = (uintptr_t)func;
    s->nparams = ncodes;
    for (Py_ssize_t i = 0; i < ncodes; i++) {
        s->codes[i] = codes[i];
        s->offsets[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, i));
        s->sizes[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (PyErr_Occurred()) { PyMem_Free(s); return NULL; }
        if (s->offsets[i] < 0 || s->sizes[i] < 0
            || s->offsets[i] + s->sizes[i] > MAX_BYTES) {
            PyMem_Free(s);
            PyErr_SetString(PyExc_ValueError, "parameters exceed the kernel parameter space");
            return NULL;
        }
    }
    Py_INCREF(stream_type); s->stream_type = stream_type;
    Py_INCREF(owner); s->owner = owner;
    s->ptr_name = PyUnicode_InternFromString("_ptr");
    s->closed_name = PyUnicode_InternFromString("_closed");
    s->slow_name = PyUnicode_InternFromString("_slow_launch");
    s->failed_name = PyUnicode_InternFromString("_c_failed");
    PyObject *capsule = PyCapsule_New(s, NULL, state_free);
    if (capsule == NULL) { state_clear(s); return NULL; }
    PyObject *fn = PyCFunction_NewEx(&launch_def, capsule, NULL);
    Py_DECREF(capsule);
    return fn;
}

static PyMethodDef methods[] = {
    {"make", make, METH_VARARGS, "a launch function bound to one kernel signature"},
    {NULL, NULL, 0, NULL},
};

""" + _cext.MODULE_INIT

#: The extension, loaded through the one cached loader (`cupric.runtime._cext`).
EXTENSION = _cext.Extension("_cupric_fastlaunch", "launch", "launch extension", SOURCE)


def build_error() -> str | None:
    """Why the extension could not be built or loaded, or None."""
    return EXTENSION.error


def load(build: bool = True):
    """The extension module (built into the cache if needed and `build`), or None; a
    failed build is not retried within one process (`build_error` says why)."""
    return EXTENSION.load(build)
