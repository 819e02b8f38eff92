/*
 * landing.c — the watcher that finishes device reads once their copies have landed (landing.h).
 *
 * One thread, started with the first read handed over. `queue` holds the reads in the order
 * their probes were recorded; the thread asks only the oldest, since a stream runs in order and
 * no later probe can fire first. It runs the read's function outside the lock (the function
 * finishes a completion, which wakes a waiter and writes the owner's event fd), then moves the
 * probe to the spares. While reads are queued it asks at once and yields the CPU between asks
 * for up to MSTAR__CUDA_IPC_SPIN_NS, then naps doubling up to MSTAR__CUDA_IPC_NAP_MAX_NS (a
 * copy that long is a stuck stream, not one still running); with none it sleeps on `wake`.
 */
#include "tensors/cuda_ipc/landing.h"

#include "core/vec.h"
#include "tensors/cuda_ipc/nap.h"

#include <pthread.h>
#include <stdlib.h>

struct watched {
    mstar_event *probe;
    mstar__landed_fn fn;
    void *ctx;
};

struct mstar__landing {
    mstar_backend *backend;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    mstar__vec queue;  /* struct watched, oldest first */
    mstar__vec spares; /* mstar_event *: probes no read holds */
    bool started;      /* the thread runs */
    bool stopping;     /* destroy: finish the queue, then end */
    pthread_t thread;
};

/* Ask `probe` until it has fired (MSTAR_OK) or asking fails. */
static mstar_status wait_fired(mstar_event *probe)
{
    uint64_t start = mstar__now_ns();
    long nap_ns = 0;
    for (;;) {
        mstar_status st = mstar_event_query(probe);
        if (st != MSTAR_EAGAIN)
            return st;
        nap_ns = mstar__cuda_ipc_nap_ns(mstar__now_ns() - start, nap_ns);
        mstar__cuda_ipc_pause(nap_ns);
    }
}

static void *watch(void *arg)
{
    mstar__landing *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->queue.len == 0 && !w->stopping)
            pthread_cond_wait(&w->wake, &w->lock);
        if (w->queue.len == 0)
            break;
        struct watched r = *(struct watched *)mstar__vec_at(&w->queue, 0);
        pthread_mutex_unlock(&w->lock);
        mstar_status st = wait_fired(r.probe);
        pthread_mutex_lock(&w->lock);
        mstar__vec_remove(&w->queue, 0); /* out of the count before its waiters wake */
        pthread_mutex_unlock(&w->lock);
        r.fn(r.ctx, st);
        pthread_mutex_lock(&w->lock);
        if (mstar__vec_push(&w->spares, &r.probe) != MSTAR_OK)
            mstar_event_destroy(r.probe);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

mstar_status mstar__landing_create(mstar_backend *backend, mstar__landing **out)
{
    mstar__landing *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "read watcher: out of memory");
    w->backend = backend;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    mstar__vec_init(&w->queue, sizeof(struct watched));
    mstar__vec_init(&w->spares, sizeof(mstar_event *));
    *out = w;
    return MSTAR_OK;
}

mstar_status mstar__landing_probe_take(mstar__landing *w, mstar_event **out)
{
    pthread_mutex_lock(&w->lock);
    bool spare = w->spares.len > 0;
    if (spare)
        *out = *(mstar_event **)mstar__vec_at(&w->spares, --w->spares.len);
    pthread_mutex_unlock(&w->lock);
    return spare ? MSTAR_OK : mstar_event_create(w->backend, out);
}

void mstar__landing_probe_give(mstar__landing *w, mstar_event *probe)
{
    pthread_mutex_lock(&w->lock);
    mstar_status st = mstar__vec_push(&w->spares, &probe);
    pthread_mutex_unlock(&w->lock);
    if (st != MSTAR_OK)
        mstar_event_destroy(probe);
}

mstar_status mstar__landing_add(mstar__landing *w, mstar_event *probe, mstar__landed_fn fn,
                                void *ctx)
{
    struct watched r = { probe, fn, ctx };
    pthread_mutex_lock(&w->lock);
    mstar_status st = MSTAR_OK;
    if (!w->started) {
        int err = pthread_create(&w->thread, NULL, watch, w);
        w->started = err == 0;
        if (err != 0)
            st = mstar_error_set(MSTAR_ENOMEM, "read watcher: no thread (error %d)", err);
    }
    if (st == MSTAR_OK)
        st = mstar__vec_push(&w->queue, &r);
    if (st == MSTAR_OK && w->queue.len == 1)
        pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    return st;
}

size_t mstar__landing_pending(mstar__landing *w)
{
    pthread_mutex_lock(&w->lock);
    size_t n = w->queue.len;
    pthread_mutex_unlock(&w->lock);
    return n;
}

void mstar__landing_destroy(mstar__landing *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    bool started = w->started;
    pthread_mutex_unlock(&w->lock);
    if (started)
        pthread_join(w->thread, NULL);
    for (size_t i = 0; i < w->spares.len; i++)
        mstar_event_destroy(*(mstar_event **)mstar__vec_at(&w->spares, i));
    mstar__vec_free(&w->spares);
    mstar__vec_free(&w->queue);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
