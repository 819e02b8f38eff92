/*
 * test_pinned_pool.c — the pool of pinned host buffers the staged routes take their host
 * memory from (src/device/pinned_pool.c): size classes, reuse, the cap, buffers returned on
 * another thread, everything freed at destroy; and the files route staging device tensors
 * through it (the host backend standing in for a device), on its error path too.
 */
#include "comm_harness.h"

#include "device/pinned_pool.h"
#include "tensors/comm_internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

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

/* ---- the files route ------------------------------------------------------------------------ */

static mstar__pinned_pool_stats comm_pool(mstar_comm *c)
{
    return stats_of(c->env.pinned);
}

/* Store and stage one uint8 vector of `n` bytes on `p`; the register's status is returned. */
static mstar_status stage_vector(mstar_comm *p, const mstar_rid *rid, int64_t n, uint32_t seed,
                                 bool plant, mstar_tensor_info *info)
{
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, n, seed);
    mstar_output o = output_of("x", t);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, rid, &o, 1, NULL, info));
    free(t.data);
    assert_mstar_ok(mstar_comm_increment_ref(p, info->uuid, 1));
    if (plant) { /* a file already where this tensor's goes: its write fails */
        char name[MSTAR__SHM_NAME_BUF];
        assert_mstar_ok(mstar__shm_file_name(&p->dir, p->entity, info->uuid, name));
        int fd = openat(p->dir.fd, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    return mstar_comm_register_for_send(p, rid, info, 1);
}

static void read_and_check(mstar_comm *c, const mstar_rid *rid, const mstar_tensor_info *info,
                           int64_t n, uint32_t seed)
{
    mstar_edge e = edge_of("x", "n", info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(c, rid, &e, 1, NULL));
    collect_ready(c, 1);
    mstar_edge_clear(&e);
    mstar_tensor want = make_vector(MSTAR_DTYPE_UINT8, n, seed);
    check_bytes(c, info->uuid, &want);
    free(want.data);
    assert_mstar_ok(mstar_comm_dereference(c, info->uuid, 1));
}

/* A device tensor over files is written from a pooled buffer and read through one: the second
 * tensor of the same size allocates nothing on either side, and a write that fails gives its
 * buffer back. */
static void test_files_route(void **state)
{
    (void)state;
    comm_pair w;
    comm_pair_init(&w, "pinned-files");
    mstar_backend *bp, *bc;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &bp));
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &bc));
    w.p = make_comm_with("worker_0", MSTAR_TRANSPORT_FILES, w.dir, &w.sp, bp);
    w.c = make_comm_with("worker_1", MSTAR_TRANSPORT_FILES, w.dir, &w.sc, bc);
    mstar_rid rid = mstar_rid_from_int(3);
    mstar_tensor_info info;
    int64_t n = 100 * 1000;
    for (uint32_t round = 0; round < 3; round++) {
        assert_mstar_ok(stage_vector(w.p, &rid, n, round, false, &info));
        read_and_check(w.c, &rid, &info, n, round);
        assert_int_equal(bus_deliver(&w.b, "worker_0", w.p), 1);
        mstar__pinned_pool_stats sp = comm_pool(w.p), sc = comm_pool(w.c);
        assert_int_equal(sp.allocations, 1);
        assert_int_equal(sp.reuses, round);
        assert_int_equal(sc.allocations, 1);
        assert_int_equal(sc.reuses, round);
        assert_int_equal(sp.bytes_out + sc.bytes_out, 0);
        assert_int_equal(sp.bytes_cached, 128 * KiB);
    }
    assert_int_equal(mstar_comm_num_tensors(w.p), 0);
    mstar_status st = stage_vector(w.p, &rid, n, 9, true, &info);
    assert_mstar_status(st, MSTAR_EEXIST);
    mstar__pinned_pool_stats sp = comm_pool(w.p);
    assert_int_equal(sp.allocations, 1);
    assert_int_equal(sp.reuses, 3);
    assert_int_equal(sp.bytes_out, 0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w.p, &rid));
    char name[MSTAR__SHM_NAME_BUF];
    assert_mstar_ok(mstar__shm_file_name(&w.p->dir, "worker_0", info.uuid, name));
    unlinkat(w.p->dir.fd, name, 0);
    comm_pair_fini(&w);
    mstar_backend_destroy(bc);
    mstar_backend_destroy(bp);
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
        cmocka_unit_test(test_files_route),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
