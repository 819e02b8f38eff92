/*
 * runner_common.c — what _GraphRunner (runner_graph.c) and _PiecewiseRunner (runner_piecewise.c)
 * do alike: keeping the first exception a Python callback raised until the method whose C call
 * failed re-raises it, the references both objects hold (mstarpy_runner_refs), launching a host
 * replay record that re-enters Python, bucket keys to and from Python, and walking a dict of
 * tensors a callback returned.
 */
#include "runner.h"

#include <stdlib.h>
#include <string.h>

mstar_status mstarpy_pending_keep(mstarpy_pending *p, const char *what)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    mstar_status st = mstar_error_set(MSTAR_EINVAL, "%s raised %s", what, msg ? msg : "?");
    PyErr_Clear();
    Py_XDECREF(s);
    if (!p->type) {
        p->type = t;
        p->value = v;
        p->tb = tb;
    } else {
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    }
    return st;
}

void mstarpy_pending_drop(mstarpy_pending *p)
{
    Py_CLEAR(p->type);
    Py_CLEAR(p->value);
    Py_CLEAR(p->tb);
}

PyObject *mstarpy_pending_finish(mstarpy_pending *p, mstar_status st)
{
    if (st == MSTAR_OK) {
        mstarpy_pending_drop(p);
        Py_RETURN_NONE;
    }
    if (p->type) {
        PyErr_Restore(p->type, p->value, p->tb);
        p->type = p->value = p->tb = NULL;
        return NULL;
    }
    return mstarpy_raise(st);
}

PyObject *mstarpy_pending_take(mstarpy_pending *p)
{
    if (!p->type)
        Py_RETURN_NONE;
    PyErr_NormalizeException(&p->type, &p->value, &p->tb);
    PyObject *v = p->value ? Py_NewRef(p->value) : Py_NewRef(Py_None);
    mstarpy_pending_drop(p);
    return v;
}

struct replay_args {
    mstarpy_pending *pending;
    PyObject *rec; /* held by the runner's records */
    const char *what;
};

/* A host replay: run the record again (graphs.py's), under the GIL the launch does not hold. */
static void replay_host(void *p)
{
    struct replay_args *a = p;
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject *r = PyObject_CallNoArgs(a->rec);
    if (!r)
        (void)mstarpy_pending_keep(a->pending, a->what);
    Py_XDECREF(r);
    PyGILState_Release(gs);
}

int mstarpy_replay_keep(PyObject *records, PyObject *key, PyObject *rec, mstar_stream *stream,
                        mstarpy_pending *pending, const char *what)
{
    int r = key && PyDict_SetItem(records, key, rec) == 0 ? 0 : -1;
    Py_XDECREF(key);
    if (r < 0)
        return -1;
    struct replay_args a = { pending, rec, what };
    mstar_status st = mstar_launch(stream, replay_host, &a, sizeof(a));
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

PyObject *mstarpy_keys_to_py(const mstar_bucket_key *k, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = mstarpy_key_to_py(&k[i]);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SetItem(l, (Py_ssize_t)i, t);
    }
    return l;
}

int mstarpy_runner_args(PyObject *sro, PyObject *poolo, PyObject *autocast, mstar_step_runner **sr,
                        mstar_dtype *dt)
{
    *sr = mstarpy_step_runner_handle(sro);
    if (!*sr)
        return -1;
    if (!PyObject_TypeCheck(poolo, mstarpy_pool_type)) {
        PyErr_SetString(PyExc_TypeError, "pool must be a graph pool");
        return -1;
    }
    *dt = MSTAR_DTYPE_INVALID;
    if (autocast != Py_None && mstarpy_dtype_from_py(autocast, dt, "autocast_dtype") < 0)
        return -1;
    return 0;
}

void mstarpy_runner_refs_init(mstarpy_runner_refs *b, PyObject *sro, PyObject *poolo, PyObject *cb,
                              mstar_step_runner *sr)
{
    b->sro = Py_NewRef(sro);
    b->poolo = Py_NewRef(poolo);
    b->cb = Py_NewRef(cb);
    b->records = PyDict_New();
    b->host = mstar_backend_device(mstar_step_runner_backend(sr)).type != MSTAR_DEVICE_CUDA;
}

int mstarpy_runner_refs_traverse(mstarpy_runner_refs *b, visitproc visit, void *arg)
{
    Py_VISIT(b->cb);
    Py_VISIT(b->records);
    return 0;
}

void mstarpy_runner_refs_clear(mstarpy_runner_refs *b)
{
    Py_CLEAR(b->cb);
    Py_CLEAR(b->records);
}

void mstarpy_runner_free(PyObject *obj, mstarpy_runner_refs *b)
{
    PyTypeObject *tp = Py_TYPE(obj);
    mstarpy_torch_order_close(&b->order);
    mstarpy_pending_drop(&b->pending);
    mstarpy_runner_refs_clear(b);
    Py_CLEAR(b->poolo);
    Py_CLEAR(b->sro);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp); /* a heap type's instance holds its type */
}

int mstarpy_keys_from_py(PyObject *planned, PyObject **seq, mstar_bucket_key **out, size_t *n)
{
    *seq = NULL;
    *out = NULL;
    *n = 0;
    if (planned == Py_None)
        return 0;
    *seq = mstarpy_seq_list(planned, "planned must be a sequence of bucket keys");
    if (!*seq)
        return -1;
    Py_ssize_t len = PyList_Size(*seq);
    *out = calloc((size_t)(len > 0 ? len : 1), sizeof(**out));
    if (!*out)
        return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < len; i++)
        if (mstarpy_key_from_py(PyList_GetItem(*seq, i), &(*out)[i]) < 0)
            return -1;
    *n = (size_t)len;
    return 0;
}

int mstarpy_dict_tensors(PyObject *d, const char *msg, mstarpy_tensor_visit visit, void *user)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, msg);
        return -1;
    }
    PyObject *items = PyDict_Items(d); /* a snapshot: the dict may change under callbacks */
    if (!items)
        return -1;
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyList_Size(items); i++) {
        PyObject *kv = PyList_GetItem(items, i);
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(kv, 0), NULL);
        mstar_tensor t;
        mstar_release_fn fn = NULL;
        void *ctx = NULL;
        if (!name || mstarpy_tensor_in(PyTuple_GetItem(kv, 1), &t, &fn, &ctx) < 0)
            r = -1;
        else
            r = visit(user, name, &t, fn, ctx);
    }
    Py_DECREF(items);
    return r;
}

/* ---- replays in order with torch's stream ------------------------------------------------------
 */

/* The wrapper over torch's current stream on the device of `ours`, and the two events. When
 * torch's current stream is the legacy default stream (torch's default), the order is implicit:
 * the compute stream is a blocking stream (runner_step.c), which the legacy stream waits for and
 * which waits for it, so no event is needed either way. */
static int torch_stream(mstarpy_torch_order *o, mstar_stream *ours)
{
    mstar_backend *b = mstar_stream_backend(ours);
    void *native;
    if (mstarpy_torch_current_stream((int)mstar_backend_device(b).index, &native) < 0)
        return -1;
    o->implicit = native == NULL;
    if (o->implicit)
        return 0;
    mstar_status st = MSTAR_OK;
    if (!o->before)
        st = mstar_event_create(b, &o->before);
    if (st == MSTAR_OK && !o->after)
        st = mstar_event_create(b, &o->after);
    if (st == MSTAR_OK && (!o->theirs || o->native != native)) {
        mstar_stream_destroy(o->theirs);
        o->theirs = NULL;
        st = mstar_stream_wrap(b, native, &o->theirs);
        o->native = native;
    }
    return st == MSTAR_OK ? 0 : (mstarpy_raise(st), -1);
}

int mstarpy_runner_after_torch(mstarpy_runner_refs *b)
{
    if (b->host)
        return 0;
    mstar_stream *ours = ((mstarpy_step_runner *)b->sro)->stream;
    mstarpy_torch_order *o = &b->order;
    if (torch_stream(o, ours) < 0)
        return -1;
    if (o->implicit)
        return 0;
    mstar_status st = mstar_event_record(o->before, o->theirs);
    if (st == MSTAR_OK)
        st = mstar_stream_wait_event(ours, o->before);
    return st == MSTAR_OK ? 0 : (mstarpy_raise(st), -1);
}

int mstarpy_runner_before_torch(mstarpy_runner_refs *b)
{
    mstarpy_torch_order *o = &b->order;
    if (b->host || o->implicit)
        return 0;
    mstar_stream *ours = ((mstarpy_step_runner *)b->sro)->stream;
    mstar_status st = mstar_event_record(o->after, ours);
    if (st == MSTAR_OK)
        st = mstar_stream_wait_event(o->theirs, o->after);
    return st == MSTAR_OK ? 0 : (mstarpy_raise(st), -1);
}

void mstarpy_torch_order_close(mstarpy_torch_order *o)
{
    mstar_stream_destroy(o->theirs);
    mstar_event_destroy(o->before);
    mstar_event_destroy(o->after);
    memset(o, 0, sizeof(*o));
}
