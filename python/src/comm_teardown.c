/*
 * comm_teardown.c — the manager's request teardown and statistics (comm.c's type):
 * cleanup_request, force_cleanup_request, get_tx_info / get_rx_info, arena_stats, event_drain.
 */
#include "args.h"
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- teardown and statistics ---------------------------------------------------------------- */

static PyObject *cleanup_call(PyObject *obj, PyObject *arg, bool force)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_rid rid;
    if (mstarpy_comm_rid_arg(arg, &rid) < 0)
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
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = force ? mstar_comm_force_cleanup_request(self->comm, &rid)
               : mstar_comm_cleanup_request(self->comm, &rid);
    PyEval_RestoreThread(ts_);
    return st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                          : mstarpy_comm_fail(self, st);
}

PyObject *mstarpy_comm_cleanup_request(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
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

PyObject *mstarpy_comm_force_cleanup_request(PyObject *obj, PyObject *arg)
{
    return cleanup_call(obj, arg, true);
}

static PyObject *prof_call(PyObject *obj, PyObject *arg, bool tx)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_rid rid;
    if (mstarpy_comm_rid_arg(arg, &rid) < 0 || mstarpy_comm_enter(self) < 0)
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
    return st == MSTAR_OK ? mstarpy_comm_leave(self, r) : mstarpy_comm_fail(self, st);
}

PyObject *mstarpy_comm_get_tx_info(PyObject *obj, PyObject *arg)
{
    return prof_call(obj, arg, true);
}

PyObject *mstarpy_comm_get_rx_info(PyObject *obj, PyObject *arg)
{
    return prof_call(obj, arg, false);
}

PyObject *mstarpy_comm_arena_stats(PyObject *obj, PyObject *unused)
{
    comm_obj *self = (comm_obj *)obj;
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_arena_stats s;
    mstar_status st = mstar_comm_arena_stats(self->comm, &s);
    if (st != MSTAR_OK)
        return mstarpy_comm_fail(self, st);
    return mstarpy_comm_leave(
        self, Py_BuildValue("{sIsKsKsKsKsKsKsK}", "segments", s.segments, "total_bytes",
                            (unsigned long long)s.total_bytes, "free_bytes",
                            (unsigned long long)s.free_bytes, "largest_free_block",
                            (unsigned long long)s.largest_free_block, "pinned_bytes",
                            (unsigned long long)s.pinned_bytes, "live_slots",
                            (unsigned long long)s.live_slots, "spill_files",
                            (unsigned long long)s.spill_files, "peer_segments",
                            (unsigned long long)s.peer_segments));
}

PyObject *mstarpy_comm_event_drain(PyObject *obj, PyObject *unused)
{
    comm_obj *self = (comm_obj *)obj;
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_comm_event_drain(self->comm);
    return mstarpy_comm_leave(self, Py_NewRef(Py_None));
}
