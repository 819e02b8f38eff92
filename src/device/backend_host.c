/*
 * backend_host.c — the host backend: the device is this process's memory and the calling thread.
 *
 * Streams and events are synchronous: enqueued work runs at once, under the stream's lock so that
 * two threads enqueueing on one stream still run its work one item at a time. A capture records
 * each copy, memset and mstar_launch (function plus a copy of its arguments) instead of running
 * it; a replay runs the records in order. That is what lets the runner's buckets, slots, padding,
 * staging and pools run in CI exactly as they do on a GPU.
 *
 * Asynchronous mode (mstar__host_backend_set_async, for ordering tests): each stream made after
 * it runs its queue on a worker thread of its own, in order; an event record completes when the
 * stream's thread reaches it, and a wait holds the waiting stream's thread (a synchronous
 * stream: the caller) until the record it waits for completed. So work on two streams overlaps
 * and only events order it, as on a GPU, and a test can see a missing wait.
 *
 * Memory info reads the budget (MSTAR_HOST_MEMORY_BUDGET_MB, or mstar_backend_set_memory_budget):
 * free = budget − raw bytes held, and raw allocations past the budget fail. No budget: plenty.
 */
#include "device/backend.h"

#include <pthread.h>
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
    mstar__vec marks; /* struct host_event *: recorded by every launch, after its calls */
};

/* ---- events ------------------------------------------------------------------------------ */

struct host_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded;  /* records made */
    uint64_t completed; /* the latest record its stream has reached */
    /* An interprocess event (host_ipc_event_create): its handle's serial number, and the events
     * opened from that handle, which share it, counted; both under exported_lock. */
    uint64_t serial;
    int refs;
    struct host_event *next_exported;
};

static uint64_t event_next(struct host_event *h)
{
    pthread_mutex_lock(&h->mu);
    uint64_t gen = ++h->recorded;
    pthread_mutex_unlock(&h->mu);
    return gen;
}

static uint64_t event_last(struct host_event *h)
{
    pthread_mutex_lock(&h->mu);
    uint64_t gen = h->recorded;
    pthread_mutex_unlock(&h->mu);
    return gen;
}

static void event_complete(struct host_event *h, uint64_t gen)
{
    pthread_mutex_lock(&h->mu);
    if (gen > h->completed)
        h->completed = gen;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void event_wait_for(struct host_event *h, uint64_t gen)
{
    pthread_mutex_lock(&h->mu);
    while (h->completed < gen)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

/* ---- asynchronous streams ---------------------------------------------------------------- */

enum item_kind { ITEM_CALL, ITEM_GRAPH, ITEM_MARK, ITEM_WAIT };

struct host_item {
    enum item_kind kind;
    mstar_host_fn fn;                   /* CALL, with its own copy of the arguments */
    void *args;                         /* CALL: malloc'd, freed once run */
    const struct host_recording *graph; /* GRAPH */
    struct host_event *event;           /* MARK, WAIT */
    uint64_t gen;                       /* MARK: the record it completes; WAIT: waited for */
};

struct host_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mstar__vec items; /* struct host_item, a queue from head */
    size_t head;
    bool busy; /* an item is running */
    bool stop;
};

static void run_calls(const struct host_recording *r)
{
    for (size_t i = 0; i < r->calls.len; i++) {
        struct host_call *c = mstar__vec_at(&r->calls, i);
        c->fn(mstar__vec_at(&r->arena, c->args_offset));
    }
}

static void run_item(struct host_item *it)
{
    switch (it->kind) {
    case ITEM_CALL:
        it->fn(it->args);
        free(it->args);
        break;
    case ITEM_GRAPH:
        run_calls(it->graph);
        break;
    case ITEM_MARK:
        event_complete(it->event, it->gen);
        break;
    case ITEM_WAIT:
        event_wait_for(it->event, it->gen);
        break;
    }
}

static void *worker_main(void *p)
{
    struct host_worker *w = p;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->head == w->items.len && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->head == w->items.len)
            break; /* stopped, and nothing is left */
        struct host_item it = *(struct host_item *)mstar__vec_at(&w->items, w->head++);
        if (w->head == w->items.len)
            w->head = w->items.len = 0;
        w->busy = true;
        pthread_mutex_unlock(&w->mu);
        run_item(&it);
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static mstar_status worker_push(struct host_worker *w, const struct host_item *it)
{
    pthread_mutex_lock(&w->mu);
    mstar_status st = mstar__vec_push(&w->items, it);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return st;
}

static void worker_drain(struct host_worker *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->head < w->items.len || w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static mstar_status worker_start(mstar_stream *s)
{
    struct host_worker *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_stream_create: out of memory");
    mstar__vec_init(&w->items, sizeof(struct host_item));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return mstar_error_set(MSTAR_ENOMEM, "mstar_stream_create: cannot start the stream's "
                                             "thread");
    }
    s->worker = w;
    return MSTAR_OK;
}

static void worker_stop(mstar_stream *s)
{
    struct host_worker *w = s->worker;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL); /* it runs what is queued first */
    mstar__vec_free(&w->items);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    s->worker = NULL;
}

void mstar__host_backend_set_async(mstar_backend *b, bool async)
{
    b->host_async = async;
}

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
    mstar__vec_free(&r->marks);
    free(r);
}

/* Run fn(args) now, or record it while the stream captures. */
static mstar_status enqueue(mstar_stream *s, mstar_host_fn fn, const void *args, size_t size)
{
    if (s->capturing)
        return record(s->capture_state, fn, args, size);
    if (s->worker != NULL) {
        struct host_item it = { .kind = ITEM_CALL, .fn = fn, .args = malloc(size ? size : 1) };
        if (it.args == NULL)
            return mstar_error_set(MSTAR_ENOMEM,
                                   "mstar_launch: out of memory for %zu bytes of "
                                   "arguments",
                                   size);
        if (size != 0)
            memcpy(it.args, args, size);
        mstar_status st = worker_push(s->worker, &it);
        if (st != MSTAR_OK)
            free(it.args);
        return st;
    }
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
    mstar__host_ipc_forget(b, NULL);
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
    mstar__host_ipc_forget(b, ptr);
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
    return s->backend->host_async ? worker_start(s) : MSTAR_OK;
}

static void host_stream_destroy(mstar_stream *s)
{
    worker_stop(s);
}

static mstar_status host_stream_synchronize(mstar_stream *s)
{
    if (s->worker != NULL)
        worker_drain(s->worker); /* a synchronous stream's work already ran */
    return MSTAR_OK;
}

static mstar_status host_stream_query(mstar_stream *s)
{
    struct host_worker *w = s->worker;
    if (w == NULL)
        return MSTAR_OK; /* a synchronous stream's work already ran */
    pthread_mutex_lock(&w->mu);
    bool idle = w->head == w->items.len && !w->busy;
    pthread_mutex_unlock(&w->mu);
    return idle ? MSTAR_OK : MSTAR_EAGAIN;
}

/* Waits for the event's latest record, as it stands now. */
static mstar_status host_stream_wait_event(mstar_stream *s, mstar_event *e)
{
    uint64_t gen = event_last(e->host);
    if (gen == 0)
        return MSTAR_OK; /* never recorded: nothing to wait for */
    if (s->worker == NULL) {
        event_wait_for(e->host, gen); /* only an asynchronous stream can still owe it */
        return MSTAR_OK;
    }
    struct host_item it = { .kind = ITEM_WAIT, .event = e->host, .gen = gen };
    return worker_push(s->worker, &it);
}

static mstar_status host_event_create(mstar_event *e)
{
    struct host_event *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_event_create: out of memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    e->host = h;
    return MSTAR_OK;
}

/* The stand-in's interprocess events (ipc_host.c): the handle says which backend made the event,
 * and a serial number tells events apart as CUDA's handles do. Opening a handle gives the very
 * event its exporter records (kept alive until both have destroyed it), so a reader sees it fire
 * when the exporter's stream reaches the record, and never if that stream is stuck, as on a GPU;
 * a handle of no live event is MSTAR_ENOENT. */
static pthread_mutex_t exported_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_event *exported_events;

static mstar_status host_ipc_event_create(mstar_event *e, uint8_t *handle)
{
    static uint64_t serial;
    mstar_status st = host_event_create(e);
    if (st != MSTAR_OK)
        return st;
    struct host_event *h = e->host;
    pthread_mutex_lock(&exported_lock);
    h->serial = ++serial;
    h->refs = 1;
    h->next_exported = exported_events;
    exported_events = h;
    pthread_mutex_unlock(&exported_lock);
    memset(handle, 0, MSTAR__IPC_HANDLE_BYTES);
    memcpy(handle, "mstar-host-event", 16);
    memcpy(handle + 16, &h->serial, sizeof(h->serial));
    return MSTAR_OK;
}

static mstar_status host_ipc_event_open(mstar_event *e, const uint8_t *handle)
{
    uint64_t n;
    memcpy(&n, handle + 16, sizeof(n));
    struct host_event *h = NULL;
    pthread_mutex_lock(&exported_lock);
    if (memcmp(handle, "mstar-host-event", 16) == 0)
        for (h = exported_events; h != NULL && h->serial != n; h = h->next_exported) {
        }
    if (h != NULL)
        h->refs++;
    pthread_mutex_unlock(&exported_lock);
    if (h == NULL)
        return mstar_error_set(MSTAR_ENOENT, "opening another process's event: the handle names "
                                             "no live event of the host backend");
    e->host = h;
    return MSTAR_OK;
}

static void host_event_destroy(mstar_event *e)
{
    struct host_event *h = e->host;
    if (h->serial != 0) {
        pthread_mutex_lock(&exported_lock);
        bool last = --h->refs == 0;
        for (struct host_event **p = &exported_events; last && *p != NULL;
             p = &(*p)->next_exported) {
            if (*p == h) {
                *p = h->next_exported;
                break;
            }
        }
        pthread_mutex_unlock(&exported_lock);
        if (!last)
            return;
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static mstar_status host_event_record(mstar_event *e, mstar_stream *s)
{
    uint64_t gen = event_next(e->host);
    if (s->worker == NULL) {
        event_complete(e->host, gen); /* the stream's work already ran */
        return MSTAR_OK;
    }
    struct host_item it = { .kind = ITEM_MARK, .event = e->host, .gen = gen };
    return worker_push(s->worker, &it);
}

/* Every launch of the graph records the event once its calls have run (graph_launch). */
static mstar_status host_event_record_in_capture(mstar_event *e, mstar_stream *s)
{
    struct host_recording *r = s->capture_state;
    return mstar__vec_push(&r->marks, &e->host);
}

static mstar_status host_event_query(mstar_event *e)
{
    struct host_event *h = e->host;
    pthread_mutex_lock(&h->mu);
    bool done = h->completed >= h->recorded;
    pthread_mutex_unlock(&h->mu);
    return done ? MSTAR_OK : MSTAR_EAGAIN;
}

static mstar_status host_event_synchronize(mstar_event *e)
{
    event_wait_for(e->host, event_last(e->host));
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
    mstar__vec_init(&r->marks, sizeof(struct host_event *));
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
    if (s->worker != NULL) {
        struct host_item it = { .kind = ITEM_GRAPH, .graph = r };
        mstar_status st = worker_push(s->worker, &it);
        for (size_t i = 0; st == MSTAR_OK && i < r->marks.len; i++) {
            struct host_event *h = *(struct host_event **)mstar__vec_at(&r->marks, i);
            struct host_item mark = { .kind = ITEM_MARK, .event = h, .gen = event_next(h) };
            st = worker_push(s->worker, &mark);
        }
        return st;
    }
    pthread_mutex_lock(&s->lock);
    run_calls(r);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < r->marks.len; i++) {
        struct host_event *h = *(struct host_event **)mstar__vec_at(&r->marks, i);
        event_complete(h, event_next(h));
    }
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
    .ipc_mem_export = mstar__host_ipc_mem_export,
    .ipc_mem_open = mstar__host_ipc_mem_open,
    .ipc_mem_close = mstar__host_ipc_mem_close,
    .ipc_event_create = host_ipc_event_create,
    .ipc_event_open = host_ipc_event_open,
    .host_alloc_pinned = host_raw_alloc,
    .host_free_pinned = host_raw_free,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .mem_info = host_mem_info,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_synchronize = host_stream_synchronize,
    .stream_query = host_stream_query,
    .stream_wait_event = host_stream_wait_event,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_record_in_capture = host_event_record_in_capture,
    .event_query = host_event_query,
    .event_synchronize = host_event_synchronize,
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
