/*
 * test_comm_loans.c — zero-copy handoffs on one host: a producer's loan (output memory in its
 * arena slot, staged in place) and a consumer's view (the producer's slot read in place, ACKed
 * when released). Zero copy is shown from /proc/self/maps: the loan's pointer and the view's
 * pointer lie in mappings of the segment the descriptor names, at the descriptor's offset. Also
 * the refusals (a loan stored twice, after release), the fallback to plain memory over files,
 * views whose slot was freed under them, and a forged descriptor refused as a copy would be.
 */
#include "comm_harness.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

typedef comm_pair world;

static int setup(void **state)
{
    *state = arena_pair_new("loans", true);
    return 0;
}

static int teardown(void **state)
{
    return arena_pair_teardown(state);
}

/* The offset of `ptr` in a mapping of the file named `name` (from its first byte), or -1 when no
 * mapping of that file holds it. */
static int64_t offset_in_mapping(const void *ptr, const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[1024];
    int64_t found = -1;
    uintptr_t at = (uintptr_t)ptr;
    while (found < 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi, off;
        if (sscanf(line, "%lx-%lx %*s %lx", &lo, &hi, &off) != 3)
            continue;
        const char *path = strrchr(line, '/');
        if (path == NULL || strncmp(path + 1, name, strlen(name)) != 0 ||
            path[1 + strlen(name)] != '\n')
            continue;
        if (at >= lo && at < hi)
            found = (int64_t)(at - lo + off);
    }
    fclose(f);
    return found;
}

/* Loan a 4 x 1024 float32 output, fill it with `seed`'s pattern, store it for `rid` held for
 * one reader and stage it. *data is the loan's pointer. */
static mstar_tensor_info loan_and_stage(world *w, const mstar_rid *rid, uint8_t seed, void **data)
{
    int64_t shape[2] = { 4, 1024 };
    mstar_tensor t;
    mstar_loan_id loan;
    assert_mstar_ok(mstar_comm_loan_output(w->p, MSTAR_DTYPE_FLOAT32, shape, 2, &t, &loan));
    assert_int_not_equal(loan, 0);
    for (size_t i = 0; i < 4 * 1024 * 4; i++)
        ((uint8_t *)t.data)[i] = (uint8_t)(seed + i * 7);
    mstar_output o = output_of("x", t);
    o.loan = loan;
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, rid, &o, 1, NULL, &info));
    assert_mstar_ok(mstar_comm_increment_ref(w->p, info.uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, &info, 1));
    *data = t.data;
    return info;
}

/* The consumer reads `info` as a view and collects it; the edge is the caller's to clear. */
static mstar_edge read_view(world *w, const mstar_rid *rid, const mstar_tensor_info *info)
{
    mstar_edge e = edge_of("x", "n", info, 1);
    assert_mstar_ok(mstar_comm_start_read_views(w->c, rid, &e, 1, NULL));
    collect_ready(w->c, 1);
    return e;
}

static void expect_pattern(const void *data, uint8_t seed)
{
    for (size_t i = 0; i < 4 * 1024 * 4; i++)
        if (((const uint8_t *)data)[i] != (uint8_t)(seed + i * 7))
            fail_msg("byte %zu differs", i);
}

/* Deliver the `n` ACKs queued for the producer: then it holds nothing, and its arena is free. */
static void producer_emptied_by_acks(world *w, int n)
{
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), n);
    mstar_arena_stats s = arena_stats_of(w->p);
    assert_int_equal(s.live_slots, 0);
    assert_int_equal(s.free_bytes, s.total_bytes);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
}

/* The loan is the slot: staging reserves nothing more and the descriptor names the loan's own
 * place in the segment. */
static void test_loan_is_the_slot(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(1);
    uint64_t free_before = arena_stats_of(w->p).free_bytes;
    void *data;
    mstar_tensor_info info = loan_and_stage(w, &rid, 3, &data);
    assert_int_equal(arena_stats_of(w->p).live_slots, 1);
    assert_int_equal(free_before - arena_stats_of(w->p).free_bytes,
                     4 * 1024 * 4); /* the slot alone */
    assert_true(info.shm_segment[0] != '\0');
    assert_int_equal(offset_in_mapping(data, info.shm_segment), (int64_t)info.shm_offset);
    assert_int_equal(info.address, (uint64_t)(uintptr_t)data);
    /* A copying reader gets the bytes; its ACK frees the slot and the loan with it. */
    mstar_edge e = edge_of("x", "n", &info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    collect_ready(w->c, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, info.uuid, &got));
    expect_pattern(mstar_tensor_ptr(&got), 3);
    assert_int_equal(offset_in_mapping(mstar_tensor_ptr(&got), info.shm_segment), -1);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    producer_emptied_by_acks(w, 1);
    mstar_edge_clear(&e);
}

/* A view maps the producer's slot (no copy), and its ACK goes only when it is released. */
static void test_view_reads_in_place(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(2);
    void *data;
    mstar_tensor_info info = loan_and_stage(w, &rid, 5, &data);
    mstar_edge e = read_view(w, &rid, &info);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, info.uuid, &got));
    const void *ptr = mstar_tensor_ptr(&got);
    assert_ptr_not_equal(ptr, data); /* this manager's own read-only mapping */
    assert_int_equal(offset_in_mapping(ptr, info.shm_segment), (int64_t)info.shm_offset);
    expect_pattern(ptr, 5);
    assert_mstar_ok(mstar_comm_view_check(w->c, info.uuid));
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 0);
    assert_int_equal(arena_stats_of(w->c).peer_segments, 1);
    /* Released: the ACK goes, the producer frees the slot, nothing is left on either side. */
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 1);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    producer_emptied_by_acks(w, 1);
    mstar_edge_clear(&e);
}

/* A view of a copied output (no loan) is as much a view; a copying read is not one. */
static void test_view_of_copied_output(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(3);
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, 3000, 9);
    mstar_output o = output_of("x", t);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, &rid, &o, 1, NULL, &info));
    assert_mstar_ok(mstar_comm_increment_ref(w->p, info.uuid, 2));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, &rid, &info, 1));
    mstar_edge e = read_view(w, &rid, &info);
    check_bytes(w->c, info.uuid, &t);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, info.uuid, &got));
    assert_int_equal(offset_in_mapping(mstar_tensor_ptr(&got), info.shm_segment),
                     (int64_t)info.shm_offset);
    /* Delivered again (a second edge to the same node) while viewed: that delivery's ACK goes
     * at once, the view's at release. */
    mstar_edge e2 = edge_of("x", "m", &info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e2, 1, NULL));
    collect_ready(w->c, 1);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 1);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 1);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 2);
    producer_emptied_by_acks(w, 2);
    free(t.data);
    mstar_edge_clear(&e);
    mstar_edge_clear(&e2);
}

static void never_called(void *ctx, void *data)
{
    (void)ctx;
    (void)data;
    fail_msg("a refused store released the caller's memory");
}

/* A loan is stored once; stored, released or unknown loans are refused and lose nothing. */
static void test_loan_refusals(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(4);
    int64_t n = 1000;
    mstar_tensor t;
    mstar_loan_id loan;
    uint64_t total = arena_stats_of(w->p).total_bytes;
    assert_mstar_ok(mstar_comm_loan_output(w->p, MSTAR_DTYPE_INT32, &n, 1, &t, &loan));
    mstar_output o = output_of("x", t);
    o.loan = loan;
    mstar_tensor_info info[2];
    /* Not at the loan's start, with a release function, or named twice: refused, still open. */
    mstar_output off = o;
    off.tensor.byte_offset = 4;
    off.tensor.shape[0] = 999;
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(w->p, &rid, &off, 1, NULL, info),
                        MSTAR_EINVAL);
    mstar_output rel = o;
    rel.release = never_called;
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(w->p, &rid, &rel, 1, NULL, info),
                        MSTAR_EINVAL);
    mstar_output twice[2] = { o, o };
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(w->p, &rid, twice, 2, NULL, info),
                        MSTAR_ESTATE);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    /* Stored once; a second store and a release of it are refused. */
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, &rid, &o, 1, NULL, info));
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(w->p, &rid, &o, 1, NULL, info),
                        MSTAR_ESTATE);
    assert_mstar_status(mstar_comm_loan_release(w->p, loan), MSTAR_ESTATE);
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    assert_mstar_ok(mstar_comm_set_persist(w->p, info[0].uuid, true));
    assert_mstar_ok(mstar_comm_set_persist(w->p, info[0].uuid, false)); /* collected */
    assert_int_equal(arena_stats_of(w->p).free_bytes, total);
    /* An unused loan goes back; after that it is refused too. */
    assert_mstar_ok(mstar_comm_loan_output(w->p, MSTAR_DTYPE_INT32, &n, 1, &t, &loan));
    assert_true(arena_stats_of(w->p).free_bytes < total);
    assert_mstar_ok(mstar_comm_loan_release(w->p, loan));
    assert_int_equal(arena_stats_of(w->p).free_bytes, total);
    assert_mstar_status(mstar_comm_loan_release(w->p, loan), MSTAR_ESTATE);
    o.loan = loan;
    o.tensor = t;
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(w->p, &rid, &o, 1, NULL, info),
                        MSTAR_ESTATE);
    assert_mstar_status(mstar_comm_loan_release(w->p, 12345), MSTAR_ESTATE);
    /* A loan never stored nor released goes with its manager (teardown counts the files). */
    assert_mstar_ok(mstar_comm_loan_output(w->p, MSTAR_DTYPE_INT32, &n, 1, &t, &loan));
}

/* Over files a loan is plain memory, stored and read like any output; views are copies. */
static void test_loan_over_files(void **state)
{
    world *w = *state;
    sender sp = { &w->b, "worker_2" };
    mstar_comm *p = make_comm("worker_2", MSTAR_TRANSPORT_FILES, w->dir, &sp);
    mstar_rid rid = mstar_rid_from_int(5);
    int64_t n = 64;
    mstar_tensor t;
    mstar_loan_id loan;
    assert_mstar_ok(mstar_comm_loan_output(p, MSTAR_DTYPE_UINT8, &n, 1, &t, &loan));
    for (int i = 0; i < 64; i++)
        ((uint8_t *)t.data)[i] = (uint8_t)i;
    mstar_output o = output_of("x", t);
    o.loan = loan;
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, &rid, &o, 1, NULL, &info));
    assert_mstar_ok(mstar_comm_increment_ref(p, info.uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(p, &rid, &info, 1));
    mstar_edge e = read_view(w, &rid, &info);
    check_bytes(w->c, info.uuid, &t);
    assert_mstar_status(mstar_comm_view_check(w->c, info.uuid), MSTAR_EINVAL);
    assert_int_equal(bus_ack_count(&w->b, "worker_2", info.uuid), 1); /* a copy: ACKed */
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_deliver(&w->b, "worker_2", p), 1);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    mstar_edge_clear(&e);
    mstar_comm_destroy(p);
}

/* The graph runner's loaner lends arena slots only: a slot it can give back, and over files
 * (no slot to lend) MSTAR_ENOSPC, where mstar_comm_loan_output would lend plain memory. */
static void test_output_loaner_lends_slots_only(void **state)
{
    world *w = *state;
    int64_t n = 1024;
    mstar_tensor t;
    uint64_t id;
    uint64_t free_before = arena_stats_of(w->p).free_bytes;
    assert_mstar_ok(mstar_comm_output_loan(w->p, MSTAR_DTYPE_FLOAT32, &n, 1, &t, &id));
    assert_int_not_equal(id, 0);
    assert_true(arena_stats_of(w->p).free_bytes < free_before);
    mstar_comm_output_loan_release(w->p, id);
    assert_int_equal(arena_stats_of(w->p).free_bytes, free_before);
    assert_mstar_status(mstar_comm_loan_release(w->p, id), MSTAR_ESTATE);
    assert_mstar_status(mstar_comm_output_loan(NULL, MSTAR_DTYPE_FLOAT32, &n, 1, &t, &id),
                        MSTAR_EINVAL);

    sender sp = { &w->b, "worker_2" };
    mstar_comm *p = make_comm("worker_2", MSTAR_TRANSPORT_FILES, w->dir, &sp);
    assert_mstar_status(mstar_comm_output_loan(p, MSTAR_DTYPE_FLOAT32, &n, 1, &t, &id),
                        MSTAR_ENOSPC);
    assert_non_null(strstr(mstar_last_error(), "no transport slot"));
    mstar_comm_destroy(p);
}

/* A view whose producer freed the slot (a forced cleanup) is detectable, and still released
 * cleanly: the mapping stays while it is held. */
static void test_view_of_freed_slot(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(6);
    void *data;
    mstar_tensor_info info = loan_and_stage(w, &rid, 7, &data);
    mstar_edge e = read_view(w, &rid, &info);
    assert_mstar_ok(mstar_comm_view_check(w->c, info.uuid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_mstar_status(mstar_comm_view_check(w->c, info.uuid), MSTAR_ENOENT);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->c, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    bus_drop(&w->b, "worker_0");
    mstar_edge_clear(&e);
}

/* Past the TTL the producer frees a slot whose view was never released (a consumer that hung or
 * died holding it): the view then fails its check. */
static void test_view_past_ttl(void **state)
{
    world *w = *state;
    mstar_comm_destroy(w->p);
    setenv("MSTAR_SHM_ARENA_SLOT_TTL_S", "0.01", 1);
    w->p = make_comm("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp);
    mstar_rid rid = mstar_rid_from_int(7);
    void *data;
    mstar_tensor_info info = loan_and_stage(w, &rid, 11, &data);
    mstar_edge e = read_view(w, &rid, &info);
    struct timespec ts = { 1, 100000000 }; /* the TTL sweep runs at most once a second */
    nanosleep(&ts, NULL);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_get_ready_tensors(w->p, &set)); /* its upkeep */
    mstar_ready_set_clear(&set);
    mstar_test_log_capture_end();
    assert_int_equal(arena_stats_of(w->p).live_slots, 0);
    assert_mstar_status(mstar_comm_view_check(w->c, info.uuid), MSTAR_ENOENT);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    mstar_edge_clear(&e);
}

/* Hostile: a view of a forged descriptor fails as the copying read of it does. */
static void test_view_of_forged_descriptor(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(8);
    void *data;
    mstar_tensor_info info = loan_and_stage(w, &rid, 13, &data);
    mstar_tensor_info forged = info;
    forged.uuid = info.uuid + 1; /* the slot holds another tensor */
    mstar_edge e = edge_of("x", "n", &forged, 1);
    assert_mstar_status(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL), MSTAR_ENOENT);
    assert_mstar_status(mstar_comm_start_read_views(w->c, &rid, &e, 1, NULL), MSTAR_ENOENT);
    mstar_edge_clear(&e);
    forged = info;
    forged.shm_offset = 1024 * 1024; /* past the segment */
    e = edge_of("x", "n", &forged, 1);
    assert_mstar_status(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL), MSTAR_EPROTO);
    assert_mstar_status(mstar_comm_start_read_views(w->c, &rid, &e, 1, NULL), MSTAR_EPROTO);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_int_equal(bus_count(&w->b, "worker_0"), 0);
    mstar_edge_clear(&e);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_loan_is_the_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_reads_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_of_copied_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loan_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loan_over_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_loaner_lends_slots_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_of_freed_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_past_ttl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_of_forged_descriptor, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
