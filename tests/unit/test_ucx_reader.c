/*
 * test_ucx_reader.c — the async reader (reference AsyncMooncakeReader) over two in-process
 * producers: grouping by session in batches of at most max_batch, handles that poll / wait /
 * fail with a message, a failure that does not poison later polls (design.md T-11),
 * wait_all reporting a failure once, the eventfd each finish writes, the submitter's `then` work,
 * one thread keeping many submissions in flight, shutdown with reads in flight, and the argument
 * checks.
 */
#include "ucx_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct producer {
    mstar__ucx_engine *e;
    uint8_t *buf;
    uint64_t n;
    uint64_t seed;
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
} producer;

static void producer_open(producer *p, uint64_t n, uint64_t seed)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    assert_mstar_ok(mstar__ucx_engine_create(&cfg, &p->e));
    p->buf = malloc(n);
    p->n = n;
    p->seed = seed;
    ucx_test_fill(p->buf, n, seed);
    assert_mstar_ok(mstar__ucx_engine_register(p->e, p->buf, n, p->key, &p->key_len));
}

static void producer_close(producer *p)
{
    assert_mstar_ok(mstar__ucx_engine_unregister(p->e, p->buf));
    mstar__ucx_engine_destroy(p->e);
    free(p->buf);
}

static mstar__ucx_read_info read_of(const producer *p, void *dst, uint64_t off, uint64_t n)
{
    mstar__ucx_read_info ri = { mstar__ucx_engine_session_id(p->e),
                                dst,
                                (uint64_t)(uintptr_t)p->buf + off,
                                n,
                                p->key,
                                p->key_len };
    return ri;
}

static mstar__ucx_engine *consumer_open(mstar__ucx_read_protocol proto)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    cfg.read_protocol = proto;
    mstar__ucx_engine *e;
    assert_mstar_ok(mstar__ucx_engine_create(&cfg, &e));
    return e;
}

/* Completions finished so far, as counted by the eventfd they write. */
static uint64_t wakeups(int efd)
{
    uint64_t n = 0;
    if (read(efd, &n, sizeof(n)) != sizeof(n))
        return 0;
    return n;
}

/* Many submissions, each mixing two sessions, on both protocols; every byte checked. */
static void test_submit_many(void **state)
{
    (void)state;
    producer p1, p2;
    producer_open(&p1, 1 << 20, 11);
    producer_open(&p2, 1 << 20, 22);
    for (int proto = 0; proto < 2; proto++) {
        mstar__ucx_engine *c = consumer_open((mstar__ucx_read_protocol)proto);
        mstar__ucx_reader *r;
        assert_mstar_ok(
            mstar__ucx_reader_create(c, MSTAR__UCX_READER_THREADS, MSTAR__UCX_READER_BATCH, &r));
        enum { SUBMITS = 40, PER = 32, SLICE = 8192 };
        uint8_t *dst = calloc(SUBMITS * PER, SLICE);
        mstar_completion *h[SUBMITS];
        int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        mstar__completion_notice notice = { efd, NULL };
        for (int s = 0; s < SUBMITS; s++) {
            mstar__ucx_read_info infos[PER];
            for (int i = 0; i < PER; i++) {
                const producer *p = (i % 2) ? &p2 : &p1; /* interleaved sessions */
                uint64_t off = (uint64_t)((s * PER + i) % 128) * SLICE;
                infos[i] = read_of(p, dst + (size_t)(s * PER + i) * SLICE, off, SLICE);
            }
            assert_mstar_ok(mstar__ucx_reader_submit(r, infos, PER, &notice, &h[s]));
        }
        assert_mstar_ok(mstar__ucx_reader_wait_all(r));
        assert_int_equal(mstar__ucx_reader_inflight(r), 0);
        assert_int_equal(wakeups(efd), SUBMITS);
        close(efd);
        for (int s = 0; s < SUBMITS; s++) {
            assert_mstar_ok(mstar_completion_poll(h[s]));
            mstar_completion_release(h[s]);
            for (int i = 0; i < PER; i++) {
                const producer *p = (i % 2) ? &p2 : &p1;
                uint64_t off = (uint64_t)((s * PER + i) % 128) * SLICE;
                assert_memory_equal(dst + (size_t)(s * PER + i) * SLICE, p->buf + off, SLICE);
            }
        }
        /* Two sessions per submission: two batches each. */
        mstar__ucx_engine_stats st;
        mstar__ucx_engine_get_stats(c, &st);
        assert_int_equal(st.batches, 2 * SUBMITS);
        assert_int_equal(st.reads_done, SUBMITS * PER);
        mstar__ucx_reader_destroy(r);
        mstar__ucx_engine_destroy(c);
        free(dst);
    }
    producer_close(&p1);
    producer_close(&p2);
}

/* 1234 reads of one session and 600 of another with max_batch 500: 3 + 2 batches. */
static void test_batches_of_at_most_max(void **state)
{
    (void)state;
    producer p1, p2;
    producer_open(&p1, 1234 * 64, 1);
    producer_open(&p2, 600 * 64, 2);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 1, 500, &r));
    size_t n = 1234 + 600;
    mstar__ucx_read_info *infos = calloc(n, sizeof(*infos));
    uint8_t *dst = calloc(n, 64);
    for (size_t i = 0; i < n; i++)
        infos[i] = i < 1234 ? read_of(&p1, dst + i * 64, i * 64, 64)
                            : read_of(&p2, dst + i * 64, (i - 1234) * 64, 64);
    mstar_completion *h;
    assert_mstar_ok(mstar__ucx_reader_submit(r, infos, n, NULL, &h));
    free(infos); /* the reader copied them */
    assert_mstar_ok(mstar_completion_wait(h, -1));
    mstar_completion_release(h);
    assert_memory_equal(dst, p1.buf, 1234 * 64);
    assert_memory_equal(dst + 1234 * 64, p2.buf, 600 * 64);
    mstar__ucx_engine_stats st;
    mstar__ucx_engine_get_stats(c, &st);
    assert_int_equal(st.batches, 5);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    free(dst);
    producer_close(&p1);
    producer_close(&p2);
}

/* A failed submission fails its own handle with a message; others, and later ones, succeed;
 * wait_all reports the failure once (T-11: a failed read does not poison later polls). */
static void test_failure_does_not_poison(void **state)
{
    (void)state;
    producer p;
    producer_open(&p, 65536, 5);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 3, 500, &r));
    uint8_t good[4096], bad_dst[4096];
    mstar__ucx_read_info ok = read_of(&p, good, 0, 4096);
    mstar__ucx_read_info bad = read_of(&p, bad_dst, 0, 4096);
    uint8_t forged[MSTAR_REMOTE_KEY_MAX];
    memcpy(forged, p.key, p.key_len);
    forged[0] = 'X';
    bad.remote_key = forged;
    mstar_completion *hb, *hg;
    assert_mstar_ok(mstar__ucx_reader_submit(r, &bad, 1, NULL, &hb));
    assert_mstar_ok(mstar__ucx_reader_submit(r, &ok, 1, NULL, &hg));
    assert_mstar_status(mstar_completion_wait(hb, -1), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "remote_key"));
    assert_mstar_ok(mstar_completion_wait(hg, -1));
    /* Polling the failed handle again gives the same error, and the good one stays good. */
    for (int i = 0; i < 3; i++) {
        mstar_error_clear();
        assert_mstar_status(mstar_completion_poll(hb), MSTAR_EPROTO);
        assert_non_null(strstr(mstar_last_error(), "bad magic"));
        assert_mstar_ok(mstar_completion_poll(hg));
    }
    assert_mstar_status(mstar__ucx_reader_wait_all(r), MSTAR_EPROTO);
    assert_mstar_ok(mstar__ucx_reader_wait_all(r)); /* reported once */
    mstar_completion_release(hb);
    mstar_completion_release(hg);
    /* Later reads work. */
    memset(good, 0, sizeof(good));
    assert_mstar_ok(mstar__ucx_reader_submit(r, &ok, 1, NULL, &hg));
    assert_mstar_ok(mstar_completion_wait(hg, -1));
    assert_int_equal(ucx_test_check(good, 4096, 5), SIZE_MAX);
    mstar_completion_release(hg);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    producer_close(&p);
}

/* What a `then` saw: how the reads ended, on which thread, and the bytes at the time. */
typedef struct then_seen {
    int calls;
    mstar_status reads;
    pthread_t thread;
    bool bytes_landed;
    const uint8_t *dst;
    uint64_t seed;
    mstar_status answer; /* what it returns on success */
} then_seen;

static mstar_status record_then(void *ctx, mstar_status reads)
{
    then_seen *t = ctx;
    t->calls++;
    t->reads = reads;
    t->thread = pthread_self();
    t->bytes_landed = reads == MSTAR_OK && ucx_test_check(t->dst, 4096, t->seed) == SIZE_MAX;
    if (reads != MSTAR_OK)
        return reads;
    if (t->answer != MSTAR_OK)
        return mstar_error_set(t->answer, "then refused the bytes");
    return MSTAR_OK;
}

/* submit_then: the work runs after the reads, on the reader's thread, before the handle
 * completes; its status is the handle's; it runs on a failed read too (and gets that failure);
 * an empty list runs it at once on the caller's thread. */
static void test_then(void **state)
{
    (void)state;
    producer p;
    producer_open(&p, 4096, 21);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 2, 500, &r));
    uint8_t dst[4096];
    mstar__ucx_read_info ri = read_of(&p, dst, 0, 4096);
    mstar_completion *h;

    then_seen ok = { 0, MSTAR_EINVAL, 0, false, dst, 21, MSTAR_OK };
    memset(dst, 0, sizeof(dst));
    assert_mstar_ok(mstar__ucx_reader_submit_then(r, &ri, 1, NULL, record_then, &ok, &h));
    assert_mstar_ok(mstar_completion_wait(h, -1));
    assert_int_equal(ok.calls, 1);
    assert_mstar_ok(ok.reads);
    assert_true(ok.bytes_landed);
    assert_false(pthread_equal(ok.thread, pthread_self()));
    mstar_completion_release(h);

    then_seen refuse = { 0, MSTAR_EINVAL, 0, false, dst, 21, MSTAR_EDEVICE };
    assert_mstar_ok(mstar__ucx_reader_submit_then(r, &ri, 1, NULL, record_then, &refuse, &h));
    assert_mstar_status(mstar_completion_wait(h, -1), MSTAR_EDEVICE);
    assert_non_null(strstr(mstar_last_error(), "then refused the bytes"));
    mstar_completion_release(h);

    then_seen failed = { 0, MSTAR_OK, 0, false, dst, 21, MSTAR_OK };
    mstar__ucx_read_info bad = ri;
    bad.remote_addr += 4000; /* past the key's region */
    assert_mstar_ok(mstar__ucx_reader_submit_then(r, &bad, 1, NULL, record_then, &failed, &h));
    assert_mstar_status(mstar_completion_wait(h, -1), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "outside the key's region"));
    assert_int_equal(failed.calls, 1);
    assert_int_equal(failed.reads, MSTAR_EPROTO);
    mstar_completion_release(h);

    then_seen empty = { 0, MSTAR_EINVAL, 0, false, dst, 21, MSTAR_OK };
    empty.dst = p.buf; /* nothing is read: the check looks at the producer's own bytes */
    assert_mstar_ok(mstar__ucx_reader_submit_then(r, NULL, 0, NULL, record_then, &empty, &h));
    assert_int_equal(empty.calls, 1);
    assert_true(pthread_equal(empty.thread, pthread_self()));
    assert_mstar_ok(mstar_completion_poll(h));
    mstar_completion_release(h);

    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    producer_close(&p);
}

/* One thread keeps many submissions in flight: behind a read that cannot finish (a peer that
 * never answers), later submissions on the same single thread still complete. */
static void test_one_thread_many_in_flight(void **state)
{
    (void)state;
    char hole[MSTAR_NAME_MAX + 1];
    int fd = ucx_test_blackhole(hole);
    producer p;
    producer_open(&p, 1 << 20, 31);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 1, 500, &r));
    uint8_t stuck_dst[4096];
    mstar__ucx_read_info stuck = read_of(&p, stuck_dst, 0, 4096);
    stuck.session = hole;
    mstar_completion *hs, *h[4];
    assert_mstar_ok(mstar__ucx_reader_submit(r, &stuck, 1, NULL, &hs));
    enum { PART = (1 << 20) / 4 };
    uint8_t *dst = malloc(1 << 20);
    for (int i = 0; i < 4; i++) {
        mstar__ucx_read_info ri = read_of(&p, dst + i * PART, (uint64_t)i * PART, PART);
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h[i]));
    }
    for (int i = 0; i < 4; i++) {
        assert_mstar_ok(mstar_completion_wait(h[i], -1));
        mstar_completion_release(h[i]);
    }
    assert_int_equal(ucx_test_check(dst, 1 << 20, 31), SIZE_MAX);
    assert_int_equal(mstar_completion_poll(hs), MSTAR_EAGAIN);
    assert_int_equal(mstar__ucx_reader_inflight(r), 1);
    close(fd);
    assert_mstar_status(mstar_completion_wait(hs, -1), MSTAR_EREMOTE);
    mstar_completion_release(hs);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    free(dst);
    producer_close(&p);
}

/* A read against a peer that never answers: EAGAIN / ETIMEDOUT while pending, counted in
 * flight; when the peer's socket goes away the handle fails with the session in the message. */
static void test_pending_then_peer_gone(void **state)
{
    (void)state;
    char hole[MSTAR_NAME_MAX + 1];
    int fd = ucx_test_blackhole(hole);
    producer p;
    producer_open(&p, 4096, 3);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_GET);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 2, 500, &r));
    uint8_t dst[4096];
    mstar__ucx_read_info ri = read_of(&p, dst, 0, 4096);
    ri.session = hole;
    mstar_completion *h;
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    mstar__completion_notice notice = { efd, NULL };
    assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, &notice, &h));
    assert_int_equal(mstar_completion_poll(h), MSTAR_EAGAIN);
    assert_mstar_status(mstar_completion_wait(h, 50), MSTAR_ETIMEDOUT);
    assert_int_equal(mstar__ucx_reader_inflight(r), 1);
    assert_int_equal(wakeups(efd), 0);
    close(fd); /* the kernel resets the half-open connection */
    mstar_status st = mstar_completion_wait(h, -1);
    assert_true(st == MSTAR_EREMOTE);
    assert_non_null(strstr(mstar_last_error(), hole));
    assert_mstar_status(mstar__ucx_reader_wait_all(r), MSTAR_EREMOTE); /* the finish is over */
    assert_int_equal(wakeups(efd), 1);
    close(efd);
    assert_int_equal(mstar__ucx_reader_inflight(r), 0);
    mstar_completion_release(h);
    /* The same reader reads from a live session afterwards. */
    ri = read_of(&p, dst, 0, 4096);
    assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
    assert_mstar_ok(mstar_completion_wait(h, -1));
    mstar_completion_release(h);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    producer_close(&p);
}

/* Shutdown with reads in flight lets them finish; the caller may release handles before or
 * after; submit after shutdown is refused; shutdown twice is fine. */
static void test_shutdown_with_reads_in_flight(void **state)
{
    (void)state;
    producer p;
    producer_open(&p, 8 << 20, 4);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 3, 500, &r));
    enum { N = 6 };
    uint8_t *dst = malloc((size_t)N * (8 << 20));
    mstar_completion *h[N];
    for (int i = 0; i < N; i++) {
        mstar__ucx_read_info ri = read_of(&p, dst + (size_t)i * (8 << 20), 0, 8 << 20);
        assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h[i]));
        if (i % 2)
            mstar_completion_release(h[i]); /* let go while it runs */
    }
    mstar__ucx_reader_shutdown(r);
    assert_int_equal(mstar__ucx_reader_inflight(r), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(ucx_test_check(dst + (size_t)i * (8 << 20), 8 << 20, 4), SIZE_MAX);
        if (i % 2 == 0) {
            assert_mstar_ok(mstar_completion_poll(h[i]));
            mstar_completion_release(h[i]);
        }
    }
    mstar__ucx_read_info ri = read_of(&p, dst, 0, 10);
    mstar_completion *late = NULL;
    assert_mstar_status(mstar__ucx_reader_submit(r, &ri, 1, NULL, &late), MSTAR_ECLOSED);
    assert_null(late);
    mstar__ucx_reader_shutdown(r);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    free(dst);
    producer_close(&p);
}

static void test_arguments(void **state)
{
    (void)state;
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r = NULL;
    assert_mstar_status(mstar__ucx_reader_create(c, 0, 500, &r), MSTAR_EINVAL);
    assert_mstar_status(mstar__ucx_reader_create(c, 3, 0, &r), MSTAR_EINVAL);
    assert_mstar_status(mstar__ucx_reader_create(NULL, 3, 500, &r), MSTAR_EINVAL);
    assert_null(r);
    assert_mstar_ok(mstar__ucx_reader_create(c, 3, 500, &r));
    mstar_completion *h = NULL;
    /* An empty list: a handle that is already complete. */
    assert_mstar_ok(mstar__ucx_reader_submit(r, NULL, 0, NULL, &h));
    assert_mstar_ok(mstar_completion_poll(h));
    mstar_completion_release(h);
    uint8_t dst[16], key[8] = { 0 };
    mstar__ucx_read_info ri = { NULL, dst, 0, 16, key, sizeof(key) };
    h = NULL;
    assert_mstar_status(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h), MSTAR_EINVAL);
    ri.session = "127.0.0.1:9";
    ri.remote_key_len = MSTAR_REMOTE_KEY_MAX + 1;
    assert_mstar_status(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h), MSTAR_EINVAL);
    ri.remote_key_len = sizeof(key);
    ri.local_ptr = NULL;
    assert_mstar_status(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h), MSTAR_EINVAL);
    char longs[300];
    memset(longs, '1', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    ri.local_ptr = dst;
    ri.session = longs;
    assert_mstar_status(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h), MSTAR_EINVAL);
    assert_null(h);
    assert_int_equal(mstar__ucx_reader_inflight(r), 0);
    assert_mstar_status(mstar_completion_poll(NULL), MSTAR_EINVAL);
    mstar_completion_release(NULL);
    mstar__ucx_reader_destroy(NULL);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
}

/* Readers and engines that came and went leave no thread or fd behind. */
static void test_nothing_left_behind(void **state)
{
    (void)state;
    mstar__ucx_engine_destroy(consumer_open(MSTAR__UCX_READ_AM));
    int threads = ucx_test_threads(), fds = ucx_test_fds();
    producer p;
    producer_open(&p, 1 << 16, 9);
    mstar__ucx_engine *c = consumer_open(MSTAR__UCX_READ_AM);
    mstar__ucx_reader *r;
    assert_mstar_ok(mstar__ucx_reader_create(c, 3, 500, &r));
    uint8_t dst[1 << 16];
    mstar__ucx_read_info ri = read_of(&p, dst, 0, sizeof(dst));
    mstar_completion *h;
    assert_mstar_ok(mstar__ucx_reader_submit(r, &ri, 1, NULL, &h));
    assert_mstar_ok(mstar_completion_wait(h, -1));
    mstar_completion_release(h);
    mstar__ucx_reader_destroy(r);
    mstar__ucx_engine_destroy(c);
    producer_close(&p);
    assert_int_equal(ucx_test_threads(), threads);
    assert_int_equal(ucx_test_fds(), fds);
}

int main(int argc, char **argv)
{
    ucx_test_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_many),
        cmocka_unit_test(test_batches_of_at_most_max),
        cmocka_unit_test(test_failure_does_not_poison),
        cmocka_unit_test(test_then),
        cmocka_unit_test(test_one_thread_many_in_flight),
        cmocka_unit_test(test_pending_then_peer_gone),
        cmocka_unit_test(test_shutdown_with_reads_in_flight),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_nothing_left_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
