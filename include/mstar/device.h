/*
 * mstar/device.h — device backends: streams, events, copies, memory, host work and graph capture.
 *
 * One backend object per device. Two backends sit behind the same calls:
 *   - host (MSTAR_DEVICE_CPU): "device" memory is host memory, streams and events are synchronous
 *     (work runs on the calling thread when it is enqueued), and a capture records the work that a
 *     step enqueues (mstar_launch, copies, memsets) so a replay re-runs it in order. The runner's
 *     logic is identical on both backends, so nearly everything runs in CI without a GPU.
 *   - CUDA (MSTAR_DEVICE_CUDA, index n): the CUDA runtime, linked statically; stream capture into
 *     CUDA graphs. A build without CUDA, or a machine without a driver or GPU, answers
 *     MSTAR_ENOTSUP from mstar_backend_create with a message saying which.
 *
 * Thread safety: a backend, its streams and its events may be used from several threads at once;
 * work enqueued on one stream runs in the order it was enqueued (the host backend serialises each
 * stream with a lock). Capture is the exception: a stream being captured belongs to the capturing
 * thread until the capture ends.
 *
 * Memory comes in four kinds:
 *   - raw device memory (mstar_device_alloc): straight from the runtime, never cached;
 *   - the caching allocator (mstar_caching_alloc): the backend's ordinary allocator for buffers
 *     that outlive a step (static inputs, resource buffers, output buffers outside a pool);
 *   - the current allocator (mstar_alloc): what step code uses for temporaries. Eager it is the
 *     caching allocator; while its stream captures into a graph pool it is that pool, so a step
 *     allocates the same way in both modes (see mstar/graphs.h for pools);
 *   - pinned host memory (mstar_host_alloc_pinned, mstar_host_register) for fast copies.
 */
#ifndef MSTAR_DEVICE_H
#define MSTAR_DEVICE_H

#include "mstar/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mstar_backend mstar_backend;
typedef struct mstar_stream mstar_stream;
typedef struct mstar_event mstar_event;
typedef struct mstar_graph mstar_graph;
typedef struct mstar_lazy mstar_lazy;

/* ---------------------------------------------------------------------------------------------
 * Backends
 * ------------------------------------------------------------------------------------------- */

/* Open the backend for `device`: MSTAR_DEVICE_CPU (any index; the host backend) or
 * MSTAR_DEVICE_CUDA with a device index. MSTAR_ENOTSUP when CUDA is not built in or no driver/GPU
 * is present; MSTAR_EINVAL for an index past the device count or another device type. The host
 * backend reads MSTAR_HOST_MEMORY_BUDGET_MB (docs/environment.md). Every stream, event, graph,
 * pool and allocation of a backend must be released before mstar_backend_destroy. */
MSTAR_API mstar_status mstar_backend_create(mstar_device device, mstar_backend **out);
MSTAR_API void mstar_backend_destroy(mstar_backend *backend);
MSTAR_API mstar_device mstar_backend_device(const mstar_backend *backend);
/* "host" or "cuda". */
MSTAR_API const char *mstar_backend_name(const mstar_backend *backend);
/* The SM version of a CUDA device as major*10+minor (90 for an H200); 0 on the host backend. */
MSTAR_API int mstar_backend_capability(const mstar_backend *backend);
/* Host backend only: override the memory budget (bytes; 0 = unlimited) that mstar_mem_info
 * reports and raw allocations are held to. MSTAR_ENOTSUP on CUDA. */
MSTAR_API mstar_status mstar_backend_set_memory_budget(mstar_backend *backend, uint64_t bytes);

/* Free and total device memory in bytes. Host backend: the budget less what raw allocations hold;
 * with no budget both are UINT64_MAX / 2 ("plenty": plan everything). */
MSTAR_API mstar_status mstar_mem_info(mstar_backend *backend, uint64_t *free_bytes,
                                      uint64_t *total_bytes);

/* ---------------------------------------------------------------------------------------------
 * Streams and events
 * ------------------------------------------------------------------------------------------- */

enum {
    MSTAR_STREAM_DEFAULT = 0,
    /* Does not synchronise with the runtime's legacy default stream (CUDA); the plan stream and
     * transport staging streams use it. No effect on the host backend. */
    MSTAR_STREAM_NON_BLOCKING = 1,
};

MSTAR_API mstar_status mstar_stream_create(mstar_backend *backend, unsigned flags,
                                           mstar_stream **out);
/* A stream over a native stream another library owns (CUDA: a cudaStream_t, e.g. torch's current
 * stream; NULL is the legacy default stream, as in the CUDA runtime), so that events can order
 * the library's own streams after it and it after them. The library enqueues on it only what the
 * caller asks for; mstar_stream_destroy releases the wrapper and leaves the native stream to its
 * owner, without waiting for it. MSTAR_ENOTSUP on the host backend, which has no native streams. */
MSTAR_API mstar_status mstar_stream_wrap(mstar_backend *backend, void *native, mstar_stream **out);
/* Waits for the stream's work, then releases it (a wrapped stream: only the wrapper, with no
 * wait). NULL is ignored. */
MSTAR_API void mstar_stream_destroy(mstar_stream *stream);
MSTAR_API mstar_backend *mstar_stream_backend(const mstar_stream *stream);
/* The native handle (cudaStream_t) for kernels launched directly; NULL on the host backend. */
MSTAR_API void *mstar_stream_native(const mstar_stream *stream);
/* Block until everything enqueued on the stream has run. MSTAR_ESTATE while it captures. */
MSTAR_API mstar_status mstar_stream_synchronize(mstar_stream *stream);
/* MSTAR_OK when everything enqueued on the stream has run, MSTAR_EAGAIN while some of it still
 * runs; another status on a device error. Never blocks. MSTAR_ESTATE while it captures.
 * Only the stream's own work counts: on CUDA, work on the legacy default stream that the
 * stream's next command would wait for does not (an event recorded on the stream would). */
MSTAR_API mstar_status mstar_stream_query(mstar_stream *stream);
/* Work enqueued on `stream` after this call waits (on the device, not the host) for the work
 * before the last mstar_event_record of `event`. Both must belong to the same backend. */
MSTAR_API mstar_status mstar_stream_wait_event(mstar_stream *stream, mstar_event *event);

MSTAR_API mstar_status mstar_event_create(mstar_backend *backend, mstar_event **out);
MSTAR_API void mstar_event_destroy(mstar_event *event);
/* Capture the stream's work so far into the event. */
MSTAR_API mstar_status mstar_event_record(mstar_event *event, mstar_stream *stream);
/* MSTAR_OK when the recorded work has completed (or nothing was recorded), MSTAR_EAGAIN while it
 * is still running; another status on a device error. Never blocks. */
MSTAR_API mstar_status mstar_event_query(mstar_event *event);
/* Block until the recorded work has completed. */
MSTAR_API mstar_status mstar_event_synchronize(mstar_event *event);
/* The native handle (cudaEvent_t); NULL on the host backend. */
MSTAR_API void *mstar_event_native(const mstar_event *event);

/* ---------------------------------------------------------------------------------------------
 * Copies and host work
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_memcpy_kind {
    MSTAR_MEMCPY_H2D = 0,
    MSTAR_MEMCPY_D2H = 1,
    MSTAR_MEMCPY_D2D = 2,
    MSTAR_MEMCPY_H2H = 3,
} mstar_memcpy_kind;

/* Enqueue a copy of `nbytes` on the stream. With pageable host memory a CUDA copy may complete
 * before returning; with pinned memory it is asynchronous, so the host side must stay valid
 * until the stream reaches it. While capturing, the copy becomes part of the graph. */
MSTAR_API mstar_status mstar_memcpy_async(mstar_stream *stream, void *dst, const void *src,
                                          size_t nbytes, mstar_memcpy_kind kind);
/* Enqueue setting `nbytes` of device memory to the byte `value`. */
MSTAR_API mstar_status mstar_memset_async(mstar_stream *stream, void *dst, int value,
                                          size_t nbytes);

/* Host work enqueued on a stream: `args` points at the runtime's copy of the bytes given to
 * mstar_launch (aligned for any type), valid while the function runs. */
typedef void (*mstar_host_fn)(void *args);

/* Enqueue fn(copy of args) on the stream. Host backend: runs now, on this thread, unless the
 * stream is capturing, in which case the call is recorded and runs at every replay. CUDA: a host
 * node (cudaLaunchHostFunc); the function must not call the CUDA runtime. `args_size` may be 0;
 * at most MSTAR_LAUNCH_ARGS_MAX bytes. */
#define MSTAR_LAUNCH_ARGS_MAX 4096
MSTAR_API mstar_status mstar_launch(mstar_stream *stream, mstar_host_fn fn, const void *args,
                                    size_t args_size);

/* ---------------------------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------------------------- */

/* Raw device memory, aligned to 256 bytes, never cached. Thread-safe. */
MSTAR_API mstar_status mstar_device_alloc(mstar_backend *backend, size_t nbytes, void **out);
/* NULL is ignored; MSTAR_EINVAL for a pointer that mstar_device_alloc did not return. */
MSTAR_API mstar_status mstar_device_free(mstar_backend *backend, void *ptr);

/* Page-locked host memory (cudaHostAlloc; plain memory on the host backend). Thread-safe. */
MSTAR_API mstar_status mstar_host_alloc_pinned(mstar_backend *backend, size_t nbytes, void **out);
MSTAR_API mstar_status mstar_host_free_pinned(mstar_backend *backend, void *ptr);
/* Flags of mstar_host_register. */
#define MSTAR_HOST_REGISTER_READ_ONLY 1u /* the range is mapped read-only (a peer's segment) */

/* Pin (and unpin) existing host memory so copies from/to it are asynchronous. A range may be
 * registered once; unregistering takes the pointer that was registered. A read-only mapping must
 * say so (flags MSTAR_HOST_REGISTER_READ_ONLY): the device then only reads it. Memory that cannot
 * be pinned (on CUDA, a file mapping outside tmpfs) fails with MSTAR_EDEVICE and stays usable
 * for synchronous copies. Host backend: the range is recorded and checked, nothing else.
 * Thread-safe. */
MSTAR_API mstar_status mstar_host_register(mstar_backend *backend, void *ptr, size_t nbytes,
                                           unsigned flags);
MSTAR_API mstar_status mstar_host_unregister(mstar_backend *backend, void *ptr);

/* The caching allocator: blocks carved from raw segments and kept for reuse. For buffers that
 * outlive a step. Refused with MSTAR_ESTATE while any stream of the backend captures: an
 * allocation there is lazy initialisation, which must happen in a warm-up. Thread-safe. */
MSTAR_API mstar_status mstar_caching_alloc(mstar_backend *backend, size_t nbytes, void **out);
MSTAR_API mstar_status mstar_caching_free(mstar_backend *backend, void *ptr);

/* The current allocator for step code: the stream's graph pool while it captures into one,
 * otherwise the caching allocator. Free with the same stream (or any stream of the backend that is
 * in the same mode). */
MSTAR_API mstar_status mstar_alloc(mstar_stream *stream, size_t nbytes, void **out);
MSTAR_API mstar_status mstar_free(mstar_stream *stream, void *ptr);

/* A contiguous tensor from the current allocator; mstar_tensor_free gives it back. */
MSTAR_API mstar_status mstar_tensor_alloc(mstar_stream *stream, mstar_dtype dtype, int32_t ndim,
                                          const int64_t *shape, mstar_tensor *out);
MSTAR_API mstar_status mstar_tensor_free(mstar_stream *stream, mstar_tensor *tensor);

typedef struct mstar_alloc_stats {
    uint64_t reserved;  /* bytes held in segments */
    uint64_t allocated; /* bytes in live blocks */
    uint64_t peak;      /* most bytes allocated since creation or the last reset_peak */
    uint64_t segments;
} mstar_alloc_stats;

MSTAR_API void mstar_caching_stats(mstar_backend *backend, mstar_alloc_stats *out);
MSTAR_API void mstar_caching_reset_peak(mstar_backend *backend);
/* Give every caching-allocator segment that holds no live block back to the device (torch's
 * empty_cache): before free memory is read for capture planning. *released may be NULL.
 * MSTAR_ESTATE while a stream of the backend captures. */
MSTAR_API mstar_status mstar_caching_trim(mstar_backend *backend, uint64_t *released);

/* ---------------------------------------------------------------------------------------------
 * Lazy initialisation
 *
 * State a step creates on first use (a library handle, a workspace, an autotuned kernel choice)
 * must exist before a capture: a capture records device work, it cannot run one-time setup.
 * Wrap such setup in an mstar_lazy; the warm-ups run it, and a first use inside a capture is
 * refused with MSTAR_ESTATE naming the state, before anything reaches the device.
 * ------------------------------------------------------------------------------------------- */

typedef mstar_status (*mstar_lazy_fn)(mstar_stream *stream, void *user);

/* `what` names the state in errors ("cuBLAS workspace"); copied. */
MSTAR_API mstar_status mstar_lazy_create(const char *what, mstar_lazy_fn fn, void *user,
                                         mstar_lazy **out);
MSTAR_API void mstar_lazy_destroy(mstar_lazy *lazy);
/* Run the initialiser once (thread-safe). A failure is returned and the next call tries again. */
MSTAR_API mstar_status mstar_lazy_ensure(mstar_lazy *lazy, mstar_stream *stream);
MSTAR_API bool mstar_lazy_done(const mstar_lazy *lazy);

/* ---------------------------------------------------------------------------------------------
 * Raw stream capture
 *
 * The building blocks; mstar/graphs.h wraps them with graph pools and failure cleanup
 * (mstar_capture_into_graph), which is what runners use.
 * ------------------------------------------------------------------------------------------- */

/* Start recording the stream's work into a graph. CUDA: stream capture in
 * cudaStreamCaptureModeGlobal (captures happen at startup, when only the startup thread works on
 * the device; global mode makes an unsafe call from any thread — a synchronising copy, a
 * cudaFree — fail loudly instead of silently corrupting the capture). MSTAR_ESTATE if the stream
 * already captures. */
MSTAR_API mstar_status mstar_stream_begin_capture(mstar_stream *stream);
/* Stop recording and hand back the graph (not yet instantiated). On a capture the runtime
 * invalidated, MSTAR_EDEVICE and no graph; the stream is usable again either way. */
MSTAR_API mstar_status mstar_stream_end_capture(mstar_stream *stream, mstar_graph **out);
MSTAR_API bool mstar_stream_is_capturing(const mstar_stream *stream);

/* Make the graph launchable. `keep_graph` keeps the un-instantiated graph as well (CUDA:
 * cudaGraph_t), for measurements that instantiate copies of it. */
MSTAR_API mstar_status mstar_graph_instantiate(mstar_graph *graph, bool keep_graph);
/* Replay the graph on the stream. */
MSTAR_API mstar_status mstar_graph_launch(mstar_graph *graph, mstar_stream *stream);
/* Nodes in the graph: CUDA graph nodes; recorded calls on the host backend. */
MSTAR_API size_t mstar_graph_node_count(const mstar_graph *graph);
/* The kept un-instantiated graph (cudaGraph_t), or NULL (host backend, or not kept). */
MSTAR_API void *mstar_graph_native(const mstar_graph *graph);
MSTAR_API mstar_backend *mstar_graph_backend(const mstar_graph *graph);
/* Releases the graph, its executable and whatever it owns (pool blocks, output buffers). */
MSTAR_API void mstar_graph_destroy(mstar_graph *graph);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_DEVICE_H */
