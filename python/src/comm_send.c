/*
 * comm_send.c — the producer's staging and messages (comm.c's type): register_for_send and its
 * uuid form, refresh_shm_placement, handle_message, note_sent.
 */
#include "args.h"
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- staging -------------------------------------------------------------------------------- */

PyObject *mstarpy_comm_register_for_send(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames)
{
    comm_obj *self = (comm_obj *)obj;
    static const char *const names[] = { "request_id", "tensor_infos", "skip_cuda_sync", NULL };
    static const mstarpy_params p = { "register_for_send", names, 3, 2 };
    PyObject *a[3];
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 || mstarpy_comm_reference_kw(a[2], NULL) < 0)
        return NULL;
    PyObject *rid_obj = a[0], *infos_obj = a[1];
    mstar_rid rid;
    if (mstarpy_comm_rid_arg(rid_obj, &rid) < 0)
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
    if (mstarpy_comm_enter(self) < 0)
        goto out;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_register_for_send(self->comm, &rid, infos, (uint32_t)n);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        mstarpy_comm_fail(self, st);
        goto out;
    }
    /* The transport's fields were stamped onto the descriptors: write them back. */
    int ok = 0;
    for (Py_ssize_t i = 0; ok == 0 && i < n; i++)
        ok = mstarpy_info_update_py(PyTuple_GetItem(t, i), &infos[i]);
    r = mstarpy_comm_leave(self, ok == 0 ? Py_NewRef(Py_None) : NULL);
out:
    free(infos);
    Py_DECREF(t);
    return r;
}

PyObject *mstarpy_comm_register_for_send_uuids(PyObject *obj, PyObject *args)
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
    if (!ct || mstarpy_comm_uuids_from_py(uuids_obj, &uuids, &nuuids) < 0)
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
        if (mstarpy_comm_rid_arg(PyTuple_GetItem(rt, i), &rids[i]) < 0 ||
            (v == -1 && PyErr_Occurred()))
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
    if (mstarpy_comm_enter(self) < 0)
        goto out;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_register_for_send_uuids(self->comm, rids, (uint32_t)nreq, counts, uuids);
    PyEval_RestoreThread(ts_);
    r = st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None)) : mstarpy_comm_fail(self, st);
out:
    free(uuids);
    free(rids);
    free(counts);
    Py_XDECREF(rt);
    Py_XDECREF(ct);
    return r;
}

PyObject *mstarpy_comm_refresh_shm_placement(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_edge *edges;
    uint32_t n;
    if (mstarpy_edges_from_py(arg, &edges, &n) < 0)
        return NULL;
    PyObject *r = NULL;
    if (mstarpy_comm_enter(self) == 0) {
        mstar_status st = mstar_comm_refresh_shm_placement(self->comm, edges, n);
        if (st == MSTAR_OK)
            r = mstarpy_comm_leave(
                self, mstarpy_edges_update_py(arg, edges, n) == 0 ? Py_NewRef(Py_None) : NULL);
        else
            r = mstarpy_comm_fail(self, st);
    }
    mstarpy_edges_free(edges, n);
    free(edges);
    return r;
}

PyObject *mstarpy_comm_handle_message(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstarpy_msg_arg a;
    PyObject *r = NULL;
    if (mstarpy_msg_arg_get(arg, &a) == 0 && mstarpy_comm_enter(self) == 0) {
        mstar_status st = mstar_comm_handle_message(self->comm, a.m);
        r = st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                           : mstarpy_comm_fail(self, st);
    }
    mstarpy_msg_arg_done(&a);
    return r;
}

/* A producer whose descriptors leave through something other than its Mesh (a
 * callable, the caller's own communicator) tells the ACK ledger here whom it sent them to. */
PyObject *mstarpy_comm_note_sent(PyObject *obj, PyObject *args)
{
    comm_obj *self = (comm_obj *)obj;
    const char *peer;
    PyObject *msg_obj;
    if (!PyArg_ParseTuple(args, "sO", &peer, &msg_obj))
        return NULL;
    mstarpy_msg_arg a;
    PyObject *r = NULL;
    if (mstarpy_msg_arg_get(msg_obj, &a) == 0 && mstarpy_comm_enter(self) == 0) {
        mstar_status st = mstar_comm_note_sent(self->comm, peer, a.m);
        r = st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                           : mstarpy_comm_fail(self, st);
    }
    mstarpy_msg_arg_done(&a);
    return r;
}
