/*
 * comm.c — mstar_c.CommunicationManager's C core (_mstar.Comm): one entity's tensor transport
 * (mstar/tensors.h) with the reference's method names. This file: the object's lifecycle (busy
 * marking, views, the send callback, construction and teardown), its properties and the type;
 * the methods live by job in comm_store.c, comm_refs.c, comm_send.c, comm_read.c and
 * comm_teardown.c, over comm_internal.h (as src/tensors/comm_*.c split the library's manager).
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
#include "comm_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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

int mstarpy_comm_enter(comm_obj *self)
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
PyObject *mstarpy_comm_leave(comm_obj *self, PyObject *result)
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

PyObject *mstarpy_comm_fail(comm_obj *self, mstar_status st)
{
    mstarpy_raise(st);
    return mstarpy_comm_leave(self, NULL);
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
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_status st = mstar_comm_view_check(self->comm, uuid);
    /* EINVAL: not a view but the manager's own copy, which stays valid while held. */
    return st == MSTAR_OK || st == MSTAR_EINVAL ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                                                : mstarpy_comm_fail(self, st);
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

int mstarpy_comm_opt_str(PyObject *obj, const char **out)
{
    *out = NULL;
    if (obj == Py_None)
        return 0;
    *out = PyUnicode_AsUTF8AndSize(obj, NULL);
    return *out ? 0 : -1;
}

int mstarpy_comm_rid_arg(PyObject *obj, mstar_rid *rid)
{
    return mstarpy_rid_from_py(obj, rid);
}

int mstarpy_comm_uuid_arg(PyObject *obj, mstar_tensor_id *uuid)
{
    return mstarpy_u64_from_py(obj, uuid, "uuid");
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
    if (mstarpy_comm_opt_str(transport, &tname) < 0 ||
        mstarpy_comm_opt_str(shm_dir, &o.shm_dir) < 0 ||
        mstarpy_comm_opt_str(ns, &o.shm_namespace) < 0 ||
        mstarpy_comm_opt_str(session, &o.session_id) < 0)
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
    self->send = o.send;
    self->send_ctx = o.send_ctx;
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
    { "register_request", KW mstarpy_comm_register_request, METH_VARARGS | METH_KEYWORDS,
      "register_request($self, request_id, sharding_config=None)\n--\n\n"
      "Remember the request's shard dims "
      "(a ShardingConfig or {signal: dim or None})." },
    { "store_and_return_tensor_info", KW mstarpy_comm_store, METH_FASTCALL | METH_KEYWORDS,
      "store_and_return_tensor_info($self, request_id, outputs, node_name=None, graph_walk=None, "
      "skip_cuda_sync=False, cpu_tensors=None, *, tp_size=1, tp_rank=0)\n--\n\n"
      "store_and_return_tensor_info(request_id, outputs, *, node_name=None, graph_walk=None,\n"
      "tp_size=1, tp_rank=0) -> {signal: [TensorPointerInfo]}\n"
      "Store one request's outputs {signal: [tensors]} (ref 0 each) and return their "
      "descriptors.\nThe tensors are not copied (unless not contiguous, or sharded into "
      "canonical layout);\nan mstar_c.Loan of this manager is stored as the loan it is: nothing "
      "copied, even when staged." },
    { "send_outputs", KW mstarpy_comm_send_outputs, METH_FASTCALL | METH_KEYWORDS,
      "send_outputs($self, peer, request_id, outputs, next_node, *, node_name=None, "
      "graph_walk=None)\n--\n\n"
      "send_outputs(peer, request_id, outputs, next_node, *, node_name=None, graph_walk=None)\n"
      "Hand one request's outputs {signal: [tensors]} to `peer` in one call: store them as\n"
      "store_and_return_tensor_info does (loans too), hold each once for the peer\n"
      "(increment_ref), stage them (register_for_send), send the peer an INPUT_SIGNALS\n"
      "message with one edge per signal toward next_node through the manager's sender\n"
      "(send=), and end this side of the request (cleanup_request): the tensors go with the\n"
      "peer's ACK. If anything after the store fails, the request's tensors are dropped\n"
      "(force_cleanup_request) and the error raised; nothing was sent." },
    { "loan_output", KW mstarpy_comm_loan_output, METH_VARARGS | METH_KEYWORDS,
      "loan_output($self, shape, dtype='float32')\n--\n\n"
      "Output memory to compute into in "
      "place (torch.from_dlpack(loan)) and store among the outputs of\n"
      "store_and_return_tensor_info: over the arena it is a slot of this process's segments, so "
      "storing and staging copy nothing." },
    { "store_and_return_tensor_info_batch", KW mstarpy_comm_store_batch,
      METH_VARARGS | METH_KEYWORDS,
      "store_and_return_tensor_info_batch($self, request_ids, outputs, signals, node_name=None, "
      "graph_walk=None, skip_cuda_sync=False, cpu_tensors=None, *, tp_size=1, tp_rank=0)\n--\n\n"
      "store_and_return_tensor_info_batch(request_ids, outputs, signals, *, node_name=None,\n"
      "graph_walk=None, tp_size=1, tp_rank=0) -> StoredOutputs\noutputs[i] is request i's "
      "{signal: [tensors]}; signals not in `signals` are not stored." },
    { "tensor_info", mstarpy_comm_tensor_info, METH_O,
      "tensor_info($self, uuid, /)\n--\n\n"
      "tensor_info(uuid) -> TensorPointerInfo of a held tensor." },
    { "increment_ref", KW mstarpy_comm_increment_ref, METH_FASTCALL | METH_KEYWORDS,
      "increment_ref($self, uuid, n=1)\n--\n\n"
      "increment_ref(uuid, n=1)" },
    { "dereference", KW mstarpy_comm_dereference, METH_FASTCALL | METH_KEYWORDS,
      "dereference($self, uuid, n=1)\n--\n\n"
      "frees the tensor when its count reaches 0 (unless persisted)." },
    { "set_persist", KW mstarpy_comm_set_persist, METH_VARARGS | METH_KEYWORDS,
      "set_persist($self, uuid, persist=True)\n--\n\n"
      "set_persist(uuid, persist=True)" },
    { "increment_ref_batch", KW mstarpy_comm_increment_ref_batch, METH_VARARGS | METH_KEYWORDS,
      "increment_ref_batch($self, uuids, n=1)\n--\n\nn more references on each uuid." },
    { "increment_ref_batch_uniform", KW mstarpy_comm_increment_ref_batch,
      METH_VARARGS | METH_KEYWORDS,
      "increment_ref_batch_uniform($self, uuids, n=1)\n--\n\n"
      "The reference's name of increment_ref_batch." },
    { "dereference_batch", KW mstarpy_comm_dereference_batch, METH_VARARGS | METH_KEYWORDS,
      "dereference_batch($self, uuids, counts=1)\n--\n\ncounts is one int or one per uuid." },
    { "dereference_batch_uniform", KW mstarpy_comm_dereference_batch_uniform,
      METH_VARARGS | METH_KEYWORDS,
      "dereference_batch_uniform($self, uuids, n=1)\n--\n\n"
      "dereference_batch with one count for every uuid (the reference's name)." },
    { "set_output_ref_counts", mstarpy_comm_set_output_ref_counts, METH_VARARGS,
      "set_output_ref_counts($self, held_uuids, routed_edges, /)\n--\n\n"
      "set_output_ref_counts(held_uuids, routed_edges)" },
    { "register_for_send", KW mstarpy_comm_register_for_send, METH_FASTCALL | METH_KEYWORDS,
      "register_for_send($self, request_id, tensor_infos, skip_cuda_sync=False)\n--\n\n"
      "Stage each descriptor's tensor for other "
      "processes (file written, arena copy made, memory\nregistered) and stamp the transport's "
      "fields onto the descriptors in place. A message\ncarrying them may be sent once this "
      "returns." },
    { "register_for_send_uuids", mstarpy_comm_register_for_send_uuids, METH_VARARGS,
      "register_for_send_uuids($self, request_ids, counts, uuids, /)\n--\n\n"
      "register_for_send_uuids(request_ids, counts, uuids)" },
    { "refresh_shm_placement", mstarpy_comm_refresh_shm_placement, METH_O,
      "refresh_shm_placement($self, edges, /)\n--\n\n"
      "copy the transport's fields of staged tensors onto the "
      "edges' descriptors (in place)." },
    { "note_sent", mstarpy_comm_note_sent, METH_VARARGS,
      "note_sent($self, peer, msg, /)\n--\n\n"
      "msg, holding this manager's descriptors, was sent to peer by\n"
      "other means than its Mesh; only peer's ACKs may then release them." },
    { "handle_message", mstarpy_comm_handle_message, METH_O,
      "handle_message($self, msg, /)\n--\n\n"
      "apply TENSOR_RECEIVED or UNPERSIST_TENSORS." },
    { "start_read_tensors", KW mstarpy_comm_start_read_tensors, METH_FASTCALL | METH_KEYWORDS,
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
    { "ack_unread_tensors", mstarpy_comm_ack_unread_tensors, METH_VARARGS,
      "ack_unread_tensors($self, request_id, edges=None, /)\n--\n\n"
      "ACK without reading\n"
      "(a request already gone)." },
    { "get_ready_tensors", KW mstarpy_comm_get_ready_tensors, METH_FASTCALL | METH_KEYWORDS,
      "get_ready_tensors($self, graph_walk=None, with_failures=False)\n--\n\n"
      "[GraphEdge]}\n"
      "Collect every read whose bytes landed: ACK them (through `send`; a view's ACK waits\n"
      "for its release), gather sharded inputs, and return them. Each delivered descriptor\n"
      "carries one usage reference: release it with dereference(uuid). with_failures=True\n"
      "returns (ready, [ReadFailure])." },
    { "get_tensor", KW mstarpy_comm_get_tensor, METH_FASTCALL,
      "get_tensor($self, request_id, uuid=None, /)\n--\n\n"
      "get_tensor(request_id, uuid) -> mstar_c.Tensor, a zero-copy view (DLPack) that holds one "
      "reference on the tensor while it lives. get_tensor(uuid), the reference's form: a "
      "torch.Tensor over such a view where torch is imported, else the view." },
    { "has_inflight_reads", mstarpy_comm_has_inflight_reads, METH_O,
      "has_inflight_reads($self, request_id, /)\n--\n\n"
      "has_inflight_reads(request_id)" },
    { "cleanup_request", KW mstarpy_comm_cleanup_request, METH_FASTCALL | METH_KEYWORDS,
      "cleanup_request($self, request_id, force=False)\n--\n\n"
      "soft teardown (referenced tensors are deferred); force=True is force_cleanup_request." },
    { "force_cleanup_request", mstarpy_comm_force_cleanup_request, METH_O,
      "force_cleanup_request($self, request_id, /)\n--\n\n"
      "drop every tensor of the request. StateError while "
      "views of it are alive or reads of it are in flight." },
    { "get_tx_info", mstarpy_comm_get_tx_info, METH_O,
      "get_tx_info($self, request_id, /)\n--\n\n"
      "get_tx_info(request_id) -> [TxInfo]" },
    { "get_rx_info", mstarpy_comm_get_rx_info, METH_O,
      "get_rx_info($self, request_id, /)\n--\n\n"
      "get_rx_info(request_id) -> [RxInfo]" },
    { "arena_stats", mstarpy_comm_arena_stats, METH_NOARGS,
      "arena_stats($self, /)\n--\n\n"
      "arena_stats() -> dict (NotSupportedError unless the transport is the arena)." },
    { "event_drain", mstarpy_comm_event_drain, METH_NOARGS,
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
