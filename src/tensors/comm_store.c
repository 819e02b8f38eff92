/*
 * comm_store.c — the producer side of the communication manager (design.md "Tensor lifecycle"):
 * storing a step's outputs under fresh ids (canonical layout for sharded signals, contiguous
 * always), building their descriptors, reference counting, and staging them for other
 * processes (register_for_send) with the transport's fields (the arena's placement, UCX's key)
 * written onto outgoing descriptors.
 *
 * Loans (mstar_comm_loan_output) are buffers the transport lends (an arena slot) or plain host
 * memory, kept open by id until an output names them: storing one takes its buffer as the
 * record's bytes, so staging it copies nothing. The graph runner's loaner (mstar_comm_output_loan)
 * lends slots only, for replayed outputs copied into loans on the compute stream.
 *
 * Storing is all or nothing: every output is validated and its bytes prepared (copied when the
 * manager must own them) before the first record is written, and memory the caller handed over
 * is released only once the whole call succeeded.
 */
#include "tensors/comm_internal.h"

#include "core/assert.h"
#include "core/str.h"
#include "tensors/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- descriptors and profiling -------------------------------------------------------------- */

void mstar__comm_fill_info(mstar_comm *comm, const mstar__bk_rec *rec, mstar_tensor_info *info)
{
    mstar_tensor_info_init(info);
    info->uuid = rec->uuid;
    info->dtype = rec->view.dtype;
    info->ndim = rec->view.ndim;
    for (int32_t i = 0; i < rec->view.ndim; i++) {
        info->dims[i] = rec->view.shape[i];
        info->stride[i] = rec->view.strides[i];
    }
    info->nbytes = mstar_tensor_nbytes(&rec->view);
    info->address = (uint64_t)(uintptr_t)mstar_tensor_ptr(&rec->view);
    info->source_tp_size = rec->tp_size > 0 ? rec->tp_size : 1;
    info->source_tp_rank = rec->tp_rank;
    mstar__str_copy(info->source_session_id, sizeof(info->source_session_id),
                    mstar_comm_session_id(comm));
    mstar__str_copy(info->source_entity, sizeof(info->source_entity), comm->entity);
    mstar__str_copy(info->source_node_name, sizeof(info->source_node_name),
                    mstar__names_get(&comm->names, rec->node_name));
    mstar__str_copy(info->source_graph_walk, sizeof(info->source_graph_walk),
                    mstar__names_get(&comm->names, rec->graph_walk));
    if ((rec->flags & MSTAR__BK_REGISTERED) && comm->transport->ops->stamp != NULL)
        comm->transport->ops->stamp(comm->transport, rec->uuid, info);
}

void mstar__comm_record_tx(mstar_comm *comm, mstar__req *r, uint32_t edge_name, uint64_t bytes,
                           double time_s)
{
    const char *name = edge_name != 0 ? mstar__names_get(&comm->names, edge_name) : "?";
    mstar_tx_info *tx = NULL;
    for (size_t i = 0; i < r->tx.len && tx == NULL; i++)
        if (strcmp(((mstar_tx_info *)mstar__vec_at(&r->tx, i))->edge_name, name) == 0)
            tx = mstar__vec_at(&r->tx, i);
    if (tx == NULL) {
        if (mstar__vec_grow(&r->tx, 1, (void **)&tx) != MSTAR_OK)
            return; /* profiling is best effort */
        snprintf(tx->edge_name, sizeof(tx->edge_name), "%s", name);
        snprintf(tx->source_entity, sizeof(tx->source_entity), "%s", comm->entity);
    }
    tx->count++;
    tx->num_bytes += (int64_t)bytes;
    tx->time_s += time_s;
}

mstar_status mstar_comm_tensor_info(mstar_comm *comm, mstar_tensor_id uuid, mstar_tensor_info *out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "tensor_info: out is NULL");
    uint32_t slot = mstar__bk_find(&comm->bk, uuid);
    if (slot == MSTAR__BK_NONE)
        return mstar_error_set(MSTAR_ENOENT, "tensor 0x%016llx is not held by '%s'",
                               (unsigned long long)uuid, comm->entity);
    mstar__comm_fill_info(comm, mstar__bk_at(&comm->bk, slot), out);
    return MSTAR_OK;
}

/* ---- storing -------------------------------------------------------------------------------- */

/* One output on its way into the store. */
typedef struct prepared {
    const mstar_output *src;
    uint32_t index; /* in the store's array of prepared outputs */
    uint32_t req;
    uint32_t signal;
    int32_t shard_dim;
    mstar_tensor_id uuid;
    mstar__buf *buf;
    mstar_tensor view;
    mstar__buf *host;
    bool release_now;      /* the manager copied tensor's bytes: release the caller's now */
    bool loaned;           /* buf holds a reference on the output's loan */
    bool host_release_now; /* the same for the host copy (copied, or not kept) */
} prepared;

/* Drop a preparation without running any of the caller's release functions. */
static void unprepare(prepared *p)
{
    if (p->buf != NULL && !p->buf->inline_bytes && !p->loaned)
        p->buf->release = NULL;
    if (p->host != NULL && !p->host->inline_bytes)
        p->host->release = NULL;
    mstar__buf_release(p->buf);
    mstar__buf_release(p->host);
    p->buf = p->host = NULL;
}

/* A strided device view copied contiguous into a device buffer, through host memory: D2H of the
 * bytes the view touches (from the lowest to the highest, which negative strides put before its
 * first byte), the layout copy on the host, H2D. Only for the rare sharded or strided device
 * output; contiguous device outputs are copied device to device. */
static mstar_status copy_device_strided(mstar_comm *comm, const mstar_tensor *v, mstar__buf *dst)
{
    int64_t lo, hi;
    mstar_status st = mstar__layout_extent(v, &lo, &hi);
    if (st != MSTAR_OK)
        return mstar_error_wrap("strided output");
    uint64_t span = (uint64_t)(hi - lo);
    uint64_t n = mstar_tensor_nbytes(v);
    void *raw = malloc((size_t)span);
    void *packed = malloc((size_t)n);
    if (raw == NULL || packed == NULL)
        st = mstar_error_set(MSTAR_ENOMEM,
                             "host staging of %llu bytes for a strided output of %llu bytes",
                             (unsigned long long)span, (unsigned long long)n);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(comm->d2h, raw, (char *)mstar_tensor_ptr(v) + lo, (size_t)span,
                                MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(comm->d2h);
    if (st == MSTAR_OK) {
        mstar_tensor host = *v;
        host.data = raw;
        host.byte_offset = (uint64_t)-lo; /* the view's first byte, inside the staged span */
        mstar__layout_copy_contiguous(&host, packed);
        st = mstar_memcpy_async(comm->d2h, dst->data, packed, (size_t)n, MSTAR_MEMCPY_H2D);
    }
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(comm->d2h);
    free(raw);
    free(packed);
    return st;
}

/* Own a contiguous copy of canonical view `cv` (device or host). */
static mstar_status copy_canonical(mstar_comm *comm, const mstar_tensor *cv, mstar__buf **out)
{
    uint64_t n = mstar_tensor_nbytes(cv);
    bool device = mstar__transport_on_device(&comm->env, cv);
    mstar_status st =
        device ? mstar__transport_alloc_dest(&comm->env, n, out) : mstar__buf_alloc_host(n, out);
    if (st != MSTAR_OK || n == 0)
        return st;
    if (!device) {
        mstar__layout_copy_contiguous(cv, (*out)->data);
    } else if (mstar_tensor_is_contiguous(cv)) {
        st = mstar_memcpy_async(comm->d2h, (*out)->data, mstar_tensor_ptr(cv), (size_t)n,
                                MSTAR_MEMCPY_D2D);
        if (st == MSTAR_OK)
            st = mstar_stream_synchronize(comm->d2h);
    } else {
        st = copy_device_strided(comm, cv, *out);
    }
    if (st != MSTAR_OK) {
        mstar__buf_release(*out);
        *out = NULL;
    }
    return st;
}

static mstar_status check_device(mstar_comm *comm, const mstar_tensor *t, const char *what)
{
    if (t->device.type == MSTAR_DEVICE_CPU || mstar__transport_on_device(&comm->env, t))
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EINVAL,
                           "%s is on device %d:%d, which this manager's backend "
                           "does not serve",
                           what, (int)t->device.type, (int)t->device.index);
}

/* Take (or copy) the bytes of `t` in canonical layout for shard dim d. */
static mstar_status take_bytes(mstar_comm *comm, const mstar_tensor *t, int32_t d,
                               mstar_release_fn release, void *ctx, mstar__buf **buf,
                               mstar_tensor *view, bool *release_now)
{
    mstar_tensor cv;
    mstar__layout_to_canonical(t, d, &cv);
    *release_now = false;
    if (release != NULL && mstar_tensor_is_contiguous(&cv)) {
        mstar_status st = mstar__buf_wrap(t->data, mstar_tensor_nbytes(t) + t->byte_offset,
                                          t->device, release, ctx, buf);
        if (st == MSTAR_OK) {
            *view = cv;
            mstar_shape_contiguous_strides(view->ndim, view->shape, view->strides);
        }
        return st;
    }
    mstar_status st = copy_canonical(comm, &cv, buf);
    if (st != MSTAR_OK)
        return st;
    *view = cv;
    view->data = (*buf)->data;
    view->byte_offset = 0;
    view->device = (*buf)->device;
    mstar_shape_contiguous_strides(view->ndim, view->shape, view->strides);
    *release_now = release != NULL;
    return MSTAR_OK;
}

/* The open loan an output names, which its tensor must start and fit in; a loan named twice in
 * one store is refused like a stored one. */
static mstar_status find_loan(mstar_comm *comm, const prepared *p, mstar__buf **out)
{
    const mstar_output *o = p->src;
    uint64_t v;
    if (o->release != NULL)
        return mstar_error_set(MSTAR_EINVAL, "output '%s' names loan %llu and a release function",
                               o->signal, (unsigned long long)o->loan);
    const prepared *first = p - p->index;
    bool twice = false;
    for (uint32_t j = 0; j < p->index && !twice; j++)
        twice = first[j].src->loan == o->loan;
    if (twice || !mstar__u64map_get(&comm->loans, o->loan, &v))
        return mstar_error_set(MSTAR_ESTATE,
                               "output '%s' names loan %llu, which is not open here (stored or "
                               "given back already)",
                               o->signal, (unsigned long long)o->loan);
    mstar__buf *buf = (mstar__buf *)(uintptr_t)v;
    const mstar_tensor *t = &o->tensor;
    if (t->device.type != MSTAR_DEVICE_CPU || mstar_tensor_ptr(t) != buf->data ||
        mstar_tensor_nbytes(t) > buf->size)
        return mstar_error_set(MSTAR_EINVAL,
                               "output '%s' is not in its loan %llu (it must start at the loan's "
                               "first byte and fit in its %llu bytes)",
                               o->signal, (unsigned long long)o->loan,
                               (unsigned long long)buf->size);
    *out = buf;
    return MSTAR_OK;
}

/* A loaned output's bytes: the loan itself when its canonical layout is contiguous (no copy),
 * else a canonical copy (the loan then goes back at commit). */
static mstar_status take_loan(mstar_comm *comm, prepared *p)
{
    mstar__buf *buf = NULL;
    mstar_status st = find_loan(comm, p, &buf);
    if (st != MSTAR_OK)
        return st;
    mstar_tensor cv;
    mstar__layout_to_canonical(&p->src->tensor, p->shard_dim, &cv);
    if (!mstar_tensor_is_contiguous(&cv)) {
        bool unused;
        return take_bytes(comm, &p->src->tensor, p->shard_dim, NULL, NULL, &p->buf, &p->view,
                          &unused);
    }
    p->buf = mstar__buf_retain(buf);
    p->loaned = true;
    p->view = cv;
    mstar_shape_contiguous_strides(p->view.ndim, p->view.shape, p->view.strides);
    return MSTAR_OK;
}

static mstar_status prepare(mstar_comm *comm, prepared *p)
{
    const mstar_output *o = p->src;
    const mstar_tensor *t = &o->tensor;
    mstar_status st = mstar_tensor_validate(t, "output tensor");
    if (st == MSTAR_OK)
        st = check_device(comm, t, "output tensor");
    if (st != MSTAR_OK)
        return st;
    if (p->shard_dim >= 0 && p->shard_dim >= t->ndim)
        return mstar_error_set(MSTAR_EINVAL,
                               "signal '%s' is sharded on dim %d but its tensor "
                               "has %d dims",
                               o->signal, (int)p->shard_dim, (int)t->ndim);
    if ((st = mstar_id_gen_next(&comm->ids, &p->uuid)) != MSTAR_OK)
        return st;
    st = o->loan != 0 ? take_loan(comm, p)
                      : take_bytes(comm, t, p->shard_dim, o->release, o->release_ctx, &p->buf,
                                   &p->view, &p->release_now);
    if (st != MSTAR_OK)
        return st;
    if (o->host_copy.data == NULL)
        return MSTAR_OK;
    const mstar_tensor *h = &o->host_copy;
    if (!mstar_comm_needs_cpu_tensor(comm)) {
        p->host_release_now = o->host_release != NULL;
        return MSTAR_OK;
    }
    st = mstar_tensor_validate(h, "output host copy");
    if (st == MSTAR_OK && (h->device.type != MSTAR_DEVICE_CPU || h->dtype != t->dtype ||
                           mstar_tensor_nbytes(h) != mstar_tensor_nbytes(t)))
        st = mstar_error_set(MSTAR_EINVAL,
                             "the host copy of signal '%s' is not a host tensor of "
                             "the output's dtype and size",
                             o->signal);
    mstar_tensor hv;
    if (st == MSTAR_OK)
        st = take_bytes(comm, h, p->shard_dim, o->host_release, o->host_release_ctx, &p->host, &hv,
                        &p->host_release_now);
    return st;
}

/* Forget an open loan and drop the manager's reference on it (the store's own, if any, keeps
 * its bytes). */
static void loan_close(mstar_comm *comm, mstar_loan_id id)
{
    uint64_t v;
    if (mstar__u64map_remove(&comm->loans, id, &v))
        mstar__buf_release((mstar__buf *)(uintptr_t)v);
}

/* Write the prepared outputs into the store (cannot fail once capacity is reserved), then
 * release the caller memory the manager no longer needs. */
static void commit(mstar_comm *comm, prepared *ps, uint32_t n, const mstar_store_params *params,
                   uint32_t node, uint32_t walk)
{
    for (uint32_t i = 0; i < n; i++) {
        prepared *p = &ps[i];
        uint32_t slot;
        MSTAR__ASSERT_OK(mstar__bk_put(&comm->bk, p->uuid, p->req, &slot)); /* I-11 */
        mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
        rec->buf = p->buf;
        rec->host = p->host;
        rec->view = p->view;
        rec->shard_dim = p->shard_dim;
        rec->edge_name = p->signal;
        rec->node_name = node;
        rec->graph_walk = walk;
        rec->tp_size = params != NULL && params->tp_size > 0 ? params->tp_size : 1;
        rec->tp_rank = params != NULL ? params->tp_rank : 0;
        const mstar_output *o = p->src;
        if (o->loan != 0)
            loan_close(comm, o->loan);
        if (p->release_now)
            o->release(o->release_ctx, o->tensor.data);
        if (p->host_release_now)
            o->host_release(o->host_release_ctx, o->host_copy.data);
    }
}

static mstar_status check_params(const mstar_store_params *params, uint32_t *node, uint32_t *walk,
                                 mstar_comm *comm)
{
    *node = *walk = 0;
    if (params == NULL)
        return MSTAR_OK;
    if (params->tp_size > 0 && (params->tp_rank < 0 || params->tp_rank >= params->tp_size))
        return mstar_error_set(MSTAR_EINVAL, "store params: tp_rank %d outside 0..%d",
                               (int)params->tp_rank, (int)params->tp_size - 1);
    const char *names[2] = { params->node_name, params->graph_walk };
    for (int i = 0; i < 2; i++) {
        if (names[i] == NULL || names[i][0] == '\0')
            continue;
        mstar_status st = mstar_name_validate(names[i], strnlen(names[i], MSTAR_NAME_MAX + 1),
                                              i == 0 ? "node_name" : "graph_walk");
        if (st != MSTAR_OK)
            return st;
    }
    mstar_status st = mstar__names_intern(&comm->names, params->node_name, node);
    if (st == MSTAR_OK)
        st = mstar__names_intern(&comm->names, params->graph_walk, walk);
    return st;
}

/* Prepare every output, then commit them all; on any failure nothing is stored. */
static mstar_status store_all(mstar_comm *comm, prepared *ps, uint32_t n,
                              const mstar_store_params *params)
{
    uint32_t node, walk;
    mstar_status st = check_params(params, &node, &walk, comm);
    uint32_t done = 0;
    for (; done < n && st == MSTAR_OK; done++) {
        st = prepare(comm, &ps[done]);
        if (st != MSTAR_OK)
            unprepare(&ps[done]);
    }
    if (st == MSTAR_OK)
        st = mstar__bk_reserve(&comm->bk, n);
    if (st != MSTAR_OK) {
        for (uint32_t i = 0; i < done; i++)
            unprepare(&ps[i]);
        return st;
    }
    commit(comm, ps, n, params, node, walk);
    return MSTAR_OK;
}

static mstar_status check_output(mstar_comm *comm, const mstar_output *o, uint32_t i,
                                 uint32_t *signal)
{
    if (o->signal == NULL)
        return mstar_error_set(MSTAR_EINVAL, "outputs[%u].signal is NULL", i);
    mstar_status st =
        mstar_name_validate(o->signal, strnlen(o->signal, MSTAR_NAME_MAX + 1), "output signal");
    if (st != MSTAR_OK)
        return st;
    return mstar__names_intern(&comm->names, o->signal, signal);
}

mstar_status mstar_comm_store_and_return_tensor_info(mstar_comm *comm, const mstar_rid *rid,
                                                     const mstar_output *outputs, uint32_t n,
                                                     const mstar_store_params *params,
                                                     mstar_tensor_info *infos)
{
    if (n > 0 && (outputs == NULL || infos == NULL))
        return mstar_error_set(MSTAR_EINVAL, "store: %s is NULL",
                               outputs == NULL ? "outputs" : "infos");
    uint32_t slot;
    mstar_status st = mstar__comm_req(comm, rid, true, &slot);
    if (st != MSTAR_OK || n == 0)
        return st;
    /* A few outputs, the usual store, need no allocation. */
    prepared ps_local[MSTAR__COMM_ON_STACK];
    prepared *ps = mstar__scratch_zalloc(ps_local, sizeof(ps_local), n, sizeof(*ps));
    if (ps == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "store of %u outputs", n);
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++) {
        ps[i].src = &outputs[i];
        ps[i].index = i;
        ps[i].req = slot;
        st = check_output(comm, &outputs[i], i, &ps[i].signal);
        ps[i].shard_dim = mstar__comm_shard_dim(comm, mstar__comm_req_at(comm, slot), ps[i].signal);
    }
    if (st == MSTAR_OK)
        st = store_all(comm, ps, n, params);
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++)
        mstar_comm_tensor_info(comm, ps[i].uuid, &infos[i]);
    mstar__scratch_free(ps, ps_local);
    return st;
}

void mstar_stored_outputs_clear(mstar_stored_outputs *out)
{
    if (out == NULL)
        return;
    free(out->flat_uuids);
    free(out->flat_rids);
    free(out->signal_idxs);
    free(out->num_tensors);
    memset(out, 0, sizeof(*out));
}

/* The signal index of each output (UINT32_MAX: no signal carries it). */
static mstar_status index_signals(const char *const *signals, uint32_t nsignals,
                                  const mstar_output *outputs, uint32_t noutputs, uint32_t nreq,
                                  uint32_t *sig)
{
    for (uint32_t i = 0; i < noutputs; i++) {
        if (outputs[i].request >= nreq)
            return mstar_error_set(MSTAR_EINVAL, "outputs[%u].request %u is outside 0..%u", i,
                                   outputs[i].request, nreq - 1);
        if (outputs[i].signal == NULL)
            return mstar_error_set(MSTAR_EINVAL, "outputs[%u].signal is NULL", i);
        sig[i] = UINT32_MAX;
        for (uint32_t s = 0; s < nsignals && sig[i] == UINT32_MAX; s++)
            if (strcmp(signals[s], outputs[i].signal) == 0)
                sig[i] = s;
    }
    return MSTAR_OK;
}

mstar_status mstar_comm_store_and_return_tensor_info_batch(
    mstar_comm *comm, const mstar_rid *rids, uint32_t nrequests, const mstar_output *outputs,
    uint32_t noutputs, const char *const *signals, uint32_t nsignals,
    const mstar_store_params *params, mstar_stored_outputs *out)
{
    if (out == NULL || (nrequests > 0 && rids == NULL) || (noutputs > 0 && outputs == NULL) ||
        (nsignals > 0 && signals == NULL))
        return mstar_error_set(MSTAR_EINVAL, "store batch: a NULL array with a non-zero count");
    if (nsignals > 0 && nrequests > UINT32_MAX / nsignals)
        return mstar_error_set(MSTAR_EINVAL, "store batch: too many (request, signal) pairs");
    for (uint32_t s = 0; s < nsignals; s++)
        if (signals[s] == NULL)
            return mstar_error_set(MSTAR_EINVAL, "store batch: signals[%u] is NULL", s);
    mstar_stored_outputs res = { 0 };
    uint32_t npairs = nrequests * nsignals;
    uint32_t *sig = calloc(noutputs + 1, sizeof(uint32_t));
    uint32_t *slots = calloc(nrequests + 1, sizeof(uint32_t));
    uint32_t *order = calloc(noutputs + 1, sizeof(uint32_t));
    uint32_t *pos = calloc(npairs + 1, sizeof(uint32_t));
    prepared *ps = calloc(noutputs + 1, sizeof(*ps));
    res.num_tensors = calloc(npairs + 1, sizeof(uint32_t));
    mstar_status st = (sig && slots && order && pos && ps && res.num_tensors)
                          ? MSTAR_OK
                          : mstar_error_set(MSTAR_ENOMEM, "store batch of %u outputs", noutputs);
    if (st == MSTAR_OK)
        st = index_signals(signals, nsignals, outputs, noutputs, nrequests, sig);
    for (uint32_t r = 0; r < nrequests && st == MSTAR_OK; r++)
        st = mstar__comm_req(comm, &rids[r], true, &slots[r]);
    /* Mint order: request-major, then signal order, then the outputs' own order — a counting
     * sort on (request, signal) keeps the columns index-parallel. */
    uint32_t stored = 0;
    for (uint32_t i = 0; i < noutputs && st == MSTAR_OK; i++) {
        if (sig[i] == UINT32_MAX)
            continue;
        res.num_tensors[outputs[i].request * nsignals + sig[i]]++;
        stored++;
    }
    for (uint32_t k = 0, acc = 0; k < npairs && st == MSTAR_OK; k++) {
        pos[k] = acc;
        acc += res.num_tensors[k];
    }
    for (uint32_t i = 0; i < noutputs && st == MSTAR_OK; i++)
        if (sig[i] != UINT32_MAX)
            order[pos[outputs[i].request * nsignals + sig[i]]++] = i;
    res.n = stored;
    res.flat_uuids = calloc(stored + 1, sizeof(mstar_tensor_id));
    res.flat_rids = calloc(stored + 1, sizeof(uint32_t));
    res.signal_idxs = calloc(stored + 1, sizeof(uint32_t));
    if (st == MSTAR_OK && (!res.flat_uuids || !res.flat_rids || !res.signal_idxs))
        st = mstar_error_set(MSTAR_ENOMEM, "store batch columns");
    for (uint32_t k = 0; k < stored && st == MSTAR_OK; k++) {
        const mstar_output *o = &outputs[order[k]];
        prepared *p = &ps[k];
        p->src = o;
        p->index = k;
        p->req = slots[o->request];
        st = check_output(comm, o, order[k], &p->signal);
        p->shard_dim = mstar__comm_shard_dim(comm, mstar__comm_req_at(comm, p->req), p->signal);
        res.flat_rids[k] = o->request;
        res.signal_idxs[k] = sig[order[k]];
    }
    if (st == MSTAR_OK)
        st = store_all(comm, ps, stored, params);
    if (st == MSTAR_OK) {
        for (uint32_t k = 0; k < stored; k++)
            res.flat_uuids[k] = ps[k].uuid;
        /* Outputs no signal carries are not stored: no edge will read them. */
        for (uint32_t i = 0; i < noutputs; i++) {
            const mstar_output *o = &outputs[i];
            if (sig[i] != UINT32_MAX)
                continue;
            if (o->release != NULL)
                o->release(o->release_ctx, o->tensor.data);
            if (o->host_copy.data != NULL && o->host_release != NULL)
                o->host_release(o->host_release_ctx, o->host_copy.data);
        }
        *out = res;
    } else {
        mstar_stored_outputs_clear(&res);
    }
    free(sig);
    free(slots);
    free(order);
    free(pos);
    free(ps);
    return st;
}

/* ---- loans ------------------------------------------------------------------------------------
 */

/* Open a loan of `dtype` and `shape`: a transport slot when it has one now, else plain host
 * memory when `plain_ok`, else MSTAR_ENOSPC. */
static mstar_status open_loan(mstar_comm *comm, mstar_dtype dtype, const int64_t *shape,
                              int32_t ndim, bool plain_ok, mstar_tensor *tensor,
                              mstar_loan_id *loan)
{
    if (tensor == NULL || loan == NULL)
        return mstar_error_set(MSTAR_EINVAL, "loan_output: %s is NULL",
                               tensor == NULL ? "tensor" : "loan");
    mstar_tensor t;
    mstar_status st = mstar_tensor_init(&t, NULL, mstar_device_cpu(), dtype, ndim, shape);
    uint64_t n = st == MSTAR_OK ? mstar_tensor_nbytes(&t) : 0;
    mstar__buf *buf = NULL;
    const mstar__transport_ops *ops = comm->transport->ops;
    if (st == MSTAR_OK && ops->loan != NULL) {
        st = ops->loan(comm->transport, n, &buf);
        if (st == MSTAR_ENOSPC && plain_ok)
            st = MSTAR_OK; /* no room now: plain memory, staged by copy */
    }
    if (st == MSTAR_OK && buf == NULL)
        st = plain_ok ? mstar__buf_alloc_host(n, &buf)
                      : mstar_error_set(MSTAR_ENOSPC, "'%s' has no transport slot to lend",
                                        comm->entity);
    mstar_loan_id id = comm->next_loan + 1;
    if (st == MSTAR_OK)
        st = mstar__u64map_put(&comm->loans, id, (uint64_t)(uintptr_t)buf);
    if (st != MSTAR_OK) {
        mstar__buf_release(buf);
        return mstar_error_wrap("loan_output");
    }
    comm->next_loan = id;
    t.data = buf->data;
    *tensor = t;
    *loan = id;
    return MSTAR_OK;
}

mstar_status mstar_comm_loan_output(mstar_comm *comm, mstar_dtype dtype, const int64_t *shape,
                                    int32_t ndim, mstar_tensor *tensor, mstar_loan_id *loan)
{
    return open_loan(comm, dtype, shape, ndim, true, tensor, loan);
}

/* The graph runner's loaner: only a slot is worth its copy. Plain memory would be copied again at
 * staging, and on a device backend a copy into unpinned memory stalls the host until the replay
 * ends; the runner's fallback (the static output, copied at store) costs no more. */
mstar_status mstar_comm_output_loan(void *comm, mstar_dtype dtype, const int64_t *shape,
                                    int32_t ndim, mstar_tensor *tensor, uint64_t *id)
{
    if (comm == NULL)
        return mstar_error_set(MSTAR_EINVAL, "output_loan: comm is NULL");
    return open_loan(comm, dtype, shape, ndim, false, tensor, id);
}

void mstar_comm_output_loan_release(void *comm, uint64_t id)
{
    if (comm != NULL && mstar_comm_loan_release(comm, id) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "output loan release: %s", mstar_last_error());
}

mstar_status mstar_comm_loan_release(mstar_comm *comm, mstar_loan_id loan)
{
    if (!mstar__u64map_find(&comm->loans, loan))
        return mstar_error_set(MSTAR_ESTATE,
                               "loan %llu is not open here (stored or given back already)",
                               (unsigned long long)loan);
    loan_close(comm, loan);
    return MSTAR_OK;
}

void mstar__comm_loans_free(mstar_comm *comm)
{
    size_t it = 0;
    uint64_t id, v;
    while (mstar__u64map_next(&comm->loans, &it, &id, &v))
        mstar__buf_release((mstar__buf *)(uintptr_t)v);
    mstar__u64map_free(&comm->loans);
}

/* ---- reference counts ----------------------------------------------------------------------- */

static mstar_status check_count(int64_t n, const char *what)
{
    if (n < 1)
        return mstar_error_set(MSTAR_EINVAL, "%s: count %lld, must be >= 1", what, (long long)n);
    return MSTAR_OK;
}

/* What both uniform batch calls take: a count of at least 1 and, unless the batch is empty, the
 * uuids. */
static mstar_status check_uniform_batch(const mstar_tensor_id *uuids, uint32_t n, int64_t count,
                                        const char *what)
{
    mstar_status st = check_count(count, what);
    if (st == MSTAR_OK && n > 0 && uuids == NULL)
        st = mstar_error_set(MSTAR_EINVAL, "%s: uuids is NULL", what);
    return st;
}

mstar_status mstar_comm_increment_ref(mstar_comm *comm, mstar_tensor_id uuid, int64_t n)
{
    mstar_status st = check_count(n, "increment_ref");
    if (st == MSTAR_OK)
        mstar__bk_increment(&comm->bk, uuid, n);
    return st;
}

mstar_status mstar_comm_increment_ref_batch_uniform(mstar_comm *comm, const mstar_tensor_id *uuids,
                                                    uint32_t n, int64_t count)
{
    mstar_status st = check_uniform_batch(uuids, n, count, "increment_ref_batch_uniform");
    if (st == MSTAR_OK)
        mstar__bk_increment_batch_uniform(&comm->bk, uuids, n, count);
    return st;
}

mstar_status mstar_comm_dereference(mstar_comm *comm, mstar_tensor_id uuid, int64_t n)
{
    mstar_status st = check_count(n, "dereference");
    if (st == MSTAR_OK)
        mstar__comm_dereference(comm, uuid, n);
    return st;
}

mstar_status mstar_comm_dereference_batch(mstar_comm *comm, const mstar_tensor_id *uuids,
                                          const int64_t *counts, uint32_t n)
{
    if (n > 0 && (uuids == NULL || counts == NULL))
        return mstar_error_set(MSTAR_EINVAL, "dereference_batch: %s is NULL",
                               uuids == NULL ? "uuids" : "counts");
    for (uint32_t i = 0; i < n; i++) {
        mstar_status st = check_count(counts[i], "dereference_batch");
        if (st != MSTAR_OK)
            return st;
    }
    mstar__bk_dereference_batch(&comm->bk, uuids, counts, n, &comm->collected);
    mstar__comm_collect(comm);
    return MSTAR_OK;
}

mstar_status mstar_comm_dereference_batch_uniform(mstar_comm *comm, const mstar_tensor_id *uuids,
                                                  uint32_t n, int64_t count)
{
    mstar_status st = check_uniform_batch(uuids, n, count, "dereference_batch_uniform");
    if (st != MSTAR_OK)
        return st;
    mstar__bk_dereference_batch_uniform(&comm->bk, uuids, n, count, &comm->collected);
    mstar__comm_collect(comm);
    return MSTAR_OK;
}

mstar_status mstar_comm_set_persist(mstar_comm *comm, mstar_tensor_id uuid, bool persist)
{
    mstar__bk_set_persist(&comm->bk, uuid, persist, &comm->collected);
    mstar__comm_collect(comm);
    return MSTAR_OK;
}

mstar_status mstar_comm_set_output_ref_counts(mstar_comm *comm, const mstar_tensor_id *held,
                                              uint32_t nheld, const mstar_edge *routed,
                                              uint32_t nrouted)
{
    if ((nheld > 0 && held == NULL) || (nrouted > 0 && routed == NULL))
        return mstar_error_set(MSTAR_EINVAL, "set_output_ref_counts: a NULL array with a "
                                             "non-zero count");
    mstar__u64map counts; /* held uuid → routed occurrences + 1 (0: already settled) */
    mstar__u64map_init(&counts);
    mstar_status st = mstar__u64map_reserve(&counts, nheld);
    for (uint32_t i = 0; i < nheld && st == MSTAR_OK; i++)
        st = mstar__u64map_put(&counts, held[i], 1);
    /* Persist edges are held by their marker, not by a reference (T-7). */
    for (uint32_t e = 0; e < nrouted && st == MSTAR_OK; e++) {
        if (routed[e].persist)
            continue;
        for (uint32_t i = 0; i < routed[e].ntensors; i++) {
            uint64_t *c = mstar__u64map_find(&counts, routed[e].tensor_info[i].uuid);
            if (c != NULL)
                (*c)++;
        }
    }
    for (uint32_t i = 0; i < nheld && st == MSTAR_OK; i++) {
        uint64_t *c = mstar__u64map_find(&counts, held[i]);
        if (*c == 0)
            continue;                          /* a uuid listed twice is settled once */
        int64_t delta = (int64_t)(*c - 1) - 1; /* routed count minus the safety hold */
        *c = 0;
        if (delta > 0)
            mstar__bk_increment(&comm->bk, held[i], delta);
        else if (delta < 0)
            mstar__bk_dereference(&comm->bk, held[i], -delta, &comm->collected);
    }
    mstar__u64map_free(&counts);
    mstar__comm_collect(comm);
    return st;
}

/* ---- staging -------------------------------------------------------------------------------- */

/* Stage the records of `uuids` that are not registered yet, for request slot `req`. */
static mstar_status stage_uuids(mstar_comm *comm, uint32_t req, const mstar_tensor_id *uuids,
                                uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (mstar__bk_find(&comm->bk, uuids[i]) == MSTAR__BK_NONE)
            return mstar_error_set(MSTAR_ENOENT,
                                   "register_for_send: tensor 0x%016llx is not "
                                   "held by '%s'",
                                   (unsigned long long)uuids[i], comm->entity);
    /* Up to MSTAR__COMM_ON_STACK tensors, the usual handoff, are staged without an allocation. */
    mstar__stage_item items_local[MSTAR__COMM_ON_STACK];
    mstar_tensor hosts_local[MSTAR__COMM_ON_STACK];
    uint32_t slots_local[MSTAR__COMM_ON_STACK];
    mstar__stage_item *items =
        mstar__scratch_zalloc(items_local, sizeof(items_local), n, sizeof(*items));
    mstar_tensor *hosts =
        mstar__scratch_zalloc(hosts_local, sizeof(hosts_local), n, sizeof(*hosts));
    uint32_t *slots = mstar__scratch_zalloc(slots_local, sizeof(slots_local), n, sizeof(*slots));
    if (items == NULL || hosts == NULL || slots == NULL) {
        mstar__scratch_free(items, items_local);
        mstar__scratch_free(hosts, hosts_local);
        mstar__scratch_free(slots, slots_local);
        return mstar_error_set(MSTAR_ENOMEM, "staging %u tensors", n);
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot = mstar__bk_find(&comm->bk, uuids[i]);
        mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
        if (rec->flags & MSTAR__BK_REGISTERED)
            continue;
        rec->flags |= MSTAR__BK_REGISTERED; /* provisional: marks duplicates in this call */
        items[k].uuid = rec->uuid;
        items[k].tensor = rec->view;
        items[k].buf = rec->buf;
        if (rec->host != NULL) {
            hosts[k] = rec->view;
            hosts[k].data = rec->host->data;
            hosts[k].byte_offset = 0;
            hosts[k].device = mstar_device_cpu();
            items[k].host = &hosts[k];
        }
        slots[k++] = slot;
    }
    mstar_status st = k > 0 ? comm->transport->ops->stage(comm->transport, items, k) : MSTAR_OK;
    mstar__req *r = mstar__comm_req_at(comm, req);
    for (uint32_t i = 0; i < k; i++) {
        mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slots[i]);
        if (st != MSTAR_OK)
            rec->flags &= ~(uint32_t)MSTAR__BK_REGISTERED;
        else if (comm->enable_prof)
            mstar__comm_record_tx(comm, r, rec->edge_name, items[i].tx_bytes, items[i].tx_time_s);
    }
    mstar__scratch_free(items, items_local);
    mstar__scratch_free(hosts, hosts_local);
    mstar__scratch_free(slots, slots_local);
    if (comm->transport->ops->maintain != NULL)
        comm->transport->ops->maintain(comm->transport, false);
    return st;
}

/* The transport's fields of a held, staged uuid onto a descriptor (the arena's placement, UCX's
 * session, address and key); a descriptor of a uuid not staged here is left as it is. */
static void stamp(mstar_comm *comm, mstar_tensor_info *info)
{
    uint32_t slot = mstar__bk_find(&comm->bk, info->uuid);
    if (slot == MSTAR__BK_NONE || !(mstar__bk_at(&comm->bk, slot)->flags & MSTAR__BK_REGISTERED))
        return;
    comm->transport->ops->stamp(comm->transport, info->uuid, info);
}

mstar_status mstar_comm_register_for_send(mstar_comm *comm, const mstar_rid *rid,
                                          mstar_tensor_info *infos, uint32_t n)
{
    if (n > 0 && infos == NULL)
        return mstar_error_set(MSTAR_EINVAL, "register_for_send: infos is NULL");
    uint32_t slot;
    mstar_status st = mstar__comm_req(comm, rid, true, &slot);
    if (st != MSTAR_OK || n == 0)
        return st;
    mstar_tensor_id uuids_local[MSTAR__COMM_ON_STACK];
    mstar_tensor_id *uuids =
        mstar__scratch_zalloc(uuids_local, sizeof(uuids_local), n, sizeof(*uuids));
    if (uuids == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "register_for_send of %u descriptors", n);
    for (uint32_t i = 0; i < n; i++)
        uuids[i] = infos[i].uuid;
    st = stage_uuids(comm, slot, uuids, n);
    mstar__scratch_free(uuids, uuids_local);
    /* Every descriptor passed in carries the transport's fields, already-registered ones
     * included. */
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++)
        if (mstar_comm_stamps_shm_placement(comm))
            stamp(comm, &infos[i]);
    return st;
}

mstar_status mstar_comm_register_for_send_uuids(mstar_comm *comm, const mstar_rid *rids,
                                                uint32_t nrequests, const uint32_t *counts,
                                                const mstar_tensor_id *uuids)
{
    if (nrequests > 0 && (rids == NULL || counts == NULL))
        return mstar_error_set(MSTAR_EINVAL, "register_for_send_uuids: %s is NULL",
                               rids == NULL ? "rids" : "counts");
    size_t at = 0;
    for (uint32_t r = 0; r < nrequests; r++) {
        if (counts[r] > 0 && uuids == NULL)
            return mstar_error_set(MSTAR_EINVAL, "register_for_send_uuids: uuids is NULL");
        uint32_t slot;
        mstar_status st = mstar__comm_req(comm, &rids[r], true, &slot);
        if (st == MSTAR_OK)
            st = stage_uuids(comm, slot, uuids + at, counts[r]);
        if (st != MSTAR_OK)
            return st;
        at += counts[r];
    }
    return MSTAR_OK;
}

mstar_status mstar_comm_refresh_shm_placement(mstar_comm *comm, mstar_edge *edges, uint32_t n)
{
    if (n > 0 && edges == NULL)
        return mstar_error_set(MSTAR_EINVAL, "refresh_shm_placement: edges is NULL");
    if (!mstar_comm_stamps_shm_placement(comm))
        return MSTAR_OK;
    for (uint32_t e = 0; e < n; e++)
        for (uint32_t i = 0; i < edges[e].ntensors; i++)
            stamp(comm, &edges[e].tensor_info[i]);
    return MSTAR_OK;
}
