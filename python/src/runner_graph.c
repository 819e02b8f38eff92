/*
 * runner_graph.c — _GraphRunner: the C whole-forward runner (mstar_graph_runner) driving a
 * submodule written in Python. Buckets, leases, slots, padding rows, staging and capture are the
 * C runner's; this file only gives it a submodule whose declare_step, preprocess, forward and
 * template rows are calls into a Python `callbacks` object (graphs.py's _Submodule).
 *
 * The forward, on the host backend: a warm-up runs the module and copies its outputs into
 * buffers from the runner's allocator; a capture runs it once for the outputs' shapes, takes the
 * static outputs from the pool, and records a host launch that re-enters Python at every replay
 * and runs the module again over the static inputs into them (a "replay record", a callable
 * graphs.py builds, kept here per (bucket, slot) while its graph can replay). On CUDA the module
 * runs on the capturing compute stream with its allocations from the runner's pool (graphs.py,
 * docs/design.md "Graph runner for PyTorch modules"): the kernels land in the C graph and a replay
 * runs no Python at all; the outputs are copied into the static outputs by the graph itself.
 *
 * An exception a callback raises is kept (the first one) and re-raised by the method whose C
 * call failed because of it; a failure the C runner absorbs (a bucket it drops) discards it.
 */
#include "args.h"
#include "runner.h"

#include <stdlib.h>
#include <string.h>

PyTypeObject *mstarpy_graph_runner_type;

struct hold {
    mstar_release_fn fn;
    void *ctx;
};

/* Tensors of a dict borrowed from Python for as long as the C runner reads them. */
struct holds {
    struct hold *items;
    size_t n, cap;
};

struct cfg_store {
    struct gr_obj *owner;
    uint32_t idx;
    char *walk, *key;
    char **replay;
    size_t nreplay;
    int64_t *sizes, *tlens;
    mstar_seq_dim *seq_dims;
    size_t nseq;
};

typedef struct gr_obj {
    PyObject ob_base;
    mstar_graph_runner *r;
    mstarpy_runner_refs refs;
    mstar_graph_config *configs;
    struct cfg_store *store;
    size_t nconfigs;
    mstar_stream *stream;
    char *name;
    struct holds preprocess_holds; /* what the last preprocess returned, held until the next */
    /* run_forward's, kept between steps: the map it stages from, and its inputs' holds (empty
     * between steps, their room kept) */
    mstar_tensor_map *step_map;
    struct holds step_holds;
    mstarpy_step_cache cache; /* leases handed out, tensors over the static outputs */
} gr_obj;

mstar_graph_runner *mstarpy_graph_runner_handle(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, mstarpy_graph_runner_type)) {
        PyErr_SetString(PyExc_TypeError, "expected a graph runner");
        return NULL;
    }
    gr_obj *g = (gr_obj *)obj;
    if (!g->r)
        return (mstar_graph_runner *)mstarpy_raise_msg(MSTAR_ECLOSED, "the runner is closed");
    return g->r;
}

/* ---- callback plumbing ------------------------------------------------------------------------
 */

/* Let every held tensor go, keeping the room. */
static void holds_release(struct holds *h)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->items[i].fn)
            h->items[i].fn(h->items[i].ctx, NULL);
    h->n = 0;
}

static int holds_push(struct holds *h, mstar_release_fn fn, void *ctx)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 8;
        struct hold *items = realloc(h->items, cap * sizeof(*items));
        if (!items) {
            fn(ctx, NULL);
            PyErr_NoMemory();
            return -1;
        }
        h->items = items;
        h->cap = cap;
    }
    h->items[h->n++] = (struct hold){ fn, ctx };
    return 0;
}

static mstar_memcpy_kind copy_kind(mstar_device src, mstar_device dst)
{
    bool s = src.type == MSTAR_DEVICE_CUDA, d = dst.type == MSTAR_DEVICE_CUDA;
    return s ? (d ? MSTAR_MEMCPY_D2D : MSTAR_MEMCPY_D2H)
             : (d ? MSTAR_MEMCPY_H2D : MSTAR_MEMCPY_H2H);
}

/* rows -> [(seq_len, {name: capsule} or None)] */
static PyObject *rows_to_py(gr_obj *g, const mstar_node_input *rows, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *d = rows[i].tensors ? mstarpy_map_to_py((PyObject *)g, rows[i].tensors)
                                      : Py_NewRef(Py_None);
        PyObject *t = d ? Py_BuildValue("(LN)", (long long)rows[i].seq_len, d) : NULL;
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* A buffer of `stream` shaped as `t`, owned by `out` under `name` (so a failed copy frees it),
 * with a copy of `t` queued into it when `copy`; `what` names the tensor in the error. */
static mstar_status owned_copy(mstar_stream *stream, const mstar_tensor *t, const char *what,
                               const char *name, bool copy, mstar_tensor_map *out)
{
    mstar_tensor y;
    mstar_status st = mstar_tensor_is_contiguous(t)
                          ? mstar_tensor_alloc(stream, t->dtype, t->ndim, t->shape, &y)
                          : mstar_error_set(MSTAR_EINVAL, "%s '%s' is not contiguous", what, name);
    if (st == MSTAR_OK) {
        st = mstar_tensor_map_set_owned(out, name, &y, stream);
        if (st != MSTAR_OK)
            mstar_tensor_free(stream, &y);
    }
    if (st == MSTAR_OK && copy)
        st = mstar_memcpy_async(stream, y.data, mstar_tensor_ptr(t), mstar_tensor_nbytes(t),
                                copy_kind(t->device, y.device));
    return st;
}

struct into_map {
    struct holds *holds; /* where a borrowed view is held (not for a copy) */
    mstar_tensor_map *out;
    mstar_stream *stream;
    bool copy;
};

/* One tensor into the map: a borrowed view held in the holds, or (copy) a copy into an owned
 * buffer of the stream, then let go. */
static int tensor_into_map(void *user, const char *name, const mstar_tensor *t, mstar_release_fn fn,
                           void *ctx)
{
    struct into_map *m = user;
    mstar_status st;
    int r = 0;
    if (!m->copy) {
        st = mstar_tensor_map_set(m->out, name, t);
        r = holds_push(m->holds, fn, ctx);
    } else {
        st = owned_copy(m->stream, t, "tensor", name, true, m->out);
        if (st == MSTAR_OK)
            st = mstar_stream_synchronize(m->stream); /* the source goes next */
        if (fn)
            fn(ctx, NULL);
    }
    if (r == 0 && st != MSTAR_OK) {
        mstarpy_raise(st);
        r = -1;
    }
    return r;
}

/* A dict name -> tensor into `out`: borrowed views held in `holds` (copy: copied into owned
 * buffers of `stream`, then let go; holds NULL). */
static int dict_into_map(struct holds *holds, PyObject *d, mstar_tensor_map *out,
                         mstar_stream *stream, bool copy)
{
    struct into_map m = { holds, out, stream, copy };
    return mstarpy_dict_tensors(d, "expected a dict of tensors", tensor_into_map, &m);
}

/* ---- the submodule ops ------------------------------------------------------------------------
 */

static mstar_status cb_declare(void *self, const char *walk, const int64_t *ids,
                               const mstar_node_input *inputs, size_t n, mstar_step *step,
                               bool *declared)
{
    gr_obj *g = self;
    PyObject *idl = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; idl && i < n; i++)
        PyList_SetItem(idl, (Py_ssize_t)i, PyLong_FromLongLong(ids[i]));
    PyObject *rows = idl ? rows_to_py(g, inputs, n) : NULL;
    PyObject *st = rows ? mstarpy_step_borrow(step) : NULL;
    PyObject *r =
        st ? PyObject_CallMethod(g->refs.cb, "declare_step", "sOOO", walk, idl, rows, st) : NULL;
    mstarpy_step_detach(st);
    Py_XDECREF(st);
    Py_XDECREF(rows);
    Py_XDECREF(idl);
    int truth = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (truth < 0)
        return mstarpy_pending_keep(&g->refs.pending, "declare_step");
    *declared = truth == 1;
    return MSTAR_OK;
}

static mstar_status cb_preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                                  size_t n, mstar_tensor_map *out)
{
    gr_obj *g = self;
    /* The runner cleared the map of the last preprocess before this call. */
    holds_release(&g->preprocess_holds);
    PyObject *rows = rows_to_py(g, inputs, n);
    PyObject *st = rows ? mstarpy_step_borrow(step) : NULL;
    PyObject *r = st ? PyObject_CallMethod(g->refs.cb, "preprocess", "OO", st, rows) : NULL;
    mstarpy_step_detach(st);
    Py_XDECREF(st);
    Py_XDECREF(rows);
    int ok = r ? dict_into_map(&g->preprocess_holds, r, out, NULL, false) : -1;
    Py_XDECREF(r);
    return ok < 0 ? mstarpy_pending_keep(&g->refs.pending, "preprocess") : MSTAR_OK;
}

/* The key of a replay record: the lease, and the slot's static outputs the capture wrote. A
 * throwaway capture (sizing, capture_throwaway) runs under the lease of the bucket's captured
 * slot into a slot of its own: keyed by the lease alone, its record replaced the live slot's,
 * whose graph's launch points at that record without a reference, and the next replay of the
 * captured bucket called a freed object. */
static PyObject *record_name(const mstar_slot_lease *l, const mstar_tensor_map *outputs)
{
    return PyUnicode_FromFormat("%s|%lld|%lld|%s|%d|%p", l->bucket.graph_walk,
                                (long long)l->bucket.bs, (long long)l->bucket.num_tokens,
                                l->bucket.cg_key_info ? l->bucket.cg_key_info : "", (int)l->slot,
                                (const void *)outputs);
}

struct output_into {
    mstar_stream *stream;
    mstar_tensor_map *outputs;
    bool host_capture;
};

/* One output into a buffer from mstar_alloc(stream), copied now unless a host capture. */
static int output_into_map(void *user, const char *name, const mstar_tensor *t, mstar_release_fn fn,
                           void *hctx)
{
    struct output_into *o = user;
    mstar_status st = owned_copy(o->stream, t, "output", name, !o->host_capture, o->outputs);
    if (st == MSTAR_OK && !o->host_capture && !mstar_stream_is_capturing(o->stream))
        st = mstar_stream_synchronize(o->stream); /* the source goes next */
    if (fn)
        fn(hctx, NULL);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

/* The module's outputs into `outputs`: buffers from mstar_alloc(stream) (the pool's while
 * capturing). Eager and device capture copy now; a host capture records the replay instead. */
static int outputs_from_py(gr_obj *g, mstar_step *step, PyObject *res,
                           const mstar_tensor_map *inputs, uint32_t cfg, bool host_capture,
                           mstar_tensor_map *outputs)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    struct output_into o = { ctx->stream, outputs, host_capture };
    int r =
        mstarpy_dict_tensors(res, "the forward must return a dict of tensors", output_into_map, &o);
    if (r < 0 || !host_capture)
        return r;
    /* Record the replay: graphs.py builds it over the static inputs and these outputs. */
    /* The record lives in g->refs.records and goes before the memory does (gr_close), so its
     * tensors need not hold g: holding it would make a cycle the collector cannot see. */
    PyObject *ins = mstarpy_map_to_py(Py_None, inputs);
    PyObject *outs = ins ? mstarpy_map_to_py(Py_None, outputs) : NULL;
    PyObject *st = outs ? mstarpy_step_borrow(step) : NULL;
    PyObject *rec =
        st ? PyObject_CallMethod(g->refs.cb, "replay_record", "IOOO", cfg, st, ins, outs) : NULL;
    mstarpy_step_detach(st);
    Py_XDECREF(st);
    Py_XDECREF(outs);
    Py_XDECREF(ins);
    PyObject *key = rec ? record_name(&ctx->lease, outputs) : NULL;
    r = key ? mstarpy_replay_keep(g->refs.records, key, rec, ctx->stream, &g->refs.pending,
                                  "the replayed forward")
            : -1;
    Py_XDECREF(rec);
    return r;
}

static mstar_status cb_forward(void *self, mstar_step *step, const mstar_tensor_map *inputs,
                               mstar_tensor_map *outputs)
{
    gr_obj *g = self;
    mstar_step_ctx *ctx = mstar_step_context(step);
    uint32_t cfg = 0;
    if (ctx->has_lease)
        (void)mstar_graph_runner_config_for(g->r, &ctx->lease, &cfg);
    bool capturing = mstar_stream_is_capturing(ctx->stream);
    /* 0: eager (a warm-up), 1: a host capture (recorded), 2: a device capture (torch's kernels
     * go into the graph) */
    int mode = capturing ? (g->refs.host ? 1 : 2) : 0;
    PyObject *in = mstarpy_map_to_py((PyObject *)g, inputs);
    PyObject *st = in ? mstarpy_step_borrow(step) : NULL;
    PyObject *res =
        st ? PyObject_CallMethod(g->refs.cb, "forward", "IOOi", cfg, st, in, mode) : NULL;
    mstarpy_step_detach(st);
    Py_XDECREF(st);
    int r = res ? outputs_from_py(g, step, res, inputs, cfg, mode == 1, outputs) : -1;
    Py_XDECREF(res);
    Py_XDECREF(in);
    return r < 0 ? mstarpy_pending_keep(&g->refs.pending, "forward") : MSTAR_OK;
}

static const mstar_submodule_ops py_ops = { cb_declare, cb_preprocess, cb_forward };

/* A config's template row (make_node_input) of `len` tokens, copied into owned buffers. */
static mstar_status cb_template(void *user, mstar_stream *stream, int64_t len,
                                mstar_tensor_map *out)
{
    struct cfg_store *c = user;
    gr_obj *g = c->owner;
    PyObject *r = PyObject_CallMethod(g->refs.cb, "make_node_input", "IL", c->idx, (long long)len);
    int ok = r ? dict_into_map(NULL, r, out, stream, true) : -1;
    Py_XDECREF(r);
    return ok < 0 ? mstarpy_pending_keep(&g->refs.pending, "make_node_input") : MSTAR_OK;
}

/* ---- configs ----------------------------------------------------------------------------------
 */

static char *dup_str(PyObject *o)
{
    if (!o || o == Py_None)
        return NULL;
    const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
    return s ? strdup(s) : NULL;
}

static int64_t *i64_list(PyObject *o, size_t *n)
{
    *n = 0;
    if (!o || o == Py_None)
        return NULL;
    PyObject *seq = mstarpy_seq_list(o, "expected a sequence of ints");
    if (!seq)
        return NULL;
    Py_ssize_t len = PyList_Size(seq);
    int64_t *v = calloc((size_t)(len > 0 ? len : 1), sizeof(*v));
    for (Py_ssize_t i = 0; v && i < len; i++) {
        if (mstarpy_i64_from_py(PyList_GetItem(seq, i), &v[i], "size") < 0) {
            free(v);
            v = NULL;
        }
    }
    Py_DECREF(seq);
    if (v)
        *n = (size_t)len;
    return v;
}

static void store_free(struct cfg_store *c)
{
    free(c->walk);
    free(c->key);
    for (size_t i = 0; i < c->nreplay; i++)
        free(c->replay[i]);
    free(c->replay);
    free(c->sizes);
    free(c->tlens);
    for (size_t i = 0; i < c->nseq; i++)
        free((char *)c->seq_dims[i].key);
    free(c->seq_dims);
}

static PyObject *get(PyObject *d, const char *k)
{
    return PyDict_GetItemString(d, k); /* borrowed, NULL when absent */
}

static int get_i64(PyObject *d, const char *k, int64_t *out)
{
    PyObject *v = get(d, k);
    return v ? mstarpy_i64_from_py(v, out, k) : 0;
}

/* One config dict (graphs.py's AcceleratorGraphConfig._c_dict) into c / s. */
static int config_from_py(gr_obj *g, PyObject *d, uint32_t idx, mstar_graph_config *c,
                          struct cfg_store *s)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "a config is a dict");
        return -1;
    }
    mstar_graph_config_init(c);
    s->owner = g;
    s->idx = idx;
    PyObject *kind = get(d, "kind");
    const char *ks = kind ? PyUnicode_AsUTF8AndSize(kind, NULL) : "batched";
    if (!ks)
        return -1;
    c->kind = strcmp(ks, "packed") == 0 ? MSTAR_GRAPH_PACKED : MSTAR_GRAPH_BATCHED;
    s->walk = dup_str(get(d, "capture_graph_walk"));
    if (!s->walk) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a config needs capture_graph_walk");
        return -1;
    }
    c->capture_graph_walk = s->walk;
    s->key = dup_str(get(d, "cg_key_info"));
    if (PyErr_Occurred())
        return -1;
    c->cg_key_info = s->key;
    PyObject *rw = get(d, "replay_graph_walks");
    if (rw && rw != Py_None) {
        PyObject *seq = mstarpy_seq_list(rw, "replay_graph_walks must be a sequence");
        if (!seq)
            return -1;
        Py_ssize_t n = PyList_Size(seq);
        s->replay = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
        for (Py_ssize_t i = 0; s->replay && i < n; i++) {
            s->replay[i] = dup_str(PyList_GetItem(seq, i));
            if (s->replay[i])
                s->nreplay++;
        }
        Py_DECREF(seq);
        if (!s->replay || PyErr_Occurred())
            return PyErr_Occurred() ? -1 : (PyErr_NoMemory(), -1);
        c->replay_graph_walks = (const char *const *)s->replay;
        c->n_replay_graph_walks = s->nreplay;
    }
    size_t n;
    s->sizes = i64_list(get(d, "capture_batch_sizes"), &n);
    if (PyErr_Occurred())
        return -1;
    c->capture_batch_sizes = s->sizes;
    c->n_capture_batch_sizes = n;
    s->tlens = i64_list(get(d, "capture_token_lengths"), &n);
    if (PyErr_Occurred())
        return -1;
    c->capture_token_lengths = s->tlens;
    c->n_capture_token_lengths = n;
    PyObject *caps = get(d, "caps_eager_batch_size");
    if (caps)
        c->caps_eager_batch_size = PyObject_IsTrue(caps) == 1;
    int64_t mode = 0;
    if (get_i64(d, "plan_tokens_per_input_token", &c->plan_tokens_per_input_token) < 0 ||
        get_i64(d, "seq_len", &c->seq_len) < 0 || get_i64(d, "compile_mode", &mode) < 0)
        return -1;
    c->compile_mode = (mstar_compile_mode)mode;
    PyObject *sd = get(d, "seq_dims");
    if (sd && PyDict_Check(sd) && PyDict_Size(sd) > 0) {
        s->seq_dims = calloc((size_t)PyDict_Size(sd), sizeof(*s->seq_dims));
        if (!s->seq_dims)
            return PyErr_NoMemory(), -1;
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(sd, &pos, &k, &v)) {
            char *ks2 = dup_str(k);
            long dim = PyLong_AsLong(v);
            if (!ks2 || (dim == -1 && PyErr_Occurred())) {
                free(ks2);
                return -1;
            }
            s->seq_dims[s->nseq++] = (mstar_seq_dim){ ks2, (int32_t)dim };
        }
        c->seq_dims = s->seq_dims;
        c->n_seq_dims = s->nseq;
    }
    c->make_node_input = cb_template;
    c->template_user = s;
    return 0;
}

/* ---- the object -------------------------------------------------------------------------------
 */

static void gr_close(gr_obj *g)
{
    if (g->refs.records)
        PyDict_Clear(g->refs.records); /* their tensors view the memory destroyed below */
    mstarpy_step_cache_clear(&g->cache);
    mstar_graph_runner_destroy(g->r);
    g->r = NULL;
    holds_release(&g->preprocess_holds);
    for (size_t i = 0; i < g->nconfigs; i++)
        store_free(&g->store[i]);
    free(g->store);
    free(g->configs);
    g->store = NULL;
    g->configs = NULL;
    g->nconfigs = 0;
}

/* _GraphRunner(name, step_runner, pool, configs, callbacks, num_slots=0, autocast=None) */
static PyObject *gr_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "name",      "step_runner", "pool",     "configs",
                              "callbacks", "num_slots",   "autocast", NULL };
    const char *name;
    PyObject *sro, *poolo, *configs, *cb, *autocast = Py_None;
    int num_slots = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOOOO|iO", kwlist, &name, &sro, &poolo, &configs,
                                     &cb, &num_slots, &autocast))
        return NULL;
    mstar_step_runner *sr;
    mstar_dtype dt;
    if (mstarpy_runner_args(sro, poolo, autocast, &sr, &dt) < 0)
        return NULL;
    PyObject *seq = mstarpy_seq_list(configs, "configs must be a sequence");
    if (!seq)
        return NULL;
    gr_obj *g = (gr_obj *)PyType_GenericAlloc(tp, 0);
    if (!g) {
        Py_DECREF(seq);
        return NULL;
    }
    mstarpy_runner_refs_init(&g->refs, sro, poolo, cb, sr);
    g->name = strdup(name);
    g->stream = mstar_step_runner_compute_stream(sr);
    Py_ssize_t n = PyList_Size(seq);
    g->configs = calloc((size_t)(n > 0 ? n : 1), sizeof(*g->configs));
    g->store = calloc((size_t)(n > 0 ? n : 1), sizeof(*g->store));
    int r = g->refs.records && g->name && g->configs && g->store ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
        g->nconfigs++;
        r = config_from_py(g, PyList_GetItem(seq, i), (uint32_t)i, &g->configs[i], &g->store[i]);
    }
    Py_DECREF(seq);
    if (r == 0) {
        mstar_graph_runner_options o = {
            g->name,   &py_ops, g, g->configs, g->nconfigs, sr, ((mstarpy_pool *)poolo)->pool,
            num_slots, dt,
        };
        mstar_status st = mstar_graph_runner_create(&o, &g->r);
        if (st != MSTAR_OK) {
            mstarpy_pending_finish(&g->refs.pending, st);
            r = -1;
        }
    }
    if (r < 0) {
        Py_DECREF(g);
        return NULL;
    }
    return (PyObject *)g;
}

static int gr_traverse(PyObject *obj, visitproc visit, void *arg)
{
    gr_obj *g = (gr_obj *)obj;
    Py_VISIT(Py_TYPE(obj));
    int r = mstarpy_step_cache_traverse(&g->cache, obj, visit, arg);
    return r ? r : mstarpy_runner_refs_traverse(&g->refs, visit, arg);
}

static int gr_clear(PyObject *obj)
{
    gr_obj *g = (gr_obj *)obj;
    mstarpy_step_cache_clear(&g->cache);
    mstarpy_runner_refs_clear(&g->refs);
    return 0;
}

static void gr_dealloc(PyObject *obj)
{
    gr_obj *g = (gr_obj *)obj;
    PyObject_GC_UnTrack(obj);
    gr_close(g);
    free(g->preprocess_holds.items);
    free(g->step_holds.items);
    mstar_tensor_map_destroy(g->step_map);
    free(g->name);
    mstarpy_runner_free(obj, &g->refs);
}

#define GR_OR_NULL(self)                                       \
    gr_obj *g = (gr_obj *)(self);                              \
    mstar_graph_runner *r = mstarpy_graph_runner_handle(self); \
    if (!r)                                                    \
    return NULL

static PyObject *gr_buckets(PyObject *self, PyObject *unused)
{
    GR_OR_NULL(self);
    (void)g;
    size_t n;
    const mstar_bucket_key *k = mstar_graph_runner_buckets(r, &n);
    return mstarpy_keys_to_py(k, n);
}

static PyObject *gr_dropped(PyObject *self, PyObject *unused)
{
    GR_OR_NULL(self);
    (void)g;
    size_t n;
    const mstar_bucket_key *k = mstar_graph_runner_dropped_buckets(r, &n);
    return mstarpy_keys_to_py(k, n);
}

/* Forget the replay records whose graph is gone (dropped, failed, or a throwaway's). */
static void prune_records(gr_obj *g)
{
    PyObject *keys = PyDict_Keys(g->refs.records);
    if (!keys)
        return;
    size_t nb;
    const mstar_bucket_key *b = mstar_graph_runner_buckets(g->r, &nb);
    int32_t slots = mstar_graph_runner_num_slots(g->r);
    PyObject *live = PySet_New(NULL);
    for (size_t i = 0; live && i < nb; i++) {
        for (int32_t s = 0; s < slots; s++) {
            mstar_slot_lease l = { s, b[i] };
            const mstar_graph_slot *slot = mstar_graph_runner_slot_for(g->r, &l);
            if (slot == NULL)
                continue;
            PyObject *name = record_name(&l, mstar_graph_slot_static_outputs(slot));
            if (name)
                PySet_Add(live, name);
            Py_XDECREF(name);
        }
    }
    for (Py_ssize_t i = 0; live && i < PyList_Size(keys); i++) {
        PyObject *k = PyList_GetItem(keys, i);
        if (PySet_Contains(live, k) == 0)
            PyDict_DelItem(g->refs.records, k);
    }
    Py_XDECREF(live);
    Py_DECREF(keys);
    PyErr_Clear();
}

void mstarpy_graph_runner_forget_stale(PyObject *obj)
{
    if (PyObject_TypeCheck(obj, mstarpy_graph_runner_type) && ((gr_obj *)obj)->r)
        prune_records((gr_obj *)obj);
}

static PyObject *gr_prepare(PyObject *self, PyObject *unused)
{
    GR_OR_NULL(self);
    const mstar_cg_slot_spec *specs;
    size_t n;
    mstar_status st = mstar_graph_runner_prepare_for_capture(r, &specs, &n);
    if (st != MSTAR_OK)
        return mstarpy_pending_finish(&g->refs.pending, st);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *k = mstarpy_key_to_py(&specs[i].bucket);
        PyObject *t = k ? Py_BuildValue("(NiI)", k, (int)specs[i].slot, specs[i].config_idx) : NULL;
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

static PyObject *gr_warmup_and_capture(PyObject *self, PyObject *planned)
{
    GR_OR_NULL(self);
    PyObject *seq;
    mstar_bucket_key *keys;
    size_t n;
    PyObject *res = NULL;
    if (mstarpy_keys_from_py(planned, &seq, &keys, &n) == 0) {
        mstarpy_step_cache_clear(&g->cache); /* the outputs may move */
        mstar_status st = mstar_graph_runner_warmup_and_capture(r, keys, seq ? n : 0);
        prune_records(g);
        res = mstarpy_pending_finish(&g->refs.pending, st);
    }
    free(keys);
    Py_XDECREF(seq);
    return res;
}

static PyObject *gr_drop(PyObject *self, PyObject *key)
{
    GR_OR_NULL(self);
    mstar_bucket_key k;
    if (mstarpy_key_from_py(key, &k) < 0)
        return NULL;
    mstarpy_step_cache_clear(&g->cache); /* the bucket's outputs go */
    mstar_status st = mstar_graph_runner_drop_bucket(r, &k);
    prune_records(g);
    return mstarpy_pending_finish(&g->refs.pending, st);
}

static int opt_key(PyObject *o, const char **out)
{
    *out = NULL;
    if (o == Py_None)
        return 0;
    *out = PyUnicode_AsUTF8AndSize(o, NULL);
    return *out ? 0 : -1;
}

/* select_bucket(walk, bs, num_tokens, cg_key_info=None) -> key or None (num_tokens None: the
 * batched search) */
static PyObject *gr_select(PyObject *self, PyObject *args)
{
    const char *walk;
    long long bs;
    PyObject *tok = Py_None, *ko = Py_None;
    if (!PyArg_ParseTuple(args, "sL|OO", &walk, &bs, &tok, &ko))
        return NULL;
    GR_OR_NULL(self);
    (void)g;
    const char *key;
    int64_t t = -1;
    if (opt_key(ko, &key) < 0 || (tok != Py_None && mstarpy_i64_from_py(tok, &t, "num_tokens") < 0))
        return NULL;
    mstar_bucket_key out;
    bool found = tok == Py_None ? mstar_graph_runner_select_batched_bucket(r, walk, bs, key, &out)
                                : mstar_graph_runner_select_bucket(r, walk, bs, t, key, &out);
    if (!found)
        Py_RETURN_NONE;
    return mstarpy_key_to_py(&out);
}

/* The three methods of a step (lease_slot, run_forward, release) take their arguments through
 * args.h's parser: the generic one builds a tuple and a dict per call. */

/* lease_slot(graph_walk, bs, slot=None, num_tokens=None, cg_key_info=None) -> SlotLease or None */
static PyObject *gr_lease(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = { "graph_walk", "bs",          "slot",
                                         "num_tokens", "cg_key_info", NULL };
    static const mstarpy_params p = { "lease_slot", names, 5, 2 };
    PyObject *a[5];
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0)
        return NULL;
    if (!PyUnicode_Check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "lease_slot() argument 'graph_walk' must be str");
        return NULL;
    }
    const char *walk = PyUnicode_AsUTF8AndSize(a[0], NULL);
    int64_t bs;
    if (!walk || mstarpy_i64_from_py(a[1], &bs, "bs") < 0)
        return NULL;
    GR_OR_NULL(self);
    const char *key;
    int64_t t = -1, slot = -1;
    if (opt_key(a[4] ? a[4] : Py_None, &key) < 0 ||
        (a[3] && a[3] != Py_None && mstarpy_i64_from_py(a[3], &t, "num_tokens") < 0) ||
        (a[2] && a[2] != Py_None && mstarpy_i64_from_py(a[2], &slot, "slot") < 0))
        return NULL;
    mstar_slot_lease out;
    if (!mstar_graph_runner_lease_slot(r, walk, bs, (int32_t)slot, t, key, &out))
        Py_RETURN_NONE;
    return mstarpy_step_cache_lease(&g->cache, &out);
}

static PyObject *gr_can_run(PyObject *self, PyObject *args)
{
    const char *walk;
    long long bs, tok;
    PyObject *ko = Py_None;
    if (!PyArg_ParseTuple(args, "sLL|O", &walk, &bs, &tok, &ko))
        return NULL;
    GR_OR_NULL(self);
    (void)g;
    const char *key;
    if (opt_key(ko, &key) < 0)
        return NULL;
    return PyBool_FromLong(mstar_graph_runner_can_run(r, walk, bs, tok, key));
}

static PyObject *gr_captures_walk(PyObject *self, PyObject *arg)
{
    GR_OR_NULL(self);
    (void)g;
    const char *walk = PyUnicode_AsUTF8AndSize(arg, NULL);
    return walk ? PyBool_FromLong(mstar_graph_runner_captures_walk(r, walk)) : NULL;
}

static PyObject *gr_any_graphs(PyObject *self, PyObject *unused)
{
    GR_OR_NULL(self);
    (void)g;
    return PyBool_FromLong(mstar_graph_runner_any_graphs(r));
}

static PyObject *gr_num_slots(PyObject *self, PyObject *unused)
{
    GR_OR_NULL(self);
    (void)g;
    return PyLong_FromLong(mstar_graph_runner_num_slots(r));
}

static PyObject *gr_max_bs(PyObject *self, PyObject *arg)
{
    GR_OR_NULL(self);
    (void)g;
    const char *walk = PyUnicode_AsUTF8AndSize(arg, NULL);
    if (!walk)
        return NULL;
    int64_t v = mstar_graph_runner_max_batch_size_for(r, walk);
    if (v < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

/* The lease `obj` into `l` (a SlotLease lease_slot handed out is not parsed again). */
#define LEASE_ARG(obj, l)                                                                         \
    mstar_slot_lease l;                                                                           \
    if (!mstarpy_step_cache_find_lease(&g->cache, obj, &l) && mstarpy_lease_from_py(obj, &l) < 0) \
    return NULL

static PyObject *gr_is_packed(PyObject *self, PyObject *lo)
{
    GR_OR_NULL(self);
    (void)g;
    LEASE_ARG(lo, l);
    return PyBool_FromLong(mstar_graph_runner_is_packed(r, &l));
}

static PyObject *gr_config_idx(PyObject *self, PyObject *lo)
{
    GR_OR_NULL(self);
    (void)g;
    LEASE_ARG(lo, l);
    uint32_t idx;
    if (!mstar_graph_runner_config_for(r, &l, &idx))
        return mstarpy_raise_msg(MSTAR_ENOENT, "the lease names no bucket of this runner");
    return PyLong_FromUnsignedLong(idx);
}

/* slot_for(lease) -> (static_inputs, static_outputs, dummy_rids) or None */
static PyObject *gr_slot_for(PyObject *self, PyObject *lo)
{
    GR_OR_NULL(self);
    LEASE_ARG(lo, l);
    const mstar_graph_slot *s = mstar_graph_runner_slot_for(r, &l);
    if (!s)
        Py_RETURN_NONE;
    size_t n;
    const int64_t *rids = mstar_graph_slot_dummy_rids(s, &n);
    PyObject *rl = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; rl && i < n; i++)
        PyList_SetItem(rl, (Py_ssize_t)i, PyLong_FromLongLong(rids[i]));
    PyObject *in = rl ? mstarpy_map_to_py(self, mstar_graph_slot_static_inputs(s)) : NULL;
    PyObject *out = in ? mstarpy_map_to_py(self, mstar_graph_slot_static_outputs(s)) : NULL;
    if (!out) {
        Py_XDECREF(rl);
        Py_XDECREF(in);
        return NULL;
    }
    (void)g;
    return Py_BuildValue("(NNN)", in, out, rl);
}

static PyObject *gr_pad_inputs(PyObject *self, PyObject *args)
{
    PyObject *lo;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "On", &lo, &n))
        return NULL;
    GR_OR_NULL(self);
    LEASE_ARG(lo, l);
    if (n < 0 || n > l.bucket.bs)
        return mstarpy_raise_msg(MSTAR_EINVAL, "pad_inputs: %zd rows for a bucket of bs %lld", n,
                                 (long long)l.bucket.bs);
    mstar_node_input *rows = calloc((size_t)l.bucket.bs + 1, sizeof(*rows));
    if (!rows)
        return PyErr_NoMemory();
    mstar_status st = mstar_graph_runner_pad_inputs(r, &l, rows, (size_t)n, rows);
    PyObject *res = st == MSTAR_OK ? rows_to_py(g, rows + n, (size_t)(l.bucket.bs - n))
                                   : mstarpy_pending_finish(&g->refs.pending, st);
    free(rows);
    return res;
}

static int ids_from_py(PyObject *o, int64_t **out, Py_ssize_t *n, Py_ssize_t extra)
{
    PyObject *seq = mstarpy_seq_list(o, "expected a sequence of ints");
    if (!seq)
        return -1;
    *n = PyList_Size(seq);
    *out = calloc((size_t)(*n + extra + 1), sizeof(**out));
    int r = *out ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; r == 0 && i < *n; i++)
        r = mstarpy_i64_from_py(PyList_GetItem(seq, i), &(*out)[i], "request id");
    Py_DECREF(seq);
    return r;
}

static PyObject *gr_step_ids(PyObject *self, PyObject *args)
{
    PyObject *lo, *ids;
    if (!PyArg_ParseTuple(args, "OO", &lo, &ids))
        return NULL;
    GR_OR_NULL(self);
    LEASE_ARG(lo, l);
    int64_t *v = NULL;
    Py_ssize_t n = 0;
    PyObject *res = NULL;
    if (ids_from_py(ids, &v, &n, l.bucket.bs > 0 ? l.bucket.bs : 0) == 0) {
        int64_t *out = calloc((size_t)(l.bucket.bs > n ? l.bucket.bs : n) + 1, sizeof(*out));
        mstar_status st =
            out ? mstar_graph_runner_step_ids(r, &l, v, (size_t)n, out) : MSTAR_ENOMEM;
        if (st == MSTAR_OK) {
            res = PyList_New((Py_ssize_t)l.bucket.bs);
            for (int64_t i = 0; res && i < l.bucket.bs; i++)
                PyList_SetItem(res, (Py_ssize_t)i, PyLong_FromLongLong(out[i]));
        } else {
            res = mstarpy_pending_finish(&g->refs.pending, st);
        }
        free(out);
    }
    free(v);
    return res;
}

static PyObject *gr_declare_inputs_for(PyObject *self, PyObject *lo)
{
    GR_OR_NULL(self);
    LEASE_ARG(lo, l);
    const mstar_node_input *rows;
    size_t n;
    mstar_status st = mstar_graph_runner_declare_inputs_for(r, &l, &rows, &n);
    return st != MSTAR_OK ? mstarpy_pending_finish(&g->refs.pending, st) : rows_to_py(g, rows, n);
}

/* release(lease, real_bs) */
static PyObject *gr_release(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = { "lease", "real_bs", NULL };
    static const mstarpy_params p = { "release", names, 2, 2 };
    PyObject *a[2];
    int64_t real_bs;
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 ||
        mstarpy_i64_from_py(a[1], &real_bs, "real_bs") < 0)
        return NULL;
    GR_OR_NULL(self);
    LEASE_ARG(a[0], l);
    return mstarpy_pending_finish(&g->refs.pending, mstar_graph_runner_release(r, &l, real_bs));
}

static PyObject *gr_static_input(PyObject *self, PyObject *args)
{
    PyObject *lo;
    const char *key;
    long long len;
    if (!PyArg_ParseTuple(args, "OsL", &lo, &key, &len))
        return NULL;
    GR_OR_NULL(self);
    LEASE_ARG(lo, l);
    mstar_tensor t;
    mstar_status st = mstar_graph_runner_static_input(r, &l, key, len, &t);
    return st != MSTAR_OK ? mstarpy_pending_finish(&g->refs.pending, st)
                          : mstarpy_capsule(self, &t);
}

/* Stage and replay, on CUDA in order with torch's current stream: the outputs map, or NULL with
 * an exception. */
static const mstar_tensor_map *replay(gr_obj *g, mstar_graph_runner *r, const mstar_slot_lease *l,
                                      const mstar_tensor_map *map)
{
    if (mstarpy_runner_after_torch(&g->refs) < 0)
        return NULL;
    const mstar_tensor_map *outs = NULL;
    mstar_status st = mstar_graph_runner_run_forward(r, l, map, NULL, NULL, &outs);
    if (st == MSTAR_OK && g->refs.pending.type) /* the replayed forward raised */
        st = MSTAR_EINVAL;
    if (st != MSTAR_OK) {
        mstarpy_pending_finish(&g->refs.pending, st);
        return NULL;
    }
    mstarpy_pending_drop(&g->refs.pending);
    if (mstarpy_runner_before_torch(&g->refs) < 0)
        return NULL;
    return outs;
}

/* Stage `pre` into the lease's slot and replay it: the static outputs as torch tensors, or NULL
 * with an exception. */
static PyObject *run_step(PyObject *self, PyObject *lo, PyObject *pre)
{
    GR_OR_NULL(self);
    LEASE_ARG(lo, l);
    if (!g->step_map) {
        mstar_status st = mstar_tensor_map_create(&g->step_map);
        if (st != MSTAR_OK)
            return mstarpy_raise(st);
    }
    mstar_tensor_map *map = g->step_map;
    /* Held apart from the capture's preprocess holds: these go once staging copied them. */
    const mstar_tensor_map *outs =
        dict_into_map(&g->step_holds, pre, map, NULL, false) == 0 ? replay(g, r, &l, map) : NULL;
    /* The static outputs as torch tensors (views of the slot's buffers, each holding g). */
    PyObject *res = outs ? mstarpy_step_cache_outputs(&g->cache, self, outs) : NULL;
    holds_release(&g->step_holds);
    mstar_tensor_map_clear(map);
    return res;
}

/* run_forward(lease, preprocessed, plan_done_event=None, launch_started_event=None) -> dict of
 * torch tensors: the slot's static outputs. The whole step is C: graphs.py binds this method as
 * the runner's own run_forward, so a replay on CUDA runs no Python frame. */
static PyObject *gr_run_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = { "lease", "preprocessed", "plan_done_event",
                                         "launch_started_event", NULL };
    static const mstarpy_params p = { "run_forward", names, 4, 2 };
    PyObject *a[4];
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0)
        return NULL;
    /* a[2], plan_done_event: no pre-plan runs from Python yet (docs/python.md) */
    PyObject *started = a[3];
    PyObject *res = run_step(self, a[0], a[1]);
    if (!started || started == Py_None)
        return res;
    /* Set on every path, failures included (I-25), keeping the step's own exception. */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *ok = PyObject_CallMethod(started, "set", NULL);
    if (!ok)
        Py_CLEAR(res);
    Py_XDECREF(ok);
    if (t) {
        PyErr_Clear();
        PyErr_Restore(t, v, tb);
    }
    return res;
}

static PyObject *gr_warm_bucket(PyObject *self, PyObject *key)
{
    GR_OR_NULL(self);
    mstar_bucket_key k;
    if (mstarpy_key_from_py(key, &k) < 0)
        return NULL;
    uint64_t peak = 0;
    mstar_status st = mstar_graph_runner_warm_bucket(r, &k, &peak);
    return st != MSTAR_OK ? mstarpy_pending_finish(&g->refs.pending, st)
                          : PyLong_FromUnsignedLongLong(peak);
}

/* capture_throwaway(key) -> {taken, kept, peak, nodes}; the graph is destroyed at once. */
static PyObject *gr_capture_throwaway(PyObject *self, PyObject *key)
{
    GR_OR_NULL(self);
    mstar_bucket_key k;
    if (mstarpy_key_from_py(key, &k) < 0)
        return NULL;
    mstar_graph *graph = NULL;
    mstar_capture_stats s;
    memset(&s, 0, sizeof(s));
    mstar_status st = mstar_graph_runner_capture_throwaway(r, &k, 0, &graph, &s);
    mstar_graph_destroy(graph);
    prune_records(g);
    if (st != MSTAR_OK)
        return mstarpy_pending_finish(&g->refs.pending, st);
    mstarpy_pending_drop(&g->refs.pending);
    return Py_BuildValue("{sKsKsKsn}", "taken", (unsigned long long)s.taken, "kept",
                         (unsigned long long)s.kept, "peak", (unsigned long long)s.peak, "nodes",
                         (Py_ssize_t)s.nodes);
}

static PyObject *gr_dummy(PyObject *self, PyObject *args)
{
    const char *op, *key = NULL;
    long long bs = 0;
    PyObject *rids = NULL;
    int free_storage = 0;
    if (!PyArg_ParseTuple(args, "s|zLOp", &op, &key, &bs, &rids, &free_storage))
        return NULL;
    GR_OR_NULL(self);
    mstar_dummy_rows *rows = mstar_graph_runner_dummy_rows(r);
    if (strcmp(op, "release_all") == 0)
        return mstarpy_pending_finish(&g->refs.pending, mstar_dummy_rows_release_all(rows));
    if (strcmp(op, "reset") == 0) {
        int64_t *v = NULL;
        Py_ssize_t n = 0;
        PyObject *res = NULL;
        if (rids && ids_from_py(rids, &v, &n, 0) == 0)
            res = mstarpy_pending_finish(&g->refs.pending,
                                         mstar_dummy_rows_reset(rows, v, (size_t)n, free_storage));
        else if (!rids)
            PyErr_SetString(PyExc_TypeError, "reset needs the rows");
        free(v);
        return res;
    }
    if (!key)
        return mstarpy_raise_msg(MSTAR_EINVAL, "%s needs a key", op);
    const int64_t *h;
    mstar_status st = strcmp(op, "ensure") == 0 ? mstar_dummy_rows_ensure(rows, key, bs, &h)
                                                : mstar_dummy_rows_handles(rows, key, bs, &h);
    if (st != MSTAR_OK)
        return mstarpy_pending_finish(&g->refs.pending, st);
    PyObject *l = PyList_New((Py_ssize_t)bs);
    for (long long i = 0; l && i < bs; i++)
        PyList_SetItem(l, (Py_ssize_t)i, PyLong_FromLongLong(h[i]));
    return l;
}

static PyObject *gr_records(PyObject *self, PyObject *unused)
{
    gr_obj *g = (gr_obj *)self;
    return PyDict_Size(g->refs.records) >= 0 ? PyLong_FromSsize_t(PyDict_Size(g->refs.records))
                                             : NULL;
}

/* After startup: forget the replays of graphs it dropped; hand over the exception a callback
 * raised (None if none), which is the cause when startup failed. */
static PyObject *gr_after_startup(PyObject *self, PyObject *unused)
{
    GR_OR_NULL(self);
    (void)r;
    prune_records(g);
    return mstarpy_pending_take(&g->refs.pending);
}

static PyObject *gr_close_m(PyObject *self, PyObject *unused)
{
    gr_close((gr_obj *)self);
    Py_RETURN_NONE;
}

static PyMethodDef gr_methods[] = {
    { "buckets", gr_buckets, METH_NOARGS, "Every configured bucket key, in capture order." },
    { "dropped_buckets", gr_dropped, METH_NOARGS, NULL },
    { "drop_bucket", gr_drop, METH_O, NULL },
    { "prepare_for_capture", gr_prepare, METH_NOARGS, "-> [(key, slot, config_idx)]" },
    { "warmup_and_capture", gr_warmup_and_capture, METH_O, "warmup_and_capture(planned or None)" },
    { "select_bucket", gr_select, METH_VARARGS, NULL },
    { "lease_slot", (PyCFunction)(void (*)(void))gr_lease, METH_FASTCALL | METH_KEYWORDS,
      "lease_slot($self, /, graph_walk, bs, slot=None, num_tokens=None, cg_key_info=None)\n--\n\n"
      "The bucket and double-buffer slot a step of bs rows replays on: a SlotLease, or None when "
      "no captured bucket fits." },
    { "can_run", gr_can_run, METH_VARARGS, NULL },
    { "captures_walk", gr_captures_walk, METH_O, NULL },
    { "any_graphs", gr_any_graphs, METH_NOARGS, NULL },
    { "num_slots", gr_num_slots, METH_NOARGS, NULL },
    { "max_batch_size_for", gr_max_bs, METH_O, NULL },
    { "is_packed", gr_is_packed, METH_O, NULL },
    { "config_idx_for", gr_config_idx, METH_O, NULL },
    { "slot_for", gr_slot_for, METH_O, "-> (static_inputs, static_outputs, dummy_rids) or None" },
    { "pad_inputs", gr_pad_inputs, METH_VARARGS, "pad_inputs(lease, n_real) -> padding rows" },
    { "step_ids", gr_step_ids, METH_VARARGS, NULL },
    { "declare_inputs_for", gr_declare_inputs_for, METH_O, NULL },
    { "release", (PyCFunction)(void (*)(void))gr_release, METH_FASTCALL | METH_KEYWORDS,
      "release($self, /, lease, real_bs)\n--\n\nEnd the step on the lease's slot." },
    { "static_input", gr_static_input, METH_VARARGS, NULL },
    { "run_forward", (PyCFunction)(void (*)(void))gr_run_forward, METH_FASTCALL | METH_KEYWORDS,
      "run_forward($self, /, lease, preprocessed, plan_done_event=None, "
      "launch_started_event=None)\n--\n\n"
      "Stage this step's inputs into the slot and replay it: the slot's static outputs (torch "
      "tensors viewing them, valid until the slot's next replay)." },
    { "warm_bucket", gr_warm_bucket, METH_O, NULL },
    { "capture_throwaway", gr_capture_throwaway, METH_O, NULL },
    { "dummy_rows", gr_dummy, METH_VARARGS,
      "dummy_rows(op, key=None, bs=0, rids=None, free=False): ensure, handles, reset, "
      "release_all" },
    { "_after_startup", gr_after_startup, METH_NOARGS, NULL },
    { "_records", gr_records, METH_NOARGS, "Replay records held (tests)." },
    { "close", gr_close_m, METH_NOARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyType_Slot gr_slots[] = {
    { Py_tp_new, gr_new },
    { Py_tp_dealloc, gr_dealloc },
    { Py_tp_traverse, gr_traverse },
    { Py_tp_clear, gr_clear },
    { Py_tp_methods, gr_methods },
    { Py_tp_doc, "_GraphRunner(name, step_runner, pool, configs, callbacks, num_slots=0, "
                 "autocast=None): the C whole-forward runner over a Python submodule." },
    { 0, NULL },
};

static PyType_Spec gr_spec = { "mstar_c._mstar._GraphRunner", sizeof(gr_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                               gr_slots };

int mstarpy_add_runner_graph_types(PyObject *module)
{
    mstarpy_graph_runner_type = (PyTypeObject *)PyType_FromSpec(&gr_spec);
    if (!mstarpy_graph_runner_type)
        return -1;
    return PyModule_AddObjectRef(module, "_GraphRunner", (PyObject *)mstarpy_graph_runner_type);
}
