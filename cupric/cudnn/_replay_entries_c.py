"""C source of the cuDNN replay extension, second half: entries (what a checked call
recorded: plan or legacy entry point, argument slots, extents, allocations, guards) and
`run`, which replays one, with the module's method table. Appended to `_replay_c`'s.
"""

from cupric.runtime.native import MODULE_INIT

__all__ = ["ENTRIES"]

ENTRIES = r"""
static int seq_u64(PyObject *seq, uint64_t *out, int max, int *n) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) > max) {
        PyErr_SetString(PyExc_ValueError, "make_entry: a tuple is too long");
        return -1;
    }
    *n = (int)PyTuple_GET_SIZE(seq);
    for (int i = 0; i < *n; i++) if (as_u64(PyTuple_GET_ITEM(seq, i), &out[i])) return -1;
    return 0;
}

/* make_entry(kind, fn, handle, args, slots, dbls, plan, uids, uid_slots, ws_obj, ws,
              n_in, spans, alias_ok, allocs, guards, keep) */
static PyObject *make_entry(PyObject *module, PyObject *args) {
    int kind, n_in;
    PyObject *fn, *hp, *a, *sl, *dbls, *plan, *uids, *uslots, *ws_obj, *ws, *spans, *alias,
        *allocs, *guards, *keep;
    if (!PyArg_ParseTuple(args, "iOOOOOOOOOOiOOOOO", &kind, &fn, &hp, &a, &sl, &dbls, &plan,
                          &uids, &uslots, &ws_obj, &ws, &n_in, &spans, &alias, &allocs,
                          &guards, &keep))
        return NULL;
    if (kind < 0 || kind >= K_LAST) {
        PyErr_SetString(PyExc_ValueError, "make_entry: unknown kind");
        return NULL;
    }
    Entry *e = (Entry *)PyMem_Calloc(1, sizeof(Entry));
    if (e == NULL) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(e, CAPSULE, entry_free);
    if (capsule == NULL) { PyMem_Free(e); return NULL; }
    uint64_t tmp[MAXARG > MAXUID ? MAXARG : MAXUID];
    int n, n2;
    e->kind = kind;
    if (as_u64(fn, &tmp[0])) goto fail;
    e->fn = (void *)(uintptr_t)tmp[0];
    if (as_u64(hp, &tmp[0])) goto fail;
    e->handle = (void *)(uintptr_t)tmp[0];
    if (seq_u64(a, e->args, MAXARG, &e->nargs)) goto fail;
    if (seq_u64(sl, tmp, MAXARG, &n)) goto fail;
    if (n != e->nargs || (kind != K_GRAPH && e->nargs != NARGS[kind])) {
        PyErr_SetString(PyExc_ValueError, "make_entry: wrong number of arguments");
        goto fail;
    }
    for (int i = 0; i < n; i++) e->slot[i] = (int)(int64_t)tmp[i];
    if (!PyTuple_Check(dbls) || PyTuple_GET_SIZE(dbls) > 2) {
        PyErr_SetString(PyExc_ValueError, "make_entry: at most 2 doubles");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dbls); i++) {
        e->dbl[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(dbls, i));
        if (PyErr_Occurred()) goto fail;
    }
    if (as_u64(plan, &tmp[0])) goto fail;
    e->plan = (void *)(uintptr_t)tmp[0];
    if (seq_u64(uids, (uint64_t *)e->uids, MAXUID, &e->nuid)) goto fail;
    if (seq_u64(uslots, tmp, MAXUID, &n2)) goto fail;
    if (n2 != e->nuid) {
        PyErr_SetString(PyExc_ValueError, "make_entry: uids and slots differ in length");
        goto fail;
    }
    for (int i = 0; i < n2; i++) e->uid_slot[i] = (int)(int64_t)tmp[i];
    if (ws_obj != Py_None) { Py_INCREF(ws_obj); e->ws_obj = ws_obj; }
    if (as_u64(ws, &tmp[0])) goto fail;
    e->ws = (void *)(uintptr_t)tmp[0];
    e->n_in = n_in;
    if (!PyTuple_Check(spans) || PyTuple_GET_SIZE(spans) > MAXA
        || !PyTuple_Check(alias) || !PyTuple_Check(allocs) || !PyTuple_Check(guards)
        || PyTuple_GET_SIZE(guards) > MAXGUARD) {
        PyErr_SetString(PyExc_ValueError, "make_entry: bad spans, aliases, allocs or guards");
        goto fail;
    }
    int na = (int)PyTuple_GET_SIZE(spans);
    e->n_out = na - n_in;
    if (e->n_out < 0 || PyTuple_GET_SIZE(allocs) != e->n_out
        || PyTuple_GET_SIZE(alias) != e->n_out) {
        PyErr_SetString(PyExc_ValueError, "make_entry: spans, aliases and allocs differ");
        goto fail;
    }
    for (int i = 0; i < na; i++) {
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spans, i), "LL", &e->lo[i], &e->hi[i]))
            goto fail;
    }
    for (int j = 0; j < e->n_out; j++) {
        e->alias_ok[n_in + j] = (unsigned)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(alias, j));
        if (PyErr_Occurred()) goto fail;
        PyObject *spec = PyTuple_GET_ITEM(allocs, j);
        if (spec == Py_None) continue;
        PyObject *shp, *dt, *vs, *vt;
        if (!PyArg_ParseTuple(spec, "OOOO", &shp, &dt, &vs, &vt)) goto fail;
        Py_INCREF(shp); e->alloc_shape[n_in + j] = shp;
        Py_INCREF(dt); e->alloc_dtype[n_in + j] = dt;
        if (vs != Py_None) {
            Py_INCREF(vs); e->view_shape[n_in + j] = vs;
            Py_INCREF(vt); e->view_strides[n_in + j] = vt;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(guards); i++) {
        PyObject *g = PyTuple_GET_ITEM(guards, i);
        Py_INCREF(g);
        e->guard[e->n_guard++] = g;
    }
    Py_INCREF(keep); e->keep = keep;
    return capsule;
fail:
    Py_DECREF(capsule);
    return NULL;
}

static int overlaps(uintptr_t x, long long xlo, long long xhi, uintptr_t y, long long ylo,
                    long long yhi) {
    long long xs = (long long)x, ys = (long long)y;
    return xs + xlo < ys + yhi && ys + ylo < xs + xhi;
}

static int raise_status(PyObject *check, int status, int graph) {
    PyObject *r = graph ? PyObject_CallFunction(check, "is", status, "cudnnBackendExecute")
                        : PyObject_CallFunction(check, "i", status);
    if (r == NULL) return -1;
    Py_DECREF(r);
    PyErr_Format(PyExc_RuntimeError, "cuDNN status %d was not raised by check", status);
    return -1;
}

static int run_graph(Entry *e, void *handle, uintptr_t *ptrs) {
    void *data[MAXUID];
    for (int i = 0; i < e->nuid; i++) data[i] = (void *)ptrs[e->uid_slot[i]];
    int status = 0;
    if (e->pack == NULL || e->pack_ws != e->ws
        || memcmp(e->pack_ptrs, data, sizeof(void *) * e->nuid) != 0) {
        void *pack = NULL;
        status = be_create(E_PACK, &pack);
        if (status) return status;
        void *ws = e->ws;
        if (!(status = be_set(pack, A_UIDS, T_INT64, e->nuid, e->uids))
            && !(status = be_set(pack, A_PTRS, T_VOID_PTR, e->nuid, data))
            && !(status = be_set(pack, A_WS, T_VOID_PTR, 1, &ws)))
            status = be_finalize(pack);
        if (status) { be_destroy(pack); return status; }
        if (e->pack != NULL) be_destroy(e->pack);
        e->pack = pack;
        memcpy(e->pack_ptrs, data, sizeof(void *) * e->nuid);
        e->pack_ws = e->ws;
    }
    return be_execute(handle, e->plan, e->pack);
}

#define A(i) ((void *)(uintptr_t)v[i])
static int run_legacy(Entry *e, uintptr_t *ptrs) {
    uint64_t v[MAXARG];
    for (int i = 0; i < e->nargs; i++) v[i] = e->slot[i] < 0 ? e->args[i] : ptrs[e->slot[i]];
    switch (e->kind) {
    case K_P8:
        return ((p8_fn)e->fn)(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7));
    case K_P12:
        return ((p12_fn)e->fn)(A(0), A(1), A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                               A(10), A(11));
    case K_SMF:
        return ((smf_fn)e->fn)(A(0), (int)v[1], (int)v[2], A(3), A(4), A(5), A(6), A(7), A(8));
    case K_SMB:
        return ((smb_fn)e->fn)(A(0), (int)v[1], (int)v[2], A(3), A(4), A(5), A(6), A(7), A(8),
                               A(9), A(10));
    case K_BNT:
        return ((bnt_fn)e->fn)(A(0), (int)v[1], A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                               A(10), e->dbl[0], A(12), A(13), e->dbl[1], A(15), A(16));
    case K_BNI:
        return ((bni_fn)e->fn)(A(0), (int)v[1], A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                               A(10), A(11), A(12), e->dbl[0]);
    case K_BNB:
        return ((bnb_fn)e->fn)(A(0), (int)v[1], A(2), A(3), A(4), A(5), A(6), A(7), A(8), A(9),
                               A(10), A(11), A(12), A(13), A(14), A(15), e->dbl[0], A(17),
                               A(18));
    case K_DROP:
        return ((drop_fn)e->fn)(A(0), A(1), A(2), A(3), A(4), A(5), A(6), (size_t)v[7]);
    case K_P7:
        return ((p7_fn)e->fn)(A(0), A(1), A(2), A(3), A(4), A(5), A(6));
    case K_BNTX:
        return ((bntx_fn)e->fn)(A(0), (int)v[1], (int)v[2], A(3), A(4), A(5), A(6), A(7), A(8),
                                A(9), A(10), A(11), A(12), A(13), e->dbl[0], A(15), A(16),
                                e->dbl[1], A(18), A(19), A(20), A(21), (size_t)v[22], A(23),
                                (size_t)v[24]);
    case K_BNBX:
        return ((bnbx_fn)e->fn)(A(0), (int)v[1], (int)v[2], A(3), A(4), A(5), A(6), A(7), A(8),
                                A(9), A(10), A(11), A(12), A(13), A(14), A(15), A(16), A(17),
                                A(18), A(19), A(20), A(21), e->dbl[0], A(23), A(24), A(25),
                                A(26), (size_t)v[27], A(28), (size_t)v[29]);
    }
    return -1;
}
#undef A

/* run(head, arrays, outs, handle, stream) -> tuple of the outputs, or None for the Python
   path. The handle's slot of `args` (index 0 of every legacy call) is always the entry's
   handle. */
static PyObject *run(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "run(head, arrays, outs, handle, stream)");
        return NULL;
    }
    if (!configured) Py_RETURN_NONE;
    PyObject *h = usable_handle(args[3], args[4]);
    if (h == NULL) Py_RETURN_NONE;
    uintptr_t ptrs[MAXA];
    int ro[MAXA];
    Py_ssize_t ni, no;
    PyObject *made[MAXA] = {NULL};
    PyObject *result = NULL, *capsule = NULL;
    PyObject *key = make_key(args[0], args[1], args[2], h, ptrs, ro, &ni, &no);
    if (key == NULL) goto python;
    PyObject *table = SLOT(h, off_h_replays);
    if (table == NULL || !PyDict_CheckExact(table)) goto python;
    capsule = PyDict_GetItemWithError(table, key);  /* borrowed; hashing may fail */
    if (capsule == NULL) { PyErr_Clear(); goto python; }
    Py_INCREF(capsule);
    Entry *e = (Entry *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (e == NULL) { PyErr_Clear(); goto python; }
    if (e->n_in != ni || e->n_out != no) goto python;
    for (int i = 0; i < e->n_guard; i++)
        if (SLOT(e->guard[i], off_closed) != Py_False) goto python;
    if (e->ws_obj != NULL) {
        PyObject *owned = SLOT(h, off_h_owned);
        if (owned == NULL || SLOT(owned, off_owned_ws) != e->ws_obj) goto python;
        PyObject *alloc = SLOT(e->ws_obj, off_alloc);
        if (alloc == NULL || SLOT(alloc, off_alloc_closed) != Py_False) goto python;
    }
    /* Outputs given: writable, and overlapping no other array (an exact alias where
       the operation runs in place). */
    for (Py_ssize_t j = ni; j < ni + no; j++) {
        if (PyTuple_GET_ITEM(args[2], j - ni) == Py_None) continue;
        if (ro[j]) goto python;
        for (Py_ssize_t i = 0; i < ni + no; i++) {
            if (i == j || !ptrs[i] || !ptrs[j]) continue;
            if (!overlaps(ptrs[i], e->lo[i], e->hi[i], ptrs[j], e->lo[j], e->hi[j])) continue;
            if (i < ni && (e->alias_ok[j] >> i) & 1u && ptrs[i] == ptrs[j]
                && e->lo[i] == e->lo[j] && e->hi[i] == e->hi[j]
                && PyObject_RichCompareBool(PyTuple_GET_ITEM(key, 4 + 5 * i),
                                            PyTuple_GET_ITEM(key, 4 + 5 * j), Py_EQ) == 1)
                continue;
            PyErr_Clear();
            goto python;
        }
    }
    PyObject *hs = SLOT(h, off_h_stream);
    for (Py_ssize_t j = ni; j < ni + no; j++) {
        if (PyTuple_GET_ITEM(args[2], j - ni) != Py_None || e->alloc_shape[j] == NULL) continue;
        PyObject *buf = PyObject_CallFunctionObjArgs(empty_fn, e->alloc_shape[j],
                                                     e->alloc_dtype[j], hs, NULL);
        if (buf == NULL) goto fail;
        made[j] = buf;
        if (!Py_IS_TYPE(buf, buffer_type)) {
            PyErr_SetString(PyExc_TypeError, "empty() did not return a DeviceBuffer");
            goto fail;
        }
        if (e->view_shape[j] != NULL) {
            /* The fresh buffer seen through the caller's layout (NHWC): same bytes. */
            PyObject *old_shape = SLOT(buf, off_shape), *old_strides = SLOT(buf, off_strides);
            Py_INCREF(e->view_shape[j]); Py_INCREF(e->view_strides[j]);
            SLOT(buf, off_shape) = e->view_shape[j];
            SLOT(buf, off_strides) = e->view_strides[j];
            Py_XDECREF(old_shape); Py_XDECREF(old_strides);
        }
        PyObject *p = SLOT(buf, off_ptr);
        ptrs[j] = (uintptr_t)PyLong_AsUnsignedLongLongMask(p);
        if (PyErr_Occurred()) goto fail;
        /* Pool blocks are aligned far beyond the 16 bytes the plan assumed. */
        if (ptrs[j] % 16) goto python;
    }
    int status = e->kind == K_GRAPH ? run_graph(e, e->handle, ptrs) : run_legacy(e, ptrs);
    if (status) {
        raise_status(e->kind == K_GRAPH ? graph_check : legacy_check, status,
                     e->kind == K_GRAPH);
        goto fail;
    }
    result = PyTuple_New(no);
    if (result == NULL) goto fail;
    for (Py_ssize_t j = 0; j < no; j++) {
        PyObject *o = made[ni + j];
        if (o == NULL) { o = PyTuple_GET_ITEM(args[2], j); Py_INCREF(o); }
        else made[ni + j] = NULL;
        PyTuple_SET_ITEM(result, j, o);
    }
    goto done;
python:
    Py_INCREF(Py_None);
    result = Py_None;
    goto done;
fail:
    result = NULL;
done:
    for (int j = 0; j < MAXA; j++) Py_XDECREF(made[j]);
    Py_XDECREF(capsule);
    Py_XDECREF(key);
    Py_DECREF(h);
    return result;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "set the types, callables and entry points"},
    {"set_torch", set_torch, METH_VARARGS, "read torch.Tensor directly"},
    {"set_cupy", set_cupy, METH_VARARGS, "read cupy.ndarray directly"},
    {"key_of", key_of, METH_VARARGS, "the key of a call, or None"},
    {"make_entry", make_entry, METH_VARARGS, "an entry capsule"},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(head, arrays, outs, handle, stream) -> outputs or None"},
    {NULL, NULL, 0, NULL},
};

""" + MODULE_INIT

