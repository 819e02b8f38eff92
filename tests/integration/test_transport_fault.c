/*
 * test_transport_fault.c — a consumer SIGKILLed mid-run. The producer keeps serving the other
 * consumer (which verifies every byte it gets); what the dead one never acknowledged — tensors
 * sent before and after its death, persisted ones included — is reclaimed by force cleanup of
 * its requests (the conductor treats a dead reader as drained); the segments the dead process
 * left are swept by the next manager started in the directory. Nothing is left at the end (no
 * tensor, file, segment or registered region). MSTAR_TEST_FAULT_TENSORS tensors (default 600;
 * MSTAR_TEST_FAULT_UCX_TENSORS, default 300, over UCX). Runs for each transport of the table
 * (files, arena, ucx-tcp; transport_world.h).
 */
#include "transport_world.h"

static void run_mode(mstar_transport_kind kind, bool zero_copy)
{
    int64_t tensors = world_tensors(kind, "MSTAR_TEST_FAULT_TENSORS", 600,
                                    "MSTAR_TEST_FAULT_UCX_TENSORS", 300, 100);
    world_cfg cfg = { kind,
                      mstar_test_tmpdir("fault-shm"),
                      mstar_test_tmpdir("fault-ipc"),
                      tensors,
                      1 << 20,
                      0xfa0170u + (uint64_t)kind,
                      60,
                      zero_copy };
    producer p = { 0 };
    prod_start(&p, &cfg);
    double until = world_now() + WORLD_DEADLINE_S;
    int64_t requests = 0;
    for (; p.stored < cfg.tensors; requests++) {
        if (requests == cfg.kill_after) {
            kill(p.pids[1], SIGKILL);
            int status;
            assert_int_equal(waitpid(p.pids[1], &status, 0), p.pids[1]);
            assert_true(WIFSIGNALED(status));
            reader_died(&p, 1);
        }
        prod_request(&p, requests, 1 + (int)(prod_rand(&p) % 4));
        while (prod_pump(&p, 0)) {
        }
        /* Bounded by what the live consumer acknowledges; the dead one's share stays. */
        while (mstar_comm_num_tensors(p.comm) > 400 && world_now() < until)
            prod_pump(&p, 100);
    }
    while (p.nunpersist > 0)
        prod_unpersist_one(&p, p.nunpersist - 1);
    while (p.ndrains > 0 && world_now() < until)
        prod_pump(&p, 100);
    /* The live consumer's report comes after all its ACKs (one sender, one order). */
    world_send_simple(PRODUCER, p.mesh, consumer_names[0], MSTAR_MSG_SHUTDOWN, NULL);
    while (!p.reports_in[0] && world_now() < until)
        prod_pump(&p, 100);
    prod_check_report(&p, 0); /* the live consumer */
    size_t orphaned = mstar_comm_num_tensors(p.comm);
    assert_true(orphaned > 0); /* the dead consumer left unacknowledged tensors */
    for (int64_t r = 0; r < requests; r++) {
        mstar_rid rid = mstar_rid_from_int(r);
        assert_mstar_ok(mstar_comm_force_cleanup_request(p.comm, &rid));
    }
    assert_int_equal(mstar_comm_num_tensors(p.comm), 0);
    prod_check_released(&p);
    prod_stop_consumer(&p, 0);
    prod_close(&p);
    /* The killed consumer's own arena segment is an orphan until the next start sweeps it. */
    int left = mstar_test_count_dir(cfg.shm_dir);
    assert_int_equal(left, kind == MSTAR_TRANSPORT_ARENA ? 1 : 0);
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = "worker_9";
    o.transport = kind;
    o.shm_dir = cfg.shm_dir;
    mstar_comm *sweeper;
    assert_mstar_ok(mstar_comm_create(&o, &sweeper));
    mstar_comm_destroy(sweeper);
    assert_int_equal(mstar_test_count_dir(cfg.shm_dir), 0);
    printf("%s%s: %lld tensors, %zu left unacknowledged by the killed consumer, reclaimed\n",
           mstar_transport_kind_name(kind), zero_copy ? " (loans, views)" : "", (long long)p.stored,
           orphaned);
}

/* The transport as it is, and the arena again with loans and views. */
static void run(mstar_transport_kind kind)
{
    run_mode(kind, false);
    if (kind == MSTAR_TRANSPORT_ARENA)
        run_mode(kind, true);
}

int main(int argc, char **argv)
{
    return world_main(argc, argv, "test_fault", run);
}
