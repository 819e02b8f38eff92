/*
 * test_graph_pool.c — graph pools and capture on the host backend: pool routing and semantics,
 * taken/kept accounting, a failed capture leaving pool and stream usable (§8.1), outputs outside
 * the pool surviving other graphs' replays (§8.18), and lazy initialisation refused inside a
 * capture (§8.32).
 */
#include "mstar_test.h"

#include <string.h>

struct fixture {
    mstar_backend *b;
    mstar_stream *s;
    mstar_graph_pool *pool;
};

static int setup(void **state)
{
    static struct fixture f;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &f.b));
    assert_mstar_ok(mstar_stream_create(f.b, 0, &f.s));
    assert_mstar_ok(mstar_graph_pool_create(f.b, "node0", &f.pool));
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mstar_graph_pool_destroy(f->pool);
    mstar_stream_destroy(f->s);
    mstar_backend_destroy(f->b);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pool_routing_and_accounting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_capture_leaves_pool_and_stream_usable, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lazy_init_inside_capture_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capture_argument_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_static_outputs_survive_other_regions, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
