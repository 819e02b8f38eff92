/*
 * mstar/wire.h — what crosses a process boundary: request ids, tensor descriptors, graph edges
 * and the control messages of the mesh, and their msgpack encoding.
 *
 * One ZeroMQ message is one msgpack map {"v": 1, "type": "<TYPE>", "from": "<entity>",
 * "body": {...}}; descriptor and edge maps use fixed field names
 * (docs/wire-format.md lists every field). Decoding is strict: every type, length and range is
 * checked, nothing is allocated before a count has been checked against the bytes actually
 * present, and any violation is MSTAR_EPROTO with a message naming the field.
 *
 * Ownership: the variable-length arrays inside an edge or a message are heap-allocated by whoever
 * builds them (the decoder, or the mstar_edge_* / mstar_msg_* helpers) and released with
 * mstar_edge_clear / mstar_msg_clear. Only the library allocates them (appends rely on its
 * growth rule): do not point them at arrays of your own. Fixed-size fields are inline, so a
 * descriptor is plain data that can be copied with '='.
 */
#ifndef MSTAR_WIRE_H
#define MSTAR_WIRE_H

#include "mstar/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MSTAR_WIRE_VERSION 1

/* Upper bounds the decoder enforces (a message over them is MSTAR_EPROTO). */
#define MSTAR_WIRE_MAX_MESSAGE (64u << 20) /* bytes in one encoded message */
#define MSTAR_WIRE_MAX_EDGES   4096        /* edges in one message */
#define MSTAR_WIRE_MAX_TENSORS 65536       /* descriptors in one edge, and in one message */
#define MSTAR_WIRE_MAX_ENTRIES 65536       /* entries of a uuid map or list */
#define MSTAR_WIRE_MAX_KV      64          /* metadata entries */
#define MSTAR_REMOTE_KEY_MAX   1024        /* bytes of a packed remote key */
#define MSTAR_IPC_HANDLE_BYTES 64          /* a CUDA IPC memory or event handle */
#define MSTAR_HOST_ID_MAX      63          /* bytes of a host identity (a boot id) */

/* ---------------------------------------------------------------------------------------------
 * Request ids: an integer (worker handles) or a string (api-server ids); an opaque key.
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_rid {
    bool is_str;
    int64_t num;                  /* when !is_str */
    char str[MSTAR_NAME_MAX + 1]; /* when is_str: a valid name (mstar_name_validate) */
} mstar_rid;

/* An integer id. */
MSTAR_API mstar_rid mstar_rid_from_int(int64_t num);
/* A string id (copied). MSTAR_EINVAL if `str` is not a valid name. */
MSTAR_API mstar_status mstar_rid_from_str(const char *str, mstar_rid *out);
/* Same kind and value: an integer id never equals a string id, even "5" and 5. */
MSTAR_API bool mstar_rid_equal(const mstar_rid *a, const mstar_rid *b);
/* A hash consistent with mstar_rid_equal, for keyed stores. */
MSTAR_API uint64_t mstar_rid_hash(const mstar_rid *rid);
/* A request id as text: the decimal number or the string itself. Returns `buf`. */
#define MSTAR_RID_STRLEN (MSTAR_NAME_MAX + 1)
MSTAR_API const char *mstar_rid_format(const mstar_rid *rid, char buf[MSTAR_RID_STRLEN]);

/* ---------------------------------------------------------------------------------------------
 * Tensor descriptor (design.md "Descriptors and edges")
 * ------------------------------------------------------------------------------------------- */

/* Where a device tensor's bytes can be reached on the producer's host without leaving the GPUs
 * (the CUDA IPC route, docs/wire-format.md): the allocation segment that holds them, exported
 * once, and an event the producer recorded after the work that wrote them. host_id "" = none. */
typedef struct mstar_cuda_ipc_ref {
    char host_id[MSTAR_HOST_ID_MAX + 1];        /* the producer's host (its boot id) */
    uint8_t mem_handle[MSTAR_IPC_HANDLE_BYTES]; /* cudaIpcMemHandle_t of the segment */
    uint8_t
        event_handle[MSTAR_IPC_HANDLE_BYTES]; /* cudaIpcEventHandle_t, recorded after the write */
    uint64_t segment_size;   /* bytes of the segment; the reader checks it after opening */
    uint64_t segment_offset; /* where the tensor's bytes (offset 0) start in the segment */
    int32_t device;          /* the producer's CUDA device ordinal */
    int32_t pid;             /* the producer's process id (liveness) */
} mstar_cuda_ipc_ref;

typedef struct mstar_tensor_info {
    mstar_tensor_id uuid;
    mstar_dtype dtype;
    int32_t ndim;
    int64_t dims[MSTAR_MAX_NDIM];   /* canonical layout (shard dim first when sharded) */
    int64_t stride[MSTAR_MAX_NDIM]; /* producer strides, in elements */
    uint64_t nbytes;                /* == numel(dims) × dtype size, always */
    uint64_t address;               /* producer address (remote engines) */
    uint64_t offset;                /* byte offset of this slice in the source tensor */
    int32_t source_tp_size;         /* >= 1 */
    int32_t source_tp_rank;         /* 0 <= rank < size */
    uint64_t shm_offset;            /* arena: byte offset in shm_segment */
    char source_session_id[MSTAR_NAME_MAX + 1]; /* the producer's session ("host:port") */
    char source_entity[MSTAR_NAME_MAX + 1];     /* producer entity; ACK target */
    char shm_segment[MSTAR_NAME_MAX + 1];       /* "" = none (per-uuid file) */
    char source_node_name[MSTAR_NAME_MAX + 1];  /* "" = None */
    char source_graph_walk[MSTAR_NAME_MAX + 1]; /* "" = None */
    uint32_t remote_key_len;                    /* 0 = none */
    uint8_t remote_key[MSTAR_REMOTE_KEY_MAX];   /* packed remote key of the producer's memory */
    mstar_cuda_ipc_ref cuda_ipc;                /* host_id "" = no CUDA IPC route */
} mstar_tensor_info;

/* Defaults: everything zero/empty, source_tp_size 1. */
MSTAR_API void mstar_tensor_info_init(mstar_tensor_info *info);
/* The checks the decoder applies, for descriptors built in process too: ndim, dims >= 0, a valid
 * dtype, nbytes == numel × size without overflow, offset + nbytes without overflow, tp rank in
 * range, names valid (entity required). MSTAR_EPROTO naming the field. */
MSTAR_API mstar_status mstar_tensor_info_validate(const mstar_tensor_info *info);

/* ---------------------------------------------------------------------------------------------
 * Graph edge (the fields transport touches, design.md "Descriptors and edges")
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_edge {
    char next_node[MSTAR_NAME_MAX + 1]; /* "" = EMPTY_DESTINATION */
    char name[MSTAR_NAME_MAX + 1];      /* the signal name */
    uint32_t ntensors;
    mstar_tensor_info *tensor_info; /* ntensors entries; NULL when 0 (a signal-only edge) */
    bool persist;
    bool is_streaming;
    bool persist_for_loop; /* not released by the ready-signal clear */
    int32_t total_fanin;   /* >= 1: source ranks whose shards this destination gathers */
    int32_t shard_dim;     /* the real shard dim of the signal; -1 = None */
} mstar_edge;

/* Defaults: no descriptors, the bools false, total_fanin 1, shard_dim -1 (None). */
MSTAR_API void mstar_edge_init(mstar_edge *edge);
/* Free the descriptor array and reset to init state. */
MSTAR_API void mstar_edge_clear(mstar_edge *edge);
/* Deep copy (dst is overwritten, not cleared first; on error it is left in init state). */
MSTAR_API mstar_status mstar_edge_copy(mstar_edge *dst, const mstar_edge *src);
/* Append a copy of *info. MSTAR_ENOSPC past MSTAR_WIRE_MAX_TENSORS. */
MSTAR_API mstar_status mstar_edge_add_tensor(mstar_edge *edge, const mstar_tensor_info *info);

/* ---------------------------------------------------------------------------------------------
 * Profiling records (design.md "Transfer statistics")
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_tx_info {
    char edge_name[MSTAR_NAME_MAX + 1];
    char source_entity[MSTAR_NAME_MAX + 1];
    int64_t count;
    int64_t num_bytes;
    double time_s;
} mstar_tx_info;

typedef struct mstar_rx_info {
    char edge_name[MSTAR_NAME_MAX + 1];
    char source_entity[MSTAR_NAME_MAX + 1];
    char dest_entity[MSTAR_NAME_MAX + 1];
    int64_t count;
    int64_t num_bytes;
    double time_s;
} mstar_rx_info;

/* Free-form integer metadata (request info such as a prompt length or a seed). */
typedef struct mstar_kv {
    char key[64]; /* a valid name of at most 63 bytes */
    int64_t value;
} mstar_kv;

/* ---------------------------------------------------------------------------------------------
 * Control messages (design.md "Control messages")
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_msg_type {
    MSTAR_MSG_INVALID = 0,
    MSTAR_MSG_NEW_REQUEST = 1,       /* "NEW_REQUEST": conductor → worker */
    MSTAR_MSG_INPUT_SIGNALS = 2,     /* "INPUT_SIGNALS": worker/conductor → worker */
    MSTAR_MSG_TENSOR_RECEIVED = 3,   /* "TENSOR_RECEIVED": consumer → producer */
    MSTAR_MSG_UNPERSIST_TENSORS = 4, /* "UNPERSIST_TENSORS": conductor → producer */
    MSTAR_MSG_REMOVE_REQUEST = 5,    /* "REMOVE_REQUEST": conductor → worker, rank 0 → rest */
    MSTAR_MSG_CONDUCTOR_NEW_REQUEST = 6, /* "CONDUCTOR_NEW_REQUEST": preprocess → conductor */
    MSTAR_MSG_WORKER_GRAPHS_DONE = 7,    /* "WORKER_GRAPHS_DONE": worker → conductor */
    MSTAR_MSG_RESULT_TENSORS = 8,        /* "result_tensors": worker → api_server */
    MSTAR_MSG_REQUEST_COMPLETE = 9,      /* "request_complete": conductor → api_server */
    MSTAR_MSG_ABORT_REQUEST = 10,        /* "ABORT_REQUEST": api_server/worker → conductor */
    MSTAR_MSG_FAIL_REQUESTS = 11,        /* "FAIL_REQUESTS": worker → conductor */
    MSTAR_MSG_DRAIN_REQUEST = 12,        /* "DRAIN_REQUEST": conductor → readers of a request */
    MSTAR_MSG_READS_DONE = 13,           /* "READS_DONE": reader → conductor */
    MSTAR_MSG_RANK_VALUES = 14,          /* "RANK_VALUES": rank agreement over the mesh */
    MSTAR_MSG_HELLO = 15,                /* "HELLO": an entity announces itself (startup) */
    MSTAR_MSG_SHUTDOWN = 16,             /* "SHUTDOWN": stop the receiving entity's loop */
    MSTAR_MSG_TYPE_COUNT_ = 17
} mstar_msg_type;

/* "INPUT_SIGNALS"; NULL for an invalid type. */
MSTAR_API const char *mstar_msg_type_name(mstar_msg_type type);

/* REMOVE_REQUEST sources: who asked for the removal. */
typedef enum mstar_remove_source {
    MSTAR_REMOVE_FROM_CONDUCTOR = 0,
    MSTAR_REMOVE_FROM_TP_RANK_0 = 1,
    MSTAR_REMOVE_FROM_SELF = 2,
} mstar_remove_source;

/* A uuid with a count: TENSOR_RECEIVED {uuid: count}, UNPERSIST_TENSORS {uuid: K}. */
typedef struct mstar_uuid_count {
    mstar_tensor_id uuid;
    int64_t count;
} mstar_uuid_count;

/*
 * One flat message. Which fields a type uses (others stay zero/empty and are not encoded):
 *
 *   NEW_REQUEST            request_id, graph_walk, edges (initial_inputs), kv (request_info)
 *   INPUT_SIGNALS          request_id, graph_walk, edges (inputs), text (partition_name,
 *                          default "default"), names (producer_done), kv (request_info)
 *   TENSOR_RECEIVED        request_id, counts (successful_tensors, each count >= 1),
 *                          uuids (failed_tensor_ids)
 *   UNPERSIST_TENSORS      request_id, counts (uuid_to_ref_count, each K >= 0)
 *   REMOVE_REQUEST         request_id, remove_source, force (hard removal after a drain)
 *   CONDUCTOR_NEW_REQUEST  request_id, graph_walk, edges (initial_signals: name → descriptors;
 *                          only name and tensor_info are meaningful), kv
 *   WORKER_GRAPHS_DONE     request_id, edges (persist_signals, as above), rx, tx,
 *                          is_first_tp_rank
 *   RESULT_TENSORS         request_id, text (modality), edges (exactly one: graph_edge),
 *                          ints (loop_indices), kv (metadata)
 *   REQUEST_COMPLETE       request_id, rx, tx, kv
 *   ABORT_REQUEST          request_id, text (reason)
 *   FAIL_REQUESTS          rids (request_ids, at least one), text (reason)
 *   DRAIN_REQUEST          request_id
 *   READS_DONE             request_id (the sender is `from`)
 *   RANK_VALUES            text (group name), round, rank, world_size, ints (values)
 *   HELLO                  kv (free-form)
 *   SHUTDOWN               text (reason)
 *
 * `from` is the sending entity; the mesh fills it on send.
 */
typedef struct mstar_msg {
    mstar_msg_type type;
    char from[MSTAR_NAME_MAX + 1];
    mstar_rid request_id;
    char graph_walk[MSTAR_NAME_MAX + 1];
    char text[MSTAR_NAME_MAX + 1];
    mstar_remove_source remove_source;
    bool force;
    bool is_first_tp_rank;
    int64_t round;
    int32_t rank;
    int32_t world_size;

    uint32_t nedges;
    mstar_edge *edges;
    uint32_t ncounts;
    mstar_uuid_count *counts;
    uint32_t nuuids;
    mstar_tensor_id *uuids;
    uint32_t nnames;
    char (*names)[MSTAR_NAME_MAX + 1];
    uint32_t nrids;
    mstar_rid *rids;
    uint32_t nints;
    int64_t *ints;
    uint32_t nrx;
    mstar_rx_info *rx;
    uint32_t ntx;
    mstar_tx_info *tx;
    uint32_t nkv;
    mstar_kv *kv;
} mstar_msg;

/* Zero everything, set `type` and the type's defaults (INPUT_SIGNALS: text = "default"). */
MSTAR_API void mstar_msg_init(mstar_msg *msg, mstar_msg_type type);
/* Free every array (and each edge's descriptors) and reset to MSTAR_MSG_INVALID. */
MSTAR_API void mstar_msg_clear(mstar_msg *msg);

/* Builders that append to a message's arrays (copying their arguments; an edge is copied deep).
 * MSTAR_ENOSPC past the decoder's limits; add_name and add_rid reject invalid names (EINVAL).
 * Values are checked when the message is encoded. */
MSTAR_API mstar_status mstar_msg_add_edge(mstar_msg *msg, const mstar_edge *edge);
MSTAR_API mstar_status mstar_msg_add_count(mstar_msg *msg, mstar_tensor_id uuid, int64_t count);
MSTAR_API mstar_status mstar_msg_add_uuid(mstar_msg *msg, mstar_tensor_id uuid);
MSTAR_API mstar_status mstar_msg_add_name(mstar_msg *msg, const char *name);
MSTAR_API mstar_status mstar_msg_add_rid(mstar_msg *msg, const mstar_rid *rid);
MSTAR_API mstar_status mstar_msg_add_int(mstar_msg *msg, int64_t value);
MSTAR_API mstar_status mstar_msg_add_rx(mstar_msg *msg, const mstar_rx_info *rx);
MSTAR_API mstar_status mstar_msg_add_tx(mstar_msg *msg, const mstar_tx_info *tx);
/* Sets `key` (a valid name of at most 63 bytes) to `value`, replacing an earlier value. */
MSTAR_API mstar_status mstar_msg_add_kv(mstar_msg *msg, const char *key, int64_t value);
/* The value under `key`, or `def`. */
MSTAR_API int64_t mstar_msg_get_kv(const mstar_msg *msg, const char *key, int64_t def);

/* Encode into a freshly malloc'd buffer (*data, *len); the caller frees *data. Validates what it
 * encodes with the decoder's rules (MSTAR_EINVAL naming the field), so a peer never receives
 * what it would reject. */
MSTAR_API mstar_status mstar_msg_encode(const mstar_msg *msg, void **data, size_t *len);
/* Decode one message. On MSTAR_EPROTO *out is left cleared and owns nothing. */
MSTAR_API mstar_status mstar_msg_decode(const void *data, size_t len, mstar_msg *out);

/* Stand-alone descriptor and edge codecs (used by tests and by peers that embed them), with the
 * message codec's rules: encoders validate first (MSTAR_EINVAL), decoders are strict
 * (MSTAR_EPROTO) and leave *out in init state on failure (a failed edge owns nothing). */
MSTAR_API mstar_status mstar_tensor_info_encode(const mstar_tensor_info *info, void **data,
                                                size_t *len);
MSTAR_API mstar_status mstar_tensor_info_decode(const void *data, size_t len,
                                                mstar_tensor_info *out);
MSTAR_API mstar_status mstar_edge_encode(const mstar_edge *edge, void **data, size_t *len);
MSTAR_API mstar_status mstar_edge_decode(const void *data, size_t len, mstar_edge *out);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_WIRE_H */
