/*
 * resource_harness.c — the host backend and stream the resource tests share, and their steps
 * (resource_harness.h).
 */
#include "resource_harness.h"

mstar_backend *B;
mstar_stream *S;

int host_group_setup(void **state)
{
    (void)state;
    return mstar_test_host_open(&B, &S);
}

int host_group_teardown(void **state)
{
    (void)state;
    mstar_test_host_close(B, S);
    return 0;
}

mstar_resource_step step_of(const mstar_step_segment *segs, size_t n, bool commit)
{
    mstar_resource_step s = { .segments = segs, .num_segments = n, .commit = commit };
    return s;
}
