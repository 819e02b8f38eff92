/*
 * comm_read.c — the consumer side of the communication manager (design.md "Tensor lifecycle",
 * "ACKs", "Sharding"): starting reads, collecting the edges whose bytes landed, acknowledging them,
 * fan-in of sharded inputs, and handing tensors to nodes.
 *
 * The reference ledger, per descriptor of a delivered edge:
 *   - first read of a uuid here ("fresh"): +2 — one transit reference, released when the edge is
 *     collected, one usage reference for the node;
 *   - a uuid already held (an earlier delivery, or twice in one call): +1, the node's usage;
 *   - a tensor this entity produced (self-delivery): no change — the reference the producer
 *     counted for this destination when it routed the output becomes the node's usage;
 *   - a slice of a tensor this entity produced (design.md "Sharding"): a new record for the
 *     rows, +1 usage, and the producer's reference for this destination released.
 * The transit reference is released exactly for fresh reads, whether or not the uuid was seen
 * before in the request: a persisted input legitimately re-sent after its first copy was freed
 * is read again and must be freed again (T-6, where the reference leaks it).
 *
 * Views (mstar_comm_start_read_views): a fresh descriptor the transport serves in place is marked
 * 2 in the pending entry's `fresh`; its ACK is left out when the edge lands and sent when its
 * record is collected (comm_cleanup.c), so the producer keeps the bytes while they are viewed.
 *
 * Reads into the caller's memory (mstar_comm_start_read_into): a plan of a fresh descriptor a
 * target names holds the caller's buffer, wrapped without a release function, and the transport
 * lands the read there (mstar__transport_read_dest) instead of in a buffer of its own; a target's
 * stream and the manager's read stream are joined both ways by events around the reads.
 *
 * start_read_tensors is all or nothing: every descriptor is checked (names, owner, bounds) before
 * anything is read, reads that succeeded are released if a later one fails, and the store is
 * changed only once everything was read.
 */
#include "tensors/comm_internal.h"

#include "core/assert.h"
#include "tensors/completion.h"
#include "tensors/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_SELF_WHOLE, KIND_SELF_SLICE, KIND_PRESENT, KIND_FRESH };

/* How one descriptor of a start_read call is served. */
typedef struct plan {
    uint8_t kind;
    uint32_t slot;         /* the producer's record (self kinds) */
    uint64_t row;          /* bytes per canonical row (slice) */
    mstar_tensor_id slice; /* the slice's new uuid */
    mstar__buf *buf;       /* fresh: the bytes read */
    bool registered;       /* fresh: the transport must release it at collection */
    bool viewed;           /* fresh: buf is a view of the producer's bytes */
    uint32_t source;       /* fresh: the producing entity (interned) */
    mstar__buf *into;      /* fresh: the caller's buffer to land in (start_read_into), or NULL */
    const mstar_read_target *target; /* the target `into` wraps */
} plan;

/* The targets of a start_read_into call, checked and indexed by uuid. */
typedef struct target_set {
    const mstar_read_target *t;
    uint32_t n;
    mstar__u64map at; /* uuid -> index in t; no allocation for a few (small mode) */
    bool *used;       /* t[i] matched a descriptor (NULL when n == 0) */
    uint64_t *len;    /* the bytes the read writes at t[i].data (its descriptor's nbytes) */
} target_set;

/* Self-delivery: whole tensor, or a row range of it (design.md "Sharding"). */
static mstar_status plan_self(mstar_comm *comm, const mstar_tensor_info *info, plan *p)
{
    uint32_t slot = mstar__bk_find(&comm->bk, info->uuid);
    if (slot == MSTAR__BK_NONE)
        return mstar_error_set(MSTAR_ENOENT,
                               "self-delivered tensor 0x%016llx is not held by "
                               "'%s' (already freed?)",
                               (unsigned long long)info->uuid, comm->entity);
    const mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    const mstar_tensor *v = &rec->view;
    uint64_t full = mstar_tensor_nbytes(v);
    bool same = info->dtype == v->dtype && info->ndim == v->ndim;
    for (int32_t d = 1; same && d < v->ndim; d++)
        same = info->dims[d] == v->shape[d];
    if (!same)
        return mstar_error_set(MSTAR_EPROTO,
                               "self-delivered descriptor of 0x%016llx does not "
                               "match the stored tensor's dtype or dims",
                               (unsigned long long)info->uuid);
    p->slot = slot;
    if (info->offset == 0 && info->nbytes == full &&
        (v->ndim == 0 || info->dims[0] == v->shape[0])) {
        p->kind = KIND_SELF_WHOLE;
        return MSTAR_OK;
    }
    p->kind = KIND_SELF_SLICE;
    p->row = mstar__layout_row_bytes(v->dtype, v->ndim, v->shape);
    uint64_t end;
    if (v->ndim < 1 || p->row == 0 || info->offset % p->row != 0 || info->nbytes % p->row != 0 ||
        !mstar__add_u64(info->offset, info->nbytes, &end) || end > full)
        return mstar_error_set(MSTAR_EPROTO,
                               "self-delivered slice [%llu, +%llu) of 0x%016llx is "
                               "not whole rows of its %llu bytes",
                               (unsigned long long)info->offset, (unsigned long long)info->nbytes,
                               (unsigned long long)info->uuid, (unsigned long long)full);
    return mstar_id_gen_next(&comm->ids, &p->slice);
}

/* A tensor is (source entity, uuid): a held record may serve a descriptor only if it came from
 * the entity the descriptor names. Two entities minting under one entity index give the same
 * uuid to different tensors; serving one for the other would hand out wrong bytes silently. */
static mstar_status check_identity(mstar_comm *comm, uint32_t slot, const mstar_tensor_info *info)
{
    const mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    const char *held = (rec->flags & MSTAR__BK_FOREIGN)
                           ? mstar__names_get(&comm->names, rec->source)
                           : comm->entity;
    if (strcmp(held, info->source_entity) == 0)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EEXIST,
                           "descriptor of tensor 0x%016llx from '%s': '%s' holds a tensor of that "
                           "id from '%s' (do two entities share one entity index?)",
                           (unsigned long long)info->uuid, info->source_entity, comm->entity, held);
}

/* A descriptor from an entity the deployment did not name (mstar_comm_expect_entities) is
 * refused before anything is opened or connected for it: its name would otherwise pick a file
 * to open and a peer to send the ACK to. */
static mstar_status check_expected(const mstar_comm *comm, const mstar_tensor_info *info)
{
    if (strcmp(info->source_entity, comm->entity) == 0 ||
        mstar__comm_expects(comm, info->source_entity))
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EPROTO,
                           "descriptor of tensor 0x%016llx names source entity '%s', which is "
                           "not one of the %zu entities '%s' expects",
                           (unsigned long long)info->uuid, info->source_entity,
                           mstar__strmap_len(&comm->expected), comm->entity);
}

static void targets_free(target_set *tg)
{
    mstar__u64map_free(&tg->at);
    free(tg->used);
    free(tg->len);
}

/* Check each target on its own and index them; nothing is kept on failure. The forms without
 * targets (n == 0) allocate nothing. */
static mstar_status targets_init(const mstar_comm *comm, const mstar_read_target *t, uint32_t n,
                                 target_set *tg)
{
    tg->t = t;
    tg->n = n;
    mstar__u64map_init(&tg->at);
    tg->used = n > 0 ? calloc(n, sizeof(*tg->used)) : NULL;
    tg->len = n > 0 ? calloc(n, sizeof(*tg->len)) : NULL;
    mstar_status st = (tg->used != NULL && tg->len != NULL) || n == 0
                          ? MSTAR_OK
                          : mstar_error_set(MSTAR_ENOMEM, "start_read_into of %u targets", n);
    if (n > 0 && t == NULL)
        st = mstar_error_set(MSTAR_EINVAL, "start_read_into: %u targets but no array", n);
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++) {
        if (t[i].data == NULL && t[i].capacity > 0)
            st = mstar_error_set(MSTAR_EINVAL,
                                 "targets[%u] (tensor 0x%016llx): data is NULL with a capacity "
                                 "of %llu bytes",
                                 i, (unsigned long long)t[i].uuid,
                                 (unsigned long long)t[i].capacity);
        else if (t[i].stream != NULL && comm->env.backend != NULL &&
                 mstar_stream_backend(t[i].stream) != comm->env.backend)
            st = mstar_error_set(MSTAR_EINVAL,
                                 "targets[%u] (tensor 0x%016llx): its stream belongs to another "
                                 "backend than the manager's",
                                 i, (unsigned long long)t[i].uuid);
        else if (mstar__u64map_find(&tg->at, t[i].uuid) != NULL)
            st = mstar_error_set(MSTAR_EINVAL, "targets[%u] names tensor 0x%016llx a second time",
                                 i, (unsigned long long)t[i].uuid);
        else
            st = mstar__u64map_put(&tg->at, t[i].uuid, i);
    }
    if (st != MSTAR_OK)
        targets_free(tg);
    return st;
}

/* Give the plan of a descriptor a target names the caller's buffer to land in: only a fresh
 * read of an edge that is not gathered lands anywhere the caller could name. */
static mstar_status plan_target(const mstar_comm *comm, target_set *tg, const mstar_edge *edge,
                                const mstar_tensor_info *info, plan *p)
{
    const uint64_t *found = mstar__u64map_find(&tg->at, info->uuid);
    if (found == NULL)
        return MSTAR_OK;
    uint32_t at = (uint32_t)*found;
    const mstar_read_target *t = &tg->t[at];
    tg->used[at] = true;
    const char *why = p->kind == KIND_PRESENT      ? "is already held here"
                      : p->kind != KIND_FRESH      ? "is this entity's own"
                      : edge->total_fanin > 1      ? "is a shard the fan-in gathers"
                      : t->capacity < info->nbytes ? "has more bytes than the capacity"
                                                   : NULL;
    if (why != NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "targets[%llu]: tensor 0x%016llx of edge '%s' (%llu bytes) %s "
                               "(capacity %llu): it cannot be read into the target",
                               (unsigned long long)at, (unsigned long long)info->uuid, edge->name,
                               (unsigned long long)info->nbytes, why,
                               (unsigned long long)t->capacity);
    mstar_device dev =
        comm->env.backend != NULL ? mstar_backend_device(comm->env.backend) : mstar_device_cpu();
    /* The caller's release is set only once the call succeeds (commit_fresh): a failed call
     * leaves everything to the caller. */
    p->target = t;
    tg->len[at] = info->nbytes;
    return mstar__buf_wrap(t->data, info->nbytes, dev, NULL, NULL, &p->into);
}

/* A target's written bytes, for sorting by address. */
typedef struct span {
    uintptr_t lo, hi; /* [lo, hi) */
    uint32_t i;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* No two targets' written bytes overlap: two reads landing in one byte would hand one tensor
 * the other's bytes as if they were its own (docs/security.md "Read-into targets"). Only the
 * bytes a read writes count, so targets cut from one batch buffer may name its whole rest as
 * their capacity. */
static mstar_status targets_disjoint(const target_set *tg)
{
    span *s = tg->n > 1 ? malloc(tg->n * sizeof(*s)) : NULL;
    if (tg->n > 1 && s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "start_read_into of %u targets", tg->n);
    uint32_t k = 0;
    for (uint32_t i = 0; i < tg->n && tg->n > 1; i++) {
        if (tg->len[i] == 0)
            continue; /* writes nothing */
        uintptr_t lo = (uintptr_t)tg->t[i].data;
        s[k++] = (span){ lo, lo + (uintptr_t)tg->len[i], i };
    }
    if (k > 1)
        qsort(s, k, sizeof(*s), span_cmp);
    mstar_status st = MSTAR_OK;
    for (uint32_t j = 1; j < k && st == MSTAR_OK; j++) {
        if (s[j].lo < s[j - 1].hi)
            st = mstar_error_set(MSTAR_EINVAL,
                                 "targets[%u] and targets[%u] overlap (tensors 0x%016llx and "
                                 "0x%016llx would be written to the same bytes): each target "
                                 "needs memory of its own",
                                 s[j - 1].i, s[j].i, (unsigned long long)tg->t[s[j - 1].i].uuid,
                                 (unsigned long long)tg->t[s[j].i].uuid);
    }
    free(s);
    return st;
}

/* Every target must have matched a descriptor of this call, and no two may overlap. */
static mstar_status targets_all_used(const target_set *tg)
{
    for (uint32_t i = 0; i < tg->n; i++)
        if (!tg->used[i])
            return mstar_error_set(MSTAR_EINVAL,
                                   "targets[%u] names tensor 0x%016llx, which no edge of the "
                                   "call carries",
                                   i, (unsigned long long)tg->t[i].uuid);
    return targets_disjoint(tg);
}

/* Phase 1: decide how each descriptor is served, checking everything; nothing changes. plans[e]
 * has room for edges[e].ntensors zeroed plans. */
static mstar_status plan_all(mstar_comm *comm, const mstar_edge *edges, uint32_t n, plan **plans,
                             target_set *tg, size_t *nfresh)
{
    /* uuids read by this call → (edge << 32 | descriptor) of the first; no allocation for a few
     * (small mode) */
    mstar__u64map fresh;
    mstar__u64map_init(&fresh);
    mstar_status st = MSTAR_OK;
    *nfresh = 0;
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        const mstar_edge *edge = &edges[e];
        if (edge->ntensors > 0 && edge->tensor_info == NULL)
            st = mstar_error_set(MSTAR_EINVAL, "edges[%u]: %u descriptors but no array", e,
                                 edge->ntensors);
        for (uint32_t i = 0; i < edge->ntensors && st == MSTAR_OK; i++) {
            const mstar_tensor_info *info = &edge->tensor_info[i];
            plan *p = &plans[e][i];
            if ((st = mstar_tensor_info_validate(info)) != MSTAR_OK ||
                (st = check_expected(comm, info)) != MSTAR_OK)
                break;
            uint32_t held = mstar__bk_find(&comm->bk, info->uuid);
            const uint64_t *first = mstar__u64map_find(&fresh, info->uuid);
            if (held != MSTAR__BK_NONE && (st = check_identity(comm, held, info)) != MSTAR_OK)
                break;
            bool again = first != NULL; /* a second descriptor of a uuid read by this call */
            if (strcmp(info->source_entity, comm->entity) == 0) {
                st = plan_self(comm, info, p);
            } else if (held != MSTAR__BK_NONE) {
                p->kind = KIND_PRESENT;
            } else if (first != NULL) {
                const mstar_tensor_info *f = &edges[*first >> 32].tensor_info[(uint32_t)*first];
                if (strcmp(f->source_entity, info->source_entity) != 0)
                    st = mstar_error_set(MSTAR_EEXIST,
                                         "descriptors of tensor 0x%016llx from '%s' and '%s' "
                                         "(do two entities share one entity index?)",
                                         (unsigned long long)info->uuid, f->source_entity,
                                         info->source_entity);
                p->kind = KIND_PRESENT;
            } else {
                p->kind = KIND_FRESH;
                st = comm->transport->ops->check(comm->transport, info);
                if (st == MSTAR_OK)
                    st = mstar__u64map_put(&fresh, info->uuid, (uint64_t)e << 32 | i);
                (*nfresh)++;
            }
            if (st == MSTAR_OK && !again)
                st = plan_target(comm, tg, edge, info, p);
        }
    }
    mstar__u64map_free(&fresh);
    return st == MSTAR_OK ? targets_all_used(tg) : st;
}

/* Let go of what the plans hold; their storage is start_read's. */
static void release_plans(plan **plans, const mstar_edge *edges, uint32_t n, bool release_bufs)
{
    for (uint32_t e = 0; e < n; e++) {
        for (uint32_t i = 0; plans[e] != NULL && i < edges[e].ntensors; i++) {
            if (release_bufs)
                mstar__buf_release(plans[e][i].buf);
            mstar__buf_release(plans[e][i].into); /* a read keeps its own reference */
        }
    }
}

/* Phase 2: read every fresh descriptor, one transport call per edge (its completion gates the
 * edge). On failure everything read so far is released. */
static mstar_status read_all(mstar_comm *comm, const mstar_edge *edges, uint32_t n, plan **plans,
                             mstar__pending *pe, bool view)
{
    uint32_t most = 0; /* descriptors of the largest edge: the items of each edge reuse one array */
    for (uint32_t e = 0; e < n; e++)
        most = edges[e].ntensors > most ? edges[e].ntensors : most;
    mstar__read_item local[MSTAR__COMM_ON_STACK];
    mstar__read_item *items = mstar__scratch_zalloc(local, sizeof(local), most, sizeof(*items));
    if (items == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "read of %u descriptors", most);
    mstar_status st = MSTAR_OK;
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        const mstar_edge *edge = &edges[e];
        if (edge->ntensors == 0)
            continue;
        memset(items, 0, edge->ntensors * sizeof(*items));
        uint32_t k = 0;
        /* Shards are gathered into a copy at once (fan-in): they are never viewed. */
        for (uint32_t i = 0; i < edge->ntensors; i++) {
            if (plans[e][i].kind != KIND_FRESH)
                continue;
            items[k].into = plans[e][i].into;
            items[k].view = view && edge->total_fanin <= 1 && items[k].into == NULL;
            items[k++].info = &edge->tensor_info[i];
        }
        /* The read's time is only for the profile (record_rx): no clock read without one. */
        pe[e].submit_ns = comm->enable_prof ? mstar__now_ns() : 0;
        if (k > 0)
            st = comm->transport->ops->read(comm->transport, items, k, &pe[e].done);
        if (comm->enable_prof)
            pe[e].rx_time_s = (double)(mstar__now_ns() - pe[e].submit_ns) * 1e-9;
        for (uint32_t i = 0, j = 0; st == MSTAR_OK && i < edge->ntensors; i++) {
            if (plans[e][i].kind != KIND_FRESH)
                continue;
            plans[e][i].buf = items[j].buf;
            plans[e][i].registered = items[j].registered;
            plans[e][i].viewed = items[j].viewed;
            j++;
        }
    }
    mstar__scratch_free(items, local);
    if (st != MSTAR_OK) {
        /* Copies still landing into buffers about to be released must finish first. */
        for (uint32_t j = 0; j < n; j++) {
            if (pe[j].done != NULL)
                mstar_completion_wait(pe[j].done, -1);
            mstar_completion_release(pe[j].done);
            pe[j].done = NULL;
        }
    }
    return st;
}

/* ---- ordering reads with the caller's streams (start_read_into) ----------------------------- */

/* An event whose last record has completed, so recording it again changes nothing a stream
 * still waits for (on every backend: the host backend's waits name a record by number). */
static mstar_status event_take(mstar_comm *comm, mstar_event **out)
{
    for (size_t i = 0; i < comm->spare_events.len; i++) {
        mstar_event **e = mstar__vec_at(&comm->spare_events, i);
        if (mstar_event_query(*e) == MSTAR_OK) {
            *out = *e;
            *e = *(mstar_event **)mstar__vec_at(&comm->spare_events, comm->spare_events.len - 1);
            comm->spare_events.len--;
            return MSTAR_OK;
        }
    }
    return mstar_event_create(comm->env.backend, out);
}

/* Kept even while a stream's wait on it is queued: destroying it could free what the wait
 * reads (the host backend's asynchronous streams). */
static void event_give(mstar_comm *comm, mstar_event *e)
{
    if (mstar__vec_push(&comm->spare_events, &e) != MSTAR_OK) {
        mstar_event_synchronize(e);
        mstar_event_destroy(e);
    }
}

/* `waiter` waits for the work queued on `s` so far. */
static mstar_status stream_after(mstar_comm *comm, mstar_stream *waiter, mstar_stream *s)
{
    mstar_event *e;
    mstar_status st = event_take(comm, &e);
    if (st != MSTAR_OK)
        return st;
    st = mstar_event_record(e, s);
    if (st == MSTAR_OK)
        st = mstar_stream_wait_event(waiter, e);
    event_give(comm, e);
    return st == MSTAR_OK ? MSTAR_OK : mstar_error_wrap("ordering a read with the caller's stream");
}

/* Before the reads: the copies into the targets wait for what the caller queued on their
 * streams (the buffers may still be in use there); without a backend the host waits. */
static mstar_status streams_before(mstar_comm *comm, const target_set *tg)
{
    mstar_status st = MSTAR_OK;
    for (uint32_t i = 0; i < tg->n && st == MSTAR_OK; i++) {
        mstar_stream *s = tg->t[i].stream;
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = tg->t[j].stream == s;
        if (s == NULL || seen)
            continue;
        st = comm->env.backend == NULL ? mstar_stream_synchronize(s)
                                       : stream_after(comm, comm->env.h2d, s);
    }
    return st;
}

/* After the reads were queued: the caller's later work on each stream waits for the copies. */
static mstar_status streams_after(mstar_comm *comm, const target_set *tg)
{
    mstar_status st = MSTAR_OK;
    for (uint32_t i = 0; i < tg->n && st == MSTAR_OK && comm->env.backend != NULL; i++) {
        mstar_stream *s = tg->t[i].stream;
        bool seen = false;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = tg->t[j].stream == s;
        if (s != NULL && !seen)
            st = stream_after(comm, s, comm->env.h2d);
    }
    return st;
}

/* A fresh record for bytes read from another entity. */
static void commit_fresh(mstar_comm *comm, uint32_t req, const mstar_edge *edge, uint32_t name,
                         const mstar_tensor_info *info, plan *p)
{
    uint32_t slot;
    MSTAR__ASSERT_OK(mstar__bk_put(&comm->bk, info->uuid, req, &slot)); /* I-11 */
    mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    mstar_tensor_init(&rec->view, p->buf->data, p->buf->device, info->dtype, info->ndim,
                      info->dims);
    rec->buf = p->buf;
    p->buf = NULL;
    if (p->into != NULL) { /* the same buffer: the read landed in the caller's memory */
        MSTAR__ASSERT(rec->buf == p->into);
        p->into->release = p->target->release;
        p->into->release_ctx = p->target->release_ctx;
    }
    rec->ref = 2;
    rec->edge_name = name;
    rec->tp_size = info->source_tp_size;
    rec->tp_rank = info->source_tp_rank;
    rec->source = p->source;
    rec->flags |= MSTAR__BK_FOREIGN | (p->registered ? MSTAR__BK_REGISTERED : 0) |
                  (p->viewed ? MSTAR__BK_VIEW : 0);
}

/* The rows of a tensor this entity produced, under a new uuid sharing its storage. */
static void commit_slice(mstar_comm *comm, uint32_t req, mstar_tensor_info *info, const plan *p)
{
    uint32_t slot;
    MSTAR__ASSERT_OK(mstar__bk_put(&comm->bk, p->slice, req, &slot)); /* I-11 */
    mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    const mstar__bk_rec *prod = mstar__bk_at(&comm->bk, p->slot);
    rec->view = prod->view;
    rec->view.shape[0] = (int64_t)(info->nbytes / p->row);
    rec->view.byte_offset += info->offset;
    rec->buf = mstar__buf_retain(prod->buf);
    rec->shard_dim = prod->shard_dim;
    rec->edge_name = prod->edge_name;
    rec->tp_size = prod->tp_size;
    rec->tp_rank = prod->tp_rank;
    rec->ref = 1;
    mstar_tensor_id producer = info->uuid;
    info->uuid = p->slice;
    /* This destination's reference on the producer's tensor moves to the slice. */
    mstar__bk_dereference(&comm->bk, producer, 1, &comm->collected);
}

/* The arrays of one start_read call, on the stack for a call of up to MSTAR__COMM_ON_STACK edges
 * and MSTAR__COMM_ON_STACK descriptors (mstar__scratch_zalloc). */
typedef struct read_arrays {
    plan **plans;       /* per edge: its descriptors' plans, in `storage`; NULL: no array */
    mstar__pending *pe; /* per edge: the pending entry it becomes */
    uint32_t *names;    /* per edge: its interned name */
    plan *storage;      /* every plan of the call */
    uint64_t ndesc;     /* the plans in `storage` */
    plan *plans_local[MSTAR__COMM_ON_STACK];
    mstar__pending pe_local[MSTAR__COMM_ON_STACK];
    uint32_t names_local[MSTAR__COMM_ON_STACK];
    plan storage_local[MSTAR__COMM_ON_STACK];
} read_arrays;

static void read_arrays_free(read_arrays *a)
{
    mstar__scratch_free(a->plans, a->plans_local);
    mstar__scratch_free(a->pe, a->pe_local);
    mstar__scratch_free(a->names, a->names_local);
    mstar__scratch_free(a->storage, a->storage_local);
}

/* Zeroed arrays for the n edges. An edge naming descriptors but no array gets no plans
 * (plan_all refuses it, in its turn among the edges' other errors). */
static mstar_status read_arrays_init(read_arrays *a, const mstar_edge *edges, uint32_t n)
{
    a->ndesc = 0;
    for (uint32_t e = 0; e < n; e++)
        a->ndesc += edges[e].tensor_info != NULL ? edges[e].ntensors : 0;
    a->plans = mstar__scratch_zalloc(a->plans_local, sizeof(a->plans_local), n, sizeof(plan *));
    a->pe = mstar__scratch_zalloc(a->pe_local, sizeof(a->pe_local), n, sizeof(mstar__pending));
    a->names = mstar__scratch_zalloc(a->names_local, sizeof(a->names_local), n, sizeof(uint32_t));
    a->storage = a->ndesc <= SIZE_MAX / sizeof(plan)
                     ? mstar__scratch_zalloc(a->storage_local, sizeof(a->storage_local),
                                             (size_t)a->ndesc, sizeof(plan))
                     : NULL;
    if (a->plans == NULL || a->pe == NULL || a->names == NULL || a->storage == NULL) {
        mstar_status st = a->storage == NULL
                              ? mstar_error_set(MSTAR_ENOMEM, "read plan of %llu descriptors",
                                                (unsigned long long)a->ndesc)
                              : mstar_error_set(MSTAR_ENOMEM, "start_read_tensors of %u edges", n);
        read_arrays_free(a);
        return st;
    }
    plan *next = a->storage;
    for (uint32_t e = 0; e < n; e++) {
        if (edges[e].tensor_info == NULL)
            continue;
        a->plans[e] = next;
        next += edges[e].ntensors;
    }
    return MSTAR_OK;
}

/* start_read_tensors, reading arena descriptors in place when `view`, into the caller's
 * buffers that `tg` names. */
static mstar_status start_read(mstar_comm *comm, const mstar_rid *rid, const mstar_edge *edges,
                               uint32_t n, bool view, target_set *tg, mstar_completion_list *out)
{
    if (n > 0 && edges == NULL)
        return mstar_error_set(MSTAR_EINVAL, "start_read_tensors: edges is NULL");
    uint32_t req;
    mstar_status st = mstar__comm_req(comm, rid, true, &req);
    if (st != MSTAR_OK)
        return st;
    read_arrays a;
    if ((st = read_arrays_init(&a, edges, n)) != MSTAR_OK)
        return st;
    plan **plans = a.plans;
    mstar__pending *pe = a.pe;
    uint32_t *names = a.names;
    size_t nfresh = 0, nslices = 0, nedges = 0;
    st = plan_all(comm, edges, n, plans, tg, &nfresh);
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        st = mstar__names_intern(&comm->names, edges[e].name, &names[e]);
        for (uint32_t i = 0; i < edges[e].ntensors && st == MSTAR_OK; i++) {
            nslices += plans[e][i].kind == KIND_SELF_SLICE;
            if (plans[e][i].kind == KIND_FRESH)
                st = mstar__names_intern(&comm->names, edges[e].tensor_info[i].source_entity,
                                         &plans[e][i].source);
        }
        nedges += edges[e].ntensors > 0;
    }
    if (st == MSTAR_OK)
        st = streams_before(comm, tg);
    if (st == MSTAR_OK)
        st = read_all(comm, edges, n, plans, pe, view);
    if (st == MSTAR_OK)
        st = streams_after(comm, tg);
    /* Everything that can fail for memory happens before the store changes. */
    if (st == MSTAR_OK)
        st = mstar__bk_reserve(&comm->bk, nfresh + nslices);
    if (st == MSTAR_OK)
        st = mstar__vec_reserve(&comm->pending, comm->pending.len + nedges);
    for (uint32_t e = 0; e < n && st == MSTAR_OK; e++) {
        if (edges[e].ntensors == 0)
            continue;
        st = mstar_edge_copy(&pe[e].edge, &edges[e]);
        pe[e].fresh = calloc(edges[e].ntensors, 2); /* and mstar__pending_local's half */
        if (st == MSTAR_OK && pe[e].fresh == NULL)
            st = mstar_error_set(MSTAR_ENOMEM, "pending read of %u descriptors", edges[e].ntensors);
    }
    mstar_completion_list list = { 0 };
    if (st == MSTAR_OK && out != NULL) {
        for (uint32_t e = 0; e < n; e++)
            list.n += pe[e].done != NULL;
        if (list.n > 0 && (list.items = calloc(list.n, sizeof(*list.items))) == NULL)
            st = mstar_error_set(MSTAR_ENOMEM, "completion list");
    }
    if (st != MSTAR_OK) {
        for (uint32_t e = 0; e < n; e++) {
            if (pe[e].done != NULL)
                mstar_completion_wait(pe[e].done, -1);
            mstar__comm_pending_free(&pe[e]);
        }
        release_plans(plans, edges, n, true);
        read_arrays_free(&a);
        return st;
    }
    /* Phase 3: commit. Nothing below fails. */
    list.n = 0;
    for (uint32_t e = 0; e < n; e++) {
        if (edges[e].ntensors == 0)
            continue;
        mstar__pending *p = &pe[e];
        uint8_t *local = mstar__pending_local(p);
        p->req = req;
        for (uint32_t i = 0; i < edges[e].ntensors; i++) {
            plan *pl = &plans[e][i];
            mstar_tensor_info *info = &p->edge.tensor_info[i];
            switch (pl->kind) {
            case KIND_SELF_WHOLE:
                local[i] = 1;
                break;
            case KIND_SELF_SLICE:
                commit_slice(comm, req, info, pl);
                local[i] = 1;
                break;
            case KIND_PRESENT:
                mstar__bk_increment(&comm->bk, info->uuid, 1);
                break;
            default:
                commit_fresh(comm, req, &edges[e], names[e], info, pl);
                p->fresh[i] = pl->viewed ? 2 : 1;
                break;
            }
        }
        if (p->done != NULL && out != NULL)
            list.items[list.n++] = mstar__completion_retain(p->done);
        MSTAR__ASSERT_OK(mstar__vec_push(&comm->pending, p)); /* I-11 */
        mstar__comm_req_at(comm, req)->npending++;
    }
    mstar__comm_collect(comm);
    release_plans(plans, edges, n, false);
    read_arrays_free(&a);
    if (out != NULL)
        *out = list;
    return MSTAR_OK;
}

/* start_read with targets (none for the two forms without). */
static mstar_status start_read_targets(mstar_comm *comm, const mstar_rid *rid,
                                       const mstar_edge *edges, uint32_t n, bool view,
                                       const mstar_read_target *targets, uint32_t ntargets,
                                       mstar_completion_list *out)
{
    target_set tg;
    mstar_status st = targets_init(comm, targets, ntargets, &tg);
    if (st != MSTAR_OK)
        return st;
    st = start_read(comm, rid, edges, n, view, &tg, out);
    targets_free(&tg);
    return st;
}

mstar_status mstar_comm_start_read_tensors(mstar_comm *comm, const mstar_rid *rid,
                                           const mstar_edge *edges, uint32_t n,
                                           mstar_completion_list *out)
{
    return start_read_targets(comm, rid, edges, n, false, NULL, 0, out);
}

mstar_status mstar_comm_start_read_views(mstar_comm *comm, const mstar_rid *rid,
                                         const mstar_edge *edges, uint32_t n,
                                         mstar_completion_list *out)
{
    return start_read_targets(comm, rid, edges, n, true, NULL, 0, out);
}

mstar_status mstar_comm_start_read_into(mstar_comm *comm, const mstar_rid *rid,
                                        const mstar_edge *edges, uint32_t n,
                                        const mstar_read_target *targets, uint32_t ntargets,
                                        mstar_completion_list *out)
{
    return start_read_targets(comm, rid, edges, n, false, targets, ntargets, out);
}

mstar_status mstar_comm_view_check(mstar_comm *comm, mstar_tensor_id uuid)
{
    uint32_t slot = mstar__bk_find(&comm->bk, uuid);
    if (slot == MSTAR__BK_NONE)
        return mstar_error_set(MSTAR_ENOENT, "tensor 0x%016llx is not held by '%s'",
                               (unsigned long long)uuid, comm->entity);
    const mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    if (!(rec->flags & MSTAR__BK_VIEW) || comm->transport->ops->view_check == NULL)
        return mstar_error_set(MSTAR_EINVAL, "tensor 0x%016llx is not a view",
                               (unsigned long long)uuid);
    return comm->transport->ops->view_check(comm->transport, rec->buf);
}

/* ---- collecting ready edges ----------------------------------------------------------------- */

/* The output being built by get_ready_tensors. */
typedef struct ready_builder {
    mstar__vec rids;   /* mstar_rid */
    mstar__vec starts; /* uint32 */
    mstar__vec edges;  /* mstar_edge */
    mstar__vec failed; /* mstar_read_failure */
} ready_builder;

static void add_failure(ready_builder *b, const mstar__req *r, const char *edge,
                        mstar_status status, const char *message)
{
    mstar_read_failure f;
    memset(&f, 0, sizeof(f));
    f.rid = r->rid;
    snprintf(f.edge_name, sizeof(f.edge_name), "%s", edge);
    f.status = status;
    snprintf(f.message, sizeof(f.message), "%s", message);
    if (mstar__vec_push(&b->failed, &f) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "read of '%s' failed: %s", edge, message);
}

/* From submit to landing: a read still copying when start_read returned (a device copy, a
 * remote read) ends when its completion finished, not when it was submitted. */
static double rx_seconds(const mstar__pending *p)
{
    if (p->done == NULL)
        return p->rx_time_s;
    uint64_t landed = mstar__completion_finished_ns(p->done);
    return landed > p->submit_ns ? (double)(landed - p->submit_ns) * 1e-9 : 0.0;
}

static void record_rx(mstar_comm *comm, mstar__req *r, const mstar__pending *p)
{
    /* Per source entity of this edge: bytes and count; the edge's read time once per source. */
    const uint8_t *local = mstar__pending_local(p);
    for (uint32_t i = 0; i < p->edge.ntensors; i++) {
        const mstar_tensor_info *info = &p->edge.tensor_info[i];
        if (local[i])
            continue;
        bool first = true;
        for (uint32_t j = 0; j < i && first; j++)
            first =
                local[j] || strcmp(p->edge.tensor_info[j].source_entity, info->source_entity) != 0;
        mstar_rx_info *rx = NULL;
        for (size_t k = 0; k < r->rx.len && rx == NULL; k++) {
            mstar_rx_info *c = mstar__vec_at(&r->rx, k);
            if (strcmp(c->edge_name, p->edge.name) == 0 &&
                strcmp(c->source_entity, info->source_entity) == 0)
                rx = c;
        }
        if (rx == NULL) {
            if (mstar__vec_grow(&r->rx, 1, (void **)&rx) != MSTAR_OK)
                return; /* profiling is best effort */
            snprintf(rx->edge_name, sizeof(rx->edge_name), "%s", p->edge.name);
            snprintf(rx->source_entity, sizeof(rx->source_entity), "%s", info->source_entity);
            snprintf(rx->dest_entity, sizeof(rx->dest_entity), "%s", comm->entity);
        }
        rx->count++;
        rx->num_bytes += (int64_t)info->nbytes;
        if (first)
            rx->time_s += rx_seconds(p);
    }
}

static mstar_status emit(ready_builder *b, mstar_edge *edge)
{
    mstar_status st = mstar__vec_push(&b->edges, edge);
    if (st == MSTAR_OK)
        mstar_edge_init(edge); /* moved */
    return st;
}

/* Build the consolidated edge of a complete fan-in buffer: new local tensors, ref 1 each. */
static mstar_status consolidate(mstar_comm *comm, uint32_t req, mstar__fanin *f, mstar_edge *out)
{
    mstar__buf **bufs = NULL;
    mstar_tensor *views = NULL;
    uint32_t n = 0;
    mstar_status st = mstar__fanin_consolidate(f, &comm->env, &bufs, &views, &n);
    if (st != MSTAR_OK)
        return st;
    uint32_t name = 0;
    st = mstar__names_intern(&comm->names, f->name, &name);
    if (st == MSTAR_OK)
        st = mstar__bk_reserve(&comm->bk, n);
    if (st == MSTAR_OK)
        st = mstar_edge_copy(out, &f->edge);
    mstar_tensor_info *infos = NULL;
    if (st == MSTAR_OK && n > 0 && (infos = calloc(n, sizeof(*infos))) == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "consolidated descriptors");
    mstar_tensor_id *uuids = calloc(n + 1, sizeof(*uuids));
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++)
        st = uuids != NULL ? mstar_id_gen_next(&comm->ids, &uuids[i])
                           : mstar_error_set(MSTAR_ENOMEM, "consolidated ids");
    if (st != MSTAR_OK) {
        for (uint32_t i = 0; i < n; i++)
            mstar__buf_release(bufs[i]);
        free(infos);
        free(uuids);
        free(bufs);
        free(views);
        if (out->tensor_info != NULL)
            mstar_edge_clear(out);
        return st;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t slot;
        MSTAR__ASSERT_OK(mstar__bk_put(&comm->bk, uuids[i], req, &slot)); /* I-11 */
        mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
        rec->buf = bufs[i];
        rec->view = views[i];
        rec->shard_dim = f->shard_dim;
        rec->edge_name = name;
        rec->tp_size = 1;
        rec->ref = 1;
        /* The descriptor describes the gathered tensor as get_tensor returns it. */
        mstar__comm_fill_info(comm, rec, &infos[i]);
        mstar_tensor real;
        mstar__layout_from_canonical(&rec->view, rec->shard_dim, &real);
        for (int32_t d = 0; d < real.ndim; d++) {
            infos[i].dims[d] = real.shape[d];
            infos[i].stride[d] = real.strides[d];
        }
    }
    free(out->tensor_info);
    out->tensor_info = infos;
    out->ntensors = n;
    out->total_fanin = 1;
    free(uuids);
    free(bufs);
    free(views);
    return MSTAR_OK;
}

/* A first-seen edge of a sharded input: buffer its shards; emit once every rank arrived. */
static void fan_in(mstar_comm *comm, ready_builder *b, uint32_t req, mstar__pending *p)
{
    mstar__req *r = mstar__comm_req_at(comm, req);
    mstar__fanin *f = NULL;
    size_t at = 0;
    while (at < r->fanins.len &&
           !mstar__fanin_matches(*(mstar__fanin **)mstar__vec_at(&r->fanins, at), &p->edge))
        at++;
    mstar_status st = MSTAR_OK;
    if (at < r->fanins.len) {
        f = *(mstar__fanin **)mstar__vec_at(&r->fanins, at);
    } else {
        /* New buffers go at the end, at index `at`: an edge carrying every rank completes
         * its buffer at once, which then comes out of that index. */
        st = mstar__fanin_create(&p->edge, &f);
        if (st == MSTAR_OK && (st = mstar__vec_push(&r->fanins, &f)) != MSTAR_OK)
            mstar__fanin_destroy(f);
    }
    uint32_t n = p->edge.ntensors;
    mstar__buf **bufs = calloc(n, sizeof(*bufs));
    mstar_tensor *views = calloc(n, sizeof(*views));
    int32_t *ranks = calloc(n, sizeof(*ranks));
    if (st == MSTAR_OK && (bufs == NULL || views == NULL || ranks == NULL))
        st = mstar_error_set(MSTAR_ENOMEM, "fan-in of %u shards", n);
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++) {
        const mstar__bk_rec *rec =
            mstar__bk_at(&comm->bk, mstar__bk_find(&comm->bk, p->edge.tensor_info[i].uuid));
        bufs[i] = rec->buf;
        views[i] = rec->view;
        /* Each descriptor names its own source rank: one edge may carry several ranks. */
        ranks[i] = p->edge.tensor_info[i].source_tp_rank;
    }
    if (st == MSTAR_OK)
        st = mstar__fanin_add(f, ranks, bufs, views, n);
    free(bufs);
    free(views);
    free(ranks);
    /* The usage references go now: the buffer holds the bytes (design.md "Reference counts",
     * "Sharding"). */
    for (uint32_t i = 0; i < n; i++)
        mstar__bk_dereference(&comm->bk, p->edge.tensor_info[i].uuid, 1, &comm->collected);
    mstar__comm_collect(comm);
    if (st != MSTAR_OK) {
        add_failure(b, r, p->edge.name, st, mstar_last_error());
        return;
    }
    if (!mstar__fanin_done(f))
        return;
    mstar_edge out;
    mstar_edge_init(&out);
    st = consolidate(comm, req, f, &out);
    mstar__fanin_destroy(f);
    mstar__vec_remove(&r->fanins, at);
    if (st == MSTAR_OK)
        st = emit(b, &out);
    if (st != MSTAR_OK) {
        add_failure(b, r, p->edge.name, st, mstar_last_error());
        mstar_edge_clear(&out);
    }
}

/* The key of one delivery: the uuid and the node it goes to. The same tensor going to two nodes
 * of one worker is two deliveries, not a re-delivery. */
typedef struct seen_key {
    mstar_tensor_id uuid;
    char node[MSTAR_NAME_MAX + 1];
} seen_key;

static size_t seen_key_of(const mstar_edge *edge, uint32_t i, seen_key *k)
{
    memset(k, 0, sizeof(*k));
    k->uuid = edge->tensor_info[i].uuid;
    size_t len = strnlen(edge->next_node, MSTAR_NAME_MAX);
    memcpy(k->node, edge->next_node, len);
    return sizeof(k->uuid) + len;
}

static bool redelivered(const mstar__req *r, const mstar_edge *edge)
{
    for (uint32_t i = 0; i < edge->ntensors; i++) {
        seen_key k;
        size_t len = seen_key_of(edge, i, &k);
        if (mstar__strmap_find(&r->seen, (const char *)&k, len) != NULL)
            return true;
    }
    return false;
}

/* One landed edge of an open request, after its ACK went out. */
static void deliver(mstar_comm *comm, ready_builder *b, uint32_t req, mstar__pending *p)
{
    mstar__req *r = mstar__comm_req_at(comm, req);
    for (uint32_t i = 0; i < p->edge.ntensors; i++) {
        if (!p->fresh[i])
            continue;
        uint32_t slot = mstar__bk_find(&comm->bk, p->edge.tensor_info[i].uuid);
        mstar__bk_rec *rec = slot != MSTAR__BK_NONE ? mstar__bk_at(&comm->bk, slot) : NULL;
        if (p->fresh[i] == 2 && rec != NULL && !(rec->flags & MSTAR__BK_ACK_AT_FREE)) {
            rec->flags |= MSTAR__BK_ACK_AT_FREE;
            comm->views_owing++; /* its room in acks_owed was kept by collect_request */
        }
        mstar__bk_decrement_raw(&comm->bk, p->edge.tensor_info[i].uuid, 1);
    }
    if (!r->open) {
        /* The request was cleaned up while this read was copying: not delivered. */
        for (uint32_t i = 0; i < p->edge.ntensors; i++)
            mstar__bk_dereference(&comm->bk, p->edge.tensor_info[i].uuid, 1, &comm->collected);
        mstar__comm_collect(comm);
        return;
    }
    if (redelivered(r, &p->edge)) {
        if (emit(b, &p->edge) != MSTAR_OK)
            add_failure(b, r, p->edge.name, MSTAR_ENOMEM, "out of memory delivering an edge");
        return;
    }
    for (uint32_t i = 0; i < p->edge.ntensors; i++) {
        mstar_tensor_id uuid = p->edge.tensor_info[i].uuid;
        seen_key k;
        size_t len = seen_key_of(&p->edge, i, &k);
        if (mstar__strmap_put(&r->seen, (const char *)&k, len, 1) != MSTAR_OK)
            mstar_log(MSTAR_LOG_WARN, "out of memory tracking delivered tensors");
        uint32_t slot = mstar__bk_find(&comm->bk, uuid);
        if (slot != MSTAR__BK_NONE && !mstar__pending_local(p)[i])
            mstar__bk_at(&comm->bk, slot)->shard_dim = p->edge.shard_dim;
    }
    if (comm->enable_prof)
        record_rx(comm, r, p);
    if (p->edge.total_fanin > 1)
        fan_in(comm, b, req, p);
    else if (emit(b, &p->edge) != MSTAR_OK)
        add_failure(b, r, p->edge.name, MSTAR_ENOMEM, "out of memory delivering an edge");
}

void mstar_ready_set_clear(mstar_ready_set *set)
{
    for (uint32_t i = 0; i < set->nedges; i++)
        free(set->edges[i].tensor_info); /* the edges go with the array: no reset of each */
    free(set->edges);
    free(set->rids);
    free(set->edge_start);
    free(set->failed);
    memset(set, 0, sizeof(*set));
}

/* The edge to ACK now for a landed entry: the whole edge, or for one with views and no failure
 * a shallow copy in *tmp without them (a view's ACK goes when it is released; the caller frees
 * tmp->tensor_info, NULL when every descriptor is a view). Short of memory for the copy, the
 * views are ACKed now like copies. */
static const mstar_edge *acked_now(mstar__pending *p, bool failed, mstar_edge *tmp)
{
    uint32_t views = 0;
    for (uint32_t i = 0; i < p->edge.ntensors; i++)
        views += p->fresh[i] == 2;
    if (failed || views == 0)
        return &p->edge;
    *tmp = p->edge;
    tmp->ntensors = 0;
    tmp->tensor_info = NULL;
    if (views == p->edge.ntensors)
        return tmp; /* nothing to ACK now, nothing to copy */
    tmp->tensor_info = malloc((p->edge.ntensors - views) * sizeof(*tmp->tensor_info));
    if (tmp->tensor_info == NULL) {
        mstar_log(MSTAR_LOG_WARN, "out of memory deferring the ACKs of views; ACKed now");
        for (uint32_t i = 0; i < p->edge.ntensors; i++)
            p->fresh[i] = p->fresh[i] != 0;
        return &p->edge;
    }
    for (uint32_t i = 0; i < p->edge.ntensors; i++)
        if (p->fresh[i] != 2)
            tmp->tensor_info[tmp->ntensors++] = p->edge.tensor_info[i];
    return tmp;
}

/* collect_request's arrays for n landed entries: up to MSTAR__COMM_ON_STACK, the usual
 * collection, on the stack. */
typedef struct collect_arrays {
    const mstar_edge **edges; /* what each entry ACKs now */
    bool *failed;
    mstar_edge *tmps; /* acked_now's copies */
    const mstar_edge *edges_local[MSTAR__COMM_ON_STACK];
    bool failed_local[MSTAR__COMM_ON_STACK];
    mstar_edge tmps_local[MSTAR__COMM_ON_STACK];
} collect_arrays;

static void collect_arrays_free(collect_arrays *a)
{
    mstar__scratch_free(a->edges, a->edges_local);
    mstar__scratch_free(a->failed, a->failed_local);
    mstar__scratch_free(a->tmps, a->tmps_local);
}

static bool collect_arrays_init(collect_arrays *a, size_t n)
{
    a->edges = mstar__scratch_zalloc(a->edges_local, sizeof(a->edges_local), n, sizeof(*a->edges));
    a->failed =
        mstar__scratch_zalloc(a->failed_local, sizeof(a->failed_local), n, sizeof(*a->failed));
    a->tmps = mstar__scratch_zalloc(a->tmps_local, sizeof(a->tmps_local), n, sizeof(*a->tmps));
    if (a->edges != NULL && a->failed != NULL && a->tmps != NULL)
        return true;
    collect_arrays_free(a);
    return false;
}

/* Handle every landed entry of request slot `req`: ACKs first, then delivery. An ACK that could
 * not be sent is queued, its error kept in *ack_st (the first one). False, with nothing ACKed or
 * delivered, when memory ran short: the entries stay for the next poll. */
static bool collect_request(mstar_comm *comm, ready_builder *b, uint32_t req, mstar_status *ack_st)
{
    size_t views; /* descriptors delivered as views, ACKed when their record is freed */
    size_t n = mstar__comm_pending_take(comm, req, &views);
    collect_arrays a;
    /* With room in the set for what delivery adds, taken before any ACK goes, delivery cannot
     * fail for memory (a fan-in's consolidation still can: reported as a failed read); with
     * room for every view's ACK to be owed, no view's ACK is lost to memory at its free. */
    bool room = mstar__vec_reserve(&b->edges, b->edges.len + n) == MSTAR_OK &&
                mstar__vec_reserve(&b->rids, b->rids.len + 1) == MSTAR_OK &&
                mstar__vec_reserve(&b->starts, b->starts.len + 2) == MSTAR_OK &&
                mstar__vec_reserve(&comm->acks_owed,
                                   comm->acks_owed.len + comm->views_owing + views) == MSTAR_OK;
    if (!room || !collect_arrays_init(&a, n)) {
        mstar_log(MSTAR_LOG_ERROR, "out of memory collecting ready edges; retried next poll");
        return false;
    }
    mstar__req *r = mstar__comm_req_at(comm, req);
    size_t k = 0, failures = b->failed.len;
    for (size_t i = 0; i < comm->pending.len; i++) {
        mstar__pending *p = mstar__vec_at(&comm->pending, i);
        if (!p->taken)
            continue;
        mstar_status status = p->done != NULL ? mstar_completion_poll(p->done) : MSTAR_OK;
        MSTAR__ASSERT(status != MSTAR_EAGAIN); /* I-4: only landed reads are taken */
        a.failed[k] = status != MSTAR_OK;
        if (a.failed[k])
            add_failure(b, r, p->edge.name, status, mstar_last_error());
        a.edges[k] = acked_now(p, a.failed[k], &a.tmps[k]);
        k++;
    }
    /* I-4 / T-5: these copies have landed, so the producer may reuse the bytes. */
    bool built;
    mstar_status st = mstar__comm_send_acks(comm, &r->rid, a.edges, a.failed, (uint32_t)n, &built);
    for (size_t i = 0; i < n; i++)
        free(a.tmps[i].tensor_info);
    if (!built) { /* no ACK went: the entries stay for the next poll, reported then */
        b->failed.len = failures;
        collect_arrays_free(&a);
        mstar_log(MSTAR_LOG_ERROR, "out of memory ACKing ready edges; retried next poll");
        return false;
    }
    if (*ack_st == MSTAR_OK)
        *ack_st = st;
    size_t before = b->edges.len;
    size_t w = 0;
    k = 0;
    for (size_t i = 0; i < comm->pending.len; i++) {
        mstar__pending *p = mstar__vec_at(&comm->pending, i);
        if (!p->taken) {
            if (w != i)
                memcpy(mstar__vec_at(&comm->pending, w), p, sizeof(*p));
            w++;
            continue;
        }
        if (a.failed[k++])
            mstar__comm_pending_drop(comm, p); /* a failed read is dropped, never retried */
        else
            deliver(comm, b, req, p);
        mstar__comm_pending_free(p);
        r->npending--;
    }
    comm->pending.len = w;
    if (b->edges.len > before) {
        uint32_t start = (uint32_t)before;
        mstar__vec_push(&b->rids, &r->rid);
        mstar__vec_push(&b->starts, &start);
    }
    collect_arrays_free(&a);
    mstar__comm_req_maybe_free(comm, req);
    return true;
}

mstar_status mstar_comm_get_ready_tensors(mstar_comm *comm, mstar_ready_set *out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "get_ready_tensors: out is NULL");
    ready_builder b;
    mstar__vec_init(&b.rids, sizeof(mstar_rid));
    mstar__vec_init(&b.starts, sizeof(uint32_t));
    mstar__vec_init(&b.edges, sizeof(mstar_edge));
    mstar__vec_init(&b.failed, sizeof(mstar_read_failure));
    mstar_status ack_st = mstar__comm_flush_acks(comm);
    if (comm->transport->ops->poll != NULL)
        comm->transport->ops->poll(comm->transport);
    bool idle = true;
    /* Requests in the order of their first landed entry. */
    for (;;) {
        uint32_t req = MSTAR__BK_NONE;
        for (size_t i = 0; i < comm->pending.len && req == MSTAR__BK_NONE; i++) {
            const mstar__pending *p = mstar__vec_at(&comm->pending, i);
            if (mstar__comm_pending_landed(p))
                req = p->req;
        }
        /* Short of memory, the rest waits for the next poll (the same request would be next). */
        if (req == MSTAR__BK_NONE || !collect_request(comm, &b, req, &ack_st))
            break;
    }
    for (size_t i = 0; i < comm->pending.len && idle; i++)
        idle = mstar__comm_pending_landed(mstar__vec_at(&comm->pending, i));
    if (comm->transport->ops->maintain != NULL)
        comm->transport->ops->maintain(comm->transport, idle);
    uint32_t end = (uint32_t)b.edges.len;
    mstar_status st = b.rids.len > 0 ? mstar__vec_push(&b.starts, &end) : MSTAR_OK;
    if (st != MSTAR_OK) {
        mstar_log(MSTAR_LOG_ERROR, "get_ready_tensors: out of memory; ready edges lost");
        b.rids.len = 0;
    }
    memset(out, 0, sizeof(*out));
    out->nrequests = (uint32_t)b.rids.len;
    out->rids = b.rids.data;
    out->edge_start = b.starts.data;
    out->nedges = (uint32_t)b.edges.len;
    out->edges = b.edges.data;
    out->nfailed = (uint32_t)b.failed.len;
    out->failed = b.failed.data;
    return ack_st;
}

mstar_status mstar_comm_ack_unread_tensors(mstar_comm *comm, const mstar_rid *rid,
                                           const mstar_edge *edges, uint32_t n)
{
    if (rid == NULL || (n > 0 && edges == NULL))
        return mstar_error_set(MSTAR_EINVAL, "ack_unread_tensors: %s is NULL",
                               rid == NULL ? "rid" : "edges");
    const mstar_edge **list = calloc(n + 1, sizeof(*list));
    if (list == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ack of %u edges", n);
    for (uint32_t e = 0; e < n; e++)
        list[e] = &edges[e];
    mstar_status st = mstar__comm_send_acks(comm, rid, list, NULL, n, NULL);
    free(list);
    return st;
}

/* ---- handing tensors to nodes --------------------------------------------------------------- */

mstar_status mstar_comm_get_tensor(mstar_comm *comm, mstar_tensor_id uuid, mstar_tensor *out)
{
    uint32_t slot = mstar__bk_find(&comm->bk, uuid);
    if (slot == MSTAR__BK_NONE)
        return mstar_error_set(MSTAR_ENOENT, "tensor 0x%016llx is not held by '%s'",
                               (unsigned long long)uuid, comm->entity);
    const mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    mstar__layout_from_canonical(&rec->view, rec->shard_dim, out);
    return MSTAR_OK;
}

mstar_status mstar_comm_get_tensor_copy(mstar_comm *comm, mstar_tensor_id uuid, void *dst,
                                        size_t dst_size, mstar_tensor *out)
{
    uint32_t slot = mstar__bk_find(&comm->bk, uuid);
    if (slot == MSTAR__BK_NONE)
        return mstar_error_set(MSTAR_ENOENT, "tensor 0x%016llx is not held by '%s'",
                               (unsigned long long)uuid, comm->entity);
    const mstar__bk_rec *rec = mstar__bk_at(&comm->bk, slot);
    uint64_t n = mstar_tensor_nbytes(&rec->view);
    if (dst_size < n || (n > 0 && dst == NULL))
        return mstar_error_set(MSTAR_ERANGE,
                               "get_tensor_copy: %zu bytes at dst for a tensor of "
                               "%llu",
                               dst_size, (unsigned long long)n);
    mstar_tensor canon = rec->view;
    void *tmp = NULL;
    if (mstar__transport_on_device(&comm->env, &canon) && n > 0) {
        if ((tmp = malloc((size_t)n)) == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "host copy of %llu bytes", (unsigned long long)n);
        mstar_status st = mstar__transport_copy_to_host(&comm->env, &canon, tmp);
        if (st != MSTAR_OK) {
            free(tmp);
            return st;
        }
        canon.data = tmp;
        canon.byte_offset = 0;
        canon.device = mstar_device_cpu();
    }
    mstar_tensor real;
    mstar__layout_from_canonical(&canon, rec->shard_dim, &real);
    mstar__layout_copy_contiguous(&real, dst);
    free(tmp);
    *out = real;
    out->data = dst;
    out->byte_offset = 0;
    out->device = mstar_device_cpu();
    mstar_shape_contiguous_strides(out->ndim, out->shape, out->strides);
    return MSTAR_OK;
}
