/*
 * test_graph_pool.c — graph pools and capture on the host backend: pool routing and semantics,
 * taken/kept accounting, a failed capture leaving pool and stream usable (G-1), outputs outside
 * the pool surviving other graphs' replays (G-18), and lazy initialisation refused inside a
 * capture (G-32).
 *
 * Then what graphs keep, kept apart from the scratch their captures share (src/device/lifetimes.h,
 * the pool's kept segments):
 *   - a recording notes which allocations of an eager run outlive it, an address reused in the
 *     run included; allocations outside the recording are not noted;
 *   - applied to a capture, a recording places each allocation by its index; a capture that
 *     allocates differently (another size, more allocations) gets no hints from there on;
 *   - the regression behind issue 6's H200 figures: two slots of one bucket, each keeping an
 *     output and freeing a scratch four times its size. Without hints the second output lands in
 *     the first slot's freed scratch and the second scratch needs a segment of its own: the pool
 *     holds one output and two scratches where the planner's model (design.md "Planning") says
 *     two outputs and one scratch. With the warm-up's hints it holds exactly the model's bytes;
 *   - kept counts a block over 1 MiB with its segment's rounding, a small one by its bytes.
 */
#include "mstar_test.h"

#include "device/lifetimes.h"
#include "graphs/pool.h"

#include <string.h>

#define MiB ((uint64_t)1 << 20)

struct fixture {
    mstar_backend *b;
    mstar_stream *s;
    mstar_graph_pool *pool;
};

static int setup(void **state)
{
    static struct fixture f;
    assert_int_equal(mstar_test_host_open(&f.b, &f.s), 0);
    assert_mstar_ok(mstar_graph_pool_create(f.b, "node0", &f.pool));
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mstar_graph_pool_destroy(f->pool);
    mstar_test_host_close(f->b, f->s);
    return 0;
}

struct fill_args {
    float *dst;
    const float *src;
    float scale;
    int n;
};

static void fill_fn(void *p)
{
    struct fill_args *a = p;
    for (int i = 0; i < a->n; i++)
        a->dst[i] = (a->src != NULL ? a->src[i] : 1.0f) * a->scale;
}

/* Allocates a scratch (freed), and an output it keeps. */
struct run_ctx {
    float *input;
    float *out;
    size_t scratch_bytes;
    bool fail;
    mstar_lazy *lazy;
};

static mstar_status run_keep_output(mstar_stream *s, void *p)
{
    struct run_ctx *c = p;
    void *scratch = NULL;
    mstar_status st = mstar_alloc(s, c->scratch_bytes, &scratch);
    if (st != MSTAR_OK)
        return st;
    struct fill_args a = { scratch, c->input, 2.0f, 4 };
    if ((st = mstar_launch(s, fill_fn, &a, sizeof(a))) != MSTAR_OK)
        return st;
    if ((st = mstar_alloc(s, 4 * sizeof(float), (void **)&c->out)) != MSTAR_OK)
        return st;
    struct fill_args b = { c->out, scratch, 3.0f, 4 };
    if ((st = mstar_launch(s, fill_fn, &b, sizeof(b))) != MSTAR_OK)
        return st;
    if (c->lazy != NULL && (st = mstar_lazy_ensure(c->lazy, s)) != MSTAR_OK)
        return st;
    if (c->fail)
        return mstar_error_set(MSTAR_EDEVICE, "injected failure");
    return mstar_free(s, scratch);
}

static void test_pool_routing_and_accounting(void **state)
{
    struct fixture *f = *state;
    float input[4] = { 1, 2, 3, 4 };
    struct run_ctx c = { input, NULL, 1 << 20, false, NULL };
    mstar_graph *g = NULL;
    mstar_capture_stats st;
    assert_mstar_ok(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0, &g, &st));
    assert_int_equal(st.nodes, 2);
    assert_int_equal(st.taken, 2 << 20); /* one segment */
    assert_int_equal(st.kept, 512);      /* the output; the scratch went back */
    assert_true(st.peak >= (1 << 20) + 512);
    mstar_alloc_stats ps, cs;
    mstar_graph_pool_stats(f->pool, &ps);
    assert_int_equal(ps.allocated, 512);
    mstar_caching_stats(f->b, &cs);
    assert_int_equal(cs.allocated, 0); /* nothing went to the caching allocator */
    assert_mstar_ok(mstar_graph_launch(g, f->s));
    assert_true(c.out[3] == 24.0f);
    /* a graph's block cannot be freed by hand */
    assert_mstar_status(mstar_free(f->s, c.out), MSTAR_ESTATE);

    /* A second capture reuses the first one's freed scratch: it takes nothing new. */
    float *first_out = c.out;
    mstar_graph *g2 = NULL;
    assert_mstar_ok(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0, &g2, &st));
    assert_int_equal(st.taken, 0);
    assert_ptr_not_equal(c.out, first_out);
    mstar_graph_destroy(g);
    mstar_graph_pool_stats(f->pool, &ps);
    assert_int_equal(ps.allocated, 512); /* g2's output only */
    mstar_graph_destroy(g2);
    mstar_graph_pool_stats(f->pool, &ps);
    assert_int_equal(ps.allocated, 0);
}

static void test_failed_capture_leaves_pool_and_stream_usable(void **state)
{
    struct fixture *f = *state;
    float input[4] = { 1, 1, 1, 1 };
    struct run_ctx c = { input, NULL, 4096, true, NULL };
    mstar_graph *g = NULL;
    assert_mstar_status(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0, &g, NULL),
                        MSTAR_EDEVICE);
    assert_non_null(strstr(mstar_last_error(), "graph pool node0"));
    assert_non_null(strstr(mstar_last_error(), "injected failure"));
    assert_null(g);
    assert_false(mstar_stream_is_capturing(f->s));
    mstar_alloc_stats ps;
    mstar_graph_pool_stats(f->pool, &ps);
    assert_int_equal(ps.allocated, 0); /* the failed capture's blocks went back */
    void *p = NULL;                    /* the stream allocates from the caching allocator again */
    assert_mstar_ok(mstar_alloc(f->s, 64, &p));
    mstar_alloc_stats cs;
    mstar_caching_stats(f->b, &cs);
    assert_int_equal(cs.allocated, 512);
    assert_mstar_ok(mstar_free(f->s, p));
    c.fail = false; /* and the next capture on the same pool works */
    assert_mstar_ok(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0, &g, NULL));
    assert_mstar_ok(mstar_graph_launch(g, f->s));
    assert_true(c.out[0] == 6.0f);
    mstar_graph_destroy(g);
}

static mstar_status init_handle(mstar_stream *s, void *user)
{
    return MSTAR_OK;
}

static void test_lazy_init_inside_capture_is_refused(void **state)
{
    struct fixture *f = *state;
    mstar_lazy *lazy = NULL;
    assert_mstar_ok(mstar_lazy_create("attention workspace", init_handle, NULL, &lazy));
    float input[4] = { 0 };
    struct run_ctx c = { input, NULL, 512, false, lazy };
    mstar_graph *g = NULL;
    assert_mstar_status(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0, &g, NULL),
                        MSTAR_ESTATE);
    assert_non_null(strstr(mstar_last_error(), "'attention workspace' inside a capture"));
    assert_mstar_ok(mstar_lazy_ensure(lazy, f->s)); /* what a warm-up does */
    assert_mstar_ok(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0, &g, NULL));
    mstar_graph_destroy(g);
    mstar_lazy_destroy(lazy);
}

static void test_capture_argument_checks(void **state)
{
    struct fixture *f = *state;
    mstar_graph *g = NULL;
    struct run_ctx c = { NULL, NULL, 512, false, NULL };
    assert_mstar_status(mstar_capture_into_graph(NULL, f->pool, run_keep_output, &c, 0, &g, NULL),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_capture_into_graph(f->s, f->pool, run_keep_output, &c, 0x8, &g, NULL),
                        MSTAR_EINVAL);
    mstar_graph_pool *bad = NULL;
    assert_mstar_status(mstar_graph_pool_create(f->b, "bad/name", &bad), MSTAR_EINVAL);
    /* A pool of another backend is refused. */
    mstar_backend *other = NULL;
    mstar_graph_pool *op = NULL;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &other));
    assert_mstar_ok(mstar_graph_pool_create(other, "other", &op));
    assert_mstar_status(mstar_capture_into_graph(f->s, op, run_keep_output, &c, 0, &g, NULL),
                        MSTAR_EINVAL);
    mstar_graph_pool_destroy(op);
    mstar_backend_destroy(other);
}

/* A region: out = input * scale, with a pool scratch that later captures reuse. */
struct region {
    float *input;
    float scale;
};

static mstar_status run_region(mstar_stream *s, void *p, mstar_tensor_map *outputs)
{
    struct region *r = p;
    mstar_tensor t;
    int64_t shape[1] = { 4 };
    mstar_status st = mstar_tensor_alloc(s, MSTAR_DTYPE_FLOAT32, 1, shape, &t);
    if (st != MSTAR_OK)
        return st;
    struct fill_args a = { t.data, r->input, r->scale, 4 };
    if ((st = mstar_launch(s, fill_fn, &a, sizeof(a))) != MSTAR_OK)
        return st;
    return mstar_tensor_map_set_owned(outputs, "y", &t, s);
}

static void test_static_outputs_survive_other_regions(void **state)
{
    struct fixture *f = *state;
    float in_a[4] = { 1, 2, 3, 4 }, in_b[4] = { 10, 20, 30, 40 };
    struct region ra = { in_a, 1.0f }, rb = { in_b, 100.0f };
    mstar_tensor_map *warm = NULL, *out_a = NULL, *out_b = NULL;
    assert_mstar_ok(mstar_tensor_map_create(&warm));
    assert_mstar_ok(mstar_tensor_map_create(&out_a));
    assert_mstar_ok(mstar_tensor_map_create(&out_b));
    assert_mstar_ok(run_region(f->s, &ra, warm)); /* the warm-up fixes shape and dtype */
    mstar_graph *ga = NULL, *gb = NULL;
    mstar_capture_stats st;
    /* B is captured first, A second: A's pool scratch is B's freed block. */
    assert_mstar_ok(mstar_capture_with_static_outputs(f->s, f->pool, run_region, &rb, warm, 0, &gb,
                                                      out_b, &st));
    assert_int_equal(st.kept, 0); /* the run's own output went back to the pool */
    assert_mstar_ok(mstar_capture_with_static_outputs(f->s, f->pool, run_region, &ra, warm, 0, &ga,
                                                      out_a, NULL));
    assert_mstar_ok(mstar_graph_launch(ga, f->s));
    const float *ya = mstar_tensor_map_get(out_a, "y")->data;
    assert_true(ya[3] == 4.0f);
    assert_mstar_ok(mstar_graph_launch(gb, f->s)); /* replays over A's scratch */
    assert_true(ya[0] == 1.0f && ya[3] == 4.0f);   /* A's output is intact */
    const float *yb = mstar_tensor_map_get(out_b, "y")->data;
    assert_true(yb[1] == 2000.0f);
    /* an output that does not match the warm-up is refused */
    mstar_tensor_map *warm2 = NULL, *out_c = NULL;
    assert_mstar_ok(mstar_tensor_map_create(&warm2));
    assert_mstar_ok(mstar_tensor_map_create(&out_c));
    mstar_tensor t;
    int64_t shape[1] = { 5 };
    assert_mstar_ok(mstar_tensor_init(&t, NULL, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1, shape));
    assert_mstar_ok(mstar_tensor_map_set(warm2, "y", &t));
    mstar_graph *gc = NULL;
    assert_mstar_status(mstar_capture_with_static_outputs(f->s, f->pool, run_region, &ra, warm2, 0,
                                                          &gc, out_c, NULL),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "'y' differs"));
    mstar_alloc_stats cs;
    mstar_caching_stats(f->b, &cs);
    assert_int_equal(cs.allocated, 2 * 512 + 512); /* a, b and the warm-up's output */
    mstar_graph_destroy(ga);
    mstar_graph_destroy(gb);
    mstar_tensor_map_destroy(warm);
    mstar_tensor_map_destroy(warm2);
    mstar_tensor_map_destroy(out_a);
    mstar_tensor_map_destroy(out_b);
    mstar_tensor_map_destroy(out_c);
    mstar_caching_stats(f->b, &cs);
    assert_int_equal(cs.allocated, 0);
}

static void test_recording_notes_what_outlives_the_run(void **state)
{
    struct fixture *f = *state;
    mstar__lifetimes lt;
    mstar__lifetimes_init(&lt);
    void *before, *a, *b, *c, *d, *after;
    assert_mstar_ok(mstar_alloc(f->s, 64, &before)); /* not recorded */
    mstar__lifetimes_record(f->s, &lt);
    assert_mstar_ok(mstar_alloc(f->s, 100, &a));
    assert_mstar_ok(mstar_alloc(f->s, 200, &b));
    assert_mstar_ok(mstar_free(f->s, a));
    assert_mstar_ok(mstar_alloc(f->s, 100, &c)); /* likely a's address again */
    assert_mstar_ok(mstar_alloc(f->s, 300, &d));
    assert_mstar_ok(mstar_free(f->s, d));
    assert_mstar_ok(mstar_free(f->s, before)); /* recorded by nobody: ignored */
    mstar__lifetimes_record(f->s, NULL);
    assert_mstar_ok(mstar_alloc(f->s, 400, &after)); /* not recorded */

    mstar__lifetimes_apply(f->s, &lt);
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 100), MSTAR__SEG_SHARED); /* a: freed */
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 200), MSTAR__SEG_KEPT);   /* b */
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 100), MSTAR__SEG_KEPT);   /* c */
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 300), MSTAR__SEG_SHARED); /* d: freed */
    /* Past the recording: no hint. */
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 200), MSTAR__SEG_SHARED);
    /* Applying again starts from the first allocation, but a run that went past the end of its
     * recording allocated differently: it stays without hints until recorded again. */
    mstar__lifetimes_apply(f->s, &lt);
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 200), MSTAR__SEG_SHARED);
    mstar__lifetimes_apply(f->s, NULL);
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 200), MSTAR__SEG_SHARED);

    assert_mstar_ok(mstar_free(f->s, b));
    assert_mstar_ok(mstar_free(f->s, c));
    assert_mstar_ok(mstar_free(f->s, after));
    mstar__lifetimes_free(&lt);
}

static void test_a_different_size_ends_the_hints(void **state)
{
    struct fixture *f = *state;
    mstar__lifetimes lt;
    mstar__lifetimes_init(&lt);
    void *p[3];
    mstar__lifetimes_record(f->s, &lt);
    for (int i = 0; i < 3; i++)
        assert_mstar_ok(mstar_alloc(f->s, 1000, &p[i]));
    mstar__lifetimes_record(f->s, NULL);
    mstar__lifetimes_apply(f->s, &lt);
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 1000), MSTAR__SEG_KEPT);
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 999), MSTAR__SEG_SHARED);
    /* The third matches the recording again, but the run is no longer the recorded one. */
    assert_int_equal(mstar__lifetimes_next_kind(f->s, 1000), MSTAR__SEG_SHARED);
    mstar__lifetimes_apply(f->s, NULL);
    for (int i = 0; i < 3; i++)
        assert_mstar_ok(mstar_free(f->s, p[i]));
    mstar__lifetimes_free(&lt);
}

/* One slot's forward: an output it keeps, then a scratch it frees. */
struct slot_work {
    size_t out_bytes;
    size_t scratch_bytes;
    void *out;
};

static mstar_status slot_forward(mstar_stream *s, void *user)
{
    struct slot_work *w = user;
    void *scratch;
    mstar_status st = mstar_alloc(s, w->out_bytes, &w->out);
    if (st == MSTAR_OK)
        st = mstar_alloc(s, w->scratch_bytes, &scratch);
    if (st == MSTAR_OK)
        st = mstar_memset_async(s, scratch, 1, w->scratch_bytes);
    if (st == MSTAR_OK)
        st = mstar_free(s, scratch);
    return st;
}

/* Capture two slots of the same work into the pool, as a bucket's capture does: each after an
 * eager warm-up recorded when `hints`. Returns the pool bytes both took. */
static uint64_t capture_two_slots(struct fixture *f, bool hints, mstar_graph **g,
                                  mstar_capture_stats *stats)
{
    mstar_alloc_stats ps;
    mstar_graph_pool_stats(f->pool, &ps);
    uint64_t reserved = ps.reserved;
    for (int slot = 0; slot < 2; slot++) {
        struct slot_work w = { 4 * MiB, 16 * MiB, NULL };
        mstar__lifetimes lt;
        mstar__lifetimes_init(&lt);
        mstar__lifetimes_record(f->s, hints ? &lt : NULL);
        assert_mstar_ok(slot_forward(f->s, &w));
        mstar__lifetimes_record(f->s, NULL);
        assert_mstar_ok(mstar_free(f->s, w.out)); /* the warm-up's output */
        mstar__lifetimes_apply(f->s, hints ? &lt : NULL);
        assert_mstar_ok(
            mstar_capture_into_graph(f->s, f->pool, slot_forward, &w, 0, &g[slot], &stats[slot]));
        mstar__lifetimes_apply(f->s, NULL);
        mstar__lifetimes_free(&lt);
    }
    mstar_graph_pool_stats(f->pool, &ps);
    return ps.reserved - reserved;
}

static void release(struct fixture *f, mstar_graph **g)
{
    mstar_graph_destroy(g[0]);
    mstar_graph_destroy(g[1]);
    assert_mstar_ok(mstar_graph_pool_trim(f->pool, NULL));
    assert_mstar_ok(mstar_caching_trim(f->b, NULL));
    mstar_alloc_stats ps;
    mstar_graph_pool_stats(f->pool, &ps);
    assert_int_equal(ps.reserved, 0);
    assert_int_equal(mstar__pool_reserved_kept(f->pool), 0);
}

static void test_kept_outputs_leave_the_shared_scratch_whole(void **state)
{
    struct fixture *f = *state;
    mstar_graph *g[2];
    mstar_capture_stats st[2];

    /* Without hints (the allocator cannot tell an output from scratch): the second output splits
     * the first scratch, so the second scratch takes a segment of its own. */
    uint64_t took = capture_two_slots(f, false, g, st);
    assert_int_equal(took, 4 * MiB + 16 * MiB + 16 * MiB);
    assert_int_equal(mstar__pool_reserved_kept(f->pool), 0);
    release(f, g);

    /* With them: what both keep, and one scratch. The plan's inputs, from the first slot alone
     * in an empty pool, predict it: slots · kept + (taken − kept). */
    took = capture_two_slots(f, true, g, st);
    assert_int_equal(took, 2 * 4 * MiB + 16 * MiB);
    assert_int_equal(mstar__pool_reserved_kept(f->pool), 2 * 4 * MiB);
    assert_int_equal(st[0].taken, 4 * MiB + 16 * MiB);
    assert_int_equal(st[0].kept, 4 * MiB);
    assert_int_equal(st[1].taken, 4 * MiB); /* the scratch came from the first slot's */
    assert_int_equal(took, 2 * st[0].kept + (st[0].taken - st[0].kept));
    release(f, g);
}

static void test_kept_counts_a_large_block_with_its_segment(void **state)
{
    struct fixture *f = *state;
    mstar_graph *g[2];
    mstar_capture_stats st;
    struct slot_work large = { 3 * MiB + 1, 1 * MiB, NULL };
    assert_mstar_ok(mstar_capture_into_graph(f->s, f->pool, slot_forward, &large, 0, &g[0], &st));
    assert_int_equal(st.kept, 4 * MiB); /* the 4 MiB segment a block over 3 MiB is given */
    struct slot_work small = { 1000, 1 * MiB, NULL };
    assert_mstar_ok(mstar_capture_into_graph(f->s, f->pool, slot_forward, &small, 0, &g[1], &st));
    assert_int_equal(st.kept, 1024); /* its bytes, rounded to the 512-byte block size */
    release(f, g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pool_routing_and_accounting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_capture_leaves_pool_and_stream_usable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lazy_init_inside_capture_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capture_argument_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_static_outputs_survive_other_regions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recording_notes_what_outlives_the_run, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_different_size_ends_the_hints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_outputs_leave_the_shared_scratch_whole, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_kept_counts_a_large_block_with_its_segment, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
