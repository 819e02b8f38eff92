/*
 * ucx_internal.h — the structures the UCX engine's files share (see ucx_engine.h for the map).
 *
 * Ownership and threads, in one place:
 *   - e->lock guards the command queue, the region tables, `stopping` and every `done` flag of a
 *     batch; e->cond is broadcast when a region stops sending or a batch finishes — a batch
 *     that a read_wait_any caller watches signals that caller's own condition instead, so a
 *     finish wakes the one thread that waits for it.
 *   - Everything else here (peers, the session cache, pending AM reads, ops) belongs to the
 *     progress thread alone; other threads never touch it.
 */
#ifndef MSTAR_TENSORS_UCX_INTERNAL_H
#define MSTAR_TENSORS_UCX_INTERNAL_H

#include "tensors/ucx/ucx_engine.h"

#include "core/strmap.h"
#include "core/u64map.h"
#include "core/vec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

/* Active-message ids of the AM read protocol (small: UCX keeps an array indexed by id). */
#define MSTAR__UCX_AM_READ_REQ   1
#define MSTAR__UCX_AM_READ_REPLY 2

/* AM headers, little-endian on the wire:
 *   request: req_id u64 | region_id u64 (0: none, find the region by address) | addr u64 | len u64
 *   reply:   req_id u64 | code u32 | 0 u32 | len u64 */
#define MSTAR__UCX_AM_REQ_LEN   32
#define MSTAR__UCX_AM_REPLY_LEN 24

static inline void mstar__ucx_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t mstar__ucx_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Reply codes: why a producer refused a read. */
enum {
    MSTAR__UCX_REPLY_OK = 0,
    MSTAR__UCX_REPLY_NOT_REGISTERED = 1, /* no live region with that id */
    MSTAR__UCX_REPLY_OUT_OF_RANGE = 2,   /* the range leaves the region */
    MSTAR__UCX_REPLY_NO_REGION = 3,      /* (no key) no region holds the range */
};

/* ---- regions (producer side) ---------------------------------------------------------------- */

typedef struct mstar__ucx_region {
    uint64_t id; /* never 0; never reused within an engine */
    uint64_t base;
    uint64_t len;
    ucp_mem_h memh;   /* NULL for a zero-length region */
    uint32_t refs;    /* registrations of (base, len) */
    uint32_t sending; /* AM replies in flight from this memory */
    uint32_t key_len;
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
} mstar__ucx_region;

typedef struct mstar__ucx_engine mstar__ucx_engine;

/* ucx_regions.c; the lookups run with e->lock held. */
void mstar__ucx_regions_init(mstar__ucx_engine *e);
/* Unmap what is still registered (with a warning) and free the tables (destroy). */
void mstar__ucx_regions_free(mstar__ucx_engine *e);
mstar__ucx_region *mstar__ucx_region_by_id(const mstar__ucx_engine *e, uint64_t id);
/* A live region that holds all of [addr, addr + len), or NULL. */
mstar__ucx_region *mstar__ucx_region_containing(const mstar__ucx_engine *e, uint64_t addr,
                                                uint64_t len);
/* Whether [addr, addr + len) lies inside the region. */
bool mstar__ucx_region_covers(const mstar__ucx_region *r, uint64_t addr, uint64_t len);

/* ---- the remote-key envelope (ucx_rkey.c) --------------------------------------------------- */

typedef struct mstar__ucx_key_view {
    uint64_t region_id;
    uint64_t base;
    uint64_t len;
    const uint8_t *ucx_rkey; /* UCX's packed key; points into the envelope */
    uint32_t ucx_rkey_len;
} mstar__ucx_key_view;

/* Build the envelope around UCX's packed key. MSTAR_ERANGE if it does not fit. */
mstar_status mstar__ucx_key_pack(const mstar__ucx_key_view *v, uint8_t *out, uint32_t cap,
                                 uint32_t *out_len);
/* Parse and check an envelope that came from another process: magic, version, lengths, a region
 * id, base + len without overflow, and the structure of UCX's packed key (so that UCX, which
 * takes no length, never reads past it). MSTAR_EPROTO naming `what` on any fault. */
mstar_status mstar__ucx_key_parse(const uint8_t *key, uint32_t len, const char *what,
                                  mstar__ucx_key_view *out);

/* ---- configuration helpers (ucx_config.c) --------------------------------------------------- */

/* Parse a session id "ip:port" (numeric IPv4 or IPv6, port 1..65535) into a socket address.
 * MSTAR_EPROTO naming `what` otherwise. */
mstar_status mstar__ucx_session_parse(const char *session, const char *what,
                                      struct sockaddr_storage *out, socklen_t *out_len);
/* Resolve cfg->address to the address to listen on. MSTAR_EIO / MSTAR_EINVAL with a message. */
mstar_status mstar__ucx_address_resolve(const char *address, uint16_t port,
                                        struct sockaddr_storage *out, socklen_t *out_len);
/* "ip:port" of a socket address into buf (MSTAR_NAME_MAX + 1 bytes). */
mstar_status mstar__ucx_session_format(const struct sockaddr *sa, char *buf, size_t cap);
/* Read UCX's configuration and set UCX_TLS for the transport unless the user set it. */
mstar_status mstar__ucx_config_read(mstar__ucx_transport transport, ucp_config_t **out);
/* MSTAR_OK if a verbs device exists, MSTAR_ENOTSUP with the reason otherwise. */
mstar_status mstar__ucx_rdma_available(void);

/* ---- peers and reads (progress thread only) ------------------------------------------------- */

typedef struct mstar__ucx_peer {
    mstar__ucx_engine *e;
    struct mstar__ucx_peer *next;     /* e->peers: every peer not yet freed */
    char session[MSTAR_NAME_MAX + 1]; /* "" for accepted endpoints */
    ucp_ep_h ep;                      /* NULL once closed */
    bool accepted;                    /* created by the listener */
    bool cached;                      /* in e->sessions */
    bool failed;                      /* the endpoint reported an error */
    bool closing;                     /* ucp_ep_close_nbx issued */
    mstar_status fail_status;         /* what reads on it fail with once it failed */
    uint32_t ops;                     /* reads using this peer */
    char error[192];                  /* why it failed, for the reads' messages */
} mstar__ucx_peer;

/* One read: a range of the peer's memory into a local buffer. */
typedef struct mstar__ucx_op {
    mstar__ucx_batch *batch;
    mstar__ucx_peer *peer;
    void *local;
    uint64_t raddr;
    uint64_t len;
    mstar__ucx_key_view key;
    ucp_rkey_h rkey; /* get: the unpacked key */
    uint64_t req_id; /* AM: the id in e->pending, 0 when not there */
    int outstanding; /* UCX requests that still reference this op or its buffer */
    bool decided;    /* the result is known (it may still wait for outstanding) */
    bool finished;   /* counted in the batch */
    mstar_status status;
    uint8_t req_hdr[MSTAR__UCX_AM_REQ_LEN]; /* AM request header; lives until the send ends */
} mstar__ucx_op;

struct mstar__ucx_batch {
    mstar__ucx_batch *next;          /* e->queue */
    mstar__ucx_batch *wnext;         /* e->waiting */
    mstar__ucx_batch *anext, *aprev; /* e->active: started, not finished (progress thread) */
    mstar__ucx_peer *peer;           /* the session's endpoint, once started */
    uint64_t deadline_ns;            /* 0 = none */
    uint64_t timeout_ns;             /* the read timeout when it started (0 = none) */
    bool started;                    /* in e->active */
    mstar__ucx_read_protocol proto;
    const char *session;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    mstar__ucx_op *ops;
    size_t n;
    size_t remaining;     /* ops not finished (progress thread) */
    bool done;            /* under e->lock */
    pthread_cond_t *wake; /* under e->lock: read_wait_any's caller's, else NULL (e->cond) */
    mstar_status status;
    char error[256];
};

struct mstar__ucx_engine {
    mstar__ucx_config cfg;
    char session[MSTAR_NAME_MAX + 1];
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_listener_h listener;
    int wake_fd;  /* eventfd: work queued or stop requested */
    int epoll_fd; /* wake_fd + the worker's event fd */
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    mstar__ucx_batch *queue;   /* batches not started yet (LIFO; order is free) */
    mstar__ucx_batch *waiting; /* every batch a reader waits on, started or not */
    bool stopping;
    mstar__u64map regions_by_ptr; /* base → region */
    mstar__u64map regions_by_id;  /* id → region (live regions only) */
    mstar__vec regions_by_base;   /* the live regions, sorted by base (unique) */
    uint64_t regions_max_len;     /* the longest region ever registered */
    mstar__ucx_reader *reader;    /* the engine's own, made on demand */
    uint64_t next_region_id;
    atomic_uint_fast64_t read_timeout_ns; /* cfg.read_timeout_s, or set_read_timeout's; 0 = none */

    /* progress thread only */
    bool shutting_down; /* shutdown started: failures are cancellations */
    bool reap_needed;   /* a peer failed, closed or lost its last op */
    mstar__ucx_batch *active;
    mstar__ucx_peer *peers;
    mstar__strmap sessions; /* session → peer (outgoing, not failed) */
    mstar__u64map pending;  /* AM req_id → op waiting for its reply */
    uint64_t next_req_id;

    atomic_size_t stat_peers;
    atomic_size_t stat_accepted;
    atomic_size_t stat_active;
    atomic_uint_fast64_t stat_done;
    atomic_uint_fast64_t stat_batches;
    atomic_uint_fast64_t stat_refused;
};

/* The condition a batch's finish is signalled on (e->lock held). */
static inline pthread_cond_t *mstar__ucx_batch_cond(mstar__ucx_engine *e, mstar__ucx_batch *b)
{
    return b->wake != NULL ? b->wake : &e->cond;
}

/* ucx_peer.c */
/* The cached endpoint for a batch's session, connecting on first use. NULL with batch->error set
 * when the endpoint cannot even be created. */
mstar__ucx_peer *mstar__ucx_peer_get(mstar__ucx_engine *e, mstar__ucx_batch *b);
/* The listener's connection handler. */
void mstar__ucx_peer_on_conn_request(ucp_conn_request_h req, void *arg);
/* Free peers that are closed and unused; start closing failed ones. */
void mstar__ucx_peer_reap(mstar__ucx_engine *e);
/* Take a peer for dead: out of the cache, its waiting reads failed with `st` and `why` (as are
 * those UCX fails later), its endpoint closed at the next reap. No-op if it already failed. */
void mstar__ucx_peer_fail(mstar__ucx_engine *e, mstar__ucx_peer *p, mstar_status st,
                          const char *why);
/* Close every endpoint (shutdown). */
void mstar__ucx_peer_close_all(mstar__ucx_engine *e);
/* True while some peer is not freed yet. */
bool mstar__ucx_peer_any(const mstar__ucx_engine *e);
/* After the worker is destroyed: free what is left. */
void mstar__ucx_peer_free_all(mstar__ucx_engine *e);
/* An op finished using the peer: drop its reference (the peer may be freed at the next reap). */
void mstar__ucx_peer_op_done(mstar__ucx_peer *p);

/* ucx_read.c */
/* Register the AM handlers on the worker. */
mstar_status mstar__ucx_read_setup(mstar__ucx_engine *e);
/* Start every op of a batch (progress thread). */
void mstar__ucx_batch_start(mstar__ucx_engine *e, mstar__ucx_batch *b);
/* Time out the batches past their deadline; the milliseconds until the next deadline (-1: none). */
int mstar__ucx_batch_expire(mstar__ucx_engine *e);
/* Fail a batch none of whose ops started (queue drained at shutdown, no endpoint). */
void mstar__ucx_batch_fail(mstar__ucx_engine *e, mstar__ucx_batch *b, mstar_status st,
                           const char *msg);
/* Fail the AM reads waiting for a reply from `peer` (NULL: all of them). */
void mstar__ucx_read_fail_pending(mstar__ucx_engine *e, const mstar__ucx_peer *peer,
                                  mstar_status st, const char *msg);
/* "what: UCX says <status string>" as a status code for UCX failures. */
mstar_status mstar__ucx_error(ucs_status_t st, const char *fmt, ...) MSTAR_PRINTF(2, 3);

#endif
