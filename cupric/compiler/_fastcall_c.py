"""The C source of the compiled kernel launcher (`cupric.compiler._fastcall` builds and
loads it; its docstring describes what the extension checks and how it launches). Kept
apart so that each module stays one concept: this one is the extension's text and the
constants that mirror its C enums, that one its Python side. Here: the module's state,
`configure`, `raw_scalars` and the launch table with its launch (`table_run`); making
tables and bound configurations, and the method table: `_fastcall_factories_c`.
"""

from __future__ import annotations

from cupric.compiler._fastcall_factories_c import FACTORIES
from cupric.runtime.native import SLOT_OFFSET
from cupric.runtime.packing import PACK_C

__all__ = ["SOURCE", "SCALAR", "BUFFER", "CUPY", "CUPY_FIELDS", "TORCH", "MAX_ARGS"]

#: Argument kinds of a launch table (the C enum).
SCALAR, BUFFER, CUPY, CUPY_FIELDS, TORCH = range(5)
#: The most arguments a compiled launcher takes (MAXA in C); longer signatures keep the
#: generated Python launcher.
MAX_ARGS = 64

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAXA 64
#define MAXP (3 * MAXA)        /* parameters: a 1-D array passes three */
/* The parameter bytes a launcher packs on its own stack; kernels with more go through the
   prepared launch (which takes up to CUDA's 32 KiB). A small frame keeps the hot path's
   stack (and what the driver call evicts of it) to a few cache lines. */
#define DIRECT_BYTES 512

typedef int (*cupric_launch_fn)(uintptr_t, unsigned int, unsigned int, unsigned int,
                                unsigned int, unsigned int, unsigned int, unsigned int,
                                uintptr_t, void **, void **);
enum { K_SCALAR = 0, K_BUFFER = 1, K_CUPY = 2, K_CUPY_FIELDS = 3, K_TORCH = 4 };

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

static Py_ssize_t off_ptr, off_shape, off_strides, off_dtype, off_ndim, off_alloc, off_closed;
static Py_ssize_t off_stream_ptr, off_stream_closed;
static PyTypeObject *buffer_type, *alloc_type, *stream_type;
static PyObject *s_data, *s_ptr, *s_size, *s_ndim, *s_shape, *s_strides, *s_dtype,
    *s_c_contiguous, *s_is_cuda, *s_requires_grad, *s_layout, *s_is_contiguous,
    *s_data_ptr, *s_fast, *s_dispatch, *s_launch, *s_closed, *v_zero, *v_one;

""" + SLOT_OFFSET + PACK_C + r"""

/* configure(DeviceBuffer, _Allocation, Stream) */
static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *bt, *at, *st;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &bt, &PyType_Type, &at,
                          &PyType_Type, &st)) return NULL;
    PyTypeObject *B = (PyTypeObject *)bt, *A = (PyTypeObject *)at, *S = (PyTypeObject *)st;
    if (slot_offset(B, "ptr", &off_ptr) || slot_offset(B, "shape", &off_shape)
        || slot_offset(B, "strides", &off_strides) || slot_offset(B, "dtype", &off_dtype)
        || slot_offset(B, "ndim", &off_ndim) || slot_offset(B, "_alloc", &off_alloc)
        || slot_offset(A, "_closed", &off_closed) || slot_offset(S, "_ptr", &off_stream_ptr)
        || slot_offset(S, "_closed", &off_stream_closed))
        return NULL;
#define INTERN(var, text) if (var == NULL && (var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_data, "data"); INTERN(s_ptr, "ptr"); INTERN(s_size, "size");
    INTERN(s_ndim, "ndim"); INTERN(s_shape, "shape"); INTERN(s_strides, "strides");
    INTERN(s_dtype, "dtype"); INTERN(s_c_contiguous, "_c_contiguous");
    INTERN(s_is_cuda, "is_cuda"); INTERN(s_requires_grad, "requires_grad");
    INTERN(s_layout, "layout"); INTERN(s_is_contiguous, "is_contiguous");
    INTERN(s_data_ptr, "data_ptr"); INTERN(s_fast, "_fast"); INTERN(s_dispatch, "dispatch");
    INTERN(s_launch, "_launch"); INTERN(s_closed, "_closed");
    if (v_zero == NULL && (v_zero = PyLong_FromLong(0)) == NULL) return NULL;
    if (v_one == NULL && (v_one = PyLong_FromLong(1)) == NULL) return NULL;
    Py_INCREF(bt); Py_INCREF(at); Py_INCREF(st);
    Py_XDECREF((PyObject *)buffer_type); Py_XDECREF((PyObject *)alloc_type);
    Py_XDECREF((PyObject *)stream_type);
    buffer_type = B; alloc_type = A; stream_type = S;
    Py_RETURN_NONE;
}

/* -- the launch table of one signature and argument classes -------------------------- */

/* What a launcher knows of one argument and of one kernel parameter (kept together, so a
   launch reads a few cache lines). */
typedef struct {
    PyObject *cls;           /* the exact class */
    PyObject *dtype;         /* the dtype object an array must carry (identity) */
    long long itemsize;
    int kind;                /* K_SCALAR ... K_TORCH */
    char written;            /* an array the kernel writes (overlap checked) */
} Arg;

typedef struct {
    int off, size;
    char code;               /* struct format code, 's' for a struct by value */
    char raw;                /* a NumPy scalar whose value is copied as it is (raw_scalars) */
} Param;

/* NumPy scalar classes whose value sits right after the object header in the layout of
   the parameter's format code ({class: code}), verified on a sample by raw_scalars(). */
static PyObject *raw_codes;

/* raw_scalars(((class, code, sample, bytes), ...)): take each class whose sample carries
   `bytes` right after its object header. */
static PyObject *raw_scalars(PyObject *module, PyObject *args) {
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &entries)) return NULL;
    PyObject *codes = PyDict_New();
    if (codes == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(entries); i++) {
        PyObject *cls, *code, *sample;
        const char *bytes;
        Py_ssize_t n;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(entries, i), "O!UOy#", &PyType_Type, &cls,
                              &code, &sample, &bytes, &n)) { Py_DECREF(codes); return NULL; }
        if ((PyObject *)Py_TYPE(sample) != cls || n < 1 || n > 8
            || Py_TYPE(sample)->tp_basicsize < (Py_ssize_t)sizeof(PyObject) + n
            || memcmp((char *)sample + sizeof(PyObject), bytes, (size_t)n) != 0)
            continue;   /* another layout: packed through its conversions */
        if (PyDict_SetItem(codes, cls, code) < 0) { Py_DECREF(codes); return NULL; }
    }
    Py_XSETREF(raw_codes, codes);
    return PyLong_FromSsize_t(PyDict_GET_SIZE(codes));
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *dispatch;      /* (probe, {class: launcher}) or None, set by index_chain */
    PyObject *launch;        /* prepared.launch(grid, block, stream, shared, *values) */
    PyObject *fallback;      /* fallback(grid, block, stream, shared, args) */
    PyObject *order;         /* order(stream, current): CuPy's current stream */
    PyObject *readers;       /* CuPy's current stream: ((function, attribute or None), ...) */
    PyObject *strided;       /* torch.strided, or None */
    PyObject *failed;        /* failed(err, grid, block, stream, shared, *values), or None */
    int chained;             /* `fallback` is another launcher (not the general path) */
    cupric_launch_fn call;   /* cuLaunchKernel, or NULL: every launch goes to `launch` */
    uintptr_t func;          /* the CUfunction */
    Py_ssize_t nparams;
    Py_ssize_t nargs;
    Param param[MAXP];       /* each parameter's format code, offset and size */
    Arg arg[MAXA];           /* each argument's kind, class, dtype, item size */
} Table;

static PyTypeObject TableType;

static int table_traverse(Table *t, visitproc visit, void *arg) {
    Py_VISIT(t->dict); Py_VISIT(t->dispatch); Py_VISIT(t->launch); Py_VISIT(t->fallback);
    Py_VISIT(t->order); Py_VISIT(t->readers); Py_VISIT(t->strided); Py_VISIT(t->failed);
    for (Py_ssize_t i = 0; i < t->nargs; i++) { Py_VISIT(t->arg[i].cls); Py_VISIT(t->arg[i].dtype); }
    return 0;
}

static int table_clear(Table *t) {
    Py_CLEAR(t->dict); Py_CLEAR(t->dispatch); Py_CLEAR(t->launch); Py_CLEAR(t->fallback);
    Py_CLEAR(t->order); Py_CLEAR(t->readers); Py_CLEAR(t->strided); Py_CLEAR(t->failed);
    for (Py_ssize_t i = 0; i < t->nargs; i++) { Py_CLEAR(t->arg[i].cls); Py_CLEAR(t->arg[i].dtype); }
    return 0;
}

static void table_dealloc(Table *t) {
    PyObject_GC_UnTrack(t);
    table_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* Truth of `name` on `o`: 1, 0, or -1 (no error set: the fallback). */
static int attr_truth(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return -1; }
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (r < 0) { PyErr_Clear(); return -1; }
    return r;
}

/* `o` as a long long, 1 on success; 0 (no error set) otherwise. */
static int as_ll(PyObject *o, long long *out) {
    if (o == NULL || !PyLong_Check(o)) return 0;
    *out = PyLong_AsLongLong(o);
    if (*out == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

static int as_u64(PyObject *o, unsigned long long *out) {
    if (o == NULL || !PyLong_Check(o)) return 0;
    *out = PyLong_AsUnsignedLongLong(o);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* Attribute `name` of `o` is `want` (identity): 1, else 0 (no error set). */
static int attr_is(PyObject *o, PyObject *name, PyObject *want) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return 0; }
    int r = v == want;
    Py_DECREF(v);
    return r;
}

static PyObject *table_run(Table *t, PyObject *const *cfg, PyObject *const *args,
                           Py_ssize_t n, PyObject *tuple, PyObject *want);

/* A call this launcher does not take. Launches pass it on to the fallback; an attempt
   (`want` not NULL) to the next launcher of the chain, and past the last one it is
   refused: NotImplemented, nothing launched (the caller then takes its own general
   path, with its checks and errors). */
static PyObject *call_fallback(Table *t, PyObject *const *cfg, PyObject *const *args,
                               Py_ssize_t n, PyObject *tuple, PyObject *want) {
    if (want != NULL) {
        if (!t->chained) return Py_NewRef(Py_NotImplemented);
        if (Py_IS_TYPE(t->fallback, Py_TYPE(t)))
            return table_run((Table *)t->fallback, cfg, args, n, tuple, want);
    }
    PyObject *stack[6] = {cfg[0], cfg[1], cfg[2], cfg[3], tuple, want};
    size_t nstack = want != NULL ? 6 : 5;
    if (tuple != NULL) return PyObject_Vectorcall(t->fallback, stack, nstack, NULL);
    PyObject *made = PyTuple_New(n);
    if (made == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(args[i]); PyTuple_SET_ITEM(made, i, args[i]); }
    stack[4] = made;
    PyObject *r = PyObject_Vectorcall(t->fallback, stack, nstack, NULL);
    Py_DECREF(made);
    return r;
}

/* The launch: `cfg` is (grid, block, stream, shared_bytes); `tuple` the args tuple when
   the caller has one (else one is made for the fallback). `want` NULL launches (what
   this launcher refuses goes to its fallback); else it is an attempt: every array
   argument must also hold exactly `want` items, and a refused call comes back as
   NotImplemented (`call_fallback`). */
static PyObject *table_run(Table *t, PyObject *const *cfg, PyObject *const *args,
                           Py_ssize_t n, PyObject *tuple, PyObject *want) {
    /* stack[0] is left for the error code of a failed launch, [1..4] the configuration,
       then the parameter values. */
    PyObject *stack[5 + MAXP];
    PyObject *owned[3 * MAXA];
    int nowned = 0;
    unsigned long long ptrs[MAXA], bits = 0;
    long long lens[MAXA];
    int at[MAXA], narr = 0;
    Py_ssize_t k = 5;
    long long need = -1;
    if (want != NULL && !as_ll(want, &need)) goto slow;
    if (n != t->nargs) goto slow;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((PyObject *)Py_TYPE(args[i]) != t->arg[i].cls) goto slow;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = args[i], *p, *len;
        long long x;
        unsigned long long u;
        switch (t->arg[i].kind) {
        case K_SCALAR:
            stack[k++] = v;
            continue;
        case K_BUFFER: {
            PyObject *alloc = SLOT(v, off_alloc), *strides = SLOT(v, off_strides),
                     *shape = SLOT(v, off_shape);
            if (!as_ll(SLOT(v, off_ndim), &x) || x != 1) goto slow;
            if (SLOT(v, off_dtype) != t->arg[i].dtype) goto slow;
            if (strides == NULL || !PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) < 1
                || !as_ll(PyTuple_GET_ITEM(strides, 0), &x) || x != t->arg[i].itemsize)
                goto slow;
            /* Liveness: the allocation record every view shares. */
            if (alloc == NULL || alloc == Py_None) goto slow;
            if (Py_IS_TYPE(alloc, alloc_type)) {
                if (SLOT(alloc, off_closed) != Py_False) goto slow;
            } else if (attr_truth(alloc, s_closed) != 0) {
                goto slow;
            }
            p = SLOT(v, off_ptr);
            if (shape == NULL || !PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) < 1) goto slow;
            len = PyTuple_GET_ITEM(shape, 0);
            if (!as_u64(p, &u) || !as_ll(len, &x) || (need >= 0 && x != need)) goto slow;
            stack[k++] = p; stack[k++] = len; stack[k++] = v_one;
            break;
        }
        case K_CUPY:
        case K_CUPY_FIELDS: {
            if (!attr_is(v, s_dtype, t->arg[i].dtype)) goto slow;
            if (t->arg[i].kind == K_CUPY_FIELDS) {
                if (attr_truth(v, s_c_contiguous) != 1) goto slow;
                PyObject *nd = PyObject_GetAttr(v, s_ndim);
                int ok = as_ll(nd, &x) && x == 1;
                Py_XDECREF(nd);
                if (!ok) { PyErr_Clear(); goto slow; }
                len = PyObject_GetAttr(v, s_size);
                if (len == NULL) { PyErr_Clear(); goto slow; }
                owned[nowned++] = len;
            } else {
                PyObject *shape = PyObject_GetAttr(v, s_shape);
                if (shape == NULL) { PyErr_Clear(); goto slow; }
                owned[nowned++] = shape;
                if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != 1) goto slow;
                PyObject *strides = PyObject_GetAttr(v, s_strides);
                if (strides == NULL) { PyErr_Clear(); goto slow; }
                owned[nowned++] = strides;
                if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) < 1
                    || !as_ll(PyTuple_GET_ITEM(strides, 0), &x) || x != t->arg[i].itemsize)
                    goto slow;
                len = PyTuple_GET_ITEM(shape, 0);
            }
            /* empty: pointer 0, general path */
            if (!as_ll(len, &x) || x == 0 || (need >= 0 && x != need)) goto slow;
            PyObject *mem = PyObject_GetAttr(v, s_data);
            if (mem == NULL) { PyErr_Clear(); goto slow; }
            p = PyObject_GetAttr(mem, s_ptr);
            Py_DECREF(mem);
            if (p == NULL) { PyErr_Clear(); goto slow; }
            owned[nowned++] = p;
            if (!as_u64(p, &u)) goto slow;
            stack[k++] = p; stack[k++] = len; stack[k++] = v_one;
            break;
        }
        case K_TORCH: {
            if (!attr_is(v, s_dtype, t->arg[i].dtype)) goto slow;
            if (attr_truth(v, s_is_cuda) != 1 || attr_truth(v, s_requires_grad) != 0) goto slow;
            if (!attr_is(v, s_layout, t->strided)) goto slow;
            /* Rank and length from the shape (a torch.Size, a tuple): a getter, where
               ndim and numel() are two calls, numel() through PyTorch's argument parser. */
            PyObject *shape = PyObject_GetAttr(v, s_shape);
            if (shape == NULL) { PyErr_Clear(); goto slow; }
            owned[nowned++] = shape;
            if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != 1) goto slow;
            len = PyTuple_GET_ITEM(shape, 0);
            if (!as_ll(len, &x) || x == 0 || (need >= 0 && x != need)) goto slow;
            /* Unit stride: a non-empty 1-D tensor is contiguous exactly when its stride
               is 1 (or it holds one item, whose stride nothing reads). is_contiguous()
               takes no arguments: cheaper than stride(0) through the argument parser. */
            PyObject *dense = PyObject_CallMethodNoArgs(v, s_is_contiguous);
            if (dense != Py_True) {
                if (dense == NULL) PyErr_Clear(); else Py_DECREF(dense);
                goto slow;
            }
            Py_DECREF(dense);
            p = PyObject_CallMethodNoArgs(v, s_data_ptr);
            if (p == NULL) { PyErr_Clear(); goto slow; }
            owned[nowned++] = p;
            if (!as_u64(p, &u)) goto slow;
            stack[k++] = p; stack[k++] = len; stack[k++] = v_one;
            break;
        }
        default:
            goto slow;
        }
        ptrs[narr] = u; lens[narr] = x; at[narr] = (int)i; narr++;
        bits |= u;
    }
    if (bits & 15) goto slow;   /* the aligned variant only */
    for (int w = 0; w < narr; w++) {
        if (!t->arg[at[w]].written) continue;
        for (int o = 0; o < narr; o++) {
            if (o == w) continue;
            unsigned long long wend = ptrs[w] + (unsigned long long)lens[w] * t->arg[at[w]].itemsize;
            unsigned long long oend = ptrs[o] + (unsigned long long)lens[o] * t->arg[at[o]].itemsize;
            if (lens[w] && lens[o] && ptrs[w] < oend && ptrs[o] < wend) goto slow;
        }
    }
    /* The launch stream's raw handle where C reads it (None, an int, an open cupric
       Stream); for anything else the prepared launch resolves it (`resolved` 0). */
    PyObject *so = cfg[2];
    unsigned long long handle = 0;
    int resolved = 1;
    if (so == Py_None) {
        handle = 0;
    } else if (PyLong_CheckExact(so)) {
        resolved = as_u64(so, &handle);
    } else {
        resolved = stream_type != NULL && Py_IS_TYPE(so, stream_type)
            && SLOT(so, off_stream_closed) == Py_False
            && as_u64(SLOT(so, off_stream_ptr), &handle);
    }
    /* Last (every check above may still send the call to the general path): order the
       launch stream after CuPy's current stream where CUDA does not already. With the
       launch stream's handle known this is `needs_wait`'s first two rules (the same
       stream, 0 and 1 both naming the legacy one; two default streams); `order`
       decides the rest. */
    for (Py_ssize_t r = 0; r < PyTuple_GET_SIZE(t->readers); r++) {
        PyObject *entry = PyTuple_GET_ITEM(t->readers, r);
        PyObject *q = PyObject_CallNoArgs(PyTuple_GET_ITEM(entry, 0));
        if (q == NULL) goto fail;
        PyObject *attr = PyTuple_GET_ITEM(entry, 1);
        if (attr != Py_None) {
            PyObject *value = PyObject_GetAttr(q, attr);
            Py_DECREF(q);
            if (value == NULL) goto fail;
            q = value;
        }
        unsigned long long current;
        int ordered = 0;
        if (as_u64(q, &current)) {
            unsigned long long producer = current ? current : 1;
            unsigned long long consumer = handle ? handle : 1;
            ordered = resolved && (producer == consumer || (producer <= 2 && consumer <= 2));
        }
        if (!ordered) {
            PyObject *ostack[2] = {so, q};
            PyObject *res = PyObject_Vectorcall(t->order, ostack, 2, NULL);
            Py_DECREF(q);
            if (res == NULL) goto fail;
            Py_DECREF(res);
        } else {
            Py_DECREF(q);
        }
    }
    stack[1] = cfg[0]; stack[2] = cfg[1]; stack[3] = cfg[2]; stack[4] = cfg[3];
    if (t->call != NULL && resolved) {
        /* Pack and launch here; a value or configuration C does not take goes to the
           prepared launch below, a failed launch to `failed` (the typed errors). */
        unsigned int grid[3], block[3];
        char buf[DIRECT_BYTES] __attribute__((aligned(16)));
        void *argv[MAXP];
        long long shared = -1;
        int ok = get_dim3(cfg[0], grid) && get_dim3(cfg[1], block)
            && PyLong_CheckExact(cfg[3]) && as_ll(cfg[3], &shared)
            && shared >= 0 && shared <= UINT_MAX;
        for (Py_ssize_t j = 0; ok && j < t->nparams; j++) {
            if (t->param[j].raw)   /* the class was checked: its value, as it lies */
                memcpy(buf + t->param[j].off, (char *)stack[5 + j] + sizeof(PyObject),
                       (size_t)t->param[j].size);
            else
                ok = pack_value(t->param[j].code, t->param[j].size, stack[5 + j],
                                buf + t->param[j].off);
            argv[j] = buf + t->param[j].off;
        }
        if (ok) {
            int err;
            Py_BEGIN_ALLOW_THREADS
            err = t->call(t->func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                          (unsigned int)shared, (uintptr_t)handle,
                          t->nparams ? argv : NULL, NULL);
            Py_END_ALLOW_THREADS
            PyObject *res;
            if (err == 0) {
                res = Py_NewRef(Py_None);
            } else {
                stack[0] = PyLong_FromLong(err);
                res = stack[0] == NULL ? NULL
                    : PyObject_Vectorcall(t->failed, stack, (size_t)k, NULL);
                Py_XDECREF(stack[0]);
            }
            for (int j = 0; j < nowned; j++) Py_DECREF(owned[j]);
            return res;
        }
    }
    {
        PyObject *res = PyObject_Vectorcall(t->launch, stack + 1, (size_t)(k - 1), NULL);
        for (int j = 0; j < nowned; j++) Py_DECREF(owned[j]);
        return res;
    }
fail:
    for (int j = 0; j < nowned; j++) Py_DECREF(owned[j]);
    return NULL;
slow:
    for (int j = 0; j < nowned; j++) Py_DECREF(owned[j]);
    return call_fallback(t, cfg, args, n, tuple, want);
}

/* The launcher for this call's argument kind in the chain headed by `t`: the one its
   dispatch table names for the class of the probed argument, else `t` (new reference;
   NULL with an exception set on failure). */
static PyObject *dispatched(Table *t, PyObject *const *args, Py_ssize_t n) {
    PyObject *d = t->dispatch;
    if (d != NULL && PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 2
        && PyDict_Check(PyTuple_GET_ITEM(d, 1))) {
        Py_ssize_t probe = PyLong_AsSsize_t(PyTuple_GET_ITEM(d, 0));
        if (probe == -1 && PyErr_Occurred()) PyErr_Clear();
        else if (probe >= 0 && probe < n) {
            PyObject *pick = PyDict_GetItemWithError(PyTuple_GET_ITEM(d, 1),
                                                     (PyObject *)Py_TYPE(args[probe]));
            if (pick != NULL) return Py_NewRef(pick);
            if (PyErr_Occurred()) return NULL;
        }
    }
    return Py_NewRef((PyObject *)t);
}

/* launcher(grid, block, stream, shared_bytes, args[, items]): the generated launchers'
   call; with `items` (an int >= 0) an attempt (see table_run), which starts at the
   launcher of its kind where `t` heads a chain of several. */
static PyObject *table_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    Table *t = (Table *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || n < 5 || n > 6 || !PyTuple_Check(args[4])
        || (n == 6 && (!PyLong_CheckExact(args[5]) || PyLong_AsLongLong(args[5]) < 0))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "launcher(grid, block, stream, shared_bytes, args[, items >= 0])");
        return NULL;
    }
    PyObject *tuple = args[4];
    if (n == 5)
        return table_run(t, args, &PyTuple_GET_ITEM(tuple, 0), PyTuple_GET_SIZE(tuple),
                         tuple, NULL);
    PyObject *pick = dispatched(t, &PyTuple_GET_ITEM(tuple, 0), PyTuple_GET_SIZE(tuple));
    if (pick == NULL) return NULL;
    PyObject *r = Py_IS_TYPE(pick, Py_TYPE(t))
        ? table_run((Table *)pick, args, &PyTuple_GET_ITEM(tuple, 0),
                    PyTuple_GET_SIZE(tuple), tuple, args[5])
        : PyObject_Vectorcall(pick, args, 6, NULL);
    Py_DECREF(pick);
    return r;
}

static PyMemberDef table_members[] = {
    {"dispatch", T_OBJECT, offsetof(Table, dispatch), 0, "(probe, {class: launcher}) or None"},
    {"fallback", T_OBJECT, offsetof(Table, fallback), READONLY, "where refused calls go"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject TableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupric.compiler._fastcall.Launcher",
    .tp_basicsize = sizeof(Table),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a compiled kernel launcher for one signature and argument classes",
    .tp_dealloc = (destructor)table_dealloc,
    .tp_traverse = (traverseproc)table_traverse,
    .tp_clear = (inquiry)table_clear,
    .tp_vectorcall_offset = offsetof(Table, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_members = table_members,
    .tp_dictoffset = offsetof(Table, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
};
""" + FACTORIES
