/*
 * test_arena_alloc.c — the first-fit allocator of one arena segment: alignment, first fit,
 * coalescing on both sides, refusal of unknown and double frees, the fragmentation gauge, and a
 * random churn checked for overlap against a model.
 */
#include "mstar_test.h"

#include "tensors/arena/arena_alloc.h"

#include <stdlib.h>
#include <string.h>

#define A MSTAR__ARENA_ALIGN

static void test_alignment_and_zero_size(void **state)
{
    (void)state;
    mstar__arena_alloc a;
    assert_mstar_ok(mstar__arena_alloc_init(&a, 4 * A));
    uint64_t o0, o1, o2;
    assert_mstar_ok(mstar__arena_alloc_reserve(&a, 0, &o0)); /* zero bytes still takes a slot */
    assert_mstar_ok(mstar__arena_alloc_reserve(&a, 1, &o1));
    assert_mstar_ok(mstar__arena_alloc_reserve(&a, A + 1, &o2));
    assert_int_equal(o0, 0);
    assert_int_equal(o1, A);
    assert_int_equal(o2, 2 * A);
    assert_int_equal(a.bytes_free, 0);
    uint64_t o3;
    assert_int_equal(mstar__arena_alloc_reserve(&a, 1, &o3), MSTAR_ENOSPC);
    assert_int_equal(mstar__arena_alloc_live(&a), 3);
    mstar__arena_alloc_free(&a);
    assert_mstar_status(mstar__arena_alloc_init(&a, 100), MSTAR_EINVAL);
    uint64_t big;
    assert_false(mstar__arena_aligned(UINT64_MAX, &big));
}

static void test_first_fit_and_coalescing(void **state)
{
    (void)state;
    mstar__arena_alloc a;
    assert_mstar_ok(mstar__arena_alloc_init(&a, 8 * A));
    uint64_t o[8];
    for (int i = 0; i < 8; i++)
        assert_mstar_ok(mstar__arena_alloc_reserve(&a, A, &o[i]));
    /* Free 1, 3, 5: three separate holes; first fit of one slot takes the lowest. */
    assert_true(mstar__arena_alloc_release(&a, o[1]));
    assert_true(mstar__arena_alloc_release(&a, o[3]));
    assert_true(mstar__arena_alloc_release(&a, o[5]));
    assert_int_equal(a.free.len, 3);
    assert_int_equal(mstar__arena_alloc_largest_free(&a), A);
    /* Fragmentation: 3 slots free but no 2-slot block. */
    uint64_t x;
    assert_int_equal(mstar__arena_alloc_reserve(&a, 2 * A, &x), MSTAR_ENOSPC);
    /* Free 2: merges with 1 and 3 (both sides). */
    assert_true(mstar__arena_alloc_release(&a, o[2]));
    assert_int_equal(a.free.len, 2);
    assert_int_equal(mstar__arena_alloc_largest_free(&a), 3 * A);
    /* Free 4: merges 1..3 with 5 (previous and next). */
    assert_true(mstar__arena_alloc_release(&a, o[4]));
    assert_int_equal(a.free.len, 1);
    assert_int_equal(mstar__arena_alloc_largest_free(&a), 5 * A);
    /* Free 0: merges with the next block only. */
    assert_true(mstar__arena_alloc_release(&a, o[0]));
    assert_int_equal(a.free.len, 1);
    /* Free 7 (alone at the end), then 6 (merges both ways): one block of the whole segment. */
    assert_true(mstar__arena_alloc_release(&a, o[7]));
    assert_int_equal(a.free.len, 2);
    assert_true(mstar__arena_alloc_release(&a, o[6]));
    assert_int_equal(a.free.len, 1);
    assert_int_equal(a.bytes_free, 8 * A);
    assert_int_equal(mstar__arena_alloc_largest_free(&a), 8 * A);
    /* First fit carves from the front of the first block. */
    assert_mstar_ok(mstar__arena_alloc_reserve(&a, 3 * A, &x));
    assert_int_equal(x, 0);
    mstar__arena_alloc_free(&a);
}

static void test_unknown_and_double_free_refused(void **state)
{
    (void)state;
    mstar__arena_alloc a;
    assert_mstar_ok(mstar__arena_alloc_init(&a, 4 * A));
    uint64_t o;
    assert_mstar_ok(mstar__arena_alloc_reserve(&a, 2 * A, &o));
    assert_false(mstar__arena_alloc_release(&a, o + A)); /* inside a slot, not its start */
    assert_false(mstar__arena_alloc_release(&a, 3 * A)); /* free space */
    assert_true(mstar__arena_alloc_release(&a, o));
    assert_false(mstar__arena_alloc_release(&a, o)); /* double free */
    assert_int_equal(a.bytes_free, 4 * A);
    assert_int_equal(a.free.len, 1);
    mstar__arena_alloc_free(&a);
}

static void test_random_churn_never_overlaps(void **state)
{
    (void)state;
    enum { SLOTS = 64, UNITS = 512 };
    mstar__arena_alloc a;
    assert_mstar_ok(mstar__arena_alloc_init(&a, UNITS * A));
    static uint8_t owner[UNITS]; /* which slot (+1) owns each 256-byte unit */
    memset(owner, 0, sizeof(owner));
    uint64_t off[SLOTS], len[SLOTS];
    bool used[SLOTS] = { false };
    uint64_t rng = 7;
    for (int step = 0; step < 100000; step++) {
        uint64_t r = mstar_test_rand(&rng);
        int s = (int)(r % SLOTS);
        if (used[s]) {
            assert_true(mstar__arena_alloc_release(&a, off[s]));
            for (uint64_t u = off[s] / A; u < (off[s] + len[s]) / A; u++)
                owner[u] = 0;
            used[s] = false;
            continue;
        }
        uint64_t n = (r >> 16) % (24 * A);
        uint64_t o;
        mstar_status st = mstar__arena_alloc_reserve(&a, n, &o);
        uint64_t need;
        assert_true(mstar__arena_aligned(n, &need));
        /* First fit: a block of `need` exists iff the largest free block is large enough. */
        if (st == MSTAR_ENOSPC) {
            assert_true(mstar__arena_alloc_largest_free(&a) < need);
            continue;
        }
        assert_mstar_ok(st);
        assert_int_equal(o % A, 0);
        for (uint64_t u = o / A; u < (o + need) / A; u++) {
            assert_int_equal(owner[u], 0);
            owner[u] = (uint8_t)(s + 1);
        }
        off[s] = o;
        len[s] = need;
        used[s] = true;
        uint64_t free_units = 0;
        for (int u = 0; u < UNITS; u++)
            free_units += owner[u] == 0;
        assert_int_equal(a.bytes_free, free_units * A);
    }
    for (int s = 0; s < SLOTS; s++)
        if (used[s])
            assert_true(mstar__arena_alloc_release(&a, off[s]));
    assert_int_equal(a.free.len, 1);
    assert_int_equal(a.bytes_free, UNITS * A);
    mstar__arena_alloc_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_zero_size),
        cmocka_unit_test(test_first_fit_and_coalescing),
        cmocka_unit_test(test_unknown_and_double_free_refused),
        cmocka_unit_test(test_random_churn_never_overlaps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
