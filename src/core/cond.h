/*
 * cond.h — condition variables whose timed waits run on the monotonic clock (the clock of
 * mstar__now_ns), so a wait with a timeout is not cut short or stretched when someone sets the
 * wall clock. The signals of steps and the completions of reads both wait this way.
 */
#ifndef MSTAR_CORE_COND_H
#define MSTAR_CORE_COND_H

#include "mstar/core.h"

#include <pthread.h>
#include <time.h>

/* pthread_cond_init with CLOCK_MONOTONIC as the clock of pthread_cond_timedwait. */
void mstar__cond_init_monotonic(pthread_cond_t *cond);

/* The CLOCK_MONOTONIC time `timeout_ms` from now (now itself for 0 or a negative timeout), as
 * pthread_cond_timedwait takes it on such a condition. */
struct timespec mstar__deadline_after_ms(int64_t timeout_ms);

#endif
