/*
 * runner_step.c — mstar_c's step side of the graph runner: _StepRunner (one per device: the
 * backend, the compute stream, the step runner and the reference resources a model's steps use,
 * a paged KV cache and positions), _Step (a step declaration) and _GraphPool (a node's graph
 * pool). graphs.py wraps them under the reference's names (StepRunner, SubmoduleStep, ...).
 *
 * The resources are created and owned here and destroyed after the step runner, so no Python
 * object can outlive what it points into: plan buffers go out as capsules holding the
 * _StepRunner.
 */
#include "runner.h"

#include <stdlib.h>
#include <string.h>

PyTypeObject *mstarpy_step_runner_type;
PyTypeObject *mstarpy_step_type;
PyTypeObject *mstarpy_pool_type;

/* ---- keys, leases, capsules ------------------------------------------------------------------ */

static PyObject *str_or_none(const char *s)
{
    if (s == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

PyObject *mstarpy_key_to_py(const mstar_bucket_key *key)
{
    PyObject *k = str_or_none(key->cg_key_info);
    if (!k)
        return NULL;
    PyObject *t =
        Py_BuildValue("(sLLN)", key->graph_walk, (long long)key->bs, (long long)key->num_tokens, k);
    return t;
}

PyObject *mstarpy_lease_to_py(const mstar_slot_lease *lease)
{
    PyObject *k = str_or_none(lease->bucket.cg_key_info);
    if (!k)
        return NULL;
    return Py_BuildValue("(isLLN)", (int)lease->slot, lease->bucket.graph_walk,
                         (long long)lease->bucket.bs, (long long)lease->bucket.num_tokens, k);
}

static int opt_str(PyObject *o, const char **out)
{
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    *out = PyUnicode_AsUTF8AndSize(o, NULL);
    return *out ? 0 : -1;
}

static int key_fields(PyObject *obj, Py_ssize_t first, mstar_bucket_key *out)
{
    PyObject *walk = PySequence_GetItem(obj, first);
    PyObject *bs = PySequence_GetItem(obj, first + 1);
    PyObject *tok = PySequence_GetItem(obj, first + 2);
    PyObject *key = PySequence_GetItem(obj, first + 3);
    int r = (walk && bs && tok && key) ? 0 : -1;
    /* The strings stay valid while `obj` holds its items (the caller holds obj). */
    if (r == 0)
        r = (out->graph_walk = PyUnicode_AsUTF8AndSize(walk, NULL)) ? 0 : -1;
    if (r == 0)
        r = mstarpy_i64_from_py(bs, &out->bs, "bs");
    if (r == 0)
        r = mstarpy_i64_from_py(tok, &out->num_tokens, "num_tokens");
    if (r == 0)
        r = opt_str(key, &out->cg_key_info);
    Py_XDECREF(walk);
    Py_XDECREF(bs);
    Py_XDECREF(tok);
    Py_XDECREF(key);
    return r;
}

int mstarpy_key_from_py(PyObject *obj, mstar_bucket_key *out)
{
    if (!PyTuple_Check(obj) || PyTuple_Size(obj) != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "a bucket key is a tuple (graph_walk, bs, num_tokens, cg_key_info)");
        return -1;
    }
    return key_fields(obj, 0, out);
}

int mstarpy_lease_from_py(PyObject *obj, mstar_slot_lease *out)
{
    Py_ssize_t n = PyTuple_Check(obj) ? PyTuple_Size(obj) : -1;
    PyObject *key = n == 2 ? PyTuple_GetItem(obj, 1) : NULL; /* borrowed */
    if (n != 5 && !(key && PyTuple_Check(key) && PyTuple_Size(key) == 4)) {
        PyErr_SetString(PyExc_TypeError, "a lease is a SlotLease (slot, BucketKey) or a tuple "
                                         "(slot, graph_walk, bs, num_tokens, cg_key_info)");
        return -1;
    }
    long slot = PyLong_AsLong(PyTuple_GetItem(obj, 0));
    if (slot == -1 && PyErr_Occurred())
        return -1;
    out->slot = (int32_t)slot;
    return n == 5 ? key_fields(obj, 1, &out->bucket) : key_fields(key, 0, &out->bucket);
}

/* graphs.py's SlotLease and BucketKey (named tuples), once registered: a lease goes out as one,
 * made by tuple.__new__ (C), not by the named tuple's own __new__ (Python), so that leasing a
 * slot runs no Python frame. */
static struct {
    PyObject *lease_type, *key_type, *tuple_new;
} lease_types;

static PyObject *py_register_lease_types(PyObject *mod, PyObject *args)
{
    PyObject *lt, *kt;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &lt, &PyType_Type, &kt))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)lt, &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)kt, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the lease and key types must be tuple types");
        return NULL;
    }
    PyObject *tn = PyObject_GetAttrString((PyObject *)&PyTuple_Type, "__new__");
    if (!tn)
        return NULL;
    Py_XDECREF(lease_types.lease_type);
    Py_XDECREF(lease_types.key_type);
    Py_XDECREF(lease_types.tuple_new);
    lease_types.lease_type = Py_NewRef(lt);
    lease_types.key_type = Py_NewRef(kt);
    lease_types.tuple_new = tn;
    Py_RETURN_NONE;
}

PyMethodDef mstarpy_lease_functions[] = {
    { "_register_lease_types", py_register_lease_types, METH_VARARGS,
      "_register_lease_types(SlotLease, BucketKey)\n--\n\nThe types leases go out as." },
    { NULL, NULL, 0, NULL },
};

/* tuple.__new__(type, items) */
static PyObject *tuple_as(PyObject *type, PyObject *items)
{
    return items ? PyObject_CallFunctionObjArgs(lease_types.tuple_new, type, items, NULL) : NULL;
}

PyObject *mstarpy_slot_lease_to_py(const mstar_slot_lease *lease)
{
    if (!lease_types.lease_type)
        return mstarpy_lease_to_py(lease);
    PyObject *fields = mstarpy_key_to_py(&lease->bucket);
    PyObject *key = tuple_as(lease_types.key_type, fields);
    Py_XDECREF(fields);
    PyObject *pair = key ? Py_BuildValue("(iN)", (int)lease->slot, key) : NULL;
    PyObject *out = tuple_as(lease_types.lease_type, pair);
    Py_XDECREF(pair);
    return out;
}

PyObject *mstarpy_capsule(PyObject *owner, const mstar_tensor *t)
{
    return mstarpy_dl_export(owner, t, 0, NULL);
}

PyObject *mstarpy_map_to_py(PyObject *owner, const mstar_tensor_map *map)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && map && i < mstar_tensor_map_count(map); i++) {
        PyObject *cap = mstarpy_capsule(owner, mstar_tensor_map_at(map, i));
        if (!cap || PyDict_SetItemString(d, mstar_tensor_map_name(map, i), cap) < 0) {
            Py_XDECREF(cap);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(cap);
    }
    return d;
}

PyObject *mstarpy_seq_list(PyObject *obj, const char *msg)
{
    if (!PySequence_Check(obj) || PyUnicode_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, msg);
        return NULL;
    }
    return PySequence_List(obj);
}

/* ---- _StepRunner ------------------------------------------------------------------------------
 */

typedef mstarpy_step_runner srobj;

mstar_step_runner *mstarpy_step_runner_handle(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, mstarpy_step_runner_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a StepRunner");
        return NULL;
    }
    srobj *s = (srobj *)obj;
    if (!s->sr)
        return (mstar_step_runner *)mstarpy_raise_msg(MSTAR_ECLOSED, "the step runner is closed");
    return s->sr;
}

static int device_from_str(const char *s, mstar_device *out)
{
    if (strcmp(s, "cpu") == 0) {
        *out = mstar_device_cpu();
        return 0;
    }
    if (strncmp(s, "cuda", 4) == 0 && (s[4] == '\0' || s[4] == ':')) {
        out->type = MSTAR_DEVICE_CUDA;
        out->index = s[4] == ':' ? atoi(s + 5) : 0;
        return 0;
    }
    mstarpy_raise_msg(MSTAR_EINVAL, "device '%s': expected 'cpu', 'cuda' or 'cuda:N'", s);
    return -1;
}

static void sr_close(srobj *s)
{
    mstar_step_runner_destroy(s->sr);
    s->sr = NULL;
    for (int i = 0; i < s->nkv; i++) {
        mstar_kv_cache_destroy(s->kv[i]);
        free(s->kv_keys[i]);
    }
    for (int i = 0; i < s->npos; i++) {
        mstar_positions_destroy(s->pos[i]);
        free(s->pos_keys[i]);
    }
    s->nkv = s->npos = 0;
    mstar_stream_destroy(s->stream);
    s->stream = NULL;
    mstar_backend_destroy(s->backend);
    s->backend = NULL;
}

static PyObject *sr_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "device", NULL };
    const char *dev = "cpu";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|s", kwlist, &dev))
        return NULL;
    mstar_device d;
    if (device_from_str(dev, &d) < 0)
        return NULL;
    srobj *s = (srobj *)PyType_GenericAlloc(tp, 0);
    if (!s)
        return NULL;
    mstar_status st = mstar_backend_create(d, &s->backend);
    if (st == MSTAR_OK)
        /* Blocking: it and torch's default stream (the legacy one) wait for each other, which
         * orders a replay with torch's work without an event (runner_common.c). */
        st = mstar_stream_create(s->backend, MSTAR_STREAM_DEFAULT, &s->stream);
    if (st == MSTAR_OK)
        st = mstar_step_runner_create(s->backend, s->stream, &s->sr);
    if (st != MSTAR_OK) {
        Py_DECREF(s);
        return mstarpy_raise(st);
    }
    return (PyObject *)s;
}

static void sr_dealloc(PyObject *obj)
{
    PyTypeObject *tp = Py_TYPE(obj);
    sr_close((srobj *)obj);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

#define SR_OR_NULL(self)                                      \
    mstar_step_runner *sr = mstarpy_step_runner_handle(self); \
    if (!sr)                                                  \
    return NULL

static PyObject *ok_or_raise(mstar_status st)
{
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    Py_RETURN_NONE;
}

static PyObject *sr_add_kv_cache(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "key", "num_pages", "page_size", "max_seq_len", "num_labels", NULL };
    const char *key;
    mstar_kv_cache_config c = { 0, 0, 1, 0 };
    if (!PyArg_ParseTupleAndKeywords(args, kw, "siii|i", kwlist, &key, &c.num_pages, &c.page_size,
                                     &c.max_seq_len, &c.num_labels))
        return NULL;
    SR_OR_NULL(self);
    srobj *s = (srobj *)self;
    if (s->nkv == MSTARPY_MAX_RESOURCES)
        return mstarpy_raise_msg(MSTAR_ENOSPC, "at most %d KV caches", MSTARPY_MAX_RESOURCES);
    mstar_kv_cache *kv;
    mstar_status st = mstar_kv_cache_create(&c, s->backend, &kv);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    st = mstar_kv_cache_register(kv, sr, key);
    if (st != MSTAR_OK) {
        mstar_kv_cache_destroy(kv);
        return mstarpy_raise(st);
    }
    s->kv[s->nkv] = kv;
    s->kv_keys[s->nkv++] = strdup(key);
    Py_RETURN_NONE;
}

static PyObject *sr_add_positions(PyObject *self, PyObject *args)
{
    const char *key;
    if (!PyArg_ParseTuple(args, "s", &key))
        return NULL;
    SR_OR_NULL(self);
    srobj *s = (srobj *)self;
    if (s->npos == MSTARPY_MAX_RESOURCES)
        return mstarpy_raise_msg(MSTAR_ENOSPC, "at most %d position resources",
                                 MSTARPY_MAX_RESOURCES);
    mstar_positions *p;
    mstar_status st = mstar_positions_create(s->backend, &p);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    st = mstar_positions_register(p, sr, key);
    if (st != MSTAR_OK) {
        mstar_positions_destroy(p);
        return mstarpy_raise(st);
    }
    s->pos[s->npos] = p;
    s->pos_keys[s->npos++] = strdup(key);
    Py_RETURN_NONE;
}

static mstar_kv_cache *kv_named(srobj *s, const char *key)
{
    for (int i = 0; i < s->nkv; i++)
        if (strcmp(s->kv_keys[i], key) == 0)
            return s->kv[i];
    mstarpy_raise_msg(MSTAR_ENOENT, "no KV cache '%s'", key);
    return NULL;
}

static mstar_positions *pos_named(srobj *s, const char *key)
{
    for (int i = 0; i < s->npos; i++)
        if (strcmp(s->pos_keys[i], key) == 0)
            return s->pos[i];
    mstarpy_raise_msg(MSTAR_ENOENT, "no positions '%s'", key);
    return NULL;
}

static int put_i32(PyObject *d, PyObject *owner, const char *name, int32_t *p, int32_t ndim,
                   const int64_t *shape, mstar_device dev)
{
    mstar_tensor t;
    if (mstar_tensor_init(&t, p, dev, MSTAR_DTYPE_INT32, ndim, shape) != MSTAR_OK)
        return mstarpy_raise(mstar_last_status()), -1;
    PyObject *cap = mstarpy_capsule(owner, &t);
    int r = cap ? PyDict_SetItemString(d, name, cap) : -1;
    Py_XDECREF(cap);
    return r;
}

/* kv_plan(key, slot, label) -> dict: the plan buffers a captured graph (slot >= 0) or an eager
 * step (slot -1) reads, as int32 capsules, plus rows, tokens and pages_per_row. */
static PyObject *sr_kv_plan(PyObject *self, PyObject *args)
{
    const char *key;
    int slot, label;
    if (!PyArg_ParseTuple(args, "sii", &key, &slot, &label))
        return NULL;
    SR_OR_NULL(self);
    (void)sr;
    mstar_kv_cache *kv = kv_named((srobj *)self, key);
    if (!kv)
        return NULL;
    mstar_kv_plan p;
    mstar_status st = mstar_kv_cache_plan_buffers(kv, slot, label, &p);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    mstar_device dev = mstar_backend_device(((srobj *)self)->backend);
    PyObject *d = Py_BuildValue("{sisisi}", "rows", (int)p.rows, "tokens", (int)p.tokens,
                                "pages_per_row", (int)p.pages_per_row);
    int64_t pt[2] = { p.rows, p.pages_per_row }, tok = p.tokens, rows = p.rows;
    if (!d || put_i32(d, self, "page_table", p.page_table, 2, pt, dev) < 0 ||
        put_i32(d, self, "token_to_page", p.token_to_page, 1, &tok, dev) < 0 ||
        put_i32(d, self, "token_to_cache", p.token_to_cache, 1, &tok, dev) < 0 ||
        put_i32(d, self, "token_row", p.token_row, 1, &tok, dev) < 0 ||
        put_i32(d, self, "token_kv_len", p.token_kv_len, 1, &tok, dev) < 0 ||
        put_i32(d, self, "row_last_token", p.row_last_token, 1, &rows, dev) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *sr_kv_free_pages(PyObject *self, PyObject *arg)
{
    const char *key = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!key)
        return NULL;
    mstar_kv_cache *kv = kv_named((srobj *)self, key);
    return kv ? PyLong_FromLong(mstar_kv_cache_free_pages(kv)) : NULL;
}

static PyObject *sr_position(PyObject *self, PyObject *args)
{
    const char *key;
    long long rid;
    if (!PyArg_ParseTuple(args, "sL", &key, &rid))
        return NULL;
    mstar_positions *p = pos_named((srobj *)self, key);
    if (!p)
        return NULL;
    int64_t v;
    mstar_status st = mstar_positions_get(p, rid, &v);
    return st != MSTAR_OK ? mstarpy_raise(st) : PyLong_FromLongLong(v);
}

static PyObject *sr_positions_plan(PyObject *self, PyObject *args)
{
    const char *key;
    int slot;
    if (!PyArg_ParseTuple(args, "si", &key, &slot))
        return NULL;
    mstar_positions *p = pos_named((srobj *)self, key);
    if (!p)
        return NULL;
    int32_t *ids, cap;
    mstar_status st = mstar_positions_plan_buffer(p, slot, &ids, &cap);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    mstar_tensor t;
    int64_t n = cap;
    st = mstar_tensor_init(&t, ids, mstar_backend_device(((srobj *)self)->backend),
                           MSTAR_DTYPE_INT32, 1, &n);
    return st != MSTAR_OK ? mstarpy_raise(st) : mstarpy_capsule(self, &t);
}

static PyObject *sr_request_op(PyObject *self, PyObject *args, int op)
{
    long long rid;
    int free_storage = 0;
    if (!PyArg_ParseTuple(args, op == 1 ? "L|p" : "L", &rid, &free_storage))
        return NULL;
    SR_OR_NULL(self);
    if (op == 0)
        return ok_or_raise(mstar_step_runner_ingest_request(sr, rid));
    if (op == 1)
        return ok_or_raise(mstar_step_runner_reset_request(sr, rid, free_storage));
    mstar_step_runner_remove_request(sr, rid);
    Py_RETURN_NONE;
}

static PyObject *sr_ingest(PyObject *self, PyObject *args)
{
    return sr_request_op(self, args, 0);
}
static PyObject *sr_reset(PyObject *self, PyObject *args)
{
    return sr_request_op(self, args, 1);
}
static PyObject *sr_remove(PyObject *self, PyObject *args)
{
    return sr_request_op(self, args, 2);
}

/* An eager step runs on the compute stream unless its context names another. */
static mstar_step *step_for_cycle(PyObject *self, PyObject *arg)
{
    mstar_step *step = mstarpy_step_handle(arg);
    if (step && mstar_step_context(step)->stream == NULL)
        mstar_step_context(step)->stream = ((srobj *)self)->stream;
    return step;
}

static PyObject *sr_admit(PyObject *self, PyObject *arg)
{
    SR_OR_NULL(self);
    mstar_step *step = step_for_cycle(self, arg);
    if (!step)
        return NULL;
    mstar_step_admit_result r;
    memset(&r, 0, sizeof(r));
    mstar_status st = mstar_step_runner_admit(sr, step, &r);
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    return Py_BuildValue("(NNs)", PyBool_FromLong(r.ok), PyBool_FromLong(r.ready), r.reason);
}

static PyObject *sr_plan(PyObject *self, PyObject *arg)
{
    SR_OR_NULL(self);
    mstar_step *step = step_for_cycle(self, arg);
    return step ? ok_or_raise(mstar_step_runner_plan(sr, step)) : NULL;
}

static PyObject *sr_commit(PyObject *self, PyObject *arg)
{
    SR_OR_NULL(self);
    mstar_step *step = step_for_cycle(self, arg);
    return step ? ok_or_raise(mstar_step_runner_commit(sr, step)) : NULL;
}

static PyObject *sr_blocked(PyObject *self, PyObject *arg)
{
    SR_OR_NULL(self);
    mstar_step *step = mstarpy_step_handle(arg);
    if (!step)
        return NULL;
    const char *keys[MSTARPY_MAX_RESOURCES * 4];
    size_t n = mstar_blocked_capture_resources(sr, step, keys, MSTARPY_MAX_RESOURCES * 4);
    PyObject *l = PyList_New(0);
    for (size_t i = 0; l && i < n && i < MSTARPY_MAX_RESOURCES * 4; i++) {
        PyObject *s = PyUnicode_FromString(keys[i]);
        if (!s || PyList_Append(l, s) < 0)
            Py_CLEAR(l);
        Py_XDECREF(s);
    }
    return l;
}

static PyObject *sr_supports_preplan(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    return PyBool_FromLong(mstar_step_runner_supports_preplan(sr));
}

static PyObject *sr_default_num_slots(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    int32_t n;
    mstar_status st = mstar_step_runner_default_num_slots(sr, &n);
    return st != MSTAR_OK ? mstarpy_raise(st) : PyLong_FromLong(n);
}

static PyObject *sr_build(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    return ok_or_raise(mstar_step_runner_build_graph_buffers(sr));
}

static PyObject *sr_built(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    return PyBool_FromLong(mstar_step_runner_buffers_built(sr));
}

static PyObject *sr_validate(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    return ok_or_raise(mstar_step_runner_post_warmup_validate(sr));
}

static PyObject *sr_clear_preplan(PyObject *self, PyObject *args)
{
    int slot = -1;
    if (!PyArg_ParseTuple(args, "|i", &slot))
        return NULL;
    SR_OR_NULL(self);
    mstar_step_runner_clear_preplan(sr, slot);
    Py_RETURN_NONE;
}

static PyObject *sr_set_budget(PyObject *self, PyObject *arg)
{
    uint64_t v;
    if (mstarpy_u64_from_py(arg, &v, "bytes") < 0)
        return NULL;
    SR_OR_NULL(self);
    (void)sr;
    return ok_or_raise(mstar_backend_set_memory_budget(((srobj *)self)->backend, v));
}

static PyObject *sr_mem_info(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    (void)sr;
    uint64_t fr, total;
    mstar_status st = mstar_mem_info(((srobj *)self)->backend, &fr, &total);
    return st != MSTAR_OK
               ? mstarpy_raise(st)
               : Py_BuildValue("(KK)", (unsigned long long)fr, (unsigned long long)total);
}

static PyObject *stats_to_py(const mstar_alloc_stats *s)
{
    return Py_BuildValue("{sKsKsKsK}", "reserved", (unsigned long long)s->reserved, "allocated",
                         (unsigned long long)s->allocated, "peak", (unsigned long long)s->peak,
                         "segments", (unsigned long long)s->segments);
}

static PyObject *sr_caching_stats(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    (void)sr;
    mstar_alloc_stats s;
    mstar_caching_stats(((srobj *)self)->backend, &s);
    return stats_to_py(&s);
}

static PyObject *sr_synchronize(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    (void)sr;
    return ok_or_raise(mstar_stream_synchronize(((srobj *)self)->stream));
}

static PyObject *sr_stream_native(PyObject *self, PyObject *unused)
{
    SR_OR_NULL(self);
    (void)sr;
    return PyLong_FromVoidPtr(mstar_stream_native(((srobj *)self)->stream));
}

static PyObject *sr_close_m(PyObject *self, PyObject *unused)
{
    sr_close((srobj *)self);
    Py_RETURN_NONE;
}

static PyObject *sr_get_device(PyObject *self, void *unused)
{
    srobj *s = (srobj *)self;
    if (!s->backend)
        return mstarpy_raise_msg(MSTAR_ECLOSED, "the step runner is closed");
    mstar_device d = mstar_backend_device(s->backend);
    if (d.type == MSTAR_DEVICE_CUDA)
        return PyUnicode_FromFormat("cuda:%d", (int)d.index);
    return PyUnicode_FromString("cpu");
}

static PyMethodDef sr_methods[] = {
    { "add_kv_cache", (PyCFunction)(void (*)(void))sr_add_kv_cache, METH_VARARGS | METH_KEYWORDS,
      "add_kv_cache(key, num_pages, page_size, max_seq_len, num_labels=1): a paged KV cache "
      "registered as resource `key`." },
    { "add_positions", sr_add_positions, METH_VARARGS,
      "add_positions(key): a positions resource registered as `key`." },
    { "kv_plan", sr_kv_plan, METH_VARARGS,
      "kv_plan(key, slot, label) -> dict of the plan buffers (int32 capsules)." },
    { "kv_free_pages", sr_kv_free_pages, METH_O, "kv_free_pages(key) -> int." },
    { "position", sr_position, METH_VARARGS, "position(key, request) -> int." },
    { "positions_plan", sr_positions_plan, METH_VARARGS,
      "positions_plan(key, slot) -> int32 capsule of the slot's position ids." },
    { "ingest_request", sr_ingest, METH_VARARGS, "ingest_request(request)." },
    { "reset_request", sr_reset, METH_VARARGS, "reset_request(request, free_storage=False)." },
    { "remove_request", sr_remove, METH_VARARGS, "remove_request(request)." },
    { "admit", sr_admit, METH_O, "admit(step) -> (ok, ready, reason)." },
    { "plan", sr_plan, METH_O, "plan(step)." },
    { "commit", sr_commit, METH_O, "commit(step)." },
    { "blocked_capture_resources", sr_blocked, METH_O,
      "blocked_capture_resources(step) -> list of resource keys." },
    { "supports_preplan", sr_supports_preplan, METH_NOARGS, NULL },
    { "default_num_slots", sr_default_num_slots, METH_NOARGS, NULL },
    { "build_graph_buffers", sr_build, METH_NOARGS, NULL },
    { "buffers_built", sr_built, METH_NOARGS, NULL },
    { "post_warmup_validate", sr_validate, METH_NOARGS, NULL },
    { "clear_preplan", sr_clear_preplan, METH_VARARGS, NULL },
    { "set_memory_budget", sr_set_budget, METH_O,
      "set_memory_budget(bytes): the host backend's free memory (MSTAR_HOST_MEMORY_BUDGET_MB)." },
    { "mem_info", sr_mem_info, METH_NOARGS, "mem_info() -> (free, total)." },
    { "caching_stats", sr_caching_stats, METH_NOARGS, NULL },
    { "synchronize", sr_synchronize, METH_NOARGS, NULL },
    { "stream_native", sr_stream_native, METH_NOARGS,
      "The compute stream's native handle (a cudaStream_t on CUDA) as an int." },
    { "close", sr_close_m, METH_NOARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef sr_getset[] = {
    { "device", sr_get_device, NULL, NULL, NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot sr_slots[] = {
    { Py_tp_new, sr_new },
    { Py_tp_dealloc, sr_dealloc },
    { Py_tp_methods, sr_methods },
    { Py_tp_getset, sr_getset },
    { Py_tp_doc, "_StepRunner(device='cpu'): a device's step runner and resources (internal)." },
    { 0, NULL },
};

static PyType_Spec sr_spec = { "mstar_c._mstar._StepRunner", sizeof(srobj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, sr_slots };

/* ---- _Step ------------------------------------------------------------------------------------
 */

typedef mstarpy_step stobj;

mstar_step *mstarpy_step_handle(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, mstarpy_step_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a step (SubmoduleStep)");
        return NULL;
    }
    stobj *s = (stobj *)obj;
    if (!s->step)
        return (mstar_step *)mstarpy_raise_msg(
            MSTAR_ESTATE, "this step belonged to a runner callback that has returned");
    return s->step;
}

PyObject *mstarpy_step_borrow(mstar_step *step)
{
    stobj *s = (stobj *)PyType_GenericAlloc(mstarpy_step_type, 0);
    if (s)
        s->step = step;
    return (PyObject *)s;
}

void mstarpy_step_detach(PyObject *obj)
{
    if (obj)
        ((stobj *)obj)->step = NULL;
}

static PyObject *st_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ""))
        return NULL;
    stobj *s = (stobj *)PyType_GenericAlloc(tp, 0);
    if (!s)
        return NULL;
    mstar_status st = mstar_step_create(&s->step);
    if (st != MSTAR_OK) {
        Py_DECREF(s);
        return mstarpy_raise(st);
    }
    s->owned = true;
    return (PyObject *)s;
}

static void st_dealloc(PyObject *obj)
{
    stobj *s = (stobj *)obj;
    PyTypeObject *tp = Py_TYPE(obj);
    if (s->owned)
        mstar_step_destroy(s->step);
    free(s->ids);
    free(s->walk);
    free(s->lease_walk);
    free(s->lease_key);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

#define STEP_OR_NULL(self)                        \
    mstar_step *step = mstarpy_step_handle(self); \
    if (!step)                                    \
    return NULL

static PyObject *st_add_segment(PyObject *self, PyObject *args)
{
    long long req, span;
    unsigned int label;
    if (!PyArg_ParseTuple(args, "LIL", &req, &label, &span))
        return NULL;
    STEP_OR_NULL(self);
    return ok_or_raise(mstar_step_add_segment(step, req, label, span));
}

static PyObject *st_set_resource(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "key", "commit", NULL };
    const char *key;
    int commit = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|p", kwlist, &key, &commit))
        return NULL;
    STEP_OR_NULL(self);
    mstar_resource_payload p = { commit != 0 };
    return ok_or_raise(mstar_step_set_resource(step, key, &p, sizeof(p)));
}

static PyObject *st_has_resource(PyObject *self, PyObject *arg)
{
    const char *key = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!key)
        return NULL;
    STEP_OR_NULL(self);
    return PyBool_FromLong(mstar_step_resource(step, key, NULL) != NULL);
}

static PyObject *st_set_key(PyObject *self, PyObject *arg)
{
    const char *key;
    if (opt_str(arg, &key) < 0)
        return NULL;
    STEP_OR_NULL(self);
    return ok_or_raise(mstar_step_set_cg_key_info(step, key));
}

static PyObject *st_segments(PyObject *self, PyObject *unused)
{
    STEP_OR_NULL(self);
    size_t n;
    const mstar_step_segment *seg = mstar_step_segments(step, &n);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(LIL)", (long long)seg[i].request, (unsigned)seg[i].label,
                                    (long long)seg[i].span);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* set_context(graph_walk, request_ids, slot=-1, commit=True): an eager step's context. */
static PyObject *st_set_context(PyObject *self, PyObject *args)
{
    const char *walk;
    PyObject *ids;
    int slot = -1;
    PyObject *lo = Py_None;
    if (!PyArg_ParseTuple(args, "sO|iO", &walk, &ids, &slot, &lo))
        return NULL;
    STEP_OR_NULL(self);
    stobj *s = (stobj *)self;
    if (!s->owned)
        return mstarpy_raise_msg(MSTAR_ESTATE, "a runner's step keeps its own context");
    mstar_slot_lease lease;
    memset(&lease, 0, sizeof(lease));
    if (lo != Py_None && mstarpy_lease_from_py(lo, &lease) < 0)
        return NULL;
    PyObject *seq = mstarpy_seq_list(ids, "request_ids must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    int64_t *v = malloc(sizeof(*v) * (size_t)(n > 0 ? n : 1));
    char *w = strdup(walk);
    for (Py_ssize_t i = 0; v && i < n; i++) {
        if (mstarpy_i64_from_py(PyList_GetItem(seq, i), &v[i], "request id") < 0) {
            free(v);
            v = NULL;
        }
    }
    Py_DECREF(seq);
    if (!v || !w) {
        free(v);
        free(w);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    free(s->ids);
    free(s->walk);
    s->ids = v;
    s->walk = w;
    mstar_step_ctx *c = mstar_step_context(step);
    c->request_ids = v;
    c->n_requests = (size_t)n;
    c->graph_walk = w;
    c->slot = slot;
    c->has_lease = false;
    if (lo != Py_None) { /* a leased step: its slot's plan buffers (the lease's strings kept) */
        free(s->lease_walk);
        free(s->lease_key);
        s->lease_walk = strdup(lease.bucket.graph_walk);
        s->lease_key = lease.bucket.cg_key_info ? strdup(lease.bucket.cg_key_info) : NULL;
        if (!s->lease_walk)
            return PyErr_NoMemory();
        lease.bucket.graph_walk = s->lease_walk;
        lease.bucket.cg_key_info = s->lease_key;
        c->lease = lease;
        c->has_lease = true;
        c->slot = lease.slot;
    }
    Py_RETURN_NONE;
}

static PyObject *st_reset(PyObject *self, PyObject *unused)
{
    STEP_OR_NULL(self);
    mstar_step_reset(step);
    return Py_NewRef(Py_None);
}

static PyObject *st_get_context(PyObject *self, void *unused)
{
    STEP_OR_NULL(self);
    mstar_step_ctx *c = mstar_step_context(step);
    PyObject *ids = PyList_New((Py_ssize_t)c->n_requests);
    for (size_t i = 0; ids && i < c->n_requests; i++) {
        PyObject *v = PyLong_FromLongLong(c->request_ids[i]);
        if (!v) {
            Py_CLEAR(ids);
            break;
        }
        PyList_SetItem(ids, (Py_ssize_t)i, v);
    }
    if (!ids)
        return NULL;
    PyObject *lease = c->has_lease ? mstarpy_lease_to_py(&c->lease) : Py_NewRef(Py_None);
    PyObject *walk = str_or_none(c->graph_walk);
    PyObject *label = str_or_none(c->label);
    PyObject *key = str_or_none(mstar_step_cg_key_info(step));
    if (!lease || !walk || !label || !key) {
        Py_DECREF(ids);
        Py_XDECREF(lease);
        Py_XDECREF(walk);
        Py_XDECREF(label);
        Py_XDECREF(key);
        return NULL;
    }
    return Py_BuildValue("{sNsNsisNsNsNsNsN}", "request_ids", ids, "graph_walk", walk, "slot",
                         (int)c->slot, "capture", PyBool_FromLong(c->capture), "is_preplan",
                         PyBool_FromLong(c->is_preplan), "lease", lease, "label", label,
                         "cg_key_info", key);
}

static PyMethodDef st_methods[] = {
    { "add_segment", st_add_segment, METH_VARARGS, "add_segment(request, label, span)." },
    { "set_resource", (PyCFunction)(void (*)(void))st_set_resource, METH_VARARGS | METH_KEYWORDS,
      "set_resource(key, commit=True): resource `key` takes part in the step." },
    { "has_resource", st_has_resource, METH_O, NULL },
    { "set_cg_key_info", st_set_key, METH_O, "set_cg_key_info(key or None)." },
    { "segments", st_segments, METH_NOARGS, "segments() -> [(request, label, span)]." },
    { "set_context", st_set_context, METH_VARARGS,
      "set_context(graph_walk, request_ids, slot=-1, lease=None): the step's context; with a "
      "lease, the leased slot's (a replay's step)." },
    { "reset", st_reset, METH_NOARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef st_getset[] = {
    { "context", st_get_context, NULL, "The step's context as a dict.", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot st_slots[] = {
    { Py_tp_new, st_new },
    { Py_tp_dealloc, st_dealloc },
    { Py_tp_methods, st_methods },
    { Py_tp_getset, st_getset },
    { Py_tp_doc, "_Step(): a step declaration (segments, resources, cg_key_info)." },
    { 0, NULL },
};

static PyType_Spec st_spec = { "mstar_c._mstar._Step", sizeof(stobj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, st_slots };

/* ---- _GraphPool -------------------------------------------------------------------------------
 */

typedef mstarpy_pool poolobj;

static PyObject *pool_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *sro;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os", &sro, &name))
        return NULL;
    if (!mstarpy_step_runner_handle(sro))
        return NULL;
    poolobj *p = (poolobj *)PyType_GenericAlloc(tp, 0);
    if (!p)
        return NULL;
    mstar_status st = mstar_graph_pool_create(((srobj *)sro)->backend, name, &p->pool);
    if (st != MSTAR_OK) {
        Py_DECREF(p);
        return mstarpy_raise(st);
    }
    p->step_runner = Py_NewRef(sro);
    return (PyObject *)p;
}

static void pool_dealloc(PyObject *obj)
{
    poolobj *p = (poolobj *)obj;
    PyTypeObject *tp = Py_TYPE(obj);
    mstar_graph_pool_destroy(p->pool);
    Py_CLEAR(p->step_runner);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
}

static PyObject *pool_stats(PyObject *self, PyObject *unused)
{
    mstar_alloc_stats s;
    mstar_graph_pool_stats(((poolobj *)self)->pool, &s);
    return stats_to_py(&s);
}

static PyObject *pool_trim(PyObject *self, PyObject *unused)
{
    uint64_t released = 0;
    mstar_status st = mstar_graph_pool_trim(((poolobj *)self)->pool, &released);
    return st != MSTAR_OK ? mstarpy_raise(st) : PyLong_FromUnsignedLongLong(released);
}

static PyObject *pool_get_name(PyObject *self, void *unused)
{
    return PyUnicode_FromString(mstar_graph_pool_name(((poolobj *)self)->pool));
}

static PyMethodDef pool_methods[] = {
    { "stats", pool_stats, METH_NOARGS, "stats() -> {reserved, allocated, peak, segments}." },
    { "trim", pool_trim, METH_NOARGS, "trim() -> bytes given back." },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef pool_getset[] = {
    { "name", pool_get_name, NULL, NULL, NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot pool_slots[] = {
    { Py_tp_new, pool_new },
    { Py_tp_dealloc, pool_dealloc },
    { Py_tp_methods, pool_methods },
    { Py_tp_getset, pool_getset },
    { Py_tp_doc, "_GraphPool(step_runner, name): a node's graph pool." },
    { 0, NULL },
};

static PyType_Spec pool_spec = { "mstar_c._mstar._GraphPool", sizeof(poolobj), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, pool_slots };

int mstarpy_add_runner_step_types(PyObject *module)
{
    mstarpy_step_runner_type = (PyTypeObject *)PyType_FromSpec(&sr_spec);
    mstarpy_step_type = (PyTypeObject *)PyType_FromSpec(&st_spec);
    mstarpy_pool_type = (PyTypeObject *)PyType_FromSpec(&pool_spec);
    if (!mstarpy_step_runner_type || !mstarpy_step_type || !mstarpy_pool_type)
        return -1;
    if (PyModule_AddObjectRef(module, "_StepRunner", (PyObject *)mstarpy_step_runner_type) < 0 ||
        PyModule_AddObjectRef(module, "_Step", (PyObject *)mstarpy_step_type) < 0 ||
        PyModule_AddObjectRef(module, "_GraphPool", (PyObject *)mstarpy_pool_type) < 0)
        return -1;
    return 0;
}
