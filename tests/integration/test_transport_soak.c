/*
 * test_transport_soak.c — one producer and two consumer processes over the control mesh move
 * MSTAR_TEST_SOAK_TENSORS tensors (default 1,000 — see docs/environment.md; the spec's 10,000
 * is a documented manual run) of random sizes from 0 B to MSTAR_TEST_SOAK_MAX_MB (default 8 MiB,
 * log-uniform), random dtypes and shapes, random fanout, persist and unpersist in both orders
 * with the ACKs, and aborts mid-flight (drain, READS_DONE, force cleanup). Every byte every
 * consumer receives is checked; at the end no file or segment is left in the shm directory, the
 * arena reports no live slot or spill file, and every process holds no tensor. Runs for each
 * transport of the table (transport_world.h).
 */
#include "transport_world.h"

static void run(mstar_transport_kind kind, int64_t tensors, uint64_t max_bytes)
{
    world_cfg cfg = { kind,
                      mstar_test_tmpdir("soak-shm"),
                      mstar_test_tmpdir("soak-ipc"),
                      tensors,
                      max_bytes,
                      0x5eed0000u + (uint64_t)kind,
                      -1 };
    producer p = { 0 };
    p.cfg = &cfg;
    p.rng = cfg.seed;
    for (int i = 0; i < NCONS; i++) {
        p.pids[i] = fork();
        assert_true(p.pids[i] >= 0);
        if (p.pids[i] == 0)
            consumer_main(&cfg, i);
    }
    double t0 = world_now();
    p.mesh = world_mesh(&cfg, PRODUCER);
    p.comm = world_comm(&cfg, PRODUCER, p.mesh);
    int hellos = 0;
    while (hellos < NCONS) {
        mstar_msg m;
        if (mstar_mesh_recv(p.mesh, 1000, &m) != MSTAR_OK)
            continue;
        hellos += m.type == MSTAR_MSG_HELLO;
        mstar_msg_clear(&m);
    }
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
        world_send_simple(PRODUCER, p.mesh, consumer_names[c], MSTAR_MSG_SHUTDOWN, NULL);
        int status;
        assert_int_equal(waitpid(p.pids[c], &status, 0), p.pids[c]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_true(p.reports_in[c]);
        assert_int_equal(p.reports[c].bad, 0);
        assert_int_equal(p.reports[c].failed, 0);
        assert_int_equal(p.reports[c].left, 0);
        /* Every delivery was read and verified, those of aborted requests included (the
         * consumer handles the INPUT_SIGNALS before the drain that follows it). */
        assert_int_equal(p.reports[c].tensors, p.sent_tensors[c] + p.aborted_deliveries[c]);
        assert_true(p.reports[c].bytes >= p.sent_bytes[c]);
    }
    if (kind == MSTAR_TRANSPORT_ARENA) {
        mstar_arena_stats s;
        assert_mstar_ok(mstar_comm_arena_stats(p.comm, &s));
        assert_int_equal(s.live_slots, 0);
        assert_int_equal(s.spill_files, 0);
    }
    printf("%s: %lld tensors (%lld persisted, %lld requests aborted), %.1f MB verified by the "
           "consumers, %.1f s\n",
           mstar_transport_kind_name(kind), (long long)p.stored, (long long)p.persisted,
           (long long)p.aborted_requests, (double)(p.reports[0].bytes + p.reports[1].bytes) / 1e6,
           world_now() - t0);
    mstar_comm_destroy(p.comm);
    mstar_mesh_destroy(p.mesh);
    free(p.unpersist);
    free(p.drains);
    assert_int_equal(mstar_test_count_dir(cfg.shm_dir), 0);
}

static void test_soak(void **state)
{
    const char *names = mstar_env_get_string("MSTAR_TEST_TRANSPORTS", "files,arena");
    int64_t tensors, max_mb;
    assert_mstar_ok(
        mstar_env_get_int("MSTAR_TEST_SOAK_TENSORS", 1000, 1, INT64_C(1) << 40, &tensors));
    assert_mstar_ok(mstar_env_get_int("MSTAR_TEST_SOAK_MAX_MB", 8, 1, 1024, &max_mb));
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", names);
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name != NULL;
         name = strtok_r(NULL, ",", &save)) {
        mstar_transport_kind kind;
        assert_mstar_ok(mstar_transport_kind_from_name(name, &kind));
        run(kind, tensors, (uint64_t)max_mb << 20);
    }
}

int main(void)
{
    /* Private directories under $TMPDIR; small arena segments so growth, dedicated segments
     * and spills all happen. */
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "16", 0);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "8", 0);
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_soak) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
