/*
 * backend_host.c — the host backend: the device is this process's memory and the calling thread.
 *
 * Streams and events are synchronous: enqueued work runs at once, under the stream's lock so that
 * two threads enqueueing on one stream still run its work one item at a time. A capture records
 * each copy, memset and mstar_launch (function plus a copy of its arguments) instead of running
 * it; a replay runs the records in order. That is what lets the runner's buckets, slots, padding,
 * staging and pools run in CI exactly as they do on a GPU.
 *
 * Memory info reads the budget (MSTAR_HOST_MEMORY_BUDGET_MB, or mstar_backend_set_memory_budget):
 * free = budget − raw bytes held, and raw allocations past the budget fail. No budget: plenty.
 */
#include "device/backend.h"

#include <stdlib.h>
#include <string.h>

#define HOST_ALIGN 512 /* = MSTAR__BLOCK_ROUND: the caching allocator aligns blocks to it */
#define PLENTY     (UINT64_MAX / 2)

/* One recorded call; its argument bytes follow at args_offset in the recording's arena. */
struct host_call {
    mstar_host_fn fn;
    size_t args_offset;
};

struct host_recording {
    mstar__vec calls; /* struct host_call */
    mstar__vec arena; /* bytes, in 16-byte units so every copy stays aligned */
};

struct copy_args {
    void *dst;
    const void *src;
    size_t nbytes;
};

struct set_args {
    void *dst;
    int value;
    size_t nbytes;
};

static void run_copy(void *p)
{
    struct copy_args *a = p;
    memmove(a->dst, a->src, a->nbytes);
}

static void run_set(void *p)
{
    struct set_args *a = p;
    memset(a->dst, a->value, a->nbytes);
}

typedef struct {
    _Alignas(16) unsigned char b[16];
} unit16;

static mstar_status record(struct host_recording *r, mstar_host_fn fn, const void *args,
                           size_t size)
{
    size_t units = (size + sizeof(unit16) - 1) / sizeof(unit16);
    struct host_call call = { fn, r->arena.len };
    void *dst = NULL;
    mstar_status st = mstar__vec_grow(&r->arena, units == 0 ? 1 : units, &dst);
    if (st != MSTAR_OK)
        return st;
    if (size != 0)
        memcpy(dst, args, size);
    st = mstar__vec_push(&r->calls, &call);
    if (st != MSTAR_OK)
        r->arena.len = call.args_offset;
    return st;
}

static void recording_free(struct host_recording *r)
{
    if (r == NULL)
        return;
    mstar__vec_free(&r->calls);
    mstar__vec_free(&r->arena);
    free(r);
}

/* Run fn(args) now, or record it while the stream captures. */
static mstar_status enqueue(mstar_stream *s, mstar_host_fn fn, const void *args, size_t size)
{
    if (s->capturing)
        return record(s->capture_state, fn, args, size);
    /* Run on an aligned copy: the caller's bytes carry no alignment promise. */
    unit16 local[8];
    void *copy = local;
    if (size > sizeof(local)) {
        copy = malloc(size);
        if (copy == NULL)
            return mstar_error_set(MSTAR_ENOMEM,
                                   "mstar_launch: out of memory for %zu bytes of "
                                   "arguments",
                                   size);
    }
    if (size != 0)
        memcpy(copy, args, size);
    pthread_mutex_lock(&s->lock);
    fn(copy);
    pthread_mutex_unlock(&s->lock);
    if (copy != local)
        free(copy);
    return MSTAR_OK;
}

static void host_destroy(mstar_backend *b)
{
    (void)b;
}

static mstar_status host_raw_alloc(mstar_backend *b, size_t nbytes, void **out)
{
    void *p = NULL;
    size_t rounded = (nbytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    if (posix_memalign(&p, HOST_ALIGN, rounded) != 0)
        return mstar_error_set(MSTAR_ENOMEM, "host backend: cannot allocate %zu bytes", nbytes);
    *out = p;
    return MSTAR_OK;
}

static void host_raw_free(mstar_backend *b, void *ptr)
{
    free(ptr);
}

static mstar_status host_register(mstar_backend *b, void *ptr, size_t nbytes, unsigned flags)
{
    return MSTAR_OK; /* host memory is as pinned as it gets here; backend.c tracks the range */
}

static mstar_status host_unregister(mstar_backend *b, void *ptr)
{
    return MSTAR_OK;
}

static mstar_status host_mem_info(mstar_backend *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
    pthread_mutex_lock(&b->lock);
    uint64_t budget = b->budget, held = b->raw_bytes;
    pthread_mutex_unlock(&b->lock);
    if (budget == 0) {
        *free_bytes = *total_bytes = PLENTY;
    } else {
        *total_bytes = budget;
        *free_bytes = held >= budget ? 0 : budget - held;
    }
    return MSTAR_OK;
}

static mstar_status host_stream_create(mstar_stream *s)
{
    return MSTAR_OK;
}

static void host_stream_destroy(mstar_stream *s)
{
}

static mstar_status host_stream_synchronize(mstar_stream *s)
{
    return MSTAR_OK; /* everything already ran */
}

static mstar_status host_stream_wait_event(mstar_stream *s, mstar_event *e)
{
    return MSTAR_OK; /* the event's work already ran */
}

static mstar_status host_event_create(mstar_event *e)
{
    return MSTAR_OK;
}

static void host_event_destroy(mstar_event *e)
{
}

static mstar_status host_event_record(mstar_event *e, mstar_stream *s)
{
    return MSTAR_OK;
}

/* A host replay has run all its work when it returns: the event has nothing to wait for. */
static mstar_status host_event_record_in_capture(mstar_event *e, mstar_stream *s)
{
    return MSTAR_OK;
}

static mstar_status host_event_query(mstar_event *e)
{
    return MSTAR_OK;
}

static mstar_status host_memcpy_async(mstar_stream *s, void *dst, const void *src, size_t nbytes,
                                      mstar_memcpy_kind kind)
{
    struct copy_args a = { dst, src, nbytes };
    return enqueue(s, run_copy, &a, sizeof(a));
}

static mstar_status host_memset_async(mstar_stream *s, void *dst, int value, size_t nbytes)
{
    struct set_args a = { dst, value, nbytes };
    return enqueue(s, run_set, &a, sizeof(a));
}

static mstar_status host_launch(mstar_stream *s, mstar_host_fn fn, const void *args, size_t size)
{
    return enqueue(s, fn, args, size);
}

static mstar_status host_capture_begin(mstar_stream *s)
{
    struct host_recording *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_stream_begin_capture: out of memory");
    mstar__vec_init(&r->calls, sizeof(struct host_call));
    mstar__vec_init(&r->arena, sizeof(unit16));
    s->capture_state = r;
    return MSTAR_OK;
}

static mstar_status host_capture_end(mstar_stream *s, mstar_graph *g)
{
    struct host_recording *r = s->capture_state;
    g->native = r;
    g->nodes = r->calls.len;
    return MSTAR_OK;
}

static mstar_status host_graph_instantiate(mstar_graph *g, bool keep_graph)
{
    g->exec = g->native; /* the recording is its own executable */
    return MSTAR_OK;
}

static mstar_status host_graph_launch(mstar_graph *g, mstar_stream *s)
{
    struct host_recording *r = g->exec;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < r->calls.len; i++) {
        struct host_call *c = mstar__vec_at(&r->calls, i);
        c->fn(mstar__vec_at(&r->arena, c->args_offset));
    }
    pthread_mutex_unlock(&s->lock);
    return MSTAR_OK;
}

static void host_graph_release(mstar_graph *g)
{
    recording_free(g->native);
    g->native = g->exec = NULL;
}

static const mstar__backend_ops host_ops = {
    .name = "host",
    .destroy = host_destroy,
    .raw_alloc = host_raw_alloc,
    .raw_free = host_raw_free,
    .host_alloc_pinned = host_raw_alloc,
    .host_free_pinned = host_raw_free,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .mem_info = host_mem_info,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_synchronize = host_stream_synchronize,
    .stream_wait_event = host_stream_wait_event,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_record_in_capture = host_event_record_in_capture,
    .event_query = host_event_query,
    .event_synchronize = host_event_query,
    .memcpy_async = host_memcpy_async,
    .memset_async = host_memset_async,
    .launch = host_launch,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .graph_instantiate = host_graph_instantiate,
    .graph_launch = host_graph_launch,
    .graph_release = host_graph_release,
};

mstar_status mstar__host_backend_create(mstar_backend *b)
{
    int64_t mb = 0;
    mstar_status st = mstar_env_get_int("MSTAR_HOST_MEMORY_BUDGET_MB", 0, 0, INT64_C(1) << 40, &mb);
    if (st != MSTAR_OK)
        return st;
    b->ops = &host_ops;
    b->budget = (uint64_t)mb << 20;
    b->capability = 0;
    return MSTAR_OK;
}
