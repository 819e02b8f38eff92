/*
 * comm_refs.c — the manager's reference counts (comm.c's type): increment_ref, dereference,
 * set_persist, their batch forms (and the reference's *_uniform names), set_output_ref_counts.
 */
#include "args.h"
#include "comm_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
    if (mstarpy_comm_uuid_arg(a[0], &uuid) < 0 || mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_status st = fn(self->comm, uuid, (int64_t)n);
    return st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                          : mstarpy_comm_fail(self, st);
}

PyObject *mstarpy_comm_increment_ref(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    static const mstarpy_params p = { "increment_ref", ref_names, 2, 1 };
    return ref_call(obj, args, nargs, kwnames, &p, mstar_comm_increment_ref);
}

PyObject *mstarpy_comm_dereference(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const mstarpy_params p = { "dereference", ref_names, 2, 1 };
    return ref_call(obj, args, nargs, kwnames, &p, mstar_comm_dereference);
}

PyObject *mstarpy_comm_set_persist(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = { "uuid", "persist", NULL };
    PyObject *u;
    int persist = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &u, &persist))
        return NULL;
    mstar_tensor_id uuid;
    if (mstarpy_comm_uuid_arg(u, &uuid) < 0 || mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_status st = mstar_comm_set_persist(self->comm, uuid, persist != 0);
    return st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                          : mstarpy_comm_fail(self, st);
}

/* A sequence of uuids into a malloc'd array. */
int mstarpy_comm_uuids_from_py(PyObject *seq, mstar_tensor_id **out, uint32_t *n)
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
        if (mstarpy_comm_uuid_arg(PyTuple_GetItem(t, i), &(*out)[i]) < 0) {
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
    if (mstarpy_comm_uuids_from_py(seq, &uuids, &n) < 0)
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
    if (mstarpy_comm_enter(self) < 0)
        goto out;
    mstar_status st =
        increment ? mstar_comm_increment_ref_batch_uniform(self->comm, uuids, n, uniform)
        : counts  ? mstar_comm_dereference_batch(self->comm, uuids, counts, n)
                  : mstar_comm_dereference_batch_uniform(self->comm, uuids, n, uniform);
    r = st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None)) : mstarpy_comm_fail(self, st);
out:
    free(uuids);
    free(counts);
    return r;
}

/* increment_ref_batch(uuids, n=1), also under the reference's name increment_ref_batch_uniform;
 * dereference_batch_uniform(uuids, n=1) is dereference_batch(uuids, counts) with one count. */
PyObject *mstarpy_comm_increment_ref_batch(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "uuids", "n", NULL };
    PyObject *seq, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &count_obj))
        return NULL;
    return batch_ref(obj, seq, count_obj, true);
}

PyObject *mstarpy_comm_dereference_batch(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "uuids", "counts", NULL };
    PyObject *seq, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &count_obj))
        return NULL;
    return batch_ref(obj, seq, count_obj, false);
}

PyObject *mstarpy_comm_dereference_batch_uniform(PyObject *obj, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "uuids", "n", NULL };
    PyObject *seq, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &count_obj))
        return NULL;
    if (count_obj && !PyLong_Check(count_obj))
        return mstarpy_raise_msg(MSTAR_EINVAL, "dereference_batch_uniform: n is one int");
    return batch_ref(obj, seq, count_obj, false);
}

PyObject *mstarpy_comm_set_output_ref_counts(PyObject *obj, PyObject *args)
{
    comm_obj *self = (comm_obj *)obj;
    PyObject *held_obj, *edges_obj;
    if (!PyArg_ParseTuple(args, "OO", &held_obj, &edges_obj))
        return NULL;
    mstar_tensor_id *held;
    uint32_t nheld, nedges;
    mstar_edge *edges;
    if (mstarpy_comm_uuids_from_py(held_obj, &held, &nheld) < 0)
        return NULL;
    if (mstarpy_edges_from_py(edges_obj, &edges, &nedges) < 0) {
        free(held);
        return NULL;
    }
    PyObject *r = NULL;
    if (mstarpy_comm_enter(self) == 0) {
        mstar_status st = mstar_comm_set_output_ref_counts(self->comm, held, nheld, edges, nedges);
        r = st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                           : mstarpy_comm_fail(self, st);
    }
    mstarpy_edges_free(edges, nedges);
    free(edges);
    free(held);
    return r;
}
