/*
 * owner.c — see owner.h.
 */
#include "core/owner.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static void **kept;
static size_t kept_len, kept_cap;

void mstar__owner_init(mstar__owner *o)
{
    o->pid = getpid();
}

bool mstar__owner_here(const mstar__owner *o)
{
    return o->pid == getpid();
}

void mstar__owner_keep(void *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&kept_lock);
    if (kept_len == kept_cap) {
        size_t ncap = kept_cap ? kept_cap * 2 : 16;
        void **n = realloc(kept, ncap * sizeof(*n));
        if (n != NULL) {
            kept = n;
            kept_cap = ncap;
        }
    }
    if (kept_len < kept_cap)
        kept[kept_len++] = p;
    pthread_mutex_unlock(&kept_lock);
}
