/*
 * bookkeeper.c — see bookkeeper.h. The hot path (put, increment, dereference) is a hash lookup
 * and a few stores; the 5-million-pairs-per-second target of `mstar bench bookkeeper` rests on
 * keeping it that way (no allocation per record once the slab and index have grown).
 */
#include "tensors/bookkeeper.h"

#include <stdlib.h>
#include <string.h>

void mstar__bk_init(mstar__bk *bk)
{
    memset(bk, 0, sizeof(*bk));
    mstar__u64map_init(&bk->index);
    mstar__vec_init(&bk->req_heads, sizeof(uint32_t));
    mstar__u64map_init(&bk->owed_index);
    mstar__vec_init(&bk->owed, sizeof(mstar__bk_owed));
    bk->free_head = MSTAR__BK_NONE;
}

void mstar__bk_free(mstar__bk *bk)
{
    mstar__u64map_free(&bk->index);
    mstar__vec_free(&bk->req_heads);
    mstar__u64map_free(&bk->owed_index);
    mstar__vec_free(&bk->owed);
    free(bk->recs);
    memset(bk, 0, sizeof(*bk));
    bk->free_head = MSTAR__BK_NONE;
}

/* ref += delta, refused (ref unchanged, counted, logged) when |delta| is past
 * MSTAR__BK_MAX_COUNT or the sum would overflow: counts reach here from other processes. */
static bool add_checked(mstar__bk *bk, mstar__bk_rec *r, int64_t delta, const char *op)
{
    int64_t sum;
    if (delta >= -MSTAR__BK_MAX_COUNT && delta <= MSTAR__BK_MAX_COUNT &&
        !__builtin_add_overflow(r->ref, delta, &sum)) {
        r->ref = sum;
        return true;
    }
    bk->refused_ops++;
    char id[MSTAR_ID_STRLEN];
    mstar_id_format(r->uuid, id);
    mstar_log(MSTAR_LOG_WARN, "bookkeeper: %s of tensor %s by %lld refused (count %lld)", op, id,
              (long long)delta, (long long)r->ref);
    return false;
}

/* ref -= n, checked as add_checked (n = INT64_MIN, which has no negation, is refused there). */
static bool sub_checked(mstar__bk *bk, mstar__bk_rec *r, int64_t n, const char *op)
{
    return add_checked(bk, r, n == INT64_MIN ? INT64_MIN : -n, op);
}

static void note_unknown(mstar__bk *bk, const char *op, mstar_tensor_id uuid)
{
    bk->unknown_ops++;
    if (mstar_log_enabled(MSTAR_LOG_DEBUG)) {
        char id[MSTAR_ID_STRLEN];
        mstar_id_format(uuid, id);
        mstar_log(MSTAR_LOG_DEBUG, "bookkeeper: %s of unknown tensor %s ignored", op, id);
    }
}

static uint32_t *req_head(mstar__bk *bk, uint32_t req)
{
    return (uint32_t *)mstar__vec_at(&bk->req_heads, req);
}

static mstar_status ensure_req(mstar__bk *bk, uint32_t req)
{
    while (bk->req_heads.len <= req) {
        uint32_t none = MSTAR__BK_NONE;
        mstar_status st = mstar__vec_push(&bk->req_heads, &none);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* Double the slab (records move: callers hold slots, never pointers, across a put). */
static mstar_status grow_slab(mstar__bk *bk)
{
    if (bk->cap >= UINT32_MAX / 2)
        return mstar_error_set(MSTAR_ENOMEM, "bookkeeper: too many records");
    uint32_t ncap = bk->cap ? bk->cap * 2 : 256;
    mstar__bk_rec *nrecs = realloc(bk->recs, (size_t)ncap * sizeof(*nrecs));
    if (nrecs == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "bookkeeper: %u records", ncap);
    bk->recs = nrecs;
    bk->cap = ncap;
    return MSTAR_OK;
}

static mstar_status take_slot(mstar__bk *bk, uint32_t *slot)
{
    if (bk->free_head != MSTAR__BK_NONE) {
        *slot = bk->free_head;
        bk->free_head = bk->recs[*slot].next;
        return MSTAR_OK;
    }
    if (bk->top == bk->cap) {
        mstar_status st = grow_slab(bk);
        if (st != MSTAR_OK)
            return st;
    }
    *slot = bk->top++;
    return MSTAR_OK;
}

mstar_status mstar__bk_add_request(mstar__bk *bk, uint32_t req)
{
    return ensure_req(bk, req);
}

mstar_status mstar__bk_reserve(mstar__bk *bk, size_t n)
{
    size_t free_slots = 0;
    for (uint32_t s = bk->free_head; s != MSTAR__BK_NONE && free_slots < n; s = bk->recs[s].next)
        free_slots++;
    while ((size_t)(bk->cap - bk->top) + free_slots < n) {
        mstar_status st = grow_slab(bk);
        if (st != MSTAR_OK)
            return st;
    }
    return mstar__u64map_reserve(&bk->index, mstar__u64map_len(&bk->index) + n);
}

mstar_status mstar__bk_put(mstar__bk *bk, mstar_tensor_id uuid, uint32_t req, uint32_t *slot_out)
{
    if (mstar__u64map_find(&bk->index, uuid) != NULL) {
        char id[MSTAR_ID_STRLEN];
        mstar_id_format(uuid, id);
        return mstar_error_set(MSTAR_EEXIST, "tensor %s is already held", id);
    }
    mstar_status st = ensure_req(bk, req);
    if (st != MSTAR_OK)
        return st;
    uint32_t slot = MSTAR__BK_NONE;
    st = take_slot(bk, &slot);
    if (st != MSTAR_OK)
        return st;
    st = mstar__u64map_put(&bk->index, uuid, slot);
    if (st != MSTAR_OK) {
        bk->recs[slot].next = bk->free_head;
        bk->free_head = slot;
        return st;
    }
    mstar__bk_rec *r = &bk->recs[slot];
    memset(r, 0, sizeof(*r));
    r->uuid = uuid;
    r->req = req;
    r->shard_dim = -1;
    r->flags = MSTAR__BK_LIVE;
    uint32_t *head = req_head(bk, req);
    r->prev = MSTAR__BK_NONE;
    r->next = *head;
    if (*head != MSTAR__BK_NONE)
        bk->recs[*head].prev = slot;
    *head = slot;
    *slot_out = slot;
    return MSTAR_OK;
}

uint32_t mstar__bk_find(const mstar__bk *bk, mstar_tensor_id uuid)
{
    uint64_t *v = mstar__u64map_find(&bk->index, uuid);
    return v == NULL ? MSTAR__BK_NONE : (uint32_t)*v;
}

static mstar__bk_rec *lookup(mstar__bk *bk, mstar_tensor_id uuid, const char *op)
{
    uint64_t *v = mstar__u64map_find(&bk->index, uuid);
    if (v == NULL) {
        note_unknown(bk, op, uuid);
        return NULL;
    }
    return &bk->recs[*v];
}

bool mstar__bk_increment(mstar__bk *bk, mstar_tensor_id uuid, int64_t n)
{
    mstar__bk_rec *r = lookup(bk, uuid, "increment_ref");
    if (r == NULL)
        return false;
    return add_checked(bk, r, n, "increment_ref");
}

bool mstar__bk_decrement_raw(mstar__bk *bk, mstar_tensor_id uuid, int64_t n)
{
    mstar__bk_rec *r = lookup(bk, uuid, "transit release");
    if (r == NULL)
        return false;
    return sub_checked(bk, r, n, "transit release");
}

static bool collectable(const mstar__bk_rec *r)
{
    return r->ref <= 0 && !(r->flags & MSTAR__BK_PERSIST);
}

bool mstar__bk_can_gc(const mstar__bk *bk, mstar_tensor_id uuid)
{
    uint64_t *v = mstar__u64map_find(&bk->index, uuid);
    return v != NULL && collectable(&bk->recs[*v]);
}

/* ---- the ACK ledger ---------------------------------------------------------------------------
 */

/* The peer id of the grant's entry; interned names count up from 1 and never reach it. */
#define GRANT UINT32_MAX

static mstar__bk_owed *owed_at(const mstar__bk *bk, uint32_t idx1)
{
    return (mstar__bk_owed *)mstar__vec_at(&bk->owed, idx1 - 1);
}

/* The entry of (uuid, peer), or NULL. */
static mstar__bk_owed *owed_find(const mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer)
{
    uint64_t *head = mstar__u64map_find(&bk->owed_index, uuid);
    for (uint32_t i = head != NULL ? (uint32_t)*head : 0; i != 0; i = owed_at(bk, i)->next)
        if (owed_at(bk, i)->peer == peer)
            return owed_at(bk, i);
    return NULL;
}

static mstar_status owed_new(mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer,
                             mstar__bk_owed **out)
{
    uint32_t idx1 = bk->owed_free;
    if (idx1 == 0) {
        mstar__bk_owed *e;
        mstar_status st = mstar__vec_grow(&bk->owed, 1, (void **)&e);
        if (st != MSTAR_OK)
            return st;
        idx1 = (uint32_t)bk->owed.len;
    } else {
        bk->owed_free = owed_at(bk, idx1)->next;
    }
    uint64_t *head = mstar__u64map_find(&bk->owed_index, uuid);
    mstar__bk_owed *e = owed_at(bk, idx1);
    *e = (mstar__bk_owed){ peer, head != NULL ? (uint32_t)*head : 0, 0 };
    mstar_status st =
        head != NULL ? (*head = idx1, MSTAR_OK) : mstar__u64map_put(&bk->owed_index, uuid, idx1);
    if (st != MSTAR_OK) {
        e->peer = 0;
        e->next = bk->owed_free;
        bk->owed_free = idx1;
        return st;
    }
    *out = e;
    return MSTAR_OK;
}

/* The entry of (uuid, peer), made when there is none; MSTAR_ENOENT when `uuid` is not held. */
static mstar_status owed_get(mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer,
                             mstar__bk_owed **out)
{
    if (mstar__u64map_find(&bk->index, uuid) == NULL)
        return MSTAR_ENOENT;
    *out = owed_find(bk, uuid, peer);
    return *out != NULL ? MSTAR_OK : owed_new(bk, uuid, peer, out);
}

mstar_status mstar__bk_owe(mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer, int64_t n)
{
    mstar__bk_owed *e;
    mstar_status st = owed_get(bk, uuid, peer, &e);
    if (st != MSTAR_OK)
        return st;
    if (n < 0 || n > MSTAR__BK_MAX_COUNT - e->count)
        return mstar_error_set(MSTAR_ERANGE, "ACK ledger: %lld more deliveries of one tensor",
                               (long long)n);
    e->count += n;
    return MSTAR_OK;
}

int64_t mstar__bk_owed_take(mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer, int64_t n)
{
    mstar__bk_owed *e = owed_find(bk, uuid, peer);
    if (e == NULL || n <= 0)
        return 0;
    int64_t take = n < e->count ? n : e->count;
    e->count -= take;
    return take;
}

int64_t mstar__bk_owed_total(const mstar__bk *bk, mstar_tensor_id uuid)
{
    uint64_t *head = mstar__u64map_find(&bk->owed_index, uuid);
    int64_t total = 0;
    for (uint32_t i = head != NULL ? (uint32_t)*head : 0; i != 0; i = owed_at(bk, i)->next)
        if (owed_at(bk, i)->peer != GRANT)
            total += owed_at(bk, i)->count;
    return total;
}

static int64_t clamp_count(int64_t n)
{
    return n < -MSTAR__BK_MAX_COUNT  ? -MSTAR__BK_MAX_COUNT
           : n > MSTAR__BK_MAX_COUNT ? MSTAR__BK_MAX_COUNT
                                     : n;
}

mstar_status mstar__bk_grant_add(mstar__bk *bk, mstar_tensor_id uuid, int64_t n)
{
    mstar__bk_owed *e;
    mstar_status st = owed_get(bk, uuid, GRANT, &e);
    if (st != MSTAR_OK)
        return st;
    /* Both terms lie within +-MSTAR__BK_MAX_COUNT (2^32), so the sum cannot overflow. */
    e->count = clamp_count(e->count + clamp_count(n));
    return MSTAR_OK;
}

int64_t mstar__bk_grant_take(mstar__bk *bk, mstar_tensor_id uuid, int64_t n)
{
    mstar__bk_owed *e = owed_find(bk, uuid, GRANT);
    if (e == NULL || e->count <= 0)
        return 0;
    return mstar__bk_owed_take(bk, uuid, GRANT, n);
}

/* Free the ledger entries of a record that leaves. */
static void owed_drop(mstar__bk *bk, mstar_tensor_id uuid)
{
    uint64_t head;
    if (mstar__u64map_len(&bk->owed_index) == 0 ||
        !mstar__u64map_remove(&bk->owed_index, uuid, &head))
        return;
    for (uint32_t i = (uint32_t)head; i != 0;) {
        mstar__bk_owed *e = owed_at(bk, i);
        uint32_t next = e->next;
        e->peer = 0;
        e->next = bk->owed_free;
        bk->owed_free = i;
        i = next;
    }
}

void mstar__bk_detach(mstar__bk *bk, uint32_t slot)
{
    mstar__bk_rec *r = &bk->recs[slot];
    if (!(r->flags & MSTAR__BK_LIVE))
        return;
    owed_drop(bk, r->uuid);
    mstar__u64map_remove(&bk->index, r->uuid, NULL);
    if (r->prev != MSTAR__BK_NONE)
        bk->recs[r->prev].next = r->next;
    else
        *req_head(bk, r->req) = r->next;
    if (r->next != MSTAR__BK_NONE)
        bk->recs[r->next].prev = r->prev;
    r->prev = r->next = MSTAR__BK_NONE;
    r->flags &= ~(uint32_t)MSTAR__BK_LIVE;
}

void mstar__bk_release_slot(mstar__bk *bk, uint32_t slot)
{
    mstar__bk_rec *r = &bk->recs[slot];
    r->flags = 0;
    r->buf = NULL;
    r->host = NULL;
    r->next = bk->free_head;
    bk->free_head = slot;
}

/* Detach and report `slot` if its record is collectable. The collected vec is pre-reserved by
 * the callers that can predict its size; a failed push here would lose a slot, so on ENOMEM the
 * record stays indexed and will be collected by request teardown instead. */
static bool collect_if(mstar__bk *bk, uint32_t slot, mstar__vec *collected)
{
    if (!collectable(&bk->recs[slot]))
        return false;
    if (mstar__vec_push(collected, &slot) != MSTAR_OK) {
        mstar_log(MSTAR_LOG_ERROR, "bookkeeper: out of memory; collection deferred to teardown");
        return false;
    }
    mstar__bk_detach(bk, slot);
    return true;
}

bool mstar__bk_dereference(mstar__bk *bk, mstar_tensor_id uuid, int64_t n, mstar__vec *collected)
{
    uint64_t *v = mstar__u64map_find(&bk->index, uuid);
    if (v == NULL) {
        note_unknown(bk, "dereference", uuid);
        return false;
    }
    uint32_t slot = (uint32_t)*v;
    if (!sub_checked(bk, &bk->recs[slot], n, "dereference"))
        return false;
    collect_if(bk, slot, collected);
    return true;
}

size_t mstar__bk_dereference_batch(mstar__bk *bk, const mstar_tensor_id *uuids,
                                   const int64_t *counts, size_t n, mstar__vec *collected)
{
    size_t before = collected->len;
    for (size_t i = 0; i < n; i++)
        mstar__bk_dereference(bk, uuids[i], counts[i], collected);
    return collected->len - before;
}

size_t mstar__bk_dereference_batch_uniform(mstar__bk *bk, const mstar_tensor_id *uuids, size_t n,
                                           int64_t count, mstar__vec *collected)
{
    size_t before = collected->len;
    for (size_t i = 0; i < n; i++)
        mstar__bk_dereference(bk, uuids[i], count, collected);
    return collected->len - before;
}

size_t mstar__bk_increment_batch_uniform(mstar__bk *bk, const mstar_tensor_id *uuids, size_t n,
                                         int64_t count)
{
    size_t done = 0;
    for (size_t i = 0; i < n; i++)
        done += mstar__bk_increment(bk, uuids[i], count);
    return done;
}

bool mstar__bk_set_persist(mstar__bk *bk, mstar_tensor_id uuid, bool persist, mstar__vec *collected)
{
    mstar__bk_rec *r = lookup(bk, uuid, "set_persist");
    if (r == NULL)
        return false;
    if (persist)
        r->flags |= MSTAR__BK_PERSIST;
    else
        r->flags &= ~(uint32_t)MSTAR__BK_PERSIST;
    collect_if(bk, (uint32_t)(r - bk->recs), collected);
    return true;
}

uint32_t mstar__bk_req_first(const mstar__bk *bk, uint32_t req)
{
    if (req >= bk->req_heads.len)
        return MSTAR__BK_NONE;
    return *(const uint32_t *)mstar__vec_at(&bk->req_heads, req);
}

mstar_status mstar__bk_req_slots(const mstar__bk *bk, uint32_t req, mstar__vec *out)
{
    for (uint32_t s = mstar__bk_req_first(bk, req); s != MSTAR__BK_NONE; s = bk->recs[s].next) {
        mstar_status st = mstar__vec_push(out, &s);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}
