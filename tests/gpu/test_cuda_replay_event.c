/*
 * test_cuda_replay_event.c — an event recorded into a CUDA graph (mstar__event_record_in_capture,
 * how a runner's replay marks its slot for a later pre-plan, design.md G-4): the record
 * is a node of the graph, every launch records the event again, and another stream that waits on
 * it after a launch runs only once that launch's work is done. The graph's work is slow device
 * work (memsets over 1 GiB, milliseconds) followed by setting a flag on the device; the waiting
 * stream copies the flag out, so a wait that did not hold would copy it unset.
 * Skips (77) without a GPU.
 */
#include "mstar_test.h"

#include "device/backend.h"

enum { SLOW_BYTES = 1 << 30, SLOW_PASSES = 8 };

static void test_graph_records_event_each_launch(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_stream *compute, *plan;
    mstar_event *e;
    void *big;
    int *flag, *seen;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &compute));
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &plan));
    assert_mstar_ok(mstar_event_create(b, &e));
    assert_mstar_ok(mstar_caching_alloc(b, SLOW_BYTES, &big));
    assert_mstar_ok(mstar_caching_alloc(b, sizeof(int), (void **)&flag));
    assert_mstar_ok(mstar_host_alloc_pinned(b, sizeof(int), (void **)&seen));
    assert_mstar_status(mstar__event_record_in_capture(e, compute), MSTAR_ESTATE);
    mstar_graph *g;
    assert_mstar_ok(mstar_stream_begin_capture(compute));
    for (int i = 0; i < SLOW_PASSES; i++)
        assert_mstar_ok(mstar_memset_async(compute, big, i, SLOW_BYTES));
    assert_mstar_ok(mstar_memset_async(compute, flag, 1, sizeof(int)));
    assert_mstar_ok(mstar__event_record_in_capture(e, compute));
    assert_mstar_ok(mstar_stream_end_capture(compute, &g));
    assert_int_equal(mstar_graph_node_count(g), SLOW_PASSES + 2); /* + the event record */
    assert_mstar_ok(mstar_graph_instantiate(g, false));
    for (int launch = 0; launch < 3; launch++) {
        /* Rounds after the first prove the wait follows the latest launch, not an earlier one. */
        assert_mstar_ok(mstar_memset_async(compute, flag, 0, sizeof(int)));
        assert_mstar_ok(mstar_stream_synchronize(compute));
        *seen = -1;
        assert_mstar_ok(mstar_graph_launch(g, compute));
        assert_mstar_ok(mstar_stream_wait_event(plan, e));
        assert_mstar_ok(mstar_memcpy_async(plan, seen, flag, sizeof(int), MSTAR_MEMCPY_D2H));
        assert_mstar_ok(mstar_stream_synchronize(plan));
        assert_int_equal(*seen, 0x01010101);
        assert_mstar_ok(mstar_stream_synchronize(compute));
    }
    mstar_graph_destroy(g);
    assert_mstar_ok(mstar_host_free_pinned(b, seen));
    assert_mstar_ok(mstar_caching_free(b, flag));
    assert_mstar_ok(mstar_caching_free(b, big));
    mstar_event_destroy(e);
    mstar_stream_destroy(plan);
    mstar_stream_destroy(compute);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_records_event_each_launch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
