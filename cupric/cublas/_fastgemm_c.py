"""The C source of the compiled GEMM path (`cupric.cublas._fastgemm` builds and loads it).

One plan per (operand layouts) key, held in a capsule on the handle: the classic
cuBLAS entry point and, for small float32 problems, a cuBLASLt plan; `matmul` and
`gemm` read cupric buffers, intake-read arrays or PyTorch tensors, check what the key
cannot, and call cuBLAS in one C call, or answer None for the Python path.
"""

from __future__ import annotations

from cupric.runtime.native import MODULE_INIT, SLOT_OFFSET

__all__ = ["FIELDS", "SOURCE"]

# The integer fields of a plan, in the order `make_plan` takes them.
FIELDS = ("dbl", "swap", "alias", "classic", "handle", "op1", "op2", "m", "n", "k", "ld1",
          "ld2", "ldc", "a_lo", "a_hi", "b_lo", "b_hi", "o_lo", "o_hi", "lt", "lt_handle",
          "desc", "la", "lb", "lc", "ld", "algo", "ws", "wsb", "stream", "align1", "align2",
          "align_o", "ex", "t_in", "t_out", "compute")

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* cublas<S|D>gemm_v2 and cublasLtMatmul, as declared in cublas_api.h / cublasLt.h
   (handles and descriptors are pointers, enums int). */
typedef int (*gemm_fn)(void *, int, int, int, int, int, const void *, const void *, int,
                       const void *, int, const void *, void *, int);
/* cublasGemmEx: the types of A/B and C (cudaDataType_t) and the compute type after each
   operand; float scalars (the plans made here compute in 32F). */
typedef int (*gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int,
                          int, const void *, int, int, const void *, void *, int, int, int,
                          int);
typedef int (*lt_fn)(void *, void *, const void *, const void *, void *, const void *,
                     void *, const void *, const void *, void *, void *, void *,
                     const void *, void *, size_t, void *);

#define NFIELDS 37
static const char FIELD_NAMES[] =
    "dbl swap alias classic handle op1 op2 m n k ld1 ld2 ldc a_lo a_hi b_lo b_hi o_lo o_hi "
    "lt lt_handle desc la lb lc ld algo ws wsb stream align1 align2 align_o "
    "ex t_in t_out compute";
static const char CAPSULE[] = "cupric.cublas.gemm_plan";

typedef struct {
    int dbl, swap, alias;
    gemm_fn classic;
    void *handle;
    int op1, op2, m, n, k, ld1, ld2, ldc;
    long long a_lo, a_hi, b_lo, b_hi, o_lo, o_hi;
    lt_fn lt;
    void *lt_handle, *desc, *la, *lb, *lc, *ld;
    const void *algo;
    void *ws;
    size_t wsb;
    void *stream;
    uintptr_t align1, align2, align_o;   /* alignment - 1 */
    int ex, t_in, t_out, compute;        /* ex: `classic` is cublasGemmEx */
    PyObject *keep;     /* what the addresses belong to (the cuBLASLt plan) */
    PyObject *shape;    /* allocating plans: the result's shape and dtype, else NULL */
    PyObject *dtype;
} Plan;

/* Types and slot offsets, set once by configure(). */
static int configured = 0;
static PyTypeObject *buffer_type, *alloc_type, *handle_type;
static PyObject *tls, *empty_fn, *check_fn, *lt_check_fn, *handle_name, *closed_name;
/* cupric.runtime.intake.ArrayInfo (any other array kind, read and checked by the intake
   layer): its ptr, shape, strides, dtype and readonly slots. */
static PyTypeObject *info_type;
static Py_ssize_t off_i_ptr, off_i_shape, off_i_strides, off_i_dtype, off_i_readonly;
static Py_ssize_t off_ptr, off_shape, off_strides, off_dtype, off_readonly, off_alloc,
    off_stream, off_alloc_closed, off_h_closed, off_h_scalars, off_h_multi, off_h_stream_obj,
    off_h_stream, off_h_plans;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))
#define IS_ARRAY(obj) (Py_IS_TYPE(obj, buffer_type) || Py_IS_TYPE(obj, info_type))

/* torch.Tensor (exactly) and torch.strided, set by watch_torch() once a PyTorch tensor
   made a plan; NULL before. Plans of PyTorch operands are also filed under a key read
   from the tensors themselves: ("torch", dtype, shape, stride()) per operand. */
static PyTypeObject *torch_type;
static PyObject *torch_strided, *torch_marker, *n_requires_grad, *n_is_cuda, *n_layout,
    *n_dtype, *n_shape, *n_stride, *n_data_ptr;
/* cupy.ndarray (exactly) and CuPy's current-stream function (None where CuPy's interface
   names no stream), set by watch_cupy(); keys ("cupy", dtype, shape, strides) per operand. */
static PyTypeObject *cupy_type;
static PyObject *cupy_stream_fn, *cupy_marker, *n_data, *n_ptr, *n_strides;

static void plan_free(PyObject *capsule) {
    Plan *p = (Plan *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL) { PyErr_Clear(); return; }
    Py_XDECREF(p->keep);
    Py_XDECREF(p->shape);
    Py_XDECREF(p->dtype);
    PyMem_Free(p);
}

/* make_plan(fields: tuple of NFIELDS ints, keep, shape or None, dtype or None) */
static PyObject *make_plan(PyObject *module, PyObject *args) {
    PyObject *fields, *keep, *shape, *dtype;
    if (!PyArg_ParseTuple(args, "O!OOO", &PyTuple_Type, &fields, &keep, &shape, &dtype))
        return NULL;
    if (PyTuple_GET_SIZE(fields) != NFIELDS) {
        PyErr_SetString(PyExc_ValueError, "make_plan: wrong number of fields");
        return NULL;
    }
    long long v[NFIELDS];
    for (int i = 0; i < NFIELDS; i++) {
        PyObject *item = PyTuple_GET_ITEM(fields, i);
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "make_plan: field %d is not an int", i);
            return NULL;
        }
        /* Addresses are unsigned; everything else fits a signed long long. */
        v[i] = (long long)PyLong_AsUnsignedLongLongMask(item);
        if (PyErr_Occurred()) return NULL;
    }
    for (int i = 5; i <= 12; i++) {   /* op1 .. ldc: C ints */
        if (v[i] < 0 || v[i] > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "make_plan: dimension out of int range");
            return NULL;
        }
    }
    Plan *p = (Plan *)PyMem_Calloc(1, sizeof(Plan));
    if (p == NULL) return PyErr_NoMemory();
    int i = 0;
    p->dbl = (int)v[i++]; p->swap = (int)v[i++]; p->alias = (int)v[i++];
    p->classic = (gemm_fn)(uintptr_t)v[i++];
    p->handle = (void *)(uintptr_t)v[i++];
    p->op1 = (int)v[i++]; p->op2 = (int)v[i++];
    p->m = (int)v[i++]; p->n = (int)v[i++]; p->k = (int)v[i++];
    p->ld1 = (int)v[i++]; p->ld2 = (int)v[i++]; p->ldc = (int)v[i++];
    p->a_lo = v[i++]; p->a_hi = v[i++]; p->b_lo = v[i++]; p->b_hi = v[i++];
    p->o_lo = v[i++]; p->o_hi = v[i++];
    p->lt = (lt_fn)(uintptr_t)v[i++];
    p->lt_handle = (void *)(uintptr_t)v[i++];
    p->desc = (void *)(uintptr_t)v[i++];
    p->la = (void *)(uintptr_t)v[i++]; p->lb = (void *)(uintptr_t)v[i++];
    p->lc = (void *)(uintptr_t)v[i++]; p->ld = (void *)(uintptr_t)v[i++];
    p->algo = (const void *)(uintptr_t)v[i++];
    p->ws = (void *)(uintptr_t)v[i++];
    p->wsb = (size_t)v[i++];
    p->stream = (void *)(uintptr_t)v[i++];
    p->align1 = (uintptr_t)v[i++] - 1; p->align2 = (uintptr_t)v[i++] - 1;
    p->align_o = (uintptr_t)v[i++] - 1;
    p->ex = (int)v[i++]; p->t_in = (int)v[i++]; p->t_out = (int)v[i++];
    p->compute = (int)v[i++];
    if (p->ex && (p->dbl || p->lt != NULL)) {
        PyMem_Free(p);
        PyErr_SetString(PyExc_ValueError, "make_plan: a GemmEx plan takes float scalars only");
        return NULL;
    }
    if (p->classic == NULL || (p->lt != NULL && (p->lt_handle == NULL || p->desc == NULL
                                                 || p->algo == NULL))) {
        PyMem_Free(p);
        PyErr_SetString(PyExc_ValueError, "make_plan: missing entry point or descriptor");
        return NULL;
    }
    Py_INCREF(keep); p->keep = keep;
    if (shape != Py_None) { Py_INCREF(shape); p->shape = shape; }
    if (dtype != Py_None) { Py_INCREF(dtype); p->dtype = dtype; }
    PyObject *capsule = PyCapsule_New(p, CAPSULE, plan_free);
    if (capsule == NULL) {
        Py_XDECREF(p->keep); Py_XDECREF(p->shape); Py_XDECREF(p->dtype);
        PyMem_Free(p);
    }
    return capsule;
}

/* info(capsule) -> dict: which routes a plan holds (for tests and diagnostics). */
static PyObject *plan_info(PyObject *module, PyObject *capsule) {
    Plan *p = (Plan *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL) return NULL;
    return Py_BuildValue("{s:O,s:O,s:i,s:i,s:i,s:i,s:i,s:i,s:O,s:n}",
                         "lt", p->lt ? Py_True : Py_False, "ex", p->ex ? Py_True : Py_False,
                         "m", p->m, "n", p->n, "k", p->k,
                         "op1", p->op1, "op2", p->op2, "swap", p->swap,
                         "allocating", p->shape ? Py_True : Py_False,
                         "workspace", (Py_ssize_t)p->wsb);
}

""" + SLOT_OFFSET + r"""

/* configure(DeviceBuffer, _Allocation, Handle, tls, empty, lib.check, lt.check,
             ArrayInfo) */
static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *bt, *at, *ht, *t, *e, *c, *lc, *it;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOOO!", &PyType_Type, &bt, &PyType_Type, &at,
                          &PyType_Type, &ht, &t, &e, &c, &lc, &PyType_Type, &it))
        return NULL;
    PyTypeObject *B = (PyTypeObject *)bt, *A = (PyTypeObject *)at, *H = (PyTypeObject *)ht;
    PyTypeObject *I = (PyTypeObject *)it;
    if (slot_offset(I, "ptr", &off_i_ptr) || slot_offset(I, "shape", &off_i_shape)
        || slot_offset(I, "strides", &off_i_strides) || slot_offset(I, "dtype", &off_i_dtype)
        || slot_offset(I, "readonly", &off_i_readonly))
        return NULL;
    if (slot_offset(B, "ptr", &off_ptr) || slot_offset(B, "shape", &off_shape)
        || slot_offset(B, "strides", &off_strides) || slot_offset(B, "dtype", &off_dtype)
        || slot_offset(B, "readonly", &off_readonly) || slot_offset(B, "_alloc", &off_alloc)
        || slot_offset(B, "_stream", &off_stream)
        || slot_offset(A, "_closed", &off_alloc_closed)
        || slot_offset(H, "_closed", &off_h_closed)
        || slot_offset(H, "_device_scalars", &off_h_scalars)
        || slot_offset(H, "_multi", &off_h_multi)
        || slot_offset(H, "_stream_obj", &off_h_stream_obj)
        || slot_offset(H, "_stream_ptr", &off_h_stream)
        || slot_offset(H, "_fast_plans", &off_h_plans))
        return NULL;
    if (handle_name == NULL) handle_name = PyUnicode_InternFromString("handle");
    if (closed_name == NULL) closed_name = PyUnicode_InternFromString("_closed");
    if (handle_name == NULL || closed_name == NULL) return NULL;
    Py_INCREF(bt); Py_INCREF(at); Py_INCREF(ht); Py_INCREF(t); Py_INCREF(e); Py_INCREF(c);
    Py_INCREF(lc); Py_INCREF(it);
    buffer_type = B; alloc_type = A; handle_type = H; info_type = I;
    tls = t; empty_fn = e; check_fn = c; lt_check_fn = lc;
    configured = 1;
    Py_RETURN_NONE;
}

/* The handle to use (new reference), or NULL (no error set) to take the Python path. */
static PyObject *usable_handle(PyObject *handle) {
    PyObject *h;
    if (handle == Py_None) {
        h = PyObject_GetAttr(tls, handle_name);
        if (h == NULL) { PyErr_Clear(); return NULL; }
    } else {
        Py_INCREF(handle);
        h = handle;
    }
    if (!Py_IS_TYPE(h, handle_type) || SLOT(h, off_h_closed) != Py_False
        || SLOT(h, off_h_scalars) != Py_False || SLOT(h, off_h_multi) != Py_False)
        goto no;
    PyObject *stream = SLOT(h, off_h_stream_obj);
    if (stream == NULL) goto no;
    if (stream != Py_None) {
        PyObject *closed = PyObject_GetAttr(stream, closed_name);
        if (closed == NULL) {
            PyErr_Clear();
        } else {
            int truth = PyObject_IsTrue(closed);
            Py_DECREF(closed);
            if (truth != 0) { PyErr_Clear(); goto no; }
        }
    }
    return h;
no:
    Py_DECREF(h);
    return NULL;
}

/* The device address of an open buffer (an ArrayInfo: its address, the intake layer
   checked the memory when it read it), or 0 (with *ok = 0) to take the Python path. */
static uintptr_t open_ptr(PyObject *buf, int *ok) {
    PyObject *ptr;
    if (Py_IS_TYPE(buf, info_type)) {
        ptr = SLOT(buf, off_i_ptr);
    } else {
        PyObject *alloc = SLOT(buf, off_alloc);
        if (alloc == NULL || !Py_IS_TYPE(alloc, alloc_type)
            || SLOT(alloc, off_alloc_closed) != Py_False) { *ok = 0; return 0; }
        ptr = SLOT(buf, off_ptr);
    }
    if (ptr == NULL || !PyLong_CheckExact(ptr)) { *ok = 0; return 0; }
    unsigned long long v = PyLong_AsUnsignedLongLong(ptr);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); *ok = 0; return 0; }
    return (uintptr_t)v;
}

/* A Python int or float as a double; 0 for anything else (the Python path decides). */
static int scalar(PyObject *v, double *out) {
    if (PyFloat_CheckExact(v)) { *out = PyFloat_AS_DOUBLE(v); return 1; }
    if (PyLong_CheckExact(v)) {
        double d = PyLong_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        *out = d;
        return 1;
    }
    return 0;
}

/* The key's items from a buffer: dtype, shape, strides (new references into key). */
static int put3(PyObject *key, Py_ssize_t at, PyObject *buf) {
    int info = Py_IS_TYPE(buf, info_type);
    PyObject *d = SLOT(buf, info ? off_i_dtype : off_dtype);
    PyObject *s = SLOT(buf, info ? off_i_shape : off_shape);
    PyObject *t = SLOT(buf, info ? off_i_strides : off_strides);
    if (d == NULL || s == NULL || t == NULL) return 0;
    Py_INCREF(d); Py_INCREF(s); Py_INCREF(t);
    PyTuple_SET_ITEM(key, at, d); PyTuple_SET_ITEM(key, at + 1, s);
    PyTuple_SET_ITEM(key, at + 2, t);
    return 1;
}

/* The plan of `key` on handle h, its capsule in *owner (a new reference: another thread
   may drop the plan from the handle while this call runs without the GIL), or NULL. */
static Plan *find_plan(PyObject *h, PyObject *key, PyObject **owner) {
    PyObject *plans = SLOT(h, off_h_plans);
    if (plans == NULL || !PyDict_CheckExact(plans)) return NULL;
    PyObject *capsule = PyDict_GetItemWithError(plans, key);   /* borrowed */
    if (capsule == NULL) { PyErr_Clear(); return NULL; }
    Plan *p = (Plan *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL) { PyErr_Clear(); return NULL; }
    Py_INCREF(capsule);
    *owner = capsule;
    return p;
}

static int overlaps(uintptr_t x, long long lo, long long hi, uintptr_t o, const Plan *p) {
    long long xs = (long long)x, os = (long long)o;
    return xs + lo < os + p->o_hi && os + p->o_lo < xs + hi;
}

/* watch_torch(torch.Tensor, torch.strided) */
static PyObject *watch_torch(PyObject *module, PyObject *args) {
    PyObject *t, *strided;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &t, &strided)) return NULL;
    if (torch_type == (PyTypeObject *)t && torch_strided == strided) Py_RETURN_NONE;
    static const char *names[] = {"requires_grad", "is_cuda", "layout", "dtype", "shape",
                                  "stride", "data_ptr", "torch"};
    PyObject **slots[] = {&n_requires_grad, &n_is_cuda, &n_layout, &n_dtype, &n_shape,
                          &n_stride, &n_data_ptr, &torch_marker};
    for (int i = 0; i < 8; i++) {
        if (*slots[i] == NULL && (*slots[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    }
    /* Replaced, never freed: a plan key may still hold the old one's objects. */
    Py_INCREF(t); Py_INCREF(strided);
    torch_strided = strided;
    torch_type = (PyTypeObject *)t;
    Py_RETURN_NONE;
}

/* watch_cupy(cupy.ndarray, current_stream or None) */
static PyObject *watch_cupy(PyObject *module, PyObject *args) {
    PyObject *t, *fn;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &t, &fn)) return NULL;
    if (cupy_type == (PyTypeObject *)t && cupy_stream_fn == fn) Py_RETURN_NONE;
    static const char *names[] = {"dtype", "shape", "data", "ptr", "strides", "cupy"};
    PyObject **slots[] = {&n_dtype, &n_shape, &n_data, &n_ptr, &n_strides, &cupy_marker};
    for (int i = 0; i < 6; i++) {
        if (*slots[i] == NULL && (*slots[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    }
    /* Replaced, never freed: a plan key may still hold the old one's objects. */
    Py_INCREF(t); Py_INCREF(fn);
    cupy_stream_fn = fn;
    cupy_type = (PyTypeObject *)t;
    Py_RETURN_NONE;
}

/* key[at], key[at + 1], key[at + 2] = a foreign array's dtype, shape and strides (the
   attribute `strides`, or with `stride_method` the method `stride()`): new references;
   0 with an error set on failure. */
static int put_layout(PyObject *t, PyObject *key, Py_ssize_t at, int stride_method) {
    PyObject *d = PyObject_GetAttr(t, n_dtype);
    if (d == NULL) return 0;
    PyTuple_SET_ITEM(key, at, d);
    PyObject *s = PyObject_GetAttr(t, n_shape);
    if (s == NULL) return 0;
    PyTuple_SET_ITEM(key, at + 1, s);
    PyObject *st = stride_method ? PyObject_CallMethodNoArgs(t, n_stride)
                                 : PyObject_GetAttr(t, n_strides);
    if (st == NULL) return 0;
    PyTuple_SET_ITEM(key, at + 2, st);
    return 1;
}

/* *ptr = the address int `p` (a new reference, released here; NULL: an error is set);
   0 with an error set when there is none. */
static int take_address(PyObject *p, uintptr_t *ptr) {
    if (p == NULL) return 0;
    unsigned long long a = PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    if (a == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *ptr = (uintptr_t)a;
    return 1;
}

/* A CuPy array's key items (dtype, shape, strides) and data pointer, as the intake
   layer's CuPy adapter reads them: 1, or 0 (no error set) for the Python path. */
static int cupy_read(PyObject *t, PyObject *key, Py_ssize_t at, uintptr_t *ptr) {
    if (!put_layout(t, key, at, 0)) goto no;
    PyObject *data = PyObject_GetAttr(t, n_data);
    if (data == NULL) goto no;
    PyObject *p = PyObject_GetAttr(data, n_ptr);
    Py_DECREF(data);
    if (!take_address(p, ptr)) goto no;
    return 1;
no:
    PyErr_Clear();
    return 0;
}

/* Whether work queued on handle h's stream is ordered after CuPy's current stream (the
   producer CuPy's interface names) without an event: the same stream, or CuPy's null
   stream (the legacy default) before the legacy default stream. 0: the Python path
   orders it. */
static int cupy_ordered(PyObject *h) {
    if (cupy_stream_fn == Py_None) return 1;   /* CuPy's interface names no stream */
    PyObject *r = PyObject_CallNoArgs(cupy_stream_fn);
    if (r == NULL) { PyErr_Clear(); return 0; }
    unsigned long long cur = PyLong_AsUnsignedLongLong(r);
    Py_DECREF(r);
    if (cur == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    PyObject *hs = SLOT(h, off_h_stream);
    if (hs == NULL || !PyLong_Check(hs)) return 0;
    unsigned long long mine = PyLong_AsUnsignedLongLong(hs);
    if (mine == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return cur == mine || ((cur == 0 || cur == 1) && mine <= 1);
}

/* A PyTorch tensor's key items (dtype, shape, stride(): new references into key at `at`)
   and data pointer, as the intake layer's PyTorch adapter reads them: 1, or 0 (no error
   set) where the tensor is outside its common case (autograd, host, sparse) and the
   Python path must read it. */
static int torch_read(PyObject *t, PyObject *key, Py_ssize_t at, uintptr_t *ptr) {
    PyObject *v = PyObject_GetAttr(t, n_requires_grad);
    if (v == NULL) goto no;
    int bad = v != Py_False;
    Py_DECREF(v);
    if (bad) return 0;
    v = PyObject_GetAttr(t, n_is_cuda);
    if (v == NULL) goto no;
    bad = v != Py_True;
    Py_DECREF(v);
    if (bad) return 0;
    v = PyObject_GetAttr(t, n_layout);
    if (v == NULL) goto no;
    bad = v != torch_strided;
    Py_DECREF(v);
    if (bad) return 0;
    if (!put_layout(t, key, at, 1)
        || !take_address(PyObject_CallMethodNoArgs(t, n_data_ptr), ptr))
        goto no;
    return 1;
no:
    PyErr_Clear();
    return 0;
}

/* The call itself; returns the cuBLAS status, *used_lt says which route ran. */
static int call(const Plan *p, uintptr_t p1, uintptr_t p2, uintptr_t po, double alpha,
                double beta, int *used_lt) {
    float fa = (float)alpha, fb = (float)beta;
    const void *pa = p->dbl ? (const void *)&alpha : (const void *)&fa;
    const void *pb = p->dbl ? (const void *)&beta : (const void *)&fb;
    int lt = p->lt != NULL && !(p1 & p->align1) && !(p2 & p->align2) && !(po & p->align_o);
    int status;
    *used_lt = lt;
    Py_BEGIN_ALLOW_THREADS
    if (lt)
        status = p->lt(p->lt_handle, p->desc, pa, (const void *)p1, p->la, (const void *)p2,
                       p->lb, pb, (const void *)po, p->lc, (void *)po, p->ld, p->algo, p->ws,
                       p->wsb, p->stream);
    else if (p->ex)   /* algo -1: CUBLAS_GEMM_DEFAULT, as the Python path passes */
        status = ((gemm_ex_fn)(void *)p->classic)(
            p->handle, p->op1, p->op2, p->m, p->n, p->k, pa, (const void *)p1, p->t_in,
            p->ld1, (const void *)p2, p->t_in, p->ld2, pb, (void *)po, p->t_out, p->ldc,
            p->compute, -1);
    else
        status = p->classic(p->handle, p->op1, p->op2, p->m, p->n, p->k, pa,
                            (const void *)p1, p->ld1, (const void *)p2, p->ld2, pb,
                            (void *)po, p->ldc);
    Py_END_ALLOW_THREADS
    return status;
}

static int raise_status(int status, int used_lt) {
    PyObject *r = PyObject_CallFunction(used_lt ? lt_check_fn : check_fn, "i", status);
    if (r == NULL) return -1;
    Py_DECREF(r);
    PyErr_Format(PyExc_RuntimeError, "cuBLAS status %d was not raised by check", status);
    return -1;
}

/* Runs plan p: 0, or -1 with the cuBLAS error raised (through the check of the route that
   ran). */
static int run(const Plan *p, uintptr_t p1, uintptr_t p2, uintptr_t po, double alpha,
               double beta) {
    int used_lt;
    int status = call(p, p1, p2, po, alpha, beta, &used_lt);
    return status ? raise_status(status, used_lt) : 0;
}

/* The end of a fast call: releases what it holds (the plan's capsule, the key, the
   handle) and returns `result` (a new reference; Py_None: take the Python path; NULL:
   the error set). */
static PyObject *settle(PyObject *result, PyObject *owner, PyObject *key, PyObject *h) {
    Py_XDECREF(owner);
    Py_DECREF(key);
    Py_DECREF(h);
    return result;
}

static void set_stream(PyObject *buf, PyObject *h) {
    if (!Py_IS_TYPE(buf, buffer_type)) return;   /* another library's array: its own */
    PyObject *stream = SLOT(h, off_h_stream);
    PyObject *old = SLOT(buf, off_stream);
    Py_XINCREF(stream);
    SLOT(buf, off_stream) = stream;
    Py_XDECREF(old);
}

/* matmul(a, b, out, alpha, beta, handle) -> out, or None for the Python path */
static PyObject *fast_matmul(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "matmul(a, b, out, alpha, beta, handle)");
        return NULL;
    }
    PyObject *a = args[0], *b = args[1], *out = args[2];
    if (!configured) Py_RETURN_NONE;
    /* PyTorch tensors or CuPy arrays (all three of one kind, or a and b with out None)
       are read here, as the intake layer's adapters read them; other kinds through the
       intake layer first. */
    int foreign = !IS_ARRAY(a) || !IS_ARRAY(b) || (out != Py_None && !IS_ARRAY(out));
    PyTypeObject *kind = Py_TYPE(a);
    if (foreign && ((kind != torch_type && kind != cupy_type)
                    || !Py_IS_TYPE(b, kind) || (out != Py_None && !Py_IS_TYPE(out, kind))))
        Py_RETURN_NONE;
    int (*read)(PyObject *, PyObject *, Py_ssize_t, uintptr_t *) =
        kind == torch_type ? torch_read : cupy_read;
    double alpha, beta;
    if (!scalar(args[3], &alpha) || !scalar(args[4], &beta)) Py_RETURN_NONE;
    PyObject *h = usable_handle(args[5]);
    if (h == NULL) Py_RETURN_NONE;
    PyObject *owner = NULL;
    Py_ssize_t first = foreign ? 1 : 0;
    PyObject *key = PyTuple_New(first + 9);
    if (key == NULL) { Py_DECREF(h); return NULL; }
    uintptr_t pa = 0, pb = 0, po = 0;
    if (foreign) {
        PyObject *marker = kind == torch_type ? torch_marker : cupy_marker;
        Py_INCREF(marker);
        PyTuple_SET_ITEM(key, 0, marker);
        if (!read(a, key, 1, &pa) || !read(b, key, 4, &pb)) goto python;
        if (out != Py_None && !read(out, key, 7, &po)) goto python;
    } else {
        if (!put3(key, 0, a) || !put3(key, 3, b)) goto python;
        if (out != Py_None && !put3(key, 6, out)) goto python;
    }
    if (out == Py_None) {
        for (Py_ssize_t i = first + 6; i < first + 9; i++) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(key, i, Py_None);
        }
    }
    Plan *p = find_plan(h, key, &owner);
    if (p == NULL || (out == Py_None) != (p->shape != NULL) || SLOT(h, off_h_stream) == NULL)
        goto python;
    if (foreign && kind == cupy_type && !cupy_ordered(h)) goto python;
    int ok = 1;
    if (!foreign) {
        pa = open_ptr(a, &ok);
        pb = open_ptr(b, &ok);
        if (!ok) goto python;
    }
    if (out == Py_None) {
        out = PyObject_CallFunctionObjArgs(empty_fn, p->shape, p->dtype, SLOT(h, off_h_stream),
                                           NULL);
        if (out == NULL) goto fail;
        if (!Py_IS_TYPE(out, buffer_type)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "empty() did not return a DeviceBuffer");
            goto fail;
        }
        po = open_ptr(out, &ok);
        if (!ok) { Py_DECREF(out); goto python; }
    } else {
        if (!foreign) {   /* PyTorch and CuPy never export an array read-only */
            if (SLOT(out, Py_IS_TYPE(out, info_type) ? off_i_readonly : off_readonly)
                != Py_False)
                goto python;
            po = open_ptr(out, &ok);
            if (!ok) goto python;
        }
        if (p->alias && p->o_lo != p->o_hi
            && (overlaps(pa, p->a_lo, p->a_hi, po, p) || overlaps(pb, p->b_lo, p->b_hi, po, p)))
            goto python;
        Py_INCREF(out);
    }
    if (p->swap ? run(p, pb, pa, po, alpha, beta) : run(p, pa, pb, po, alpha, beta)) {
        Py_DECREF(out);
        goto fail;
    }
    set_stream(out, h);
    return settle(out, owner, key, h);
python:
    Py_INCREF(Py_None);
    return settle(Py_None, owner, key, h);
fail:
    return settle(NULL, owner, key, h);
}

/* gemm(transa, transb, alpha, a, b, beta, c, handle) -> c, or None for the Python path */
static PyObject *fast_gemm(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "gemm(transa, transb, alpha, a, b, beta, c, handle)");
        return NULL;
    }
    PyObject *a = args[3], *b = args[4], *c = args[6];
    if (!configured || !Py_IS_TYPE(a, buffer_type) || !Py_IS_TYPE(b, buffer_type)
        || !Py_IS_TYPE(c, buffer_type))
        Py_RETURN_NONE;
    double alpha, beta;
    if (!scalar(args[2], &alpha) || !scalar(args[5], &beta)) Py_RETURN_NONE;
    PyObject *h = usable_handle(args[7]);
    if (h == NULL) Py_RETURN_NONE;
    PyObject *owner = NULL;
    PyObject *key = PyTuple_New(11);
    if (key == NULL) { Py_DECREF(h); return NULL; }
    Py_INCREF(args[0]); PyTuple_SET_ITEM(key, 0, args[0]);
    Py_INCREF(args[1]); PyTuple_SET_ITEM(key, 1, args[1]);
    if (!put3(key, 2, a) || !put3(key, 5, b) || !put3(key, 8, c)) goto python;
    Plan *p = find_plan(h, key, &owner);
    if (p == NULL || p->shape != NULL || SLOT(c, off_readonly) != Py_False) goto python;
    int ok = 1;
    uintptr_t pa = open_ptr(a, &ok), pb = open_ptr(b, &ok), pc = open_ptr(c, &ok);
    if (!ok) goto python;
    if (run(p, pa, pb, pc, alpha, beta)) goto fail;
    Py_INCREF(c);
    return settle(c, owner, key, h);
python:
    Py_INCREF(Py_None);
    return settle(Py_None, owner, key, h);
fail:
    return settle(NULL, owner, key, h);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "set the types and callables (once)"},
    {"make_plan", make_plan, METH_VARARGS, "a plan capsule from its fields"},
    {"plan_info", plan_info, METH_O, "the routes a plan holds"},
    {"watch_torch", watch_torch, METH_VARARGS, "read PyTorch tensors (torch.Tensor, strided)"},
    {"watch_cupy", watch_cupy, METH_VARARGS, "read CuPy arrays (cupy.ndarray, stream fn)"},
    {"matmul", (PyCFunction)(void (*)(void))fast_matmul, METH_FASTCALL,
     "matmul(a, b, out, alpha, beta, handle) -> out or None"},
    {"gemm", (PyCFunction)(void (*)(void))fast_gemm, METH_FASTCALL,
     "gemm(transa, transb, alpha, a, b, beta, c, handle) -> c or None"},
    {NULL, NULL, 0, NULL},
};

#define MODULE_READY module_ready
static int module_ready(PyObject *m) {
    return PyModule_AddStringConstant(m, "FIELDS", FIELD_NAMES);
}
""" + MODULE_INIT
