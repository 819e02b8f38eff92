/*
 * test_maps.c — the u64 and string hash maps and the growable array, against a reference model
 * under random insert/remove churn (the bookkeeper's access pattern).
 */
#include "mstar_test.h"

#include "core/strmap.h"
#include "core/u64map.h"
#include "core/vec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 20000

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64map_basic),
        cmocka_unit_test(test_u64map_churn),
        cmocka_unit_test(test_strmap),
        cmocka_unit_test(test_vec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
