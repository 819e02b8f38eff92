/*
 * test_bookkeeper.c — the per-uuid records: reference counting, the persist marker, where
 * collection is (and is not) evaluated, unknown ids, batch forms, request lists, and a random
 * churn against a model.
 */
#include "mstar_test.h"

#include "tensors/bookkeeper.h"

#include <string.h>

static mstar_tensor_id id(uint64_t n)
{
    return mstar_id_make(100, n);
}

static uint32_t slot_at(const mstar__vec *v, size_t i)
{
    return *(const uint32_t *)mstar__vec_at(v, i);
}

static void collect_done(mstar__bk *bk, mstar__vec *collected)
{
    for (size_t i = 0; i < collected->len; i++)
        mstar__bk_release_slot(bk, slot_at(collected, i));
    collected->len = 0;
}

/* An empty bookkeeper and an empty list for the slots it collects. */
static void bk_open(mstar__bk *bk, mstar__vec *collected)
{
    mstar__bk_init(bk);
    mstar__vec_init(collected, sizeof(uint32_t));
}

static void bk_close(mstar__bk *bk, mstar__vec *collected)
{
    mstar__vec_free(collected);
    mstar__bk_free(bk);
}

/* Puts `uuid` in request `req` and raises its ref to `ref`; returns its slot. */
static uint32_t put_with_ref(mstar__bk *bk, mstar_tensor_id uuid, uint32_t req, int64_t ref)
{
    uint32_t slot;
    assert_mstar_ok(mstar__bk_put(bk, uuid, req, &slot));
    assert_true(mstar__bk_increment(bk, uuid, ref));
    return slot;
}

/* I-2 / design.md "Descriptors and edges": GC is never evaluated on store or increment. */
static void test_no_gc_on_store_or_increment(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__bk_init(&bk);
    uint32_t slot;
    assert_mstar_ok(mstar__bk_put(&bk, id(1), 0, &slot));
    assert_int_equal(mstar__bk_at(&bk, slot)->ref, 0);
    assert_true(mstar__bk_can_gc(&bk, id(1))); /* collectable, but nobody evaluated it */
    assert_int_equal(mstar__bk_len(&bk), 1);
    assert_true(mstar__bk_increment(&bk, id(1), 0));
    assert_int_equal(mstar__bk_len(&bk), 1);
    assert_true(mstar__bk_increment(&bk, id(1), -1)); /* even a negative increment */
    assert_int_equal(mstar__bk_len(&bk), 1);
    assert_int_equal(mstar__bk_at(&bk, slot)->ref, -1);
    mstar__bk_free(&bk);
}

static void test_dereference_collects_at_zero(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__vec col;
    bk_open(&bk, &col);
    uint32_t slot = put_with_ref(&bk, id(7), 3, 3);
    assert_true(mstar__bk_dereference(&bk, id(7), 1, &col));
    assert_int_equal(col.len, 0);
    assert_true(mstar__bk_dereference(&bk, id(7), 2, &col));
    assert_int_equal(col.len, 1);
    assert_int_equal(slot_at(&col, 0), slot);
    assert_int_equal(mstar__bk_len(&bk), 0);
    assert_int_equal(mstar__bk_find(&bk, id(7)), MSTAR__BK_NONE);
    assert_int_equal(mstar__bk_req_first(&bk, 3), MSTAR__BK_NONE);
    /* The detached record is still readable until its slot is released. */
    assert_int_equal(mstar__bk_at(&bk, slot)->uuid, id(7));
    collect_done(&bk, &col);
    bk_close(&bk, &col);
}

/* T-8: ACKs before UNPERSIST drive a persisted tensor's ref below zero; that is normal. */
static void test_negative_refs_under_persist(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__vec col;
    bk_open(&bk, &col);
    uint32_t slot;
    assert_mstar_ok(mstar__bk_put(&bk, id(2), 0, &slot));
    assert_true(mstar__bk_set_persist(&bk, id(2), true, &col));
    assert_true(mstar__bk_dereference(&bk, id(2), 1, &col));
    assert_true(mstar__bk_dereference(&bk, id(2), 1, &col));
    assert_int_equal(col.len, 0);
    assert_int_equal(mstar__bk_at(&bk, slot)->ref, -2);
    /* UNPERSIST{K=2}: increment by K (no GC) then clear the marker (GC). */
    assert_true(mstar__bk_increment(&bk, id(2), 2));
    assert_int_equal(col.len, 0);
    assert_true(mstar__bk_set_persist(&bk, id(2), false, &col));
    assert_int_equal(col.len, 1);
    collect_done(&bk, &col);
    /* UNPERSIST before the ACKs: the ref stays positive until they arrive. */
    assert_mstar_ok(mstar__bk_put(&bk, id(3), 0, &slot));
    mstar__bk_set_persist(&bk, id(3), true, &col);
    mstar__bk_increment(&bk, id(3), 2);
    mstar__bk_set_persist(&bk, id(3), false, &col);
    assert_int_equal(col.len, 0);
    mstar__bk_dereference(&bk, id(3), 1, &col);
    assert_int_equal(col.len, 0);
    mstar__bk_dereference(&bk, id(3), 1, &col);
    assert_int_equal(col.len, 1);
    collect_done(&bk, &col);
    bk_close(&bk, &col);
}

static void test_unknown_ids_are_noops(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__vec col;
    bk_open(&bk, &col);
    mstar_test_log_capture_begin(MSTAR_LOG_DEBUG);
    assert_false(mstar__bk_increment(&bk, id(9), 1));
    assert_false(mstar__bk_dereference(&bk, id(9), 1, &col));
    assert_false(mstar__bk_set_persist(&bk, id(9), true, &col));
    assert_false(mstar__bk_decrement_raw(&bk, id(9), 1));
    assert_false(mstar__bk_can_gc(&bk, id(9)));
    mstar_tensor_id ids[2] = { id(9), id(10) };
    int64_t counts[2] = { 1, 2 };
    assert_int_equal(mstar__bk_dereference_batch(&bk, ids, counts, 2, &col), 0);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("unknown tensor 0x0064000000000009"));
    assert_int_equal(bk.unknown_ops, 6);
    assert_int_equal(col.len, 0);
    bk_close(&bk, &col);
}

static void test_put_twice_is_an_error(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__bk_init(&bk);
    uint32_t slot = put_with_ref(&bk, id(4), 0, 5);
    uint32_t slot2;
    assert_mstar_status(mstar__bk_put(&bk, id(4), 1, &slot2), MSTAR_EEXIST);
    assert_int_equal(mstar__bk_at(&bk, slot)->ref, 5); /* untouched */
    mstar__bk_free(&bk);
}

static void test_batch_forms(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__vec col;
    bk_open(&bk, &col);
    mstar_tensor_id ids[4] = { id(1), id(2), id(3), id(4) };
    for (int i = 0; i < 4; i++) {
        uint32_t s;
        assert_mstar_ok(mstar__bk_put(&bk, ids[i], 0, &s));
    }
    assert_int_equal(mstar__bk_increment_batch_uniform(&bk, ids, 4, 2), 4);
    mstar__bk_set_persist(&bk, ids[3], true, &col);
    int64_t counts[4] = { 2, 1, 3, 2 };
    assert_int_equal(mstar__bk_dereference_batch(&bk, ids, counts, 4, &col), 2);
    assert_int_equal(mstar__bk_at(&bk, slot_at(&col, 0))->uuid, ids[0]);
    assert_int_equal(mstar__bk_at(&bk, slot_at(&col, 1))->uuid, ids[2]);
    collect_done(&bk, &col);
    assert_int_equal(mstar__bk_dereference_batch_uniform(&bk, ids, 4, 1, &col), 1);
    assert_int_equal(mstar__bk_at(&bk, slot_at(&col, 0))->uuid, ids[1]);
    collect_done(&bk, &col);
    assert_int_equal(mstar__bk_len(&bk), 1); /* the persisted one */
    bk_close(&bk, &col);
}

static void test_request_lists(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__vec col, slots;
    bk_open(&bk, &col);
    mstar__vec_init(&slots, sizeof(uint32_t));
    for (uint64_t i = 1; i <= 6; i++)
        put_with_ref(&bk, id(i), (uint32_t)(i % 2), 1);
    mstar__bk_dereference(&bk, id(3), 1, &col); /* from the middle of request 1's list */
    collect_done(&bk, &col);
    assert_mstar_ok(mstar__bk_req_slots(&bk, 1, &slots));
    assert_int_equal(slots.len, 2);
    for (size_t i = 0; i < slots.len; i++) {
        mstar_tensor_id u = mstar__bk_at(&bk, slot_at(&slots, i))->uuid;
        assert_true(u == id(1) || u == id(5));
        mstar__bk_detach(&bk, slot_at(&slots, i));
        mstar__bk_release_slot(&bk, slot_at(&slots, i));
    }
    assert_int_equal(mstar__bk_req_first(&bk, 1), MSTAR__BK_NONE);
    slots.len = 0;
    assert_mstar_ok(mstar__bk_req_slots(&bk, 0, &slots));
    assert_int_equal(slots.len, 3);
    assert_int_equal(mstar__bk_req_first(&bk, 7), MSTAR__BK_NONE); /* never seen */
    mstar__vec_free(&slots);
    bk_close(&bk, &col);
}

/* Random put / increment / dereference / persist against a model; every collection must match
 * the rule ref <= 0 && !persist evaluated only at dereference and set_persist. */
/* Counts reach the bookkeeper from other processes: one past MSTAR__BK_MAX_COUNT, or a sum that
 * would overflow, is refused and counted, and the record keeps its count (issue 11, fault 3:
 * UBSan reported signed overflow here, and a wrapped count freed a tensor still being read). */
static void test_extreme_counts_refused(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__bk_init(&bk);
    mstar__vec collected;
    mstar__vec_init(&collected, sizeof(uint32_t));
    uint32_t slot;
    assert_mstar_ok(mstar__bk_put(&bk, id(1), 0, &slot));
    assert_true(mstar__bk_increment(&bk, id(1), 1));
    assert_false(mstar__bk_increment(&bk, id(1), INT64_MAX));
    assert_false(mstar__bk_increment(&bk, id(1), MSTAR__BK_MAX_COUNT + 1));
    assert_false(mstar__bk_dereference(&bk, id(1), INT64_MAX, &collected));
    assert_false(mstar__bk_dereference(&bk, id(1), INT64_MIN, &collected));
    assert_false(mstar__bk_decrement_raw(&bk, id(1), INT64_MIN));
    assert_int_equal(bk.refused_ops, 5);
    assert_int_equal(mstar__bk_at(&bk, slot)->ref, 1);
    assert_int_equal(collected.len, 0);
    /* The largest allowed count is applied, and sums stay exact. */
    assert_true(mstar__bk_increment(&bk, id(1), MSTAR__BK_MAX_COUNT));
    assert_true(mstar__bk_dereference(&bk, id(1), MSTAR__BK_MAX_COUNT, &collected));
    assert_true(mstar__bk_dereference(&bk, id(1), 1, &collected));
    assert_int_equal(collected.len, 1);
    mstar__vec_free(&collected);
    mstar__bk_free(&bk);
}

/* The ACK ledger: deliveries owed per (uuid, peer), taken back at most as owed, gone with the
 * record. */
static void test_ack_ledger(void **state)
{
    (void)state;
    mstar__bk bk;
    mstar__bk_init(&bk);
    uint32_t slot;
    assert_mstar_ok(mstar__bk_put(&bk, id(1), 0, &slot));
    assert_mstar_status(mstar__bk_owe(&bk, id(2), 7, 1), MSTAR_ENOENT);
    assert_mstar_ok(mstar__bk_owe(&bk, id(1), 7, 2));
    assert_mstar_ok(mstar__bk_owe(&bk, id(1), 8, 1));
    assert_mstar_status(mstar__bk_owe(&bk, id(1), 8, MSTAR__BK_MAX_COUNT), MSTAR_ERANGE);
    assert_int_equal(mstar__bk_owed_total(&bk, id(1)), 3);
    assert_int_equal(mstar__bk_owed_take(&bk, id(1), 9, 1), 0); /* never sent */
    assert_int_equal(mstar__bk_owed_take(&bk, id(1), 7, 5), 2); /* at most what is owed */
    assert_int_equal(mstar__bk_owed_take(&bk, id(1), 7, 1), 0); /* a replay */
    assert_int_equal(mstar__bk_owed_total(&bk, id(1)), 1);
    /* The grant: charged below zero, then K added; taken only while positive, never past it. */
    assert_mstar_status(mstar__bk_grant_add(&bk, id(2), 1), MSTAR_ENOENT);
    assert_int_equal(mstar__bk_grant_take(&bk, id(1), 1), 0); /* none yet */
    assert_mstar_ok(mstar__bk_grant_add(&bk, id(1), -1));
    assert_int_equal(mstar__bk_grant_take(&bk, id(1), 1), 0);
    assert_mstar_ok(mstar__bk_grant_add(&bk, id(1), 3));
    assert_int_equal(mstar__bk_grant_take(&bk, id(1), 5), 2);
    assert_int_equal(mstar__bk_grant_take(&bk, id(1), 1), 0);
    assert_mstar_ok(mstar__bk_grant_add(&bk, id(1), INT64_MAX)); /* clamped, no overflow */
    assert_mstar_ok(mstar__bk_grant_add(&bk, id(1), INT64_MAX));
    assert_int_equal(mstar__bk_grant_take(&bk, id(1), INT64_MAX), MSTAR__BK_MAX_COUNT);
    assert_int_equal(mstar__bk_owed_total(&bk, id(1)), 1); /* the grant is not owed by a peer */
    mstar__bk_detach(&bk, slot);
    assert_int_equal(mstar__bk_owed_total(&bk, id(1)), 0);
    assert_int_equal(mstar__u64map_len(&bk.owed_index), 0);
    mstar__bk_release_slot(&bk, slot);
    /* Entries are reused once freed. */
    assert_mstar_ok(mstar__bk_put(&bk, id(3), 0, &slot));
    assert_mstar_ok(mstar__bk_owe(&bk, id(3), 7, 1));
    assert_mstar_ok(mstar__bk_owe(&bk, id(3), 8, 1));
    assert_mstar_ok(mstar__bk_grant_add(&bk, id(3), 1));
    assert_int_equal(bk.owed.len, 3);
    mstar__bk_free(&bk);
}

static void test_churn_against_model(void **state)
{
    (void)state;
    enum { N = 512 };
    static struct {
        bool present;
        int64_t ref;
        bool persist;
    } model[N];
    memset(model, 0, sizeof(model));
    mstar__bk bk;
    mstar__vec col;
    bk_open(&bk, &col);
    uint64_t rng = 42;
    for (int step = 0; step < 200000; step++) {
        uint64_t r = mstar_test_rand(&rng);
        size_t i = (size_t)(r % N);
        int op = (int)((r >> 20) % 5);
        int64_t n = (int64_t)((r >> 30) % 3) + 1;
        if (!model[i].present) {
            uint32_t s;
            assert_mstar_ok(mstar__bk_put(&bk, id(i + 1), (uint32_t)(i % 7), &s));
            model[i].present = true;
            model[i].ref = 0;
            model[i].persist = false;
            continue;
        }
        bool gc = false;
        switch (op) {
        case 0:
        case 1:
            mstar__bk_increment(&bk, id(i + 1), n);
            model[i].ref += n;
            break;
        case 2:
        case 3:
            mstar__bk_dereference(&bk, id(i + 1), n, &col);
            model[i].ref -= n;
            gc = true;
            break;
        default:
            model[i].persist = !model[i].persist;
            mstar__bk_set_persist(&bk, id(i + 1), model[i].persist, &col);
            gc = true;
            break;
        }
        bool want = gc && model[i].ref <= 0 && !model[i].persist;
        assert_int_equal(col.len, want ? 1 : 0);
        if (want) {
            model[i].present = false;
            collect_done(&bk, &col);
        } else {
            uint32_t s = mstar__bk_find(&bk, id(i + 1));
            assert_int_not_equal(s, MSTAR__BK_NONE);
            assert_int_equal(mstar__bk_at(&bk, s)->ref, model[i].ref);
        }
    }
    size_t live = 0;
    for (size_t i = 0; i < N; i++)
        live += model[i].present;
    assert_int_equal(mstar__bk_len(&bk), live);
    bk_close(&bk, &col);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_gc_on_store_or_increment),
        cmocka_unit_test(test_dereference_collects_at_zero),
        cmocka_unit_test(test_negative_refs_under_persist),
        cmocka_unit_test(test_unknown_ids_are_noops),
        cmocka_unit_test(test_put_twice_is_an_error),
        cmocka_unit_test(test_batch_forms),
        cmocka_unit_test(test_request_lists),
        cmocka_unit_test(test_extreme_counts_refused),
        cmocka_unit_test(test_ack_ledger),
        cmocka_unit_test(test_churn_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
