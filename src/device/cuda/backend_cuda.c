/*
 * backend_cuda.c — the CUDA backend: the CUDA runtime (linked statically) behind the vtable.
 *
 * Every call that creates device state first makes this backend's device current (pin), so a
 * backend for cuda:N > 0 never lands work on device 0 — the runtime's current device is per
 * thread, and the runner's threads are not all ours. Calls on a stream, an event or a graph
 * (copies, records, waits, launches) need no pin: the handle names its device. They are the
 * replay path, which therefore makes exactly the CUDA calls the step needs.
 *
 * Capture uses stream capture in cudaStreamCaptureModeGlobal (see mstar_stream_begin_capture).
 * mstar_launch becomes a host node (cudaLaunchHostFunc) whose argument copy the graph owns.
 * Driver API functions are reached through cudaGetDriverEntryPointByVersion only, never by
 * linking libcuda, so the library loads on a machine without a driver and reports MSTAR_ENOTSUP.
 */
#include "device/backend.h"
#include "device/cuda/copy_kernel.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <stdlib.h>
#include <string.h>

struct cuda_impl {
    PFN_cuMemGetInfo_v3020 mem_get_info;          /* driver cuMemGetInfo, or NULL */
    PFN_cuMemGetAddressRange_v3020 address_range; /* driver cuMemGetAddressRange, or NULL */
};

/* The copy of an mstar_launch call that a host node runs. */
struct host_call {
    mstar_host_fn fn;
    bool owned_by_graph; /* eager calls free themselves after running */
    _Alignas(16) unsigned char args[];
};

static mstar_status cuda_error(mstar_backend *b, cudaError_t err, const char *what)
{
    return mstar_error_set(MSTAR_EDEVICE, "cuda:%d: %s failed: %s (%s)", (int)b->device.index, what,
                           cudaGetErrorString(err), cudaGetErrorName(err));
}

static mstar_status pin(mstar_backend *b)
{
    /* cudaGetDevice only reads the thread's current device; cudaSetDevice does more (it makes
     * the primary context current), so it is skipped when the thread is already there. Asked
     * each time rather than cached: other code on the thread may switch devices. */
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == b->device.index)
        return MSTAR_OK;
    cudaError_t err = cudaSetDevice(b->device.index);
    return err == cudaSuccess ? MSTAR_OK : cuda_error(b, err, "cudaSetDevice");
}

#define CUDA_TRY(b, call)                        \
    do {                                         \
        cudaError_t err_ = (call);               \
        if (err_ != cudaSuccess)                 \
            return cuda_error((b), err_, #call); \
    } while (0)

static void cuda_destroy(mstar_backend *b)
{
    free(b->impl);
    b->impl = NULL;
}

static mstar_status cuda_raw_alloc(mstar_backend *b, size_t nbytes, void **out)
{
    mstar_status st = pin(b);
    if (st != MSTAR_OK)
        return st;
    /* A graph pool grows while a capture is running (allocations made during capture come
     * from the pool, and the pool may need a new segment). Under cudaStreamCaptureModeGlobal a
     * cudaMalloc from any thread is refused as a potentially unsafe call, so this thread
     * switches to relaxed mode for the one call and back. Safe: cudaMalloc does not touch the
     * capturing stream, and the new segment outlives the graph that may use it. */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaMalloc(out, nbytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return mstar_error_set(MSTAR_ENOMEM, "cuda:%d: cudaMalloc of %zu bytes: out of memory",
                               (int)b->device.index, nbytes);
    }
    return err == cudaSuccess ? MSTAR_OK : cuda_error(b, err, "cudaMalloc");
}

static void cuda_raw_free(mstar_backend *b, void *ptr)
{
    if (pin(b) == MSTAR_OK)
        cudaFree(ptr);
}

static mstar_status cuda_host_alloc_pinned(mstar_backend *b, size_t nbytes, void **out)
{
    mstar_status st = pin(b);
    if (st != MSTAR_OK)
        return st;
    CUDA_TRY(b, cudaHostAlloc(out, nbytes, cudaHostAllocPortable));
    return MSTAR_OK;
}

static void cuda_host_free_pinned(mstar_backend *b, void *ptr)
{
    cudaFreeHost(ptr);
}

static mstar_status cuda_host_register(mstar_backend *b, void *ptr, size_t nbytes, unsigned flags)
{
    mstar_status st = pin(b);
    if (st != MSTAR_OK)
        return st;
    /* A PROT_READ mapping (a peer's arena segment) can only be registered read-only; a
     * writable one must not be, or copies into it fail. */
    unsigned cuda_flags = cudaHostRegisterPortable;
    if (flags & MSTAR_HOST_REGISTER_READ_ONLY)
        cuda_flags |= cudaHostRegisterReadOnly;
    cudaError_t err = cudaHostRegister(ptr, nbytes, cuda_flags);
    return err == cudaSuccess ? MSTAR_OK : cuda_error(b, err, "cudaHostRegister");
}

static mstar_status cuda_host_unregister(mstar_backend *b, void *ptr)
{
    CUDA_TRY(b, cudaHostUnregister(ptr));
    return MSTAR_OK;
}

static mstar_status cuda_mem_info(mstar_backend *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
    /* cuMemGetInfo is a driver call: it needs the device's primary context current on this
     * thread, which cudaSetDevice makes so (pin() skips it when cudaGetDevice already reports
     * the device, which is also what it reports before any context exists). Not a hot path. */
    cudaError_t err = cudaSetDevice(b->device.index);
    if (err != cudaSuccess)
        return cuda_error(b, err, "cudaSetDevice");
    struct cuda_impl *impl = b->impl;
    size_t f = 0, t = 0;
    if (impl->mem_get_info != NULL) {
        /* The driver's view: what the planner compares with what captures take. */
        CUresult r = impl->mem_get_info(&f, &t);
        if (r != CUDA_SUCCESS)
            return mstar_error_set(MSTAR_EDEVICE, "cuda:%d: cuMemGetInfo failed with CUresult %d",
                                   (int)b->device.index, (int)r);
    } else {
        CUDA_TRY(b, cudaMemGetInfo(&f, &t));
    }
    *free_bytes = f;
    *total_bytes = t;
    return MSTAR_OK;
}

static mstar_status cuda_stream_create(mstar_stream *s)
{
    mstar_status st = pin(s->backend);
    if (st != MSTAR_OK)
        return st;
    cudaStream_t cs;
    unsigned flags =
        (s->flags & MSTAR_STREAM_NON_BLOCKING) ? cudaStreamNonBlocking : cudaStreamDefault;
    CUDA_TRY(s->backend, cudaStreamCreateWithFlags(&cs, flags));
    s->native = cs;
    return MSTAR_OK;
}

static void cuda_stream_destroy(mstar_stream *s)
{
    if (pin(s->backend) != MSTAR_OK)
        return;
    cudaStreamSynchronize(s->native);
    cudaStreamDestroy(s->native);
}

static mstar_status cuda_stream_synchronize(mstar_stream *s)
{
    CUDA_TRY(s->backend, cudaStreamSynchronize(s->native));
    return MSTAR_OK;
}

static mstar_status cuda_stream_query(mstar_stream *s)
{
    cudaError_t err = cudaStreamQuery(s->native);
    if (err == cudaSuccess)
        return MSTAR_OK;
    if (err == cudaErrorNotReady) {
        cudaGetLastError();
        return MSTAR_EAGAIN;
    }
    return cuda_error(s->backend, err, "cudaStreamQuery");
}

static mstar_status cuda_stream_wait_event(mstar_stream *s, mstar_event *e)
{
    CUDA_TRY(s->backend, cudaStreamWaitEvent(s->native, e->native, 0));
    return MSTAR_OK;
}

static mstar_status cuda_event_create(mstar_event *e)
{
    mstar_status st = pin(e->backend);
    if (st != MSTAR_OK)
        return st;
    cudaEvent_t ev;
    CUDA_TRY(e->backend, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    e->native = ev;
    return MSTAR_OK;
}

static void cuda_event_destroy(mstar_event *e)
{
    cudaEventDestroy(e->native);
}

static mstar_status cuda_event_record(mstar_event *e, mstar_stream *s)
{
    CUDA_TRY(e->backend, cudaEventRecord(e->native, s->native));
    return MSTAR_OK;
}

static mstar_status cuda_event_record_in_capture(mstar_event *e, mstar_stream *s)
{
    /* External: a node of the graph that records `e` on every launch, not the capture-internal
     * fork/join marker a plain record inside a capture would be. */
    CUDA_TRY(e->backend, cudaEventRecordWithFlags(e->native, s->native, cudaEventRecordExternal));
    return MSTAR_OK;
}

static mstar_status cuda_event_query(mstar_event *e)
{
    cudaError_t err = cudaEventQuery(e->native);
    if (err == cudaSuccess)
        return MSTAR_OK;
    if (err == cudaErrorNotReady) {
        cudaGetLastError();
        return MSTAR_EAGAIN;
    }
    return cuda_error(e->backend, err, "cudaEventQuery");
}

static mstar_status cuda_event_synchronize(mstar_event *e)
{
    CUDA_TRY(e->backend, cudaEventSynchronize(e->native));
    return MSTAR_OK;
}

static mstar_status cuda_memcpy_async(mstar_stream *s, void *dst, const void *src, size_t nbytes,
                                      mstar_memcpy_kind kind)
{
    static const enum cudaMemcpyKind kinds[] = {
        [MSTAR_MEMCPY_H2D] = cudaMemcpyHostToDevice,
        [MSTAR_MEMCPY_D2H] = cudaMemcpyDeviceToHost,
        [MSTAR_MEMCPY_D2D] = cudaMemcpyDeviceToDevice,
        [MSTAR_MEMCPY_H2H] = cudaMemcpyHostToHost,
    };
    CUDA_TRY(s->backend, cudaMemcpyAsync(dst, src, nbytes, kinds[kind], s->native));
    return MSTAR_OK;
}

static mstar_status cuda_copy_on_device(mstar_stream *s, void *dst, const void *src, size_t nbytes)
{
    CUDA_TRY(s->backend, (cudaError_t)mstar__cuda_copy_kernel(dst, src, nbytes, s->native));
    return MSTAR_OK;
}

static mstar_status cuda_capture_copy_node(mstar_stream *s, void *dst, void **node)
{
    CUDA_TRY(s->backend, (cudaError_t)mstar__cuda_copy_node_capture(dst, s->native, node));
    return MSTAR_OK;
}

static mstar_status cuda_graph_set_copy(mstar_graph *g, void *node, void *dst, const void *src,
                                        size_t nbytes)
{
    CUDA_TRY(g->backend, (cudaError_t)mstar__cuda_copy_node_set(g->exec, node, dst, src, nbytes));
    return MSTAR_OK;
}

static mstar_status cuda_memset_async(mstar_stream *s, void *dst, int value, size_t nbytes)
{
    CUDA_TRY(s->backend, cudaMemsetAsync(dst, value, nbytes, s->native));
    return MSTAR_OK;
}

static void CUDART_CB run_host_call(void *p)
{
    struct host_call *c = p;
    c->fn(c->args);
    if (!c->owned_by_graph)
        free(c);
}

static mstar_status cuda_launch(mstar_stream *s, mstar_host_fn fn, const void *args, size_t size)
{
    struct host_call *c = malloc(sizeof(*c) + size);
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_launch: out of memory");
    c->fn = fn;
    c->owned_by_graph = s->capturing;
    if (size != 0)
        memcpy(c->args, args, size);
    if (s->capturing) {
        mstar_status st = mstar__vec_push(s->capture_state, &c);
        if (st != MSTAR_OK) {
            free(c);
            return st;
        }
    }
    cudaError_t err = cudaLaunchHostFunc(s->native, run_host_call, c);
    if (err != cudaSuccess) {
        if (s->capturing)
            ((mstar__vec *)s->capture_state)->len--;
        free(c);
        return cuda_error(s->backend, err, "cudaLaunchHostFunc");
    }
    return MSTAR_OK;
}

static void free_host_calls(mstar__vec *calls)
{
    for (size_t i = 0; i < calls->len; i++)
        free(*(void **)mstar__vec_at(calls, i));
    mstar__vec_free(calls);
}

static mstar_status cuda_capture_begin(mstar_stream *s)
{
    mstar_status st = pin(s->backend);
    if (st != MSTAR_OK)
        return st;
    mstar__vec *calls = malloc(sizeof(*calls));
    if (calls == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_stream_begin_capture: out of memory");
    mstar__vec_init(calls, sizeof(void *));
    cudaError_t err = cudaStreamBeginCapture(s->native, cudaStreamCaptureModeGlobal);
    if (err != cudaSuccess) {
        free(calls);
        return cuda_error(s->backend, err, "cudaStreamBeginCapture");
    }
    s->capture_state = calls;
    return MSTAR_OK;
}

static mstar_status cuda_capture_end(mstar_stream *s, mstar_graph *g)
{
    mstar__vec *calls = s->capture_state;
    cudaGraph_t graph = NULL;
    cudaError_t err = cudaStreamEndCapture(s->native, &graph);
    if (err != cudaSuccess) {
        /* An invalidated capture: drop the partial graph and clear the sticky error so the
         * stream and the context stay usable for the next capture. */
        if (graph != NULL)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        free_host_calls(calls);
        free(calls);
        return cuda_error(s->backend, err, "cudaStreamEndCapture (the capture was invalidated)");
    }
    size_t nodes = 0;
    err = cudaGraphGetNodes(graph, NULL, &nodes);
    if (err != cudaSuccess) {
        cudaGraphDestroy(graph);
        free_host_calls(calls);
        free(calls);
        return cuda_error(s->backend, err, "cudaGraphGetNodes");
    }
    g->native = graph;
    g->nodes = nodes;
    mstar__vec_free(&g->host_calls);
    g->host_calls = *calls;
    free(calls);
    return MSTAR_OK;
}

static mstar_status cuda_graph_instantiate(mstar_graph *g, bool keep_graph)
{
    mstar_status st = pin(g->backend);
    if (st != MSTAR_OK)
        return st;
    cudaGraphExec_t exec;
    CUDA_TRY(g->backend, cudaGraphInstantiate(&exec, g->native, 0));
    g->exec = exec;
    if (!keep_graph) {
        cudaGraphDestroy(g->native);
        g->native = NULL;
    }
    return MSTAR_OK;
}

static mstar_status cuda_graph_launch(mstar_graph *g, mstar_stream *s)
{
    CUDA_TRY(g->backend, cudaGraphLaunch(g->exec, s->native));
    return MSTAR_OK;
}

static void cuda_graph_release(mstar_graph *g)
{
    if (g->exec != NULL)
        cudaGraphExecDestroy(g->exec);
    if (g->native != NULL)
        cudaGraphDestroy(g->native);
    g->exec = g->native = NULL;
    for (size_t i = 0; i < g->host_calls.len; i++)
        free(*(void **)mstar__vec_at(&g->host_calls, i));
    g->host_calls.len = 0;
}

static mstar_status cuda_graph_exec_copy(mstar_graph *g, void **copy)
{
    mstar_status st = pin(g->backend);
    if (st != MSTAR_OK)
        return st;
    cudaGraphExec_t exec;
    CUDA_TRY(g->backend, cudaGraphInstantiate(&exec, g->native, 0));
    *copy = exec;
    return MSTAR_OK;
}

static void cuda_graph_exec_copy_destroy(mstar_backend *b, void *copy)
{
    if (pin(b) == MSTAR_OK)
        cudaGraphExecDestroy((cudaGraphExec_t)copy);
}

/* ---- CUDA IPC (device/ipc.c has the contracts) ----------------------------------------------- */

_Static_assert(sizeof(cudaIpcMemHandle_t) == MSTAR__IPC_HANDLE_BYTES, "IPC memory handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == MSTAR__IPC_HANDLE_BYTES, "IPC event handle size");

static mstar_status cuda_ipc_mem_export(mstar_backend *b, void *base, uint8_t *handle)
{
    mstar_status st = pin(b);
    if (st != MSTAR_OK)
        return st;
    cudaIpcMemHandle_t h;
    CUDA_TRY(b, cudaIpcGetMemHandle(&h, base));
    memcpy(handle, &h, sizeof(h));
    return MSTAR_OK;
}

static mstar_status cuda_ipc_mem_open(mstar_backend *b, const uint8_t *handle, void **base,
                                      uint64_t *size)
{
    mstar_status st = pin(b);
    if (st != MSTAR_OK)
        return st;
    struct cuda_impl *impl = b->impl;
    if (impl->address_range == NULL)
        return mstar_error_set(MSTAR_ENOTSUP,
                               "cuda:%d: the driver has no cuMemGetAddressRange, "
                               "so an opened segment's size cannot be checked",
                               (int)b->device.index);
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof(h));
    void *p = NULL;
    /* Peer access enabled lazily: the segment may live on another GPU of the host. */
    cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
        cudaGetLastError();
        /* A forged or stale handle, or one of a process that has exited. */
        return mstar_error_set(
            err == cudaErrorInvalidValue || err == cudaErrorInvalidResourceHandle ? MSTAR_ENOENT
                                                                                  : MSTAR_EDEVICE,
            "cuda:%d: cudaIpcOpenMemHandle refused the handle: %s (%s)", (int)b->device.index,
            cudaGetErrorString(err), cudaGetErrorName(err));
    }
    CUdeviceptr start = 0;
    size_t n = 0;
    CUresult r = impl->address_range(&start, &n, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS || start != (CUdeviceptr)(uintptr_t)p) {
        cudaIpcCloseMemHandle(p);
        return mstar_error_set(MSTAR_EDEVICE,
                               "cuda:%d: cuMemGetAddressRange of an opened segment failed "
                               "(CUresult %d)",
                               (int)b->device.index, (int)r);
    }
    *base = p;
    *size = n;
    return MSTAR_OK;
}

static void cuda_ipc_mem_close(mstar_backend *b, void *base)
{
    if (pin(b) == MSTAR_OK && cudaIpcCloseMemHandle(base) != cudaSuccess)
        cudaGetLastError();
}

static mstar_status cuda_ipc_event_create(mstar_event *e, uint8_t *handle)
{
    mstar_status st = pin(e->backend);
    if (st != MSTAR_OK)
        return st;
    cudaEvent_t ev;
    CUDA_TRY(e->backend,
             cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    cudaIpcEventHandle_t h;
    cudaError_t err = cudaIpcGetEventHandle(&h, ev);
    if (err != cudaSuccess) {
        cudaEventDestroy(ev);
        return cuda_error(e->backend, err, "cudaIpcGetEventHandle");
    }
    memcpy(handle, &h, sizeof(h));
    e->native = ev;
    return MSTAR_OK;
}

static mstar_status cuda_ipc_event_open(mstar_event *e, const uint8_t *handle)
{
    mstar_status st = pin(e->backend);
    if (st != MSTAR_OK)
        return st;
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof(h));
    cudaEvent_t ev;
    cudaError_t err = cudaIpcOpenEventHandle(&ev, h);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return mstar_error_set(
            MSTAR_ENOENT, "cuda:%d: cudaIpcOpenEventHandle refused the handle: %s (%s)",
            (int)e->backend->device.index, cudaGetErrorString(err), cudaGetErrorName(err));
    }
    e->native = ev;
    return MSTAR_OK;
}

static const mstar__backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .host_alloc_pinned = cuda_host_alloc_pinned,
    .host_free_pinned = cuda_host_free_pinned,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .mem_info = cuda_mem_info,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_query = cuda_stream_query,
    .stream_wait_event = cuda_stream_wait_event,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_record_in_capture = cuda_event_record_in_capture,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .copy_on_device = cuda_copy_on_device,
    .capture_copy_node = cuda_capture_copy_node,
    .graph_set_copy = cuda_graph_set_copy,
    .launch = cuda_launch,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_launch = cuda_graph_launch,
    .graph_release = cuda_graph_release,
    .graph_exec_copy = cuda_graph_exec_copy,
    .graph_exec_copy_destroy = cuda_graph_exec_copy_destroy,
    .ipc_mem_export = cuda_ipc_mem_export,
    .ipc_mem_open = cuda_ipc_mem_open,
    .ipc_mem_close = cuda_ipc_mem_close,
    .ipc_event_create = cuda_ipc_event_create,
    .ipc_event_open = cuda_ipc_event_open,
};

mstar_status mstar__cuda_backend_create(mstar_backend *b)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return mstar_error_set(MSTAR_ENOTSUP, "cuda:%d: no usable CUDA device: %s (%s)",
                               (int)b->device.index, cudaGetErrorString(err),
                               cudaGetErrorName(err));
    }
    if (count == 0)
        return mstar_error_set(MSTAR_ENOTSUP, "cuda:%d: the driver reports no CUDA device",
                               (int)b->device.index);
    if (b->device.index >= count)
        return mstar_error_set(MSTAR_EINVAL, "cuda:%d: only %d CUDA devices (0..%d)",
                               (int)b->device.index, count, count - 1);
    struct cuda_impl *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_backend_create: out of memory");
    b->ops = &cuda_ops;
    b->impl = impl;
    mstar_status st = pin(b);
    int major = 0, minor = 0;
    if (st == MSTAR_OK && ((err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                                         b->device.index)) != cudaSuccess ||
                           (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                                                         b->device.index)) != cudaSuccess))
        st = cuda_error(b, err, "cudaDeviceGetAttribute(compute capability)");
    if (st != MSTAR_OK) {
        free(impl);
        b->impl = NULL;
        return st;
    }
    b->capability = major * 10 + minor;
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetInfo", &fn, 3020, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        impl->mem_get_info = (PFN_cuMemGetInfo_v3020)fn;
    else
        cudaGetLastError(); /* fall back to cudaMemGetInfo */
    fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        impl->address_range = (PFN_cuMemGetAddressRange_v3020)fn;
    else
        cudaGetLastError(); /* no IPC route: opening a segment is refused */
    return MSTAR_OK;
}
