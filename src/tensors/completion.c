/*
 * completion.c — see completion.h.
 */
#include "tensors/completion.h"

#include "core/cond.h"
#include "core/spare_cpu.h"
#include "core/vec.h"
#include "mesh/spin_break.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct mstar_completion {
    atomic_uint refs;
    atomic_bool done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    mstar_status status;
    char message[256];
    const mstar__completion_notice *notice; /* NULL: nobody */
    uint64_t finished_ns; /* written before `done` is set, read only after it is seen */
};

mstar_status mstar__completion_create(const mstar__completion_notice *notice,
                                      mstar_completion **out)
{
    mstar_completion *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "completion handle");
    atomic_init(&c->refs, 1);
    atomic_init(&c->done, false);
    mstar__cond_init_monotonic(&c->cond);
    pthread_mutex_init(&c->lock, NULL);
    c->notice = notice;
    *out = c;
    return MSTAR_OK;
}

mstar_completion *mstar__completion_retain(mstar_completion *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void mstar_completion_release(mstar_completion *c)
{
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void mstar__completion_finish(mstar_completion *c, mstar_status status, const char *message)
{
    pthread_mutex_lock(&c->lock);
    if (atomic_load(&c->done)) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->status = status;
    c->finished_ns = mstar__now_ns();
    if (status != MSTAR_OK)
        snprintf(c->message, sizeof(c->message), "%s", message != NULL ? message : "");
    atomic_store(&c->done, true);
    pthread_cond_broadcast(&c->cond);
    const mstar__completion_notice *n = c->notice;
    pthread_mutex_unlock(&c->lock);
    if (n == NULL)
        return;
    if (n->mesh != NULL)
        mstar__mesh_spin_break(n->mesh);
    if (n->fd >= 0) {
        uint64_t one = 1;
        while (write(n->fd, &one, sizeof(one)) < 0 && errno == EINTR) {
        }
    }
}

bool mstar__completion_done(const mstar_completion *c)
{
    return atomic_load(&((mstar_completion *)c)->done);
}

uint64_t mstar__completion_finished_ns(const mstar_completion *c)
{
    mstar_completion *m = (mstar_completion *)c;
    return atomic_load(&m->done) ? m->finished_ns : 0;
}

static mstar_status result(mstar_completion *c)
{
    if (c->status == MSTAR_OK)
        return MSTAR_OK;
    return mstar_error_set(c->status, "%s", c->message);
}

mstar_status mstar_completion_poll(mstar_completion *c)
{
    if (c == NULL)
        return mstar_error_set(MSTAR_EINVAL, "completion is NULL");
    if (!atomic_load(&c->done))
        return MSTAR_EAGAIN;
    pthread_mutex_lock(&c->lock);
    mstar_status st = result(c);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* Before a wait sleeps: poll `done` for up to MSTAR_RING_SPIN_US (the bound the mesh's receive
 * spins for, docs/environment.md), no longer than the wait's timeout, and only while a CPU is
 * spare (core/spare_cpu.h). A read that lands meanwhile (finished by a reader or watcher
 * thread) costs the waiter no sleep and wake-up, which on the 2-core VM cost about 10 µs of CPU
 * time a side. A bad value of the knob is the wait's error, as it is the mesh's. */
static mstar_status spin_until_done(mstar_completion *c, int timeout_ms)
{
    int64_t us;
    mstar_status st =
        mstar_env_get_int("MSTAR_RING_SPIN_US", MSTAR_RING_SPIN_US_DEFAULT, 0, 1000000, &us);
    if (st != MSTAR_OK)
        return st;
    if (timeout_ms > 0 && us > (int64_t)timeout_ms * 1000)
        us = (int64_t)timeout_ms * 1000;
    uint64_t now = mstar__now_ns(), end = now + (uint64_t)us * 1000;
    while (!atomic_load(&c->done) && now < end && mstar__cpu_spare(now)) {
        mstar__cpu_relax();
        now = mstar__now_ns();
    }
    return MSTAR_OK;
}

mstar_status mstar_completion_wait(mstar_completion *c, int timeout_ms)
{
    if (c == NULL)
        return mstar_error_set(MSTAR_EINVAL, "completion is NULL");
    if (timeout_ms != 0 && !atomic_load(&c->done)) {
        mstar_status st = spin_until_done(c, timeout_ms);
        if (st != MSTAR_OK)
            return st;
    }
    struct timespec deadline = mstar__deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&c->lock);
    while (!atomic_load(&c->done)) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&c->cond, &c->lock);
        } else if (timeout_ms == 0 ||
                   pthread_cond_timedwait(&c->cond, &c->lock, &deadline) == ETIMEDOUT) {
            if (atomic_load(&c->done))
                break;
            pthread_mutex_unlock(&c->lock);
            return mstar_error_set(MSTAR_ETIMEDOUT, "read still running after %d ms", timeout_ms);
        }
    }
    mstar_status st = result(c);
    pthread_mutex_unlock(&c->lock);
    return st;
}

void mstar_completion_list_clear(mstar_completion_list *list)
{
    for (uint32_t i = 0; i < list->n; i++)
        mstar_completion_release(list->items[i]);
    free(list->items);
    list->items = NULL;
    list->n = 0;
}
