/*
 * ucx_reader.c — the async reader (reference AsyncMooncakeReader) over a UCX engine.
 *
 * submit() copies a list of reads into a task and queues it; one of the reader's threads takes
 * it, groups the reads by session, and reads each group in batches of at most max_batch. When
 * all of a task's batches are over it runs the submitter's `then` work if any and completes the
 * handle; it fails with the first failure among them. A task whose batch cannot even start (a
 * malformed key, the engine shutting down) starts no more of them.
 *
 * A thread does not block on one batch at a time: it starts the batches of every task queued
 * when it looks (engine read_begin), waits for whichever of its batches finishes first or for a
 * new task, and looks at the queue again — so a few threads keep many reads in flight, as many
 * small edges read at once need (one batch per thread would cap them at the thread count). Tasks
 * finish in any order, as in the reference, where batches run concurrently on a thread pool.
 * Each thread sleeps on a condition of its own: a batch's finish wakes the thread that began it,
 * and a submission wakes one thread (an idle one, else a busy one in turn) — not all of them,
 * which on a machine of few cores costs a context switch per spurious wake-up.
 *
 * The completion handle (the library's Future, tensors/completion.h) is shared by the caller and
 * the task, so either may let go first; finishing it writes the caller's eventfd. wait_all
 * reports a failure once: it returns the first error since the previous wait_all.
 */
#include "tensors/ucx/ucx_internal.h"

#include "tensors/completion.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What a thread starts with: its reader, and the condition it sleeps on (with the engine's lock)
 * while its batches run — signalled when one of them finishes or a submission kicks it. */
typedef struct thread_slot {
    struct mstar__ucx_reader *r;
    pthread_cond_t wake;
} thread_slot;

typedef struct read_task {
    struct read_task *next; /* the reader's queue */
    mstar_completion *done;
    mstar__ucx_then_fn then;
    void *then_ctx;
    mstar__ucx_read_info *infos; /* copies; their strings and keys live after them */
    size_t n;
    size_t running;      /* batches begun and not ended */
    mstar_status status; /* the first failure */
    char message[256];
} read_task;

struct mstar__ucx_reader {
    mstar__ucx_engine *engine;
    unsigned max_batch;
    unsigned nthreads;
    unsigned started;
    pthread_t *threads;
    struct thread_slot *slots; /* one per thread */
    pthread_mutex_t lock;
    pthread_cond_t work; /* a task was queued, or closing */
    pthread_cond_t idle; /* inflight went down */
    unsigned waiting;    /* threads asleep on `work` */
    unsigned next_kick;  /* the busy thread the next submission wakes, round robin */
    read_task *head, *tail;
    atomic_bool queued; /* head != NULL, readable without the lock */
    size_t inflight;    /* submitted, not complete */
    bool closing;
    bool joined;
    mstar_status first_error;
    char first_message[256];
};

/* One thread's batches in flight, and the task of each (index-parallel). */
typedef struct worker {
    mstar__ucx_reader *r;
    pthread_cond_t *wake; /* its slot's */
    mstar__vec batches;   /* mstar__ucx_batch * */
    mstar__vec owners;    /* read_task * */
} worker;

/* ---- running tasks -------------------------------------------------------------------------- */

typedef struct by_session {
    const char *session;
    size_t index;
} by_session;

static int cmp_by_session(const void *a, const void *b)
{
    const by_session *x = a, *y = b;
    int c = strcmp(x->session, y->session);
    if (c != 0)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Keep a task's first failure (its message is mstar_last_error()). */
static void task_failed(read_task *t, mstar_status st)
{
    if (t->status != MSTAR_OK)
        return;
    t->status = st;
    snprintf(t->message, sizeof(t->message), "%s", mstar_last_error());
}

static void finish_task(mstar__ucx_reader *r, read_task *t)
{
    mstar_status st = t->status;
    if (st != MSTAR_OK)
        mstar_error_set(st, "%s", t->message); /* what `then` sees as the reads' failure */
    if (t->then != NULL)
        st = t->then(t->then_ctx, st);
    char msg[256] = "";
    if (st != MSTAR_OK)
        snprintf(msg, sizeof(msg), "%s", mstar_last_error());
    /* One step under the reader's lock, so that no observer sees the handle complete while
     * inflight still counts it, nor inflight at 0 (wait_all) before the handle and its eventfd
     * say it is over. The handle's own lock nests inside; it never takes the reader's. */
    pthread_mutex_lock(&r->lock);
    r->inflight--;
    if (st != MSTAR_OK && r->first_error == MSTAR_OK) {
        r->first_error = st;
        snprintf(r->first_message, sizeof(r->first_message), "%s", msg);
    }
    mstar__completion_finish(t->done, st, msg);
    pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->lock);
    mstar_completion_release(t->done);
    free(t);
}

/* End one batch of the worker's (index i) and finish its task if that was its last. */
static void end_batch(worker *w, size_t i)
{
    mstar__ucx_batch *b = *(mstar__ucx_batch **)mstar__vec_at(&w->batches, i);
    read_task *t = *(read_task **)mstar__vec_at(&w->owners, i);
    size_t last = w->batches.len - 1;
    memcpy(mstar__vec_at(&w->batches, i), mstar__vec_at(&w->batches, last), sizeof(b));
    memcpy(mstar__vec_at(&w->owners, i), mstar__vec_at(&w->owners, last), sizeof(t));
    w->batches.len = w->owners.len = last;
    mstar_status st = mstar__ucx_engine_read_end(w->r->engine, b);
    if (st != MSTAR_OK)
        task_failed(t, st);
    if (--t->running == 0)
        finish_task(w->r, t);
}

/* Begin one batch of a task: tracked by the worker, or, when that fails, ended at once. */
static mstar_status begin_batch(worker *w, read_task *t, const mstar__ucx_read_info *chunk,
                                size_t k)
{
    mstar__ucx_batch *b;
    mstar_status st = mstar__ucx_engine_read_begin(
        w->r->engine, mstar__ucx_engine_config(w->r->engine)->read_protocol, chunk, k, &b);
    if (st != MSTAR_OK)
        return st;
    t->running++;
    st = mstar__vec_push(&w->batches, &b);
    if (st == MSTAR_OK && (st = mstar__vec_push(&w->owners, &t)) != MSTAR_OK)
        w->batches.len--;
    if (st != MSTAR_OK) {
        mstar__ucx_engine_read_end(w->r->engine, b); /* waits: it cannot be tracked */
        t->running--;
        return mstar_error_set(MSTAR_ENOMEM, "ucx reader: out of memory tracking a batch");
    }
    return MSTAR_OK;
}

/* Group a task's reads by session (keeping submission order within a group) and begin them in
 * batches; the first that cannot begin fails the task, and no more are begun. */
static void begin_task(worker *w, read_task *t)
{
    size_t cap = t->n < w->r->max_batch ? t->n : w->r->max_batch;
    by_session *order = malloc(t->n * sizeof(*order));
    mstar__ucx_read_info *chunk = malloc(cap * sizeof(*chunk));
    mstar_status st =
        order != NULL && chunk != NULL
            ? MSTAR_OK
            : mstar_error_set(MSTAR_ENOMEM, "ucx reader: out of memory for %zu reads", t->n);
    for (size_t i = 0; st == MSTAR_OK && i < t->n; i++) {
        order[i].session = t->infos[i].session;
        order[i].index = i;
    }
    if (st == MSTAR_OK)
        qsort(order, t->n, sizeof(*order), cmp_by_session);
    size_t i = 0;
    while (st == MSTAR_OK && i < t->n) {
        size_t k = 0;
        const char *session = order[i].session;
        while (i < t->n && k < cap && strcmp(order[i].session, session) == 0)
            chunk[k++] = t->infos[order[i++].index];
        st = begin_batch(w, t, chunk, k);
    }
    free(order);
    free(chunk);
    if (st != MSTAR_OK)
        task_failed(t, st);
    if (t->running == 0)
        finish_task(w->r, t);
}

/* read_wait_any's interrupt: a task is waiting to be begun. */
static bool tasks_queued(void *ctx)
{
    return atomic_load(&((mstar__ucx_reader *)ctx)->queued);
}

static void *reader_main(void *arg)
{
    thread_slot *slot = arg;
    worker w;
    w.r = slot->r;
    w.wake = &slot->wake;
    mstar__vec_init(&w.batches, sizeof(mstar__ucx_batch *));
    mstar__vec_init(&w.owners, sizeof(read_task *));
    mstar__ucx_reader *r = w.r;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        while (r->head == NULL && w.batches.len == 0 && !r->closing) {
            r->waiting++;
            pthread_cond_wait(&r->work, &r->lock);
            r->waiting--;
        }
        read_task *took = r->head;
        r->head = r->tail = NULL;
        atomic_store(&r->queued, false);
        pthread_mutex_unlock(&r->lock);
        if (took == NULL && w.batches.len == 0)
            break; /* closing, and nothing is left */
        while (took != NULL) {
            read_task *next = took->next;
            begin_task(&w, took);
            took = next;
        }
        if (w.batches.len == 0)
            continue;
        size_t i = mstar__ucx_engine_read_wait_any(r->engine, w.batches.data, w.batches.len, w.wake,
                                                   tasks_queued, r);
        if (i < w.batches.len)
            end_batch(&w, i);
    }
    mstar__vec_free(&w.batches);
    mstar__vec_free(&w.owners);
    return NULL;
}

/* ---- the reader ----------------------------------------------------------------------------- */

mstar_status mstar__ucx_reader_create(mstar__ucx_engine *engine, unsigned threads,
                                      unsigned max_batch, mstar__ucx_reader **out)
{
    if (engine == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx reader: engine and out are required");
    if (threads < 1 || threads > 64)
        return mstar_error_set(MSTAR_EINVAL, "ucx reader: threads=%u, expected 1..64", threads);
    if (max_batch < 1 || max_batch > 65536)
        return mstar_error_set(MSTAR_EINVAL, "ucx reader: max_batch=%u, expected 1..65536",
                               max_batch);
    mstar__ucx_reader *r = calloc(1, sizeof(*r));
    pthread_t *tids = calloc(threads, sizeof(*tids));
    thread_slot *slots = calloc(threads, sizeof(*slots));
    if (r == NULL || tids == NULL || slots == NULL) {
        free(r);
        free(tids);
        free(slots);
        return mstar_error_set(MSTAR_ENOMEM, "ucx reader: out of memory");
    }
    r->engine = engine;
    r->max_batch = max_batch;
    r->nthreads = threads;
    r->threads = tids;
    r->slots = slots;
    for (unsigned i = 0; i < threads; i++) {
        slots[i].r = r;
        pthread_cond_init(&slots[i].wake, NULL);
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->work, NULL);
    pthread_cond_init(&r->idle, NULL);
    atomic_init(&r->queued, false);
    for (unsigned i = 0; i < threads; i++) {
        int rc = pthread_create(&r->threads[i], NULL, reader_main, &r->slots[i]);
        if (rc != 0) {
            mstar__ucx_reader_destroy(r);
            return mstar_error_set(MSTAR_EIO, "ucx reader: starting thread %u: %s", i,
                                   strerror(rc));
        }
        r->started++;
    }
    *out = r;
    return MSTAR_OK;
}

static mstar_status check_info(const mstar__ucx_read_info *in, size_t i, size_t *blob)
{
    if (in->session == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx submit: read %zu: session is NULL", i);
    size_t slen = strnlen(in->session, MSTAR_NAME_MAX + 1);
    if (slen > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL,
                               "ucx submit: read %zu: session is longer than %d "
                               "bytes",
                               i, MSTAR_NAME_MAX);
    if (in->nbytes > 0 && in->local_ptr == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx submit: read %zu: local_ptr is NULL", i);
    if (in->remote_key_len > MSTAR_REMOTE_KEY_MAX ||
        (in->remote_key_len > 0 && in->remote_key == NULL))
        return mstar_error_set(MSTAR_EINVAL,
                               "ucx submit: read %zu: remote_key_len %u (at most %d, with a key)",
                               i, in->remote_key_len, MSTAR_REMOTE_KEY_MAX);
    *blob += slen + 1 + in->remote_key_len;
    return MSTAR_OK;
}

/* One allocation: the task, the infos, then their strings and keys. */
static mstar_status copy_task(const mstar__ucx_read_info *infos, size_t n, read_task **out)
{
    size_t blob = 0;
    for (size_t i = 0; i < n; i++) {
        mstar_status st = check_info(&infos[i], i, &blob);
        if (st != MSTAR_OK)
            return st;
    }
    read_task *t = malloc(sizeof(*t) + n * sizeof(*infos) + blob);
    if (t == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx submit: out of memory for %zu reads", n);
    memset(t, 0, sizeof(*t));
    t->infos = (mstar__ucx_read_info *)(t + 1);
    t->n = n;
    char *p = (char *)(t->infos + n);
    for (size_t i = 0; i < n; i++) {
        t->infos[i] = infos[i];
        size_t slen = strlen(infos[i].session);
        memcpy(p, infos[i].session, slen + 1);
        t->infos[i].session = p;
        p += slen + 1;
        if (infos[i].remote_key_len > 0) {
            memcpy(p, infos[i].remote_key, infos[i].remote_key_len);
            t->infos[i].remote_key = (const uint8_t *)p;
            p += infos[i].remote_key_len;
        } else {
            t->infos[i].remote_key = NULL;
        }
    }
    *out = t;
    return MSTAR_OK;
}

mstar_status mstar__ucx_reader_submit(mstar__ucx_reader *r, const mstar__ucx_read_info *infos,
                                      size_t n, const mstar__completion_notice *notice,
                                      mstar_completion **out)
{
    return mstar__ucx_reader_submit_then(r, infos, n, notice, NULL, NULL, out);
}

mstar_status mstar__ucx_reader_submit_then(mstar__ucx_reader *r, const mstar__ucx_read_info *infos,
                                           size_t n, const mstar__completion_notice *notice,
                                           mstar__ucx_then_fn then, void *ctx,
                                           mstar_completion **out)
{
    if (r == NULL || out == NULL || (infos == NULL && n > 0))
        return mstar_error_set(MSTAR_EINVAL, "ucx submit: reader, infos and out are required");
    mstar_completion *c = NULL;
    if (n == 0) {
        mstar_status st = mstar__completion_create(NULL, &c);
        if (st != MSTAR_OK)
            return st;
        mstar_status done = then != NULL ? then(ctx, MSTAR_OK) : MSTAR_OK;
        mstar__completion_finish(c, done, done != MSTAR_OK ? mstar_last_error() : NULL);
        *out = c;
        return MSTAR_OK;
    }
    read_task *t = NULL;
    mstar_status st = copy_task(infos, n, &t);
    if (st == MSTAR_OK && (st = mstar__completion_create(notice, &c)) != MSTAR_OK)
        free(t);
    if (st != MSTAR_OK)
        return st;
    t->done = mstar__completion_retain(c); /* the task's reference; the caller has the other */
    t->then = then;
    t->then_ctx = ctx;
    t->status = MSTAR_OK;
    pthread_mutex_lock(&r->lock);
    if (r->closing) {
        pthread_mutex_unlock(&r->lock);
        mstar_completion_release(c);
        mstar_completion_release(c);
        free(t);
        return mstar_error_set(MSTAR_ECLOSED, "ucx submit: the reader is shut down");
    }
    if (r->tail != NULL)
        r->tail->next = t;
    else
        r->head = t;
    r->tail = t;
    atomic_store(&r->queued, true);
    r->inflight++;
    *out = c;
    /* One thread is enough to take it: an idle one, or else one that waits on its reads (every
     * busy thread looks at the queue before it sleeps, so whichever is kicked takes it soon). */
    pthread_cond_t *kick = NULL;
    if (r->waiting > 0)
        pthread_cond_signal(&r->work);
    else
        kick = &r->slots[r->next_kick++ % r->started].wake;
    pthread_mutex_unlock(&r->lock);
    if (kick != NULL)
        mstar__ucx_engine_read_kick(r->engine, kick);
    return MSTAR_OK;
}

size_t mstar__ucx_reader_inflight(mstar__ucx_reader *r)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->inflight;
    pthread_mutex_unlock(&r->lock);
    return n;
}

mstar_status mstar__ucx_reader_wait_all(mstar__ucx_reader *r)
{
    pthread_mutex_lock(&r->lock);
    while (r->inflight > 0)
        pthread_cond_wait(&r->idle, &r->lock);
    mstar_status st = r->first_error;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", r->first_message);
    r->first_error = MSTAR_OK;
    r->first_message[0] = '\0';
    pthread_mutex_unlock(&r->lock);
    if (st != MSTAR_OK)
        return mstar_error_set(st, "%s", msg);
    return MSTAR_OK;
}

void mstar__ucx_reader_shutdown(mstar__ucx_reader *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->lock);
    r->closing = true;
    bool join = !r->joined;
    r->joined = true;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->lock);
    if (!join)
        return;
    for (unsigned i = 0; i < r->started; i++)
        pthread_join(r->threads[i], NULL);
}

void mstar__ucx_reader_destroy(mstar__ucx_reader *r)
{
    if (r == NULL)
        return;
    mstar__ucx_reader_shutdown(r);
    for (unsigned i = 0; i < r->nthreads; i++)
        pthread_cond_destroy(&r->slots[i].wake);
    free(r->slots);
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->work);
    pthread_mutex_destroy(&r->lock);
    free(r->threads);
    free(r);
}
