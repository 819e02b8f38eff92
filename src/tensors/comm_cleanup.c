/*
 * comm_cleanup.c — freeing: the collection of records whose last reference went, pending reads
 * that will not be delivered, and request teardown (design.md "Teardown and the drain").
 *
 * Soft cleanup (the happy path, request done) frees only what is safe: records with no
 * reference left and no persist marker. Everything else is deferred — still in the store, and a
 * later ACK or UNPERSIST frees it — because another process may still read it (T-1). Force
 * cleanup drops everything of the request regardless, and is only safe once every reader has
 * drained (READS_DONE); this process's own reads of the request must have finished, which is
 * checked.
 */
#include "tensors/comm_internal.h"

#include "core/assert.h"
#include "tensors/completion.h"

#include <stdlib.h>
#include <string.h>

void mstar__comm_collect(mstar_comm *comm)
{
    for (size_t i = 0; i < comm->collected.len; i++) {
        uint32_t slot = *(uint32_t *)mstar__vec_at(&comm->collected, i);
        mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
        mstar__comm_ack_view(comm, rec);
        /* Transport first (unlink, free the slot, unregister), then the bytes (I-10). */
        if (rec->flags & MSTAR__BK_REGISTERED)
            comm->transport->ops->release(comm->transport, rec->uuid, &rec->view);
        mstar__buf_release(rec->buf);
        mstar__buf_release(rec->host);
        uint32_t req = rec->req;
        mstar__bk_release_slot(&comm->bk, slot);
        mstar__comm_req_maybe_free(comm, req);
    }
    comm->collected.len = 0;
}

void mstar__comm_dereference(mstar_comm *comm, mstar_tensor_id uuid, int64_t n)
{
    mstar__bk_dereference(&comm->bk, uuid, n, &comm->collected);
    mstar__comm_collect(comm);
}

void mstar__comm_pending_drop(mstar_comm *comm, mstar__pending *p)
{
    /* Each descriptor holds one usage reference; a fresh read also its transit reference. */
    for (uint32_t i = 0; i < p->edge.ntensors; i++)
        mstar__bk_dereference(&comm->bk, p->edge.tensor_info[i].uuid, p->fresh[i] ? 2 : 1,
                              &comm->collected);
    mstar__comm_collect(comm);
}

void mstar__comm_pending_free(mstar__pending *p)
{
    free(p->edge.tensor_info); /* the memset below resets the edge with the rest */
    free(p->fresh);            /* `local` with it */
    mstar_completion_release(p->done);
    memset(p, 0, sizeof(*p));
}

bool mstar__comm_pending_landed(const mstar__pending *p)
{
    return p->done == NULL || mstar__completion_done(p->done);
}

size_t mstar__comm_pending_take(mstar_comm *comm, uint32_t req, size_t *views)
{
    size_t n = 0, v = 0;
    for (size_t i = 0; i < comm->pending.len; i++) {
        mstar__pending *p = mstar__vec_at(&comm->pending, i);
        p->taken = p->req == req && mstar__comm_pending_landed(p);
        n += p->taken;
        for (uint32_t k = 0; views != NULL && p->taken && k < p->edge.ntensors; k++)
            v += p->fresh[k] == 2;
    }
    if (views != NULL)
        *views = v;
    return n;
}

bool mstar_comm_has_inflight_reads(const mstar_comm *comm, const mstar_rid *rid)
{
    uint32_t slot;
    if (mstar__comm_req((mstar_comm *)comm, rid, false, &slot) != MSTAR_OK ||
        slot == MSTAR__BK_NONE)
        return false;
    for (size_t i = 0; i < comm->pending.len; i++) {
        const mstar__pending *p = mstar__vec_at(&comm->pending, i);
        if (p->req == slot && !mstar__comm_pending_landed(p))
            return true;
    }
    return false;
}

/* ACK and drop every landed pending read of the request; reads still copying stay (they are
 * ACKed and dropped when they land, since the request is closed). */
static mstar_status drop_landed_pending(mstar_comm *comm, uint32_t slot)
{
    mstar__req *r = mstar__comm_req_at(comm, slot);
    size_t n = mstar__comm_pending_take(comm, slot, NULL);
    if (n == 0)
        return MSTAR_OK;
    const mstar_edge **edges = calloc(n, sizeof(*edges));
    bool *failed = calloc(n, sizeof(*failed));
    if (edges == NULL || failed == NULL) {
        free(edges);
        free(failed);
        return mstar_error_set(MSTAR_ENOMEM, "cleanup of %zu pending reads", n);
    }
    size_t k = 0;
    for (size_t i = 0; i < comm->pending.len; i++) {
        mstar__pending *p = mstar__vec_at(&comm->pending, i);
        if (!p->taken)
            continue;
        edges[k] = &p->edge;
        /* A read that failed is reported as failed (its bytes never arrived). */
        failed[k] = p->done != NULL && mstar_completion_poll(p->done) != MSTAR_OK;
        k++;
    }
    bool built;
    mstar__comm_send_acks(comm, &r->rid, edges, failed, (uint32_t)n, &built);
    if (!built)
        mstar__comm_ack_given_up(comm, n);
    free(edges);
    free(failed);
    size_t w = 0;
    for (size_t i = 0; i < comm->pending.len; i++) {
        mstar__pending *p = mstar__vec_at(&comm->pending, i);
        if (p->taken) {
            MSTAR__ASSERT(mstar__comm_pending_landed(p)); /* I-7: never a read in flight */
            mstar__comm_pending_drop(comm, p);
            mstar__comm_pending_free(p);
            r->npending--;
            continue;
        }
        if (w != i)
            memcpy(mstar__vec_at(&comm->pending, w), p, sizeof(*p));
        w++;
    }
    comm->pending.len = w;
    return MSTAR_OK;
}

static mstar_status cleanup(mstar_comm *comm, const mstar_rid *rid, bool force)
{
    uint32_t slot;
    mstar_status st = mstar__comm_req(comm, rid, false, &slot);
    if (st != MSTAR_OK)
        return st;
    if (force && slot != MSTAR__BK_NONE && mstar_comm_has_inflight_reads(comm, rid)) {
        char r[MSTAR_RID_STRLEN];
        return mstar_error_set(MSTAR_ESTATE,
                               "force cleanup of request %s: this process still "
                               "has reads of it in flight (wait for has_inflight_reads to turn "
                               "false, as READS_DONE does)",
                               mstar_rid_format(rid, r));
    }
    if (slot == MSTAR__BK_NONE) {
        mstar__comm_settle_acks(comm, rid); /* its slot is gone: what it may still owe */
        return MSTAR_OK;
    }
    mstar__req *r = mstar__comm_req_at(comm, slot);
    r->open = false;
    mstar__comm_req_reset(r);
    if ((st = drop_landed_pending(comm, slot)) != MSTAR_OK)
        return st;
    mstar__vec *slots = &comm->req_slots; /* nothing below calls out of the manager */
    slots->len = 0;
    st = mstar__bk_req_slots(&comm->bk, slot, slots);
    if (st == MSTAR_OK)
        st = mstar__vec_reserve(&comm->collected, comm->collected.len + slots->len);
    size_t deferred = 0;
    for (size_t i = 0; i < slots->len && st == MSTAR_OK; i++) {
        uint32_t s = *(uint32_t *)mstar__vec_at(slots, i);
        mstar__bk_rec *rec = mstar__bk_at(&comm->bk, s);
        if (!force && (rec->ref > 0 || (rec->flags & MSTAR__BK_PERSIST))) {
            deferred++;
            continue;
        }
        /* I-5, I-6: a soft cleanup frees only what no reference or persist marker holds */
        MSTAR__ASSERT(force || mstar__bk_can_gc(&comm->bk, rec->uuid));
        mstar__bk_detach(&comm->bk, s);
        MSTAR__ASSERT_OK(mstar__vec_push(&comm->collected, &s)); /* I-11: reserved above */
    }
    slots->len = 0;
    mstar__comm_collect(comm);
    /* Last: freeing its views above builds their ACKs, and one that memory stopped is owed;
     * this is its last try before it is counted lost. */
    if (st == MSTAR_OK)
        mstar__comm_settle_acks(comm, rid);
    if (deferred > 0 && mstar_log_enabled(MSTAR_LOG_DEBUG)) {
        char rs[MSTAR_RID_STRLEN];
        mstar_log(MSTAR_LOG_DEBUG,
                  "request %s: deferring %zu tensors (awaiting TENSOR_RECEIVED "
                  "or UNPERSIST)",
                  mstar_rid_format(rid, rs), deferred);
    }
    mstar__comm_req_maybe_free(comm, slot);
    return st;
}

mstar_status mstar_comm_cleanup_request(mstar_comm *comm, const mstar_rid *rid)
{
    return cleanup(comm, rid, false);
}

mstar_status mstar_comm_force_cleanup_request(mstar_comm *comm, const mstar_rid *rid)
{
    return cleanup(comm, rid, true);
}
