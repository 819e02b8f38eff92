/*
 * test_hostile_mesh_demo.c — a demo worker process (the decoder) flooded with INPUT_SIGNALS for a
 * request it has not been told of. It buffers such early inputs (they may legitimately arrive
 * before NEW_REQUEST), but only up to a bound: the excess is acknowledged unread, so its producer
 * frees it, and counted in the worker's report. The inputs it kept are acknowledged when the
 * request is drained, so the producer ends holding nothing and the worker exits cleanly.
 */
#include "demo_harness.h"

#include "demo/demo_link.h"
#include "demo/demo_procs.h"

#define FLOOD 300
#define KEPT  256 /* the worker's bound on early inputs */

typedef struct world {
    demo_options opts;
    demo_dirs dirs;
    pid_t pid;
    demo_link cond, enc; /* the conductor; worker_0, the producer of the inputs */
    mstar_msg seen[64];  /* messages to the conductor, for expect() */
    int nseen;
} world;

static world *W;

/* Receive what is pending: ACKs go to worker_0's manager, the conductor's messages are kept. */
static void pump(int timeout_ms)
{
    mstar_msg m;
    while (mstar_mesh_recv(W->enc.mesh, timeout_ms, &m) == MSTAR_OK) {
        if (m.type == MSTAR_MSG_TENSOR_RECEIVED)
            assert_mstar_ok(mstar_comm_handle_message(W->enc.comm, &m));
        mstar_msg_clear(&m);
        timeout_ms = 0;
    }
    while (mstar_mesh_recv(W->cond.mesh, 0, &m) == MSTAR_OK) {
        if (W->nseen < 64)
            W->seen[W->nseen++] = m;
        else
            mstar_msg_clear(&m);
    }
}

/* The first message of `type` the conductor got (30 s at most); the caller clears it. */
static mstar_msg expect(mstar_msg_type type, const char *kv_key, int64_t kv_value)
{
    for (int round = 0; round < 3000; round++) {
        for (int i = 0; i < W->nseen; i++) {
            mstar_msg *m = &W->seen[i];
            if (m->type != type || mstar_msg_get_kv(m, kv_key, kv_value) != kv_value)
                continue;
            mstar_msg out = *m;
            memmove(m, m + 1, (size_t)(W->nseen - i - 1) * sizeof(*m));
            W->nseen--;
            return out;
        }
        pump(10);
    }
    fail_msg("the conductor got no %s", mstar_msg_type_name(type));
    mstar_msg none;
    mstar_msg_init(&none, MSTAR_MSG_INVALID);
    return none;
}

static void send_to(demo_link *from, const char *peer, mstar_msg *m)
{
    assert_mstar_ok(demo_send(from->mesh, peer, m));
    mstar_msg_clear(m);
}

static int setup(void **state)
{
    W = calloc(1, sizeof(*W));
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    char *argv[] = { "demo", "--config", (char *)cfg, "--requests", "8", NULL };
    assert_int_equal(demo_options_parse(5, argv, &W->opts), 0);
    assert_mstar_ok(demo_dirs_create(&W->dirs, NULL));
    assert_mstar_ok(demo_spawn_worker(&W->opts, 1, &W->dirs, &W->pid));
    demo_link_options lo[] = {
        { "conductor", W->dirs.ipc, NULL, DEMO_TRANSPORT_ARENA, NULL },
        { "worker_0", W->dirs.ipc, W->dirs.shm, DEMO_TRANSPORT_ARENA, NULL },
    };
    assert_mstar_ok(demo_link_open(&lo[0], &W->cond));
    assert_mstar_ok(demo_link_open(&lo[1], &W->enc));
    mstar_msg hello = expect(MSTAR_MSG_HELLO, "rank", 1);
    mstar_msg_clear(&hello);
    *state = W;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < W->nseen; i++)
        mstar_msg_clear(&W->seen[i]);
    demo_link_close(&W->enc);
    demo_link_close(&W->cond);
    if (W->pid > 0) {
        kill(W->pid, SIGKILL);
        waitpid(W->pid, NULL, 0);
    }
    demo_dirs_remove(&W->dirs);
    free(W);
    return 0;
}

/* worker_0 stages one [2, hidden] float32 input of request `rid` and sends it to the decoder. */
static void send_input(int64_t rid, uint32_t seed)
{
    int64_t shape[2] = { 2, W->opts.cfg.model.hidden };
    float v[2 * 256];
    assert_true(shape[1] <= 256);
    for (int64_t i = 0; i < shape[0] * shape[1]; i++)
        v[i] = (float)(seed + (uint32_t)i);
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, v, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape));
    mstar_rid r = mstar_rid_from_int(rid);
    mstar_edge edge;
    assert_mstar_ok(demo_link_stage_output(&W->enc, &r, DEMO_SIG_HIDDEN, "decoder", &t, &edge));
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = r;
    assert_mstar_ok(mstar_msg_add_edge(&m, &edge));
    mstar_edge_clear(&edge);
    send_to(&W->enc, "worker_1", &m);
}

/* Pump until worker_0 holds `want` tensors (30 s at most). */
static void producer_holds(size_t want)
{
    for (int i = 0; i < 3000 && mstar_comm_num_tensors(W->enc.comm) != want; i++)
        pump(10);
    assert_int_equal(mstar_comm_num_tensors(W->enc.comm), want);
}

static void test_early_input_flood_is_bounded(void **state)
{
    (void)state;
    for (int i = 0; i < FLOOD; i++)
        send_input(1, (uint32_t)i);
    /* The excess is acknowledged unread at once: worker_0 frees it. */
    producer_holds(KEPT);

    /* Draining the request acknowledges the inputs the worker kept. */
    mstar_rid r = mstar_rid_from_int(1);
    assert_mstar_ok(demo_send_simple(W->cond.mesh, "worker_1", MSTAR_MSG_DRAIN_REQUEST, &r));
    mstar_msg done = expect(MSTAR_MSG_READS_DONE, "none", 0);
    assert_string_equal(done.from, "worker_1");
    mstar_msg_clear(&done);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_REMOVE_REQUEST);
    m.request_id = r;
    m.force = true;
    send_to(&W->cond, "worker_1", &m);
    producer_holds(0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(W->enc.comm, &r));

    /* The report counts the dropped inputs; the worker holds nothing and exits cleanly. */
    assert_mstar_ok(demo_send_simple(W->cond.mesh, "worker_1", MSTAR_MSG_SHUTDOWN, NULL));
    mstar_msg rep = expect(MSTAR_MSG_HELLO, "report", 1);
    assert_int_equal(mstar_msg_get_kv(&rep, "early_dropped", -1), FLOOD - KEPT);
    assert_int_equal(mstar_msg_get_kv(&rep, "tensors_held", -1), 0);
    assert_int_equal(mstar_msg_get_kv(&rep, "open_requests", -1), 0);
    mstar_msg_clear(&rep);
    mstar_msg_init(&m, MSTAR_MSG_SHUTDOWN);
    send_to(&W->cond, "worker_1", &m);
    int status = 0;
    for (int i = 0; i < 3000 && waitpid(W->pid, &status, WNOHANG) == 0; i++)
        pump(10);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    W->pid = 0;
    assert_int_equal(demo_dirs_count_shm(&W->dirs, "worker_1"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_early_input_flood_is_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
