"""The C source of the compiled allocation path and its cache (`cupric.runtime._fastalloc`
builds and loads it; its docstring describes the functions). Kept apart so that each
module stays one concept: this one is the extension's text, that one its Python side.
"""

from __future__ import annotations

from . import _cext

__all__ = ["SOURCE"]

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*ctx_get_current_fn)(void **);
typedef int (*ctx_get_device_fn)(int *);
typedef int (*mem_alloc_fn)(unsigned long long *, size_t);
typedef int (*mem_alloc_async_fn)(unsigned long long *, size_t, void *);
typedef int (*mem_alloc_pool_fn)(unsigned long long *, size_t, void *, void *);
typedef int (*mem_free_fn)(unsigned long long);
typedef int (*mem_free_async_fn)(unsigned long long, void *);
typedef int (*stream_is_capturing_fn)(void *, int *);

#define NO_CONTEXT (-1)
#define NEED_PYTHON (-2)
#define OUT_OF_MEMORY 2      /* CUDA_ERROR_OUT_OF_MEMORY */
#define PER_THREAD_STREAM 2  /* CU_STREAM_PER_THREAD: another stream in each thread */
#define LARGEST_CLASS (((size_t)1) << 62)

/* Blocks of one size class freed on one stream of one context, ready to be handed out
   again on that stream. */
typedef struct {
    void *ctx;
    uintptr_t stream;
    size_t size;
    int device;
    int used;                 /* the table slot holds a bin */
    Py_ssize_t n, cap;
    unsigned long long *ptrs; /* malloc'd: never a Python allocation, so never a GC pass */
} Bin;

typedef struct {
    ctx_get_current_fn ctx_get_current;
    ctx_get_device_fn ctx_get_device;
    mem_alloc_fn mem_alloc;
    mem_alloc_async_fn mem_alloc_async;
    mem_alloc_pool_fn mem_alloc_pool;
    mem_free_fn mem_free;
    mem_free_async_fn mem_free_async;
    stream_is_capturing_fn stream_is_capturing;
    /* The cache: an open-addressing table of bins keyed by (context, stream, size). */
    Bin *bins;
    Py_ssize_t nbins, used_bins;   /* nbins: 0 or a power of two */
    int enabled;
    unsigned long long limit;      /* most bytes kept; 0: no limit */
    unsigned long long cached_bytes, cached_blocks, hits, misses;
} Entry;

static const char CAPSULE[] = "cupric.runtime.fastalloc";

static void entry_free(PyObject *capsule) {
    Entry *e = (Entry *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (e == NULL) { PyErr_Clear(); return; }
    /* Cached blocks still held are the driver's to reclaim with the context: the Python
       side releases them at exit (memory.release_cached), never from here. */
    for (Py_ssize_t i = 0; i < e->nbins; i++) free(e->bins[i].ptrs);
    free(e->bins);
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


""" + _cext.SLOT_OFFSET + r"""
/* ---- the cache ------------------------------------------------------------------------ */

/* Requests share a block when they round up to the same class: 512 bytes at least, then
   eight classes per power of two (at most 1/8 of a block unused). */
static size_t size_class(size_t n) {
    if (n <= 512) return 512;
    int top = 63 - __builtin_clzll((unsigned long long)(n - 1));
    size_t step = (size_t)1 << (top - 3 > 9 ? top - 3 : 9);
    return (n + step - 1) & ~(step - 1);
}

static size_t bin_hash(void *ctx, uintptr_t stream, size_t size) {
    uint64_t h = (uint64_t)(uintptr_t)ctx * 0x9E3779B97F4A7C15ULL;
    h ^= (uint64_t)stream * 0xC2B2AE3D27D4EB4FULL;
    h ^= (uint64_t)size * 0x165667B19E3779F9ULL;
    return (size_t)(h ^ (h >> 31));
}

static Bin *lookup(Entry *e, void *ctx, uintptr_t stream, size_t size) {
    if (e->nbins == 0) return NULL;
    size_t mask = (size_t)e->nbins - 1, i = bin_hash(ctx, stream, size) & mask;
    while (e->bins[i].used) {
        Bin *b = &e->bins[i];
        if (b->ctx == ctx && b->stream == stream && b->size == size) return b;
        i = (i + 1) & mask;
    }
    return NULL;
}

/* Double the table (or make its first 64 slots); 0 on success. Bins move, their
   blocks stay. */
static int grow(Entry *e) {
    Py_ssize_t n = e->nbins ? e->nbins * 2 : 64;
    Bin *bins = (Bin *)calloc((size_t)n, sizeof(Bin));
    if (bins == NULL) return -1;
    for (Py_ssize_t j = 0; j < e->nbins; j++) {
        Bin *old = &e->bins[j];
        if (!old->used) continue;
        size_t i = bin_hash(old->ctx, old->stream, old->size) & (size_t)(n - 1);
        while (bins[i].used) i = (i + 1) & (size_t)(n - 1);
        bins[i] = *old;
    }
    free(e->bins);
    e->bins = bins;
    e->nbins = n;
    return 0;
}

static Bin *lookup_or_add(Entry *e, void *ctx, uintptr_t stream, size_t size, int device) {
    Bin *b = lookup(e, ctx, stream, size);
    if (b != NULL) return b;
    if ((e->used_bins + 1) * 2 > e->nbins && grow(e) != 0) return NULL;
    size_t mask = (size_t)e->nbins - 1, i = bin_hash(ctx, stream, size) & mask;
    while (e->bins[i].used) i = (i + 1) & mask;
    b = &e->bins[i];
    b->ctx = ctx; b->stream = stream; b->size = size; b->device = device; b->used = 1;
    b->n = 0; b->cap = 0; b->ptrs = NULL;
    e->used_bins++;
    return b;
}

static PyObject *result4(int err, unsigned long long ptr, int device, void *ctx) {
    return Py_BuildValue("(iKiK)", err, ptr, device, (unsigned long long)(uintptr_t)ctx);
}

/* A block for `nbytes` on `stream`: one freed on that stream in the current context and
   of the request's size class, taken from the cache with no driver call but the capture
   query; else a new block of the class size from cuMemAllocAsync. `*ctx` (nonzero) says
   the block is the cache's, to be given back with put(). While `stream` is capturing (or
   cannot say), and on the per-thread stream, the cache is bypassed: exactly `nbytes` are
   allocated (a node of the graph being captured) and `*ctx` is NULL, for a plain free().
   Returns 0, a CUresult, NO_CONTEXT or NEED_PYTHON. */
static int get_block(Entry *e, size_t nbytes, uintptr_t stream, unsigned long long *ptr,
                     int *device, void **ctx) {
    *ptr = 0; *device = -1; *ctx = NULL;
    void *current = NULL;
    if (nbytes == 0 || e->ctx_get_current(&current) != 0) return NEED_PYTHON;
    if (current == NULL) return NO_CONTEXT;
    int cache = e->enabled && stream != PER_THREAD_STREAM && nbytes <= LARGEST_CLASS;
    if (cache) {
        int status = 0;
        if (e->stream_is_capturing((void *)stream, &status) != 0 || status != 0) cache = 0;
    }
    size_t size = cache ? size_class(nbytes) : nbytes;
    if (cache) {
        Bin *b = lookup(e, current, stream, size);
        if (b != NULL && b->n > 0) {
            *ptr = b->ptrs[--b->n];
            *device = b->device;
            *ctx = current;
            e->cached_bytes -= size;
            e->cached_blocks--;
            e->hits++;
            return 0;
        }
        e->misses++;
    }
    if (e->ctx_get_device(device) != 0 || *device < 0) return NEED_PYTHON;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = e->mem_alloc_async(ptr, size, (void *)stream);
    if (err == OUT_OF_MEMORY && size > nbytes) {
        /* The rounding may be what does not fit: the exact size, outside the cache. */
        err = e->mem_alloc_async(ptr, nbytes, (void *)stream);
        cache = 0;
    }
    Py_END_ALLOW_THREADS
    if (err != 0) { *ptr = 0; return err; }
    *ctx = cache ? current : NULL;
    return 0;
}

/* cached_alloc(nbytes, stream) -> (err, ptr, device, ctx): `get_block` */
static PyObject *py_cached_alloc(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "cached_alloc(nbytes, stream)"); return NULL; }
    size_t nbytes;
    uintptr_t stream;
    if (!as_size(args[0], &nbytes) || !as_handle(args[1], &stream))
        return result4(NEED_PYTHON, 0, -1, NULL);
    unsigned long long ptr;
    int device;
    void *ctx;
    int err = get_block(e, nbytes, stream, &ptr, &device, &ctx);
    return result4(err, ptr, device, ctx);
}

/* What `configure` hands over for `block`: the owner type every DeviceBuffer holds, the
   offsets of its slots, the table of live releases and the two release functions. */
static PyTypeObject *alloc_type, *buffer_type;
static PyObject *live, *free_cached, *free_async, *async_kind, *label_format;
static Py_ssize_t off_ptr, off_handle, off_nbytes, off_device, off_owner, off_closed,
    off_finalizer, off_kind;
static Py_ssize_t b_alloc, b_ptr, b_shape, b_strides, b_dtype, b_itemsize, b_size, b_nbytes,
    b_ndim, b_readonly, b_stream, b_base;

#define SET_SLOT(obj, off, value) (*(PyObject **)((char *)(obj) + (off)) = (value))

/* configure(Allocation type, live table, release of a cached block, release of another
   stream-ordered block, the ASYNC kind, the label format, DeviceBuffer type) */
static PyObject *py_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])
        || !PyCallable_Check(args[2]) || !PyCallable_Check(args[3]) || !PyType_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "configure(Allocation, live, free_cached, free_async, "
                        "kind, label, DeviceBuffer)");
        return NULL;
    }
    PyTypeObject *A = (PyTypeObject *)args[0], *B = (PyTypeObject *)args[6];
    if (slot_offset(A, "ptr", &off_ptr) || slot_offset(A, "_handle", &off_handle)
        || slot_offset(A, "nbytes", &off_nbytes) || slot_offset(A, "device", &off_device)
        || slot_offset(A, "owner", &off_owner) || slot_offset(A, "_closed", &off_closed)
        || slot_offset(A, "_finalizer", &off_finalizer) || slot_offset(A, "kind", &off_kind)
        || slot_offset(B, "_alloc", &b_alloc) || slot_offset(B, "ptr", &b_ptr)
        || slot_offset(B, "shape", &b_shape) || slot_offset(B, "strides", &b_strides)
        || slot_offset(B, "dtype", &b_dtype) || slot_offset(B, "itemsize", &b_itemsize)
        || slot_offset(B, "size", &b_size) || slot_offset(B, "nbytes", &b_nbytes)
        || slot_offset(B, "ndim", &b_ndim) || slot_offset(B, "readonly", &b_readonly)
        || slot_offset(B, "_stream", &b_stream) || slot_offset(B, "_base", &b_base))
        return NULL;
    PyObject *old[7] = {(PyObject *)alloc_type, live, free_cached, free_async, async_kind,
                        label_format, (PyObject *)buffer_type};
    for (int i = 0; i < 7; i++) Py_INCREF(args[i]);
    alloc_type = A; live = args[1]; free_cached = args[2]; free_async = args[3];
    async_kind = args[4]; label_format = args[5]; buffer_type = B;
    for (int i = 0; i < 7; i++) Py_XDECREF(old[i]);
    Py_RETURN_NONE;
}

/* block(nbytes, stream, handle) -> a new Allocation owning a block for `nbytes` on the
   stream (`stream` as given, `handle` its int handle), its release entered in the live
   table, or the int error of `get_block` (nothing allocated then). The whole of
   memory._allocate_cached's hot path, in one call. */
static PyObject *make_block(Entry *e, PyObject *const *args) {
    if (alloc_type == NULL) { PyErr_SetString(PyExc_RuntimeError, "block: configure() first"); return NULL; }
    size_t nbytes;
    uintptr_t stream;
    if (!as_size(args[0], &nbytes) || !as_handle(args[2], &stream))
        return PyLong_FromLong(NEED_PYTHON);
    unsigned long long ptr;
    int device;
    void *ctx;
    int err = get_block(e, nbytes, stream, &ptr, &device, &ctx);
    if (err != 0) return PyLong_FromLong(err);
    /* From here the block is ours: every failure hands it back before raising. */
    PyObject *obj = alloc_type->tp_alloc(alloc_type, 0);
    PyObject *p = PyLong_FromUnsignedLongLong(ptr), *dev = PyLong_FromLong(device);
    PyObject *key = obj == NULL ? NULL : PyLong_FromVoidPtr(obj);
    PyObject *release_args = NULL, *label = NULL, *entry = NULL;
    if (obj == NULL || p == NULL || dev == NULL || key == NULL) goto fail;
    if (ctx != NULL) {
        PyObject *c = PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)ctx);
        if (c == NULL) goto fail;
        release_args = PyTuple_Pack(5, args[1], args[2], args[0], c, dev);
        Py_DECREF(c);
    } else {
        release_args = PyTuple_Pack(2, args[1], dev);
    }
    label = PyTuple_Pack(3, label_format, async_kind, args[0]);
    if (release_args == NULL || label == NULL) goto fail;
    entry = PyTuple_Pack(4, ctx != NULL ? free_cached : free_async, p, release_args, label);
    if (entry == NULL || PyDict_SetItem(live, key, entry) != 0) goto fail;
    Py_DECREF(release_args); Py_DECREF(label); Py_DECREF(entry); Py_DECREF(key);
    Py_INCREF(p); SET_SLOT(obj, off_ptr, p);
    SET_SLOT(obj, off_handle, p);                       /* the reference made above */
    Py_INCREF(args[0]); SET_SLOT(obj, off_nbytes, args[0]);
    SET_SLOT(obj, off_device, dev);
    Py_INCREF(Py_None); SET_SLOT(obj, off_owner, Py_None);
    Py_INCREF(Py_False); SET_SLOT(obj, off_closed, Py_False);
    Py_INCREF(Py_True); SET_SLOT(obj, off_finalizer, Py_True);   /* owns its memory */
    Py_INCREF(async_kind); SET_SLOT(obj, off_kind, async_kind);
    return obj;
fail:
    {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (key != NULL && PyDict_DelItem(live, key) != 0) PyErr_Clear();
        Py_XDECREF(entry); Py_XDECREF(label); Py_XDECREF(release_args); Py_XDECREF(key);
        Py_XDECREF(p); Py_XDECREF(dev);
        /* An object with empty slots and no live entry: its __del__ finds nothing. */
        Py_XDECREF(obj);
        int kept = 0;
        if (ctx != NULL) {
            size_t size = size_class(nbytes);
            Bin *b = lookup(e, ctx, stream, size);
            if (b != NULL && b->n < b->cap) {
                b->ptrs[b->n++] = ptr;
                e->cached_bytes += size;
                e->cached_blocks++;
                kept = 1;
            }
        }
        if (!kept) e->mem_free_async(ptr, (void *)stream);  /* the context it came from */
        PyErr_Restore(type, value, tb);
        return NULL;
    }
}

static PyObject *py_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "block(nbytes, stream, handle)"); return NULL; }
    return make_block(e, args);
}

/* buffer(layout, stream, handle) -> a new C-contiguous DeviceBuffer over a new block (see
   `block`), its slots filled from `layout` (memory._layout's tuple: shape, strides,
   dtype, itemsize, size, nbytes, ndim, ...), or the int error of `get_block`. The whole of
   memory._new_buffer's stream-ordered path, in one call. */
static PyObject *py_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "buffer(layout, stream, handle)"); return NULL; }
    PyObject *layout = args[0];
    if (buffer_type == NULL || !PyTuple_CheckExact(layout) || PyTuple_GET_SIZE(layout) < 7)
        return PyLong_FromLong(NEED_PYTHON);
    PyObject *block_args[3] = {PyTuple_GET_ITEM(layout, 5), args[1], args[2]};
    PyObject *alloc = make_block(e, block_args);
    if (alloc == NULL || !Py_IS_TYPE(alloc, alloc_type)) return alloc;
    PyObject *buf = buffer_type->tp_alloc(buffer_type, 0);
    if (buf == NULL) { Py_DECREF(alloc); return NULL; }  /* its finalizer frees the block */
    PyObject *p = *(PyObject **)((char *)alloc + off_ptr);
    Py_INCREF(p); SET_SLOT(buf, b_ptr, p);
    SET_SLOT(buf, b_alloc, alloc);                       /* the reference made above */
    const Py_ssize_t *offs[7] = {&b_shape, &b_strides, &b_dtype, &b_itemsize, &b_size,
                                 &b_nbytes, &b_ndim};
    for (int i = 0; i < 7; i++) {
        PyObject *item = PyTuple_GET_ITEM(layout, i);
        Py_INCREF(item);
        SET_SLOT(buf, *offs[i], item);
    }
    Py_INCREF(Py_False); SET_SLOT(buf, b_readonly, Py_False);
    Py_INCREF(args[1]); SET_SLOT(buf, b_stream, args[1]);
    Py_INCREF(Py_None); SET_SLOT(buf, b_base, Py_None);
    return buf;
}

/* put(ptr, nbytes, stream, ctx, device) -> 1 when the cache took the block, else 0 (the
   cache is off or full, or `ctx` is 0): then free it as usual. Never calls the driver,
   so the garbage collector's frees may call it. */
static PyObject *py_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "put(ptr, nbytes, stream, ctx, device)"); return NULL; }
    uintptr_t ptr, stream, ctx;
    size_t nbytes;
    if (!as_handle(args[0], &ptr) || !as_size(args[1], &nbytes) || !as_handle(args[2], &stream)
        || !as_handle(args[3], &ctx) || !PyLong_CheckExact(args[4]))
        Py_RETURN_FALSE;
    long device = PyLong_AsLong(args[4]);
    if (device == -1 && PyErr_Occurred()) { PyErr_Clear(); Py_RETURN_FALSE; }
    if (!e->enabled || ctx == 0 || ptr == 0 || nbytes == 0 || nbytes > LARGEST_CLASS
        || stream == PER_THREAD_STREAM)
        Py_RETURN_FALSE;
    size_t size = size_class(nbytes);
    if (e->limit && e->cached_bytes + size > e->limit) Py_RETURN_FALSE;
    Bin *b = lookup_or_add(e, (void *)ctx, stream, size, (int)device);
    if (b == NULL) Py_RETURN_FALSE;
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 8;
        unsigned long long *ptrs = (unsigned long long *)realloc(b->ptrs, (size_t)cap * sizeof(*ptrs));
        if (ptrs == NULL) Py_RETURN_FALSE;
        b->ptrs = ptrs;
        b->cap = cap;
    }
    b->ptrs[b->n++] = (unsigned long long)ptr;
    e->cached_bytes += size;
    e->cached_blocks++;
    Py_RETURN_TRUE;
}

/* Empty the bins of `device` (-1: every device) and, with `by_stream`, of `stream`; with
   `out`, write (ptr, stream, device, size) there for each block (room for every cached
   block). Returns how many blocks were taken. */
static Py_ssize_t empty_bins(Entry *e, long device, int by_stream, uintptr_t stream,
                             unsigned long long *out) {
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < e->nbins; i++) {
        Bin *b = &e->bins[i];
        if (!b->used || b->n == 0) continue;
        if (device >= 0 && b->device != device) continue;
        if (by_stream && b->stream != stream) continue;
        for (Py_ssize_t j = 0; j < b->n; j++, k++) {
            if (out == NULL) continue;
            out[4 * k] = b->ptrs[j];
            out[4 * k + 1] = (unsigned long long)b->stream;
            out[4 * k + 2] = (unsigned long long)(long long)b->device;
            out[4 * k + 3] = (unsigned long long)b->size;
        }
        e->cached_bytes -= (unsigned long long)b->n * b->size;
        e->cached_blocks -= (unsigned long long)b->n;
        b->n = 0;
    }
    return k;
}

/* take(device, stream) -> [(ptr, stream, device, size), ...]: the cached blocks of
   `device` (-1: every device) and of `stream` (None: every stream), removed from the
   cache for the caller to free. */
static PyObject *py_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "take(device, stream)"); return NULL; }
    long device = PyLong_AsLong(args[0]);
    if (device == -1 && PyErr_Occurred()) return NULL;
    uintptr_t stream = 0;
    int by_stream = args[1] != Py_None;
    if (by_stream && !as_handle(args[1], &stream)) {
        PyErr_SetString(PyExc_TypeError, "take: the stream is None or an int handle");
        return NULL;
    }
    /* First out of the bins into C memory, then into Python objects: making those may
       run a garbage collection whose frees put() blocks back meanwhile. */
    unsigned long long *out = NULL;
    Py_ssize_t k = 0;
    if (e->cached_blocks) {
        out = (unsigned long long *)malloc((size_t)e->cached_blocks * 4 * sizeof(*out));
        if (out == NULL) return PyErr_NoMemory();
        k = empty_bins(e, device, by_stream, stream, out);
    }
    PyObject *list = PyList_New(k);
    for (Py_ssize_t j = 0; list != NULL && j < k; j++) {
        PyObject *item = Py_BuildValue("(KKiK)", out[4 * j], out[4 * j + 1],
                                       (int)(long long)out[4 * j + 2], out[4 * j + 3]);
        if (item == NULL) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, j, item);
    }
    free(out);
    return list;
}

/* forget(device) -> how many blocks were dropped: the device's context is gone (reset
   or lost), and its memory with it; nothing is freed. */
static PyObject *py_forget(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 1) { PyErr_SetString(PyExc_TypeError, "forget(device)"); return NULL; }
    long device = PyLong_AsLong(args[0]);
    if (device == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromSsize_t(empty_bins(e, device, 0, 0, NULL));
}

/* cache(enabled or None, limit or None) -> (enabled, limit, cached_bytes, cached_blocks,
   hits, misses); the arguments that are not None set the switch and the limit first. */
static PyObject *py_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Entry *e = (Entry *)PyCapsule_GetPointer(self, CAPSULE);
    if (e == NULL) return NULL;
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "cache(enabled, limit)"); return NULL; }
    if (args[0] != Py_None) {
        int on = PyObject_IsTrue(args[0]);
        if (on < 0) return NULL;
        e->enabled = on;
    }
    if (args[1] != Py_None) {
        unsigned long long limit = PyLong_AsUnsignedLongLong(args[1]);
        if (limit == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
        e->limit = limit;
    }
    return Py_BuildValue("(iKKKKK)", e->enabled, e->limit, e->cached_bytes, e->cached_blocks,
                         e->hits, e->misses);
}

static PyMethodDef device_def = {"device", (PyCFunction)(void (*)(void))py_device,
                                 METH_FASTCALL, "device() -> ordinal, NO_CONTEXT or NEED_PYTHON"};
static PyMethodDef alloc_def = {"alloc", (PyCFunction)(void (*)(void))py_alloc,
                                METH_FASTCALL, "alloc(nbytes, stream, pool) -> (err, ptr, device)"};
static PyMethodDef free_def = {"free", (PyCFunction)(void (*)(void))py_free,
                               METH_FASTCALL, "free(ptr, stream, device) -> err"};
static PyMethodDef cached_alloc_def = {"cached_alloc", (PyCFunction)(void (*)(void))py_cached_alloc,
                                       METH_FASTCALL, "cached_alloc(nbytes, stream) -> (err, ptr, device, ctx)"};
static PyMethodDef put_def = {"put", (PyCFunction)(void (*)(void))py_put, METH_FASTCALL,
                              "put(ptr, nbytes, stream, ctx, device) -> bool"};
static PyMethodDef take_def = {"take", (PyCFunction)(void (*)(void))py_take, METH_FASTCALL,
                               "take(device, stream) -> [(ptr, stream, device, size)]"};
static PyMethodDef forget_def = {"forget", (PyCFunction)(void (*)(void))py_forget, METH_FASTCALL,
                                 "forget(device) -> blocks dropped"};
static PyMethodDef cache_def = {"cache", (PyCFunction)(void (*)(void))py_cache, METH_FASTCALL,
                                "cache(enabled, limit) -> (enabled, limit, bytes, blocks, hits, misses)"};
static PyMethodDef block_def = {"block", (PyCFunction)(void (*)(void))py_block, METH_FASTCALL,
                                "block(nbytes, stream, handle) -> Allocation or error code"};
static PyMethodDef buffer_def = {"buffer", (PyCFunction)(void (*)(void))py_buffer, METH_FASTCALL,
                                 "buffer(layout, stream, handle) -> DeviceBuffer or error code"};

#define NFUNCS 10
static PyMethodDef *const FUNCS[NFUNCS] = {&device_def, &alloc_def, &free_def, &cached_alloc_def,
                                           &put_def, &take_def, &forget_def, &cache_def,
                                           &block_def, &buffer_def};
#define NSYMBOLS 8

/* make(*addresses in SYMBOLS order) -> the functions of FUNCS, bound to those addresses
   and to one cache (on, with no limit, until cache() says otherwise) */
static PyObject *py_make(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    uintptr_t a[NSYMBOLS];
    if (nargs != NSYMBOLS) { PyErr_Format(PyExc_TypeError, "make takes %d addresses", NSYMBOLS); return NULL; }
    for (int i = 0; i < NSYMBOLS; i++) {
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
    e->stream_is_capturing = (stream_is_capturing_fn)a[7];
    e->enabled = 1;
    PyObject *capsule = PyCapsule_New(e, CAPSULE, entry_free);
    if (capsule == NULL) { PyMem_Free(e); return NULL; }
    PyObject *r = PyTuple_New(NFUNCS);
    for (int i = 0; r != NULL && i < NFUNCS; i++) {
        PyObject *f = PyCFunction_NewEx(FUNCS[i], capsule, NULL);
        if (f == NULL) { Py_CLEAR(r); break; }
        PyTuple_SET_ITEM(r, i, f);
    }
    Py_DECREF(capsule);
    return r;
}

static PyMethodDef methods[] = {
    {"make", (PyCFunction)(void (*)(void))py_make, METH_FASTCALL,
     "make(*addresses) -> (device, alloc, free, cached_alloc, put, take, forget, cache, block, buffer)"},
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_FASTCALL,
     "configure(Allocation, live, free_cached, free_async, kind, label, DeviceBuffer)"},
    {NULL, NULL, 0, NULL},
};

""" + _cext.MODULE_INIT
