/*
 * comm_store.c — the manager's requests and stores (comm.c's type): register_request, the
 * single and batch stores of {signal: [tensors]} taken through DLPack or as loans, tensor_info,
 * loan_output.
 */
#include "args.h"
#include "comm_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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

void mstarpy_outputs_init(mstarpy_outputs *o)
{
    o->v = o->inline_v;
    o->n = 0;
    o->cap = MSTARPY_OUTPUTS_INLINE;
}

void mstarpy_outputs_free(mstarpy_outputs *o)
{
    if (o->v != o->inline_v)
        free(o->v);
    mstarpy_outputs_init(o);
}

/* Room for one more output; -1 with MemoryError. */
static int outputs_grow(mstarpy_outputs *o)
{
    if (o->n < o->cap)
        return 0;
    size_t nc = 2 * o->cap;
    bool heap = o->v != o->inline_v;
    mstar_output *nv = heap ? realloc(o->v, nc * sizeof(*nv)) : malloc(nc * sizeof(*nv));
    if (!nv) {
        PyErr_NoMemory();
        return -1;
    }
    if (!heap)
        memcpy(nv, o->inline_v, o->n * sizeof(*nv));
    o->v = nv;
    o->cap = nc;
    return 0;
}

mstar_tensor_info *mstarpy_infos_for(size_t n, mstar_tensor_info *inline_infos)
{
    if (n <= MSTARPY_OUTPUTS_INLINE)
        return inline_infos;
    mstar_tensor_info *v = calloc(n, sizeof(*v));
    if (!v)
        PyErr_NoMemory();
    return v;
}

void mstarpy_infos_free(mstar_tensor_info *infos, const mstar_tensor_info *inline_infos)
{
    if (infos != inline_infos)
        free(infos);
}

/* Release what the outputs handed over (a failed store leaves it the caller's). */
void mstarpy_comm_outputs_release(mstarpy_outputs *outs)
{
    for (size_t i = 0; i < outs->n; i++)
        if (outs->v[i].release)
            outs->v[i].release(outs->v[i].release_ctx, outs->v[i].tensor.data);
}

/* Take every tensor of {signal: [tensors]} into outs (appended): an mstar_c.Loan of this
 * manager as a loan when `keep` is given (the single form; the batch form refuses loans), else
 * as mstarpy_tensor_in takes it. `keep` (optional) receives {signal: tuple of the tensors}.
 *
 * The walk is over a snapshot of the dict's items, appended to `hold`: a __dlpack__ runs Python
 * code that may change or clear the dict, and each output's signal name points into a key,
 * which `hold` keeps alive until the caller lets go of it after the store. */
int mstarpy_comm_outputs_take(comm_obj *self, PyObject *dict, uint32_t request,
                              mstarpy_outputs *outs, PyObject *keep, PyObject *hold)
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
            if (outputs_grow(outs) < 0) {
                Py_DECREF(fast);
                return -1;
            }
            mstar_output *o = &outs->v[outs->n];
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
            outs->n++;
        }
        int kept = keep ? PyDict_SetItem(keep, k, fast) : 0;
        Py_DECREF(fast);
        if (kept < 0)
            return -1;
    }
    if (outs->n > UINT32_MAX) {
        mstarpy_raise_msg(MSTAR_EINVAL, "outputs: too many tensors");
        return -1;
    }
    return 0;
}

/* The store took the outputs that mstarpy_comm_outputs_take put in `kept` ({signal: tuple}),
 * whose descriptors are infos[] in the same order: each mstar_c.Loan among them is marked
 * stored. 0, or -1 with an exception (every loan is marked all the same). */
int mstarpy_comm_loans_stored(PyObject *kept, PyObject *rid_obj, const mstar_tensor_info *infos)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    size_t at = 0;
    int r = 0;
    while (PyDict_Next(kept, &pos, &k, &v)) {
        Py_ssize_t cnt = PyTuple_Size(v);
        for (Py_ssize_t i = 0; i < cnt; i++, at++) {
            PyObject *item = PyTuple_GetItem(v, i);
            if (PyObject_TypeCheck(item, mstarpy.loan_type) &&
                mstarpy_loan_stored(item, rid_obj, infos[at].uuid) < 0)
                r = -1;
        }
    }
    return r;
}

/* The reference's skip_cuda_sync and cpu_tensors, accepted for its callers. Neither changes what
 * the library does: it orders its own copies after the producer's stream (CUDA events) so there
 * is no default-stream sync to skip, and it makes the host copy a transport needs itself, so a
 * caller's host copies (a dict, or None) are not used. -1 with an exception for a wrong type. */
int mstarpy_comm_reference_kw(PyObject *skip_cuda_sync, PyObject *cpu_tensors)
{
    int skip;
    if (skip_cuda_sync && mstarpy_arg_bool(skip_cuda_sync, &skip) < 0)
        return -1;
    if (cpu_tensors && cpu_tensors != Py_None && !PyDict_Check(cpu_tensors))
        return mstarpy_raise_msg(MSTAR_EINVAL, "cpu_tensors: a dict of host copies, or None"), -1;
    return 0;
}

int mstarpy_comm_store_params(PyObject *node, PyObject *walk, int tp_size, int tp_rank,
                              mstar_store_params *p)
{
    p->tp_size = tp_size;
    p->tp_rank = tp_rank;
    return mstarpy_comm_opt_str(node, &p->node_name) < 0 ||
                   mstarpy_comm_opt_str(walk, &p->graph_walk) < 0
               ? -1
               : 0;
}

/* ---- requests and storing ------------------------------------------------------------------- */

PyObject *mstarpy_comm_register_request(PyObject *obj, PyObject *args, PyObject *kw)
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
    if (mstarpy_comm_rid_arg(rid_obj, &rid) < 0)
        return NULL;
    if (sharding_from_py(cfg_obj, &cfg, &keep, &names, &dims) < 0) {
        PyMem_Free(names);
        PyMem_Free(dims);
        return NULL;
    }
    PyObject *r = NULL;
    if (mstarpy_comm_enter(self) == 0) {
        mstar_status st = mstar_comm_register_request(self->comm, &rid, keep ? &cfg : NULL);
        r = st == MSTAR_OK ? mstarpy_comm_leave(self, Py_NewRef(Py_None))
                           : mstarpy_comm_fail(self, st);
    }
    Py_XDECREF(keep);
    PyMem_Free(names);
    PyMem_Free(dims);
    return r;
}

PyObject *mstarpy_comm_store(PyObject *obj, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    comm_obj *self = (comm_obj *)obj;
    /* The reference's order by position (its skip_cuda_sync and cpu_tensors:
     * mstarpy_comm_reference_kw), then this package's tp_size and tp_rank by keyword. */
    static const char *const names[] = { "request_id", "outputs",        "node_name",
                                         "graph_walk", "skip_cuda_sync", "cpu_tensors",
                                         "tp_size",    "tp_rank",        NULL };
    static const mstarpy_params p = { "store_and_return_tensor_info", names, 6, 2 };
    PyObject *a[8];
    long long tp_size = 1, tp_rank = 0;
    if (mstarpy_parse(&p, args, nargs, kwnames, a) < 0 ||
        mstarpy_comm_reference_kw(a[4], a[5]) < 0 ||
        (a[6] && mstarpy_arg_ll(&p, a[6], INT_MIN, INT_MAX, &tp_size) < 0) ||
        (a[7] && mstarpy_arg_ll(&p, a[7], INT_MIN, INT_MAX, &tp_rank) < 0))
        return NULL;
    PyObject *rid_obj = a[0], *outputs = a[1];
    PyObject *node = a[2] ? a[2] : Py_None, *walk = a[3] ? a[3] : Py_None;
    mstar_rid rid;
    mstar_store_params params = { 0 };
    if (mstarpy_comm_rid_arg(rid_obj, &rid) < 0 ||
        mstarpy_comm_store_params(node, walk, (int)tp_size, (int)tp_rank, &params) < 0)
        return NULL;
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstarpy_outputs outs;
    mstarpy_outputs_init(&outs);
    mstar_tensor_info inline_infos[MSTARPY_OUTPUTS_INLINE], *infos = NULL;
    PyObject *result = NULL, *kept = PyDict_New(), *hold = PyList_New(0);
    if (!kept || !hold || mstarpy_comm_outputs_take(self, outputs, 0, &outs, kept, hold) < 0 ||
        !(infos = mstarpy_infos_for(outs.n, inline_infos)))
        goto fail_release;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_store_and_return_tensor_info(self->comm, &rid, outs.v, (uint32_t)outs.n,
                                                 &params, infos);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        mstarpy_raise(st);
        goto fail_release;
    }
    mstarpy_outputs_free(&outs); /* the store took them: nothing to release */
    /* {signal: [TensorPointerInfo]} in the order of the outputs. */
    int stored = mstarpy_comm_loans_stored(kept, rid_obj, infos);
    result = PyDict_New();
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    size_t at = 0;
    while (result && PyDict_Next(kept, &pos, &k, &v)) {
        Py_ssize_t cnt = PyTuple_Size(v);
        PyObject *list = PyList_New(cnt);
        for (Py_ssize_t i = 0; list && i < cnt; i++, at++) {
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
    mstarpy_infos_free(infos, inline_infos);
    Py_DECREF(kept);
    Py_DECREF(hold);
    return mstarpy_comm_leave(self, result);
fail_release:
    mstarpy_comm_outputs_release(&outs);
    mstarpy_outputs_free(&outs);
    if (infos)
        mstarpy_infos_free(infos, inline_infos);
    Py_XDECREF(kept);
    Py_XDECREF(hold);
    return mstarpy_comm_leave(self, NULL);
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

PyObject *mstarpy_comm_store_batch(PyObject *obj, PyObject *args, PyObject *kw)
{
    comm_obj *self = (comm_obj *)obj;
    static char *kwlist[] = { "request_ids",    "outputs",     "signals", "node_name", "graph_walk",
                              "skip_cuda_sync", "cpu_tensors", "tp_size", "tp_rank",   NULL };
    PyObject *rids_obj, *outputs, *signals_obj, *node = Py_None, *walk = Py_None;
    PyObject *skip = NULL, *cpu = NULL;
    int tp_size = 1, tp_rank = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OOOO$ii", kwlist, &rids_obj, &outputs,
                                     &signals_obj, &node, &walk, &skip, &cpu, &tp_size, &tp_rank) ||
        mstarpy_comm_reference_kw(skip, cpu) < 0)
        return NULL;
    mstar_store_params params = { 0 };
    if (mstarpy_comm_store_params(node, walk, tp_size, tp_rank, &params) < 0)
        return NULL;
    PyObject *rids_t = PySequence_Tuple(rids_obj), *outs_t = PySequence_Tuple(outputs);
    PyObject *sigs_t = PySequence_Tuple(signals_obj);
    mstar_rid *rids = NULL;
    const char **sigs = NULL;
    mstarpy_outputs outs;
    mstarpy_outputs_init(&outs);
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
        if (mstarpy_comm_rid_arg(PyTuple_GetItem(rids_t, i), &rids[i]) < 0)
            goto out;
    for (Py_ssize_t i = 0; i < nsig; i++)
        if (!(sigs[i] = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(sigs_t, i), NULL)))
            goto out;
    if (mstarpy_comm_enter(self) < 0)
        goto out;
    for (Py_ssize_t r = 0; r < nreq; r++) {
        if (mstarpy_comm_outputs_take(self, PyTuple_GetItem(outs_t, r), (uint32_t)r, &outs, NULL,
                                      hold) < 0) {
            mstarpy_comm_outputs_release(&outs);
            mstarpy_comm_leave(self, NULL);
            goto out;
        }
    }
    mstar_stored_outputs so;
    mstar_status st;
    PyThreadState *ts_ = PyEval_SaveThread();
    st = mstar_comm_store_and_return_tensor_info_batch(self->comm, rids, (uint32_t)nreq, outs.v,
                                                       (uint32_t)outs.n, sigs, (uint32_t)nsig,
                                                       &params, &so);
    PyEval_RestoreThread(ts_);
    if (st != MSTAR_OK) {
        mstarpy_comm_outputs_release(&outs);
        mstarpy_comm_fail(self, st);
        goto out;
    }
    result = mstarpy_comm_leave(self, stored_to_py(&so, (uint32_t)nreq, (uint32_t)nsig));
    mstar_stored_outputs_clear(&so);
out:
    mstarpy_outputs_free(&outs);
    free(rids);
    free(sigs);
    Py_XDECREF(rids_t);
    Py_XDECREF(outs_t);
    Py_XDECREF(sigs_t);
    Py_XDECREF(hold);
    return result;
}

PyObject *mstarpy_comm_tensor_info(PyObject *obj, PyObject *arg)
{
    comm_obj *self = (comm_obj *)obj;
    mstar_tensor_id uuid;
    if (mstarpy_comm_uuid_arg(arg, &uuid) < 0 || mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_tensor_info info;
    mstar_status st = mstar_comm_tensor_info(self->comm, uuid, &info);
    return st == MSTAR_OK ? mstarpy_comm_leave(self, mstarpy_info_to_py(&info))
                          : mstarpy_comm_fail(self, st);
}

PyObject *mstarpy_comm_loan_output(PyObject *obj, PyObject *args, PyObject *kw)
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
    if (mstarpy_comm_enter(self) < 0)
        return NULL;
    mstar_tensor t;
    mstar_loan_id id;
    mstar_status st = mstar_comm_loan_output(self->comm, dtype, shape, ndim, &t, &id);
    if (st != MSTAR_OK)
        return mstarpy_comm_fail(self, st);
    PyObject *loan = mstarpy_loan_new(self, &t, id);
    if (!loan)
        mstar_comm_loan_release(self->comm, id);
    return mstarpy_comm_leave(self, loan);
}
