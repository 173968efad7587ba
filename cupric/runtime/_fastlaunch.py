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

/* 1 and (x, y, z) on success; 0 (no Python error set) to take the slow path. */
static int get_dim3(PyObject *o, unsigned int *d) {
    d[0] = d[1] = d[2] = 1;
    if (PyLong_CheckExact(o)) {
        long long v = PyLong_AsLongLong(o);
        if (v < 1 || v > UINT_MAX) { PyErr_Clear(); return 0; }
        d[0] = (unsigned int)v;
        return 1;
    }
    if (PyTuple_CheckExact(o)) {
        Py_ssize_t n = PyTuple_GET_SIZE(o);
        if (n < 1 || n > 3) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyTuple_GET_ITEM(o, i);
            if (!PyLong_CheckExact(item)) return 0;
            long long v = PyLong_AsLongLong(item);
            if (v < 1 || v > UINT_MAX) { PyErr_Clear(); return 0; }
            d[i] = (unsigned int)v;
        }
        return 1;
    }
    return 0;
}

static int get_signed(PyObject *v, long long *out) {
    if (PyFloat_Check(v)) return 0;   /* struct refuses floats for integer formats */
    if (PyLong_Check(v)) {
        *out = PyLong_AsLongLong(v);
    } else {
        PyObject *index = PyNumber_Index(v);
        if (index == NULL) { PyErr_Clear(); return 0; }
        *out = PyLong_AsLongLong(index);
        Py_DECREF(index);
    }
    if (*out == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

static int get_unsigned(PyObject *v, unsigned long long *out) {
    if (PyFloat_Check(v)) return 0;
    PyObject *index = PyLong_Check(v) ? (Py_INCREF(v), v) : PyNumber_Index(v);
    if (index == NULL) { PyErr_Clear(); return 0; }
    *out = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

static int get_double(PyObject *v, double *out) {
    if (PyFloat_CheckExact(v)) { *out = PyFloat_AS_DOUBLE(v); return 1; }
    *out = PyFloat_AsDouble(v);
    if (*out == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* Pack every value at its offset; 0 sends the call down the slow path. */
static int pack(State *s, PyObject *const *values, char *buf) {
    for (Py_ssize_t i = 0; i < s->nparams; i++) {
        PyObject *v = values[i];
        char *p = buf + s->offsets[i];
        long long x;
        unsigned long long u;
        double d;
        switch (s->codes[i]) {
        case 'b': { if (!get_signed(v, &x) || x < SCHAR_MIN || x > SCHAR_MAX) return 0;
                    signed char t = (signed char)x; memcpy(p, &t, 1); break; }
        case 'h': { if (!get_signed(v, &x) || x < SHRT_MIN || x > SHRT_MAX) return 0;
                    short t = (short)x; memcpy(p, &t, 2); break; }
        case 'i': { if (!get_signed(v, &x) || x < INT_MIN || x > INT_MAX) return 0;
                    int t = (int)x; memcpy(p, &t, 4); break; }
        case 'q': { if (!get_signed(v, &x)) return 0; memcpy(p, &x, 8); break; }
        case 'B': { if (!get_unsigned(v, &u) || u > UCHAR_MAX) return 0;
                    unsigned char t = (unsigned char)u; memcpy(p, &t, 1); break; }
        case 'H': { if (!get_unsigned(v, &u) || u > USHRT_MAX) return 0;
                    unsigned short t = (unsigned short)u; memcpy(p, &t, 2); break; }
        case 'I': { if (!get_unsigned(v, &u) || u > UINT_MAX) return 0;
                    unsigned int t = (unsigned int)u; memcpy(p, &t, 4); break; }
        case 'Q': { if (!get_unsigned(v, &u)) return 0; memcpy(p, &u, 8); break; }
        case 'f': { if (!get_double(v, &d)) return 0;
                    float t = (float)d;
                    if (isfinite(d) && !isfinite(t)) return 0;   /* struct: overflow */
                    memcpy(p, &t, 4); break; }
        case 'd': { if (!get_double(v, &d)) return 0; memcpy(p, &d, 8); break; }
        case 'e': { if (!get_double(v, &d)) return 0;
                    if (PyFloat_Pack2(d, p, 1) < 0) { PyErr_Clear(); return 0; }
                    break; }
        case '?': { int t = PyObject_IsTrue(v);
                    if (t < 0) { PyErr_Clear(); return 0; }
                    *p = (char)t; break; }
        case 's': { if (!PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v) != s->sizes[i]) return 0;
                    memcpy(p, PyBytes_AS_STRING(v), (size_t)s->sizes[i]); break; }
        default: return 0;
        }
    }
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
