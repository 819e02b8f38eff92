/*
 * bookkeeper.h — one record per tensor id held by this process (design.md "Descriptors and edges",
 * "Reference counts").
 *
 * A record carries the signed 64-bit reference count, the persist marker, the registered flag
 * (staged for other processes), the request it belongs to, the shard dim that undoes the
 * canonical layout, interned names for profiling and descriptors, and the bytes themselves.
 *
 * Collection rule: a record is collectable when ref <= 0 and it is not persisted. It is evaluated
 * only by dereference and set_persist (and by request teardown in the communication manager),
 * never by put or increment — a freshly stored output sits at ref 0 until its safety hold.
 * Collecting detaches the record from the id index and from its request's list and hands its
 * slot back to the caller, which releases transport resources (files, arena slots,
 * registrations) and then the bytes, and finally mstar__bk_release_slot. Unknown ids are a
 * logged no-op everywhere.
 *
 * Records live in one growable slab addressed by slot index (pointers move when it grows);
 * each request's records form an intrusive doubly linked list so teardown visits only its own.
 * Not thread-safe.
 */
#ifndef MSTAR_TENSORS_BOOKKEEPER_H
#define MSTAR_TENSORS_BOOKKEEPER_H

#include "core/u64map.h"
#include "core/vec.h"
#include "tensors/buf.h"

#define MSTAR__BK_NONE UINT32_MAX

/* The largest count a single reference operation may carry. Counts are numbers of deliveries;
 * no fan-out comes near 2^32, and a bound this far below INT64_MAX keeps every sum of a stored
 * count and an incoming one representable. Larger counts are refused, not applied. */
#define MSTAR__BK_MAX_COUNT (INT64_C(1) << 32)

enum {
    MSTAR__BK_PERSIST = 1u << 0,
    MSTAR__BK_REGISTERED = 1u << 1,
    MSTAR__BK_LIVE = 1u << 2,        /* slot in use and indexed */
    MSTAR__BK_FOREIGN = 1u << 3,     /* read from another entity (this process is a consumer) */
    MSTAR__BK_VIEW = 1u << 4,        /* FOREIGN bytes in place in the producer's memory (a view) */
    MSTAR__BK_ACK_AT_FREE = 1u << 5, /* VIEW: its delivery is ACKed when the record is collected */
};

typedef struct mstar__bk_rec {
    mstar_tensor_id uuid;
    int64_t ref;
    mstar__buf *buf;  /* the bytes of `view` (canonical layout) */
    mstar__buf *host; /* a host copy kept for host-memory transports, or NULL */
    mstar_tensor view;
    uint32_t req;        /* request slot in the communication manager */
    uint32_t prev, next; /* the request's list: slots, MSTAR__BK_NONE at the ends */
    int32_t shard_dim;   /* the real shard dim moved to 0 in the canonical layout; -1 none */
    uint32_t edge_name;  /* interned names, 0 = none */
    uint32_t node_name;
    uint32_t graph_walk;
    uint32_t source; /* FOREIGN: the producing entity (interned); a tensor is (source, uuid) */
    int32_t tp_size; /* the producing group (descriptors) */
    int32_t tp_rank;
    uint32_t flags;
} mstar__bk_rec;

typedef struct mstar__bk {
    mstar__u64map index; /* uuid → slot */
    mstar__bk_rec *recs;
    uint32_t cap;         /* slots allocated */
    uint32_t top;         /* slots ever handed out */
    uint32_t free_head;   /* a free slot, chained through rec.next; MSTAR__BK_NONE when empty */
    mstar__vec req_heads; /* uint32 per request slot: first record, or MSTAR__BK_NONE */
    uint64_t unknown_ops; /* operations that named an id not held here */
    uint64_t refused_ops; /* counts refused: out of range, or the sum would overflow */
    /* The ACK ledger: per produced uuid, which peers were sent it and how many deliveries each
     * still owes an ACK for (a chain of mstar__bk_owed per uuid, freed when the record goes). */
    mstar__u64map owed_index; /* uuid → index + 1 of its first entry */
    mstar__vec owed;          /* mstar__bk_owed */
    uint32_t owed_free;       /* index + 1 of a free entry, chained through next; 0 none */
} mstar__bk;

typedef struct mstar__bk_owed {
    uint32_t peer; /* the caller's id for the peer (an interned name); 0 marks a free entry */
    uint32_t next; /* index + 1 of the uuid's next entry; 0 = end */
    int64_t count;
} mstar__bk_owed;

void mstar__bk_init(mstar__bk *bk);
/* Frees the slab and the index; does not release any record's bytes (callers drain first). */
void mstar__bk_free(mstar__bk *bk);

static inline size_t mstar__bk_len(const mstar__bk *bk)
{
    return mstar__u64map_len(&bk->index);
}

static inline mstar__bk_rec *mstar__bk_at(const mstar__bk *bk, uint32_t slot)
{
    return &bk->recs[slot];
}

/* Make request slot `req` known (its list head), so puts into it cannot fail for memory. */
mstar_status mstar__bk_add_request(mstar__bk *bk, uint32_t req);
/* Make room for `n` more records, so that the next n puts cannot fail for memory. */
mstar_status mstar__bk_reserve(mstar__bk *bk, size_t n);
/* A new record with ref 0, no flags, linked into request `req`. MSTAR_EEXIST if `uuid` is held. */
mstar_status mstar__bk_put(mstar__bk *bk, mstar_tensor_id uuid, uint32_t req, uint32_t *slot);
/* The slot of `uuid`, or MSTAR__BK_NONE. */
uint32_t mstar__bk_find(const mstar__bk *bk, mstar_tensor_id uuid);

/* ref += n, no collection check. False (and counted) for an unknown id, and for a count outside
 * 0..MSTAR__BK_MAX_COUNT or a sum that would overflow (counted in refused_ops, ref unchanged). */
bool mstar__bk_increment(mstar__bk *bk, mstar_tensor_id uuid, int64_t n);
/* ref -= n, no collection check (the consumer's transit release, design.md "Tensor lifecycle"). */
bool mstar__bk_decrement_raw(mstar__bk *bk, mstar_tensor_id uuid, int64_t n);
bool mstar__bk_can_gc(const mstar__bk *bk, mstar_tensor_id uuid);

/* ref -= n; when the record became collectable it is detached and its slot appended to
 * `collected` (a vec of uint32). Returns false for an unknown id, and for a refused count as
 * increment refuses it. */
bool mstar__bk_dereference(mstar__bk *bk, mstar_tensor_id uuid, int64_t n, mstar__vec *collected);
/* The batch forms: per-uuid counts, or one count for all. Return how many were collected. */
size_t mstar__bk_dereference_batch(mstar__bk *bk, const mstar_tensor_id *uuids,
                                   const int64_t *counts, size_t n, mstar__vec *collected);
size_t mstar__bk_dereference_batch_uniform(mstar__bk *bk, const mstar_tensor_id *uuids, size_t n,
                                           int64_t count, mstar__vec *collected);
size_t mstar__bk_increment_batch_uniform(mstar__bk *bk, const mstar_tensor_id *uuids, size_t n,
                                         int64_t count);
/* Set or clear the persist marker, then check collection as dereference does. */
bool mstar__bk_set_persist(mstar__bk *bk, mstar_tensor_id uuid, bool persist,
                           mstar__vec *collected);

/* The ACK ledger. owe: `peer` was sent n more deliveries of held `uuid` (MSTAR_ENOENT when not
 * held, MSTAR_ERANGE when the sum would pass MSTAR__BK_MAX_COUNT). owed_take: take up to n of
 * them back and return how many were taken (0 when the peer is owed nothing). */
mstar_status mstar__bk_owe(mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer, int64_t n);
int64_t mstar__bk_owed_take(mstar__bk *bk, mstar_tensor_id uuid, uint32_t peer, int64_t n);
/* Deliveries of `uuid` still owed an ACK, all peers together (the grant below not counted). */
int64_t mstar__bk_owed_total(const mstar__bk *bk, mstar_tensor_id uuid);

/* The grant, a ledger entry of no peer: ACKs of held `uuid` that the ledger does not cover but an
 * UNPERSIST K allowed, because a persisted tensor may be handed on by whoever it was sent to
 * (docs/invariants.md I-28). grant_add adds n, clamped to +-MSTAR__BK_MAX_COUNT: K at UNPERSIST,
 * minus each such ACK that came in while the tensor was persisted, which K counts too
 * (MSTAR_ENOENT when not held). grant_take takes up to n of what is left and returns how many. */
mstar_status mstar__bk_grant_add(mstar__bk *bk, mstar_tensor_id uuid, int64_t n);
int64_t mstar__bk_grant_take(mstar__bk *bk, mstar_tensor_id uuid, int64_t n);

/* Detach a live record from the index and its request list (teardown); its ledger goes too. */
void mstar__bk_detach(mstar__bk *bk, uint32_t slot);
/* Return a detached slot to the free list. */
void mstar__bk_release_slot(mstar__bk *bk, uint32_t slot);

/* The first record of request `req` (then follow rec.next), or MSTAR__BK_NONE. */
uint32_t mstar__bk_req_first(const mstar__bk *bk, uint32_t req);
/* Append every live slot of request `req` to `out` (a vec of uint32), for teardown loops that
 * detach as they go. */
mstar_status mstar__bk_req_slots(const mstar__bk *bk, uint32_t req, mstar__vec *out);

#endif
