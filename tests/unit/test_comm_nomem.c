/*
 * test_comm_nomem.c — running out of memory on the handoff's paths, SQLite's way: every heap
 * allocation the calling thread makes inside each call of a handoff (the producer's
 * store_and_return_tensor_info, increment_ref_batch_uniform, set_output_ref_counts and
 * register_for_send, the consumer's start_read_tensors and get_ready_tensors, the producer's
 * handle_message of the ACK) is made to fail in turn, one per run, over the files and arena
 * transports. The runs hand over more tensors and edges than those calls keep on the stack, so
 * their scratch arrays come from the heap too. A call whose
 * allocation failed either reports MSTAR_ENOMEM and changes nothing, or absorbs the failure
 * (get_ready_tensors leaves what it could not collect for the next poll, and an ACK it could not
 * send queued for the next call, reporting MSTAR_ENOMEM; handle_message applies an ACK whose
 * freed record it has no room to collect, and the request's cleanup collects it); the same call
 * then succeeds, every byte arrives, every ACK reaches the producer, both managers end empty, the
 * directory is left empty, and once both managers are gone the heap holds what it held before.
 *
 * The allocator is interposed here (fail_alloc.h: this executable's malloc and its kin pass to
 * glibc's); the sanitizer builds own malloc, so there the test skips. glibc's per-thread cache
 * would hide freed chunks from mallinfo2, so the test re-executes itself with it turned off.
 */
#include "comm_harness.h"

#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <unistd.h>

#include "fail_alloc.h"

#ifndef MSTAR_FAIL_ALLOC_SANITIZED

#define NEDGES   12 /* more than the calls keep on the stack (8) */
#define PER_EDGE 2  /* descriptors per edge */
#define NTENSORS (NEDGES * PER_EDGE)

static const char *dir;

/* Which call a run fails an allocation in. */
typedef enum {
    IN_STORE,
    IN_ROUTE,
    IN_REGISTER,
    IN_START_READ,
    IN_COLLECT,
    IN_ACK,
    IN_RELEASE /* views only: the dereference that frees a view, where its ACK is built */
} phase;

static const char *const PHASE_NAMES[] = {
    "store_and_return_tensor_info",
    "increment_ref_batch_uniform + set_output_ref_counts",
    "register_for_send",
    "start_read_tensors",
    "get_ready_tensors",
    "handle_message (the ACK)",
    "dereference of a view",
};

/* Bytes the heap holds in use (the per-thread cache is off: freed chunks are free here). */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Arm the failure of the k-th allocation from now (k = 0: the next) when `when` is `now`. */
static void arm(phase now, phase when, long k)
{
    mstar_fail_alloc_arm(now == when ? k : -1);
}

/* Disarm; whether an allocation failed. */
static bool disarm(void)
{
    return mstar_fail_alloc_disarm();
}

/* After a call armed with arm(): a call whose allocation did not fail succeeded; one whose
 * allocation failed (then *reached) succeeded anyway or reported MSTAR_ENOMEM. True in that last
 * case: the caller checks that nothing changed and calls again. */
static bool must_retry(mstar_status st, bool *reached)
{
    if (!disarm()) {
        assert_mstar_ok(st);
        return false;
    }
    *reached = true;
    if (st == MSTAR_OK)
        return false;
    assert_int_equal(st, MSTAR_ENOMEM);
    return true;
}

/* The producer takes the ACKs the bus holds for it, the first allocation `k` of its handling
 * failing when `when` is IN_ACK; a message refused for memory is handled again. */
static void take_acks(comm_pair *w, phase when, long k, bool *reached)
{
    arm(IN_ACK, when, k);
    for (int i = 0; i < w->b.n; i++) {
        assert_string_equal(w->b.q[i].peer, "worker_0");
        if (must_retry(mstar_comm_handle_message(w->p, &w->b.q[i].msg), reached))
            assert_mstar_ok(mstar_comm_handle_message(w->p, &w->b.q[i].msg));
        arm(IN_ACK, when, -1); /* one failure a run */
    }
    disarm();
    bus_clear(&w->b);
}

/* One handoff of NTENSORS tensors in NEDGES edges from worker_0 to worker_1 over `kind`, read as
 * copies or as `views`, with the k-th allocation of `when`'s call failing. Whether that
 * allocation was reached (a k past the call's last allocation fails nothing). */
static bool handoff(mstar_transport_kind kind, bool views, phase when, long k)
{
    mstar_status (*start_read)(mstar_comm *, const mstar_rid *, const mstar_edge *, uint32_t,
                               mstar_completion_list *) =
        views ? mstar_comm_start_read_views : mstar_comm_start_read_tensors;
    comm_pair w;
    comm_pair_init_in(&w, dir); /* the one directory of every run */
    comm_pair_make(&w, kind);
    mstar_rid rid = mstar_rid_from_int(41);
    mstar_tensor ts[NTENSORS];
    mstar_output o[NTENSORS];
    mstar_tensor_info infos[NTENSORS];
    mstar_tensor_id held[NTENSORS];
    for (int i = 0; i < NTENSORS; i++) {
        ts[i] = make_vector(MSTAR_DTYPE_FLOAT32, 64 + i, (uint32_t)i);
        o[i] = output_of("sig", ts[i]);
    }
    bool reached = false;
    arm(IN_STORE, when, k);
    mstar_status st = mstar_comm_store_and_return_tensor_info(w.p, &rid, o, NTENSORS, NULL, infos);
    if (must_retry(st, &reached)) {
        assert_int_equal(mstar_comm_num_tensors(w.p), 0); /* nothing stored */
        assert_mstar_ok(
            mstar_comm_store_and_return_tensor_info(w.p, &rid, o, NTENSORS, NULL, infos));
    }
    for (int i = 0; i < NTENSORS; i++)
        held[i] = infos[i].uuid;
    arm(IN_ROUTE, when, k);
    st = mstar_comm_increment_ref_batch_uniform(w.p, held, NTENSORS, 1);
    if (must_retry(st, &reached))
        assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(w.p, held, NTENSORS, 1));
    mstar_edge routed = edge_of("sig", "node", infos, NTENSORS);
    arm(IN_ROUTE, when, k);
    st = mstar_comm_set_output_ref_counts(w.p, held, NTENSORS, &routed, 1);
    if (must_retry(st, &reached))
        assert_mstar_ok(mstar_comm_set_output_ref_counts(w.p, held, NTENSORS, &routed, 1));
    mstar_edge_clear(&routed);

    arm(IN_REGISTER, when, k);
    st = mstar_comm_register_for_send(w.p, &rid, infos, NTENSORS);
    if (must_retry(st, &reached))
        assert_mstar_ok(mstar_comm_register_for_send(w.p, &rid, infos, NTENSORS));

    mstar_edge edges[NEDGES];
    for (int e = 0; e < NEDGES; e++) {
        edges[e] = edge_of("sig", "node", infos + e * PER_EDGE, PER_EDGE);
        snprintf(edges[e].name, sizeof(edges[e].name), "sig_%d", e);
    }
    arm(IN_START_READ, when, k);
    st = start_read(w.c, &rid, edges, NEDGES, NULL);
    if (must_retry(st, &reached)) {
        assert_int_equal(mstar_comm_num_tensors(w.c), 0); /* nothing kept */
        assert_mstar_ok(start_read(w.c, &rid, edges, NEDGES, NULL));
    }

    /* Collect until every edge arrived; the first poll's allocation fails, and that poll may
     * deliver nothing. */
    uint32_t got = 0;
    for (int poll = 0; got < NEDGES && poll < 10000; poll++) {
        mstar_ready_set set;
        arm(IN_COLLECT, when, poll == 0 ? k : -1);
        st = mstar_comm_get_ready_tensors(w.c, &set);
        if (disarm()) {
            reached = true;
            if (st != MSTAR_OK) /* an ACK it could not send, kept for the next call */
                assert_int_equal(st, MSTAR_ENOMEM);
        } else {
            assert_mstar_ok(st);
        }
        assert_int_equal(set.nfailed, 0);
        got += set.nedges;
        mstar_ready_set_clear(&set);
        if (got < NEDGES)
            usleep(100);
    }
    assert_int_equal(got, NEDGES);
    mstar_ready_set rest; /* sends an ACK the failed call kept */
    assert_mstar_ok(mstar_comm_get_ready_tensors(w.c, &rest));
    assert_int_equal(rest.nedges, 0);
    mstar_ready_set_clear(&rest);
    /* A copy's ACK went as it landed, a view's goes as it is freed (or at once when a collection
     * had no memory to set it apart): the last dereference, whose ACK, if it cannot be built for
     * memory, is owed to the next get_ready_tensors. */
    arm(IN_RELEASE, when, k);
    for (int i = 0; i < NTENSORS; i++) {
        check_bytes(w.c, infos[i].uuid, &ts[i]);
        int acks = bus_ack_count(&w.b, "worker_0", infos[i].uuid);
        assert_true(views ? acks <= 1 : acks == 1);
        assert_mstar_ok(mstar_comm_dereference(w.c, infos[i].uuid, 1));
    }
    reached |= disarm();
    if (views) {
        /* The next poll builds what the dereferences owed: every view freed is ACKed. A record
         * the bookkeeper had no room to collect stays until its request's cleanup, which ACKs
         * it then. */
        mstar_ready_set owed;
        assert_mstar_ok(mstar_comm_get_ready_tensors(w.c, &owed));
        assert_int_equal(owed.nedges, 0);
        mstar_ready_set_clear(&owed);
        int acked = 0;
        for (int i = 0; i < NTENSORS; i++)
            acked += bus_ack_count(&w.b, "worker_0", infos[i].uuid);
        assert_int_equal(acked, NTENSORS - (int)mstar_comm_num_tensors(w.c));
        assert_mstar_ok(mstar_comm_cleanup_request(w.c, &rid));
        mstar_comm_security_stats cs;
        assert_mstar_ok(mstar_comm_get_security_stats(w.c, &cs));
        assert_int_equal(cs.acks_lost, 0);
        for (int i = 0; i < NTENSORS; i++)
            assert_int_equal(bus_ack_count(&w.b, "worker_0", infos[i].uuid), 1);
    }
    assert_int_equal(mstar_comm_num_tensors(w.c), 0);
    take_acks(&w, when, k, &reached);
    if (when != IN_ACK) /* the ACKs free the tensors at once */
        assert_int_equal(mstar_comm_num_tensors(w.p), 0);
    /* A record an ACK freed but the bookkeeper had no room to collect goes with its request. */
    assert_mstar_ok(mstar_comm_cleanup_request(w.p, &rid));
    assert_int_equal(mstar_comm_num_tensors(w.p), 0);

    for (int e = 0; e < NEDGES; e++)
        mstar_edge_clear(&edges[e]);
    for (int i = 0; i < NTENSORS; i++)
        free(ts[i].data);
    comm_pair_fini(&w); /* checks the directory is empty */
    return reached;
}

static void sweep(mstar_transport_kind kind, bool views)
{
    phase last = views ? IN_RELEASE : IN_ACK;
    /* The library's one-time state (its first error message included), before the heap is
     * read: one run failing the first allocation of each call. */
    for (phase when = IN_STORE; when <= last; when++)
        handoff(kind, views, when, 0);
    for (phase when = IN_STORE; when <= last; when++) {
        long k = 0;
        for (;; k++) {
            size_t before = heap_in_use();
            bool reached = handoff(kind, views, when, k);
            size_t after = heap_in_use();
            if (after != before)
                fail_msg("%s: allocation %ld failed: heap in use %zu bytes before, %zu after",
                         PHASE_NAMES[when], k, before, after);
            if (!reached)
                break;
        }
        /* The call allocates at all, or the sweep tested nothing. */
        assert_true(k > 0);
    }
}

static void test_files_survive_each_failed_allocation(void **state)
{
    (void)state;
    sweep(MSTAR_TRANSPORT_FILES, false);
}

static void test_arena_survives_each_failed_allocation(void **state)
{
    (void)state;
    sweep(MSTAR_TRANSPORT_ARENA, false);
}

/* Views of the arena: a view's ACK, built when the view is freed, is never lost to memory. */
static void test_arena_views_survive_each_failed_allocation(void **state)
{
    (void)state;
    sweep(MSTAR_TRANSPORT_ARENA, true);
}

/* One tensor from worker_0 to worker_1 over the arena, read as a view and collected: the
 * consumer holds the view, and its ACK goes when the view is freed. */
static void view_delivered(comm_pair *w, const mstar_rid *rid, const mstar_tensor *t,
                           mstar_tensor_info *info)
{
    comm_pair_init_in(w, dir);
    comm_pair_make(w, MSTAR_TRANSPORT_ARENA);
    mstar_output o = output_of("sig", *t);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, rid, &o, 1, NULL, info));
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(w->p, &info->uuid, 1, 1));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, info, 1));
    mstar_edge e = edge_of("sig", "node", info, 1);
    assert_mstar_ok(mstar_comm_start_read_views(w->c, rid, &e, 1, NULL));
    mstar_edge_clear(&e);
    uint32_t got = 0;
    for (int poll = 0; got < 1 && poll < 10000; poll++) {
        mstar_ready_set set;
        assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set));
        got += set.nedges;
        mstar_ready_set_clear(&set);
    }
    assert_int_equal(got, 1);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info->uuid), 0);
}

/* A view's ACK that could not be built when the view was freed is owed; if its request's
 * cleanup cannot build it either, it is given up there and counted in acks_lost (its producer
 * holds the tensor until its TTL), and nothing stays owed: the next poll sends nothing. Every
 * allocation of the dereference, then of the cleanup, is failed in turn until that happens. */
static void test_an_owed_view_ack_given_up_at_cleanup_is_counted(void **state)
{
    (void)state;
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 64, 7);
    mstar_rid rid = mstar_rid_from_int(43);
    bool owed_seen = false, given_up = false;
    for (long k = 0; k < 64 && !given_up; k++) {
        for (long j = 0; j < 64 && !given_up; j++) {
            comm_pair w;
            mstar_tensor_info info;
            view_delivered(&w, &rid, &t, &info);
            mstar_fail_alloc_arm(k);
            assert_mstar_ok(mstar_comm_dereference(w.c, info.uuid, 1));
            bool failed = mstar_fail_alloc_disarm();
            /* No ACK yet: owed, or the view's record left for the cleanup to collect. */
            bool owed = failed && bus_ack_count(&w.b, "worker_0", info.uuid) == 0;
            owed_seen |= owed;
            if (owed) {
                mstar_fail_alloc_arm(j);
                mstar_status st = mstar_comm_cleanup_request(w.c, &rid);
                mstar_fail_alloc_disarm();
                if (st == MSTAR_ENOMEM) /* refused for memory: the caller tries again */
                    st = mstar_comm_cleanup_request(w.c, &rid);
                assert_mstar_ok(st);
                mstar_comm_security_stats cs;
                assert_mstar_ok(mstar_comm_get_security_stats(w.c, &cs));
                int64_t acks = bus_ack_count(&w.b, "worker_0", info.uuid);
                /* Sent at the cleanup after all, or given up and counted: never both, never
                 * neither. */
                assert_int_equal(acks + (int64_t)cs.acks_lost, 1);
                given_up = cs.acks_lost == 1;
                mstar_ready_set set;
                assert_mstar_ok(mstar_comm_get_ready_tensors(w.c, &set));
                mstar_ready_set_clear(&set);
                assert_int_equal(bus_ack_count(&w.b, "worker_0", info.uuid), acks);
                assert_int_equal(mstar_comm_num_tensors(w.c), 0);
            }
            mstar_comm_cleanup_request(w.p, &rid);
            comm_pair_fini(&w); /* the producer's held tensor goes with it; the directory empty */
            if (!owed)
                break; /* this k did not hit the ACK: the cleanup's j do not matter */
        }
    }
    assert_true(owed_seen);
    assert_true(given_up);
    free(t.data);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* Freed chunks must be free for mallinfo2: run again with glibc's per-thread cache off. */
    if (getenv("MSTAR_TEST_NOMEM_REEXEC") == NULL) {
        setenv("MSTAR_TEST_NOMEM_REEXEC", "1", 1);
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
        execv("/proc/self/exe", argv);
        perror("execv");
        return 1;
    }
    dir = mstar_test_tmpdir("nomem");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_survive_each_failed_allocation),
        cmocka_unit_test(test_arena_survives_each_failed_allocation),
        cmocka_unit_test(test_arena_views_survive_each_failed_allocation),
        cmocka_unit_test(test_an_owed_view_ack_given_up_at_cleanup_is_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void)
{
    printf("skipped: the sanitizers own malloc\n");
    return 77;
}

#endif
