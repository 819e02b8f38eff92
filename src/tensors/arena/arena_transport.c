/*
 * arena_transport.c — the shared-memory arena transport (design.md "Transports";
 * MSTAR_SHM_ARENA=1 or AUTO).
 *
 * Producer: staging reserves a slot in this process's arena (arena.h) and copies the tensor
 * into it (a device tensor with a device-to-host copy on the staging stream, synchronised before
 * staging returns). The slot's (segment, offset) is this uuid's placement, stamped onto its
 * descriptors. When the arena is full it degrades in layers: reclaim slots past their TTL, then
 * (after MSTAR_SHM_ARENA_SPILL_AFTER_S) spill to a per-uuid file, or in strict mode wait up to
 * MSTAR_SHM_ARENA_FULL_TIMEOUT_S and fail. Collecting the uuid frees the slot or unlinks the
 * spill file.
 *
 * Consumer: a descriptor with a segment is read from the cached mapping of that segment
 * (arena_peers.h: mapped only once the file proves to be a segment an arena wrote), after
 * checking the name (prefix, owner) and the range against the segment's usable size; into host
 * memory with a copy guarded against SIGBUS (core/guard.h: the file may be truncated under us),
 * into device memory with an H2D copy whose completion gates the ACK (T-5). A descriptor without a
 * segment is a spill or a files producer and is read as a file.
 *
 * Slot stamps (arena.h): staging publishes each slot's uuid once its bytes are in place, and
 * releasing the slot clears it. A read checks the stamp before and after its copy — a host copy
 * inside the SIGBUS guard, a device copy before it is queued and again in the host function
 * that finishes its completion — so a read of a slot its producer freed (a force cleanup, the
 * TTL) fails with MSTAR_ENOENT instead of returning whatever the slot holds now.
 *
 * Loans and views (zero copy on one host): a producer's loan is a slot reserved before the output
 * is computed, its buffer owning it; staging a loaned output records that slot as the placement
 * and publishes its stamp, copying nothing, and the slot is freed when the buffer goes (collecting
 * the uuid only clears the stamp). A consumer's view is a buffer pointing into its read-only
 * mapping of the producer's segment, made after the stamp check; no mapping is evicted while a
 * view is held, and the stamp can be checked again at any time (arena_view_check).
 *
 * Pinning (MSTAR_SHM_ARENA_PIN): own and peer segments are registered with the backend within
 * MSTAR_SHM_ARENA_PIN_MAX_MB, so device copies from and to them run asynchronously.
 */
#include "tensors/arena/arena_transport.h"

#include "core/assert.h"
#include "core/u64map.h"
#include "core/vec.h"
#include "tensors/arena/arena.h"
#include "tensors/arena/arena_alloc.h"
#include "tensors/arena/arena_peers.h"
#include "tensors/completion.h"
#include "tensors/transport_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct placement {
    uint32_t seg;
    bool spilled;
    bool loaned; /* the slot is a loan's: its buffer frees it, dropping only unpublishes it */
    uint64_t off;
    uint64_t staged_ns;
} placement;

typedef struct arena_knobs {
    uint64_t segment_bytes;
    uint32_t max_segments;
    double full_timeout_s;
    bool spill;
    double spill_after_s;
    bool pin;
    uint64_t pin_max_bytes;
    double slot_ttl_s;
    double stats_interval_s;
    double peer_sweep_s;
} arena_knobs;

typedef struct arena_transport {
    mstar__transport base;
    arena_knobs knobs;
    mstar__arena *arena;
    uint32_t pinned_segments; /* own segments 0..n-1 were offered for pinning */
    uint64_t pinned_bytes;    /* own and peer */
    bool warned_pin_budget;
    bool warned_fragmentation;
    bool warned_backpressure;
    mstar__u64map where;    /* uuid → index in places */
    mstar__vec places;      /* placement */
    mstar__vec free_places; /* uint32 indexes of unused entries */
    uint64_t live_slots;
    uint64_t spill_files;
    mstar__arena_peers peers;
    uint64_t views; /* live views into peer mappings: none may be unmapped while any is held */
    uint64_t last_ttl_ns;
    uint64_t last_stats_ns;
    uint64_t last_sweep_ns;
} arena_transport;

static arena_transport *self(mstar__transport *t)
{
    return (arena_transport *)t;
}

/* ---- knobs ---------------------------------------------------------------------------------- */

static mstar_status read_knobs(arena_knobs *k)
{
    int64_t seg_mb, max_segs, pin_mb;
    mstar_status st;
    if ((st = mstar_env_get_int("MSTAR_SHM_ARENA_SEGMENT_MB", 256, 1, 1 << 20, &seg_mb)) ||
        (st = mstar_env_get_int("MSTAR_SHM_ARENA_MAX_SEGMENTS", 32, 1, 1 << 16, &max_segs)) ||
        (st = mstar_env_get_double("MSTAR_SHM_ARENA_FULL_TIMEOUT_S", 30, 0, 1e6,
                                   &k->full_timeout_s)) ||
        (st = mstar_env_get_bool("MSTAR_SHM_ARENA_SPILL", true, &k->spill)) ||
        (st =
             mstar_env_get_double("MSTAR_SHM_ARENA_SPILL_AFTER_S", 0, 0, 1e6, &k->spill_after_s)) ||
        (st = mstar_env_get_bool("MSTAR_SHM_ARENA_PIN", true, &k->pin)) ||
        (st =
             mstar_env_get_int("MSTAR_SHM_ARENA_PIN_MAX_MB", 4096, 0, INT64_C(1) << 30, &pin_mb)) ||
        (st = mstar_env_get_double("MSTAR_SHM_ARENA_SLOT_TTL_S", 0, 0, 1e9, &k->slot_ttl_s)) ||
        (st = mstar_env_get_double("MSTAR_SHM_ARENA_STATS_INTERVAL_S", 60, 0.001, 1e9,
                                   &k->stats_interval_s)) ||
        (st = mstar_env_get_double("MSTAR_SHM_ARENA_PEER_SWEEP_S", 10, 0, 1e9, &k->peer_sweep_s)))
        return st;
    k->segment_bytes = (uint64_t)seg_mb << 20;
    k->max_segments = (uint32_t)max_segs;
    k->pin_max_bytes = (uint64_t)pin_mb << 20;
    return MSTAR_OK;
}

/* ---- pinning -------------------------------------------------------------------------------- */

/* `read_only`: a peer's segment, which this process maps PROT_READ. */
static bool pin(void *ctx, const void *base, uint64_t len, bool read_only)
{
    arena_transport *a = ctx;
    mstar_backend *backend = a->base.env->backend;
    if (backend == NULL || !a->knobs.pin)
        return false;
    if (a->pinned_bytes + len > a->knobs.pin_max_bytes) {
        if (!a->warned_pin_budget)
            mstar_log(MSTAR_LOG_WARN,
                      "shm arena: pin budget of %llu MiB reached; further "
                      "segments stay unpinned (MSTAR_SHM_ARENA_PIN_MAX_MB)",
                      (unsigned long long)(a->knobs.pin_max_bytes >> 20));
        a->warned_pin_budget = true;
        return false;
    }
    unsigned flags = read_only ? MSTAR_HOST_REGISTER_READ_ONLY : 0;
    if (mstar_host_register(backend, (void *)base, (size_t)len, flags) != MSTAR_OK) {
        mstar_log(MSTAR_LOG_WARN,
                  "shm arena: pinning %llu bytes failed (%s); copies from it "
                  "stay synchronous",
                  (unsigned long long)len, mstar_last_error());
        return false;
    }
    a->pinned_bytes += len;
    return true;
}

static void unpin(void *ctx, const void *base, uint64_t len)
{
    arena_transport *a = ctx;
    if (mstar_host_unregister(a->base.env->backend, (void *)base) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "shm arena: unpinning failed: %s", mstar_last_error());
    a->pinned_bytes -= len;
}

/* Own segments are pinned as they appear, in order, while the budget lasts. Without a backend or
 * with pinning off there is nothing to pin, and no need to take the arena's lock to learn so on
 * every reserve. */
static void pin_new_segments(arena_transport *a)
{
    if (a->base.env->backend == NULL || !a->knobs.pin)
        return;
    uint32_t n = mstar__arena_num_segments(a->arena);
    for (; a->pinned_segments < n; a->pinned_segments++) {
        void *base;
        uint64_t len;
        mstar__arena_segment_span(a->arena, a->pinned_segments, &base, &len);
        if (!pin(a, base, len, false))
            break;
    }
}

static void unpin_own_segments(arena_transport *a)
{
    if (a->base.env->backend == NULL)
        return;
    for (uint32_t i = 0; i < a->pinned_segments; i++) {
        void *base;
        uint64_t len;
        mstar__arena_segment_span(a->arena, i, &base, &len);
        unpin(a, base, len);
    }
    a->pinned_segments = 0;
}

/* ---- placements ----------------------------------------------------------------------------- */

static placement *place_at(const arena_transport *a, uint64_t i)
{
    return (placement *)mstar__vec_at(&a->places, (size_t)i);
}

static mstar_status record(arena_transport *a, mstar_tensor_id uuid, const placement *p)
{
    uint32_t idx;
    mstar_status st;
    if (a->free_places.len > 0) {
        idx = *(uint32_t *)mstar__vec_at(&a->free_places, a->free_places.len - 1);
        a->free_places.len--;
    } else {
        idx = (uint32_t)a->places.len;
        if ((st = mstar__vec_grow(&a->places, 1, NULL)) != MSTAR_OK)
            return st;
    }
    if ((st = mstar__u64map_put(&a->where, uuid, idx)) != MSTAR_OK) {
        mstar__vec_push(&a->free_places, &idx);
        return st;
    }
    *place_at(a, idx) = *p;
    if (p->spilled)
        a->spill_files++;
    else
        a->live_slots++;
    return MSTAR_OK;
}

/* Free what a placement holds and forget it. */
static void drop(arena_transport *a, mstar_tensor_id uuid)
{
    uint64_t idx;
    if (!mstar__u64map_remove(&a->where, uuid, &idx))
        return;
    placement *p = place_at(a, idx);
    if (p->spilled) {
        mstar__shm_file_unlink(a->base.env->dir, a->base.env->entity, uuid);
        a->spill_files--;
    } else if (p->loaned) {
        mstar__arena_unpublish(a->arena, p->seg, p->off);
        a->live_slots--;
    } else {
        if (!mstar__arena_release(a->arena, p->seg, p->off))
            mstar_log(MSTAR_LOG_ERROR, "shm arena: slot (%u, %llu) of 0x%016llx was not live",
                      p->seg, (unsigned long long)p->off, (unsigned long long)uuid);
        a->live_slots--;
    }
    /* I-10: a slot or spill file per staged uuid, no more */
    MSTAR__ASSERT(a->live_slots + a->spill_files == mstar__u64map_len(&a->where));
    uint32_t i32 = (uint32_t)idx;
    if (mstar__vec_push(&a->free_places, &i32) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "shm arena: out of memory recycling a placement entry");
}

/* The TTL backstop (design.md "Transports", T-16): slots and spill files staged longer ago than the
 * TTL are freed; the store entry stays (and stays registered, so it is not staged again). */
static size_t reclaim_expired(arena_transport *a)
{
    if (a->knobs.slot_ttl_s <= 0)
        return 0;
    uint64_t now = mstar__now_ns();
    uint64_t ttl_ns = (uint64_t)(a->knobs.slot_ttl_s * 1e9);
    mstar__vec expired;
    mstar__vec_init(&expired, sizeof(uint64_t));
    size_t it = 0;
    uint64_t uuid, idx;
    while (mstar__u64map_next(&a->where, &it, &uuid, &idx))
        if (now - place_at(a, idx)->staged_ns >= ttl_ns && mstar__vec_push(&expired, &uuid) != 0)
            break;
    for (size_t i = 0; i < expired.len; i++)
        drop(a, *(uint64_t *)mstar__vec_at(&expired, i));
    if (expired.len > 0)
        mstar_log(MSTAR_LOG_WARN,
                  "shm arena: reclaimed %zu slots or spill files older than "
                  "MSTAR_SHM_ARENA_SLOT_TTL_S=%g (never acknowledged); %llu slots and %llu "
                  "spill files remain",
                  expired.len, a->knobs.slot_ttl_s, (unsigned long long)a->live_slots,
                  (unsigned long long)a->spill_files);
    size_t n = expired.len;
    mstar__vec_free(&expired);
    a->last_ttl_ns = now;
    return n;
}

/* ---- staging -------------------------------------------------------------------------------- */

/* Reserve n bytes with the layered degradation of design.md "Transports". *spill is set when the
 * caller should write a file instead. */
static mstar_status reserve(arena_transport *a, uint64_t n, uint32_t *seg, uint64_t *off,
                            bool *spill)
{
    double grace = a->knobs.spill ? a->knobs.spill_after_s : a->knobs.full_timeout_s;
    uint64_t deadline = 0; /* the grace runs from the first full arena (mostly there is room) */
    *spill = false;
    for (;;) {
        mstar_status st = mstar__arena_reserve(a->arena, n, seg, off);
        if (st == MSTAR_OK) {
            pin_new_segments(a);
            return MSTAR_OK;
        }
        if (st != MSTAR_ENOSPC)
            return st;
        if (reclaim_expired(a) > 0)
            continue;
        mstar__arena_stats stats;
        mstar__arena_stats_get(a->arena, &stats);
        uint64_t need;
        mstar__arena_aligned(n, &need);
        if (stats.free_bytes >= need && !a->warned_fragmentation) {
            mstar_log(MSTAR_LOG_WARN,
                      "shm arena fragmented: %llu bytes free but the largest "
                      "block is %llu, need %llu",
                      (unsigned long long)stats.free_bytes,
                      (unsigned long long)stats.largest_free_block, (unsigned long long)need);
            a->warned_fragmentation = true;
        }
        if (mstar__deadline_passed(&deadline, (uint64_t)(grace * 1e9))) {
            if (a->knobs.spill) {
                *spill = true;
                return MSTAR_OK;
            }
            return mstar_error_set(MSTAR_ENOSPC,
                                   "SHM arena full for >%gs (need %llu bytes, "
                                   "%llu free): raise MSTAR_SHM_ARENA_MAX_SEGMENTS or enable "
                                   "MSTAR_SHM_ARENA_SPILL",
                                   grace, (unsigned long long)need,
                                   (unsigned long long)stats.free_bytes);
        }
        if (!a->warned_backpressure) {
            mstar_log(MSTAR_LOG_WARN, "shm arena full: backpressuring for up to %gs", grace);
            a->warned_backpressure = true;
        }
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
}

/* Queue the copy of one item into its slot. Device sources go on the staging stream (the caller
 * synchronises it); host sources are copied now. */
static mstar_status copy_in(arena_transport *a, mstar__stage_item *item, void *dst, bool *queued)
{
    const mstar__transport_env *env = a->base.env;
    uint64_t n = mstar_tensor_nbytes(&item->tensor);
    if (n == 0)
        return MSTAR_OK;
    if (item->host == NULL && mstar__transport_on_device(env, &item->tensor)) {
        mstar_status st = mstar_memcpy_async(env->d2h, dst, mstar_tensor_ptr(&item->tensor),
                                             (size_t)n, MSTAR_MEMCPY_D2H);
        if (st != MSTAR_OK)
            return mstar_error_wrap("staging 0x%016llx into the arena",
                                    (unsigned long long)item->uuid);
        *queued = true;
        return MSTAR_OK;
    }
    const mstar_tensor *src = item->host != NULL ? item->host : &item->tensor;
    memcpy(dst, mstar_tensor_ptr(src), (size_t)n);
    return MSTAR_OK;
}

/* Stamp the slots of the first n items with their uuids: their bytes are in place. */
static void publish(arena_transport *a, const mstar__stage_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t idx;
        if (mstar__u64map_get(&a->where, items[i].uuid, &idx) && !place_at(a, idx)->spilled)
            mstar__arena_publish(a->arena, place_at(a, idx)->seg, place_at(a, idx)->off,
                                 items[i].uuid);
    }
}

/* ---- loans --------------------------------------------------------------------------------- */

/* A producer's loan: a reserved slot its buffer owns until the last reference goes. */
typedef struct loan {
    arena_transport *a;
    uint32_t seg;
    uint64_t off;
} loan;

static void loan_free(void *ctx, void *data)
{
    loan *l = ctx;
    (void)data;
    if (!mstar__arena_release(l->a->arena, l->seg, l->off))
        mstar_log(MSTAR_LOG_ERROR, "shm arena: loaned slot (%u, %llu) was not live", l->seg,
                  (unsigned long long)l->off);
    free(l);
}

/* No waiting, no spill: a loan that does not fit now is refused, and the manager lends plain
 * memory instead (staged by copy like any output). */
static mstar_status arena_loan(mstar__transport *t, uint64_t n, mstar__buf **out)
{
    arena_transport *a = self(t);
    loan *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "arena loan");
    l->a = a;
    mstar_status st = mstar__arena_reserve(a->arena, n, &l->seg, &l->off);
    if (st == MSTAR_ENOSPC && reclaim_expired(a) > 0)
        st = mstar__arena_reserve(a->arena, n, &l->seg, &l->off);
    if (st != MSTAR_OK) {
        free(l);
        return st;
    }
    pin_new_segments(a);
    st = mstar__buf_wrap(mstar__arena_ptr(a->arena, l->seg, l->off), n, mstar_device_cpu(),
                         loan_free, l, out);
    if (st != MSTAR_OK) {
        mstar__arena_release(a->arena, l->seg, l->off);
        free(l);
    }
    return st;
}

/* Whether `item` is a loan of this arena whose tensor starts at its slot: then the slot is the
 * placement and nothing is copied. */
static bool loaned_slot(arena_transport *a, const mstar__stage_item *item, placement *p)
{
    const mstar__buf *buf = item->buf;
    if (buf == NULL || buf->release != loan_free || ((loan *)buf->release_ctx)->a != a ||
        mstar_tensor_ptr(&item->tensor) != buf->data)
        return false;
    const loan *l = buf->release_ctx;
    p->seg = l->seg;
    p->off = l->off;
    p->loaned = true;
    p->staged_ns = mstar__now_ns();
    return true;
}

static mstar_status arena_stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    arena_transport *a = self(t);
    bool queued = false;
    mstar_status st = MSTAR_OK;
    size_t done = 0;
    for (; done < n && st == MSTAR_OK; done++) {
        mstar__stage_item *item = &items[done];
        /* The staging time runs from here to the placement's staged_ns (read once the bytes are
         * in place), so a stage reads the clock twice, not three times: a read costs about 27
         * ns on the VM the benchmarks run on, a tenth of this call's time. */
        uint64_t t0 = mstar__now_ns();
        placement p = { 0 };
        bool spill = false;
        if (loaned_slot(a, item, &p)) {
            item->tx_bytes = mstar_tensor_nbytes(&item->tensor);
            st = record(a, item->uuid, &p);
            if (st != MSTAR_OK)
                break;
            item->tx_time_s = (double)(p.staged_ns - t0) * 1e-9;
            continue;
        }
        st = reserve(a, mstar_tensor_nbytes(&item->tensor), &p.seg, &p.off, &spill);
        if (st != MSTAR_OK)
            break;
        if (spill) {
            st = mstar__files_write_one(t->env, item);
            p.spilled = true;
        } else {
            st = copy_in(a, item, mstar__arena_ptr(a->arena, p.seg, p.off), &queued);
            if (st != MSTAR_OK)
                mstar__arena_release(a->arena, p.seg, p.off);
            item->tx_bytes = mstar_tensor_nbytes(&item->tensor);
        }
        if (st != MSTAR_OK)
            break;
        p.staged_ns = mstar__now_ns();
        st = record(a, item->uuid, &p);
        if (st != MSTAR_OK) {
            if (spill)
                mstar__shm_file_unlink(t->env->dir, t->env->entity, item->uuid);
            else
                mstar__arena_release(a->arena, p.seg, p.off);
            break;
        }
        if (!spill)
            item->tx_time_s = (double)(p.staged_ns - t0) * 1e-9;
    }
    /* I-1: the copies have landed before anyone can learn the placement. */
    if (queued) {
        mstar_status sync = mstar_stream_synchronize(t->env->d2h);
        if (sync != MSTAR_OK && st == MSTAR_OK)
            st = mstar_error_wrap("synchronising arena staging copies");
    }
    if (st != MSTAR_OK) {
        mstar_status saved = st;
        for (size_t i = 0; i < done; i++)
            drop(a, items[i].uuid);
        return saved;
    }
    MSTAR__ASSERT(!queued || mstar_stream_query(t->env->d2h) == MSTAR_OK); /* I-1: landed */
    publish(a, items, done);
    return MSTAR_OK;
}

/* The slot's (segment, offset); none for a spill, which the consumer reads as a file. */
static void arena_stamp(mstar__transport *t, mstar_tensor_id uuid, mstar_tensor_info *info)
{
    arena_transport *a = self(t);
    uint64_t idx;
    info->shm_segment[0] = '\0';
    info->shm_offset = 0;
    if (!mstar__u64map_get(&a->where, uuid, &idx) || place_at(a, idx)->spilled)
        return;
    mstar__arena_segment_name(a->arena, place_at(a, idx)->seg, info->shm_segment);
    info->shm_offset = place_at(a, idx)->off;
}

static void arena_release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
    drop(self(t), uuid);
}

/* ---- reading -------------------------------------------------------------------------------- */

static mstar_status arena_check(mstar__transport *t, const mstar_tensor_info *info)
{
    arena_transport *a = self(t);
    if (info->shm_segment[0] == '\0') {
        char name[MSTAR__SHM_NAME_BUF];
        return mstar__shm_file_name(t->env->dir, info->source_entity, info->uuid, name);
    }
    /* A segment mapped already had its name checked then: only its producer is compared. */
    const mstar__arena_peer *peer = mstar__arena_peers_find(&a->peers, info->shm_segment);
    mstar_status st =
        peer != NULL ? mstar__shm_segment_owned(info->shm_segment, peer->owner, info->source_entity)
                     : mstar__shm_segment_check(info->shm_segment, info->source_entity);
    if (st == MSTAR_OK && info->shm_offset % MSTAR__ARENA_ALIGN != 0)
        st = mstar_error_set(MSTAR_EPROTO,
                             "descriptor of tensor 0x%016llx names offset %llu of arena segment "
                             "%s, where no slot starts (slots start at multiples of %d)",
                             (unsigned long long)info->uuid, (unsigned long long)info->shm_offset,
                             info->shm_segment, MSTAR__ARENA_ALIGN);
    if (st != MSTAR_OK || info->nbytes == 0)
        return st;
    if (peer == NULL &&
        (st = mstar__arena_peers_get(&a->peers, info->shm_segment, &peer)) != MSTAR_OK)
        return st;
    uint64_t start, end;
    if (!mstar__add_u64(info->shm_offset, info->offset, &start) ||
        !mstar__add_u64(start, info->nbytes, &end) || end > peer->size)
        return mstar_error_set(MSTAR_EPROTO,
                               "descriptor of tensor 0x%016llx reads [%llu + %llu, "
                               "+%llu) of arena segment %s, which maps %llu bytes",
                               (unsigned long long)info->uuid, (unsigned long long)info->shm_offset,
                               (unsigned long long)info->offset, (unsigned long long)info->nbytes,
                               info->shm_segment, (unsigned long long)peer->size);
    return MSTAR_OK;
}

/* The slots a batch of device copies reads, checked again once the copies landed. Owned by the
 * host function that finishes the batch's completion once it is queued. */
typedef struct landing {
    mstar_completion *done;
    size_t n;
    mstar__arena_slot_ref slots[];
} landing;

/* Runs on the read stream after the batch's copies (a host node; at once on the host backend):
 * the copies have landed, so each slot must still hold its tensor. */
static void landed(void *args)
{
    landing *l;
    memcpy(&l, args, sizeof(l));
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; i < l->n && st == MSTAR_OK; i++)
        st = mstar__arena_slot_check(&l->slots[i], true);
    mstar__completion_finish(l->done, st, st != MSTAR_OK ? mstar_last_error() : NULL);
    mstar_completion_release(l->done);
    free(l);
}

/* The completion of the batch's device copies; on success `l` belongs to the host function. */
static mstar_status landing_completion(const mstar__transport_env *env, landing *l,
                                       mstar_completion **out)
{
    mstar_completion *c;
    mstar_status st = mstar__completion_create(env->notice, &c);
    if (st != MSTAR_OK)
        return st;
    l->done = mstar__completion_retain(c); /* the host function's reference */
    if (mstar_launch(env->h2d, landed, &l, sizeof(l)) != MSTAR_OK) {
        mstar_completion_release(c);
        mstar_completion_release(c);
        return mstar_error_wrap("queueing the host-to-device completion");
    }
    *out = c;
    return MSTAR_OK;
}

/* Read one descriptor's bytes out of the peer's slot into `into` or a new buffer: copied now
 * into host memory, or queued into the backend's memory with the slot added to `l` for the
 * check after landing. */
static mstar_status read_segment(arena_transport *a, const mstar_tensor_info *info,
                                 mstar__buf *into, mstar__buf **out, landing *l)
{
    const mstar__transport_env *env = a->base.env;
    mstar__buf *buf;
    mstar_status st = mstar__transport_read_dest(env, into, info->nbytes, &buf);
    if (st != MSTAR_OK || info->nbytes == 0) {
        if (st == MSTAR_OK)
            *out = buf;
        return st; /* an empty tensor needs no mapping: it has no bytes to get wrong */
    }
    const mstar__arena_peer *peer;
    st = mstar__arena_peers_get(&a->peers, info->shm_segment, &peer);
    if (st == MSTAR_OK && env->backend == NULL) {
        /* Another process's file: truncating it, or freeing the slot, must cost this read. */
        st = mstar__arena_peer_copy(peer, info->shm_offset, info->offset, info->nbytes, info->uuid,
                                    buf->data);
    } else if (st == MSTAR_OK) {
        /* Into the backend's memory the copy runs on the read stream and gates the ACK. */
        mstar__arena_slot_ref *slot = &l->slots[l->n];
        mstar__arena_peer_slot(peer, info->shm_offset, info->uuid, slot);
        st = mstar__arena_slot_check(slot, false);
        if (st == MSTAR_OK)
            st = mstar__transport_copy_from_host(
                env, buf, peer->base + info->shm_offset + info->offset, info->nbytes, true);
        if (st == MSTAR_OK)
            l->n++;
    }
    if (st != MSTAR_OK) {
        mstar__buf_release(buf);
        return st;
    }
    *out = buf;
    return MSTAR_OK;
}

/* ---- views ---------------------------------------------------------------------------------- */

/* A consumer's view of a peer's slot: the mapping stays while it lives (arena_maintain). */
typedef struct view {
    arena_transport *a;
    mstar__arena_slot_ref slot;
} view;

static void view_free(void *ctx, void *data)
{
    view *v = ctx;
    (void)data;
    v->a->views--;
    free(v);
}

/* The descriptor's bytes in place in the peer's mapping, once its slot proves to hold them. */
static mstar_status view_segment(arena_transport *a, const mstar_tensor_info *info,
                                 mstar__buf **out)
{
    const mstar__arena_peer *peer;
    mstar_status st = mstar__arena_peers_get(&a->peers, info->shm_segment, &peer);
    if (st != MSTAR_OK)
        return st;
    view *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "arena view");
    v->a = a;
    mstar__arena_peer_slot(peer, info->shm_offset, info->uuid, &v->slot);
    st = mstar__arena_slot_check(&v->slot, false);
    if (st == MSTAR_OK)
        st = mstar__buf_wrap((void *)(peer->base + info->shm_offset + info->offset), info->nbytes,
                             mstar_device_cpu(), view_free, v, out);
    if (st != MSTAR_OK) {
        free(v);
        return st;
    }
    a->views++;
    return MSTAR_OK;
}

static mstar_status arena_view_check(mstar__transport *t, const mstar__buf *buf)
{
    if (buf == NULL || buf->release != view_free || ((view *)buf->release_ctx)->a != self(t))
        return mstar_error_set(MSTAR_EINVAL, "not a view of this arena");
    return mstar__arena_slot_check(&((const view *)buf->release_ctx)->slot, true);
}

static mstar_status arena_read(mstar__transport *t, mstar__read_item *items, size_t n,
                               mstar_completion **done)
{
    arena_transport *a = self(t);
    landing *l = NULL;
    *done = NULL;
    if (t->env->backend != NULL) {
        /* Room for every item: at most one slot each. */
        l = calloc(1, sizeof(*l) + n * sizeof(l->slots[0]));
        if (l == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "arena read of %zu tensors", n);
    }
    mstar_status st = MSTAR_OK;
    size_t i = 0;
    for (; i < n && st == MSTAR_OK; i++) {
        const mstar_tensor_info *info = items[i].info;
        items[i].registered = false;
        items[i].viewed = false;
        if (info->shm_segment[0] == '\0') {
            st = mstar__files_read_one(t->env, info, items[i].into, &items[i].buf);
        } else if (items[i].view && items[i].into == NULL && t->env->backend == NULL &&
                   info->nbytes > 0) {
            st = view_segment(a, info, &items[i].buf);
            items[i].viewed = st == MSTAR_OK;
        } else
            st = read_segment(a, info, items[i].into, &items[i].buf, l);
        if (st != MSTAR_OK)
            break;
    }
    bool queued = l != NULL && l->n > 0;
    if (st == MSTAR_OK && queued) {
        st = landing_completion(t->env, l, done);
        if (st == MSTAR_OK)
            l = NULL; /* the host function's now */
    }
    if (st != MSTAR_OK) {
        /* Copies already queued into these buffers must land before they are released. */
        if (queued)
            mstar_stream_synchronize(t->env->h2d);
        for (size_t j = 0; j < i; j++) {
            mstar__buf_release(items[j].buf);
            items[j].buf = NULL;
        }
    }
    free(l);
    return st;
}

/* ---- upkeep --------------------------------------------------------------------------------- */

static void arena_stats(mstar__transport *t, mstar_arena_stats *out)
{
    arena_transport *a = self(t);
    mstar__arena_stats s;
    mstar__arena_stats_get(a->arena, &s);
    memset(out, 0, sizeof(*out));
    out->segments = s.segments;
    out->total_bytes = s.total_bytes;
    out->free_bytes = s.free_bytes;
    out->largest_free_block = s.largest_free_block;
    out->pinned_bytes = a->pinned_bytes;
    out->live_slots = a->live_slots;
    out->spill_files = a->spill_files;
    out->peer_segments = mstar__arena_peers_count(&a->peers);
}

static void arena_maintain(mstar__transport *t, bool reads_idle)
{
    arena_transport *a = self(t);
    uint64_t now = mstar__now_ns();
    if (a->knobs.slot_ttl_s > 0 && now - a->last_ttl_ns >= UINT64_C(1000000000))
        reclaim_expired(a);
    if (now - a->last_stats_ns >= (uint64_t)(a->knobs.stats_interval_s * 1e9)) {
        a->last_stats_ns = now;
        if (mstar_log_enabled(MSTAR_LOG_INFO)) {
            mstar_arena_stats s;
            arena_stats(t, &s);
            mstar_log(MSTAR_LOG_INFO,
                      "shm arena: %u segments, %llu bytes, %llu free, largest "
                      "free block %llu, %llu pinned, %llu live slots, %llu spill files",
                      s.segments, (unsigned long long)s.total_bytes,
                      (unsigned long long)s.free_bytes, (unsigned long long)s.largest_free_block,
                      (unsigned long long)s.pinned_bytes, (unsigned long long)s.live_slots,
                      (unsigned long long)s.spill_files);
        }
    }
    /* Only with no copy pending and no view held can a mapping go (I-10). */
    if (reads_idle && a->views == 0 &&
        now - a->last_sweep_ns >= (uint64_t)(a->knobs.peer_sweep_s * 1e9)) {
        a->last_sweep_ns = now;
        mstar__arena_peers_evict_dead(&a->peers);
    }
}

static void arena_destroy(mstar__transport *t)
{
    arena_transport *a = self(t);
    mstar__vec uuids;
    mstar__vec_init(&uuids, sizeof(uint64_t));
    size_t it = 0;
    uint64_t uuid, idx;
    while (mstar__u64map_next(&a->where, &it, &uuid, &idx))
        if (mstar__vec_push(&uuids, &uuid) != MSTAR_OK)
            break;
    for (size_t i = 0; i < uuids.len; i++)
        drop(a, *(uint64_t *)mstar__vec_at(&uuids, i));
    mstar__vec_free(&uuids);
    mstar__arena_peers_free(&a->peers);
    unpin_own_segments(a);
    mstar__arena_destroy(a->arena);
    mstar__u64map_free(&a->where);
    mstar__vec_free(&a->places);
    mstar__vec_free(&a->free_places);
    free(a);
}

static const mstar__transport_ops arena_ops = {
    .name = "arena",
    .needs_cpu_tensor = true,
    .stage = arena_stage,
    .stamp = arena_stamp,
    .release = arena_release,
    .check = arena_check,
    .read = arena_read,
    .maintain = arena_maintain,
    .loan = arena_loan,
    .view_check = arena_view_check,
    .arena_stats = arena_stats,
    .destroy = arena_destroy,
};

mstar_status mstar__transport_arena_create(const mstar__transport_env *env, mstar__transport **out)
{
    arena_transport *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "arena transport");
    mstar_status st = read_knobs(&a->knobs);
    if (st != MSTAR_OK) {
        free(a);
        return st;
    }
    a->base.ops = &arena_ops;
    a->base.env = env;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (env->backend != NULL && a->knobs.pin && pages > 0 && page > 0 &&
        a->knobs.pin_max_bytes > (uint64_t)pages * (uint64_t)page / 4)
        mstar_log(MSTAR_LOG_WARN,
                  "MSTAR_SHM_ARENA_PIN_MAX_MB=%llu is more than a quarter of "
                  "physical memory",
                  (unsigned long long)(a->knobs.pin_max_bytes >> 20));
    st = mstar__arena_create(env->dir, env->entity, a->knobs.segment_bytes, a->knobs.max_segments,
                             &a->arena);
    if (st != MSTAR_OK) {
        free(a);
        return st;
    }
    mstar__u64map_init(&a->where);
    mstar__vec_init(&a->places, sizeof(placement));
    mstar__vec_init(&a->free_places, sizeof(uint32_t));
    mstar__arena_peer_hooks hooks = { pin, unpin, a };
    mstar__arena_peers_init(&a->peers, env->dir, &hooks);
    a->last_ttl_ns = a->last_stats_ns = a->last_sweep_ns = mstar__now_ns();
    pin_new_segments(a);
    *out = &a->base;
    return MSTAR_OK;
}
