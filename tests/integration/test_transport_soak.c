/*
 * test_transport_soak.c — one producer and two consumer processes over the control mesh move
 * MSTAR_TEST_SOAK_TENSORS tensors (default 1,000 — see docs/environment.md; 10,000
 * is a documented manual run; MSTAR_TEST_SOAK_UCX_TENSORS, default 300, over UCX) of random
 * sizes from 0 B to MSTAR_TEST_SOAK_MAX_MB (default 8 MiB, log-uniform), random dtypes and
 * shapes, random fanout, persist and unpersist in both orders with the ACKs, and aborts
 * mid-flight (drain, READS_DONE, force cleanup). Every byte every consumer receives is checked,
 * and every descriptor sent is either verified or, of an aborted request, counted as dropped by
 * the drain; at the end no file or segment is left in the shm directory, the arena reports no
 * live slot or spill file, the UCX engine no registered region, and every process holds no
 * tensor. Runs for each transport of the table (files, arena, ucx-tcp; transport_world.h).
 */
#include "transport_world.h"

static void run_mode(mstar_transport_kind kind, bool zero_copy)
{
    int64_t tensors =
        world_tensors(kind, "MSTAR_TEST_SOAK_TENSORS", 1000, "MSTAR_TEST_SOAK_UCX_TENSORS", 300, 1);
    int64_t max_mb;
    assert_mstar_ok(mstar_env_get_int("MSTAR_TEST_SOAK_MAX_MB", 8, 1, 1024, &max_mb));
    uint64_t max_bytes = (uint64_t)max_mb << 20;
    world_cfg cfg = { kind,
                      mstar_test_tmpdir("soak-shm"),
                      mstar_test_tmpdir("soak-ipc"),
                      tensors,
                      max_bytes,
                      0x5eed0000u + (uint64_t)kind,
                      -1,
                      zero_copy };
    double t0 = world_now();
    producer p = { 0 };
    prod_start(&p, &cfg);
    double until = world_now() + WORLD_DEADLINE_S;
    for (int64_t r = 0; p.stored < cfg.tensors; r++) {
        prod_request(&p, r, 1 + (int)(prod_rand(&p) % 4));
        while (prod_pump(&p, 0)) {
        }
        /* Keep the working set bounded: wait for ACKs while too much is held, and let the
         * "model" unpersist when nothing else would free anything. */
        while (mstar_comm_num_tensors(p.comm) > 48 && world_now() < until)
            if (!prod_pump(&p, 10) && p.nunpersist > 0)
                prod_unpersist_one(&p, 0);
        if (p.nunpersist > 0 && prod_rand(&p) % 3 == 0)
            prod_unpersist_one(&p, (size_t)(prod_rand(&p) % p.nunpersist));
    }
    while (p.nunpersist > 0)
        prod_unpersist_one(&p, p.nunpersist - 1);
    while ((mstar_comm_num_tensors(p.comm) > 0 || p.ndrains > 0) && world_now() < until)
        prod_pump(&p, 100);
    if (mstar_comm_num_tensors(p.comm) > 0)
        fail_msg("the producer still holds %zu tensors", mstar_comm_num_tensors(p.comm));
    for (int c = 0; c < NCONS; c++)
        world_send_simple(PRODUCER, p.mesh, consumer_names[c], MSTAR_MSG_SHUTDOWN, NULL);
    while ((!p.reports_in[0] || !p.reports_in[1]) && world_now() < until)
        prod_pump(&p, 100);
    for (int c = 0; c < NCONS; c++) {
        prod_stop_consumer(&p, c);
        prod_check_report(&p, c);
        assert_int_equal(p.reports[c].left, 0);
        assert_true(p.reports[c].bytes >= p.sent_bytes[c]);
    }
    prod_check_released(&p);
    printf("%s%s: %lld tensors (%lld persisted, %lld requests aborted, %lld deliveries dropped by "
           "drains), %.1f MB verified by the consumers, %.1f s\n",
           mstar_transport_kind_name(kind), zero_copy ? " (loans, views)" : "", (long long)p.stored,
           (long long)p.persisted, (long long)p.aborted_requests,
           (long long)(p.reports[0].dropped + p.reports[1].dropped),
           (double)(p.reports[0].bytes + p.reports[1].bytes) / 1e6, world_now() - t0);
    prod_close(&p);
    assert_int_equal(mstar_test_count_dir(cfg.shm_dir), 0);
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
    return world_main(argc, argv, "test_soak", run);
}
