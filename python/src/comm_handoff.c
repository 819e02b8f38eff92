/*
 * comm_handoff.c — CommunicationManager.send_outputs: a producer's whole handoff of a step's
 * outputs to one consumer in one call.
 *
 * From Python the handoff is five or six calls (store, increment_ref, register_for_send, a
 * Message of GraphEdges, Mesh.send, cleanup_request), and each builds Python objects the next
 * one takes apart again: descriptors, edges, a message. Those calls cost a 4 KiB handoff more
 * than the library's own work does (docs/python.md, "A handoff in one call"). Here the
 * same library calls run in the same order as a C producer makes them (the bench's producer,
 * apps/mstar/bench/bench_transport.c), with the GIL released once for all of them and nothing
 * built in Python on the way.
 */
#include "args.h"
#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct handoff {
    mstar_comm *comm;
    mstar_comm_send_fn send;
    void *send_ctx;
    bool note; /* the sender is not the manager's mesh, whose sends feed the ACK ledger */
    const mstar_rid *rid;
    const mstar_output *outs;
    size_t n;
    const mstar_store_params *params;
    const char *peer, *next_node;
    mstar_tensor_info *infos;
    bool stored; /* the store took the outputs: a failure after it drops the request */
} handoff;

/* A name checked already: next_node on the call's way in, each signal by the store, the
 * entity when its manager was made. So it fits, and nothing after the store can fail on it. */
static void name_set(char dst[MSTAR_NAME_MAX + 1], const char *src)
{
    size_t len = strnlen(src, MSTAR_NAME_MAX);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* One edge toward next_node for each signal: the outputs of a signal are consecutive, in the
 * order the store returned their descriptors. */
static mstar_status edges_add(mstar_msg *m, const handoff *h)
{
    for (size_t at = 0, end; at < h->n; at = end) {
        end = at + 1;
        while (end < h->n && strcmp(h->outs[end].signal, h->outs[at].signal) == 0)
            end++;
        mstar_edge e;
        mstar_edge_init(&e);
        name_set(e.next_node, h->next_node);
        name_set(e.name, h->outs[at].signal);
        e.ntensors = (uint32_t)(end - at);
        e.tensor_info = &h->infos[at];
        mstar_status st = mstar_msg_add_edge(m, &e); /* copies the descriptors */
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* Stage and send what the store took; the message is built and freed here. */
static mstar_status send_stored(handoff *h)
{
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; i < h->n && st == MSTAR_OK; i++)
        st = mstar_comm_increment_ref(h->comm, h->infos[i].uuid, 1);
    if (st == MSTAR_OK)
        st = mstar_comm_register_for_send(h->comm, h->rid, h->infos, h->n);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = *h->rid;
    name_set(m.from, mstar_comm_entity(h->comm));
    if (st == MSTAR_OK)
        st = edges_add(&m, h);
    if (st == MSTAR_OK)
        st = h->send(h->send_ctx, h->peer, &m);
    /* Sent: a ledger that misses it refuses the ACK later, which keeps the tensors until their
     * TTL; dropping them now would pull them from under the consumer's read. */
    if (st == MSTAR_OK && h->note && mstar_comm_note_sent(h->comm, h->peer, &m) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "send_outputs: ACK ledger: %s", mstar_last_error());
    mstar_msg_clear(&m);
    return st;
}

/* The library's calls, without the GIL. */
static mstar_status hand_off(handoff *h)
{
    mstar_status st = mstar_comm_store_and_return_tensor_info(h->comm, h->rid, h->outs, h->n,
                                                              h->params, h->infos);
    if (st != MSTAR_OK)
        return st;
    h->stored = true;
    st = send_stored(h);
    if (st == MSTAR_OK)
        return mstar_comm_cleanup_request(h->comm, h->rid); /* the tensors go with the ACK */
    /* Nothing reached the consumer: the request's tensors, slots and refs go, and the error
     * that stopped the handoff is the one reported. */
    char why[512];
    snprintf(why, sizeof(why), "%s", mstar_last_error());
    (void)mstar_comm_force_cleanup_request(h->comm, h->rid);
    return mstar_error_set(st, "%s", why);
}

/* Whether every signal of `kept` ({signal: tuple of tensors}) has a tensor: an empty one would
 * have no edge (a signal-only edge goes in a Message). -1 with an exception. */
static int signals_have_tensors(PyObject *kept)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kept, &pos, &k, &v))
        if (PyTuple_Size(v) == 0) {
            mstarpy_raise_msg(MSTAR_EINVAL,
                              "send_outputs: signal \"%s\" has no tensors (a signal-only edge "
                              "goes in a Message)",
                              PyUnicode_AsUTF8AndSize(k, NULL)); /* a str: outputs_take saw */
            return -1;
        }
    if (PyDict_Size(kept) == 0) {
        mstarpy_raise_msg(MSTAR_EINVAL, "send_outputs: no outputs to send");
        return -1;
    }
    return 0;
}

PyObject *mstarpy_comm_send_outputs(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    comm_obj *self = (comm_obj *)obj;
    static const char *const names[] = { "peer",      "request_id", "outputs", "next_node",
                                         "node_name", "graph_walk", NULL };
    static const mstarpy_params p = { "send_outputs", names, 4, 4 };
    PyObject *a[6];
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0)
        return NULL;
    Py_ssize_t peer_len = 0, node_len = 0;
    const char *peer = PyUnicode_Check(a[0]) ? PyUnicode_AsUTF8AndSize(a[0], &peer_len) : NULL;
    const char *next_node = PyUnicode_Check(a[3]) ? PyUnicode_AsUTF8AndSize(a[3], &node_len) : NULL;
    if (!peer || !next_node) {
        PyErr_Clear();
        return mstarpy_raise_msg(MSTAR_EINVAL, "send_outputs: peer and next_node are names (str)");
    }
    /* Checked before anything is stored (the mesh and the wire would refuse them after), whole:
     * a NUL inside is refused, not read as the end. */
    mstar_status st = mstar_name_validate(peer, (size_t)peer_len, "send_outputs: peer");
    if (st == MSTAR_OK)
        st = mstar_name_validate(next_node, (size_t)node_len, "send_outputs: next_node");
    if (st != MSTAR_OK)
        return mstarpy_raise(st);
    mstar_rid rid;
    mstar_store_params params = { 0 };
    if (mstarpy_comm_rid_arg(a[1], &rid) < 0 ||
        mstarpy_comm_store_params(a[4] ? a[4] : Py_None, a[5] ? a[5] : Py_None, 1, 0, &params) < 0)
        return NULL;
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    if (!self->send)
        return mstarpy_comm_leave(
            self, mstarpy_raise_msg(MSTAR_ESTATE, "send_outputs: the manager has no sender: "
                                                  "create it with send=Mesh or a callable"));
    handoff h = { .comm = self->comm,
                  .send = self->send,
                  .send_ctx = self->send_ctx,
                  .note = !self->uses_mesh,
                  .rid = &rid,
                  .params = &params,
                  .peer = peer,
                  .next_node = next_node };
    mstarpy_outputs outs;
    mstarpy_outputs_init(&outs);
    mstar_tensor_info inline_infos[MSTARPY_OUTPUTS_INLINE];
    PyObject *r = NULL, *kept = PyDict_New(), *hold = PyList_New(0);
    if (!kept || !hold || mstarpy_comm_outputs_take(self, a[2], 0, &outs, kept, hold) < 0 ||
        signals_have_tensors(kept) < 0 || !(h.infos = mstarpy_infos_for(outs.n, inline_infos)))
        goto out;
    h.outs = outs.v;
    h.n = outs.n;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = hand_off(&h);
    PyEval_RestoreThread(ts_);
    int marked = h.stored ? mstarpy_comm_loans_stored(kept, a[1], h.infos) : 0;
    if (st != MSTAR_OK)
        mstarpy_raise(st);
    else if (marked == 0)
        r = Py_NewRef(Py_None);
out:
    if (!h.stored)
        mstarpy_comm_outputs_release(&outs); /* a failed store leaves them ours */
    mstarpy_outputs_free(&outs);
    if (h.infos)
        mstarpy_infos_free(h.infos, inline_infos);
    Py_XDECREF(kept);
    Py_XDECREF(hold);
    return mstarpy_comm_leave(self, r);
}
