/*
 * test_pinned_pool.c — the pool of pinned host buffers the staged routes take their host
 * memory from (src/device/pinned_pool.c): size classes, reuse, the cap, buffers returned on
 * another thread, everything freed at destroy.
 */
#include "mstar_test.h"

#include "device/pinned_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((uint64_t)1 << 10)

static mstar__pinned_pool_stats stats_of(mstar__pinned_pool *p)
{
    mstar__pinned_pool_stats s;
    mstar__pinned_pool_stats_get(p, &s);
    return s;
}

static void test_classes(void **state)
{
    (void)state;
    assert_int_equal(mstar__pinned_pool_class(0), 4 * KiB);
    assert_int_equal(mstar__pinned_pool_class(1), 4 * KiB);
    assert_int_equal(mstar__pinned_pool_class(4 * KiB), 4 * KiB);
    assert_int_equal(mstar__pinned_pool_class(4 * KiB + 1), 8 * KiB);
    assert_int_equal(mstar__pinned_pool_class((3u << 20) + 5), 4u << 20);
    assert_int_equal(mstar__pinned_pool_class(UINT64_C(1) << 63), UINT64_C(1) << 63);
    assert_int_equal(mstar__pinned_pool_class((UINT64_C(1) << 63) + 1), 0);
}

/* The second request of a class is served from the cache: no new allocation, the same memory,
 * which holds every byte written to it. */
static void test_reuse(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__pinned_pool *p;
    assert_mstar_ok(mstar__pinned_pool_create(b, 1u << 20, &p));
    void *a, *again, *other;
    assert_mstar_ok(mstar__pinned_pool_get(p, 5000, &a));
    memset(a, 0xab, 8 * KiB); /* the whole class is usable */
    assert_int_equal(stats_of(p).bytes_out, 8 * KiB);
    mstar__pinned_pool_put(p, a);
    mstar__pinned_pool_stats s = stats_of(p);
    assert_int_equal(s.allocations, 1);
    assert_int_equal(s.bytes_cached, 8 * KiB);
    assert_int_equal(s.bytes_out, 0);
    assert_mstar_ok(mstar__pinned_pool_get(p, 6000, &again));
    assert_ptr_equal(again, a);
    s = stats_of(p);
    assert_int_equal(s.allocations, 1);
    assert_int_equal(s.reuses, 1);
    assert_int_equal(s.bytes_cached, 0);
    assert_mstar_ok(mstar__pinned_pool_get(p, 3000, &other)); /* another class */
    assert_int_equal(stats_of(p).allocations, 2);
    for (size_t i = 0; i < 6000; i++)
        ((unsigned char *)again)[i] = (unsigned char)i;
    for (size_t i = 0; i < 6000; i++)
        assert_int_equal(((unsigned char *)again)[i], (unsigned char)i);
    mstar__pinned_pool_put(p, again);
    mstar__pinned_pool_put(p, other);
    assert_int_equal(stats_of(p).bytes_cached, 12 * KiB);
    mstar__pinned_pool_destroy(p);
    mstar_backend_destroy(b);
}

/* Past the cap a returned buffer is freed at once; a cap of 0 caches nothing. */
static void test_cap(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__pinned_pool *p;
    assert_mstar_ok(mstar__pinned_pool_create(b, 12 * KiB, &p));
    void *x[3];
    for (int i = 0; i < 3; i++)
        assert_mstar_ok(mstar__pinned_pool_get(p, 8 * KiB, &x[i]));
    for (int i = 0; i < 3; i++)
        mstar__pinned_pool_put(p, x[i]);
    mstar__pinned_pool_stats s = stats_of(p);
    assert_int_equal(s.bytes_cached, 8 * KiB); /* a second 8 KiB would pass 12 KiB */
    assert_int_equal(s.frees, 2);
    assert_int_equal(s.allocations, 3);
    assert_mstar_ok(mstar__pinned_pool_get(p, 4 * KiB, &x[0])); /* 4 KiB still fits beside */
    mstar__pinned_pool_put(p, x[0]);
    assert_int_equal(stats_of(p).bytes_cached, 12 * KiB);
    mstar__pinned_pool_destroy(p);

    assert_mstar_ok(mstar__pinned_pool_create(b, 0, &p));
    assert_mstar_ok(mstar__pinned_pool_get(p, 1, &x[0]));
    mstar__pinned_pool_put(p, x[0]);
    s = stats_of(p);
    assert_int_equal(s.bytes_cached, 0);
    assert_int_equal(s.frees, 1);
    mstar__pinned_pool_destroy(p);
    mstar_backend_destroy(b);
}

/* MSTAR_PINNED_POOL_MB sets the cap; a bad value is refused by name. */
static void test_env_knob(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__pinned_pool *p = NULL;
    setenv("MSTAR_PINNED_POOL_MB", "3", 1);
    assert_mstar_ok(mstar__pinned_pool_create_from_env(b, &p));
    assert_int_equal(stats_of(p).cap_bytes, 3u << 20);
    mstar__pinned_pool_destroy(p);
    setenv("MSTAR_PINNED_POOL_MB", "-1", 1);
    assert_mstar_status(mstar__pinned_pool_create_from_env(b, &p), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_PINNED_POOL_MB"));
    unsetenv("MSTAR_PINNED_POOL_MB");
    assert_mstar_ok(mstar__pinned_pool_create_from_env(b, &p));
    assert_int_equal(stats_of(p).cap_bytes, (uint64_t)MSTAR__PINNED_POOL_DEFAULT_MB << 20);
    mstar__pinned_pool_destroy(p);
    mstar_backend_destroy(b);
}

/* A buffer the pool did not hand out is refused (logged) and changes nothing; one still out at
 * destroy is freed all the same (the backend no longer knows it afterwards). */
static void test_foreign_and_leftover(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    mstar__pinned_pool *p;
    assert_mstar_ok(mstar__pinned_pool_create(b, 1u << 20, &p));
    void *mine, *foreign;
    assert_mstar_ok(mstar_host_alloc_pinned(b, 4096, &foreign));
    mstar_test_log_capture_begin(MSTAR_LOG_ERROR);
    mstar__pinned_pool_put(p, foreign);
    assert_true(mstar_test_log_contains("not handed out"));
    mstar_test_log_capture_end();
    assert_int_equal(stats_of(p).bytes_cached, 0);
    assert_mstar_ok(mstar_host_free_pinned(b, foreign));
    assert_mstar_ok(mstar__pinned_pool_get(p, 100, &mine));
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar__pinned_pool_destroy(p);
    assert_true(mstar_test_log_contains("still out"));
    mstar_test_log_capture_end();
    assert_mstar_status(mstar_host_free_pinned(b, mine), MSTAR_EINVAL); /* freed already */
    mstar_backend_destroy(b);
}

/* Buffers taken on one thread come back on another (as a UCX read's does, on the reader's
 * thread) while the first keeps taking: the counts add up (TSan checks the locking). */
typedef struct handoff {
    mstar__pinned_pool *p;
    void *bufs[64];
} handoff;

static void *give_back(void *arg)
{
    handoff *h = arg;
    for (int i = 0; i < 64; i++)
        mstar__pinned_pool_put(h->p, h->bufs[i]);
    return NULL;
}

static void test_other_thread(void **state)
{
    (void)state;
    mstar_backend *b;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &b));
    handoff h;
    assert_mstar_ok(mstar__pinned_pool_create(b, 1u << 30, &h.p));
    for (int i = 0; i < 64; i++)
        assert_mstar_ok(mstar__pinned_pool_get(h.p, (uint64_t)(i % 4 + 1) * 4 * KiB, &h.bufs[i]));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, give_back, &h), 0);
    void *mine[64];
    for (int i = 0; i < 64; i++)
        assert_mstar_ok(mstar__pinned_pool_get(h.p, 4 * KiB, &mine[i]));
    assert_int_equal(pthread_join(th, NULL), 0);
    for (int i = 0; i < 64; i++)
        mstar__pinned_pool_put(h.p, mine[i]);
    mstar__pinned_pool_stats s = stats_of(h.p);
    assert_int_equal(s.bytes_out, 0);
    assert_int_equal(s.allocations + s.reuses, 128);
    assert_int_equal(s.frees, 0);
    mstar__pinned_pool_destroy(h.p);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_env_knob),
        cmocka_unit_test(test_foreign_and_leftover),
        cmocka_unit_test(test_other_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
