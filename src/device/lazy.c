/*
 * lazy.c — one-time initialisation that a capture refuses to run.
 *
 * The C counterpart of the reference's "a torch.compile'd forward that would recompile inside the
 * capture is failed up front": setup a step does on first use (a library handle, a workspace, an
 * autotuned choice) cannot be recorded into a graph. Warm-ups run it; a first use on a capturing
 * stream fails with MSTAR_ESTATE naming the state before anything reaches the device, and the
 * capture wrapper (capture.c) unwinds the capture with that reason.
 */
#include "mstar/device.h"

#include "core/assert.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct mstar_lazy {
    char *what;
    mstar_lazy_fn fn;
    void *user;
    pthread_mutex_t lock;
    atomic_bool done;
};

mstar_status mstar_lazy_create(const char *what, mstar_lazy_fn fn, void *user, mstar_lazy **out)
{
    if (what == NULL || fn == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_lazy_create: what, fn and out must not be NULL");
    mstar_lazy *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->what = strdup(what)) == NULL) {
        free(l);
        return mstar_error_set(MSTAR_ENOMEM, "mstar_lazy_create: out of memory");
    }
    l->fn = fn;
    l->user = user;
    pthread_mutex_init(&l->lock, NULL);
    atomic_init(&l->done, false);
    *out = l;
    return MSTAR_OK;
}

void mstar_lazy_destroy(mstar_lazy *l)
{
    if (l == NULL)
        return;
    pthread_mutex_destroy(&l->lock);
    free(l->what);
    free(l);
}

bool mstar_lazy_done(const mstar_lazy *l)
{
    return atomic_load(&l->done);
}

mstar_status mstar_lazy_ensure(mstar_lazy *l, mstar_stream *stream)
{
    if (l == NULL || stream == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_lazy_ensure: lazy and stream must not be NULL");
    if (atomic_load(&l->done))
        return MSTAR_OK;
    if (mstar_stream_is_capturing(stream))
        return mstar_error_set(MSTAR_ESTATE,
                               "lazy initialisation of '%s' inside a capture: a capture records "
                               "device work and cannot run one-time setup; run a warm-up on the "
                               "capture stream first",
                               l->what);
    MSTAR__ASSERT(!mstar_stream_is_capturing(stream)); /* I-19 */
    pthread_mutex_lock(&l->lock);
    mstar_status st = MSTAR_OK;
    if (!atomic_load(&l->done)) {
        st = l->fn(stream, l->user);
        if (st == MSTAR_OK)
            atomic_store(&l->done, true);
        else
            mstar_error_wrap("lazy initialisation of '%s'", l->what);
    }
    pthread_mutex_unlock(&l->lock);
    return st;
}
