/*
 * test_maps.c — the u64 and string hash maps and the growable array, against a reference model
 * under random insert/remove churn (the bookkeeper's access pattern), and the maps' small mode:
 * a few entries held in the map itself with no allocation, the switch to the table at the ninth
 * (for the string map also at a key longer than its small bound) and every operation on either
 * side of it, and the string map's puts failing for memory at each of their allocations.
 */
#include "mstar_test.h"

#include "core/strmap.h"
#include "core/u64map.h"
#include "core/vec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 20000

/* Running out of memory (fail_alloc.h): the maps are linked into this executable, so their
 * allocations go through the interposed allocator. */
#include "fail_alloc.h"

static void test_u64map_basic(void **state)
{
    (void)state;
    mstar__u64map m;
    mstar__u64map_init(&m);
    uint64_t v;
    assert_false(mstar__u64map_get(&m, 0, &v));
    assert_false(mstar__u64map_remove(&m, 5, NULL));
    assert_mstar_ok(mstar__u64map_put(&m, 0, 10)); /* key 0 is a normal key */
    assert_mstar_ok(mstar__u64map_put(&m, 5, 50));
    assert_mstar_ok(mstar__u64map_put(&m, 5, 55));
    assert_int_equal(mstar__u64map_len(&m), 2);
    assert_true(mstar__u64map_get(&m, 0, &v));
    assert_int_equal(v, 10);
    assert_true(mstar__u64map_get(&m, 5, &v));
    assert_int_equal(v, 55);
    *mstar__u64map_find(&m, 5) += 1;
    assert_true(mstar__u64map_remove(&m, 5, &v));
    assert_int_equal(v, 56);
    assert_false(mstar__u64map_get(&m, 5, NULL));
    mstar__u64map_clear(&m);
    assert_int_equal(mstar__u64map_len(&m), 0);
    assert_false(mstar__u64map_get(&m, 0, NULL));
    mstar__u64map_free(&m);
}

static void test_u64map_churn(void **state)
{
    (void)state;
    /* Model: present[i] / value[i] for keys drawn from ids that look like tensor ids (entity in
     * the high bits, a counter in the low bits), so clustered low bits are exercised. */
    static bool present[N];
    static uint64_t value[N];
    memset(present, 0, sizeof(present));
    mstar__u64map m;
    mstar__u64map_init(&m);
    uint64_t rng = 12345;
    size_t live = 0;
    for (int step = 0; step < 400000; step++) {
        uint64_t r = mstar_test_rand(&rng);
        size_t i = (size_t)(r % N);
        uint64_t key = mstar_id_make((uint16_t)(100 + (i & 3)), i);
        if ((r >> 32) % 3 == 0) {
            bool had = mstar__u64map_remove(&m, key, NULL);
            assert_int_equal(had, present[i]);
            if (had)
                live--;
            present[i] = false;
        } else {
            if (!present[i])
                live++;
            present[i] = true;
            value[i] = r;
            assert_mstar_ok(mstar__u64map_put(&m, key, r));
        }
    }
    assert_int_equal(mstar__u64map_len(&m), live);
    for (size_t i = 0; i < N; i++) {
        uint64_t key = mstar_id_make((uint16_t)(100 + (i & 3)), i);
        uint64_t v;
        assert_int_equal(mstar__u64map_get(&m, key, &v), present[i]);
        if (present[i])
            assert_int_equal(v, value[i]);
    }
    size_t it = 0, seen = 0;
    uint64_t k, v;
    while (mstar__u64map_next(&m, &it, &k, &v))
        seen++;
    assert_int_equal(seen, live);
    mstar__u64map_free(&m);
}

static void test_strmap(void **state)
{
    (void)state;
    mstar__strmap m;
    mstar__strmap_init(&m);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "req-%d", i);
        assert_mstar_ok(mstar__strmap_put(&m, key, (size_t)n, (uint64_t)i * 3));
    }
    assert_int_equal(mstar__strmap_len(&m), 5000);
    for (int i = 0; i < 5000; i += 2) {
        int n = snprintf(key, sizeof(key), "req-%d", i);
        uint64_t old;
        assert_true(mstar__strmap_remove(&m, key, (size_t)n, &old));
        assert_int_equal(old, (uint64_t)i * 3);
    }
    assert_int_equal(mstar__strmap_len(&m), 2500);
    for (int i = 0; i < 5000; i++) {
        int n = snprintf(key, sizeof(key), "req-%d", i);
        uint64_t *v = mstar__strmap_find(&m, key, (size_t)n);
        if (i % 2 == 0) {
            assert_null(v);
        } else {
            assert_non_null(v);
            assert_int_equal(*v, (uint64_t)i * 3);
        }
    }
    /* reuse freed entries, and prefixes are distinct keys */
    assert_mstar_ok(mstar__strmap_put(&m, "req-1", 4, 99));
    assert_mstar_ok(mstar__strmap_put(&m, "", 0, 7));
    assert_int_equal(*mstar__strmap_find(&m, "req-1", 4), 99);
    assert_int_equal(*mstar__strmap_find(&m, "", 0), 7);
    uint32_t it = 0;
    const char *k;
    size_t klen, seen = 0;
    while (mstar__strmap_next(&m, &it, &k, &klen, NULL))
        seen++;
    assert_int_equal(seen, mstar__strmap_len(&m));
    /* cleared: nothing found, the room kept, filled again */
    uint32_t cap = m.cap;
    mstar__strmap_clear(&m);
    assert_int_equal(mstar__strmap_len(&m), 0);
    assert_null(mstar__strmap_find(&m, "req-1", 4));
    assert_null(mstar__strmap_find(&m, "", 0));
    it = 0;
    assert_false(mstar__strmap_next(&m, &it, &k, &klen, NULL));
    assert_int_equal(m.cap, cap);
    for (int i = 0; i < 100; i++) {
        int n = snprintf(key, sizeof(key), "again-%d", i);
        assert_mstar_ok(mstar__strmap_put(&m, key, (size_t)n, (uint64_t)i));
    }
    assert_int_equal(mstar__strmap_len(&m), 100);
    assert_int_equal(*mstar__strmap_find(&m, "again-42", 8), 42);
    assert_null(mstar__strmap_find(&m, "req-1", 4));
    mstar__strmap_free(&m);
}

/* Key i of the small-mode tests: 0 included, and ids whose low bits are a counter. */
static uint64_t small_key(size_t i)
{
    return i == 0 ? 0 : mstar_id_make(7, i);
}

/* The map holds exactly keys [0, n) except those `gone` marks, key i with value 10 * i + 1; an
 * iteration visits each once. */
static void u64map_expect(const mstar__u64map *m, size_t n, const bool *gone)
{
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;
        bool there = gone == NULL || !gone[i];
        assert_int_equal(mstar__u64map_get(m, small_key(i), &v), there);
        if (there) {
            assert_int_equal(v, 10 * i + 1);
            live++;
        }
    }
    assert_int_equal(mstar__u64map_len(m), live);
    assert_null(mstar__u64map_find(m, small_key(n)));
    static bool visited[128];
    memset(visited, 0, sizeof(visited));
    size_t it = 0, count = 0;
    uint64_t k, v;
    while (mstar__u64map_next(m, &it, &k, &v)) {
        size_t i = (size_t)(v - 1) / 10;
        assert_true(i < n && i < 128);
        assert_int_equal(k, small_key(i));
        assert_false(visited[i]);
        visited[i] = true;
        count++;
    }
    assert_int_equal(count, live);
}

static void test_u64map_small(void **state)
{
    (void)state;
    static const size_t sizes[] = { 0, 1, 8, 9, 100 };
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        size_t n = sizes[c];
        mstar__u64map m;
        mstar__u64map_init(&m);
        for (size_t i = 0; i < n; i++) {
            assert_mstar_ok(mstar__u64map_put(&m, small_key(i), 10 * i + 1));
            /* Up to MSTAR__MAP_SMALL entries: in the map itself, nothing allocated. */
            bool small = i + 1 <= MSTAR__MAP_SMALL;
            assert_int_equal(m.keys == NULL && m.cap == 0, small);
            assert_int_equal(m.hashed, !small);
        }
        if (n > 0) /* an overwrite: no growth */
            assert_mstar_ok(mstar__u64map_put(&m, small_key(0), 1));
        assert_int_equal(m.cap == 0, n <= MSTAR__MAP_SMALL);
        u64map_expect(&m, n, NULL);
        /* A copy by value is a map of its own while the original is left alone (small mode). */
        if (n <= MSTAR__MAP_SMALL) {
            mstar__u64map copy = m;
            u64map_expect(&copy, n, NULL);
        }
        /* Remove every third key (the first, a middle one, the last), in either mode. */
        bool gone[128] = { false };
        for (size_t i = 0; i < n; i += 3) {
            uint64_t old = 0;
            assert_true(mstar__u64map_remove(&m, small_key(i), &old));
            assert_int_equal(old, 10 * i + 1);
            assert_false(mstar__u64map_remove(&m, small_key(i), NULL));
            gone[i] = true;
        }
        if (n > 0) {
            assert_true(mstar__u64map_remove(&m, small_key(n - 1), NULL) || gone[n - 1]);
            gone[n - 1] = true;
        }
        u64map_expect(&m, n, gone);
        /* Put back what was removed. */
        for (size_t i = 0; i < n; i++)
            if (gone[i])
                assert_mstar_ok(mstar__u64map_put(&m, small_key(i), 10 * i + 1));
        u64map_expect(&m, n, NULL);
        assert_int_equal(m.cap == 0, n <= MSTAR__MAP_SMALL);
        /* Cleared: empty and small again, the table kept; refilled past the switch without
         * growing it. */
        size_t cap = m.cap;
        uint64_t *keys = m.keys;
        mstar__u64map_clear(&m);
        assert_int_equal(mstar__u64map_len(&m), 0);
        assert_false(m.hashed);
        u64map_expect(&m, 0, NULL);
        assert_null(mstar__u64map_find(&m, small_key(0)));
        for (size_t i = 0; i < n; i++)
            assert_mstar_ok(mstar__u64map_put(&m, small_key(i), 10 * i + 1));
        u64map_expect(&m, n, NULL);
        assert_int_equal(m.cap, cap);
        assert_ptr_equal(m.keys, keys);
        mstar__u64map_free(&m);
        assert_int_equal(m.cap, 0);
        assert_int_equal(mstar__u64map_len(&m), 0);
    }
}

static void test_u64map_reserve(void **state)
{
    (void)state;
    /* Before the switch: room for a few is the map's own; for more, the table is made once. */
    mstar__u64map m;
    mstar__u64map_init(&m);
    assert_mstar_ok(mstar__u64map_reserve(&m, 0));
    assert_mstar_ok(mstar__u64map_reserve(&m, MSTAR__MAP_SMALL));
    assert_null(m.keys);
    assert_int_equal(m.cap, 0);
    for (size_t i = 0; i < 5; i++)
        assert_mstar_ok(mstar__u64map_put(&m, small_key(i), 10 * i + 1));
    assert_mstar_ok(mstar__u64map_reserve(&m, 100));
    size_t cap = m.cap;
    uint64_t *keys = m.keys;
    assert_true(cap >= 200);
    u64map_expect(&m, 5, NULL);
    for (size_t i = 5; i < 100; i++)
        assert_mstar_ok(mstar__u64map_put(&m, small_key(i), 10 * i + 1));
    u64map_expect(&m, 100, NULL);
    assert_int_equal(m.cap, cap);
    assert_ptr_equal(m.keys, keys);
    mstar__u64map_free(&m);
    /* After the switch: the entries move into the larger table. */
    mstar__u64map_init(&m);
    for (size_t i = 0; i < 20; i++)
        assert_mstar_ok(mstar__u64map_put(&m, small_key(i), 10 * i + 1));
    assert_true(m.hashed);
    assert_mstar_ok(mstar__u64map_reserve(&m, 1000));
    assert_true(m.cap >= 2000);
    u64map_expect(&m, 20, NULL);
    assert_mstar_ok(mstar__u64map_reserve(&m, 4)); /* less than it holds: nothing changes */
    u64map_expect(&m, 20, NULL);
    mstar__u64map_free(&m);
}

/* Key i of the string small-mode tests, ending in '.' (no key is a prefix of another); with
 * `with_long`, every 5th one (the first is key 4) longer than a key a map in small mode holds. */
static size_t str_key(size_t i, bool with_long, char *buf, size_t size)
{
    if (with_long && i % 5 == 4) {
        memset(buf, 'x', 300);
        return (size_t)snprintf(buf + 300, size - 300, "-%zu.", i) + 300;
    }
    return (size_t)snprintf(buf, size, "peer-%zu.", i);
}

/* Whether a map holding keys [0, n) of str_key is still in small mode. */
static bool str_small(size_t n, bool with_long)
{
    return n <= MSTAR__MAP_SMALL && !(with_long && n > 4);
}

static void strmap_expect(const mstar__strmap *m, size_t n, const bool *gone, bool with_long)
{
    char key[400];
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = str_key(i, with_long, key, sizeof(key));
        uint64_t *v = mstar__strmap_find(m, key, len);
        bool there = gone == NULL || !gone[i];
        assert_int_equal(v != NULL, there);
        if (there) {
            assert_int_equal(*v, 10 * i + 1);
            live++;
        }
        assert_null(mstar__strmap_find(m, key, len - 1)); /* a prefix is another key */
    }
    assert_int_equal(mstar__strmap_len(m), live);
    size_t len = str_key(n, with_long, key, sizeof(key));
    assert_null(mstar__strmap_find(m, key, len));
    bool visited[128] = { false };
    uint32_t it = 0;
    const char *k;
    size_t klen, count = 0;
    uint64_t v;
    while (mstar__strmap_next(m, &it, &k, &klen, &v)) {
        size_t i = (size_t)(v - 1) / 10;
        assert_true(i < n && i < 128);
        len = str_key(i, with_long, key, sizeof(key));
        assert_int_equal(klen, len);
        assert_memory_equal(k, key, len);
        assert_int_equal(k[klen], '\0');
        assert_false(visited[i]);
        visited[i] = true;
        count++;
    }
    assert_int_equal(count, live);
}

/* A map filled with keys [0, n), either side of the switch, through every operation. */
static void strmap_small_case(size_t n, bool with_long)
{
    char key[400];
    mstar__strmap m;
    mstar__strmap_init(&m);
    for (size_t i = 0; i < n; i++) {
        size_t len = str_key(i, with_long, key, sizeof(key));
        assert_mstar_ok(mstar__strmap_put(&m, key, len, 10 * i + 1));
        /* Up to MSTAR__MAP_SMALL short keys: no entries, no hash map. */
        bool small = str_small(i + 1, with_long);
        assert_int_equal(m.entries == NULL && m.cap == 0 && m.heads.cap == 0, small);
        assert_int_equal(m.hashed, !small);
    }
    if (n > 0) { /* an overwrite */
        size_t len = str_key(0, with_long, key, sizeof(key));
        assert_mstar_ok(mstar__strmap_put(&m, key, len, 1));
    }
    strmap_expect(&m, n, NULL, with_long);
    bool gone[128] = { false };
    for (size_t i = 0; i < n; i += 3) {
        size_t len = str_key(i, with_long, key, sizeof(key));
        uint64_t old = 0;
        assert_true(mstar__strmap_remove(&m, key, len, &old));
        assert_int_equal(old, 10 * i + 1);
        assert_false(mstar__strmap_remove(&m, key, len, NULL));
        gone[i] = true;
    }
    strmap_expect(&m, n, gone, with_long);
    for (size_t i = 0; i < n; i++) {
        size_t len = str_key(i, with_long, key, sizeof(key));
        if (gone[i])
            assert_mstar_ok(mstar__strmap_put(&m, key, len, 10 * i + 1));
    }
    strmap_expect(&m, n, NULL, with_long);
    assert_int_equal(m.entries == NULL, str_small(n, with_long));
    /* Cleared: small again, the room kept; refilled past the switch without growing. */
    uint32_t cap = m.cap;
    size_t heads_cap = m.heads.cap;
    mstar__strmap_clear(&m);
    assert_false(m.hashed);
    strmap_expect(&m, 0, NULL, with_long);
    for (size_t i = 0; i < n; i++) {
        size_t len = str_key(i, with_long, key, sizeof(key));
        assert_mstar_ok(mstar__strmap_put(&m, key, len, 10 * i + 1));
    }
    strmap_expect(&m, n, NULL, with_long);
    assert_int_equal(m.hashed, !str_small(n, with_long));
    assert_int_equal(m.cap, cap);
    assert_int_equal(m.heads.cap, heads_cap);
    mstar__strmap_free(&m);
    assert_int_equal(mstar__strmap_len(&m), 0);
}

static void test_strmap_small(void **state)
{
    (void)state;
    static const size_t sizes[] = { 0, 1, 4, 5, 8, 9, 100 };
    for (int with_long = 0; with_long < 2; with_long++)
        for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++)
            strmap_small_case(sizes[c], with_long);
    /* Emptied and filled over and over, removing in every order, short keys never leave small
     * mode nor allocate. */
    char key[64];
    mstar__strmap m;
    mstar__strmap_init(&m);
    for (int round = 0; round < 50; round++) {
        for (size_t i = 0; i < MSTAR__MAP_SMALL; i++) {
            int len = snprintf(key, sizeof(key), "a-rather-long-peer-name-%d-%zu", round, i);
            assert_mstar_ok(mstar__strmap_put(&m, key, (size_t)len, i));
        }
        for (size_t i = 0; i < MSTAR__MAP_SMALL; i++) {
            size_t j = (i * 5 + (size_t)round) % MSTAR__MAP_SMALL; /* every order */
            int len = snprintf(key, sizeof(key), "a-rather-long-peer-name-%d-%zu", round, j);
            assert_true(mstar__strmap_remove(&m, key, (size_t)len, NULL));
        }
        assert_int_equal(mstar__strmap_len(&m), 0);
    }
    assert_false(m.hashed);
    assert_null(m.entries);
    assert_int_equal(m.heads.cap, 0);
    mstar__strmap_free(&m);
}

/* The bound on a small key: MSTAR__STRMAP_SMALL_KEY bytes stay in the map, one more switches it
 * to hashed mode with the small entries still found. Keys are bytes, NUL included (the comm's
 * seen set keys on a tensor id and a name). */
static void test_strmap_small_bound(void **state)
{
    (void)state;
    enum { B = MSTAR__STRMAP_SMALL_KEY };
    char longest[B + 1];
    memset(longest, 'k', sizeof(longest));
    static const char nul_key[] = { 'a', '\0', 'b' };
    struct {
        const char *key;
        size_t len;
    } keys[] = { { "w", 1 }, { nul_key, 3 }, { nul_key, 1 }, { longest, B }, { longest, B + 1 } };
    mstar__strmap m;
    mstar__strmap_init(&m);
    for (size_t n = 1; n <= 5; n++) {
        assert_mstar_ok(mstar__strmap_put(&m, keys[n - 1].key, keys[n - 1].len, n));
        assert_int_equal(m.hashed, n == 5); /* the last is one byte too long */
        assert_int_equal(m.entries == NULL, n < 5);
        assert_int_equal(mstar__strmap_len(&m), n);
        for (size_t i = 0; i < 5; i++) {
            uint64_t *v = mstar__strmap_find(&m, keys[i].key, keys[i].len);
            assert_int_equal(v != NULL, i < n);
            if (v != NULL)
                assert_int_equal(*v, i + 1);
        }
        assert_null(mstar__strmap_find(&m, nul_key, 2));
        uint32_t it = 0;
        const char *k;
        size_t klen, count = 0;
        uint64_t v;
        while (mstar__strmap_next(&m, &it, &k, &klen, &v)) {
            assert_true(v >= 1 && v <= n);
            assert_int_equal(klen, keys[v - 1].len);
            assert_memory_equal(k, keys[v - 1].key, klen);
            assert_int_equal(k[klen], '\0');
            count++;
        }
        assert_int_equal(count, n);
    }
    /* Cleared: small again, where the longest small key stays. */
    mstar__strmap_clear(&m);
    assert_mstar_ok(mstar__strmap_put(&m, longest, B, 7));
    assert_false(m.hashed);
    assert_int_equal(*mstar__strmap_find(&m, longest, B), 7);
    mstar__strmap_free(&m);
}

/* Removal in small mode: the last entry fills the hole, and what is left is found and iterated
 * as before, each once, down to empty and up again. */
static void test_strmap_small_remove(void **state)
{
    (void)state;
    char key[64];
    mstar__strmap m;
    mstar__strmap_init(&m);
    for (size_t i = 0; i < 6; i++) {
        size_t len = str_key(i, false, key, sizeof(key));
        assert_mstar_ok(mstar__strmap_put(&m, key, len, 10 * i + 1));
    }
    /* The first, a middle one, the two moved into their holes, the last, the only one left. */
    static const size_t order[] = { 0, 3, 5, 4, 1, 2 };
    bool gone[6] = { false };
    for (size_t r = 0; r < 6; r++) {
        size_t len = str_key(order[r], false, key, sizeof(key));
        uint64_t old = 0;
        assert_true(mstar__strmap_remove(&m, key, len, &old));
        assert_int_equal(old, 10 * order[r] + 1);
        gone[order[r]] = true;
        strmap_expect(&m, 6, gone, false);
        assert_false(m.hashed);
    }
    uint32_t it = 0;
    assert_false(mstar__strmap_next(&m, &it, NULL, NULL, NULL));
    for (size_t i = 0; i < 6; i++) {
        size_t len = str_key(i, false, key, sizeof(key));
        assert_mstar_ok(mstar__strmap_put(&m, key, len, 10 * i + 1));
    }
    strmap_expect(&m, 6, NULL, false);
    assert_null(m.entries);
    mstar__strmap_free(&m);
}

/* Put key n into a map of keys [0, n) with each allocation of the put failing in turn (see the
 * allocator above): every failure reports MSTAR_ENOMEM and leaves the map as it was, in the mode
 * it was in; the put then succeeds, and freeing the map gives back every block. */
static void strmap_put_nomem(size_t n, bool with_long)
{
#ifndef MSTAR_FAIL_ALLOC_SANITIZED
    char key[400];
    bool failed = true;
    for (long k = 0; failed; k++) {
        long live_before = mstar_fail_alloc_live();
        mstar__strmap m;
        mstar__strmap_init(&m);
        for (size_t i = 0; i < n; i++) {
            size_t len = str_key(i, with_long, key, sizeof(key));
            assert_mstar_ok(mstar__strmap_put(&m, key, len, 10 * i + 1));
        }
        bool hashed = m.hashed;
        size_t len = str_key(n, with_long, key, sizeof(key));
        mstar_fail_alloc_arm(k);
        mstar_status st = mstar__strmap_put(&m, key, len, 10 * n + 1);
        failed = mstar_fail_alloc_disarm();
        if (failed) {
            assert_int_equal(st, MSTAR_ENOMEM);
            assert_int_equal(m.hashed, hashed);
            strmap_expect(&m, n, NULL, with_long);
            st = mstar__strmap_put(&m, key, len, 10 * n + 1);
        }
        assert_mstar_ok(st);
        assert_true(m.hashed);
        strmap_expect(&m, n + 1, NULL, with_long);
        mstar__strmap_free(&m);
        assert_int_equal(mstar_fail_alloc_live(), live_before);
    }
#else
    (void)n;
    (void)with_long;
#endif
}

static void test_strmap_nomem(void **state)
{
    (void)state;
#ifdef MSTAR_FAIL_ALLOC_SANITIZED
    skip();
#endif
    strmap_put_nomem(MSTAR__MAP_SMALL, false); /* the switch at a ninth key */
    strmap_put_nomem(4, true);                 /* the switch at a long key */
    strmap_put_nomem(16, false);               /* hashed: the entries array grows */
    strmap_put_nomem(20, false);               /* hashed: only the key is copied */
    /* Every put up to 127 keys: whichever of the entries array and the hash map grows at that
     * key, a failure there leaves the map as it was. */
    for (size_t n = MSTAR__MAP_SMALL + 1; n < 127; n++)
        strmap_put_nomem(n, false);
}

static void test_vec(void **state)
{
    (void)state;
    mstar__vec v;
    mstar__vec_init(&v, sizeof(int));
    for (int i = 0; i < 100; i++)
        assert_mstar_ok(mstar__vec_push(&v, &i));
    mstar__vec_remove(&v, 0);
    assert_int_equal(v.len, 99);
    assert_int_equal(*(int *)mstar__vec_at(&v, 0), 1);
    int *tail;
    assert_mstar_ok(mstar__vec_grow(&v, 3, (void **)&tail));
    assert_int_equal(tail[0], 0);
    assert_int_equal(v.len, 102);
    mstar__vec_free(&v);
    /* scratch: a few elements in the caller's array, zeroed; more on the heap */
    int local[4] = { 1, 2, 3, 4 };
    int *few = mstar__scratch_zalloc(local, sizeof(local), 3, sizeof(int));
    assert_ptr_equal(few, local);
    assert_int_equal(local[0] + local[1] + local[2], 0);
    assert_int_equal(local[3], 4);
    mstar__scratch_free(few, local);
    assert_ptr_equal(mstar__scratch_zalloc(local, sizeof(local), 0, sizeof(int)), local);
    int *many = mstar__scratch_zalloc(local, sizeof(local), 5, sizeof(int));
    assert_non_null(many);
    assert_ptr_not_equal(many, local);
    assert_int_equal(many[4], 0);
    mstar__scratch_free(many, local);
    assert_null(mstar__scratch_zalloc(local, sizeof(local), SIZE_MAX / 2, sizeof(int)));
    uint64_t out;
    assert_false(mstar__mul_u64(UINT64_MAX, 2, &out));
    assert_true(mstar__add_u64(1, 2, &out));
    assert_int_equal(out, 3);
}

/* The string hash folds keys in eight bytes a step: keys that differ in one byte, wherever it
 * is (in a whole word or in the tail), or only in their length (trailing zero bytes, which pad
 * the last word), all hash apart. */
static void test_hash_bytes_tells_keys_apart(void **state)
{
    (void)state;
    enum { MAXLEN = 40 };
    static uint64_t seen[MAXLEN * MAXLEN * 2 + MAXLEN + 1];
    size_t n = 0;
    char key[MAXLEN];
    for (size_t len = 0; len <= MAXLEN; len++) {
        memset(key, 0, sizeof(key));
        seen[n++] = mstar__hash_bytes(key, len); /* len zero bytes */
        for (size_t at = 0; at < len; at++) {
            for (int v = 1; v <= 2; v++) {
                memset(key, 0, sizeof(key));
                key[at] = (char)v;
                seen[n++] = mstar__hash_bytes(key, len);
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (seen[i] == seen[j])
                fail_msg("keys %zu and %zu hash alike (0x%016llx)", i, j,
                         (unsigned long long)seen[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64map_basic),
        cmocka_unit_test(test_u64map_churn),
        cmocka_unit_test(test_strmap),
        cmocka_unit_test(test_u64map_small),
        cmocka_unit_test(test_u64map_reserve),
        cmocka_unit_test(test_strmap_small),
        cmocka_unit_test(test_strmap_small_bound),
        cmocka_unit_test(test_strmap_small_remove),
        cmocka_unit_test(test_strmap_nomem),
        cmocka_unit_test(test_hash_bytes_tells_keys_apart),
        cmocka_unit_test(test_vec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
