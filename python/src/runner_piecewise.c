/*
 * runner_piecewise.c — _PiecewiseRunner: the C piecewise runner (mstar_piecewise_runner) over a
 * region written in Python. Shapes, leases, slots, padding rows, staging, capture and dropping
 * are the C runner's; this file gives it a config whose make_static_inputs, declare_step and
 * capture_fn are calls into a Python `callbacks` object (graphs.py's _Region).
 *
 * The region, on the host backend: a warm-up runs it and copies its outputs into buffers from
 * the stream's allocator; a capture runs it once and records a host launch that re-enters Python
 * at every replay and runs the region again over the static inputs into output tensors the
 * record owns (a replay record, kept per lease while its graph can replay), which the graph then
 * copies into the static outputs (mstar_capture_with_static_outputs). On CUDA the region runs on
 * the capturing stream (graphs.py) and its kernels land in the C graph.
 *
 * An exception a callback raises is kept (the first) and re-raised by the method whose C call
 * failed because of it; a failure the runner absorbs (a shape it drops) discards it.
 */
#include "runner.h"

#include <stdlib.h>
#include <string.h>

PyTypeObject *mstarpy_piecewise_runner_type;

typedef struct pw_obj {
    PyObject ob_base;
    mstar_piecewise_runner *r;
    mstarpy_runner_refs refs;
    mstar_piecewise_config cfg;
    int64_t *sizes, *tlens;
    char *label;
} pw_obj;

mstar_piecewise_runner *mstarpy_piecewise_runner_handle(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, mstarpy_piecewise_runner_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a piecewise runner");
        return NULL;
    }
    pw_obj *p = (pw_obj *)obj;
    if (!p->r)
        return (mstar_piecewise_runner *)mstarpy_raise_msg(MSTAR_ECLOSED, "the runner is closed");
    return p->r;
}

static PyObject *i64_to_py(const int64_t *v, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && v && i < n; i++)
        PyList_SetItem(l, (Py_ssize_t)i, PyLong_FromLongLong(v[i]));
    return l;
}

static PyObject *shape_to_py(const mstar_piecewise_shape *s)
{
    return Py_BuildValue("(LNL)", (long long)s->bs, i64_to_py(s->seq_lens, (size_t)s->bs),
                         (long long)s->total_tokens);
}

struct copy_into {
    mstar_stream *stream;
    mstar_tensor_map *out;
};

/* A copy of a tensor into an owned buffer of the stream, named `name` in the map. */
static int tensor_into_map(void *user, const char *name, const mstar_tensor *t, mstar_release_fn fn,
                           void *ctx)
{
    struct copy_into *c = user;
    mstar_tensor y;
    mstar_status st = mstar_tensor_is_contiguous(t)
                          ? mstar_tensor_alloc(c->stream, t->dtype, t->ndim, t->shape, &y)
                          : mstar_error_set(MSTAR_EINVAL, "tensor '%s' is not contiguous", name);
    if (st == MSTAR_OK) { /* owned by the map first, so a failed copy frees it */
        st = mstar_tensor_map_set_owned(c->out, name, &y, c->stream);
        if (st != MSTAR_OK)
            mstar_tensor_free(c->stream, &y);
    }
    bool cuda = t->device.type == MSTAR_DEVICE_CUDA || y.device.type == MSTAR_DEVICE_CUDA;
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(c->stream, y.data, mstar_tensor_ptr(t), mstar_tensor_nbytes(t),
                                cuda ? MSTAR_MEMCPY_D2D : MSTAR_MEMCPY_H2H);
    if (st == MSTAR_OK && !mstar_stream_is_capturing(c->stream))
        st = mstar_stream_synchronize(c->stream); /* the source goes next */
    if (fn)
        fn(ctx, NULL);
    if (st != MSTAR_OK)
        mstarpy_raise(st);
    return st == MSTAR_OK ? 0 : -1;
}

static int dict_into_map(PyObject *d, mstar_stream *stream, mstar_tensor_map *out)
{
    struct copy_into c = { stream, out };
    return mstarpy_dict_tensors(d, "expected a dict of tensors", tensor_into_map, &c);
}

/* ---- the region's callbacks ------------------------------------------------------------------
 */

static mstar_status cb_static(void *user, const mstar_piecewise_shape *shape, mstar_stream *stream,
                              mstar_tensor_map *out)
{
    pw_obj *p = user;
    PyObject *s = shape_to_py(shape);
    PyObject *r = s ? PyObject_CallMethod(p->refs.cb, "make_static_inputs", "(O)", s) : NULL;
    int ok = r ? dict_into_map(r, stream, out) : -1;
    Py_XDECREF(r);
    Py_XDECREF(s);
    return ok < 0 ? mstarpy_pending_keep(&p->refs.pending, "make_static_inputs") : MSTAR_OK;
}

static mstar_status cb_declare(void *user, const int64_t *ids, const int64_t *seq_lens, size_t n,
                               mstar_step *step, bool *declared)
{
    pw_obj *p = user;
    PyObject *il = i64_to_py(ids, n), *sl = il ? i64_to_py(seq_lens, n) : NULL;
    PyObject *st = sl ? mstarpy_step_borrow(step) : NULL;
    PyObject *r = st ? PyObject_CallMethod(p->refs.cb, "declare_step", "OOO", il, sl, st) : NULL;
    mstarpy_step_detach(st);
    Py_XDECREF(st);
    Py_XDECREF(sl);
    Py_XDECREF(il);
    int truth = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (truth < 0)
        return mstarpy_pending_keep(&p->refs.pending, "declare_step");
    *declared = truth == 1;
    return MSTAR_OK;
}

/* A borrowed view of a tensor into the map `user` (the caller keeps the tensor alive). */
static int tensor_view_into_map(void *user, const char *name, const mstar_tensor *t,
                                mstar_release_fn fn, void *ctx)
{
    mstar_status st = mstar_tensor_map_set(user, name, t);
    if (fn)
        fn(ctx, NULL); /* the record's tensor keeps the memory */
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

/* Borrowed views of a dict's tensors into `out` (the caller keeps the tensors alive). */
static int dict_view_into_map(PyObject *d, mstar_tensor_map *out)
{
    return mstarpy_dict_tensors(d, "expected a dict of tensors", tensor_view_into_map, out);
}

/* A host capture: graphs.py turns the region's results into a replay record that owns its
 * output tensors; they are the outputs the capture copies into the static ones, so a replay
 * writes memory the record holds, not pool blocks the capture freed (which a trim of the node's
 * shared pool may give back). The record is launched on the capturing stream and kept per lease. */
static int record_replay(pw_obj *p, const mstar_piecewise_call *call, PyObject *res,
                         PyObject *shape, PyObject *step, mstar_tensor_map *outputs)
{
    mstar_step_ctx *ctx = mstar_step_context(call->step);
    /* the record goes before the memory it views (pw_close), so its inputs need not hold p */
    PyObject *in = mstarpy_map_to_py(Py_None, call->static_inputs);
    PyObject *t =
        in ? PyObject_CallMethod(p->refs.cb, "replay_record", "OOOO", in, res, shape, step) : NULL;
    Py_XDECREF(in);
    PyObject *rec = NULL, *outs = NULL;
    int r = t && PyArg_ParseTuple(t, "OO", &rec, &outs) ? dict_view_into_map(outs, outputs) : -1;
    PyObject *key = r == 0 ? mstarpy_lease_to_py(&ctx->lease) : NULL;
    r = key ? mstarpy_replay_keep(p->refs.records, key, rec, call->stream, &p->refs.pending,
                                  "the replayed region")
            : -1;
    Py_XDECREF(t);
    return r;
}

static mstar_status cb_capture(void *user, const mstar_piecewise_call *call,
                               mstar_tensor_map *outputs)
{
    pw_obj *p = user;
    bool capturing = mstar_stream_is_capturing(call->stream);
    int mode = capturing ? (p->refs.host ? 1 : 2) : 0; /* as runner_graph.c's forward */
    PyObject *in = mstarpy_map_to_py((PyObject *)p, call->static_inputs);
    PyObject *shape = in ? shape_to_py(call->shape) : NULL;
    PyObject *st = shape ? mstarpy_step_borrow(call->step) : NULL;
    PyObject *res =
        st ? PyObject_CallMethod(p->refs.cb, "capture", "OOOi", in, shape, st, mode) : NULL;
    int r = -1;
    if (res && mode == 1)
        r = record_replay(p, call, res, shape, st, outputs);
    else if (res)
        r = dict_into_map(res, call->stream, outputs);
    mstarpy_step_detach(st);
    Py_XDECREF(st);
    Py_XDECREF(res);
    Py_XDECREF(shape);
    Py_XDECREF(in);
    return r < 0 ? mstarpy_pending_keep(&p->refs.pending, "the region") : MSTAR_OK;
}

/* ---- the object --------------------------------------------------------------------------------
 */

static void pw_close(pw_obj *p)
{
    if (p->refs.records)
        PyDict_Clear(p->refs.records); /* their tensors view the memory destroyed below */
    mstar_piecewise_runner_destroy(p->r);
    p->r = NULL;
}

static int64_t *i64_list(PyObject *o, size_t *n)
{
    *n = 0;
    if (!o || o == Py_None)
        return NULL;
    PyObject *seq = mstarpy_seq_list(o, "expected a sequence of ints");
    if (!seq)
        return NULL;
    Py_ssize_t k = PyList_Size(seq);
    int64_t *v = malloc((size_t)(k > 0 ? k : 1) * sizeof(*v));
    for (Py_ssize_t i = 0; v && i < k; i++) {
        v[i] = PyLong_AsLongLong(PyList_GetItem(seq, i));
        if (v[i] == -1 && PyErr_Occurred()) {
            free(v);
            v = NULL;
        }
    }
    if (!v && !PyErr_Occurred())
        PyErr_NoMemory();
    Py_DECREF(seq);
    *n = v ? (size_t)k : 0;
    return v;
}

/* _PiecewiseRunner(label, step_runner, pool, packed, batch_sizes, seq_len, total_tokens,
 *                  lease_before_step, declares, callbacks, num_slots=0, autocast=None,
 *                  node_name=None) */
static PyObject *pw_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "label",       "step_runner", "pool",         "packed",
                              "batch_sizes", "seq_len",     "total_tokens", "lease_before_step",
                              "declares",    "callbacks",   "num_slots",    "autocast",
                              "node_name",   NULL };
    const char *label, *node = NULL;
    PyObject *sro, *poolo, *sizes, *tlens, *cb, *autocast = Py_None;
    int packed, lbs, declares, num_slots = 0;
    long long seq_len;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOOpOLOppO|iOz", kwlist, &label, &sro, &poolo,
                                     &packed, &sizes, &seq_len, &tlens, &lbs, &declares, &cb,
                                     &num_slots, &autocast, &node))
        return NULL;
    mstar_step_runner *sr;
    mstar_dtype dt;
    if (mstarpy_runner_args(sro, poolo, autocast, &sr, &dt) < 0)
        return NULL;
    pw_obj *p = (pw_obj *)PyType_GenericAlloc(tp, 0);
    if (!p)
        return NULL;
    mstarpy_runner_refs_init(&p->refs, sro, poolo, cb, sr);
    p->label = strdup(label);
    mstar_piecewise_config *c = &p->cfg;
    mstar_piecewise_config_init(c);
    c->kind = packed ? MSTAR_GRAPH_PACKED : MSTAR_GRAPH_BATCHED;
    c->capture_fn = cb_capture;
    c->make_static_inputs = cb_static;
    c->declare_step = declares ? cb_declare : NULL;
    c->user = p;
    c->lease_before_step = lbs;
    c->seq_len = seq_len;
    int r = p->refs.records && p->label ? 0 : (PyErr_NoMemory(), -1);
    if (r == 0) {
        p->sizes = i64_list(sizes, &c->n_capture_batch_sizes);
        p->tlens = PyErr_Occurred() ? NULL : i64_list(tlens, &c->n_total_tokens);
        c->capture_batch_sizes = p->sizes;
        c->total_tokens = p->tlens;
        r = PyErr_Occurred() ? -1 : 0;
    }
    if (r == 0) {
        mstar_piecewise_runner_options o = { p->label,  c,  sr,  ((mstarpy_pool *)poolo)->pool,
                                             num_slots, dt, node };
        mstar_status st = mstar_piecewise_runner_create(&o, &p->r);
        if (st != MSTAR_OK) {
            mstarpy_pending_finish(&p->refs.pending, st);
            r = -1;
        }
    }
    if (r < 0) {
        Py_DECREF(p);
        return NULL;
    }
    return (PyObject *)p;
}

static int pw_traverse(PyObject *obj, visitproc visit, void *arg)
{
    pw_obj *p = (pw_obj *)obj;
    Py_VISIT(Py_TYPE(obj));
    return mstarpy_runner_refs_traverse(&p->refs, visit, arg);
}

static int pw_clear(PyObject *obj)
{
    pw_obj *p = (pw_obj *)obj;
    mstarpy_runner_refs_clear(&p->refs);
    return 0;
}

static void pw_dealloc(PyObject *obj)
{
    pw_obj *p = (pw_obj *)obj;
    PyObject_GC_UnTrack(obj);
    pw_close(p);
    free(p->sizes);
    free(p->tlens);
    free(p->label);
    mstarpy_runner_free(obj, &p->refs);
}

#define PW_OR_NULL(self)                                               \
    pw_obj *p = (pw_obj *)(self);                                      \
    mstar_piecewise_runner *r = mstarpy_piecewise_runner_handle(self); \
    if (!r)                                                            \
    return NULL

static PyObject *pw_buckets(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    (void)p;
    size_t n;
    const mstar_bucket_key *k = mstar_piecewise_runner_buckets(r, &n);
    return mstarpy_keys_to_py(k, n);
}

static PyObject *pw_dropped(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    (void)p;
    size_t n;
    const mstar_bucket_key *k = mstar_piecewise_runner_dropped_shapes(r, &n);
    return mstarpy_keys_to_py(k, n);
}

/* Forget the replay records of leases with no graph (failed or dropped shapes). */
static void prune_records(pw_obj *p)
{
    PyObject *keys = p->refs.records ? PyDict_Keys(p->refs.records) : NULL;
    for (Py_ssize_t i = 0; keys && i < PyList_Size(keys); i++) {
        PyObject *k = PyList_GetItem(keys, i);
        mstar_slot_lease l;
        if (mstarpy_lease_from_py(k, &l) < 0 || !mstar_piecewise_runner_slot_for(p->r, &l))
            PyDict_DelItem(p->refs.records, k);
        PyErr_Clear();
    }
    Py_XDECREF(keys);
}

static PyObject *pw_prepare(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    const mstar_cg_slot_spec *specs;
    size_t n;
    mstar_status st = mstar_piecewise_runner_prepare_for_capture(r, &specs, &n);
    if (st != MSTAR_OK)
        return mstarpy_pending_finish(&p->refs.pending, st);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t =
            Py_BuildValue("(Ni)", mstarpy_key_to_py(&specs[i].bucket), (int)specs[i].slot);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

static PyObject *pw_warmup_and_capture(PyObject *self, PyObject *planned)
{
    PW_OR_NULL(self);
    PyObject *seq;
    mstar_bucket_key *keys;
    size_t n;
    PyObject *res = NULL;
    if (mstarpy_keys_from_py(planned, &seq, &keys, &n) == 0) {
        mstar_status st = mstar_piecewise_runner_warmup_and_capture(r, keys, n);
        prune_records(p);
        res = mstarpy_pending_finish(&p->refs.pending, st);
    }
    free(keys);
    Py_XDECREF(seq);
    return res;
}

static PyObject *pw_drop(PyObject *self, PyObject *key)
{
    PW_OR_NULL(self);
    mstar_bucket_key k;
    if (mstarpy_key_from_py(key, &k) < 0)
        return NULL;
    mstar_status st = mstar_piecewise_runner_drop_shape(r, &k);
    prune_records(p);
    return mstarpy_pending_finish(&p->refs.pending, st);
}

static PyObject *pw_any(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    (void)p;
    return PyBool_FromLong(mstar_piecewise_runner_any_graphs(r));
}

static PyObject *pw_num_slots(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    (void)p;
    return PyLong_FromLong(mstar_piecewise_runner_num_slots(r));
}

static PyObject *pw_lbs(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    (void)p;
    return PyBool_FromLong(mstar_piecewise_runner_lease_before_step(r));
}

static PyObject *pw_can_run(PyObject *self, PyObject *args)
{
    long long bs, tt = -1;
    if (!PyArg_ParseTuple(args, "L|L", &bs, &tt))
        return NULL;
    PW_OR_NULL(self);
    (void)p;
    return PyBool_FromLong(mstar_piecewise_runner_can_run(r, bs, tt));
}

static PyObject *pw_lease(PyObject *self, PyObject *args)
{
    long long bs, tt = -1;
    if (!PyArg_ParseTuple(args, "L|L", &bs, &tt))
        return NULL;
    PW_OR_NULL(self);
    (void)p;
    mstar_slot_lease l;
    if (!mstar_piecewise_runner_lease_slot(r, bs, tt, &l))
        Py_RETURN_NONE;
    return mstarpy_slot_lease_to_py(&l);
}

static PyObject *pw_set_slot(PyObject *self, PyObject *arg)
{
    PW_OR_NULL(self);
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    return mstarpy_pending_finish(&p->refs.pending,
                                  mstar_piecewise_runner_set_slot(r, (int32_t)slot));
}

/* slot_for(lease) -> (static_inputs, static_outputs, dummy_rids) or None */
static PyObject *pw_slot_for(PyObject *self, PyObject *lo)
{
    PW_OR_NULL(self);
    (void)p;
    mstar_slot_lease l;
    if (mstarpy_lease_from_py(lo, &l) < 0)
        return NULL;
    const mstar_graph_slot *s = mstar_piecewise_runner_slot_for(r, &l);
    if (!s)
        Py_RETURN_NONE;
    size_t n;
    const int64_t *rids = mstar_graph_slot_dummy_rids(s, &n);
    PyObject *rl = i64_to_py(rids, n);
    PyObject *in = rl ? mstarpy_map_to_py(self, mstar_graph_slot_static_inputs(s)) : NULL;
    PyObject *out = in ? mstarpy_map_to_py(self, mstar_graph_slot_static_outputs(s)) : NULL;
    if (!out) {
        Py_XDECREF(rl);
        Py_XDECREF(in);
        return NULL;
    }
    return Py_BuildValue("(NNN)", in, out, rl);
}

struct in_hold {
    mstar_release_fn fn;
    void *ctx;
};

/* run(static_inputs, request_ids, seq_lens, real_bs) -> ({name: capsule}, real_len): the padded
 * static outputs (views) and how many leading rows are real. */
static PyObject *pw_run(PyObject *self, PyObject *args)
{
    PyObject *d, *ido, *slo;
    long long real_bs;
    if (!PyArg_ParseTuple(args, "O!OOL", &PyDict_Type, &d, &ido, &slo, &real_bs))
        return NULL;
    PW_OR_NULL(self);
    size_t nid = 0, nsl = 0;
    int64_t *ids = i64_list(ido, &nid);
    int64_t *sls = PyErr_Occurred() ? NULL : i64_list(slo, &nsl);
    if (PyErr_Occurred()) {
        free(ids);
        return NULL;
    }
    if (ids && sls && nid != nsl) {
        free(ids);
        free(sls);
        return mstarpy_raise_msg(MSTAR_EINVAL, "request_ids and seq_lens differ in length");
    }
    PyObject *items = PyDict_Items(d);
    Py_ssize_t k = items ? PyList_Size(items) : 0;
    struct in_hold *holds = calloc((size_t)(k > 0 ? k : 1), sizeof(*holds));
    mstar_tensor_map *map = NULL;
    mstar_status st = holds ? mstar_tensor_map_create(&map) : MSTAR_ENOMEM;
    int bad = items && st == MSTAR_OK ? 0 : -1;
    if (st != MSTAR_OK)
        mstarpy_raise(st);
    for (Py_ssize_t i = 0; bad == 0 && i < k; i++) {
        PyObject *kv = PyList_GetItem(items, i);
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(kv, 0), NULL);
        mstar_tensor t;
        if (!name || mstarpy_tensor_in(PyTuple_GetItem(kv, 1), &t, &holds[i].fn, &holds[i].ctx) < 0)
            bad = -1;
        else if ((st = mstar_tensor_map_set(map, name, &t)) != MSTAR_OK) {
            mstarpy_raise(st);
            bad = -1;
        }
    }
    PyObject *res = NULL;
    if (bad == 0 && mstarpy_runner_after_torch(&p->refs) == 0) {
        mstar_piecewise_output out;
        st = mstar_piecewise_runner_run(r, map, ids, sls, ids ? nid : nsl, real_bs, &out);
        if (st == MSTAR_OK && p->refs.pending.type) /* a host replay raised */
            st = MSTAR_EINVAL;
        if (st != MSTAR_OK) {
            res = mstarpy_pending_finish(&p->refs.pending, st);
        } else if (mstarpy_runner_before_torch(&p->refs) == 0) {
            PyObject *outs = mstarpy_map_to_py(self, out.outputs);
            res = outs ? Py_BuildValue("(NL)", outs, (long long)out.real_len) : NULL;
        }
    }
    for (Py_ssize_t i = 0; holds && i < k; i++)
        if (holds[i].fn)
            holds[i].fn(holds[i].ctx, NULL);
    mstar_tensor_map_destroy(map);
    free(holds);
    Py_XDECREF(items);
    free(ids);
    free(sls);
    return res;
}

/* After startup: forget the replays of graphs it dropped; hand over the exception a callback
 * raised (None if none), the cause when startup failed. */
static PyObject *pw_after_startup(PyObject *self, PyObject *unused)
{
    PW_OR_NULL(self);
    (void)r;
    prune_records(p);
    return mstarpy_pending_take(&p->refs.pending);
}

static PyObject *pw_records(PyObject *self, PyObject *unused)
{
    pw_obj *p = (pw_obj *)self;
    return PyLong_FromSsize_t(p->refs.records ? PyDict_Size(p->refs.records) : 0);
}

static PyObject *pw_close_m(PyObject *self, PyObject *unused)
{
    pw_close((pw_obj *)self);
    Py_RETURN_NONE;
}

static PyMethodDef pw_methods[] = {
    { "buckets", pw_buckets, METH_NOARGS, "Every shape as a bucket key, in capture order." },
    { "dropped_shapes", pw_dropped, METH_NOARGS, NULL },
    { "drop_shape", pw_drop, METH_O, NULL },
    { "prepare_for_capture", pw_prepare, METH_NOARGS, "-> [(key, slot)]" },
    { "warmup_and_capture", pw_warmup_and_capture, METH_O, "warmup_and_capture(planned or None)" },
    { "any_graphs", pw_any, METH_NOARGS, NULL },
    { "num_slots", pw_num_slots, METH_NOARGS, NULL },
    { "lease_before_step", pw_lbs, METH_NOARGS, NULL },
    { "can_run", pw_can_run, METH_VARARGS, "can_run(bs, total_tokens=-1)" },
    { "lease_slot", pw_lease, METH_VARARGS, "lease_slot(bs, total_tokens=-1) -> lease or None" },
    { "set_slot", pw_set_slot, METH_O, NULL },
    { "slot_for", pw_slot_for, METH_O, "-> (static_inputs, static_outputs, dummy_rids) or None" },
    { "run", pw_run, METH_VARARGS, "run(static_inputs, request_ids, seq_lens, real_bs)" },
    { "_after_startup", pw_after_startup, METH_NOARGS, NULL },
    { "_records", pw_records, METH_NOARGS, "Replay records held (tests)." },
    { "close", pw_close_m, METH_NOARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyType_Slot pw_slots[] = {
    { Py_tp_new, pw_new },
    { Py_tp_dealloc, pw_dealloc },
    { Py_tp_traverse, pw_traverse },
    { Py_tp_clear, pw_clear },
    { Py_tp_methods, pw_methods },
    { Py_tp_doc, "_PiecewiseRunner(...): the C piecewise runner over a Python region." },
    { 0, NULL },
};

static PyType_Spec pw_spec = { "mstar_c._mstar._PiecewiseRunner", sizeof(pw_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                               pw_slots };

int mstarpy_add_runner_piecewise_types(PyObject *module)
{
    mstarpy_piecewise_runner_type = (PyTypeObject *)PyType_FromSpec(&pw_spec);
    if (!mstarpy_piecewise_runner_type)
        return -1;
    return PyModule_AddObjectRef(module, "_PiecewiseRunner",
                                 (PyObject *)mstarpy_piecewise_runner_type);
}
