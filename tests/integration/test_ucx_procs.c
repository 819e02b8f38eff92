/*
 * test_ucx_procs.c — two processes on 127.0.0.1: this one reads, through the engine's async
 * reader, the registered memory of producer processes, with every byte verified; sizes from 0 B
 * to 64 MiB and many concurrent reads on both protocols; a producer that dies mid-read; engine
 * shutdown with reads in flight; nothing left behind on either side.
 *
 * MSTAR_UCX_TEST_MAX_MB (default 64) bounds the largest read and MSTAR_UCX_TEST_READS (default
 * 2000) the number of concurrent reads, for soak runs.
 */
#include "ucx_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (UINT64_C(1) << 20)

static uint64_t max_bytes(void)
{
    int64_t mb;
    assert_mstar_ok(mstar_env_get_int("MSTAR_UCX_TEST_MAX_MB", 64, 1, 4096, &mb));
    return (uint64_t)mb * MIB;
}

static mstar__ucx_engine *consumer(mstar__ucx_read_protocol proto)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    cfg.read_protocol = proto;
    mstar__ucx_engine *e;
    assert_mstar_ok(mstar__ucx_engine_create(&cfg, &e));
    return e;
}

static mstar__ucx_read_info read_of(const ucx_test_producer *p, void *dst, uint64_t off, uint64_t n)
{
    mstar__ucx_read_info ri = { p->session, dst, p->addr + off, n, p->key, p->key_len };
    return ri;
}

static void wait_ok(mstar_completion *h)
{
    assert_mstar_ok(mstar_completion_wait(h, -1));
    mstar_completion_release(h);
}

/* Every size from nothing to the largest, at offsets, on both protocols. */
static void test_sizes(void **state)
{
    (void)state;
    uint64_t max = max_bytes();
    ucx_test_producer p;
    ucx_test_producer_start(&p, max + 4096, 101, NULL, NULL);
    uint8_t *dst = malloc(max);
    for (int proto = 0; proto < 2; proto++) {
        mstar__ucx_engine *c = consumer((mstar__ucx_read_protocol)proto);
        mstar__ucx_reader *r;
        assert_mstar_ok(mstar__ucx_engine_reader(c, &r));
        static const uint64_t fixed[] = { 0, 1, 4095, 4096, 65537, MIB - 1 };
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) + 8; i++) {
            uint64_t n = i < 6 ? fixed[i] : MIB << (2 * (i - 6)) >> 2; /* 256K, 1M, 4M, ... */
            if (n > max)
                break;
            uint64_t off = (i * 4099) % 4096;
            memset(dst, 0, n);
            mstar__ucx_read_info ri = read_of(&p, dst, off, n);
            mstar_completion *h;
            assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
            wait_ok(h);
            size_t bad = ucx_test_check_at(dst, n, 101, off);
            if (bad != SIZE_MAX)
                fail_msg("%s read of %llu bytes at %llu: byte %zu differs",
                         mstar__ucx_read_protocol_name((mstar__ucx_read_protocol)proto),
                         (unsigned long long)n, (unsigned long long)off, bad);
        }
        mstar__ucx_engine_destroy(c);
    }
    free(dst);
    ucx_test_producer_stop(&p);
}

/* Many reads at once from two producers, spread over submissions and threads; each lands
 * where it should. */
static void test_many_concurrent(void **state)
{
    (void)state;
    int64_t nreads;
    assert_mstar_ok(mstar_env_get_int("MSTAR_UCX_TEST_READS", 2000, 1, 1000000, &nreads));
    ucx_test_producer p[2];
    ucx_test_producer_start(&p[0], 8 * MIB, 201, NULL, NULL);
    ucx_test_producer_start(&p[1], 8 * MIB, 202, NULL, NULL);
    uint64_t seed = 99;
    for (int proto = 0; proto < 2; proto++) {
        mstar__ucx_engine *c = consumer((mstar__ucx_read_protocol)proto);
        mstar__ucx_reader *r;
        assert_mstar_ok(mstar__ucx_engine_reader(c, &r));
        size_t n = (size_t)nreads, per = 50;
        mstar__ucx_read_info *infos = calloc(n, sizeof(*infos));
        uint64_t *offs = calloc(n, sizeof(*offs));
        uint8_t *dst = calloc(n, 16384);
        mstar_completion **h = calloc((n + per - 1) / per, sizeof(*h));
        for (size_t i = 0; i < n; i++) {
            uint64_t len = 1 + mstar_test_rand(&seed) % 16384;
            offs[i] = mstar_test_rand(&seed) % (8 * MIB - len);
            infos[i] = read_of(&p[i % 2], dst + i * 16384, offs[i], len);
        }
        for (size_t s = 0; s * per < n; s++) {
            size_t k = n - s * per < per ? n - s * per : per;
            assert_mstar_ok(mstar__ucx_reader_submit(r, infos + s * per, k, NULL, &h[s]));
        }
        assert_mstar_ok(mstar__ucx_reader_wait_all(r));
        for (size_t s = 0; s * per < n; s++)
            wait_ok(h[s]);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(
                ucx_test_check_at(dst + i * 16384, infos[i].nbytes, 201 + i % 2, offs[i]),
                SIZE_MAX);
        free(h);
        free(dst);
        free(offs);
        free(infos);
        mstar__ucx_engine_destroy(c);
    }
    ucx_test_producer_stop(&p[0]);
    ucx_test_producer_stop(&p[1]);
}

/* A producer that dies while a read waits on it fails that read with a clear error; reads from
 * another producer, and later ones, succeed (the dead session's endpoint is evicted). */
static void test_dead_peer_mid_read(void **state)
{
    (void)state;
    for (int proto = 0; proto < 2; proto++) {
        ucx_test_producer dying, live;
        ucx_test_producer_start(&dying, 16 * MIB, 301, NULL, NULL);
        ucx_test_producer_start(&live, MIB, 302, NULL, NULL);
        mstar__ucx_engine *c = consumer((mstar__ucx_read_protocol)proto);
        mstar__ucx_reader *r;
        assert_mstar_ok(mstar__ucx_engine_reader(c, &r));
        uint8_t *dst = malloc(16 * MIB);
        mstar__ucx_read_info ri = read_of(&dying, dst, 0, 4096);
        mstar_completion *h;
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
        wait_ok(h); /* connected */

        ucx_test_producer_kill(&dying, SIGSTOP); /* it can no longer answer */
        ri = read_of(&dying, dst, 0, 16 * MIB);
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
        assert_mstar_status(mstar_completion_wait(h, 100), MSTAR_ETIMEDOUT);
        ucx_test_producer_kill(&dying, SIGKILL);
        assert_mstar_status(mstar_completion_wait(h, -1), MSTAR_EREMOTE);
        assert_non_null(strstr(mstar_last_error(), dying.session));
        mstar_completion_release(h);

        /* The dead session again: refused quickly, a clear error, nothing hangs. */
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
        assert_mstar_status(mstar_completion_wait(h, -1), MSTAR_EREMOTE);
        mstar_completion_release(h);
        assert_mstar_status(mstar__ucx_reader_wait_all(r), MSTAR_EREMOTE);

        ri = read_of(&live, dst, 0, MIB);
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
        wait_ok(h);
        assert_int_equal(ucx_test_check(dst, MIB, 302), SIZE_MAX);
        assert_mstar_ok(mstar__ucx_reader_wait_all(r));
        mstar__ucx_engine_stats st;
        mstar__ucx_engine_get_stats(c, &st);
        assert_int_equal(st.peers, 1); /* only the live one is cached */
        free(dst);
        mstar__ucx_engine_destroy(c);
        ucx_test_producer_stop(&live);
    }
}

/* Destroying the consumer engine with reads in flight (queued in its reader and waiting on a
 * producer that cannot answer): every handle fails with MSTAR_ECANCELED, nothing is left. */
static void test_shutdown_with_reads_in_flight(void **state)
{
    (void)state;
    mstar__ucx_engine_destroy(consumer(MSTAR__UCX_READ_AM)); /* UCX's one-time state first */
    int threads = ucx_test_threads(), fds = ucx_test_fds();
    ucx_test_producer p;
    ucx_test_producer_start(&p, 4 * MIB, 401, NULL, NULL);
    mstar__ucx_engine *c = consumer(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_engine_reader(c, &r));
    uint8_t *dst = malloc(4 * MIB);
    mstar__ucx_read_info ri = read_of(&p, dst, 0, 4096);
    mstar_completion *h[10];
    assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h[0]));
    wait_ok(h[0]);
    ucx_test_producer_kill(&p, SIGSTOP);
    ri = read_of(&p, dst, 0, 4 * MIB);
    for (int i = 0; i < 10; i++) /* 3 run (one per thread), 7 wait in the queue */
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h[i]));
    mstar__ucx_engine_destroy(c);
    for (int i = 0; i < 10; i++) {
        assert_mstar_status(mstar_completion_poll(h[i]), MSTAR_ECANCELED);
        mstar_completion_release(h[i]);
    }
    free(dst);
    ucx_test_producer_kill(&p, SIGCONT);
    ucx_test_producer_stop(&p); /* and it still unregisters cleanly */
    assert_int_equal(ucx_test_threads(), threads);
    assert_int_equal(ucx_test_fds(), fds);
}

int main(int argc, char **argv)
{
    ucx_test_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_many_concurrent),
        cmocka_unit_test(test_dead_peer_mid_read),
        cmocka_unit_test(test_shutdown_with_reads_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
