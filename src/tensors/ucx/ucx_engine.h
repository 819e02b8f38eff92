/*
 * ucx_engine.h — remote tensor reads over UCX (internal API).
 *
 * The UCX engine is the network route of the communication manager: a producer registers memory
 * and hands out a session id and a remote key per region; a consumer reads byte ranges of that
 * memory into its own buffers. The async reader runs those reads on a pool of threads and gives
 * completion handles. The manager owns one engine (mstar__ucx_engine_create_from_env) and hands
 * it to the UCX transport (ucx_transport.c) in its environment; no other transport has one.
 *
 * How the module fits together: the configuration (environment knobs, "ip:port" session ids)
 * and the remote-key envelope are plain data that travel in descriptors. The engine owns the UCP
 * context, the one progress thread that drives its worker, and the registered regions; endpoints
 * to peers are cached per session, and accepted connections are kept beside them. A read runs
 * one of two protocols (a UCX get, or an active message the producer answers after checking the
 * range) on the progress thread. Above the engine, the async reader batches reads per session on
 * threads of its own and hands out completion handles. ucx_internal.h holds what the .c files
 * share; this header is the API the transport uses.
 *
 * Threads: one progress thread per engine owns the UCP worker; every worker call (endpoints, gets,
 * active messages) runs on it. Other threads hand it batches through a locked queue and an
 * eventfd. Registration works on the UCP context, which is created thread-safe, so
 * register/unregister may be called from any thread. The read handles and the reader are
 * thread-safe; the engine's functions are thread-safe unless noted.
 */
#ifndef MSTAR_TENSORS_UCX_ENGINE_H
#define MSTAR_TENSORS_UCX_ENGINE_H

#include "mstar/core.h"
#include "mstar/tensors.h"
#include "mstar/wire.h"
#include "tensors/completion.h"

#include <pthread.h>

/* ---------------------------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar__ucx_transport {
    MSTAR__UCX_TCP = 0,  /* UCX over TCP sockets (UCX_TLS=tcp) */
    MSTAR__UCX_RDMA = 1, /* UCX over RDMA verbs (UCX_TLS=rc,ud,self); needs a verbs device */
} mstar__ucx_transport;

typedef enum mstar__ucx_read_protocol {
    /* The consumer asks with an active message; the producer checks the range against its
     * registered regions and replies with the bytes (rendezvous for large ones). */
    MSTAR__UCX_READ_AM = 0,
    /* ucp_get_nbx with the unpacked remote key (emulated by UCX over TCP). */
    MSTAR__UCX_READ_GET = 1,
} mstar__ucx_read_protocol;

#define MSTAR__UCX_ADDRESS_MAX 63 /* bytes of an address or host name, without the terminator */

typedef struct mstar__ucx_config {
    mstar__ucx_transport transport;
    mstar__ucx_read_protocol read_protocol;
    /* The address the engine listens on and puts into its session id: a numeric IPv4/IPv6
     * address or a host name resolved once at create. Must be one peers can reach (not a
     * wildcard). */
    char address[MSTAR__UCX_ADDRESS_MAX + 1];
    uint16_t port; /* 0 = an ephemeral port */
    /* AM replies up to this many bytes go eagerly (copied through UCX's buffers: one message);
     * larger ones by rendezvous (UCX puts the producer's memory straight into the consumer's
     * buffer, after a handshake that costs two more trips). */
    uint64_t am_eager_max;
    /* A batch of reads still unfinished this long after it started fails with MSTAR_ETIMEDOUT,
     * and its endpoint is closed (the peer is taken for dead); 0 = wait as long as it takes. */
    double read_timeout_s;
} mstar__ucx_config;

#define MSTAR__UCX_AM_EAGER_MAX_DEFAULT (256 * 1024)
#define MSTAR__UCX_READ_TIMEOUT_DEFAULT 120.0
#define MSTAR__UCX_READ_TIMEOUT_MAX     86400.0 /* a day: beyond that, use 0 (none) */

/* Defaults: tcp, the AM read protocol, 127.0.0.1, port 0, eager AM replies up to 256 KiB, a
 * read timeout of 120 s. */
void mstar__ucx_config_init(mstar__ucx_config *cfg);
/* Overlay the environment knobs MSTAR_UCX_ADDRESS, MSTAR_UCX_PORT, MSTAR_UCX_READ_PROTOCOL,
 * MSTAR_UCX_AM_EAGER_MAX and MSTAR_UCX_READ_TIMEOUT_S (docs/environment.md). MSTAR_EINVAL naming
 * the variable on a bad value; `cfg` is unchanged then. */
mstar_status mstar__ucx_config_from_env(mstar__ucx_config *cfg);
/* "tcp" / "rdma", "am" / "get". */
const char *mstar__ucx_transport_name(mstar__ucx_transport t);
const char *mstar__ucx_read_protocol_name(mstar__ucx_read_protocol p);

/* ---------------------------------------------------------------------------------------------
 * The engine
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar__ucx_engine mstar__ucx_engine;

/* Create a UCP context and worker, open a listener on cfg->address:cfg->port and start the
 * progress thread. MSTAR_ENOTSUP when the transport is rdma and no verbs device exists;
 * MSTAR_EREMOTE when UCX refuses (the message carries UCX's reason); MSTAR_EIO when the address
 * cannot be resolved or bound. Nothing is left behind on failure. */
mstar_status mstar__ucx_engine_create(const mstar__ucx_config *cfg, mstar__ucx_engine **out);

/* The communication manager's engine: the defaults overlaid with the MSTAR_UCX_* knobs
 * (mstar__ucx_config_from_env), over TCP or over RDMA verbs (ucx_config.c). */
mstar_status mstar__ucx_engine_create_from_env(bool rdma, mstar__ucx_engine **out);

/* Stop taking reads, fail those still queued or in flight with MSTAR_ECANCELED (their waiters
 * return; so do the submissions of the engine's reader, which is then destroyed), close every
 * endpoint and the listener, unmap regions still registered (with a warning) and release the
 * worker and context. NULL is a no-op. Must not race with other calls on the same engine, except
 * reads that are waiting (they fail) and the engine's own reader. */
void mstar__ucx_engine_destroy(mstar__ucx_engine *e);

/* "ip:port" of the listener: a valid name (≤ 255 bytes of [A-Za-z0-9_.:-]), fit for a
 * descriptor's source_session_id. Valid for the life of the engine. */
const char *mstar__ucx_engine_session_id(const mstar__ucx_engine *e);

/* The configuration the engine was created with (read_timeout_s as it was at create). */
const mstar__ucx_config *mstar__ucx_engine_config(const mstar__ucx_engine *e);

/* Change the read timeout (cfg.read_timeout_s; 0 = none, else > 0) for batches started from now
 * on; those already started keep the deadline they started with. MSTAR_EINVAL for a negative
 * value, NaN or one above MSTAR__UCX_READ_TIMEOUT_MAX. (A test times out a dead peer quickly and
 * then reads from a live one without racing the clock on a loaded machine.) */
mstar_status mstar__ucx_engine_set_read_timeout(mstar__ucx_engine *e, double seconds);

/* Register [ptr, ptr + nbytes) for remote reads and write its remote key (the envelope of
 * ucx_rkey.c, at most MSTAR_REMOTE_KEY_MAX bytes) to key[0..*key_len). Registering the same
 * (ptr, nbytes) again counts a reference and gives the same key; a different length at a
 * registered ptr is MSTAR_EEXIST; a sub-range of a registered region (another ptr) is a region of
 * its own. nbytes may be 0 (a region nothing can be read from, for zero-size tensors). */
mstar_status mstar__ucx_engine_register(mstar__ucx_engine *e, void *ptr, uint64_t nbytes,
                                        uint8_t key[MSTAR_REMOTE_KEY_MAX], uint32_t *key_len);

/* Drop one reference to the region registered at ptr; the last one refuses new reads of it,
 * waits for replies still sending from it (AM protocol) and unmaps it, so the caller may free
 * the memory when this returns. MSTAR_ENOENT if ptr is not registered. */
mstar_status mstar__ucx_engine_unregister(mstar__ucx_engine *e, void *ptr);

/* The remote key of the region registered at ptr (as register gave it). MSTAR_ENOENT if ptr is
 * not registered. */
mstar_status mstar__ucx_engine_key(mstar__ucx_engine *e, const void *ptr,
                                   uint8_t key[MSTAR_REMOTE_KEY_MAX], uint32_t *key_len);

typedef struct mstar__ucx_engine_stats {
    size_t regions;      /* registered regions (distinct ptrs) */
    size_t peers;        /* cached outgoing endpoints (sessions this engine reads from) */
    size_t accepted;     /* endpoints accepted by the listener */
    size_t reads_active; /* reads started on the worker and not yet finished */
    uint64_t reads_done; /* reads finished, successfully or not, since create */
    uint64_t batches;    /* batches started since create */
    uint64_t am_refused; /* AM read requests this engine refused as producer */
} mstar__ucx_engine_stats;

/* A consistent snapshot (taken on the progress thread). */
void mstar__ucx_engine_get_stats(mstar__ucx_engine *e, mstar__ucx_engine_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Reads (reference TransferReadInfo)
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar__ucx_read_info {
    const char *session;       /* the producer's session id (source_session_id) */
    void *local_ptr;           /* where the bytes land; nbytes writable bytes */
    uint64_t remote_addr;      /* producer address (descriptor address + offset) */
    uint64_t nbytes;           /* 0 is a read that completes at once */
    const uint8_t *remote_key; /* the envelope from the producer's register */
    uint32_t remote_key_len;
} mstar__ucx_read_info;

/* Read a batch whose infos all name the same session, with the engine's configured protocol, and
 * block until every read has finished (the local buffers are no longer written by anyone). The
 * session and keys are validated first (MSTAR_EPROTO naming the field; nothing is read then). A
 * failed read fails the batch with the first error: MSTAR_EREMOTE (connection, refusal by the
 * producer), MSTAR_EPROTO (a malformed reply), MSTAR_ETIMEDOUT (cfg.read_timeout_s) or
 * MSTAR_ECANCELED (engine destroyed). Called by
 * the reader's threads; any thread may call it. */
mstar_status mstar__ucx_engine_read(mstar__ucx_engine *e, const mstar__ucx_read_info *infos,
                                    size_t n);

/* The same with an explicit protocol (tests and the benchmark compare the two). */
mstar_status mstar__ucx_engine_read_with(mstar__ucx_engine *e, mstar__ucx_read_protocol proto,
                                         const mstar__ucx_read_info *infos, size_t n);

/* read_with in two halves, for a caller that keeps several batches in flight (the reader).
 * begin checks the batch as read_with does and queues it (on an error nothing is queued and *out
 * is NULL); the infos' session strings and keys must stay valid until the batch ends. end waits
 * for it, releases it and returns its status (mstar_last_error() its message). Every batch begun
 * must be ended, also when the engine is being destroyed (it fails then). n >= 1. */
typedef struct mstar__ucx_batch mstar__ucx_batch;
mstar_status mstar__ucx_engine_read_begin(mstar__ucx_engine *e, mstar__ucx_read_protocol proto,
                                          const mstar__ucx_read_info *infos, size_t n,
                                          mstar__ucx_batch **out);
/* Block until one of batches[0..n) (n >= 1, all begun and not ended) has finished, and return
 * its index — or until `interrupt(ctx)` (may be NULL) is true after a read_kick of `wake`, and
 * return n. `wake` is the caller's own condition: the batches' finishes signal it (and no other
 * thread), from now until they end; one caller, one condition. `interrupt` runs with the
 * engine's lock held: it may only read (an atomic, say). */
size_t mstar__ucx_engine_read_wait_any(mstar__ucx_engine *e, mstar__ucx_batch *const *batches,
                                       size_t n, pthread_cond_t *wake, bool (*interrupt)(void *ctx),
                                       void *ctx);
/* Wake the read_wait_any that sleeps on `wake` (if any) to look at its `interrupt` (after making
 * it true). */
void mstar__ucx_engine_read_kick(mstar__ucx_engine *e, pthread_cond_t *wake);
mstar_status mstar__ucx_engine_read_end(mstar__ucx_engine *e, mstar__ucx_batch *b);

/* ---------------------------------------------------------------------------------------------
 * The async reader (reference AsyncMooncakeReader)
 * ------------------------------------------------------------------------------------------- */

#define MSTAR__UCX_READER_THREADS 3   /* reference max_workers */
#define MSTAR__UCX_READER_BATCH   500 /* reference max_batch_size */

typedef struct mstar__ucx_reader mstar__ucx_reader;

/* The engine's own reader (reference get_async_reader), created on the first call with the
 * reference's defaults and destroyed by mstar__ucx_engine_destroy in the right order: reads
 * still queued or running then fail with MSTAR_ECANCELED rather than wait for their peers. */
mstar_status mstar__ucx_engine_reader(mstar__ucx_engine *e, mstar__ucx_reader **out);

/* A reader over `engine` with `threads` worker threads (1..64) that cut each session's reads
 * into batches of at most `max_batch` (1..65536). The engine must outlive a reader made here;
 * mstar__ucx_engine_reader gives one the engine owns. */
mstar_status mstar__ucx_reader_create(mstar__ucx_engine *engine, unsigned threads,
                                      unsigned max_batch, mstar__ucx_reader **out);

/* Queue a list of reads (copied: infos, session strings and keys may be freed on return); one
 * of the reader's threads groups them by session and reads each group in batches. *out is a
 * completion handle (mstar/tensors.h: poll, wait, release) the caller owns; when it finishes,
 * `notice` is told (NULL: nobody; tensors/completion.h). An empty list gives a handle that is
 * already complete. MSTAR_ECLOSED after shutdown. The local buffers must stay valid until the
 * handle finishes. One handle's failure says nothing about any other handle (T-11). */
mstar_status mstar__ucx_reader_submit(mstar__ucx_reader *r, const mstar__ucx_read_info *infos,
                                      size_t n, const mstar__completion_notice *notice,
                                      mstar_completion **out);

/* Work that finishes a submission on the reader's thread once its reads are over (a device
 * consumer's host-to-device copies out of the pinned buffer the reads landed in). `reads` is how
 * the reads ended; what it returns is the handle's status, with mstar_last_error() as its
 * message on failure (a failure of the reads is returned as it came). It runs on every path,
 * the reads' failure and the engine's destruction included, so it may own and release `ctx`. */
typedef mstar_status (*mstar__ucx_then_fn)(void *ctx, mstar_status reads);

/* mstar__ucx_reader_submit with `then` (NULL: none) run before the handle completes. When this
 * returns an error, `then` never runs and `ctx` stays the caller's. An empty list runs it here,
 * on the caller's thread. */
mstar_status mstar__ucx_reader_submit_then(mstar__ucx_reader *r, const mstar__ucx_read_info *infos,
                                           size_t n, const mstar__completion_notice *notice,
                                           mstar__ucx_then_fn then, void *ctx,
                                           mstar_completion **out);

/* Submissions not yet complete. */
size_t mstar__ucx_reader_inflight(mstar__ucx_reader *r);

/* Block until nothing is in flight. Returns the first error of a submission that failed since the
 * previous wait_all (and forgets it, so one failure is reported once), else MSTAR_OK. */
mstar_status mstar__ucx_reader_wait_all(mstar__ucx_reader *r);

/* Refuse new submissions, let queued and running ones finish, join the threads. Idempotent. */
void mstar__ucx_reader_shutdown(mstar__ucx_reader *r);

/* shutdown, then free. Handles still held by callers stay valid until released. NULL: no-op. */
void mstar__ucx_reader_destroy(mstar__ucx_reader *r);

#endif
