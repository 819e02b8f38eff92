/*
 * mstar/tensors.h — tensor transport between the workers of one machine (design.md "Descriptors and
 * edges", "Transports", "Sharding", "Transfer statistics").
 *
 * A communication manager (mstar_comm) is one entity's view of every tensor it holds:
 *   - as a producer it stores a step's outputs under fresh tensor ids, counts references to them
 *     (signed: persisted tensors may go negative, design.md "Persist"), stages them for other
 *     processes and frees them when every consumer has acknowledged (TENSOR_RECEIVED) or the
 *     request is torn down;
 *   - as a consumer it reads descriptors other entities sent, acknowledges each delivery once
 *     its bytes have landed, gathers sharded inputs (fan-in) and hands the tensors to the node.
 *
 * Transports: "local" (one process: nothing is staged, only this entity's tensors can be read),
 * "files" (one file per tensor in the shm directory), "arena" (named shared-memory segments
 * with an allocator, spilling to files when full) and "ucx-tcp" / "ucx-rdma" (other machines
 * read the tensor's memory over UCX — a device tensor through a pinned host copy; MSTAR_UCX_*
 * knobs, see docs/remote-transport.md). MSTAR_SHM_ARENA picks files (0) or the arena (1, AUTO);
 * every entity of a deployment must use the same setting (an arena descriptor cannot be read by a
 * files consumer, which fails loudly; a files descriptor is read by both).
 *
 * Devices: without a backend every tensor is host memory. With a backend (mstar/device.h)
 * tensors on the backend's device are staged with device-to-host copies (synchronised before
 * registration returns) and reads land in the backend's memory through host-to-device copies
 * whose completion gates the acknowledgement (over UCX, ordered after the work the caller queued
 * on the runtime's default stream before the read started).
 *
 * Threads: a manager belongs to one thread (its worker's loop). Completion handles may be
 * polled, waited on and released from any thread.
 *
 * Ownership: arrays returned inside the result structs (mstar_stored_outputs, mstar_ready_set,
 * mstar_completion_list) belong to the struct and are freed by its _clear function; the
 * profiling getters return malloc'd arrays the caller frees with free(). Descriptors are plain
 * data. Tensor views returned by mstar_comm_get_tensor point into memory the manager owns; they
 * are valid until the tensor's last reference is released or its request is force-cleaned.
 */
#ifndef MSTAR_TENSORS_H
#define MSTAR_TENSORS_H

#include "mstar/core.h"
#include "mstar/device.h"
#include "mstar/mesh.h"
#include "mstar/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mstar_comm mstar_comm;
typedef struct mstar_completion mstar_completion;

/* ---------------------------------------------------------------------------------------------
 * Completion handles: a result to poll or wait on
 * ------------------------------------------------------------------------------------------- */

/* MSTAR_OK once the work finished, MSTAR_EAGAIN while it runs, or the error it failed with
 * (mstar_last_error() then carries its message). Never blocks. */
MSTAR_API mstar_status mstar_completion_poll(mstar_completion *c);
/* Block up to timeout_ms (-1: forever) for the work; MSTAR_ETIMEDOUT if it is still running. */
MSTAR_API mstar_status mstar_completion_wait(mstar_completion *c, int timeout_ms);
/* Drop the caller's reference. NULL is ignored. */
MSTAR_API void mstar_completion_release(mstar_completion *c);

typedef struct mstar_completion_list {
    uint32_t n;
    mstar_completion **items; /* each holds a reference the list owns */
} mstar_completion_list;

/* Release every handle and free the array. */
MSTAR_API void mstar_completion_list_clear(mstar_completion_list *list);

/* ---------------------------------------------------------------------------------------------
 * Creating a manager
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_transport_kind {
    MSTAR_TRANSPORT_DEFAULT = 0, /* MSTAR_SHM_ARENA: 0 → files, 1 or AUTO → arena */
    MSTAR_TRANSPORT_LOCAL = 1,
    MSTAR_TRANSPORT_FILES = 2,
    MSTAR_TRANSPORT_ARENA = 3,
    MSTAR_TRANSPORT_UCX_TCP = 4,  /* remote reads over UCX on TCP (docs/remote-transport.md) */
    MSTAR_TRANSPORT_UCX_RDMA = 5, /* remote reads over UCX on RDMA verbs (needs a verbs device) */
} mstar_transport_kind;

/* "local", "files", "arena", "ucx-tcp", "ucx-rdma"; NULL for an unknown kind. */
MSTAR_API const char *mstar_transport_kind_name(mstar_transport_kind kind);
/* Parse one of those names (case-insensitive). */
MSTAR_API mstar_status mstar_transport_kind_from_name(const char *name, mstar_transport_kind *out);
/* The library form of --tensor-comm-protocol: "shm" → MSTAR_TRANSPORT_DEFAULT (MSTAR_SHM_ARENA
 * picks files or the arena), "tcp" → MSTAR_TRANSPORT_UCX_TCP, "rdma" → MSTAR_TRANSPORT_UCX_RDMA
 * (case-insensitive). MSTAR_EINVAL naming the value otherwise. */
MSTAR_API mstar_status mstar_transport_kind_from_protocol(const char *protocol,
                                                          mstar_transport_kind *out);

/* How the manager sends a control message (ACKs) to another entity. It must not keep `msg`. */
typedef mstar_status (*mstar_comm_send_fn)(void *ctx, const char *peer, mstar_msg *msg);

/* A ready-made sender over the control mesh: ctx is the mstar_mesh *. A peer whose queue is
 * full is retried for up to 5 s (it drains its inbox in its loop) before the error is returned. */
MSTAR_API mstar_status mstar_comm_send_via_mesh(void *mesh, const char *peer, mstar_msg *msg);

typedef struct mstar_comm_options {
    const char *entity;   /* required: this process's name on the mesh */
    int32_t entity_index; /* for tensor ids; -1: mstar_entity_index(entity) */
    mstar_transport_kind transport;
    const char *shm_dir;       /* NULL: /dev/shm, else /tmp/mstar_shm */
    const char *shm_namespace; /* NULL: none; see below */
    const char *session_id;    /* NULL: the host name; must be NULL for UCX (its listener's) */
    mstar_backend *backend;    /* NULL: host tensors only; borrowed, must outlive the comm */
    mstar_comm_send_fn send;   /* required for any ACK to leave the process */
    void *send_ctx;
    bool enable_prof; /* record TX/RX info (design.md "Transfer statistics") */
} mstar_comm_options;

/* shm_namespace: tensor ids restart with every process, so the per-uuid file of one deployment
 * can have the name of another's. Deployments that share one shm directory must each set a
 * distinct namespace (1..32 letters and digits, the same for every entity of a deployment), or
 * use a directory of their own. Arena segment names are unique per process either way. */

/* Defaults: entity_index -1, transport DEFAULT, everything else zero/NULL. */
MSTAR_API void mstar_comm_options_init(mstar_comm_options *opts);

/* Validate the options and the transport's knobs (docs/environment.md), open the shm directory,
 * sweep what dead processes left there (design.md "Transports"), create the arena's first
 * segment. */
MSTAR_API mstar_status mstar_comm_create(const mstar_comm_options *opts, mstar_comm **out);
/* Release every tensor, staged file, segment and mapping. Waits for reads in flight. In a forked
 * child (any process but the one that created it) it closes the manager's own fds only and
 * touches nothing the parent still uses (docs/security.md "Forked children"). */
MSTAR_API void mstar_comm_destroy(mstar_comm *comm);

MSTAR_API const char *mstar_comm_entity(const mstar_comm *comm);
MSTAR_API mstar_transport_kind mstar_comm_transport(const mstar_comm *comm);
/* The session placed in descriptors: the UCX listener's ip:port, else the host name. */
MSTAR_API const char *mstar_comm_session_id(const mstar_comm *comm);
/* True for transports that send from host memory, so host copies the caller already has
 * (mstar_output.host_copy) are kept for the send. */
MSTAR_API bool mstar_comm_needs_cpu_tensor(const mstar_comm *comm);
/* True when registration writes fields onto descriptors that a copy made before it (a sharded
 * clone) lacks, so mstar_comm_refresh_shm_placement must run on every edge leaving the process:
 * the arena (shm_segment, shm_offset; design.md "Placement refresh") and UCX (source_session_id,
 * address, remote_key). False for local and files. */
MSTAR_API bool mstar_comm_stamps_shm_placement(const mstar_comm *comm);
/* Tensors held right now (produced and read). */
MSTAR_API size_t mstar_comm_num_tensors(const mstar_comm *comm);

/* ---------------------------------------------------------------------------------------------
 * Requests and sharding
 * ------------------------------------------------------------------------------------------- */

/* The shard dim of each signal of a request: signals absent
 * or with dim -1 are replicated. */
typedef struct mstar_sharding_config {
    uint32_t nsignals;
    const char *const *signals;
    const int32_t *shard_dims;
} mstar_sharding_config;

/* Remember the request's sharding config (copied; NULL: nothing sharded). Calling it again
 * replaces the config. */
MSTAR_API mstar_status mstar_comm_register_request(mstar_comm *comm, const mstar_rid *rid,
                                                   const mstar_sharding_config *config);

/* A tensor-parallel group as fan-out sees it (its size and its workers). */
typedef struct mstar_shard_group {
    int32_t tp_size;
    const char *const *workers; /* tp_size entity names, by rank */
} mstar_shard_group;

/* The per-destination clones of an edge (fan-out). */
typedef struct mstar_fanout {
    uint32_t n;
    char (
        *workers)[MSTAR_NAME_MAX + 1]; /* destination worker; "" for a destination with no group */
    mstar_edge *edges;                 /* owned; total_fanin and shard_dim set */
} mstar_fanout;

MSTAR_API void mstar_fanout_clear(mstar_fanout *fanout);

/* Fan `edge` (descriptors in canonical layout) out from rank `src_rank` of `src` (NULL: a
 * special source such as the api server, one rank) to the workers of `dst` (NULL: one pseudo
 * destination ""). shard_dim -1: replicated — the source worker itself if it is a destination,
 * and from rank 0 every destination outside the source group, each with the whole descriptors.
 * Otherwise each destination rank whose range overlaps this source's rows gets descriptors with
 * dims[0], nbytes and an offset LOCAL to this source's shard (design.md "Sharding", T-9).
 * MSTAR_EINVAL when the total rows do not divide among the destination ranks or a descriptor has no
 * dims. */
MSTAR_API mstar_status mstar_edge_fanout(const mstar_edge *edge, int32_t shard_dim,
                                         const mstar_shard_group *src, int32_t src_rank,
                                         const mstar_shard_group *dst, mstar_fanout *out);

/* ---------------------------------------------------------------------------------------------
 * Producer: storing outputs
 * ------------------------------------------------------------------------------------------- */

/* A loan of output memory (mstar_comm_loan_output); 0 is no loan. */
typedef uint64_t mstar_loan_id;

/* Called once when the manager no longer needs memory the caller handed over. */
typedef void (*mstar_release_fn)(void *ctx, void *data);

typedef struct mstar_output {
    uint32_t request;   /* batch form: index into the request array; ignored otherwise */
    const char *signal; /* the output's name; outputs of one name keep their order */
    mstar_tensor tensor;
    /* Ownership of tensor's bytes. release != NULL: the manager takes them and calls release
     * once done (at once when it made its own contiguous or canonical copy). release == NULL:
     * the manager copies the bytes and the caller keeps its buffer. */
    mstar_release_fn release;
    void *release_ctx;
    /* An optional host copy the caller already made (host_copy.data == NULL: none), owned the
     * same way through host_release. Kept for the send when mstar_comm_needs_cpu_tensor. */
    mstar_tensor host_copy;
    mstar_release_fn host_release;
    void *host_release_ctx;
    /* The loan `tensor` lives in (0: none). Storing takes it: nothing is copied, `release`
     * must be NULL, and `tensor` must start at the loan's first byte and fit in it. */
    mstar_loan_id loan;
} mstar_output;

/* Where outputs come from: stamped into every descriptor. */
typedef struct mstar_store_params {
    const char *node_name;  /* NULL: none */
    const char *graph_walk; /* NULL: none */
    int32_t tp_size;        /* the producing group's TP size (0 is taken as 1) */
    int32_t tp_rank;
} mstar_store_params;

/* Device work: the manager's staging copies run on a stream ordered after the runtime's default
 * stream; work the caller queued on other streams must be waited for (the step's completion
 * event) before storing: storing never synchronises a stream. */

/* Store one request's outputs (ref 0 each, no safety hold) and write their descriptors into
 * infos[0..n). Sharded signals (register_request) are stored in canonical layout; non-contiguous
 * tensors are made contiguous. On error nothing is stored, and memory handed over with a release
 * function stays the caller's. */
MSTAR_API mstar_status mstar_comm_store_and_return_tensor_info(
    mstar_comm *comm, const mstar_rid *rid, const mstar_output *outputs, uint32_t n,
    const mstar_store_params *params, mstar_tensor_info *infos);

/* Loans: output memory the manager lends, so that staging an output copies nothing. *tensor
 * (contiguous host memory of `dtype` and `shape`) and *loan describe it. Over the arena it is a
 * slot of this process's segments (pinned like them for a device backend): compute into it,
 * store it (mstar_output.loan), and staging publishes the slot in place, whose stamp is written
 * then. Other transports, and an arena with no room right now, lend plain host memory, stored
 * the same way and staged as any output is, so a caller need not know which it got. A loan is
 * stored once; one that will not be is given back with mstar_comm_loan_release. Storing or
 * releasing a loan already stored or given back is MSTAR_ESTATE, and a failed store keeps the
 * loan open. Once stored, the bytes are the tensor's: the caller must not write them again. */
MSTAR_API mstar_status mstar_comm_loan_output(mstar_comm *comm, mstar_dtype dtype,
                                              const int64_t *shape, int32_t ndim,
                                              mstar_tensor *tensor, mstar_loan_id *loan);
MSTAR_API mstar_status mstar_comm_loan_release(mstar_comm *comm, mstar_loan_id loan);

/* The graph runner's loaner over a manager (mstar_output_loaner in <mstar/graphs.h>, with
 * `user` the mstar_comm *): { mstar_comm_output_loan, mstar_comm_output_loan_release, comm }.
 * It lends as mstar_comm_loan_output does, the id being the mstar_loan_id, but only a transport
 * slot: with no arena, or no room in it now, it is MSTAR_ENOSPC and the runner leaves that
 * output static (stored by copy, as without a loan). The release gives a loan back as
 * mstar_comm_loan_release does, logging a loan already stored or given back. */
MSTAR_API mstar_status mstar_comm_output_loan(void *comm, mstar_dtype dtype, const int64_t *shape,
                                              int32_t ndim, mstar_tensor *tensor, uint64_t *id);
MSTAR_API void mstar_comm_output_loan_release(void *comm, uint64_t id);

/* Stored outputs: index-parallel columns, one entry per stored tensor, in mint order (request-
 * major, then signal order, then the order of the outputs). */
typedef struct mstar_stored_outputs {
    uint32_t n;
    mstar_tensor_id *flat_uuids;
    uint32_t *flat_rids;   /* index into the request array */
    uint32_t *signal_idxs; /* index into the signal array */
    uint32_t *num_tensors; /* nrequests × nsignals, request-major */
} mstar_stored_outputs;

MSTAR_API void mstar_stored_outputs_clear(mstar_stored_outputs *out);

/* Store a batch: outputs[i].request names its request. Outputs whose signal is not in
 * `signals` are not stored (their release runs at once). Atomic as the single form. */
MSTAR_API mstar_status mstar_comm_store_and_return_tensor_info_batch(
    mstar_comm *comm, const mstar_rid *rids, uint32_t nrequests, const mstar_output *outputs,
    uint32_t noutputs, const char *const *signals, uint32_t nsignals,
    const mstar_store_params *params, mstar_stored_outputs *out);

/* The descriptor of a held tensor (with its arena placement once staged). */
MSTAR_API mstar_status mstar_comm_tensor_info(mstar_comm *comm, mstar_tensor_id uuid,
                                              mstar_tensor_info *out);

/* ---------------------------------------------------------------------------------------------
 * Reference counts (design.md "Reference counts"). An unknown uuid is a logged no-op (MSTAR_OK); a
 * count that is not positive is MSTAR_EINVAL. Collection happens only in dereference, set_persist
 * and teardown.
 * ------------------------------------------------------------------------------------------- */

MSTAR_API mstar_status mstar_comm_increment_ref(mstar_comm *comm, mstar_tensor_id uuid, int64_t n);
MSTAR_API mstar_status mstar_comm_increment_ref_batch_uniform(mstar_comm *comm,
                                                              const mstar_tensor_id *uuids,
                                                              uint32_t n, int64_t count);
MSTAR_API mstar_status mstar_comm_dereference(mstar_comm *comm, mstar_tensor_id uuid, int64_t n);
MSTAR_API mstar_status mstar_comm_dereference_batch(mstar_comm *comm, const mstar_tensor_id *uuids,
                                                    const int64_t *counts, uint32_t n);
MSTAR_API mstar_status mstar_comm_dereference_batch_uniform(mstar_comm *comm,
                                                            const mstar_tensor_id *uuids,
                                                            uint32_t n, int64_t count);
MSTAR_API mstar_status mstar_comm_set_persist(mstar_comm *comm, mstar_tensor_id uuid, bool persist);

/* From the safety hold (1) to the real fanout: for each held uuid, the number of (edge,
 * descriptor) occurrences among the routed edges that are not persist edges (T-7). A count of
 * 0 on a tensor that is not persisted frees it here. */
MSTAR_API mstar_status mstar_comm_set_output_ref_counts(mstar_comm *comm,
                                                        const mstar_tensor_id *held, uint32_t nheld,
                                                        const mstar_edge *routed, uint32_t nrouted);

/* ---------------------------------------------------------------------------------------------
 * Producer: staging for other processes
 * ------------------------------------------------------------------------------------------- */

/* Stage every descriptor's tensor not yet registered (file written, arena copy synchronised,
 * memory registered with UCX), and stamp the transport's fields onto infos (see
 * mstar_comm_stamps_shm_placement). When this returns, a message carrying the descriptors may be
 * sent (I-1). MSTAR_ENOENT for a uuid not held. */
MSTAR_API mstar_status mstar_comm_register_for_send(mstar_comm *comm, const mstar_rid *rid,
                                                    mstar_tensor_info *infos, uint32_t n);
/* The uuid-driven form: request r's uuids are uuids[sum(counts[0..r)) ..][0..counts[r]). */
MSTAR_API mstar_status mstar_comm_register_for_send_uuids(mstar_comm *comm, const mstar_rid *rids,
                                                          uint32_t nrequests,
                                                          const uint32_t *counts,
                                                          const mstar_tensor_id *uuids);
/* Copy the transport's fields of every staged uuid onto the descriptors of edges about to leave
 * the process — only those fields (design.md "Placement refresh", T-4): the arena's placement
 * (shm_segment, shm_offset), UCX's source_session_id, address and remote_key. Descriptors of uuids
 * not staged here are left as they are. No-op unless mstar_comm_stamps_shm_placement. */
MSTAR_API mstar_status mstar_comm_refresh_shm_placement(mstar_comm *comm, mstar_edge *edges,
                                                        uint32_t n);

/* Handle TENSOR_RECEIVED (dereference each uuid by its count; failed_tensor_ids count one each)
 * and UNPERSIST_TENSORS (increment by K, then clear persist). Entries with a count outside
 * 1..2^32 (0..2^32 for K), unknown uuids and counts whose sum would overflow are logged and
 * skipped. Once the manager keeps an ACK ledger (see mstar_comm_note_sent) an ACK entry is
 * applied only from a peer that was sent the tensor, for at most the deliveries it still owes;
 * the rest is dropped and counted (mstar_comm_get_security_stats). A persisted tensor may be
 * handed on, so its ACKs are also applied from other peers: in full while the persist marker
 * holds it, and after the UNPERSIST K that clears the marker from an expected entity
 * (mstar_comm_expect_entities), up to K less those applied beyond the ledger before it
 * (docs/security.md). MSTAR_EINVAL for any other message type. */
MSTAR_API mstar_status mstar_comm_handle_message(mstar_comm *comm, const mstar_msg *msg);

/* The ACK ledger: `msg` was sent to `peer`; each descriptor in it that this manager produced and
 * still holds is one delivery `peer` owes an ACK for. A manager created with
 * send = mstar_comm_send_via_mesh learns this from every mstar_mesh_send of its mesh by itself
 * (mstar_mesh_set_sent_hook; the mesh must outlive the manager); others call this after each
 * send of descriptors. The first call arms the ledger (handle_message above). */
MSTAR_API mstar_status mstar_comm_note_sent(mstar_comm *comm, const char *peer,
                                            const mstar_msg *msg);

/* ACKs from entity `acker` may settle deliveries sent to entity `recipient`: for a deployment
 * where one entity receives descriptors and another reads and acknowledges them (the demo's
 * api_server receives results that its preprocess worker reads). */
MSTAR_API mstar_status mstar_comm_accept_acks_for(mstar_comm *comm, const char *acker,
                                                  const char *recipient);

typedef struct mstar_comm_security_stats {
    uint64_t acks_dropped;   /* TENSOR_RECEIVED entries not applied (see handle_message) */
    uint64_t counts_refused; /* reference counts refused: out of range, or the sum overflows */
    uint64_t acks_queued;    /* ACKs whose send failed, waiting for get_ready_tensors */
    uint64_t acks_lost;      /* ACKs given up: queue full, failed or not built at cleanup */
    bool ack_ledger;         /* ACKs are checked against the ledger */
} mstar_comm_security_stats;

/* What the manager refused from other processes so far (docs/security.md). */
MSTAR_API mstar_status mstar_comm_get_security_stats(const mstar_comm *comm,
                                                     mstar_comm_security_stats *out);

/* ---------------------------------------------------------------------------------------------
 * Consumer
 * ------------------------------------------------------------------------------------------- */

/* Begin reading the descriptors of `edges` for request `rid` (edges without descriptors are
 * skipped: the caller delivers them itself). Every descriptor is validated first — names, the
 * segment's prefix and owner, nbytes against dims × dtype, bounds against the mapped segment or
 * the file — and nothing is kept when any of them fails. `out` (may be NULL) receives the
 * handles of reads still running; the event fd fires when one finishes. */
MSTAR_API mstar_status mstar_comm_start_read_tensors(mstar_comm *comm, const mstar_rid *rid,
                                                     const mstar_edge *edges, uint32_t n,
                                                     mstar_completion_list *out);

/* The in-place form of start_read_tensors (same checks, same all or nothing): an arena
 * descriptor is not copied; the tensor its node gets is a view of the producer's slot in this
 * process's read-only mapping of the segment, made once the slot's stamp shows the tensor. A
 * device descriptor over the CUDA IPC route (MSTAR_CUDA_IPC, docs/environment.md) from a
 * producer on this manager's device is not copied either: the view is of the producer's device
 * memory in this process's mapping of it, made once the producer's work on it has run. The
 * delivery's ACK goes when the tensor's last reference is released here (the node's
 * mstar_comm_dereference, a cleanup) instead of when bytes land, so the producer keeps the
 * memory while the view is held. Spilled descriptors, files producers, sharded inputs (fan-in)
 * and host descriptors read by a manager with a device backend are copied as
 * start_read_tensors does. Do not write through a view. A view held too long meets the
 * producer's rules: an arena slot is not free for new outputs (the producer spills, or waits in
 * strict mode), and past MSTAR_SHM_ARENA_SLOT_TTL_S the producer frees it anyway; a producer that
 * force-cleans its request or exits lets its device memory go. mstar_comm_view_check then
 * fails. */
MSTAR_API mstar_status mstar_comm_start_read_views(mstar_comm *comm, const mstar_rid *rid,
                                                   const mstar_edge *edges, uint32_t n,
                                                   mstar_completion_list *out);
/* A buffer the caller owns that one descriptor's read lands in (mstar_comm_start_read_into): a
 * static input of a captured graph, a slot of the caller's own batch. */
typedef struct mstar_read_target {
    mstar_tensor_id uuid; /* the descriptor's tensor */
    void *data;           /* where its bytes land: the backend's device memory for a manager with
                           * a backend (as every read of it lands there), else host memory */
    uint64_t capacity;    /* bytes at data: at least the descriptor's nbytes */
    mstar_stream *stream; /* a stream of the manager's backend the copy is ordered on, or NULL */
    /* Called once (may be NULL) when the manager is done with data: the tensor's last reference
     * went, or its read failed. Never when start_read_into itself fails: the caller still owns
     * everything then. */
    mstar_release_fn release;
    void *release_ctx;
} mstar_read_target;

/* The copying form of start_read_tensors (same checks, same all or nothing) where the
 * descriptors `targets` name land in memory the caller owns instead of a buffer the manager
 * allocates; the others land as start_read_tensors lands them. The tensor the node gets
 * (get_ready_tensors, get_tensor) points at the target's `data`. The manager never frees it: it
 * writes there until the read lands or fails, and the tensor it hands out reads there until its
 * last reference goes (the node's dereference, the request's cleanup, forced or not, or the
 * manager's destroy) — the memory must stay valid and otherwise untouched until then, which is
 * when the target's `release` runs.
 *
 * `stream`: the copy into `data` is ordered after the work the caller queued on it before this
 * call (the buffer may still be in use there), and the work the caller queues on it after this
 * call is ordered after the copy, with no host synchronisation (the manager's read stream and
 * `stream` wait on each other's events; reads queued behind it on the read stream wait too).
 * Over the files route (and an arena spill) into device memory the copy is synchronised, so
 * this call waits on the host for that earlier work. Over UCX into device memory the copy runs
 * when the network read finishes, so work queued on `stream` is ordered after it only from the
 * read's collection on. Without a backend the manager synchronises `stream` before it reads (the
 * copy itself is a host memcpy, done when the read lands). The ACK still goes once the copy has
 * landed, when the read is collected. Views make no sense in a caller's buffer: a target's read
 * is always a copy.
 *
 * MSTAR_EINVAL, naming the target, and nothing started when a target names a uuid no edge
 * carries, names one twice, has data NULL with capacity > 0, has a capacity below the
 * descriptor's nbytes, has a stream of another backend, would be written in bytes another
 * target's read writes too (only the nbytes a read writes count, not the capacity), or names
 * a descriptor that is not read
 * into anything: this entity's own tensor (or a slice of it), a tensor it already holds, or a
 * shard of a sharded input (fan-in gathers shards into a buffer of its own). */
MSTAR_API mstar_status mstar_comm_start_read_into(mstar_comm *comm, const mstar_rid *rid,
                                                  const mstar_edge *edges, uint32_t n,
                                                  const mstar_read_target *targets,
                                                  uint32_t ntargets, mstar_completion_list *out);

/* Whether held tensor `uuid` is a view whose memory still holds it: MSTAR_OK; MSTAR_ENOENT once
 * its producer freed the slot or the device memory (TTL, a forced cleanup; its bytes may now be
 * another tensor's); MSTAR_ECLOSED once a device view's producer has exited; MSTAR_EINVAL for a
 * tensor that is not a view. */
MSTAR_API mstar_status mstar_comm_view_check(mstar_comm *comm, mstar_tensor_id uuid);

/* Name the entities descriptors may come from (copied; n = 0: any, the default). A descriptor
 * naming another source entity is refused by mstar_comm_start_read_tensors (MSTAR_EPROTO naming
 * it) before any file is opened or peer connected for it. This entity's own are always read. */
MSTAR_API mstar_status mstar_comm_expect_entities(mstar_comm *comm, const char *const *entities,
                                                  uint32_t n);

/* A failed read: the request's edge is dropped (its refs released, the failure ACKed to the
 * producer through failed_tensor_ids) and reported here once. */
typedef struct mstar_read_failure {
    mstar_rid rid;
    char edge_name[MSTAR_NAME_MAX + 1];
    mstar_status status;
    char message[256];
} mstar_read_failure;

/* Edges ready for their nodes, grouped by request: the edges of rids[i] are
 * edges[edge_start[i] .. edge_start[i+1]). */
typedef struct mstar_ready_set {
    uint32_t nrequests;
    mstar_rid *rids;
    uint32_t *edge_start; /* nrequests + 1 entries */
    uint32_t nedges;
    mstar_edge *edges;
    uint32_t nfailed;
    mstar_read_failure *failed;
} mstar_ready_set;

MSTAR_API void mstar_ready_set_clear(mstar_ready_set *set);

/* Collect every read whose bytes have landed: ACK them to their producers first, then release
 * the transit reference, buffer sharded inputs until every source rank arrived (then emit one
 * consolidated edge), and hand the edges out. Each delivered descriptor carries one usage
 * reference the node releases with mstar_comm_dereference(uuid, 1). ACKs whose send failed
 * earlier are resent first. When an ACK cannot be sent the call returns that error, keeps the
 * ACK queued for the next call, and still fills `out` (clear it either way). Short of memory to
 * build an ACK or to hand an edge out, the call ACKs and delivers none of that request's edges
 * and leaves them, and the requests after it, for the next call. The request's cleanup (soft or
 * forced) tries its queued ACKs once more and gives up those that fail (counted as acks_lost),
 * so a producer that is gone fails the calls only until then. */
MSTAR_API mstar_status mstar_comm_get_ready_tensors(mstar_comm *comm, mstar_ready_set *out);

/* ACK edges of a request that is already gone, without reading them (late result_tensors). */
MSTAR_API mstar_status mstar_comm_ack_unread_tensors(mstar_comm *comm, const mstar_rid *rid,
                                                     const mstar_edge *edges, uint32_t n);

/* A view of a held tensor in its real layout (the canonical permutation undone, so it may be
 * strided). Valid until the tensor's last reference goes. MSTAR_ENOENT for an unknown uuid. */
MSTAR_API mstar_status mstar_comm_get_tensor(mstar_comm *comm, mstar_tensor_id uuid,
                                             mstar_tensor *out);
/* The same tensor copied contiguous into host memory dst (dst_size >= its nbytes); *out
 * describes the copy. Device tensors are copied to the host first. */
MSTAR_API mstar_status mstar_comm_get_tensor_copy(mstar_comm *comm, mstar_tensor_id uuid, void *dst,
                                                  size_t dst_size, mstar_tensor *out);

/* Whether a read of this request is still copying (gates READS_DONE, I-7). */
MSTAR_API bool mstar_comm_has_inflight_reads(const mstar_comm *comm, const mstar_rid *rid);

/* An fd that becomes readable when a read finishes; poll it with the mesh inbox and drain it. */
MSTAR_API int mstar_comm_event_fd(const mstar_comm *comm);
MSTAR_API void mstar_comm_event_drain(mstar_comm *comm);

/* ---------------------------------------------------------------------------------------------
 * Teardown (design.md "Teardown and the drain")
 * ------------------------------------------------------------------------------------------- */

/* Soft: drop the request's sharding config, fan-in buffers and profiling; ACK and drop its
 * finished pending reads (their refs released); free every tensor of it that is collectable and
 * defer the rest (in use or persisted) — a later ACK or UNPERSIST still frees them. Reads
 * still copying stay until they finish, then are ACKed and dropped undelivered. */
MSTAR_API mstar_status mstar_comm_cleanup_request(mstar_comm *comm, const mstar_rid *rid);
/* Hard: drop every tensor of the request and its staged files and slots regardless of refs and
 * persist. Safe only after every reader of it sent READS_DONE; MSTAR_ESTATE if this process
 * still has reads of it in flight. */
MSTAR_API mstar_status mstar_comm_force_cleanup_request(mstar_comm *comm, const mstar_rid *rid);

/* ---------------------------------------------------------------------------------------------
 * Profiling and statistics
 * ------------------------------------------------------------------------------------------- */

/* The request's TX / RX records (design.md "Transfer statistics") in a malloc'd array the caller
 * frees; *n may be 0 (then *out is NULL). Empty unless enable_prof. */
MSTAR_API mstar_status mstar_comm_get_tx_info(mstar_comm *comm, const mstar_rid *rid,
                                              mstar_tx_info **out, uint32_t *n);
MSTAR_API mstar_status mstar_comm_get_rx_info(mstar_comm *comm, const mstar_rid *rid,
                                              mstar_rx_info **out, uint32_t *n);

typedef struct mstar_arena_stats {
    uint32_t segments;
    uint64_t total_bytes;
    uint64_t free_bytes;
    uint64_t largest_free_block; /* the fragmentation gauge */
    uint64_t pinned_bytes;       /* own and peer segments registered with the backend */
    uint64_t live_slots;         /* staged tensors in segments: the leak canary */
    uint64_t spill_files;        /* staged tensors spilled to files */
    uint64_t peer_segments;      /* peer segments mapped by this consumer */
} mstar_arena_stats;

/* MSTAR_ENOTSUP unless the transport is the arena. */
MSTAR_API mstar_status mstar_comm_arena_stats(mstar_comm *comm, mstar_arena_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_TENSORS_H */
