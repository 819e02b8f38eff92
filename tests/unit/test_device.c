/*
 * test_device.c — the host device backend: backends, streams, events, copies, memory and its
 * budget, pinning, host work, raw capture and replay, lazy initialisation, and the argument
 * checks of every call.
 */
#include "mstar_test.h"

#include "device/backend.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static mstar_backend *host(void)
{
    mstar_backend *b = NULL;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    return b;
}

/* A stream of default flags on `b`. */
static mstar_stream *stream_on(mstar_backend *b)
{
    mstar_stream *s = NULL;
    assert_mstar_ok(mstar_stream_create(b, 0, &s));
    return s;
}

static void test_backend_create(void **state)
{
    (void)state;
    mstar_backend *b = host();
    assert_string_equal(mstar_backend_name(b), "host");
    assert_int_equal(mstar_backend_device(b).type, MSTAR_DEVICE_CPU);
    assert_int_equal(mstar_backend_capability(b), 0);
    mstar_backend_destroy(b);

    mstar_backend *out = NULL;
    mstar_device bad = { (mstar_device_type)7, 0 };
    assert_mstar_status(mstar_backend_create(bad, &out), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "device type 7"));
    mstar_device neg = { MSTAR_DEVICE_CPU, -1 };
    assert_mstar_status(mstar_backend_create(neg, &out), MSTAR_EINVAL);
    assert_mstar_status(mstar_backend_create(mstar_device_cpu(), NULL), MSTAR_EINVAL);
    mstar_device pinned = { MSTAR_DEVICE_CUDA_HOST, 0 };
    assert_mstar_status(mstar_backend_create(pinned, &out), MSTAR_EINVAL);
    mstar_backend_destroy(NULL);
}

static void test_cuda_unavailable_is_enotsup(void **state)
{
    (void)state;
    mstar_device cuda = { MSTAR_DEVICE_CUDA, 0 };
    mstar_backend *b = NULL;
    mstar_status st = mstar_backend_create(cuda, &b);
    if (st == MSTAR_OK) { /* a machine with a GPU: nothing to check here */
        mstar_backend_destroy(b);
        return;
    }
    assert_int_equal(st, MSTAR_ENOTSUP);
    assert_non_null(strstr(mstar_last_error(), "cuda:0"));
    assert_null(b);
}

static void test_budget_and_mem_info(void **state)
{
    (void)state;
    mstar_backend *b = host();
    uint64_t f, t;
    assert_mstar_ok(mstar_mem_info(b, &f, &t));
    assert_true(f == t && f >= (UINT64_C(1) << 60)); /* no budget: plenty */
    assert_mstar_ok(mstar_backend_set_memory_budget(b, 1 << 20));
    assert_mstar_ok(mstar_mem_info(b, &f, &t));
    assert_int_equal(t, 1 << 20);
    assert_int_equal(f, 1 << 20);
    void *p = NULL, *q = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 600 << 10, &p));
    assert_mstar_ok(mstar_mem_info(b, &f, &t));
    assert_int_equal(f, (1 << 20) - (600 << 10));
    assert_mstar_status(mstar_device_alloc(b, 600 << 10, &q), MSTAR_ENOMEM);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_HOST_MEMORY_BUDGET_MB"));
    assert_null(q);
    assert_mstar_ok(mstar_device_free(b, p));
    assert_mstar_ok(mstar_mem_info(b, &f, &t));
    assert_int_equal(f, 1 << 20);
    assert_mstar_status(mstar_mem_info(b, NULL, &t), MSTAR_EINVAL);
    mstar_backend_destroy(b);
}

static void test_budget_env(void **state)
{
    (void)state;
    setenv("MSTAR_HOST_MEMORY_BUDGET_MB", "3", 1);
    mstar_backend *b = host();
    uint64_t f, t;
    assert_mstar_ok(mstar_mem_info(b, &f, &t));
    assert_int_equal(t, 3 << 20);
    mstar_backend_destroy(b);
    setenv("MSTAR_HOST_MEMORY_BUDGET_MB", "lots", 1);
    mstar_backend *out = NULL;
    assert_mstar_status(mstar_backend_create(mstar_device_cpu(), &out), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_HOST_MEMORY_BUDGET_MB=lots"));
    unsetenv("MSTAR_HOST_MEMORY_BUDGET_MB");
}

static void test_raw_alloc_and_bad_frees(void **state)
{
    (void)state;
    mstar_backend *b = host();
    void *p = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 1000, &p));
    assert_int_equal((uintptr_t)p % 256, 0);
    memset(p, 1, 1000);
    int x;
    assert_mstar_status(mstar_device_free(b, &x), MSTAR_EINVAL);
    assert_mstar_ok(mstar_device_free(b, p));
    assert_mstar_status(mstar_device_free(b, p), MSTAR_EINVAL); /* double free is an error */
    assert_mstar_ok(mstar_device_free(b, NULL));
    assert_mstar_status(mstar_device_alloc(b, 10, NULL), MSTAR_EINVAL);
    mstar_backend_destroy(b);
}

static void test_pinned_and_register(void **state)
{
    (void)state;
    mstar_backend *b = host();
    void *p = NULL;
    assert_mstar_ok(mstar_host_alloc_pinned(b, 4096, &p));
    memset(p, 0, 4096);
    assert_mstar_status(mstar_host_free_pinned(b, (char *)p + 8), MSTAR_EINVAL);
    assert_mstar_ok(mstar_host_free_pinned(b, p));
    assert_mstar_status(mstar_host_free_pinned(b, p), MSTAR_EINVAL);

    char *buf = malloc(8192);
    assert_mstar_ok(mstar_host_register(b, buf, 4096, 0));
    assert_mstar_status(mstar_host_register(b, buf + 100, 10, 0), MSTAR_EEXIST);
    /* adjacent is fine */
    assert_mstar_ok(mstar_host_register(b, buf + 4096, 4096, MSTAR_HOST_REGISTER_READ_ONLY));
    assert_mstar_status(mstar_host_unregister(b, buf + 1), MSTAR_EINVAL);
    assert_mstar_ok(mstar_host_unregister(b, buf));
    assert_mstar_ok(mstar_host_unregister(b, buf + 4096));
    assert_mstar_status(mstar_host_unregister(b, buf), MSTAR_EINVAL);
    assert_mstar_status(mstar_host_register(b, buf, 0, 0), MSTAR_EINVAL);
    assert_mstar_status(mstar_host_register(b, buf, 4096, 0x80), MSTAR_EINVAL); /* unknown flag */
    free(buf);
    mstar_backend_destroy(b);
}

static void test_streams_events_copies(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = NULL, *s2 = NULL;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s));
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s2));
    assert_mstar_status(mstar_stream_create(b, 0x10, &s2), MSTAR_EINVAL);
    assert_ptr_equal(mstar_stream_backend(s), b);
    assert_null(mstar_stream_native(s));

    void *dev = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 64, &dev));
    char src[64], back[64];
    for (int i = 0; i < 64; i++)
        src[i] = (char)i;
    assert_mstar_ok(mstar_memcpy_async(s, dev, src, 64, MSTAR_MEMCPY_H2D));
    assert_mstar_ok(mstar_memset_async(s, (char *)dev + 60, 0x7f, 4));
    assert_mstar_ok(mstar_memcpy_async(s, back, dev, 64, MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_int_equal(back[5], 5);
    assert_int_equal(back[61], 0x7f);
    char copy[64];
    assert_mstar_ok(mstar_memcpy_async(s, copy, back, 64, MSTAR_MEMCPY_H2H));
    assert_memory_equal(copy, back, 64);
    void *dev2 = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 64, &dev2));
    assert_mstar_ok(mstar_memcpy_async(s, dev2, dev, 64, MSTAR_MEMCPY_D2D));
    assert_memory_equal(dev2, dev, 64);
    assert_mstar_status(mstar_memcpy_async(s, dev, src, 64, (mstar_memcpy_kind)9), MSTAR_EINVAL);
    assert_mstar_status(mstar_memcpy_async(s, NULL, src, 64, MSTAR_MEMCPY_H2D), MSTAR_EINVAL);
    assert_mstar_status(mstar_memcpy_async(NULL, dev, src, 64, MSTAR_MEMCPY_H2D), MSTAR_EINVAL);
    assert_mstar_ok(mstar_memcpy_async(s, NULL, NULL, 0, MSTAR_MEMCPY_H2D)); /* nothing to do */
    assert_mstar_status(mstar_memset_async(s, NULL, 0, 4), MSTAR_EINVAL);

    mstar_event *e = NULL;
    assert_mstar_ok(mstar_event_create(b, &e));
    assert_mstar_ok(mstar_event_query(e)); /* never recorded: complete */
    assert_mstar_ok(mstar_event_record(e, s));
    assert_mstar_ok(mstar_event_query(e));
    assert_mstar_ok(mstar_event_synchronize(e));
    assert_mstar_ok(mstar_stream_wait_event(s2, e));
    assert_ptr_equal(s2->last_waited, e);
    assert_int_equal(s2->waits, 1);
    assert_null(mstar_event_native(e));
    assert_mstar_status(mstar_event_record(NULL, s), MSTAR_EINVAL);
    assert_mstar_status(mstar_stream_wait_event(s2, NULL), MSTAR_EINVAL);

    mstar_backend *other = host();
    mstar_event *e2 = NULL;
    assert_mstar_ok(mstar_event_create(other, &e2));
    assert_mstar_status(mstar_stream_wait_event(s, e2), MSTAR_EINVAL);
    assert_mstar_status(mstar_event_record(e2, s), MSTAR_EINVAL);
    mstar_event_destroy(e2);
    mstar_backend_destroy(other);

    mstar_event_destroy(e);
    assert_mstar_ok(mstar_device_free(b, dev));
    assert_mstar_ok(mstar_device_free(b, dev2));
    mstar_stream_destroy(s);
    mstar_stream_destroy(s2);
    mstar_stream_destroy(NULL);
    mstar_backend_destroy(b);
}

static void test_launch_copies_args(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = stream_on(b);
    int acc = 0;
    mstar_test_digit a = { &acc, 3 };
    assert_mstar_ok(mstar_launch(s, mstar_test_append_digit, &a, sizeof(a)));
    assert_int_equal(acc, 3);
    assert_mstar_status(mstar_launch(s, NULL, &a, sizeof(a)), MSTAR_EINVAL);
    assert_mstar_status(mstar_launch(s, mstar_test_append_digit, NULL, sizeof(a)), MSTAR_EINVAL);
    assert_mstar_status(mstar_launch(s, mstar_test_append_digit, &a, MSTAR_LAUNCH_ARGS_MAX + 1),
                        MSTAR_EINVAL);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

static void test_capture_records_and_replays_in_order(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = stream_on(b);
    int acc = 0;
    int src = 7, dst = 0;
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_true(mstar_stream_is_capturing(s));
    assert_mstar_status(mstar_stream_begin_capture(s), MSTAR_ESTATE);
    mstar_test_digit a = { &acc, 1 };
    assert_mstar_ok(mstar_launch(s, mstar_test_append_digit, &a, sizeof(a)));
    a.digit = 2; /* the capture holds its own copy of the arguments */
    assert_mstar_ok(mstar_launch(s, mstar_test_append_digit, &a, sizeof(a)));
    assert_mstar_ok(mstar_memcpy_async(s, &dst, &src, sizeof(int), MSTAR_MEMCPY_H2H));
    assert_int_equal(acc, 0); /* recorded, not run */
    assert_int_equal(dst, 0);
    assert_mstar_status(mstar_stream_synchronize(s), MSTAR_ESTATE);
    void *p = NULL;
    assert_mstar_status(mstar_caching_alloc(b, 64, &p), MSTAR_ESTATE);
    assert_non_null(strstr(mstar_last_error(), "lazy initialisation"));
    mstar_graph *g = NULL;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    assert_false(mstar_stream_is_capturing(s));
    assert_int_equal(mstar_graph_node_count(g), 3);
    assert_null(mstar_graph_native(g));
    assert_mstar_status(mstar_graph_launch(g, s), MSTAR_ESTATE); /* not instantiated */
    assert_mstar_ok(mstar_graph_instantiate(g, false));
    assert_mstar_status(mstar_graph_instantiate(g, false), MSTAR_ESTATE);
    assert_mstar_ok(mstar_graph_launch(g, s));
    assert_int_equal(acc, 12);
    assert_int_equal(dst, 7);
    src = 9;
    assert_mstar_ok(mstar_graph_launch(g, s));
    assert_int_equal(acc, 1212);
    assert_int_equal(dst, 9);
    assert_mstar_status(mstar_stream_end_capture(s, &g), MSTAR_ESTATE);
    /* the caching allocator works again once nothing captures */
    assert_mstar_ok(mstar_caching_alloc(b, 64, &p));
    assert_mstar_ok(mstar_caching_free(b, p));
    mstar_graph_destroy(g);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

static void test_stream_destroyed_while_capturing(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = stream_on(b);
    assert_mstar_ok(mstar_stream_begin_capture(s));
    int acc = 0;
    mstar_test_digit a = { &acc, 1 };
    assert_mstar_ok(mstar_launch(s, mstar_test_append_digit, &a, sizeof(a)));
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_stream_destroy(s);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("destroyed while capturing"));
    assert_int_equal(atomic_load(&b->capturing), 0);
    void *p = NULL;
    assert_mstar_ok(mstar_caching_alloc(b, 64, &p));
    assert_mstar_ok(mstar_caching_free(b, p));
    mstar_backend_destroy(b);
}

static void test_caching_and_current_allocator(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = stream_on(b);
    void *p = NULL, *q = NULL;
    assert_mstar_ok(mstar_alloc(s, 1000, &p));
    assert_int_equal((uintptr_t)p % MSTAR__BLOCK_ROUND, 0);
    mstar_alloc_stats st;
    mstar_caching_stats(b, &st);
    assert_int_equal(st.allocated, 1024);
    assert_int_equal(st.segments, 1);
    assert_mstar_ok(mstar_alloc(s, 3 << 20, &q)); /* large: its own segment */
    mstar_caching_stats(b, &st);
    assert_int_equal(st.segments, 2);
    assert_int_equal(st.peak, 1024 + (3 << 20));
    assert_mstar_ok(mstar_free(s, q));
    assert_mstar_ok(mstar_free(s, p));
    mstar_caching_stats(b, &st);
    assert_int_equal(st.allocated, 0);
    assert_int_equal(st.peak, 1024 + (3 << 20));
    mstar_caching_reset_peak(b);
    mstar_caching_stats(b, &st);
    assert_int_equal(st.peak, 0);
    /* freed blocks are reused and merged */
    assert_mstar_ok(mstar_alloc(s, 2 << 20, &p));
    mstar_caching_stats(b, &st);
    assert_int_equal(st.segments, 2);
    assert_mstar_ok(mstar_free(s, p));
    assert_mstar_status(mstar_free(s, p), MSTAR_EINVAL);
    int x;
    assert_mstar_status(mstar_caching_free(b, &x), MSTAR_EINVAL);

    mstar_tensor t;
    int64_t shape[2] = { 3, 5 };
    assert_mstar_ok(mstar_tensor_alloc(s, MSTAR_DTYPE_FLOAT32, 2, shape, &t));
    assert_int_equal(mstar_tensor_nbytes(&t), 60);
    assert_mstar_ok(mstar_tensor_free(s, &t));
    assert_null(t.data);
    assert_mstar_ok(mstar_tensor_free(s, &t));
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

static mstar_status init_counter(mstar_stream *s, void *user)
{
    (*(int *)user)++;
    return MSTAR_OK;
}

static mstar_status init_fails(mstar_stream *s, void *user)
{
    return mstar_error_set(MSTAR_EDEVICE, "handle creation failed");
}

static void test_lazy_refused_inside_capture(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = stream_on(b);
    int count = 0;
    mstar_lazy *l = NULL, *bad = NULL;
    assert_mstar_ok(mstar_lazy_create("cuBLAS workspace", init_counter, &count, &l));
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_status(mstar_lazy_ensure(l, s), MSTAR_ESTATE);
    assert_non_null(strstr(mstar_last_error(), "'cuBLAS workspace' inside a capture"));
    assert_int_equal(count, 0);
    mstar_graph *g = NULL;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    mstar_graph_destroy(g);
    assert_mstar_ok(mstar_lazy_ensure(l, s)); /* a warm-up runs it */
    assert_mstar_ok(mstar_lazy_ensure(l, s));
    assert_int_equal(count, 1);
    assert_true(mstar_lazy_done(l));
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_ok(mstar_lazy_ensure(l, s)); /* done: fine inside a capture */
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    mstar_graph_destroy(g);

    assert_mstar_ok(mstar_lazy_create("flaky", init_fails, NULL, &bad));
    assert_mstar_status(mstar_lazy_ensure(bad, s), MSTAR_EDEVICE);
    assert_non_null(strstr(mstar_last_error(), "'flaky'"));
    assert_false(mstar_lazy_done(bad));
    assert_mstar_status(mstar_lazy_create(NULL, init_fails, NULL, &bad), MSTAR_EINVAL);
    mstar_lazy_destroy(bad);
    mstar_lazy_destroy(l);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

/* Two threads enqueue onto one stream: the host backend runs its work one item at a time. */
struct incr_args {
    int64_t *counter;
};

static void incr_fn(void *p)
{
    struct incr_args *a = p;
    int64_t v = *a->counter;
    *a->counter = v + 1; /* a lost update if two items ran at once */
}

struct thread_arg {
    mstar_stream *s;
    int64_t *counter;
};

static void *launcher(void *p)
{
    struct thread_arg *t = p;
    struct incr_args a = { t->counter };
    for (int i = 0; i < 20000; i++)
        mstar_launch(t->s, incr_fn, &a, sizeof(a));
    return NULL;
}

static void test_stream_serialises_threads(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *s = stream_on(b);
    int64_t counter = 0;
    struct thread_arg ta = { s, &counter };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, launcher, &ta);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(counter, 40000);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

/* A host call that holds its stream until the test opens the gate. */
static void wait_for_gate(void *args)
{
    atomic_int *gate;
    memcpy(&gate, args, sizeof(gate));
    while (atomic_load(gate) == 0)
        sched_yield();
}

static void test_stream_query(void **state)
{
    (void)state;
    mstar_backend *b = host();
    mstar_stream *sync = stream_on(b);
    assert_mstar_ok(mstar_stream_query(sync)); /* nothing queued */
    mstar__host_backend_set_async(b, true);
    mstar_stream *s = stream_on(b);
    assert_mstar_ok(mstar_stream_query(s));
    atomic_int gate = 0;
    atomic_int *g = &gate;
    assert_mstar_ok(mstar_launch(s, wait_for_gate, &g, sizeof(g)));
    assert_mstar_status(mstar_stream_query(s), MSTAR_EAGAIN); /* running or queued */
    atomic_store(&gate, 1);
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_mstar_ok(mstar_stream_query(s));
    assert_mstar_status(mstar_stream_query(NULL), MSTAR_EINVAL);
    assert_mstar_ok(mstar_stream_begin_capture(sync));
    assert_mstar_status(mstar_stream_query(sync), MSTAR_ESTATE);
    mstar_graph *graph = NULL;
    assert_mstar_ok(mstar_stream_end_capture(sync, &graph));
    mstar_graph_destroy(graph);
    mstar_stream_destroy(s);
    mstar_stream_destroy(sync);
    mstar_backend_destroy(b);
}

/* The host backend has no native streams to wrap; bad arguments are refused either way. */
static void test_stream_wrap_refused(void **state)
{
    (void)state;
    mstar_backend *b = host();
    int native = 0;
    mstar_stream *s = NULL;
    assert_mstar_status(mstar_stream_wrap(b, &native, &s), MSTAR_ENOTSUP);
    assert_null(s);
    assert_mstar_status(mstar_stream_wrap(b, NULL, &s), MSTAR_ENOTSUP);
    assert_mstar_status(mstar_stream_wrap(NULL, &native, &s), MSTAR_EINVAL);
    assert_mstar_status(mstar_stream_wrap(b, &native, NULL), MSTAR_EINVAL);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_create),
        cmocka_unit_test(test_cuda_unavailable_is_enotsup),
        cmocka_unit_test(test_budget_and_mem_info),
        cmocka_unit_test(test_budget_env),
        cmocka_unit_test(test_raw_alloc_and_bad_frees),
        cmocka_unit_test(test_pinned_and_register),
        cmocka_unit_test(test_streams_events_copies),
        cmocka_unit_test(test_stream_query),
        cmocka_unit_test(test_launch_copies_args),
        cmocka_unit_test(test_capture_records_and_replays_in_order),
        cmocka_unit_test(test_stream_destroyed_while_capturing),
        cmocka_unit_test(test_caching_and_current_allocator),
        cmocka_unit_test(test_lazy_refused_inside_capture),
        cmocka_unit_test(test_stream_serialises_threads),
        cmocka_unit_test(test_stream_wrap_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
