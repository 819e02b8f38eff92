/*
 * guard.c — see guard.h.
 *
 * One process-wide SIGBUS handler (sigaction, installed by the first guarded copy) and a
 * per-thread jump buffer: the
 * handler jumps back into the guarded copy only when this thread is inside one and the fault
 * address lies in its source range; otherwise it hands the signal to the previous disposition.
 * The jump buffer is saved without the signal mask (sigsetjmp(…, 0): no system call per copy);
 * after a jump the kernel has left SIGBUS blocked for the handler, so the error path unblocks it.
 */
#include "core/guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef struct guard_frame {
    sigjmp_buf jump;
    const uint8_t *lo, *hi; /* the source range */
} guard_frame;

static _Thread_local guard_frame *volatile active;
static struct sigaction previous;

static void on_sigbus(int sig, siginfo_t *info, void *uctx);

static bool ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) != 0 && sa->sa_sigaction == on_sigbus;
}

static void chain(int sig, siginfo_t *info, void *uctx)
{
    if (ours(&previous) || previous.sa_handler == SIG_IGN || previous.sa_handler == SIG_DFL) {
        /* The default again; returning re-runs the faulting access, which now gets it (a SIGBUS
         * from a fault cannot be ignored: the default action ends the process). */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &dfl, NULL);
        return;
    }
    if ((previous.sa_flags & SA_SIGINFO) != 0)
        previous.sa_sigaction(sig, info, uctx);
    else
        previous.sa_handler(sig);
}

static void on_sigbus(int sig, siginfo_t *info, void *uctx)
{
    guard_frame *f = active;
    const uint8_t *addr = info != NULL ? (const uint8_t *)info->si_addr : NULL;
    if (f != NULL && addr >= f->lo && addr < f->hi) {
        active = NULL;
        siglongjmp(f->jump, 1);
    }
    chain(sig, info, uctx);
}

void mstar__guard_install(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) == 0 && !ours(&cur)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &previous);
    }
    pthread_mutex_unlock(&lock);
}

/* fn(ctx) with the guard on [lo, lo + n); false if it was abandoned on a fault. The jump buffer
 * lives in this frame, which stays on the stack while fn runs. */
static bool run_guarded(const void *lo, size_t n, void (*fn)(void *ctx), void *ctx)
{
    /* Once: a system call per copy would show in small reads. */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, mstar__guard_install);
    guard_frame frame;
    frame.lo = lo;
    frame.hi = (const uint8_t *)lo + n;
    if (sigsetjmp(frame.jump, 0) != 0) {
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
        return false;
    }
    active = &frame;
    atomic_signal_fence(memory_order_seq_cst); /* fn's accesses stay inside the guard */
    fn(ctx);
    atomic_signal_fence(memory_order_seq_cst);
    active = NULL;
    return true;
}

typedef struct copy_args {
    void *dst;
    const void *src;
    size_t n;
} copy_args;

static void copy(void *ctx)
{
    const copy_args *a = ctx;
    memcpy(a->dst, a->src, a->n);
}

mstar_status mstar__guarded_copy(void *dst, const void *src, size_t n, const char *what)
{
    if (n == 0)
        return MSTAR_OK;
    copy_args a = { dst, src, n };
    if (run_guarded(src, n, copy, &a))
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EIO,
                           "%s: the memory faulted (SIGBUS) while copying %zu bytes from it: "
                           "its file was truncated or its filesystem ran out of space",
                           what, n);
}

mstar_status mstar__guarded_run(const void *lo, size_t n, void (*fn)(void *ctx), void *ctx,
                                const char *what)
{
    if (run_guarded(lo, n, fn, ctx))
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EIO,
                           "%s: the memory faulted (SIGBUS) while reading it: its file was "
                           "truncated or its filesystem ran out of space",
                           what);
}
