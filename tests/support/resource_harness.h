/*
 * resource_harness.h — what the resource tests (KV cache, positions) share: the host backend and
 * one stream for the whole group (B and S; plan buffers are host memory, so the tests read them
 * directly), opened by the group setup and closed by its teardown, and a step over segments.
 */
#ifndef MSTAR_TEST_RESOURCE_HARNESS_H
#define MSTAR_TEST_RESOURCE_HARNESS_H

#include "mstar_test.h"

static mstar_backend *B;
static mstar_stream *S;

static inline int host_group_setup(void **state)
{
    (void)state;
    return mstar_test_host_open(&B, &S);
}

static inline int host_group_teardown(void **state)
{
    (void)state;
    mstar_test_host_close(B, S);
    return 0;
}

/* A step over the `n` segments at `segs`, committing when `commit`. */
static inline mstar_resource_step step_of(const mstar_step_segment *segs, size_t n, bool commit)
{
    mstar_resource_step s = { .segments = segs, .num_segments = n, .commit = commit };
    return s;
}

#endif
