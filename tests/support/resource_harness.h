/*
 * resource_harness.h — what the resource tests (KV cache, positions) share: the host backend and
 * one stream for the whole group (B and S; plan buffers are host memory, so the tests read them
 * directly), opened by the group setup and closed by its teardown, and a step over segments.
 */
#ifndef MSTAR_TEST_RESOURCE_HARNESS_H
#define MSTAR_TEST_RESOURCE_HARNESS_H

#include "mstar_test.h"

/* The group's backend and stream, open between host_group_setup and host_group_teardown. */
extern mstar_backend *B;
extern mstar_stream *S;

int host_group_setup(void **state);

int host_group_teardown(void **state);

/* A step over the `n` segments at `segs`, committing when `commit`. */
mstar_resource_step step_of(const mstar_step_segment *segs, size_t n, bool commit);

#endif
