/*
 * comm_read.c — the consumer (comm.c's type): start_read_tensors (copies, views, read-into
 * targets), ack_unread_tensors, get_ready_tensors, get_tensor, has_inflight_reads.
 */
#include "args.h"
#include "comm_internal.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    return mstarpy_comm_rid_arg(rid_obj, rid) < 0 || mstarpy_edges_from_py(edges_obj, edges, n) < 0
               ? -1
               : 0;
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
    if (mstarpy_comm_enter(self) == 0) {
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
            r = mstarpy_comm_fail(self, st);
        } else if (!read) {
            r = mstarpy_comm_leave(self, Py_NewRef(Py_None));
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
            r = mstarpy_comm_leave(self, l);
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

PyObject *mstarpy_comm_start_read_tensors(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
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

PyObject *mstarpy_comm_ack_unread_tensors(PyObject *obj, PyObject *args)
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

PyObject *mstarpy_comm_get_ready_tensors(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
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
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_ready_set set;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_get_ready_tensors(self->comm, &set);
    PyEval_RestoreThread(ts_);
    PyObject *r = ready_result(&set, with_failures);
    mstar_ready_set_clear(&set);
    if (st == MSTAR_OK || !r)
        return mstarpy_comm_leave(self, r);
    /* An ACK that could not be sent (it stays queued for the next call) fails the call, but
     * what was read is not lost: the exception carries the result as `ready`. */
    mstarpy_raise(st);
    mstarpy_comm_leave(self, NULL);
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

PyObject *mstarpy_comm_get_tensor(PyObject *obj, PyObject *const *args, Py_ssize_t nargs)
{
    comm_obj *self = (comm_obj *)obj;
    static const char *const names[] = { "request_id", "uuid", NULL };
    static const mstarpy_params p = { "get_tensor", names, 2, 1 };
    PyObject *a[2];
    if (mstarpy_parse(&p, args, nargs, NULL, a) < 0)
        return NULL;
    if (!a[1])
        return reference_tensor(
            mstarpy_comm_get_tensor(obj, (PyObject *const[]){ Py_None, a[0] }, 2));
    PyObject *rid_obj = a[0], *u = a[1];
    mstar_rid rid;
    mstar_tensor_id uuid;
    if ((rid_obj != Py_None && mstarpy_comm_rid_arg(rid_obj, &rid) < 0) ||
        mstarpy_comm_uuid_arg(u, &uuid) < 0 || mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_tensor t;
    mstar_status st = mstar_comm_get_tensor(self->comm, uuid, &t);
    if (st != MSTAR_OK)
        return mstarpy_comm_fail(self, st);
    if (mstarpy_comm_view_take(self, rid_obj, uuid) < 0) /* the view's reference */
        return mstarpy_comm_leave(self, NULL);
    PyObject *view = mstarpy_tensor_new(self, rid_obj, uuid, &t);
    if (!view) {
        self->busy = false;
        mstarpy_comm_view_dropped(self, rid_obj, uuid);
        self->busy = true;
    }
    return mstarpy_comm_leave(self, view);
}

PyObject *mstarpy_comm_has_inflight_reads(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_rid rid;
    if (mstarpy_comm_rid_arg(arg, &rid) < 0 || mstarpy_comm_enter(self) < 0)
        return NULL;
    return mstarpy_comm_leave(self,
                              PyBool_FromLong(mstar_comm_has_inflight_reads(self->comm, &rid)));
}
