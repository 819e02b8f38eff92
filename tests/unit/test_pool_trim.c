/*
 * test_pool_trim.c — giving unused segments back (mstar_graph_pool_trim, mstar_caching_trim):
 * what capture planning relies on so that free memory, read after the throwaway captures, and
 * the next throwaway's `taken` both start clean. Host backend with a memory budget, so free
 * memory is exact.
 */
#include "mstar_test.h"

#define MiB ((uint64_t)1 << 20)

struct work {
    size_t keep;    /* bytes left live at capture end (the graph keeps them) */
    size_t scratch; /* bytes allocated and freed inside the capture */
};

static mstar_status run(mstar_stream *stream, void *user)
{
    struct work *w = user;
    void *scratch, *kept;
    mstar_status st = mstar_alloc(stream, w->scratch, &scratch);
    if (st == MSTAR_OK)
        st = mstar_free(stream, scratch);
    if (st == MSTAR_OK && w->keep > 0)
        st = mstar_alloc(stream, w->keep, &kept);
    return st;
}

static void test_pool_trim_after_throwaway(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    assert_mstar_ok(mstar_backend_set_memory_budget(b, 256 * MiB));
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s));
    mstar_graph_pool *pool;
    assert_mstar_ok(mstar_graph_pool_create(b, "node", &pool));
    uint64_t free0, total;
    assert_mstar_ok(mstar_mem_info(b, &free0, &total));

    struct work w = { 3 * MiB, 8 * MiB };
    mstar_graph *g;
    mstar_capture_stats stats;
    assert_mstar_ok(mstar_capture_into_graph(s, pool, run, &w, 0, &g, &stats));
    assert_true(stats.taken >= 8 * MiB);
    uint64_t released = 1;
    assert_mstar_ok(mstar_graph_pool_trim(pool, &released));
    mstar_alloc_stats ps;
    mstar_graph_pool_stats(pool, &ps);
    /* The graph's 3 MiB block pins its segment; the freed scratch segment may go. */
    assert_true(ps.reserved >= 3 * MiB);
    assert_true(ps.allocated >= 3 * MiB);

    mstar_graph_destroy(g);
    assert_mstar_ok(mstar_graph_pool_trim(pool, &released));
    assert_true(released > 0);
    mstar_graph_pool_stats(pool, &ps);
    assert_int_equal(ps.reserved, 0);
    uint64_t free1;
    assert_mstar_ok(mstar_mem_info(b, &free1, &total));
    assert_int_equal(free1, free0);

    /* The next capture's `taken` is its own whole footprint again. */
    mstar_capture_stats again;
    assert_mstar_ok(mstar_capture_into_graph(s, pool, run, &w, 0, &g, &again));
    assert_int_equal(again.taken, stats.taken);
    mstar_graph_destroy(g);
    assert_mstar_ok(mstar_graph_pool_trim(pool, NULL));
    assert_mstar_status(mstar_graph_pool_trim(NULL, NULL), MSTAR_EINVAL);

    mstar_graph_pool_destroy(pool);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

static void test_caching_trim(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    assert_mstar_ok(mstar_backend_set_memory_budget(b, 256 * MiB));
    uint64_t free0, free1, total, released;
    assert_mstar_ok(mstar_mem_info(b, &free0, &total));
    void *big, *small;
    assert_mstar_ok(mstar_caching_alloc(b, 6 * MiB, &big));
    assert_mstar_ok(mstar_caching_alloc(b, 1000, &small));
    assert_mstar_ok(mstar_caching_free(b, big));
    mstar_alloc_stats cs;
    mstar_caching_stats(b, &cs);
    uint64_t before = cs.reserved;
    assert_mstar_ok(mstar_caching_trim(b, &released));
    mstar_caching_stats(b, &cs);
    /* The free 6 MiB segment went back; the one holding `small` stays. */
    assert_int_equal(released, before - cs.reserved);
    assert_true(released >= 6 * MiB);
    assert_true(cs.reserved > 0);
    assert_mstar_ok(mstar_caching_free(b, small));
    assert_mstar_ok(mstar_caching_trim(b, NULL));
    mstar_caching_stats(b, &cs);
    assert_int_equal(cs.reserved, 0);
    assert_mstar_ok(mstar_mem_info(b, &free1, &total));
    assert_int_equal(free1, free0);

    /* Not while a stream captures. */
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s));
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_status(mstar_caching_trim(b, NULL), MSTAR_ESTATE);
    mstar_graph *g;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    mstar_graph_destroy(g);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_trim_after_throwaway),
        cmocka_unit_test(test_caching_trim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
