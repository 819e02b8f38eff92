/*
 * comm.c — mstar_c.CommunicationManager's C core (_mstar.Comm): one entity's tensor transport
 * (mstar/tensors.h) with the reference's method names.
 *
 * Threads: the library's manager belongs to one thread at a time. Calls that wait (staging,
 * reads, collection, teardown) run with the GIL released, so a second Python thread could
 * reach the same manager meanwhile: every call marks the object busy, and a call that finds it
 * busy raises StateError instead of racing. A view (mstar_c.Tensor) that goes while the manager
 * is busy queues its dereference for the end of the running call.
 *
 * ACKs leave through the `send` given at construction: an mstar_c.Mesh (the library's own mesh
 * sender), or any Python callable send(peer, Message) — called with the GIL taken back, and an
 * exception it raises is raised again by the manager call that sent.
 *
 * Closing: close(), the context manager and garbage collection all destroy the manager (every
 * staged file and segment goes). While views of its tensors are alive, the destroy waits for
 * the last one; the manager refuses every call from close() on (ClosedError).
 */
#include "args.h"
#include "mstar_py.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mstarpy_comm {
    PyObject ob_base; /* PyObject_HEAD */
    mstar_comm *comm;
    mstar_backend *backend; /* owned, destroyed after the manager */
    bool uses_mesh;         /* send_obj is a Mesh this manager holds acquired */
    PyObject *send_obj;     /* the Mesh or the callable; kept alive */
    PyObject *views;        /* dict rid -> live view count */
    Py_ssize_t nviews;
    bool closing;
    bool busy;
    /* dereferences of views that went while busy */
    mstar_tensor_id *deferred;
    size_t ndeferred, cap_deferred;
    /* an exception raised by the Python send callback during the running call */
    PyObject *send_exc_type, *send_exc_value, *send_exc_tb;
};

typedef struct mstarpy_comm comm_obj;

/* ---- the lifecycle -------------------------------------------------------------------------- */

static void destroy_now(comm_obj *self)
{
    mstar_comm *c = self->comm;
    mstar_backend *b = self->backend;
    self->comm = NULL;
    self->backend = NULL;
    if (c) {
        PyThreadState *ts_ = PyEval_SaveThread();
        mstar_comm_destroy(c);
        PyEval_RestoreThread(ts_);
    }
    if (b)
        mstar_backend_destroy(b);
    if (self->uses_mesh) {
        self->uses_mesh = false;
        mstarpy_mesh_release(self->send_obj);
    }
    free(self->deferred);
    self->deferred = NULL;
    self->ndeferred = self->cap_deferred = 0;
}

static int enter(comm_obj *self)
{
    if (!self->comm || self->closing) {
        mstarpy_raise_msg(MSTAR_ECLOSED, "the communication manager is closed");
        return -1;
    }
    if (self->busy) {
        mstarpy_raise_msg(MSTAR_ESTATE, "the communication manager is in use by another call "
                                        "(another thread, or a send callback calling back in)");
        return -1;
    }
    self->busy = true;
    return 0;
}

/* Whether the call's error is the library's report of a raising send callback. */
static bool failed_in_callback(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *cls = t ? mstarpy_error_class(MSTAR_EREMOTE) : NULL;
    bool r = cls && PyErr_GivenExceptionMatches(t, cls);
    PyErr_Clear();
    PyErr_Restore(t, v, tb);
    return r;
}

/* End a call: run the queued dereferences, and raise what the send callback raised in place of
 * a success or of the RemoteError that reports it (a failed ACK send fails the call). Another
 * error of the call wins. Returns `result`, or NULL. */
static PyObject *leave(comm_obj *self, PyObject *result)
{
    self->busy = false;
    for (size_t i = 0; self->comm && i < self->ndeferred; i++)
        mstar_comm_dereference(self->comm, self->deferred[i], 1);
    self->ndeferred = 0;
    if (self->send_exc_type) {
        if (result || failed_in_callback()) {
            Py_XDECREF(result);
            result = NULL;
            PyErr_Clear();
            PyErr_Restore(self->send_exc_type, self->send_exc_value, self->send_exc_tb);
        } else {
            Py_XDECREF(self->send_exc_type);
            Py_XDECREF(self->send_exc_value);
            Py_XDECREF(self->send_exc_tb);
        }
        self->send_exc_type = self->send_exc_value = self->send_exc_tb = NULL;
    }
    return result;
}

static PyObject *fail(comm_obj *self, mstar_status st)
{
    mstarpy_raise(st);
    return leave(self, NULL);
}

int mstarpy_comm_view_added(comm_obj *self, PyObject *rid)
{
    PyObject *n = PyDict_GetItemWithError(self->views, rid);
    if (!n && PyErr_Occurred())
        return -1;
    long v = n ? PyLong_AsLong(n) : 0;
    PyObject *nv = PyLong_FromLong(v + 1);
    int r = nv ? PyDict_SetItem(self->views, rid, nv) : -1;
    Py_XDECREF(nv);
    if (r == 0)
        self->nviews++;
    return r;
}

/* Called from deallocs and DLPack deleters, which may run while an exception is being raised
 * (a temporary view going as its check() fails): that exception is kept, and nothing this
 * work raises is reported. */
void mstarpy_comm_view_dropped(comm_obj *self, PyObject *rid, mstar_tensor_id uuid)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (self->comm) {
        if (!self->busy) {
            mstar_comm_dereference(self->comm, uuid, 1);
        } else if (self->ndeferred < self->cap_deferred ||
                   (self->cap_deferred = self->cap_deferred ? 2 * self->cap_deferred : 16,
                    self->deferred =
                        realloc(self->deferred, self->cap_deferred * sizeof(mstar_tensor_id)))) {
            self->deferred[self->ndeferred++] = uuid;
        }
    }
    PyObject *n = PyDict_GetItemWithError(self->views, rid);
    if (n) {
        long v = PyLong_AsLong(n) - 1;
        PyObject *nv = v > 0 ? PyLong_FromLong(v) : NULL;
        if (nv)
            PyDict_SetItem(self->views, rid, nv);
        else
            PyDict_DelItem(self->views, rid);
        Py_XDECREF(nv);
    }
    PyErr_Clear();
    mstarpy_comm_unhold(self);
    PyErr_Restore(et, ev, tb);
}

void mstarpy_comm_hold(comm_obj *self)
{
    self->nviews++;
}

void mstarpy_comm_unhold(comm_obj *self)
{
    self->nviews--;
    if (self->closing && self->nviews == 0 && !self->busy)
        destroy_now(self);
}

bool mstarpy_comm_closed(comm_obj *self)
{
    return !self->comm || self->closing;
}

int mstarpy_comm_view_take(comm_obj *self, PyObject *rid, mstar_tensor_id uuid)
{
    mstar_status st = mstar_comm_increment_ref(self->comm, uuid, 1);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    if (mstarpy_comm_view_added(self, rid) < 0) {
        mstar_comm_dereference(self->comm, uuid, 1);
        return -1;
    }
    return 0;
}

int mstarpy_comm_loan_release(comm_obj *self, mstar_loan_id id)
{
    if (!self->comm)
        return 0; /* the destroy gave every loan back */
    if (self->busy) {
        mstarpy_raise_msg(MSTAR_ESTATE, "the communication manager is in use by another call");
        return -1;
    }
    mstar_status st = mstar_comm_loan_release(self->comm, id);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        return -1;
    }
    return 0;
}

PyObject *mstarpy_comm_view_check(comm_obj *self, mstar_tensor_id uuid)
{
    if (enter(self) < 0)
        return NULL;
    mstar_status st = mstar_comm_view_check(self->comm, uuid);
    /* EINVAL: not a view but the manager's own copy, which stays valid while held. */
    return st == MSTAR_OK || st == MSTAR_EINVAL ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
}

/* The Python sender: called by the library during get_ready_tensors and friends, while the
 * calling thread has the GIL released. */
static mstar_status py_send(void *ctx, const char *peer, mstar_msg *msg)
{
    comm_obj *self = ctx;
    PyGILState_STATE g = PyGILState_Ensure();
    if (!self->send_obj) { /* cleared by the garbage collector while the manager goes */
        PyGILState_Release(g);
        return mstar_error_set(MSTAR_ECLOSED, "the manager's send callback is gone");
    }
    PyObject *m = mstarpy_msg_to_py(msg);
    PyObject *r = m ? PyObject_CallFunction(self->send_obj, "sO", peer, m) : NULL;
    Py_XDECREF(m);
    mstar_status st = MSTAR_OK;
    if (!r) {
        if (!self->send_exc_type)
            PyErr_Fetch(&self->send_exc_type, &self->send_exc_value, &self->send_exc_tb);
        else
            PyErr_Clear();
        st = mstar_error_set(MSTAR_EREMOTE, "the Python send callback raised (sending %s to %s)",
                             mstar_msg_type_name(msg->type), peer);
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

static int parse_device(PyObject *obj, mstar_backend **out)
{
    *out = NULL;
    if (obj == Py_None)
        return 0;
    PyObject *s = PyObject_Str(obj); /* accepts torch.device too */
    const char *d = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    if (!d) {
        Py_XDECREF(s);
        return -1;
    }
    int r = 0;
    if (strcmp(d, "cpu") == 0) {
        /* host tensors only: no backend */
    } else if (strncmp(d, "cuda", 4) == 0 && (d[4] == '\0' || d[4] == ':')) {
        char *end;
        long idx = d[4] == ':' ? strtol(d + 5, &end, 10) : 0;
        if (d[4] == ':' && (*end != '\0' || end == d + 5 || idx < 0 || idx > 1024)) {
            mstarpy_raise_msg(MSTAR_EINVAL, "device \"%s\": cpu, cuda or cuda:N", d);
            r = -1;
        } else {
            mstar_device dev = { MSTAR_DEVICE_CUDA, (int32_t)idx };
            mstar_status st = mstar_backend_create(dev, out);
            if (st != MSTAR_OK) {
                mstarpy_raise(st);
                r = -1;
            }
        }
    } else {
        mstarpy_raise_msg(MSTAR_EINVAL, "device \"%s\": cpu, cuda or cuda:N", d);
        r = -1;
    }
    Py_DECREF(s);
    return r;
}

static int opt_str(PyObject *obj, const char **out)
{
    *out = NULL;
    if (obj == Py_None)
        return 0;
    *out = PyUnicode_AsUTF8AndSize(obj, NULL);
    return *out ? 0 : -1;
}

static int comm_init(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = {
        "entity",       "transport", "shm_dir",     "shm_namespace", "session_id",
        "entity_index", "send",      "enable_prof", "device",        NULL
    };
    const char *entity;
    PyObject *transport = Py_None, *shm_dir = Py_None, *ns = Py_None, *session = Py_None;
    PyObject *send = Py_None, *device = Py_None;
    int entity_index = -1, prof = 0;
    if (self->comm)
        return mstarpy_raise_msg(MSTAR_ESTATE, "the manager is already initialised"), -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$OOOOiOpO", kwlist, &entity, &transport, &shm_dir,
                                     &ns, &session, &entity_index, &send, &prof, &device))
        return -1;
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.entity_index = entity_index;
    o.enable_prof = prof != 0;
    const char *tname = NULL;
    if (opt_str(transport, &tname) < 0 || opt_str(shm_dir, &o.shm_dir) < 0 ||
        opt_str(ns, &o.shm_namespace) < 0 || opt_str(session, &o.session_id) < 0)
        return -1;
    if (tname && strcmp(tname, "default") != 0) {
        mstar_status st = mstar_transport_kind_from_name(tname, &o.transport);
        if (st != MSTAR_OK)
            st = mstar_transport_kind_from_protocol(tname, &o.transport);
        if (st != MSTAR_OK) {
            mstarpy_raise_msg(MSTAR_EINVAL,
                              "transport \"%s\": default, local, files, arena, "
                              "ucx-tcp, ucx-rdma (or shm, tcp, rdma)",
                              tname);
            return -1;
        }
    }
    mstar_mesh *mesh = mstarpy_mesh_handle(send);
    if (mesh) {
        o.send = mstar_comm_send_via_mesh;
        o.send_ctx = mesh;
    } else if (send != Py_None) {
        PyObject *fn =
            PyCallable_Check(send) ? Py_NewRef(send) : PyObject_GetAttrString(send, "send");
        if (!fn || !PyCallable_Check(fn)) {
            Py_XDECREF(fn);
            PyErr_Clear();
            mstarpy_raise_msg(MSTAR_EINVAL, "send: an mstar_c.Mesh, a callable send(peer, message) "
                                            "or an object with such a send method");
            return -1;
        }
        o.send = py_send;
        o.send_ctx = self;
        self->send_obj = fn; /* our reference */
    }
    if (mesh)
        self->send_obj = Py_NewRef(send);
    if (parse_device(device, &self->backend) < 0)
        return -1;
    o.backend = self->backend;
    self->views = PyDict_New();
    if (!self->views)
        return -1;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_create(&o, &self->comm);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        self->comm = NULL;
        mstarpy_raise(st);
        return -1;
    }
    if (mesh) {
        mstarpy_mesh_acquire(self->send_obj);
        self->uses_mesh = true;
    }
    return 0;
}

static void comm_dealloc(PyObject *obj)
{
    comm_obj *self = (comm_obj *)obj;
    PyTypeObject *tp = Py_TYPE(obj);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb); /* an exception being raised survives the teardown */
    PyObject_GC_UnTrack(obj);
    destroy_now(self); /* no view can be alive: each holds a reference on this object */
    Py_CLEAR(self->send_obj);
    Py_CLEAR(self->views);
    Py_CLEAR(self->send_exc_type);
    Py_CLEAR(self->send_exc_value);
    Py_CLEAR(self->send_exc_tb);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(obj);
    Py_DECREF(tp);
    PyErr_Restore(et, ev, tb);
}

static int comm_traverse(PyObject *obj, visitproc visit, void *arg)
{
    comm_obj *self = (comm_obj *)obj;
    Py_VISIT(self->send_obj);
    Py_VISIT(self->views);
    Py_VISIT(Py_TYPE(obj));
    return 0;
}

static int comm_clear(PyObject *obj)
{
    comm_obj *self = (comm_obj *)obj;
    /* Only a Python callback can close a cycle; a Mesh holds nothing and must outlive the
     * manager's teardown. */
    if (!self->uses_mesh)
        Py_CLEAR(self->send_obj);
    return 0;
}

static PyObject *comm_close(PyObject *obj, PyObject *unused)
{
    comm_obj *self = (comm_obj *)obj;
    if (self->busy)
        return mstarpy_raise_msg(MSTAR_ESTATE,
                                 "close() while the manager is in use by another call");
    self->closing = true;
    if (self->nviews == 0)
        destroy_now(self);
    Py_RETURN_NONE;
}

static PyObject *comm_enter_ctx(PyObject *obj, PyObject *unused)
{
    return Py_NewRef(obj);
}

static PyObject *comm_exit_ctx(PyObject *obj, PyObject *args)
{
    PyObject *r = comm_close(obj, NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

/* ---- helpers -------------------------------------------------------------------------------- */

static int sharding_from_py(PyObject *obj, mstar_sharding_config *cfg, PyObject **keep,
                            const char ***names, int32_t **dims)
{
    *keep = NULL;
    *names = NULL;
    *dims = NULL;
    memset(cfg, 0, sizeof(*cfg));
    if (obj == Py_None)
        return 0;
    PyObject *d = PyDict_Check(obj) ? Py_NewRef(obj) : PyObject_GetAttrString(obj, "shard_dim");
    if (!d || !PyDict_Check(d)) {
        Py_XDECREF(d);
        PyErr_Clear();
        mstarpy_raise_msg(MSTAR_EINVAL, "sharding_config: a ShardingConfig, a dict {signal: "
                                        "shard_dim or None} or None");
        return -1;
    }
    Py_ssize_t n = PyDict_Size(d);
    *names = PyMem_Calloc(n ? (size_t)n : 1, sizeof(char *));
    *dims = PyMem_Calloc(n ? (size_t)n : 1, sizeof(int32_t));
    if (!*names || !*dims) {
        Py_DECREF(d);
        PyErr_NoMemory();
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0, i = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        (*names)[i] = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, NULL) : NULL;
        long dim = v == Py_None ? -1 : PyLong_AsLong(v);
        if (!(*names)[i] || (dim == -1 && PyErr_Occurred()) || dim < -1 || dim >= MSTAR_MAX_NDIM) {
            PyErr_Clear();
            Py_DECREF(d);
            mstarpy_raise_msg(MSTAR_EINVAL,
                              "sharding_config: each entry is signal name -> "
                              "shard dim (0..%d) or None",
                              MSTAR_MAX_NDIM - 1);
            return -1;
        }
        (*dims)[i++] = (int32_t)dim;
    }
    cfg->nsignals = (uint32_t)n;
    cfg->signals = *names;
    cfg->shard_dims = *dims;
    *keep = d;
    return 0;
}

static int rid_arg(PyObject *obj, mstar_rid *rid)
{
    return mstarpy_rid_from_py(obj, rid);
}

static int uuid_arg(PyObject *obj, mstar_tensor_id *uuid)
{
    return mstarpy_u64_from_py(obj, uuid, "uuid");
}

/* Release what outputs[0..n) handed over (a failed store leaves it the caller's). */
static void outputs_release(mstar_output *outs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (outs[i].release)
            outs[i].release(outs[i].release_ctx, outs[i].tensor.data);
}

/* Take every tensor of {signal: [tensors]} into outs (appending at *n): an mstar_c.Loan of this
 * manager as a loan when `keep` is given (the single form; the batch form refuses loans), else
 * through DLPack. `keep` (optional) receives {signal: tuple of the tensors}.
 *
 * The walk is over a snapshot of the dict's items, appended to `hold`: a __dlpack__ runs Python
 * code that may change or clear the dict, and each output's signal name points into a key,
 * which `hold` keeps alive until the caller lets go of it after the store. */
static int outputs_from_dict(comm_obj *self, PyObject *dict, uint32_t request, mstar_output **outs,
                             size_t *n, size_t *cap, PyObject *keep, PyObject *hold)
{
    if (!PyDict_Check(dict)) {
        mstarpy_raise_msg(MSTAR_EINVAL, "outputs: a dict {signal: [tensors]} is required");
        return -1;
    }
    PyObject *items = PyDict_Items(dict);
    int held = items ? PyList_Append(hold, items) : -1;
    Py_XDECREF(items);
    if (held < 0)
        return -1;
    for (Py_ssize_t at = 0; at < PyList_Size(items); at++) {
        PyObject *kv = PyList_GetItem(items, at);
        PyObject *k = PyTuple_GetItem(kv, 0), *v = PyTuple_GetItem(kv, 1);
        const char *sig = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, NULL) : NULL;
        PyObject *fast = sig ? PySequence_Tuple(v) : NULL;
        if (!fast) {
            PyErr_Clear();
            mstarpy_raise_msg(MSTAR_EINVAL,
                              "outputs: each entry is signal name -> list of tensors");
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyTuple_Size(fast); i++) {
            if (*n == *cap) {
                size_t nc = *cap ? 2 * *cap : 8;
                mstar_output *no = realloc(*outs, nc * sizeof(mstar_output));
                if (!no) {
                    Py_DECREF(fast);
                    PyErr_NoMemory();
                    return -1;
                }
                *outs = no;
                *cap = nc;
            }
            mstar_output *o = &(*outs)[*n];
            memset(o, 0, sizeof(*o));
            o->request = request;
            o->signal = sig; /* lives as long as the key, which `hold` keeps */
            PyObject *item = PyTuple_GetItem(fast, i);
            int lent = mstarpy_loan_take(item, self, &o->tensor, &o->loan);
            if (lent > 0 && !keep)
                lent = (mstarpy_raise_msg(MSTAR_ENOTSUP, "the batch store takes no loans: store "
                                                         "them with store_and_return_tensor_info"),
                        -1);
            if (lent < 0 || (lent == 0 && mstarpy_tensor_in(item, &o->tensor, &o->release,
                                                            &o->release_ctx) < 0)) {
                Py_DECREF(fast);
                return -1;
            }
            (*n)++;
        }
        int kept = keep ? PyDict_SetItem(keep, k, fast) : 0;
        Py_DECREF(fast);
        if (kept < 0)
            return -1;
    }
    if (*n > UINT32_MAX) {
        mstarpy_raise_msg(MSTAR_EINVAL, "outputs: too many tensors");
        return -1;
    }
    return 0;
}

/* The reference's skip_cuda_sync and cpu_tensors, accepted for its callers. Neither changes what
 * the library does: it orders its own copies after the producer's stream (CUDA events) so there
 * is no default-stream sync to skip, and it makes the host copy a transport needs itself, so a
 * caller's host copies (a dict, or None) are not used. -1 with an exception for a wrong type. */
static int reference_kw(PyObject *skip_cuda_sync, PyObject *cpu_tensors)
{
    int skip;
    if (skip_cuda_sync && mstarpy_arg_bool(skip_cuda_sync, &skip) < 0)
        return -1;
    if (cpu_tensors && cpu_tensors != Py_None && !PyDict_Check(cpu_tensors))
        return mstarpy_raise_msg(MSTAR_EINVAL, "cpu_tensors: a dict of host copies, or None"), -1;
    return 0;
}

static int params_from_kw(PyObject *node, PyObject *walk, int tp_size, int tp_rank,
                          mstar_store_params *p)
{
    p->tp_size = tp_size;
    p->tp_rank = tp_rank;
    return opt_str(node, &p->node_name) < 0 || opt_str(walk, &p->graph_walk) < 0 ? -1 : 0;
}

/* ---- requests and storing ------------------------------------------------------------------- */

static PyObject *comm_register_request(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = { "request_id", "sharding_config", NULL };
    PyObject *rid_obj, *cfg_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &rid_obj, &cfg_obj))
        return NULL;
    mstar_rid rid;
    mstar_sharding_config cfg;
    PyObject *keep;
    const char **names;
    int32_t *dims;
    if (rid_arg(rid_obj, &rid) < 0)
        return NULL;
    if (sharding_from_py(cfg_obj, &cfg, &keep, &names, &dims) < 0) {
        PyMem_Free(names);
        PyMem_Free(dims);
        return NULL;
    }
    PyObject *r = NULL;
    if (enter(self) == 0) {
        mstar_status st = mstar_comm_register_request(self->comm, &rid, keep ? &cfg : NULL);
        r = st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
    }
    Py_XDECREF(keep);
    PyMem_Free(names);
    PyMem_Free(dims);
    return r;
}

static PyObject *comm_store(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    comm_obj *self = (comm_obj *)obj;
    /* The reference's order by position (its skip_cuda_sync and cpu_tensors: reference_kw),
     * then this package's tp_size and tp_rank by keyword. */
    static const char *const names[] = { "request_id", "outputs",        "node_name",
                                         "graph_walk", "skip_cuda_sync", "cpu_tensors",
                                         "tp_size",    "tp_rank",        NULL };
    static const mstarpy_params p = { "store_and_return_tensor_info", names, 6, 2 };
    PyObject *a[8];
    long long tp_size = 1, tp_rank = 0;
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 || reference_kw(a[4], a[5]) < 0 ||
        (a[6] && mstarpy_arg_ll(&p, a[6], INT_MIN, INT_MAX, &tp_size) < 0) ||
        (a[7] && mstarpy_arg_ll(&p, a[7], INT_MIN, INT_MAX, &tp_rank) < 0))
        return NULL;
    PyObject *rid_obj = a[0], *outputs = a[1];
    PyObject *node = a[2] ? a[2] : Py_None, *walk = a[3] ? a[3] : Py_None;
    mstar_rid rid;
    mstar_store_params params = { 0 };
    if (rid_arg(rid_obj, &rid) < 0 ||
        params_from_kw(node, walk, (int)tp_size, (int)tp_rank, &params) < 0)
        return NULL;
    if (enter(self) < 0)
        return NULL;
    mstar_output *outs = NULL;
    size_t n = 0, cap = 0;
    mstar_tensor_info *infos = NULL;
    PyObject *result = NULL, *kept = PyDict_New(), *hold = PyList_New(0);
    if (!kept || !hold || outputs_from_dict(self, outputs, 0, &outs, &n, &cap, kept, hold) < 0)
        goto fail_release;
    infos = calloc(n ? n : 1, sizeof(*infos));
    if (!infos) {
        PyErr_NoMemory();
        goto fail_release;
    }
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_store_and_return_tensor_info(self->comm, &rid, outs, (uint32_t)n, &params,
                                                 infos);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        goto fail_release;
    }
    free(outs);
    outs = NULL;
    n = 0;
    /* {signal: [TensorPointerInfo]} in the order of the outputs; the loans are stored now. */
    result = PyDict_New();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    size_t at = 0;
    int stored = 0;
    while (result && PyDict_Next(kept, &pos, &k, &v)) {
        Py_ssize_t cnt = PyTuple_Size(v);
        PyObject *list = PyList_New(cnt);
        for (Py_ssize_t i = 0; list && i < cnt; i++, at++) {
            PyObject *item = PyTuple_GetItem(v, i);
            if (PyObject_TypeCheck(item, mstarpy.loan_type) &&
                mstarpy_loan_stored(item, rid_obj, infos[at].uuid) < 0)
                stored = -1; /* stored all the same: the other loans are marked too */
            PyObject *info = mstarpy_info_to_py(&infos[at]);
            if (!info)
                Py_CLEAR(list);
            else
                PyList_SetItem(list, i, info);
        }
        if (!list || PyDict_SetItem(result, k, list) < 0)
            Py_CLEAR(result);
        Py_XDECREF(list);
    }
    if (stored < 0)
        Py_CLEAR(result);
    free(infos);
    Py_DECREF(kept);
    Py_DECREF(hold);
    return leave(self, result);
fail_release:
    outputs_release(outs, n);
    free(outs);
    free(infos);
    Py_XDECREF(kept);
    Py_XDECREF(hold);
    return leave(self, NULL);
}

static PyObject *list_u32(const uint32_t *v, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++)
        PyList_SetItem(l, (Py_ssize_t)i, PyLong_FromUnsignedLong(v[i]));
    return l;
}

/* The reference's StoredOutputs, a named tuple of four index-parallel lists: num_tensors has
 * one entry per (request, signal), request-major. */
static PyObject *stored_to_py(const mstar_stored_outputs *s, uint32_t nreq, uint32_t nsig)
{
    PyObject *uu = PyList_New((Py_ssize_t)s->n);
    for (uint32_t i = 0; uu && i < s->n; i++)
        PyList_SetItem(uu, (Py_ssize_t)i, PyLong_FromUnsignedLongLong(s->flat_uuids[i]));
    PyObject *nt = list_u32(s->num_tensors, (size_t)nreq * nsig);
    PyObject *fr = list_u32(s->flat_rids, s->n), *si = list_u32(s->signal_idxs, s->n);
    PyObject *o = uu && nt && fr && si
                      ? PyObject_CallFunctionObjArgs(mstarpy.stored_cls, uu, fr, si, nt, NULL)
                      : NULL;
    Py_XDECREF(uu);
    Py_XDECREF(nt);
    Py_XDECREF(fr);
    Py_XDECREF(si);
    return o;
}

static PyObject *comm_store_batch(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = { "request_ids",    "outputs",     "signals", "node_name", "graph_walk",
                              "skip_cuda_sync", "cpu_tensors", "tp_size", "tp_rank",   NULL };
    PyObject *rids_obj, *outputs, *signals_obj, *node = Py_None, *walk = Py_None;
    PyObject *skip = NULL, *cpu = NULL;
    int tp_size = 1, tp_rank = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OOOO$ii", kwlist, &rids_obj, &outputs,
                                     &signals_obj, &node, &walk, &skip, &cpu, &tp_size, &tp_rank) ||
        reference_kw(skip, cpu) < 0)
        return NULL;
    mstar_store_params params = { 0 };
    if (params_from_kw(node, walk, tp_size, tp_rank, &params) < 0)
        return NULL;
    PyObject *rids_t = PySequence_Tuple(rids_obj), *outs_t = PySequence_Tuple(outputs);
    PyObject *sigs_t = PySequence_Tuple(signals_obj);
    mstar_rid *rids = NULL;
    const char **sigs = NULL;
    mstar_output *outs = NULL;
    size_t n = 0, cap = 0;
    PyObject *result = NULL, *hold = PyList_New(0);
    if (!rids_t || !outs_t || !sigs_t || !hold)
        goto out;
    Py_ssize_t nreq = PyTuple_Size(rids_t), nsig = PyTuple_Size(sigs_t);
    if (PyTuple_Size(outs_t) != nreq || nreq > 65536 || nsig > 65536) {
        mstarpy_raise_msg(MSTAR_EINVAL,
                          "store batch: one outputs dict per request id "
                          "(%zd ids, %zd dicts; at most 65536)",
                          nreq, PyTuple_Size(outs_t));
        goto out;
    }
    rids = calloc(nreq ? (size_t)nreq : 1, sizeof(*rids));
    sigs = calloc(nsig ? (size_t)nsig : 1, sizeof(*sigs));
    if (!rids || !sigs) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nreq; i++)
        if (rid_arg(PyTuple_GetItem(rids_t, i), &rids[i]) < 0)
            goto out;
    for (Py_ssize_t i = 0; i < nsig; i++)
        if (!(sigs[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(sigs_t, i), NULL)))
            goto out;
    if (enter(self) < 0)
        goto out;
    for (Py_ssize_t r = 0; r < nreq; r++) {
        if (outputs_from_dict(self, PyTuple_GetItem(outs_t, r), (uint32_t)r, &outs, &n, &cap, NULL,
                              hold) < 0) {
            outputs_release(outs, n);
            leave(self, NULL);
            goto out;
        }
    }
    mstar_stored_outputs so;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_store_and_return_tensor_info_batch(
        self->comm, rids, (uint32_t)nreq, outs, (uint32_t)n, sigs, (uint32_t)nsig, &params, &so);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        outputs_release(outs, n);
        fail(self, st);
        goto out;
    }
    result = leave(self, stored_to_py(&so, (uint32_t)nreq, (uint32_t)nsig));
    mstar_stored_outputs_clear(&so);
out:
    free(outs);
    free(rids);
    free(sigs);
    Py_XDECREF(rids_t);
    Py_XDECREF(outs_t);
    Py_XDECREF(sigs_t);
    Py_XDECREF(hold);
    return result;
}

static PyObject *comm_tensor_info(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_tensor_id uuid;
    if (uuid_arg(arg, &uuid) < 0 || enter(self) < 0)
        return NULL;
    mstar_tensor_info info;
    mstar_status st = mstar_comm_tensor_info(self->comm, uuid, &info);
    return st == MSTAR_OK ? leave(self, mstarpy_info_to_py(&info)) : fail(self, st);
}

static PyObject *comm_loan_output(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = { "shape", "dtype", NULL };
    PyObject *shape_obj, *dtype_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &shape_obj, &dtype_obj))
        return NULL;
    int64_t shape[MSTAR_MAX_NDIM];
    int32_t ndim = 1;
    mstar_dtype dtype = MSTAR_DTYPE_FLOAT32;
    if (PyLong_Check(shape_obj) ? mstarpy_i64_from_py(shape_obj, &shape[0], "shape") < 0
                                : mstarpy_dims_from_py(shape_obj, shape, &ndim, "shape") < 0)
        return NULL;
    if (dtype_obj && mstarpy_dtype_from_py(dtype_obj, &dtype, "dtype") < 0)
        return NULL;
    if (enter(self) < 0)
        return NULL;
    mstar_tensor t;
    mstar_loan_id id;
    mstar_status st = mstar_comm_loan_output(self->comm, dtype, shape, ndim, &t, &id);
    if (st != MSTAR_OK)
        return fail(self, st);
    PyObject *loan = mstarpy_loan_new(self, &t, id);
    if (!loan)
        mstar_comm_loan_release(self->comm, id);
    return leave(self, loan);
}

/* ---- reference counts ----------------------------------------------------------------------- */

typedef mstar_status (*ref_fn)(mstar_comm *, mstar_tensor_id, int64_t);

static const char *const ref_names[] = { "uuid", "n", NULL };

static PyObject *ref_call(PyObject *obj, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          const mstarpy_params *p, ref_fn fn)
{
    comm_obj *self = (comm_obj *)obj;
    PyObject *a[2];
    long long n = 1;
    if (mstarpy_parse(p, args, nargs, kwnames, a) < 0 ||
        (a[1] && mstarpy_arg_ll(p, a[1], LLONG_MIN, LLONG_MAX, &n) < 0))
        return NULL;
    mstar_tensor_id uuid;
    if (uuid_arg(a[0], &uuid) < 0 || enter(self) < 0)
        return NULL;
    mstar_status st = fn(self->comm, uuid, (int64_t)n);
    return st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
}

static PyObject *comm_increment_ref(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    static const mstarpy_params p = { "increment_ref", ref_names, 2, 1 };
    return ref_call(obj, args, nargs, kwnames, &p, mstar_comm_increment_ref);
}

static PyObject *comm_dereference(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const mstarpy_params p = { "dereference", ref_names, 2, 1 };
    return ref_call(obj, args, nargs, kwnames, &p, mstar_comm_dereference);
}

static PyObject *comm_set_persist(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = { "uuid", "persist", NULL };
    PyObject *u;
    int persist = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &u, &persist))
        return NULL;
    mstar_tensor_id uuid;
    if (uuid_arg(u, &uuid) < 0 || enter(self) < 0)
        return NULL;
    mstar_status st = mstar_comm_set_persist(self->comm, uuid, persist != 0);
    return st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
}

/* A sequence of uuids into a malloc'd array. */
static int uuids_from_py(PyObject *seq, mstar_tensor_id **out, uint32_t *n)
{
    *out = NULL;
    PyObject *t = PySequence_Tuple(seq);
    if (!t)
        return -1;
    Py_ssize_t len = PyTuple_Size(t);
    if (len > UINT32_MAX / 2) {
        Py_DECREF(t);
        mstarpy_raise_msg(MSTAR_EINVAL, "too many uuids");
        return -1;
    }
    *out = malloc((len ? (size_t)len : 1) * sizeof(mstar_tensor_id));
    if (!*out) {
        Py_DECREF(t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        if (uuid_arg(PyTuple_GetItem(t, i), &(*out)[i]) < 0) {
            free(*out);
            *out = NULL;
            Py_DECREF(t);
            return -1;
        }
    }
    Py_DECREF(t);
    *n = (uint32_t)len;
    return 0;
}

static PyObject *batch_ref(PyObject *obj, PyObject *seq, PyObject *count_obj, bool increment)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_tensor_id *uuids;
    uint32_t n;
    if (uuids_from_py(seq, &uuids, &n) < 0)
        return NULL;
    int64_t *counts = NULL;
    long long uniform = 1;
    PyObject *r = NULL;
    if (count_obj && PyLong_Check(count_obj)) {
        uniform = PyLong_AsLongLong(count_obj);
        if (uniform == -1 && PyErr_Occurred())
            goto out;
    } else if (count_obj) {
        if (increment) {
            mstarpy_raise_msg(MSTAR_EINVAL, "increment_ref_batch: one count for every uuid");
            goto out;
        }
        PyObject *t = PySequence_Tuple(count_obj);
        if (!t)
            goto out;
        if (PyTuple_Size(t) != (Py_ssize_t)n) {
            Py_DECREF(t);
            mstarpy_raise_msg(MSTAR_EINVAL, "dereference_batch: %u uuids but %zd counts", n,
                              PyTuple_Size(t));
            goto out;
        }
        counts = malloc((n ? n : 1) * sizeof(int64_t));
        for (uint32_t i = 0; counts && i < n; i++)
            counts[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
        Py_DECREF(t);
        if (!counts || PyErr_Occurred()) {
            if (!counts)
                PyErr_NoMemory();
            goto out;
        }
    }
    if (enter(self) < 0)
        goto out;
    mstar_status st =
        increment ? mstar_comm_increment_ref_batch_uniform(self->comm, uuids, n, uniform)
        : counts  ? mstar_comm_dereference_batch(self->comm, uuids, counts, n)
                  : mstar_comm_dereference_batch_uniform(self->comm, uuids, n, uniform);
    r = st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
out:
    free(uuids);
    free(counts);
    return r;
}

/* increment_ref_batch(uuids, n=1), also under the reference's name increment_ref_batch_uniform;
 * dereference_batch_uniform(uuids, n=1) is dereference_batch(uuids, counts) with one count. */
static PyObject *comm_increment_ref_batch(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "uuids", "n", NULL };
    PyObject *seq, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &count_obj))
        return NULL;
    return batch_ref(obj, seq, count_obj, true);
}

static PyObject *comm_dereference_batch(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "uuids", "counts", NULL };
    PyObject *seq, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &count_obj))
        return NULL;
    return batch_ref(obj, seq, count_obj, false);
}

static PyObject *comm_dereference_batch_uniform(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "uuids", "n", NULL };
    PyObject *seq, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &count_obj))
        return NULL;
    if (count_obj && !PyLong_Check(count_obj))
        return mstarpy_raise_msg(MSTAR_EINVAL, "dereference_batch_uniform: n is one int");
    return batch_ref(obj, seq, count_obj, false);
}

static PyObject *comm_set_output_ref_counts(PyObject *obj, PyObject *args)
{
    comm_obj *self = (comm_obj *)obj;
    PyObject *held_obj, *edges_obj;
    if (!PyArg_ParseTuple(args, "OO", &held_obj, &edges_obj))
        return NULL;
    mstar_tensor_id *held;
    uint32_t nheld, nedges;
    mstar_edge *edges;
    if (uuids_from_py(held_obj, &held, &nheld) < 0)
        return NULL;
    if (mstarpy_edges_from_py(edges_obj, &edges, &nedges) < 0) {
        free(held);
        return NULL;
    }
    PyObject *r = NULL;
    if (enter(self) == 0) {
        mstar_status st = mstar_comm_set_output_ref_counts(self->comm, held, nheld, edges, nedges);
        r = st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
    }
    mstarpy_edges_free(edges, nedges);
    free(edges);
    free(held);
    return r;
}

/* ---- staging -------------------------------------------------------------------------------- */

static PyObject *comm_register_for_send(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames)
{
    comm_obj *self = (comm_obj *)obj;
    static const char *const names[] = { "request_id", "tensor_infos", "skip_cuda_sync", NULL };
    static const mstarpy_params p = { "register_for_send", names, 3, 2 };
    PyObject *a[3];
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 || reference_kw(a[2], NULL) < 0)
        return NULL;
    PyObject *rid_obj = a[0], *infos_obj = a[1];
    mstar_rid rid;
    if (rid_arg(rid_obj, &rid) < 0)
        return NULL;
    PyObject *t = PySequence_Tuple(infos_obj);
    if (!t)
        return NULL;
    Py_ssize_t n = PyTuple_Size(t);
    mstar_tensor_info *infos =
        n <= MSTAR_WIRE_MAX_TENSORS ? calloc(n ? (size_t)n : 1, sizeof(*infos)) : NULL;
    PyObject *r = NULL;
    if (!infos) {
        if (n > MSTAR_WIRE_MAX_TENSORS)
            mstarpy_raise_msg(MSTAR_EINVAL, "register_for_send: %zd descriptors, at most %d", n,
                              MSTAR_WIRE_MAX_TENSORS);
        else
            PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (mstarpy_info_from_py(PyTuple_GetItem(t, i), &infos[i]) < 0)
            goto out;
    if (enter(self) < 0)
        goto out;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_register_for_send(self->comm, &rid, infos, (uint32_t)n);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        fail(self, st);
        goto out;
    }
    /* The transport's fields were stamped onto the descriptors: write them back. */
    int ok = 0;
    for (Py_ssize_t i = 0; ok == 0 && i < n; i++)
        ok = mstarpy_info_update_py(PyTuple_GetItem(t, i), &infos[i]);
    r = leave(self, ok == 0 ? Py_NewRef(Py_None) : NULL);
out:
    free(infos);
    Py_DECREF(t);
    return r;
}

static PyObject *comm_register_for_send_uuids(PyObject *obj, PyObject *args)
{
    comm_obj *self = (comm_obj *)obj;
    PyObject *rids_obj, *counts_obj, *uuids_obj;
    if (!PyArg_ParseTuple(args, "OOO", &rids_obj, &counts_obj, &uuids_obj))
        return NULL;
    PyObject *rt = PySequence_Tuple(rids_obj), *ct = rt ? PySequence_Tuple(counts_obj) : NULL;
    mstar_tensor_id *uuids = NULL;
    uint32_t nuuids = 0;
    mstar_rid *rids = NULL;
    uint32_t *counts = NULL;
    PyObject *r = NULL;
    if (!ct || uuids_from_py(uuids_obj, &uuids, &nuuids) < 0)
        goto out;
    Py_ssize_t nreq = PyTuple_Size(rt);
    if (PyTuple_Size(ct) != nreq || nreq > 65536) {
        mstarpy_raise_msg(MSTAR_EINVAL, "register_for_send_uuids: one count per request id");
        goto out;
    }
    rids = calloc(nreq ? (size_t)nreq : 1, sizeof(*rids));
    counts = calloc(nreq ? (size_t)nreq : 1, sizeof(*counts));
    if (!rids || !counts) {
        PyErr_NoMemory();
        goto out;
    }
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < nreq; i++) {
        long v = PyLong_AsLong(PyTuple_GetItem(ct, i));
        if (rid_arg(PyTuple_GetItem(rt, i), &rids[i]) < 0 || (v == -1 && PyErr_Occurred()))
            goto out;
        if (v < 0 || v > UINT32_MAX) {
            mstarpy_raise_msg(MSTAR_EINVAL, "register_for_send_uuids: count %ld", v);
            goto out;
        }
        counts[i] = (uint32_t)v;
        total += (uint64_t)v;
    }
    if (total != nuuids) {
        mstarpy_raise_msg(MSTAR_EINVAL, "register_for_send_uuids: counts sum to %llu, %u uuids",
                          (unsigned long long)total, nuuids);
        goto out;
    }
    if (enter(self) < 0)
        goto out;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_register_for_send_uuids(self->comm, rids, (uint32_t)nreq, counts, uuids);
    PyEval_RestoreThread(ts_);
    r = st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
out:
    free(uuids);
    free(rids);
    free(counts);
    Py_XDECREF(rt);
    Py_XDECREF(ct);
    return r;
}

static PyObject *comm_refresh_shm_placement(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_edge *edges;
    uint32_t n;
    if (mstarpy_edges_from_py(arg, &edges, &n) < 0)
        return NULL;
    PyObject *r = NULL;
    if (enter(self) == 0) {
        mstar_status st = mstar_comm_refresh_shm_placement(self->comm, edges, n);
        if (st == MSTAR_OK)
            r = leave(self,
                      mstarpy_edges_update_py(arg, edges, n) == 0 ? Py_NewRef(Py_None) : NULL);
        else
            r = fail(self, st);
    }
    mstarpy_edges_free(edges, n);
    free(edges);
    return r;
}

static PyObject *comm_handle_message(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstarpy_msg_arg a;
    PyObject *r = NULL;
    if (mstarpy_msg_arg_get(arg, &a) == 0 && enter(self) == 0) {
        mstar_status st = mstar_comm_handle_message(self->comm, a.m);
        r = st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
    }
    mstarpy_msg_arg_done(&a);
    return r;
}

/* A producer whose descriptors leave through something other than its Mesh (a callable, the
 * caller's own communicator) tells the ACK ledger here whom it sent them to. */
static PyObject *comm_note_sent(PyObject *obj, PyObject *args)
{
    comm_obj *self = (comm_obj *)obj;
    const char *peer;
    PyObject *msg_obj;
    if (!PyArg_ParseTuple(args, "sO", &peer, &msg_obj))
        return NULL;
    mstarpy_msg_arg a;
    PyObject *r = NULL;
    if (mstarpy_msg_arg_get(msg_obj, &a) == 0 && enter(self) == 0) {
        mstar_status st = mstar_comm_note_sent(self->comm, peer, a.m);
        r = st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
    }
    mstarpy_msg_arg_done(&a);
    return r;
}

/* ---- consumer ------------------------------------------------------------------------------- */

/* The (request id, edges) of edges_call: given as they are, or a message's (edges_obj None):
 * a received message's own, else converted from msg.request_id and msg.edges. The edges are
 * *owned (free with mstarpy_edges_free and free) or the message's (*hold keeps them). */
static int edges_args(PyObject *rid_obj, PyObject *edges_obj, mstar_rid *rid, mstar_edge **edges,
                      uint32_t *n, bool *owned, PyObject **hold)
{
    *owned = true;
    *hold = NULL;
    if (edges_obj == Py_None) {
        if (mstarpy_msg_struct_edges(rid_obj, rid, edges, n, hold)) {
            *owned = false;
            return 0;
        }
        if (!PyObject_TypeCheck(rid_obj, (PyTypeObject *)mstarpy.msg_cls)) {
            mstarpy_raise_msg(MSTAR_EINVAL, "(request_id, edges), or a Message alone");
            return -1;
        }
        PyObject *r = PyObject_GetAttrString(rid_obj, "request_id");
        PyObject *e = r ? PyObject_GetAttrString(rid_obj, "edges") : NULL;
        int ret = e ? edges_args(r, e, rid, edges, n, owned, hold) : -1;
        Py_XDECREF(r);
        Py_XDECREF(e);
        return ret;
    }
    return rid_arg(rid_obj, rid) < 0 || mstarpy_edges_from_py(edges_obj, edges, n) < 0 ? -1 : 0;
}

/* Give back what targets_from_dict took (the call that was to use them failed). */
static void targets_release(mstar_read_target *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (t[i].release)
            t[i].release(t[i].release_ctx, t[i].data);
    free(t);
}

/* Whether the host bytes at p and p + n - 1 may be written. DLPack (before 1.0) carries no
 * read-only flag, so a tensor made from a read-only view exports as any other: each end is
 * asked of the kernel, which reads the byte into a pipe and back in place (EFAULT where the
 * page cannot be written). The byte keeps its value. */
static bool host_writable(void *p, size_t n)
{
    int fds[2];
    if (n == 0 || pipe2(fds, O_CLOEXEC) < 0)
        return true; /* nothing to write, or no pipe to ask with: the read finds out */
    bool ok = true;
    unsigned char *ends[2] = { p, (unsigned char *)p + n - 1 };
    for (int i = 0; ok && i < 2; i++)
        ok = write(fds[1], ends[i], 1) == 1 && read(fds[0], ends[i], 1) == 1;
    close(fds[0]);
    close(fds[1]);
    return ok;
}

/* Refuse a target the read must not write: an mstar_c.Tensor (the manager's own memory; a
 * view's mapping is read-only), an object whose buffer is read-only (NumPy's refusal through
 * DLPack names no reason), and host memory that cannot be written. -1 with InvalidArgumentError. */
static int target_refused(PyObject *v, unsigned long long uuid)
{
    if (PyObject_TypeCheck(v, mstarpy.tensor_type)) {
        mstarpy_raise_msg(MSTAR_EINVAL,
                          "into: the target for uuid %llu is an mstar_c.Tensor, the manager's own "
                          "memory (read-only for a view): read into a tensor you own",
                          uuid);
        return -1;
    }
    if (PyObject_CheckBuffer(v)) {
        Py_buffer b;
        if (PyObject_GetBuffer(v, &b, PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            mstarpy_raise_msg(MSTAR_EINVAL, "into: the target for uuid %llu is not writable", uuid);
            return -1;
        }
        PyBuffer_Release(&b);
    }
    return 0;
}

/* start_read_tensors(into={uuid: tensor}): each tensor, a writable contiguous DLPack tensor on
 * the manager's device, becomes a read target whose release lets go of it once the manager is
 * done with its memory (mstar_read_target). */
static int targets_from_dict(comm_obj *self, PyObject *into, mstar_read_target **out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    if (into == Py_None)
        return 0;
    if (!PyDict_Check(into)) {
        mstarpy_raise_msg(MSTAR_EINVAL, "into: a dict {uuid: tensor} is required");
        return -1;
    }
    /* A snapshot: each __dlpack__ runs Python code, which may change the dict under the walk
     * (the targets are sized from it). The items hold the keys and tensors meanwhile. */
    PyObject *items = PyDict_Items(into);
    if (!items)
        return -1;
    Py_ssize_t count = PyList_Size(items);
    mstar_read_target *t = calloc((size_t)count + 1, sizeof(*t));
    if (!t) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return -1;
    }
    mstar_device want = self->backend ? mstar_backend_device(self->backend) : mstar_device_cpu();
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GetItem(items, i);
        PyObject *k = PyTuple_GetItem(item, 0), *v = PyTuple_GetItem(item, 1);
        mstar_read_target *r = &t[*n];
        r->uuid = PyLong_Check(k) ? PyLong_AsUnsignedLongLong(k) : (unsigned long long)-1;
        if (PyErr_Occurred() || !PyLong_Check(k) || !PyObject_HasAttrString(v, "__dlpack__")) {
            PyErr_Clear();
            mstarpy_raise_msg(MSTAR_EINVAL, "into: each entry is uuid (int) -> DLPack tensor");
            break;
        }
        mstar_tensor x;
        if (target_refused(v, r->uuid) < 0 ||
            mstarpy_tensor_in(v, &x, &r->release, &r->release_ctx) < 0)
            break;
        r->data = mstar_tensor_ptr(&x);
        r->capacity = mstar_tensor_nbytes(&x);
        (*n)++;
        if (!mstar_tensor_is_contiguous(&x) || x.device.type != want.type ||
            x.device.index != want.index) {
            mstarpy_raise_msg(MSTAR_EINVAL,
                              "into: the tensor for uuid %llu must be contiguous and on the "
                              "manager's device",
                              (unsigned long long)r->uuid);
            break;
        }
        if (x.device.type != MSTAR_DEVICE_CUDA && !host_writable(r->data, r->capacity)) {
            mstarpy_raise_msg(MSTAR_EINVAL,
                              "into: the tensor for uuid %llu is not writable (read-only "
                              "memory, such as a view's mapping)",
                              (unsigned long long)r->uuid);
            break;
        }
    }
    Py_DECREF(items);
    if (PyErr_Occurred()) {
        targets_release(t, *n);
        *n = 0;
        return -1;
    }
    *out = t;
    return 0;
}

static PyObject *edges_call(comm_obj *self, PyObject *rid_obj, PyObject *edges_obj, bool read,
                            bool views, mstar_read_target *targets, uint32_t ntargets)
{
    PyObject *hold;
    mstar_rid rid;
    mstar_edge *edges;
    uint32_t n;
    bool owned;
    if (edges_args(rid_obj, edges_obj, &rid, &edges, &n, &owned, &hold) < 0) {
        targets_release(targets, ntargets);
        return NULL;
    }
    PyObject *r = NULL;
    bool lent = false; /* the targets are the manager's now */
    if (enter(self) == 0) {
        mstar_completion_list list = { 0, NULL };
        mstar_status st;
        PyThreadState *ts_ = PyEval_SaveThread();
        st = !read ? mstar_comm_ack_unread_tensors(self->comm, &rid, edges, n)
             : views
                 ? mstar_comm_start_read_views(self->comm, &rid, edges, n, &list)
                 : mstar_comm_start_read_into(self->comm, &rid, edges, n, targets, ntargets, &list);
        PyEval_RestoreThread(ts_);
        lent = st == MSTAR_OK;
        if (st != MSTAR_OK) {
            r = fail(self, st);
        } else if (!read) {
            r = leave(self, Py_NewRef(Py_None));
        } else {
            PyObject *l = PyList_New((Py_ssize_t)list.n);
            for (uint32_t i = 0; i < list.n; i++) {
                PyObject *c = l ? mstarpy_completion_new(list.items[i]) : NULL;
                if (!c) {
                    mstar_completion_release(list.items[i]);
                    Py_CLEAR(l);
                } else {
                    PyList_SetItem(l, (Py_ssize_t)i, c);
                }
            }
            free(list.items); /* each handle now belongs to its Python object (or is released) */
            r = leave(self, l);
        }
    }
    if (owned) {
        mstarpy_edges_free(edges, n);
        free(edges);
    }
    if (lent)
        free(targets);
    else
        targets_release(targets, ntargets);
    Py_XDECREF(hold);
    return r;
}

static PyObject *comm_start_read_tensors(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames)
{
    static const char *const names[] = {
        "request_id", "edges", "graph_walk", "views", "into", NULL
    };
    static const mstarpy_params p = { "start_read_tensors", names, 3, 1 };
    PyObject *a[5]; /* graph_walk: the reference's signature, not needed */
    int views = 0;
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 ||
        (a[3] && mstarpy_arg_bool(a[3], &views) < 0))
        return NULL;
    PyObject *rid_obj = a[0], *edges_obj = a[1] ? a[1] : Py_None, *into = a[4] ? a[4] : Py_None;
    if (views && into != Py_None) {
        mstarpy_raise_msg(MSTAR_EINVAL, "views=True reads in place: it takes no into=");
        return NULL;
    }
    mstar_read_target *targets;
    uint32_t ntargets;
    if (targets_from_dict((comm_obj *)obj, into, &targets, &ntargets) < 0)
        return NULL;
    return edges_call((comm_obj *)obj, rid_obj, edges_obj, true, views != 0, targets, ntargets);
}

static PyObject *comm_ack_unread_tensors(PyObject *obj, PyObject *args)
{
    PyObject *rid_obj, *edges_obj = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &rid_obj, &edges_obj))
        return NULL;
    return edges_call((comm_obj *)obj, rid_obj, edges_obj, false, false, NULL, 0);
}

static PyObject *failures_to_py(const mstar_ready_set *set)
{
    PyObject *l = PyList_New((Py_ssize_t)set->nfailed);
    for (uint32_t i = 0; l && i < set->nfailed; i++) {
        const mstar_read_failure *f = &set->failed[i];
        PyObject *rid = mstarpy_rid_to_py(&f->rid);
        PyObject *o = rid ? PyObject_CallFunction(mstarpy.failure_cls, "Osis", rid, f->edge_name,
                                                  (int)f->status, f->message)
                          : NULL;
        Py_XDECREF(rid);
        if (!o)
            Py_CLEAR(l);
        else
            PyList_SetItem(l, (Py_ssize_t)i, o);
    }
    return l;
}

static PyObject *ready_to_py(const mstar_ready_set *set)
{
    PyObject *d = PyDict_New();
    for (uint32_t r = 0; d && r < set->nrequests; r++) {
        PyObject *rid = mstarpy_rid_to_py(&set->rids[r]);
        uint32_t a = set->edge_start[r], b = set->edge_start[r + 1];
        PyObject *l = rid ? PyList_New((Py_ssize_t)(b - a)) : NULL;
        for (uint32_t e = a; l && e < b; e++) {
            PyObject *edge = mstarpy_edge_to_py(&set->edges[e]);
            if (!edge)
                Py_CLEAR(l);
            else
                PyList_SetItem(l, (Py_ssize_t)(e - a), edge);
        }
        if (!l || PyDict_SetItem(d, rid, l) < 0)
            Py_CLEAR(d);
        Py_XDECREF(rid);
        Py_XDECREF(l);
    }
    return d;
}

/* get_ready_tensors' result: {rid: [GraphEdge]}, with the failures when asked. */
static PyObject *ready_result(const mstar_ready_set *set, int with_failures)
{
    PyObject *ready = ready_to_py(set);
    if (!ready || !with_failures)
        return ready;
    PyObject *f = failures_to_py(set);
    if (!f) {
        Py_DECREF(ready);
        return NULL;
    }
    return Py_BuildValue("(NN)", ready, f);
}

static PyObject *comm_get_ready_tensors(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames)
{
    comm_obj *self = (comm_obj *)obj;
    static const char *const names[] = { "graph_walk", "with_failures", NULL };
    static const mstarpy_params p = { "get_ready_tensors", names, 1, 0 };
    PyObject *a[2]; /* graph_walk: the reference's signature, not needed */
    int with_failures = 0;
    if ((nargs || kwnames) && (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 ||
                               (a[1] && mstarpy_arg_bool(a[1], &with_failures) < 0)))
        return NULL;
    if (enter(self) < 0)
        return NULL;
    mstar_ready_set set;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_get_ready_tensors(self->comm, &set);
    PyEval_RestoreThread(ts_);
    PyObject *r = ready_result(&set, with_failures);
    mstar_ready_set_clear(&set);
    if (st == MSTAR_OK || !r)
        return leave(self, r);
    /* An ACK that could not be sent (it stays queued for the next call) fails the call, but
     * what was read is not lost: the exception carries the result as `ready`. */
    mstarpy_raise(st);
    leave(self, NULL);
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && PyObject_SetAttrString(v, "ready", r) < 0)
        PyErr_Clear(); /* an exception type that takes no attributes: raised as it is */
    Py_DECREF(r);
    PyErr_Restore(t, v, tb);
    return NULL;
}

/* get_tensor(uuid), the reference's form: a torch.Tensor over the view where torch is in use
 * (imported), as the reference returns; the view otherwise. The view is counted under the
 * request None, so force_cleanup_request of any request waits for it. */
static PyObject *reference_tensor(PyObject *view)
{
    PyObject *name = view ? PyUnicode_FromString("torch") : NULL;
    PyObject *torch = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    if (!torch)
        return PyErr_Occurred() ? (Py_XDECREF(view), NULL) : view;
    Py_DECREF(torch);
    PyObject *mod = PyImport_ImportModule("mstar_c"); /* to_torch: also bool on torch < 2 */
    PyObject *t = mod ? PyObject_CallMethod(mod, "to_torch", "O", view) : NULL;
    Py_XDECREF(mod);
    Py_DECREF(view);
    return t;
}

static PyObject *comm_get_tensor(PyObject *obj, PyObject *const *args, Py_ssize_t nargs)
{
    comm_obj *self = (comm_obj *)obj;
    static const char *const names[] = { "request_id", "uuid", NULL };
    static const mstarpy_params p = { "get_tensor", names, 2, 1 };
    PyObject *a[2];
    if (mstarpy_parse(&p, args, nargs, NULL, a) < 0)
        return NULL;
    if (!a[1])
        return reference_tensor(comm_get_tensor(obj, (PyObject *const[]){ Py_None, a[0] }, 2));
    PyObject *rid_obj = a[0], *u = a[1];
    mstar_rid rid;
    mstar_tensor_id uuid;
    if ((rid_obj != Py_None && rid_arg(rid_obj, &rid) < 0) || uuid_arg(u, &uuid) < 0 ||
        enter(self) < 0)
        return NULL;
    mstar_tensor t;
    mstar_status st = mstar_comm_get_tensor(self->comm, uuid, &t);
    if (st != MSTAR_OK)
        return fail(self, st);
    if (mstarpy_comm_view_take(self, rid_obj, uuid) < 0) /* the view's reference */
        return leave(self, NULL);
    PyObject *view = mstarpy_tensor_new(self, rid_obj, uuid, &t);
    if (!view) {
        self->busy = false;
        mstarpy_comm_view_dropped(self, rid_obj, uuid);
        self->busy = true;
    }
    return leave(self, view);
}

static PyObject *comm_has_inflight_reads(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_rid rid;
    if (rid_arg(arg, &rid) < 0 || enter(self) < 0)
        return NULL;
    return leave(self, PyBool_FromLong(mstar_comm_has_inflight_reads(self->comm, &rid)));
}

/* ---- teardown and statistics ---------------------------------------------------------------- */

static PyObject *cleanup_call(PyObject *obj, PyObject *arg, bool force)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_rid rid;
    if (rid_arg(arg, &rid) < 0)
        return NULL;
    if (force) {
        PyObject *n = PyDict_GetItemWithError(self->views, arg);
        if (!n && !PyErr_Occurred()) /* views of get_tensor(uuid), of any request */
            n = PyDict_GetItemWithError(self->views, Py_None);
        if (n)
            return mstarpy_raise_msg(MSTAR_ESTATE,
                                     "force_cleanup_request: %ld mstar_c.Tensor view(s) of this "
                                     "request are still alive; release them first",
                                     PyLong_AsLong(n));
        if (PyErr_Occurred())
            return NULL;
    }
    if (enter(self) < 0)
        return NULL;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = force ? mstar_comm_force_cleanup_request(self->comm, &rid)
               : mstar_comm_cleanup_request(self->comm, &rid);
    PyEval_RestoreThread(ts_);
    return st == MSTAR_OK ? leave(self, Py_NewRef(Py_None)) : fail(self, st);
}

static PyObject *comm_cleanup_request(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    static const char *const names[] = { "request_id", "force", NULL };
    static const mstarpy_params p = { "cleanup_request", names, 2, 1 };
    PyObject *a[2];
    int force = 0;
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 ||
        (a[1] && mstarpy_arg_bool(a[1], &force) < 0))
        return NULL;
    return cleanup_call(obj, a[0], force != 0);
}

static PyObject *comm_force_cleanup_request(PyObject *obj, PyObject *arg)
{
    return cleanup_call(obj, arg, true);
}

static PyObject *prof_call(PyObject *obj, PyObject *arg, bool tx)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_rid rid;
    if (rid_arg(arg, &rid) < 0 || enter(self) < 0)
        return NULL;
    uint32_t n = 0;
    mstar_status st;
    PyObject *r;
    if (tx) {
        mstar_tx_info *v = NULL;
        st = mstar_comm_get_tx_info(self->comm, &rid, &v, &n);
        r = st == MSTAR_OK ? mstarpy_tx_to_py(v, n) : NULL;
        free(v);
    } else {
        mstar_rx_info *v = NULL;
        st = mstar_comm_get_rx_info(self->comm, &rid, &v, &n);
        r = st == MSTAR_OK ? mstarpy_rx_to_py(v, n) : NULL;
        free(v);
    }
    return st == MSTAR_OK ? leave(self, r) : fail(self, st);
}

static PyObject *comm_get_tx_info(PyObject *obj, PyObject *arg)
{
    return prof_call(obj, arg, true);
}

static PyObject *comm_get_rx_info(PyObject *obj, PyObject *arg)
{
    return prof_call(obj, arg, false);
}

static PyObject *comm_arena_stats(PyObject *obj, PyObject *unused)
{
    comm_obj *self = (comm_obj *)obj;
    if (enter(self) < 0)
        return NULL;
    mstar_arena_stats s;
    mstar_status st = mstar_comm_arena_stats(self->comm, &s);
    if (st != MSTAR_OK)
        return fail(self, st);
    return leave(self, Py_BuildValue("{sIsKsKsKsKsKsKsK}", "segments", s.segments, "total_bytes",
                                     (unsigned long long)s.total_bytes, "free_bytes",
                                     (unsigned long long)s.free_bytes, "largest_free_block",
                                     (unsigned long long)s.largest_free_block, "pinned_bytes",
                                     (unsigned long long)s.pinned_bytes, "live_slots",
                                     (unsigned long long)s.live_slots, "spill_files",
                                     (unsigned long long)s.spill_files, "peer_segments",
                                     (unsigned long long)s.peer_segments));
}

static PyObject *comm_event_drain(PyObject *obj, PyObject *unused)
{
    comm_obj *self = (comm_obj *)obj;
    if (enter(self) < 0)
        return NULL;
    mstar_comm_event_drain(self->comm);
    return leave(self, Py_NewRef(Py_None));
}

/* ---- properties ----------------------------------------------------------------------------- */

static mstar_comm *open_handle(comm_obj *self)
{
    if (!self->comm || self->closing) {
        mstarpy_raise_msg(MSTAR_ECLOSED, "the communication manager is closed");
        return NULL;
    }
    return self->comm;
}

static PyObject *get_entity(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyUnicode_FromString(mstar_comm_entity(c)) : NULL;
}

static PyObject *get_transport(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyUnicode_FromString(mstar_transport_kind_name(mstar_comm_transport(c))) : NULL;
}

static PyObject *get_session_id(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyUnicode_FromString(mstar_comm_session_id(c)) : NULL;
}

static PyObject *get_needs_cpu(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyBool_FromLong(mstar_comm_needs_cpu_tensor(c)) : NULL;
}

static PyObject *get_stamps(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyBool_FromLong(mstar_comm_stamps_shm_placement(c)) : NULL;
}

static PyObject *get_num_tensors(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyLong_FromSize_t(mstar_comm_num_tensors(c)) : NULL;
}

static PyObject *get_event_fd(PyObject *obj, void *unused)
{
    mstar_comm *c = open_handle((comm_obj *)obj);
    return c ? PyLong_FromLong(mstar_comm_event_fd(c)) : NULL;
}

static PyObject *get_closed(PyObject *obj, void *unused)
{
    comm_obj *self = (comm_obj *)obj;
    return PyBool_FromLong(!self->comm || self->closing);
}

static PyObject *get_live_views(PyObject *obj, void *unused)
{
    return PyLong_FromSsize_t(((comm_obj *)obj)->nviews);
}

#define KW (PyCFunction)(void (*)(void))
static PyMethodDef comm_methods[] = {
    { "close", comm_close, METH_NOARGS,
      "close($self, /)\n--\n\n"
      "Destroy the manager: every tensor, staged file and segment goes (deferred until the "
      "last mstar_c.Tensor view goes). Idempotent." },
    { "__enter__", comm_enter_ctx, METH_NOARGS, "__enter__($self, /)\n--\n\n" },
    { "__exit__", comm_exit_ctx, METH_VARARGS, "__exit__($self, *exc)\n--\n\n" },
    { "register_request", KW comm_register_request, METH_VARARGS | METH_KEYWORDS,
      "register_request($self, request_id, sharding_config=None)\n--\n\n"
      "Remember the request's shard dims "
      "(a ShardingConfig or {signal: dim or None})." },
    { "store_and_return_tensor_info", KW comm_store, METH_FASTCALL | METH_KEYWORDS,
      "store_and_return_tensor_info($self, request_id, outputs, node_name=None, graph_walk=None, "
      "skip_cuda_sync=False, cpu_tensors=None, *, tp_size=1, tp_rank=0)\n--\n\n"
      "store_and_return_tensor_info(request_id, outputs, *, node_name=None, graph_walk=None,\n"
      "tp_size=1, tp_rank=0) -> {signal: [TensorPointerInfo]}\n"
      "Store one request's outputs {signal: [tensors]} (ref 0 each) and return their "
      "descriptors.\nThe tensors are not copied (unless not contiguous, or sharded into "
      "canonical layout);\nan mstar_c.Loan of this manager is stored as the loan it is: nothing "
      "copied, even when staged." },
    { "loan_output", KW comm_loan_output, METH_VARARGS | METH_KEYWORDS,
      "loan_output($self, shape, dtype='float32')\n--\n\n"
      "Output memory to compute into in "
      "place (torch.from_dlpack(loan)) and store among the outputs of\n"
      "store_and_return_tensor_info: over the arena it is a slot of this process's segments, so "
      "storing and staging copy nothing." },
    { "store_and_return_tensor_info_batch", KW comm_store_batch, METH_VARARGS | METH_KEYWORDS,
      "store_and_return_tensor_info_batch($self, request_ids, outputs, signals, node_name=None, "
      "graph_walk=None, skip_cuda_sync=False, cpu_tensors=None, *, tp_size=1, tp_rank=0)\n--\n\n"
      "store_and_return_tensor_info_batch(request_ids, outputs, signals, *, node_name=None,\n"
      "graph_walk=None, tp_size=1, tp_rank=0) -> StoredOutputs\noutputs[i] is request i's "
      "{signal: [tensors]}; signals not in `signals` are not stored." },
    { "tensor_info", comm_tensor_info, METH_O,
      "tensor_info($self, uuid, /)\n--\n\n"
      "tensor_info(uuid) -> TensorPointerInfo of a held tensor." },
    { "increment_ref", KW comm_increment_ref, METH_FASTCALL | METH_KEYWORDS,
      "increment_ref($self, uuid, n=1)\n--\n\n"
      "increment_ref(uuid, n=1)" },
    { "dereference", KW comm_dereference, METH_FASTCALL | METH_KEYWORDS,
      "dereference($self, uuid, n=1)\n--\n\n"
      "frees the tensor when its count reaches 0 (unless persisted)." },
    { "set_persist", KW comm_set_persist, METH_VARARGS | METH_KEYWORDS,
      "set_persist($self, uuid, persist=True)\n--\n\n"
      "set_persist(uuid, persist=True)" },
    { "increment_ref_batch", KW comm_increment_ref_batch, METH_VARARGS | METH_KEYWORDS,
      "increment_ref_batch($self, uuids, n=1)\n--\n\nn more references on each uuid." },
    { "increment_ref_batch_uniform", KW comm_increment_ref_batch, METH_VARARGS | METH_KEYWORDS,
      "increment_ref_batch_uniform($self, uuids, n=1)\n--\n\n"
      "The reference's name of increment_ref_batch." },
    { "dereference_batch", KW comm_dereference_batch, METH_VARARGS | METH_KEYWORDS,
      "dereference_batch($self, uuids, counts=1)\n--\n\ncounts is one int or one per uuid." },
    { "dereference_batch_uniform", KW comm_dereference_batch_uniform, METH_VARARGS | METH_KEYWORDS,
      "dereference_batch_uniform($self, uuids, n=1)\n--\n\n"
      "dereference_batch with one count for every uuid (the reference's name)." },
    { "set_output_ref_counts", comm_set_output_ref_counts, METH_VARARGS,
      "set_output_ref_counts($self, held_uuids, routed_edges, /)\n--\n\n"
      "set_output_ref_counts(held_uuids, routed_edges)" },
    { "register_for_send", KW comm_register_for_send, METH_FASTCALL | METH_KEYWORDS,
      "register_for_send($self, request_id, tensor_infos, skip_cuda_sync=False)\n--\n\n"
      "Stage each descriptor's tensor for other "
      "processes (file written, arena copy made, memory\nregistered) and stamp the transport's "
      "fields onto the descriptors in place. A message\ncarrying them may be sent once this "
      "returns." },
    { "register_for_send_uuids", comm_register_for_send_uuids, METH_VARARGS,
      "register_for_send_uuids($self, request_ids, counts, uuids, /)\n--\n\n"
      "register_for_send_uuids(request_ids, counts, uuids)" },
    { "refresh_shm_placement", comm_refresh_shm_placement, METH_O,
      "refresh_shm_placement($self, edges, /)\n--\n\n"
      "copy the transport's fields of staged tensors onto the "
      "edges' descriptors (in place)." },
    { "note_sent", comm_note_sent, METH_VARARGS,
      "note_sent($self, peer, msg, /)\n--\n\n"
      "msg, holding this manager's descriptors, was sent to peer by\n"
      "other means than its Mesh; only peer's ACKs may then release them." },
    { "handle_message", comm_handle_message, METH_O,
      "handle_message($self, msg, /)\n--\n\n"
      "apply TENSOR_RECEIVED or UNPERSIST_TENSORS." },
    { "start_read_tensors", KW comm_start_read_tensors, METH_FASTCALL | METH_KEYWORDS,
      "start_read_tensors($self, request_id, edges=None, graph_walk=None, views=False, "
      "into=None)\n--\n\n"
      ""
      "-> [Completion], or start_read_tensors(msg, *, views=False, into=None)\n"
      "Begin reading the edges' descriptors (validated first; nothing kept if any is bad);\n"
      "returns the reads still in flight, whose results land in get_ready_tensors. A message\n"
      "alone: its edges for its request_id, read from the library's struct when the message\n"
      "is as Mesh.recv returned it. views=True reads in place: an arena tensor is not copied,\n"
      "get_tensor's result maps the producer's slot read-only (never write through it), and\n"
      "the ACK goes when the last reference here goes instead of when bytes land. Other\n"
      "descriptors are copied as usual. into={uuid: tensor} lands those descriptors in the\n"
      "given writable contiguous DLPack tensors (on the manager's device; get_tensor then\n"
      "views that memory), held until the manager is done with them. graph_walk is the\n"
      "reference's, not needed." },
    { "ack_unread_tensors", comm_ack_unread_tensors, METH_VARARGS,
      "ack_unread_tensors($self, request_id, edges=None, /)\n--\n\n"
      "ACK without reading\n"
      "(a request already gone)." },
    { "get_ready_tensors", KW comm_get_ready_tensors, METH_FASTCALL | METH_KEYWORDS,
      "get_ready_tensors($self, graph_walk=None, with_failures=False)\n--\n\n"
      "[GraphEdge]}\n"
      "Collect every read whose bytes landed: ACK them (through `send`; a view's ACK waits\n"
      "for its release), gather sharded inputs, and return them. Each delivered descriptor\n"
      "carries one usage reference: release it with dereference(uuid). with_failures=True\n"
      "returns (ready, [ReadFailure])." },
    { "get_tensor", KW comm_get_tensor, METH_FASTCALL,
      "get_tensor($self, request_id, uuid=None, /)\n--\n\n"
      "get_tensor(request_id, uuid) -> mstar_c.Tensor, a zero-copy view (DLPack) that holds one "
      "reference on the tensor while it lives. get_tensor(uuid), the reference's form: a "
      "torch.Tensor over such a view where torch is imported, else the view." },
    { "has_inflight_reads", comm_has_inflight_reads, METH_O,
      "has_inflight_reads($self, request_id, /)\n--\n\n"
      "has_inflight_reads(request_id)" },
    { "cleanup_request", KW comm_cleanup_request, METH_FASTCALL | METH_KEYWORDS,
      "cleanup_request($self, request_id, force=False)\n--\n\n"
      "soft teardown (referenced tensors are deferred); force=True is force_cleanup_request." },
    { "force_cleanup_request", comm_force_cleanup_request, METH_O,
      "force_cleanup_request($self, request_id, /)\n--\n\n"
      "drop every tensor of the request. StateError while "
      "views of it are alive or reads of it are in flight." },
    { "get_tx_info", comm_get_tx_info, METH_O,
      "get_tx_info($self, request_id, /)\n--\n\n"
      "get_tx_info(request_id) -> [TxInfo]" },
    { "get_rx_info", comm_get_rx_info, METH_O,
      "get_rx_info($self, request_id, /)\n--\n\n"
      "get_rx_info(request_id) -> [RxInfo]" },
    { "arena_stats", comm_arena_stats, METH_NOARGS,
      "arena_stats($self, /)\n--\n\n"
      "arena_stats() -> dict (NotSupportedError unless the transport is the arena)." },
    { "event_drain", comm_event_drain, METH_NOARGS,
      "event_drain($self, /)\n--\n\n"
      "Drain the event fd." },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef comm_getset[] = {
    { "entity", get_entity, NULL, "This process's name on the mesh.", NULL },
    { "transport", get_transport, NULL, "'local', 'files', 'arena', 'ucx-tcp' or 'ucx-rdma'.",
      NULL },
    { "session_id", get_session_id, NULL, "The session placed in descriptors.", NULL },
    { "needs_cpu_tensor", get_needs_cpu, NULL, "Whether the transport sends from host memory.",
      NULL },
    { "stamps_shm_placement", get_stamps, NULL,
      "Whether refresh_shm_placement must run on edges leaving the process.", NULL },
    { "num_tensors", get_num_tensors, NULL, "Tensors held now.", NULL },
    { "event_fd", get_event_fd, NULL, "Readable when a read finishes.", NULL },
    { "closed", get_closed, NULL, "True once close() ran.", NULL },
    { "live_views", get_live_views, NULL, "mstar_c.Tensor views alive.", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot comm_slots[] = {
    { Py_tp_new, PyType_GenericNew },
    { Py_tp_init, comm_init },
    { Py_tp_dealloc, comm_dealloc },
    { Py_tp_traverse, comm_traverse },
    { Py_tp_clear, comm_clear },
    { Py_tp_methods, comm_methods },
    { Py_tp_getset, comm_getset },
    { Py_tp_doc, "The C core of mstar_c.CommunicationManager." },
    { 0, NULL },
};

static PyType_Spec comm_spec = {
    "mstar_c._mstar.Comm",
    sizeof(comm_obj),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    comm_slots,
};

int mstarpy_add_comm_type(PyObject *module)
{
    mstarpy.comm_type = (PyTypeObject *)PyType_FromSpec(&comm_spec);
    if (!mstarpy.comm_type)
        return -1;
    return PyModule_AddObjectRef(module, "Comm", (PyObject *)mstarpy.comm_type);
}
