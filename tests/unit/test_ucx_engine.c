/*
 * test_ucx_engine.c — the UCX engine in one process: configuration and session ids, the remote
 * key envelope against bad bytes, two engines reading each other's memory over TCP loopback with
 * both protocols, registration rules, refusals, failures, and that nothing is left behind.
 */
#include "ucx_test.h"

#include "tensors/ucx/ucx_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const mstar__ucx_read_protocol protos[] = { MSTAR__UCX_READ_AM, MSTAR__UCX_READ_GET };

static mstar__ucx_engine *new_engine(void)
{
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    mstar__ucx_engine *e = NULL;
    assert_mstar_ok(mstar__ucx_engine_create(&cfg, &e));
    return e;
}

typedef struct region {
    uint8_t *buf;
    uint64_t n;
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
} region;

static void region_make(mstar__ucx_engine *e, region *r, uint64_t n, uint64_t seed)
{
    r->buf = malloc(n > 0 ? n : 1);
    r->n = n;
    ucx_test_fill(r->buf, n, seed);
    assert_mstar_ok(mstar__ucx_engine_register(e, r->buf, n, r->key, &r->key_len));
}

static void region_drop(mstar__ucx_engine *e, region *r)
{
    assert_mstar_ok(mstar__ucx_engine_unregister(e, r->buf));
    free(r->buf);
}

static mstar__ucx_read_info info_for(mstar__ucx_engine *producer, const region *r, void *dst,
                                     uint64_t off, uint64_t n)
{
    mstar__ucx_read_info ri = { mstar__ucx_engine_session_id(producer),
                                dst,
                                (uint64_t)(uintptr_t)r->buf + off,
                                n,
                                r->key,
                                r->key_len };
    return ri;
}

/* ---- configuration -------------------------------------------------------------------------- */

static void test_config_env(void **state)
{
    (void)state;
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    assert_int_equal(cfg.transport, MSTAR__UCX_TCP);
    assert_int_equal(cfg.read_protocol, MSTAR__UCX_READ_AM);
    assert_string_equal(cfg.address, "127.0.0.1");
    setenv("MSTAR_UCX_READ_PROTOCOL", "get", 1);
    setenv("MSTAR_UCX_PORT", "4567", 1);
    setenv("MSTAR_UCX_ADDRESS", "::1", 1);
    setenv("MSTAR_UCX_AM_EAGER_MAX", "0", 1);
    setenv("MSTAR_UCX_READ_TIMEOUT_S", "2.5", 1);
    assert_mstar_ok(mstar__ucx_config_from_env(&cfg));
    assert_int_equal(cfg.am_eager_max, 0);
    assert_true(cfg.read_timeout_s == 2.5);
    setenv("MSTAR_UCX_READ_TIMEOUT_S", "-1", 1);
    assert_mstar_status(mstar__ucx_config_from_env(&cfg), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_UCX_READ_TIMEOUT_S"));
    unsetenv("MSTAR_UCX_READ_TIMEOUT_S");
    unsetenv("MSTAR_UCX_AM_EAGER_MAX");
    assert_int_equal(cfg.read_protocol, MSTAR__UCX_READ_GET);
    assert_int_equal(cfg.port, 4567);
    assert_string_equal(cfg.address, "::1");
    setenv("MSTAR_UCX_PORT", "65536", 1);
    assert_mstar_status(mstar__ucx_config_from_env(&cfg), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_UCX_PORT"));
    unsetenv("MSTAR_UCX_PORT");
    setenv("MSTAR_UCX_READ_PROTOCOL", "put", 1);
    assert_mstar_status(mstar__ucx_config_from_env(&cfg), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_UCX_READ_PROTOCOL"));
    unsetenv("MSTAR_UCX_READ_PROTOCOL");
    char longaddr[100];
    memset(longaddr, 'a', sizeof(longaddr) - 1);
    longaddr[sizeof(longaddr) - 1] = '\0';
    setenv("MSTAR_UCX_ADDRESS", longaddr, 1);
    assert_mstar_status(mstar__ucx_config_from_env(&cfg), MSTAR_EINVAL);
    unsetenv("MSTAR_UCX_ADDRESS");
    assert_string_equal(cfg.address, "::1"); /* a failed overlay changes nothing */
    assert_string_equal(mstar__ucx_transport_name(MSTAR__UCX_RDMA), "rdma");
    assert_string_equal(mstar__ucx_read_protocol_name(MSTAR__UCX_READ_GET), "get");
}

static void test_session_parse(void **state)
{
    (void)state;
    struct sockaddr_storage sa;
    socklen_t len;
    assert_mstar_ok(mstar__ucx_session_parse("127.0.0.1:5000", "s", &sa, &len));
    assert_int_equal(sa.ss_family, AF_INET);
    assert_mstar_ok(mstar__ucx_session_parse("fd00::2:5000", "s", &sa, &len));
    assert_int_equal(sa.ss_family, AF_INET6);
    char round[MSTAR_NAME_MAX + 1];
    assert_mstar_ok(mstar__ucx_session_format((struct sockaddr *)&sa, round, sizeof(round)));
    assert_string_equal(round, "fd00::2:5000");
    static const char *const bad[] = { "",
                                       "nocolon",
                                       "1.2.3.4:",
                                       ":80",
                                       "1.2.3.4:0",
                                       "1.2.3.4:65536",
                                       "1.2.3.4:99999999999999999999",
                                       "1.2.3.4:12a",
                                       "host.example:80",
                                       "[::1]:80",
                                       "1.2.3.4/5:80",
                                       "1.2.3.400:80",
                                       "../../x:1" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mstar_error_clear();
        if (mstar__ucx_session_parse(bad[i], "source_session_id", &sa, &len) != MSTAR_EPROTO)
            fail_msg("session '%s' was accepted", bad[i]);
        assert_non_null(strstr(mstar_last_error(), "source_session_id"));
    }
    char huge[400];
    memset(huge, '1', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    huge[10] = ':';
    assert_mstar_status(mstar__ucx_session_parse(huge, "s", &sa, &len), MSTAR_EPROTO);
    assert_mstar_status(mstar__ucx_session_parse(NULL, "s", &sa, &len), MSTAR_EPROTO);
}

static void test_create_errors(void **state)
{
    (void)state;
    mstar__ucx_engine *e = NULL;
    mstar__ucx_config cfg;
    mstar__ucx_engine_destroy(new_engine()); /* one-time state (UCX's, a sanitizer's) first */
    int threads = ucx_test_threads(), fds = ucx_test_fds();

    mstar__ucx_config_init(&cfg);
    cfg.transport = MSTAR__UCX_RDMA;
    if (mstar_test_count_dir("/sys/class/infiniband") <= 0) {
        assert_mstar_status(mstar__ucx_engine_create(&cfg, &e), MSTAR_ENOTSUP);
        assert_non_null(strstr(mstar_last_error(), "no RDMA verbs device"));
    }
    mstar__ucx_config_init(&cfg);
    snprintf(cfg.address, sizeof(cfg.address), "0.0.0.0");
    assert_mstar_status(mstar__ucx_engine_create(&cfg, &e), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "wildcard"));
    snprintf(cfg.address, sizeof(cfg.address), "no-such-host.invalid");
    assert_mstar_status(mstar__ucx_engine_create(&cfg, &e), MSTAR_EIO);
    mstar__ucx_config_init(&cfg);
    cfg.read_protocol = (mstar__ucx_read_protocol)7;
    assert_mstar_status(mstar__ucx_engine_create(&cfg, &e), MSTAR_EINVAL);
    assert_null(e);

    /* A port already taken: the second engine fails cleanly. */
    mstar__ucx_engine *a = new_engine();
    const char *sa = mstar__ucx_engine_session_id(a);
    mstar__ucx_config_init(&cfg);
    cfg.port = (uint16_t)atoi(strrchr(sa, ':') + 1);
    mstar_status st = mstar__ucx_engine_create(&cfg, &e);
    assert_true(st == MSTAR_EIO || st == MSTAR_EREMOTE);
    assert_non_null(strstr(mstar_last_error(), "listening"));
    mstar__ucx_engine_destroy(a);
    assert_int_equal(ucx_test_threads(), threads);
    assert_int_equal(ucx_test_fds(), fds);
}

/* ---- the key envelope ----------------------------------------------------------------------- */

static void test_key_envelope(void **state)
{
    (void)state;
    mstar__ucx_engine *e = new_engine();
    region r;
    region_make(e, &r, 4096, 1);
    mstar__ucx_key_view v;
    assert_mstar_ok(mstar__ucx_key_parse(r.key, r.key_len, "k", &v));
    assert_int_equal(v.base, (uint64_t)(uintptr_t)r.buf);
    assert_int_equal(v.len, 4096);
    assert_true(v.region_id != 0);
    assert_true(v.ucx_rkey_len > 0);

    uint8_t bad[MSTAR_REMOTE_KEY_MAX + 8];
    /* Each corruption, and what the message must name. */
    struct {
        size_t at;
        uint8_t val;
        const char *says;
    } edits[] = {
        { 0, 'X', "magic" },
        { 4, 9, "version" },
        { 6, 1, "reserved" },
        { 32, 0xff, "bytes of UCX" },
        { 36 + 8, 0xff, "UCX key has memory type" },
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        memcpy(bad, r.key, r.key_len);
        bad[edits[i].at] = edits[i].val;
        assert_mstar_status(mstar__ucx_key_parse(bad, r.key_len, "remote_key", &v), MSTAR_EPROTO);
        if (strstr(mstar_last_error(), edits[i].says) == NULL)
            fail_msg("edit %zu: '%s' does not say '%s'", i, mstar_last_error(), edits[i].says);
    }
    /* region id 0; base + len overflowing; a UCX md entry longer than the bytes left. */
    memcpy(bad, r.key, r.key_len);
    memset(bad + 8, 0, 8);
    assert_mstar_status(mstar__ucx_key_parse(bad, r.key_len, "k", &v), MSTAR_EPROTO);
    memcpy(bad, r.key, r.key_len);
    memset(bad + 16, 0xff, 8);
    assert_mstar_status(mstar__ucx_key_parse(bad, r.key_len, "k", &v), MSTAR_EPROTO);
    memcpy(bad, r.key, r.key_len);
    memset(bad + 36, 0xff, 8); /* every md present */
    assert_mstar_status(mstar__ucx_key_parse(bad, r.key_len, "k", &v), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "md"));
    /* Truncations at every length, and empty / oversized keys. */
    for (uint32_t n = 0; n < r.key_len; n++)
        assert_int_equal(mstar__ucx_key_parse(r.key, n, "k", &v), MSTAR_EPROTO);
    assert_mstar_status(mstar__ucx_key_parse(NULL, 0, "k", &v), MSTAR_EPROTO);
    assert_mstar_status(mstar__ucx_key_parse(bad, MSTAR_REMOTE_KEY_MAX + 1, "k", &v), MSTAR_EPROTO);
    /* Random byte flips never crash the parser. */
    uint64_t seed = 42;
    for (int i = 0; i < 2000; i++) {
        memcpy(bad, r.key, r.key_len);
        bad[mstar_test_rand(&seed) % r.key_len] ^= (uint8_t)(1 + mstar_test_rand(&seed) % 255);
        (void)mstar__ucx_key_parse(bad, r.key_len, "k", &v);
    }
    region_drop(e, &r);
    mstar__ucx_engine_destroy(e);
}

/* ---- reads ---------------------------------------------------------------------------------- */

static void test_loopback_sizes(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    static const uint64_t sizes[] = { 0, 1, 7, 4096, 65535, 65536 + 3, 1 << 20, (8 << 20) + 5 };
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        region r;
        region_make(a, &r, sizes[s], s + 10);
        uint8_t *dst = malloc(sizes[s] + 1);
        for (size_t p = 0; p < 2; p++) {
            memset(dst, 0, sizes[s] + 1);
            mstar__ucx_read_info ri = info_for(a, &r, dst, 0, sizes[s]);
            assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], &ri, 1));
            assert_int_equal(ucx_test_check(dst, sizes[s], s + 10), SIZE_MAX);
            assert_int_equal(dst[sizes[s]], 0); /* nothing past the end */
            if (sizes[s] > 16) {                /* a slice in the middle */
                memset(dst, 0, sizes[s]);
                uint64_t off = sizes[s] / 3, n = sizes[s] / 3;
                ri = info_for(a, &r, dst, off, n);
                assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], &ri, 1));
                assert_memory_equal(dst, r.buf + off, n);
            }
        }
        free(dst);
        region_drop(a, &r);
    }
    /* Each engine reads the other's memory. */
    region ra, rb;
    region_make(a, &ra, 100000, 1);
    region_make(b, &rb, 100000, 2);
    uint8_t *da = malloc(100000), *db = malloc(100000);
    mstar__ucx_read_info ia = info_for(b, &rb, da, 0, 100000);
    mstar__ucx_read_info ib = info_for(a, &ra, db, 0, 100000);
    assert_mstar_ok(mstar__ucx_engine_read(a, &ia, 1));
    assert_mstar_ok(mstar__ucx_engine_read(b, &ib, 1));
    assert_int_equal(ucx_test_check(da, 100000, 2), SIZE_MAX);
    assert_int_equal(ucx_test_check(db, 100000, 1), SIZE_MAX);
    free(da);
    free(db);
    region_drop(a, &ra);
    region_drop(b, &rb);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

static void test_many_reads_one_batch(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    region r;
    region_make(a, &r, 4 << 20, 77);
    enum { N = 1000 };
    uint8_t *dst = malloc(4 << 20);
    mstar__ucx_read_info *infos = calloc(N, sizeof(*infos));
    for (size_t p = 0; p < 2; p++) {
        memset(dst, 0, 4 << 20);
        for (size_t i = 0; i < N; i++) /* 1000 slices of 4 KiB, out of order */
            infos[i] = info_for(a, &r, dst + ((i * 7) % N) * 4096, ((i * 7) % N) * 4096, 4096);
        assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], infos, N));
        assert_memory_equal(dst, r.buf, N * 4096);
    }
    mstar__ucx_engine_stats st;
    mstar__ucx_engine_get_stats(b, &st);
    assert_int_equal(st.reads_done, 2 * N);
    assert_int_equal(st.reads_active, 0);
    assert_int_equal(st.peers, 1); /* one cached endpoint served every read */
    free(infos);
    free(dst);
    region_drop(a, &r);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

static void test_register_rules(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    uint8_t *buf = malloc(1 << 16);
    ucx_test_fill(buf, 1 << 16, 5);
    uint8_t k1[MSTAR_REMOTE_KEY_MAX], k2[MSTAR_REMOTE_KEY_MAX], ks[MSTAR_REMOTE_KEY_MAX];
    uint32_t l1, l2, ls;
    mstar__ucx_engine_stats st;

    /* The same range twice: one region, the same key, two references. */
    assert_mstar_ok(mstar__ucx_engine_register(a, buf, 1 << 16, k1, &l1));
    assert_mstar_ok(mstar__ucx_engine_register(a, buf, 1 << 16, k2, &l2));
    assert_int_equal(l1, l2);
    assert_memory_equal(k1, k2, l1);
    mstar__ucx_engine_get_stats(a, &st);
    assert_int_equal(st.regions, 1);
    /* Another length at the same ptr is refused. */
    assert_mstar_status(mstar__ucx_engine_register(a, buf, 100, k2, &l2), MSTAR_EEXIST);
    /* A sub-range is a region of its own, with its own key. */
    assert_mstar_ok(mstar__ucx_engine_register(a, buf + 4096, 8192, ks, &ls));
    mstar__ucx_engine_get_stats(a, &st);
    assert_int_equal(st.regions, 2);
    mstar__ucx_key_view v1, vs;
    assert_mstar_ok(mstar__ucx_key_parse(k1, l1, "k1", &v1));
    assert_mstar_ok(mstar__ucx_key_parse(ks, ls, "ks", &vs));
    assert_true(v1.region_id != vs.region_id);

    uint8_t dst[8192];
    mstar__ucx_read_info ri = {
        mstar__ucx_engine_session_id(a), dst, (uint64_t)(uintptr_t)buf + 4096, 8192, ks, ls
    };
    for (size_t p = 0; p < 2; p++) {
        /* One unregister of the twice-registered range keeps it; the sub-range reads. */
        memset(dst, 0, sizeof(dst));
        assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], &ri, 1));
        assert_memory_equal(dst, buf + 4096, 8192);
    }
    assert_mstar_ok(mstar__ucx_engine_unregister(a, buf));
    ri.local_ptr = dst;
    ri.remote_addr = (uint64_t)(uintptr_t)buf;
    ri.nbytes = 8192;
    ri.remote_key = k1;
    ri.remote_key_len = l1;
    assert_mstar_ok(mstar__ucx_engine_read(b, &ri, 1));
    assert_mstar_ok(mstar__ucx_engine_unregister(a, buf));
    assert_mstar_status(mstar__ucx_engine_unregister(a, buf), MSTAR_ENOENT);
    /* The sub-range outlives its parent. */
    ri.remote_addr = (uint64_t)(uintptr_t)buf + 4096;
    ri.remote_key = ks;
    ri.remote_key_len = ls;
    assert_mstar_ok(mstar__ucx_engine_read(b, &ri, 1));
    assert_mstar_ok(mstar__ucx_engine_unregister(a, buf + 4096));

    /* Zero bytes: a region nothing can be read from, and a read that completes at once. */
    assert_mstar_ok(mstar__ucx_engine_register(a, buf, 0, k1, &l1));
    ri.remote_addr = (uint64_t)(uintptr_t)buf;
    ri.nbytes = 0;
    ri.remote_key = k1;
    ri.remote_key_len = l1;
    assert_mstar_ok(mstar__ucx_engine_read(b, &ri, 1));
    assert_mstar_ok(mstar__ucx_engine_unregister(a, buf));
    mstar__ucx_engine_get_stats(a, &st);
    assert_int_equal(st.regions, 0);

    assert_mstar_status(mstar__ucx_engine_register(a, NULL, 10, k1, &l1), MSTAR_EINVAL);
    assert_mstar_status(mstar__ucx_engine_register(a, (void *)(uintptr_t)UINT64_MAX, 10, k1, &l1),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar__ucx_engine_unregister(a, NULL), MSTAR_EINVAL);
    free(buf);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

/* The producer's AM side refuses what is not inside a live region; later reads still work. */
static void test_am_refusals(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    region r;
    region_make(a, &r, 65536, 9);
    uint8_t dst[65536 * 2];
    mstar__ucx_read_info ri = info_for(a, &r, dst, 0, 65536);
    assert_mstar_ok(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1));

    /* A forged key that claims a longer region: the consumer's check passes, the producer's
     * table does not. */
    uint8_t forged[MSTAR_REMOTE_KEY_MAX];
    memcpy(forged, r.key, r.key_len);
    mstar__ucx_put_u64(forged + 24, 2 * 65536);
    ri.remote_key = forged;
    ri.nbytes = 2 * 65536;
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1), MSTAR_EREMOTE);
    mstar_test_log_capture_end();
    assert_non_null(strstr(mstar_last_error(), "not inside the registered region"));
    assert_true(mstar_test_log_contains("refused a read"));
    /* A forged region id. */
    memcpy(forged, r.key, r.key_len);
    mstar__ucx_put_u64(forged + 8, 999999);
    ri.remote_key = forged;
    ri.nbytes = 100;
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1), MSTAR_EREMOTE);
    assert_non_null(strstr(mstar_last_error(), "no registered region"));
    mstar__ucx_engine_stats st;
    mstar__ucx_engine_get_stats(a, &st);
    assert_int_equal(st.am_refused, 2);

    /* Unregistered memory: the old key no longer reads. */
    uint8_t old[MSTAR_REMOTE_KEY_MAX];
    uint32_t old_len = r.key_len;
    memcpy(old, r.key, r.key_len);
    uint8_t *keep = r.buf;
    assert_mstar_ok(mstar__ucx_engine_unregister(a, keep));
    ri = info_for(a, &r, dst, 0, 100);
    ri.remote_key = old;
    ri.remote_key_len = old_len;
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1), MSTAR_EREMOTE);
    /* Registered again at the same address: a new id, so the stale key still fails. */
    assert_mstar_ok(mstar__ucx_engine_register(a, keep, 65536, r.key, &r.key_len));
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1), MSTAR_EREMOTE);
    ri.remote_key = r.key;
    ri.remote_key_len = r.key_len;
    assert_mstar_ok(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1));
    assert_memory_equal(dst, keep, 100);
    region_drop(a, &r);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

/* Without a key (as the reference's descriptors come) the AM producer finds the region by
 * address: overlapping regions, their edges, and what is not registered (refused). */
static void test_am_by_address(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    region big, sub, other;
    region_make(a, &big, 1 << 20, 21);
    region_make(a, &other, 4096, 22);
    sub.buf = big.buf + 65536; /* a sub-range registered on its own, inside big */
    assert_mstar_ok(mstar__ucx_engine_register(a, sub.buf, 4096, sub.key, &sub.key_len));
    uint8_t *dst = malloc(1 << 20);
    struct {
        uint8_t *base;
        uint64_t off, n;
        uint64_t seed, seed_off;
    } ok[] = {
        { big.buf, 0, 1 << 20, 21, 0 },      { big.buf, 65536, 4096, 21, 65536 },
        { big.buf, 65000, 2000, 21, 65000 }, { big.buf, (1 << 20) - 1, 1, 21, (1 << 20) - 1 },
        { other.buf, 0, 4096, 22, 0 },       { other.buf, 100, 1, 22, 100 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        mstar__ucx_read_info ri = { mstar__ucx_engine_session_id(a),
                                    dst,
                                    (uint64_t)(uintptr_t)ok[i].base + ok[i].off,
                                    ok[i].n,
                                    NULL,
                                    0 };
        memset(dst, 0, ok[i].n);
        assert_mstar_ok(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1));
        assert_int_equal(ucx_test_check_at(dst, ok[i].n, ok[i].seed, ok[i].seed_off), SIZE_MAX);
    }
    /* One byte past the big region, and memory never registered: refused. */
    uint8_t *unreg = malloc(4096);
    uint64_t bad[][2] = { { (uint64_t)(uintptr_t)big.buf + (1 << 20) - 10, 11 },
                          { (uint64_t)(uintptr_t)unreg, 16 } };
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    for (size_t i = 0; i < 2; i++) {
        mstar__ucx_read_info ri = {
            mstar__ucx_engine_session_id(a), dst, bad[i][0], bad[i][1], NULL, 0
        };
        assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1),
                            MSTAR_EREMOTE);
        assert_non_null(strstr(mstar_last_error(), "no registered region holds the range"));
    }
    /* The parent unregistered: the sub-range alone still reads, the rest is refused. */
    assert_mstar_ok(mstar__ucx_engine_unregister(a, big.buf));
    mstar__ucx_read_info ri = {
        mstar__ucx_engine_session_id(a), dst, (uint64_t)(uintptr_t)sub.buf, 4096, NULL, 0
    };
    assert_mstar_ok(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1));
    assert_int_equal(ucx_test_check_at(dst, 4096, 21, 65536), SIZE_MAX);
    ri.remote_addr = (uint64_t)(uintptr_t)big.buf;
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_AM, &ri, 1), MSTAR_EREMOTE);
    mstar_test_log_capture_end();
    assert_int_equal(mstar_test_log_count("refused a read"), 3);
    assert_mstar_ok(mstar__ucx_engine_unregister(a, sub.buf));
    free(big.buf);
    free(unreg);
    free(dst);
    region_drop(a, &other);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

/* What the consumer rejects before anything touches the network. */
static void test_consumer_checks(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    region r;
    region_make(a, &r, 4096, 3);
    uint8_t dst[8192];
    mstar__ucx_read_info ri[2];
    ri[0] = info_for(a, &r, dst, 4000, 200); /* runs past the region */
    assert_mstar_status(mstar__ucx_engine_read(b, ri, 1), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "outside the key's region"));
    ri[0] = info_for(a, &r, NULL, 0, 10);
    assert_mstar_status(mstar__ucx_engine_read(b, ri, 1), MSTAR_EINVAL);
    ri[0] = info_for(a, &r, dst, 0, 10);
    ri[1] = ri[0];
    ri[1].session = "127.0.0.1:1";
    assert_mstar_status(mstar__ucx_engine_read(b, ri, 2), MSTAR_EINVAL);
    ri[0].session = "not a session";
    assert_mstar_status(mstar__ucx_engine_read(b, ri, 1), MSTAR_EPROTO);
    ri[0] = info_for(a, &r, dst, 0, 10);
    ri[0].remote_key_len = 0; /* get needs a key; AM reads by address (test_am_by_address) */
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_GET, ri, 1), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "remote_key is missing"));
    ri[0].remote_addr = UINT64_MAX - 4;
    assert_mstar_status(mstar__ucx_engine_read(b, ri, 1), MSTAR_EPROTO);
    assert_mstar_status(mstar__ucx_engine_read_with(b, (mstar__ucx_read_protocol)5, ri, 1),
                        MSTAR_EINVAL);
    mstar__ucx_engine_stats st;
    mstar__ucx_engine_get_stats(b, &st);
    assert_int_equal(st.batches, 0);
    region_drop(a, &r);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

/* A session nobody listens on fails the read; the next read of a live session works. */
static void test_unknown_session(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine(), *gone = new_engine();
    char dead[MSTAR_NAME_MAX + 1];
    snprintf(dead, sizeof(dead), "%s", mstar__ucx_engine_session_id(gone));
    mstar__ucx_engine_destroy(gone);
    region r;
    region_make(a, &r, 4096, 4);
    uint8_t dst[4096];
    for (size_t p = 0; p < 2; p++) {
        mstar__ucx_read_info ri = info_for(a, &r, dst, 0, 4096);
        ri.session = dead;
        mstar_test_log_capture_begin(MSTAR_LOG_ERROR); /* the connection warning is expected */
        assert_mstar_status(mstar__ucx_engine_read_with(b, protos[p], &ri, 1), MSTAR_EREMOTE);
        mstar_test_log_capture_end();
        assert_non_null(strstr(mstar_last_error(), dead));
        ri.session = mstar__ucx_engine_session_id(a);
        memset(dst, 0, sizeof(dst));
        assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], &ri, 1));
        assert_int_equal(ucx_test_check(dst, 4096, 4), SIZE_MAX);
    }
    region_drop(a, &r);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

/* Corrupted UCX key bytes through the get protocol: refused or read, never a crash. */
static void test_bad_rkey_get(void **state)
{
    (void)state;
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    region r;
    region_make(a, &r, 4096, 6);
    uint8_t dst[4096], bad[MSTAR_REMOTE_KEY_MAX];
    mstar__ucx_read_info ri = info_for(a, &r, dst, 0, 4096);
    ri.remote_key = bad;
    memcpy(bad, r.key, r.key_len);
    bad[36 + 9] = 200; /* the first md entry claims 200 bytes */
    assert_mstar_status(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_GET, &ri, 1), MSTAR_EPROTO);
    uint64_t seed = 7;
    int refused = 0;
    for (int i = 0; i < 300; i++) {
        memcpy(bad, r.key, r.key_len);
        size_t at = 36 + mstar_test_rand(&seed) % (r.key_len - 36);
        bad[at] ^= (uint8_t)(1 + mstar_test_rand(&seed) % 255);
        mstar_status st = mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_GET, &ri, 1);
        if (st != MSTAR_OK) {
            assert_true(st == MSTAR_EPROTO || st == MSTAR_EREMOTE);
            refused++;
        }
    }
    assert_true(refused > 0);
    ri.remote_key = r.key;
    assert_mstar_ok(mstar__ucx_engine_read_with(b, MSTAR__UCX_READ_GET, &ri, 1));
    assert_int_equal(ucx_test_check(dst, 4096, 6), SIZE_MAX);
    region_drop(a, &r);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
}

/* A peer that never answers: the batch fails with MSTAR_ETIMEDOUT after read_timeout_s, its
 * endpoint is dropped, and the engine goes on reading from others. The live reads run without a
 * timeout: on a loaded machine a fresh connection may take longer than the 0.2 s that times out
 * the dead peer quickly, and the test must not race the clock. */
static void test_read_timeout(void **state)
{
    (void)state;
    char hole[MSTAR_NAME_MAX + 1];
    int hole_fd = ucx_test_blackhole(hole);
    mstar__ucx_engine *a = new_engine();
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    cfg.read_timeout_s = -1;
    mstar__ucx_engine *b = NULL;
    assert_mstar_status(mstar__ucx_engine_create(&cfg, &b), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "cfg.read_timeout_s"));
    assert_null(b);
    cfg.read_timeout_s = 0.2;
    assert_mstar_ok(mstar__ucx_engine_create(&cfg, &b));
    assert_mstar_status(mstar__ucx_engine_set_read_timeout(b, -0.5), MSTAR_EINVAL);
    assert_mstar_status(mstar__ucx_engine_set_read_timeout(b, NAN), MSTAR_EINVAL);
    assert_mstar_status(mstar__ucx_engine_set_read_timeout(b, 1e12), MSTAR_EINVAL);
    region r;
    region_make(a, &r, 4096, 12);
    uint8_t dst[4096];
    for (size_t p = 0; p < 2; p++) {
        assert_mstar_ok(mstar__ucx_engine_set_read_timeout(b, 0.2));
        mstar__ucx_read_info ri[3];
        for (int i = 0; i < 3; i++)
            ri[i] = info_for(a, &r, dst, 0, 4096);
        ri[0].session = ri[1].session = ri[2].session = hole;
        ri[1].nbytes = 0; /* done at once, yet the batch still fails as a whole */
        mstar__ucx_engine_stats before, after;
        mstar__ucx_engine_get_stats(b, &before);
        assert_mstar_status(mstar__ucx_engine_read_with(b, protos[p], ri, 3), MSTAR_ETIMEDOUT);
        assert_non_null(strstr(mstar_last_error(), "no answer within 0.2 s"));
        assert_non_null(strstr(mstar_last_error(), hole));
        mstar__ucx_engine_get_stats(b, &after);
        assert_int_equal(after.peers, before.peers); /* the hole's endpoint came and went */
        assert_mstar_ok(mstar__ucx_engine_set_read_timeout(b, 0));
        ri[0] = info_for(a, &r, dst, 0, 4096);
        memset(dst, 0, sizeof(dst));
        assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], ri, 1));
        assert_int_equal(ucx_test_check(dst, 4096, 12), SIZE_MAX);
    }
    region_drop(a, &r);
    mstar__ucx_engine_destroy(b);
    mstar__ucx_engine_destroy(a);
    close(hole_fd);
}

/* ---- shutdown ------------------------------------------------------------------------------- */

typedef struct pending_read {
    mstar__ucx_engine *e;
    mstar__ucx_read_info ri;
    mstar_status st;
    char msg[256];
} pending_read;

static void *read_thread(void *arg)
{
    pending_read *pr = arg;
    pr->st = mstar__ucx_engine_read(pr->e, &pr->ri, 1);
    snprintf(pr->msg, sizeof(pr->msg), "%s", mstar_last_error());
    return NULL;
}

/* Destroying an engine while a read waits on a peer that never answers: the read returns
 * MSTAR_ECANCELED, and the engine leaves no thread or fd behind. */
static void test_destroy_with_read_waiting(void **state)
{
    (void)state;
    mstar__ucx_engine_destroy(new_engine()); /* UCX's one-time global state, before counting */
    int threads = ucx_test_threads(), fds = ucx_test_fds();
    char hole[MSTAR_NAME_MAX + 1];
    int hole_fd = ucx_test_blackhole(hole);
    mstar__ucx_engine *a = new_engine(), *b = new_engine();
    region r;
    region_make(a, &r, 4096, 8);
    uint8_t dst[4096];
    pending_read pr = { b, info_for(a, &r, dst, 0, 4096), MSTAR_OK, "" };
    pr.ri.session = hole;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_thread, &pr), 0);
    mstar__ucx_engine_stats st;
    do { /* wait until the read is on the worker */
        usleep(1000);
        mstar__ucx_engine_get_stats(b, &st);
    } while (st.reads_active == 0);
    mstar__ucx_engine_destroy(b);
    pthread_join(t, NULL);
    assert_int_equal(pr.st, MSTAR_ECANCELED);
    assert_non_null(strstr(pr.msg, hole));
    region_drop(a, &r);
    mstar__ucx_engine_destroy(a);
    close(hole_fd);
    assert_int_equal(ucx_test_threads(), threads);
    assert_int_equal(ucx_test_fds(), fds);
}

/* Engines that connected both ways and read leave nothing behind once destroyed. */
static void test_nothing_left_behind(void **state)
{
    (void)state;
    mstar__ucx_engine_destroy(new_engine());
    int threads = ucx_test_threads(), fds = ucx_test_fds();
    for (int round = 0; round < 3; round++) {
        mstar__ucx_engine *a = new_engine(), *b = new_engine();
        region ra, rb;
        region_make(a, &ra, 1 << 20, 1);
        region_make(b, &rb, 1 << 20, 2);
        uint8_t *d = malloc(1 << 20);
        for (size_t p = 0; p < 2; p++) {
            mstar__ucx_read_info i1 = info_for(a, &ra, d, 0, 1 << 20);
            mstar__ucx_read_info i2 = info_for(b, &rb, d, 0, 1 << 20);
            assert_mstar_ok(mstar__ucx_engine_read_with(b, protos[p], &i1, 1));
            assert_mstar_ok(mstar__ucx_engine_read_with(a, protos[p], &i2, 1));
        }
        mstar__ucx_engine_stats st;
        mstar__ucx_engine_get_stats(a, &st);
        assert_int_equal(st.peers, 1);
        assert_int_equal(st.accepted, 1);
        free(d);
        region_drop(a, &ra);
        region_drop(b, &rb);
        /* The producer goes first: the consumer's endpoint sees it close. */
        mstar__ucx_engine_destroy(a);
        mstar__ucx_engine_destroy(b);
    }
    assert_int_equal(ucx_test_threads(), threads);
    assert_int_equal(ucx_test_fds(), fds);

    /* Destroy with memory still registered: unmapped with a warning. */
    mstar__ucx_engine *a = new_engine();
    region r;
    region_make(a, &r, 4096, 1);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar__ucx_engine_destroy(a);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("still registered"));
    free(r.buf);
}

int main(int argc, char **argv)
{
    ucx_test_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_env),
        cmocka_unit_test(test_session_parse),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_key_envelope),
        cmocka_unit_test(test_loopback_sizes),
        cmocka_unit_test(test_many_reads_one_batch),
        cmocka_unit_test(test_register_rules),
        cmocka_unit_test(test_am_refusals),
        cmocka_unit_test(test_am_by_address),
        cmocka_unit_test(test_consumer_checks),
        cmocka_unit_test(test_unknown_session),
        cmocka_unit_test(test_bad_rkey_get),
        cmocka_unit_test(test_read_timeout),
        cmocka_unit_test(test_destroy_with_read_waiting),
        cmocka_unit_test(test_nothing_left_behind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
