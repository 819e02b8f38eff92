/*
 * backend.h — the device backend vtable and the objects every backend shares.
 *
 * backend.c holds the public entry points: it validates arguments, keeps the bookkeeping that is
 * the same on every backend (raw allocations and the memory budget, pinned ranges, the capture
 * count that fences the caching allocator, the stream capture state) and calls through `ops` for
 * the device work. backend_host.c and cuda/backend_cuda.c implement `ops`. Nothing above this file
 * (pools, capture, runners) knows which backend it runs on.
 */
#ifndef MSTAR_DEVICE_BACKEND_H
#define MSTAR_DEVICE_BACKEND_H

#include "mstar/device.h"

#include "core/u64map.h"
#include "core/vec.h"
#include "device/alloc.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct mstar_graph_pool mstar_graph_pool;

/* What the device calls need from a graph pool, as hooks the pool fills in (graphs/pool.c): this
 * layer knows a pool only as an opaque pointer that came with its hooks, so it depends on no
 * graph code. A capture into a pool installs them on its stream (mstar_alloc and mstar_free go to
 * the pool meanwhile), a pool registers them with its backend (mstar_free of a pool block outside
 * a capture) and a graph that owns pool blocks keeps them (mstar_graph_destroy gives them back). */
typedef struct mstar__pool_hooks {
    mstar_status (*capture_alloc)(mstar_graph_pool *pool, size_t nbytes, mstar__seg_kind kind,
                                  void **out);
    mstar_status (*capture_free)(mstar_graph_pool *pool, void *ptr);
    bool (*owns)(mstar_graph_pool *pool, const void *ptr);
    mstar_status (*free_outside_capture)(mstar_graph_pool *pool, void *ptr);
    /* Give back the pool blocks `g` owns and its reference on g->pool. */
    void (*release_graph_blocks)(mstar_graph *g);
} mstar__pool_hooks;

/* A pool as its backend lists it. */
typedef struct mstar__pool_entry {
    mstar_graph_pool *pool;
    const mstar__pool_hooks *hooks;
} mstar__pool_entry;

typedef struct mstar__backend_ops {
    const char *name;
    void (*destroy)(mstar_backend *b);

    mstar_status (*raw_alloc)(mstar_backend *b, size_t nbytes, void **out);
    void (*raw_free)(mstar_backend *b, void *ptr);
    mstar_status (*host_alloc_pinned)(mstar_backend *b, size_t nbytes, void **out);
    void (*host_free_pinned)(mstar_backend *b, void *ptr);
    mstar_status (*host_register)(mstar_backend *b, void *ptr, size_t nbytes, unsigned flags);
    mstar_status (*host_unregister)(mstar_backend *b, void *ptr);
    mstar_status (*mem_info)(mstar_backend *b, uint64_t *free_bytes, uint64_t *total_bytes);

    mstar_status (*stream_create)(mstar_stream *s);
    void (*stream_destroy)(mstar_stream *s);
    mstar_status (*stream_synchronize)(mstar_stream *s);
    mstar_status (*stream_query)(mstar_stream *s); /* MSTAR_OK or MSTAR_EAGAIN */
    mstar_status (*stream_wait_event)(mstar_stream *s, mstar_event *e);

    mstar_status (*event_create)(mstar_event *e);
    void (*event_destroy)(mstar_event *e);
    mstar_status (*event_record)(mstar_event *e, mstar_stream *s);
    /* While `s` captures: the graph records `e` at this point each time it is launched. */
    mstar_status (*event_record_in_capture)(mstar_event *e, mstar_stream *s);
    mstar_status (*event_query)(mstar_event *e);
    mstar_status (*event_synchronize)(mstar_event *e);

    mstar_status (*memcpy_async)(mstar_stream *s, void *dst, const void *src, size_t nbytes,
                                 mstar_memcpy_kind kind);
    mstar_status (*memset_async)(mstar_stream *s, void *dst, int value, size_t nbytes);
    /* A copy between two buffers of the stream's own device, as a kernel (NULL: memcpy_async). */
    mstar_status (*copy_on_device)(mstar_stream *s, void *dst, const void *src, size_t nbytes);
    /* While `s` captures: a copy node that copies nothing into `dst`, its native handle in *node;
     * then, in an instantiated graph, that node's copy for the launches that follow. NULL where the
     * backend has no such nodes: MSTAR_ENOTSUP. */
    mstar_status (*capture_copy_node)(mstar_stream *s, void *dst, void **node);
    mstar_status (*graph_set_copy)(mstar_graph *g, void *node, void *dst, const void *src,
                                   size_t nbytes);
    mstar_status (*launch)(mstar_stream *s, mstar_host_fn fn, const void *args, size_t size);

    /* Start recording; on success the stream's capture_state is the backend's to fill. */
    mstar_status (*capture_begin)(mstar_stream *s);
    /* Stop recording into `g` (native graph, node count, owned host-call records). On failure
     * the backend has released any partial graph and the stream no longer captures. */
    mstar_status (*capture_end)(mstar_stream *s, mstar_graph *g);
    mstar_status (*graph_instantiate)(mstar_graph *g, bool keep_graph);
    mstar_status (*graph_launch)(mstar_graph *g, mstar_stream *s);
    void (*graph_release)(mstar_graph *g); /* the native parts only */
    /* One more executable of a kept graph, and its release (NULL: MSTAR_ENOTSUP). */
    mstar_status (*graph_exec_copy)(mstar_graph *g, void **copy);
    void (*graph_exec_copy_destroy)(mstar_backend *b, void *copy);

    /* Sharing device memory and events with other processes on the host (ipc.c has the entry
     * points and their contracts). NULL where the backend cannot: MSTAR_ENOTSUP. */
    mstar_status (*ipc_mem_export)(mstar_backend *b, void *base, uint8_t *handle);
    mstar_status (*ipc_mem_open)(mstar_backend *b, const uint8_t *handle, void **base,
                                 uint64_t *size);
    void (*ipc_mem_close)(mstar_backend *b, void *base);
    mstar_status (*ipc_event_create)(mstar_event *e, uint8_t *handle);
    mstar_status (*ipc_event_open)(mstar_event *e, const uint8_t *handle);
} mstar__backend_ops;

struct mstar_backend {
    const mstar__backend_ops *ops;
    mstar_device device;
    int capability;
    void *impl;

    pthread_mutex_t lock;     /* raw, pinned, registered, raw_bytes, budget */
    mstar__u64map raw;        /* raw allocation → size */
    mstar__u64map pinned;     /* pinned allocation → size */
    mstar__u64map registered; /* registered host range start → size */
    uint64_t raw_bytes;       /* held by raw allocations (the caching allocator's segments too) */
    uint64_t raw_frees;       /* raw allocations freed so far: exported handles may be stale */
    uint64_t budget;          /* host backend: 0 = unlimited */
    /* Lock order: pools_lock, then an allocator's lock (a pool's, the caching one's), then
     * lock — an allocator takes `lock` for its segments while it holds its own, so `pools` has
     * a lock of its own that mstar_free may hold while it asks each pool. */
    pthread_mutex_t pools_lock;
    mstar__vec pools;         /* mstar__pool_entry, for mstar_free outside a capture */
    mstar__allocator caching; /* the ordinary allocator */
    atomic_int capturing;     /* streams of this backend capturing now */
    bool host_async;          /* host backend: streams made from now on run on worker threads */
};

struct mstar_stream {
    mstar_backend *backend;
    unsigned flags;
    void *native;         /* cudaStream_t; NULL on the host backend */
    bool wrapped;         /* `native` belongs to another library (mstar_stream_wrap) */
    pthread_mutex_t lock; /* host backend: serialises the stream's work */
    bool capturing;
    void *capture_state;                 /* the backend's recording while capturing */
    mstar__vec capture_copies;           /* while capturing: mstar__copy_node */
    mstar_graph_pool *pool;              /* where mstar_alloc goes while capturing into a pool */
    const mstar__pool_hooks *pool_hooks; /* the pool's, while `pool` is set */
    /* Allocation lifetimes (lifetimes.h): noted here outside a capture, hints inside one. */
    struct mstar__lifetimes *recording;
    struct mstar__lifetimes *applying;
    /* The last event this stream was told to wait on, and how many waits: read by tests that
     * check which stream waited for what (design.md G-4, G-5). Atomic: threads may
     * share a stream (the host backend serialises their work, not these counts). */
    mstar_event *_Atomic last_waited;
    _Atomic uint64_t waits;
    _Atomic uint64_t enqueued;  /* copies, memsets and launches enqueued, for the same tests */
    struct host_worker *worker; /* host backend, asynchronous streams: the thread running them */
};

struct mstar_event {
    mstar_backend *backend;
    void *native;              /* cudaEvent_t; NULL on the host backend */
    mstar_stream *last_stream; /* the stream of the last record, or NULL */
    struct host_event *host;   /* host backend: records made and completed */
};

/* A copy node of a graph and the copy it was last given: the same copy again is not given
 * again (the node keeps it for every launch). */
typedef struct mstar__copy_node {
    void *native; /* CUDA: the cudaGraphNode_t */
    void *dst;
    const void *src;
    size_t nbytes;
} mstar__copy_node;

struct mstar_graph {
    mstar_backend *backend;
    void *native; /* cudaGraph_t, or the host recording */
    void *exec;   /* cudaGraphExec_t; the host recording once instantiated */
    size_t nodes;
    bool instantiated;
    mstar__vec host_calls; /* CUDA: records of mstar_launch calls the graph replays (void *) */
    mstar__vec copy_nodes; /* mstar__copy_node, by index (mstar__capture_copy_node) */
    /* What the graph owns beyond its native parts (capture.c / pool.c fill these). */
    mstar_graph_pool *pool;              /* holds a reference while blocks below are owned */
    const mstar__pool_hooks *pool_hooks; /* the pool's, while `pool` is set */
    mstar__vec pool_blocks;              /* void *: pool blocks live at capture end */
    mstar__vec caching_blocks;           /* void *: output buffers from the caching allocator */
};

/*
 * Host backend, for tests of ordering across streams (design.md G-4): streams created
 * after this call each run their work on a thread of their own, in order, and events are real —
 * a record completes when its stream's thread reaches it, a wait holds the waiting stream (or,
 * for a synchronous stream, the caller) until then. Results are there only after a
 * synchronisation, as on a GPU. Off by default: the demo, the benchmarks and most tests keep the
 * synchronous streams, where work has run when the call returns.
 */
void mstar__host_backend_set_async(mstar_backend *b, bool async);

/* Backend constructors. */
mstar_status mstar__host_backend_create(mstar_backend *b);
#ifdef MSTAR_HAVE_CUDA
mstar_status mstar__cuda_backend_create(mstar_backend *b);
#endif

/* Register and unregister a pool with its backend (pool.c), so that mstar_free outside a capture
 * finds the pool that owns a block and asks it through `hooks`. */
mstar_status mstar__backend_add_pool(mstar_backend *b, mstar_graph_pool *pool,
                                     const mstar__pool_hooks *hooks);
void mstar__backend_remove_pool(mstar_backend *b, mstar_graph_pool *pool);

/* A device-to-device copy between two buffers of the stream's own device (not overlapping). One
 * of at most MSTAR__KERNEL_COPY_MAX bytes runs as a kernel where the backend has one: on an H100
 * with CUDA 13 cudaMemcpyAsync took about 7 us of host time for a few KiB, a kernel launch about
 * 2.5, and a replay's staging and a CUDA IPC read of a small tensor pay it on their hot path.
 * Larger copies stay on the copy engines, which leave the SMs to the model. Inside a capture
 * either becomes a node of the graph. */
#define MSTAR__KERNEL_COPY_MAX (1u << 20)
mstar_status mstar__memcpy_on_device_async(mstar_stream *s, void *dst, const void *src,
                                           size_t nbytes);

/* Inputs copied inside a graph: while `s` captures, a node at this point that copies nothing
 * into `dst` (*index names it in the graph); once the graph is instantiated, mstar__graph_set_copy
 * gives it what to copy at the launches that follow (a launch already queued keeps what it was
 * launched with). So a replay's staging is part of its launch, with no device call of its own:
 * the node is the copy kernel of mstar__memcpy_on_device_async, both buffers on the graph's
 * device, at most MSTAR__KERNEL_COPY_MAX bytes; the same copy as the last one given makes no
 * call. MSTAR_ENOTSUP on a backend without such nodes
 * (host): stage with a copy before the launch instead. A graph with copy nodes keeps its
 * un-instantiated graph (the nodes are named through it). */
mstar_status mstar__capture_copy_node(mstar_stream *s, void *dst, uint32_t *index);
mstar_status mstar__graph_set_copy(mstar_graph *g, uint32_t index, void *dst, const void *src,
                                   size_t nbytes);

/* While `s` captures: put a record of `e` into the graph at this point, so that every launch of
 * the graph records `e` there on the device, with no host call per launch (CUDA: an external
 * event-record node; host: nothing, a host replay has run all its work when it returns).
 * MSTAR_ESTATE when `s` does not capture. */
mstar_status mstar__event_record_in_capture(mstar_event *e, mstar_stream *s);

/* Instantiate one more executable of a graph instantiated with keep_graph, and destroy it: what
 * the planner's executable-memory measurement (graphs/exec_memory.c) counts device memory with.
 * MSTAR_EINVAL when the graph was not kept, MSTAR_ENOTSUP on a backend without executables.
 * A copy is destroyed through the backend that made it, not its graph: the measurement keeps its
 * copies past the life of the graph (a bucket dropped under the budget releases its graph first).
 */
mstar_status mstar__graph_exec_copy(mstar_graph *g, void **copy);
void mstar__graph_exec_copy_destroy(mstar_backend *b, void *copy);

/* ---- CUDA IPC (ipc.c) ---------------------------------------------------------------------
 *
 * A producer exports the raw allocation (an allocator segment, or a raw mstar_device_alloc) that
 * holds a pointer, once per segment; a consumer in another process of the same host opens the
 * handle and gets the segment mapped into its own address space, on its own device. Handles are
 * MSTAR__IPC_HANDLE_BYTES opaque bytes (cudaIpcMemHandle_t, cudaIpcEventHandle_t).
 *
 * The host backend has an in-process stand-in (ipc_host.c): a handle names a live raw allocation
 * of a host backend in this process, and its events are always complete. It exists so that the
 * logic above these calls (the handle cache, the range checks, the route choice) runs in CI. */
#define MSTAR__IPC_HANDLE_BYTES 64

typedef struct mstar__ipc_segment {
    uint8_t handle[MSTAR__IPC_HANDLE_BYTES];
    void *base;    /* the segment's first byte in the exporter */
    uint64_t size; /* its size */
} mstar__ipc_segment;

/* The raw allocation that holds [ptr, ptr + nbytes), exported. MSTAR_ENOENT when no single raw
 * allocation of `b` holds the range (a pool block is in one too: pools allocate raw segments). */
mstar_status mstar__ipc_export(mstar_backend *b, const void *ptr, uint64_t nbytes,
                               mstar__ipc_segment *out);
/* How many raw allocations `b` has freed: a cache of exported handles is stale once it moves
 * (a new allocation may reuse a freed one's address under another handle). */
uint64_t mstar__ipc_generation(mstar_backend *b);
/* Map another process's exported segment: *base and its real *size. MSTAR_ENOENT for a handle
 * that names no live exported segment. Close each successful open once. */
mstar_status mstar__ipc_open(mstar_backend *b, const uint8_t *handle, void **base, uint64_t *size);
void mstar__ipc_close(mstar_backend *b, void *base);
/* An event other processes can wait on (CUDA: interprocess, no timing), and its handle. */
mstar_status mstar__ipc_event_create(mstar_backend *b, mstar_event **out, uint8_t *handle);
/* Another process's event: record it there, wait on it here (mstar_stream_wait_event). */
mstar_status mstar__ipc_event_open(mstar_backend *b, const uint8_t *handle, mstar_event **out);

/* The host backend's stand-in (ipc_host.c). */
mstar_status mstar__host_ipc_mem_export(mstar_backend *b, void *base, uint8_t *handle);
mstar_status mstar__host_ipc_mem_open(mstar_backend *b, const uint8_t *handle, void **base,
                                      uint64_t *size);
void mstar__host_ipc_mem_close(mstar_backend *b, void *base);
/* Forget what `b` exported at `base` (its raw free), or all of it (NULL: its destroy). */
void mstar__host_ipc_forget(mstar_backend *b, const void *base);

/* Raw allocation with the shared bookkeeping (budget, registry); the allocators use these. */
mstar_status mstar__raw_alloc(mstar_backend *b, size_t nbytes, void **out);
void mstar__raw_free(mstar_backend *b, void *ptr);

#endif
