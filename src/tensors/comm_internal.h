/*
 * comm_internal.h — the communication manager's state, shared by its files:
 *   comm.c          creation, options, requests, messages, statistics, destruction
 *   comm_store.c    producer: storing outputs, descriptors, reference counts, staging
 *   comm_read.c     consumer: starting reads, collecting ready edges, fan-in, get_tensor
 *   comm_cleanup.c  request teardown (soft and forced) and collection of freed records
 */
#ifndef MSTAR_TENSORS_COMM_INTERNAL_H
#define MSTAR_TENSORS_COMM_INTERNAL_H

#include "mstar/tensors.h"

#include "core/owner.h"
#include "core/strmap.h"
#include "core/u64map.h"
#include "core/vec.h"
#include "tensors/bookkeeper.h"
#include "tensors/fanin.h"
#include "tensors/names.h"
#include "tensors/shm.h"
#include "tensors/transport.h"

/* A signal's shard dim in a request's sharding config. */
typedef struct mstar__shard_entry {
    uint32_t signal; /* interned */
    int32_t dim;
} mstar__shard_entry;

/* Per-request state. A slot lives while the request is open, or while any of its records or
 * pending reads remain (deferred by a soft cleanup). */
typedef struct mstar__req {
    mstar_rid rid;
    bool used;
    bool open;          /* false once cleaned up */
    uint32_t npending;  /* pending reads of this request */
    mstar__vec shards;  /* mstar__shard_entry: the sharding config */
    mstar__strmap seen; /* (uuid, next node) deliveries handed out (read_finished) */
    mstar__vec fanins;  /* mstar__fanin * */
    mstar__vec tx;      /* mstar_tx_info */
    mstar__vec rx;      /* mstar_rx_info */
} mstar__req;

/* One edge being read (reference FutureAndPointers with one edge). */
typedef struct mstar__pending {
    uint32_t req;
    mstar_edge edge; /* owned copy; local slices have their uuid rewritten */
    uint8_t *fresh;  /* per descriptor: this delivery read the bytes (owes a transit ref); 2: as
                      * a view, ACKed when its record is collected, not when it lands. Twice
                      * edge.ntensors long: the second half is mstar__pending_local's */
    mstar_completion *done; /* NULL: the bytes have landed */
    uint64_t submit_ns;     /* when the read was started: where its RX time begins (0 unless
                             * the manager profiles: enable_prof) */
    double rx_time_s;       /* a read that landed inside start_read: its whole time (profiled) */
    bool taken; /* landed when the current collection looked (mstar__comm_pending_take) */
} mstar__pending;

/* Per descriptor of `p`: produced by this entity (no ACK, no RX). */
static inline uint8_t *mstar__pending_local(const mstar__pending *p)
{
    return p->fresh + p->edge.ntensors;
}

/* A TENSOR_RECEIVED whose send failed, kept for the next get_ready_tensors. */
typedef struct mstar__ack_retry {
    char peer[MSTAR_NAME_MAX + 1];
    mstar_msg msg;
} mstar__ack_retry;

/* A view's TENSOR_RECEIVED that could not be built when its record was freed (out of memory),
 * owed until a later get_ready_tensors builds it. */
typedef struct mstar__ack_owed {
    mstar_rid rid;
    uint32_t source; /* the producer, in comm->names */
    mstar_tensor_id uuid;
} mstar__ack_owed;

/* A call of at most this many edges, descriptors or outputs keeps its per-call arrays on the
 * stack (mstar__scratch_zalloc): a handoff is mostly one edge of one tensor from one peer, and a
 * heap allocation for it would cost more than the work it serves (docs/architecture.md, "Where a
 * 4 KiB handoff's time goes"). Its maps allocate nothing for a few entries on their own (small
 * mode, core/u64map.h). */
enum { MSTAR__COMM_ON_STACK = 8 };

/* A request slot freed after at most this many deliveries keeps their room for its next
 * request (mstar__comm_req_maybe_free); a larger one's is freed with it. */
enum { MSTAR__REQ_KEEP_SEEN = 64 };

/* ACKs kept for resending; past this the oldest go (logged, counted as lost). */
#define MSTAR__ACK_RETRY_MAX 4096

struct mstar_comm {
    char entity[MSTAR_NAME_MAX + 1];
    mstar_id_gen ids;
    mstar_transport_kind kind;
    bool enable_prof;
    mstar_comm_send_fn send;
    void *send_ctx;
    mstar__owner owner; /* a forked child's destroy releases only its own fds (comm.c) */

    mstar__bk bk;
    mstar__names names;
    mstar__vec reqs;       /* mstar__req, by slot */
    mstar__vec free_reqs;  /* uint32 */
    mstar__u64map rid_int; /* integer rid → slot */
    mstar__strmap rid_str; /* string rid → slot */
    mstar__vec pending;    /* mstar__pending */
    mstar__vec collected;  /* scratch: uint32 record slots */
    mstar__vec req_slots;  /* cleanup's scratch: the record slots of one request, kept between
                            * calls so that a cleanup does not grow it from empty */

    mstar__shm_dir dir;
    bool has_dir;
    char session_id[MSTAR_NAME_MAX + 1]; /* the shared-memory transports' session: the host name */
    mstar_stream *d2h;
    mstar_stream *h2d;
    int event_fd;
    mstar__completion_notice notice; /* event_fd, and the mesh it sends through (hook_mesh) */
    mstar__transport_env env;
    mstar__transport *transport;
    /* mstar_event *: events that ordered start_read_into's copies with a caller's stream, kept
     * for reuse (taken again only once their last record completed; comm_read.c). */
    mstar__vec spare_events;

    /* ACK security (docs/security.md). Once this manager has sent a descriptor of its own
     * through the mesh (or was told of one, mstar_comm_note_sent) it applies an ACK only from a
     * peer it sent that tensor to, for at most the deliveries that peer still owes (the ledger
     * in the bookkeeper); anything else is dropped and counted. */
    bool ack_ledger;
    uint64_t acks_dropped;
    mstar_mesh *hooked_mesh; /* the mesh whose sends feed the ledger, or NULL */
    mstar__vec ack_retry;    /* mstar__ack_retry */
    /* mstar__ack_owed, with room kept for each of the views_owing delivered views whose ACK
     * goes when their record is freed: a view's ACK that cannot be built then is owed, never
     * lost, and keeping it needs no memory. */
    mstar__vec acks_owed;
    size_t views_owing;
    mstar__vec ack_aliases; /* uint32[2]: ACKs from [0] may settle deliveries sent to [1] */
    mstar__strmap expected; /* entities descriptors may come from; empty: any */
    uint64_t acks_lost;     /* ACKs given up: queue full, failed at cleanup, not built */

    /* Producer loans not stored yet (mstar_comm_loan_output): id → mstar__buf *, holding one
     * reference each. Ids are never reused, so a stale one is refused, not mistaken. */
    mstar__u64map loans;
    mstar_loan_id next_loan;
    bool destroying; /* no ACK leaves a manager being destroyed */
};

/* ---- comm.c --------------------------------------------------------------------------------- */

/* The slot of `rid`, creating it (open) when `create`; MSTAR__BK_NONE when absent. */
mstar_status mstar__comm_req(mstar_comm *comm, const mstar_rid *rid, bool create, uint32_t *slot);
mstar__req *mstar__comm_req_at(const mstar_comm *comm, uint32_t slot);
/* Free the slot if it is closed and nothing refers to it any more. */
void mstar__comm_req_maybe_free(mstar_comm *comm, uint32_t slot);
/* Drop a request's config, fan-in buffers, seen set and profiling (teardown), keeping the room
 * of its arrays and of its seen set. */
void mstar__comm_req_reset(mstar__req *r);
/* The shard dim the request's config gives `signal` (interned), -1 if none. */
int32_t mstar__comm_shard_dim(const mstar_comm *comm, const mstar__req *r, uint32_t signal);

/* Whether `entity` is one the deployment named (mstar_comm_expect_entities); any is, when none
 * were named. */
bool mstar__comm_expects(const mstar_comm *comm, const char *entity);

/* Send TENSOR_RECEIVED to each producer of the descriptors: one per source entity, counting each
 * (edge, descriptor) occurrence; this entity's own are skipped. `failed` (may be NULL) marks
 * edges whose read failed: their descriptors go into failed_tensor_ids instead. Every message is
 * built before any is sent: short of memory for one, none is sent, *built (may be NULL) is false
 * and MSTAR_ENOMEM is returned, so the caller may try again. Else *built is true; a message whose
 * send fails is queued for mstar__comm_flush_acks, and the first failure is returned. */
mstar_status mstar__comm_send_acks(mstar_comm *comm, const mstar_rid *rid,
                                   const mstar_edge *const *edges, const bool *failed, uint32_t n,
                                   bool *built);
/* ACKs of `nedges` edges that could not be built (out of memory, the error set) where no later
 * call retries them (a request's cleanup): logged and counted in acks_lost; their producer keeps
 * the tensors until its TTL or a forced cleanup. */
void mstar__comm_ack_given_up(mstar_comm *comm, size_t nedges);
/* Build and send the owed ACKs (those built leave the list), then resend the queued ACKs (those
 * that fail again stay queued). The first failure is returned. */
mstar_status mstar__comm_flush_acks(mstar_comm *comm);
/* The ACK of a view's delivery, owed since it landed (rec has MSTAR__BK_ACK_AT_FREE): its
 * consumer let go of the producer's bytes now. One that cannot be built for memory is owed in
 * the room kept for it. Not from a manager being destroyed, whose sender may be gone. */
void mstar__comm_ack_view(mstar_comm *comm, const mstar__bk_rec *rec);
/* The request's cleanup: its queued ACKs are sent one last time and those that fail again are
 * given up (logged, counted in acks_lost), so a producer that is gone cannot keep every later
 * get_ready_tensors failing. Its other requests' ACKs stay queued. */
void mstar__comm_settle_acks(mstar_comm *comm, const mstar_rid *rid);

/* ---- comm_cleanup.c ------------------------------------------------------------------------- */

/* Release what the collected record slots hold — transport resources first, then the bytes —
 * and recycle the slots (reference cleanup_collectable). Empties comm->collected. */
void mstar__comm_collect(mstar_comm *comm);
/* dereference with collection. */
void mstar__comm_dereference(mstar_comm *comm, mstar_tensor_id uuid, int64_t n);
/* Drop a pending read that will not be delivered: release its transit and usage refs. The
 * caller removes the entry. */
void mstar__comm_pending_drop(mstar_comm *comm, mstar__pending *p);
void mstar__comm_pending_free(mstar__pending *p);
/* Whether a pending read's bytes are all in its buffers (its completion, if any, is done). */
bool mstar__comm_pending_landed(const mstar__pending *p);
/* Mark the request's entries that have landed now (p->taken; the others cleared) and count
 * them, and in *views (when not NULL) their descriptors read as views. A collection works from
 * these marks, not from fresh looks: reads land on other threads, so an entry may land between
 * two passes over the list, and a later pass must not see more entries than the first one
 * counted. */
size_t mstar__comm_pending_take(mstar_comm *comm, uint32_t req, size_t *views);

/* ---- comm_store.c --------------------------------------------------------------------------- */

/* Fill a descriptor for a held record. */
void mstar__comm_fill_info(mstar_comm *comm, const mstar__bk_rec *rec, mstar_tensor_info *info);
/* Give back every loan not stored yet (destroy). */
void mstar__comm_loans_free(mstar_comm *comm);
/* Add bytes/time to the request's TX record of `edge_name` (profiling). */
void mstar__comm_record_tx(mstar_comm *comm, mstar__req *r, uint32_t edge_name, uint64_t bytes,
                           double time_s);

#endif
