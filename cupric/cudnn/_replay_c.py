"""C source of the cuDNN replay extension (built by `cupric.cudnn._replay`), first half:
the entry points' types, configuration, and reading a call (its handle, each array of
every supported kind, the key). The entries and running them: `_replay_entries_c`.

Kept apart from the Python side so that its digest, which names the built file, changes
only when the C does.
"""

from cupric.runtime.native import SLOT_OFFSET

from ._replay_entries_c import ENTRIES

__all__ = ["SOURCE"]

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* Entry points, as declared in cudnn_graph.h / cudnn_ops.h / cudnn_cnn.h (handles and
   descriptors are pointers, enums int). */
typedef int (*create_fn)(int, void **);
typedef int (*set_fn)(void *, int, int, int64_t, const void *);
typedef int (*one_fn)(void *);
typedef int (*exec_fn)(void *, void *, void *);
typedef int (*p8_fn)(void *, void *, void *, void *, void *, void *, void *, void *);
typedef int (*p12_fn)(void *, void *, void *, void *, void *, void *, void *, void *, void *,
                      void *, void *, void *);
typedef int (*smf_fn)(void *, int, int, void *, void *, void *, void *, void *, void *);
typedef int (*smb_fn)(void *, int, int, void *, void *, void *, void *, void *, void *, void *,
                      void *);
typedef int (*bnt_fn)(void *, int, void *, void *, void *, void *, void *, void *, void *,
                      void *, void *, double, void *, void *, double, void *, void *);
typedef int (*bni_fn)(void *, int, void *, void *, void *, void *, void *, void *, void *,
                      void *, void *, void *, void *, double);
typedef int (*bnb_fn)(void *, int, void *, void *, void *, void *, void *, void *, void *,
                      void *, void *, void *, void *, void *, void *, void *, double, void *,
                      void *);
typedef int (*drop_fn)(void *, void *, void *, void *, void *, void *, void *, size_t);
typedef int (*p7_fn)(void *, void *, void *, void *, void *, void *, void *);
/* cudnnBatchNormalizationForwardTrainingEx / BackwardEx (persistent kernels). */
typedef int (*bntx_fn)(void *, int, int, void *, void *, void *, void *, void *, void *, void *,
                       void *, void *, void *, void *, double, void *, void *, double, void *,
                       void *, void *, void *, size_t, void *, size_t);
typedef int (*bnbx_fn)(void *, int, int, void *, void *, void *, void *, void *, void *, void *,
                       void *, void *, void *, void *, void *, void *, void *, void *, void *,
                       void *, void *, void *, double, void *, void *, void *, void *, size_t,
                       void *, size_t);
typedef int (*ctx_fn)(void **);   /* cuCtxGetCurrent */

enum { K_GRAPH = 0, K_P8, K_P12, K_SMF, K_SMB, K_BNT, K_BNI, K_BNB, K_DROP, K_P7, K_BNTX,
       K_BNBX, K_LAST };
static const int NARGS[K_LAST] = {0, 8, 12, 9, 11, 17, 14, 19, 8, 7, 25, 30};

#define MAXA 12      /* arrays per call (inputs + outputs) */
#define MAXARG 32
#define MAXUID 16
#define MAXGUARD 12
static const char CAPSULE[] = "cupric.cudnn.replay_entry";

typedef struct {
    int kind, n_in, n_out, nargs, nuid;
    void *fn, *handle;
    uint64_t args[MAXARG];
    int slot[MAXARG];              /* -1: constant, else the array whose pointer goes there */
    double dbl[2];
    void *plan;
    int64_t uids[MAXUID];
    int uid_slot[MAXUID];
    void *ws;
    PyObject *ws_obj;              /* the handle's workspace buffer the plan ran with */
    long long lo[MAXA], hi[MAXA];  /* byte extents relative to each pointer */
    unsigned alias_ok[MAXA];       /* outputs: bit i set = may coincide with input i */
    PyObject *alloc_shape[MAXA], *alloc_dtype[MAXA], *view_shape[MAXA], *view_strides[MAXA];
    int n_guard;
    PyObject *guard[MAXGUARD];     /* Resources whose _closed must be False */
    PyObject *keep;
    void *pack;                    /* last variant pack and what it was made with */
    void *pack_ptrs[MAXUID];
    void *pack_ws;
} Entry;

static int configured = 0;
static PyTypeObject *buffer_type, *alloc_type, *handle_type, *torch_type, *cupy_type;
static PyObject *tls, *empty_fn, *graph_check, *legacy_check, *torch_strided, *resolve_fn;
/* CuPy's current stream handle, asked once per call; None: its interface names no stream
   (CUPY_CUDA_ARRAY_INTERFACE_EXPORT_VERSION=2), as the intake's CuPy adapter reads it. */
static PyObject *cupy_stream_fn;
static Py_ssize_t off_ptr, off_shape, off_strides, off_dtype, off_readonly, off_alloc,
    off_stream, off_closed, off_alloc_closed, off_alloc_device, off_h_ptr, off_h_multi,
    off_h_stream, off_h_stream_obj, off_h_device, off_h_owned, off_h_replays, off_h_ctx,
    off_owned_ws;
static ctx_fn current_ctx;
static create_fn be_create;
static set_fn be_set;
static one_fn be_finalize, be_destroy;
static exec_fn be_execute;
static int E_PACK, A_UIDS, A_PTRS, A_WS, T_INT64, T_VOID_PTR;
static PyObject *s_handle, *s_closed, *s_is_cuda, *s_requires_grad, *s_layout, *s_dtype,
    *s_shape, *s_stride, *s_data_ptr, *s_get_device, *s_data, *s_ptr, *s_device_id,
    *s_strides;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static void entry_free(PyObject *capsule) {
    Entry *e = (Entry *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (e == NULL) { PyErr_Clear(); return; }
    if (e->pack != NULL && be_destroy != NULL) be_destroy(e->pack);
    Py_XDECREF(e->ws_obj);
    for (int i = 0; i < MAXA; i++) {
        Py_XDECREF(e->alloc_shape[i]); Py_XDECREF(e->alloc_dtype[i]);
        Py_XDECREF(e->view_shape[i]); Py_XDECREF(e->view_strides[i]);
    }
    for (int i = 0; i < e->n_guard; i++) Py_XDECREF(e->guard[i]);
    Py_XDECREF(e->keep);
    PyMem_Free(e);
}

""" + SLOT_OFFSET + r"""

static int as_u64(PyObject *o, uint64_t *out) {
    if (!PyLong_Check(o)) { PyErr_SetString(PyExc_TypeError, "expected an int"); return -1; }
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(o);
    return PyErr_Occurred() ? -1 : 0;
}

/* configure(DeviceBuffer, _Allocation, Resource, Handle, _Owned, tls, empty, graph_check,
             legacy_check, resolve, (create, set, finalize, destroy, execute),
             (VARIANT_PACK, UNIQUE_IDS, DATA_POINTERS, WORKSPACE, TYPE_INT64, TYPE_VOID_PTR),
             cuCtxGetCurrent or 0) */
static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *bt, *at, *rt, *ht, *ot, *t, *e, *gc, *lc, *rf, *fns, *enums, *cf;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OOOOOO!O!O", &PyType_Type, &bt, &PyType_Type, &at,
                          &PyType_Type, &rt, &PyType_Type, &ht, &PyType_Type, &ot, &t, &e,
                          &gc, &lc, &rf, &PyTuple_Type, &fns, &PyTuple_Type, &enums, &cf))
        return NULL;
    PyTypeObject *B = (PyTypeObject *)bt, *A = (PyTypeObject *)at, *R = (PyTypeObject *)rt,
        *H = (PyTypeObject *)ht, *O = (PyTypeObject *)ot;
    if (slot_offset(B, "ptr", &off_ptr) || slot_offset(B, "shape", &off_shape)
        || slot_offset(B, "strides", &off_strides) || slot_offset(B, "dtype", &off_dtype)
        || slot_offset(B, "readonly", &off_readonly) || slot_offset(B, "_alloc", &off_alloc)
        || slot_offset(B, "_stream", &off_stream)
        || slot_offset(R, "_closed", &off_closed)
        || slot_offset(A, "_closed", &off_alloc_closed)
        || slot_offset(A, "device", &off_alloc_device)
        || slot_offset(H, "_ctx", &off_h_ctx)
        || slot_offset(H, "_ptr", &off_h_ptr) || slot_offset(H, "_multi", &off_h_multi)
        || slot_offset(H, "_stream_ptr", &off_h_stream)
        || slot_offset(H, "_stream_obj", &off_h_stream_obj)
        || slot_offset(H, "_device", &off_h_device) || slot_offset(H, "_owned", &off_h_owned)
        || slot_offset(H, "_replays", &off_h_replays)
        || slot_offset(O, "workspace", &off_owned_ws))
        return NULL;
    if (PyTuple_GET_SIZE(fns) != 5 || PyTuple_GET_SIZE(enums) != 6) {
        PyErr_SetString(PyExc_ValueError, "configure: 5 entry points and 6 enums expected");
        return NULL;
    }
    uint64_t v[6];
    for (int i = 0; i < 5; i++) if (as_u64(PyTuple_GET_ITEM(fns, i), &v[i])) return NULL;
    be_create = (create_fn)(uintptr_t)v[0]; be_set = (set_fn)(uintptr_t)v[1];
    be_finalize = (one_fn)(uintptr_t)v[2]; be_destroy = (one_fn)(uintptr_t)v[3];
    be_execute = (exec_fn)(uintptr_t)v[4];
    for (int i = 0; i < 6; i++) if (as_u64(PyTuple_GET_ITEM(enums, i), &v[i])) return NULL;
    E_PACK = (int)v[0]; A_UIDS = (int)v[1]; A_PTRS = (int)v[2]; A_WS = (int)v[3];
    T_INT64 = (int)v[4]; T_VOID_PTR = (int)v[5];
    if (as_u64(cf, &v[0])) return NULL;
    current_ctx = (ctx_fn)(uintptr_t)v[0];
#define INTERN(var, text) if (var == NULL && (var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_handle, "handle"); INTERN(s_closed, "_closed"); INTERN(s_is_cuda, "is_cuda");
    INTERN(s_requires_grad, "requires_grad"); INTERN(s_layout, "layout");
    INTERN(s_dtype, "dtype"); INTERN(s_shape, "shape"); INTERN(s_stride, "stride");
    INTERN(s_data_ptr, "data_ptr"); INTERN(s_get_device, "get_device");
    INTERN(s_data, "data"); INTERN(s_ptr, "ptr"); INTERN(s_device_id, "device_id");
    INTERN(s_strides, "strides");
    Py_INCREF(bt); Py_INCREF(at); Py_INCREF(ht); Py_INCREF(t); Py_INCREF(e); Py_INCREF(gc);
    Py_INCREF(lc); Py_INCREF(rf);
    buffer_type = B; alloc_type = A; handle_type = H;
    tls = t; empty_fn = e; graph_check = gc; legacy_check = lc; resolve_fn = rf;
    configured = 1;
    Py_RETURN_NONE;
}

/* set_torch(torch.Tensor, torch.strided): PyTorch tensors are read directly from then on. */
static PyObject *set_torch(PyObject *module, PyObject *args) {
    PyObject *tt, *strided;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &tt, &strided)) return NULL;
    Py_INCREF(tt); Py_INCREF(strided);
    Py_XDECREF((PyObject *)torch_type); Py_XDECREF(torch_strided);
    torch_type = (PyTypeObject *)tt; torch_strided = strided;
    Py_RETURN_NONE;
}

/* set_cupy(cupy.ndarray, current_stream or None), or set_cupy(None, None) to forget:
   CuPy arrays are read directly from then on. */
static PyObject *set_cupy(PyObject *module, PyObject *args) {
    PyObject *ct, *fn;
    if (!PyArg_ParseTuple(args, "OO", &ct, &fn)) return NULL;
    if (ct != Py_None && !PyType_Check(ct)) {
        PyErr_SetString(PyExc_TypeError, "set_cupy: a type or None expected");
        return NULL;
    }
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_cupy: a callable or None expected");
        return NULL;
    }
    Py_XDECREF((PyObject *)cupy_type); Py_XDECREF(cupy_stream_fn);
    cupy_type = NULL; cupy_stream_fn = NULL;
    if (ct != Py_None) {
        Py_INCREF(ct); Py_INCREF(fn);
        cupy_type = (PyTypeObject *)ct; cupy_stream_fn = fn;
    }
    Py_RETURN_NONE;
}

/* The handle of a call (new reference), or NULL with no error set: the Python path. */
static PyObject *usable_handle(PyObject *handle, PyObject *stream) {
    PyObject *h;
    if (stream != Py_None) {
        /* The shared handle of that stream (or `handle`, checked to be on it), as the
           Python path resolves it; its errors are raised there. */
        h = PyObject_CallFunctionObjArgs(resolve_fn, handle, stream, NULL);
        if (h == NULL) { PyErr_Clear(); return NULL; }
    } else if (handle == Py_None) {
        h = PyObject_GetAttr(tls, s_handle);
        if (h == NULL) { PyErr_Clear(); return NULL; }
    } else {
        Py_INCREF(handle);
        h = handle;
    }
    if (!Py_IS_TYPE(h, handle_type) || SLOT(h, off_closed) != Py_False) {
        Py_DECREF(h);
        return NULL;
    }
    if (SLOT(h, off_h_multi) != Py_False) {
        /* Several GPUs: the handle's context must be current already (the Python path
           makes it so); its arrays are checked to live on its device (read_array). */
        void *cur = NULL;
        unsigned long long want = PyLong_AsUnsignedLongLongMask(SLOT(h, off_h_ctx));
        if (PyErr_Occurred()) PyErr_Clear();
        if (current_ctx == NULL || current_ctx(&cur) != 0 || cur == NULL
            || (uintptr_t)cur != (uintptr_t)want) {
            Py_DECREF(h);
            return NULL;
        }
    }
    PyObject *sobj = SLOT(h, off_h_stream_obj);
    if (sobj != NULL && sobj != Py_None) {
        PyObject *c = PyObject_GetAttr(sobj, s_closed);
        if (c == NULL) PyErr_Clear();
        int closed = c != NULL && c != Py_False;
        Py_XDECREF(c);
        if (closed) { Py_DECREF(h); return NULL; }
    }
    return h;
}

static int same_stream(PyObject *s, PyObject *h) {
    if (s == NULL || s == Py_None) return 1;
    if (s == SLOT(h, off_h_stream_obj)) return 1;
    if (!PyLong_Check(s)) return 0;
    unsigned long long a = PyLong_AsUnsignedLongLongMask(s);
    unsigned long long b = PyLong_AsUnsignedLongLongMask(SLOT(h, off_h_stream));
    if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (a == 0) a = 1;   /* 0 and 1 both name the legacy default stream */
    if (b == 0) b = 1;
    return a == b;
}

/* Read one array into key[at .. at+4] and *ptr. 1: done; 0: the Python path (no error).
   *cstream caches CuPy's current stream for the call (NULL until a CuPy array asks). */
static int read_array(PyObject *obj, PyObject *h, PyObject *key, Py_ssize_t at,
                      uintptr_t *ptr, int *readonly, PyObject **cstream) {
    PyObject *items[5] = {NULL, NULL, NULL, NULL, NULL};
    if (obj == Py_None) {
        *ptr = 0; *readonly = 0;
        for (int i = 0; i < 5; i++) { Py_INCREF(Py_None); PyTuple_SET_ITEM(key, at + i, Py_None); }
        return 1;
    }
    if (Py_IS_TYPE(obj, buffer_type)) {
        PyObject *alloc = SLOT(obj, off_alloc);
        if (alloc == NULL || SLOT(alloc, off_alloc_closed) != Py_False) return 0;
        if (!same_stream(SLOT(obj, off_stream), h)) return 0;
        /* With several GPUs the allocation must say it is on the handle's device (a
           borrow that cannot say, or peer memory, takes the Python path's check). */
        if (SLOT(h, off_h_multi) != Py_False
            && PyObject_RichCompareBool(SLOT(alloc, off_alloc_device), SLOT(h, off_h_device),
                                        Py_EQ) != 1) {
            PyErr_Clear();
            return 0;
        }
        PyObject *p = SLOT(obj, off_ptr);
        if (p == NULL || !PyLong_Check(p)) return 0;
        *ptr = (uintptr_t)PyLong_AsUnsignedLongLongMask(p);
        if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
        *readonly = SLOT(obj, off_readonly) != Py_False;
        items[1] = SLOT(obj, off_dtype); items[2] = SLOT(obj, off_shape);
        items[3] = SLOT(obj, off_strides);
        if (items[1] == NULL || items[2] == NULL || items[3] == NULL) return 0;
        Py_INCREF(items[1]); Py_INCREF(items[2]); Py_INCREF(items[3]);
    } else if (torch_type != NULL && Py_IS_TYPE(obj, torch_type)) {
        PyObject *v;
        int ok;
        /* Outside the common case (host, autograd or sparse tensors) the Python path
           raises its typed error. */
        v = PyObject_GetAttr(obj, s_is_cuda); ok = v == Py_True; Py_XDECREF(v);
        if (!ok) goto not_read;
        v = PyObject_GetAttr(obj, s_requires_grad); ok = v == Py_False; Py_XDECREF(v);
        if (!ok) goto not_read;
        v = PyObject_GetAttr(obj, s_layout); ok = v != NULL && v == torch_strided;
        Py_XDECREF(v);
        if (!ok) goto not_read;
        v = PyObject_CallMethodNoArgs(obj, s_get_device);
        ok = v != NULL && PyLong_Check(v)
             && PyObject_RichCompareBool(v, SLOT(h, off_h_device), Py_EQ) == 1;
        Py_XDECREF(v);
        if (!ok) goto not_read;
        v = PyObject_CallMethodNoArgs(obj, s_data_ptr);
        if (v == NULL || !PyLong_Check(v)) { Py_XDECREF(v); goto not_read; }
        *ptr = (uintptr_t)PyLong_AsUnsignedLongLongMask(v);
        Py_DECREF(v);
        *readonly = 0;
        items[1] = PyObject_GetAttr(obj, s_dtype);
        items[2] = PyObject_GetAttr(obj, s_shape);
        items[3] = PyObject_CallMethodNoArgs(obj, s_stride);
        if (items[1] == NULL || items[2] == NULL || items[3] == NULL || PyErr_Occurred()) {
            Py_XDECREF(items[1]); Py_XDECREF(items[2]); Py_XDECREF(items[3]);
            goto not_read;
        }
    } else if (cupy_type != NULL && Py_IS_TYPE(obj, cupy_type)) {
        /* What the intake's CuPy adapter reads (data.ptr, shape, byte strides, dtype,
           data.device_id). The memory must be on the handle's device, and CuPy's current
           stream, which its interface names as the producer's, must be the handle's:
           otherwise the Python path orders the two streams. */
        if (cupy_stream_fn != Py_None) {
            if (*cstream == NULL) {
                *cstream = PyObject_CallNoArgs(cupy_stream_fn);
                if (*cstream == NULL) goto not_read;
            }
            if (!same_stream(*cstream, h)) goto not_read;
        }
        PyObject *mem = PyObject_GetAttr(obj, s_data), *v;
        if (mem == NULL) goto not_read;
        v = PyObject_GetAttr(mem, s_device_id);
        int ok = v != NULL && PyLong_Check(v)
                 && PyObject_RichCompareBool(v, SLOT(h, off_h_device), Py_EQ) == 1;
        Py_XDECREF(v);
        if (!ok) { Py_DECREF(mem); goto not_read; }
        v = PyObject_GetAttr(mem, s_ptr);
        Py_DECREF(mem);
        if (v == NULL || !PyLong_Check(v)) { Py_XDECREF(v); goto not_read; }
        *ptr = (uintptr_t)PyLong_AsUnsignedLongLongMask(v);
        Py_DECREF(v);
        *readonly = 0;
        items[1] = PyObject_GetAttr(obj, s_dtype);
        items[2] = PyObject_GetAttr(obj, s_shape);
        items[3] = PyObject_GetAttr(obj, s_strides);
        if (items[1] == NULL || items[2] == NULL || items[3] == NULL || PyErr_Occurred()
            || !PyTuple_Check(items[2]) || !PyTuple_Check(items[3])) {
            Py_XDECREF(items[1]); Py_XDECREF(items[2]); Py_XDECREF(items[3]);
            goto not_read;
        }
    } else {
        return 0;
    }
    uintptr_t a = *ptr ? (*ptr & (~*ptr + 1)) : 16;
    if (a > 16) a = 16;
    items[4] = PyLong_FromUnsignedLong((unsigned long)a);
    if (items[4] == NULL) {
        PyErr_Clear();
        Py_DECREF(items[1]); Py_DECREF(items[2]); Py_DECREF(items[3]);
        return 0;
    }
    items[0] = (PyObject *)Py_TYPE(obj);
    Py_INCREF(items[0]);
    for (int i = 0; i < 5; i++) PyTuple_SET_ITEM(key, at + i, items[i]);
    return 1;
not_read:
    PyErr_Clear();
    return 0;
}

/* The key of a call (new reference) with each array's pointer, or NULL (no error). */
static PyObject *make_key(PyObject *head, PyObject *arrays, PyObject *outs, PyObject *h,
                          uintptr_t *ptrs, int *readonly, Py_ssize_t *n_in, Py_ssize_t *n_out) {
    if (!PyTuple_CheckExact(arrays) || !PyTuple_CheckExact(outs)) return NULL;
    Py_ssize_t ni = PyTuple_GET_SIZE(arrays), no = PyTuple_GET_SIZE(outs);
    if (ni + no > MAXA) return NULL;
    PyObject *key = PyTuple_New(1 + 5 * (ni + no));
    if (key == NULL) { PyErr_Clear(); return NULL; }
    Py_INCREF(head);
    PyTuple_SET_ITEM(key, 0, head);
    PyObject *cstream = NULL;
    for (Py_ssize_t i = 0; i < ni + no; i++) {
        PyObject *obj = i < ni ? PyTuple_GET_ITEM(arrays, i) : PyTuple_GET_ITEM(outs, i - ni);
        if (!read_array(obj, h, key, 1 + 5 * i, &ptrs[i], &readonly[i], &cstream)) {
            /* Unfilled items are NULL; a tuple deallocates those fine. */
            Py_XDECREF(cstream);
            Py_DECREF(key);
            return NULL;
        }
    }
    Py_XDECREF(cstream);
    *n_in = ni; *n_out = no;
    return key;
}

/* key_of(head, arrays, outs, handle) -> the key `run` looks up, or None */
static PyObject *key_of(PyObject *module, PyObject *args) {
    PyObject *head, *arrays, *outs, *handle;
    if (!PyArg_ParseTuple(args, "OOOO", &head, &arrays, &outs, &handle)) return NULL;
    if (!configured) Py_RETURN_NONE;
    PyObject *h = usable_handle(handle, Py_None);
    if (h == NULL) Py_RETURN_NONE;
    uintptr_t ptrs[MAXA];
    int ro[MAXA];
    Py_ssize_t ni, no;
    PyObject *key = make_key(head, arrays, outs, h, ptrs, ro, &ni, &no);
    Py_DECREF(h);
    if (key == NULL) Py_RETURN_NONE;
    return key;
}

""" + ENTRIES
