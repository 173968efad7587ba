"""C source of the compiled kernel launcher, second half: making launch tables (`make`,
which takes the prepared launch's layout), ``kern[grid, block]`` bound configurations
(`bind`), and the module's method table. Appended to `_fastcall_c`'s.
"""

from __future__ import annotations

from cupric.runtime.native import MODULE_INIT

__all__ = ["FACTORIES"]

FACTORIES = r"""
/* Take the prepared launch's parameter layout (address of cuLaunchKernel, CUfunction,
   format codes, offsets, sizes) into `t`, checked against the arguments' kinds; -1 with
   an exception set when it does not fit them. */
static int take_layout(Table *t, PyObject *layout, Py_ssize_t n) {
    unsigned long long address, func;
    const char *codes;
    Py_ssize_t ncodes;
    PyObject *offsets, *sizes;
    if (!PyArg_ParseTuple(layout, "KKs#O!O!", &address, &func, &codes, &ncodes,
                          &PyTuple_Type, &offsets, &PyTuple_Type, &sizes))
        return -1;
    Py_ssize_t expect = 0;
    for (Py_ssize_t i = 0; i < n; i++) expect += t->arg[i].kind == K_SCALAR ? 1 : 3;
    if (ncodes != expect || ncodes > MAXP || PyTuple_GET_SIZE(offsets) != ncodes
        || PyTuple_GET_SIZE(sizes) != ncodes) {
        PyErr_SetString(PyExc_ValueError, "make: the layout does not fit the arguments");
        return -1;
    }
    for (Py_ssize_t j = 0; j < ncodes; j++) {
        Py_ssize_t off = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, j));
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, j));
        if (PyErr_Occurred()) return -1;
        if (off < 0 || size < 0) {
            PyErr_SetString(PyExc_ValueError, "make: a negative offset or size");
            return -1;
        }
        if (off + size > DIRECT_BYTES) return 0;   /* too big to pack here: `launch` packs */
        t->param[j].code = codes[j];
        t->param[j].off = (int)off;
        t->param[j].size = (int)size;
        t->param[j].raw = 0;
    }
    /* An array passes its pointer, length and unit stride as three 64-bit values; a
       NumPy scalar of the parameter's own type is copied as it lies in the object. */
    for (Py_ssize_t i = 0, j = 0; i < n; j += t->arg[i].kind == K_SCALAR ? 1 : 3, i++) {
        if (t->arg[i].kind == K_SCALAR && raw_codes != NULL) {
            PyObject *code = PyDict_GetItemWithError(raw_codes, t->arg[i].cls);
            if (code == NULL && PyErr_Occurred()) return -1;
            if (code != NULL && PyUnicode_GET_LENGTH(code) == 1
                && PyUnicode_READ_CHAR(code, 0) == (Py_UCS4)(unsigned char)codes[j])
                t->param[j].raw = 1;
        }
        if (t->arg[i].kind != K_SCALAR && (codes[j] != 'Q' || codes[j + 1] != 'q'
                                       || codes[j + 2] != 'q')) {
            PyErr_SetString(PyExc_ValueError, "make: an array's parameters are not 64-bit");
            return -1;
        }
    }
    t->nparams = ncodes;
    t->func = (uintptr_t)func;
    t->call = (cupric_launch_fn)(uintptr_t)address;
    return 0;
}

/* make(launch, fallback, order, readers, strided, kinds, classes, dtypes, itemsizes,
        written, layout, failed, chained): `layout` None (every launch through `launch`)
   or the prepared launch's `c_layout`, with `failed` its `launch_failed`; `chained`:
   `fallback` is the launcher made before (it takes attempts too), not the general path. */
static PyObject *make(PyObject *module, PyObject *args) {
    PyObject *launch, *fallback, *order, *readers, *strided, *kinds, *classes, *dtypes,
        *sizes, *written, *layout, *failed;
    int chained;
    if (!PyArg_ParseTuple(args, "OOOO!OO!O!O!O!O!OOp", &launch, &fallback, &order,
                          &PyTuple_Type, &readers, &strided, &PyTuple_Type, &kinds,
                          &PyTuple_Type, &classes, &PyTuple_Type, &dtypes,
                          &PyTuple_Type, &sizes, &PyTuple_Type, &written, &layout, &failed,
                          &chained))
        return NULL;
    for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(readers); r++) {
        PyObject *entry = PyTuple_GET_ITEM(readers, r);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2
            || (PyTuple_GET_ITEM(entry, 1) != Py_None
                && !PyUnicode_Check(PyTuple_GET_ITEM(entry, 1)))) {
            PyErr_SetString(PyExc_TypeError, "make: a reader is (function, attribute or None)");
            return NULL;
        }
    }
    Py_ssize_t n = PyTuple_GET_SIZE(kinds);
    if (buffer_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (n > MAXA || PyTuple_GET_SIZE(classes) != n || PyTuple_GET_SIZE(dtypes) != n
        || PyTuple_GET_SIZE(sizes) != n || PyTuple_GET_SIZE(written) != n) {
        PyErr_SetString(PyExc_ValueError, "make: too many arguments or mismatched tables");
        return NULL;
    }
    Table *t = PyObject_GC_New(Table, &TableType);
    if (t == NULL) return NULL;
    t->vectorcall = table_vectorcall;
    t->dict = NULL;
    t->nargs = 0;
    t->call = NULL;
    t->func = 0;
    t->nparams = 0;
    t->chained = chained;
    Py_INCREF(failed); t->failed = failed;
    Py_INCREF(Py_None); t->dispatch = Py_None;
    Py_INCREF(launch); t->launch = launch;
    Py_INCREF(fallback); t->fallback = fallback;
    Py_INCREF(order); t->order = order;
    Py_INCREF(readers); t->readers = readers;
    Py_INCREF(strided); t->strided = strided;
    for (Py_ssize_t i = 0; i < n; i++) {
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(kinds, i));
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, i));
        int w = PyObject_IsTrue(PyTuple_GET_ITEM(written, i));
        PyObject *cls = PyTuple_GET_ITEM(classes, i);
        if (PyErr_Occurred() || w < 0) goto bad;
        if (kind < K_SCALAR || kind > K_TORCH || !PyType_Check(cls)) {
            PyErr_SetString(PyExc_ValueError, "make: bad kind or class");
            goto bad;
        }
        if (kind == K_BUFFER && !PyType_IsSubtype((PyTypeObject *)cls, buffer_type)) {
            PyErr_SetString(PyExc_TypeError, "make: a buffer argument must be a DeviceBuffer");
            goto bad;
        }
        t->arg[i].kind = (int)kind;
        t->arg[i].itemsize = size;
        t->arg[i].written = (char)w;
        Py_INCREF(cls); t->arg[i].cls = cls;
        t->arg[i].dtype = PyTuple_GET_ITEM(dtypes, i);
        Py_INCREF(t->arg[i].dtype);
        t->nargs = i + 1;
    }
    if (layout != Py_None && (!PyCallable_Check(failed) || take_layout(t, layout, n) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "make: a layout needs its failed() callable");
        goto bad;
    }
    PyObject_GC_Track((PyObject *)t);
    return (PyObject *)t;
bad:
    PyObject_GC_Track((PyObject *)t);
    Py_DECREF(t);
    return NULL;
}

/* -- kern[grid, block]: a bound configuration whose call is the launch ---------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *kernel, *grid, *block, *stream, *shared;
} Bound;

static void bound_dealloc(Bound *b) {
    Py_XDECREF(b->kernel); Py_XDECREF(b->grid); Py_XDECREF(b->block);
    Py_XDECREF(b->stream); Py_XDECREF(b->shared);
    PyObject_Free(b);
}

static PyObject *bound_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    Bound *b = (Bound *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "kernel launches take positional arguments only");
        return NULL;
    }
    PyObject *cfg[4] = {b->grid, b->block, b->stream, b->shared};
    PyObject *fast = PyObject_GetAttr(b->kernel, s_fast);
    if (fast == NULL) return NULL;
    if (fast != Py_None) {
        /* Several kinds on one kernel: the launcher of this call's kind. */
        PyObject *dispatch;
        if (Py_IS_TYPE(fast, &TableType)) {
            dispatch = ((Table *)fast)->dispatch;
            Py_XINCREF(dispatch);
        } else {
            dispatch = PyObject_GetAttr(fast, s_dispatch);
            if (dispatch == NULL) { Py_DECREF(fast); return NULL; }
        }
        if (dispatch != NULL && dispatch != Py_None && PyTuple_Check(dispatch)
            && PyTuple_GET_SIZE(dispatch) == 2) {
            Py_ssize_t probe = PyLong_AsSsize_t(PyTuple_GET_ITEM(dispatch, 0));
            PyObject *table = PyTuple_GET_ITEM(dispatch, 1);
            if (probe == -1 && PyErr_Occurred()) PyErr_Clear();
            else if (probe >= 0 && probe < n && PyDict_Check(table)) {
                PyObject *pick = PyDict_GetItemWithError(table, (PyObject *)Py_TYPE(args[probe]));
                if (pick != NULL) { Py_INCREF(pick); Py_SETREF(fast, pick); }
                else if (PyErr_Occurred()) { Py_DECREF(dispatch); Py_DECREF(fast); return NULL; }
            }
        }
        Py_XDECREF(dispatch);
        PyObject *r;
        if (Py_IS_TYPE(fast, &TableType)) {
            r = table_run((Table *)fast, cfg, args, n, NULL, NULL);
        } else {
            PyObject *tuple = PyTuple_New(n);
            if (tuple == NULL) { Py_DECREF(fast); return NULL; }
            for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(args[i]); PyTuple_SET_ITEM(tuple, i, args[i]); }
            PyObject *stack[5] = {cfg[0], cfg[1], cfg[2], cfg[3], tuple};
            r = PyObject_Vectorcall(fast, stack, 5, NULL);
            Py_DECREF(tuple);
        }
        Py_DECREF(fast);
        return r;
    }
    Py_DECREF(fast);
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(args[i]); PyTuple_SET_ITEM(tuple, i, args[i]); }
    PyObject *stack[6] = {b->kernel, cfg[0], cfg[1], cfg[2], cfg[3], tuple};
    PyObject *r = PyObject_VectorcallMethod(s_launch, stack, 6, NULL);
    Py_DECREF(tuple);
    return r;
}

static PyMemberDef bound_members[] = {
    {"kernel", T_OBJECT, offsetof(Bound, kernel), READONLY, NULL},
    {"grid", T_OBJECT, offsetof(Bound, grid), READONLY, NULL},
    {"block", T_OBJECT, offsetof(Bound, block), READONLY, NULL},
    {"stream", T_OBJECT, offsetof(Bound, stream), READONLY, NULL},
    {"shared_bytes", T_OBJECT, offsetof(Bound, shared), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupric.compiler._fastcall.Bound",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "kern[grid, block]: a launch configuration bound to a kernel",
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_vectorcall_offset = offsetof(Bound, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_members = bound_members,
};

/* bind(kernel, grid, block, stream=None, shared_bytes=0): kern[grid, block, ...] */
static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t n) {
    if (n < 3 || n > 5) {
        PyErr_SetString(PyExc_TypeError, "bind(kernel, grid, block, stream, shared_bytes)");
        return NULL;
    }
    if (s_fast == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    Bound *b = PyObject_New(Bound, &BoundType);
    if (b == NULL) return NULL;
    b->vectorcall = bound_vectorcall;
    b->kernel = Py_NewRef(args[0]);
    b->grid = Py_NewRef(args[1]);
    b->block = Py_NewRef(args[2]);
    b->stream = Py_NewRef(n > 3 ? args[3] : Py_None);
    b->shared = Py_NewRef(n > 4 ? args[4] : v_zero);
    return (PyObject *)b;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(DeviceBuffer, _Allocation, Stream)"},
    {"make", make, METH_VARARGS, "a compiled launcher for one signature"},
    {"raw_scalars", raw_scalars, METH_VARARGS,
     "raw_scalars(((class, code, sample, bytes), ...)): NumPy scalars copied as they lie"},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(kernel, grid, block, stream=None, shared_bytes=0)"},
    {NULL, NULL, 0, NULL},
};

#define MODULE_READY module_ready
static int module_ready(PyObject *m) {
    return PyType_Ready(&TableType) < 0 || PyType_Ready(&BoundType) < 0 ? -1 : 0;
}
""" + MODULE_INIT
